"""What the SQL stores (API keys, feedback) share: how a database URL is opened, with one
error shape that never shows its password, and tables made by whichever process (or thread)
gets there first."""

from __future__ import annotations

import time
from pathlib import Path

import sqlalchemy as sa

from .secrets import redact


class StoreUnavailable(OSError):
    """A database that cannot be opened or reached (one line, never its password)."""


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for any other database, or SQLite in memory)."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///"):])
    return None


def open_engine(url: str, what: str, **engine_args) -> sa.Engine:
    """The engine of the database at `url`, called `what` in errors ("the key store"); a SQLite
    file's folder is made. A path given for a URL, a malformed URL, a missing driver or an
    unreachable server is StoreUnavailable in one line, without the URL's password."""
    if "://" not in url:
        raise StoreUnavailable(f"{url!r} is not a database URL: give sqlite:///{Path(url).absolute()} for a "
                               f"SQLite file, or postgresql+psycopg://USER@HOST/DB")
    file = sqlite_file(url)
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    try:
        return sa.create_engine(url, **engine_args)
    except Exception as e:
        raise unavailable(e, what, url) from None


def unavailable(e: Exception, what: str, url: str) -> StoreUnavailable:
    """`e`, met opening or first using the database at `url`, as one line without its password."""
    why = redact(str(getattr(e, "orig", None) or e)).strip().splitlines()
    return StoreUnavailable(f"{what} {redact(url)} cannot be opened ({type(e).__name__}: "
                            f"{why[0][:300] if why else ''})")


def create_tables(meta: sa.MetaData, engine: sa.Engine, tries: int = 5) -> None:
    """`meta`'s tables and indexes, created where missing. Replicas, or two threads of one,
    opening a new database at once race between create_all's check and its CREATE: the loser's
    "already exists" (SQLite's OperationalError, PostgreSQL's IntegrityError on its catalogue) is
    not an error, and the next try finds what the winner made."""
    for attempt in range(tries):
        try:
            meta.create_all(engine)
            return
        except sa.exc.DBAPIError:
            if attempt == tries - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def add_new_columns(table: sa.Table, engine: sa.Engine) -> None:
    """A table made before some of `table`'s nullable columns existed gets them (its old rows
    null there). Replicas may race: another one's ALTER winning is not an error."""
    def have():
        return {c["name"] for c in sa.inspect(engine).get_columns(table.name)}
    for column in table.columns:
        if column.name not in have():
            try:
                with engine.begin() as c:
                    c.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} "
                                      f"{column.type.compile(engine.dialect)}"))
            except sa.exc.DBAPIError:
                if column.name not in have():  # else another replica added it first
                    raise
