"""`jeirt feedback FILE`: grades of logged decisions from a file, recorded as POST /v1/feedback
records them (checked against the decision log; once per decision and source)."""

from __future__ import annotations

import re
from typing import Optional

import typer

from ..core.secrets import redact
from .output import console, expected_failures

DAYS_PER = {"s": 1 / 86400, "m": 1 / 1440, "h": 1 / 24, "d": 1.0, "w": 7.0}
OldSinceOpt = typer.Option(None, "--since-days", hidden=True, help="old spelling of --since, in days")


def since_opt(what: str, default: str | None) -> typer.Option:
    return typer.Option(None, "--since", help=f"{what} of the last 7d, 12h, 30m or 2w (a bare number: days; "
                                              f"default: {default or 'all of it'})")


def days_since(since: str | None, since_days: float | None, default: float | None) -> float | None:
    """--since (a duration: 7d, 12h, 30m, 90s, 2w; a bare number is days) or its old spelling
    --since-days, in days; `default` when neither is given."""
    if since is not None and since_days is not None:
        raise ValueError("give --since or its old spelling --since-days, not both")
    if since_days is not None:
        since = str(since_days)
    if since is None:
        return default
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", since)
    if m is None or float(m[1]) <= 0:
        raise ValueError(f"--since takes a duration such as 7d, 12h or 30m (a bare number: days), not {since!r}")
    return float(m[1]) * DAYS_PER[m[2] or "d"]


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
          since: Optional[str] = since_opt("only the log", None), since_days: Optional[float] = OldSinceOpt):
    """Grade the logged answers to a key's questions (feedback with source `key`, once per decision)."""
    from ..data.answer_key import AnswerKey
    from ..feedback.graders import grade_with_key
    from ..feedback.store import FeedbackStore
    with expected_failures(prefix="grade: "):
        if (questions is None) == (data is None):
            raise ValueError("give one of --questions FILE or --data DIR: where the key's questions' texts are")
        answer_key = AnswerKey.read(key)
        counts = grade_with_key(answer_key, _question_texts(questions, data), FeedbackStore(db), decisions,
                                days_since(since, since_days, None))
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


def judge(endpoint: str = typer.Option(..., "--endpoint", help="the judge's OpenAI-compatible base URL, e.g. "
                                                               "https://api.openai.com/v1"),
          model: str = typer.Option(..., "--model", help="the judge model's name at the endpoint"),
          api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="the environment variable that holds "
                                                                                "the endpoint's key (never the key)"),
          share: float = typer.Option(0.1, "--share", help="the share of logged answers judged (fixed by id)"),
          rubric: Optional[str] = typer.Option(None, "--rubric", help="a text file with your rubric; it must ask for a "
                                                                      "last line 'SCORE: N', N from 0 to 10"),
          price_in: Optional[float] = typer.Option(None, "--price-in", help="the judge's USD per million input tokens"),
          price_out: Optional[float] = typer.Option(None, "--price-out", help="and output tokens (both or neither)"),
          decisions: Optional[str] = typer.Option(None, "--decisions", help="the decision log (default "
                                                  "$JEIRT_HOME/decisions); it must keep texts"),
          db: Optional[str] = typer.Option(None, "--db", help="the feedback database"),
          since: Optional[str] = since_opt("only the log", None), since_days: Optional[float] = OldSinceOpt):
    """Grade a share of the logged answers with an LLM judge (feedback with source `judge`)."""
    import os
    from pathlib import Path

    from ..api.endpoint import Endpoint
    from ..api.judge import RUBRIC, judge_log
    from ..feedback.store import FeedbackStore
    with expected_failures(prefix="judge: "):
        if (price_in is None) != (price_out is None):
            raise ValueError("give both --price-in and --price-out (USD per million tokens), or neither")
        for label, price in (("--price-in", price_in), ("--price-out", price_out)):
            if price is not None and not (0 <= price < 1e9):  # NaN fails too
                raise ValueError(f"{label} must be a number of USD per million tokens from 0, not {price!r}")
        key = None
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(f"the variable {api_key_env} named by --api-key-env is not set")
        text = Path(rubric).read_text(encoding="utf-8") if rubric else RUBRIC
        if "SCORE" not in text:
            raise ValueError(f"{rubric}: the rubric must ask for a last line 'SCORE: N' (N from 0 to 10)")
        counts = judge_log(Endpoint(endpoint, model, key), FeedbackStore(db), decisions, share, text,
                           days_since(since, since_days, None),
                           None if price_in is None else (price_in, price_out))
    usd = "" if counts["usd"] is None else f", {counts['usd']:.4f} USD"
    console.print(f"{counts['judged']} judged: {counts['recorded']} recorded, {counts['unparseable']} unparseable "
                  f"verdicts, {counts['failed']} failed; {counts['judged_before']} judged before, "
                  f"{counts['not_sampled']} not sampled, {counts['no_text']} without texts; the judge's "
                  f"{counts['prompt_tokens'] + counts['completion_tokens']} tokens{usd}", highlight=False, soft_wrap=True)
    if counts["failed"]:
        console.print("calls failed: " + "; ".join(f"{n} x {why}" for why, n in counts["failures"].items()),
                      highlight=False, soft_wrap=True)
    if counts["judged"] and counts["failed"] == counts["judged"]:
        raise typer.Exit(1)  # nothing was judged: a wrong endpoint, model or key


