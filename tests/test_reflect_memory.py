"""Reflect's memory does not grow with the history (issue 15).

Every read reflect makes is a bounded page: the archive move goes in id ranges, episodes are cut
from a stream of events, parents are sealed from groups of `fanout` rollups, the lessons call
reads the week's newest episodes, the memory map its newest rollups, and the document
frequencies it caches are capped. With those bounds set small, a history many times longer than
any of them is reflected without one query handing back (or one statement moving) more rows
than the largest bound, and what reflect writes is the same as with the default bounds. No
clock and no absolute memory figure is asserted: rows held at once are counted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rituals import reflect as rf
from runtime import synth
from runtime.home import Home
from runtime.memory import cards as cd
from runtime.memory import docfreq, ladder, memmap
from runtime.store import Event, Store
from runtime.store import archive as arch
from runtime.store import events as ev

BOUND = 40  # every page, batch and cache is set to at most this many rows
FANOUT = 4
N_OLD = 2400  # about 500 episodes: many times BOUND, so a whole level read at once shows
N_NEW = 30  # live events, newer than the archive cutoff: they stay hot
NOW = datetime(2025, 6, 1, tzinfo=UTC)


class _Cursor:
    """A cursor that counts the rows each fetch hands back."""

    def __init__(self, cur: sqlite3.Cursor, seen: list[int]) -> None:
        self._cur, self._seen = cur, seen

    def fetchall(self) -> list[Any]:
        rows = self._cur.fetchall()
        self._seen.append(len(rows))
        return rows

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def __iter__(self) -> Iterator[Any]:
        n = 0
        for row in self._cur:
            n += 1
            yield row
        self._seen.append(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


class _Counting:
    """A connection that records the rows each query returns and each write statement
    changes (the store's transactions hand this to their callers too)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.fetched: list[int] = []
        self.changed: list[tuple[int, str]] = []

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        cur = self._conn.execute(sql, params)
        if sql.lstrip().upper().startswith(("INSERT", "DELETE", "UPDATE")):
            self.changed.append((cur.rowcount, sql))
        return _Cursor(cur, self.fetched)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _history() -> list[Event]:
    old = [Event(kind=d["kind"], body=d["body"], actor=d["actor"],
                 author_kind=d["author_kind"], ts=d["ts"])
           for d in synth.events(N_OLD, start=datetime(2024, 1, 1, 9, tzinfo=UTC))]
    new = [Event(kind=d["kind"], body=d["body"], actor=d["actor"],
                 author_kind=d["author_kind"], ts=d["ts"])
           for d in synth.events(N_NEW, seed=2, start=datetime(2025, 5, 30, 9, tzinfo=UTC))]
    return old + new


def _home(root: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    home = Home.locate(root)
    home.init()
    monkeypatch.setattr(rf, "LADDER_FANOUT", FANOUT)
    with Store.open(home.db_path) as store:
        ev.append_many(store, _history())
    return home


def _small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arch, "BATCH", BOUND)
    monkeypatch.setattr(ladder, "HISTORY_PAGE", BOUND)
    monkeypatch.setattr(docfreq, "MAX_STEMS", BOUND)
    monkeypatch.setattr(docfreq, "CHUNK", BOUND)
    monkeypatch.setattr(memmap, "MAP_NODES", BOUND)
    monkeypatch.setattr(rf, "LESSON_EPISODES", BOUND)


def _reflect(home: Home, store: Store, asked: list[int]) -> rf.ReflectReport:
    def lessons(items: Sequence[tuple[int, str]]) -> list[dict[str, Any]]:
        asked.append(len(items))
        return []

    # every sealed episode is this week's: the lessons call could read the whole level
    return rf.reflect(home, home.settings(), store, now=NOW, lessons=lessons)


def _written(home: Home) -> dict[str, Any]:
    with Store.open(home.db_path, readonly=True) as store:
        return {
            "rollups": [tuple(r) for r in store.query(
                "SELECT id, level, parent_id, source_range, first_event, last_event, first_ts, "
                "last_ts, title, body, terms, method, vocab FROM rollups ORDER BY id")],
            "archive": [tuple(r) for r in store.query(
                "SELECT id, ts, kind, actor, author_kind, body, meta, tick_id "
                "FROM events_archive ORDER BY id")],
            "hot": [r[0] for r in store.query("SELECT id FROM events ORDER BY id")],
        }


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_reflect_holds_bounded_pages_whatever_the_history(
        isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _home(isolated_home / "bounded", monkeypatch)
    _small_bounds(monkeypatch)
    cached: list[int] = []
    idf = cd.Distinctive.idf

    def counted_idf(self: cd.Distinctive, stems: Sequence[str]) -> dict[str, float]:
        out = idf(self, stems)
        cached.append(len(docfreq._KEPT[str(self.store.path)].counts))
        return out

    monkeypatch.setattr(cd.Distinctive, "idf", counted_idf)
    asked: list[int] = []
    with Store.open(home.db_path) as store:
        conn = _Counting(store.conn)
        store.conn = conn  # type: ignore[assignment]
        report = _reflect(home, store, asked)
    assert report.archived == N_OLD
    assert report.sealed[1] > 10 * BOUND  # a whole level is many pages long
    assert conn.fetched and max(conn.fetched) <= BOUND
    moves = [n for n, sql in conn.changed
             if "INTO events_archive" in sql or sql.startswith("DELETE FROM events")]
    assert len(moves) >= 2 * N_OLD // BOUND and max(moves) <= BOUND
    assert cached and max(cached) <= BOUND
    assert asked == [BOUND]  # the week's newest episodes, not all of them


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_the_bounds_change_nothing_reflect_writes(
        isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wide, narrow = (_home(isolated_home / "wide", monkeypatch),
                    _home(isolated_home / "narrow", monkeypatch))
    asked: dict[str, list[int]] = {"wide": [], "narrow": []}
    with Store.open(wide.db_path) as store:
        _reflect(wide, store, asked["wide"])
    shown = memmap.MAP_NODES, rf.LESSON_EPISODES
    with monkeypatch.context() as m:
        _small_bounds(m)
        # what the map and the lessons call show is a choice, not a page: left as they are
        m.setattr(memmap, "MAP_NODES", shown[0])
        m.setattr(rf, "LESSON_EPISODES", shown[1])
        with Store.open(narrow.db_path) as store:
            _reflect(narrow, store, asked["narrow"])
    got, want = _written(narrow), _written(wide)
    assert len(got["archive"]) == N_OLD and len(got["hot"]) == N_NEW
    assert got == want
    assert asked["narrow"] == asked["wide"] == [rf.LESSON_EPISODES]
    assert _map(narrow) == _map(wide)


def _map(home: Home) -> list[str]:
    """The memory map's lines, but the one that says when the run finished and how long."""
    return [line for line in home.memory_map.read_text().splitlines()
            if not line.startswith("- last reflect:")]


def test_reflects_peak_memory_is_its_own_not_its_parents():
    """`coworker bench` runs reflect as a child of a process holding the synthetic history;
    getrusage's ru_maxrss survives exec, so reflect reported its parent's peak (99 MB at 100k
    where reflect itself peaked at 64 MB). The figure is now the program's own high-water
    mark: a child of a 300 MB parent reports well under it."""
    import subprocess
    import sys

    big = bytearray(300 * 2**20)
    for i in range(0, len(big), 4096):
        big[i] = 1
    code = ("import resource; from rituals.reflect import _peak_rss_mb; "
            "print(_peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(Path(__file__).resolve().parents[1]))
    own, inherited = (float(x) for x in out.stdout.split())
    del big
    assert inherited > 250, "this machine's getrusage does not carry the parent's peak"
    assert own < 200, f"reflect reported {own:.0f} MB: its parent's peak, not its own"
