"""Feedback on logged decisions, in a SQL database (SQLAlchemy): SQLite by default
(`$JEIRT_HOME/feedback.db`), PostgreSQL on a cluster, so that every replica sees the same rows.

One row per (decision id, query index, source): a repeat with the same score is accepted and
changes nothing (idempotent), a repeat with another score is a conflict. Each row keeps what
learning needs (the LLM that answered and the query's encoder vector, copied from the decision
log), and rows are numbered in the order they arrive (`seq`), so a learner reads what is new
since the last row it applied (`since`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from ..core import paths
from ..core.choices import chosen
from ..core.sql import StoreUnavailable, add_new_columns, create_tables, open_engine, sqlite_file, unavailable
from ..routing import router

FEEDBACK_URL_ENV = "JEIRT_FEEDBACK_URL"
SOURCES = ("user", "judge", "key")  # a person's rating, an LLM judge's grade, an answer key's
MAX_WEIGHT = 100.0  # one grade counts at most as a hundred
SETTLE_S = 5.0  # with concurrent writers (PostgreSQL): how long a row may take to commit

_meta = sa.MetaData()
_feedback = sa.Table(
    "jeirt_feedback", _meta,
    # 64-bit where the database has it (SQLite's rowid is 64-bit already and must be INTEGER to autoincrement)
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(28), nullable=False), sa.Column("query_index", sa.Integer, nullable=False),
    sa.Column("source", sa.String(16), nullable=False), sa.Column("score", sa.Float, nullable=False),
    sa.Column("time", sa.Float, nullable=False), sa.Column("llm", sa.String(200)),
    sa.Column("space", sa.String(300)), sa.Column("key_id", sa.String(16)),
    sa.Column("encoder", sa.String(300)), sa.Column("embedding", sa.LargeBinary),
    sa.Column("comment", sa.String(2000)),
    sa.Column("propensity", sa.Float),  # P(the policy chose this LLM), where it graded the LLM chosen
    sa.Column("weight", sa.Float),  # how much the grade counts in learning: its key's weight then (null: 1)
    sa.UniqueConstraint("id", "query_index", "source", name="jeirt_feedback_once"))


def default_url() -> str:
    return os.environ.get(FEEDBACK_URL_ENV) or f"sqlite:///{paths.home() / 'feedback.db'}"


class Conflict(router.Conflict):
    """A repeat of (id, query_index, source) with another score."""


@dataclass
class Grade:
    """One piece of feedback, with what learning needs from the decision it grades."""
    id: str
    score: float
    source: str = "user"
    query_index: int = 0
    llm: str | None = None
    space: str | None = None
    key_id: str | None = None
    encoder: str | None = None
    embedding: np.ndarray | None = None
    comment: str | None = None
    propensity: float | None = None
    weight: float = 1.0  # how much it counts in learning (the grading key's weight)

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {self.source!r}")
        if isinstance(self.score, bool) or not isinstance(self.score, (int, float, np.number)) \
                or not np.isfinite(self.score) or not 0 <= self.score <= 1:
            raise ValueError(f"score must be a number from 0 to 1, not {self.score!r}")
        check_weight(self.weight)


class FeedbackStore:
    def __init__(self, url: str | None = None, create: bool = True):
        """The store at `url` (a SQLAlchemy URL; default JEIRT_FEEDBACK_URL, else SQLite in
        $JEIRT_HOME). `create` False: a reader's, which never creates a database (StoreUnavailable
        where the SQLite file is not there)."""
        url = url or default_url()
        file = sqlite_file(url)
        if not create and file is not None and not file.is_file():
            raise StoreUnavailable(f"no feedback database at {file}: nothing has been graded there (check --db "
                                   f"or JEIRT_FEEDBACK_URL)")
        self.engine = open_engine(url, "the feedback database", pool_pre_ping=True)
        try:
            create_tables(_meta, self.engine)
            add_new_columns(_feedback, self.engine)  # propensity and weight came later
        except Exception as e:
            raise unavailable(e, "the feedback database", url) from None
        self._lock = threading.Lock()  # SQLite: one writer at a time in this process
        # SQLite commits one writer at a time, in seq order; elsewhere a row may commit after one
        # numbered after it, so readers leave the last SETTLE_S seconds for the next read
        self.settle_s = 0.0 if self.engine.dialect.name == "sqlite" else SETTLE_S

    def add(self, g: Grade) -> str:
        """`recorded`, or `unchanged` for a repeat with the same score; Conflict for another score."""
        row = {"id": g.id, "query_index": int(g.query_index), "source": g.source, "score": float(g.score),
               "time": time.time(), "llm": g.llm, "space": g.space, "key_id": g.key_id, "encoder": g.encoder,
               "embedding": None if g.embedding is None else np.asarray(g.embedding, np.float32).tobytes(),
               "comment": g.comment, "propensity": None if g.propensity is None else float(g.propensity),
               "weight": float(g.weight)}
        try:
            with self._lock, self.engine.begin() as c:
                c.execute(_feedback.insert().values(**row))
            return "recorded"
        except sa.exc.IntegrityError:  # (id, query_index, source) is there already
            pass
        with self.engine.connect() as c:
            old = c.execute(sa.select(_feedback.c.score).where(
                _feedback.c.id == g.id, _feedback.c.query_index == int(g.query_index),
                _feedback.c.source == g.source)).scalar()
        if old == float(g.score):
            return "unchanged"
        raise Conflict(f"decision {g.id} query {g.query_index} already has {g.source} feedback with another "
                       f"score; feedback is recorded once per decision and source")

    def since(self, seq: int = 0, limit: int = 10_000, settled: bool = False) -> list[dict]:
        """The rows after `seq`, in order (each with its `seq`; the embedding as float32). `settled`:
        only up to the first row written in the last `settle_s` seconds, so that a reader that
        moves its cursor past what it read never passes a row still committing (a writer whose
        commit takes longer than that is the bound)."""
        with self.engine.connect() as c:
            rows = c.execute(sa.select(_feedback).where(_feedback.c.seq > seq).order_by(_feedback.c.seq)
                             .limit(limit)).mappings().all()
        if settled and self.settle_s:
            recent = time.time() - self.settle_s
            rows = rows[:next((i for i, r in enumerate(rows) if r["time"] > recent), len(rows))]
        return _decoded(rows)

    def learnable(self, after: int, upto: int, llms: list[str], encoder: str, min_time: float,
                  limit: int = 10_000, sources: tuple[str, ...] | None = None) -> list[dict]:
        """Like `since`, only the rows in (after, upto] that grade one of `llms` on a query encoded
        by `encoder` with its vector kept, from `min_time` on (and from `sources`, where given):
        what a learner of those LLMs reads."""
        f = _feedback.c
        with self.engine.connect() as c:
            rows = c.execute(sa.select(f.seq, f.id, f.llm, f.score, f.embedding, f.propensity, f.weight).where(
                f.seq > after, f.seq <= upto, f.time >= min_time, f.llm.in_(llms), f.encoder == encoder,
                f.embedding.is_not(None), *_from(sources)).order_by(f.seq).limit(limit)).mappings().all()
        return _decoded(rows)

    def window(self, after: int, min_time: float, sources: tuple[str, ...] | None = None) -> tuple[int, int]:
        """(the last row's seq, the rows after `after` from `min_time` on): what a learner may read."""
        f = _feedback.c
        with self.engine.connect() as c:
            newest = sa.select(sa.func.max(f.seq))
            if self.settle_s:  # the last settled row (see `since`): later ones are the replicas'
                newest = newest.where(f.time <= time.time() - self.settle_s)
            last = max(int(c.execute(newest).scalar() or 0), after)
            n = c.execute(sa.select(sa.func.count()).where(f.seq > after, f.seq <= last, f.time >= min_time,
                                                            *_from(sources))).scalar()
        return last, int(n)

    def per_llm(self, after: int, upto: int, min_time: float, sources: tuple[str, ...] | None = None) -> dict[str, int]:
        """Rows per graded LLM in (after, upto] from `min_time` on (to share the LLMs out evenly)."""
        f = _feedback.c
        with self.engine.connect() as c:
            rows = c.execute(sa.select(f.llm, sa.func.count()).where(f.seq > after, f.seq <= upto, f.time >= min_time,
                                                                     *_from(sources)).group_by(f.llm)).all()
        return {llm: int(n) for llm, n in rows if llm is not None}

    def graded(self, keys: list[str], source: str) -> set[str]:
        """Which of `keys` ("<id>:<query_index>") have feedback from `source`."""
        ids = sorted({k.rsplit(":", 1)[0] for k in keys})
        found: set[str] = set()
        with self.engine.connect() as c:
            for i in range(0, len(ids), 500):  # bounded IN lists
                rows = c.execute(sa.select(_feedback.c.id, _feedback.c.query_index).where(
                    _feedback.c.source == source, _feedback.c.id.in_(ids[i:i + 500])))
                found |= {f"{d}:{q}" for d, q in rows}
        return found & set(keys)

    def of(self, decision_id: str) -> list[dict]:
        """The grades of one decision, in the order they arrived."""
        with self.engine.connect() as c:
            rows = c.execute(sa.select(_feedback).where(_feedback.c.id == decision_id)
                             .order_by(_feedback.c.seq)).mappings().all()
        return _decoded(rows)

    def count(self) -> int:
        with self.engine.connect() as c:
            return int(c.execute(sa.select(sa.func.count()).select_from(_feedback)).scalar())


def _decoded(rows) -> list[dict]:
    """Rows as dicts, each embedding back as a float32 vector (and a weight of 1 where none was kept)."""
    return [{**r, "embedding": None if r["embedding"] is None else np.frombuffer(r["embedding"], np.float32).copy(),
             **({"weight": 1.0} if "weight" in r and r["weight"] is None else {})} for r in rows]


def check_weight(weight) -> float:
    """A grade's weight: a finite number from 0 (learned from nothing) to MAX_WEIGHT."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float, np.number)) or not np.isfinite(weight) \
            or not 0 <= weight <= MAX_WEIGHT:
        raise ValueError(f"a grade's weight must be a number from 0 to {MAX_WEIGHT:g}, not {weight!r}")
    return float(weight)


def _from(sources: tuple[str, ...] | None) -> list:
    """The WHERE clause keeping only the grades of `sources` (none: every source)."""
    return [] if sources is None else [_feedback.c.source.in_(list(sources))]


def check_sources(sources) -> tuple[str, ...]:
    """`sources` (a comma-separated string or a list) as a tuple of known sources, in SOURCES' order."""
    return chosen(sources, SOURCES, "source", "name at least one source")