def learn(space: str = typer.Option(..., "--space", help="the champion, models:/NAME@champion"),
          since: Optional[str] = since_opt("the grades", "7d"), since_days: Optional[float] = OldSinceOpt,
          register: Optional[str] = typer.Option(None, "--register", help="register the challenger under this name "
                                                                          "(default: the space's)"),
          db: Optional[str] = typer.Option(None, "--db", help="the feedback database (default JEIRT_FEEDBACK_URL, "
                                                              "else SQLite at $JEIRT_HOME/feedback.db)"),
          workers: int = typer.Option(1, "--workers", min=1, help="Ray actors (a CPU each) that share out the LLMs "
                                                                  "(default 1: in this process); the same result"),
          sources: str = typer.Option("user,judge,key", "--sources", help="the grades to trust, comma-separated "
                                                                          "(user, judge, key)"),
          promote: bool = typer.Option(True, "--promote/--no-promote", help="move @champion when shown better "
                                       "(--no-promote: register as @challenger whatever the verdict; needed to "
                                       "learn from a pinned version models:/NAME/N)")):
    """Learn a challenger from the feedback, register it, and move @champion to it only when the
    held-out grades show it better and its routing value does not fall (else @challenger), and only
    if @champion still points at the version compared; the evidence is in the version's tags."""
    from ..api.learn import learn as learn_job
    with expected_failures(prefix="learn: "):
        out = learn_job(space, days_since(since, since_days, 7.0), register, db, workers=workers, sources=sources,
                        promote=promote)
    lo, hi = out["log_loss_gain_ci95"]
    vlo, vhi = out["value_gain_ips_ci95"]
    verdict = ("[green]promoted to @champion[/green]" if out["promoted"] else
               "[yellow]@challenger (shown better; --no-promote)[/yellow]" if out["better"] else
               "[yellow]@challenger (not shown better)[/yellow]")
    console.print(f"{out['registered']}: learned {out['grades_learned']} grades from {','.join(out['sources'])}, held "
                  f"out {out['grades_held_out']}; log-loss gain {out['log_loss_gain']:+.4f} [{lo:+.4f}, {hi:+.4f}], "
                  f"routing value {out['value_gain_ips']:+.4f} [{vlo:+.4f}, {vhi:+.4f}]; {verdict}", highlight=False,
                  soft_wrap=True)


