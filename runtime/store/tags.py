"""Tags: the owner's extra search words (synonyms) on an event or a rollup.

A tag is a row in `tags`; the FTS indexes read it through the `history` and `rollups_indexed`
views. Adding one re-indexes that item in one transaction (the external-content FTS row is
deleted with its old values and written again), and never touches the item's body or
timestamp, so events stay append-only.
"""

from __future__ import annotations

from collections.abc import Sequence

from .db import Store
from .events import now_iso


def for_items(store: Store, kind: str, ids: Sequence[int]) -> dict[int, str]:
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = store.query(
        f"SELECT item_id, group_concat(word, ' ') FROM tags WHERE item_kind = ? AND item_id IN "
        f"({marks}) GROUP BY item_id", (kind, *ids))
    return {int(r[0]): str(r[1]) for r in rows}


def add(store: Store, kind: str, item_id: int, words: Sequence[str]) -> list[str]:
    """Tag an item; return the words that were new. Raises LookupError for an unknown item."""
    with store.transaction() as db:
        if kind == "event":
            row = db.execute("SELECT id, body, kind, actor, tags FROM history WHERE id = ?",
                             (item_id,)).fetchone()
        else:
            row = db.execute("SELECT id, title, body, terms, level, vocab, tags FROM "
                             "rollups_indexed WHERE id = ?", (item_id,)).fetchone()
        if row is None:
            raise LookupError(f"no {kind} {item_id}")
        added = []
        for w in dict.fromkeys(w.strip().lower() for w in words if w.strip()):
            cur = db.execute("INSERT OR IGNORE INTO tags(item_kind, item_id, word, ts) "
                             "VALUES (?, ?, ?, ?)", (kind, item_id, w, now_iso()))
            if cur.rowcount:
                added.append(w)
        if not added:
            return []
        if kind == "event":
            db.execute("INSERT INTO events_fts(events_fts, rowid, body, kind, actor, tags) "
                       "VALUES ('delete', ?, ?, ?, ?, ?)", tuple(row))
            new = db.execute("SELECT id, body, kind, actor, tags FROM history WHERE id = ?",
                             (item_id,)).fetchone()
            db.execute("INSERT INTO events_fts(rowid, body, kind, actor, tags) "
                       "VALUES (?, ?, ?, ?, ?)", tuple(new))
        else:
            db.execute("INSERT INTO rollups_fts(rollups_fts, rowid, title, body, terms, level, "
                       "vocab, tags) VALUES ('delete', ?, ?, ?, ?, ?, ?, ?)", tuple(row))
            new = db.execute("SELECT id, title, body, terms, level, vocab, tags FROM "
                             "rollups_indexed WHERE id = ?", (item_id,)).fetchone()
            db.execute("INSERT INTO rollups_fts(rowid, title, body, terms, level, vocab, tags) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", tuple(new))
        return added
