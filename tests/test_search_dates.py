"""Search reads the days a query names (ADR-0028): the matches said on them come first.

A history of notes over eleven days of March 2025, three a day at 09:00, 15:00 and 23:30 UTC.
Every note says "deploy" or "invoice"; some say "march" or a number, so that a date searched
for as words would match them. What a query should return is computed here from the bodies
and timestamps the test wrote (and FTS5's own flat bm25), not through the code under test.
"""

from __future__ import annotations

import base64
import json
import shlex
import time
import zlib
from datetime import UTC, date
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime import render
from runtime.home import Home
from runtime.memory import search as sr
from runtime.memory.embed import Matrix
from runtime.memory.search import BOOKKEEPING, CursorError, search
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.tools import ToolContext, default_registry

from .conftest import coworker, write_config

DAYS = range(1, 12)  # 1 to 11 March 2025
HOURS = ("09:00", "15:00", "23:30")


def _body(day: int, n: int) -> str:
    topic = "deploy of the gateway" if (day + n) % 2 == 0 else "invoice run for billing"
    extra = " in march, step 3" if n == 1 else ""
    return f"Note {day}.{n}: {topic}{extra}."


def _history(store: Store) -> dict[int, str]:
    """Writes the notes (and bookkeeping that echoes the words); returns id -> ts."""
    rows = [Event(kind="note", body=_body(d, n), actor="coworker", author_kind="agent",
                  ts=f"2025-03-{d:02d}T{h}:00.000Z") for d in DAYS for n, h in enumerate(HOURS)]
    rows.append(Event(kind="recall", body="recall deploy invoice", actor="coworker",
                      author_kind="system", ts="2025-03-03T10:00:00.000Z"))
    ids = ev.append_many(store, rows)
    return {i: e.ts for i, e in zip(ids, rows, strict=True) if e.kind == "note"}


@pytest.fixture
def dated(offline_home: Home) -> tuple[Home, dict[int, str]]:
    with Store.open(offline_home.db_path) as store:
        ts = _history(store)
    return offline_home, ts


def _flat(store: Store, words: str) -> dict[int, float]:
    """Every event matching `words` (FTS5 OR), with its flat bm25."""
    match = ev.fts_query(words.split())
    return {int(e.id or 0): s for e, s, _ in ev.fts_search(store, match, 10**6, BOOKKEEPING)}


def _pages(store: Store, query: str, n: int, **kw: object) -> list:
    got, cursor = [], None
    while True:
        page = search(store, query, n, after=cursor, **kw)
        assert page or cursor is None, "a cursor led to an empty page"
        got += page
        cursor = page.next_cursor
        if cursor is None:
            return got


def _expected(flat: dict[int, float], ts: dict[int, str], start: str, end: str) -> list[int]:
    """The events of the flat set said in [start, end), best bm25 first."""
    return sorted((i for i in flat if start <= ts[i] < end), key=lambda i: (flat[i], i))


def _first_then_every(hits: list, first: list[int], flat: dict[int, float]) -> None:
    """`first` leads the event hits, in its order, and the hits hold every match once."""
    ids = [h.id for h in hits if h.kind == "event"]
    assert ids[:len(first)] == first, "the day's matches do not come first, best first"
    assert sorted(ids) == sorted(flat) and len(ids) == len(set(ids)), "a match lost or shown twice"


def test_matches_said_on_the_named_day_come_first(dated):
    home, ts = dated
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "deploy")
        page = search(store, "deploy on 3 March 2025", 4)
        every = _pages(store, "deploy on 3 March 2025", 5)
    first = _expected(flat, ts, "2025-03-03", "2025-03-04")
    assert len(first) in (1, 2) and page.dates == ("2025-03-03",)
    assert [h.id for h in page][:len(first)] == first
    # then the rest by bm25; paging on shows each match of the topic once, and no note that
    # matches only the date's words ("march", "3")
    _first_then_every(every, first, flat)


