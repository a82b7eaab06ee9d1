"""Two hosts, one coworker, one PostgreSQL database, and a host killed mid-tick (issue 42 item 6).

Two homes with one `[coworker] id` and one `[store] url` stand for two hosts; each runs the real
`coworker run` as a process of its own (its `socket.gethostname()` made "host-a" or "host-b", as
two machines would name themselves), against a real throwaway server (tests/pgserver.py) and a
local Messages API (tests/fakeapi.py) whose model answers each owner message with a `reply`
naming it.

Both hosts' `coworker run` start at the same moment: one takes the claim (call it A), the
other (B) is refused with one line naming A's host and pid. 200 tells come from each home (the
owner's door, two threads at once). Part way through, the follow-up request of one of A's turns
(its reply already sent, the model asked what next) hangs at the server, and A is killed with
SIGKILL while that request is in flight. B is started again at once, as a service manager
restarts a unit, and again while it is refused, until the server has dropped A's connection
and B holds the claim; B takes up the turn A left (its reply replayed, never sent again) and
every message after it, the tells that came while no loop ran included. A `[[rituals.custom]]`
cron window (a minute boundary) falls while the two hosts are up.

At the end, read from the database: every one of the 400 messages recorded once, its input
consumed once by one completed turn, named by exactly one reply (its text and its
`in_reply_to`); the events append-only (every event seen at the kill unchanged at the end) with
unique ids; the runner's token 1 (A's host and pid) then 2 (B's); the ritual's window run
exactly once (one ritual_runs row besides the one that registered it). Slow (one to two and a
half minutes: the cron minute, and a loop's start-up on a busy machine): run with -s to see
the figures line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.actions import Actions, Door
from runtime.home import Home
from runtime.scheduler import register_and_find_missed
from runtime.store import pg_runner
from runtime.store.pg import PgStore

from .conftest import stop_process, write_config
from .fakeapi import FakeMessagesAPI, Scripted, text, tool_use
from .pgserver import pg_url  # noqa: F401  (the fixture)

ID = "two_hosts_1"
N_EACH = 200  # tells from each home
KILL_AT = 250  # tells in (of 400) when the next follow-up request hangs and A is killed there
POLL_S = 0.05  # how often the test looks at the database
HANG_S = 120.0  # the hung request's delay (cut short when the fake API stops)
RITUAL = "standup"
RITUAL_LEAD_S = 15  # the ritual's window: the first minute boundary at least this far ahead
TAKEOVER_S = 150.0  # B holds the claim within this long after the kill (a hang guard)
DRAIN_S = 150.0  # everything acted on, and the window run, within this long (a hang guard)
BODY = re.compile(r"\b(note [ab]-\d{3})\b")
COMPLETED = ("acted", "no_action", "step_cap")

# `coworker run` as host `argv[1]` would run it: the real entry point, its host name given
AS_HOST = ("import socket, sys\n"
           "name = sys.argv[1]\n"
           "socket.gethostname = lambda: name\n"
           "sys.argv = ['coworker', *sys.argv[2:]]\n"
           "from runtime.entry import main\n"
           "sys.exit(main())\n")


# the model -----------------------------------------------------------------------------------
class Answering:
    """The fake API's responder: a request whose last user message holds no tool_result is
    answered with a `reply` naming every message in its "What is new this tick" block (a fresh
    tool_use id each); one that does, with "done". Once `arm` is set, the next follow-up
    request hangs: that is where host A is killed."""

    def __init__(self) -> None:
        self.served = 0
        self.arm = threading.Event()
        self.hung: int | None = None  # the hung request's index in api.requests

    def __call__(self, request: dict[str, Any]) -> Scripted | dict[str, Any]:
        self.served += 1  # called under the fake API's lock
        messages = (request.get("json") or {}).get("messages") or []
        last = messages[-1]["content"] if messages else []
        blocks = last if isinstance(last, list) else [{"type": "text", "text": str(last)}]
        if any(b.get("type") == "tool_result" for b in blocks):
            if self.arm.is_set() and self.hung is None:
                self.hung = self.served - 1
                return Scripted(200, text("done"), delay=HANG_S)
            return text("done")
        new = next((b.get("text", "") for b in blocks if b.get("type") == "text"
                    and b.get("text", "").startswith("What is new this tick")), "")
        names = list(dict.fromkeys(BODY.findall(new)))  # each once, in order
        if not names:  # the ritual alone: nothing to answer
            return text("noted")
        return tool_use("reply", {"text": f"answering: {', '.join(names)}", "subject": "ack"},
                        id=f"toolu_two_hosts_{self.served}")


# the hosts -----------------------------------------------------------------------------------
def ritual_window(now: datetime) -> datetime:
    """The first minute boundary at least RITUAL_LEAD_S ahead of `now` (UTC)."""
    return (now + timedelta(seconds=RITUAL_LEAD_S + 59)).replace(second=0, microsecond=0)


def host_home(root: Path, url: str, api_url: str, window: datetime) -> Home:
    root.mkdir()
    home = Home.locate(root)
    home.init()
    config = write_config(
        root, api_url, coworker={"id": ID, "tick_seconds": 1, "max_tick_seconds": 4,
                                 "timezone": "UTC"},
        model={"timeout_s": 10.0, "max_retries": 2},
        rituals={"reflect": "0 3 1 1 *"},  # the built-in one kept out of the way
        store={"url": url})
    with config.open("a", encoding="utf-8") as f:
        f.write(f'\n[[rituals.custom]]\nname = "{RITUAL}"\n'
                f'cron = "{window.minute} {window.hour} * * *"\n'
                'prompt = "Say what the team did since the last stand-up."\nrecall = false\n')
    return home


def registered(home: Home, window: datetime) -> None:
    """The coworker as one that ran before: its schema made and its rituals registered now
    (a `registered` row each, as a first start records them), before the window. The window
    then runs once whether a loop is up at its minute (the scheduler fires) or starts after
    it on a busy machine (a missed window is caught up once)."""
    with home.open_store() as store:
        assert register_and_find_missed(store, home.settings()) == []
    assert datetime.now(UTC) < window, "the machine stalled past the ritual's window"


class HostLoop:
    """`coworker run` of one home, as host `name`, in a process of its own."""

    def __init__(self, home: Home, name: str, logdir: Path,
                 started: list[subprocess.Popen[bytes]]) -> None:
        self.home, self.name, self.logdir, self.started = home, name, logdir, started
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        self.err = self.logdir / f"{self.name}-{self.starts}.err"
        with open(self.logdir / f"{self.name}-{self.starts}.out", "wb") as o, \
                open(self.err, "wb") as e:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", AS_HOST, self.name, "run"], stdout=o, stderr=e,
                env=dict(os.environ, COWORKER_HOME=str(self.home.root), PYTHONUNBUFFERED="1"))
        self.started.append(self.proc)
        return self.proc

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; its exit code."""
        assert self.proc is not None
        return stop_process(self.proc)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The loop processes a test starts; any still running at its end (a failed test) killed."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def until(ok: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll `ok` until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while not (got := ok()):
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(POLL_S)
    return got


