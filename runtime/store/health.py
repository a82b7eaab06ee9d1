"""The database's health as `coworker doctor` reads it, and the commands that repair it.

Owns what only the store knows of its engine: opening a database for a check so that any
failure of the engine comes out as a StoreError (`checking`), the schema objects the applied
migrations made that a database no longer holds (`missing`), whether the full-text indexes
agree with their tables (`fts_verdicts`), how to tell damage, a lock or an index out of step
from the engine's own words, and the command lines a person runs to recover, reindex or
rebuild (SQLite's, today). `DatabaseFailure` is the engine's error class, for the CLI's
last-resort catch. It never repairs anything and never writes: FTS5's integrity-check is
spelled as an INSERT but changes nothing.
"""

from __future__ import annotations

import shlex
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import StoreError
from . import migrations
from .db import Store

DatabaseFailure = sqlite3.DatabaseError  # what the engine raises when a database fails
FTS_INDEXES = ("events_fts", "rollups_fts")
_DAMAGE = ("malformed", "not a database", "corrupt")


@dataclass(frozen=True)
class IndexVerdict:
    """One full-text index checked: `state` is "ok", "out_of_sync" (the index disagrees with
    its table), "busy" (another writer: not checked) or "damaged" (the file is not a
    database); `detail` is the engine's words."""

    table: str
    state: str
    detail: str = ""


@contextmanager
def checking(path: Path, *, readonly: bool = True) -> Iterator[Store]:
    """The store at `path`, never migrated; any failure of the engine while it is open comes
    out as a StoreError whose cause is the engine's error (a StoreError stays as it is)."""
    try:
        with Store.open(path, readonly=readonly, migrate=False) as store:
            yield store
    except sqlite3.DatabaseError as e:
        raise StoreError(str(e)) from e


def damaged(reason: str) -> bool:
    """Whether the engine's words say the file is damaged (not merely locked or unreadable)."""
    return any(w in reason for w in _DAMAGE)


def only_indexes(integrity: str) -> bool:
    """Whether an integrity_check verdict blames only an index (a reindex fixes it)."""
    return " index " in f" {integrity} "


def missing(store: Store) -> list[str]:
    """The tables, views, triggers and indexes the database's applied migrations made that it
    no longer holds (a dropped `pins`, an append-only trigger gone), as "table pins"."""
    def objects(conn: sqlite3.Connection) -> set[tuple[str, str]]:
        return {(r[0], r[1]) for r in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}

    applied = {r[0] for r in store.query("SELECT name FROM _migrations")}
    fresh = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for fn in migrations.MIGRATIONS:
            if fn.__name__ in applied:
                fn(fresh)
        return [f"{kind} {what}" for kind, what in sorted(objects(fresh) - objects(store.conn))]
    finally:
        fresh.close()


def fts_verdicts(store: Store) -> list[IndexVerdict]:
    """Each full-text index against its content (FTS5's integrity-check with rank 1, which
    compares the index with the history view and rollups_indexed). Needs a read-write store;
    writes nothing."""
    return [_fts_verdict(store, table) for table in FTS_INDEXES]


def _fts_verdict(store: Store, table: str) -> IndexVerdict:
    try:
        store.fts_integrity(table)
    except sqlite3.DatabaseError as e:
        text = str(e)
        if "not a database" in text:
            return IndexVerdict(table, "damaged", text)
        if "locked" in text or "busy" in text:
            return IndexVerdict(table, "busy", text)
        return IndexVerdict(table, "out_of_sync", text)
    return IndexVerdict(table, "ok")


# --- what a person runs to repair ------------------------------------------------------------

def recover_command(db: Path, fresh: Path) -> str:
    """The command line that copies what can be read of a damaged `db` into `fresh`."""
    return f"sqlite3 {shlex.quote(str(db))} .recover | sqlite3 {shlex.quote(str(fresh))}"


def reindex_command(db: Path) -> str:
    """The command line that rebuilds every index of `db` from its tables."""
    return f"sqlite3 {shlex.quote(str(db))} REINDEX"


def fts_rebuild_command(db: Path, table: str) -> str:
    """The command line that rebuilds the full-text index `table` of `db` from its content."""
    return f"sqlite3 {shlex.quote(str(db))} \"INSERT INTO {table}({table}) VALUES('rebuild')\""
