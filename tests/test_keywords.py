"""Episode keywords: reflect asks the model for the words an episode is talked about with, and
keeps them as 'model' tags beside the episode's card (issue 14).

Reflect runs in process against the real store and the real anthropic client, answered by the
local fake Messages API (tests/fakeapi.py): summaries are answered faithfully from the prompt,
keyword calls by a script per test. Offline keywords (co-occurrence) run without a model.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rituals import reflect as rf
from runtime.home import Home
from runtime.memory import keywords as kw
from runtime.memory.walk import walk_result
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.store import tags as tg

from .conftest import coworker, write_config
from .fakeapi import FakeMessagesAPI, forced_tool, text, tool_use

NOW = datetime.now(UTC).replace(microsecond=0)

# Three topics, one episode each (12 notes, then a quiet gap); none says the keywords below.
TOPICS = {
    "invoices": "Ravi reconciled the overdue invoices against the ledger for the Oslo office",
    "pager": "Noor rotated the pager schedule after the midnight outage of the checkout api",
    "onboarding": "Lena prepared laptops and badges for the three interns starting Monday",
}
KEYWORDS = {
    "invoices": ["billing", "accounts receivable", "bookkeeping"],
    "pager": ["on-call", "incident duty"],  # "on-call" is no word: dropped, "incident duty" kept
    "onboarding": ["newcomers", "orientation"],
}


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def history(home: Home, topics: list[str], start: datetime | None = None) -> None:
    """One episode per topic (12 notes 3 minutes apart, a 40-minute gap after), and a last
    note that completes the final block."""
    t = start or NOW - timedelta(days=2)
    events = []
    for topic in topics:
        for i in range(12):
            events.append(Event(kind="note", body=f"{TOPICS[topic]} (step {i}).",
                                actor="coworker", author_kind="agent", ts=iso(t)))
            t += timedelta(minutes=3)
        t += timedelta(minutes=40)
    events.append(Event(kind="note", body="end of the day", actor="coworker",
                        author_kind="agent", ts=iso(t)))
    with Store.open(home.db_path) as store:
        ev.append_many(store, events)


def prompt(record: dict) -> str:
    return record["json"]["messages"][0]["content"]


def faithful_summary(record: dict) -> dict:
    """A write_summary answer made of the longest item it was shown: always faithful."""
    items = re.findall(r"\[#(\d+)\] ([^\n]+)", prompt(record))
    assert items, prompt(record)[:200]
    rid, said = max(items, key=lambda t: len(t[1]))
    return tool_use("write_summary", {"title": "Work log", "summary": f"{said} [#{rid}]"})


def shown_episodes(record: dict) -> dict[int, str]:
    """The episodes a keyword call showed: id -> topic."""
    out = {}
    for rid, body in re.findall(r"\(episode (\d+)\) ([^\n]+)", prompt(record)):
        out[int(rid)] = next(k for k, v in TOPICS.items() if v.split()[0] in body)
    return out


def good_keywords(record: dict) -> dict:
    return tool_use("record_keywords", {"episodes": [
        {"episode": rid, "keywords": KEYWORDS[topic]}
        for rid, topic in shown_episodes(record).items()]})


def answering(api: FakeMessagesAPI, keywords: Callable[[dict], Any]) -> None:
    """Summaries faithfully, keyword calls with `keywords(record)`."""
    def respond(record: dict) -> Any:
        if forced_tool(record) == "record_keywords":
            return keywords(record)
        return faithful_summary(record)
    api.responder = respond


def configure(home: Home, api: FakeMessagesAPI, **memory: Any) -> None:
    write_config(home.root, api.url, memory={"memory_promotions": "off", **memory})


def keyword_calls(api: FakeMessagesAPI) -> list[dict]:
    return [r for r in api.requests if forced_tool(r) == "record_keywords"]


def episode_of(store: Store, topic: str) -> int:
    word = TOPICS[topic].split()[0].lower()
    return next(r.id for r in rl.at_level(store, 1) if word in r.vocab.split())


def test_model_keywords_land_as_model_tags_of_their_episodes_and_search_finds_them(
        home: Home, api: FakeMessagesAPI, caplog):
    configure(home, api)
    history(home, ["invoices", "pager", "onboarding"])
    answering(api, good_keywords)
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    assert report.sealed == {1: 3}
    assert len(keyword_calls(api)) == 1 and report.keyword_calls == 1  # one call, 3 episodes
    assert report.summary_calls == 3
    tool = keyword_calls(api)[0]["json"]["tools"][0]
    item = tool["input_schema"]["properties"]["episodes"]["items"]
    assert item["properties"]["keywords"]["maxItems"] == kw.MAX_PER_EPISODE
    with Store.open(home.db_path) as store:
        got = {t: tg.listing(store, "rollup", episode_of(store, t)) for t in TOPICS}
        assert tg.listing(store, "event", 1) == []
    assert got == {
        "invoices": [("billing", "model"), ("accounts receivable", "model"),
                     ("bookkeeping", "model")],
        "pager": [("incident duty", "model")],
        "onboarding": [("newcomers", "model"), ("orientation", "model")]}
    # the one dropped keyword is said once, at WARNING, with its episode
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "'on-call'" in warnings[0], warnings
    assert "not a word" in warnings[0], warnings
    assert "1 items dropped" in report.keywords, report.keywords
    # `coworker search` finds the episode by a word none of its events says
    found = [json.loads(line) for line in
             coworker("search", "bookkeeping", "--json").stdout.splitlines()]
    with Store.open(home.db_path) as store:
        want = episode_of(store, "invoices")
    assert [(f["kind"], f["id"]) for f in found] == [("rollup", want)]


def test_the_walk_never_counts_keywords_as_evidence(home: Home, api: FakeMessagesAPI):
    """A keyword is a way to the episode, not a word of it: a query only the keywords hold
    finds the rollup in search but gives the walk no confidence, so it refuses."""
    configure(home, api)
    history(home, ["invoices", "pager", "onboarding"])
    answering(api, good_keywords)
    rf.run(home, home.settings())
    with Store.open(home.db_path) as store:
        assert rl.fts_search(store, "bookkeeping", columns="tags")
        by_keyword = walk_result(store, "billing bookkeeping")
        by_text = walk_result(store, "overdue invoices ledger")
    assert by_keyword.refused and by_keyword.confidence == 0.0
    assert not by_text.refused and by_text.confidence == 1.0


BAD_ANSWERS = {
    # an id that was not in the batch, 200 keywords, and junk items: dropped, the rest kept
    "wrong-id-and-too-many": lambda rec: tool_use("record_keywords", {"episodes": [
        *[{"episode": rid, "keywords": ["x"] * 200 if t == "pager" else KEYWORDS[t]}
          for rid, t in shown_episodes(rec).items()],
        {"episode": 9999, "keywords": ["stray"]},
        {"episode": "first", "keywords": ["stray"]},
        {"episode": 1, "keywords": "stray words", "note": "extra"}]}),
}


def test_a_bad_item_is_dropped_with_a_warning_and_the_rest_kept(home: Home,
                                                               api: FakeMessagesAPI, caplog):
    configure(home, api)
    history(home, ["invoices", "pager", "onboarding"])
    answering(api, BAD_ANSWERS["wrong-id-and-too-many"])
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    with Store.open(home.db_path) as store:
        origins = {(r[0], r[1]) for r in store.query("SELECT item_id, origin FROM tags")}
        pager = episode_of(store, "pager")
        words = {w for w, _ in tg.listing(store, "rollup", episode_of(store, "invoices"))}
        assert tg.listing(store, "rollup", pager) == []
        assert store.scalar("SELECT count(*) FROM tags WHERE word = 'stray'") == 0
        status = store.scalar("SELECT status FROM ritual_runs WHERE ritual = 'reflect'")
    assert status == "ok"
    assert words == {"billing", "accounts receivable", "bookkeeping"}
    assert {o for _, o in origins} == {"model"} and 9999 not in {i for i, _ in origins}
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "dropped 4 items" in warnings[0]
    assert "episode 9999 " in warnings[0] and "not asked about" in warnings[0], warnings
    assert f"episode {pager}: " in warnings[0] and "does not validate" in warnings[0], warnings
    assert "at most 12 items" in warnings[0] and "not 200" in warnings[0], warnings
    assert "episode 'first': " in warnings[0], warnings
    assert report.keyword_calls == 1


UNUSABLE = {
    "not-a-list": tool_use("record_keywords", {"episodes": "billing, bookkeeping"}),
    "text": text("Here are some keywords: billing, bookkeeping."),
    "nothing-valid": tool_use("record_keywords", {"episodes": [
        {"episode": 9999, "keywords": ["billing"]}]}),
}


@pytest.mark.parametrize("bad", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_an_unusable_keyword_answer_writes_nothing_and_reflect_finishes(
        home: Home, api: FakeMessagesAPI, caplog, bad):
    """Three unusable keyword calls in a row and the model is not asked again this run (the
    summaries' rule); the run is ok, and the episodes are asked about again next run."""
    configure(home, api)
    history(home, [t for t in TOPICS for _ in range(4)])  # 12 episodes: 2 batches
    answering(api, lambda rec: bad)
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    assert report.sealed == {1: 12, 2: 1}
    assert len(keyword_calls(api)) == 2 and report.keyword_calls == 2
    with Store.open(home.db_path) as store:
        assert store.scalar("SELECT count(*) FROM tags") == 0
        assert store.scalar("SELECT status FROM ritual_runs") == "ok"
    # keywords, episodes, calls, failed
    assert re.findall(r"[0-9]+", report.keywords)[:4] == ["0", "0", "2", "2"], report.keywords
    # the next run asks again for those episodes; a third failure in a row gives up
    # 20 minutes after the last note, so the same day: it joins that note's block (an episode
    # never spans more than a day, ADR-0035)
    history(home, ["pager"], start=NOW - timedelta(days=2, minutes=-(12 * 76 + 20)))
    caplog.clear()
    report = rf.run(home, home.settings())
    # 1 summary (streak reset), then keyword calls fail 3 times in a row: the model is given up
    assert len(keyword_calls(api)) == 2 + 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []  # 2 failures this run: still said at INFO only
    history(home, ["invoices"], start=NOW - timedelta(hours=2))
    api.responder = lambda rec: bad  # now summaries fail too: 3 in a row across both kinds
    rf.run(home, home.settings())
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("3 times in a row" in w for w in warnings), warnings


def test_keyword_calls_count_against_the_summary_budget(home: Home, api: FakeMessagesAPI,
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 26)
    configure(home, api)
    history(home, [t for t in TOPICS for _ in range(8)])  # 24 episodes, 2 chapters
    answering(api, good_keywords)
    report = rf.run(home, home.settings())
    assert report.sealed == {1: 24, 2: 2}
    # 26 calls in all: 26 summaries, none left for keywords
    assert report.summary_calls == 26 and report.keyword_calls == 0
    assert len(api.requests) == 26
    assert report.keywords.startswith("model: ") and "budget spent" in report.keywords, \
        report.keywords
    # a new run has a new budget: 2 calls of 8 episodes each, the newest first
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 2)
    configure(home, api)
    report = rf.run(home, home.settings())
    assert report.keyword_calls == 2 and len(api.requests) == 28
    asked = [sorted(shown_episodes(r)) for r in keyword_calls(api)]
    assert asked == [list(range(17, 25)), list(range(9, 17))]
    # the third run asks for the last 8 and stops there: every episode has its keywords
    configure(home, api)
    report = rf.run(home, home.settings())
    assert report.keyword_calls == 1 and len(api.requests) == 29
    assert sorted(shown_episodes(keyword_calls(api)[-1])) == list(range(1, 9))
    with Store.open(home.db_path) as store:
        assert len(tg.with_origin(store, "rollup", "model")) == 24
    report = rf.run(home, home.settings())
    assert report.keyword_calls == 0 and len(api.requests) == 29
    assert report.keywords.startswith("model: ") and "no episode needed" in report.keywords, \
        report.keywords


