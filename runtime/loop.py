"""The tick and its lifecycle: perceive, decide, act, record.

Owns the loop's life (start, ticks, sleep that a wake-up cuts short, clean stop at a step
boundary on SIGTERM/SIGINT, a crash logged apart from a stop), perception (owner messages,
inbox files, due promises, due rituals) and its hash, the quiet tick (no model call, no event,
a telemetry count), the interval that doubles after quiet or no-op ticks, hot config reload,
and the turn: model call, tool calls, step cap, every step an event. A failed model call fails
the tick, never the loop. It calls context, model, tools and memory; it never speaks SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import context as ctx
from . import process
from .errors import ConfigError, ModelError
from .home import Home
from .model import Model
from .scheduler import BUILTIN, Scheduler, definitions, register_and_find_missed
from .settings import Settings, file_hash
from .store import Event, Store, now_iso, telemetry
from .store import events as ev
from .store import promises as promises_store
from .store import rituals as ritual_runs
from .tools import Registry, ToolContext, default_registry

log = logging.getLogger(__name__)

INBOX_SUFFIXES = (".txt", ".md", ".eml", "")
POLL_S = 0.5


class RunState(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


@dataclass
class TickOutcome:
    kind: str  # quiet, acted, no_action, no_model, failed, step_cap, stopped
    tick_id: int | None = None
    steps: int = 0
    detail: str = ""
    active: bool = False  # owner input or an action: resets the interval

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
                "takes no model turns. Set ANTHROPIC_API_KEY, or [model] api_key and base_url "
                "in %s for a local Anthropic-compatible server.", why, self.home.config_path)
            self._warned_no_model = True

    # lifecycle ---------------------------------------------------------------------------
    async def run(self, *, max_ticks: int | None = None) -> None:
        lock = process.PidLock(self.home)
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
        if outcome.active:
            self.interval = base
        elif outcome.kind in ("quiet", "no_action", "no_model", "failed"):
            self.interval = min(self.interval * 2, cap)
        self._next_tick_epoch = time.time() + self.interval
        self._write_runfile(running=True)

    async def _sleep(self, seconds: float) -> None:
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
                "started_at": datetime.fromtimestamp(self._started_epoch, UTC).isoformat(),
                "started_monotonic_epoch": self._started_epoch,
                "last_tick_at": self.stats.last_tick_at,
                "last_outcome": self.stats.last_outcome,
                "next_tick_at": (datetime.fromtimestamp(self._next_tick_epoch, UTC).isoformat()
                                 if self._next_tick_epoch and running else None),
                "interval_s": self.interval,
                "ticks": self.stats.ticks,
                "quiet_ticks": self.stats.quiet_ticks,
                "config_hash": self.config_hash,
                "model": self.settings.model.name if self.model else None,
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

    # perception --------------------------------------------------------------------------
    def _inbox_files(self) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(self.home.inbox) as it:
                return sorted((e for e in it if e.is_file() and not e.name.startswith(".")),
                              key=lambda e: e.name)
        except FileNotFoundError:
            return []

    def _take_inbox(self) -> None:
        """Each file in state/inbox/ becomes an owner message, then moves to inbox/done/."""
        done = self.home.inbox / "done"
        done.mkdir(parents=True, exist_ok=True)
        for entry in self._inbox_files():
            path = self.home.inbox / entry.name
            try:
                raw = path.read_bytes()
            except OSError as e:
                log.warning("inbox file %s unreadable: %s", path, e)
                continue
            digest = hashlib.sha256(raw).hexdigest()[:16]
            text = raw.decode("utf-8", errors="replace").strip()
            if text and not ev.inbox_file_seen(self.store, digest, entry.name):
                ev.append(self.store, Event.owner_message(text, "inbox", file=entry.name,
                                                          inbox_sha=digest))
            target = done / entry.name
            if target.exists():
                target = done / f"{int(time.time())}-{entry.name}"
            os.replace(path, target)

    def _cursor(self) -> int:
        last = ev.last_of_kind(self.store, "tick")
        return int(last.meta.get("cursor", 0)) if last else 0

    def perceive(self) -> ctx.Perception:
        self._take_inbox()
        cursor = self._cursor()
        prompts = {d.name: d.prompt or "" for d in definitions(self.settings)}
        due, self._pending_rituals = self._pending_rituals, []
        return ctx.Perception(
            inputs=ev.since(self.store, cursor, kinds=["message"]),
            due_promises=promises_store.due(self.store, now_iso()),
            rituals=[(name, prompts.get(name, "")) for name in due],
        )

    @staticmethod
    def fingerprint(p: ctx.Perception) -> str:
        payload = json.dumps({"inputs": [e.id for e in p.inputs],
                              "promises": [e.id for e in p.due_promises],
                              "rituals": p.rituals}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    # the tick ----------------------------------------------------------------------------
    async def tick(self) -> TickOutcome:
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
        self._first_input = min((e.id or 0 for e in perception.inputs), default=None)
        cursor = max([self._cursor(), *[e.id or 0 for e in perception.inputs]])
        tick_id = self._record(
            "tick", f"tick: {len(perception.inputs)} message(s), "
            f"{len(perception.due_promises)} promise(s) due, {len(perception.rituals)} ritual(s)",
            cursor=cursor, perception=digest, inputs=[e.id for e in perception.inputs],
            promises=[e.id for e in perception.due_promises],
            rituals=[n for n, _ in perception.rituals])
        for p in perception.due_promises:
            self._record("promise_due", p.body, tick_id=tick_id, promise_id=p.id)
        for e in perception.inputs:
            self._remember(e, tick_id)
        for name, _ in perception.rituals:
            if name in BUILTIN:
                await self._run_builtin(name, tick_id)
        perception.rituals = [(n, p) for n, p in perception.rituals if n not in BUILTIN]
        runs = [(n, ritual_runs.start(self.store, n)) for n, _ in perception.rituals]
        active = bool(perception.inputs)
        if perception.empty():
            outcome = TickOutcome("ritual", tick_id, detail="built-in rituals only")
        elif self.model is None:
            outcome = TickOutcome("no_model", tick_id, active=active,
                                  detail="inputs recorded; no model configured")
        else:
            try:
                outcome = await self._turn(tick_id, perception)
            except ModelError as e:
                log.error("tick %d failed: %s", tick_id, e)
                self._record("tick_failed", str(e), tick_id=tick_id)
                outcome = TickOutcome("failed", tick_id, detail=str(e))
            except Exception as e:  # a bug in a turn fails the tick, not the loop
                log.exception("tick %d failed unexpectedly", tick_id)
                self._record("tick_failed", f"{type(e).__name__}: {e}", tick_id=tick_id)
                outcome = TickOutcome("failed", tick_id, detail=str(e))
            outcome.active = outcome.active or active
        for _name, run_id in runs:
            status = "skipped" if outcome.kind == "no_model" else (
                "failed" if outcome.kind == "failed" else "ok")
            ritual_runs.finish(self.store, run_id, status,
                               {"tick_id": tick_id, "outcome": outcome.kind,
                                "steps": outcome.steps})
        self._record("tick_end", f"tick {tick_id}: {outcome.kind}", tick_id=tick_id,
                     outcome=outcome.kind, steps=outcome.steps)
        return outcome

    def _remember(self, e: Event, tick_id: int) -> None:
        """An owner message beginning "remember" goes to the promotion gate. A memory failure
        is logged loudly and never breaks the turn."""
        from .memory import gate

        try:
            cand = gate.from_owner_message(e)
            if cand is None:
                return
            verdict = gate.consider(self.store, self.home, self.settings, cand)
            self._record("promotion", verdict.describe(), tick_id=tick_id,
                         promotion_id=verdict.promotion_id, status=verdict.status)
        except Exception as exc:
            log.warning("could not pass owner message %s through the promotion gate (%s: %s); "
                        "the turn goes on without it", e.id, type(exc).__name__, exc)

    async def _run_builtin(self, name: str, tick_id: int) -> None:
        """Run a built-in ritual (reflect) in a worker thread with its own connection."""
        from rituals import reflect

        try:
            report = await asyncio.to_thread(reflect.run, self.home, self.settings)
        except Exception as e:  # a failed ritual is logged and recorded; the tick goes on
            log.error("ritual %s failed: %s: %s", name, type(e).__name__, e, exc_info=True)
            self._record("ritual_failed", f"{name}: {type(e).__name__}: {e}", tick_id=tick_id,
                         ritual=name)
            return
        self._record("ritual", f"{name}: archived {report.archived}, sealed "
                     f"{report.sealed or 'nothing'} in {report.seconds:.1f} s",
                     tick_id=tick_id, ritual=name, stats=report.as_stats())

    async def _turn(self, tick_id: int, perception: ctx.Perception) -> TickOutcome:
        assert self.model is not None
        prefix = ctx.build_prefix(self.home, self.settings, self.store, self.registry)
        messages: list[dict[str, Any]] = [ctx.first_message(
            ctx.staircase(self.store, self.settings, before_id=tick_id),
            ctx.inputs_text(perception))]
        acted = False
        tail = self._recall(tick_id, perception)
        cap = self.settings.coworker.max_steps_per_tick
        for step in range(1, cap + 1):
            # the recall block rides at the tail of each call, never in the history
            reply = await self.model.create(system=prefix.system, tools=prefix.tools,
                                            messages=ctx.with_tail(messages, tail))
            self._record("model_response", reply.text, tick_id=tick_id, author_kind="agent",
                         actor="coworker", step=step, model=reply.model,
                         stop_reason=reply.stop_reason, usage=reply.usage,
                         attempts=reply.attempts, tool_calls=len(reply.tool_uses))
            if not reply.tool_uses:
                kind = "acted" if acted else "no_action"
                return TickOutcome(kind, tick_id, step, active=acted)
            messages.append({"role": "assistant", "content": reply.content})
            results = []
            for use in reply.tool_uses:
                results.append(self._call_tool(tick_id, use))
                acted = True
            messages.append({"role": "user", "content": results})
            if self.stopping:  # a step boundary: stop cleanly here
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

    def _call_tool(self, tick_id: int, use: dict[str, Any]) -> dict[str, Any]:
        name = str(use.get("name", ""))
        raw = use.get("input")
        self._record("tool_call", f"{name}({json.dumps(raw, ensure_ascii=False)[:2000]})",
                     tick_id=tick_id, author_kind="agent", actor="coworker", tool=name,
                     input=raw, tool_use_id=use.get("id"))
        tctx = ToolContext(store=self.store, home_root=self.home.root, settings=self.settings,
                           tick_id=tick_id, live=self.live, first_input_id=self._first_input)
        result = self.registry.dispatch(tctx, name, raw)
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
