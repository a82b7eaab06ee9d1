"""The store's contract on both backends (issue 42): each test body runs on a SQLite Store in a
temporary file and on a PgStore in a fresh database of a throwaway PostgreSQL server
(tests/pgserver.py), so what the store modules promise holds whichever one is chosen.

On both: appending (one event, a batch whose ids are consecutive), reading by id, tail (by time,
by kind, before an id), since, max_id, counts; inputs made, read pending and consumed as the
loop consumes them; the archive move; events that refuse an UPDATE or a DELETE (and let a
redaction's marker through, as SQLite's triggers do); a transaction that raises leaves nothing
and a nested one rolls back only its part; a read-only store refuses to write; a lock held past
the timeout is StoreBusy; rows read by position and by name. On PostgreSQL alone: the schema
version (equal to SQLite's number of migrations, a newer one refused with one line), two
coworkers on one database, two hosts migrating at once, an unreachable server in one line
without the password, and the translator's rewrites."""

from __future__ import annotations

import json
import sqlite3
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import StoreBusy, StoreError
from runtime.store import Event, Store, archive, inputs, migrations, pg_schema
from runtime.store import db as store_db
from runtime.store import events as ev
from runtime.store.pg import PgStore, StoreRefused, Untranslatable, translate

from .pgserver import pg_url  # noqa: F401  (the fixture)

# What refuses a write that breaks a rule: SQLite's Store lets sqlite3's IntegrityError through,
# the PgStore raises StoreRefused (a StoreError).
REFUSED = (sqlite3.IntegrityError, StoreRefused)


@dataclass
class Backend:
    name: str
    opener: Callable[..., Any]
    opened: list[Any] = field(default_factory=list)

    def open(self, **kw: Any) -> Any:
        store = self.opener(**kw)
        self.opened.append(store)
        return store


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        b = Backend("sqlite", lambda **kw: Store.open(tmp_path / "state" / "coworker.db", **kw))
    else:
        url = request.getfixturevalue("pg_url")
        b = Backend("postgres", lambda **kw: PgStore.open(url, "alpha", **kw))
    yield b
    for store in b.opened:
        store.close()


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.open()


def _note(body: str, **kw: Any) -> Event:
    return Event(kind="note", body=body, **kw)


# appending and reading ---------------------------------------------------------------------------

def test_an_event_appended_reads_back_whole(store: Any) -> None:
    e = Event(kind="message", body="ship the parser", actor="owner", author_kind="user",
              meta={"via": "tell", "n": 2, "deep": {"list": [1, "x", None], "ok": True}},
              tick_id=7, ts="2025-03-01T10:00:00.000Z")
    first = ev.append(store, e)
    second = ev.append(store, _note("second"))
    assert (first, second) == (1, 2)
    got = ev.get(store, first)
    assert got is not None
    assert (got.id, got.ts, got.kind, got.actor, got.author_kind, got.body, got.meta,
            got.tick_id, got.source) == (first, e.ts, "message", "owner", "user",
                                         "ship the parser", e.meta, 7, "hot")
    assert ev.get(store, 99) is None
    assert ev.get(store, second).meta == {}  # an empty meta is stored as NULL


def test_a_batch_gets_consecutive_ids_in_order(store: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_db, "ROWS_PER_INSERT", 64)  # 150 rows: 64, 64, 16, 4, 2 a statement
    ev.append(store, _note("before"))
    batch = [_note(f"n{i}", meta={"i": i}) for i in range(150)]
    ids = ev.append_many(store, batch)
    assert ids == list(range(2, 152))
    assert [e.body for e in ev.span(store, 2, 151)] == [e.body for e in batch]
    assert ev.get(store, 151).meta == {"i": 149}
    assert ev.append_many(store, []) == []
    assert ev.max_id(store) == 151


