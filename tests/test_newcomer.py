"""Defects a newcomer met on the first day (issue 37, items 1, 3, 4, 5 and 11), each reproduced as
the issue found it, against the real loop, the real anthropic client and the local Messages API.

- a tick that failed never skips its backoff for a backlog of inputs (a retry storm while the
  model is down), though the owner's own word still wakes one attempt at once;
- `status` shows the running process's own facts, never the previous process's run.json;
- `coworker log -n 0 --follow` shows only what is new, and `--until` bounds a view;
- a run that is not live after one that was (a systemd unit after `start --live`) warns.

Item 11 (the tick's INFO line counts an MCP server's side effects) needs a real MCP server: it
is in tests/test_hands_loop.py, with the slow tests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from datetime import UTC, datetime

import pytest

from runtime import process
from runtime.home import Home
from runtime.loop import Loop
from runtime.store import Event, Store
from runtime.store import events as ev

from .conftest import coworker, tell, write_config
from .conftest import run_tick as tick
from .fakeapi import FakeMessagesAPI, error, text


def _slept(loop: Loop, timeout: float) -> bool:
    """Whether `loop._sleep(60)` is still waiting after `timeout` seconds (a loaded machine
    only makes it wait longer, never shorter)."""
    async def go() -> bool:
        try:
            await asyncio.wait_for(loop._sleep(60), timeout)
        except TimeoutError:
            return True
        return False
    return asyncio.run(go())


# --- 1. a retry storm during an outage ----------------------------------------------------

def test_a_failed_tick_with_a_backlog_waits_out_its_backoff(
        home: Home, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    write_config(home.root, api.url, coworker={"tick_seconds": 60, "max_tick_seconds": 1800})
    monkeypatch.setattr("runtime.loop.perception.MAX_INPUTS_PER_TURN", 1)
    tell(home, "the watch changed")
    tell(home, "and here is the owner, told while the model was down")
    api.default = error(500)  # the model server is down, every time
    loop = Loop(home, home.settings())
    outcome = tick(loop)
    assert outcome.kind == "failed"
    loop._after_tick(outcome)
    assert loop.interval == 120  # doubled
    run = process.read_runfile(home)
    assert run["next_tick_at"] is not None and run["interval_s"] == 120
    assert _slept(loop, 0.5), "a failed tick with inputs behind it must not tick again at once"


def test_the_owners_word_still_wakes_one_attempt_at_once(
        home: Home, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    write_config(home.root, api.url, coworker={"tick_seconds": 60, "max_tick_seconds": 1800})
    monkeypatch.setattr("runtime.loop.perception.MAX_INPUTS_PER_TURN", 1)
    tell(home, "one")
    tell(home, "two")
    api.default = error(500)
    loop = Loop(home, home.settings())
    outcome = tick(loop)
    loop.wake()  # `coworker tell` signalled during the failed tick
    loop._after_tick(outcome)
    due = process.read_runfile(home)["next_tick_at"]
    assert datetime.fromisoformat(due.replace("Z", "+00:00")) <= datetime.now(UTC)
    assert not _slept(loop, 30), "the owner's tell wakes the loop at once"
    assert _slept(loop, 0.5), "and only once: then the backoff holds"


def test_a_backlog_after_a_completed_turn_still_goes_on_at_once(
        home: Home, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    write_config(home.root, api.url, coworker={"tick_seconds": 60, "max_tick_seconds": 1800})
    monkeypatch.setattr("runtime.loop.perception.MAX_INPUTS_PER_TURN", 1)
    tell(home, "one")
    tell(home, "two")
    api.enqueue(text("Noted."))
    loop = Loop(home, home.settings())
    loop._after_tick(tick(loop))
    assert not _slept(loop, 30)


# --- 3. status shows this process, not the last one ---------------------------------------

def test_status_of_a_new_process_never_shows_the_last_ones_run_json(offline_home: Home):
    old = {"pid": os.getpid() + 1, "running": False, "writes": "live",
           "started_monotonic_epoch": 1.0, "last_tick_at": None, "last_outcome": None}
    process.write_runfile(offline_home, old)  # what the previous (live) process left behind
    lock = process.PidLock(offline_home)
    lock.acquire()  # a new process holds the lock and has not written run.json yet
    try:
        r = coworker("status", "--json")
        data = json.loads(r.stdout)
        assert r.returncode == 0 and data["pid"] == os.getpid()
        assert data["writes"] is None and data["uptime_s"] is None
        shown = coworker("status").stdout
        assert "LIVE" not in shown and "-> None" not in shown and "starting" in shown
    finally:
        lock.release()


def test_a_starting_loop_writes_its_own_run_json_first(home: Home, api: FakeMessagesAPI):
    process.write_runfile(home, {"pid": os.getpid() + 1, "writes": "live", "ticks": 99})
    loop = Loop(home, home.settings())

    async def go() -> dict:
        async with loop:
            return process.read_runfile(home)
    run = asyncio.run(go())
    assert run["pid"] == os.getpid() and run["writes"] == "dry-run" and run["ticks"] == 0


# --- 5. a service that runs dry-run after a live run says so ------------------------------

def _started(home: Home, live: bool) -> None:
    async def go() -> None:
        async with Loop(home, home.settings(), live=live):
            pass
    asyncio.run(go())


def test_a_dry_run_after_a_live_run_is_a_warning(home: Home, api: FakeMessagesAPI, caplog):
    caplog.set_level(logging.INFO, logger="runtime.loop")
    _started(home, live=False)
    _started(home, live=True)
    assert not [r for r in caplog.records if "last run was LIVE" in r.getMessage()]
    _started(home, live=False)  # e.g. the systemd unit, without --live
    [warning] = [r for r in caplog.records if "last run was LIVE" in r.getMessage()]
    assert warning.levelno == logging.WARNING and "[writes]" in warning.getMessage()


# --- 4. log -n 0 and --until ---------------------------------------------------------------

def _history(home: Home) -> None:
    with Store.open(home.db_path) as store:
        for day in ("2026-11-29", "2026-11-30", "2026-12-01"):
            ev.append(store, Event(kind="note", body=f"note of {day}", actor="coworker",
                               author_kind="agent", ts=f"{day}T12:00:00.000Z"))


def test_log_n_0_prints_nothing_old(offline_home: Home):
    _history(offline_home)
    r = coworker("log", "-n", "0")
    assert r.returncode == 0 and r.stdout == ""


def test_log_n_0_follow_shows_only_what_is_new(offline_home: Home, monkeypatch):
    from runtime import cli

    _history(offline_home)
    polls = []

    def follow(store, after_id, kind, as_json, stop=lambda: False):  # noqa: ANN001, ANN202
        if not polls:  # the first poll: something new arrives
            tell(offline_home, "brand new")
        polls.append(after_id)
        return real(store, after_id, kind, as_json, stop=lambda: len(polls) >= 1)
    real = cli._follow
    monkeypatch.setattr(cli, "_follow", follow)
    r = coworker("log", "-n", "0", "--follow")
    assert r.returncode == 0 and "brand new" in r.stdout and "note of" not in r.stdout


def test_log_until_bounds_one_days_view(offline_home: Home):
    _history(offline_home)
    r = coworker("log", "--since", "2026-11-30", "--until", "2026-11-30")
    assert r.returncode == 0
    assert "note of 2026-11-30" in r.stdout
    assert "2026-11-29" not in r.stdout and "2026-12-01" not in r.stdout
    r = coworker("log", "--until", "2026-11-30T00:00:00Z", "--json")
    assert [json.loads(line)["body"] for line in r.stdout.splitlines()] == ["note of 2026-11-29"]


@pytest.mark.parametrize("args, phrase", [
    (["--until", "soon"], "--until 'soon'"),
    (["--since", "2026-12-01", "--until", "2026-11-01"], "not after"),
    (["--until", "9999-12-31"], "out of range"),
    (["--until", "2h", "--follow"], "do not go together"),
])
def test_log_until_mistakes_are_one_line(offline_home: Home, args, phrase):
    r = coworker("log", *args)
    assert r.returncode == 2 and phrase in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

