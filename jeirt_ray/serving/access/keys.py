"""API keys for the service, with scopes, budgets and rate limits, in a SQL database (SQLAlchemy):
SQLite by default (`$JEIRT_HOME/keys.db`, nothing to start), PostgreSQL on a cluster
(`postgresql+psycopg://...`). A plain class, testable without Serve.

A key is `jrk_<id>_<secret>`; the database holds its id and the SHA-256 of the whole key (a
256-bit random key needs no slow hash), never the key itself, which is shown once, at creation.

Limits, counted in the database so that every replica sees the same numbers:
- requests per minute: admitted by one conditional upsert (`requests < rpm`), so never more than
  `rpm` requests in a calendar minute (UTC), however many replicas;
- tokens per minute, USD per day and per month: checked before a request and counted after its
  answer (the upstream's `usage`), so they can be overshot by the requests already in flight
  when the limit is reached (at most one per concurrent request of that key).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property

import sqlalchemy as sa

from ...core import paths
from ...core.choices import chosen
from ...core.secrets import redact
from ...core.sql import add_new_columns, create_tables, open_engine
from ...feedback.store import SOURCES, check_sources, check_weight

SCOPES = ("route", "chat", "feedback", "onboard", "explore", "admin")
KEYS_URL_ENV = "JEIRT_KEYS_URL"
PREFIX = "jrk_"

_meta = sa.MetaData()
_keys = sa.Table(
    "jeirt_api_keys", _meta,
    sa.Column("id", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False, unique=True),
    sa.Column("scopes", sa.String(200), nullable=False),
    sa.Column("rpm", sa.Integer), sa.Column("tpm", sa.Integer),
    sa.Column("usd_per_day", sa.Float), sa.Column("usd_per_month", sa.Float),
    sa.Column("created", sa.Float, nullable=False), sa.Column("revoked", sa.Float),
    # the feedback sources a key may claim (comma-separated; null, for keys made before: user)
    sa.Column("sources", sa.String(64)),
    # how many grades (POST /v1/feedback) it may give per minute and per UTC day (null: no cap)
    sa.Column("grades_per_minute", sa.Integer), sa.Column("grades_per_day", sa.Integer),
    sa.Column("grade_weight", sa.Float))  # how much its grades count in learning (null: 1)
# one row per key and period: "min:<minute since the epoch, 12 digits>", "day:<YYYY-MM-DD>",
# "mon:<YYYY-MM>" (UTC; fixed widths, so that periods of a kind sort as strings)
_usage = sa.Table(
    "jeirt_key_usage", _meta,
    sa.Column("key_id", sa.String(16), primary_key=True), sa.Column("period", sa.String(16), primary_key=True),
    sa.Column("requests", sa.Integer, nullable=False, default=0),
    sa.Column("tokens", sa.BigInteger, nullable=False, default=0),
    sa.Column("usd", sa.Float, nullable=False, default=0.0))


def default_url() -> str:
    return os.environ.get(KEYS_URL_ENV) or f"sqlite:///{paths.home() / 'keys.db'}"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Key:
    """A key's public record (never the key itself)."""
    id: str
    name: str
    scopes: tuple[str, ...]
    rpm: int | None = None
    tpm: int | None = None
    usd_per_day: float | None = None
    usd_per_month: float | None = None
    created: float = 0.0
    revoked: float | None = None
    sources: tuple[str, ...] = ("user",)
    grades_per_minute: int | None = None
    grades_per_day: int | None = None
    grade_weight: float = 1.0

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes

    def may_claim(self, source: str) -> bool:
        """Whether this key's grades may say they come from `source` (admin keys: any)."""
        return "admin" in self.scopes or source in self.sources

    def limits(self) -> dict:
        return {"rpm": self.rpm, "tpm": self.tpm, "usd_per_day": self.usd_per_day, "usd_per_month": self.usd_per_month,
                "grades_per_minute": self.grades_per_minute, "grades_per_day": self.grades_per_day}

    def public(self) -> dict:
        return {"id": self.id, "name": self.name, "scopes": list(self.scopes), "sources": list(self.sources),
                **self.limits(), "grade_weight": self.grade_weight,
                "created": dt.datetime.fromtimestamp(self.created, dt.timezone.utc).isoformat(timespec="seconds"),
                "revoked": None if self.revoked is None else
                dt.datetime.fromtimestamp(self.revoked, dt.timezone.utc).isoformat(timespec="seconds")}