def test_two_writers_at_once_each_get_their_own_ids(backend: Backend) -> None:
    """Two connections of one coworker appending batches at the same moment: every id a batch
    was given names an event of that batch (a statement's ids are consecutive)."""
    stores = [backend.open(), backend.open()]
    got: dict[int, str] = {}
    failed: list[BaseException] = []
    start = threading.Barrier(2)

    def write(n: int) -> None:
        try:
            start.wait()
            for batch in range(4):
                bodies = [f"w{n}-b{batch}-{i}" for i in range(200)]
                ids = ev.append_many(stores[n], [_note(b) for b in bodies], chunk=100)
                got.update(zip(ids, bodies, strict=True))
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed
    assert len(got) == 1600
    read = ev.history_of(stores[0], sorted(got))
    assert {i: e.body for i, e in read.items()} == got


def test_tail_reads_the_newest_by_time_by_kind_and_before_an_id(store: Any) -> None:
    ids = ev.append_many(store, [
        _note("a", ts="2025-01-01T10:00:00.000Z"),
        Event(kind="message", body="b", ts="2025-01-01T11:00:00.000Z"),
        _note("c", ts="2025-01-01T12:00:00.000Z"),
        _note("imported, older", ts="2024-06-01T00:00:00.000Z"),  # written last, oldest
        Event(kind="message", body="e", ts="2025-01-01T13:00:00.000Z"),
    ])
    assert [e.body for e in ev.tail(store, 3)] == ["b", "c", "e"]
    assert [e.body for e in ev.tail(store, 10)] == ["imported, older", "a", "b", "c", "e"]
    assert [e.body for e in ev.tail(store, 10, kind="note")] == ["imported, older", "a", "c"]
    assert [e.body for e in ev.tail(store, 10, before_id=ids[2])] == ["a", "b"]
    assert [e.body for e in ev.tail(store, 1, kind="note", before_id=ids[3])] == ["c"]
    assert [e.body for e in ev.tail(store, 2, by_id=True)] == ["imported, older", "e"]
    assert [e.body for e in ev.tail(store, 10, since_ts="2025-01-01T11:00:00.000Z",
                                    until_ts="2025-01-01T13:00:00.000Z")] == ["b", "c"]


def test_since_max_id_and_counts(store: Any) -> None:
    assert (ev.max_id(store), ev.counts(store), ev.counts_by_kind(store)) == (
        0, {"hot": 0, "archived": 0}, {})
    ids = ev.append_many(store, [_note("a"), Event(kind="message", body="b"), _note("c"),
                                 Event(kind="Tick", body="d")])
    assert [e.body for e in ev.since(store, ids[0])] == ["b", "c", "d"]
    assert [e.body for e in ev.since(store, 0, kinds=["message", "Tick"])] == ["b", "d"]
    assert ev.since(store, ids[-1]) == []
    assert ev.max_id(store) == ids[-1]
    assert ev.counts(store) == {"hot": 4, "archived": 0}
    # by count, then by kind byte by byte (SQLite's BINARY: "Tick" before "message")
    assert list(ev.counts_by_kind(store).items()) == [("note", 2), ("Tick", 1), ("message", 1)]


def test_rows_read_by_position_and_by_name(backend: Backend, store: Any) -> None:
    ev.append(store, _note("x", meta={"k": 1}))
    row = store.query('SELECT id, kind AS "Kind", body, body FROM events')[0]
    assert (row[0], row["id"], row["KIND"], row["kind"], row[2]) == (1, 1, "note", "note", "x")
    assert list(row) == [1, "note", "x", "x"] and len(row) == 4
    assert row.keys() == ["id", "Kind", "body", "body"]
    # (PostgreSQL folds an unquoted alias to lowercase: `AS Kind` is "kind" there)
    with pytest.raises(IndexError):
        row["nothing"]
    id_, kind, body, _ = row  # unpacked as a tuple
    assert (id_, kind, body) == (1, "note", "x")
    # every row of one store carries that store's record of what it has said; another's its own
    other = backend.open()
    said = store.query("SELECT 1")[0].said
    assert said is store.query("SELECT id FROM events")[0].said
    assert isinstance(said, set) and other.query("SELECT 1")[0].said is not said
    assert store.scalar("SELECT COUNT(*) FROM events WHERE id > ?", (5,)) == 0
    # values as SQLite gives them: whole sums as int, averages as float, truth as 1 and 0
    ev.append(store, _note("y"))
    got = [*store.query("SELECT SUM(id), AVG(id), MAX(id) FROM events")[0],
           *store.query("SELECT json_valid(meta), 1 = 1, 1 = 2 FROM events WHERE id = 1")[0]]
    assert [(type(v), v) for v in got] == [(int, 3), (float, 1.5), (int, 2), (int, 1),
                                           (int, 1), (int, 0)]


