"""The side-effect ledger: a live side effect is written down under its turn and its tool_use
id before it runs, so a replayed turn finds the record and never runs it a second time.

A row's identity is (`turn`, `key`): the key is the tool_use id (or `approval:<id>` for an
action the owner approved), and the turn is the first attempt of the tick's chain
(`turns.turn_of`), so an attempt that takes the turn up again finds what its predecessors
began, while a new turn whose model server hands out the same id again (one that numbers its
ids per process, restarted) acts (ADR-0034). `begin` is the one gate: it inserts the row and
commits before the caller acts; a row already there (done, failed, or started by an attempt
that was killed mid-call) is refused. It never runs anything itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..secrecy import redact
from . import turns
from .db import Store
from .events import now_iso


@dataclass(frozen=True)
class Entry:
    key: str
    turn: int  # the first tick of the turn that began it (0: outside any tick)
    tool: str
    tick_id: int | None
    status: str
    result: str | None


_ENTRY = "SELECT key, turn, tool, tick_id, status, result FROM side_effects"


def begin(store: Store, key: str, tool: str, tick_id: int | None, input: Any) -> Entry | None:
    """Record that `tool` is about to run under `key` in the turn of `tick_id`; return None
    when it may run, or the earlier entry when this turn already began this key (the caller
    must not run it again)."""
    turn = turns.turn_of(store, tick_id)
    with store.transaction() as db:
        row = db.execute(f"{_ENTRY} WHERE turn = ? AND key = ?", (turn, key)).fetchone()
        if row is not None:
            return Entry(*row)
        db.execute("INSERT INTO side_effects(key, turn, tool, tick_id, input, status, "
                   "started_at) VALUES (?, ?, ?, ?, ?, 'started', ?)",
                   (key, turn, tool, tick_id,
                    redact(json.dumps(input, ensure_ascii=False, default=str)), now_iso()))
    return None


def finish(store: Store, key: str, ok: bool, result: str, *, tick_id: int | None) -> None:
    """Record how the side effect `begin` let run under `key` in the turn of `tick_id` ended."""
    turn = turns.turn_of(store, tick_id)
    with store.transaction() as db:
        db.execute("UPDATE side_effects SET status = ?, result = ?, finished_at = ? "
                   "WHERE turn = ? AND key = ?",
                   ("done" if ok else "failed", redact(result)[:4000], now_iso(), turn, key))


def get(store: Store, key: str, tick_id: int | None = None) -> Entry | None:
    """The entry of `key` in the turn of `tick_id` (None: outside any tick)."""
    rows = store.query(f"{_ENTRY} WHERE turn = ? AND key = ?",
                       (turns.turn_of(store, tick_id), key))
    return Entry(*rows[0]) if rows else None


def count_since(store: Store, since_iso: str, tool_like: str) -> int:
    """Side effects begun since `since_iso` whose tool name matches the LIKE pattern (the
    daily cap on live MCP calls counts `%\\_\\_%` with `\\` as the escape), ASCII letters
    without regard to case as SQLite's LIKE (PostgreSQL's is case-sensitive: both sides
    lowered, which folds only ASCII letters on a COLLATE "C" column and in SQLite)."""
    return int(store.scalar(
        "SELECT count(*) FROM side_effects WHERE started_at >= ? "
        "AND lower(tool) LIKE lower(?) ESCAPE '\\'",
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