def test_without_the_day_the_order_is_the_plain_search(dated):
    home, _ = dated
    with Store.open(home.db_path, readonly=True) as store:
        plain = [(h.kind, h.id) for h in search(store, "deploy", 8)]
        dated_far = search(store, "deploy on 3 March 2019", 8)  # a day with nothing said
    assert [(h.kind, h.id) for h in dated_far] == plain and dated_far.dates == ("2019-03-03",)


def test_a_day_is_the_owners_day_in_the_time_zone(dated):
    home, ts = dated
    berlin = ZoneInfo("Europe/Berlin")  # UTC+1 in March: 23:30 UTC on the 4th is the 5th
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "deploy")
        utc = search(store, "deploy 5 March 2025", 3)
        local = search(store, "deploy 5 March 2025", 3, tz=berlin)
    in_utc = _expected(flat, ts, "2025-03-05", "2025-03-06")
    assert [h.id for h in utc][:len(in_utc)] == in_utc
    want = _expected(flat, ts, "2025-03-04T23:00", "2025-03-05T23:00")
    assert any(ts[i].startswith("2025-03-04T23:30") for i in want)  # the test can tell them apart
    assert [h.id for h in local][:len(want)] == want


def test_relative_days_are_read_from_today_and_frozen_in_the_cursor(dated, monkeypatch):
    home, ts = dated
    monkeypatch.setattr(sr, "EXACT", 3)  # a small plan, so the cursor carries a bitmap
    monkeypatch.setattr(sr, "RARE_BUDGET", 2)
    monkeypatch.setattr(sr, "RECENT", 4)
    with Store.open(home.db_path, readonly=True) as store:
        flat, flat_day = _flat(store, "deploy last week"), _flat(store, "deploy yesterday")
        yesterday = search(store, "deploy yesterday", 5, today=date(2025, 3, 8))
        first = search(store, "deploy last week", 2, today=date(2025, 3, 12))
        # the next pages are asked a week later, when "last week" is another week: they go on
        # with the first page's
        got, cursor = list(first), first.next_cursor
        while cursor:
            page = search(store, "deploy last week", 2, after=cursor, today=date(2025, 3, 19))
            got += page
            cursor = page.next_cursor
    day = _expected(flat_day, ts, "2025-03-07", "2025-03-08")
    assert yesterday.dates == ("2025-03-07",) and [h.id for h in yesterday][:len(day)] == day
    want = _expected(flat, ts, "2025-03-03", "2025-03-10")  # Monday 3 to Sunday 9 March
    assert first.dates == ("2025-03-03/2025-03-09",) and len(want) > 4
    _first_then_every(got, want, flat)


def test_a_week_and_a_month_rank_their_matches_first(dated):
    home, ts = dated
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "invoice")
        week = search(store, "invoice last week", 30, today=date(2025, 3, 12))
        month = search(store, "invoice in March 2025", 30)
    want = _expected(flat, ts, "2025-03-03", "2025-03-10")  # Monday 3 to Sunday 9 March
    assert [h.id for h in week if h.kind == "event"][:len(want)] == want
    assert [h.id for h in month if h.kind == "event"] == _expected(flat, ts, "2025-03", "2025-04")
    assert month.dates == ("2025-03",)


def test_a_date_alone_is_still_searched_for_as_words(dated):
    home, ts = dated
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "march 3")
        got = _pages(store, "3 March 2025", 4)
    want = _expected(flat, ts, "2025-03-03", "2025-03-04")
    assert want and flat
    _first_then_every(got, want, flat)


def test_exhaustive_ranks_the_days_matches_first_too(dated):
    home, ts = dated
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "deploy")
        hits = search(store, "deploy on 3 March 2025", 30, exhaustive=True)
        paged = search(store, "deploy on 3 March 2025", 30)
    assert [h.id for h in hits] == [h.id for h in paged]
    assert hits.dates == ("2025-03-03",)
    first = _expected(flat, ts, "2025-03-03", "2025-03-04")
    assert [h.id for h in hits][:len(first)] == first


