"""Shared bits of the benchmark scripts: argument defaults and the real-data check."""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def _one_line(kind, error, tb):
    """Bad input (a data file, a price table) ends a benchmark in one line that names it, not a
    traceback; anything else is a bug and keeps its traceback."""
    from jeirt_ray.data.errors import DataError
    from jeirt_ray.routing.prices import PriceError
    if isinstance(error, (DataError, PriceError)):
        print(f"{Path(sys.argv[0]).name}: {error}", file=sys.stderr)
    else:
        sys.__excepthook__(kind, error, tb)


sys.excepthook = _one_line


def parser(doc: str, data: bool = True) -> argparse.ArgumentParser:
    """The options every benchmark takes: --data (unless data=False), --out, --encoder, --split-seed."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if data:
        ap.add_argument("--data", help="dataset folder (default ../shared/data/mmlu_pro)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--encoder", default="all-MiniLM-L6-v2")
    ap.add_argument("--split-seed", type=int, default=0)
    return ap


def dataset_path(data: str | None, default: str) -> Path:
    path = Path(data) if data else SHARED / default
    if not path.exists():
        sys.exit(f"dataset not found at {path.resolve()}: pass --data DIR")
    return path


def write_json(out: str, payload: dict, quiet: bool = False) -> None:
    payload = {**payload, "machine": {"python": platform.python_version(), "torch": torch.__version__,
                                      "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine()}}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(payload, indent=1))
    if not quiet:
        print(json.dumps(payload, indent=1))


def paired_interval(per_seed: list[tuple[np.ndarray, np.ndarray, np.ndarray]], n_boot: int = 2000, seed: int = 0):
    """Mean over seeds of the per-pair difference a - b (correct or not, a log-loss...), with a 95%
    bootstrap interval that resamples test questions within each seed. Each item: (question of
    each pair, a's value, b's value)."""
    rng = np.random.default_rng(seed)
    point, boots = [], []
    for q, a, b in per_seed:
        uq, inv = np.unique(q, return_inverse=True)
        diff = np.bincount(inv, weights=a.astype(float) - b.astype(float))
        count = np.bincount(inv).astype(float)
        point.append(diff.sum() / count.sum())
        w = rng.multinomial(len(uq), np.full(len(uq), 1 / len(uq)), size=n_boot)  # (n_boot, questions)
        boots.append((w @ diff) / (w @ count))
    boots = np.mean(boots, axis=0)
    return float(np.mean(point)), [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]


def url_password(url: str) -> str | None:
    import sqlalchemy as sa
    return sa.make_url(url).password


@contextlib.contextmanager
def postgres_database(server: str | None, name: str):
    """None when `server` is None, else the URL of a fresh database `name` (made safe) on that
    PostgreSQL server, dropped on exit: a benchmark's runs share no rows."""
    if server is None:
        yield None
        return
    import sqlalchemy as sa
    name = "".join(c if c.isalnum() else "_" for c in name.lower())
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
