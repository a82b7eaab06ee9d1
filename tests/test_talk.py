"""Talking with the coworker (issue 40): `coworker replies`, `ask` and `chat`, with the real
loop, the real anthropic client against the local Messages API, and `chat` in a real
pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest

from runtime.home import Home
from runtime.loop import Loop
from runtime.store import Store
from runtime.store import events as ev
from runtime.store import replies as rp

from .conftest import coworker, run_tick, tell, write_config
from .fakeapi import FakeMessagesAPI, Scripted, text, tool_use

REPO = Path(__file__).resolve().parents[1]


def _outbox(home: Home) -> list[int]:
    with Store.open(home.db_path) as store:
        return [int(e.id or 0) for e in ev.tail(store, 100, kind="outbox")]


def test_replies_lists_the_unread_and_marks_them_read(home: Home, api: FakeMessagesAPI):
    first = tell(home, "status of the build?")
    api.enqueue(text("The build is green."))
    loop = Loop(home, home.settings())
    run_tick(loop)
    tell(home, "and the deploy?")
    api.enqueue(tool_use("reply", {"text": "Deploy is Friday.", "subject": "deploy"}),
                text("Told."))
    run_tick(loop)
    shown = coworker("replies", "--json")
    assert shown.returncode == 0, shown.stderr
    got = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [g["text"] for g in got] == ["The build is green.", "Deploy is Friday."]
    assert got[0]["in_reply_to"] == [first] and not any(g["read"] for g in got)
    again = coworker("replies")
    assert again.returncode == 0 and again.stdout == "" and "--all" in again.stderr
    every = coworker("replies", "--all", "--json")
    assert [json.loads(x)["read"] for x in every.stdout.splitlines()] == [True, True]
    with Store.open(home.db_path) as store:  # the marks are events, appended
        assert rp.read_ids(store) == set(_outbox(home))
        assert [e.meta["ids"] for e in ev.tail(store, 10, kind="replies_read")] == [
            _outbox(home)]


def test_the_reply_to_one_message_is_found_among_others(home: Home, api: FakeMessagesAPI):
    a = tell(home, "first question")
    api.enqueue(text("first answer"))
    loop = Loop(home, home.settings())
    run_tick(loop)
    b = tell(home, "second question")
    api.enqueue(text("second answer"))
    run_tick(loop)
    with Store.open(home.db_path) as store:
        assert rp.answering(store, b).body == "second answer"
        assert rp.answering(store, a).body == "first answer"
        assert rp.answering(store, b + 1000) is None


def test_ask_with_no_coworker_running_says_so(offline_home: Home):
    r = coworker("ask", "anyone there?")
    assert r.returncode == 1 and "coworker start" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_chat_with_no_coworker_running_offers_start(offline_home: Home):
    r = coworker("chat")
    assert r.returncode == 3 and "coworker start" in r.stderr


@pytest.fixture
def running(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, coworker={"tick_seconds": 300, "max_tick_seconds": 600})
    r = coworker("start")
    assert r.returncode == 0, r.stderr
    yield home
    coworker("stop")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ask_prints_the_answer_to_that_message(running: Home, api: FakeMessagesAPI):
    api.enqueue(text("Dana owns the parser fix."))
    r = coworker("ask", "--timeout", "60", "who owns the parser fix?")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Dana owns the parser fix."
    api.enqueue(Scripted(200, text("late"), delay=20))  # the model takes its time
    slow = coworker("ask", "--timeout", "0.5", "a question it will not answer in time")
    assert slow.returncode == 1 and "coworker replies" in slow.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_chat_in_a_terminal_tells_lines_and_shows_replies(running: Home, api: FakeMessagesAPI):
    """`coworker chat` in a real pseudo-terminal, no colour: the line typed is told as the
    owner's, the reply appears as it is written, and Ctrl-D leaves with exit 0."""
    api.enqueue(text("Hello, I am here."))
    pid, fd = pty.fork()
    if pid == 0:  # the child: the real command, in the home
        os.chdir(running.root)
        os.environ["NO_COLOR"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "runtime.cli", "chat"])
    seen = _read_until(fd, "Ctrl-D", 30)
    os.write(fd, b"hello there\n")
    seen += _read_until(fd, "Hello, I am here.", 60)
    assert "(told #" in seen
    os.write(fd, b"\x04")  # Ctrl-D
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert "Traceback" not in seen and "\x1b[" not in seen
    with Store.open(running.db_path) as store:
        told = ev.tail(store, 10, kind="message")
    assert told[-1].body == "hello there" and told[-1].actor == "owner"


def _read_until(fd: int, marker: str, timeout_s: float) -> str:
    got, deadline = b"", time.monotonic() + timeout_s
    while marker.encode() not in got:
        assert time.monotonic() < deadline, f"never saw {marker!r}: {got.decode(errors='replace')}"
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                got += os.read(fd, 4096)
            except OSError:
                break
    return got.decode(errors="replace")


def test_tell_says_where_its_answer_appears(offline_home: Home):
    r = coworker("tell", "hello")
    assert r.returncode == 0 and "coworker replies" in r.stdout


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_chat_in_a_terminal_offers_to_start_the_coworker(offline_home: Home):
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(offline_home.root)
        os.execv(sys.executable, [sys.executable, "-m", "runtime.cli", "chat"])
    try:
        seen = _read_until(fd, "[y/N]", 30)
        os.write(fd, b"y\n")
        seen += _read_until(fd, "Ctrl-D", 30)
        assert "coworker started (pid" in seen
        os.write(fd, b"\x04")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, seen
    finally:
        assert coworker("stop").returncode == 0


def test_the_opening_history_cuts_a_long_message(offline_home: Home):
    """A webhook's payload may be 64,000 characters: the chat's opening history shows its
    start and says where the rest is."""
    from runtime import talk
    from runtime.store import Event

    with Store.open(offline_home.db_path) as store:
        big = ev.append(store, Event(kind="message", actor="hook:github", author_kind="agent",
                                     body='{"x": "' + "y" * 10_000 + '"}'))
    [line] = [talk.line_of(e) for e in talk.recent(offline_home)]
    assert len(line) < talk.SHOWN_CHARS + 200 and f"event {big}" in line
