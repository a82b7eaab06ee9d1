"""Import and reflect at scale: import rate, reflect time and peak memory, rollups per level.

Reports figures; never fails on time. Usage (from the repository root):

    .venv/bin/python -m tests.bench.reflect_bench --events 100000 [--events 1000000]

Each size runs in a fresh temporary home, as real subprocesses of the `coworker` command, so
the peak memory is reflect's own process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from runtime.synth import write_jsonl


def run(args: list[str], env: dict) -> tuple[subprocess.CompletedProcess, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "runtime.cli", *args], env=env,
                       capture_output=True, text=True)
    seconds = time.monotonic() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if r.returncode != 0:
        raise SystemExit(f"coworker {' '.join(args)} failed: {r.stderr}")
    return r, seconds, max(peak, before) / 1024


def bench(n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        home = Path(d) / "home"
        home.mkdir()
        env = dict(os.environ, COWORKER_HOME=str(home), COWORKER_MODEL__PROVIDER="none")
        # An old start, so the whole history is past archive_after_days: the archive move is
        # measured at its largest.
        src = write_jsonl(Path(d) / "history.jsonl", n, start=datetime(1990, 1, 1, 9, tzinfo=UTC))
        run(["init"], env)
        _, import_s, _ = run(["import", str(src)], env)
        r, reflect_s, _ = run(["reflect", "--json"], env)
        stats = json.loads(r.stdout)
        r2, rerun_s, _ = run(["reflect", "--json"], env)
        db_mb = sum(p.stat().st_size for p in (home / "state").glob("coworker.db*")) / 2**20
        return {
            "events": n,
            "import_s": round(import_s, 2),
            "import_rate_per_s": round(n / import_s),
            "reflect_s": round(reflect_s, 2),
            "reflect_inner_s": stats["seconds"],
            "reflect_peak_rss_mb": stats["peak_rss_mb"],
            "archived": stats["archived"],
            "rollups_per_level": stats["sealed"],
            "rerun_s": round(rerun_s, 2),
            "rerun_sealed": json.loads(r2.stdout)["sealed"],
            "db_mb": round(db_mb, 1),
        }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, action="append", help="history size (repeatable)")
    a = p.parse_args()
    for n in a.events or [100_000]:
        print(json.dumps(bench(n)), flush=True)


if __name__ == "__main__":
    main()