def test_only_what_was_said_on_the_day_counts_not_its_place_among_the_ids(offline_home: Home):
    # an import writes an older week after the newer events: ids no longer follow the days
    with Store.open(offline_home.db_path) as store:
        ts = _history(store)
        old = [Event(kind="note", body=f"Imported deploy note {n}", actor="owner",
                     author_kind="unknown", ts=f"2024-06-{10 + n:02d}T12:00:00.000Z")
               for n in range(5)]
        old_ids = ev.append_many(store, old)
        ts.update({i: e.ts for i, e in zip(old_ids, old, strict=True)})
        late = ev.append(store, Event(kind="note", body="Late deploy note", actor="coworker",
                                      author_kind="agent", ts="2025-03-03T20:00:00.000Z"))
        ts[late] = "2025-03-03T20:00:00.000Z"
        flat = _flat(store, "deploy")
        hits = search(store, "deploy on 3 March 2025", 5)
        june = search(store, "deploy on 12 June 2024", 5)
    first = _expected(flat, ts, "2025-03-03", "2025-03-04")
    assert late in first and [h.id for h in hits][:len(first)] == first
    assert [h.id for h in june][0] == old_ids[2]
    assert not set(old_ids) & set([h.id for h in hits][:len(first)])


def test_the_doors_say_which_days_came_first(dated):
    home, ts = dated
    out = coworker("search", "deploy", "on", "3", "March", "2025", "-n", "3",
                   env=_env(home))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "said on or about 2025-03-03: those matches come first"
    plain = coworker("search", "deploy", "-n", "3", env=_env(home))
    assert "said on" not in plain.stdout
    write_config(home.root, coworker={"timezone": "Europe/Berlin"})  # the agent's tool too
    with Store.open(home.db_path, readonly=True) as store:
        ctx = ToolContext(store=store, home_root=home.root, settings=home.settings(),
                          tick_id=None, live=False)
        tool = default_registry().get("memory_search")
        answer = tool.run(ctx, tool.params(query="deploy on 5 March 2025", limit=3))
        nothing = tool.run(ctx, tool.params(query="zeppelin on 5 March 2025"))
        want = _expected(_flat(store, "deploy"), ts, "2025-03-04T23:00", "2025-03-05T23:00")
    lines = answer.splitlines()
    assert lines[:2] == ["(said on or about 2025-03-05: those matches come first)",
                         "(times in Europe/Berlin)"]  # days and times: the owner's clock
    assert nothing.splitlines() == ["no memory matches 'zeppelin on 5 March 2025'"]
    assert [int(line.split(" · ")[0].split()[1]) for line in lines[2:2 + len(want)]] == want
    none = coworker("search", "deploy", "on", "20", "March", "2025", "-n", "3", env=_env(home))
    assert none.stdout.splitlines()[0] == "none of these was said on or about 2025-03-20"
    # a later page says of its own hits, not of the first page's
    first = coworker("search", "deploy", "on", "3", "March", "2025", "-n", "2", env=_env(home))
    cursor = first.stdout.splitlines()[-1].split("--after ")[1]
    later = coworker("search", "deploy", "on", "3", "March", "2025", "-n", "2", "--after",
                     cursor, env=_env(home))
    assert later.stdout.splitlines()[0] == "none of these was said on or about 2025-03-03"
    as_json = coworker("search", "deploy", "3", "March", "2025", "--json", "-n", "2",
                       env=_env(home))
    assert all("id" in json.loads(line) or "next_cursor" in json.loads(line)
               for line in as_json.stdout.splitlines())


def _env(home: Home) -> dict[str, str]:
    import os

    return {**os.environ, "COWORKER_HOME": str(home.root)}


