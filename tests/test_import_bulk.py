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
import sqlite3
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


def children(pid: int) -> list[int]:
    """The pids of a process's children (Linux)."""
    found = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in found.read_text().split()] if found.exists() else []


def running(pid: int) -> bool:
    """Whether a process is alive: neither gone nor a zombie waiting to be reaped (Linux)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("lines", [20_000, 30_000])  # 3.1 MB parsed inline, 4.7 MB forked
@pytest.mark.slow
def test_an_import_killed_mid_file_leaves_nothing_and_a_rerun_imports_it_once(
        offline_home: Home, tmp_path: Path, lines: int, monkeypatch: pytest.MonkeyPatch):
    rows = history(lines)
    path = write(tmp_path / "big.jsonl", rows)
    assert (path.stat().st_size >= importer.PROCESS_BYTES) == (lines == 30_000)
    # as the import's own process sees it (one thread; a test worker runs threads of its own)
    with monkeypatch.context() as m:
        m.setattr("threading.active_count", lambda: 1)
        apart = importer._parse_apart(path)  # also needs Linux and a second core
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
    parsers = children(proc.pid)
    if sys.platform.startswith("linux"):
        assert len(parsers) == (1 if apart else 0)  # the forked parser, for the larger file
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    for pid in parsers:  # its parser finds the pipe closed and ends too
        while running(pid):
            assert time.monotonic() < deadline, "the parser outlived the killed import"
            time.sleep(0.01)

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


# --- the cheaper parsing (issue 15, ADR-0022 addendum)

TRICKY = [  # lines whose rows or keys test the fast parsing paths
    {"ts": "2025-03-02T09:00:00Z", "kind": "note", "actor": "dana", "body": "a NUL \x00 inside"},
    {"ts": "2025-03-02T09:01:00Z", "kind": "note", "actor": "dana", "body": "x", "id": "n\x00l"},
    {"ts": "2025-03-02T09:02:00Z", "kind": "note", "body": "six characters: \\u0000 as text"},
    {"ts": "2025-03-02T09:03:00+02:00", "kind": "message", "actor": " eve ", "author_kind": "user",
     "body": "tabs\tnewlines\n\r\x1f\x7f emoji 😀 \u2028 Zürich",
     "meta": {"z": [1, 2.5, None, True, {"deep": {"er": "ÉLODIE"}}], "a": -0.0,
              "big": 10 ** 30, "nan": float("nan"), "inf": [float("inf")]}},
    {"ts": "2025-03-02T09:04:00Z", "kind": "note", "body": "twice the same line"},
    {"ts": "2025-03-02T09:04:00Z", "kind": "note", "body": "twice the same line"},
    {"ts": "2025-03-02T09:05:00Z", "kind": "note", "body": "first of id 7", "source_id": 7},
    {"ts": "2025-03-02T09:06:00Z", "kind": "note", "body": "second of id 7", "id": "7"},
    {"ts": "2025-03-02T09:07:00Z", "kind": "note", "actor": "s3cr3t-t0ken-xyz",
     "body": "the key s3cr3t-t0ken-xyz leaked", "meta": {"k": "s3cr3t-t0ken-xyz"}},
]


def tricky_file(path: Path, n: int = 1_000) -> Path:
    """history(n) with the tricky lines in the middle (so one batch carries them and the others
    do not), written as json.dumps writes them (NaN and Infinity bare, as Python reads them)."""
    rows = history(n)
    rows[n // 2:n // 2] = TRICKY
    return write(path, rows)


@pytest.fixture(params=["inline", "process"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: the file parsed in this process, and by a forked parser process
    beside the writer (what a large file gets on Linux)."""
    monkeypatch.setattr(importer, "PARSER", request.param)
    return request.param


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many batches (BATCH = 97), and a secret registered for redaction."""
    from runtime import secrecy
    monkeypatch.setattr(importer, "BATCH", 97)
    monkeypatch.setattr(secrecy, "_SECRETS", {"s3cr3t-t0ken-xyz"})


def per_row_reference(db: Path, path: Path, batch: str) -> dict[str, int]:
    """The file appended one event at a time through Event.to_row (store.events.event_row,
    json.loads): what import must write. Returns the import keys it would record."""
    now, keys, written = datetime.now(UTC), importer.Keys(), {}
    with Store.open(db) as store:
        for line in path.read_text(encoding="utf-8").splitlines():
            event, source_id = importer.parse(line, now=now, batch=batch)
            key = keys.of(event, source_id)
            if key not in written:
                written[key] = ev.append(store, event)
    return written


@pytest.mark.usefixtures("small_batches")
def test_import_writes_what_per_row_appends_write_and_a_rerun_adds_nothing(tmp_path: Path,
                                                                          parser: str):
    path = tricky_file(tmp_path / "h.jsonl")
    db = tmp_path / "import.db"
    with Store.open(db) as store:
        report = import_file(store, path)
    assert (report.imported, report.already_present) == (1_000 + len(TRICKY) - 1, 1)
    assert report.parser == parser

    reference = tmp_path / "per_row.db"
    keys = per_row_reference(reference, path, report.batch)
    cols = "id, ts, kind, actor, author_kind, body, meta, tick_id"
    with Store.open(db) as a, Store.open(reference) as b:
        got = [tuple(r) for r in a.query(f"SELECT {cols} FROM events ORDER BY id")]
        assert got == [tuple(r) for r in b.query(f"SELECT {cols} FROM events ORDER BY id")]
        assert dict(a.query("SELECT key, event_id FROM import_keys")) == keys
        assert {r[0] for r in a.query("SELECT source FROM import_keys")} == {"h.jsonl"}
    assert any("\x00" in row[5] for row in got) and not any("s3cr3t" in str(r) for r in got)
    assert index_of(db) == index_of(reference)

    with Store.open(db) as store:
        again = import_file(store, path)
        assert (again.imported, again.already_present) == (0, 1_000 + len(TRICKY))
        assert ev.total(store) == len(got)
    assert_intact(db)


@pytest.mark.usefixtures("small_batches")
def test_a_bad_line_after_several_batches_is_one_line_error_and_nothing_is_written(
        tmp_path: Path, parser: str):
    rows: list = history(1_000)
    rows[700] = {**rows[700], "author_kind": "robot"}
    path = write(tmp_path / "bad.jsonl", rows)
    with Store.open(tmp_path / "c.db") as store:
        with pytest.raises(importer.BadLine) as bad:
            import_file(store, path)
        assert bad.value.line_no == 701 and str(bad.value).startswith("bad.jsonl line 701: ")
        assert "'author_kind'" in bad.value.what and "'robot'" in bad.value.what, bad.value.what
        assert "third_party" in bad.value.what and "--skip-bad" in str(bad.value), bad.value
        assert ev.total(store) == 0 and store.scalar("SELECT COUNT(*) FROM import_keys") == 0
        skipped = import_file(store, path, skip_bad=True)
        assert (skipped.imported, [no for no, _ in skipped.skipped]) == (999, [701])
        assert skipped.parser == parser


@pytest.mark.usefixtures("small_batches")
def test_a_read_error_after_several_batches_is_one_usage_error_and_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parser: str):
    path = write(tmp_path / "h.jsonl", history(1_000))
    real_open = Path.open

    class Failing:
        def __init__(self, f) -> None:  # noqa: ANN001
            self.f = f

        def __enter__(self):  # noqa: ANN204
            return self

        def __exit__(self, *exc) -> None:  # noqa: ANN002
            self.f.close()

        lines = 0

        def readline(self, size: int = -1) -> bytes:  # 600 lines (several batches), then
            if self.lines == 600:                      # the disk fails
                raise OSError(5, "Input/output error")
            self.lines += 1
            return self.f.readline(size)

    def opened(self: Path, *a, **k):  # noqa: ANN002, ANN003, ANN202
        f = real_open(self, *a, **k)
        return Failing(f) if self == path else f
    monkeypatch.setattr(Path, "open", opened)
    with Store.open(tmp_path / "c.db") as store:
        with pytest.raises(importer.UsageError) as e:
            import_file(store, path)
        assert str(path) in str(e.value) and "Input/output error" in str(e.value), e.value
        assert ev.total(store) == 0 and store.scalar("SELECT COUNT(*) FROM import_keys") == 0


@pytest.mark.usefixtures("small_batches")
def test_skipped_lines_in_many_batches_are_all_reported(tmp_path: Path, parser: str):
    rows: list = history(1_000)
    for i in range(50, 1_000, 100):  # one bad line in every second or third batch of 97
        rows[i] = {**rows[i], "kind": ""}
    path = write(tmp_path / "bad.jsonl", rows)
    with Store.open(tmp_path / "c.db") as store:
        report = import_file(store, path, skip_bad=True)
        assert report.parser == parser
        assert [no for no, _ in report.skipped] == list(range(51, 1_001, 100))
        assert (report.imported, ev.total(store)) == (990, 990)


@pytest.mark.usefixtures("small_batches")
def test_a_writer_that_fails_mid_file_stops_its_parser_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import multiprocessing
    monkeypatch.setattr(importer, "PARSER", "process")
    path = write(tmp_path / "h.jsonl", history(1_000))
    real = importer._Batches.write
    written = []

    def fails_at_third(self, batch):  # noqa: ANN001, ANN202
        written.append(1)
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        return real(self, batch)
    monkeypatch.setattr(importer._Batches, "write", fails_at_third)
    with Store.open(tmp_path / "c.db") as store:
        with pytest.raises(OSError, match="No space") as e:
            import_file(store, path)
        # the exception (and with it the import's frames) still held: the parser is gone anyway
        assert e.value is not None and multiprocessing.active_children() == []
        assert ev.total(store) == 0 and store.scalar("SELECT COUNT(*) FROM import_keys") == 0


@pytest.mark.usefixtures("small_batches")
def test_a_parser_process_that_dies_mid_file_leaves_nothing_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(importer, "PARSER", "process")
    path = write(tmp_path / "h.jsonl", history(1_000))
    real = importer._raw_row
    made = []

    def dies_at_600(*fields):  # noqa: ANN002, ANN202 - runs in the forked parser only
        made.append(1)
        if len(made) == 600:
            os._exit(3)
        return real(*fields)
    monkeypatch.setattr(importer, "_raw_row", dies_at_600)
    with Store.open(tmp_path / "c.db") as store:
        with pytest.raises(importer.ParserStopped) as e:
            import_file(store, path)
        assert "exit code 3" in str(e.value) and "h.jsonl" in str(e.value), e.value
        assert "nothing was imported" in str(e.value), e.value
        assert ev.total(store) == 0 and store.scalar("SELECT COUNT(*) FROM import_keys") == 0
        assert made == []  # this process parsed nothing itself
    assert_intact(tmp_path / "c.db")


@pytest.mark.parametrize("total", [0, 1, 2, 97, 4_095, 4_096, 4_097, 8_192, 12_345])
def test_statement_sizes_cover_every_row_with_few_distinct_sizes(total: int):
    from runtime.store.db import _chunks
    for per in (1, 2, 3, 4_096, 4_680):
        sizes = _chunks(total, per)
        assert sum(sizes) == total and all(0 < n <= per for n in sizes)
        assert {n for n in sizes if n != per} <= {1 << k for k in range(13)}


def test_insert_values_splits_at_the_variable_limit_and_refuses_a_ragged_row(tmp_path: Path):
    with Store.open(tmp_path / "c.db") as store:
        store.conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 20)  # 2 rows a statement
        rows = [ev.Event(kind="note", body=f"row {i}").to_row() for i in range(5)]
        with pytest.raises(ValueError, match="7 values"):
            ev.insert_rows(store, rows[:2] + [rows[2][:6]] + rows[3:])
        assert ev.total(store) == 0
        statements = []
        store.conn.set_trace_callback(statements.append)
        assert ev.insert_rows(store, rows) == (1, 5)
        store.conn.set_trace_callback(None)
        # each statement is traced again at each trigger firing: count distinct texts
        assert len({s for s in statements if s.startswith("INSERT INTO events(")}) == 3
        assert [e.body for e in ev.span(store, 1, 5)] == [f"row {i}" for i in range(5)]
        assert store.scalar("SELECT COUNT(*) FROM events_fts WHERE events_fts MATCH 'row'") == 5


def test_line_keys_are_the_ones_earlier_versions_wrote():
    """A rerun after an upgrade must find the keys an older importer wrote."""
    line = '{"ts": "2025-03-01T09:30:00+01:00", "kind": "note", "actor": "dana", "body": "naïve café"}'
    keys = importer.Keys()
    got = [keys.of(*importer.parse(t)) for t in (
        line, line, '{"ts": "2025-03-01T08:30:00Z", "kind": "note", "body": "b", "id": 42}')]
    digest = "6a2d3d2ae28e64dae7227a2bde4d2f74a53e13702ff9b94d023dadd023e27a13"
    assert got == [f"sha256:{digest}#1", f"sha256:{digest}#2", "id:42"]


@pytest.mark.parametrize("text", [
    '{"a": 1}', ' \t{"a": [1, 2.5, null, true]}\r\n', '{"a": 1} x', '{"a": 1}{"b": 2}', '[1]',
    '7', '"s"', '', ' ', '\x0c{"a": 1}', '{"a": 1}\x0b', '{"a": NaN, "b": -Infinity}',
    '{"a": 1' + '0' * 5000 + '}', '[' * 100_000 + ']' * 100_000, '{"a": "\\ud800"}',
    '{"a": "unterminated}', '{"a": 1,}', '{"é": "\\u00e9\\n"}', '\ufeff{"a": 1}'])
def test_the_scanner_path_reads_what_json_loads_reads(text: str):
    def read(f):  # noqa: ANN001, ANN202 - repr, so that NaN reads equal to NaN
        try:
            return repr(f(text))
        except ValueError as e:
            return f"error: {e}"
    assert read(importer._json) == read(importer._loads)


@pytest.mark.parametrize("meta", [
    {}, {"ticket": 101, "imported": True, "import_batch": "abc"}, {"é": "日本\u2028", "a": -0.0},
    {"z": {"y": [1, {"x": None}]}, "b": False}, {"nan": float("nan"), "inf": [float("-inf")]},
    {"big": 10 ** 40, "f": 1e-300}, {"secret": "s3cr3t-t0ken-xyz and more"}])
def test_a_row_is_what_event_row_writes(meta: dict, monkeypatch: pytest.MonkeyPatch):
    from runtime import secrecy
    monkeypatch.setattr(secrecy, "_SECRETS", {"s3cr3t-t0ken-xyz"})
    args = ("2025-03-01T09:30:00.000Z", "note", "s3cr3t-t0ken-xyz", "user", "body s3cr3t-t0ken-xyz")
    assert importer._row(*args, meta) == ev.event_row(*args, meta)
