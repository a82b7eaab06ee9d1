"""What a backup and a restore ask of a database file: a consistent copy of it, its check and
counts, the file sealed whole, the files beside it, and what another copy of it says of the
time after a backup.

Owns the SQL and the SQLite mechanics behind `runtime/backup.py` (the online backup API,
`integrity_check`, the journal mode, the -wal and -shm beside a database), which keeps the
policy: when, where, the names, the messages. Errors come out as StoreError (`CopyFailed` for
the copy itself), with SQLite's own words. It never decides what a restore keeps, and it
never writes the database it reads aside (that one is opened read-only, as it is).

For a store on PostgreSQL (issue 42): its rows read in one snapshot into a SQLite file
(`copy_out`, through store/copy.py, each table verified), which store's history it holds
(`newest`), the coworker held while it is changed (`held`: its claim and its write lock),
and its rows replaced by a SQLite file's (`fill`, `empty`: the schema's guards against
deletion set aside inside its own transactions only).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .copy import Copied
from .db import Store
from .events import Event, read_meta

# What a backup's manifest counts, each a query of one figure.
_COUNTS = {
    "events": "SELECT COUNT(*) FROM events",
    "events_archive": "SELECT COUNT(*) FROM events_archive",
    "rollups": "SELECT COUNT(*) FROM rollups",
    "pins": "SELECT COUNT(*) FROM pins WHERE unpinned_at IS NULL",
}


class CopyFailed(StoreError):
    """The database could not be copied (SQLite's words)."""


@dataclass(frozen=True)
class Inspection:
    """A database file as a backup reports it: integrity_check's verdict ("ok", or its first
    complaints), and when ok the manifest's counts, the last event id and the last migration."""

    integrity: str
    counts: dict[str, int] = field(default_factory=dict)
    last_event_id: int = 0
    schema: str | None = None


@dataclass(frozen=True)
class Settled:
    """An input's standing in a database: its event, status, failures and last error."""

    event_id: int
    status: str
    failures: int
    error: str | None


def beside(db: Path) -> list[Path]:
    """The files that belong to the database `db` while it is open (its -wal and -shm), in
    the order a move takes them before the database itself."""
    return [db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]


def snapshot_to(db: Path, target: Path) -> None:
    """A consistent copy of the database at `db` in the new file `target` (0600, one
    self-contained file), safe while a loop writes; CopyFailed when SQLite cannot make it."""
    try:
        with Store.open(db, migrate=False) as store:
            store.backup_to(target)
    except sqlite3.Error as e:
        raise CopyFailed(str(e)) from e


def inspect(db: Path) -> Inspection:
    """integrity_check, row counts, the last event id and the last migration of a database
    file, read-only (a damaged file gives its integrity text and no counts)."""
    try:
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        return Inspection(f"cannot open: {e}")
    try:
        try:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as e:
            return Inspection(str(e))
        integrity = "; ".join(str(r[0]) for r in rows[:5])
        return _figures(conn) if integrity == "ok" else Inspection(integrity)
    except sqlite3.Error as e:
        return Inspection(f"not a coworker database ({e})")
    finally:
        conn.close()


def _figures(conn: sqlite3.Connection) -> Inspection:
    counts = {name: int(conn.execute(sql).fetchone()[0]) for name, sql in _COUNTS.items()}
    last = conn.execute("SELECT MAX(id) FROM (SELECT id FROM events UNION ALL "
                        "SELECT id FROM events_archive)").fetchone()[0] or 0
    schema = conn.execute("SELECT name FROM _migrations ORDER BY rowid DESC LIMIT 1").fetchone()
    return Inspection("ok", counts, int(last), str(schema[0]) if schema else None)


def record(db: Path, event: Event) -> None:
    """Append `event` to the database at `db` (migrated first, as every writer does)."""
    from . import events as ev

    try:
        with Store.open(db) as store:
            ev.append(store, event)
    except sqlite3.Error as e:
        raise StoreError(str(e)) from e


def seal(db: Path) -> None:
    """Leave the database at `db` one self-contained file: its -wal checkpointed into it and
    gone, in rollback-journal mode, so it moves as one file. StoreError when a file beside it
    is still there after."""
    try:
        conn = sqlite3.connect(db)
        try:
            conn.execute("PRAGMA journal_mode = DELETE").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise StoreError(str(e)) from e
    for extra in [*beside(db), db.with_name(db.name + "-journal")]:
        if extra.exists() or extra.is_symlink():
            raise StoreError(f"{extra} is still there after the database was closed")


# --- another copy of the history: the database a restore moves aside -------------------------

def open_aside(db: Path) -> Store:
    """The database at `db` read-only and as it is: no migration, no check, its -wal and
    -shm read where they lie and left so. StoreError (SQLite's words) when it cannot be
    opened. Close it when done."""
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True,
                               isolation_level=None, check_same_thread=False)
    except sqlite3.Error as e:
        raise StoreError(str(e)) from e
    conn.row_factory = sqlite3.Row
    return Store(conn, db, readonly=True)


