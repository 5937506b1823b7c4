"""Grades of logged decisions, one at a time (POST /v1/feedback) or from a file (`jeirt feedback`):
each checked against the decision log and recorded once per (id, query_index, source), with what
learning needs from the decision (the LLM that answered and the query's encoder vector)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable

from ..data import DataError
from ..routing.router import NotFound, RequestError
from .log import ID_PATTERN, id_time
from .store import SOURCES, Conflict, FeedbackStore, Grade

LOOKUP_COLUMNS = ["id", "query_index", "space", "candidates", "chosen", "propensity", "answered_by", "encoder",
                  "embedding", "key_id", "status"]
LATE_S = 1.0  # a write's own time, beyond the writer's flush interval
FUTURE_S = 5.0  # an id stamped further ahead than this (clock skew between replicas) is not one a router made
COLUMNS = ("id", "score", "source", "query_index", "llm", "comment")


class Forbidden(RequestError):
    """A grade this caller may not give (HTTP 403)."""
    status = 403


def decision_age(decision_id: str, retention_days: float = 30.0) -> float:
    """Seconds since the decision was made (its id carries its time); NotFound for an id older than
    the log keeps, or stamped in the future beyond clock skew (no router made it)."""
    age = time.time() - id_time(decision_id)
    if age > retention_days * 86400:
        raise NotFound(f"decision {decision_id} is older than the log's retention ({retention_days:g} days)")
    if age < -FUTURE_S:
        raise NotFound(f"no decision {decision_id}: its id is not one a router made")
    return age


def late_wait_s(age: float, flush_s: float | None) -> float:
    """How long to wait for a decision made `age` seconds ago that the log does not show yet (its
    replica writes every `flush_s`): never more than flush_s + LATE_S."""
    if not flush_s:
        return 0.0
    return max(0.0, min(flush_s + LATE_S, flush_s + LATE_S - age))


def record_grade(store: FeedbackStore, lookup: Callable[[str, list[str]], list[dict]], decision_id: str,
                 score: float, source: str = "user", query_index: int = 0, llm: str | None = None,
                 key_id: str | None = None, comment: str | None = None, retention_days: float = 30.0,
                 flush_s: float | None = None, owner: str | None = None, any_llm: bool = True) -> dict:
    """Record one grade: `lookup(id, columns)` gives the decision's logged rows (a decision made
    less than `flush_s` + 1 s ago is waited for, as its replica may not have written it yet).
    See `grade_rows` for the checks and what is returned."""
    age = decision_age(decision_id, retention_days)
    rows = lookup(decision_id, LOOKUP_COLUMNS)
    if not rows and (wait := late_wait_s(age, flush_s)):  # another replica may not have written it yet
        time.sleep(wait)
        rows = lookup(decision_id, LOOKUP_COLUMNS)
    return grade_rows(store, rows, decision_id, score, source, query_index, llm, key_id, comment, owner, any_llm)


def grade_rows(store: FeedbackStore, rows: list[dict], decision_id: str, score: float, source: str = "user",
               query_index: int = 0, llm: str | None = None, key_id: str | None = None,
               comment: str | None = None, owner: str | None = None, any_llm: bool = True,
               weight: float = 1.0) -> dict:
    """Record a grade of the decision whose logged `rows` are given. `owner`: the key the decision
    must have been routed under (None: any, for admins and the CLI); `any_llm` False: only the LLM
    that answered may be graded. NotFound for a decision the log does not hold (or another key's),
    Conflict for another score from the same source, an LLM the decision did not weigh (or that did
    not answer), or a decision whose answer failed; else {id, query_index, source, llm, status}.
    `weight`: how much the grade counts in learning (its key's weight)."""
    row = next((r for r in rows if (r.get("query_index") or 0) == query_index), None)
    if row is not None and owner is not None and row.get("key_id") != owner:
        row = None  # another key's decision is not this caller's to grade, nor to learn of
    if row is None:
        raise NotFound(f"no decision {decision_id}" + (f" query {query_index}" if rows else "") + " in the log"
                       + (" routed under this key" if owner is not None else ""))
    if (row.get("status") or 200) >= 400:
        raise Conflict(f"decision {decision_id} answered {row['status']}: no LLM answered, so there is nothing "
                       f"to grade")
    answered = row.get("answered_by") or row["chosen"]
    llm = llm or answered
    if llm not in (row.get("candidates") or []):
        raise Conflict(f"decision {decision_id} did not weigh {llm!r}; its candidates were "
                       f"{(row.get('candidates') or [])[:10]}")
    if not any_llm and llm != answered:
        raise Conflict(f"decision {decision_id} was answered by {answered!r}, not {llm!r}: a grade names the LLM "
                       f"that answered (an admin key may grade any candidate)")
    status = store.add(Grade(decision_id, score, source, query_index, llm=llm, space=row.get("space"), key_id=key_id,
                             encoder=row.get("encoder"), embedding=row.get("embedding"), comment=comment,
                             propensity=row.get("propensity") if llm == row["chosen"] else None, weight=weight))
    return {"id": decision_id, "query_index": query_index, "source": source, "llm": llm, "status": status}


def read_grades(path: str | Path, source: str | None = None) -> list[dict]:
    """A file of grades (CSV, JSON lines or Parquet): columns id and score, and optionally source,
    query_index, llm, comment (`source`: the default for rows without one, else user). Every row
    is checked before any is recorded; the first bad one is a DataError naming its row and column."""
    import pandas as pd
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file of grades")
    suffix = "".join(path.suffixes[-2:]).lower()
    try:
        if suffix.endswith((".parquet", ".pq")):
            df = pd.read_parquet(path)
        elif ".jsonl" in suffix or ".ndjson" in suffix:
            df = pd.read_json(path, lines=True, dtype=False)
        else:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as e:
        raise DataError(f"{path}: cannot be read as CSV, JSON lines or Parquet ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]})") from None
    missing = [c for c in ("id", "score") if c not in df.columns]
    if missing:
        raise DataError(f"{path}: no column {missing[0]!r} (columns: {', '.join(map(str, df.columns))}); a file of "
                        f"grades has id and score, and optionally {', '.join(COLUMNS[2:])}")
    unknown = [c for c in df.columns if c not in COLUMNS]
    if unknown:
        raise DataError(f"{path}: unknown column {unknown[0]!r}; expected {', '.join(COLUMNS)}")
    out = []
    for i, r in enumerate(df.to_dict("records")):
        where = f"{path}: row {i + 1}"
        out.append(_grade_row(r, where, source))
    return out


def _grade_row(r: dict, where: str, source: str | None) -> dict:
    def blank(v):
        return v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and not v.strip())
    g = {"id": str(r["id"]).strip(), "source": source or "user", "query_index": 0, "llm": None, "comment": None}
    if not re.match(ID_PATTERN, g["id"]):
        raise DataError(f"{where}, column id: {r['id']!r} is not a decision id (28 hex digits)")
    try:
        g["score"] = float(r["score"])
    except (TypeError, ValueError):
        raise DataError(f"{where}, column score: {r['score']!r} is not a number") from None
    if not 0 <= g["score"] <= 1:  # NaN fails too
        raise DataError(f"{where}, column score: {r['score']!r} is not a number from 0 to 1")
    if not blank(r.get("source")):
        if str(r["source"]).strip() not in SOURCES:
            raise DataError(f"{where}, column source: {r['source']!r} is not one of {', '.join(SOURCES)}")
        g["source"] = str(r["source"]).strip()
    if not blank(r.get("query_index")):
        try:
            q = float(str(r["query_index"]).strip())
        except ValueError:
            q = float("nan")
        if not (q.is_integer() and q >= 0):
            raise DataError(f"{where}, column query_index: {r['query_index']!r} is not a whole number from 0")
        g["query_index"] = int(q)
    for name in ("llm", "comment"):
        if not blank(r.get(name)):
            g[name] = str(r[name])
    return g


def record_file(path: str | Path, store: FeedbackStore, lookup, source: str | None = None,
                retention_days: float = 30.0) -> dict:
    """Record a file of grades: the count of each outcome (recorded, unchanged, unknown, conflict)
    and the first problems, each naming its row."""
    counts = dict.fromkeys(("recorded", "unchanged", "unknown", "conflict"), 0)
    problems = []
    for i, g in enumerate(read_grades(path, source)):
        try:
            status = record_grade(store, lookup, g["id"], g["score"], g["source"], g["query_index"], g["llm"],
                                  comment=g["comment"], retention_days=retention_days)["status"]
        except (NotFound, Conflict) as e:
            status = "unknown" if isinstance(e, NotFound) else "conflict"
            if len(problems) < 10:
                problems.append(f"row {i + 1}: {e}")
        counts[status] += 1
    return {"file": str(path), **counts, "problems": problems}
