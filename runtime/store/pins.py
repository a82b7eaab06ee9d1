"""Pins: text the owner keeps in context on every tick. Unpinning marks, never deletes."""

from __future__ import annotations

from dataclasses import dataclass

from .db import Store, new_id
from .events import now_iso


@dataclass(frozen=True)
class Pin:
    id: int
    ts: str
    text: str


def active(store: Store) -> list[Pin]:
    rows = store.query("SELECT id, ts, text FROM pins WHERE unpinned_at IS NULL ORDER BY id")
    return [Pin(r["id"], r["ts"], r["text"]) for r in rows]


def add(store: Store, text: str) -> Pin:
    ts = now_iso()
    with store.transaction() as db:
        cur = db.execute("INSERT INTO pins(ts, text) VALUES (?, ?)", (ts, text))
        return Pin(new_id(cur), ts, text)


def unpin(store: Store, pin_id: int) -> bool:
    with store.transaction() as db:
        cur = db.execute(
            "UPDATE pins SET unpinned_at = ? WHERE id = ? AND unpinned_at IS NULL",
            (now_iso(), pin_id),
        )
        return cur.rowcount == 1
