"""`coworker bench`: a synthetic history in a temporary home, measured.

Owns building the history (runtime.synth), importing and reflecting it as real subprocesses of
the `coworker` command (so reflect's peak memory is its own), and timing each path beside the
floor it is judged against: walk and lexical search (its first page, and the page after it
through the cursor) beside one bare FTS5 `MATCH` of the same words on the same database; the
import rate beside two bare insert rates of the same rows in scratch databases of the same
schema (per-row INSERTs with the FTS trigger, and a bulk load: rows first, then the FTS index
filled in one pass; the store's `lab_queries` runs those loads and counts a walk's
statements). It reports figures; it never fails on speed, and it touches no home but its own
temporary one.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import importer
from ..memory.recall import recall
from ..memory.search import search
from ..memory.walk import query_tokens, walk
from ..store import Store, lab_queries
from ..store import events as ev
from ..synth import COMPONENTS, PEOPLE, SYMPTOMS, write_jsonl
from ..synth import events as synth_events
from .figures import pct

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


def _stats(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs), 3), "p95_ms": round(pct(xs, 0.95), 3)}


def measure(db: Path, n_queries: int = 200) -> dict[str, Any]:
    """Walk, search and bare FTS5 latency on an existing database (read-only)."""
    with Store.open(db, readonly=True) as store:
        return measure_store(store, n_queries)


def measure_store(store: Any, n_queries: int = 200) -> dict[str, Any]:
    """`measure` on an open store, of either backend (runtime.lab.bench_pg: PostgreSQL's)."""
    qs = queries(n_queries)
    walked = _walk_figures(store, qs)
    searched = _search_figures(store, qs)
    # as the loop calls it: a scorer of its own per call (memory.docfreq keeps the counts)
    recall_ms, _ = _time(lambda q: recall(store, q, k=3), qs)
    bare_ms, _ = _time(lambda q: _bare(store, q), qs)
    out = {
        "queries": len(qs), **walked, **searched,
        "recall": _stats(recall_ms),
        "bare_fts5": _stats(bare_ms),
    }
    out["walk_p95_over_bare_p95"] = round(out["walk"]["p95_ms"] / max(out["bare_fts5"]["p95_ms"],
                                                                        1e-6), 2)
    return out


def _bare(store: Store, q: str) -> list[int]:
    """One bare FTS5 `MATCH` of the query's words: the floor walk and search are judged by."""
    match = ev.fts_query(query_tokens(q))
    return ev.bare_match(store, match, 10) if match else []


def _walk_figures(store: Store, qs: list[str]) -> dict[str, Any]:
    """The walk's latency, refusals, statements a walk and events returned, for `qs`."""
    walk_ms, walks = _time(lambda q: walk(store, q), qs)
    with lab_queries.counting(store) as statements:
        for q in qs:
            walk(store, q)
    answerable = [w for i, w in enumerate(walks) if i % 5 != 4]  # see `queries`
    return {
        "walk": _stats(walk_ms),
        "walk_refused": sum(1 for w in walks if w["refused"]),
        "walk_refused_unanswerable": sum(1 for i, w in enumerate(walks)
                                         if i % 5 == 4 and w["refused"]),
        # answerable-looking queries refused because the words they match are the less
        # telling half ("dashboard logs" where no episode holds both and "logs" is the rarer
        # word)
        "walk_refused_on_weight": sum(1 for w in answerable
                                      if w.get("reason_code") == "low_weight"),
        # our own queries; FTS5's internal segment look-ups aside
        "walk_queries_per_walk": round(statements.count / len(qs), 1),
        "walk_events_returned_mean": round(statistics.mean(len(w["events"]) for w in walks), 1),
    }


def _search_figures(store: Store, qs: list[str]) -> dict[str, Any]:
    """Search's first page and the page after it through the cursor, for `qs`."""
    search_ms, firsts = _time(lambda q: search(store, q, 10), qs)
    cursors = {q: f.next_cursor for q, f in zip(qs, firsts, strict=True) if f.next_cursor}
    next_ms, _ = _time(lambda q: search(store, q, 10, after=cursors[q]), list(cursors))
    return {"search": _stats(search_ms),
            "search_next_page": _stats(next_ms) if next_ms else None}


CHUNK = 50_000  # rows made ready (untimed) between timed executemany calls


def _rows(n: int, start: datetime) -> Iterator[list[tuple]]:
    """The synthetic history as events rows, as import writes them, CHUNK at a time."""
    chunk = []
    for e in synth_events(n, start=start):
        meta = {**e["meta"], "imported": True, "import_batch": "bench"}
        chunk.append(ev.event_row(e["ts"], e["kind"], e["actor"], e["author_kind"], e["body"],
                                  meta))
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def bare_insert_rates(n: int, start: datetime, scratch: Path,
                      modes: tuple[str, ...] = ("per_row", "bulk")) -> dict[str, float]:
    """The two floors import is judged against, in events/s, each in a fresh scratch database
    of the same schema, one transaction each, timing only the store's engine (without making
    the rows ready): per_row, every row its own INSERT (the FTS trigger fed a row a
    statement), and bulk, the rows first and the FTS index filled in one pass
    (`store.lab_queries.timed_load`)."""
    return {mode: n / lab_queries.timed_load(scratch / f"bare-{mode}.db", _rows(n, start),
                                             mode == "bulk")
            for mode in modes}


def start_for(n_events: int) -> datetime:
    """Where the synthetic history starts: 1990, or early enough that all of it lies in the
    past (about 26,000 events a year of working hours), so every event is past
    archive_after_days and none is a timestamp import refuses as in the future."""
    year = min(1990, 2020 - n_events // 25_000)
    return datetime(max(1, year), 1, 1, 9, tzinfo=UTC)


_IMPORTED = re.compile(r"imported (\d+) events.* in ([0-9.]+) s")


def run(n_events: int, n_queries: int = 200, keep: Path | None = None,
        semantic: bool = False, model: str = "all-minilm") -> dict[str, Any]:
    """Build, import, reflect and measure a history of n_events in a temporary home; with
    `semantic`, the semantic channel's cost too, with the packaged local `model`
    (runtime.bench_semantic)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = keep or Path(tmp) / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, COWORKER_HOME=str(home), COWORKER_MODEL__PROVIDER="none")
        for k in [k for k in env if k.startswith("COWORKER_") and k not in (
                "COWORKER_HOME", "COWORKER_MODEL__PROVIDER")]:
            env.pop(k)
        # An old start: the whole history is past archive_after_days, so the archive move is
        # measured at its largest and every walk resolves spans in the archive.
        start = start_for(n_events)
        src = write_jsonl(Path(tmp) / "history.jsonl", n_events, start=start)
        _cli(["init"], env)
        bulk_before = bare_insert_rates(n_events, start, Path(tmp), ("bulk",))["bulk"]
        # the rule the import command applies to this file: parsed beside the writer or not
        parser = "process" if importer._parse_apart(src) else "inline"
        import_out, import_s = _cli(["import", str(src)], env)
        result: dict[str, Any] = {"events": n_events, "import_s": round(import_s, 2),
                                  "import_rate_per_s": round(n_events / import_s)}
        result["insert"] = insert_figures(n_events, import_out, start, Path(tmp), bulk_before)
        result["insert"]["parser"] = parser
        reflect_out, reflect_s = _cli(["reflect", "--json"], env)
        reflected = json.loads(reflect_out)
        db = home / "state" / "coworker.db"
        result.update({
            "reflect_s": round(reflect_s, 2),
            "reflect_peak_rss_mb": reflected["peak_rss_mb"],
            "archived": reflected["archived"],
            "rollups_per_level": reflected["sealed"],
            "db_mb": round(sum(p.stat().st_size for p in db.parent.glob("coworker.db*"))
                           / 2**20, 1),
        })
        result.update(measure(db, n_queries))
        if semantic:
            from .bench_semantic import measure as semantic_cost

            result["semantic"] = semantic_cost(db, queries(n_queries), model=model)
        return result


def insert_figures(n_events: int, import_out: str, start: datetime, scratch: Path,
                   bulk_before: float) -> dict[str, Any]:
    """The import's own rate (as `coworker import` reports it: file opened to commit, without
    the interpreter's start) beside the two bare insert rates of the same rows. The bulk floor
    is the better of a load just before the import (`bulk_before`) and one just after, so a
    busy moment on the machine flatters no ratio."""
    found = _IMPORTED.search(import_out)
    if not found or int(found[1]) != n_events:
        raise RuntimeError(f"coworker import said {import_out.strip()!r}, not that it imported "
                           f"{n_events} events")
    own = n_events / max(float(found[2]), 1e-3)
    bare = bare_insert_rates(n_events, start, scratch)
    bulk = max(bare["bulk"], bulk_before)
    return {"import_per_s": round(own), "bare_per_row_per_s": round(bare["per_row"]),
            "bare_bulk_per_s": round(bulk),
            "import_over_bulk": round(own / bulk, 2),
            "import_over_per_row": round(own / bare["per_row"], 2)}


def insert_line(result: dict[str, Any]) -> str:
    """The insert figures of a `run` result as one line of text."""
    r = result["insert"]
    return (f"   insert: import {r['import_per_s']:,}/s (its own time, as it reports it); bare "
            f"per-row {r['bare_per_row_per_s']:,}"
            f"/s, bare bulk {r['bare_bulk_per_s']:,}/s; import / bulk = {r['import_over_bulk']}"
            f", import / per-row = {r['import_over_per_row']}"
            + (f" (parsed {'beside the writer' if r['parser'] == 'process' else 'inline'})"
               if "parser" in r else ""))
