"""Vectors: embeddings of events and rollups, keyed by (item kind, item, model), with the hash
of the text embedded. A rollup's text is its title and summary (`rollup_text`). Only the
newest events are embedded (`window_start`); a vector never leaves the table when its event
falls out of the window, it is only no longer loaded."""

from __future__ import annotations

from collections.abc import Sequence

from .db import Store
from .events import now_iso


def missing_events(store: Store, model: str, skip_kinds: Sequence[str], after_id: int = 0,
                   page: int = 500) -> list[tuple[int, str]]:
    """Content events (hot or archived) with no vector for `model`, in id order."""
    marks = ",".join("?" * len(skip_kinds)) or "''"
    rows = store.query(
        f"SELECT h.id, h.body FROM history AS h WHERE h.id > ? AND h.kind NOT IN ({marks}) "
        "AND h.body != '' AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.item_kind = 'event' "
        "AND v.item_id = h.id AND v.model = ?) ORDER BY h.id LIMIT ?",
        (after_id, *skip_kinds, model, page))
    return [(int(r[0]), str(r[1])) for r in rows]


def rollup_text(title: str | None, body: str) -> str:
    return f"{title}: {body}" if title else body


def missing_rollups(store: Store, model: str, after_id: int = 0, page: int = 500
                    ) -> list[tuple[int, str]]:
    """Rollups with no vector for `model`, in id order, with the text to embed."""
    rows = store.query(
        "SELECT r.id, r.title, r.body FROM rollups AS r WHERE r.id > ? AND NOT EXISTS (SELECT 1 "
        "FROM vectors v WHERE v.item_kind = 'rollup' AND v.item_id = r.id AND v.model = ?) "
        "ORDER BY r.id LIMIT ?", (after_id, model, page))
    return [(int(r[0]), rollup_text(r[1], str(r[2]))) for r in rows]


def write(store: Store, model: str, rows: Sequence[tuple[int, int, bytes, str]],
          kind: str = "event") -> None:
    """(item_id, dim, vector bytes, text hash) rows for events (or rollups), in one
    transaction."""
    ts = now_iso()
    with store.transaction() as db:
        db.executemany(
            "INSERT INTO vectors(item_kind, item_id, model, dim, vector, text_hash, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(item_kind, item_id, model) DO UPDATE SET "
            "dim = excluded.dim, vector = excluded.vector, text_hash = excluded.text_hash, "
            "created_at = excluded.created_at",
            [(kind, i, model, dim, blob, h, ts) for i, dim, blob, h in rows])


def all_for(store: Store, model: str, kind: str = "event", after_id: int = 0
            ) -> list[tuple[int, bytes, int]]:
    """(item_id, vector, dim) of one kind and model, of items with id > after_id, in id
    order."""
    return [(int(r[0]), bytes(r[1]), int(r[2] or 0)) for r in store.query(
        "SELECT item_id, vector, dim FROM vectors WHERE item_kind = ? AND model = ? AND "
        "item_id > ? ORDER BY item_id", (kind, model, after_id))]


def window_start(store: Store, window: int) -> int:
    """The id after which the newest `window` events lie (0: the history is shorter)."""
    top = int(store.scalar("SELECT MAX(id) FROM (SELECT MAX(id) AS id FROM events UNION ALL "
                           "SELECT MAX(id) FROM events_archive) AS top") or 0)
    return max(0, top - window)


def count(store: Store, model: str, kind: str | None = None, after_id: int = 0) -> int:
    """How many vectors this model has (of one kind, of items with id > after_id)."""
    if kind is None:
        return int(store.scalar("SELECT COUNT(*) FROM vectors WHERE model = ?", (model,)) or 0)
    return int(store.scalar("SELECT COUNT(*) FROM vectors WHERE model = ? AND item_kind = ? "
                            "AND item_id > ?", (model, kind, after_id)) or 0)


def signature(store: Store, model: str, after_id: int = 0) -> tuple[int, ...]:
    """What changes whenever a loaded matrix would: the count of this model's event vectors
    with id > after_id and of its rollup vectors, and the counter every write to the vectors
    moves (migration m015: a delete and a rewrite leave count and rowids as they were)."""
    out: list[int] = []
    for kind, after in (("event", after_id), ("rollup", 0)):
        out.append(int(store.scalar("SELECT COUNT(*) FROM vectors WHERE item_kind = ? AND "
                                    "item_id > ? AND model = ?", (kind, after, model)) or 0))
    if store.has_table("vector_changes"):
        out.append(int(store.scalar("SELECT n FROM vector_changes WHERE id = 1") or 0))
    else:  # a database not migrated yet (a reader never migrates): the figures before m015
        out += [int(store.scalar("SELECT coalesce(MAX(rowid), 0) FROM vectors WHERE "
                                 "item_kind = ?", (kind,)) or 0) for kind in ("event", "rollup")]
        out.append(int(store.scalar("SELECT coalesce(MAX(id), 0) FROM redactions") or 0))
    return tuple(out)


def with_bodies(store: Store, model: str) -> list[tuple[int, bytes, str, str]]:
    """(item_id, vector, text_hash, current body) for the integrity check."""
    return [(int(r[0]), bytes(r[1]), str(r[2]), str(r[3])) for r in store.query(
        "SELECT v.item_id, v.vector, v.text_hash, h.body FROM vectors v JOIN history h "
        "ON h.id = v.item_id WHERE v.item_kind = 'event' AND v.model = ? ORDER BY v.item_id",
        (model,))]
