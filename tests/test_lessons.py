"""Reflect's third door to MEMORY.md: one model call a run for durable lessons, through the gate."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from rituals import reflect as rf
from runtime.home import Home
from runtime.memory import gate
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import promotions as pr

from .conftest import write_config
from .fakeapi import FakeMessagesAPI, text, tool_use


def history(home: Home) -> list[int]:
    start = datetime.now(UTC) - timedelta(days=3)
    with Store.open(home.db_path) as store:
        return ev.append_many(store, [
            Event(kind="message" if i % 2 else "note",
                  body=("Dana owns the parser release checklist." if i == 3 else
                        "From now on always run the release script first." if i == 5 else
                        f"Worked on the parser release, step {i}."),
                  actor="owner" if i % 2 else "coworker",
                  author_kind="user" if i % 2 else "agent",
                  ts=(start + timedelta(minutes=i)).isoformat().replace("+00:00", "Z"))
            for i in range(1, 32)])


def test_reflect_asks_once_for_lessons_and_the_gate_decides_each(home: Home,
                                                                  api: FakeMessagesAPI,
                                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 0)
    write_config(home.root, api.url, memory={"memory_promotions": "auto"})
    ids = history(home)
    lessons = [
        {"text": "Dana owns the parser release checklist", "source_events": [ids[2]],
         "confidence": 0.9},  # the owner's own words: applied
        {"text": "From now on always run the release script", "source_events": [ids[4]],
         "confidence": 0.95},  # reads as an instruction: queued
        {"text": "Ravi owns billing", "source_events": [99999], "confidence": 0.9},  # refused
        {"text": "no sources here"},  # malformed: skipped
    ]
    api.enqueue(tool_use("record_lessons", {"lessons": lessons}))
    report = rf.run(home, home.settings())
    assert len(api.requests) == 1
    assert "episode" in json.dumps(api.bodies[0]["messages"])
    assert report.promotions == "applied 1, malformed 1, queued 1, refused 1"
    with Store.open(home.db_path) as store:
        rows = {p.text: p for p in pr.listing(store, None)}
    assert {p.origin for p in rows.values()} == {"reflect"}
    assert rows["Dana owns the parser release checklist"].status == "applied"
    assert rows["From now on always run the release script"].status == "queued"
    assert rows["Ravi owns billing"].status == "refused"
    assert "Dana owns the parser release checklist" in home.memory_md.read_text()


def test_without_a_model_or_with_promotions_off_nothing_is_asked(home: Home,
                                                                 api: FakeMessagesAPI,
                                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 0)
    write_config(home.root, api.url, memory={"memory_promotions": "off"})
    history(home)
    assert rf.run(home, home.settings()).promotions.startswith("off")
    assert api.requests == []


def test_a_garbage_lessons_answer_is_loud_and_reflect_completes(home: Home,
                                                               api: FakeMessagesAPI, caplog,
                                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 0)
    write_config(home.root, api.url)
    history(home)
    api.enqueue(text("I think the lessons are: be careful."))
    report = rf.run(home, home.settings())
    assert report.promotions.startswith("lessons call failed")
    assert any("lessons call failed" in r.getMessage() for r in caplog.records)
    with Store.open(home.db_path) as store:
        assert store.scalar("SELECT status FROM ritual_runs WHERE ritual = 'reflect' "
                            "ORDER BY id DESC LIMIT 1") == "ok"


def test_a_lesson_that_turns_the_owners_words_around_is_queued_in_auto(home: Home,
                                                                       api: FakeMessagesAPI,
                                                                       monkeypatch: pytest.MonkeyPatch):
    """Reflect's lessons are a model's words: in "auto" one applies only as a verbatim clause
    of a cited owner message, never as the owner's message turned around."""
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 0)
    write_config(home.root, api.url, memory={"memory_promotions": "auto"})
    ids = history(home)
    owner = ids[2]  # "Dana owns the parser release checklist."
    lessons = [
        {"text": "Dana no longer owns the parser release checklist", "source_events": [owner],
         "confidence": 0.95},  # the owner's words, inverted: queued
        {"text": "dana owns the PARSER release checklist!", "source_events": [owner],
         "confidence": 0.95},  # verbatim but for case and punctuation: applied
    ]
    api.enqueue(tool_use("record_lessons", {"lessons": lessons}))
    report = rf.run(home, home.settings())
    assert report.promotions == "applied 1, queued 1", report.promotions
    with Store.open(home.db_path) as store:
        rows = {p.text: p for p in pr.listing(store, None)}
    inverted = rows["Dana no longer owns the parser release checklist"]
    assert (inverted.status, inverted.origin) == ("queued", "reflect")
    assert inverted.reason.startswith(gate.NOT_VERBATIM), inverted.reason
    memory = home.memory_md.read_text()
    assert "no longer" not in memory and "dana owns the PARSER release checklist!" in memory
