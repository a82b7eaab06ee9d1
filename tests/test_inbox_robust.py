"""The inbox door under bad entries: one entry never stops the others nor the tick, nothing the
owner drops is lost, and a file is recorded once per file dropped (not once per content).

Each test drops files in a real home's state/inbox/ and runs the real loop's tick (or
`inbox.take` against the real store, for a crash in the middle of it)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest

from runtime import importer
from runtime.home import Home
from runtime.loop import inbox
from runtime.store import Store, inputs
from runtime.store import events as ev

from .conftest import coworker
from .test_doors import tick


def messages(home: Home) -> list[tuple[str, str | None]]:
    """(body, meta.file) of every message, oldest first."""
    with Store.open(home.db_path, readonly=True) as store:
        return [(e.body, e.meta.get("file"))
                for e in ev.tail(store, 1000, kind="message", by_id=True)]


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def filed(folder: Path) -> list[str]:
    """Names filed in rejected/ (or a stamped name in done/), without the `{time}-` head."""
    return sorted(n.split("-", 1)[1] for n in names(folder))


def left(home: Home) -> list[str]:
    return [n for n in names(home.inbox) if n not in ("done", "rejected")]


def logged(caplog: pytest.LogCaptureFixture, level: int, *words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level
            and all(w in r.getMessage() for w in words)]


@pytest.mark.parametrize("squatted", ["done", "rejected"])
def test_a_file_named_like_an_inbox_folder_is_read_and_the_other_messages_still_arrive(
        offline_home: Home, tmp_path: Path, caplog: pytest.LogCaptureFixture, squatted: str):
    box = offline_home.inbox
    if (box / squatted).is_dir():
        (box / squatted).rmdir()
    (box / squatted).write_text("a note I happened to name " + squatted, encoding="utf-8")
    (box / "note.txt").write_text("please answer this one", encoding="utf-8")
    outside = tmp_path / "outside.txt"
    outside.write_text("not for the inbox", encoding="utf-8")
    (box / "link.txt").symlink_to(outside)  # needs moving aside: rejected/ is made
    caplog.set_level(logging.INFO, logger="runtime.loop")
    tick(offline_home)
    assert sorted(messages(offline_home)) == sorted([
        ("please answer this one", "note.txt"),
        (f"a note I happened to name {squatted}", next(
            n for n in names(box / "done") if n.endswith("-" + squatted)))])
    assert (box / "done").is_dir() and (box / "rejected").is_dir()
    assert filed(box / "rejected") == ["link.txt"]
    assert left(offline_home) == []
    assert logged(caplog, logging.WARNING, repr(squatted), "not a folder")
    caplog.clear()
    tick(offline_home)
    assert len(messages(offline_home)) == 2 and not logged(caplog, logging.WARNING, "inbox")


def test_an_inbox_file_over_the_size_limit_is_set_aside_unread_with_a_hint(
        offline_home: Home, caplog: pytest.LogCaptureFixture):
    box = offline_home.inbox
    with open(box / "huge.log", "wb") as f:
        f.truncate(inbox.MAX_BYTES + 1)  # sparse: costs no disk
    (box / "at-limit.txt").write_bytes(b"x" * inbox.MAX_BYTES)
    (box / "note.txt").write_text("and this one too", encoding="utf-8")
    caplog.set_level(logging.INFO, logger="runtime.loop")
    tick(offline_home)
    told = messages(offline_home)
    assert [f for _, f in told] == ["at-limit.txt", "note.txt"]
    assert len(told[0][0]) == inbox.MAX_BYTES, "a file at the limit is read whole"
    assert filed(box / "rejected") == ["huge.log"]
    assert os.path.getsize(next((box / "rejected").iterdir())) == inbox.MAX_BYTES + 1
    assert left(offline_home) == []
    hint = logged(caplog, logging.WARNING, "'huge.log'", "split it", "coworker import")
    assert hint and f"{inbox.MAX_BYTES + 1:,} bytes" in hint[0]


def test_an_entry_that_fails_unexpectedly_is_logged_retried_then_set_aside_and_the_rest_goes_on(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture):
    box = offline_home.inbox
    for name in ("a.txt", "b.txt", "c.txt"):
        (box / name).write_text(f"message {name}", encoding="utf-8")
    real = inputs.add_message

    def add_message(store: Store, event):  # noqa: ANN001, ANN202 - the real one, but b.txt
        if event.meta.get("file") == "b.txt":
            raise RuntimeError("something nobody foresaw")
        return real(store, event)

    monkeypatch.setattr(inputs, "add_message", add_message)
    caplog.set_level(logging.INFO, logger="runtime.loop")
    tick(offline_home)
    assert messages(offline_home) == [("message a.txt", "a.txt"), ("message c.txt", "c.txt")]
    assert left(offline_home) == ["b.txt"], "left for the next tick"
    assert logged(caplog, logging.ERROR, "'b.txt'", "something nobody foresaw",
                  "next tick")
    for _ in range(inbox.MAX_FAILURES - 1):
        tick(offline_home)
    assert left(offline_home) == [] and filed(box / "rejected") == ["b.txt"]
    assert logged(caplog, logging.ERROR, "'b.txt'", f"{inbox.MAX_FAILURES} times in a row")
    assert logged(caplog, logging.WARNING, "'b.txt'", "move it back")
    assert len(messages(offline_home)) == 2
    # the fault is gone: moved back, it is read like any other file
    monkeypatch.setattr(inputs, "add_message", real)
    os.replace(next((box / "rejected").iterdir()), box / "b.txt")
    tick(offline_home)
    assert messages(offline_home)[-1] == ("message b.txt", "b.txt")
    assert left(offline_home) == []


def test_the_same_file_dropped_again_is_a_second_message(offline_home: Home):
    box = offline_home.inbox
    (box / "answer.txt").write_text("yes", encoding="utf-8")
    tick(offline_home)
    (box / "answer.txt").write_text("yes", encoding="utf-8")
    tick(offline_home)
    assert messages(offline_home) == [("yes", "answer.txt"), ("yes", "answer.txt")]
    with Store.open(offline_home.db_path, readonly=True) as store:
        assert len(inputs.pending(store)) == 2, "each asks for its own answer"
    assert len(names(box / "done")) == 2 and left(offline_home) == []


def test_an_imported_line_never_hides_an_inbox_file(offline_home: Home, tmp_path: Path):
    box = offline_home.inbox
    budget = box / "budget.txt"
    budget.write_text("the budget is 5k", encoding="utf-8")
    forged = {"via": "inbox", "file": "budget.txt",
              "inbox_sha": hashlib.sha256(budget.read_bytes()).hexdigest()[:16],
              "inbox_stat": inbox._identity(os.lstat(budget))}  # the best forgery there is
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps({
        "ts": "2026-01-05T09:00:00Z", "kind": "message", "actor": "owner",
        "author_kind": "user", "body": "the budget is 5k", "meta": forged}) + "\n",
        encoding="utf-8")
    with Store.open(offline_home.db_path) as store:
        importer.import_file(store, history)
    tick(offline_home)
    with Store.open(offline_home.db_path, readonly=True) as store:
        told = [e for e in ev.tail(store, 10, kind="message") if not e.imported]
        assert [(e.body, e.meta["file"]) for e in told] == [("the budget is 5k", "budget.txt")]
        assert inputs.status_of(store, int(told[0].id or 0)) == "pending"


class Crash(BaseException):
    """The process dies here (a kill): nothing after it runs."""


def test_a_crash_between_recording_a_file_and_filing_it_records_it_once(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture):
    box = offline_home.inbox
    (box / "note.txt").write_text("record me once", encoding="utf-8")
    real_replace = os.replace

    def crash(src, dst):  # noqa: ANN001, ANN202
        raise Crash

    monkeypatch.setattr(os, "replace", crash)
    with Store.open(offline_home.db_path) as store, pytest.raises(Crash):
        inbox.take(box, store)
    monkeypatch.setattr(os, "replace", real_replace)
    assert messages(offline_home) == [("record me once", "note.txt")]
    assert left(offline_home) == ["note.txt"], "recorded, not filed"
    caplog.set_level(logging.INFO, logger="runtime.loop")
    tick(offline_home)
    assert messages(offline_home) == [("record me once", "note.txt")], "not recorded twice"
    assert names(box / "done") == ["note.txt"] and left(offline_home) == []
    assert logged(caplog, logging.INFO, "'note.txt'", "already recorded as event")


def test_a_file_that_is_not_utf8_text_is_set_aside_with_how_to_fix_it(
        offline_home: Home, caplog: pytest.LogCaptureFixture):
    """A PDF or a Latin-1 note dropped in the inbox became a message of U+FFFD; it is now set
    aside whole (nothing lost) and the WARNING says what to do."""
    inbox = offline_home.inbox
    (inbox / "scan.pdf").write_bytes(b"%PDF-1.7\n\xe2\xe3\xcf\xd3 binary")
    (inbox / "note.txt").write_text("caf\u00e9 at noon", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        tick(offline_home)
    with Store.open(offline_home.db_path, readonly=True) as store:
        bodies = [e.body for e in ev.tail(store, 50, by_id=True) if e.kind == "message"]
    assert bodies == ["caf\u00e9 at noon"]
    rejected = list((inbox / "rejected").iterdir())
    assert len(rejected) == 1 and rejected[0].read_bytes().startswith(b"%PDF-1.7")
    assert "not UTF-8 text" in caplog.text and "save it as UTF-8" in caplog.text


def test_a_busy_database_sets_no_inbox_file_aside(offline_home: Home):
    """`tell` saves a message in the inbox when an import holds the database; the inbox must
    then wait for the database, however many ticks that takes, not count it against the file
    and set the owner's message aside after three."""
    import sqlite3

    tell_file = offline_home.inbox / "tell-saved.txt"
    tell_file.write_text("the budget review moved to Friday", encoding="utf-8")
    with Store.open(offline_home.db_path):
        pass  # the database and its tables exist
    holder = sqlite3.connect(offline_home.db_path)
    holder.execute("BEGIN IMMEDIATE")  # an import's long write
    try:
        with Store.open(offline_home.db_path, busy_timeout_ms=20) as store:
            for _ in range(inbox.MAX_FAILURES + 2):
                inbox.take(offline_home.inbox, store)
        assert tell_file.exists(), "the message waits in the inbox"
        assert not (offline_home.inbox / "rejected").exists() or \
            not list((offline_home.inbox / "rejected").iterdir())
    finally:
        holder.rollback()
        holder.close()
    with Store.open(offline_home.db_path) as store:
        inbox.take(offline_home.inbox, store)
        bodies = [e.body for e in ev.tail(store, 10, by_id=True) if e.kind == "message"]
    assert bodies == ["the budget review moved to Friday"]
    assert not tell_file.exists()


