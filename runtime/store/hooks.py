"""Hook deliveries: a webhook another system sent, taken once.

Owns the `hook_deliveries` table (m019): one row a webhook taken (`coworker serve`'s
POST /hooks/NAME), written in the same transaction as the input event it became, so a
delivery is either taken whole (row, event, pending input) or not at all. `take` refuses a
redelivery: the same delivery id for the same hook (GitHub's X-GitHub-Delivery, or the header
a hook names; unique, so two processes cannot both take it), or the same body (its digest)
for the same hook within `window_s` (a delivery id is not signed: a replayed request may carry
a new one). It never checks a signature and never reads a payload; runtime/serve/ does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .db import Store
from .events import Event, append, iso_z, now_iso
from .inputs import _add as add_input

DUPLICATE_WINDOW_S = 3600  # a body seen again within an hour is the same delivery


@dataclass(frozen=True)
class Taken:
    """What `take` did: the event the delivery became, or the earlier one it repeats."""

    event_id: int
    duplicate: bool


def take(store: Store, hook: str, delivery_id: str | None, digest: str, event: Event,
         event_type: str | None = None, window_s: float = DUPLICATE_WINDOW_S) -> Taken:
    """Record `event` as a pending message input and its delivery row, all or nothing; or,
    when the hook already took this delivery id, or this digest within `window_s`, nothing
    (`Taken(earlier event id, duplicate=True)`)."""
    now = datetime.now(UTC)
    since = iso_z(now - timedelta(seconds=window_s))
    with store.transaction() as db:
        row = db.execute(
            "SELECT event_id FROM hook_deliveries WHERE hook = ? AND delivery_id = ? "
            "UNION ALL SELECT event_id FROM hook_deliveries "
            "WHERE hook = ? AND digest = ? AND received_at >= ? LIMIT 1",
            (hook, delivery_id, hook, digest, since)).fetchone()
        if row is not None:
            return Taken(int(row[0]), True)
        event_id = append(store, event)
        add_input(db, event_id, "message")
        db.execute("INSERT INTO hook_deliveries(hook, delivery_id, digest, event_type, event_id, "
                   "received_at) VALUES (?, ?, ?, ?, ?, ?)",
                   (hook, delivery_id, digest, event_type, event_id, now_iso()))
    return Taken(event_id, False)


def count(store: Store, hook: str | None = None) -> int:
    """Deliveries taken (by one hook when named)."""
    if hook is None:
        return int(store.scalar("SELECT COUNT(*) FROM hook_deliveries") or 0)
    return int(store.scalar("SELECT COUNT(*) FROM hook_deliveries WHERE hook = ?", (hook,))
               or 0)
