"""start / stop / status / tell against a real loop process, talking to a real local
Messages API.

The loop is always a real process (`start` spawns one); the commands that talk to it run
in-process through `coworker(...)` except where the command's own process is the point
(`coworker_process`: the console entry point end to end, concurrent writers, Ctrl-C). Waits
have generous deadlines and return as soon as the event is seen; no assertion is on latency
(the tell-to-model-request figure is printed, for the record)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.home import Home
from runtime.store import Store, inputs
from runtime.store import events as ev

from .conftest import coworker, coworker_process, write_config
from .fakeapi import FakeMessagesAPI, Scripted, text, tool_use

# Every test here starts, signals or kills real `coworker` processes: the slow part.
pytestmark = pytest.mark.slow


def wait_for(pred, timeout: float = 60.0, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s")


def kinds(home: Home) -> list[str]:
    with Store.open(home.db_path) as store:
        return [e.kind for e in ev.tail(store, 10_000)]


@pytest.fixture
def slow_home(home: Home, api: FakeMessagesAPI) -> Home:
    """Ticks far apart, so anything that happens soon is a wake-up, not the timer."""
    write_config(home.root, api.url, coworker={"tick_seconds": 300, "max_tick_seconds": 600})
    return home


@pytest.fixture
def running(slow_home: Home):
    r = coworker("start")
    assert r.returncode == 0, r.stderr
    yield slow_home
    coworker("stop")


def test_start_status_second_start_stop(running: Home):
    # the real console entry point, end to end, beside the loop it talks to
    status = coworker_process("status", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] is True and isinstance(data["pid"], int)
    assert data["config_in_use"] is True
    wait_for(lambda: json.loads(coworker("status", "--json").stdout)["last_tick_at"])
    human = coworker("status").stdout
    assert "running: pid" in human and "last tick:" in human and "next tick:" in human
    again = coworker_process("start")
    assert again.returncode == 1
    assert "already running" in again.stderr and "coworker stop" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    # editing config.toml shows up in status until the loop applies it
    cfg = running.config_path
    cfg.write_text(cfg.read_text() + "\n# an edit\n")
    assert json.loads(coworker("status", "--json").stdout)["config_in_use"] is False
    stop = coworker_process("stop")
    assert stop.returncode == 0, stop.stderr
    assert json.loads(coworker("status", "--json").stdout)["running"] is False
    assert kinds(running).count("start") == 1 and kinds(running)[-1] == "stop"
    assert coworker("stop").returncode == 1  # nothing to stop: a clear refusal


def test_tell_wakes_a_running_loop(running: Home, api: FakeMessagesAPI):
    # wait for the first (quiet) tick so the loop is asleep on a 300 s timer: a model request
    # long before that timer is the wake-up
    wait_for(lambda: json.loads(coworker("status", "--json").stdout)["last_tick_at"])
    api.got_request.clear()
    t0 = time.monotonic()
    r = coworker("tell", "please wake up")
    assert r.returncode == 0 and "woke the coworker" in r.stdout
    # well inside the 300 s timer: only a wake-up makes this request
    assert api.got_request.wait(60.0), "no model request after tell"
    t_req = api.requests[-1]["t"]
    with Store.open(running.db_path) as store:
        told = ev.tail(store, 1, kind="message")[0]
    from datetime import datetime
    written = datetime.fromisoformat(told.ts.replace("Z", "+00:00")).timestamp()
    latency = api.requests[-1]["wall"] - written
    # a figure, not a verdict: a loaded machine may take seconds
    print(f"\ntell -> model request: {latency * 1000:.0f} ms from the message being written, "
          f"{(t_req - t0) * 1000:.0f} ms from the tell command's start")
    assert "please wake up" in json.dumps(api.bodies[-1]["messages"])


def test_tell_from_other_processes_while_the_loop_writes(running: Home, api: FakeMessagesAPI):
    # Every model answer asks for a note: the loop writes several events a step.
    api.default = tool_use("note", {"text": "busy writing " + "x" * 200})
    procs = [subprocess.Popen([sys.executable, "-m", "runtime.cli", "tell", f"message {i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(6)]
    results = [p.communicate(timeout=60) + (p.returncode,) for p in procs]
    for _out, err, code in results:
        assert code == 0, err
        assert "locked" not in err.lower()
    wait_for(lambda: kinds(running).count("note") >= 8, timeout=20)
    with Store.open(running.db_path) as store:
        bodies = {e.body for e in ev.tail(store, 10_000, kind="message")}
    assert bodies == {f"message {i}" for i in range(6)}
    log = running.log_path.read_text()
    assert "database is locked" not in log and "locked" not in log.lower()


def test_sigterm_cancels_a_hung_model_call_and_the_message_waits(slow_home: Home,
                                                                   api: FakeMessagesAPI):
    """A server that never answers must not hold `coworker stop`: the call in flight is
    cancelled, no retry starts, and the message stays pending for the next run."""
    write_config(slow_home.root, api.url, model={"timeout_s": 120.0},
                 coworker={"tick_seconds": 300, "max_tick_seconds": 600})
    assert coworker("start").returncode == 0
    wait_for(lambda: json.loads(coworker("status", "--json").stdout)["last_tick_at"])
    api.got_request.clear()
    api.enqueue(Scripted(200, tool_use("note", {"text": "halfway"}), delay=300.0))
    told = coworker("tell", "work on it")
    assert told.returncode == 0, told.stderr
    assert api.got_request.wait(60.0)
    stop = coworker("stop", "--timeout", "60")  # arrives while the call hangs
    assert stop.returncode == 0, stop.stderr
    seen = kinds(slow_home)
    tail = seen[seen.index("tick", seen.index("message")):]
    assert tail == ["tick", "recall", "tick_end", "stop"]
    with Store.open(slow_home.db_path) as store:
        assert ev.tail(store, 1, kind="tick_end")[0].meta["outcome"] == "stopped"
        assert ev.tail(store, 1, kind="stop")[0].meta["reason"] == "SIGTERM"
        message = ev.tail(store, 1, kind="message")[0]
        assert inputs.status_of(store, message.id) == "pending"
    assert len(api.requests) == 1  # no retry started after the stop
    api.enqueue(text("Done now."))
    again = coworker("run", "--once")
    assert again.returncode == 0, again.stderr
    with Store.open(slow_home.db_path) as store:
        assert inputs.status_of(store, message.id) == "consumed"


def test_run_in_foreground_stops_on_sigint(slow_home: Home):
    proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "run"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: slow_home.pidfile.exists() and slow_home.pidfile.read_text().strip())
        wait_for(lambda: "stop" not in kinds(slow_home) and "start" in kinds(slow_home))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "stopped cleanly (SIGINT)" in err
    assert kinds(slow_home)[-1] == "stop"


def test_run_refuses_a_second_instance(running: Home):
    r = coworker("run", "--once")
    assert r.returncode == 1
    assert "already running" in r.stderr and "Traceback" not in r.stderr


def test_stale_pidfile_does_not_block_start(slow_home: Home):
    slow_home.state.mkdir(exist_ok=True)
    slow_home.pidfile.write_text("999999\n")  # a dead pid, no lock held
    r = coworker("start")
    try:
        assert r.returncode == 0, r.stderr
        pid = int(slow_home.pidfile.read_text())
        assert pid != 999999 and pid > 0
        os.kill(pid, 0)
    finally:
        coworker("stop")


def test_start_without_a_home_says_what_to_do(tmp_path: Path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = dict(os.environ, COWORKER_HOME=str(empty))
    r = coworker("start", env=env)
    assert r.returncode == 2
    assert "coworker init" in r.stderr and "Traceback" not in r.stderr


def test_a_request_is_answered_end_to_end_by_the_background_loop(running: Home,
                                                                 api: FakeMessagesAPI):
    api.enqueue(tool_use("note", {"text": "ticket 7 is a duplicate"}), text("Done."))
    coworker("tell", "look at ticket 7")
    wait_for(lambda: "note" in kinds(running))
    log = coworker("log", "--json", "-n", "50")
    rows = [json.loads(line) for line in log.stdout.splitlines()]
    assert {"id", "ts", "kind", "actor", "author_kind", "body"} <= set(rows[0])
    notes = [r for r in rows if r["kind"] == "note"]
    assert notes[0]["body"] == "ticket 7 is a duplicate"
    only = coworker("log", "--kind", "note").stdout
    assert "ticket 7 is a duplicate" in only and "look at ticket 7" not in only


def test_model_endpoint_down_keeps_the_loop_alive(slow_home: Home):
    dead = FakeMessagesAPI().start()
    url = dead.url
    dead.stop()
    write_config(slow_home.root, url, coworker={"tick_seconds": 300, "max_tick_seconds": 600},
                 model={"max_retries": 1})
    assert coworker("start").returncode == 0
    try:
        coworker("tell", "anyone home?")
        wait_for(lambda: "tick_failed" in kinds(slow_home))
        status = json.loads(coworker("status", "--json").stdout)
        assert status["running"] is True
    finally:
        coworker("stop")


SLOW_RELEASE = """
import os, signal, sys, time
from pathlib import Path
from runtime.home import Home
from runtime.process import PidLock