def test_an_old_row_whose_meta_is_not_json_does_not_stall_the_inbox(offline_home: Home):
    """Older versions wrote a bare NaN into some meta; the inbox's crash check read every owner
    message's meta with json_extract, which raised "malformed JSON" at every tick."""
    with Store.open(offline_home.db_path) as store, store.transaction():
        store.execute("INSERT INTO events (ts, kind, actor, author_kind, body, meta) VALUES "
                      "('2025-01-01T00:00:00.000Z', 'message', 'owner', 'user', 'old', "
                      "'{\"score\": NaN}')")
    (offline_home.inbox / "hello.txt").write_text("hello there", encoding="utf-8")
    tick(offline_home)
    with Store.open(offline_home.db_path, readonly=True) as store:
        bodies = [e.body for e in ev.tail(store, 10, by_id=True) if e.kind == "message"]
    assert bodies[-1] == "hello there"


def test_a_file_still_being_written_waits_and_arrives_whole(offline_home: Home,
                                                             inbox_settle: float):
    """`cmd > state/inbox/x.txt` that writes in bursts: a file changed under SETTLE_S seconds
    ago is left for a later tick (it once arrived as its first line, the rest lost in done/)."""
    assert inbox_settle >= 1.0
    note = offline_home.inbox / "report.txt"
    note.write_text("part one of the report\n", encoding="utf-8")
    with Store.open(offline_home.db_path) as store:
        inbox.take(offline_home.inbox, store)
        assert messages(offline_home) == [] and left(offline_home) == ["report.txt"]
        with note.open("a", encoding="utf-8") as f:  # the writer goes on, then finishes
            f.write("part two, the end\n")
        inbox.take(offline_home.inbox, store)  # still fresh: still waiting
        assert messages(offline_home) == []
        finished = note.stat().st_mtime - inbox_settle - 1  # as if it finished a while ago
        os.utime(note, (finished, finished))
        inbox.take(offline_home.inbox, store)
    assert messages(offline_home) == [("part one of the report\npart two, the end",
                                       "report.txt")]
    assert left(offline_home) == []


