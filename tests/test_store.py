"""The store: WAL file, migrations (fresh and in place), the append-only log and its archive,
FTS sync, transactions and savepoints, read-only connections, two writing processes, locks."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.errors import StoreError
from runtime.store import Event, Store, migrations, now_iso, pins
from runtime.store import db as store_db
from runtime.store import events as ev

from .conftest import REPO

DESIGN_TABLES = (
    "events", "events_fts", "events_archive", "rollups", "rollups_fts", "decisions",
    "promotions", "pins", "ritual_runs", "telemetry",
)
ALL_MIGRATIONS = [fn.__name__ for fn in migrations.MIGRATIONS]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "coworker.db"


@pytest.fixture
def store(db_path: Path) -> Store:
    s = Store.open(db_path)
    yield s
    s.close()


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _archive(db: sqlite3.Connection, event_id: int) -> None:
    """Move one event to the archive the only way the schema allows: copy, then delete."""
    cur = db.execute(
        "INSERT INTO events_archive(id, ts, kind, actor, author_kind, body, meta, tick_id, "
        "archived_at) SELECT id, ts, kind, actor, author_kind, body, meta, tick_id, ? "
        "FROM events WHERE id = ?",
        (now_iso(), event_id),
    )
    assert cur.rowcount == 1
    db.execute("DELETE FROM events WHERE id = ?", (event_id,))


def _fts_integrity_check(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO events_fts(events_fts, rank) VALUES('integrity-check', 1)")


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# opening and migrations --------------------------------------------------------------------


def test_open_creates_a_wal_file_with_busy_timeout_and_all_migrations(db_path: Path) -> None:
    assert not db_path.exists()
    assert not db_path.parent.exists()
    with Store.open(db_path) as store:
        assert db_path.is_file()
        assert store.scalar("PRAGMA journal_mode") == "wal"
        assert store.scalar("PRAGMA busy_timeout") == store_db.BUSY_TIMEOUT_MS
        assert store_db.BUSY_TIMEOUT_MS >= 1000
        assert store.scalar("PRAGMA foreign_keys") == 1
        names = [r[0] for r in store.query("SELECT name FROM _migrations ORDER BY rowid")]
        assert names == ALL_MIGRATIONS
        assert migrations.applied(store) == ALL_MIGRATIONS
        assert store.integrity_check() == "ok"
    # WAL is a property of the file: a fresh connection sees it too
    raw = _raw(db_path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def test_reopening_runs_no_migration_twice(db_path: Path) -> None:
    Store.open(db_path).close()
    with Store.open(db_path) as store:
        assert migrations.apply(store) == []
        assert store.scalar("SELECT COUNT(*) FROM _migrations") == len(ALL_MIGRATIONS)


def test_every_design_table_exists(store: Store) -> None:
    tables = _tables(store.conn)
    missing = [t for t in DESIGN_TABLES if t not in tables]
    assert not missing, f"missing tables: {missing}"
    views = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'view'")}
    assert "history" in views


@pytest.mark.parametrize("opener", ["raw-connection", "open-no-migrate"])
def test_an_older_database_migrates_in_place(db_path: Path, opener: str) -> None:
    db_path.parent.mkdir(parents=True)
    if opener == "raw-connection":
        old = Store(_raw(db_path), db_path, readonly=False)
    else:
        old = Store.open(db_path, migrate=False)
    assert "events" not in _tables(old.conn)

    assert migrations.apply(old, upto=1) == [ALL_MIGRATIONS[0]]
    tables = _tables(old.conn)
    assert "events" in tables and "events_archive" in tables
    assert "rollups" not in tables and "telemetry" not in tables
    ids = ev.append_many(old, [Event(kind="message", body=f"old parser bug {i}",
                                     actor="owner", author_kind="user") for i in range(3)])
    assert ids == [1, 2, 3]
    old.close()

    with Store.open(db_path) as store:
        assert migrations.applied(store) == ALL_MIGRATIONS
        assert not [t for t in DESIGN_TABLES if t not in _tables(store.conn)]
        assert store.scalar("PRAGMA journal_mode") == "wal"
        for i, event_id in enumerate(ids):
            e = ev.get(store, event_id)
            assert e is not None
            assert (e.body, e.kind, e.actor, e.author_kind, e.source) == (
                f"old parser bug {i}", "message", "owner", "user", "hot")
        assert [h[0].id for h in ev.fts_search(store, ev.fts_query(["parser"]))] != []
        _fts_integrity_check(store.conn)
        # the id sequence carries on from the old rows
        assert ev.append(store, Event(kind="note", body="after migration")) == 4
        # and the new tables work
        assert pins.add(store, "keep this").id == 1


# append-only ---------------------------------------------------------------------------------


def test_events_cannot_be_updated(store: Store, db_path: Path) -> None:
    event_id = ev.append(store, Event(kind="note", body="original"))
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store.conn.execute("UPDATE events SET body = 'changed' WHERE id = ?", (event_id,))
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        with store.transaction() as db:
            db.execute("UPDATE events SET kind = 'other' WHERE id = ?", (event_id,))
    # enforced by the file itself, not by our Python code
    raw = _raw(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute("UPDATE events SET body = 'changed' WHERE id = ?", (event_id,))
    finally:
        raw.close()
    e = ev.get(store, event_id)
    assert (e.body, e.kind) == ("original", "note")


def test_events_not_in_the_archive_cannot_be_deleted(store: Store, db_path: Path) -> None:
    event_id = ev.append(store, Event(kind="note", body="keep me"))
    with pytest.raises(sqlite3.DatabaseError, match="never deleted"):
        store.conn.execute("DELETE FROM events WHERE id = ?", (event_id,))
    raw = _raw(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute("DELETE FROM events")
    finally:
        raw.close()
    assert ev.get(store, event_id).source == "hot"
    assert ev.counts(store) == {"hot": 1, "archived": 0}


def test_archive_move_keeps_the_event_readable_and_searchable(store: Store) -> None:
    keep = ev.append(store, Event(kind="note", body="the parser rewrite is done"))
    moved = ev.append(store, Event(kind="message", body="zebra crossings in the grammar",
                                   actor="owner", author_kind="user", meta={"via": "tell"}))
    before = ev.get(store, moved)

    with store.transaction() as db:
        _archive(db, moved)

    assert ev.counts(store) == {"hot": 1, "archived": 1}
    after = ev.get(store, moved)
    assert after is not None
    assert after.source == "archive"
    assert (after.ts, after.kind, after.actor, after.author_kind, after.body, after.meta) == (
        before.ts, before.kind, before.actor, before.author_kind, before.body, before.meta)
    assert ev.get(store, keep).source == "hot"

    hits = ev.fts_search(store, ev.fts_query(["zebra"]))
    assert [(e.id, e.source) for e, _score, _snip in hits] == [(moved, "archive")]
    assert "zebra" in hits[0][2].lower()
    # the history reads both, in id order
    assert [(e.id, e.source) for e in ev.tail(store, 10)] == [(keep, "hot"), (moved, "archive")]
    # but the cursor of new input only sees hot events
    assert [e.id for e in ev.since(store, 0)] == [keep]


def test_archive_rows_cannot_be_updated_or_deleted(store: Store) -> None:
    event_id = ev.append(store, Event(kind="note", body="archived forever"))
    with store.transaction() as db:
        _archive(db, event_id)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store.conn.execute("UPDATE events_archive SET body = 'x' WHERE id = ?", (event_id,))
    with pytest.raises(sqlite3.DatabaseError, match="never deleted"):
        store.conn.execute("DELETE FROM events_archive WHERE id = ?", (event_id,))
    e = ev.get(store, event_id)
    assert (e.source, e.body) == ("archive", "archived forever")


def test_a_failed_archive_move_leaves_the_event_hot(store: Store) -> None:
    event_id = ev.append(store, Event(kind="note", body="half moved"))
    with pytest.raises(RuntimeError):
        with store.transaction() as db:
            _archive(db, event_id)
            raise RuntimeError("crash between copy and commit")
    assert ev.counts(store) == {"hot": 1, "archived": 0}
    assert ev.get(store, event_id).source == "hot"


def test_ids_are_never_reused_after_the_newest_event_is_archived(db_path: Path) -> None:
    with Store.open(db_path) as store:
        ids = [ev.append(store, Event(kind="note", body=f"n{i}")) for i in range(3)]
        assert ids == [1, 2, 3]
        with store.transaction() as db:
            _archive(db, 3)
        assert store.scalar("SELECT MAX(id) FROM events") == 2
        assert ev.append(store, Event(kind="note", body="next")) == 4
        with store.transaction() as db:
            _archive(db, 4)
    # also across a reopen, when the hot table's max id is below the sequence
    with Store.open(db_path) as store:
        assert ev.max_id(store) == 4
        new_id = ev.append(store, Event(kind="note", body="after reopen"))
        assert new_id == 5
        assert ev.get(store, 3).body == "n2"
        assert ev.get(store, 4).body == "next"
        assert ev.get(store, 5).body == "after reopen"


# FTS -----------------------------------------------------------------------------------------


def test_fts_stays_in_sync_through_inserts_and_archive_moves(store: Store) -> None:
    ids = ev.append_many(store, [Event(kind="note", body=f"bug number {i} in the lexer")
                                 for i in range(20)])
    _fts_integrity_check(store.conn)
    with store.transaction() as db:
        for event_id in ids[::3]:
            _archive(db, event_id)
    ev.append(store, Event(kind="note", body="one more after the move"))
    _fts_integrity_check(store.conn)
    hits = ev.fts_search(store, ev.fts_query(["lexer"]), limit=50)
    assert sorted(e.id for e, _s, _n in hits) == ids
    assert {e.source for e, _s, _n in hits} == {"hot", "archive"}


def test_fts_integrity_check_can_fail(store: Store) -> None:
    ev.append(store, Event(kind="note", body="real row"))
    _fts_integrity_check(store.conn)
    # an index row with no event behind it: the check must notice
    store.conn.execute(
        "INSERT INTO events_fts(rowid, body, kind, actor) VALUES (9999, 'ghost', 'note', 'x')")
    with pytest.raises(sqlite3.DatabaseError):
        _fts_integrity_check(store.conn)


# transactions --------------------------------------------------------------------------------


def _count_elsewhere(path: Path) -> int:
    """Count events through another connection, so only committed rows are seen."""
    raw = _raw(path)
    try:
        return raw.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    finally:
        raw.close()


def test_transaction_rolls_back_everything_on_an_exception(store: Store, db_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with store.transaction():
            ev.append(store, Event(kind="note", body="a"))
            ev.append(store, Event(kind="note", body="b"))
            pins.add(store, "pin")
            raise RuntimeError("boom")
    assert ev.counts(store) == {"hot": 0, "archived": 0}
    assert pins.active(store) == []
    assert not store.conn.in_transaction
    # the store is usable afterwards and its writes really commit
    ev.append(store, Event(kind="note", body="c"))
    assert _count_elsewhere(db_path) == 1


def test_nested_transactions_are_savepoints(store: Store, db_path: Path) -> None:
    with store.transaction():
        ev.append(store, Event(kind="note", body="outer-1"))
        try:
            with store.transaction():
                ev.append(store, Event(kind="note", body="inner"))
                raise ValueError("inner fails")
        except ValueError:
            pass
        assert store.conn.in_transaction, "the inner failure ended the outer transaction"
        ev.append(store, Event(kind="note", body="outer-2"))
        # nothing is visible to others before the outer commit
        assert _count_elsewhere(db_path) == 0
    assert [e.body for e in ev.tail(store, 10)] == ["outer-1", "outer-2"]
    assert _count_elsewhere(db_path) == 2
    assert not store.conn.in_transaction


def test_outer_failure_rolls_back_a_completed_inner_transaction(store: Store) -> None:
    with pytest.raises(KeyError):
        with store.transaction():
            with store.transaction():
                ev.append(store, Event(kind="note", body="inner done"))
            raise KeyError("outer fails")
    assert ev.counts(store)["hot"] == 0
    assert not store.conn.in_transaction


# read-only -----------------------------------------------------------------------------------


def test_readonly_store_refuses_writes_with_store_error(db_path: Path) -> None:
    with Store.open(db_path) as rw:
        ev.append(rw, Event(kind="note", body="written before"))
    with Store.open(db_path, readonly=True) as ro:
        with pytest.raises(StoreError, match="read-only"):
            ev.append(ro, Event(kind="note", body="nope"))
        with pytest.raises(StoreError):
            pins.add(ro, "nope")
        with pytest.raises(StoreError):
            with ro.transaction():
                pass
        # reads still work
        assert [e.body for e in ev.tail(ro, 5)] == ["written before"]
    assert _count_elsewhere(db_path) == 1


def test_readonly_store_refuses_raw_execute_writes_with_store_error(db_path: Path) -> None:
    Store.open(db_path).close()
    with Store.open(db_path, readonly=True) as ro:
        with pytest.raises(StoreError):
            ro.execute("INSERT INTO events(ts, kind, actor, author_kind) "
                       "VALUES ('2026-01-01T00:00:00Z', 'note', 'x', 'system')")
    assert _count_elsewhere(db_path) == 0


def test_readonly_open_of_a_missing_database_is_a_store_error(db_path: Path) -> None:
    with pytest.raises(StoreError, match="no database"):
        Store.open(db_path, readonly=True)
    assert not db_path.exists()


# two processes ------------------------------------------------------------------------------

CHILD = """
import sys
import time
from pathlib import Path
from runtime.store import Event, Store
from runtime.store import events as ev
store = Store.open(Path(sys.argv[1]))
print("ready", flush=True)
sys.stdin.readline()
for i in range(300):
    ev.append(store, Event(kind="note", body=f"child {i}", actor="child"))
    time.sleep(0.0005)
