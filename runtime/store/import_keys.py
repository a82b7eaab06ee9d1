"""Import keys: one stable key per imported line, so importing a file twice adds nothing.

Owns the `import_keys` table (m010: key, event_id, source): which of a batch of keys are
already present (looked up in chunks), and writing one file's events batch by batch with their
keys (FileWriter: events at once, keys staged and written in key order at the end). The caller
holds the one transaction around a whole file, so a file's events and keys commit together or
not at all; the key of a line is the importer's business, not this module's.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import events as ev
from .db import Store, insert_values

CHUNK = 500  # keys per `IN (...)` look-up, well below SQLite's variable limit


def present(store: Store, keys: Sequence[str]) -> set[str]:
    """Which of these keys are already in `import_keys`."""
    found: set[str] = set()
    for i in range(0, len(keys), CHUNK):
        chunk = keys[i:i + CHUNK]
        marks = ",".join("?" * len(chunk))
        found.update(r[0] for r in store.query(
            f"SELECT key FROM import_keys WHERE key IN ({marks})", tuple(chunk)))
    return found


class FileWriter:
    """The writes of one imported file, inside the caller's one transaction: events a batch
    at a time (few INSERTs each, see store.events.insert_rows), their keys gathered in a TEMP
    table and written to `import_keys` once, in key order, by `finish` (a key index filled in
    order is appended to; filled a batch at a time it is written all over, every batch).

    Which keys are already present: those written before this file (`present`). A key of this
    file is never in `import_keys` before `finish`, so the caller tells repeats within the file
    apart itself. When `import_keys` is empty at the start, nothing is looked up at all."""

    def __init__(self, store: Store, source: str | None) -> None:
        self.store, self.source = store, source
        self.fresh = not store.scalar("SELECT EXISTS (SELECT 1 FROM import_keys)")
        with store.transaction() as db:
            db.execute("CREATE TEMP TABLE IF NOT EXISTS import_keys_stage (key, event_id)")
            db.execute("DELETE FROM temp.import_keys_stage")

    def present(self, keys: Sequence[str]) -> set[str]:
        """Which of these keys an earlier import wrote."""
        return set() if self.fresh else present(self.store, keys)

    def write(self, rows: Sequence[tuple], keys: Sequence[str]) -> tuple[int, int] | None:
        """Append event rows (Event.to_row) and stage each one's key; the first and last new
        event ids, or None."""
        if len(rows) != len(keys):
            raise ValueError(f"{len(rows)} rows but {len(keys)} keys")
        with self.store.transaction() as db:
            span = ev.insert_rows(self.store, rows)
            if span:
                insert_values(db, "temp.import_keys_stage", list(
                    zip(keys, range(span[0], span[1] + 1), strict=True)), 2)
        return span

    def finish(self) -> int:
        """Write the staged keys to `import_keys`, in key order; how many."""
        with self.store.transaction() as db:
            cur = db.execute("INSERT INTO import_keys(key, event_id, source) SELECT key, "
                             "event_id, ? FROM temp.import_keys_stage ORDER BY key",
                             (self.source,))
            db.execute("DELETE FROM temp.import_keys_stage")
        return cur.rowcount