PIECES = ["deploy", "invoice", "gateway", "on", "3", "31", "March", "march", "February", "2025",
          "2019", "1899", "yesterday", "the", "day", "before", "last", "this", "week", "weekend",
          "month", "Monday", "Sunday", "night", "99999999999", "days", "ago", "2025-03-04",
          "2025-02-30", "3rd", "of", ",", "\x00", "ı", "\xa0", "Sept", "21,"]


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=9), tail=st.text(max_size=12),
       today=st.dates())
@example(pieces=["deploy", "last", "month"], tail="", today=date(1, 1, 8))  # off the calendar
@example(pieces=["deploy", "yesterday"], tail="", today=date(1, 1, 1))
@example(pieces=["invoice", "this", "week"], tail="", today=date(9999, 12, 31))
def test_any_query_naming_days_pages_on_and_agrees_with_the_flat_ranking(dated, pieces, tail,
                                                                         today):
    home, _ = dated
    query = " ".join(pieces) + tail
    with Store.open(home.db_path, readonly=True) as store:
        got = _pages(store, query, 7, today=today)
        flat = search(store, query, 7, exhaustive=True, today=today)
    keys = [(h.kind, h.id) for h in got]
    assert len(keys) == len(set(keys))
    assert [(h.kind, h.id) for h in flat] == keys[:7]


def test_a_window_read_is_bounded_and_paging_still_shows_every_match(dated, monkeypatch):
    home, ts = dated
    monkeypatch.setattr(ev, "IDS_PER_READ", 2)
    monkeypatch.setattr(ev, "WINDOW_SCAN", 4)  # two reads of two matches each, per window
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "deploy")
        got = _pages(store, "deploy in March 2025", 3)
        read = ev.fts_in_window(store, '"deploy"', "2025-03", "2025-04", 10**6, 100)
    month = _expected(flat, ts, "2025-03", "2025-04")
    # of the four matches read, the newest is the bookkeeping that echoes "deploy": not kept
    assert len(month) > 4 and [i for i, _ in read] == sorted(month, reverse=True)[:3]
    ids = [h.id for h in got if h.kind == "event"]
    assert sorted(ids[:3]) == sorted(i for i, _ in read)  # the newest three come first ...
    assert sorted(ids) == sorted(flat) and len(ids) == len(set(ids))  # ... and nothing is lost


def test_the_pages_of_a_day_end_without_an_empty_one(dated):
    home, _ = dated  # the bookkeeping that echoes "deploy" is a candidate that shows nothing
    with Store.open(home.db_path, readonly=True) as store:
        for n in range(1, 9):
            _pages(store, "deploy in March 2025", n)
            _pages(store, "deploy on 3 March 2025", n)


