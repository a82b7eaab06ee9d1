"""Crash safety: reflect killed with SIGKILL at several moments, then rerun.

No event lost or duplicated, no half-sealed level, `PRAGMA integrity_check` ok, FTS in sync,
and the finished ladder equals the one an uninterrupted run builds from the same history.
Each kill lands when the database shows the work has reached a point, whatever the machine's
load. Slow (about 20 s): `./run-tests --all` or `--slow-only` runs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runtime.store import Store

from .conftest import coworker

N_EVENTS = 12_000
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


def progress(db: Path) -> tuple[int, int]:
    """(events archived, rollups sealed) as a reader beside the writer sees them."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as c:
        return (c.execute("SELECT COUNT(*) FROM events_archive").fetchone()[0],
                c.execute("SELECT COUNT(*) FROM rollups").fetchone()[0])


def kill_when(proc: subprocess.Popen, db: Path, archived: int, rollups: int,
              deadline_s: float = 240) -> None:
    """SIGKILL `proc` as soon as the database holds at least `archived` archived events and
    `rollups` rollups, or when it ends."""
    deadline = time.monotonic() + deadline_s
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(sqlite3.Error):  # e.g. the moment the WAL is checkpointed
            got = progress(db)
            if got[0] >= archived and got[1] >= rollups:
                break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(900)  # covers the subprocesses: each one is waited on with a deadline
def test_reflect_killed_at_several_points_then_rerun(tmp_path: Path, history: Path):
    ref_env = fresh_home(tmp_path / "reference", history)
    home = tmp_path / "victim"  # the same imported home, copied before any reflect
    shutil.copytree(tmp_path / "reference", home)
    env = dict(os.environ, COWORKER_HOME=str(home))
    r = coworker("reflect", env=ref_env)
    assert r.returncode == 0, r.stderr
    reference = ladder(tmp_path / "reference" / "state" / "coworker.db")
    assert len(reference) > 1000

    db = home / "state" / "coworker.db"
    # Kill points by progress, not by the clock (a loaded machine stretches the clock): just
    # after the archive move, then at fractions of the ladder's sealing.
    points = [(1, 0)] + [(1, int(len(reference) * f)) for f in (0.2, 0.5, 0.8)]
    killed_states = set()
    for archived, rollups in points:
        proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "reflect"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        kill_when(proc, db, archived, rollups)
        check_invariants(db)
        killed_states.add(progress(db))
    # the kills landed at different moments, not all before or after the work
    assert len(killed_states) >= 3, killed_states
    r = coworker("reflect", env=env)
    assert r.returncode == 0, r.stderr
    check_invariants(db)
    assert ladder(db) == reference
