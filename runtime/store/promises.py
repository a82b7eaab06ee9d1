"""Promises: follow-ups the coworker committed to. A promise is a `promise` event whose meta
holds `due` (UTC ISO-8601); when it falls due the loop writes a `promise_due` event naming it,
which is an input of the next turn. Only promises the loop recorded itself count: an imported
row is never loop state. Read side only."""

from __future__ import annotations

from .db import Store
from .events import COLUMNS, Event

_OPEN = """
    FROM events AS p
   WHERE p.kind = 'promise'
     AND json_extract(p.meta, '$.imported') IS NULL
     AND NOT EXISTS (SELECT 1 FROM events AS d
                      WHERE d.kind = 'promise_due'
                        AND CAST(json_extract(d.meta, '$.promise_id') AS INTEGER) = p.id)
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
