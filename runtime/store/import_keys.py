"""Import keys: one stable key per imported line, so importing a file twice adds nothing.

Owns the `import_keys` table (m010: key, event_id, source): which of a batch of keys are
already present (looked up in chunks), and writing a batch of imported events together with
their keys. The caller holds the one transaction around a whole file; the key of a line is the
importer's business, not this module's.
"""

from __future__ import annotations

from collections.abc import Sequence

from .db import Store

CHUNK = 500  # keys per `IN (...)` look-up, well below SQLite's variable limit

_INSERT_EVENT = ("INSERT INTO events(ts, kind, actor, author_kind, body, meta, tick_id) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)")


def present(store: Store, keys: Sequence[str]) -> set[str]:
    """Which of these keys are already in `import_keys`."""
    found: set[str] = set()
    for i in range(0, len(keys), CHUNK):
        chunk = keys[i:i + CHUNK]
        marks = ",".join("?" * len(chunk))
        found.update(r[0] for r in store.query(
            f"SELECT key FROM import_keys WHERE key IN ({marks})", tuple(chunk)))
    return found


def write(store: Store, rows: Sequence[tuple], keys: Sequence[str],
          source: str | None) -> tuple[int, int] | None:
    """Append event rows (Event.to_row) and record each one's key, in one transaction (a
    savepoint inside the caller's); return the first and last new event ids, or None.

    The rows get contiguous ids: events has AUTOINCREMENT and the write lock is held, so the
    last insert's rowid minus the count gives the first."""
    if len(rows) != len(keys):
        raise ValueError(f"{len(rows)} rows but {len(keys)} keys")
    if not rows:
        return None
    with store.transaction() as db:
        db.executemany(_INSERT_EVENT, rows)
        last = int(db.execute("SELECT last_insert_rowid()").fetchone()[0])
        first = last - len(rows) + 1
        # in key order: the key index takes them with fewer page visits
        db.executemany("INSERT INTO import_keys(key, event_id, source) VALUES (?, ?, ?)",
                       sorted((k, first + i, source) for i, k in enumerate(keys)))
    return first, last