# inputs ----------------------------------------------------------------------------------------

def test_inputs_pending_then_consumed_by_a_completed_turn(store: Any) -> None:
    ev.append(store, _note("not an input"))
    first = inputs.add_message(store, Event.owner_message("first", via="tell"))
    second = inputs.add_message(store, Event.owner_message("second", via="tell"))
    assert [(i.id, i.kind, i.status, i.event.body) for i in inputs.pending(store)] == [
        (first, "message", "pending", "first"), (second, "message", "pending", "second")]
    assert [i.id for i in inputs.pending(store, limit=1)] == [first]
    assert [i.id for i in inputs.pending(store, ids=[second])] == [second]
    assert inputs.pending_count(store) == 2
    assert [e.id for e in ev.tail(store, 10, skip_pending=True)] == [1]
    tick = ev.append(store, Event(kind="tick"))
    end = inputs.finish_turn(store, tick, [first], Event(kind="tick_end", tick_id=tick))
    assert ev.get(store, end).kind == "tick_end"
    assert [i.id for i in inputs.pending(store)] == [second]
    assert inputs.status_of(store, first) == "consumed"
    # a second completed turn never takes it again
    inputs.finish_turn(store, tick + 10, [first], Event(kind="tick_end"))
    assert store.scalar("SELECT tick_id FROM inputs WHERE event_id = ?", (first,)) == tick
    assert inputs.counts(store) == {"pending": 1, "consumed": 1, "set_aside": 0}
    # adding the same event again changes nothing (INSERT OR IGNORE)
    with store.transaction() as db:
        inputs._add(db, first, "message")
    assert inputs.status_of(store, first) == "consumed"


def test_an_input_failing_three_times_is_set_aside_until_retried(store: Any) -> None:
    m = inputs.add_message(store, Event.owner_message("hard one", via="tell"))
    assert inputs.fail(store, [m], "400 prompt too long") == []
    assert inputs.fail(store, [m], "400 again") == []
    assert inputs.fail(store, [m], "400 and again") == [m]
    assert inputs.pending(store) == []
    aside = inputs.listing(store, "set_aside")
    assert [(i.id, i.failures, i.last_error) for i in aside] == [(m, 3, "400 and again")]
    assert inputs.last_failure(store)["input"] == m
    assert inputs.retry(store) == [m]
    assert [(i.id, i.failures) for i in inputs.pending(store)] == [(m, 0)]


# the archive and the rules the database keeps ----------------------------------------------------

