"""The archive move: events older than a cutoff go to events_archive, same ids, never deleted.

One transaction: an idempotent copy (INSERT OR IGNORE, so a retried or interrupted move cannot
double-copy), then the delete from the hot log (which the database allows only for rows already
in the archive), then a WAL checkpoint after the commit. Inside the transaction the move goes
in id ranges of at most `batch` events: a DELETE whose table has triggers first gathers every
rowid it will delete, so one statement over the whole hot log held all those ids in SQLite's
memory at once (about 30 bytes an event); a range of `batch` events holds at most that many,
however long the history. Each statement walks the primary key (`+ts` keeps the planner off
the ts index, whose order would need a sort of every old event), so the move reads each hot event a
few times at most, never a sorted copy of them.
"""

from __future__ import annotations

import sqlite3

from .db import Store
from .events import now_iso

PG_VACUUMED = ("events", "events_archive", "rollups", "tags", "fts_stats", "fts_rollups",
               "fts_rollup_words", "fts_rollup_terms", "fts_rollup_stats")  # optimize_indexes on PostgreSQL
BATCH = 5000  # events moved per statement pair (memory: a few hundred KB, whatever the history)


def count_older_than(store: Store, cutoff_ts: str) -> int:
    return int(store.scalar("SELECT COUNT(*) FROM events WHERE ts < ?", (cutoff_ts,)) or 0)


def _next_range_end(db: sqlite3.Connection, after: int, cutoff_ts: str, batch: int) -> int | None:
    """The id of the `batch`-th hot event after `after` older than the cutoff (or of the last
    one when fewer are left); None when none is left."""
    return db.execute(
        "SELECT MAX(id) FROM (SELECT id FROM events WHERE id > ? AND +ts < ? ORDER BY id LIMIT ?)",
        (after, cutoff_ts, batch)).fetchone()[0]


_MOVE = ("INSERT OR IGNORE INTO events_archive"
         "(id, ts, kind, actor, author_kind, body, meta, tick_id, archived_at{terms}) "
         "SELECT id, ts, kind, actor, author_kind, body, meta, tick_id, ?{terms} "
         "FROM events WHERE id > ? AND id <= ? AND +ts < ?")


def move_older_than(store: Store, cutoff_ts: str, batch: int | None = None) -> int:
    """Move every hot event with ts < cutoff_ts to the archive; return how many moved. One
    transaction, in id ranges of at most `batch` (BATCH) events (see the module docstring)."""
    batch = batch or BATCH
    # PostgreSQL's rows carry their search vector over (pg_fts: made again it cost most of a move)
    terms = ", tsv, ntok" if getattr(store, "dialect", "sqlite") == "postgres" else ""
    moved = 0
    archived_at = now_iso()
    with store.transaction() as db:
        after = 0
        while (end := _next_range_end(db, after, cutoff_ts, batch)) is not None:
            db.execute(_MOVE.format(terms=terms), (archived_at, after, end, cutoff_ts))
            moved += db.execute("DELETE FROM events WHERE id > ? AND id <= ? AND +ts < ?",
                                (after, end, cutoff_ts)).rowcount
            after = end
    if moved:
        store.checkpoint()
    return int(moved)


def optimize_indexes(store: Store) -> None:
    """Merge the FTS segments that many small inserts leave behind (reads get cheaper).

    On PostgreSQL there are no segments (pg_fts' GIN indexes keep no pending list): there the
    full text's tables are vacuumed and analyzed instead - the archive move's deleted rows and
    the kept counts' updated ones (fts_stats changes with every append) leave dead tuples
    behind, and the planner weighs `tsv @@` by the tables' statistics. VACUUM runs outside any
    transaction (the store's connection commits each statement itself)."""
    if getattr(store, "dialect", "sqlite") == "postgres":
        store.execute(f"VACUUM (ANALYZE) {', '.join(PG_VACUUMED)}")
        return
    store.execute("INSERT INTO events_fts(events_fts) VALUES ('optimize')")
    store.execute("INSERT INTO rollups_fts(rollups_fts) VALUES ('optimize')")
    store.checkpoint()
