"""SQL tables made by whichever process (or thread) gets there first."""

from __future__ import annotations

import time

import sqlalchemy as sa


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
