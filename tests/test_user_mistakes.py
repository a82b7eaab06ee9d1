"""A user's mistakes found by following the README as a new user (2026-12-02): each one a
one-line error with what to do, a non-zero exit, and nothing lost.

- a home where a file stands (COWORKER_HOME names a file, or state/ is a file): was a
  FileExistsError traceback;
- two lines of one import file with the same id and different texts: the second is not
  imported (an id names one message; the first line with it is kept), and the summary now
  says why;
- `coworker tell` on a damaged database: the message was lost, and the error pointed at
  MEMORY.md's snapshots instead of `restore-backup`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from runtime.home import Home
from runtime.store import Store
from runtime.store import events as ev

from .conftest import coworker


def _one_line_error(r, code: int) -> str:  # noqa: ANN001 - a CompletedProcess
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_a_home_where_a_file_stands_is_a_one_line_error(tmp_path: Path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine", encoding="utf-8")
    line = _one_line_error(coworker("init", env={**os.environ, "COWORKER_HOME": str(a_file)}), 2)
    assert str(a_file) in line and "not a folder" in line and "COWORKER_HOME" in line
    assert a_file.read_text(encoding="utf-8") == "mine"
    home = tmp_path / "another-home"
    home.mkdir()
    (home / "state").write_text("also mine", encoding="utf-8")
    env = {**os.environ, "COWORKER_HOME": str(home)}
    for args in (("init",), ("tell", "hello")):
        line = _one_line_error(coworker(*args, env=env), 2)
        assert str(home / "state") in line and "not a folder" in line
    assert (home / "state").read_text(encoding="utf-8") == "also mine"


def _line(i: str, minute: int, body: str) -> str:
    return json.dumps({"id": i, "ts": f"2025-01-01T10:{minute:02d}:00Z", "actor": "dana",
                       "kind": "message", "body": body})


def test_a_repeated_id_says_why_its_line_was_not_imported(offline_home: Home, tmp_path: Path):
    f = tmp_path / "chat.jsonl"
    f.write_text("\n".join([_line("slack:A", 0, "one"), _line("slack:A", 2, "three")]) + "\n",
                 encoding="utf-8")
    r = coworker("import", str(f))
    assert r.returncode == 0, r.stderr
    assert "1 already present" in r.stdout and "an earlier line" in r.stdout
    with Store.open(offline_home.db_path, readonly=True) as store:
        assert [e.body for e in ev.tail(store, 10, by_id=True)] == ["one"]


def test_tell_on_a_damaged_database_keeps_the_message_in_the_inbox(offline_home: Home):
    assert coworker("tell", "a first message").returncode == 0
    with offline_home.db_path.open("r+b") as db:
        db.write(b"this is not a database, it was overwritten " * 40)
    for wal in ("-wal", "-shm"):
        Path(str(offline_home.db_path) + wal).unlink(missing_ok=True)
    line = _one_line_error(coworker("tell", "the budget review moved to Friday"), 1)
    assert "is damaged" in line and "restore-backup" in line and "snapshot" not in line
    saved = [p for p in offline_home.inbox.iterdir() if p.is_file()]
    assert len(saved) == 1 and str(saved[0]) in line
    assert saved[0].read_text(encoding="utf-8").strip() == "the budget review moved to Friday"


def test_coworker_alone_prints_its_help(offline_home: Home):
    for args in ((), ("eval",)):
        r = coworker(*args)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert r.stdout.startswith(f"Usage: coworker {' '.join(args)}".rstrip() + " [OPTIONS]")
        assert "; see `" not in r.stdout


def test_a_message_that_begins_with_a_dash_is_told_how(offline_home: Home):
    line = _one_line_error(coworker("tell", "-5 degrees in the server room"), 2)
    assert "coworker tell -- -5" in line
    assert coworker("tell", "--", "-5 degrees in the server room").returncode == 0
    line = _one_line_error(coworker("tell", "-x marks the spot"), 2)
    assert "coworker tell -- -x" in line
    assert "goes after --" not in _one_line_error(coworker("log", "-x"), 2)  # log takes no text


def test_an_empty_search_is_a_usage_error(offline_home: Home):
    for query in ("", "   "):
        line = _one_line_error(coworker("search", query), 2)
        assert "nothing to search for" in line


def test_the_map_says_where_imported_decisions_are(offline_home: Home, tmp_path: Path):
    """The demo's history holds 48 `decision` events and its map said "No decisions recorded
    yet": the map lists what the `decide` tool recorded, and now says so."""
    from runtime.memory import memmap

    f = tmp_path / "old.jsonl"
    f.write_text(json.dumps({"ts": "2025-03-01T09:30:00Z", "actor": "dana", "kind": "decision",
                             "body": "We ship the parser fix on Monday"}) + "\n",
                 encoding="utf-8")
    assert coworker("import", str(f)).returncode == 0
    with Store.open(offline_home.db_path) as store:
        memmap.write(store, offline_home.memory_map, "coworker")
    text = offline_home.memory_map.read_text(encoding="utf-8")
    assert "No decisions recorded yet" in text and "`decide`" in text
    assert "search and the walk" in text


def test_a_struck_id_stays_retired_after_its_event_is_archived(offline_home: Home):
    """Struck ids retire (a new entry never takes one), also once the strike's event has moved
    to the archive, as every old event does."""
    from runtime.store import archive
    from runtime.store import promotions as pr

    with Store.open(offline_home.db_path) as store:
        ev.append(store, ev.Event(kind="memory_strike", body="struck [m7] old rule",
                                  actor="owner", author_kind="user", meta={"entry_id": "m7"}))
        assert "m7" in pr.entry_ids_ever_used(store)
        assert archive.move_older_than(store, "9999-01-01T00:00:00+00:00") >= 1
        assert ev.counts(store)["hot"] == 0
        assert "m7" in pr.entry_ids_ever_used(store)


def test_a_config_saved_with_a_byte_order_mark_loads(offline_home: Home):
    """Windows Notepad saves UTF-8 with a byte-order mark; tomllib calls it "Invalid
    statement (at line 1, column 1)", which names neither the mark nor the fix."""
    from runtime.settings import load

    text = offline_home.config_path.read_text(encoding="utf-8")
    offline_home.config_path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert load(offline_home.config_path).coworker.name
    r = coworker("status")
    assert "Traceback" not in r.stderr and "not valid TOML" not in r.stderr, r.stderr


def test_an_option_missing_its_value_points_at_its_own_help(offline_home: Home):
    line = _one_line_error(coworker("promotions", "reject", "1", "--why"), 2)
    assert "requires an argument" in line and "`coworker promotions --help`" in line


def test_rituals_shows_its_times_and_figures_whole(offline_home: Home):
    assert coworker("reflect").returncode == 0
    shown = coworker("rituals", env={**os.environ, "COLUMNS": "80"}).stdout
    assert "…" not in shown and "{" not in shown, shown
    assert "sealed" in shown and " s" in shown


def test_a_message_over_the_inbox_limit_is_refused_before_anything_is_saved(offline_home: Home):
    """`tell` saves a message in the inbox when the database is busy; the inbox sets aside a
    file over 4 MiB, so `tell` refuses one up front instead of promising to deliver it."""
    from runtime.loop.inbox import MAX_BYTES

    # exactly the limit is refused too: the inbox file `tell` falls back to adds a line break
    line = _one_line_error(coworker("tell", "-", input="x" * MAX_BYTES), 2)
    assert "4 MiB" in line and "over" in line
    assert not [p for p in offline_home.inbox.iterdir() if p.is_file()]
    assert coworker("tell", "-", input="x" * 1000).returncode == 0
