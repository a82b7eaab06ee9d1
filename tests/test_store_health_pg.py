"""What assumed the store is a SQLite file, on PostgreSQL (issue 42): the stamps of what memory
keeps of the full text's counts (`fts.history_stamp`, `rollups_stamp`: the server's files of the
tables where SQLite has the file's inode) stay put while rows are appended and move when
`health.pg_fts_rebuild` empties and refills the kept counts (`health.fts_rebuild`, the command's,
rebuilds either backend's full text and search answers as before); the lab's statement count
(`lab_queries.counting`) counts alike on both backends; the loop's hands are told the home of a
SQLite store only (a PostgreSQL store lives in no home: the loop gives its Hands the home when it
makes them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.loop import hands as loop_hands
from runtime.store import Event, Store, fts, health, lab_queries, tags
from runtime.store import events as ev
from runtime.store.pg import PgStore

from .pgserver import pg_url  # noqa: F401  (the fixture)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        s: Any = Store.open(tmp_path / "home" / "state" / "coworker.db")
    else:
        s = PgStore.open(request.getfixturevalue("pg_url"), "healthpg")
    yield s
    s.close()


def _note(body: str) -> Event:
    return Event(kind="note", body=body, actor="coworker", author_kind="agent")


def test_the_stamps_stay_while_rows_are_appended_and_move_with_a_rebuild(pg_url: str) -> None:  # noqa: F811
    store: Any = PgStore.open(pg_url, "healthpg")
    with store:
        ev.append_many(store, [_note(f"harbour meeting {i}") for i in range(5)])
        history, ladder = fts.history_stamp(store), fts.rollups_stamp(store)
        ev.append(store, _note("another harbour meeting"))
        assert (fts.history_stamp(store), fts.rollups_stamp(store)) == (history, ladder)
        tags.add(store, "event", 1, ["harbour"], "owner")
        assert fts.history_stamp(store) != history  # a tag rewrites a row's words
        history = fts.history_stamp(store)
        health.pg_fts_rebuild(store)
        assert fts.history_stamp(store) != history
        assert fts.rollups_stamp(store) != ladder
        assert {v.state for v in health.fts_verdicts(store)} == {"ok"}


def test_the_lab_counts_statements_alike_on_both(store: Any) -> None:
    ev.append_many(store, [_note(f"walrus {i}") for i in range(3)])
    with lab_queries.counting(store) as counted:
        ev.tail(store, 2)
        store.scalar("SELECT count(*) FROM events")
        with store.transaction() as db:
            db.executemany("INSERT INTO pins(text, ts) VALUES (?, ?)",
                           [("a", "2026-01-01"), ("b", "2026-01-01")])
    assert counted.count == 7  # tail's 2, 1, BEGIN, 2 rows, COMMIT
    store.scalar("SELECT 1")
    assert counted.count == 7  # counting ended with the block
    if store.dialect == "postgres":
        assert "execute" not in vars(store.conn) and "_run" not in vars(store)  # their own


class _Hands:
    def __init__(self) -> None:
        self.told: list[str] = []

    def protect(self, home: Any) -> None:
        self.told.append(str(home))


def test_the_hands_are_told_a_sqlite_stores_home_only(store: Any, tmp_path: Path) -> None:
    hands = _Hands()
    loop_hands._protect(hands, store)
    assert hands.told == ([str(tmp_path / "home")] if store.dialect == "sqlite" else [])


def test_the_rebuild_leaves_search_as_it_was_on_both(store: Any) -> None:
    ids = ev.append_many(store, [_note(f"walrus harbour {i}") for i in range(4)])
    tags.add(store, "event", ids[1], ["zebra"], "owner")
    before = [(e.id, round(s, 9)) for e, s, _ in ev.fts_search(store, "harbour OR zebra", 10)]
    done = health.fts_rebuild(store)
    assert done == (["events_fts", "rollups_fts"] if store.dialect == "sqlite" else
                    ["fts_event_tags", "fts_rollups", "fts_rollup_words", "fts_rollup_terms",
                     "fts_stats",
                     "fts_rollup_stats"])
    assert {v.state for v in health.fts_verdicts(store)} == {"ok"}
    assert [(e.id, round(s, 9)) for e, s, _ in ev.fts_search(store, "harbour OR zebra", 10)] \
        == before
