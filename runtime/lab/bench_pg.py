"""`coworker bench --events N --store URL`: the bench on both backends in one run.

Owns the PostgreSQL column: a temporary home whose store is a schema of its own on the given
database (a fresh coworker id `bench_<random>`, the URL in the home's state/secrets.toml, never
config.toml), the same synthetic history imported and reflected there by real `coworker`
subprocesses, then walk, search, recall and the bare MATCH (pg_fts' bm25) timed on it as
runtime.lab.bench times SQLite's; the schema is dropped afterwards, whatever happened (never a
team's coworker: no other id is ever opened). The SQLite column is runtime.lab.bench's own run.
Figures only; it never fails on speed.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..home import Home
from ..settings import new_coworker_id
from ..synth import write_jsonl
from . import bench

SECRET = "BENCH_STORE"  # the name the bench's home reads its PostgreSQL URL under
# the figures set side by side, with the ratio of PostgreSQL's to SQLite's
COMPARED = (("import_per_s", ("insert", "import_per_s")), ("reflect_s", ("reflect_s",)),
            ("reflect_peak_rss_mb", ("reflect_peak_rss_mb",)),
            ("recall_p95_ms", ("recall", "p95_ms")), ("search_p95_ms", ("search", "p95_ms")),
            ("walk_p95_ms", ("walk", "p95_ms")), ("bare_p95_ms", ("bare_fts5", "p95_ms")),
            ("walk_p95_over_bare_p95", ("walk_p95_over_bare_p95",)),
            ("walk_refused", ("walk_refused",)))


def run(n_events: int, store_url: str, n_queries: int = 200) -> dict[str, Any]:
    """Both columns for a history of n_events: SQLite's (runtime.lab.bench.run) and
    PostgreSQL's on `store_url` (`run_postgres`), and each compared figure side by side."""
    lite = bench.run(n_events, n_queries)
    pg = run_postgres(n_events, store_url, n_queries)
    return {"events": n_events, "sqlite": lite, "postgres": pg,
            "compared": compare(lite, pg)}


def _figure(result: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = result
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def compare(lite: dict[str, Any], pg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each of COMPARED: SQLite's figure, PostgreSQL's, and PostgreSQL's over SQLite's."""
    out = {}
    for name, path in COMPARED:
        a, b = _figure(lite, path), _figure(pg, path)
        ratio = round(b / a, 2) if isinstance(a, int | float) and isinstance(b, int | float) \
            and a else None
        out[name] = {"sqlite": a, "postgres": b, "postgres_over_sqlite": ratio}
    return out


def bench_home(root: Path, store_url: str) -> Home:
    """A fresh home at `root` whose store is a new coworker's schema on `store_url`."""
    home = Home(root)
    home.init(store_url=f"secret:{SECRET}", coworker_id=new_coworker_id("bench"))
    with (home.state / "secrets.toml").open("a", encoding="utf-8") as f:
        f.write(f"\n[secrets]\n{SECRET} = {json.dumps(store_url)}\n")
    return home


def drop(home: Home) -> None:
    """Drop the bench home's schema (its stores closed)."""
    from ..store import pg_schema

    url = home.store_url()
    if url is not None:
        pg_schema.drop(url, str(home.settings().coworker.id))


def run_postgres(n_events: int, store_url: str, n_queries: int = 200) -> dict[str, Any]:
    """The bench's figures on PostgreSQL: import (the importer's own rate), reflect (time and
    peak memory), walk, search, recall and the bare MATCH, in a schema dropped afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        home = bench_home(Path(tmp) / "home", store_url)
        try:
            return _measured(home, n_events, n_queries, Path(tmp))
        finally:
            drop(home)


def _measured(home: Home, n_events: int, n_queries: int, tmp: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COWORKER_")}
    env.update(COWORKER_HOME=str(home.root), COWORKER_MODEL__PROVIDER="none")
    src = write_jsonl(tmp / "history.jsonl", n_events, start=bench.start_for(n_events))
    import_out, import_s = bench._cli(["import", str(src)], env)
    found = bench._IMPORTED.search(import_out)
    if not found or int(found[1]) != n_events:
        raise RuntimeError(f"coworker import said {import_out.strip()!r}, not that it imported "
                           f"{n_events} events")
    own = n_events / max(float(found[2]), 1e-3)
    reflect_out, reflect_s = bench._cli(["reflect", "--json"], env)
    reflected = json.loads(reflect_out)
    result: dict[str, Any] = {
        "events": n_events, "store": home.store_where(), "import_s": round(import_s, 2),
        "import_rate_per_s": round(n_events / import_s), "insert": {"import_per_s": round(own)},
        "reflect_s": round(reflect_s, 2), "reflect_peak_rss_mb": reflected["peak_rss_mb"],
        "archived": reflected["archived"], "rollups_per_level": reflected["sealed"]}
    with home.open_store(readonly=True) as store:
        result.update(bench.measure_store(store, n_queries))
    return result


def lines(result: dict[str, Any]) -> list[str]:
    """The two columns of a `run` result as lines of text."""
    out = [f"{result['events']:,} events, SQLite beside PostgreSQL "
           f"({result['postgres']['store']}, its schema dropped):",
           f"{'':>24} {'SQLite':>12} {'PostgreSQL':>12} {'PG / SQLite':>12}"]
    for name, fig in result["compared"].items():
        cells = [f"{v:>12,}" if isinstance(v, int) else f"{v:>12}" for v in
                 (fig["sqlite"], fig["postgres"], fig["postgres_over_sqlite"])]
        out.append(f"{name:>24} " + " ".join(cells))
    return out
