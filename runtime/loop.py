"""The tick and its lifecycle: perceive, decide, act, record.

Owns the loop's life (start, ticks, sleep that a wake-up cuts short, a stop on SIGTERM/SIGINT
that cancels an in-flight model call, a crash logged apart from a stop), perception (pending
inputs: messages, inbox files, due promises, due rituals) and its hash, the quiet tick (no
model call, no event, a telemetry count), the interval that doubles after quiet, no-op or
failed ticks, hot config reload, and the turn: model call, tool calls, step cap, every step an
event. An input is consumed only by a turn that completed (ADR-0012); a failed or killed turn
leaves it pending, and the next attempt replays what the last one recorded, so a live side
effect never runs twice. A failed model call fails the tick, never the loop. It calls context,
model, tools and memory; it never speaks SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import itertools
import json
import logging
import os
import signal
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import context as ctx
from . import process
from .errors import ConfigError, ModelError
from .home import Home
from .model import Model, Reply
from .scheduler import BUILTIN, Scheduler, definitions, register_and_find_missed
from .settings import Settings, file_hash
from .store import Event, Store, iso_z, now_iso, telemetry, turns, usage
from .store import events as ev
from .store import inputs as inputs_store
from .store import promises as promises_store
from .store import rituals as ritual_runs
from .tools import Registry, ToolContext, default_registry

log = logging.getLogger(__name__)

INBOX_SUFFIXES = (".txt", ".md", ".eml", "")
INBOX_FOLDERS = ("done", "rejected")
POLL_S = 0.5


NAME_MAX = 255  # bytes in one file name (ext4, APFS and NTFS alike)


def _filed_path(folder: Path, name: str, stamped: bool) -> Path:
    """Where an inbox entry is filed in `folder`: a name not taken yet (nothing filed is ever
    overwritten) that fits NAME_MAX bytes, cut at a character boundary. First `name` (done/)
    or `{time}-{name}` (rejected/), then `{time}-{name}`, then `{time}.{n}-{name}`."""
    stamp = int(time.time())
    heads = itertools.chain([f"{stamp}-" if stamped else "", f"{stamp}-"],
                            (f"{stamp}.{n}-" for n in itertools.count(1)))
    for head in heads:
        fitted = (head + name).encode("utf-8", "surrogateescape")[:NAME_MAX]
        target = folder / fitted.decode("utf-8", "ignore")
        if not os.path.lexists(target):
            return target
    raise AssertionError("unreachable: the names above never run out")


def _printable(name: str) -> str:
    """A file name as text: undecodable bytes (kept as surrogates by os) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class RunState(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


@dataclass
class TickOutcome:
    kind: str  # quiet, acted, no_action, no_model, failed, step_cap, stopped, ritual
    tick_id: int | None = None
    steps: int = 0
    detail: str = ""
    active: bool = False  # owner input or an action: resets the interval
    blames_input: bool = False  # a failure the inputs cause (a 400, a bug), counted against them

    @property
    def quiet(self) -> bool:
        return self.kind == "quiet"


@dataclass
class LoopStats:
    ticks: int = 0
    quiet_ticks: int = 0
    last_tick_at: str | None = None
    last_outcome: str | None = None
    history: list[str] = field(default_factory=list)


@dataclass
class TickWork:
    """What one tick did, for its INFO line."""

    inputs: list[int] = field(default_factory=list)
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cached: int = 0
    tools: list[str] = field(default_factory=list)
    side_effects: list[str] = field(default_factory=list)

    def count(self, reply: Reply) -> None:
        self.calls += reply.attempts
        self.tokens_in += int(reply.usage.get("input_tokens", 0))
        self.tokens_out += int(reply.usage.get("output_tokens", 0))
        self.cached += int(reply.usage.get("cache_read_input_tokens", 0))


class Loop:
    """`await Loop(home, settings).run()`; `stop()` and `wake()` only signal."""

    def __init__(self, home: Home, settings: Settings, *, live: bool | None = None,
                 registry: Registry | None = None) -> None:
        self.home = home
        self.settings = settings
        self.live_flag = live
        self.registry = registry or default_registry()
        self.scheduler: Scheduler | None = None
        self._pending_rituals: list[str] = []
        self._resume: turns.Attempt | None = None
        self._first_input: int | None = None
        self.state = RunState.STOPPED
        self.store = Store.open(home.db_path)
        self.model: Model | None = None
        self.interval = float(settings.coworker.tick_seconds)
        self.stats = LoopStats()
        self.config_hash = file_hash(home.config_path)
        self._bad_hash_seen: str | None = None
        self._wakeup = asyncio.Event()
        self._stop_reason: str | None = None
        self._started_epoch = time.time()
        self._next_tick_epoch: float | None = None
        self._warned_no_model = False
        self._idle_digest: str | None = None  # no model: the inputs already reported
        self._call: asyncio.Future[Reply] | None = None  # the model call in flight
        self._more_pending = False
        self._work = TickWork()
        self._cap_said: str | None = None
        self._capped: str | None = None
        self._make_model()

    # signals -----------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        if self.live_flag is not None:
            return self.live_flag
        return self.settings.writes.mode == "live"

    def stop(self, reason: str = "stop requested") -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
        self.state = RunState.STOPPING
        self._wakeup.set()
        if self._call is not None and not self._call.done():
            # a hung or slow model call must not hold the stop: its inputs stay pending
            self._call.cancel()

    def wake(self) -> None:
        self._wakeup.set()

    def _ritual_due(self, name: str) -> None:
        if name not in self._pending_rituals:
            self._pending_rituals.append(name)
        self._wakeup.set()

    async def _ritual_fired(self, name: str) -> None:
        """The APScheduler job: a coroutine, so it runs on the loop's own thread."""
        log.info("ritual %s is due", name)
        self._ritual_due(name)

    @property
    def stopping(self) -> bool:
        return self._stop_reason is not None

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
            self._warned_no_model = True

    # lifecycle ---------------------------------------------------------------------------
    async def run(self, *, max_ticks: int | None = None) -> None:
        lock = process.PidLock(self.home)
        # a `tell` may signal as soon as the pidfile names us, and until it is released: its
        # wake-up must never meet the default action (which ends the process)
        with contextlib.suppress(ValueError):  # not the main thread: asyncio owns signals
            signal.signal(process.WAKE_SIGNAL, signal.SIG_IGN)
        lock.acquire()
        aio = asyncio.get_running_loop()
        installed = []
        for sig, handler in ((signal.SIGTERM, lambda: self.stop("SIGTERM")),
                             (signal.SIGINT, lambda: self.stop("SIGINT")),
                             (process.WAKE_SIGNAL, self.wake)):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                aio.add_signal_handler(sig, handler)
                installed.append(sig)
        self.state = RunState.STARTING
        self._record("start", f"coworker started (pid {os.getpid()})", pid=os.getpid(),
                     model=self.settings.model.name if self.model else None,
                     writes="live" if self.live else "dry-run")
        log.info("coworker started in %s (pid %d, writes %s)", self.home.root, os.getpid(),
                 "live" if self.live else "dry-run")
        crashed: BaseException | None = None
        try:
            for name in register_and_find_missed(self.store, self.settings):
                self._ritual_due(name)
            self.scheduler = Scheduler(self.settings, self._ritual_fired)
            self.scheduler.start()
            self.state = RunState.RUNNING
            while not self.stopping:
                try:
                    outcome = await self.tick()
                except Exception as e:  # e.g. the database locked past its timeout
                    log.error("tick failed (%s: %s); the loop goes on", type(e).__name__, e,
                              exc_info=True)
                    with contextlib.suppress(Exception):
                        self._record("tick_failed", f"{type(e).__name__}: {e}")
                    outcome = TickOutcome("failed", detail=str(e))
                self._after_tick(outcome)
                if max_ticks is not None and self.stats.ticks >= max_ticks:
                    self.stop(f"ran {max_ticks} tick(s)")
                    break
                await self._sleep(self.interval)
        except Exception as e:
            crashed = e
            log.critical("coworker CRASHED: %s: %s", type(e).__name__, e, exc_info=True)
            with contextlib.suppress(Exception):
                self._record("crash", f"{type(e).__name__}: {e}", error=repr(e))
            raise
        finally:
            self.state = RunState.STOPPED
            if self.scheduler is not None:
                with contextlib.suppress(Exception):
                    self.scheduler.shutdown()
            if crashed is None:
                with contextlib.suppress(Exception):
                    self._record("stop", f"coworker stopped ({self._stop_reason})",
                                 reason=self._stop_reason)
                log.info("coworker stopped cleanly (%s)", self._stop_reason)
            for sig in installed:
                aio.remove_signal_handler(sig)
            with contextlib.suppress(ValueError):
                signal.signal(process.WAKE_SIGNAL, signal.SIG_IGN)  # until the lock is gone
            if self.model is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(self.model.close()), 5)
            self._write_runfile(running=False)
            lock.release()
            self.store.close()

    def _after_tick(self, outcome: TickOutcome) -> None:
        self.stats.ticks += 1
        self.stats.last_tick_at = now_iso()
        self.stats.last_outcome = outcome.kind
        self.stats.history.append(outcome.kind)
        base = float(self.settings.coworker.tick_seconds)
        cap = float(self.settings.coworker.max_tick_seconds)
        if outcome.kind == "failed":
            self.interval = min(max(self.interval, base) * 2, cap)
        elif outcome.active:
            self.interval = base
        elif outcome.kind in ("quiet", "no_action", "no_model"):
            self.interval = min(self.interval * 2, cap)
        self._next_tick_epoch = time.time() + self.interval
        self._write_runfile(running=True)

    async def _sleep(self, seconds: float) -> None:
        if self._more_pending:  # a turn takes at most max_inputs_per_turn; go on at once
            self._more_pending = False
            await asyncio.sleep(0)  # but let a queued signal (SIGTERM) run first
            return
        due = promises_store.next_due(self.store)
        if due:
            until_due = (datetime.fromisoformat(due.replace("Z", "+00:00"))
                         - datetime.now(UTC)).total_seconds()
            seconds = max(0.0, min(seconds, until_due))
            self._next_tick_epoch = time.time() + seconds
            self._write_runfile(running=True)
        deadline = time.monotonic() + seconds
        while not self.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._wakeup.wait(), min(remaining, POLL_S))
            except TimeoutError:
                if self._inbox_files():
                    return
                continue
            self._wakeup.clear()
            return

    def _write_runfile(self, running: bool) -> None:
        try:
            process.write_runfile(self.home, {
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
                "capped": self._capped,
            })
        except OSError as e:
            log.warning("could not write %s: %s", self.home.runfile, e)

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
            self._record("config_error", str(e))
            # report once per bad edit; config_hash stays the applied file's, so `status`
            # and doctor see that the file on disk is not the one in use
            self._bad_hash_seen = new_hash
            return
        old_flat, new_flat = self.settings.flat(), new.flat()
        changed = {k: [old_flat.get(k), v] for k, v in new_flat.items() if old_flat.get(k) != v}
        for k in changed:
            if k.startswith("model.api_key"):
                changed[k] = ["***", "***"]
        self.settings = new
        self.config_hash = new_hash
        if any(k.startswith("model.") for k in changed):
            old_model = self.model
            self._make_model()
            if old_model is not None:
                asyncio.get_running_loop().create_task(old_model.close())
        if any(k.startswith("coworker.tick") for k in changed):
            self.interval = float(new.coworker.tick_seconds)
        if self.scheduler is not None and any(
                k.startswith("rituals.") or k == "coworker.timezone" for k in changed):
            self.scheduler.reschedule(new)
        log.warning("config.toml reloaded; changed: %s",
                    ", ".join(f"{k} {v[0]!r} -> {v[1]!r}" for k, v in changed.items()) or "nothing")
        self._record("config_reload", "config.toml reloaded", changed=changed)
        self._write_runfile(running=True)

    # the spending cap ---------------------------------------------------------------------
    def _cap_reached(self) -> str | None:
        """Which daily cap ([model] daily_tokens, daily_calls) today's usage reached, if any;
        said once a day at WARNING. Until the next day (UTC) no model call is made."""
        cfg = self.settings.model
        if not (cfg.daily_tokens or cfg.daily_calls):
            return None
        used = usage.today(self.store)
        reason = None
        if cfg.daily_tokens and used.tokens >= cfg.daily_tokens:
            reason = f"daily_tokens {cfg.daily_tokens} reached ({used.tokens} used today)"
        elif cfg.daily_calls and used.calls >= cfg.daily_calls:
            reason = f"daily_calls {cfg.daily_calls} reached ({used.calls} calls today)"
        day = usage.day_start()
        if reason and self._cap_said != day:
            self._cap_said = day
            log.warning("SPENDING CAP: [model] %s; no more model calls until 00:00 UTC, inputs "
                        "wait (raise it in config.toml to go on now)", reason)
            self._record("spending_cap", f"[model] {reason}; model calls resume tomorrow",
                         reason=reason)
        self._capped = reason
        return reason

    # perception --------------------------------------------------------------------------
    def _inbox_files(self) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(self.home.inbox) as it:
                return sorted((e for e in it if not e.name.startswith(".")
                               and e.name not in INBOX_FOLDERS), key=lambda e: e.name)
        except FileNotFoundError:
            return []

    def _reject_inbox(self, entry: os.DirEntry[str], why: str) -> None:
        """Move a bad inbox entry aside (the entry itself, never what a link points at)."""
        rejected = self.home.inbox / "rejected"
        rejected.mkdir(parents=True, exist_ok=True)
        shown = _printable(entry.name)
        target = _filed_path(rejected, shown, stamped=True)
        try:
            os.replace(entry.path, target)
        except OSError as e:
            log.error("inbox entry %r is not readable as a message (%s) and could not be moved "
                      "aside (%s); remove it by hand", shown, why, e)
            return
        log.warning("inbox entry %r is not read as a message: %s; moved to %s", shown, why,
                    target)

    def _take_inbox(self) -> None:
        """Each regular file in state/inbox/ owned by this user becomes an owner message (an
        input), then moves to inbox/done/. Anything else (a link, a folder, another user's
        file, a name that is not UTF-8, an unreadable file) is moved to inbox/rejected/."""
        done = self.home.inbox / "done"
        done.mkdir(parents=True, exist_ok=True)
        for entry in self._inbox_files():
            path = self.home.inbox / entry.name
            if _printable(entry.name) != entry.name:
                self._reject_inbox(entry, "its name is not UTF-8 text")
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                self._reject_inbox(entry, "not a regular file (a link, folder or device)")
                continue
            if st.st_uid != os.geteuid():
                self._reject_inbox(entry, f"owned by uid {st.st_uid}, not by you")
                continue
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                with os.fdopen(fd, "rb") as f:
                    raw = f.read()
            except OSError as e:
                self._reject_inbox(entry, f"unreadable ({e.strerror or e})")
                continue
            digest = hashlib.sha256(raw).hexdigest()[:16]
            text = raw.decode("utf-8", errors="replace").strip()
            if text and not ev.inbox_file_seen(self.store, digest, entry.name):
                inputs_store.add_message(self.store, Event.owner_message(
                    text, "inbox", file=entry.name, inbox_sha=digest))
            try:
                os.replace(path, _filed_path(done, entry.name, stamped=False))
            except OSError as e:  # it was read; it must not be read again next tick
                self._reject_inbox(entry, f"could not be moved to done/ ({e.strerror or e})")

    def _queue_due(self) -> None:
        """Promises that fell due and rituals the scheduler marked become inputs."""
        for p in promises_store.due(self.store, now_iso()):
            inputs_store.add(self.store, Event(
                kind="promise_due", body=p.body, actor="coworker", author_kind="system",
                meta={"promise_id": p.id, "made": p.ts, "due": p.meta.get("due")}), "promise")
        prompts = {d.name: d.prompt or "" for d in definitions(self.settings)}
        due, self._pending_rituals = self._pending_rituals, []
        for name in due:
            if inputs_store.pending_ritual(self.store, name):
                continue
            inputs_store.add(self.store, Event(
                kind="ritual_due", body=f"ritual {name} is due", actor="coworker",
                author_kind="system", meta={"ritual": name, "prompt": prompts.get(name, "")}),
                "ritual")

    def _batch(self) -> tuple[list[inputs_store.Input], turns.Attempt | None]:
        """This turn's inputs, and the unfinished attempt it replays (if any).

        An attempt that did not complete (killed, stopped, failed) and whose inputs are all
        still pending is taken up again with exactly those inputs, so its recorded steps can be
        replayed. After a failure its inputs caused, the oldest input goes alone, so a poison
        input is set aside by itself and the inputs behind it go on."""
        pending = inputs_store.pending(self.store)
        batch, resume = self._choose(pending)
        # a turn takes at most max_inputs_per_turn: when more wait, the next tick comes at once
        self._more_pending = len(pending) > len(batch)
        return batch, resume

    def _choose(self, pending: list[inputs_store.Input]
                ) -> tuple[list[inputs_store.Input], turns.Attempt | None]:
        if not pending:
            return [], None
        by_id = {i.id: i for i in pending}
        last = turns.last_attempt(self.store)
        if (last is not None and last.outcome in turns.RESUMABLE and last.inputs
                and all(i in by_id for i in last.inputs)):
            batch = [by_id[i] for i in last.inputs]
            if len(batch) == 1 or all(i.failures == 0 for i in batch):
                return batch, last
        if pending[0].failures > 0:
            return [pending[0]], None
        return pending[: self.settings.coworker.max_inputs_per_turn], None

    def perceive(self) -> ctx.Perception:
        self._take_inbox()
        self._queue_due()
        batch, self._resume = self._batch()
        p = ctx.Perception(input_ids=[i.id for i in batch])
        for item in batch:
            e = item.event
            if item.kind == "message":
                p.inputs.append(e)
            elif item.kind == "promise":
                p.due_promises.append(e)
            else:
                name = str(e.meta.get("ritual", ""))
                p.rituals.append((name, str(e.meta.get("prompt") or "")))
                p.ritual_inputs[name] = item.id
        return p

    @staticmethod
    def fingerprint(p: ctx.Perception) -> str:
        payload = json.dumps({"inputs": p.input_ids, "rituals": p.rituals}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    # the tick ----------------------------------------------------------------------------
    async def tick(self) -> TickOutcome:
        """One tick; a non-quiet one ends with one INFO line saying what it did."""
        t0 = time.monotonic()
        self._work = TickWork()
        outcome = await self._tick()
        if outcome.kind != "quiet":
            w = self._work
            log.info("tick %s %s: %d input(s)%s, %d model call(s), tokens in %d out %d cached "
                     "%d, tools: %s, side effects: %s, %.1f s", outcome.tick_id, outcome.kind,
                     len(w.inputs), f" ({', '.join(f'#{i}' for i in w.inputs)})" if w.inputs
                     else "", w.calls, w.tokens_in, w.tokens_out, w.cached,
                     ", ".join(w.tools) or "none", ", ".join(w.side_effects) or "none",
                     time.monotonic() - t0)
        return outcome

    async def _tick(self) -> TickOutcome:
        try:
            self.reload_config()
        except Exception:
            log.exception("config reload failed; keeping the last good config")
        perception = self.perceive()
        if perception.empty():
            self.stats.quiet_ticks += 1
            telemetry.record(self.store, "quiet_tick", {"interval_s": self.interval})
            return TickOutcome("quiet")
        digest = self.fingerprint(perception)
        builtin_due = [n for n, _ in perception.rituals if n in BUILTIN]
        if self.model is None and not builtin_due:
            if digest == self._idle_digest:  # already reported; they wait for a model
                self._more_pending = False  # nor do the ones behind them: no spinning
                self.stats.quiet_ticks += 1
                telemetry.record(self.store, "quiet_tick", {"interval_s": self.interval})
                return TickOutcome("quiet")
            self._idle_digest = digest
        if self.model is not None and not builtin_due and (over := self._cap_reached()):
            self._more_pending = False  # the spending cap: inputs wait for tomorrow
            self.stats.quiet_ticks += 1
            telemetry.record(self.store, "capped_tick", {"cap": over})
            return TickOutcome("quiet", detail=over)
        resume = self._resume
        self._first_input = min(perception.input_ids, default=None)
        self._work.inputs = list(perception.input_ids)
        tick_id = self._record(
            "tick", f"tick: {len(perception.inputs)} message(s), "
            f"{len(perception.due_promises)} promise(s) due, {len(perception.rituals)} ritual(s)"
            + (f"; takes up tick {resume.tick_id} again" if resume else ""),
            perception=digest, inputs=perception.input_ids,
            resumes=resume.tick_id if resume else None,
            rituals=[n for n, _ in perception.rituals])
        for e in perception.inputs:
            self._remember(e, tick_id)
        for name in builtin_due:
            await self._run_builtin(name, tick_id, perception.ritual_inputs[name])
        perception.rituals = [(n, p) for n, p in perception.rituals if n not in BUILTIN]
        turn_inputs = [i for i in perception.input_ids
                       if i not in {perception.ritual_inputs[n] for n in builtin_due}]
        runs = [(n, ritual_runs.start(self.store, n)) for n, _ in perception.rituals]
        active = bool(perception.inputs)
        if perception.empty():
            outcome = TickOutcome("ritual", tick_id, detail="built-in rituals only")
        elif self.model is None:
            outcome = TickOutcome("no_model", tick_id, active=active,
                                  detail="inputs wait for a model; none is configured")
        else:
            try:
                outcome = await self._turn(tick_id, perception, resume)
            except ModelError as e:
                log.error("tick %d failed: %s", tick_id, e)
                self._work.calls += e.attempts
                self._record("tick_failed", str(e), tick_id=tick_id, attempts=e.attempts)
                outcome = TickOutcome("failed", tick_id, detail=str(e),
                                      blames_input=e.blames_input)
            except Exception as e:  # a bug in a turn fails the tick, not the loop
                log.exception("tick %d failed unexpectedly", tick_id)
                self._record("tick_failed", f"{type(e).__name__}: {e}", tick_id=tick_id)
                outcome = TickOutcome("failed", tick_id, detail=f"{type(e).__name__}: {e}",
                                      blames_input=True)
            outcome.active = outcome.active or (active and outcome.kind != "failed")
        for _name, run_id in runs:
            status = "skipped" if outcome.kind == "no_model" else (
                "ok" if outcome.kind in turns.COMPLETED else outcome.kind)
            ritual_runs.finish(self.store, run_id, status,
                               {"tick_id": tick_id, "outcome": outcome.kind,
                                "steps": outcome.steps})
        end = Event(kind="tick_end", body=f"tick {tick_id}: {outcome.kind}", actor="coworker",
                    author_kind="system", tick_id=tick_id,
                    meta={"outcome": outcome.kind, "steps": outcome.steps,
                          "inputs": turn_inputs})
        if outcome.kind in turns.COMPLETED:
            inputs_store.finish_turn(self.store, tick_id, turn_inputs, end)
            return outcome
        if outcome.kind == "failed" and turn_inputs:
            self._count_failure(tick_id, turn_inputs, outcome)
        ev.append(self.store, end)
        return outcome

    def _count_failure(self, tick_id: int, ids: list[int], outcome: TickOutcome) -> None:
        """A failure the inputs caused counts against them (3 in a row: set aside); an outage
        counts against nothing and the inputs simply wait."""
        if not outcome.blames_input:
            inputs_store.note_error(self.store, ids, outcome.detail)
            return
        for event_id in inputs_store.fail(self.store, ids, outcome.detail):
            log.warning("input %d failed %d turns in a row and is SET ASIDE (last: %s); the "
                        "inputs behind it go on. `coworker retry %d` puts it back", event_id,
                        inputs_store.MAX_FAILURES, outcome.detail, event_id)
            self._record("input_set_aside", f"input {event_id} set aside after "
                         f"{inputs_store.MAX_FAILURES} failed turns: {outcome.detail}",
                         tick_id=tick_id, input_id=event_id)

    def _remember(self, e: Event, tick_id: int) -> None:
        """A message beginning "remember" goes to the promotion gate: the owner's may apply,
        another agent's (MCP) is always queued. A memory failure is logged loudly and never
        breaks the turn."""
        from .memory import gate

        try:
            cand = gate.from_message(e)
            if cand is None or e.id is None or turns.gated(self.store, e.id):
                return
            verdict = gate.consider(self.store, self.home, self.settings, cand)
            self._record("promotion", verdict.describe(), tick_id=tick_id, input_id=e.id,
                         promotion_id=verdict.promotion_id, status=verdict.status)
        except Exception as exc:
            log.warning("could not pass message %s through the promotion gate (%s: %s); "
                        "the turn goes on without it", e.id, type(exc).__name__, exc)

    async def _run_builtin(self, name: str, tick_id: int, input_id: int) -> None:
        """Run a built-in ritual (reflect) in a worker thread with its own connection. Its
        input is consumed when it ran to its end; a failure counts against it like a turn's."""
        from rituals import reflect

        try:
            report = await asyncio.to_thread(reflect.run, self.home, self.settings)
        except Exception as e:  # a failed ritual is logged and recorded; the tick goes on
            log.error("ritual %s failed: %s: %s", name, type(e).__name__, e, exc_info=True)
            self._record("ritual_failed", f"{name}: {type(e).__name__}: {e}", tick_id=tick_id,
                         ritual=name)
            self._count_failure(tick_id, [input_id], TickOutcome(
                "failed", tick_id, detail=f"{type(e).__name__}: {e}", blames_input=True))
            return
        self._record("ritual", f"{name}: archived {report.archived}, sealed "
                     f"{report.sealed or 'nothing'} in {report.seconds:.1f} s",
                     tick_id=tick_id, ritual=name, stats=report.as_stats())
        inputs_store.consume(self.store, [input_id], tick_id)

    async def _turn(self, tick_id: int, perception: ctx.Perception,
                    resume: turns.Attempt | None = None) -> TickOutcome:
        """Model calls and tool calls until the model ends its turn or the step cap. Taking up
        an unfinished attempt again, the steps it recorded are replayed (its responses and its
        tool results) instead of asked and run again; only what it never recorded is new."""
        assert self.model is not None
        prefix = ctx.build_prefix(self.home, self.settings, self.store, self.registry)
        messages: list[dict[str, Any]] = [ctx.first_message(
            ctx.staircase(self.store, self.settings, before_id=tick_id),
            ctx.inputs_text(perception))]
        recorded, done = turns.recorded(self.store, resume.tick_id) if resume else ([], {})
        acted = False
        tail = self._recall(tick_id, perception)
        cap = self.settings.coworker.max_steps_per_tick
        for step in range(1, cap + 1):
            if step <= len(recorded):
                reply = Reply(content=recorded[step - 1], stop_reason="replayed",
                              model="replayed", attempts=0)
            else:
                if over := self._cap_reached():  # mid-turn: stop here, the inputs wait
                    return TickOutcome("capped", tick_id, step - 1, detail=over)
                # the recall block rides at the tail of each call, never in the history
                self._call = asyncio.ensure_future(self.model.create(
                    system=prefix.system, tools=prefix.tools,
                    messages=ctx.with_tail(messages, tail)))
                try:
                    reply = await self._call
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if self.stopping and task is not None and not task.cancelling():
                        log.warning("tick %d: the model call in flight was cancelled by %s; "
                                    "its inputs stay pending", tick_id, self._stop_reason)
                        return TickOutcome("stopped", tick_id, step - 1, active=True,
                                           detail=self._stop_reason or "")
                    raise
                finally:
                    self._call = None
            self._work.count(reply)
            self._record("model_response", reply.text, tick_id=tick_id, author_kind="agent",
                         actor="coworker", step=step, model=reply.model,
                         stop_reason=reply.stop_reason, usage=reply.usage,
                         attempts=reply.attempts, tool_calls=len(reply.tool_uses),
                         content=reply.content,
                         replayed_from=resume.tick_id if step <= len(recorded) and resume
                         else None)
            if not reply.tool_uses:
                kind = "acted" if acted else "no_action"
                return TickOutcome(kind, tick_id, step, active=acted)
            messages.append({"role": "assistant", "content": reply.content})
            results = []
            for use in reply.tool_uses:
                results.append(self._call_tool(tick_id, use, done))
                acted = True
            messages.append({"role": "user", "content": results})
            if self.stopping:  # a step boundary: stop here; the inputs stay pending
                return TickOutcome("stopped", tick_id, step, active=True,
                                   detail=self._stop_reason or "")
        self._record("step_cap", f"step cap of {cap} model calls reached; tick ends here",
                     tick_id=tick_id, cap=cap)
        log.warning("tick %d hit the step cap (%d)", tick_id, cap)
        return TickOutcome("step_cap", tick_id, cap, active=acted)

    def _semantic(self) -> tuple[Any, Any] | None:
        """(embedder, vectors) when the semantic channel is on; vectors reload when they grew."""
        from .memory import embed as em
        from .store import vectors as vs

        embedder = em.make_embedder(self.settings.semantic)
        if embedder is None:
            return None
        n = vs.count(self.store, embedder.name)
        cached = getattr(self, "_matrix", None)
        if cached is None or cached[0] != (embedder.name, n):
            self._matrix = ((embedder.name, n), em.Matrix.load(self.store, embedder.name))
        return embedder, self._matrix[1]

    def _recall(self, tick_id: int, perception: ctx.Perception) -> str | None:
        """The recall reflex: what memory says about this tick's input, within the budget.
        A failure is logged at WARNING and the turn goes on without it."""
        from .memory.recall import Budget, recall, recall_hybrid

        cfg = self.settings.recall
        if cfg.mode == "off" or cfg.max_items == 0:
            return None
        text = "\n".join([*(e.body for e in perception.inputs),
                          *(e.body for e in perception.due_promises),
                          *(prompt for _, prompt in perception.rituals)])
        budget = Budget(cfg.max_items, cfg.item_chars, cfg.total_chars)
        try:
            before = self._first_input or tick_id
            semantic = self._semantic()
            if semantic is None:
                found = recall(self.store, text, before_id=before, k=cfg.max_items,
                               max_terms=cfg.max_terms)
            else:
                found = recall_hybrid(self.store, text, embedder=semantic[0], matrix=semantic[1],
                                      gate=self.settings.semantic.gate, before_id=before,
                                      k=cfg.max_items, max_terms=cfg.max_terms)
            block = found.block(budget)
            inject = cfg.mode == "on" and block is not None
            ids = ", ".join(f"#{h.event.id}" for h in found.hits[: cfg.max_items]) or "nothing"
            self._record("recall", f"recalled {ids}" + ("" if inject else " (not injected: "
                         f"{'dry-run' if cfg.mode == 'dry-run' else 'nothing found'})"),
                         tick_id=tick_id, injected=inject, mode=cfg.mode,
                         chars=len(block or ""), block=block if cfg.mode == "dry-run" else None,
                         **found.as_meta(budget))
            telemetry.record(self.store, "recall", {"ms": round(found.ms, 3),
                                                    "items": len(found.hits), "injected": inject})
            return block if inject else None
        except Exception as e:
            log.warning("recall failed (%s: %s); the turn goes on without it",
                        type(e).__name__, e, exc_info=True)
            return None

    def _call_tool(self, tick_id: int, use: dict[str, Any],
                   done: dict[str, tuple[str, bool]] | None = None) -> dict[str, Any]:
        """Run one tool call; a call whose result an earlier attempt recorded is not run again,
        its recorded result is used."""
        from .tools import ToolResult

        name = str(use.get("name", ""))
        raw = use.get("input")
        use_id = use.get("id") if isinstance(use.get("id"), str) else None
        self._record("tool_call", f"{name}({json.dumps(raw, ensure_ascii=False)[:2000]})",
                     tick_id=tick_id, author_kind="agent", actor="coworker", tool=name,
                     input=raw, tool_use_id=use_id)
        if use_id is not None and done and use_id in done:
            result = ToolResult(*done[use_id])
        else:
            tctx = ToolContext(store=self.store, home_root=self.home.root,
                               settings=self.settings, tick_id=tick_id, live=self.live,
                               first_input_id=self._first_input, tool_use_id=use_id)
            result = self.registry.dispatch(tctx, name, raw)
        self._work.tools.append(name)
        tool = self.registry.get(name)
        if tool is not None and tool.side_effect and not result.is_error:
            if result.text.startswith("dry-run"):
                self._work.side_effects.append(f"{name} (dry-run)")
            elif result.text.startswith("not repeated"):
                self._work.side_effects.append(f"{name} (not repeated)")
            else:
                self._work.side_effects.append(f"{name} (live)")
                log.info("LIVE side effect: %s (tool_use %s, tick %d): %s", name, use_id,
                         tick_id, result.text[:300])
        if result.is_error:
            log.warning("tool call %s came back as an error: %s", name, result.text)
        self._record("tool_result", result.text, tick_id=tick_id, author_kind="tool",
                     actor=name or "unknown-tool", tool=name, is_error=result.is_error,
                     tool_use_id=use.get("id"))
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use.get("id"),
                                 "content": result.text}
        if result.is_error:
            block["is_error"] = True
        return block

    # recording ---------------------------------------------------------------------------
    def _record(self, kind: str, body: str, *, tick_id: int | None = None,
                author_kind: str = "system", actor: str = "coworker", **meta: Any) -> int:
        return ev.append(self.store, Event(kind=kind, body=body, actor=actor,
                                           author_kind=author_kind, meta=meta, tick_id=tick_id))