def test_the_archive_move_keeps_events_readable(store: Any) -> None:
    new = ev.append(store, _note("new", ts="2025-06-01T00:00:00.000Z"))
    old = ev.append(store, _note("old", ts="2024-01-01T00:00:00.000Z"))  # imported: newest id
    assert archive.count_older_than(store, "2025-01-01T00:00:00.000Z") == 1
    assert archive.move_older_than(store, "2025-01-01T00:00:00.000Z") == 1
    assert archive.move_older_than(store, "2025-01-01T00:00:00.000Z") == 0
    assert ev.counts(store) == {"hot": 1, "archived": 1}
    assert (ev.get(store, old).source, ev.get(store, old).body) == ("archive", "old")
    assert [(e.id, e.source) for e in ev.tail(store, 5)] == [(old, "archive"), (new, "hot")]
    assert [e.id for e in ev.since(store, 0)] == [new]  # inputs are read from the hot log only
    assert ev.max_id(store) == old  # the highest id ever written, archived or not
    with pytest.raises(REFUSED, match="append-only"):
        store.execute("UPDATE events_archive SET body = 'x' WHERE id = ?", (old,))
    with pytest.raises(REFUSED, match="never deleted"):
        store.execute("DELETE FROM events_archive WHERE id = ?", (old,))
    assert ev.append(store, _note("next")) == old + 1


def test_events_refuse_update_and_delete(backend: Backend, store: Any) -> None:
    event_id = ev.append(store, _note("original"))
    with pytest.raises(REFUSED, match="append-only"):
        store.execute("UPDATE events SET body = 'changed' WHERE id = ?", (event_id,))
    with pytest.raises(REFUSED, match="append-only"), store.transaction() as db:
        db.execute("UPDATE events SET kind = 'other' WHERE id = ?", (event_id,))
    with pytest.raises(REFUSED, match="never deleted"):
        store.execute("DELETE FROM events WHERE id = ?", (event_id,))
    if backend.name == "postgres":  # no row trigger sees a TRUNCATE: refused on its own
        for table, says in (("events", "never deleted"), ("events_archive", "never deleted")):
            with pytest.raises(StoreRefused, match=says):
                store.execute(f"TRUNCATE {table}")
    e = ev.get(store, event_id)
    assert (e.body, e.kind, ev.counts(store)["hot"]) == ("original", "note", 1)


def test_a_redaction_marker_is_the_one_update_let_through(store: Any) -> None:
    event_id = ev.append(store, _note("my password is hunter2", meta={"secret": "hunter2"}))
    marker = "[redacted #1: a password]"
    with store.transaction() as db:
        db.execute("INSERT INTO redactions(item_kind, item_id, marker, why, actor, ts) "
                   "VALUES ('event', ?, ?, 'a password', 'owner', ?)",
                   (event_id, marker, "2025-01-01T00:00:00.000Z"))
    with pytest.raises(REFUSED, match="append-only"):  # another text than the marker
        store.execute("UPDATE events SET body = 'something else' WHERE id = ?", (event_id,))
    for column, value in (("kind", "x"), ("actor", "x"), ("author_kind", "tool"),
                          ("ts", "2020-01-01T00:00:00.000Z"), ("tick_id", 3)):
        with pytest.raises(REFUSED, match="append-only"):  # the marker, and another change
            store.execute(f"UPDATE events SET body = ?, {column} = ? WHERE id = ?",
                          (marker, value, event_id))
    store.execute("UPDATE events SET body = ?, meta = NULL WHERE id = ?", (marker, event_id))
    e = ev.get(store, event_id)
    assert (e.body, e.meta, e.kind) == (marker, {}, "note")


# transactions --------------------------------------------------------------------------------

def test_a_transaction_that_raises_leaves_nothing(store: Any) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        ev.append(store, _note("a"))
        inputs.add_message(store, Event.owner_message("b", via="tell"))
        raise RuntimeError("boom")
    assert ev.counts(store) == {"hot": 0, "archived": 0}
    assert (ev.max_id(store), inputs.pending(store)) == (0, [])
    # the store writes on afterwards (PostgreSQL's ids may skip what the rollback took)
    assert ev.get(store, ev.append(store, _note("c"))).body == "c"


