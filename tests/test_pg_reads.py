"""Reads made cheaper on PostgreSQL answer as they did (issue 42 item 7).

An `IN (?, ?, ...)` list of placeholders goes to PostgreSQL as one array (`= ANY`, `<> ALL`:
one statement text whatever the list's length, so psycopg prepares it), unless its values are
not of one type; recall reads its episodes' spans in one statement (`events.spans_meta_unread`),
and its marks (stamps, ceilings) once, in one snapshot (`marks.one_moment`). Each answers as
SQLite does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.memory.recall import recall
from runtime.store import Store, fts, marks
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.store.pg import PgStore, translate

from .pgserver import pg_url  # noqa: F401  (the fixture)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        s: Any = Store.open(tmp_path / "coworker.db")
    else:
        s = PgStore.open(request.getfixturevalue("pg_url"), "reads")
    try:
        ev.append_many(s, [ev.Event(kind="note" if i % 3 else "message", body=f"line {i}",
                                    actor="owner" if i % 2 else "dana") for i in range(1, 21)]
                       + [ev.Event(kind="note", body='a "b" \\c {d}, NULL', actor="owner")])
        yield s
    finally:
        s.close()


def test_an_in_list_is_one_array_parameter() -> None:
    t = translate("SELECT a FROM x WHERE k = ? AND id IN (?, ?,?) AND y NOT IN (?) LIMIT ?")
    assert t.sql == "SELECT a FROM x WHERE k = %s AND id = ANY(%s) AND y <> ALL(%s) LIMIT %s"
    assert t.plain == ("SELECT a FROM x WHERE k = %s AND id IN (%s, %s,%s) AND y NOT IN (%s) "
                       "LIMIT %s")
    assert t.bound(["k", 1, 2, None, 'y"\\', -1]) == (t.sql, ["k", "{1,2,NULL}", '{"y\\"\\\\"}',
                                                               None])
    assert t.bound(["k", 1.5, 2.0, 3.0, "y", 2])[1][1] == [1.5, 2.0, 3.0]
    assert t.bound(["k", 1, "2", 3, "y", 5]) == (t.plain, ["k", 1, "2", 3, "y", 5])  # mixed
    assert translate("SELECT 1 WHERE a IN (?, b)").sql == "SELECT 1 WHERE a IN (%s, b)"
    assert translate("SELECT ? IN (?, ?)").sql == "SELECT %s IN (%s, %s)"  # no type to infer


def test_in_lists_answer_as_sqlite(store: Any) -> None:
    def ids(sql: str, params: tuple[Any, ...]) -> list[int]:
        return [int(r[0]) for r in store.query(sql, params)]

    assert ids("SELECT id FROM events WHERE id IN (?, ?, ?) ORDER BY id", (3, 1, 99)) == [1, 3]
    assert ids("SELECT id FROM events WHERE id IN (?) ORDER BY id", (20,)) == [20]
    assert ids("SELECT id FROM events WHERE id NOT IN (?, ?) AND id < ? ORDER BY id",
               (1, 2, 5)) == [3, 4]
    assert ids("SELECT id FROM events WHERE kind IN (?, ?) AND actor NOT IN (?) AND id IN "
               "(?, ?, ?, ?) ORDER BY id", ("message", "none", "owner", 2, 3, 6, 9)) == [6]
    # a NULL in the list matches nothing; in NOT IN, it makes every row unknown
    assert ids("SELECT id FROM events WHERE id IN (?, ?) ORDER BY id", (None, 4)) == [4]
    assert ids("SELECT id FROM events WHERE id NOT IN (?, ?)", (None, 4)) == []
    assert ids("SELECT id FROM events WHERE id IN (?, ?)", (None, None)) == []
    assert ids("SELECT id FROM events WHERE body IN (?, ?) ORDER BY id",
               ('a "b" \\c {d}, NULL', "line 2")) == [2, 21]
    assert ids("SELECT id FROM events WHERE body NOT IN (?, ?, ?) AND id > ? ORDER BY id",
               ("NULL", "line 20", "line 19", 18)) == [21]
    assert ids("SELECT ? IN (?, ?)", (2, 1, 2)) == [1]


def test_spans_are_read_as_each_span_alone(store: Any) -> None:
    spans = [(3, 6), (5, 9), (30, 40), (1, 1), (18, 20), (7, 7)]
    got = ev.spans_meta_unread(store, spans)
    want = [ev.span_meta_unread(store, a, b) for a, b in spans]
    assert [[(e, m[0]) for e, m in s] for s in got] == [[(e, m[0]) for e, m in s] for s in want]
    assert [[e.id for e, _ in s] for s in got] == [[3, 4, 5, 6], [5, 6, 7, 8, 9], [], [1],
                                                   [18, 19, 20], [7]]
    assert ev.spans_meta_unread(store, []) == []


def test_a_translation_kept_by_its_shape_is_the_statements_own() -> None:
    """translate_cached keeps the work by the statement with its string literals marked: each
    statement still reads as translate reads it, its own literals in place."""
    from runtime.store.pg import Untranslatable, translate_cached

    ids = frozenset({"events"})
    for text in ("SELECT id FROM e WHERE tsv @@ '''a'':A'::tsquery AND x IN (?, ?) LIMIT ?",
                 "SELECT id FROM e WHERE tsv @@ '''b'' & ''c'''::tsquery AND x IN (?, ?) LIMIT ?",
                 "SELECT 'it''s 100%' || ? FROM x -- it's ? here\nWHERE b IS ? LIMIT -1",
                 "INSERT INTO events(ts, body) VALUES ('x', ?);", "SELECT \"a'b\", 'c' FROM t"):
        assert translate_cached(text, ids) == translate(text, ids), text
    with pytest.raises(Untranslatable, match="'x' FROM t WHERE t MATCH"):
        translate_cached("SELECT 'x' FROM t WHERE t MATCH ?")


def test_counts_of_several_matches_are_each_ones_own(store: Any) -> None:
    """fts.count_upto_many (search's plan: a count a group of its words) answers as
    events.fts_count_upto of each, on both backends: one-word counts kept, the others
    counted, a ceiling below the top counted too."""
    from runtime.store import fts

    matches = ['"line"', '"dana"', '"line" NOT "dana"', '"zzz"', '"line" AND "owner"', '"note"']
    for top, cap in ((21, -1), (21, 5), (12, -1), (12, 3)):
        want = [ev.fts_count_upto(store, m, top, cap) for m in matches]
        assert fts.count_upto_many(store, matches, top, cap) == want
    assert fts.count_upto_many(store, matches, 21, -1) == [20, 10, 10, 0, 10, 15]
    assert fts.count_upto_many(store, matches, 12, -1) == [12, 6, 6, 0, 6, 8]


def _sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements the store sends to PostgreSQL from now on (psycopg's own execute)."""
    import psycopg

    sent: list[str] = []
    send = psycopg.Connection.execute

    def spy(self: Any, query: Any, *a: Any, **k: Any) -> Any:
        sent.append(query.decode() if isinstance(query, bytes) else str(query))
        return send(self, query, *a, **k)

    monkeypatch.setattr(psycopg.Connection, "execute", spy)
    return sent


def _marks_now(store: Any) -> tuple[Any, ...]:
    return (fts.rollups_stamp(store), fts.history_stamp(store), ev.fts_top_id(store),
            ev.fts_top_id(store, "rollups_fts"), rl.episodes_cover_up_to(store))


def test_a_recalls_marks_are_read_once_and_say_what_they_said(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rl.seal(store, level=1, first_event=1, last_event=12, source_range="1-12", first_ts=None,
            last_ts=None, title="lines", body="line one to twelve", terms="line", method="t")
    before = _marks_now(store)
    assert before[2:] == (21, 1, 12) and before[0][0] == 1
    sent = _sent(monkeypatch)
    with marks.one_moment(store):
        assert _marks_now(store) == before and _marks_now(store) == before
    if isinstance(store, PgStore):  # the eight marks in one statement, in one snapshot
        assert [s for s in sent if "max(" in s.lower()] == [f"SELECT {', '.join(marks.MARKS)}"]
        assert sent[0].startswith("BEGIN ISOLATION LEVEL REPEATABLE READ") and sent[-1] == "COMMIT"
    sent.clear()
    recall(store, "which line was twelve")
    if isinstance(store, PgStore):
        assert sum("pg_relation_filenode" in s for s in sent) == 1, sent


def test_inside_one_moment_postgresql_reads_one_snapshot(pg_url: str) -> None:  # noqa: F811
    store, other = PgStore.open(pg_url, "moment"), PgStore.open(pg_url, "moment")
    try:
        ev.append_many(store, [ev.Event(kind="note", body=f"line {i}") for i in range(3)])
        with marks.one_moment(store):
            assert ev.fts_top_id(store) == 3
            ev.append_many(other, [ev.Event(kind="note", body="a later line")])
            assert ev.fts_top_id(store) == 3
            assert store.scalar("SELECT count(*) FROM events") == 3  # the rows agree with it
        assert ev.fts_top_id(store) == 4 and store.scalar("SELECT count(*) FROM events") == 4
    finally:
        store.close()
        other.close()
