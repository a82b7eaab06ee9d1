"""The walk narrowed by the days a query names (ADR-0029), on a hand-built ladder of days.

Five days of March 2025, one level-1 episode a day and one level-2 node a week. Parser crashes
are said on the 3rd (twice: once late at night, 23:30 UTC, which is the 4th in Berlin), the 4th
and the 10th; the 5th holds none. A question about a day is answered from that day or refused,
never from another day.
"""

from __future__ import annotations

import json
import os
from datetime import date
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime.home import Home
from runtime.memory import dates
from runtime.memory.embed import Matrix
from runtime.memory.recall import recall, told_about
from runtime.memory.walk import Caps, walk, walk_result
from runtime.render import walk_reason
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.tools import ToolContext, default_registry

from . import test_semantic_entry as semantic_entry
from .conftest import coworker, write_config

# the semantic entry's history and embedding server (tests/test_semantic_entry.py), as fixtures
embed_server, sem_home = semantic_entry.embed_server, semantic_entry.sem_home

DAYS = {  # day of March 2025: (time, text) said that day
    3: [("09:00", "The parser crashed on unicode input in the importer."),
        ("11:00", "Standup: reviewed the billing dashboard."),
        ("23:30", "Parser crash late at night, a null byte this time.")],
    4: [("09:30", "Parser crash again: an emoji in a file name."),
        ("14:00", "Lunch with Dana about the roadmap.")],
    5: [("10:00", "Billing invoice rounding fixed by Dana."),
        ("16:00", "Standup notes, nothing new.")],
    10: [("09:00", "Parser crash on a long line, the third this month."),
         ("12:00", "Release notes drafted.")],
}
FRESH = ("2025-03-11T09:00:00.000Z", "Parser crash fixed for good, says Dana.")


def build(store: Store) -> dict[str, int]:
    """The events and the ladder; returns the ids by a short name ("3.1" = 3 March, second)."""
    ids: dict[str, int] = {}
    episodes: list[int] = []
    for day, said in DAYS.items():
        got = ev.append_many(store, [
            Event(kind="note", body=text, actor="coworker", author_kind="agent",
                  ts=f"2025-03-{day:02d}T{hm}:00.000Z") for hm, text in said])
        ids.update({f"{day}.{n}": i for n, i in enumerate(got)})
        episodes.append(rl.seal(
            store, level=1, first_event=got[0], last_event=got[-1],
            source_range=f"{got[0]}-{got[-1]}", first_ts=f"2025-03-{day:02d}T{said[0][0]}:00.000Z",
            last_ts=f"2025-03-{day:02d}T{said[-1][0]}:00.000Z", title=f"the {day} March",
            body=" ".join(t for _, t in said), terms="", method="extractive"))
    for kids, first in ((episodes[:3], 3), (episodes[3:], 10)):  # the two weeks
        spans = [rl.get(store, k) for k in kids]
        rl.seal(store, level=2, first_event=spans[0].first_event, last_event=spans[-1].last_event,
                source_range=f"{spans[0].first_event}-{spans[-1].last_event}",
                first_ts=spans[0].first_ts, last_ts=spans[-1].last_ts,
                title=f"week of {first} March", body=" ".join(s.body for s in spans),
                terms="", method="extractive", child_ids=kids)
    ids["fresh"] = ev.append(store, Event(kind="note", body=FRESH[1], actor="coworker",
                                          author_kind="agent", ts=FRESH[0]))
    return ids


@pytest.fixture
def days_home(offline_home: Home) -> tuple[Home, dict[str, int]]:
    with Store.open(offline_home.db_path) as store:
        ids = build(store)
    return offline_home, ids


def _ids(result) -> list[int]:
    return [f.event.id for f in result.events]


def test_a_day_narrows_the_walk_to_what_was_said_on_it(days_home):
    home, ids = days_home
    with Store.open(home.db_path, readonly=True) as store:
        every = walk_result(store, "parser crash")
        day = walk_result(store, "parser crash on 4 March 2025")
        again = walk(store, "parser crash on 4 March 2025")
    parser = {ids[k] for k in ("3.0", "3.2", "4.0", "10.0", "fresh")}
    assert not every.refused and set(_ids(every)) == parser and every.dates == ()
    assert not day.refused and _ids(day) == [ids["4.0"]]
    assert day.dates == ("2025-03-04",) and day.query_tokens == ("parser", "crash")
    assert day.confidence == 1.0 and day.entry == "lexical"
    assert again == day.as_dict() and again["dates"] == ["2025-03-04"]  # pure: the same twice
    assert "dates" not in every.as_dict()