def test_a_file_dated_ahead_of_the_clock_is_taken_once_it_stays_the_same(
        offline_home: Home, inbox_settle: float):
    """A file copied with its times from a machine whose clock runs fast: its age says nothing,
    so it is read once this process has seen it unchanged for SETTLE_S seconds."""
    import time

    note = offline_home.inbox / "from-laptop.txt"
    note.write_text("notes from the train", encoding="utf-8")
    ahead = time.time() + 86_400
    os.utime(note, (ahead, ahead))
    with Store.open(offline_home.db_path) as store:
        inbox.take(offline_home.inbox, store)
        inbox.take(offline_home.inbox, store)
        assert messages(offline_home) == []
        time.sleep(inbox_settle + 0.2)  # a wait, never a bound on how long anything takes
        inbox.take(offline_home.inbox, store)
    assert messages(offline_home) == [("notes from the train", "from-laptop.txt")]


def test_an_empty_file_waits_in_the_inbox_until_its_writer_writes(
        offline_home: Home, caplog: pytest.LogCaptureFixture):
    """`slow-command > state/inbox/report.txt` creates the file before the command says
    anything: filed empty, its text would have gone to done/ and never been read."""
    box = offline_home.inbox
    (box / "report.txt").write_text("", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="runtime.loop"):
        tick(offline_home)
        tick(offline_home)
    assert left(offline_home) == ["report.txt"] and names(box / "done") == []
    assert len(logged(caplog, logging.INFO, "report.txt", "empty")) == 1, "said once"
    (box / "report.txt").write_text("the build failed on step 3", encoding="utf-8")
    tick(offline_home)
    assert messages(offline_home) == [("the build failed on step 3", "report.txt")]
    assert left(offline_home) == [] and names(box / "done") == ["report.txt"]


