"""`coworker bench --long-text CHARS`: what one long message costs on each path, measured.

Owns building a small temporary home with one message of CHARS characters of made-up distinct
words (the worst case for the tokenizer: every word is stemmed afresh) among short ones, and
timing, in this process, each path that reads it: arrival, the next recall (docfreq catches
up), recall, search (exhaustive, which reads the top bodies' coverage), reflect's sealing, the
walk, the gate on "remember <it>", redaction, beside one bare FTS5 `MATCH` of the same words.
Beside each time, how many distinct words the path stemmed (ADR-0032: a path reads a text's
head, so this stays near the head's count however long the text). It reports figures; it
never fails on speed, and it touches no home but its own temporary one.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..home import Home
from ..memory import gate, ladder
from ..memory.recall import recall
from ..memory.search import search
from ..memory.tokens import stem
from ..memory.walk import walk
from ..redaction import redact_event
from ..store import Event, Store
from ..store import events as ev
from ..store import inputs as inputs_store


def made_up(chars: int, seed: int = 1) -> str:
    """`chars` characters of made-up words, nearly all distinct (syllables drawn at random)."""
    rnd = random.Random(seed)
    out, size = [], 0
    while size < chars:
        w = "".join(rnd.choice("bcdfghjklmnpqrstvwxz") + rnd.choice("aeiou")
                    for _ in range(rnd.randint(2, 4)))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:chars]


def _timed(fn: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """fn's result, and its time and the distinct words it stemmed (from a cold cache)."""
    stem.cache_clear()
    t0 = time.perf_counter()
    out = fn()
    ms = (time.perf_counter() - t0) * 1000
    return out, {"ms": round(ms, 2), "stemmed": stem.cache_info().misses}


def _history(store: Store, body: str) -> tuple[int, dict[str, Any]]:
    """Short notes, the long message as the owner's, then notes an hour apart (so the long
    message's episode is complete): the long message's id, and what its arrival cost."""
    t0 = datetime(2026, 11, 2, 9, tzinfo=UTC)

    def at(minutes: int) -> str:
        return (t0 + timedelta(minutes=minutes)).isoformat(timespec="milliseconds"
                                                           ).replace("+00:00", "Z")

    for i in range(5):
        ev.append(store, Event(kind="message", body=f"note {i} about the parser deploy",
                               actor="owner", author_kind="user", ts=at(i)))
    recall(store, "parser deploy")  # docfreq keeps its counts from here
    long_id, arrival = _timed(lambda: inputs_store.add_message(
        store, Event(kind="message", body=body, actor="owner", author_kind="user", ts=at(10))))
    for i in range(12):
        ev.append(store, Event(kind="message", body=f"later note {i} about billing",
                               actor="owner", author_kind="user", ts=at(60 * (i + 1))))
    inputs_store.consume(store, [long_id], None)
    return long_id, arrival


def _bare(store: Store, query: str) -> list[int]:
    """One bare FTS5 `MATCH` of the query's words (none when it has no word to match)."""
    match = ev.fts_query(query.split())
    return ev.bare_match(store, match, 10) if match else []


def run(chars: int) -> dict[str, Any]:
    """Build the temporary home and measure each path once (see the module docstring)."""
    body = made_up(chars)
    logging.disable(logging.WARNING)  # the gate's queued promotion is the figure, not news
    try:
        return _measure(body)
    finally:
        logging.disable(logging.NOTSET)


def _measure(body: str) -> dict[str, Any]:
    words = body.split()
    query = " ".join(words[100:102])  # said in the head
    with tempfile.TemporaryDirectory() as tmp:
        home = Home.locate(Path(tmp) / "home")
        home.init()
        settings = home.settings()
        with Store.open(home.db_path) as store:
            long_id, arrival = _history(store, body)
            paths: dict[str, dict[str, Any]] = {"arrival": arrival}
            _, paths["next_recall"] = _timed(lambda: recall(store, "how is the parser deploy"))
            hits, paths["recall"] = _timed(lambda: recall(store, query))
            _, paths["bare_fts5"] = _timed(lambda: _bare(store, query))
            _, paths["search"] = _timed(lambda: search(store, query, exhaustive=True))
            _, paths["reflect_seal"] = _timed(lambda: ladder.seal(store, 10))
            walked, paths["walk"] = _timed(lambda: walk(store, query))
            verdict, paths["gate"] = _timed(lambda: gate.consider(
                store, home, settings, gate.Candidate(" ".join(words), [long_id], 1.0, "owner")))
            _, paths["redact"] = _timed(lambda: redact_event(store, long_id, "bench"))
        bare = max(paths["bare_fts5"]["ms"], 1e-3)
        for p in paths.values():
            p["over_bare_fts5"] = round(p["ms"] / bare, 1)
        return {"chars": len(body), "words": len(words), "distinct": len(set(words)),
                "recall_found": long_id in [h.event.id for h in hits.hits],
                "walk_found": long_id in [e["id"] for e in walked["events"]],
                "gate": str(verdict.status), "paths": paths}
