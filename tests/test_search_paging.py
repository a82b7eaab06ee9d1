"""Paged search (issue 15): a bounded first page, a cursor, and every match exactly once.

The caps of memory.search are set small here, so a history of a few hundred events exercises
every part of the plan (rare words ranked in full, the newest rows holding every other word,
the newest matches, then the rest newest first) that a long history reaches with the real caps.
The exhaustive result set is read straight from the two FTS indexes (ev.fts_search and
rl.fts_search with no practical limit), not through the code under test.
"""

from __future__ import annotations

import json

import pytest

from runtime.home import Home
from runtime.memory import search as sr
from runtime.memory.search import BOOKKEEPING, CursorError, CursorRefusal, search
from runtime.memory.tokens import query_words
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.tools import ToolContext, default_registry

from .conftest import coworker

FILLER = ["gateway", "deploy", "invoice", "release", "notes", "staging", "review"]


def _body(i: int) -> str:
    words = [FILLER[i % 7], FILLER[(i * 3) % 7]]
    if i % 2 == 0:
        words.append("parser")
    if i % 3 == 0:
        words.append("crash")
    if i % 5 == 0:
        words.append("crashes")  # the same FTS term as "crash": one group
    if i in (17, 80, 143, 211):
        words += ["zebra", "parser"]
    return f"Note {i}: " + " ".join(words) + "."


def _history(store: Store, n: int = 240, start: int = 0) -> None:
    ev.append_many(store, [Event(kind="note", body=_body(i), actor="coworker",
                                 author_kind="agent") for i in range(start, start + n)])
    # bookkeeping that echoes the words: never a match
    ev.append_many(store, [Event(kind="recall", body="recall parser crash zebra",
                                 actor="coworker", author_kind="system") for _ in range(5)])


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sr, "EXACT", 20)
    monkeypatch.setattr(sr, "RARE_BUDGET", 12)
    monkeypatch.setattr(sr, "ALL_WORDS", 9)
    monkeypatch.setattr(sr, "RECENT", 11)


@pytest.fixture
def paged_home(offline_home: Home, small_caps: None) -> Home:
    with Store.open(offline_home.db_path) as store:
        _history(store)
        for first in range(1, 200, 15):
            rl.seal(store, level=1, first_event=first, last_event=first + 14,
                    source_range=f"{first}-{first + 14}", first_ts=None, last_ts=None,
                    title=f"episode {first}", body=_body(first) + " " + _body(first + 1),
                    terms="parser crash" if first % 2 else "gateway", method="extractive")
    return offline_home


def _flat(store: Store, query: str) -> dict[tuple[str, int], float]:
    """Every match of `query` with its flat bm25: the exhaustive result set."""
    match = ev.fts_query(query_words(query))
    out = {("event", int(e.id or 0)): s for e, s, _ in ev.fts_search(store, match, 10**6,
                                                                       BOOKKEEPING)}
    out.update({("rollup", r.id): s for r, s in rl.fts_search(store, match, 10**6)})
    return out


def _all_pages(store: Store, query: str, n: int) -> tuple[list, int]:
    got, cursor, pages = [], None, 0
    while True:
        hits = search(store, query, n, after=cursor)
        pages += 1
        got += hits
        cursor = hits.next_cursor
        if cursor is None:
            return got, pages
        assert pages < 2000, "paging does not end"