lock = PidLock(Home(Path(sys.argv[1])))
lock.acquire()

def release(*_):
    # what PidLock.release does, with the machine slow between emptying the file and unlocking
    os.ftruncate(lock._fd, 0)
    time.sleep(1.0)
    lock.release()
    sys.exit(0)

signal.signal(signal.SIGTERM, release)
print("held", flush=True)
while True:
    time.sleep(0.05)
"""


def test_stop_waits_for_the_lock_not_for_the_pid(offline_home: Home):
    """A loop letting go empties the pidfile, then unlocks. On a busy machine the two are
    apart: `stop` must wait for the lock itself, or a restore (or a start) right after it finds
    the home still held, "running (pid None)"."""
    from runtime import process

    holder = subprocess.Popen([sys.executable, "-c", SLOW_RELEASE, str(offline_home.root)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert process.stop(offline_home, timeout=30) == holder.pid
        lock = process.PidLock(offline_home)
        lock.acquire()  # raised AlreadyRunning while the holder slept between the two steps
        lock.release()
    finally:
        holder.kill()
        holder.wait(10)


def test_a_start_is_not_refused_by_a_look_at_the_lock(offline_home: Home):
    """`status` and `stop` look at the lock with a shared lock for an instant; a start at that
    instant waits it out instead of saying a coworker runs (with no pid to name)."""
    import fcntl
    import threading

    from runtime import process

    offline_home.state.mkdir(parents=True, exist_ok=True)
    offline_home.pidfile.touch()
    fd = os.open(offline_home.pidfile, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a look that lasts, on a slow machine, 0.3 s
    threading.Timer(0.3, lambda: (fcntl.flock(fd, fcntl.LOCK_UN), os.close(fd))).start()
    lock = process.PidLock(offline_home)
    lock.acquire()
    lock.release()