def newest_id(store: Store) -> int:
    """The id of the newest event, hot or archived (0 when none)."""
    return int(store.scalar("SELECT coalesce(max(id), 0) FROM history") or 0)


def head(store: Store, event_id: int) -> tuple[str, str] | None:
    """(ts, body) of event `event_id`, hot or archived; None when the store has none."""
    rows = store.query("SELECT ts, body FROM history WHERE id = ?", (event_id,))
    return (str(rows[0][0]), str(rows[0][1])) if rows else None


def waiting(store: Store) -> set[int]:
    """The events whose inputs are pending."""
    return {int(r[0]) for r in store.query("SELECT event_id FROM inputs WHERE status = "
                                           "'pending'")}


def settled_upto(store: Store, top: int) -> list[Settled]:
    """The inputs of events up to `top` that are no longer pending, as this store has them."""
    return [Settled(int(r[0]), str(r[1]), int(r[2]), r[3]) for r in store.query(
        "SELECT event_id, status, failures, last_error FROM inputs WHERE event_id <= ? "
        "AND status != 'pending'", (top,))]


def told_after(store: Store, top: int) -> list[tuple[Event, Settled]]:
    """The messages told after event `top`, oldest first, each with its input's standing;
    the event keeps its id here and its meta read (a damaged one as `read_meta` gives it)."""
    rows = store.query(
        "SELECT h.id, h.ts, h.kind, h.actor, h.author_kind, h.body, h.meta, i.status, "
        "i.failures, i.last_error FROM inputs AS i JOIN history AS h ON h.id = i.event_id "
        "WHERE i.event_id > ? AND i.kind = 'message' ORDER BY i.event_id", (top,))
    return [(Event(kind=r[2], actor=r[3], author_kind=r[4], body=r[5], ts=r[1], id=int(r[0]),
                   meta=read_meta(r[6], r[0], getattr(r, "said", None))),
             Settled(int(r[0]), str(r[7]), int(r[8]), r[9])) for r in rows]


# --- a store on PostgreSQL: its rows out into a SQLite file, and back in -----------------------
#
# A backup of a PostgreSQL store is a SQLite file (`copy_out`), so a backup is one shape
# whichever backend made it and restores into either. A restore into PostgreSQL replaces the
# coworker's rows in its schema (`fill`) while it holds the coworker (`held`).
#
# Not in one transaction: the full text's row triggers on tags and rollups each update the
# same counts rows, and PostgreSQL walks every version one transaction left of a row at each
# update, so one transaction is quadratic (32,000 tags and 4,000 rollups: 341 s, where
# batches of their own took 40 s). The caller's plan says when a fill began, and a fill run
# again empties and fills again: a cut half-way is finished or rolled back by running one.

def copy_out(store: Any, target: Path) -> list[Copied]:
    """Every table of history of the PostgreSQL `store`, read in one snapshot (REPEATABLE
    READ: a loop writing meanwhile is neither blocked nor half-copied), into the new SQLite
    file `target` (0600, one self-contained file), each table verified (rows and digest).
    CopyFailed when it cannot be made or a table differs."""
    from . import copy as cp

    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    os.chmod(target, 0o600)  # whatever the umask
    try:
        with Store.open(target) as out, store.snapshot():
            done = cp.copy_store(store, out)
        seal(target)
    except (sqlite3.Error, StoreError) as e:
        raise CopyFailed(str(e)) from e
    if bad := [c.table for c in done if not c.same or c.source_rows != c.target_rows]:
        raise CopyFailed(f"{', '.join(bad)} read back otherwise than copied")
    return done


def newest(store: Any) -> list[Any] | None:
    """[id, ts, body] of the newest event of `store`, hot or archived; None when it has none.
    (What a restore compares to know whether a store was written since it was read.)"""
    top = newest_id(store)
    found = head(store, top) if top else None
    return [top, *found] if found else None