def shadow(decisions: Optional[str] = typer.Option(None, "--decisions", help="the decision log (default "
                                                   "$JEIRT_HOME/decisions); the shadow's is beside it, <log>-shadow"),
           db: Optional[str] = typer.Option(None, "--db", help="the feedback database (default JEIRT_FEEDBACK_URL, "
                                                               "else SQLite at $JEIRT_HOME/feedback.db)"),
           since: Optional[str] = since_opt("the decisions and grades", "7d"),
           since_days: Optional[float] = OldSinceOpt,
           sources: Optional[str] = typer.Option(None, "--sources", "--source", help="only these sources' grades, "
                                                 "comma-separated (user, judge, key); default: every source's, a "
                                                 "decision's grades averaged"),
           promote_to: Optional[str] = typer.Option(None, "--promote", help="move this alias (the one served, e.g. "
                                                    "champion) to the challenger's version when the interval shows "
                                                    "it better; the evidence goes in the version's tags"),
           as_json: bool = typer.Option(False, "--json", help="the whole comparison as JSON")):
    """Compare the challenger that routed in shadow (user_config.shadow) with the served space on
    the graded decisions: off-policy estimates with 95% intervals; exit 0 either way (promoted or
    not)."""
    import json

    from ..feedback.shadow import compare_shadow, promote
    with expected_failures(prefix="shadow: "):
        out = compare_shadow(decisions, db, days_since(since, since_days, 7.0), sources)
        if promote_to is not None:
            out["promotion"] = promote(out, promote_to)
    if as_json:
        print(json.dumps(out, indent=1))
        return
    lo, hi = out["challenger_minus_served_dr_ci95"]
    verdict = "[green]better[/green]" if out["better"] else "[yellow]not shown better[/yellow]"
    left = f" ({out['graded_not_compared']} graded ones not in the log or not weighing the LLM graded)" \
        if out["graded_not_compared"] else ""
    console.print(f"{out['compared']} graded decisions routed in shadow too{left} (agreement {out['agreement']:.0%}, "
                  f"{out['explored']} explored): served {out['served']['mean']:.3f}, challenger "
                  f"{out['challenger']['dr']:.3f} (doubly robust; IPS {out['challenger']['ips']:.3f}); "
                  f"challenger - served {out['challenger_minus_served_dr']:+.3f} [{lo:+.3f}, {hi:+.3f}]: {verdict}",
                  highlight=False, soft_wrap=True)
    if promote_to is not None:
        move = out["promotion"]
        console.print(f"@{promote_to} moved from {move['from']} to {move['to']}" if move["promoted"] else
                      f"@{promote_to} left at {move['from']}", highlight=False, soft_wrap=True)


def decision(decision_id: str = typer.Argument(..., help="the decision's id (its x-jeirt-request-id)"),
             decisions: Optional[str] = typer.Option(None, "--decisions", help="the decision log (default "
                                                     "$JEIRT_HOME/decisions, or a URI pyarrow reaches)"),
             db: Optional[str] = typer.Option(None, "--db", help="the feedback database, for its grades (default "
                                                                 "JEIRT_FEEDBACK_URL, else SQLite at $JEIRT_HOME/feedback.db)")):
    """Look up one logged decision by its id: what was routed, to whom, with what probability, and
    the grades it has (JSON; query vectors left out)."""
    import json

    from ..feedback.log import ID_PATTERN, filesystem, find
    with expected_failures(prefix="decision: "):
        if not re.fullmatch(ID_PATTERN, decision_id):
            raise ValueError(f"{decision_id!r} is not a decision id (28 hex digits, the x-jeirt-request-id header)")
        fs, root = filesystem(decisions)
        rows = find(fs, root, decision_id)
        if not rows:
            raise LookupError(f"no decision {decision_id} under {redact(root)} (unknown, older than the log's "
                              f"retention, or not written yet)")
        grades = []
        if db is not None or _default_feedback_exists():
            from ..feedback.store import FeedbackStore
            grades = [{k: g[k] for k in ("query_index", "source", "score", "llm", "propensity", "comment")}
                      for g in FeedbackStore(db, create=False).of(decision_id)]
    out = [{k: (str(v) if k == "time" else v) for k, v in r.items() if k != "embedding"} for r in rows]
    print(json.dumps({"id": decision_id, "queries": out, "grades": grades}, indent=1, default=str))


def _default_feedback_exists() -> bool:
    """Whether the default feedback store is there (a lookup never creates a database)."""
    import os

    from ..core import paths
    from ..feedback.store import FEEDBACK_URL_ENV
    return bool(os.environ.get(FEEDBACK_URL_ENV)) or (paths.home() / "feedback.db").exists()
