"""`coworker bench`: a synthetic history in a temporary home, measured.

Owns building the history (runtime.synth), importing and reflecting it as real subprocesses of
the `coworker` command (so reflect's peak memory is its own), and timing walk and lexical
search on the result beside the floor they are judged against: one bare FTS5 `MATCH` of the
same words on the same database. It reports figures; it never fails on speed.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .memory.cards import Distinctive
from .memory.recall import recall
from .memory.search import search
from .memory.walk import query_tokens, walk
from .store import Store
from .store import events as ev
from .synth import COMPONENTS, PEOPLE, SYMPTOMS, write_jsonl

UNKNOWN = ["kubernetes", "terraform", "helm", "quarterly", "offsite", "kayak", "visa", "plumber"]


def queries(n: int, seed: int = 3) -> list[str]:
    """Deterministic queries in the synthetic history's vocabulary, one in five unanswerable."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 5 == 4:
            out.append(" ".join(rng.sample(UNKNOWN, 2)))
        elif i % 5 == 3:
            out.append(f"who owns the {rng.choice(COMPONENTS)} fix {rng.choice(PEOPLE)}")
        else:
            words = rng.choice(SYMPTOMS).split()
            out.append(f"{rng.choice(COMPONENTS)} {' '.join(rng.sample(words, min(2, len(words))))}")
    return out


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def _time(fn: Callable[[str], Any], qs: list[str]) -> tuple[list[float], list[Any]]:
    for q in qs[:10]:  # warm the page cache
        fn(q)
    ms, results = [], []
    for q in qs:
        t0 = time.perf_counter()
        results.append(fn(q))
        ms.append((time.perf_counter() - t0) * 1000)
    return ms, results


def _cli(args: list[str], env: dict[str, str]) -> tuple[str, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "runtime.cli", *args], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"coworker {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout, time.monotonic() - t0


def measure(db: Path, n_queries: int = 200) -> dict[str, Any]:
    """Walk, search and bare FTS5 latency on an existing database (read-only)."""
    qs = queries(n_queries)
    with Store.open(db, readonly=True) as store:
        statements: list[str] = []

        def walked(q: str) -> dict:
            return walk(store, q)

        walk_ms, walks = _time(walked, qs)
        store.conn.set_trace_callback(statements.append)
        for q in qs:
            walk(store, q)
        store.conn.set_trace_callback(None)
        search_ms, _ = _time(lambda q: search(store, q, 10), qs)
        scorer = Distinctive(store)
        recall_ms, _ = _time(lambda q: recall(store, q, k=3, scorer=scorer), qs)

        def bare(q: str) -> list:
            match = ev.fts_query(query_tokens(q))
            return ev.bare_match(store, match, 10) if match else []

        bare_ms, _ = _time(bare, qs)
    refused = sum(1 for w in walks if w["refused"])

    def stats(xs: list[float]) -> dict[str, float]:
        return {"p50_ms": round(statistics.median(xs), 3), "p95_ms": round(_pct(xs, 0.95), 3)}

    out = {
        "queries": len(qs),
        "walk": stats(walk_ms),
        "walk_refused": refused,
        # our own queries; FTS5's internal segment look-ups (traced with a "--" prefix) aside
        "walk_queries_per_walk": round(
            sum(1 for x in statements if x.strip() and not x.startswith("--")) / len(qs), 1),
        "walk_events_returned_mean": round(statistics.mean(len(w["events"]) for w in walks), 1),
        "search": stats(search_ms),
        "recall": stats(recall_ms),
        "bare_fts5": stats(bare_ms),
    }
    out["walk_p95_over_bare_p95"] = round(out["walk"]["p95_ms"] / max(out["bare_fts5"]["p95_ms"],
                                                                        1e-6), 2)
    return out


def run(n_events: int, n_queries: int = 200, keep: Path | None = None) -> dict[str, Any]:
    """Build, import, reflect and measure a history of n_events in a temporary home."""
    with tempfile.TemporaryDirectory() as tmp:
        home = keep or Path(tmp) / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, COWORKER_HOME=str(home), COWORKER_MODEL__PROVIDER="none")
        for k in [k for k in env if k.startswith("COWORKER_") and k not in (
                "COWORKER_HOME", "COWORKER_MODEL__PROVIDER")]:
            env.pop(k)
        # An old start: the whole history is past archive_after_days, so the archive move is
        # measured at its largest and every walk resolves spans in the archive.
        src = write_jsonl(Path(tmp) / "history.jsonl", n_events,
                          start=datetime(1990, 1, 1, 9, tzinfo=UTC))
        _cli(["init"], env)
        _, import_s = _cli(["import", str(src)], env)
        reflect_out, reflect_s = _cli(["reflect", "--json"], env)
        reflected = json.loads(reflect_out)
        db = home / "state" / "coworker.db"
        result = {
            "events": n_events,
            "import_s": round(import_s, 2),
            "import_rate_per_s": round(n_events / import_s),
            "reflect_s": round(reflect_s, 2),
            "reflect_peak_rss_mb": reflected["peak_rss_mb"],
            "archived": reflected["archived"],
            "rollups_per_level": reflected["sealed"],
            "db_mb": round(sum(p.stat().st_size for p in db.parent.glob("coworker.db*"))
                           / 2**20, 1),
        }
        result.update(measure(db, n_queries))
        return result
