"""Redactions: the one audited exception to append-only, as SQL.

Owns the `redactions` ledger (m010) and the writes it licenses: an event's body and meta
overwritten with the marker of its redaction row (the database's triggers refuse any other
UPDATE), a sealed rollup's title, body, terms and vocab rewritten under a rollup redaction row,
the external-content FTS rows of both re-indexed (the 'delete' command with the exact old
values, then the new row), their vectors dropped, and the compaction that makes the old bytes
leave the file (`secure_delete`, FTS5 'optimize', a TRUNCATE checkpoint). Which words to take
out of a rollup is decided by runtime/redaction.py; every function here writes inside the
caller's transaction (a savepoint when nested).

On PostgreSQL (`store.dialect == "postgres"`) the full text is kept by triggers
(runtime/store/pg_fts.py): the one UPDATE the triggers allow recomputes an event's or a rollup's
vector and the kept counts, so no FTS5 'delete' command is written; `secure_delete` is a no-op
and `compact` is a VACUUM of the tables a redaction touches.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import CoworkerError
from . import rollups as rl
from .db import Store, new_id
from .events import now_iso


class RedactionRefused(CoworkerError):
    """The event cannot be redacted: it does not exist, or it already was."""


@dataclass(frozen=True)
class Redaction:
    id: int
    item_kind: str
    item_id: int
    marker: str
    why: str
    actor: str
    ts: str


@dataclass(frozen=True)
class EventText:
    """What an event holds before its redaction (FTS columns exactly as indexed)."""

    id: int
    body: str
    kind: str
    actor: str
    tags: str | None
    source: str  # 'hot' (table events) or 'archive' (events_archive)


def marker(redaction_id: int, why: str) -> str:
    return f"[redacted #{redaction_id}: {why}]"


def for_item(store: Store, item_kind: str, item_id: int) -> list[Redaction]:
    rows = store.query("SELECT id, item_kind, item_id, marker, why, actor, ts FROM redactions "
                       "WHERE item_kind = ? AND item_id = ? ORDER BY id", (item_kind, item_id))
    return [Redaction(*tuple(r)) for r in rows]


def all_(store: Store) -> list[Redaction]:
    rows = store.query("SELECT id, item_kind, item_id, marker, why, actor, ts FROM redactions "
                       "ORDER BY id")
    return [Redaction(*tuple(r)) for r in rows]


def event_text(store: Store, event_id: int) -> EventText:
    """The event as the FTS index holds it; RedactionRefused when unknown or already redacted.
    Call it inside the redaction's transaction, so nothing changes between read and write."""
    row = store.execute("SELECT id, body, kind, actor, tags, source FROM history WHERE id = ?",
                        (event_id,)).fetchone()
    if row is None:
        raise RedactionRefused(f"no event {event_id}: `coworker log` or `coworker search` "
                               "shows ids")
    done = for_item(store, "event", event_id)
    if done:
        raise RedactionRefused(f"event {event_id} is already redacted (redaction "
                               f"#{done[0].id}, {done[0].ts}); nothing to do")
    return EventText(int(row[0]), str(row[1]), str(row[2]), str(row[3]), row[4], str(row[5]))


def _ledger(store: Store, item_kind: str, item_id: int, why: str, actor: str,
            ts: str) -> int:
    cur = store.execute("INSERT INTO redactions(item_kind, item_id, marker, why, actor, ts) "
                        "VALUES (?, ?, '', ?, ?, ?)", (item_kind, item_id, why, actor, ts))
    return new_id(cur)


