"""Deliveries: the replies (approvals waiting, failures) owed to each `[[notify]]` target.

Owns the `deliveries` table (one row a (event, target), its idempotency key, its status and its
retries) and `delivery_cursors` (per target, the last event scanned and whether the target was
configured at the last pass). `scan` turns the new events a target wants into pending rows and
moves the target's cursor past them in one transaction, so an event is never skipped, even by
a kill, and never owed twice (the row is unique on event and target). A row moves only forward
(a trigger): `pending` -> `delivered` | `failed` (given up).

    pending -> delivered
            -> failed

It never sends anything and never decides what is due: runtime/notify does.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..secrecy import redact
from .db import Store
from .events import now_iso

SCAN_BATCH = 500  # events a target's scan reads at most in one transaction
ERROR_CHARS = 500  # how much of an attempt's error a row keeps


@dataclass(frozen=True)
class Delivery:
    id: int
    event_id: int
    target: str
    what: str            # reply | approval | failure
    status: str          # pending | delivered | failed
    attempts: int
    next_at: str
    last_error: str | None
    idempotency_key: str
    created_at: str


def _from_row(r: sqlite3.Row) -> Delivery:
    return Delivery(int(r["id"]), int(r["event_id"]), r["target"], r["what"], r["status"],
                    int(r["attempts"]), r["next_at"], r["last_error"], r["idempotency_key"],
                    r["created_at"])


_COLUMNS = ("id, event_id, target, what, status, attempts, next_at, last_error, "
            "idempotency_key, created_at")


def _max_event(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0])


def begin(store: Store, targets: Sequence[str]) -> None:
    """The targets configured now: one new (or configured again after a pass without it)
    starts after the newest event, so it is owed nothing from before it existed; one not
    configured any more is marked so. Writes only when something changed."""
    rows = {r["target"]: int(r["active"]) for r in
            store.query("SELECT target, active FROM delivery_cursors")}
    if all(rows.get(t) == 1 for t in targets) and \
            not any(a == 1 and t not in targets for t, a in rows.items()):
        return
    with store.transaction() as db:
        now, top = now_iso(), _max_event(db)
        for t in targets:
            db.execute("INSERT INTO delivery_cursors(target, last_event_id, active, updated_at) "
                       "VALUES (?, ?, 1, ?) ON CONFLICT(target) DO UPDATE SET "
                       "last_event_id = excluded.last_event_id, active = 1, "
                       "updated_at = excluded.updated_at WHERE delivery_cursors.active = 0",
                       (t, top, now))
        marks = ",".join("?" * len(targets))
        db.execute(f"UPDATE delivery_cursors SET active = 0, updated_at = ? WHERE active = 1 "
                   f"AND target NOT IN ({marks})", (now, *targets))


def scan(store: Store, wanted: Mapping[str, Mapping[str, str]], actor: str) -> int:
    """For each target, the events after its cursor whose kind it wants (`wanted[target]`:
    kind -> what), written by `actor` and not imported, become pending rows; its cursor moves
    past what was read, in the same transaction. How many rows were made."""
    if not wanted:
        return 0
    low = store.scalar(
        f"SELECT MIN(last_event_id) FROM delivery_cursors WHERE target IN "
        f"({','.join('?' * len(wanted))})", tuple(wanted))
    if low is None or int(low) >= int(store.scalar("SELECT COALESCE(MAX(id), 0) FROM events")
                                      or 0):
        return 0  # nothing new: no write, no lock
    made = 0
    with store.transaction() as db:
        top, now = _max_event(db), now_iso()
        for target, kinds in wanted.items():
            made += _scan_one(db, target, kinds, actor, top, now)
    return made


def _scan_one(db: sqlite3.Connection, target: str, kinds: Mapping[str, str], actor: str,
              top: int, now: str) -> int:
    row = db.execute("SELECT last_event_id FROM delivery_cursors WHERE target = ? AND active = 1",
                     (target,)).fetchone()
    if row is None or int(row[0]) >= top:
        return 0
    after, made, last = int(row[0]), 0, top
    if kinds:
        found = db.execute(
            f"SELECT id, kind FROM events WHERE id > ? AND id <= ? AND kind IN "
            f"({','.join('?' * len(kinds))}) AND actor = ? "
            "AND (meta IS NULL OR json_extract(meta, '$.imported') IS NULL) "
            "ORDER BY id LIMIT ?", (after, top, *kinds, actor, SCAN_BATCH)).fetchall()
        if len(found) == SCAN_BATCH:
            last = int(found[-1]["id"])  # the rest at the next pass
        for r in found:
            made += db.execute(
                "INSERT OR IGNORE INTO deliveries(event_id, target, what, next_at, "
                "idempotency_key, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (int(r["id"]), target, kinds[r["kind"]], now, _key(int(r["id"]), target), now,
                 now)).rowcount
    db.execute("UPDATE delivery_cursors SET last_event_id = ?, updated_at = ? WHERE target = ?",
               (last, now, target))
    return made


def _key(event_id: int, target: str) -> str:
    """Unique across homes (a random part), stable across attempts (it is stored)."""
    return f"coworker-{event_id}-{target}-{secrets.token_hex(8)}"


def head(store: Store, target: str) -> Delivery | None:
    """The target's oldest pending row: a target's messages go out in the order written."""
    rows = store.query(f"SELECT {_COLUMNS} FROM deliveries WHERE status = 'pending' AND "
                       "target = ? ORDER BY event_id LIMIT 1", (target,))
    return _from_row(rows[0]) if rows else None


def delivered(store: Store, delivery_id: int) -> None:
    now = now_iso()
    with store.transaction() as db:
        db.execute("UPDATE deliveries SET status = 'delivered', attempts = attempts + 1, "
                   "delivered_at = ?, updated_at = ?, last_error = NULL "
                   "WHERE id = ? AND status = 'pending'", (now, now, delivery_id))


def attempt_failed(store: Store, delivery_id: int, error: str, next_at: str,
                   give_up: bool) -> None:
    """An attempt failed: tried again at `next_at`, or given up (`failed`)."""
    with store.transaction() as db:
        db.execute("UPDATE deliveries SET attempts = attempts + 1, last_error = ?, next_at = ?, "
                   "status = ?, updated_at = ? WHERE id = ? AND status = 'pending'",
                   (redact(error)[:ERROR_CHARS], next_at, "failed" if give_up else "pending",
                    now_iso(), delivery_id))


def sent_since(store: Store, target: str, since: str) -> int:
    """How many rows of `target` were delivered at or after `since` (the rate cap)."""
    return int(store.scalar("SELECT COUNT(*) FROM deliveries WHERE target = ? AND "
                            "delivered_at >= ?", (target, since)) or 0)


def get(store: Store, delivery_id: int) -> Delivery | None:
    rows = store.query(f"SELECT {_COLUMNS} FROM deliveries WHERE id = ?", (delivery_id,))
    return _from_row(rows[0]) if rows else None


def of_event(store: Store, event_id: int) -> list[Delivery]:
    return [_from_row(r) for r in store.query(
        f"SELECT {_COLUMNS} FROM deliveries WHERE event_id = ? ORDER BY target", (event_id,))]


def counts(store: Store, targets: Sequence[str], failed_since: str) -> dict[str, int]:
    """For the configured `targets`: rows pending, of which retrying (an attempt failed), and
    given up since `failed_since`. Zeros on a database not yet migrated this far (a read-only
    `status` before the loop's first start after an upgrade)."""
    zero = {"pending": 0, "retrying": 0, "failed": 0}
    if not targets or not store.has_table("deliveries"):
        return zero
    marks = ",".join("?" * len(targets))
    r = store.query(
        "SELECT COALESCE(SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END), 0) AS pending, "
        "COALESCE(SUM(CASE WHEN status = 'pending' AND attempts > 0 THEN 1 ELSE 0 END), 0) "
        "AS retrying, COALESCE(SUM(CASE WHEN status = 'failed' AND updated_at >= ? THEN 1 "
        "ELSE 0 END), 0) AS failed "
        f"FROM deliveries WHERE target IN ({marks}) AND status <> 'delivered'",
        (failed_since, *targets))[0]
    return {k: int(r[k]) for k in zero}


def last_error(store: Store, targets: Sequence[str]) -> tuple[str, str] | None:
    """(target, error) of the newest failed attempt among pending or given-up rows."""
    if not targets or not store.has_table("deliveries"):
        return None
    rows = store.query(
        f"SELECT target, last_error FROM deliveries WHERE target IN "
        f"({','.join('?' * len(targets))}) AND status <> 'delivered' AND last_error IS NOT NULL "
        "ORDER BY updated_at DESC LIMIT 1", tuple(targets))
    return (rows[0]["target"], rows[0]["last_error"]) if rows else None