ADMIN_TOKEN_KEY = Key(id="admin-token", name="JEIRT_API_TOKEN", scopes=("admin",), sources=SOURCES)


@dataclass
class Admission:
    """A request's admission: `allowed`, or the limit it hit and when to retry; and the key's
    usage as counted (this request included) for the response headers."""
    allowed: bool
    limit: str | None = None
    retry_after_s: int = 0
    usage: dict = field(default_factory=dict)


def periods(now: float) -> dict[str, str]:
    t = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    return {"minute": f"min:{int(now // 60):012d}", "day": f"day:{t:%Y-%m-%d}", "month": f"mon:{t:%Y-%m}"}


def grade_periods(now: float) -> dict[str, str]:
    """The usage rows that count a key's grades (apart from its requests)."""
    t = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    return {"minute": f"gm:{int(now // 60):012d}", "day": f"gd:{t:%Y-%m-%d}"}


def seconds_left(now: float, period: str) -> int:
    """Seconds until the current minute, day or month (UTC) ends, at least 1."""
    t = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    if period == "minute":
        end = t.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    elif period == "day":
        end = t.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
    else:
        first = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (first + dt.timedelta(days=32)).replace(day=1)
    return max(1, int((end - t).total_seconds() + 0.999))


def check_scopes(scopes) -> tuple[str, ...]:
    return chosen(scopes, SCOPES, "scope", "a key needs at least one scope")