@pytest.mark.parametrize("query", ["parser crash zebra", "parser", "zebra crashes", "gateway"])
@pytest.mark.parametrize("n", [1, 7, 200])
def test_paging_on_reaches_every_match_exactly_once(paged_home: Home, query: str, n: int):
    with Store.open(paged_home.db_path, readonly=True) as store:
        flat = _flat(store, query)
        hits, pages = _all_pages(store, query, n)
    keys = [(h.kind, h.id) for h in hits]
    assert len(keys) == len(set(keys)), "a match came twice"
    assert set(keys) == set(flat), "paging on missed a match or found a non-match"
    assert len(flat) > 40 or query == "zebra crashes"
    assert pages == -(-len(flat) // n) or (pages == 1 and not flat), "a trailing empty page"
    for h in hits:  # the bounded reads score each row as the flat ranking does
        assert h.score == pytest.approx(flat[(h.kind, h.id)], rel=1e-9, abs=1e-12)


def test_the_plan_is_bounded_and_the_first_page_is_the_flat_best(paged_home: Home):
    query = "zebra parser"
    with Store.open(paged_home.db_path, readonly=True) as store:
        plan = sr._plan(store, ev.fts_terms(query_words(query)))
        page = search(store, query, 5)
        flat = _flat(store, query)
        zebras = {e.id for e in ev.span(store, 1, 300) if "zebra" in e.body and e.kind == "note"}
    assert plan.rare[0] not in (-1, 0), "the events' plan should rank only the rare word fully"
    best = sorted(flat, key=lambda k: (flat[k], k[0] != "rollup", k[1]))[:5]
    assert [(h.kind, h.id) for h in page] == best
    assert len(zebras) == 4 and {h.id for h in page if h.kind == "event"} >= zebras


def test_a_cursor_reads_the_history_as_it_was_at_the_first_page(paged_home: Home):
    query = "parser crash"
    with Store.open(paged_home.db_path) as store:
        before = _flat(store, query)
        first = search(store, query, 10)
        _history(store, 60, start=1000)  # written while someone pages
        got, cursor = list(first), first.next_cursor
        while cursor:
            page = search(store, query, 25, after=cursor)
            got += page
            cursor = page.next_cursor
        assert len(_flat(store, query)) > len(before)
    keys = [(h.kind, h.id) for h in got]
    assert len(keys) == len(set(keys)) and set(keys) == set(before)


def test_bad_cursors_are_refused_with_what_to_do(paged_home: Home):
    with Store.open(paged_home.db_path, readonly=True) as store:
        cursor = search(store, "parser", 3).next_cursor
        assert cursor
        with pytest.raises(CursorError, match="another query") as other:
            search(store, "gateway", 3, after=cursor)
        assert other.value.code == CursorRefusal.OTHER_QUERY
        for bad in ("xyz", cursor[:-6], "s1.!!!!", cursor.replace(".", "x", 1)):
            with pytest.raises(CursorError, match="not a search cursor") as wrong:
                search(store, "parser", 3, after=bad)
            assert wrong.value.code == "not_a_cursor"
        with pytest.raises(CursorError, match="--exhaustive") as both:
            search(store, "parser", 3, after=cursor, exhaustive=True)
        assert both.value.code == "exhaustive_takes_no_cursor"
    r = coworker("search", "parser", "--after", "nonsense")
    assert r.returncode == 2 and r.stderr.startswith("error:"), r
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_exhaustive_is_the_flat_ranking_in_one_page(paged_home: Home):
    with Store.open(paged_home.db_path, readonly=True) as store:
        flat = _flat(store, "parser crash")
        hits = search(store, "parser crash", 8, exhaustive=True)
    assert hits.next_cursor is None
    best = sorted(flat, key=lambda k: (flat[k], k[0] != "rollup", k[1]))[:8]
    assert [(h.kind, h.id) for h in hits] == best


def test_the_cli_prints_the_next_page_and_takes_it(paged_home: Home):
    first = coworker("search", "parser", "crash", "-n", "4")
    assert first.returncode == 0, first.stderr
    more = first.stdout.strip().splitlines()[-1]
    assert more.startswith("more: coworker search parser crash -n 4 --after s1."), more
    cursor = more.rsplit(" ", 1)[1]
    second = coworker("search", "parser", "crash", "-n", "4", "--after", cursor, "--json")
    assert second.returncode == 0, second.stderr
    lines = [json.loads(x) for x in second.stdout.splitlines()]
    assert len(lines) == 5 and set(lines[-1]) == {"next_cursor"}
    with Store.open(paged_home.db_path, readonly=True) as store:
        expected = search(store, "parser crash", 4, after=cursor)
    assert [(x["kind"], x["id"]) for x in lines[:4]] == [(h.kind, h.id) for h in expected]
    assert lines[-1]["next_cursor"] == expected.next_cursor
    shown_first = {line.split()[1] for line in first.stdout.splitlines()[2:-1]
                   if line.split() and line.split()[0] in ("event", "rollup")}
    assert shown_first and not shown_first & {str(x["id"]) for x in lines[:4]
                                              if x["kind"] == "event"}
    slow = coworker("search", "parser", "--exhaustive", "--json")
    assert slow.returncode == 0 and "next_cursor" not in slow.stdout


def test_the_agents_tool_pages_on(paged_home: Home):
    registry = default_registry()
    with Store.open(paged_home.db_path) as store:
        ctx = ToolContext(store=store, home_root=paged_home.root,
                          settings=paged_home.settings(), tick_id=None, live=False)
        first = registry.dispatch(ctx, "memory_search", {"query": "zebra", "limit": 3})
        cursor = first.text.splitlines()[-1].split("after=")[1].rstrip(")")
        second = registry.dispatch(ctx, "memory_search",
                                   {"query": "zebra", "limit": 3, "after": cursor})
        wrong = registry.dispatch(ctx, "memory_search",
                                  {"query": "parser", "limit": 3, "after": cursor})
    assert not first.is_error and not second.is_error, (first.text, second.text)
    ids = [line.split(" · ")[0] for line in first.text.splitlines()[:3]]
    rest = [line.split(" · ")[0] for line in second.text.splitlines() if line.startswith("[")]
    assert len(ids) == 3 and rest and not set(ids) & set(rest)
    assert wrong.is_error and "another query" in wrong.text


LONG = ("Pasted log from the night shift. " + "filler words of a long paste " * 700
        + "then the zebra quartz failure")


@pytest.mark.parametrize("paged", [False, True])
def test_a_body_too_long_for_a_snippet_shows_its_first_characters(
        offline_home: Home, paged: bool, request: pytest.FixtureRequest):
    """FTS5's snippet costs the square of a body's length (a pasted 3.9 MB message held search
    for 9 minutes): past SNIPPET_MAX_CHARS a hit shows the body's first characters, on one
    line; a short body keeps its snippet around the match. Both the flat and the paged path."""
    if paged:
        request.getfixturevalue("small_caps")
    assert len(LONG) > ev.SNIPPET_MAX_CHARS
    short = "Before it all:\nthe zebra quartz check passed, " + "then more words " * 30
    with Store.open(offline_home.db_path) as store:
        long_id = ev.append(store, Event(kind="note", body=LONG, actor="coworker",
                                         author_kind="agent"))
        short_id = ev.append(store, Event(kind="note", body=short, actor="coworker",
                                          author_kind="agent"))
        if paged:
            _history(store)
        hits = {h.id: h for h in search(store, "zebra quartz", 10) if h.kind == "event"}
    assert hits[long_id].excerpt == LONG[:240].strip(), hits[long_id].excerpt
    assert hits[short_id].excerpt.startswith("…") and "zebra quartz check" in \
        hits[short_id].excerpt and "\n" not in hits[short_id].excerpt, hits[short_id].excerpt