def test_nothing_said_on_the_day_is_a_refusal_not_another_days_answer(days_home):
    home, _ = days_home
    with Store.open(home.db_path, readonly=True) as store:
        got = walk_result(store, "parser crash on 5 March 2025")
        nothing = walk_result(store, "parser crash on 20 March 2025")  # a day with no events
    for r, day in ((got, "2025-03-05"), (nothing, "2025-03-20")):
        assert r.refused and r.events == () and r.dates == (day,)
        assert r.code == "not_said_then" and r.matched_tokens == (), r.why
        assert "holds none of its words" in (walk_reason(r) or ""), r.why


def test_days_named_from_today_weeks_and_months(days_home):
    home, ids = days_home
    with Store.open(home.db_path, readonly=True) as store:
        yesterday = walk_result(store, "parser crash yesterday", today=date(2025, 3, 11))
        week = walk_result(store, "parser crash last week", today=date(2025, 3, 12))
        month = walk_result(store, "parser crash in March 2025")
        fresh = walk_result(store, "parser crash on 11 March 2025")  # not under a rollup yet
    assert _ids(yesterday) == [ids["10.0"]] and yesterday.dates == ("2025-03-10",)
    assert sorted(_ids(week)) == sorted(ids[k] for k in ("3.0", "3.2", "4.0"))
    assert len(_ids(month)) == 5 and month.dates == ("2025-03",)
    assert _ids(fresh) == [ids["fresh"]]


def test_the_day_is_the_owners_in_the_time_zone(days_home):
    home, ids = days_home
    berlin = ZoneInfo("Europe/Berlin")  # 23:30 UTC on the 3rd is 00:30 on the 4th there
    with Store.open(home.db_path, readonly=True) as store:
        utc = walk_result(store, "parser crash on 4 March 2025")
        local = walk_result(store, "parser crash on 4 March 2025", tz=berlin)
        third = walk_result(store, "parser crash on 3 March 2025", tz=berlin)
    assert _ids(utc) == [ids["4.0"]]
    assert sorted(_ids(local)) == sorted([ids["3.2"], ids["4.0"]])
    assert _ids(third) == [ids["3.0"]]


def test_a_date_alone_keeps_its_words(days_home):
    home, _ = days_home
    with Store.open(home.db_path, readonly=True) as store:
        got = walk_result(store, "4 March 2025")
    # its words ("4", "march", "2025") are its tokens; they match the episodes' titles ("the 4
    # March"), but no note said that day holds one of them: refused
    assert got.refused and got.query_tokens == ("4", "march", "2025")


def test_the_doors_read_the_day_in_the_owners_time_zone(days_home):
    home, ids = days_home
    write_config(home.root, coworker={"timezone": "Europe/Berlin"})
    out = coworker("walk", "parser", "crash", "on", "4", "March", "2025", "--json",
                   env={**os.environ, "COWORKER_HOME": str(home.root)})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["dates"] == ["2025-03-04"]
    assert sorted(e["id"] for e in got["events"]) == sorted([ids["3.2"], ids["4.0"]])
    text = coworker("walk", "parser", "crash", "on", "4", "March", "2025",
                    env={**os.environ, "COWORKER_HOME": str(home.root)})
    assert "said on or about 2025-03-04" in text.stdout.splitlines()[0]
    # the events' times are Berlin's too: 23:30 UTC on the 3rd is half past midnight on the 4th
    assert f"#{ids['3.2']} 2025-03-04 00:30 note" in text.stdout, text.stdout
    with Store.open(home.db_path) as store:
        ctx = ToolContext(store=store, home_root=home.root, settings=home.settings(),
                          tick_id=None, live=False)
        tool = default_registry().get("memory_walk")
        answer = json.loads(tool.run(ctx, tool.params(query="parser crash on 4 March 2025")))
    assert sorted(e["id"] for e in answer["events"]) == sorted([ids["3.2"], ids["4.0"]])


