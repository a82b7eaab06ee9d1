"""Moving a coworker's store between SQLite and PostgreSQL (runtime/store/copy.py, issue 42):
every row, the source's ids, idempotent, resumable, verified by counts and digests. Real
SQLite files and a real throwaway PostgreSQL (tests/pgserver.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.errors import StoreError
from runtime.store import Event, Store, inputs
from runtime.store import copy as cp
from runtime.store import events as ev
from runtime.store.pg import PgStore

from .pgserver import pg_url  # noqa: F401  (the fixture)

SHARED = ["events", "events_archive", "inputs", "tags", "redactions"]  # the baseline's tables


def history(store: Any, n: int = 25) -> None:
    """Messages, notes (one with a NUL, one not ASCII), inputs, an archived slice."""
    for i in range(n):
        word = "caf\u00e9" if i % 3 else "crash"
        e = Event(kind="note", body=f"note {i}: the parser {word}",
                  actor="coworker", author_kind="agent", meta={"i": i, "pi": 3.25})
        ev.append(store, e)
    inputs.add_message(store, Event.owner_message("please check the nightly build", "tell"))
    ev.append(store, Event(kind="note", body="a NUL \x00 inside", actor="coworker",
                           author_kind="agent"))


def shared_tables(source: Any, target: Any) -> list[cp.Copied]:
    return [cp.copy_table(source, target, t) for t in cp.tables(source) if t in SHARED]


def test_a_sqlite_history_copied_to_postgres_and_back_is_the_same(
        tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    with Store.open(tmp_path / "a.db") as sqlite, PgStore.open(pg_url, "mover_1") as pg:
        history(sqlite)
        there = shared_tables(sqlite, pg)
        assert all(c.same and c.source_rows == c.target_rows for c in there), there
        assert {c.table: c.written for c in there}["events"] == ev.max_id(sqlite)
        # the same ids, and a new event takes the next id after them
        assert [e.id for e in ev.tail(pg, 5)] == [e.id for e in ev.tail(sqlite, 5)]
        new = ev.append(pg, Event(kind="note", body="after the copy", actor="coworker",
                                  author_kind="agent"))
        assert new == ev.max_id(sqlite) + 1
        assert inputs.pending_count(pg) == 1
        nul = ev.tail(pg, 2)[0]
        assert nul.body == "a NUL \ufffd inside"
        with Store.open(tmp_path / "b.db") as back:
            again = shared_tables(pg, back)
            assert all(c.same for c in again), again
            assert ev.get(back, new).body == "after the copy"


def test_a_copy_run_again_writes_nothing_and_one_cut_short_resumes(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setattr(cp, "BATCH", 7)
    with Store.open(tmp_path / "a.db") as sqlite, PgStore.open(pg_url, "mover_2") as pg:
        history(sqlite, 40)
        real_write, calls = cp._write, []

        def dies_on_the_third(target: Any, table: str, cols: Any, rows: list) -> int:
            calls.append(table)
            if table == "events" and calls.count("events") == 3:
                raise StoreError("the connection dropped")
            return real_write(target, table, cols, rows)
        monkeypatch.setattr(cp, "_write", dies_on_the_third)
        with pytest.raises(StoreError):
            cp.copy_table(sqlite, pg, "events")
        assert ev.max_id(pg) == 14  # two batches of 7 were committed, the third was not
        monkeypatch.setattr(cp, "_write", real_write)
        resumed = cp.copy_table(sqlite, pg, "events")
        assert resumed.written == ev.max_id(sqlite) - 14 and resumed.same
        assert cp.copy_table(sqlite, pg, "events").written == 0  # idempotent


def test_a_target_that_differs_is_said_so(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    with Store.open(tmp_path / "a.db") as sqlite, PgStore.open(pg_url, "mover_3") as pg:
        history(sqlite, 5)
        ev.append(pg, Event(kind="note", body="only in the target", actor="x",
                            author_kind="agent"))
        copied = cp.copy_table(sqlite, pg, "events")
        # its id 1 is the target's own row: the copy skips it and the digests disagree
        assert not copied.same and copied.target_rows == copied.source_rows


def test_a_target_without_the_sources_tables_is_refused_before_writing(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a.db") as source, Store.open(tmp_path / "b.db") as target:
        history(source, 3)
        target.execute("DROP TABLE pins")  # a target of another version
        with pytest.raises(StoreError, match="the target has no table pins"):
            cp.copy_store(source, target)
        assert ev.max_id(target) == 0  # nothing written


def test_store_copy_to_a_sqlite_file_copies_every_table_and_says_so(offline_home: Any,
                                                                     tmp_path: Path) -> None:
    from .conftest import coworker

    with Store.open(offline_home.db_path) as store:
        history(store, 12)
    target = tmp_path / "copy.db"
    done = coworker("store", "copy", "--to", str(target))
    assert done.returncode == 0, done.stderr
    assert "every table verified" in done.stdout and "events: 14 row(s) written" in done.stderr
    again = coworker("store", "copy", "--to", str(target))
    assert again.returncode == 0 and "events: 0 row(s) written" in again.stderr
    with Store.open(target, readonly=True) as copy, Store.open(offline_home.db_path) as src:
        assert [e.body for e in ev.tail(copy, 20)] == [e.body for e in ev.tail(src, 20)]


@pytest.mark.parametrize("to, says", [
    ("state/coworker.db", "this home's own store"),
    ("secret:TEAM_DB", "secret TEAM_DB is not set"),
    ("postgresql://coworker@127.0.0.1:1/team", "no [coworker] id"),
])
def test_store_copy_mistakes_are_one_line(offline_home: Any, to: str, says: str) -> None:
    from .conftest import coworker

    done = coworker("store", "copy", "--to", to)
    assert done.returncode != 0 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_whole_coworker_goes_to_postgres_and_back_verified(
        tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    """`coworker demo`'s coworker (two weeks of work, reflect run: a ladder whose parents come
    after their children, an archive, import keys) to PostgreSQL, back to a new SQLite file,
    and again (nothing written): every table verified each way."""
    from .conftest import coworker

    made = coworker("demo", "--keep", str(tmp_path / "demo"))
    assert made.returncode == 0, made.stderr
    source_db = tmp_path / "demo" / "state" / "coworker.db"
    with Store.open(source_db, readonly=True) as source, PgStore.open(pg_url, "demo_1") as pg:
        there = cp.copy_store(source, pg)
        assert {c.table for c in there} >= {"events", "events_archive", "rollups", "import_keys"}
        assert all(c.same and c.target_rows == c.source_rows for c in there), there
        assert cp.copy_store(source, pg)[0].written == 0
        with Store.open(tmp_path / "back.db") as back:
            assert all(c.same for c in cp.copy_store(pg, back))
        assert ev.max_id(pg) == ev.max_id(source)


def test_store_copy_to_postgresql_from_the_command_line(offline_home: Any,
                                                        pg_url: str) -> None:  # noqa: F811
    from .conftest import coworker, write_config

    write_config(offline_home.root, coworker={"id": "cli_copy"})
    with Store.open(offline_home.db_path) as store:
        history(store, 6)
    done = coworker("store", "copy", "--to", pg_url)
    assert done.returncode == 0, done.stderr
    assert "every table verified" in done.stdout and "#cw_cli_copy" in done.stdout
    with PgStore.open(pg_url, "cli_copy", readonly=True) as pg:
        assert ev.max_id(pg) == 8 and inputs.pending_count(pg) == 1
