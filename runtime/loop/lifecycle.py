"""The loop's life: start, ticks, a sleep a wake-up cuts short, a stop.

Owns the Loop and its run state (STOPPED -> STARTING -> RUNNING -> STOPPING -> STOPPED);
`async with` to start and stop (the pid lock, the signal handlers, the ritual scheduler and
catch-up, the start, stop and crash events, a shielded and time-limited close of the model
client); `stop()` and `wake()` that only signal; the interval that doubles after quiet,
no-op or failed ticks; the runfile; hot config reload; the role text (a role file that
cannot be read is a ConfigError at construction, before anything starts; one that goes bad
while running keeps the last good text, loudly, and never fails a turn); and each tick's one
choice: quiet (no model call, no event, a telemetry count) or a turn. A crash is logged and
recorded apart from a stop. It asks perception what waits and hands the turn to turn; it
never speaks SQL and never calls the model itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from .. import context as ctx
from .. import process
from ..errors import ConfigError, Deposed
from ..home import Home
from ..memory.embed import SemanticCache
from ..model import Model
from ..scheduler import Scheduler, register_and_find_missed
from ..settings import Settings, file_hash
from ..store import events as ev
from ..store import iso_z, now_iso, telemetry, turns
from ..store import promises as promises_store
from ..tools import Registry, default_registry
from . import inbox, perception
from .record import record
from .spending import SpendingCap
from .state import Outcome, RunState, Stop, TickOutcome
from .turn import TickWork, TurnContext, take

log = logging.getLogger("runtime.loop")  # one logger for the whole loop, as before the split

POLL_S = 0.5  # how often a sleep looks at the inbox (a file dropped there wakes no one)
CLOSE_S = 5  # how long a stop waits for the model client to close


@contextlib.contextmanager
def _or_warn(what: str) -> Iterator[None]:
    """While stopping: a step that fails is a WARNING naming it, and the stop goes on."""
    try:
        yield
    except Exception as e:
        log.warning("while stopping, %s failed (%s: %s)", what, type(e).__name__, e)


@dataclass
class LoopStats:
    ticks: int = 0
    quiet_ticks: int = 0
    last_tick_at: str | None = None
    last_outcome: str | None = None
    history: list[str] = field(default_factory=list)


class Loop:
    """`await Loop(home, settings).run()`, or `async with Loop(...) as loop:` then
    `await loop.run_until_stopped()`; `stop()` and `wake()` only signal."""

    def __init__(self, home: Home, settings: Settings, *, live: bool | None = None,
                 registry: Registry | None = None) -> None:
        self.home = home
        self.settings = settings
        # A role file that cannot be read is a config error now, before anything is opened
        # or started (`coworker run` prints it as one line, exit 2); later, the last good
        # role text is kept (see `_turn_settings`).
        self._role_text = settings.role_text(home.root)
        self._role_problem: str | None = None  # the role error already reported
        self.live_flag = live
        self.registry = registry or default_registry()
        self.scheduler: Scheduler | None = None
        self.state = RunState.STOPPED
        self.store = home.open_store()
        self.model: Model | None = None
        self.interval = float(settings.coworker.tick_seconds)
        self.stats = LoopStats()
        self.config_hash = file_hash(home.config_path)
        self._bad_hash_seen: str | None = None
        self._wakeup = asyncio.Event()
        self._stop = Stop()
        self._lock: process.PidLock | None = None
        self._signals: list[int] = []
        self.server: Any = None  # runtime.serve.server.ServerThread, when [serve] enabled
        self._started_epoch = time.time()
        self._next_tick_epoch: float | None = None
        self._due_rituals = perception.DueRituals()
        self._resume: turns.Attempt | None = None  # the attempt this tick's batch takes up
        self._more_pending = False  # more inputs wait than a turn takes: tick again at once
        self._idle_digest: str | None = None  # no model: the inputs already reported
        self._cap = SpendingCap()
        self._semantic = SemanticCache()
        self._work = TickWork()
        self.hands: Any = None  # runtime.hands.hands.Hands, started with the loop
        self.watches: Any = None  # runtime.loop.hands.Watches
        self.notifier: Any = None  # runtime.notify.Notifier: [[notify]] deliveries, a thread
        self._hands_changed = False
        self.claim: Any = None  # runtime.loop.claim.Claim: the store is a shared database
        self._make_model()

    # signals -----------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        if self.live_flag is not None:
            return self.live_flag
        return self.settings.writes.mode == "live"

    @property
    def stopping(self) -> bool:
        return self._stop.requested

    def stop(self, reason: str = "stop requested") -> None:
        """Ask the loop to stop: the sleep ends, a model call in flight is cancelled (its
        inputs stay pending), and the turn ends at its next step boundary."""
        self._stop.request(reason)
        if self.state in (RunState.STARTING, RunState.RUNNING):
            self.state = RunState.STOPPING
        self._wakeup.set()

    def wake(self) -> None:
        self._wakeup.set()

    def _ritual_due(self, name: str) -> None:
        self._due_rituals.mark(name)
        self._wakeup.set()

    async def _ritual_fired(self, name: str) -> None:
        """The APScheduler job: a coroutine, so it runs on the loop's own thread."""
        log.info("ritual %s is due", name)
        self._ritual_due(name)

    # model -------------------------------------------------------------------------------
    def _make_model(self) -> None:
        self.model = Model(self.settings.model) if self.settings.model_enabled() else None
        if self.model is None:
            why = ('[model] provider = "none"' if self.settings.model.provider == "none"
                   else "no API key")
            log.warning(
                "NO MODEL CONFIGURED (%s): the coworker records inputs and runs rituals but "
                "takes no model turns. Set ANTHROPIC_API_KEY, or [model] api_key in %s "
                "(chmod 600; and [model] base_url in config.toml for a local "
                "Anthropic-compatible server).", why, self.home.state / "secrets.toml")

    # lifecycle ---------------------------------------------------------------------------
    async def run(self, *, max_ticks: int | None = None) -> None:
        """Start, tick until stopped (or `max_ticks` ticks), stop. A crash is logged at
        CRITICAL, recorded, and raised."""
        async with self:
            await self.run_until_stopped(max_ticks=max_ticks)

    async def __aenter__(self) -> Loop:
        self._lock = process.PidLock(self.home)
        # a `tell` may signal as soon as the pidfile names us, and until it is released: its
        # wake-up must never meet the default action (which ends the process)
        with contextlib.suppress(ValueError):  # not the main thread: asyncio owns signals
            signal.signal(process.WAKE_SIGNAL, signal.SIG_IGN)
        self._lock.acquire()
        try:
            self._take_claim()
        except BaseException:
            self._lock.release()
            raise
        self._write_runfile(running=True)  # `status` shows this process's facts, never the last one's
        self._install_signals()
        self._start_server()
        self.state = RunState.STARTING
        self._warn_if_no_longer_live()
        record(self.store, "start", f"coworker started (pid {os.getpid()})", pid=os.getpid(),
               model=self.settings.model.name if self.model else None,
               writes="live" if self.live else "dry-run")
        log.info("coworker started in %s (pid %d, writes %s)", self.home.root, os.getpid(),
                 "live" if self.live else "dry-run")
        try:
            self._start_rituals()
            await self._start_hands()
            self._start_notify()
        except BaseException as e:
            await self._close(e)
            raise
        if self.state is RunState.STARTING:  # a stop may have come in already
            self.state = RunState.RUNNING
        return self

    def _take_claim(self) -> None:
        """On a shared database (PostgreSQL): one loop a coworker across hosts; a second one
        is refused here, with one line naming the host that runs it (runtime/loop/claim.py)."""
        if self.store.dialect != "postgres":
            return
        from .claim import Claim

        aio = asyncio.get_running_loop()
        self.claim = Claim(self.store, lambda: aio.call_soon_threadsafe(self.wake))
        self.claim.take()

    def _warn_if_no_longer_live(self) -> None:
        """A run after a live one that is not live itself (`start --live`, then a service
        that runs without it) would silently stop every live action: say so, once, loudly."""
        if self.live:
            return
        try:
            last = ev.tail(self.store, 1, kind="start", by_id=True)
        except Exception as e:  # never stops a start: the note is a courtesy
            log.warning("could not read how the last run ran (%s: %s)", type(e).__name__, e)
            return
        if last and last[0].meta.get("writes") == "live":
            log.warning("side effects run DRY-RUN now, but the last run was LIVE: replies and "
                        "MCP writes are recorded, not carried out. To act, pass --live or set "
                        "[writes] mode = \"live\" in config.toml (a service unit reads it)")

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._close(exc)

    async def run_until_stopped(self, *, max_ticks: int | None = None) -> None:
        """Tick until a stop (or `max_ticks` ticks), sleeping the interval between ticks."""
        while not self.stopping:
            self._after_tick(await self._guarded_tick())
            if max_ticks is not None and self.stats.ticks >= max_ticks:
                self.stop(f"ran {max_ticks} tick(s)")
                break
            await self._sleep(self.interval)

    async def _guarded_tick(self) -> TickOutcome:
        """A tick that raised (e.g. the database locked past its timeout) failed; the loop
        goes on."""
        try:
            if self.claim is not None:
                self.claim.ensure()
            return await self.tick()
        except Deposed as e:
            log.error("%s", e)
            self.stop(f"deposed: {e}")
            return TickOutcome(Outcome.FAILED, detail=str(e))
        except Exception as e:
            log.error("tick failed (%s: %s); the loop goes on", type(e).__name__, e,
                      exc_info=True)
            with contextlib.suppress(Exception):
                record(self.store, "tick_failed", f"{type(e).__name__}: {e}")
            return TickOutcome(Outcome.FAILED, detail=str(e))

    async def _start_hands(self) -> None:
        """Start the owner's MCP servers (none configured: nothing to start, no SDK loaded).
        One that cannot start is a WARNING; the coworker runs without its tools."""
        section = self.settings.mcp
        if not section.servers:
            return
        from ..hands.hands import Hands
        from .hands import Watches

        self.hands = Hands(section, home=self.home.root)
        ready = await self.hands.start()
        self.watches = Watches(section, self.settings.coworker.timezone)
        if misfits := self.watches.misfits(self.hands):
            raise ConfigError(misfits[0])
        log.info("mcp servers: %s", ", ".join(f"{n} {'ready' if ok else 'NOT STARTED'}"
                                             for n, ok in ready.items()))

    async def _reconcile_hands(self) -> None:
        """Take an edited [mcp] section: add, remove and restart servers, re-read watches."""
        section = self.settings.mcp
        if self.hands is None:
            await self._start_hands()
            return
        await self.hands.reconcile(section)
        self.watches.configure(section)

    async def _hands_tick(self) -> None:
        """Before perceiving: expire and run the owner's approved actions, and call the watches
        that are due. A failure here is logged and the tick goes on."""
        if self._hands_changed:
            self._hands_changed = False
            try:
                await self._reconcile_hands()
            except Exception as e:
                log.warning("mcp servers not reconciled with the new config (%s: %s)",
                            type(e).__name__, e, exc_info=True)
        if self.hands is None:
            return
        from . import hands as mcp

        try:
            await mcp.run_approved(self.hands, self.store, self.settings.mcp, self.live)
            await self.watches.poll(self.hands, self.store, self.settings.mcp)
        except Exception as e:
            log.warning("mcp actions or watches failed this tick (%s: %s); the tick goes on",
                        type(e).__name__, e, exc_info=True)

    def _start_rituals(self) -> None:
        for name in register_and_find_missed(self.store, self.settings):
            self._ritual_due(name)
        self.scheduler = Scheduler(self.settings, self._ritual_fired)
        self.scheduler.start()

    def _start_notify(self) -> None:
        """[[notify]] deliveries run in a thread of their own (runtime/notify): a slow or
        failing target never holds a tick; the targets configured now are noted first."""
        from ..notify import Notifier

        self.notifier = Notifier(self.home, lambda: self.settings)
        self.notifier.start()

    def _install_signals(self) -> None:
        aio = asyncio.get_running_loop()
        for sig, handler in ((signal.SIGTERM, lambda: self.stop("SIGTERM")),
                             (signal.SIGINT, lambda: self.stop("SIGINT")),
                             (process.WAKE_SIGNAL, self.wake)):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                aio.add_signal_handler(sig, handler)
                self._signals.append(sig)

    def _remove_signals(self) -> None:
        aio = asyncio.get_running_loop()
        for sig in self._signals:
            aio.remove_signal_handler(sig)
        self._signals = []
        with contextlib.suppress(ValueError):
            signal.signal(process.WAKE_SIGNAL, signal.SIG_IGN)  # until the lock is gone

    def _start_server(self) -> None:
        """`[serve] enabled`: the local HTTP server (runtime/serve) in a thread of this
        process, stopped first when the loop stops. One that cannot start is a WARNING; the
        loop runs without it."""
        if not self.settings.serve.enabled:
            return
        from ..serve.server import ServerThread

        try:
            self.server = ServerThread.start(self.home, self.settings)
        except Exception as e:
            log.warning("[serve] enabled, but the HTTP server did not start (%s: %s); the "
                        "coworker runs without it: free the port or set another [serve] port, "
                        "then restart", type(e).__name__, e)

    async def _close(self, exc: BaseException | None) -> None:
        """Everything a start took, given back; an Exception is a crash, anything else (a clean
        end, a cancel, Ctrl-C) a stop."""
        crashed = exc if isinstance(exc, Exception) else None
        if isinstance(crashed, ConfigError):  # a mistake in config.toml: said as one line
            self._stop.request(f"config error: {crashed}")
            crashed = None
        if crashed is not None:
            log.critical("coworker CRASHED: %s: %s", type(crashed).__name__, crashed,
                         exc_info=crashed)
            with _or_warn("recording the crash"):
                record(self.store, "crash", f"{type(crashed).__name__}: {crashed}",
                       error=repr(crashed))
        if self.server is not None:  # first: no request comes in while the rest stops
            with _or_warn("stopping the HTTP server"):
                await asyncio.to_thread(self.server.stop)
            self.server = None
        self.state = RunState.STOPPING
        if self.scheduler is not None:
            with _or_warn("stopping the scheduler"):
                self.scheduler.shutdown()
        if crashed is None:
            with _or_warn("recording the stop"):
                record(self.store, "stop", f"coworker stopped ({self._stop.reason})",
                       reason=self._stop.reason)
            log.info("coworker stopped cleanly (%s)", self._stop.reason)
        self._remove_signals()
        if self.notifier is not None:
            with _or_warn("stopping the [[notify]] deliveries"):
                await asyncio.to_thread(self.notifier.stop, CLOSE_S * 2)
            self.notifier = None
        if self.hands is not None:
            with _or_warn("stopping the MCP servers (some may still run)"):
                await asyncio.wait_for(asyncio.shield(self.hands.stop()), CLOSE_S * 2)
            self.hands = None
        if self.model is not None:
            with _or_warn("closing the model client"):
                await asyncio.wait_for(asyncio.shield(self.model.close()), CLOSE_S)
        self._write_runfile(running=False)
        if self.claim is not None:
            with _or_warn("giving up the claim on the shared database"):
                self.claim.release()
        if self._lock is not None:
            self._lock.release()
        self.store.close()
        self.state = RunState.STOPPED

    def _after_tick(self, outcome: TickOutcome) -> None:
        self.stats.ticks += 1
        self.stats.last_tick_at = now_iso()
        self.stats.last_outcome = outcome.kind
        self.stats.history.append(outcome.kind)
        base = float(self.settings.coworker.tick_seconds)
        cap = float(self.settings.coworker.max_tick_seconds)
        if outcome.kind == Outcome.FAILED:
            self.interval = min(max(self.interval, base) * 2, cap)
            # A backlog never skips the backoff after a failure: the next attempt resumes the
            # same inputs and would fail the same way (a retry storm while the model is down).
            # The owner's own word still wakes one attempt at once (`wake`).
            self._more_pending = False
        elif outcome.active:
            self.interval = base
        elif outcome.kind in (Outcome.QUIET, Outcome.NO_ACTION, Outcome.NO_MODEL):
            self.interval = min(self.interval * 2, cap)
        soon = self._more_pending or self._wakeup.is_set()  # `_sleep` will not wait
        self._next_tick_epoch = time.time() + (0.0 if soon else self.interval)
        self._write_runfile(running=True)

    async def _sleep(self, seconds: float) -> None:
        """Wait `seconds`, less when a promise falls due sooner; a wake-up, a stop or a file
        in the inbox ends it early. No wait when more inputs wait than a turn took, unless
        the tick failed (`_after_tick`)."""
        if self._more_pending:  # a turn takes at most MAX_INPUTS_PER_TURN; go on at once
            self._more_pending = False
            await asyncio.sleep(0)  # but let a queued signal (SIGTERM) run first
            return
        seconds = self._until_due(seconds)
        if self.watches is not None and (watch := self.watches.seconds_to_next()) is not None:
            seconds = min(seconds, watch)
        deadline = time.monotonic() + seconds
        while not self.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._wakeup.wait(), min(remaining, POLL_S))
            except TimeoutError:
                try:
                    waiting = inbox.news(self.home.inbox)
                except OSError:  # an unreadable inbox: the tick's take logs why, this waits on
                    waiting = False
                if waiting:
                    return
                continue
            self._wakeup.clear()
            return

    def _until_due(self, seconds: float) -> float:
        """`seconds`, or less when the next promise falls due sooner (the runfile says so).
        A database that cannot say when (locked, damaged) is a WARNING and the usual sleep:
        the next tick meets the same database and records its failure."""
        try:
            due = promises_store.next_due(self.store)
        except Exception as e:
            log.warning("could not read when the next promise falls due (%s: %s); sleeping "
                        "the usual interval", type(e).__name__, e)
            return seconds
        if not due:
            return seconds
        until_due = (datetime.fromisoformat(due.replace("Z", "+00:00"))
                     - datetime.now(UTC)).total_seconds()
        seconds = max(0.0, min(seconds, until_due))
        self._next_tick_epoch = time.time() + seconds
        self._write_runfile(running=True)
        return seconds

    def _write_runfile(self, running: bool) -> None:
        try:
            process.write_runfile(self.home, self._runfile(running))
        except OSError as e:
            log.warning("could not write %s: %s", self.home.runfile, e)

    def _runfile(self, running: bool) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "running": running,
            "started_at": iso_z(datetime.fromtimestamp(self._started_epoch, UTC)),
            "started_monotonic_epoch": self._started_epoch,
            "last_tick_at": self.stats.last_tick_at,
            "last_outcome": self.stats.last_outcome,
            "next_tick_at": (iso_z(datetime.fromtimestamp(self._next_tick_epoch, UTC))
                             if self._next_tick_epoch and running else None),
            "interval_s": self.interval,
            "ticks": self.stats.ticks,
            "quiet_ticks": self.stats.quiet_ticks,
            "config_hash": self.config_hash,
            "rejected_config_hash": self._bad_hash_seen,
            "model": self.settings.model.name if self.model else None,
            "writes": "live" if self.live else "dry-run",
            "capped": self._cap.reason,
            "hands": self._hands_report(),
        }

    def _hands_report(self) -> list[dict[str, Any]] | None:
        """Each MCP server's state as the owner's page shows it (None before they start)."""
        if self.hands is None:
            return None
        try:
            return [{"name": s.name, "state": str(s.state), "reason": s.reason,
                     "tools": len(s.tools)} for s in self.hands.status()]
        except Exception as e:  # noqa: BLE001 - a report is never worth a tick
            log.warning("the hands' state could not be reported (%s: %s)", type(e).__name__, e)
            return None

    # config ------------------------------------------------------------------------------
    def reload_config(self) -> None:
        """Apply an edited config.toml; a bad edit keeps the last good config, loudly."""
        new_hash = file_hash(self.home.config_path)
        if new_hash in (self.config_hash, self._bad_hash_seen):
            return
        try:
            new = self.home.settings()
        except ConfigError as e:
            log.error("config.toml changed but is INVALID, still running on the last good "
                      "config: %s", e)
            record(self.store, "config_error", str(e))
            # report once per bad edit; config_hash stays the applied file's, so `status`
            # and doctor see that the file on disk is not the one in use
            self._bad_hash_seen = new_hash
            return
        changed = _changes(self.settings, new)
        self.settings = new
        self.config_hash = new_hash
        self._apply(changed)
        log.warning("config.toml reloaded; changed: %s",
                    ", ".join(f"{k} {v[0]!r} -> {v[1]!r}" for k, v in changed.items()) or "nothing")
        record(self.store, "config_reload", "config.toml reloaded", changed=changed)
        self._write_runfile(running=True)

    def _apply(self, changed: dict[str, list[Any]]) -> None:
        """What a changed key needs beyond the new settings: a new model client, the base
        interval, the ritual schedule."""
        if any(k.startswith("model.") for k in changed):
            old_model = self.model
            self._make_model()
            if old_model is not None:
                asyncio.get_running_loop().create_task(old_model.close())
        if any(k.startswith("coworker.tick") for k in changed):
            self.interval = float(self.settings.coworker.tick_seconds)
        if self.scheduler is not None and any(
                k.startswith("rituals.") or k == "coworker.timezone" for k in changed):
            self.scheduler.reschedule(self.settings)
        if any(k.startswith("mcp.") for k in changed):
            self._hands_changed = True  # the tick reconciles its servers before it perceives

    # the tick ----------------------------------------------------------------------------
    def perceive(self) -> ctx.Perception:
        """Take the inbox in, make what fell due an input, and choose this tick's batch."""
        batch = perception.perceive(self.home, self.store, self.settings, self._due_rituals)
        self._resume, self._more_pending = batch.resume, batch.more
        return batch.perception

    fingerprint = staticmethod(perception.fingerprint)

    async def tick(self) -> TickOutcome:
        """One tick; a non-quiet one ends with one INFO line saying what it did."""
        t0 = time.monotonic()
        self._work = TickWork()
        outcome = await self._tick()
        if outcome.kind != Outcome.QUIET:
            self._work.log(outcome, time.monotonic() - t0)
        return outcome

    async def _tick(self) -> TickOutcome:
        try:
            self.reload_config()
        except Exception:
            log.exception("config reload failed; keeping the last good config")
        await self._hands_tick()
        seen = self.perceive()
        if seen.empty():
            return self._quiet()
        digest = self.fingerprint(seen)
        if (waiting := self._inputs_wait(seen, digest)) is not None:
            return waiting
        return await take(self._turn_context(), seen, self._resume, digest)

    def _inputs_wait(self, seen: ctx.Perception, digest: str) -> TickOutcome | None:
        """A quiet outcome when no turn can be taken for these inputs: no model (they are
        reported once, then wait) or the spending cap (they wait for tomorrow). A built-in
        ritual due runs anyway."""
        if perception.builtin_due(seen):
            return None
        if self.model is None:
            if digest == self._idle_digest:  # already reported; they wait for a model
                self._more_pending = False  # nor do the ones behind them: no spinning
                return self._quiet()
            self._idle_digest = digest
            return None
        if over := self._cap.reached(self.store, self.settings):
            self._more_pending = False  # the spending cap: inputs wait for tomorrow
            self.stats.quiet_ticks += 1
            telemetry.record(self.store, "capped_tick", {"cap": over})
            return TickOutcome(Outcome.QUIET, detail=over)
        return None

    def _quiet(self) -> TickOutcome:
        self.stats.quiet_ticks += 1
        telemetry.record(self.store, "quiet_tick", {"interval_s": self.interval})
        return TickOutcome(Outcome.QUIET)

    def _turn_settings(self) -> Settings:
        """The settings a turn works with, the role text read once for it. A role file that
        went missing or unreadable (deleted, mid-save, not UTF-8) keeps the last good role
        text, loudly, once per problem, as a bad config edit keeps the last good config: the
        owner's inputs are not at fault, so no turn fails on it and nothing counts against
        them."""
        try:
            self._role_text = self.settings.role_text(self.home.root)
        except ConfigError as e:
            problem = f"{e}; still running on the last good role text"
            if problem != self._role_problem:
                self._role_problem = problem
                log.error("%s", problem)
                with contextlib.suppress(Exception):
                    record(self.store, "config_error", problem)
        else:
            if self._role_problem is not None:
                self._role_problem = None
                log.warning("[coworker] role: the role file is readable again; turns use it")
        return self.settings.with_role_text(self._role_text)

    def _turn_context(self) -> TurnContext:
        return TurnContext(home=self.home, settings=self._turn_settings(), store=self.store,
                           registry=self.registry, model=self.model, live=self.live,
                           stop=self._stop, cap=self._cap, semantic=self._semantic,
                           work=self._work, hands=self.hands)


def _changes(old: Settings, new: Settings) -> dict[str, list[Any]]:
    """The keys an edit changed, [old, new] each; an API key shows as *** both ways."""
    old_flat, new_flat = old.flat(), new.flat()
    changed = {k: [old_flat.get(k), v] for k, v in new_flat.items() if old_flat.get(k) != v}
    for k in changed:  # what may hold a credential is named, never shown
        if k.startswith("model.api_key") or k in ("notify", "hooks", "secrets", "serve.token"):
            changed[k] = ["***", "***"]
    return changed
