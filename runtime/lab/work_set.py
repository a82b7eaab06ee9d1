"""The work set (issue 39 item 2), read from its data file `runtime/lab/data/work.json`: a
coworker's six working weeks on a payments team, with facts about decisions, owners, dates and
reasons planted among the noise of ordinary days, each asked once in the history's own words
and once in other words, plus questions nothing in it answers.

Owns reading the data into typed records and building the history from it: every fact's
events (their own timestamps, kinds, actors and text: the owner, the coworker's own loop kinds,
chat imported under handles such as `dana.k@corp.example`, tickets, commits, CI, tool results),
which of them answer the fact, its "exact" and "paraphrase" questions, the unanswerable
questions with the words the history never holds, and the split into a tuning half and a held
half (fixed in the data, by id: even numbers tune, odd numbers are held apart). The noise around
the facts (stand-ups, the loop's turns and quiet ticks, chat, commits, CI) is expanded from the
data's hand-written lists with a fixed seed: same data, same history. A paraphrase shares no
content-word stem with its answering events' body, actor or kind; tests/test_eval_work.py
checks it.

The data was written by hand before any measuring and is not to be edited to suit a result. The
run and its figures are `lab.eval_work`'s. Nothing here touches a store or calls a model.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from .paraphrase_set import Unanswerable, load

DATA = "work.json"  # in runtime/lab/data, shipped as package data
SEED = 39
TAG = "work"  # meta key of a planted event: its key in the data


@dataclass(frozen=True)
class WorkEvent:
    key: str
    ts: str
    kind: str
    actor: str
    author_kind: str
    body: str
    meta: dict[str, Any]


@dataclass(frozen=True)
class WorkFact:
    id: str
    half: str
    events: tuple[WorkEvent, ...]
    answers: tuple[str, ...]  # keys of the events that answer it
    exact: str
    paraphrase: str


def _event(e: dict[str, Any]) -> WorkEvent:
    return WorkEvent(e["key"], e["ts"], e["kind"], e["actor"], e["author_kind"], e["body"],
                     dict(e.get("meta", {})))


_DATA = load(DATA)
HALVES: tuple[str, ...] = tuple(_DATA["halves"])
FIRST = date.fromisoformat(_DATA["start"])
LAST = date.fromisoformat(_DATA["end"])
FACTS: tuple[WorkFact, ...] = tuple(
    WorkFact(f["id"], f["half"], tuple(_event(e) for e in f["events"]), tuple(f["answers"]),
             f["exact"], f["paraphrase"])
    for f in _DATA["facts"])
UNANSWERABLE: tuple[Unanswerable, ...] = tuple(
    Unanswerable(u["id"], u["half"], u["question"], tuple(u["absent"]))
    for u in _DATA["unanswerable"])
NOISE: dict[str, Any] = _DATA["noise"]


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def _row(when: datetime, kind: str, actor: str, author: str, body: str,
         meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"ts": _iso(when), "kind": kind, "actor": actor, "author_kind": author,
            "body": body, "meta": {"synthetic": TAG, **(meta or {})}}


class _Day:
    """The noise of one working day, from the data's lists and one shared random source."""

    def __init__(self, day: date, rng: random.Random, counters: dict[str, int]) -> None:
        self.rng, self.counters = rng, counters
        self.morning = datetime(day.year, day.month, day.day, 9, tzinfo=UTC)

    def at(self, lo_min: int, hi_min: int) -> datetime:
        return self.morning + timedelta(minutes=self.rng.randrange(lo_min, hi_min),
                                        seconds=self.rng.randrange(0, 60))

    def tick(self, when: datetime, inputs: int) -> Iterator[dict[str, Any]]:
        self.counters["tick"] += 1
        n = self.counters["tick"]
        yield _row(when, "tick", "coworker", "system",
                   f"tick: {inputs} message(s), 0 promise(s) due, 0 ritual(s)")
        if not inputs:
            yield _row(when + timedelta(seconds=2), "tick_end", "coworker", "system",
                       f"tick {n}: quiet")

    def turn(self, when: datetime) -> Iterator[dict[str, Any]]:
        t = self.rng.choice(NOISE["turns"])
        yield _row(when, "message", "owner", "user", t["request"])
        yield from self.tick(when + timedelta(seconds=20), 1)
        n = self.counters["tick"]
        step = [("model_response", "coworker", "agent", t["thought"]),
                ("tool_call", "coworker", "agent",
                 f"{t['tool']}({json.dumps(t['input'], ensure_ascii=False)})"),
                ("tool_result", t["tool"], "tool", t["result"]),
                ("outbox", "coworker", "agent", t["reply"]),
                ("tick_end", "coworker", "system", f"tick {n}: replied")]
        for i, (kind, actor, author, body) in enumerate(step):
            yield _row(when + timedelta(seconds=30 + 15 * i), kind, actor, author, body)

    def others(self) -> Iterator[dict[str, Any]]:
        rng = self.rng
        for actor, body in rng.sample(NOISE["chat"], rng.randrange(3, 6)):
            yield _row(self.at(15, 530), "message", actor, "third_party", body,
                       {"source": "slack #payments"})
        for actor, msg in rng.sample(NOISE["commits"], rng.randrange(2, 4)):
            yield _row(self.at(30, 520), "commit", actor, "third_party",
                       f"{rng.getrandbits(28):07x} {msg}")
        for _ in range(rng.randrange(4, 7)):
            self.counters["ci"] += 1
            body = rng.choice(NOISE["ci"]).format(n=self.counters["ci"], m=rng.randrange(9, 16),
                                                  s=rng.randrange(0, 60))
            yield _row(self.at(30, 540), "ci", "ci-bot", "tool", body)

    def rows(self) -> Iterator[dict[str, Any]]:
        yield _row(self.at(0, 5), "message", "owner", "user", self.rng.choice(NOISE["standup"]))
        for _ in range(self.rng.randrange(1, 3)):
            yield from self.turn(self.at(30, 450))
        yield from self.others()
        for minute in range(40, 540, 45):  # quiet ticks through the working day
            yield from self.tick(self.morning + timedelta(minutes=minute, seconds=7), 0)


def _noise() -> Iterator[dict[str, Any]]:
    rng = random.Random(SEED)
    counters = {"tick": 0, "ci": 2100}
    day = FIRST
    while day <= LAST:
        if day.weekday() < 5:
            yield from _Day(day, rng, counters).rows()
        day += timedelta(days=1)


def _planted() -> Iterator[dict[str, Any]]:
    for fact in FACTS:
        for e in fact.events:
            yield {"ts": e.ts, "kind": e.kind, "actor": e.actor, "author_kind": e.author_kind,
                   "body": e.body, "meta": {"synthetic": TAG, **e.meta, TAG: e.key}}


def events() -> list[dict[str, Any]]:
    """The whole history, oldest first (a planted event sorts after noise of its second)."""
    rows = [(r["ts"], 0, i, r) for i, r in enumerate(_noise())]
    rows += [(r["ts"], 1, i, r) for i, r in enumerate(_planted())]
    rows.sort(key=lambda t: t[:3])
    return [r for *_, r in rows]
