"""Promotions: candidates for MEMORY.md and what the gate decided about each, with why.

Owns the `promotions` rows and their statuses (`Status`); it never decides one: the gate does.
`supersedes` is the MEMORY.md entry id a promotion replaces (ADR-0018), or None."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..secrecy import redact
from .db import Store, new_id
from .events import now_iso


class Status(StrEnum):
    """A promotion's status as stored: what the gate decided, then what the owner did."""

    APPLIED = "applied"  # the gate wrote it to MEMORY.md
    QUEUED = "queued"  # waiting for the owner's review
    REFUSED = "refused"  # the gate turned it down
    APPROVED = "approved"  # the owner approved a queued one: it is in MEMORY.md
    REJECTED = "rejected"  # the owner rejected a queued one


@dataclass(frozen=True)
class Promotion:
    id: int
    ts: str
    text: str
    source_events: list[int] | None
    confidence: float | None
    status: str
    reason: str | None
    origin: str | None
    decided_at: str | None
    entry_id: str | None
    supersedes: str | None = None  # the MEMORY.md entry it replaces (ADR-0018)


def _from_row(r: Any) -> Promotion:
    return Promotion(r["id"], r["ts"], r["text"],
                     json.loads(r["source_events"]) if r["source_events"] else None,
                     r["confidence"], r["status"], r["reason"], r["origin"], r["decided_at"],
                     r["entry_id"], r["supersedes"])


def add(store: Store, text: str, source_events: list[int] | None, confidence: float | None,
        status: str, reason: str, origin: str, entry_id: str | None = None,
        supersedes: str | None = None) -> Promotion:
    ts = now_iso()
    with store.transaction() as db:
        cur = db.execute(
            "INSERT INTO promotions(ts, text, source_events, confidence, status, reason, origin, "
            "decided_at, entry_id, supersedes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (ts, redact(text), json.dumps(source_events) if source_events else None, confidence,
             status, redact(reason), origin, ts if status != Status.QUEUED else None, entry_id,
             supersedes))
        return _from_row(db.execute("SELECT * FROM promotions WHERE id = ?",
                                    (new_id(cur),)).fetchone())


def get(store: Store, promotion_id: int) -> Promotion | None:
    rows = store.query("SELECT * FROM promotions WHERE id = ?", (promotion_id,))
    return _from_row(rows[0]) if rows else None


def listing(store: Store, status: str | None = None, limit: int = 200) -> list[Promotion]:
    if status:
        rows = store.query("SELECT * FROM promotions WHERE status = ? ORDER BY id DESC LIMIT ?",
                           (status, limit))
    else:
        rows = store.query("SELECT * FROM promotions ORDER BY id DESC LIMIT ?", (limit,))
    return [_from_row(r) for r in rows]


def entry_ids_ever_used(store: Store) -> list[str]:
    """Every MEMORY.md entry id the store has recorded (applied, approved, superseded, or
    struck), archived strikes too. A strike counts only when the coworker recorded it: an
    imported `memory_strike` row is history, not this MEMORY.md's state."""
    rows = store.query(
        "SELECT entry_id FROM promotions WHERE entry_id IS NOT NULL UNION ALL "
        "SELECT supersedes FROM promotions WHERE supersedes IS NOT NULL UNION ALL "
        "SELECT json_extract(meta, '$.entry_id') FROM history WHERE kind = 'memory_strike' "
        "AND json_extract(meta, '$.imported') IS NULL")
    return [str(r[0]) for r in rows if r[0]]


def decide(store: Store, promotion_id: int, status: str, reason: str | None,
           entry_id: str | None = None) -> None:
    with store.transaction() as db:
        db.execute("UPDATE promotions SET status = ?, reason = ?, decided_at = ?, "
                   "entry_id = COALESCE(?, entry_id) WHERE id = ?",
                   (status, reason, now_iso(), entry_id, promotion_id))


def superseded(store: Store) -> dict[str, Promotion]:
    """MEMORY.md entry id -> the applied or approved promotion that replaced it (the entries
    that were true and are not now), oldest replacement first."""
    rows = store.query("SELECT * FROM promotions WHERE supersedes IS NOT NULL AND status IN "
                       "('applied', 'approved') ORDER BY id")
    return {str(r["supersedes"]): _from_row(r) for r in rows}
