"""Batched import (issue 15): the FTS index it leaves, and what a killed import leaves.

`coworker import` writes its events a batch per INSERT (store.events.insert_rows stages them
in a TEMP table and moves them with one INSERT ... SELECT, so the unchanged events_ai trigger
fills FTS5 inside one statement) and its keys once, in key order, at the end of the file's one
transaction. These tests hold it to what per-row appends produce, token by token, and to
all-or-nothing when the process is killed mid-file: the real CLI in a real subprocess,
SIGKILLed, then run again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runtime import importer
from runtime.home import Home
from runtime.importer import import_file
from runtime.store import Store
from runtime.store import events as ev

from .conftest import REPO

BODIES = [
    "Ticket #{i}: the parser crashes on unicode input (naïve café, Zürich)",
    "#{i} scheduler: reproduced; bisected to the cron rewrite",
    "pytest tests/test_cache.py: {i} failed, 120 passed",
    "Re #{i}: Dana owns the billing fix; due 2025-03-0{d}.",
    "",  # an empty body is indexed too (kind and actor)
    "dashboard sorts names wrongly — ÉLODIE before Adam; line {i}",
]


def history(n: int) -> list[dict]:
    kinds = ["message", "note", "tool_result", "decision", "note", "message"]
    actors = ["owner", "coworker", "shell", "coworker", "coworker", "dana"]
    start = datetime(2025, 3, 1, 9, tzinfo=UTC)
    return [{"ts": (start + timedelta(minutes=3 * i)).isoformat().replace("+00:00", "Z"),
             "kind": kinds[i % 6], "actor": actors[i % 6],
             "body": BODIES[i % 6].format(i=i, d=1 + i % 9), "meta": {"n": i}}
            for i in range(n)]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def index_of(db: Path) -> dict[str, list[tuple]]:
    """Everything FTS5 holds for the events: each term's rows and positions (an fts5vocab
    'instance' table), each term's doc and hit counts, and what MATCH returns for a few
    queries."""
    with Store.open(db) as store:
        store.conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.fts_instances "
                           "USING fts5vocab(main, events_fts, instance)")
        out = {
            "instances": [tuple(r) for r in store.query(
                "SELECT term, doc, col, offset FROM temp.fts_instances "
                "ORDER BY term, doc, col, offset")],
            "vocab": [tuple(r) for r in store.query(
                "SELECT term, doc, cnt FROM events_vocab ORDER BY term")],
        }
        for q in ('"parser" AND "unicod"', '"zurich"', '"elodie" OR "dana"', '"note"',
                  '"coworker" NOT "bisect"', '"120" "pass"'):
            out[q] = [tuple(r) for r in store.query(
                "SELECT rowid, * FROM events_fts WHERE events_fts MATCH ? ORDER BY rowid", (q,))]
            assert out[q], f"query {q} matched nothing: the comparison would prove nothing"
    return out


def assert_intact(db: Path) -> None:
    with Store.open(db) as store:
        assert store.scalar("PRAGMA integrity_check") == "ok"
        # FTS5 checks its index against the content (the history view); raises when they differ
        store.execute("INSERT INTO events_fts(events_fts) VALUES ('integrity-check')")


def test_a_batched_import_indexes_exactly_what_per_row_appends_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(importer, "BATCH", 97)  # many batches, and a short last one
    path = write(tmp_path / "h.jsonl", history(1_000))

    batched = tmp_path / "batched.db"
    with Store.open(batched) as store:
        report = import_file(store, path)
    assert (report.imported, report.first_id, report.last_id) == (1_000, 1, 1_000)

    per_row = tmp_path / "per_row.db"
    now = datetime.now(UTC)
    with Store.open(per_row) as store:
        for line in path.read_text(encoding="utf-8").splitlines():
            event, _ = importer.parse(line, now=now, batch=report.batch)
            ev.append(store, event)  # one INSERT, one trigger firing, per event

    with Store.open(batched) as a, Store.open(per_row) as b:
        cols = "id, ts, kind, actor, author_kind, body, meta"
        assert [tuple(r) for r in a.query(f"SELECT {cols} FROM events ORDER BY id")] == [
            tuple(r) for r in b.query(f"SELECT {cols} FROM events ORDER BY id")]
    assert index_of(batched) == index_of(per_row)
    for db in (batched, per_row):
        assert_intact(db)


def test_append_many_writes_in_batches_with_contiguous_ids_after_live_events(tmp_path: Path):
    with Store.open(tmp_path / "c.db") as store:
        live = ev.append(store, ev.Event(kind="note", body="live before"))
        ids = ev.append_many(store, [ev.Event(kind="note", body=f"bulk note {i}")
                                     for i in range(23)], chunk=5)
        assert ids == list(range(live + 1, live + 24))
        assert [e.body for e in ev.span(store, ids[0], ids[-1])] == [
            f"bulk note {i}" for i in range(23)]
        assert ev.fts_search(store, '"bulk" AND "22"')[0][0].id == ids[-1]
        assert ev.append_many(store, []) == []
    assert_intact(tmp_path / "c.db")


def test_insert_rows_rolls_its_batch_back_when_a_row_is_refused(tmp_path: Path):
    with Store.open(tmp_path / "c.db") as store:
        good = ev.Event(kind="note", body="kept out").to_row()
        bad = good[:3] + ("robot",) + good[4:]  # the CHECK on author_kind refuses it
        with pytest.raises(Exception, match="CHECK"):
            ev.insert_rows(store, [good, bad])
        assert ev.total(store) == 0
        assert store.scalar("SELECT COUNT(*) FROM events_fts WHERE events_fts MATCH 'kept'") == 0


def import_process(home: Path, path: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COWORKER_")}
    env.update(COWORKER_HOME=str(home), COWORKER_MODEL__PROVIDER="none")
    return subprocess.Popen([sys.executable, "-m", "runtime.cli", "import", str(path)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_an_import_killed_mid_file_leaves_nothing_and_a_rerun_imports_it_once(
        offline_home: Home, tmp_path: Path):
    rows = history(20_000)
    path = write(tmp_path / "big.jsonl", rows)
    with Store.open(offline_home.db_path) as store:
        before = ev.append(store, ev.Event(kind="note", body="live work before the import"))
    wal = offline_home.db_path.with_name(offline_home.db_path.name + "-wal")
    start = wal.stat().st_size if wal.exists() else 0

    proc = import_process(offline_home.root, path)
    # Kill once the transaction has spilled about 3 MB into the WAL: a few batches written,
    # the file not done (about 10 MB at its commit).
    deadline = time.monotonic() + 120
    while (wal.stat().st_size if wal.exists() else 0) < start + 3_000_000:
        assert proc.poll() is None, "the import finished before it could be killed"
        assert time.monotonic() < deadline, "the import wrote nothing to the WAL"
        time.sleep(0.005)
    assert proc.poll() is None, "the import finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    with Store.open(offline_home.db_path) as store:
        assert ev.total(store) == 1 and ev.max_id(store) == before
        assert store.scalar("SELECT COUNT(*) FROM import_keys") == 0
    assert_intact(offline_home.db_path)

    with Store.open(offline_home.db_path) as store:
        again = import_file(store, path)
        third = import_file(store, path)
        assert (again.imported, again.already_present) == (len(rows), 0)
        assert (again.first_id, again.last_id) == (before + 1, before + len(rows))
        assert (third.imported, third.already_present) == (0, len(rows))
        assert ev.total(store) == len(rows) + 1
        assert store.scalar("SELECT COUNT(*) FROM import_keys") == len(rows)
        assert [e.body for e in ev.span(store, before + 1, before + len(rows))] == [
            r["body"] for r in rows]
    assert_intact(offline_home.db_path)


NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def general(value: str) -> str:
    """What the general path of normalize_ts writes for an offset-carrying time."""
    when = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize("value", [
    "2025-03-01T09:30:00Z", "2025-03-01T09:30:00.120Z", "2024-02-29T23:59:59.999Z",
    "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2026-06-02T12:00:00.000Z"])
def test_the_fast_timestamp_path_writes_what_the_general_one_writes(value: str):
    assert importer.normalize_ts(value, now=NOW) == general(value)
    assert importer.normalize_ts(value.replace("Z", "+00:00"), now=NOW) == general(value)


@pytest.mark.parametrize("value", ["2025-02-30T09:30:00Z", "2025-03-01T24:00:00Z",
                                   "0000-01-01T00:00:00Z", "2026-06-02T12:00:00.001Z",
                                   "2026-06-03T00:00:00Z"])
def test_the_fast_timestamp_path_refuses_what_the_general_one_refuses(value: str):
    with pytest.raises(ValueError) as fast:
        importer.normalize_ts(value, now=NOW)
    with pytest.raises(ValueError) as slow:
        importer.normalize_ts(value.replace("Z", "+00:00"), now=NOW)
    assert str(fast.value).split(" is ")[1] == str(slow.value).split(" is ")[1]
