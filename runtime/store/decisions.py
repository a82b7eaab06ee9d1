"""Decisions: what the coworker decided, citing the events it decided from.

Owns writing and reading the `decisions` table. `source_events` is stored as given only when
every id resolves against events and archive; otherwise NULL with a WARNING (ADR-0008).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from ..secrecy import redact
from . import events
from .db import Store, new_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    id: int
    ts: str
    event_id: int | None
    body: str
    source_events: list[int] | None
    supersedes: int | None


def validated_sources(store: Store, ids: list[int] | None) -> list[int] | None:
    """The ids when all of them resolve; None (and a WARNING) when any does not (ADR-0008)."""
    if not ids:
        return None
    found = events.existing_ids(store, ids)
    missing = sorted(set(ids) - found)
    if missing:
        log.warning(
            "provenance dropped: source events %s do not exist; writing NULL (ADR-0008)", missing
        )
        return None
    return sorted(set(ids))


def record(store: Store, body: str, source_events: list[int] | None, supersedes: int | None,
           event_id: int | None, ts: str) -> Decision:
    sources = validated_sources(store, source_events)
    with store.transaction() as db:
        if supersedes is not None and not db.execute(
            "SELECT 1 FROM decisions WHERE id = ?", (supersedes,)
        ).fetchone():
            log.warning("decision supersedes unknown decision %s; writing NULL", supersedes)
            supersedes = None
        cur = db.execute(
            "INSERT INTO decisions(ts, event_id, body, source_events, supersedes) "
            "VALUES (?, ?, ?, ?, ?)",
            (ts, event_id, redact(body), json.dumps(sources) if sources else None, supersedes),
        )
        return Decision(new_id(cur), ts, event_id, body, sources, supersedes)


def all_(store: Store) -> list[Decision]:
    rows = store.query("SELECT * FROM decisions ORDER BY id")
    return [
        Decision(r["id"], r["ts"], r["event_id"], r["body"],
                 json.loads(r["source_events"]) if r["source_events"] else None, r["supersedes"])
        for r in rows
    ]


def superseded(store: Store) -> dict[int, int]:
    """Decision id -> the id of the decision that superseded it (the 'was true' ones)."""
    rows = store.query("SELECT supersedes, id FROM decisions WHERE supersedes IS NOT NULL "
                       "ORDER BY id")
    return {int(r[0]): int(r[1]) for r in rows}


def stale_events(store: Store) -> dict[int, str]:
    """Event id of a superseded decision -> the decision that replaced it, as every door
    names it after "superseded by ": "decision 4 (event 31)", the event being the id the
    model and the owner see it by (no event: "decision 4")."""
    rows = store.query(
        "SELECT old.event_id, new.id, new.event_id FROM decisions AS new JOIN decisions AS old "
        "ON old.id = new.supersedes WHERE old.event_id IS NOT NULL")
    return {int(r[0]): f"decision {int(r[1])}" + (f" (event {int(r[2])})" if r[2] is not None
                                                   else "") for r in rows}


def by_event(store: Store, event_id: int) -> int | None:
    """The id of the decision recorded as event `event_id`, or None."""
    got = store.scalar("SELECT id FROM decisions WHERE event_id = ?", (event_id,))
    return None if got is None else int(got)
