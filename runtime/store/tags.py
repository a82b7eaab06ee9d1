"""Tags: extra search words on an event or a rollup, and who gave them.

A tag is a row in `tags` with an origin: 'owner' (`coworker tag`), 'model' (the keywords
reflect asks the model for, per episode) or 'offline' (the keywords reflect finds in the
history itself). The FTS indexes read every tag, whatever its origin, through the `history`
and `rollups_indexed` views: a tag is a way in for search and for the walk's and recall's entry
candidates, kept beside the text, never part of an item's body (so never lexical evidence of
it). Adding tags re-indexes each item in the same transaction (the external-content FTS row is
deleted with its old values and written again), and never touches the item's body or
timestamp, so events stay append-only. A word an item already has is not added again, whoever
gave it first.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from .db import Store
from .events import now_iso

ORIGINS = ("owner", "model", "offline")

_EVENT_ROW = "SELECT id, body, kind, actor, tags FROM history WHERE id = ?"
_ROLLUP_ROW = ("SELECT id, title, body, terms, level, vocab, tags FROM rollups_indexed "
               "WHERE id = ?")


def for_items(store: Store, kind: str, ids: Sequence[int]) -> dict[int, str]:
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    concat = ("string_agg(word, ' ' ORDER BY id)" if getattr(store, "dialect", "") == "postgres"
              else "group_concat(word, ' ')")
    rows = store.query(
        f"SELECT item_id, {concat} FROM tags WHERE item_kind = ? AND item_id IN "
        f"({marks}) GROUP BY item_id", (kind, *ids))
    return {int(r[0]): str(r[1]) for r in rows}


def listing(store: Store, kind: str, item_id: int) -> list[tuple[str, str]]:
    """An item's tags as (word, origin), oldest first."""
    return [(str(r[0]), str(r[1])) for r in store.query(
        "SELECT word, origin FROM tags WHERE item_kind = ? AND item_id = ? ORDER BY id",
        (kind, item_id))]


def with_origin(store: Store, kind: str, origin: str) -> set[int]:
    """The ids of the items that hold at least one tag of `origin`."""
    return {int(r[0]) for r in store.query(
        "SELECT DISTINCT item_id FROM tags WHERE item_kind = ? AND origin = ?", (kind, origin))}


def episodes_without(store: Store, origin: str, limit: int) -> list[int]:
    """Level-1 rollups (episodes) that hold no tag of `origin` yet, newest first."""
    return [int(r[0]) for r in store.query(
        "SELECT id FROM rollups AS r WHERE level = 1 AND NOT EXISTS (SELECT 1 FROM tags AS t "
        "WHERE t.item_kind = 'rollup' AND t.origin = ? AND t.item_id = r.id) "
        "ORDER BY id DESC LIMIT ?", (origin, limit))]


def add(store: Store, kind: str, item_id: int, words: Sequence[str],
        origin: str = "owner") -> list[str]:
    """Tag an item; return the words that were new. Raises LookupError for an unknown item."""
    with store.transaction() as db:
        return _add(db, kind, item_id, words, origin, _reindex(store))


def add_many(store: Store, kind: str, words: Mapping[int, Sequence[str]],
             origin: str) -> dict[int, list[str]]:
    """Tag several items in one transaction; the new words per item. An unknown item raises
    LookupError and nothing is written."""
    reindex = _reindex(store)
    with store.transaction() as db:
        return {i: new for i, ws in words.items()
                if (new := _add(db, kind, i, ws, origin, reindex))}


def _reindex(store: Store) -> bool:
    """Whether a tag added re-indexes its item here (SQLite's FTS5 tables); on PostgreSQL both
    full texts follow the tags table by their own triggers (pg_fts)."""
    return getattr(store, "dialect", "sqlite") != "postgres"


def _add(db: sqlite3.Connection, kind: str, item_id: int, words: Sequence[str],
         origin: str, reindex: bool = True) -> list[str]:
    if origin not in ORIGINS:
        raise ValueError(f"unknown tag origin {origin!r}: use one of {', '.join(ORIGINS)}")
    row = db.execute(_EVENT_ROW if kind == "event" else _ROLLUP_ROW, (item_id,)).fetchone()
    if row is None:
        raise LookupError(f"no {kind} {item_id}")
    added = []
    for w in dict.fromkeys(w.strip().lower() for w in words if w.strip()):
        cur = db.execute("INSERT OR IGNORE INTO tags(item_kind, item_id, word, ts, origin) "
                         "VALUES (?, ?, ?, ?, ?)", (kind, item_id, w, now_iso(), origin))
        if cur.rowcount:
            added.append(w)
    if not added or not reindex:
        return added
    if kind == "event":
        db.execute("INSERT INTO events_fts(events_fts, rowid, body, kind, actor, tags) "
                   "VALUES ('delete', ?, ?, ?, ?, ?)", tuple(row))
        new = db.execute(_EVENT_ROW, (item_id,)).fetchone()
        db.execute("INSERT INTO events_fts(rowid, body, kind, actor, tags) "
                   "VALUES (?, ?, ?, ?, ?)", tuple(new))
    else:
        db.execute("INSERT INTO rollups_fts(rollups_fts, rowid, title, body, terms, level, "
                   "vocab, tags) VALUES ('delete', ?, ?, ?, ?, ?, ?, ?)", tuple(row))
        new = db.execute(_ROLLUP_ROW, (item_id,)).fetchone()
        db.execute("INSERT INTO rollups_fts(rowid, title, body, terms, level, vocab, tags) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", tuple(new))
    return added
