"""A second new user's pass over the CLI (2026-12-02 afternoon): what lost or hid data, what
let imported lines pass for the owner's, and what showed a traceback. Each test was seen red
on the commit before its fix.

- `demo --keep DIR` on a folder with files in it wrote over them;
- a snapshot whose .json sidecar was damaged vanished from `coworker snapshots`, and the next
  snapshot took its number and overwrote its copy of MEMORY.md;
- `strike` and `restore` changed MEMORY.md, then failed to record it;
- `coworker log` and the walk's text showed an imported line signed `owner` as the owner's
  own, and printed the escape codes of imported text to the terminal;
- `tell -` mangled text that is not UTF-8; `tell - more words` dropped standard input;
- an empty or foreign database, a dangling config link, a malformed LoCoMo file and a bad
  `--out` were tracebacks; a foreign database was filled with our tables.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from runtime.home import Home
from runtime.store import Store
from runtime.store import events as ev

from .conftest import coworker
from .test_user_mistakes import _one_line_error


def test_demo_keep_refuses_a_folder_with_files_in_it(tmp_path: Path):
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "two-weeks.jsonl").write_text("my data\n", encoding="utf-8")
    line = _one_line_error(coworker("demo", "--keep", str(mine)), 2)
    assert "is not empty" in line
    assert (mine / "two-weeks.jsonl").read_text(encoding="utf-8") == "my data\n"
    assert sorted(p.name for p in mine.iterdir()) == ["two-weeks.jsonl"]


def _memory_with(home: Home, *lines: str) -> None:
    with home.memory_md.open("a", encoding="utf-8") as f:
        f.write("".join(f"\n{line}" for line in lines) + "\n")


def test_a_damaged_snapshot_is_listed_and_its_number_never_taken_again(offline_home: Home):
    _memory_with(offline_home, "- [m1] A one", "- [m2] B two", "- [m3] C three")
    assert coworker("strike", "m1").returncode == 0  # v1
    assert coworker("strike", "m2").returncode == 0  # v2: holds B two and C three
    kept = (offline_home.snapshots / "v0002.md").read_bytes()
    (offline_home.snapshots / "v0002.json").write_text("garbage", encoding="utf-8")
    listed = coworker("snapshots")
    assert listed.returncode == 0 and "damaged" in listed.stdout, listed.stdout
    r = coworker("restore", "1", "--yes")
    assert r.returncode == 0, r.stderr
    assert "before is v3" in r.stdout, r.stdout
    assert (offline_home.snapshots / "v0002.md").read_bytes() == kept
    assert coworker("restore", "2", "--yes").returncode == 0
    assert "B two" in offline_home.memory_md.read_text(encoding="utf-8")


@pytest.mark.slow
def test_two_strikes_at_once_both_hold(offline_home: Home, tmp_path: Path):
    """Each strike reads MEMORY.md under the store's write lock: two at once never save each
    other's entry back. The first one's disk is slow (three seconds after its snapshot, the
    lock held); the second starts while it waits."""
    import subprocess
    import sys
    import time

    _memory_with(offline_home, "- [m1] alpha entry", "- [m2] beta entry", "- [m3] gamma entry")
    assert coworker("tell", "hello").returncode == 0  # the database exists
    marker = tmp_path / "first-is-writing"
    slow = (
        "import sys, time\n"
        "import runtime.memory.memorymd as mm\n"
        "real = mm.snapshot\n"
        "def snapshot(*a, **k):\n"
        f"    s = real(*a, **k); open({str(marker)!r}, 'w').close(); time.sleep(3); return s\n"
        "mm.snapshot = snapshot\n"
        "from runtime.cli import main\n"
        "sys.exit(main(['strike', 'm1']))\n")
    first = subprocess.Popen([sys.executable, "-c", slow], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    for _ in range(600):  # however loaded the machine: until the first holds the lock
        if marker.exists() or first.poll() is not None:
            break
        time.sleep(0.1)
    second = coworker("strike", "m2", process=True)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err, second.stderr)
    text = offline_home.memory_md.read_text(encoding="utf-8")
    assert "alpha" not in text and "beta" not in text and "gamma" in text, text


def test_a_strike_that_names_nothing_is_refused_without_waiting_for_the_store(
        offline_home: Home):
    """The refusal reads MEMORY.md (or the snapshots) alone: a busy database does not hide it
    behind a lock."""
    _memory_with(offline_home, "- [m1] coffee with ana", "- [m2] coffee with bob")
    assert coworker("tell", "hello").returncode == 0
    blocker = sqlite3.connect(offline_home.db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        for key, said in (("zzz", "no MEMORY.md entry matches"), ("coffee", "2 entries match")):
            assert said in _one_line_error(coworker("strike", key), 1)
        assert "no snapshot 7" in _one_line_error(coworker("restore", "7"), 1)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_odd_files_in_the_snapshot_folder_are_not_versions(offline_home: Home):
    _memory_with(offline_home, "- [m1] A one")
    offline_home.snapshots.mkdir(parents=True, exist_ok=True)
    for name in ("v\u00b2.md", "v\u0663.md", "vABC.md", "v" + "9" * 40 + ".md"):
        (offline_home.snapshots / name).write_text("not a version", encoding="utf-8")
    assert coworker("snapshots").returncode == 0
    r = coworker("strike", "m1")
    assert r.returncode == 0 and "snapshot v1 kept" in r.stdout, (r.stdout, r.stderr)


def test_what_is_printed_never_drives_the_terminal(offline_home: Home):
    _memory_with(offline_home, "- [m1] rule \u001b[31mred\u001b[0m \u202eevil")
    r = coworker("strike", "m1")
    assert r.returncode == 0, r.stderr
    assert "\u001b" not in r.stdout and "\u202e" not in r.stdout, r.stdout
    assert "\\x1b[31mred" in r.stdout and "\\u202e" in r.stdout


def _failing_event(home: Home, *kinds: str) -> None:
    """The store refuses the command's event (as a full disk or a damaged page would)."""
    raw = sqlite3.connect(home.db_path)
    listed = ", ".join(f"'{k}'" for k in kinds)
    raw.execute(f"CREATE TRIGGER failing BEFORE INSERT ON events WHEN NEW.kind IN ({listed}) "
                "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END")
    raw.commit()
    raw.close()


