"""`jeirt feedback FILE`: grades of logged decisions from a file, recorded as POST /v1/feedback
records them (checked against the decision log; once per decision and source)."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.secrets import redact
from .output import console, expected_failures


def feedback(path: str = typer.Argument(..., help="CSV, JSON lines or Parquet: columns id, score (0-1), and "
                                                  "optionally source (user, judge, key), query_index, llm, comment"),
             decisions: Optional[str] = typer.Option(None, "--decisions", help="the decision log (a folder or URI); "
                                                     "default $JEIRT_HOME/decisions"),
             db: Optional[str] = typer.Option(None, "--db", help="the feedback database (SQLAlchemy URL); default "
                                                                 "JEIRT_FEEDBACK_URL, else SQLite at "
                                                                 "$JEIRT_HOME/feedback.db"),
             source: Optional[str] = typer.Option(None, "--source", help="for rows without one (default: user)"),
             retention_days: float = typer.Option(30.0, "--retention-days", help="the log's retention: older "
                                                                                 "decisions are unknown")):
    """Record a file of grades. Every row is checked first (a bad one stops it, naming its row and
    column, before anything is recorded); exit 1 when some name decisions the log lacks or conflict."""
    import functools

    from ..feedback.grades import record_file
    from ..feedback.log import filesystem, find
    from ..feedback.store import SOURCES, FeedbackStore
    with expected_failures(prefix="feedback: "):
        if source is not None and source not in SOURCES:
            raise ValueError(f"--source must be one of {', '.join(SOURCES)}, not {source!r}")
        fs, root = filesystem(decisions)
        store = FeedbackStore(db)
        out = record_file(path, store, functools.partial(find, fs, root), source, retention_days)
    console.print(f"{out['file']}: {out['recorded']} recorded, {out['unchanged']} already recorded, "
                  f"{out['unknown']} unknown, {out['conflict']} conflicting", highlight=False, soft_wrap=True)
    for problem in out["problems"]:
        console.print(f"[yellow]{redact(problem)}[/yellow]", highlight=False, soft_wrap=True)
    if out["unknown"] or out["conflict"]:
        raise typer.Exit(1)
