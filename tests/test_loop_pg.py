"""The loop on a shared PostgreSQL database (runtime/loop/claim.py, issue 42 item 4): one loop
a coworker across hosts, a tell on another host waking it, a lost connection taken up again
with the same fencing token, a deposed loop stopping before it writes, and what `status`,
`stop`, `start` and `tell` say on the host that does not run it. Two homes with one
[coworker] id and one [store] url stand for two hosts; each loop runs in a thread of its own
against a real throwaway server (tests/pgserver.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runtime.errors import StoreError
from runtime.home import Home
from runtime.loop import Loop
from runtime.store import events as ev
from runtime.store import pg_runner
from runtime.store.pg import PgStore

from .conftest import coworker, write_config
from .pgserver import pg_url  # noqa: F401  (the fixture)

ID = "team_bot_1"


def host_home(root: Path, url: str) -> Home:
    root.mkdir()
    home = Home.locate(root)
    home.init()
    write_config(root, coworker={"id": ID, "tick_seconds": 300, "max_tick_seconds": 600},
                 store={"url": url})
    return home


@pytest.fixture
def hosts(tmp_path: Path, pg_url: str) -> tuple[Home, Home]:  # noqa: F811
    return host_home(tmp_path / "host_a", pg_url), host_home(tmp_path / "host_b", pg_url)


class Running:
    """A Loop of `home` running in a thread of its own (as `coworker run` would)."""

    def __init__(self, home: Home) -> None:
        self.loop = Loop(home, home.settings())
        self.error: BaseException | None = None
        self.aio: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        until(lambda: self.loop.state.name == "RUNNING" or not self.thread.is_alive())

    def _run(self) -> None:
        async def go() -> None:
            self.aio = asyncio.get_running_loop()
            await self.loop.run()
        try:
            asyncio.run(go())
        except BaseException as e:  # noqa: BLE001 - kept for the test to look at
            self.error = e

    def wake(self) -> None:
        assert self.aio is not None
        self.aio.call_soon_threadsafe(self.loop.wake)

    def stop(self) -> None:
        if self.thread.is_alive() and self.aio is not None:
            self.aio.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture
def running() -> Iterator[Callable[[Home], Running]]:
    started: list[Running] = []

    def start(home: Home) -> Running:
        started.append(Running(home))
        return started[-1]
    yield start
    for r in started:
        r.stop()


def until(ok: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.02)


def opened(url: str, readonly: bool = False) -> Any:
    """The coworker's schema, opened straight from the database (the store's surface)."""
    return PgStore.open(url, ID, readonly=readonly)


def ticks(url: str) -> int:
    with opened(url, readonly=True) as store:
        return int(ev.counts_by_kind(store).get("tick", 0))


def terminate(url: str, store: Any) -> None:
    """The server drops this store's connection (a restart, a cut network, as the loop sees it)."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (store.raw.info.backend_pid,))


def test_a_second_loop_anywhere_is_refused_and_the_other_host_is_told_where_it_runs(
        hosts: tuple[Home, Home], running: Callable[[Home], Running],
        monkeypatch: pytest.MonkeyPatch) -> None:
    a_home, b_home = hosts
    a = running(a_home)
    assert a.error is None and a.loop.claim is not None and a.loop.claim.runner.token == 1
    b = running(b_home)
    b.thread.join(30)
    assert isinstance(b.error, StoreError) and "already runs on" in str(b.error)
    monkeypatch.setenv("COWORKER_HOME", str(b_home.root))
    status = coworker("status")
    assert status.stdout.startswith("runs on ") and "not on this host" in status.stdout, status
    stop = coworker("stop")
    assert stop.returncode != 0 and "stop it there" in stop.stderr, stop
    start = coworker("start")
    assert start.returncode != 0 and "already runs on" in start.stderr, start
    told = coworker("tell", "from the other host")
    assert told.returncode == 0 and "woke the coworker running on" in told.stdout, told
    assert a.thread.is_alive()


def test_a_tell_on_another_host_wakes_the_loop_at_once(
        hosts: tuple[Home, Home], running: Callable[[Home], Running], pg_url: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    a_home, b_home = hosts
    a = running(a_home)
    until(lambda: a.loop.stats.ticks >= 1)  # its first tick; the next is 300 s away
    monkeypatch.setenv("COWORKER_HOME", str(b_home.root))
    assert coworker("tell", "wake up over there").returncode == 0
    until(lambda: ticks(pg_url) >= 1, 60)  # its turn on the tell: far less than 300 s


def test_a_lost_connection_is_taken_up_again_with_the_same_token(
        hosts: tuple[Home, Home], running: Callable[[Home], Running], pg_url: str,  # noqa: F811
        ) -> None:
    a = running(hosts[0])
    until(lambda: a.loop.stats.ticks >= 1)
    terminate(pg_url, a.loop.store)
    a.wake()
    until(lambda: a.loop.stats.ticks >= 2, 60)
    assert a.loop.stats.last_outcome != "failed", a.loop.stats.history
    assert a.thread.is_alive() and a.loop.claim.runner.token == 1
    with opened(pg_url, readonly=True) as store:
        now = pg_runner.current(store)
    assert now is not None and now.token == 1 and now.holding


def test_a_deposed_loop_stops_before_it_writes_again(
        hosts: tuple[Home, Home], running: Callable[[Home], Running], pg_url: str,  # noqa: F811
        ) -> None:
    a = running(hosts[0])
    until(lambda: a.loop.stats.ticks >= 1)
    terminate(pg_url, a.loop.store)  # host A's connection is cut; host B takes over
    with opened(pg_url) as b:
        deadline = time.monotonic() + 30
        while True:
            try:
                taken = pg_runner.claim(b, "host-b", 4242)
                break
            except StoreError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert taken.token == 2
        last = ev.max_id(b)
        a.wake()
        a.thread.join(30)
        assert not a.thread.is_alive(), "a deposed loop stops"
        assert ev.max_id(b) == last, "and writes nothing once deposed"
        now = pg_runner.current(b)
        assert now is not None and (now.host, now.token, now.holding) == ("host-b", 2, True)


def test_the_notifier_goes_on_after_the_server_dropped_its_connection(
        hosts: tuple[Home, Home], pg_url: str) -> None:  # noqa: F811
    from runtime.notify import Notifier

    home = hosts[0]
    with home.config_path.open("a", encoding="utf-8") as f:
        f.write('\n[[notify]]\nname = "log"\nkind = "command"\ncommand = ["true"]\n')
    notifier = Notifier(home, home.settings)
    try:
        notifier.run_pass()
        terminate(pg_url, notifier.store)
        with pytest.raises(StoreError):
            notifier.run_pass()  # the pass that meets the dropped connection fails, once
        notifier.run_pass()  # the next connects again
    finally:
        notifier.close()
