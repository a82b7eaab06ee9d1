"""The loop's hold on its coworker in a shared database (PostgreSQL; issue 42, ADR-0044).

Owns, for a loop whose store is PostgreSQL, the three things a team's database needs of it:
- **the claim**, taken at start (`take`): one loop a coworker across every host; a second
  loop, wherever it starts, is refused with one line naming the host that runs it;
- **the fence**, looked at before each tick (`ensure`): a connection that broke is made again
  and the claim taken again with the same token, or the loop learns it was deposed (another
  loop claimed since) and stops before its next write. Every write transaction checks the
  token too (PgStore), so a deposed loop can never commit even between two looks;
- **the wake-up**: a thread LISTENs on the coworker's channel on a connection of its own, and
  a `tell` committed on any host (inputs.add NOTIFYs) wakes the loop at once, as the signal
  of `process.wake` does on one host.
It never ticks, never decides what a turn does; on SQLite it is not made at all (the pidfile
is the lock there).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..errors import Deposed, StoreError
from ..store import pg_runner
from ..store.pg_runner import Runner

log = logging.getLogger("runtime.loop")

LISTEN_RETRY_S = 5.0  # a listener whose connection failed tries again after this long
LISTEN_POLL_S = 1.0  # how often the listener looks whether it should stop


class Claim:
    """`take()` at start, `ensure()` before each tick, `release()` at stop."""

    def __init__(self, store: Any, wake: Callable[[], object]) -> None:
        self.store = store
        self.wake = wake
        self.runner: Runner | None = None
        self.holding = False  # the lock is this connection's (False after a reconnect until
        # reclaim succeeds: its old session may still hold it on the server a while)
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None

    def take(self) -> Runner:
        """The claim, or StoreError naming the host whose loop holds it."""
        self.runner = pg_runner.claim(self.store)
        self.holding = True
        log.info("this loop holds coworker %s (token %d) on %s", self.store.schema[3:],
                 self.runner.token, self.runner.host)
        self._listener = threading.Thread(target=self._listen, name="coworker-listen",
                                          daemon=True)
        self._listener.start()
        return self.runner

    def ensure(self) -> None:
        """Before a tick: the connection works and the claim is still ours (Deposed if not;
        StoreError when the server cannot be reached: the tick fails and is tried again)."""
        assert self.runner is not None
        if self.holding and not self.store.broken:
            try:
                with self.store.snapshot():
                    pg_runner.check(self.store, self.runner.token)
                return
            except Deposed:
                raise
            except StoreError:
                if not self.store.broken:  # the server answered: not a lost connection
                    raise
        if self.store.broken:
            log.warning("the database connection was lost; connecting again and taking the "
                        "claim (token %d) back", self.runner.token)
            self.holding = False
            self.store.reconnect()
        pg_runner.reclaim(self.store, self.runner.token)
        self.holding = True
        log.warning("connected again; this loop still holds the coworker")

    def release(self) -> None:
        """A clean stop: the listener ends, the lock is given up (the row says who ran last)."""
        self._stop.set()
        if self._listener is not None:
            self._listener.join(LISTEN_POLL_S * 3)
        if self.runner is not None and not self.store.broken:
            pg_runner.release(self.store)
        self.runner = None

    def _listen(self) -> None:
        """The wake-up thread: LISTEN on a connection of its own; any notification wakes the
        loop. A failed connection is a WARNING and tried again (the loop still ticks on its
        interval meanwhile)."""
        while not self._stop.is_set():
            try:
                with self.store.sibling() as listening:  # the loop's database, whatever
                    # config.toml says meanwhile (a reload never moves the loop's store)
                    pg_runner.listen(listening)
                    while not self._stop.is_set():
                        if any(True for _ in pg_runner.woken(listening, LISTEN_POLL_S, 1)):
                            self.wake()
            except Exception as e:  # never ends the loop: ticks go on, woken or not
                log.warning("the wake-up listener failed (%s: %s); tells from other hosts wait "
                            "for the next tick until it is back", type(e).__name__, e)
                self._stop.wait(LISTEN_RETRY_S)


__all__ = ["Claim", "Deposed"]
