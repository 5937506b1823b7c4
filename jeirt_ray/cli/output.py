"""The CLI's terminal side: one console, expected failures as one line, the results table."""

from __future__ import annotations

import contextlib

import typer
from rich.console import Console
from rich.table import Table

from ..core import logs

console = Console()


@contextlib.contextmanager
def expected_failures(prefix: str = ""):
    """Bad input (exit 2) and known failures (exit 1) end the command with one red line, no
    traceback (`jeirt --debug ...` shows it)."""
    from pydantic import ValidationError

    from ..data import DataError
    from ..encoders.sentence import EncoderError
    try:
        yield
    except (DataError, ValidationError, EncoderError, ValueError, OSError, LookupError) as e:
        if logs.State.debug:
            console.print_exception()
        if isinstance(e, ValidationError):
            err = e.errors()[0]
            message, code = f"bad option --{str(err['loc'][0]).replace('_', '-')}: {err['msg']}", 2
        elif isinstance(e, (DataError, FileNotFoundError, IsADirectoryError, NotADirectoryError)):
            message, code = f"bad input: {e}", 2
        elif isinstance(e, (LookupError, OSError)):
            message, code = f"{prefix}{e}", 1
        else:
            message, code = f"{prefix}{str(e).splitlines()[0]}", 2
        console.print(f"[red]{message}[/red]", highlight=False, soft_wrap=True)  # paths stay on one line
        raise typer.Exit(code)


def results_table(results: dict, title: str) -> Table:
    table = Table(title=title)
    for col in ("method", "test acc", "AUC", "log-loss", "train s"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for name, r in results.items():
        table.add_row(name, f"{r['test_accuracy']:.4f}", f"{r['auc']:.4f}", f"{r['log_loss']:.4f}",
                      f"{r['train_seconds']:.1f}")
    return table