def test_a_cursor_belongs_to_its_days_too(dated):
    home, _ = dated
    with Store.open(home.db_path, readonly=True) as store:
        third = search(store, "deploy on 3 March 2025", 2)
        plain = search(store, "deploy", 2)
        for cursor, other in ((third.next_cursor, "deploy on 4 March 2025"),
                              (third.next_cursor, "deploy"),
                              (plain.next_cursor, "deploy on 3 March 2025")):
            with pytest.raises(CursorError, match="another query"):
                search(store, other, 2, after=cursor)
        # a cursor made by hand with more days than a query may name is no cursor
        body = third.next_cursor[len(sr.CURSOR_PREFIX):]
        state = json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
        forged = sr.CURSOR_PREFIX + base64.urlsafe_b64encode(zlib.compress(json.dumps(
            {**state, "w": state["w"] * 300}).encode())).decode().rstrip("=")
        with pytest.raises(CursorError, match="is not a search cursor"):
            search(store, "deploy on 3 March 2025", 2, after=forged)
        # nor one that decodes to something else, or numbers SQLite cannot hold
        for other in ([1, 2], {**state, "t": [10**30, -5]}, {**state, "p": -1},
                      {**state, "t": [2**63 - 1, state["t"][1]]}, {**state, "p": 1.5},
                      [[]] * 3):
            forged = sr.CURSOR_PREFIX + base64.urlsafe_b64encode(
                zlib.compress(json.dumps(other).encode())).decode().rstrip("=")
            with pytest.raises(CursorError, match="is not a search cursor"):
                search(store, "deploy on 3 March 2025", 2, after=forged)
        # nor JSON nested past Python's recursion, nor a state that inflates past a cursor's
        for raw in (b"[" * 100_000, json.dumps({**state, "pad": "x" * sr.CURSOR_BYTES}).encode()):
            forged = sr.CURSOR_PREFIX + base64.urlsafe_b64encode(
                zlib.compress(raw)).decode().rstrip("=")
            with pytest.raises(CursorError, match="is not a search cursor"):
                search(store, "deploy on 3 March 2025", 2, after=forged)
        # nor one whose day is not a time (the week after it would be read from it)
        for start in ("not-a-time", "999-12-31T00:00:00.000Z"):
            state["w"] = [[start, "2025-03-04T00:00:00.000Z", "2025-03-03"]]
            forged = sr.CURSOR_PREFIX + base64.urlsafe_b64encode(
                zlib.compress(json.dumps(state).encode())).decode().rstrip("=")
            with pytest.raises(CursorError, match="is not a search cursor"):
                search(store, "deploy on 3 March 2025", 2, after=forged)


def test_a_fused_page_keeps_the_days_matches_first(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        on = ev.append_many(store, [
            Event(kind="note", body=f"Board check {i}.", actor="coworker", author_kind="agent",
                  ts=f"2024-04-08T1{i}:00:00.000Z") for i in range(3)])
        off = ev.append_many(store, [
            Event(kind="note", body=f"Flashing the firmware board, another day {i}.",
                  actor="coworker", author_kind="agent", ts=f"2024-05-0{i + 1}T10:00:00.000Z")
            for i in range(5)])
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)  # the other days' notes are nearest
    rows = [[0.9, 0.1 * i, 0.3] for i in range(len(off))] + [[0.0, 0.2, 1.0]] * len(on)
    rows = np.array([r / np.linalg.norm(r) for r in rows], dtype=np.float32)
    matrix = Matrix(np.array(off + on, dtype=np.int64), rows)
    with Store.open(offline_home.db_path, readonly=True) as store:
        for exhaustive in (False, True):
            page = search(store, "flashing firmware board on 8 April 2024", 5,
                          semantic=lambda text=None: (query, matrix), exhaustive=exhaustive)
            assert {h.id for h in page[:3]} == set(on), (exhaustive, [h.id for h in page])
            assert [h.id for h in page[3:]] and set(h.id for h in page[3:]) <= set(off)
            assert page.dates == ("2024-04-08",)


def test_a_cursor_knows_whether_its_words_named_a_day(dated):
    home, _ = dated  # "March 3" names a day (with its capital), "march 3" does not
    with Store.open(home.db_path, readonly=True) as store:
        first = search(store, "deploy March 3", 2, today=date(2025, 3, 20))
        assert first.dates == ("2025-03-03",)
        with pytest.raises(CursorError, match="another query"):
            search(store, "deploy march 3", 2, after=first.next_cursor, today=date(2025, 3, 20))
        alone = search(store, "March 3", 2, today=date(2025, 3, 20))  # a date alone, too
        assert alone.dates == ("2025-03-03",) and alone.next_cursor
        with pytest.raises(CursorError, match="another query"):
            search(store, "march 3", 2, after=alone.next_cursor, today=date(2025, 3, 20))