def test_a_nested_transaction_rolls_back_only_its_part(store: Any) -> None:
    with store.transaction():
        kept = ev.append(store, _note("outer"))
        with pytest.raises(ValueError), store.transaction():
            ev.append(store, _note("inner, undone"))
            raise ValueError("inner fails")
        with store.transaction():
            inner = ev.append(store, _note("inner, kept"))
        with pytest.raises(REFUSED), store.transaction() as db:  # a refused statement too
            db.execute("UPDATE events SET body = 'x' WHERE id = ?", (kept,))
        last = ev.append(store, _note("after"))
    assert [e.body for e in ev.tail(store, 10, by_id=True)] == ["outer", "inner, kept", "after"]
    assert [e.id for e in ev.tail(store, 10, by_id=True)] == [kept, inner, last]


def test_a_readonly_store_reads_and_refuses_to_write(backend: Backend, store: Any) -> None:
    ev.append(store, _note("there"))
    reader = backend.open(readonly=True)
    assert [e.body for e in ev.tail(reader, 5)] == ["there"]
    with pytest.raises(StoreError, match="read-only"):
        ev.append(reader, _note("refused"))
    with pytest.raises(StoreError, match="read-?only"):
        reader.execute("INSERT INTO inputs(event_id, kind, created_at, updated_at) "
                       "VALUES (1, 'message', 'now', 'now')")
    assert ev.counts(store)["hot"] == 1


def test_a_write_lock_held_past_the_timeout_is_busy(backend: Backend, store: Any) -> None:
    other = backend.open(busy_timeout_ms=100)
    with store.transaction():
        ev.append(store, _note("holding the lock"))
        with pytest.raises(StoreBusy, match="lock"):
            ev.append(other, _note("waits, then gives up"))
        with pytest.raises(StoreBusy, match="lock"):  # a write outside a transaction waits too
            other.execute("INSERT INTO inputs(event_id, kind, created_at, updated_at) "
                          "VALUES (9, 'message', 'now', 'now')")
    assert ev.append(other, _note("now it may")) == 2
    assert [e.body for e in ev.tail(store, 5)] == ["holding the lock", "now it may"]


# the schema's version ----------------------------------------------------------------------------

def test_the_postgres_schema_version_is_sqlites_number_of_migrations() -> None:
    assert pg_schema.VERSION == len(migrations.MIGRATIONS)


def _newer(backend: Backend, store: Any) -> None:
    """Record a migration this code does not know, as a newer coworker would."""
    if backend.name == "sqlite":
        store.execute("INSERT INTO _migrations(name, applied_at) VALUES (?, ?)",
                      ("m999_from_a_newer_coworker", "2030-01-01T00:00:00+00:00"))
    else:
        store.execute("INSERT INTO _migrations(version, name, applied_at) VALUES (?, ?, ?)",
                      (pg_schema.VERSION + 1, "from_a_newer_coworker", "2030-01-01T00:00:00"))


@pytest.mark.parametrize("readonly", [False, True])
def test_a_schema_newer_than_the_code_is_refused_in_one_line(
        backend: Backend, store: Any, readonly: bool) -> None:
    _newer(backend, store)
    with pytest.raises(StoreError) as refused:
        backend.open(readonly=readonly)
    known = pg_schema.VERSION
    assert str(refused.value) == (
        f"the database's schema is version {known + 1}, newer than this coworker knows "
        f"({known}): upgrade coworker on this host")


def test_every_text_column_compares_byte_by_byte(pg_url: str) -> None:  # noqa: F811
    """COLLATE "C" on every text column, as SQLite's BINARY: a database's own locale would
    order timestamps and kinds its own way."""
    with PgStore.open(pg_url, "alpha") as store:
        loose = store.query(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = ? AND data_type = 'text' "
            "AND collation_name IS DISTINCT FROM 'C'", (store.schema,))
        assert [tuple(r) for r in loose] == []
        assert store.schema_version() == pg_schema.VERSION


# PostgreSQL: many coworkers, many hosts, one database ---------------------------------------------

