"""`coworker backup` and `restore-backup`: a consistent copy taken while a real loop runs, and
brought back into the stopped home with nothing lost.

The loop is a real detached process (offline: it records what it is told and takes no model
turns); messages are told with the real `tell` command in process, and one thread keeps telling
while the backup is taken, so the copy is taken under concurrent writes.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import backup, cli
from runtime.errors import CoworkerError, UsageError
from runtime.home import Home
from runtime.memory import memorymd
from runtime.store import Store, inputs, pins
from runtime.store import events as ev

from .conftest import coworker, tell, write_config


def told(capsys: pytest.CaptureFixture[str], body: str) -> int:
    """`coworker tell BODY` in process; the event id it acknowledged."""
    capsys.readouterr()
    assert cli.main(["tell", body]) == 0
    out = capsys.readouterr().out
    m = re.search(r"recorded as event (\d+)", out)
    assert m, out
    return int(m.group(1))


def messages(db: Path) -> dict[int, str]:
    with Store.open(db, migrate=False) as store:
        return {int(r["id"]): r["body"] for r in store.query(
            "SELECT id, body FROM events WHERE kind = 'message' UNION ALL "
            "SELECT id, body FROM events_archive WHERE kind = 'message'")}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class Teller(threading.Thread):
    """Tells 'bg N' messages one after another until stopped; `acked` in commit order."""

    def __init__(self, home: Home) -> None:
        super().__init__(daemon=True)
        self.home = home
        self.acked: list[str] = []
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.halt.is_set() and n < 500:
                tell(self.home, f"bg {n}")
                self.acked.append(f"bg {n}")
                n += 1
                time.sleep(0.002)
        except BaseException as e:  # surfaced by the test
            self.error = e


@pytest.fixture
def loose_umask():
    """take() and restore() must make private files whatever the umask of their caller."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_a_backup_taken_while_the_loop_runs_restores_what_was_told_before_it(
        offline_home: Home, tmp_path: Path, capsys, loose_umask):
    home = offline_home
    dest = tmp_path / "backups" / "monday"
    r = coworker("start")
    assert r.returncode == 0, r.stderr
    try:
        before = {told(capsys, f"before the backup {i}"): f"before the backup {i}"
                  for i in range(6)}
        assert cli.main(["pin", "Never deploy on Fridays"]) == 0
        home.memory_md.write_text(home.memory_md.read_text(encoding="utf-8")
                                  + "- [m1] Dana owns the parser.\n", encoding="utf-8")
        memorymd.snapshot(home.memory_md, home.snapshots, "before the backup")
        home.memory_map.write_text("# the map as it was\n", encoding="utf-8")
        memory_then = home.memory_md.read_bytes()

        teller = Teller(home)
        teller.start()
        while len(teller.acked) < 20:  # the writer is busy before the copy starts
            time.sleep(0.005)
        acked_before_take = list(teller.acked)
        report = backup.take(home, dest)
        teller.halt.set()
        teller.join(10)
        assert teller.error is None, teller.error

        after = {told(capsys, f"after the backup {i}"): f"after the backup {i}" for i in range(4)}
        assert cli.main(["pin", "A pin from after the backup"]) == 0
        home.memory_md.write_text(home.memory_md.read_text(encoding="utf-8")
                                  + "- [m2] Written after the backup.\n", encoding="utf-8")
        memorymd.snapshot(home.memory_md, home.snapshots, "after the backup")
        live_before_restore = messages(home.db_path)
    finally:
        stop = coworker("stop")
    assert stop.returncode == 0, stop.stderr

    # the backup: private, checked, described
    assert report.integrity == "ok" and report.dest == dest
    assert mode(dest) == 0o700 and mode(dest / "snapshots") == 0o700
    for f in dest.rglob("*"):
        if f.is_file():
            assert mode(f) == 0o600, f
    assert not list(dest.glob("coworker.db-*"))  # one self-contained file, no -wal beside it
    manifest = json.loads((dest / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["what"] == "coworker backup" and manifest["taken_at"] == report.taken_at
    assert manifest["database"]["integrity_check"] == "ok"
    assert manifest["counts"] == report.counts and report.counts["pins"] == 1
    assert manifest["last_event_id"] >= max(before)
    assert set(manifest["files"]) == {"coworker.db", "MEMORY.md", "snapshots/v0001.md",
                                      "snapshots/v0001.json", "memory-map.md"}
    line = report.line()
    assert "\n" not in line and str(dest) in line and "integrity ok" in line

    result = backup.restore(home, dest)

    restored = messages(home.db_path)
    for eid, body in before.items():  # every event acknowledged before the backup, same id
        assert restored.get(eid) == body
    top = manifest["last_event_id"]
    # the writer's messages in the backup: all acknowledged before take() began, then a prefix
    bg = [b for i, b in restored.items() if b.startswith("bg ") and i <= top]
    assert set(acked_before_take) <= set(bg)
    assert sorted(bg, key=lambda b: int(b.split()[1])) == teller.acked[:len(bg)]
    # told after the backup and still waiting (no model here): told again, none lost
    again = {i: b for i, b in restored.items() if i > top}
    assert set(again.values()) == set(after.values()) | set(teller.acked[len(bg):])
    assert result.since is not None and sorted(result.since.told_again) == sorted(again)
    assert f"{len(again)} messages" in result.line() and "told again" in result.line(), \
        result.line()
    with Store.open(home.db_path) as store:
        told_again = {e.body: e for e in ev.tail(store, 100, kind="message")
                      if e.id in again}
        assert all(e.owners_words for e in told_again.values()), "still the owner's words"
        assert all(e.meta["restored_from"] > top for e in told_again.values())
    with Store.open(home.db_path) as store:
        assert store.integrity_check() == "ok"
        assert [p.text for p in pins.active(store)] == ["Never deploy on Fridays"]
        last = ev.tail(store, 1)[0]
    assert last.kind == "backup_restored" and str(dest) in last.body
    assert home.memory_md.read_bytes() == memory_then
    assert [s.reason for s in memorymd.snapshots(home.snapshots)] == ["before the backup"]
    assert home.memory_map.read_text(encoding="utf-8") == "# the map as it was\n"
    assert mode(home.db_path) == 0o600 and mode(home.memory_md) == 0o600

    # nothing lost: what was replaced is in a timestamped folder in state/
    aside = result.aside
    assert aside.parent == home.state and aside.name.startswith("before-restore-")
    assert mode(aside) == 0o700
    assert messages(aside / "coworker.db") == live_before_restore
    assert all((aside / name).exists() for name in result.moved_aside), \
        "reading the database moved aside left its files as they were (-wal, -shm)"
    assert "Written after the backup" in (aside / "MEMORY.md").read_text(encoding="utf-8")
    assert len(memorymd.snapshots(aside / "snapshots")) == 2
    assert "\n" not in result.line() and str(aside) in result.line()
    assert not list(home.state.glob(".restore-*"))  # the staging folder is gone

    # and the restored home runs
    once = coworker("run", "--once")
    assert once.returncode == 0, once.stderr
    assert set(before.values()) <= set(messages(home.db_path).values())


# refusals ------------------------------------------------------------------------------------
def one_line(e: CoworkerError) -> str:
    text = str(e)
    assert "\n" not in text and text
    return text


@pytest.fixture
def with_history(offline_home: Home) -> Home:
    for i in range(3):
        tell(offline_home, f"message {i}")
    return offline_home


def test_a_non_empty_destination_is_refused_and_left_alone(with_history: Home, tmp_path: Path):
    dest = tmp_path / "full"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(backup.BackupRefused) as e:
        backup.take(with_history, dest)
    assert e.value.exit_code == 1
    assert "not empty" in one_line(e.value) and str(dest) in str(e.value)
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]
    # an empty folder is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    assert backup.take(with_history, empty).integrity == "ok"


@pytest.mark.parametrize("where", ["a file", "inside state/"])
def test_a_bad_destination_is_a_usage_error(with_history: Home, tmp_path: Path, where):
    if where == "a file":
        dest = tmp_path / "file.txt"
        dest.write_text("x", encoding="utf-8")
    else:
        dest = with_history.state / "backup"
    with pytest.raises(UsageError) as e:
        backup.take(with_history, dest)
    assert e.value.exit_code == 2 and one_line(e.value)
    assert not (with_history.state / "backup").exists()


def test_nothing_to_back_up_without_a_database(bare_home: Home, tmp_path: Path):
    with pytest.raises(backup.BackupRefused) as e:
        backup.take(bare_home, tmp_path / "b")
    assert "no database" in one_line(e.value)


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_restore_refuses_while_a_coworker_runs_there(with_history: Home, tmp_path: Path):
    dest = tmp_path / "b"
    backup.take(with_history, dest)
    r = coworker("start")
    assert r.returncode == 0, r.stderr
    try:
        with pytest.raises(backup.BackupRefused) as e:
            backup.restore(with_history, dest)
    finally:
        coworker("stop")
    text = one_line(e.value)
    assert e.value.exit_code == 1 and "running" in text and "coworker stop" in text
    assert not list(with_history.state.glob("before-restore-*"))


@pytest.mark.parametrize("what", ["missing", "not a backup", "a file"])
def test_restore_from_something_that_is_not_a_backup_is_a_usage_error(with_history: Home,
                                                                      tmp_path: Path, what):
    src = tmp_path / "src"
    if what == "not a backup":
        src.mkdir()
        (src / "coworker.db").write_bytes(b"")
    elif what == "a file":
        src.write_text("x", encoding="utf-8")
    before = with_history.db_path.read_bytes()
    with pytest.raises(UsageError) as e:
        backup.restore(with_history, src)
    assert e.value.exit_code == 2 and one_line(e.value)
    assert with_history.db_path.read_bytes() == before


def flip(path: Path, at: int = 5000) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        f.write(os.urandom(4096))


@pytest.mark.parametrize("damage", ["changed MEMORY.md", "damaged database",
                                    "damaged database, manifest rewritten to match"])
def test_a_backup_that_does_not_check_out_is_refused_and_nothing_changes(
        with_history: Home, tmp_path: Path, damage):
    home = with_history
    dest = tmp_path / "b"
    backup.take(home, dest)
    if damage == "changed MEMORY.md":
        (dest / "MEMORY.md").write_text("- [m1] something else\n", encoding="utf-8")
    else:
        flip(dest / "coworker.db", 0)
        if "rewritten" in damage:  # the checksum agrees: integrity_check must catch it
            path = dest / "manifest.json"
            manifest = json.loads(path.read_text(encoding="utf-8"))
            manifest["files"]["coworker.db"] = backup._fingerprint(dest / "coworker.db")
            path.write_text(json.dumps(manifest), encoding="utf-8")
    tell(home, "after the backup")
    db, memory = home.db_path.read_bytes(), home.memory_md.read_bytes()
    with pytest.raises(backup.BackupRefused) as e:
        backup.restore(home, dest)
    text = one_line(e.value)
    assert "nothing was restored" in text
    if "rewritten" in damage:
        assert "integrity_check" in text or "not a coworker database" in text, text
    assert home.db_path.read_bytes() == db and home.memory_md.read_bytes() == memory
    assert not list(home.state.glob("before-restore-*"))


def test_a_live_database_that_is_damaged_gives_no_good_backup(with_history: Home,
                                                              tmp_path: Path):
    db = with_history.db_path
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA writable_schema = ON")  # an index that disagrees with its table
    conn.execute("UPDATE sqlite_schema SET sql = 'CREATE INDEX events_ts ON events(kind)' "
                 "WHERE name = 'events_ts'")
    conn.close()
    with pytest.raises(backup.BackupRefused) as e:
        backup.take(with_history, tmp_path / "b")
    assert "integrity_check" in one_line(e.value) and "coworker doctor" in str(e.value)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["database"]["integrity_check"] != "ok"


def test_a_restore_neither_answers_twice_nor_loses_what_was_told_after_the_backup(
        home: Home, api, tmp_path: Path):
    """A told, backed up, answered; B told after, still waiting; then the backup restored:
    A stays answered (the aside database answered it) and B is told again, once."""
    from runtime.loop import Loop

    from .conftest import run_tick
    from .fakeapi import text

    a = tell(home, "what ships on Friday?")
    backup.take(home, tmp_path / "b")
    api.enqueue(text("The parser fix."))
    assert run_tick(Loop(home, home.settings())).kind == "no_action"
    b = tell(home, "and who reviews it?")
    result = backup.restore(home, tmp_path / "b")
    with Store.open(home.db_path) as store:
        waiting = {i.event.body: i.event for i in inputs.pending(store)}
    assert list(waiting) == ["and who reviews it?"] and waiting["and who reviews it?"].meta[
        "restored_from"] == b and a not in [e.id for e in waiting.values()]
    assert result.since is not None and result.since.answered == 1, result.since
    assert result.since.told_again == [waiting["and who reviews it?"].id], result.since
    assert f"(event {waiting['and who reviews it?'].id})" in result.line(), result.line()
    api.enqueue(text("Dana."))
    assert run_tick(Loop(home, home.settings())).kind == "no_action"
    asked = api.requests[-1]["json"]["messages"][0]["content"][1]["text"]
    assert "and who reviews it?" in asked and "what ships on Friday?" not in asked


def test_a_restore_into_another_history_brings_nothing_over_and_says_so(
        with_history: Home, tmp_path: Path):
    other = Home.locate(tmp_path / "other")
    other.init()
    write_config(other.root)
    tell(other, "a message of another home")
    backup.take(other, tmp_path / "b")
    result = backup.restore(with_history, tmp_path / "b")
    assert result.since is not None and "another history" in (result.since.unread or ""), \
        result.since
    assert result.since.unread in result.line(), result.line()
    assert sorted(messages(with_history.db_path).values()) == ["a message of another home"]


def test_a_restore_keeps_set_aside_inputs_set_aside(with_history: Home, tmp_path: Path):
    """An input set aside after three failed turns comes back set aside, with its failures,
    never as new (a poison input would get three more failed turns)."""
    home = with_history
    first = min(messages(home.db_path))
    backup.take(home, tmp_path / "b")
    later = tell(home, "told after the backup")
    again = tell(home, "told after the backup, still waiting")
    with Store.open(home.db_path) as store:
        for _ in range(3):
            inputs.fail(store, [first, later], "prompt is too long")
    result = backup.restore(home, tmp_path / "b")
    assert result.since is not None and result.since.set_aside == 2, result.since
    assert len(result.since.told_again) == 1, result.since
    assert "2 inputs" in result.line() and "`coworker retry`" in result.line(), result.line()
    with Store.open(home.db_path) as store:
        aside = {i.event.body: i for i in inputs.listing(store, "set_aside")}
        waiting = {i.event.body: i for i in inputs.pending(store)}
    assert aside["message 0"].failures == 3 and aside["told after the backup"].failures == 3
    assert waiting["told after the backup, still waiting"].event.meta["restored_from"] == again


def test_a_restore_reads_a_crashed_coworkers_wal_and_leaves_its_files(with_history: Home,
                                                                      tmp_path: Path):
    """The coworker died with its last message only in the -wal file. Restore moves the
    database with its -wal and -shm aside, reads that message from them (told again), and
    leaves the three files as they were."""
    import subprocess
    import sys

    home = with_history
    backup.take(home, tmp_path / "b")
    crash = ("import os, sys; from pathlib import Path; "
             "from runtime.store import Event, Store, inputs; "
             "s = Store.open(Path(sys.argv[1])); "
             "inputs.add_message(s, Event.owner_message('told just before a crash', 'tell')); "
             "os._exit(0)")
    subprocess.run([sys.executable, "-c", crash, str(home.db_path)], check=True,
                   cwd=Path(__file__).resolve().parent.parent)
    wal = home.db_path.with_name("coworker.db-wal")
    assert wal.exists() and wal.stat().st_size > 0
    result = backup.restore(home, tmp_path / "b")
    assert {"coworker.db", "coworker.db-wal", "coworker.db-shm"} <= set(result.moved_aside)
    assert all((result.aside / name).exists() for name in result.moved_aside), \
        "the database moved aside, -wal and -shm, stays as it was"
    assert result.since is not None and len(result.since.told_again) == 1, result.since
    assert "told again" in result.line(), result.line()
    assert "told just before a crash" in messages(home.db_path).values()


# a restore is all-or-nothing (issue 38, item 2) ----------------------------------------------
def refusing_moves(monkeypatch: pytest.MonkeyPatch, refuse: Callable[[Path], bool]) -> None:
    """A fault at a real step: os.rename (how a restore moves every file and folder) fails,
    as on a `chattr +i` folder or a file system gone read-only, for each path refuse(src)
    names."""
    import errno

    real = os.rename

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if refuse(Path(src)):
            raise OSError(errno.EPERM, "Operation not permitted", str(src))
        real(src, dst, *args, **kwargs)
    monkeypatch.setattr(os, "rename", rename)


def cli_lines(*args: str) -> tuple[int, str, str]:
    r = coworker(*args)
    return r.returncode, r.stdout, r.stderr


def test_a_restore_that_stops_half_way_is_rolled_back_and_nothing_changes(
        with_history: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """state/snapshots cannot be moved (`chattr +i`): the restore says it stopped, puts back
    what it had moved, and exits 1. The coworker is the one it was: `log` shows its events,
    `tell` takes the next id, `doctor` passes. (It used to leave no database in place: `log`
    said "no events yet", `tell` wrote event 1 into a fresh database, and doctor passed.)"""
    home = with_history
    backup.take(home, tmp_path / "b")
    tell(home, "told after the backup")
    before = messages(home.db_path)
    memory = home.memory_md.read_bytes()
    with monkeypatch.context() as m:
        refusing_moves(m, lambda src: src == home.snapshots)
        code, _, err = cli_lines("restore-backup", str(tmp_path / "b"))
    assert code == 1 and err.count("\n") == 1, err
    assert "half-way" in err and "rolled back" in err
    assert messages(home.db_path) == before and home.memory_md.read_bytes() == memory
    assert not home.restore_marker.exists()
    assert not list(home.state.glob(".restore-*")) and not list(home.state.glob("before-*"))
    code, out, _ = cli_lines("log")
    assert code == 0 and "told after the backup" in out and "message 0" in out
    code, out, _ = cli_lines("tell", "and now?")
    assert code == 0 and f"event {max(before) + 1}" in out, out
    assert cli_lines("doctor", "--no-model")[0] == 0


COMMANDS = [("log",), ("tell", "hello?"), ("doctor", "--no-model"), ("status",), ("init",),
            ("search", "message"), ("backup", "ANOTHER"), ("restore-backup", "B")]


@pytest.mark.parametrize("settle", ["--rollback", "--finish"])
def test_while_a_restore_is_half_finished_every_command_refuses_until_it_is_settled(
        with_history: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settle: str):
    """The file system turns read-only in the middle of the switch (the database and MEMORY.md
    were moved aside, nothing after them moves), so even the roll-back fails: the restore
    says so and exits 1, and from then on every command refuses with one
    line naming `restore-backup --finish` and `--rollback` (none makes a new, empty coworker
    there). Either one settles it: --rollback puts back what was here, --finish completes the
    restore (what was told after the backup is told again)."""
    home = with_history
    src = tmp_path / "b"
    backup.take(home, src)
    tell(home, "told after the backup")
    before, memory = messages(home.db_path), home.memory_md.read_bytes()
    with monkeypatch.context() as m:
        db = home.db_path
        first = {db, db.with_name("coworker.db-wal"), db.with_name("coworker.db-shm"),
                 home.memory_md}
        refusing_moves(m, lambda src: src not in first)
        code, _, err = cli_lines("restore-backup", str(src))
    assert code == 1 and err.count("\n") == 1, err
    assert "half-way" in err and "--finish" in err and "--rollback" in err
    assert home.restore_marker.exists()
    for args in COMMANDS:
        args = tuple({"B": str(src), "ANOTHER": str(tmp_path / "c")}.get(a, a) for a in args)
        code, out, err = cli_lines(*args)
        assert code == 1 and err.count("\n") == 1, (args, err)
        assert "--finish" in err and "--rollback" in err, (args, err)
    assert not home.db_path.exists(), "no new, empty database where the old one was"
    assert not (tmp_path / "c").exists()

    code, out, err = cli_lines("restore-backup", settle)
    assert code == 0 and out.count("\n") == 1, err
    assert not home.restore_marker.exists() and not list(home.state.glob(".restore-*"))
    now = messages(home.db_path)
    if settle == "--rollback":
        assert now == before and home.memory_md.read_bytes() == memory
        assert not list(home.state.glob("before-restore-*"))
    else:
        assert set(now.values()) == set(before.values())
        (aside,) = home.state.glob("before-restore-*")
        assert messages(aside / "coworker.db") == before
        with Store.open(home.db_path) as store:
            assert ev.tail(store, 1)[0].kind == "backup_restored"
            (again,) = [i.event for i in inputs.pending(store)
                        if i.event.body == "told after the backup"]
        assert again.meta["restored_from"] == max(before)  # told again
    code, out, _ = cli_lines("log")
    assert code == 0 and "told after the backup" in out
    assert cli_lines("doctor", "--no-model")[0] == 0


def test_finish_and_rollback_with_no_restore_to_settle_or_with_a_backup_are_refused(
        with_history: Home, tmp_path: Path):
    assert cli_lines("restore-backup", "--finish")[0] == 1
    assert cli_lines("restore-backup", "--rollback")[0] == 1
    assert cli_lines("restore-backup", "--finish", "--rollback")[0] == 2
    assert cli_lines("restore-backup", str(tmp_path), "--finish")[0] == 2
    assert cli_lines("restore-backup")[0] == 2
