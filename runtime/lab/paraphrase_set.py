"""The paraphrase set (issue 14), read from its data file `runtime/lab/data/paraphrase.json`:
facts planted in a synthetic coworker history, each asked once in the history's own words and
once in other words, plus questions nothing in it answers.

Owns reading the data into typed records: every fact's events (when in the history they
happen, who writes them, their text), its "exact" question and its "paraphrase" question, the
unanswerable questions with words the history never contains, and the split into a tuning half
and a held-apart half (fixed in the data, by id: even numbers tune, odd numbers are held apart).
A paraphrase shares no content-word stem (`memory.tokens`: stems of the words left after
stopwords) with its fact's events' body, actor or kind; tests/test_eval_paraphrase.py checks it.

The data was written by hand before any tuning code and is not to be edited to suit a result: a
question that turns out wrong is fixed in a commit that says so. The history around the facts is
`lab.history`'s; the run and its figures are `lab.eval_paraphrase`'s. Nothing here touches a
store or calls a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

DATA = "paraphrase.json"  # in runtime/lab/data, shipped as package data


@dataclass(frozen=True)
class FactEvent:
    kind: str
    actor: str
    author_kind: str
    body: str


@dataclass(frozen=True)
class Fact:
    id: str
    half: str
    day: int  # working day of the history, 0 = its first Monday
    at: str  # HH:MM, UTC; the fact's events follow each other a minute apart
    events: tuple[FactEvent, ...]
    exact: str
    paraphrase: str


@dataclass(frozen=True)
class Unanswerable:
    id: str
    half: str
    question: str
    absent: tuple[str, ...]  # words of the question the history never contains


def load(name: str = DATA) -> dict[str, Any]:
    """The data file `name` of runtime/lab/data (this set's, or another set's: lab.work_set)."""
    text = resources.files("runtime.lab").joinpath("data", name).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


_DATA = load()
HALVES: tuple[str, ...] = tuple(_DATA["halves"])
FACTS: tuple[Fact, ...] = tuple(
    Fact(f["id"], f["half"], f["day"], f["at"], tuple(FactEvent(**e) for e in f["events"]),
         f["exact"], f["paraphrase"])
    for f in _DATA["facts"])
UNANSWERABLE: tuple[Unanswerable, ...] = tuple(
    Unanswerable(u["id"], u["half"], u["question"], tuple(u["absent"]))
    for u in _DATA["unanswerable"])