# what the database says ----------------------------------------------------------------------
class Db:
    """The coworker's schema as the test reads it: one read-only connection, kept open."""

    def __init__(self, url: str) -> None:
        self.store = PgStore.open(url, ID, readonly=True)

    def close(self) -> None:
        self.store.close()

    def holder(self) -> pg_runner.Runner | None:
        """Who holds (or last held) the claim."""
        return pg_runner.current(self.store)

    def holds(self, proc: subprocess.Popen[bytes]) -> bool:
        now = self.holder()
        return now is not None and now.holding and now.pid == proc.pid

    def events(self) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.store.query(
            "SELECT id, ts, kind, actor, body, tick_id, meta FROM events ORDER BY id")]

    def ritual_runs(self) -> list[tuple[str, datetime]]:
        """The ritual's runs (status, started), the row that registered it left out."""
        return [(r[0], when(r[1])) for r in self.store.query(
            "SELECT status, started_at FROM ritual_runs WHERE ritual = ? "
            "AND status != 'registered' ORDER BY id", (RITUAL,))]

    def progress(self) -> dict[str, Any]:
        """How far the work is: messages recorded, inputs pending, whether the running loop
        has a tick open (no tick_end yet), the ritual's runs."""
        return {
            "messages": int(self.store.scalar(
                "SELECT COUNT(*) FROM events WHERE kind = 'message'")),
            "pending": int(self.store.scalar(
                "SELECT COUNT(*) FROM inputs WHERE status = 'pending'")),
            "open": int(self.store.scalar(
                "SELECT COUNT(*) FROM events AS t WHERE t.kind = 'tick' AND NOT EXISTS "
                "(SELECT 1 FROM events AS e WHERE e.kind = 'tick_end' AND e.tick_id = t.id) "
                "AND t.id > COALESCE((SELECT MAX(id) FROM events WHERE kind = 'start'), 0)")),
            "ritual_runs": self.ritual_runs(),
        }

    def settled(self, told: int) -> dict[str, Any] | None:
        """The progress once every message is in and acted on, the window run, no tick open."""
        p = self.progress()
        done = (p["messages"] == told and p["pending"] == 0 and p["open"] == 0
                and any(status == "ok" for status, _ in p["ritual_runs"]))
        return p if done else None

    def inputs(self) -> dict[int, tuple[str, int | None]]:
        """Each input's event id: (its status, the tick that consumed it)."""
        return {int(r[0]): (r[1], r[2]) for r in self.store.query(
            "SELECT event_id, status, tick_id FROM inputs")}

    def ids_unique(self) -> bool:
        return bool(self.store.scalar("SELECT COUNT(*) = COUNT(DISTINCT id) FROM events"))


