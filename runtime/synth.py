"""Synthetic history: deterministic, realistic-looking triage work, for `coworker demo` (the
product) and the lab's benches and evaluation history (runtime/lab), which import it from here.

Owns generating events as import-ready dicts (ts, kind, actor, author_kind, body, meta) from a
seed: owner requests, the coworker's notes and decisions, tool output, spread over working
hours with quiet nights. Same seed, same history. It writes nothing itself.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

COMPONENTS = ["parser", "scheduler", "cache", "auth", "billing", "search", "exporter", "sync",
              "installer", "dashboard", "webhooks", "migrations"]
SYMPTOMS = ["crashes on unicode input", "times out under load", "leaks memory after a reload",
            "returns stale results", "drops the last row", "logs the password in clear",
            "fails on leap days", "double-charges on retry", "hangs when the disk is full",
            "ignores the time zone", "rejects valid tokens", "sorts names wrongly"]
PEOPLE = ["Dana", "Ravi", "Mei", "Jonas", "Amara", "Luis"]
ACTIONS = ["reproduced", "bisected", "triaged as P2", "assigned to {who}", "wrote a failing test",
           "found the root cause in {comp}", "opened a fix PR", "asked {who} for logs",
           "closed as duplicate", "escalated to {who}"]


def events(n: int, seed: int = 1, start: datetime | None = None) -> Iterator[dict]:
    rng = random.Random(seed)
    t = start or datetime(2025, 1, 6, 9, tzinfo=UTC)
    ticket = 100
    topic = (rng.choice(COMPONENTS), rng.choice(SYMPTOMS))
    for i in range(n):
        if i % 37 == 0:
            ticket += 1
            topic = (rng.choice(COMPONENTS), rng.choice(SYMPTOMS))
        comp, symptom = topic
        who = rng.choice(PEOPLE)
        t += timedelta(minutes=rng.choice([1, 2, 3, 5, 8, 13]))
        if t.hour >= 18:  # nights and weekends are quiet
            t = (t + timedelta(days=1)).replace(hour=9, minute=rng.randrange(0, 30))
            while t.weekday() >= 5:
                t += timedelta(days=1)
        r = i % 7
        if r == 0:
            kind, actor, author, body = ("message", "owner", "user",
                                         f"Ticket #{ticket}: the {comp} {symptom}. Can you look?")
        elif r in (1, 2, 3):
            action = rng.choice(ACTIONS).format(who=who, comp=comp)
            kind, actor, author, body = ("note", "coworker", "agent",
                                         f"#{ticket} {comp}: {action}.")
        elif r == 4:
            kind, actor, author, body = ("tool_result", "shell", "tool",
                                         f"pytest tests/test_{comp}.py: {rng.randrange(1, 9)} "
                                         f"failed, {rng.randrange(20, 300)} passed")
        elif r == 5:
            kind, actor, author, body = ("decision", "coworker", "agent",
                                         f"#{ticket}: {who} owns the {comp} fix; due "
                                         f"{(t + timedelta(days=3)).date().isoformat()}.")
        else:
            kind, actor, author, body = ("message", who.lower(), "third_party",
                                         f"Re #{ticket}: the {comp} {symptom} again on staging.")
        yield {"ts": t.isoformat().replace("+00:00", "Z"), "kind": kind, "actor": actor,
               "author_kind": author, "body": body, "meta": {"ticket": ticket}}


def write_jsonl(path: Path, n: int, seed: int = 1, start: datetime | None = None) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for e in events(n, seed, start):
            f.write(json.dumps(e) + "\n")
    return path