WORDS = ["parser", "crash", "billing", "Dana", "on", "4", "March", "2025", "yesterday", "last",
         "week", "month", "the", "day", "before", "3rd", "of", "2025-03-04", "99999999999",
         "days", "ago", "Monday", "\x00", "ı", "\xa0", "31", "February"]


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(WORDS), max_size=8), tail=st.text(max_size=10),
       today=st.dates())
@example(words=["parser", "yesterday"], tail="", today=date(1, 1, 1))
def test_any_query_naming_days_walks_or_refuses_and_never_answers_from_another_day(
        days_home, words, tail, today):
    home, _ = days_home
    with Store.open(home.db_path, readonly=True) as store:
        got = walk_result(store, " ".join(words) + tail, today=today)
        ts = {e.id: e.ts for e in ev.span(store, 1, 10**6)}
    assert got.refused == (got.why is not None)
    if got.dates and not got.refused:
        assert got.events, "entered with nothing to show"
    for f in got.events:
        assert f.event.ts == ts[f.event.id]


def test_each_rung_prefers_the_nodes_that_reach_into_the_day(days_home):
    home, ids = days_home
    one = Caps(per_level=1)  # one node a rung: the day decides which
    with Store.open(home.db_path, readonly=True) as store:
        tenth = walk_result(store, "parser crash on 10 March 2025", caps=one)
        fourth = walk_result(store, "parser crash on 4 March 2025", caps=one)
        plain = walk_result(store, "parser crash", caps=one)
    assert _ids(tenth) == [ids["10.0"]], tenth.why  # the second week's node, not the first's
    assert _ids(fourth) == [ids["4.0"]], fourth.why  # the 4th's episode, not the 3rd's
    assert ids["4.0"] not in _ids(plain)  # without a day, the first of the best stands


def test_the_semantic_entry_is_narrowed_to_the_day_too(sem_home):
    home, ids = sem_home  # the car and its paraphrase, said on 1 May 2024 (test_semantic_entry)
    with Store.open(home.db_path, readonly=True) as store:
        got = {}
        for day in ("1 May 2024", "2 May 2024"):
            query = f"{semantic_entry.PARAPHRASE} On {day}."
            got[day] = walk_result(store, query,
                                   semantic=semantic_entry._semantic(home, store, query, []))
    on, off = got["1 May 2024"], got["2 May 2024"]
    assert not on.refused and on.entry == "semantic" and _ids(on)[:1] == [ids[1]], on.why
    assert on.dates == ("2024-05-01",)
    assert off.refused and off.events == () and off.dates == ("2024-05-02",)
    assert off.code == "below_threshold" and off.why is not None and off.why.probe_off_day
    assert "none of its nearest events was said on or about 2024-05-02" in (
        walk_reason(off) or ""), off.why


def test_what_was_said_on_the_day_must_hold_the_query_not_only_the_entry(days_home):
    home, ids = days_home
    with Store.open(home.db_path, readonly=True) as store:
        # the entry holds parser, crash and dana (the first week's node), but on the 5th only
        # "Billing invoice rounding fixed by Dana." was said: 1 of 3, no answer
        got = walk_result(store, "parser crash Dana on 5 March 2025")
        fine = walk_result(store, "parser crash on 4 March 2025")
    assert got.refused and got.events == () and got.confidence < 0.5, got
    assert got.matched_tokens == ("dana",) and got.dates == ("2025-03-05",)
    assert got.code == "not_said_then" and got.why is not None, got.why
    assert got.why.entered == ("parser", "crash", "dana") and not got.why.enough, got.why
    assert not fine.refused and fine.matched_tokens == ("parser", "crash")


