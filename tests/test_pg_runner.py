"""One running loop per coworker across hosts, on PostgreSQL (runtime/store/pg_runner.py):
the claim, its fencing token, who runs it, and the wake-up a tell sends. Two or three
PgStores of one coworker stand for loops on different hosts, against a real throwaway server."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from runtime.errors import StoreError
from runtime.store import pg_runner
from runtime.store.pg import PgStore

from .pgserver import pg_url  # noqa: F401  (the fixture)


def host(url: str, name: str = "team_bot") -> PgStore:
    return PgStore.open(url, name)


def claim_once_free(store: PgStore, name: str, pid: int) -> pg_runner.Runner:
    """Claim as soon as the last holder's connection is gone (the server ends a closed
    session's backend, and its locks, a moment after the client hangs up)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return pg_runner.claim(store, name, pid)
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_one_loop_a_coworker_the_next_takes_over_with_a_new_token(pg_url: str) -> None:  # noqa: F811
    a, b = host(pg_url), host(pg_url)
    try:
        first = pg_runner.claim(a, "host-a", 111)
        assert first.token == 1
        with pytest.raises(StoreError, match=r"already runs on host-a \(pid 111"):
            pg_runner.claim(b, "host-b", 222)
        now = pg_runner.current(b)
        assert now is not None and (now.host, now.pid, now.holding) == ("host-a", 111, True)
        a.close()  # host A dies: the server drops its connection, and its lock with it
        second = claim_once_free(b, "host-b", 222)
        assert second.token == 2
        with b.transaction():
            pg_runner.check(b, second.token)  # the new runner writes
        pg_runner.release(b)
        gone = pg_runner.current(b)
        assert gone is not None and gone.host == "host-b" and not gone.holding
    finally:
        b.close()


def test_a_stale_loop_that_comes_back_cannot_commit(pg_url: str) -> None:  # noqa: F811
    a, b, a_again = host(pg_url), host(pg_url), None
    try:
        stale = pg_runner.claim(a, "host-a", 1)
        a.close()
        claim_once_free(b, "host-b", 2)
        a_again = host(pg_url)  # host A's connection comes back, believing it still runs
        with pytest.raises(pg_runner.Deposed, match="taken over"):
            with a_again.transaction():
                pg_runner.check(a_again, stale.token)
    finally:
        b.close()
        if a_again is not None:
            a_again.close()


def test_two_coworkers_on_one_database_each_run_their_own(pg_url: str) -> None:  # noqa: F811
    one, two = host(pg_url, "bot_one"), host(pg_url, "bot_two")
    try:
        assert pg_runner.claim(one).token == 1 and pg_runner.claim(two).token == 1
    finally:
        one.close()
        two.close()


def test_a_tell_on_one_host_wakes_the_loop_on_another(pg_url: str) -> None:  # noqa: F811
    loop, teller = host(pg_url), host(pg_url)
    try:
        pg_runner.listen(loop)
        heard: list[str] = []
        waiting = threading.Thread(target=lambda: heard.extend(pg_runner.woken(loop, 20.0, stop_after=1)),
                                   daemon=True)
        with teller.transaction():
            pg_runner.notify(teller)  # sent at commit
        waiting.start()
        waiting.join(30)
        assert heard == [""]
    finally:
        loop.close()
        teller.close()


def test_a_copy_into_a_coworker_that_runs_there_is_refused(
        pg_url: str, tmp_path: Path) -> None:  # noqa: F811
    from runtime.store import Store
    from runtime.store import copy as cp

    running = host(pg_url)
    try:
        pg_runner.claim(running, "host-a", 7)
        with Store.open(tmp_path / "a.db") as source, host(pg_url) as target:
            with pytest.raises(StoreError, match=r"runs on that database \(host-a, pid 7\)"):
                cp.copy_store(source, target)
    finally:
        running.close()


def test_every_write_of_a_deposed_loop_is_refused_the_new_ones_go_through(
        pg_url: str) -> None:  # noqa: F811
    from runtime.store import Event
    from runtime.store import events as ev

    a, b = host(pg_url), host(pg_url)
    a_again = None
    try:
        stale = pg_runner.claim(a, "host-a", 1)
        assert a.fence == stale.token
        ev.append(a, Event(kind="note", body="a writes while it runs", actor="coworker",
                           author_kind="agent"))
        a.close()
        claim_once_free(b, "host-b", 2)
        a_again = host(pg_url)
        a_again.fence = stale.token  # the old loop reconnects, still believing it runs
        with pytest.raises(pg_runner.Deposed):
            ev.append(a_again, Event(kind="note", body="stale", actor="coworker",
                                     author_kind="agent"))
        ev.append(b, Event(kind="note", body="the new runner writes", actor="coworker",
                           author_kind="agent"))
        assert [e.body for e in ev.tail(b, 5)] == ["a writes while it runs",
                                                  "the new runner writes"]
    finally:
        b.close()
        if a_again is not None:
            a_again.close()


def test_a_loop_whose_old_session_still_holds_the_lock_waits_for_it_rather_than_stopping(
        pg_url: str) -> None:  # noqa: F811
    """A connection broken on this side only (a middlebox's reset): the server keeps the old
    session, and its lock, a while. Taking the claim back then is a passing StoreError, not
    Deposed: the loop is not deposed by its own ghost; once the ghost is gone it goes on."""
    ghost, back = host(pg_url), host(pg_url)
    try:
        mine = pg_runner.claim(ghost)  # this host, this pid
        with pytest.raises(StoreError) as refused:
            pg_runner.reclaim(back, mine.token)
        assert not isinstance(refused.value, pg_runner.Deposed)
        assert "old session" in str(refused.value)
        ghost.close()
        deadline = time.monotonic() + 15
        while True:
            try:
                pg_runner.reclaim(back, mine.token)
                break
            except StoreError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with back.transaction():
            pg_runner.check(back, mine.token)
    finally:
        back.close()
