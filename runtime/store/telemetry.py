"""Telemetry: counters and measurements that are not steps of the coworker (quiet ticks, walk
calls, recall latency). Kept apart from events so a quiet tick leaves no event."""

from __future__ import annotations

from typing import Any

from ..secrecy import redact
from .db import Store
from .events import meta_json, now_iso


def record(store: Store, kind: str, data: dict[str, Any] | None = None) -> None:
    with store.transaction() as db:
        db.execute(
            "INSERT INTO telemetry(ts, kind, data) VALUES (?, ?, ?)",
            (now_iso(), kind, redact(meta_json(data)) if data else None),
        )


def count(store: Store, kind: str, since_ts: str | None = None) -> int:
    if since_ts is None:
        return int(store.scalar("SELECT COUNT(*) FROM telemetry WHERE kind = ?", (kind,)) or 0)
    return int(
        store.scalar(
            "SELECT COUNT(*) FROM telemetry WHERE kind = ? AND ts >= ?", (kind, since_ts)
        ) or 0
    )


def walk_stats(store: Store, since_ts: str) -> dict[str, int]:
    """Walks and refusals since a time: the usage data that says whether the ladder earns its keep."""
    row = store.query(
        "SELECT COUNT(*), COALESCE(SUM(CAST(json_extract(data, '$.refused') AS INTEGER)), 0) "
        "FROM telemetry "
        "WHERE kind = 'walk' AND ts >= ?", (since_ts,))[0]
    return {"walks": int(row[0]), "refusals": int(row[1])}
