"""The loop's own events: one way to append one.

Owns the defaults of what the loop records (actor "coworker", author_kind "system", the meta
as keyword arguments). It appends through store.events; it never reads and never speaks SQL.
"""

from __future__ import annotations

from typing import Any

from ..store import Event, Store
from ..store import events as ev


def record(store: Store, kind: str, body: str, /, *, tick_id: int | None = None,
           author_kind: str = "system", actor: str = "coworker", **meta: Any) -> int:
    """Append one event; its id."""
    return ev.append(store, Event(kind=kind, body=body, actor=actor, author_kind=author_kind,
                                  meta=meta, tick_id=tick_id))