def newest_in(db: Path) -> list[Any] | None:
    """`newest` of the SQLite file `db`, read-only and as it is."""
    store = open_aside(db)
    try:
        return newest(store)
    finally:
        store.close()


@contextmanager
def held(store: Any) -> Iterator[None]:
    """The coworker of the PostgreSQL `store` held by this connection: its claim (a loop on
    any host is refused, StoreError naming its host, and none starts meanwhile; a stale one is
    fenced off) and its write lock at session level (every other writer, a `tell` from any
    host, waits, or is StoreBusy past its lock timeout); both given up after, and by the
    server when this process dies."""
    from . import pg_runner, pg_schema

    # marked as restoring until the restore is settled (`settled`): if it is cut, no loop
    # claims the coworker and no input is added, on any host, until --finish or --rollback
    pg_runner.claim(store, restoring=True)
    key = pg_schema.lock_key("write", store.schema)
    try:
        store.scalar("SELECT pg_advisory_lock(?)", (key,))
        try:
            yield
        finally:
            store.scalar("SELECT pg_advisory_unlock(?)", (key,))
    finally:
        pg_runner.release(store)


def settled(store: Any) -> None:
    """The restore into the PostgreSQL `store` is over (done, or rolled back): its mark goes,
    loops may claim the coworker and inputs be added again."""
    from . import pg_runner

    pg_runner.restored(store)


def fill(store: Any, source: Path) -> list[Copied]:
    """Make the PostgreSQL `store` hold exactly the rows of history of the SQLite file
    `source`: every row it holds deleted (`empty`), then every table copied, in batches, each
    verified (rows and digest); StoreError when one differs. Run it with the coworker `held`.
    Whatever the store held before (a fill cut half-way included), it holds `source`'s after."""
    from . import copy as cp

    with open_aside(source) as rows:
        wanted = cp.tables(rows)
        if missing := sorted(set(wanted) ^ set(cp.tables(store))):
            raise StoreError(f"{source} and {store.path} differ in tables "
                             f"({', '.join(missing[:5])}): is one of another coworker version?")
        empty(store)
        done = [cp.copy_table(rows, store, table) for table in wanted]
    if bad := [c.table for c in done if not c.same or c.source_rows != c.target_rows]:
        raise StoreError(f"{', '.join(bad)} of {source} read back otherwise than copied into "
                         f"{store.path}")
    from .health import pg_fts_rebuild

    # the full text's counts as a recount gives them, in tables made anew (TRUNCATE): their
    # stamps move, so a process that cached document frequencies (a `coworker serve` left
    # running) reads them again instead of ranking with the history it had before
    pg_fts_rebuild(store)
    return done


# Tables a schema derives from the rows of history whose own triggers do not empty them as
# those rows are deleted (rollups are never deleted, so nothing takes a rollup's row out of
# fts_rollups); their counts' tables are kept by their own triggers.
_DERIVED_UNKEPT = ("fts_rollups",)
_EMPTY_BATCH = 2000  # rows deleted a transaction (see above: one a transaction is quadratic)


def empty(store: Any) -> None:
    """Delete every row of history of the PostgreSQL `store`, a batch a transaction: the
    schema's guards (its BEFORE DELETE triggers: events only once archived, the archive,
    rollups, approvals, ... never) set aside inside each of those transactions only, the
    tables emptied newest first (a row that names another goes before it; an event's tags
    before it), so the full text's own triggers take each row out of its counts as a DELETE
    does. `runner` and `_migrations` stay."""
    from . import copy as cp

    tables = cp.tables(store)
    guards = [(r[0], r[1]) for r in store.query(
        "SELECT c.relname, t.tgname FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = "
        "t.tgrelid JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = ? AND "
        "NOT t.tgisinternal AND t.tgenabled <> 'D' AND (t.tgtype & 10) = 10",  # BEFORE, DELETE
        (store.schema,))]
    for table in [*reversed(tables), *(t for t in _DERIVED_UNKEPT if store.has_table(t))]:
        mine = [name for on, name in guards if on == table]
        while True:
            with store.transaction():
                for name in mine:
                    store.execute(f'ALTER TABLE "{table}" DISABLE TRIGGER "{name}"')
                gone = store.execute(
                    f'DELETE FROM "{table}" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "{table}" '
                    f"LIMIT {_EMPTY_BATCH}))").rowcount
                for name in mine:
                    store.execute(f'ALTER TABLE "{table}" ENABLE TRIGGER "{name}"')
            if gone < _EMPTY_BATCH:
                break
