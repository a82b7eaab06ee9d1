"""Turns as recorded: the attempts of the loop (`tick` events) and what each one wrote.

Owns the read side a replayed turn needs: the latest attempt and whether it completed, its
recorded model responses in order, its recorded tool results by tool_use id, whether an
input already went through the promotion gate, and the turn an attempt belongs to (`turn_of`:
the first attempt of its chain, the scope in which a tool_use id names one call, ADR-0034).
and when a chain of attempts began (`started`: reflect holds the archive back to it).
Only rows the loop wrote itself are read here: an imported row is never loop state. It never
writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .db import Store

COMPLETED = ("acted", "no_action", "step_cap")
# an attempt that ended so (None: killed, no tick_end) is taken up again with the same inputs
RESUMABLE = (None, "stopped", "failed", "capped")

_OWN = "AND (meta IS NULL OR json_extract(meta, '$.imported') IS NULL)"


@dataclass(frozen=True)
class Attempt:
    tick_id: int
    inputs: list[int]
    outcome: str | None  # None: no tick_end (killed)
    resumes: int | None = None  # the attempt this one took up again

    @property
    def completed(self) -> bool:
        return self.outcome in COMPLETED


def last_attempt(store: Store) -> Attempt | None:
    rows = store.query(f"SELECT id, meta FROM events WHERE kind = 'tick' {_OWN} "
                       "ORDER BY id DESC LIMIT 1")
    if not rows:
        return None
    tick_id = int(rows[0]["id"])
    meta = _meta(rows[0]["meta"])
    end = store.query(f"SELECT meta FROM events WHERE kind = 'tick_end' AND tick_id = ? {_OWN} "
                      "ORDER BY id DESC LIMIT 1", (tick_id,))
    outcome = _meta(end[0]["meta"]).get("outcome") if end else None
    inputs = [int(i) for i in meta.get("inputs", []) if isinstance(i, int)]
    resumes = meta.get("resumes")
    return Attempt(tick_id, inputs, outcome, resumes if isinstance(resumes, int) else None)


MAX_CHAIN = 100


def recorded(store: Store, tick_id: int) -> tuple[list[list[dict[str, Any]]],
                                                 dict[str, tuple[str, bool]]]:
    """What an unfinished attempt and the attempts it took up again recorded: the responses to
    replay, in step order, and the tool results by tool_use id. An attempt killed before it
    re-recorded the steps it was replaying holds fewer than the one before it: the longest
    record along the chain wins (each attempt replays its predecessor's steps first)."""
    steps: list[list[dict[str, Any]]] = []
    results: dict[str, tuple[str, bool]] = {}
    for t in reversed(chain(store, tick_id)):
        own = responses(store, t)
        if len(own) >= len(steps):
            steps = own
        results.update(tool_results(store, t))
    return steps, results


def took(store: Store, input_ids: list[int]) -> list[int]:
    """The ticks (the loop's own) that took any of these inputs, oldest first. While an input
    is pending, every tick that took it left it unconsumed: none of them completed."""
    if not input_ids:
        return []
    marks = ",".join("?" * len(input_ids))
    # SQLite's json_each, or the PostgreSQL schema's function that answers as it does
    each = "json_each" if store.dialect == "sqlite" else "sqlite_json_each"
    return [int(r[0]) for r in store.query(
        f"SELECT id FROM events WHERE kind = 'tick' AND id > ? {_OWN} AND EXISTS (SELECT 1 "
        f"FROM {each}(meta, '$.inputs') AS j WHERE CAST(j.value AS INTEGER) IN ({marks})) "
        "ORDER BY id",
        (min(input_ids), *input_ids))]


def chain(store: Store, tick_id: int) -> list[int]:
    """An attempt's tick and the ticks of the attempts it took up again, newest first."""
    out: list[int] = []
    current: int | None = tick_id
    while current is not None and len(out) < MAX_CHAIN:
        out.append(current)
        rows = store.query(f"SELECT meta FROM events WHERE id = ? AND kind = 'tick' {_OWN}",
                           (current,))
        prev = _meta(rows[0]["meta"]).get("resumes") if rows else None
        current = prev if isinstance(prev, int) and prev < current else None
    return out


def turn_of(store: Store, tick_id: int | None) -> int:
    """The turn an attempt belongs to: the tick of its chain's first attempt (0 for a call
    made outside any tick). Every attempt that takes the turn up again shares it; a new turn
    (a fresh ask, even at the same inputs) is its own. A tool_use id names one call only
    within its turn: a model server may number its ids per process (ADR-0034)."""
    return 0 if tick_id is None else chain(store, tick_id)[-1]


def responses(store: Store, tick_id: int) -> list[list[dict[str, Any]]]:
    """The content of each model response an attempt recorded, in step order."""
    rows = store.query(f"SELECT meta FROM events WHERE kind = 'model_response' AND tick_id = ? "
                       f"{_OWN} ORDER BY id", (tick_id,))
    out = []
    for r in rows:
        content = _meta(r["meta"]).get("content")
        if not isinstance(content, list):
            break  # a response recorded without its content cannot be replayed past
        out.append(content)
    return out


def tool_results(store: Store, tick_id: int) -> dict[str, tuple[str, bool]]:
    """tool_use id -> (result text, is_error) for every tool result an attempt recorded."""
    rows = store.query(f"SELECT body, meta FROM events WHERE kind = 'tool_result' AND tick_id = ? "
                       f"{_OWN} ORDER BY id", (tick_id,))
    out: dict[str, tuple[str, bool]] = {}
    for r in rows:
        meta = _meta(r["meta"])
        key = meta.get("tool_use_id")
        if isinstance(key, str):
            out[key] = (r["body"], bool(meta.get("is_error")))
    return out


def gated(store: Store, input_id: int) -> bool:
    """Whether this input already went through the promotion gate (a retried turn must not
    propose the same "remember" twice)."""
    return store.scalar(f"SELECT 1 FROM events WHERE kind = 'promotion' {_OWN} "
                        "AND CAST(json_extract(meta, '$.input_id') AS INTEGER) = ?",
                        (input_id,)) is not None


def started(store: Store, tick_ids: list[int]) -> str | None:
    """When the first of these ticks (still in the hot log) began; None when none is there."""
    if not tick_ids:
        return None
    first = store.scalar(f"SELECT min(ts) FROM events WHERE id IN ({','.join('?' * len(tick_ids))})",
                         tuple(tick_ids))
    return str(first) if first else None


def _meta(raw: str | None) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