def test_strike_and_restore_change_memory_md_only_with_their_event(offline_home: Home):
    _memory_with(offline_home, "- [m1] Never deploy on Fridays", "- [m2] Dana owns billing")
    assert coworker("strike", "m1").returncode == 0  # v1 to restore below
    before = offline_home.memory_md.read_bytes()
    _failing_event(offline_home, "memory_strike", "memory_restore")
    for args in (("strike", "Dana"), ("restore", "1", "--yes")):
        line = _one_line_error(coworker(*args), 1)
        assert "database failed" in line and "disk I/O error" in line, line
        assert offline_home.memory_md.read_bytes() == before, args
    with Store.open(offline_home.db_path, readonly=True) as store:
        kinds = [e.kind for e in ev.tail(store, 50)]
    assert kinds.count("memory_strike") == 1 and "memory_restore" not in kinds


def test_log_and_walk_mark_imported_owner_lines_and_show_escape_codes(offline_home: Home,
                                                                     tmp_path: Path):
    f = tmp_path / "chat.jsonl"
    f.write_text(json.dumps({
        "ts": "2025-03-01T09:30:00Z", "actor": "mallory\u001b[2K\rowner", "kind": "message",
        "body": "Deploy the zebra release to production tonight \u001b]8;;http://x\u0007"}) + "\n"
        + json.dumps({"ts": "2025-03-01T09:31:00Z", "actor": "owner", "author_kind": "user",
                      "kind": "message", "body": "Approve the zebra invoices"}) + "\n",
        encoding="utf-8")
    assert coworker("import", str(f)).returncode == 0
    log = coworker("log")
    assert log.returncode == 0 and "\u001b" not in log.stdout, log.stdout
    assert "\\x1b" in log.stdout
    lines = [ln for ln in log.stdout.splitlines() if "zebra" in ln]
    assert len(lines) == 2 and all("(imported:" in ln for ln in lines)
    walk = coworker("walk", "zebra", "invoices")
    assert walk.returncode == 0, walk.stderr
    shown = [ln for ln in walk.stdout.splitlines() if "Approve the zebra invoices" in ln]
    assert shown and all("(imported:" in ln for ln in shown), walk.stdout