def test_a_finer_rung_that_reaches_the_day_is_entered_rather_than_a_coarser_one(
        offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        a, b, c = ev.append_many(store, [
            Event(kind="note", body=body, actor="coworker", author_kind="agent", ts=ts)
            for ts, body in (("2025-03-03T09:00:00.000Z", "The parser crashed on unicode."),
                             ("2025-03-10T09:00:00.000Z", "Parser crash on a long line."),
                             ("2025-03-10T11:00:00.000Z", "Billing invoices reviewed."))])
        first = rl.seal(store, level=1, first_event=a, last_event=a, source_range=f"{a}-{a}",
                        first_ts="2025-03-03T09:00:00.000Z", last_ts="2025-03-03T09:00:00.000Z",
                        title="parser crash unicode", body="The parser crashed on unicode.",
                        terms="", method="extractive")
        second = rl.seal(store, level=1, first_event=b, last_event=c, source_range=f"{b}-{c}",
                         first_ts="2025-03-10T09:00:00.000Z", last_ts="2025-03-10T11:00:00.000Z",
                         title="parser crash long line", body="Parser crash on a long line.",
                         terms="", method="extractive")
        # on the coarser rung only the first week's node holds both words
        for kid, first_ts, last_ts, title in (
                (first, "2025-03-03T09:00:00.000Z", "2025-03-03T09:00:00.000Z", "parser crash"),
                (second, "2025-03-10T09:00:00.000Z", "2025-03-10T11:00:00.000Z", "billing")):
            r = rl.get(store, kid)
            rl.seal(store, level=2, first_event=r.first_event, last_event=r.last_event,
                    source_range=r.source_range, first_ts=first_ts, last_ts=last_ts,
                    title=title, body=title, terms="", method="extractive", child_ids=[kid])
    with Store.open(offline_home.db_path, readonly=True) as store:
        got = walk_result(store, "parser crash on 10 March 2025")
    assert not got.refused and _ids(got) == [b], got.why
    assert got.trace[0].level == 1 and got.trace[0].id == second


def test_the_days_nodes_are_read_whatever_their_rank_on_the_rung(days_home):
    home, ids = days_home
    tight = Caps(scan=1, per_level=1)  # one node by bm25 a rung: the days' nodes join it
    with Store.open(home.db_path, readonly=True) as store:
        got = {d: walk_result(store, f"parser crash on {d} March 2025", caps=tight)
               for d in (3, 4, 10)}
    assert _ids(got[4]) == [ids["4.0"]] and _ids(got[10]) == [ids["10.0"]]
    assert sorted(_ids(got[3])) == sorted([ids["3.0"], ids["3.2"]])


def test_relative_words_leave_the_tokens_and_nothing_else_does():
    from runtime.memory import dates
    from runtime.memory.walk import query_tokens

    for text in ("İstanbul parser crash", "Frıday parser crash", "ΣΟΦΙΑ parser"):
        _, topic = dates.windows(text + " yesterday", date(2025, 3, 11),
                                 words_of_relative=False)
        assert query_tokens(topic) == query_tokens(text), text


def test_a_dated_walk_is_recorded_with_its_days(days_home):
    home, _ = days_home
    from runtime.memory.walk import walk_recorded

    with Store.open(home.db_path) as store:
        walk_recorded(store, "parser crash on 4 March 2025")
        walk_recorded(store, "parser crash")
        rows = [json.loads(r[0]) for r in store.query(
            "SELECT data FROM telemetry WHERE kind = 'walk' ORDER BY id")]
    assert [r.get("dates") for r in rows] == [["2025-03-04"], None]


def _note(body: str, ts: str) -> Event:
    return Event(kind="note", body=body, actor="coworker", author_kind="agent", ts=ts)


def _episode(store: Store, said: list[Event], title: str) -> int:
    ids = ev.append_many(store, said)
    return rl.seal(store, level=1, first_event=ids[0], last_event=ids[-1],
                   source_range=f"{ids[0]}-{ids[-1]}", first_ts=said[0].ts, last_ts=said[-1].ts,
                   title=title, body=" ".join(e.body for e in said), terms="",
                   method="extractive")


def test_any_of_the_days_events_that_holds_the_query_answers_it(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        for day in (1, 2, 3, 4):  # "alpha" and "beta" are common, "zeta" is rare
            _episode(store, [_note(f"Alpha beta filler {day}-{i}.",
                                   f"2025-03-0{day}T{8 + i // 6:02d}:{i % 6 * 10:02d}:00.000Z")
                             for i in range(40)], f"day {day}")
        _episode(store, [_note("Alpha beta sync with the team.", "2025-03-05T09:00:00.000Z"),
                         _note("Zeta alpha restart after the outage.", "2025-03-05T10:00:00.000Z")],
                 "day 5")
    with Store.open(offline_home.db_path, readonly=True) as store:
        got = walk_result(store, "zeta alpha beta on 5 March 2025")
    # the first of the day's events holds 2 of 3 words but little of their weight; the second
    # holds 2 of 3 with the rare one: it answers
    assert not got.refused, got.why
    assert got.matched_tokens == ("zeta", "alpha") and got.confidence == pytest.approx(0.6667)
    assert any("Zeta" in f.body for f in got.events)


def test_a_coarse_node_of_the_day_holding_only_the_common_word_passes_to_a_finer_rung(
        offline_home: Home):
    """A coarse node's card is not its whole vocabulary: the week holding 3 March says "fix"
    (said everywhere) but not "billing". Entering there, on "fix" alone, held too little of
    the query's weight and refused, though the day's own episode says "billing fix"; that
    episode is the entry. A day that never says "billing" is refused, quoting the day's best
    match, not the 2/2 said on another day."""
    with Store.open(offline_home.db_path) as store:
        busy = _episode(store, [_note(f"Fix for flaky test {i}.", f"2025-03-01T09:{i:02d}:00.000Z")
                                for i in range(30)], "fixes")
        day = _episode(store, [_note("Billing fix merged by Dana.", "2025-03-03T10:00:00.000Z"),
                               _note("Fix the build cache.", "2025-03-03T11:00:00.000Z")], "day 3")
        later = _episode(store, [_note("Billing fix plan discussed.", "2025-03-05T10:00:00.000Z")],
                         "day 5")
        for kids, card in (([busy, day], "flaky test fixes"), ([later], "plan discussed")):
            spans = [rl.get(store, k) for k in kids]
            rl.seal(store, level=2, first_event=spans[0].first_event,
                    last_event=spans[-1].last_event,
                    source_range=f"{spans[0].first_event}-{spans[-1].last_event}",
                    first_ts=spans[0].first_ts, last_ts=spans[-1].last_ts, title=card, body=card,
                    terms="", method="extractive", child_ids=kids)
    with Store.open(offline_home.db_path, readonly=True) as store:
        got = walk_result(store, "billing fix on 3 March 2025")
        none = walk_result(store, "billing fix on 1 March 2025")
        empty = walk_result(store, "billing fix on 20 March 2025")  # nothing said that day
    assert not got.refused, got.why
    assert got.trace[0].level == 1 and got.trace[0].id == day, got.trace[0]
    assert [f.body for f in got.events][:1] == ["Billing fix merged by Dana."]
    assert none.refused
    assert none.code == "low_weight" and none.why is not None and none.why.of_day, none.why
    assert none.why.entered == ("fix",), none.why
    assert "said on or about 2025-03-01, fix (1/2), holding" in (walk_reason(none) or "")
    assert empty.refused and empty.why is not None and not empty.why.of_day, empty.why


def test_the_days_episode_is_found_where_an_import_put_it(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        _episode(store, [_note("Good morning, standup at ten.", "2025-03-05T08:00:00.000Z")],
                 "5 March morning")
        for k in range(120):  # later days, all about parser crashes: they fill any scan
            _episode(store, [_note(f"Parser crash {k}: parser crash again.",
                                   f"2025-04-{1 + k // 6:02d}T{8 + k % 6:02d}:00:00.000Z")],
                     f"episode {k}")
        said = [_note(f"Imported log line {i} about the dashboard and the roadmap.",
                      f"2025-03-05T{9 + i // 10:02d}:{i % 10 * 5:02d}:00.000Z") for i in range(30)]
        said[17] = _note("The parser crash in the importer was a null byte.", said[17].ts)
        _episode(store, said, "imported 5 March")  # the 5th's ids now span every episode
    with Store.open(offline_home.db_path, readonly=True) as store:
        got = walk_result(store, "parser crash on 5 March 2025")
    assert not got.refused, got.why
    assert [f.body for f in got.events] == ["The parser crash in the importer was a null byte."]


def test_the_nodes_holding_the_days_events_are_read_one_look_up_each(days_home):
    home, ids = days_home
    with Store.open(home.db_path, readonly=True) as store:
        day = ev.window_id_list(store, "2025-03-04T00:00:00.000Z", "2025-03-05T00:00:00.000Z",
                                100)
        weeks = rl.holding(store, 2, day, 10)  # the first week: 3 to 5 March
        days = rl.holding(store, 1, day, 10)
        both = rl.holding(store, 1, sorted([ids["3.1"], ids["4.0"], ids["10.1"], ids["fresh"]]),
                          10)
        first = rl.holding(store, 1, sorted([ids["3.1"], ids["4.0"], ids["10.1"]]), 1)
    assert day == [ids["4.0"], ids["4.1"]]
    assert [(w.first_event, w.last_event) for w in weeks] == [(ids["3.0"], ids["5.1"])]
    assert [(d.first_event, d.last_event) for d in days] == [(ids["4.0"], ids["4.1"])]
    # the 3rd's, the 4th's and the 10th's episodes; the fresh event is under none
    assert [d.first_event for d in both] == [ids["3.0"], ids["4.0"], ids["10.0"]]
    assert [d.first_event for d in first] == [ids["3.0"]]


def test_nodes_whose_times_cover_the_day_but_hold_none_of_it_do_not_crowd_it_out(
        offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        _episode(store, [_note("Good morning, standup at ten.", "2025-03-05T08:00:00.000Z")],
                 "5 March morning")
        for k in range(60):  # an import out of time order: each episode "covers" the 5th
            _episode(store, [_note(f"Parser crash {k}: parser crash again.",
                                   "2025-03-01T09:00:00.000Z"),
                             _note(f"Notes {k}.", "2025-03-09T09:00:00.000Z")],
                     f"episode {k}")
        said = [_note(f"Imported log line {i} about the dashboard.",
                      f"2025-03-05T{9 + i // 10:02d}:{i % 10 * 5:02d}:00.000Z") for i in range(30)]
        said[17] = _note("The parser crash in the importer was a null byte.", said[17].ts)
        _episode(store, said, "imported 5 March")
    with Store.open(offline_home.db_path, readonly=True) as store:
        got = walk_result(store, "parser crash on 5 March 2025")
    assert not got.refused, got.why
    assert [f.body for f in got.events] == ["The parser crash in the importer was a null byte."]


def test_a_refusal_on_weight_quotes_the_days_weightiest_event(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        for day in (1, 2, 3, 4):  # "alpha" and "beta" are common, "gamma" rarer, "zeta" unsaid
            _episode(store, [_note(f"Alpha beta filler {day}-{i}.",
                                   f"2025-03-0{day}T{8 + i // 6:02d}:{i % 6 * 10:02d}:00.000Z")
                             for i in range(40)], f"day {day}")
        _episode(store, [_note("Alpha beta sync with the team.", "2025-03-05T09:00:00.000Z"),
                         _note("Gamma alpha restart after the outage.",
                               "2025-03-05T10:00:00.000Z")], "day 5")
    with Store.open(offline_home.db_path, readonly=True) as store:
        got = walk_result(store, "zeta gamma alpha beta on 5 March 2025")
    assert got.refused and got.matched_tokens == ("gamma", "alpha"), got
    assert got.code == "not_said_then" and got.why is not None and got.why.enough, got.why
    assert got.why.weight is not None and got.why.weight < 0.5, got.why


def test_the_read_of_a_days_nodes_jumps_over_ids_no_node_holds(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        loose = ev.append_many(store, [_note(f"Loose note {i}.", "2025-03-05T08:00:00.000Z")
                                       for i in range(10)])  # under no node of the rung
        held = _episode(store, [_note("Parser crash, held.", "2025-03-05T09:00:00.000Z")],
                        "held")
        first = rl.get(store, held).first_event
        got = rl.holding(store, 1, [*loose, first], 1)  # one node wanted: two look-ups at most
    assert [r.id for r in got] == [held]


def test_what_was_said_about_the_day_in_the_week_after_answers_for_it(offline_home: Home):
    """ADR-0027: "yesterday", said on the 6th, is the 5th. The 6th's own crash is not. The
    episodes of the 1st to the 4th match better; the one that holds what was said about the
    5th is preferred all the same."""
    said = {d: [("09:00", "Parser crash, parser crash: the parser crash log of the day."),
                ("12:00", "Parser crash triage.")] for d in (1, 2, 3, 4)}
    said |= {5: [("10:00", "Billing invoice rounding fixed by Dana."),
                ("16:00", "Standup notes, nothing new.")],
            6: [("08:00", "Yesterday the parser crash came back after lunch."),
                ("15:00", "Parser crash again today, on a long line.")],
            20: [("09:00", "The parser crash of 5 March was a null byte.")]}  # too late
    with Store.open(offline_home.db_path) as store:
        ids = {}
        for day, rows in said.items():
            got = ev.append_many(store, [
                Event(kind="note", body=t, actor="coworker", author_kind="agent",
                      ts=f"2025-03-{day:02d}T{hm}:00.000Z") for hm, t in rows])
            ids.update({f"{day}.{n}": i for n, i in enumerate(got)})
            if day != 20:  # the 20th is not under a rollup yet
                rl.seal(store, level=1, first_event=got[0], last_event=got[-1],
                        source_range=f"{got[0]}-{got[-1]}",
                        first_ts=f"2025-03-{day:02d}T{rows[0][0]}:00.000Z",
                        last_ts=f"2025-03-{day:02d}T{rows[-1][0]}:00.000Z",
                        title=f"the {day} March", body=" ".join(t for _, t in rows), terms="",
                        method="extractive")
    with Store.open(offline_home.db_path, readonly=True) as store:
        fifth = walk_result(store, "parser crash on 5 March 2025")
        sixth = walk_result(store, "parser crash on 6 March 2025")
        told = walk(store, "parser crash yesterday", today=date(2025, 3, 6))
    assert not fifth.refused and _ids(fifth) == [ids["6.0"]], fifth.why
    assert fifth.dates == ("2025-03-05",) and fifth.confidence == 1.0
    # said on the 6th, it is the 6th's too: what was said that day, about any day
    assert sorted(_ids(sixth)) == [ids["6.0"], ids["6.1"]]
    assert told["events"][0]["id"] == ids["6.0"] and len(told["events"]) == 1


def test_a_later_note_about_another_day_too_is_not_the_days_answer(days_home):
    """It names the 5th ("yesterday") and the 4th: not about the 5th alone, so a question about
    the 5th's parser crash is still refused, not answered from the 4th's."""
    home, _ = days_home
    with Store.open(home.db_path) as store:
        ev.append(store, Event(kind="note", body="Yesterday was quiet. The parser crash of "
                               "4 March is still open.", actor="coworker", author_kind="agent",
                               ts="2025-03-06T08:00:00.000Z"))
    with Store.open(home.db_path, readonly=True) as store:
        got = walk_result(store, "parser crash on 5 March 2025")
    assert got.refused and got.events == () and got.dates == ("2025-03-05",), got.events


def test_the_semantic_entry_returns_what_was_said_about_the_day_in_other_words(
        offline_home: Home):
    """By meaning, the note said the next morning about the 5th is the 5th's, though it holds
    no word of the query (the lexical side reads only texts holding one)."""
    with Store.open(offline_home.db_path) as store:
        other = ev.append_many(store, [
            Event(kind="note", body=f"Standup notes {i}, nothing new.", actor="coworker",
                  author_kind="agent", ts=f"2025-03-0{i}T10:00:00.000Z") for i in range(1, 5)])
        told = ev.append(store, Event(kind="note", body="Yesterday my car broke down on the "
                                      "motorway.", actor="coworker", author_kind="agent",
                                      ts="2025-03-06T08:00:00.000Z"))
    ids = np.array([*other, told], dtype=np.int64)
    rows = np.array([[0.0, 1.0, 0.0]] * len(other) + [[1.0, 0.0, 0.0]], dtype=np.float32)
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    with Store.open(offline_home.db_path, readonly=True) as store:
        fifth = walk_result(store, "vehicle failure on 5 March 2025",
                            semantic=lambda text=None: (query, Matrix(ids, rows)))
        fourth = walk_result(store, "vehicle failure on 4 March 2025",
                             semantic=lambda text=None: (query, Matrix(ids, rows)))
    assert not fifth.refused and fifth.entry == "semantic" and _ids(fifth) == [told]
    assert fourth.refused and fourth.events == ()


@pytest.mark.parametrize("said, asked, answers", [
    # the sentence with the query's words names the day, and only asked days
    ("Yesterday the parser crashed; I fixed it this morning.", "on 5 March 2025", True),
    ("The parser crashed on 4 March and again yesterday.", "on 4 March 2025 and 5 March 2025", True),
    ("The parser crashed on 4 March and again yesterday.", "on 5 March 2025", False),
    # a sentence naming a day the reading cannot place is no answer for yesterday's
    ("Yesterday was quiet. The parser crash from two days ago is still open.",
     "on 5 March 2025", False),
    ("Yesterday was quiet. Monday's parser crash is still open.", "on 5 March 2025", False),
    # the query's words past the part read for days do not borrow its day
    ("Yesterday was quiet. " + "Logs. " * 60 + "The parser crash is open.", "on 5 March 2025",
     False),
])
def test_a_later_text_answers_for_the_day_when_its_sentence_names_only_that(
        offline_home: Home, said: str, asked: str, answers: bool):
    with Store.open(offline_home.db_path) as store:
        told = ev.append(store, Event(kind="note", body=said, actor="coworker",
                                      author_kind="agent", ts="2025-03-06T09:00:00.000Z"))
    with Store.open(offline_home.db_path, readonly=True) as store:
        got = walk_result(store, f"parser crash {asked}")
    assert (not got.refused and _ids(got) == [told]) if answers else got.refused, got.why


def test_a_long_later_text_is_read_in_part_for_its_days_and_returned_whole(offline_home: Home):
    body = "Yesterday the parser crashed. " + "The stack trace follows. " * 40
    with Store.open(offline_home.db_path) as store:
        told = ev.append(store, Event(kind="note", body=body, actor="coworker",
                                      author_kind="agent", ts="2025-03-06T09:00:00.000Z"))
    with Store.open(offline_home.db_path, readonly=True) as store:
        got = walk_result(store, "parser crash on 5 March 2025")
        recalled = recall(store, "parser crash on 5 March 2025", k=3)
        fifth = dates.windows("on 5 March 2025")[0][0]
        read = told_about(store, fifth)
    assert _ids(got) == [told] and got.events[0].body == body
    assert [h.event.body for h in recalled.hits if h.event.id == told] == [body]
    assert [(e.id, e.body) for e, _ in read] == [(told, body)]  # whole, though read in part


def test_the_cli_walk_does_not_echo_a_pasted_book(days_home):
    home, _ = days_home
    out = coworker("walk", "parser", "crash", "x" * 5000,
                   env={**os.environ, "COWORKER_HOME": str(home.root)})
    assert out.returncode in (0, 1) and len(out.stdout.splitlines()[0]) < 2200, out.stdout[:300]
    # found or refused, the reader is told the query was cut
    refused = coworker("walk", "zebra", "y" * 5000, env={**os.environ,
                                                         "COWORKER_HOME": str(home.root)})
    assert refused.returncode == 1, refused.stdout[:300]
    for got in (out, refused):
        assert "only the first 2000 characters of the query were read" in got.stdout, got.stdout


def test_the_turns_own_input_is_not_found_even_once_sealed(offline_home: Home):
    """`before_id` (the tool door passes the turn's first input) holds inside sealed spans too;
    a walk whose words were only there refuses rather than enter with nothing to show."""
    with Store.open(offline_home.db_path) as store:
        older = ev.append(store, Event(kind="note", body="Billing export ran.", actor="coworker",
                                       author_kind="agent", ts="2025-03-05T09:00:00.000Z"))
        ask, more = ev.append_many(store, [
            Event(kind="message", body="Why did the parser crash?", actor="owner",
                  author_kind="user", ts="2025-03-05T12:00:00.000Z"),
            Event(kind="note", body="The parser crashed.", actor="coworker",
                  author_kind="agent", ts="2025-03-05T12:01:00.000Z")])
        rl.seal(store, level=1, first_event=older, last_event=more,
                source_range=f"{older}-{more}", first_ts="2025-03-05T09:00:00.000Z",
                last_ts="2025-03-05T12:01:00.000Z", title="parser crash",
                body="Billing export ran. Why did the parser crash? The parser crashed.",
                terms="parser crash", method="extractive")
    with Store.open(offline_home.db_path, readonly=True) as store:
        every = walk_result(store, "parser crash")
        undated = walk_result(store, "parser crash", before_id=ask)
        dated = walk_result(store, "parser crash on 5 March 2025", before_id=ask)
    assert not every.refused and set(_ids(every)) == {ask, more}
    for got in (undated, dated):
        assert got.refused and got.events == (), _ids(got)
    assert undated.code == "no_event_holds" and undated.matched_tokens == ("parser", "crash")
    assert dated.code == "not_said_then" and dated.dates == ("2025-03-05",), dated.why