def overwrite_event(store: Store, old: EventText, why: str, actor: str) -> tuple[int, str]:
    """Record the redaction and overwrite the event's body with its marker (meta with
    {"redacted": id}), re-indexing it and dropping its tags (a tag can hold the secret too;
    on a marker, none means anything) and its vectors; return (id, marker)."""
    with store.transaction() as db:
        rid = _ledger(store, "event", old.id, why, actor, now_iso())
        text = marker(rid, why)
        db.execute("UPDATE redactions SET marker = ? WHERE id = ?", (text, rid))
        fts5 = store.dialect == "sqlite"  # on PostgreSQL the UPDATE below re-indexes the row
        if fts5:
            db.execute("INSERT INTO events_fts(events_fts, rowid, body, kind, actor, tags) "
                       "VALUES ('delete', ?, ?, ?, ?, ?)",
                       (old.id, old.body, old.kind, old.actor, old.tags))
        db.execute("DELETE FROM tags WHERE item_kind = 'event' AND item_id = ?", (old.id,))
        table = "events" if old.source == "hot" else "events_archive"
        cur = db.execute(f"UPDATE {table} SET body = ?, meta = ? WHERE id = ?",
                         (text, json.dumps({"redacted": rid}), old.id))
        if cur.rowcount != 1:
            raise RedactionRefused(f"event {old.id} moved while it was being redacted; "
                                   "run the command again")
        if fts5:
            new = db.execute("SELECT id, body, kind, actor, tags FROM history WHERE id = ?",
                             (old.id,)).fetchone()
            db.execute("INSERT INTO events_fts(rowid, body, kind, actor, tags) "
                       "VALUES (?, ?, ?, ?, ?)", tuple(new))
        db.execute("DELETE FROM vectors WHERE item_kind = 'event' AND item_id = ?", (old.id,))
        # A decision keeps its text beside its event: the same words, the same marker.
        db.execute("UPDATE decisions SET body = ? WHERE event_id = ?", (text, old.id))
    return rid, text


def rollups_covering(store: Store, event_id: int) -> list[rl.Rollup]:
    """Every rollup, at every level, whose span covers the event, plus those whose span is
    unknown (NULL provenance: they may quote it too), lowest level first."""
    rows = store.query(
        "SELECT * FROM rollups WHERE (first_event <= ? AND last_event >= ?) "
        "OR first_event IS NULL OR last_event IS NULL ORDER BY level, id",
        (event_id, event_id))
    return [rl._from_row(r) for r in rows]


def rewrite_rollup(store: Store, rollup_id: int, *, title: str, body: str, terms: str,
                   vocab: str | None, why: str, actor: str, drop_tags: Sequence[str] = ()
                   ) -> int:
    """Rewrite a sealed rollup's text under a rollup redaction row (the trigger demands one),
    dropping the tags `drop_tags` names (keywords that quote the secret), re-indexing it and
    dropping its vectors; return the redaction id."""
    with store.transaction() as db:
        rid = _ledger(store, "rollup", rollup_id, why, actor, now_iso())
        db.execute("UPDATE redactions SET marker = ? WHERE id = ?", (marker(rid, why), rid))
        fts5 = store.dialect == "sqlite"  # on PostgreSQL the triggers follow the UPDATE
        if fts5:
            old = db.execute("SELECT id, title, body, terms, level, vocab, tags FROM "
                             "rollups_indexed WHERE id = ?", (rollup_id,)).fetchone()
            db.execute("INSERT INTO rollups_fts(rollups_fts, rowid, title, body, terms, level, "
                       "vocab, tags) VALUES ('delete', ?, ?, ?, ?, ?, ?, ?)", tuple(old))
        db.executemany("DELETE FROM tags WHERE item_kind = 'rollup' AND item_id = ? AND "
                       "word = ?", [(rollup_id, w) for w in drop_tags])
        db.execute("UPDATE rollups SET title = ?, body = ?, terms = ?, vocab = ? WHERE id = ?",
                   (title, body, terms, vocab, rollup_id))
        if fts5:
            new = db.execute("SELECT id, title, body, terms, level, vocab, tags FROM "
                             "rollups_indexed WHERE id = ?", (rollup_id,)).fetchone()
            db.execute("INSERT INTO rollups_fts(rowid, title, body, terms, level, vocab, tags) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", tuple(new))
        db.execute("DELETE FROM vectors WHERE item_kind = 'rollup' AND item_id = ?",
                   (rollup_id,))
    return rid