def test_a_second_reflect_asks_no_keywords_for_episodes_that_have_them(
        home: Home, api: FakeMessagesAPI):
    configure(home, api)
    history(home, ["invoices", "pager"])
    answering(api, good_keywords)
    rf.run(home, home.settings())
    assert len(keyword_calls(api)) == 1
    with Store.open(home.db_path) as store:
        before = [tuple(r) for r in store.query("SELECT * FROM tags ORDER BY id")]
    rf.run(home, home.settings())
    assert len(keyword_calls(api)) == 1
    # a new episode later: only it is asked about
    history(home, ["onboarding"], start=NOW - timedelta(days=2, minutes=-(2 * 76 + 20)))
    rf.run(home, home.settings())
    assert len(keyword_calls(api)) == 2
    assert list(shown_episodes(keyword_calls(api)[-1]).values()) == ["onboarding"]
    with Store.open(home.db_path) as store:
        after = [tuple(r) for r in store.query("SELECT * FROM tags ORDER BY id")]
    assert after[:len(before)] == before and len(after) == len(before) + 2


def test_an_owner_tag_stays_the_owners(home: Home, api: FakeMessagesAPI,
        monkeypatch: pytest.MonkeyPatch):
    """A word the owner tagged first is not taken over by the model's keywords."""
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 1)
    configure(home, api)
    history(home, ["invoices"])
    answering(api, good_keywords)
    rf.run(home, home.settings())  # the one call is the summary: no keywords yet
    assert keyword_calls(api) == []
    with Store.open(home.db_path) as store:
        rid = rl.at_level(store, 1)[0].id
        assert tg.add(store, "rollup", rid, ["Billing"]) == ["billing"]
    configure(home, api)
    rf.run(home, home.settings())
    with Store.open(home.db_path) as store:
        assert tg.listing(store, "rollup", rid) == [
            ("billing", "owner"), ("accounts receivable", "model"), ("bookkeeping", "model")]


def test_without_a_model_reflect_writes_no_keyword(offline_home: Home):
    """No model: no episode gets a keyword (offline keywords were deleted in issue 39)."""
    home = offline_home
    history(home, ["invoices", "pager", "onboarding", "pager", "onboarding"],
            start=NOW - timedelta(days=3))
    report = rf.run(home, home.settings())
    with Store.open(home.db_path) as store:
        assert store.scalar("SELECT count(*) FROM tags") == 0
    assert report.keywords.startswith("off:"), report.keywords
