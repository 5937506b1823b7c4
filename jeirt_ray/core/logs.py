"""Where the CLI's noise goes: its own steps, bars and summaries on the terminal; the lines of Ray,
MLflow and the other libraries in one log file per command (`$JEIRT_HOME/logs/`), whose path is
printed. `--verbose` shows those lines on the terminal as well; `--debug` also keeps the
traceback of an expected failure."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from . import paths

LIBRARIES = ("ray", "mlflow", "alembic", "urllib3", "httpx", "filelock", "sentence_transformers", "transformers",
             "jeirt_ray", "jeirt")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


KEEP = 30  # log files kept per folder; older ones are removed


class State:
    verbose = False
    debug = False
    file: Path | None = None
    handlers: list[logging.Handler] = []


def setup(command: str, verbose: bool = False, debug: bool = False) -> Path:
    """Send every library's log lines to a fresh file for `command` (and to the terminal when
    verbose); returns the file's path."""
    State.verbose, State.debug = verbose or debug, debug
    folder = paths.home() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    for old in sorted(folder.glob("*.log"), key=lambda f: f.stat().st_mtime)[:-KEEP]:
        old.unlink(missing_ok=True)
    State.file = folder / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    root = logging.getLogger()
    for h in State.handlers:  # a second command in one process (tests) replaces the first's handlers
        root.removeHandler(h)
    State.handlers = [logging.FileHandler(State.file)] + ([logging.StreamHandler()] if State.verbose else [])
    for h in State.handlers:
        h.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(h)
    root.setLevel(logging.INFO)
    os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"  # else MLflow puts its own terminal handler on import
    capture_libraries()
    return State.file


def capture_libraries() -> None:
    """Ray installs a terminal handler on its "ray" loggers when it is imported (so may others);
    route those loggers through the root's handlers (the log file) instead, unless verbose."""
    if State.file is None or State.verbose:
        return
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in LIBRARIES:
            logger = logging.getLogger(name)
            logger.handlers = [h for h in logger.handlers if isinstance(h, logging.FileHandler)
                               or not isinstance(h, logging.StreamHandler)]
            logger.propagate = True


def divert_native_stderr() -> None:
    """Ray's C++ core writes its warnings and errors (`E ... core_worker.cc ...`) straight to file
    descriptor 2, past Python's logging. Point that descriptor at the log file, and keep Python's
    own `sys.stderr` (progress bars, warnings) on the terminal. Only for the real CLI process,
    not verbose, and once."""
    if State.file is None or State.verbose or getattr(State, "diverted", False):
        return
    try:
        if sys.stderr.fileno() != 2:
            return
    except (AttributeError, OSError, ValueError):  # captured (tests): leave it alone
        return
    sys.stderr.flush()
    sys.stderr = os.fdopen(os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding, errors="replace")
    with open(State.file, "ab") as f:
        os.dup2(f.fileno(), 2)
    State.diverted = True


def ray_init_kwargs() -> dict:
    """ray.init arguments: worker and actor output stays in Ray's session logs unless verbose."""
    return {"log_to_driver": State.verbose} if State.file is not None else {}


class _Progress(logging.Handler):
    def __init__(self, say, level: int = logging.INFO):
        super().__init__(level)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        self.say(record.getMessage())


def show_progress(say) -> None:
    """Show the pipeline's own progress lines (the `jeirt.pipeline` logger, INFO and up) and what
    reading data left out (the `jeirt.data` logger, WARNING and up) with `say(line)`; they also
    reach the log file."""
    for name, level in (("jeirt.pipeline", logging.INFO), ("jeirt.data", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.handlers = [h for h in logger.handlers if not isinstance(h, _Progress)] + [_Progress(say, level)]
        logger.setLevel(logging.INFO)
