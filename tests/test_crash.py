"""Crash safety: reflect killed with SIGKILL at several moments, then rerun.

No event lost or duplicated, no half-sealed level, `PRAGMA integrity_check` ok, FTS in sync,
and the finished ladder equals the one an uninterrupted run builds from the same history.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runtime.store import Store

from .conftest import coworker

N_EVENTS = 40_000
WORDS = ("parser scheduler cache login release docs unicode crash leak flaky build deploy "
         "review merge branch test customer invoice report backup").split()


def make_history(path: Path) -> None:
    rng = random.Random(7)
    t = datetime(2025, 1, 1, tzinfo=UTC)
    with path.open("w") as f:
        for i in range(N_EVENTS):
            t += timedelta(minutes=rng.choice([1, 2, 5, 40]))
            body = " ".join(rng.choice(WORDS) for _ in range(10)) + f" ticket {i // 50}."
            f.write(json.dumps({"ts": t.isoformat(), "kind": "note", "actor": "coworker",
                                "author_kind": "agent", "body": body}) + "\n")


def ladder(db: Path) -> list[tuple]:
    with Store.open(db) as store:
        return [tuple(r) for r in store.query(
            "SELECT level, source_range, first_event, last_event, title, terms, method "
            "FROM rollups ORDER BY level, first_event, id")]


def check_invariants(db: Path, fanout: int = 10) -> None:
    with Store.open(db) as store:
        assert store.integrity_check() == "ok"
        store.execute("INSERT INTO events_fts(events_fts, rank) VALUES('integrity-check', 1)")
        hot = store.scalar("SELECT COUNT(*) FROM events")
        archived = store.scalar("SELECT COUNT(*) FROM events_archive")
        both = store.scalar("SELECT COUNT(*) FROM events e JOIN events_archive a USING (id)")
        assert both == 0, "an event is both hot and archived"
        assert hot + archived == N_EVENTS, "events lost or duplicated"
        distinct = store.scalar("SELECT COUNT(DISTINCT id) FROM history")
        assert distinct == N_EVENTS
        # no half-sealed level: every parent has exactly `fanout` children
        bad = store.query(
            "SELECT p.id, COUNT(c.id) AS n FROM rollups p LEFT JOIN rollups c "
            "ON c.parent_id = p.id WHERE p.level > 1 GROUP BY p.id HAVING n != ?", (fanout,))
        assert bad == [], f"parents without exactly {fanout} children: {bad}"
        # level-1 spans are disjoint and in order
        spans = store.query(
            "SELECT first_event, last_event FROM rollups WHERE level = 1 ORDER BY first_event")
        for a, b in zip(spans, spans[1:], strict=False):
            assert a["last_event"] < b["first_event"], "overlapping episodes"


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("crash")
    path = folder / "history.jsonl"
    make_history(path)
    return path


def fresh_home(root: Path, history: Path) -> dict:
    root.mkdir()
    env = dict(os.environ, COWORKER_HOME=str(root))
    assert coworker("init", env=env).returncode == 0
    r = coworker("import", str(history), env=env)
    assert r.returncode == 0, r.stderr
    return env


def test_reflect_killed_at_several_points_then_rerun(tmp_path: Path, history: Path):
    ref_env = fresh_home(tmp_path / "reference", history)
    t0 = time.monotonic()
    r = coworker("reflect", env=ref_env)
    full = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    reference = ladder(tmp_path / "reference" / "state" / "coworker.db")
    assert len(reference) > 1000

    home = tmp_path / "victim"
    env = fresh_home(home, history)
    db = home / "state" / "coworker.db"
    snapshot = tmp_path / "pristine.db"
    shutil.copy(db, snapshot)
    killed_states = set()
    # from just after start-up (the archive move) to late in the sealing
    for frac in (0.08, 0.15, 0.3, 0.5, 0.7, 0.9):
        proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "reflect"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(full * frac)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        check_invariants(db)
        with Store.open(db) as store:
            killed_states.add((store.scalar("SELECT COUNT(*) FROM events_archive"),
                               store.scalar("SELECT COUNT(*) FROM rollups")))
    # the kills landed at different moments, not all before or after the work
    assert len(killed_states) >= 3, killed_states
    r = coworker("reflect", env=env)
    assert r.returncode == 0, r.stderr
    check_invariants(db)
    assert ladder(db) == reference
    with Store.open(db) as store:
        statuses = [row[0] for row in store.query(
            "SELECT status FROM ritual_runs WHERE ritual = 'reflect' ORDER BY id")]
    assert statuses[-1] == "ok"
    assert "running" in statuses  # the killed runs are visible as never finished
