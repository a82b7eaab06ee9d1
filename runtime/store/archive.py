"""The archive move: events older than a cutoff go to events_archive, same ids, never deleted.

One transaction: an idempotent copy (INSERT OR IGNORE, so a retried or interrupted move cannot
double-copy), then the delete from the hot log (which the database allows only for rows already
in the archive), then a WAL checkpoint after the commit.
"""

from __future__ import annotations

from .db import Store
from .events import now_iso


def count_older_than(store: Store, cutoff_ts: str) -> int:
    return int(store.scalar("SELECT COUNT(*) FROM events WHERE ts < ?", (cutoff_ts,)) or 0)


def move_older_than(store: Store, cutoff_ts: str) -> int:
    """Move every hot event with ts < cutoff_ts to the archive; return how many moved."""
    with store.transaction() as db:
        db.execute(
            "INSERT OR IGNORE INTO events_archive"
            "(id, ts, kind, actor, author_kind, body, meta, tick_id, archived_at) "
            "SELECT id, ts, kind, actor, author_kind, body, meta, tick_id, ? "
            "FROM events WHERE ts < ?",
            (now_iso(), cutoff_ts),
        )
        moved = db.execute("DELETE FROM events WHERE ts < ?", (cutoff_ts,)).rowcount
    if moved:
        store.checkpoint()
    return int(moved)


def optimize_indexes(store: Store) -> None:
    """Merge the FTS segments that many small inserts leave behind (reads get cheaper)."""
    store.execute("INSERT INTO events_fts(events_fts) VALUES ('optimize')")
    store.execute("INSERT INTO rollups_fts(rollups_fts) VALUES ('optimize')")
    store.checkpoint()