class KeyStore:
    """Keys and their usage in the database at `url` (default: $JEIRT_KEYS_URL, else SQLite in
    $JEIRT_HOME). Tables are created on first use."""

    def __init__(self, url: str | None = None):
        self.url = url or default_url()
        self.engine = open_engine(self.url, "the key store", pool_pre_ping=not self.url.startswith("sqlite"))
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
            sa.event.listen(self.engine, "begin", _sqlite_begin)
        self.dialect = self.engine.dialect.name
        self._ready = False
        self._lock = threading.Lock()
        self.pruned = 0.0

    def __repr__(self) -> str:
        return f"KeyStore({redact(self.url)!r})"

    def _begin(self):
        if not self._ready:
            with self._lock:
                if not self._ready:
                    create_tables(_meta, self.engine)
                    add_new_columns(_keys, self.engine)  # sources, the grade caps and weight came later
                    self._ready = True
        return self.engine.begin()

    # ---- administration --------------------------------------------------------------------------
    def create(self, name: str, scopes, rpm: int | None = None, tpm: int | None = None,
               usd_per_day: float | None = None, usd_per_month: float | None = None,
               sources="user", grades_per_minute: int | None = None, grades_per_day: int | None = None,
               grade_weight: float = 1.0) -> tuple[Key, str]:
        """A new key: (its record, the key itself, shown this once). `sources`: what its grades may
        say they come from (user; judge and key for the graders' own keys); `grades_per_minute`
        and `grades_per_day`: how many grades it may give, and `grade_weight` how much each counts
        in learning (0 to 100; 0: recorded, learned from nothing), so one tenant cannot outvote the
        rest."""
        if not name or not name.strip():
            raise ValueError("a key needs a --name (who or what uses it)")
        for label, value in (("rpm", rpm), ("tpm", tpm), ("usd_per_day", usd_per_day), ("usd_per_month", usd_per_month),
                             ("grades_per_minute", grades_per_minute), ("grades_per_day", grades_per_day)):
            if value is not None and not value >= 0:
                raise ValueError(f"{label} must be >= 0, not {value!r}")
        key_id = secrets.token_hex(4)
        secret = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        record = Key(key_id, name.strip(), check_scopes(scopes), rpm, tpm, usd_per_day, usd_per_month, time.time(),
                     sources=check_sources(sources), grades_per_minute=grades_per_minute,
                     grades_per_day=grades_per_day, grade_weight=check_weight(grade_weight))
        with self._begin() as c:
            c.execute(_keys.insert().values(id=record.id, name=record.name, hash=digest(secret),
                                            scopes=",".join(record.scopes), rpm=rpm, tpm=tpm, usd_per_day=usd_per_day,
                                            usd_per_month=usd_per_month, created=record.created,
                                            sources=",".join(record.sources), grades_per_minute=grades_per_minute,
                                            grades_per_day=grades_per_day, grade_weight=record.grade_weight))
        return record, secret

    def list(self, revoked: bool = False) -> list[Key]:
        with self._begin() as c:
            q = _keys.select().order_by(_keys.c.created)
            if not revoked:
                q = q.where(_keys.c.revoked.is_(None))
            return [_key(r) for r in c.execute(q)]

    def revoke(self, key_id_or_name: str, by: str | None = None) -> list[Key]:
        """Revoke the key with this id, or every live key with this name (`by`: "id" or "name" to
        say which; needed where the string is one key's id and other keys' name); LookupError if
        none match, or which was meant cannot be told."""
        if by not in (None, "id", "name"):
            raise ValueError(f"revoke by id or name, not {by!r}")
        now = time.time()
        with self._begin() as c:
            match = {"id": _keys.c.id == key_id_or_name, "name": _keys.c.name == key_id_or_name,
                     None: sa.or_(_keys.c.id == key_id_or_name, _keys.c.name == key_id_or_name)}[by]
            rows = [_key(r) for r in c.execute(_keys.select().where(match, _keys.c.revoked.is_(None)))]
            if not rows:
                raise LookupError(f"no live key with {by or 'id or name'} {key_id_or_name!r}: `jeirt keys list` "
                                  f"shows them")
            if by is None and any(k.id == key_id_or_name for k in rows) and len(rows) > 1:
                raise LookupError(f"{key_id_or_name!r} is the id of one key and the name of {len(rows) - 1} other(s): "
                                  f"nothing revoked; say which with --by id or --by name")
            c.execute(_keys.update().where(_keys.c.id.in_([k.id for k in rows])).values(revoked=now))
        return rows

    # ---- the request path ------------------------------------------------------------------------
    def verify(self, secret: str) -> Key | None:
        """The live key this secret is, or None (unknown, malformed or revoked)."""
        if not secret.startswith(PREFIX) or len(secret) > 200:
            return None
        with self._begin() as c:
            row = c.execute(_keys.select().where(_keys.c.hash == digest(secret))).first()
        if row is None or row.revoked is not None:
            return None
        return _key(row)

    def admit(self, key: Key, now: float | None = None) -> Admission:
        """Count one request of `key`, or refuse it (over a budget or the request rate) without
        counting it."""
        now = time.time() if now is None else now
        per = periods(now)
        spending = any(v is not None for v in (key.usd_per_day, key.usd_per_month, key.tpm))
        with self._begin() as c:  # one statement (the count) for a key with only a request rate
            used = self._usage(c, key.id, per) if spending else {}
            for limit, period, spent in (("usd_per_day", "day", "usd_day"), ("usd_per_month", "month", "usd_month"),
                                         ("tpm", "minute", "tokens_minute")):
                cap = getattr(key, limit)
                if cap is not None and used[spent] >= cap:
                    return Admission(False, limit, seconds_left(now, period), used)
            count = self._count(c, key.id, per["minute"], key.rpm)
            if count is None:
                return Admission(False, "rpm", seconds_left(now, "minute"), {**used, "requests_minute": key.rpm})
        self._prune_due(now)  # route-only traffic records nothing: its minute rows are pruned here
        return Admission(True, usage={**used, "requests_minute": count})

    def admit_grade(self, key: Key, now: float | None = None) -> Admission:
        """Count one grade of `key` against its caps (per minute, then per day), or refuse it
        (a refused grade counts against neither, except a day's refusal against its minute)."""
        now = time.time() if now is None else now
        per = grade_periods(now)
        used = {}
        with self._begin() as c:
            for limit, period in (("grades_per_minute", "minute"), ("grades_per_day", "day")):
                cap = getattr(key, limit)
                if cap is None:
                    continue
                count = self._count(c, key.id, per[period], cap)
                if count is None:
                    return Admission(False, limit, seconds_left(now, period), {f"grades_{period}": cap})
                used[f"grades_{period}"] = count
        return Admission(True, usage=used)

    def record(self, key_id: str, tokens: int = 0, usd: float = 0.0, now: float | None = None) -> None:
        """Count an answer's tokens and spend against the key."""
        if not tokens and not usd:
            return
        now = time.time() if now is None else now
        with self._begin() as c:
            for period in periods(now).values():
                self._add(c, key_id, period, tokens=int(tokens), usd=float(usd))
        self._prune_due(now)

    def _prune_due(self, now: float) -> None:
        """Prune once a minute, on whichever counted request comes (admitted or recorded)."""
        if now - self.pruned > 60:
            self.prune(now)

    def usage(self, key: Key, now: float | None = None) -> dict:
        with self._begin() as c:
            return self._usage(c, key.id, periods(time.time() if now is None else now))

    def prune(self, now: float | None = None) -> int:
        """Forget minute counts older than 2 minutes and day counts older than 62 days (the
        table stays bounded by keys x periods kept)."""
        now = time.time() if now is None else now
        self.pruned = now
        gone = 0
        with self._begin() as c:
            for kinds in (periods, grade_periods):
                oldest_minute, oldest_day = kinds(now - 120)["minute"], kinds(now - 62 * 86400)["day"]
                for oldest in (oldest_minute, oldest_day):
                    gone += c.execute(_usage.delete().where(_usage.c.period.startswith(oldest.split(":")[0] + ":"),
                                                            _usage.c.period < oldest)).rowcount
        return gone

    # ---- SQL -------------------------------------------------------------------------------------
    @cached_property
    def _sql(self) -> dict:
        """The usage table's statements, built once with bound parameters: building and hashing a
        statement afresh was most of the time a request's count took (SQLAlchemy's own advice for
        a hot path)."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        elif self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            raise ValueError(f"the key store supports SQLite and PostgreSQL, not {self.dialect}")
        key_id, period = sa.bindparam("key_id"), sa.bindparam("period")
        add = insert(_usage).values(key_id=key_id, period=period, requests=0, tokens=sa.bindparam("tokens"),
                                    usd=sa.bindparam("usd"))
        add = add.on_conflict_do_update(index_elements=["key_id", "period"], set_={
            "tokens": _usage.c.tokens + add.excluded.tokens, "usd": _usage.c.usd + add.excluded.usd})
        one = insert(_usage).values(key_id=key_id, period=period, requests=1, tokens=0, usd=0.0)

        def count(where=None):
            return one.on_conflict_do_update(index_elements=["key_id", "period"],
                                             set_={"requests": _usage.c.requests + 1},
                                             where=where).returning(_usage.c.requests)
        return {"add": add, "count": count(), "count_below": count(_usage.c.requests < sa.bindparam("rpm")),
                "usage": _usage.select().where(_usage.c.key_id == key_id,
                                               _usage.c.period.in_(sa.bindparam("periods", expanding=True)))}

    def _add(self, c, key_id: str, period: str, tokens: int, usd: float) -> None:
        c.execute(self._sql["add"], {"key_id": key_id, "period": period, "tokens": tokens, "usd": usd})

    def _count(self, c, key_id: str, period: str, rpm: int | None) -> int | None:
        """Add one request to the minute's count unless it has reached `rpm`: the count after, or
        None when refused. One statement, so replicas racing each other cannot both pass."""
        if rpm is not None and rpm < 1:
            return None
        row = c.execute(self._sql["count"] if rpm is None else self._sql["count_below"],
                        {"key_id": key_id, "period": period, "rpm": rpm}).first()
        return None if row is None else int(row.requests)

    def _usage(self, c, key_id: str, per: dict[str, str]) -> dict:
        rows = {r.period: r for r in c.execute(self._sql["usage"], {"key_id": key_id, "periods": list(per.values())})}

        def get(period, column):
            row = rows.get(per[period])
            return 0 if row is None else getattr(row, column)
        return {"requests_minute": int(get("minute", "requests")), "tokens_minute": int(get("minute", "tokens")),
                "usd_day": float(get("day", "usd")),
                "usd_month": float(get("month", "usd"))}


def _key(row) -> Key:
    return Key(row.id, row.name, tuple(row.scopes.split(",")), row.rpm, row.tpm, row.usd_per_day, row.usd_per_month,
               row.created, row.revoked, tuple((row.sources or "user").split(",")), row.grades_per_minute,
               row.grades_per_day, 1.0 if row.grade_weight is None else row.grade_weight)


def _sqlite_pragmas(connection, _record) -> None:
    """WAL: readers never wait for the writer; NORMAL sync: a commit costs no fsync (a crash may
    lose the last counts, never the file); replicas writing at once wait up to 10 s. Transactions
    begin IMMEDIATE (see _sqlite_begin), so the driver's own BEGIN is switched off."""
    connection.isolation_level = None
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _sqlite_begin(connection) -> None:
    """Take the write lock when a transaction begins: a read-then-write transaction that took it
    later could fail at once (SQLITE_BUSY) when another process wrote in between."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")
