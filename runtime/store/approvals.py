"""The approval queue: MCP tool calls that wait for the owner, and what became of each.

Owns the `approvals` table and its statuses (`Status`). A call the loop queues (an APPROVE
tool while the server and the coworker run live, ADR-0017) is a `waiting` row: the tool, its
arguments, the model's stated reason, the tick and the events that led to it. The owner
approves or rejects it (`decide`); one not decided before `expires_at` expires (`expire`).
An approved row runs at most once: `start` is the only way to `running`, a single UPDATE
that succeeds for one caller, and a row left `running` by a kill is never started again
(whether its call took effect is unknown, so it is not repeated). Then `finish` records
`done` or `failed` with the event that holds the result.

    waiting -> approved -> running -> done | failed
            -> rejected
            -> expired

The database refuses any other move and any change to what was asked (a trigger), so a bug
elsewhere cannot re-run or rewrite an action. Arguments, reason and why pass through
`secrecy.redact` before they are written. A queued call is known by its turn and its
tool_use id (`turn`, the first tick of the tick's chain: ADR-0034): an attempt that takes the
turn up again gets the row its first attempt wrote, and a new turn handed the same id by its
model server queues its own call, never an old approval. It never calls a tool and never
decides anything the owner or the loop has not asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from ..secrecy import redact
from . import turns
from .db import Store
from .events import finite, iso_z, now_iso


class Status(StrEnum):
    """An approval's status as stored."""

    WAITING = "waiting"    # queued: the owner has not decided yet
    APPROVED = "approved"  # the owner said yes; it runs at the next tick
    REJECTED = "rejected"  # the owner said no; it never runs
    EXPIRED = "expired"    # not decided within [mcp] approval_ttl; it never runs
    RUNNING = "running"    # taken by a tick; never taken again, even after a kill
    DONE = "done"          # it ran and its server answered
    FAILED = "failed"      # it ran and failed (a tool error, a crash, a timeout)


DECISIONS = (Status.APPROVED, Status.REJECTED)


class WrongStatus(ValueError):
    """The approval is not in the status the move needs; `status` is the one it is in."""

    def __init__(self, approval_id: int, status: str, wanted: str) -> None:
        super().__init__(f"approval {approval_id} is {status}, not {wanted}")
        self.approval_id = approval_id
        self.status = status


@dataclass(frozen=True)
class Approval:
    id: int
    ts: str
    tick_id: int | None
    server: str
    tool: str                # the MCP tool's own name
    name: str                # the full name the model used: <server>__<tool>
    arguments: dict[str, Any]
    reason: str | None       # the model's stated reason (its text beside the call)
    sources: list[int]       # the events that led to it (the tick's input event ids)
    tool_use_id: str | None
    status: str
    expires_at: str
    decided_at: str | None
    why: str | None          # the owner's reason for a rejection (or an approval)
    result_event: int | None


