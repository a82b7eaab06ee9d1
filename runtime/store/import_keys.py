"""Import keys, and the owner's vouching for import batches.

Owns the `import_keys` table (m010: key, event_id, source): which of a batch of keys are
already present (looked up in chunks), and writing one file's events batch by batch with their
keys (FileWriter: events at once, keys staged and written in key order at the end). The caller
holds the one transaction around a whole file, so a file's events and keys commit together or
not at all; the key of a line is the importer's business, not this module's.

Also owns the owner's vouching (ADR-0033): `coworker import FILE --mine ACTOR` records an
owner event of kind `vouch` (meta: batch, actor) per import batch that holds the actor's lines,
and `coworker import --unmine BATCH` an `unvouch` (meta: batch). No table: the events are
append-only, and the latest of a batch's vouch and unvouch events decides. Only the owner's
own events count (actor `owner`, author_kind `user`, not imported; the importer refuses both
kinds), and a vouch is always written after the lines it covers, so a line's vouching is read
from the events after it (`vouched_lines`). Nothing here makes a vouched line an input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import Refused
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
        with store.transaction() as db:  # a TEMP table, named alike on SQLite and PostgreSQL
            db.execute("CREATE TEMP TABLE IF NOT EXISTS import_keys_stage (key TEXT, "
                       "event_id BIGINT)")
            db.execute("DELETE FROM import_keys_stage")

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
                staged = list(zip(keys, range(span[0], span[1] + 1), strict=True))
                if getattr(self.store, "dialect", "sqlite") == "postgres":
                    _pg_stage(self.store, staged)
                else:
                    insert_values(db, "import_keys_stage", staged, 2)
        return span

    def finish(self) -> int:
        """Write the staged keys to `import_keys`, in key order; how many."""
        with self.store.transaction() as db:
            cur = db.execute("INSERT INTO import_keys(key, event_id, source) SELECT key, "
                             "event_id, ? FROM import_keys_stage ORDER BY key",
                             (self.source,))
            db.execute("DELETE FROM import_keys_stage")
        return cur.rowcount


def _pg_stage(store: Any, staged: Sequence[tuple[str, int]]) -> None:
    """The staged keys by COPY on PostgreSQL (a statement of 8,192 parameters cost the client
    more to split than the whole batch's COPY of events)."""
    import psycopg

    try:
        with store.raw.cursor() as cur, cur.copy("COPY import_keys_stage (key, event_id) "
                                                 "FROM STDIN") as copy:
            for row in staged:
                copy.write_row(row)
    except psycopg.Error as e:
        raise store.error(e) from e


# --- the owner's vouching for import batches (ADR-0033) -----------------------------------------

VOUCH, UNVOUCH = "vouch", "unvouch"
_OWN_VOUCHES = ("SELECT id, kind, meta FROM {} WHERE kind IN ('vouch', 'unvouch') AND id > ? "
                "AND actor = 'owner' AND author_kind = 'user' ORDER BY id")


def batches_of(store: Store, keys: Sequence[str], actor: str) -> set[str]:
    """The import batches whose events these keys (written by earlier imports) name, among the
    events of `actor` (an event written before batches were recorded has none)."""
    found: set[str] = set()
    for table in ("events", "events_archive"):
        for i in range(0, len(keys), CHUNK):
            chunk = tuple(keys[i:i + CHUNK])
            found.update(r[0] for r in store.query(
                "SELECT DISTINCT json_extract(h.meta, '$.import_batch') FROM import_keys AS k "
                f"JOIN {table} AS h ON h.id = k.event_id WHERE k.key IN "
                f"({','.join('?' * len(chunk))}) AND h.actor = ? AND json_valid(h.meta)",
                (*chunk, actor)) if isinstance(r[0], str))
    return found


def vouch(store: Store, batch: str, actor: str, file: str) -> int:
    """Record the owner's word that the lines of `actor` in import `batch` are the owner's
    own; the event's id."""
    return ev.append(store, ev.Event(
        kind=VOUCH, actor="owner", author_kind="user",
        body=f"vouched: the lines of {actor} in import batch {batch} ({file}) are my own words",
        meta={"batch": batch, "actor": actor, "file": file}))


def vouched(store: Store, after_id: int = 0) -> dict[str, set[str]]:
    """Each import batch the owner vouches for now, with its actors: the owner's own vouch and
    unvouch events (after event `after_id`), replayed in order."""
    state: dict[str, set[str]] = {}
    rows = [r for table in ("events", "events_archive")
            for r in store.query(_OWN_VOUCHES.format(table), (after_id,))]
    for row in sorted(rows, key=lambda r: int(r[0])):
        meta = ev.read_meta(row[2], row[0], getattr(row, "said", None))
        batch, actor = meta.get("batch"), meta.get("actor")
        if meta.get("imported") or not isinstance(batch, str):
            continue
        if row[1] == UNVOUCH:
            state.pop(batch, None)
        elif isinstance(actor, str):
            state.setdefault(batch, set()).add(actor)
    return state


def unvouch(store: Store, batch: str) -> list[str]:
    """Withdraw the owner's vouching for import `batch` (every actor of it); the actors it
    covered. Refused (one line) when the owner does not vouch for that batch now."""
    now = vouched(store)
    if batch not in now:
        held = ", ".join(sorted(now)) or "none"
        raise Refused(f"no vouching for import batch {batch!r} to withdraw (batches you vouch "
                      f"for: {held}); `coworker import FILE --mine ACTOR` prints its batch")
    actors = sorted(now[batch])
    ev.append(store, ev.Event(
        kind=UNVOUCH, actor="owner", author_kind="user",
        body=f"withdrawn: the lines of {', '.join(actors)} in import batch {batch} are "
             "imported history again, not my words", meta={"batch": batch}))
    return actors


def vouched_lines(store: Store, events: Iterable[ev.Event]) -> dict[int, str]:
    """Of these events, the imported lines the owner vouches for now (`Event.vouchable`, its
    batch vouched for its actor and not withdrawn), by id, with their batch. Reads the owner's
    vouch events after the oldest such line only; nothing when none is vouchable."""
    lines = [e for e in events if e.id is not None and e.vouchable]
    if not lines:
        return {}
    now = vouched(store, min(int(e.id or 0) for e in lines))
    return {int(e.id or 0): e.meta["import_batch"] for e in lines
            if e.actor in now.get(e.meta["import_batch"], ())}