def test_an_empty_file_seen_as_it_is_does_not_wake_the_loop(offline_home: Home):
    """The loop's sleep ends early for news in the inbox; an empty file already seen is none
    (woken for it, the loop ticked every half second for as long as it stayed empty)."""
    box = offline_home.inbox
    (box / "report.txt").write_text("", encoding="utf-8")
    assert inbox.news(box), "an empty file not seen yet is news: the next take looks at it"
    tick(offline_home)
    assert not inbox.news(box)
    (box / "other.txt").write_text("", encoding="utf-8")
    assert inbox.news(box)
    tick(offline_home)
    assert not inbox.news(box)
    (box / "report.txt").write_text("the build failed", encoding="utf-8")
    assert inbox.news(box), "text written into it is news"


def test_status_names_what_waits_in_the_inbox_and_what_was_moved_aside(offline_home: Home):
    box = offline_home.inbox
    (box / "report.txt").write_text("", encoding="utf-8")
    (box / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (box / ".half-written.tmp").write_text("not yet", encoding="utf-8")
    tick(offline_home)
    shown = coworker("status")
    assert shown.returncode == 3, shown.stderr  # not running: the figures all the same
    line = next(x for x in shown.stdout.splitlines() if x.startswith("inbox:"))
    assert "1 file(s) waiting" in line and "(report.txt)" in line, line
    assert "1 moved to inbox/rejected/" in line and "latin.txt" in line, line
    data = json.loads(coworker("status", "--json").stdout)
    assert data["inbox"]["waiting"] == ["report.txt"] and data["inbox"]["rejected"] == 1