def _redacted(value: Any) -> Any:
    """`value` with every string in it, keys included, redacted (redacting the JSON text
    instead would miss a secret JSON escapes, e.g. one holding a quote)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


def _arguments_json(arguments: dict[str, Any]) -> str:
    return json.dumps(finite(_redacted(arguments)), ensure_ascii=False, allow_nan=False,
                      default=str)


def _load(raw: str | None, empty: Any) -> Any:
    try:
        value = json.loads(raw) if raw else empty
    except ValueError:
        return empty
    return value if isinstance(value, type(empty)) else empty


def _from_row(r: Any) -> Approval:
    return Approval(r["id"], r["ts"], r["tick_id"], r["server"], r["tool"], r["name"],
                    _load(r["arguments"], {}), r["reason"],
                    [int(i) for i in _load(r["sources"], []) if isinstance(i, int)],
                    r["tool_use_id"], r["status"], r["expires_at"], r["decided_at"], r["why"],
                    r["result_event"])


def add(store: Store, *, tick_id: int | None, server: str, tool: str, name: str,
        arguments: dict[str, Any], reason: str | None, sources: list[int],
        tool_use_id: str | None, ttl_s: int, now: datetime | None = None) -> Approval:
    """Queue a call for the owner; it expires `ttl_s` seconds from now. Idempotent on the
    turn of `tick_id` and `tool_use_id`: a replayed turn gets the row its first attempt wrote,
    unchanged; another turn that reuses the id queues its own."""
    when = now or datetime.now(UTC)
    turn = turns.turn_of(store, tick_id)
    with store.transaction() as db:
        if tool_use_id is not None:
            row = db.execute("SELECT * FROM approvals WHERE turn = ? AND tool_use_id = ?",
                             (turn, tool_use_id)).fetchone()
            if row is not None:
                return _from_row(row)
        cur = db.execute(
            "INSERT INTO approvals(ts, tick_id, server, tool, name, arguments, reason, sources, "
            "tool_use_id, turn, status, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'waiting', ?)",
            (iso_z(when), tick_id, server, tool, name, _arguments_json(arguments),
             redact(reason) if reason else None, json.dumps([int(i) for i in sources]),
             tool_use_id, turn, iso_z(when + timedelta(seconds=ttl_s))))
        return _from_row(db.execute("SELECT * FROM approvals WHERE id = ?",
                                    (cur.lastrowid,)).fetchone())


def get(store: Store, approval_id: int) -> Approval | None:
    rows = store.query("SELECT * FROM approvals WHERE id = ?", (approval_id,))
    return _from_row(rows[0]) if rows else None


def listing(store: Store, status: str | None = Status.WAITING, limit: int = 200) -> list[Approval]:
    """Approvals in `status` (every one when None), newest first."""
    if status:
        rows = store.query("SELECT * FROM approvals WHERE status = ? ORDER BY id DESC LIMIT ?",
                           (str(status), limit))
    else:
        rows = store.query("SELECT * FROM approvals ORDER BY id DESC LIMIT ?", (limit,))
    return [_from_row(r) for r in rows]


def decide(store: Store, approval_id: int, status: str, why: str | None,
           now: str | None = None) -> Approval:
    """The owner's decision on a waiting approval: `approved` or `rejected`. LookupError for
    an unknown id; WrongStatus (a ValueError) when it is not waiting, or is past its expiry
    (status "expired", though `expire` has not marked it yet)."""
    if status not in DECISIONS:
        raise ValueError(f"an approval is decided as approved or rejected, not {status!r}")
    at = now or now_iso()
    with store.transaction() as db:
        cur = db.execute("UPDATE approvals SET status = ?, decided_at = ?, why = ? "
                         "WHERE id = ? AND status = 'waiting' AND expires_at > ?",
                         (str(status), at, redact(why) if why else None, approval_id, at))
        if cur.rowcount == 1:
            return _from_row(db.execute("SELECT * FROM approvals WHERE id = ?",
                                        (approval_id,)).fetchone())
    current = get(store, approval_id)
    if current is None:
        raise LookupError(f"no approval {approval_id}")
    shown = Status.EXPIRED if current.status == Status.WAITING else current.status
    raise WrongStatus(approval_id, shown, Status.WAITING)


def expire(store: Store, now_iso: str) -> list[int]:
    """Mark every waiting approval whose `expires_at` is at or before `now_iso` expired;
    return their ids, oldest first."""
    with store.transaction() as db:
        ids = [int(r[0]) for r in db.execute(
            "SELECT id FROM approvals WHERE status = 'waiting' AND expires_at <= ? ORDER BY id",
            (now_iso,))]
        if ids:
            marks = ",".join("?" * len(ids))
            db.execute(f"UPDATE approvals SET status = 'expired', decided_at = ? "
                       f"WHERE status = 'waiting' AND id IN ({marks})", (now_iso, *ids))
    return ids


def approved(store: Store) -> list[Approval]:
    """Approved and not yet started, oldest first: what the next tick runs."""
    rows = store.query("SELECT * FROM approvals WHERE status = 'approved' ORDER BY id")
    return [_from_row(r) for r in rows]


def start(store: Store, approval_id: int) -> bool:
    """Take an approved row to `running`; True for the one caller that did. False when it is
    not approved (already running, done, failed, or never approved): do not run it."""
    with store.transaction() as db:
        cur = db.execute("UPDATE approvals SET status = 'running' "
                         "WHERE id = ? AND status = 'approved'", (approval_id,))
        return cur.rowcount == 1


def finish(store: Store, approval_id: int, ok: bool, result_event: int | None) -> None:
    """Record how a running approval ended: `done` or `failed`, and the event holding the
    result. LookupError for an unknown id; WrongStatus when it is not running."""
    with store.transaction() as db:
        cur = db.execute("UPDATE approvals SET status = ?, result_event = ? "
                         "WHERE id = ? AND status = 'running'",
                         (Status.DONE if ok else Status.FAILED, result_event, approval_id))
        if cur.rowcount == 1:
            return
    current = get(store, approval_id)
    if current is None:
        raise LookupError(f"no approval {approval_id}")
    raise WrongStatus(approval_id, current.status, Status.RUNNING)


def counts(store: Store) -> dict[str, int]:
    """How many approvals are in each status (every status, zeros included). A database not
    yet migrated to hold the table (a read-only open of an older one) counts none."""
    out = {s.value: 0 for s in Status}
    if not store.has_table("approvals"):
        return out
    out.update({r[0]: int(r[1]) for r in
                store.query("SELECT status, COUNT(*) FROM approvals GROUP BY status")})
    return out