store.close()
print("done", flush=True)
"""


def test_two_processes_append_concurrently(db_path: Path) -> None:
    Store.open(db_path).close()  # created and migrated before either writer starts
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db_path)], cwd=REPO, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        with Store.open(db_path) as store:
            child.stdin.write("go\n")
            child.stdin.flush()
            mine = []
            for i in range(300):
                mine.append(ev.append(store, Event(kind="note", body=f"parent {i}",
                                                   actor="parent")))
                time.sleep(0.0005)  # a breath between writes, as real ticks have
        out, errs = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, errs
    assert "Traceback" not in errs
    assert out.strip() == "done"

    with Store.open(db_path) as store:
        assert ev.counts(store) == {"hot": 600, "archived": 0}
        rows = store.query("SELECT id, actor, body FROM events ORDER BY id")
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == 600
    parent_ids = [r["id"] for r in rows if r["actor"] == "parent"]
    child_ids = [r["id"] for r in rows if r["actor"] == "child"]
    assert parent_ids == mine
    assert len(child_ids) == 300
    # the two writers really overlapped in time (neither finished before the other began)
    assert min(child_ids) < max(parent_ids) and min(parent_ids) < max(child_ids)
    # each writer's own events are in its own order
    assert [r["body"] for r in rows if r["actor"] == "child"] == [f"child {i}" for i in range(300)]
    raw = _raw(db_path)
    try:
        _fts_integrity_check(raw)
    finally:
        raw.close()


# locks ----------------------------------------------------------------------------------------


def test_opening_a_database_held_past_the_busy_timeout_is_store_busy(tmp_path: Path) -> None:
    """Store.open itself can meet a lock (asking for WAL on a file another connection holds
    exclusively): the error is StoreBusy, which the doors treat as "wait and retry"."""
    from runtime.errors import StoreBusy

    path = tmp_path / "held.db"
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("PRAGMA journal_mode = DELETE")
    blocker.execute("CREATE TABLE _migrations(name TEXT PRIMARY KEY, applied_at TEXT)")  # ours
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreBusy) as exc:
            Store.open(path, busy_timeout_ms=100, migrate=False)
        assert "locked" in str(exc.value) and "\n" not in str(exc.value)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    Store.open(path, migrate=False).close()  # once the lock is gone it opens


def test_a_locked_database_is_a_store_error_with_a_hint(store: Store, db_path: Path) -> None:
    blocker = _raw(db_path)
    blocker.execute("PRAGMA busy_timeout = 0")
    blocker.execute("BEGIN IMMEDIATE")
    try:
        store.conn.execute("PRAGMA busy_timeout = 100")
        started = time.monotonic()
        with pytest.raises(StoreError) as exc:
            ev.append(store, Event(kind="note", body="blocked"))
        assert time.monotonic() - started < 3
        assert not isinstance(exc.value, sqlite3.Error)
        msg = str(exc.value)
        assert "locked" in msg
        assert "retry" in msg
        assert str(db_path) in msg
        assert "\n" not in msg
        assert not store.conn.in_transaction
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    # once the lock is gone the same store writes again
    assert ev.append(store, Event(kind="note", body="unblocked")) == 1
    assert _count_elsewhere(db_path) == 1


def test_reading_more_ids_than_one_statement_may_name_reads_them_all(store: Store) -> None:
    """`history_of` names its ids in chunks, so a list longer than an old SQLite's 999
    variables reads every event (recall reads the replies of every candidate that asks)."""
    ids = ev.append_many(store, [Event(kind="note", body=f"n{i}") for i in range(2 * ev.IDS_PER_READ + 3)])
    got = ev.history_of(store, ids)
    assert sorted(got) == sorted(ids)
    assert got[ids[-1]].body == f"n{len(ids) - 1}"
