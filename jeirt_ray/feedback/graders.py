"""Feedback without a person: logged answers graded by an answer key (verifiable tasks).

A decision is gradable when the log kept its query's text and its answer (user_config.decisions
`log_queries: text`, `log_answers: text`) and the query is one of the key's questions (matched by
text, white space at the ends ignored). Each grade is recorded as feedback with source `key`,
once per decision (a repeat run changes nothing). What could not be graded is counted by reason,
never guessed.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads

from ..data.answer_key import AnswerKey
from .log import days, filesystem
from .store import Conflict, FeedbackStore, Grade

COLUMNS = ["id", "query_index", "space", "answered_by", "chosen", "propensity", "status", "encoder", "embedding",
           "query", "answer"]


def logged_propensity(row: dict) -> float | None:
    """The logged probability of the LLM that answered, as POST /v1/feedback keeps it: the policy's
    for its choice; none where a fallback answered instead (learning/offpolicy.py reads none as 1)."""
    return row.get("propensity") if row.get("answered_by") == row.get("chosen") else None


def read_log(root: str | None = None, since_days: float | None = None, columns: list[str] | None = None,
             ids: list[str] | None = None):
    """The decision log as a pyarrow table (the decisions made since `since_days` ago, to the
    millisecond: 0.5 is the last 12 hours, not today's UTC day; the rows of decisions `ids` only,
    if given)."""
    fs, path = filesystem(root)
    wanted = days(fs, path)
    since = None
    if since_days is not None:
        since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=since_days)
        wanted = [d for d in wanted if d >= since.strftime("%Y-%m-%d")]
    if not wanted:
        raise FileNotFoundError(f"no decisions logged under {path}" + (f" in the last {since_days:g} days"
                                                                        if since_days is not None else ""))
    parts = pads.partitioning(pa.schema([("day", pa.string()), ("hour", pa.string())]), flavor="hive")
    data = pads.dataset(path, filesystem=fs, format="parquet", partitioning=parts, exclude_invalid_files=True)
    where = pads.field("day") >= wanted[0]
    if since is not None:
        where &= pads.field("time") >= pa.scalar(since, type=pa.timestamp("ms", tz="UTC"))
    if ids is not None:
        where &= pads.field("id").isin(ids)
    read = None if columns is None else list(dict.fromkeys([*columns, "id", "query_index"]))
    table = data.to_table(columns=read, filter=where)
    # a file being compacted (feedback/log.py) can be read twice for a moment: one row of each query
    keys = pd.DataFrame({"id": table["id"].to_numpy(zero_copy_only=False),
                         "q": table["query_index"].fill_null(0).to_numpy(zero_copy_only=False)})
    table = table.filter(pa.array(~keys.duplicated().to_numpy()))
    return table if columns is None else table.select(columns)


def grade_with_key(key: AnswerKey, question_of: dict[str, str], store: FeedbackStore, root: str | None = None,
                   since_days: float | None = None) -> dict:
    """Grade the log's answers with `key`; `question_of`: {question text: question id}. The
    counts: recorded, unchanged (graded before), and not graded because no_text (the log kept no
    query or answer text), no_answer (no upstream answered), not_in_key, conflict (graded before
    differently)."""
    counts = dict.fromkeys(("recorded", "unchanged", "no_text", "no_answer", "not_in_key", "conflict"), 0)
    for r in read_log(root, since_days, COLUMNS).to_pylist():
        if r["answered_by"] is None or r["status"] != 200:
            counts["no_answer"] += 1
            continue
        if r["query"] is None or r["answer"] is None:
            counts["no_text"] += 1
            continue
        qid = question_of.get(r["query"].strip())
        if qid is None or qid not in key:
            counts["not_in_key"] += 1
            continue
        label = key.grade(qid, r["answer"]).label
        try:
            counts[store.add(Grade(r["id"], label, "key", r["query_index"] or 0, llm=r["answered_by"],
                                   space=r["space"], encoder=r["encoder"], embedding=r["embedding"],
                                   comment=f"answer key: {qid}", propensity=logged_propensity(r)))] += 1
        except Conflict:
            counts["conflict"] += 1
    return counts