def _told(store: Store) -> dict[str, int]:
    """Notes said after 3 March about it, and two that are not about it (ADR-0027)."""
    rows = {
        "yesterday": ("Yesterday the deploy of the gateway went out late.", "2025-03-04T08:00"),
        "written": ("Looking back: on 3 March the deploy was rolled back.", "2025-03-09T12:00"),
        "too_late": ("On 3 March we did a deploy, for the record.", "2025-03-14T12:00"),
        "other_day": ("Yesterday's deploy went well.", "2025-03-07T08:00"),
        "said_on_the_day": ("Tomorrow the deploy goes on.", "2025-03-03T18:00"),
    }
    ids = ev.append_many(store, [Event(kind="note", body=b, actor="coworker",
                                       author_kind="agent", ts=f"{t}:00.000Z")
                                 for b, t in rows.values()])
    return dict(zip(rows, ids, strict=True))


def test_what_was_said_about_the_day_in_the_week_after_comes_first_too(dated):
    home, ts = dated
    with Store.open(home.db_path) as store:
        told = _told(store)
    ts |= {i: "2025-03-03T18:00:00.000Z" if k == "said_on_the_day" else "later"
           for k, i in told.items()}
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "deploy")
        # said on the day, or in the seven days after about it ("yesterday", "on 3 March")
        about = {i for i in flat if "2025-03-03" <= ts[i] < "2025-03-04"}
        about |= {told["yesterday"], told["written"]}
        first = sorted(about, key=lambda i: (flat[i], i))
        for exhaustive in (False, True):
            page = search(store, "deploy on 3 March 2025", 20, exhaustive=exhaustive)
            assert [h.id for h in page][:len(first)] == first, exhaustive
        _first_then_every(_pages(store, "deploy on 3 March 2025", 3), first, flat)
        # a mention of another day, or one said more than a week after, is not about it
        assert told["other_day"] in flat and told["too_late"] in flat


def test_fts_among_scores_only_the_ids_asked_as_the_flat_ranking_does(dated):
    home, ts = dated
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "deploy")
        ids = sorted(ts)[::3]  # every third note: matches and not, with matches between them
        got = dict(ev.fts_among(store, '"deploy"', ids))
        assert ev.fts_among(store, '"deploy"', []) == []
    want = {i: flat[i] for i in ids if i in flat}
    assert got.keys() == want.keys() and 0 < len(want) < len(ids)
    assert all(abs(got[i] - want[i]) < 1e-9 for i in want)
    assert any(min(ids) < i < max(ids) and i not in ids for i in flat)  # the test can tell


def test_fts_among_reads_ids_by_stretches_so_none_is_cut_by_the_range(dated, monkeypatch):
    home, ts = dated  # an import can put one of the week's ids far from the others
    monkeypatch.setattr(ev, "IDS_PER_READ", 2)
    monkeypatch.setattr(ev, "WINDOW_SCAN", 2)  # a range over every id would keep two matches
    with Store.open(home.db_path, readonly=True) as store:
        flat = _flat(store, "deploy")
        ids = sorted(i for i in flat if i in ts)
        asked = [ids[0], ids[1], ids[-1]]  # two stretches, many matches between them
        assert dict(ev.fts_among(store, '"deploy"', asked)).keys() == set(asked)
        monkeypatch.setattr(ev, "AMONG_STRETCHES", 1)  # bounded: the first-asked stretch only
        assert dict(ev.fts_among(store, '"deploy"', asked[::-1])).keys() == {ids[-1]}


def test_a_cursor_belongs_to_its_time_zone(dated):
    home, _ = dated  # "yesterday" said at 23:30 UTC is another day's in Auckland
    auckland = ZoneInfo("Pacific/Auckland")
    with Store.open(home.db_path, readonly=True) as store:
        first = search(store, "deploy on 3 March 2025", 2)
        assert search(store, "deploy on 3 March 2025", 2, after=first.next_cursor)
        with pytest.raises(CursorError, match="another query"):
            search(store, "deploy on 3 March 2025", 2, after=first.next_cursor, tz=auckland)
        there = search(store, "deploy on 3 March 2025", 2, tz=auckland)
        assert search(store, "deploy on 3 March 2025", 2, after=there.next_cursor, tz=auckland)
        # a query naming no day reads no day: its cursor pages on in any zone
        plain = search(store, "deploy", 2)
        assert search(store, "deploy", 2, after=plain.next_cursor, tz=auckland)


