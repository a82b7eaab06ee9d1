"""Inputs: what a tick owes a model turn, and whether a completed turn has had it.

An input is an event that asks for a turn: a message (the owner's `tell`, an inbox file, another
agent over MCP), a promise that fell due, a ritual that fell due. Each gets one `inputs` row,
written in the same transaction as its event, and stays `pending` until a turn that completed
consumes it, in the same transaction as that turn's `tick_end` event (`finish_turn`). A failed
or killed turn leaves it pending: delivery to the model is at least once, and a completed turn
is recorded at most once per input (ADR-0012). An input whose turns fail 3 times in a row for a
reason of its own is `set_aside` until the owner retries it.

Imported events never get a row: history is never input. This module never decides what a
turn is; the loop does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from ..secrecy import redact
from .db import Store
from .events import COLUMNS, Event, history_of, now_iso

MAX_FAILURES = 3
# The largest owner message, in UTF-8 bytes, whichever door it comes through (4 MiB, about a
# million words: more than a model's context holds). `tell` refuses a bigger one; the inbox
# sets a bigger file aside unread (SQLite's 1 GB string limit once failed every tick).
MESSAGE_MAX_BYTES = 4 << 20
KINDS = ("message", "promise", "ritual", "watch", "action")


@dataclass(frozen=True)
class Input:
    event: Event
    kind: str
    status: str
    failures: int
    last_error: str | None

    @property
    def id(self) -> int:
        return int(self.event.id or 0)


def _add(db: Any, event_id: int, kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"input kind must be one of {KINDS}, not {kind!r}")
    now = now_iso()
    db.execute("INSERT OR IGNORE INTO inputs(event_id, kind, created_at, updated_at) "
               "VALUES (?, ?, ?, ?)", (event_id, kind, now, now))


def add(store: Store, event: Event, kind: str) -> int:
    """Append `event` and make it a pending input, in one transaction; return its id."""
    from .events import append

    with store.transaction():
        if store.dialect == "postgres":
            from . import pg_runner

            if cut := pg_runner.restore_unfinished(store):  # a fill would wipe it: refused
                raise StoreError(cut)
            pg_runner.notify(store)  # wakes the loop on whichever host runs it, at commit
        event_id = append(store, event)
        _add(store.conn, event_id, kind)
    return event_id


def add_message(store: Store, event: Event) -> int:
    """A message that asks for a turn (tell, inbox, MCP): the event and its input row."""
    return add(store, event, "message")


def pending(store: Store, limit: int | None = None, ids: Sequence[int] | None = None
            ) -> list[Input]:
    """Pending inputs, oldest first: at most `limit`, and of `ids` only when given (a tick
    reads the few it may take, never every waiting message whole). An input whose event
    reflect archived while it waited (the loop was down a month, or it was set aside and
    retried later) is read from the archive: it is still owed a turn."""
    among = "" if ids is None else f"AND event_id IN ({','.join('?' * len(ids))}) "
    rows = store.query(
        "SELECT event_id, kind, status, failures, last_error FROM inputs "
        f"WHERE status = 'pending' {among}ORDER BY event_id LIMIT ?",
        (*(ids or ()), -1 if limit is None else limit))
    events = history_of(store, [int(r["event_id"]) for r in rows])
    return [Input(events[i], r["kind"], r["status"], int(r["failures"]), r["last_error"])
            for r in rows if (i := int(r["event_id"])) in events]


def pending_count(store: Store) -> int:
    return int(store.scalar("SELECT COUNT(*) FROM inputs WHERE status = 'pending'") or 0)


def listing(store: Store, status: str) -> list[Input]:
    cols = ", ".join(f"h.{c.strip()}" for c in COLUMNS.split(","))
    rows = store.query(
        f"SELECT {cols}, i.kind AS input_kind, i.status, i.failures, i.last_error "
        "FROM inputs AS i JOIN history AS h ON h.id = i.event_id "
        "WHERE i.status = ? ORDER BY i.event_id", (status,))
    return [_from_row(r) for r in rows]


def _from_row(r: Any) -> Input:
    return Input(Event.from_row(r), r["input_kind"], r["status"], int(r["failures"]),
                 r["last_error"])


def counts(store: Store) -> dict[str, int]:
    rows = store.query("SELECT status, COUNT(*) FROM inputs GROUP BY status")
    out = {"pending": 0, "consumed": 0, "set_aside": 0}
    out.update({r[0]: int(r[1]) for r in rows})
    return out


def status_of(store: Store, event_id: int) -> str | None:
    value = store.scalar("SELECT status FROM inputs WHERE event_id = ?", (event_id,))
    return None if value is None else str(value)


def finish_turn(store: Store, tick_id: int, consumed: Sequence[int], tick_end: Event) -> int:
    """A completed turn: its inputs are consumed and its `tick_end` written, all or nothing.
    Only pending inputs are consumed, so a second completed turn can never take one twice."""
    from .events import append

    with store.transaction() as db:
        now = now_iso()
        for event_id in consumed:
            db.execute("UPDATE inputs SET status = 'consumed', tick_id = ?, updated_at = ? "
                       "WHERE event_id = ? AND status = 'pending'", (tick_id, now, event_id))
        return append(store, tick_end)


def consume(store: Store, event_ids: Sequence[int], tick_id: int | None) -> None:
    """Mark inputs consumed outside a turn (a built-in ritual that ran to its end)."""
    with store.transaction() as db:
        now = now_iso()
        for event_id in event_ids:
            db.execute("UPDATE inputs SET status = 'consumed', tick_id = ?, updated_at = ? "
                       "WHERE event_id = ? AND status = 'pending'", (tick_id, now, event_id))


def fail(store: Store, event_ids: Sequence[int], error: str) -> list[int]:
    """A turn failed for a reason of its inputs' own (a 400, a bug): count it against each;
    return the ids now set aside (3 failures in a row)."""
    set_aside = []
    with store.transaction() as db:
        now = now_iso()
        for event_id in event_ids:
            db.execute("UPDATE inputs SET failures = failures + 1, last_error = ?, "
                       "updated_at = ? WHERE event_id = ? AND status = 'pending'",
                       (redact(error)[:500], now, event_id))
            row = db.execute("SELECT failures FROM inputs WHERE event_id = ? AND "
                             "status = 'pending'", (event_id,)).fetchone()
            if row is not None and int(row[0]) >= MAX_FAILURES:
                db.execute("UPDATE inputs SET status = 'set_aside', updated_at = ? "
                           "WHERE event_id = ?", (now, event_id))
                set_aside.append(event_id)
    return set_aside


def note_error(store: Store, event_ids: Sequence[int], error: str) -> None:
    """A turn failed for a reason outside its inputs (an outage): say so, count nothing."""
    with store.transaction() as db:
        now = now_iso()
        for event_id in event_ids:
            db.execute("UPDATE inputs SET last_error = ?, updated_at = ? "
                       "WHERE event_id = ? AND status = 'pending'",
                       (redact(error)[:500], now, event_id))


def carry(store: Store, event_id: int, status: str, failures: int, error: str | None) -> None:
    """Give an input the standing another copy of this database gave it (a restore brings a
    set-aside input back set aside, with its failures, never as new)."""
    store.execute("UPDATE inputs SET status = ?, failures = ?, last_error = ?, updated_at = ? "
                  "WHERE event_id = ?", (status, failures, error, now_iso(), event_id))


def retry(store: Store, event_ids: Sequence[int] | None = None) -> list[int]:
    """Put set-aside inputs back to pending with a clean count (all of them when None)."""
    with store.transaction() as db:
        if event_ids is None:
            rows = db.execute("SELECT event_id FROM inputs WHERE status = 'set_aside' "
                              "ORDER BY event_id").fetchall()
            event_ids = [int(r[0]) for r in rows]
        back = []
        now = now_iso()
        for event_id in event_ids:
            cur = db.execute("UPDATE inputs SET status = 'pending', failures = 0, "
                             "updated_at = ? WHERE event_id = ? AND status = 'set_aside'",
                             (now, event_id))
            if cur.rowcount:
                back.append(int(event_id))
        return back


def pending_ritual(store: Store, name: str) -> bool:
    """Whether a due ritual of this name already waits (so a late catch-up never doubles it)."""
    waiting = [int(r[0]) for r in store.query(
        "SELECT event_id FROM inputs WHERE status = 'pending' AND kind = 'ritual'")]
    return any(e.meta.get("ritual") == name for e in history_of(store, waiting).values())


def last_failure(store: Store) -> dict[str, Any] | None:
    row = store.query("SELECT event_id, last_error, updated_at FROM inputs "
                      "WHERE last_error IS NOT NULL AND status != 'consumed' "
                      "ORDER BY updated_at DESC LIMIT 1")
    if not row:
        return None
    return {"input": int(row[0][0]), "error": row[0][1], "at": row[0][2]}
