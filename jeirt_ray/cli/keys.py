"""`jeirt keys create|list|revoke`: the service's API keys, in the key store that the service
reads (JEIRT_KEYS_URL, or SQLite at $JEIRT_HOME/keys.db; --db for another)."""

from __future__ import annotations

import contextlib
from enum import Enum
from typing import Optional

import typer
from rich.table import Table

from ..core.secrets import redact
from .output import console, expected_failures

keys_app = typer.Typer(help="API keys of the service: scopes (route, chat, feedback, onboard, explore, admin), rate limits and "
                            "budgets. Stored hashed in JEIRT_KEYS_URL (default SQLite at $JEIRT_HOME/keys.db).",
                       no_args_is_help=True)
DbOpt = typer.Option(None, "--db", help="the key store's SQLAlchemy URL (default: JEIRT_KEYS_URL, else SQLite at "
                                        "$JEIRT_HOME/keys.db), e.g. postgresql+psycopg://user:pw@host/db")


@contextlib.contextmanager
def _store(db: str | None):
    """The key store; a database that cannot be reached is one line (its URL without credentials)."""
    import sqlalchemy

    from ..serving.access.keys import KeyStore
    with expected_failures(prefix="keys: "):
        store = KeyStore(db)
        try:
            yield store
        except sqlalchemy.exc.SQLAlchemyError as e:
            raise OSError(f"the key store {redact(store.url)} cannot be used "
                          f"({type(e).__name__}: {redact(str(e.orig if hasattr(e, 'orig') else e)).splitlines()[0]})")


@keys_app.command("create")
def keys_create(name: str = typer.Option(..., "--name", help="who or what uses the key"),
                scopes: str = typer.Option(..., "--scopes", help="comma-separated: route, chat, feedback, onboard, explore, admin"),
                rpm: Optional[int] = typer.Option(None, "--rpm", help="requests per minute"),
                tpm: Optional[int] = typer.Option(None, "--tpm", help="tokens per minute (counted from the upstream's "
                                                                      "usage)"),
                usd_per_day: Optional[float] = typer.Option(None, "--usd-per-day", help="spend per UTC day"),
                usd_per_month: Optional[float] = typer.Option(None, "--usd-per-month", help="spend per UTC month"),
                sources: str = typer.Option("user", "--sources", help="what this key's grades (POST /v1/feedback) may "
                                            "say they come from, comma-separated: user, judge, key (the graders' own "
                                            "keys); admin keys may claim any"),
                grades_per_minute: Optional[int] = typer.Option(None, "--grades-per-minute", min=0, help="grades "
                                                                "(POST /v1/feedback) it may give per minute"),
                grades_per_day: Optional[int] = typer.Option(None, "--grades-per-day", min=0, help="grades it may "
                                                             "give per UTC day (so one tenant cannot outvote the rest)"),
                grade_weight: float = typer.Option(1.0, "--grade-weight", min=0, max=100, help="how much each of its "
                                                   "grades counts in learning (0: recorded, learned from nothing)"),
                db: Optional[str] = DbOpt):
    """Create a key; the key itself is printed alone on the last line, this once (it is stored hashed)."""
    with _store(db) as store:
        key, secret = store.create(name, scopes, rpm, tpm, usd_per_day, usd_per_month, sources=sources,
                                   grades_per_minute=grades_per_minute, grades_per_day=grades_per_day,
                                   grade_weight=grade_weight)
    limits = ", ".join(f"{k} {v:g}" for k, v in key.limits().items() if v is not None) or "no limits"
    weight = "" if key.grade_weight == 1 else f", each counting {key.grade_weight:g}"
    grades = f"; grades as {','.join(key.sources)}{weight}" if "feedback" in key.scopes or "admin" in key.scopes \
        else ""
    console.print(f"key {key.id} ({key.name}): scopes {','.join(key.scopes)}{grades}; {limits}. Keep it now, it is not "
                  "shown again:", highlight=False, soft_wrap=True)
    typer.echo(secret)


@keys_app.command("list")
def keys_list(revoked: bool = typer.Option(False, "--revoked", help="also list revoked keys"),
              db: Optional[str] = DbOpt):
    """The keys (never the keys themselves): id, name, scopes, limits, when created or revoked."""
    with _store(db) as store:
        rows = store.list(revoked=revoked)
        table = Table(title=f"API keys in {redact(store.url)}")
    table.add_column("id", no_wrap=True, min_width=8)
    for col in ("name", "scopes", "rpm", "tpm", "USD/day", "USD/month", "created", "revoked"):
        table.add_column(col)
    for k in rows:
        p = k.public()
        table.add_row(k.id, k.name, ",".join(k.scopes), *("-" if v is None else f"{v:g}" for v in k.limits().values()),
                      p["created"], p["revoked"] or "")
    console.print(table)


class By(str, Enum):
    id = "id"
    name = "name"


@keys_app.command("revoke")
def keys_revoke(key: str = typer.Argument(..., help="the key's id, or a name (revokes every live key of that name)"),
                by: Optional[By] = typer.Option(None, "--by", help="read KEY as an id or as a name (default: either; needed "
                                                      "when it is both)"),
                db: Optional[str] = DbOpt):
    """Revoke a key; running services refuse it within 5 seconds."""
    with _store(db) as store:
        gone = store.revoke(key, by=by.value if by else None)
    console.print(f"revoked {', '.join(f'{k.id} ({k.name})' for k in gone)}", highlight=False)
