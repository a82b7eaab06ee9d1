"""The side-effect ledger: a live side effect is written down under its tool_use id before it
runs, so a replayed turn finds the record and never runs it a second time.

`begin` is the one gate: it inserts the key and commits before the caller acts; a key already
there (done, failed, or started by an attempt that was killed mid-call) is refused. It never
runs anything itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..settings import redact
from .db import Store
from .events import now_iso


@dataclass(frozen=True)
class Entry:
    key: str
    tool: str
    tick_id: int | None
    status: str
    result: str | None


def begin(store: Store, key: str, tool: str, tick_id: int | None, input: Any) -> Entry | None:
    """Record that `tool` is about to run under `key`; return None when it may run, or the
    earlier entry when this key was already begun (the caller must not run it again)."""
    with store.transaction() as db:
        row = db.execute("SELECT key, tool, tick_id, status, result FROM side_effects "
                         "WHERE key = ?", (key,)).fetchone()
        if row is not None:
            return Entry(row[0], row[1], row[2], row[3], row[4])
        db.execute("INSERT INTO side_effects(key, tool, tick_id, input, status, started_at) "
                   "VALUES (?, ?, ?, ?, 'started', ?)",
                   (key, tool, tick_id,
                    redact(json.dumps(input, ensure_ascii=False, default=str)), now_iso()))
    return None


def finish(store: Store, key: str, ok: bool, result: str) -> None:
    with store.transaction() as db:
        db.execute("UPDATE side_effects SET status = ?, result = ?, finished_at = ? "
                   "WHERE key = ?", ("done" if ok else "failed", redact(result)[:4000], now_iso(),
                                  key))


def get(store: Store, key: str) -> Entry | None:
    rows = store.query("SELECT key, tool, tick_id, status, result FROM side_effects "
                       "WHERE key = ?", (key,))
    return Entry(*rows[0]) if rows else None


def count_since(store: Store, since_iso: str, tool_like: str) -> int:
    """Side effects begun since `since_iso` whose tool name matches the LIKE pattern (the
    daily cap on live MCP calls counts `%\\_\\_%` with `\\` as the escape)."""
    return int(store.scalar(
        "SELECT count(*) FROM side_effects WHERE started_at >= ? AND tool LIKE ? ESCAPE '\\'",
        (since_iso, tool_like)) or 0)


def done_in(store: Store, tick_ids: list[int]) -> list[tuple[str, str, str, str]]:
    """(tool, input as recorded, result, status) of each side effect these ticks carried out
    (`done`) or began and may have carried out (`started`: the attempt was killed mid-call),
    in the order they began."""
    if not tick_ids:
        return []
    marks = ",".join("?" * len(tick_ids))
    return [(r[0], r[1] or "", r[2] or "", r[3]) for r in store.query(
        f"SELECT tool, input, result, status FROM side_effects WHERE status IN ('done', "
        f"'started') AND tick_id IN ({marks}) ORDER BY started_at, key", tuple(tick_ids))]
