"""Replies to the owner as the owner reads them: the `outbox` events (ADR-0042), which of them
the owner has read, and the reply to one message.

Read marks are events (`replies_read`, meta `ids`), appended like every other record, so what
the owner read and when stays in the history; a reply is unread until such an event names it.
It reads the `history` view (an archived reply is still a reply); it never decides anything.
"""

from __future__ import annotations

from .db import Store
from .events import COLUMNS, Event, append

READ_KIND = "replies_read"
SHOWN = 50  # replies `--all` lists at most, the newest


def _each(store: Store) -> str:
    """SQLite's json_each, or the PostgreSQL schema's function that answers as it does."""
    return "json_each" if store.dialect == "sqlite" else "sqlite_json_each"


def read_ids(store: Store) -> set[int]:
    """The replies a `replies_read` event names."""
    rows = store.query(
        f"SELECT CAST(j.value AS INTEGER) FROM history AS h, {_each(store)}(h.meta, '$.ids') "
        "AS j WHERE h.kind = ?", (READ_KIND,))
    return {int(r[0]) for r in rows}


def listed(store: Store, every: bool = False) -> list[tuple[Event, bool]]:
    """(reply, read): the unread replies oldest first; with `every`, then the newest read
    ones too (at most SHOWN in all)."""
    read = read_ids(store)
    rows = store.query(f"SELECT {COLUMNS}, source FROM history WHERE kind = 'outbox' "
                       "ORDER BY id")
    replies = [Event.from_row(r) for r in rows]
    unread = [(e, False) for e in replies if e.id not in read]
    if not every:
        return unread
    older = [(e, True) for e in replies if e.id in read]
    return (unread + older[::-1])[:max(SHOWN, len(unread))]


def mark_read(store: Store, ids: list[int]) -> int | None:
    """Record that the owner was shown these replies; the event's id (None: nothing new)."""
    new = sorted(set(ids) - read_ids(store))
    if not new:
        return None
    return append(store, Event(kind=READ_KIND, body=f"the owner read replies {new}",
                               actor="owner", author_kind="system", meta={"ids": new}))


def answering(store: Store, message_id: int) -> Event | None:
    """The first reply that records `message_id` among the messages it answers."""
    rows = store.query(
        f"SELECT {COLUMNS}, source FROM history AS h WHERE kind = 'outbox' AND EXISTS "
        f"(SELECT 1 FROM {_each(store)}(h.meta, '$.in_reply_to') AS j "
        "WHERE CAST(j.value AS INTEGER) = ?) "
        "ORDER BY id LIMIT 1", (message_id,))
    return Event.from_row(rows[0]) if rows else None