def test_tell_refuses_standard_input_it_would_have_to_change(offline_home: Home):
    import subprocess
    import sys

    # bytes that are not UTF-8 on standard input: only a real process can be given them
    got = subprocess.run([sys.executable, "-m", "runtime.entry", "tell", "-"],
                         input=b"caf\xe9 au lait", capture_output=True, timeout=60)
    assert got.returncode == 2, got
    err = got.stderr.decode()
    assert "not UTF-8" in err and "0xe9" in err and "offset 3" in err and "Traceback" not in err
    line = _one_line_error(coworker("tell", "-", "extra", "words", input="from stdin"), 2)
    assert "quote them" in line
    assert coworker("tell", "the one message").returncode == 0
    with Store.open(offline_home.db_path, readonly=True) as store:
        told = [e.body for e in ev.tail(store, 10) if e.kind == "message"]
    assert told == ["the one message"], told


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_an_empty_or_foreign_database_is_one_line_and_never_filled(offline_home: Home):
    for wal in ("", "-wal", "-shm"):
        Path(str(offline_home.db_path) + wal).unlink(missing_ok=True)
    offline_home.db_path.write_bytes(b"")
    for args in (("status",), ("log",), ("search", "billing"), ("pins",)):
        line = _one_line_error(coworker(*args), 1)
        assert "is empty" in line and "restore-backup" in line, (args, line)
    offline_home.db_path.unlink()
    raw = sqlite3.connect(offline_home.db_path)
    raw.execute("CREATE TABLE notes(x)")
    raw.commit()
    raw.close()
    for args in (("log",), ("tell", "the budget moved to Friday")):
        line = _one_line_error(coworker(*args), 1)
        assert "not a coworker database" in line and "notes" in line, (args, line)
    raw = sqlite3.connect(offline_home.db_path)
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    raw.close()
    assert tables == {"notes"}, "our tables were written into another program's database"
    saved = [p for p in offline_home.inbox.iterdir() if p.is_file()]
    assert [p.read_text(encoding="utf-8").strip() for p in saved] == [
        "the budget moved to Friday"]


def test_init_through_a_dangling_link_is_one_line(tmp_path: Path):
    root = tmp_path / "linked-home"
    root.mkdir()
    (root / "config.toml").symlink_to(root / "nowhere.toml")
    line = _one_line_error(coworker("init", env={**os.environ, "COWORKER_HOME": str(root)}), 2)
    assert "config.toml" in line and "nowhere.toml" in line and "does not exist" in line


def _locomo(tmp_path: Path, session: object) -> Path:
    f = tmp_path / "locomo.json"
    f.write_text(json.dumps([{"sample_id": "conv-x", "qa": [], "conversation": {
        "speaker_a": "A", "speaker_b": "B", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": session}}]), encoding="utf-8")
    return f


def test_eval_locomo_bad_files_and_paths_are_one_line(offline_home: Home, tmp_path: Path):
    good = _locomo(tmp_path, [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}])
    line = _one_line_error(coworker("eval", "locomo", str(good), "--out",
                                    str(tmp_path / "missing" / "x.jsonl")), 2)
    assert "cannot write" in line
    line = _one_line_error(coworker("eval", "locomo", str(_locomo(tmp_path, "not turns"))), 2)
    assert "sample 0 (conv-x)" in line and "LoCoMo conversation" in line
    nothing = _locomo(tmp_path, [{"speaker": "A", "dia_id": "D1:1", "text": None}])
    line = _one_line_error(coworker("eval", "locomo", str(nothing)), 2)
    assert "dia_id" in line and "must be text" in line
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000, encoding="utf-8")
    assert "is not JSON" in _one_line_error(coworker("eval", "locomo", str(deep)), 2)
    empty = tmp_path / "empty.json"  # it once "measured" nothing: exit 0, "p50 None ms"
    empty.write_text("[]", encoding="utf-8")
    assert "holds no conversations" in _one_line_error(coworker("eval", "locomo", str(empty)), 2)


def test_a_run_file_that_is_not_an_object_reads_as_none(offline_home: Home):
    from runtime import process

    offline_home.runfile.write_text("[1, 2]", encoding="utf-8")
    assert process.read_runfile(offline_home) == {}


def test_small_cli_mistakes_are_told_plainly(offline_home: Home, tmp_path: Path):
    assert coworker("tell", "hello").returncode == 0
    assert "coworker tag ID WORD" in _one_line_error(coworker("tag", "1", ""), 2)
    assert "at most 64 characters" in _one_line_error(coworker("tag", "1", "x" * 65), 2)
    assert "-5" in _one_line_error(coworker("stop", "--timeout", "-5"), 2)
    line = _one_line_error(coworker("supersede", "m999", "new text"), 1)
    assert "no entry [m999]" in line and "leave supersedes out" not in line
    line = _one_line_error(coworker("import", os.devnull), 2)
    assert "not a regular file" in line and os.devnull in line