def test_two_coworkers_on_one_database_see_only_their_own(pg_url: str) -> None:  # noqa: F811
    with PgStore.open(pg_url, "alpha") as a, PgStore.open(pg_url, "beta_2") as b:
        assert ev.append(a, _note("alpha's")) == 1
        assert ev.append(b, _note("beta's")) == 1  # ids of its own
        inputs.add_message(b, Event.owner_message("for beta", via="tell"))
        assert [e.body for e in ev.tail(a, 10)] == ["alpha's"]
        assert [e.body for e in ev.tail(b, 10)] == ["beta's", "for beta"]
        assert (inputs.pending(a), [i.event.body for i in inputs.pending(b)]) == (
            [], ["for beta"])
        assert (ev.max_id(a), ev.max_id(b)) == (1, 2)
        assert (a.schema, b.schema) == ("cw_alpha", "cw_beta_2")
        with pytest.raises(StoreError, match="not a coworker id"):
            PgStore.open(pg_url, "Alpha; DROP")


def test_two_hosts_opening_a_new_coworker_at_once_create_it_once(
        pg_url: str) -> None:  # noqa: F811
    start = threading.Barrier(3)
    opened: list[Any] = []
    failed: list[BaseException] = []

    def open_one() -> None:
        try:
            start.wait()
            opened.append(PgStore.open(pg_url, "shared"))
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not failed
        rows = opened[0].query("SELECT version, name FROM _migrations")
        assert [tuple(r) for r in rows] == [(pg_schema.BASELINE, "_baseline"),
                                            (21, "_count_rung_terms_by_level"),
                                            (22, "_index_rung_terms"),
                                            (23, "_defer_bulk_counts")]
        assert ev.append(opened[1], _note("one")) == 1
    finally:
        for s in opened:
            s.close()


def test_a_schema_that_is_not_a_coworkers_is_refused(pg_url: str) -> None:  # noqa: F811
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("CREATE SCHEMA cw_other; CREATE TABLE cw_other.accounts (n int)")
    with pytest.raises(StoreError, match="not a coworker's .*accounts"):
        PgStore.open(pg_url, "other")
    with pytest.raises(StoreError, match="no coworker 'nobody'"):
        PgStore.open(pg_url, "nobody", readonly=True)


@pytest.mark.parametrize("url", [
    "postgresql://coworker:hunter2-Secret@/coworker?host=/nonexistent/cw-socket",
    "postgresql://coworker:hunter2-Secret@127.0.0.1:9/coworker?connect_timeout=3",
])
def test_an_unreachable_server_is_one_line_without_the_password(url: str) -> None:
    with pytest.raises(StoreError) as failed:
        PgStore.open(url, "alpha")
    text = str(failed.value)
    assert "\n" not in text and text.startswith("cannot reach PostgreSQL at ")
    assert ("/nonexistent/cw-socket" in text) or ("127.0.0.1:9" in text)
    assert "check that the server runs" in text
    shown = "".join(traceback.format_exception(failed.value))
    assert "hunter2" not in shown


# the translator ----------------------------------------------------------------------------------

