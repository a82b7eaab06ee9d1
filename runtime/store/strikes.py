"""The coworker's strikes of MEMORY.md entries, read back from the log.

Owns finding the latest `memory_strike` event the coworker recorded for an entry (hot or
archived): its id and the snapshot number it kept before the strike. An imported strike is
history, not this MEMORY.md's state, and is never found. It never writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .db import Store
from .events import read_meta


@dataclass(frozen=True)
class Strike:
    """The event that struck an entry, and the MEMORY.md snapshot taken before it (None when
    the event names none, or not as a number)."""

    event_id: int
    snapshot: int | None


def latest(store: Store, entry_id: str) -> Strike | None:
    """The newest strike the coworker recorded of MEMORY.md entry `entry_id`; None if none."""
    rows = store.query(
        "SELECT id, meta FROM history WHERE kind = "
        "'memory_strike' AND json_extract(meta, '$.entry_id') = ? AND "
        "json_extract(meta, '$.imported') IS NULL ORDER BY id DESC LIMIT 1", (entry_id,))
    if not rows:
        return None
    # read from the meta itself: PostgreSQL's json_extract gives every value as text, and
    # a snapshot written as "3" (a string) is no number on either backend (ADR-0008)
    number = read_meta(rows[0][1], rows[0][0]).get("snapshot")
    return Strike(int(rows[0][0]), number if type(number) is int else None)
