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


def grade(key: str = typer.Option(..., "--key", help="the answer key: question_id, answer (and optionally kind, "
                                                     "n_options), as jeirt onboard reads it"),
          questions: Optional[str] = typer.Option(None, "--questions", help="CSV or Parquet with question_id, text: "
                                                  "the key's questions as users ask them"),
          data: Optional[str] = typer.Option(None, "--data", help="or a dataset folder holding the questions"),
          decisions: Optional[str] = typer.Option(None, "--decisions", help="the decision log (default "
                                                  "$JEIRT_HOME/decisions); it must keep texts (log_queries: text, "
                                                  "log_answers: text)"),
          db: Optional[str] = typer.Option(None, "--db", help="the feedback database (default JEIRT_FEEDBACK_URL, "
                                                              "else SQLite at $JEIRT_HOME/feedback.db)"),
          since_days: Optional[float] = typer.Option(None, "--since-days", help="only the last N days of the log")):
    """Grade the logged answers to a key's questions (feedback with source `key`, once per decision)."""
    from ..data.answer_key import AnswerKey
    from ..feedback.graders import grade_with_key
    from ..feedback.store import FeedbackStore
    with expected_failures(prefix="grade: "):
        if (questions is None) == (data is None):
            raise ValueError("give one of --questions FILE or --data DIR: where the key's questions' texts are")
        answer_key = AnswerKey.read(key)
        counts = grade_with_key(answer_key, _question_texts(questions, data), FeedbackStore(db), decisions, since_days)
    console.print(f"{counts['recorded']} recorded, {counts['unchanged']} already recorded; not graded: "
                  f"{counts['not_in_key']} not in the key, {counts['no_text']} without texts in the log, "
                  f"{counts['no_answer']} unanswered, {counts['conflict']} graded before differently",
                  highlight=False, soft_wrap=True)


def _question_texts(questions: str | None, data: str | None) -> dict[str, str]:
    """{question text: question id}."""
    if data is not None:
        from ..data import load_data
        d = load_data(data)
        return {str(t).strip(): str(q) for q, t in zip(d.question_ids, d.texts)}
    import pandas as pd

    from ..data import DataError
    table = pd.read_parquet(questions) if questions.endswith((".parquet", ".pq")) else \
        pd.read_csv(questions, dtype=str, keep_default_na=False)
    missing = [c for c in ("question_id", "text") if c not in table.columns]
    if missing:
        raise DataError(f"{questions}: no column {missing[0]!r}; the questions file has question_id and text")
    return {str(t).strip(): str(q) for q, t in zip(table["question_id"], table["text"])}
