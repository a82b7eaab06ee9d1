"""Ritual runs: when each ritual started and finished, how it went, and its figures."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..secrecy import redact
from .db import Store, new_id
from .events import meta_json, now_iso


@dataclass(frozen=True)
class RitualRun:
    id: int
    ritual: str
    started_at: str
    finished_at: str | None
    status: str
    stats: dict[str, Any]


def _from_row(r: Any) -> RitualRun:
    return RitualRun(r["id"], r["ritual"], r["started_at"], r["finished_at"], r["status"],
                     json.loads(r["stats"]) if r["stats"] else {})


def start(store: Store, ritual: str) -> int:
    with store.transaction() as db:
        cur = db.execute("INSERT INTO ritual_runs(ritual, started_at, status) VALUES (?, ?, ?)",
                         (ritual, now_iso(), "running"))
        return new_id(cur)


def take_up(store: Store, ritual: str) -> int:
    """The run of `ritual` a turn records: the one a killed attempt of the turn left
    `running` (no one finishes it otherwise, and the window is one run), else a new one."""
    with store.transaction() as db:
        row = db.execute("SELECT id, status FROM ritual_runs WHERE ritual = ? ORDER BY id DESC "
                         "LIMIT 1", (ritual,)).fetchone()
        if row is not None and row[1] == "running":
            return int(row[0])
        return start(store, ritual)


def finish(store: Store, run_id: int, status: str, stats: dict[str, Any]) -> None:
    with store.transaction() as db:
        db.execute("UPDATE ritual_runs SET finished_at = ?, status = ?, stats = ? WHERE id = ?",
                   (now_iso(), status, redact(meta_json(stats)), run_id))


def last(store: Store, ritual: str, status: str | None = None,
         exclude_status: str | None = None) -> RitualRun | None:
    extra = " AND status = ?" if status else ""
    params: tuple = (ritual, status) if status else (ritual,)
    if exclude_status:
        extra += " AND status != ?"
        params = (*params, exclude_status)
    rows = store.query(
        f"SELECT * FROM ritual_runs WHERE ritual = ?{extra} ORDER BY id DESC LIMIT 1", params)
    return _from_row(rows[0]) if rows else None


def recent(store: Store, limit: int = 20) -> list[RitualRun]:
    return [_from_row(r) for r in store.query(
        "SELECT * FROM ritual_runs ORDER BY id DESC LIMIT ?", (limit,))]
