"""Promises: follow-ups the coworker committed to. A promise is a `promise` event whose meta
holds `due` (UTC ISO-8601); it is fulfilled when a `promise_due` event names it. Read side only."""

from __future__ import annotations

from .db import Store
from .events import COLUMNS, Event

_OPEN = """
    FROM events AS p
   WHERE p.kind = 'promise'
     AND NOT EXISTS (SELECT 1 FROM events AS d
                      WHERE d.kind = 'promise_due'
                        AND json_extract(d.meta, '$.promise_id') = p.id)
"""


def due(store: Store, now: str) -> list[Event]:
    rows = store.query(
        f"SELECT {', '.join('p.' + c.strip() for c in COLUMNS.split(','))} {_OPEN} "
        "AND json_extract(p.meta, '$.due') <= ? ORDER BY p.id",
        (now,),
    )
    return [Event.from_row(r) for r in rows]


def next_due(store: Store) -> str | None:
    value = store.scalar(f"SELECT MIN(json_extract(p.meta, '$.due')) {_OPEN}")
    return str(value) if value else None
