"""What the lab (`runtime/lab/`) asks of the store beyond what the product asks: the span of a
history, ids to give placeholder vectors, a count of the statements a path runs, and the bare
bulk loads an import is judged against.

Owns those reads and, for the bench's scratch databases only, the bare loads (rows inserted
one statement a row, or the FTS trigger dropped and the index filled in one pass). Nothing in
the product calls it; it never touches a coworker's own database but to read it. The reads and
`counting` serve both backends; `timed_load` makes a scratch SQLite file (PostgreSQL's bare
loads are the bench's own, in a schema it drops).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .db import Store

_INSERT = ("INSERT INTO events(ts, kind, actor, author_kind, body, meta, tick_id) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)")
_FILL = ("INSERT INTO events_fts(rowid, body, kind, actor, tags) "
         "SELECT id, body, kind, actor, NULL FROM events")


def history_span(store: Store) -> tuple[str | None, str | None]:
    """The first and the last event's time, hot or archived (None, None when there is none)."""
    row = store.query("SELECT min(ts), max(ts) FROM history")[0]
    return (str(row[0]) if row[0] else None, str(row[1]) if row[1] else None)


def content_ids_after(store: Store, after_id: int, skip_kinds: Sequence[str]) -> list[int]:
    """Ids of the events after `after_id` with a body and a kind not in `skip_kinds`, oldest
    first."""
    marks = ",".join("?" * len(skip_kinds))
    return [int(r[0]) for r in store.query(
        f"SELECT id FROM history WHERE id > ? AND kind NOT IN ({marks}) AND body != '' "
        "ORDER BY id", (after_id, *skip_kinds))]


def rollup_ids(store: Store) -> list[int]:
    """Every rollup's id, oldest first."""
    return [int(r[0]) for r in store.query("SELECT id FROM rollups ORDER BY id")]


@dataclass
class Statements:
    """How many statements of our own ran while counting (the engine's own look-ups aside)."""

    count: int = 0


@contextmanager
def counting(store: Store) -> Iterator[Statements]:
    """Count the statements `store` runs inside the block. FTS5's internal segment look-ups
    are traced with a "--" prefix and are not counted. On PostgreSQL (no trace callback) the
    statements the store modules send through the connection and the store's own (BEGIN,
    COMMIT, a savepoint) are counted, one a call as SQLite traces them; what the server runs
    inside a function or a trigger is not."""
    counted = Statements()
    if getattr(store, "dialect", "sqlite") == "postgres":
        with _counting_pg(store, counted):
            yield counted
        return

    def seen(sql: str) -> None:
        if sql.strip() and not sql.startswith("--"):
            counted.count += 1

    store.conn.set_trace_callback(seen)
    try:
        yield counted
    finally:
        store.conn.set_trace_callback(None)


@contextmanager
def _counting_pg(store: Any, counted: Statements) -> Iterator[None]:
    """Count each execute on a PgStore's connection and each of its own statements (one
    statement each), and each row of an executemany, as SQLite's trace callback sees them."""
    conn = store.conn
    execute, executemany, run = conn.execute, conn.executemany, store._run

    def one(sql: str, params: Any = ()) -> Any:
        counted.count += 1
        return execute(sql, params)

    def many(sql: str, seq: Sequence[Sequence[Any]]) -> Any:
        counted.count += len(seq)
        return executemany(sql, seq)

    def own(sql: str) -> None:
        counted.count += 1
        run(sql)

    conn.execute, conn.executemany, store._run = one, many, own
    try:
        yield
    finally:
        del conn.execute, conn.executemany, store._run  # the classes' own again


def timed_load(path: Path, chunks: Iterable[Sequence[tuple]], bulk: bool) -> float:
    """Seconds the engine spends loading these events rows into a new scratch database at
    `path` (migrated by Store.open; deleted after), in one transaction, timing only the
    engine (not the making of the rows):

    - per row (`bulk` False): every row its own INSERT (executemany), so the events_ai
      trigger feeds FTS5 one row a statement, as the old importer did;
    - bulk: the trigger dropped (scratch only), the rows inserted, then the FTS index filled
      for all of them in one INSERT ... SELECT, and the trigger put back."""
    with Store.open(path) as store:
        trigger = str(store.scalar("SELECT sql FROM sqlite_master WHERE type = 'trigger' "
                                   "AND name = 'events_ai'"))
        t0 = time.perf_counter()
        spent = 0.0
        with store.transaction() as db:
            if bulk:
                db.execute("DROP TRIGGER events_ai")
            spent += time.perf_counter() - t0
            for chunk in chunks:
                t0 = time.perf_counter()
                db.executemany(_INSERT, chunk)
                spent += time.perf_counter() - t0
            t0 = time.perf_counter()
            if bulk:
                db.execute(_FILL)
                db.execute(trigger)
        spent += time.perf_counter() - t0
    for p in path.parent.glob(f"{path.name}*"):
        p.unlink()
    return spent
