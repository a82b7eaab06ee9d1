"""The synthetic coworker history the paraphrase set is asked of: six working weeks, deterministic.

Owns building the history as import-ready dicts (ts, kind, actor, author_kind, body, meta):
the triage work of `runtime.synth` (owner requests, the coworker's notes and decisions, tool
output, teammates' messages) as the bulk, a morning stand-up line from the owner, the loop's
`tick_end` bookkeeping every few events, and the hand-written facts of `lab.paraphrase_set`
planted on their working day and time. Each fact event carries `meta.fact` (its fact's id), so
a run finds their ids once they are stored. Same code, same history. It writes nothing itself:
`lab.eval_paraphrase` appends the rows as the loop would have written them (the importer refuses
`tick_end`, the loop's own bookkeeping).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from .. import synth
from .paraphrase_set import FACTS

START = datetime(2025, 3, 3, 9, tzinfo=UTC)  # a Monday
BULK = 3000  # runtime.synth events: about six working weeks at its pace
SEED = 14
TICK_EVERY = 9  # a tick_end after every ninth bulk event

STANDUP = (
    "Morning. Priorities today: keep staging green and clear the oldest open tickets.",
    "Morning all. Anything blocked? Post it in the channel before ten.",
    "Quiet day planned: reviews first, then the flaky tests.",
    "Reminder to update your tickets before the weekly sync.",
    "Morning. Please look at the failing nightly build first.",
    "Let us close what we can before the weekend.",
    "Morning. Two new tickets came in overnight; triage them before lunch.",
)


def working_day(day: int, start: datetime = START) -> datetime:
    """The date of working day `day` (0 = the start's Monday), weekends skipped."""
    when, left = start, day
    while left:
        when += timedelta(days=1)
        if when.weekday() < 5:
            left -= 1
    return when


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def _row(when: datetime, kind: str, actor: str, author: str, body: str, meta: dict) -> dict:
    return {"ts": _iso(when), "kind": kind, "actor": actor, "author_kind": author,
            "body": body, "meta": {"synthetic": "paraphrase", **meta}}


def _bulk() -> Iterator[tuple[datetime, dict]]:
    rng = random.Random(SEED)
    last_day = None
    for i, e in enumerate(synth.events(BULK, seed=SEED, start=START)):
        when = datetime.fromisoformat(e["ts"].replace("Z", "+00:00"))
        if when.date() != last_day:
            last_day = when.date()
            yield when - timedelta(minutes=2), _row(
                when - timedelta(minutes=2), "message", "owner", "user",
                rng.choice(STANDUP), {})
        yield when, _row(when, e["kind"], e["actor"], e["author_kind"], e["body"], e["meta"])
        if i % TICK_EVERY == TICK_EVERY - 1:
            t = when + timedelta(seconds=30)
            yield t, _row(t, "tick_end", "coworker", "system",
                          f"tick ended: {rng.randrange(1, 4)} inputs, "
                          f"{rng.randrange(0, 3)} model calls", {})


def _facts() -> Iterator[tuple[datetime, dict]]:
    for fact in FACTS:
        hour, minute = (int(x) for x in fact.at.split(":"))
        when = working_day(fact.day).replace(hour=hour, minute=minute, second=15)
        for j, e in enumerate(fact.events):
            t = when + timedelta(minutes=j)
            yield t, _row(t, e.kind, e.actor, e.author_kind, e.body, {"fact": fact.id})


def events() -> list[dict]:
    """The whole history, oldest first (a fact event sorts after a bulk event of its second)."""
    rows = [(when, 0, i, row) for i, (when, row) in enumerate(_bulk())]
    rows += [(when, 1, i, row) for i, (when, row) in enumerate(_facts())]
    rows.sort(key=lambda t: t[:3])
    return [row for *_, row in rows]