def secure_delete(store: Store, on: bool) -> bool:
    """Set this connection's secure_delete (freed content is overwritten with zeros); return
    the previous setting. On PostgreSQL there is no such setting: a no-op returning False."""
    if store.dialect == "postgres":
        return False
    before = bool(store.scalar("PRAGMA secure_delete"))
    store.execute(f"PRAGMA secure_delete = {1 if on else 0}")
    return before


# The tables a redaction writes on PostgreSQL (and the full text's, which its triggers write).
PG_COMPACTED = ("events", "events_archive", "rollups", "tags", "vectors", "decisions",
                "redactions", "fts_stats", "fts_event_tags", "fts_rollups", "fts_rollup_words",
                "fts_rollup_terms", "fts_rollup_stats", "promotions", "pins", "side_effects",
                "approvals", "inputs", "telemetry")


def compact(store: Store) -> bool:
    """After a redaction's commit: merge every FTS segment (the old terms live on in segments
    until they merge; the cost grows with the index, about as long as reflect's optimize) and
    fold the WAL into the file, truncating it. Run with secure_delete on. Returns whether the
    checkpoint completed (a reader holding an old snapshot, e.g. a running loop mid-read,
    keeps the WAL until the next checkpoint).

    On PostgreSQL, compact = VACUUM of the tables a redaction touches (PG_COMPACTED): an
    UPDATE leaves the old row version in the heap until VACUUM removes it (a transaction still
    open from before the redaction keeps it longer); the bytes may stay in freed page space,
    in WAL segments not yet recycled and in base backups. Returns True once VACUUM ran (it runs
    outside any transaction: the store's connection commits each statement itself)."""
    if store.dialect == "postgres":
        store.execute(f"VACUUM {', '.join(PG_COMPACTED)}")
        return True
    store.execute("INSERT INTO events_fts(events_fts) VALUES ('optimize')")
    store.execute("INSERT INTO rollups_fts(rollups_fts) VALUES ('optimize')")
    busy, log_frames, done = store.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return not busy and (log_frames in (0, -1) or log_frames == done)


# Every table that keeps a copy of an event's text beside the events (ADR-0038): a redaction
# scrubs these too, or `redact` would leave the secret in the file, in later backups, in
# MEMORY.md (a queued promotion approved later) and in command output (`actions --all`).
# Decisions, tags and vectors are handled with the event itself (`overwrite_event`).
COPIES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("promotions", ("id",), ("text", "reason")),
    ("pins", ("id",), ("text",)),
    ("side_effects", ("turn", "key"), ("input", "result")),  # its primary key on both backends
    ("approvals", ("id",), ("arguments", "reason")),
    ("inputs", ("event_id",), ("last_error",)),
    ("telemetry", ("id",), ("data",)),
)


def scrub_copies(store: Store, scrub: Callable[[str | None], str | None]) -> dict[str, int]:
    """Rewrite, with `scrub`, every copy of an event's text kept outside the events (COPIES);
    return how many rows of each table changed. Inside the caller's transaction."""
    changed: dict[str, int] = {}
    with store.transaction() as db:
        for table, keys, columns in COPIES:
            rows = db.execute(f"SELECT {', '.join(keys)}, {', '.join(columns)} FROM {table}"
                              ).fetchall()
            where = " AND ".join(f"{k} = ?" for k in keys)
            for row in rows:
                new = [scrub(row[c]) for c in columns]
                if new == [row[c] for c in columns]:
                    continue
                sets = ", ".join(f"{c} = ?" for c in columns)
                db.execute(f"UPDATE {table} SET {sets} WHERE {where}",
                           (*new, *(row[k] for k in keys)))
                changed[table] = changed.get(table, 0) + 1
    return changed