def test_the_translator_rewrites_only_code() -> None:
    t = translate("SELECT a, '?%' AS b, \"c?\" FROM x -- ? here\nWHERE y = ? AND z LIKE 'a%' "
                  "AND +ts < ? ORDER BY id LIMIT ?")
    assert t.sql == ("SELECT a, '?%%' AS b, \"c?\" FROM x -- ? here\nWHERE y = %s AND z LIKE "
                     "'a%%' AND ts < %s ORDER BY id LIMIT %s")
    assert (t.limits, t.returns_id, t.writes) == ((2,), False, False)
    t = translate("INSERT OR IGNORE INTO tags(item_id) VALUES (?)", frozenset({"tags"}))
    assert t.sql == "INSERT INTO tags(item_id) VALUES (%s) ON CONFLICT DO NOTHING RETURNING id"
    assert (t.returns_id, t.writes) == (True, True)  # an ignored row returns no id
    t = translate("INSERT INTO events(ts) VALUES (?), (?);", frozenset({"events"}))
    assert (t.sql, t.returns_id) == ("INSERT INTO events(ts) VALUES (%s), (%s) RETURNING id",
                                     True)
    assert translate("SELECT 1 WHERE a IS ? AND b IS NOT ? AND c IS NOT NULL AND d IS NULL "
                     "AND CAST(e AS INTEGER) > 0 LIMIT -1").sql == (
        "SELECT 1 WHERE a IS NOT DISTINCT FROM %s AND b IS DISTINCT FROM %s AND c IS NOT NULL "
        "AND d IS NULL AND CAST(e AS BIGINT) > 0 LIMIT ALL")
    for sqlite_only in ("SELECT rowid FROM events_fts WHERE events_fts MATCH ?",
                        "PRAGMA secure_delete", "SELECT name FROM sqlite_master",
                        "INSERT OR REPLACE INTO vectors VALUES (?)",
                        "SELECT value FROM json_each(meta, '$.ids')",
                        "SELECT group_concat(word, ' ') FROM tags"):
        with pytest.raises(Untranslatable, match="SQL of its own"):
            translate(sqlite_only)


def test_sqlites_json_functions_answer_alike(store: Any) -> None:
    doc = ('{"s": "text", "n": 42, "f": 1.5, "t": true, "nil": null, '
           '"o": {"a": {"b": "deep"}}, "l": [10, "x"]}')
    cases = [("$.s", "text"), ("$.n", "42"), ("$.f", "1.5"), ("$.t", "1"), ("$.nil", None),
             ("$.missing", None), ("$.o.a.b", "deep"), ("$.l[1]", "x"), ("$.l[0]", "10")]
    for path, want in cases:
        got = store.scalar("SELECT json_extract(?, ?)", (doc, path))
        assert (None if got is None else str(got)) == want, path
    assert store.scalar("SELECT json_extract(NULL, '$.a')") is None
    valid = [store.scalar("SELECT json_valid(?)", (v,)) for v in (doc, "5", "{bad", None)]
    assert valid == [1, 1, 0, 0]  # NULL is no JSON (SQLite 3.40)
    ev.append(store, _note("x", meta={"tool_use_id": "tu_1"}))
    assert ev.by_tool_use(store, "note", "tu_1").body == "x"
    assert ev.by_tool_use(store, "note", "tu_2") is None


def test_an_import_adds_up_its_term_counts_once_and_they_are_the_rows_own(
        store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import in several batches on PostgreSQL keeps its events' term counts aside and adds
    them once before its commit (ev.bulk_counts): afterwards they are what a recount of the
    rows gives, as after appends; an import refused mid-file adds nothing; appends after it
    count as before."""
    from runtime import importer
    from runtime.store import health

    monkeypatch.setattr(importer, "BATCH", 40)
    ev.append(store, _note("the parser report was late"))  # a term already counted
    lines = [json.dumps({"ts": f"2026-11-{1 + i % 28:02d}T10:00:00Z", "kind": "message",
                         "actor": "dana", "body": f"parser report {i} about word{i % 7}"})
             for i in range(130)]
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:90]) + '\n{"kind": "message"}\n')
    with pytest.raises(importer.BadLine):
        importer.import_file(store, bad)
    assert store.scalar("SELECT count(*) FROM events") == 1
    report = importer.import_file(store, good)
    assert report.imported == 130 and report.first_id is not None
    ev.append(store, _note("after the import: parser"))
    if store.dialect == "postgres":
        assert {v.table: v.state for v in health.pg_fts_verdicts(store)}["fts_stats"] == "ok"
        assert store.scalar("SELECT doc FROM fts_stats WHERE term = 'parser'") == 132
        assert store.scalar("SELECT current_setting('coworker.deferred_counts', true)") in (
            None, "", "off")
    assert {e.id for e, _, _ in ev.fts_search(store, '"word3"', 50)} == {
        report.first_id + i for i in range(130) if i % 7 == 3}
