"""The work set's history on both backends: bare bm25 (events.bare_match) and fts_search, hit@k
of its exact and paraphrase questions on SQLite (FTS5) and PostgreSQL (pg_fts), how often the
two top-10s are the same list, and how many events' terms differ from FTS5's.

    .venv/bin/python -m tests.bench.pg_fts_work

Starts a throwaway PostgreSQL server (tests/pgserver.py); a few seconds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from runtime.lab import work_set
from runtime.memory.walk import query_tokens
from runtime.store import events as ev
from runtime.store.db import Store
from runtime.store.fts import Tokenizer
from runtime.store.pg import PgStore
from tests.pgserver import database_url, server_uri

KS = (1, 3, 5, 10)


def _fill(store: Any) -> float:
    rows = [ev.Event(kind=r["kind"], body=r["body"], actor=r["actor"],
                     author_kind=r["author_kind"], meta=r["meta"], ts=r["ts"])
            for r in work_set.events()]
    t = time.perf_counter()
    ev.append_many(store, rows)
    return time.perf_counter() - t


def _keys(store: Any) -> dict[int, str]:
    return {int(r[0]): str(r[1]) for r in store.query(
        "SELECT id, json_extract(meta, '$.work') FROM events WHERE json_extract(meta, '$.work') "
        "IS NOT NULL")}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        lite = Store.open(Path(tmp) / "coworker.db")
        with psycopg.connect(server_uri(), autocommit=True) as admin:
            admin.execute(b"CREATE DATABASE work_bench STRATEGY FILE_COPY")
        pg = PgStore.open(database_url("work_bench"), "work")
        took = {"sqlite": _fill(lite), "postgres": _fill(pg)}
        print(f"events: {ev.counts(lite)['hot']}; append_many: sqlite {took['sqlite']:.2f} s, "
              f"postgres {took['postgres']:.2f} s")
        texts = {int(r[0]): f"{r[1]} {r[2]} {r[3]}" for r in lite.query(
            "SELECT id, body, kind, actor FROM events")}
        want = Tokenizer().terms(texts)
        got = {int(r[0]): r[1] for r in pg.query(
            "SELECT id, fts_tokens(body || ' ' || kind || ' ' || actor) FROM events")}
        differ = [i for i in texts if sorted(want[i]) != sorted(got[i])]
        terms = sum(len(t) for t in want.values())
        bad = sum(len(set(want[i]) ^ set(got[i])) for i in differ)
        print(f"events whose terms differ from FTS5's: {len(differ)} of {len(texts)} "
              f"({bad} distinct terms differ, of {terms} tokens)")
        for i in differ[:5]:
            print("  ", sorted(set(want[i]) - set(got[i])), "->", sorted(set(got[i]) - set(want[i])))
        keys = {"sqlite": _keys(lite), "postgres": _keys(pg)}
        for name, fn in (("bare_match", lambda s, m: ev.bare_match(s, m, 10)),
                         ("fts_search", lambda s, m: [e.id for e, _, _ in ev.fts_search(s, m, 10)])):
            _report(name, fn, lite, pg, keys)
        lite.close()
        pg.close()
        with psycopg.connect(server_uri(), autocommit=True) as admin:
            admin.execute(b"DROP DATABASE work_bench WITH (FORCE)")
    return 0


def _report(name: str, fn: Any, lite: Any, pg: Any, keys: dict[str, dict[int, str]]) -> None:
    for style in ("exact", "paraphrase"):
        hits = {b: dict.fromkeys(KS, 0) for b in keys}
        same = n = 0
        secs = dict.fromkeys(keys, 0.0)
        for fact in work_set.FACTS:
            match = ev.fts_query(query_tokens(getattr(fact, style)))
            if not match:
                continue
            n += 1
            tops = {}
            for b, store in (("sqlite", lite), ("postgres", pg)):
                t = time.perf_counter()
                tops[b] = fn(store, match)
                secs[b] += time.perf_counter() - t
                ranks = [keys[b].get(i) for i in tops[b]]
                for k in KS:
                    hits[b][k] += any(r in fact.answers for r in ranks[:k])
            same += tops["sqlite"] == tops["postgres"]
        for b in keys:
            print(f"{name} {style:10} {b:8} " + "  ".join(
                f"hit@{k} {hits[b][k] / n:.3f}" for k in KS)
                + f"  ({n} questions, {1000 * secs[b] / n:.1f} ms each)")
        print(f"{name} {style:10} same top-10 list on both: {same} of {n}")


if __name__ == "__main__":
    sys.exit(main())
