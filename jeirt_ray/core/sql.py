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
