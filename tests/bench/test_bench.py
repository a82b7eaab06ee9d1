"""`coworker bench` at 10k and 100k events: figures, printed; never a verdict on speed.

These tests check that the benchmark runs end to end and that its figures are coherent (every
unanswerable query refused, a ladder with rungs about ten apart, the whole history archived);
they print the timings for docs/benchmarks.md and never assert on them. The bench runs
in-process (`coworker(...)`); the 100k run is slow (about 40 s quiet, several minutes under
load) and has its own timeout: `./run-tests --all` or `--slow-only` runs it.
"""

from __future__ import annotations

import json

import pytest

from ..conftest import coworker


@pytest.mark.parametrize("n", [10_000, pytest.param(
    100_000, marks=[pytest.mark.slow, pytest.mark.timeout(900)])])
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
    assert fig["walk_refused"] == fig["queries"] // 5  # the unanswerable fifth, and no more
    for key in ("walk", "search", "bare_fts5"):
        assert 0 < fig[key]["p50_ms"] <= fig[key]["p95_ms"]