def when(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def meta(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(json.loads(row[6] or "{}"))


def once_each(db: Db, rows: list[tuple[Any, ...]], told: list[str]) -> list[str]:
    """What is wrong with "every message acted on exactly once": recorded once, its input
    consumed by the one completed turn that lists it, named by exactly one reply's text and
    in exactly one reply's in_reply_to."""
    by_body: dict[str, list[int]] = {}
    completed: dict[int, list[int]] = {}
    for r in rows:
        if r[2] == "message":
            by_body.setdefault(r[4], []).append(int(r[0]))
        elif r[2] == "tick_end" and meta(r).get("outcome") in COMPLETED:
            for i in meta(r).get("inputs") or []:
                completed.setdefault(int(i), []).append(int(r[5]))
    outbox = [r for r in rows if r[2] == "outbox"]
    named = Counter(n for r in outbox for n in BODY.findall(r[4]))
    replied = Counter(int(i) for r in outbox for i in meta(r).get("in_reply_to") or [])
    status = db.inputs()
    problems: list[str] = []
    for body in told:
        found = by_body.get(body, [])
        if len(found) != 1:
            problems.append(f"{body!r} recorded {len(found)} times ({found})")
            continue
        eid = found[0]
        state, by = status.get(eid, (None, None))
        if state != "consumed" or completed.get(eid, []) != [by]:
            problems.append(f"{body!r} (event {eid}) is {state} by tick {by}; the completed "
                            f"turns that list it: {completed.get(eid, [])}")
        if named[body] != 1 or replied[eid] != 1:
            problems.append(f"{body!r} (event {eid}) named by {named[body]} replies, in the "
                            f"in_reply_to of {replied[eid]}")
    return problems


def verdict(db: Db, rows: list[tuple[Any, ...]], seen: list[tuple[Any, ...]], told: list[str],
            runs: list[tuple[str, datetime]], window: datetime) -> list[str]:
    """Everything found wrong at the end: a message not acted on exactly once, an event seen
    at the kill since changed or gone, two events with one id, the window run other than once."""
    problems = once_each(db, rows, told)
    now = {r[0]: r for r in rows}
    changed = [r for r in seen if now.get(r[0]) != r]
    if changed:
        problems.append(f"{len(changed)} event(s) seen at the kill changed or went: "
                        f"{changed[:3]}")
    if not db.ids_unique():
        problems.append("two events share an id")
    if [status for status, _ in runs] != ["ok"] or runs[0][1] < window:
        problems.append(f"the ritual's window {window} ran {len(runs)} times: {runs}")
    return problems


def tell_all(home: Home, prefix: str, told: list[str], errors: list[BaseException],
             lock: threading.Lock) -> None:
    """N_EACH tells through the owner's door of `home` (what `coworker tell` does)."""
    actions = Actions(home, Door.CLI)
    for i in range(N_EACH):
        body = f"note {prefix}-{i:03d}"
        try:
            t = actions.tell(body)
            assert t.event_id is not None, f"{body}: saved in the inbox ({t.busy})"
        except BaseException as e:  # noqa: BLE001 - the test asserts none
            errors.append(e)
            return
        with lock:
            told.append(body)


# the steps -----------------------------------------------------------------------------------
def race(url: str, hosts: tuple[HostLoop, HostLoop]) -> tuple[HostLoop, HostLoop, Db]:
    """Both hosts' `coworker run` started at once: (the one that holds the claim, the one
    refused with one line naming it, the test's connection)."""
    procs = [h.start() for h in hosts]
    until(lambda: any(p.poll() is not None for p in procs), 120, "one of the two refused")
    loser = next(h for h, p in zip(hosts, procs, strict=True) if p.poll() is not None)
    winner = hosts[1] if loser is hosts[0] else hosts[0]
    assert winner.proc is not None and loser.proc is not None
    db = Db(url)
    won = winner.proc
    until(lambda: db.holds(won), 30, f"{winner.name} holds the claim")
    now = db.holder()
    assert now is not None and (now.token, now.host, now.pid) == (1, winner.name, won.pid), now
    lines = [line for line in loser.stderr().splitlines() if line.strip()]
    assert loser.proc.returncode != 0 and len(lines) == 1, loser.stderr()
    assert f"already runs on {winner.name} (pid {won.pid}," in lines[0], lines
    return winner, loser, db


def kill_mid_tick(a: HostLoop, model: Answering) -> None:
    """SIGKILL `a` while a follow-up request of one of its turns is in flight at the server."""
    assert a.proc is not None
    proc = a.proc
    model.arm.set()
    until(lambda: model.hung is not None or proc.poll() is not None, 60,
          "a follow-up request in flight")
    assert proc.poll() is None, a.stderr()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def take_over(db: Db, loop: HostLoop, gone: str) -> tuple[subprocess.Popen[bytes], int]:
    """`loop` started again and again, as a service manager restarts a unit that failed,
    until it holds the claim: (its process, how many starts were refused first)."""
    deadline = time.monotonic() + TAKEOVER_S
    refused = 0
    while True:
        proc = loop.start()
        until(lambda: db.holds(proc) or proc.poll() is not None, TAKEOVER_S,  # noqa: B023
              f"{loop.name} holds the claim or is refused")
        if proc.poll() is None:
            return proc, refused
        assert f"already runs on {gone}" in loop.stderr(), loop.stderr()
        refused += 1
        assert time.monotonic() < deadline, f"{loop.name} never took the claim over"


def lock_freed(url: str, freed: list[float]) -> None:
    """Append the moment the claim's lock is seen free (the server dropped its holder)."""
    db = Db(url)
    try:
        until(lambda: not getattr(db.holder(), "holding", True), 30,
              "the server drops the killed loop's connection")
        freed.append(time.monotonic())
    finally:
        db.close()


def resumed_end(rows: list[tuple[Any, ...]]) -> str | None:
    """When the tick that took up the killed one ended."""
    resumed = next((int(r[0]) for r in rows if r[2] == "tick"
                    and meta(r).get("resumes") is not None), None)
    return next((r[1] for r in rows if r[2] == "tick_end" and r[5] == resumed), None)


def figures(rows: list[tuple[Any, ...]], a: HostLoop, b: HostLoop, model: Answering,
            api: FakeMessagesAPI, f: dict[str, Any]) -> str:
    """The figures line: the work, the kill point, the takeover, the ritual, the time."""
    ticks = [r for r in rows if r[2] == "tick"]
    b_start = max(int(r[0]) for r in rows if r[2] == "start")
    resumed_at = resumed_end(rows)
    done_s = (when(resumed_at) - f["killed_wall"]).total_seconds() if resumed_at else -1
    runs, at_kill = f["runs"], f["at_kill"]
    return (
        f"two hosts: {f['told']} tells ({at_kill['told']} before the kill), {len(ticks)} ticks "
        f"({sum(1 for r in ticks if r[0] < b_start)} on {a.name}, "
        f"{sum(1 for r in ticks if meta(r).get('resumes'))} taking up a killed one), "
        f"{sum(1 for r in rows if r[2] == 'outbox')} replies, {len(api.requests)} model "
        f"requests; {b.name} refused beside {a.name}; {a.name} killed on request "
        f"#{model.hung} in flight (a reply sent, its follow-up asked) with "
        f"{at_kill['pending']} inputs pending and {at_kill['open']} tick open; its lock free "
        f"{f['freed_s']:.3f} s after the kill, {b.name} held the claim {f['taken_s']:.1f} s "
        f"after it ({f['refused']} start(s) refused after the kill), the killed turn done "
        f"{done_s:.1f} s after it; ritual window {f['window']:%H:%M} UTC ran {len(runs)} "
        f"time(s), in {a.name if runs and runs[0][1] < f['killed_wall'] else b.name}'s run; "
        f"all acted on at {f['settled_s']:.1f} s, wall {f['wall_s']:.1f} s; {len(rows)} events")


# the test ------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(420)  # covers the subprocesses: each wait has its own deadline
def test_two_hosts_one_killed_mid_tick_the_other_takes_over_and_nothing_is_lost_or_doubled(
        tmp_path: Path, pg_url: str, api: FakeMessagesAPI,  # noqa: F811
        started: list[subprocess.Popen[bytes]]) -> None:
    t0 = time.monotonic()
    model = Answering()
    api.responder = model
    window = ritual_window(datetime.now(UTC))
    homes = {name: host_home(tmp_path / name, pg_url, api.url, window)
             for name in ("host-a", "host-b")}
    registered(homes["host-a"], window)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    a, b, db = race(pg_url, (HostLoop(homes["host-a"], "host-a", logdir, started),
                             HostLoop(homes["host-b"], "host-b", logdir, started)))
    try:
        # 200 tells from each home at once; the loop killed mid-tick part way through
        told: list[str] = []
        errors: list[BaseException] = []
        lock = threading.Lock()
        tellers = [threading.Thread(target=tell_all, args=(homes[n], n[-1], told, errors, lock),
                                    daemon=True) for n in homes]
        for t in tellers:
            t.start()
        until(lambda: len(told) >= KILL_AT or errors, 120, f"{KILL_AT} tells in")
        kill_mid_tick(a, model)
        killed_at, killed_wall = time.monotonic(), datetime.now(UTC)
        freed: list[float] = []
        watch = threading.Thread(target=lock_freed, args=(pg_url, freed), daemon=True)
        watch.start()
        seen = db.events()  # the history at the kill: append-only from here on
        at_kill = dict(db.progress(), told=len(told))
        b_proc, refused = take_over(db, b, a.name)  # B's start, at once
        taken_s = time.monotonic() - killed_at
        watch.join(30)

        # every tell in and acted on, the ritual's window run; then B stops cleanly
        for t in tellers:
            t.join(120)
        assert not errors, errors
        assert len(told) == 2 * N_EACH
        until(lambda: db.settled(len(told)) or b_proc.poll() is not None, DRAIN_S,
              "every message acted on and the ritual's window run")
        assert b_proc.poll() is None, f"{b.name} died ({b_proc.returncode}): {b.stderr()[-2000:]}"
        settled_s = time.monotonic() - t0
        last = db.holder()
        assert last is not None and (last.token, last.host, last.pid, last.holding) == (
            2, b.name, b_proc.pid, True), last
        assert b.stop() == 0, b.stderr()[-2000:]

        rows, runs = db.events(), db.ritual_runs()
        problems = verdict(db, rows, seen, told, runs, window)
    finally:
        db.close()
    line = figures(rows, a, b, model, api, {
        "told": len(told), "at_kill": at_kill, "freed_s": freed[0] - killed_at if freed else -1,
        "taken_s": taken_s, "refused": refused, "killed_wall": killed_wall, "window": window,
        "runs": runs, "settled_s": settled_s, "wall_s": time.monotonic() - t0})
    print("\n" + line)
    assert not problems, "\n".join(problems[:30]) + "\n" + line
    assert at_kill["open"] == 1 and resumed_end(rows) is not None, line