def test_the_cli_shows_the_owners_days_and_says_what_it_cut(dated):
    home, ts = dated
    write_config(home.root, coworker={"timezone": "Pacific/Auckland"})  # UTC+13 in March
    out = coworker("search", "deploy", "-n", "200", env=_env(home))
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:1] == ["event"]]
    late = [i for i, t in ts.items() if t.endswith("T15:00:00.000Z")]  # 04:00 the next day
    shown = {int(r[1]): r[2] for r in rows}
    assert late and all(shown[i] > ts[i][:10] for i in late if i in shown), shown
    assert all(shown[i] == ts[i][:10] for i in shown if ts[i].endswith("T09:00:00.000Z"))
    long = coworker("search", "deploy", "x" * 5000, "-n", "2", env=_env(home))
    lines = long.stdout.splitlines()
    assert lines[0] == "(only the first 2000 characters of the query were read)", long.stdout
    more = [line for line in lines if line.startswith("more: ")]
    assert more and len(more[0]) < 2200
    flat = coworker("search", "deploy", "-n", "3", "--exhaustive", env=_env(home))
    assert flat.stdout.splitlines()[-1] == ("(--exhaustive shows the best 3: -n up to 200 may "
                                            "show more)")
    with Store.open(home.db_path) as store:  # 200 matches and more: a full page of 200
        ev.append_many(store, [Event(kind="note", body=f"deploy extra {i}", actor="coworker",
                                     author_kind="agent", ts="2025-03-20T09:00:00.000Z")
                               for i in range(200)])
    every = coworker("search", "deploy", "-n", "200", "--exhaustive", env=_env(home))
    assert every.returncode == 0 and "may show more" not in every.stdout
    # a word that looks like an option comes after "--" in the next page's command, which runs
    dash = coworker("search", "-n", "2", "--", "-gateway", "deploy", env=_env(home))
    more = dash.stdout.splitlines()[-1]
    assert more.startswith("more: coworker search -n 2 --after ") and " -- -gateway deploy" in more
    again = coworker(*shlex.split(more[len("more: coworker "):]), env=_env(home))
    assert again.returncode == 0 and "event" in again.stdout, again.stderr


def test_times_shown_are_the_owners_and_any_year_reads_as_written(monkeypatch):
    berlin = ZoneInfo("Europe/Berlin")
    assert render.when("2025-03-04T23:30:00.000Z", berlin) == "2025-03-05 00:30"
    assert render.day("2025-03-04T23:30:00.000Z", berlin) == "2025-03-05"
    assert render.when("0500-06-01T07:03:00.000Z", UTC) == "0500-06-01 07:03"
    # no offset: UTC, as the store writes it, whatever the machine's own zone
    monkeypatch.setenv("TZ", "America/Los_Angeles")
    time.tzset()
    try:
        assert render.when("2025-03-05T12:00:00", berlin) == "2025-03-05 13:00"
    finally:
        monkeypatch.undo()
        time.tzset()
    assert render.when("not a time", berlin) == "not a time"
    assert render.day(None, berlin) == ""


def test_both_rankings_count_the_days_matches(dated):
    home, ts = dated
    with Store.open(home.db_path, readonly=True) as store:
        want = len(_expected(_flat(store, "deploy"), ts, "2025-03-03", "2025-03-04"))
        for exhaustive in (False, True):
            on = search(store, "deploy on 3 March 2025", 2, exhaustive=exhaustive)
            off = search(store, "deploy on 20 March 2025", 2, exhaustive=exhaustive)
            assert (on.day_matches, off.day_matches) == (want, 0) and off, exhaustive
