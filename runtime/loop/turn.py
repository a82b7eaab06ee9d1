"""One turn: from its `tick` event to its `tick_end`.

Owns what a tick does once it takes a turn: the `tick` event, the promotion gate for messages
that begin "remember", the built-in rituals (reflect, in a worker thread), the recall block,
the model calls and tool calls up to the step cap (every step an event), the replay of what an
unfinished attempt recorded, the spending cap mid-turn, a stop at a step boundary or during a
model call, and failure accounting. An input is consumed only by a turn that completed
(ADR-0012); a failed or killed turn leaves it pending, and the next attempt replays what the
last one recorded (its responses and its tool results), so a live side effect never runs
twice. A failed model call fails the tick, never the loop. It calls context, model, tools and
memory through their own modules; it never speaks SQL and never decides when a tick runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import context as ctx
from ..errors import ModelError, StoreError, StoreRefused
from ..home import Home
from ..model import Model, Reply
from ..scheduler import BUILTIN
from ..settings import Settings
from ..store import Event, Store, telemetry, turns
from ..store import events as ev
from ..store import inputs as inputs_store
from ..store import rituals as ritual_runs
from ..tools import Registry, ToolContext, ToolResult
from ..tools.outbox import answer_in_text
from .perception import builtin_due
from .record import record
from .spending import SpendingCap
from .state import Outcome, Stop, TickOutcome

if TYPE_CHECKING:
    from ..memory.embed import SemanticCache

log = logging.getLogger("runtime.loop")  # one logger for the whole loop, as before the split
MAX_STEPS_PER_TICK = 8  # model calls one turn makes at most (was [coworker] max_steps_per_tick)


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

    def log(self, outcome: TickOutcome, seconds: float) -> None:
        log.info("tick %s %s: %d input(s)%s, %d model call(s), tokens in %d out %d cached "
                 "%d, tools: %s, side effects: %s, %.1f s", outcome.tick_id, outcome.kind,
                 len(self.inputs), f" ({', '.join(f'#{i}' for i in self.inputs)})"
                 if self.inputs else "", self.calls, self.tokens_in, self.tokens_out,
                 self.cached, ", ".join(self.tools) or "none",
                 ", ".join(self.side_effects) or "none", seconds)


@dataclass
class TurnContext:
    """What a turn works with. The loop builds one each tick: a config reload may have
    changed the settings and the model since the last."""

    home: Home
    settings: Settings
    store: Store
    registry: Registry
    model: Model | None
    live: bool
    stop: Stop
    cap: SpendingCap
    semantic: SemanticCache
    work: TickWork
    hands: Any = None  # runtime.hands.hands.Hands when [[mcp.servers]] are configured


async def take(tc: TurnContext, perception: ctx.Perception, resume: turns.Attempt | None,
               digest: str) -> TickOutcome:
    """The tick's turn over `perception`: its inputs are consumed if it completes."""
    tc.work.inputs = list(perception.input_ids)
    tick_id = _record_tick(tc, perception, resume, digest)
    for e in perception.inputs:
        _remember(tc, e, tick_id)
    builtins = builtin_due(perception)
    for name in builtins:
        await _run_builtin(tc, name, tick_id, perception.ritual_inputs[name])
    perception.rituals = [(n, p) for n, p in perception.rituals if n not in BUILTIN]
    ran = {perception.ritual_inputs[n] for n in builtins}
    turn_inputs = [i for i in perception.input_ids if i not in ran]
    runs = [(n, ritual_runs.take_up(tc.store, n)) for n, _ in perception.rituals]
    outcome = await _outcome(tc, tick_id, perception, resume)
    for _name, run_id in runs:
        status = "skipped" if outcome.kind == Outcome.NO_MODEL else (
            "ok" if outcome.kind in turns.COMPLETED else outcome.kind)
        ritual_runs.finish(tc.store, run_id, status, {"tick_id": tick_id, "outcome": outcome.kind,
                                                      "steps": outcome.steps})
    _end(tc, tick_id, turn_inputs, outcome)
    return outcome


def _record_tick(tc: TurnContext, perception: ctx.Perception, resume: turns.Attempt | None,
                 digest: str) -> int:
    extra: dict[str, Any] = {"watch_only": True} if watch_only(perception) else {}
    return record(
        tc.store, "tick", f"tick: {len(perception.inputs)} message(s), "
        f"{len(perception.due_promises)} promise(s) due, {len(perception.rituals)} ritual(s)"
        + (f"; takes up tick {resume.tick_id} again" if resume else ""),
        perception=digest, inputs=perception.input_ids,
        resumes=resume.tick_id if resume else None,
        rituals=[n for n, _ in perception.rituals], **extra)


def watch_only(p: ctx.Perception) -> bool:
    """Whether only watches' changes wake this turn (their calls count against
    loop.hands.WATCH_DAILY_CALLS)."""
    return (bool(p.inputs) and not p.due_promises and not p.rituals
            and all(e.kind == "watch_change" for e in p.inputs))


async def _outcome(tc: TurnContext, tick_id: int, perception: ctx.Perception,
                   resume: turns.Attempt | None) -> TickOutcome:
    """The model turn, if there is one to take; a failed one fails the tick, not the loop."""
    active = bool(perception.inputs)
    if perception.empty():
        return TickOutcome(Outcome.RITUAL, tick_id, detail="built-in rituals only")
    if tc.model is None:
        return TickOutcome(Outcome.NO_MODEL, tick_id, active=active,
                           detail="inputs wait for a model; none is configured")
    try:
        outcome = await Turn(tc, tick_id, perception, resume).run()
    except ModelError as e:
        log.error("tick %d failed: %s", tick_id, e)
        tc.work.calls += e.attempts
        record(tc.store, "tick_failed", str(e), tick_id=tick_id, attempts=e.attempts)
        outcome = TickOutcome(Outcome.FAILED, tick_id, detail=str(e),
                              blames_input=e.blames_input)
    except Exception as e:
        outcome = _failed(tc, tick_id, e)
    outcome.active = outcome.active or (active and outcome.kind != Outcome.FAILED)
    return outcome


def _failed(tc: TurnContext, tick_id: int, e: Exception) -> TickOutcome:
    """A turn that raised. The database held or failed (a StoreError): an outage, not the
    input's, which waits counted against nothing. Anything else, a write the database's rules
    refused (StoreRefused) included, is a bug of the turn: it fails the tick, not the loop,
    and counts against its inputs."""
    detail = f"{type(e).__name__}: {e}"
    if isinstance(e, StoreError) and not isinstance(e, StoreRefused):
        log.warning("tick %d failed: the database failed (%s); its inputs wait, counted "
                    "against nothing", tick_id, e)
        return TickOutcome(Outcome.FAILED, tick_id, detail=detail)
    log.exception("tick %d failed unexpectedly", tick_id)
    record(tc.store, "tick_failed", detail, tick_id=tick_id)
    return TickOutcome(Outcome.FAILED, tick_id, detail=detail, blames_input=True)


def _end(tc: TurnContext, tick_id: int, turn_inputs: list[int], outcome: TickOutcome) -> None:
    """The `tick_end` event; a completed turn consumes its inputs in the same transaction."""
    end = Event(kind="tick_end", body=f"tick {tick_id}: {outcome.kind}", actor="coworker",
                author_kind="system", tick_id=tick_id,
                meta={"outcome": outcome.kind, "steps": outcome.steps, "inputs": turn_inputs})
    if outcome.kind in turns.COMPLETED:
        inputs_store.finish_turn(tc.store, tick_id, turn_inputs, end)
        return
    if outcome.kind == Outcome.FAILED and turn_inputs:
        count_failure(tc.store, tick_id, turn_inputs, outcome)
    ev.append(tc.store, end)


def count_failure(store: Store, tick_id: int, ids: list[int], outcome: TickOutcome) -> None:
    """A failure the inputs caused counts against them (3 in a row: set aside); an outage
    counts against nothing and the inputs simply wait."""
    if not outcome.blames_input:
        inputs_store.note_error(store, ids, outcome.detail)
        return
    for event_id in inputs_store.fail(store, ids, outcome.detail):
        log.warning("input %d failed %d turns in a row and is SET ASIDE (last: %s); the "
                    "inputs behind it go on. `coworker retry %d` puts it back", event_id,
                    inputs_store.MAX_FAILURES, outcome.detail, event_id)
        record(store, "input_set_aside", f"input {event_id} set aside after "
               f"{inputs_store.MAX_FAILURES} failed turns: {outcome.detail}",
               tick_id=tick_id, input_id=event_id)


def _remember(tc: TurnContext, e: Event, tick_id: int) -> None:
    """A message beginning "remember" goes to the promotion gate: the owner's may apply,
    another agent's (MCP) is always queued. A memory failure is logged loudly and never
    breaks the turn."""
    from ..memory import gate

    cand = None
    try:
        cand = gate.from_message(e)
        if cand is None or e.id is None or turns.gated(tc.store, e.id):
            return
        verdict = gate.consider(tc.store, tc.home, tc.settings, cand)
    except Exception as exc:
        if isinstance(exc, StoreError) and not isinstance(exc, StoreRefused):
            raise  # an outage: the tick fails, the message stays pending and comes again
        log.warning("could not pass message %s through the promotion gate (%s: %s); it is "
                    "queued for you unchecked", e.id, type(exc).__name__, exc)
        if cand is None:  # not even read as a candidate: nothing to queue
            log.error("message %s asked to remember something the gate could not read; the "
                      "turn goes on without it", e.id)
            return
        verdict = gate.queue_unchecked(tc.store, cand, f"{type(exc).__name__}: {exc}")
    record(tc.store, "promotion", verdict.describe(), tick_id=tick_id, input_id=e.id,
           promotion_id=verdict.promotion_id, status=verdict.status)


def _ritual_failed(tc: TurnContext, name: str, tick_id: int, input_id: int,
                   e: Exception) -> None:
    log.error("ritual %s failed: %s: %s", name, type(e).__name__, e, exc_info=True)
    record(tc.store, "ritual_failed", f"{name}: {type(e).__name__}: {e}", tick_id=tick_id,
           ritual=name)
    count_failure(tc.store, tick_id, [input_id], TickOutcome(
        Outcome.FAILED, tick_id, detail=f"{type(e).__name__}: {e}", blames_input=True))


async def _run_builtin(tc: TurnContext, name: str, tick_id: int, input_id: int) -> None:
    """Run a built-in ritual (reflect) in a worker thread with its own connection. Its
    input is consumed when it ran to its end; a failure counts against it like a turn's."""
    from rituals import reflect

    try:
        report = await asyncio.to_thread(reflect.run, tc.home, tc.settings)
    except StoreRefused as e:  # a write the database's rules refused: the ritual's doing
        _ritual_failed(tc, name, tick_id, input_id, e)
        return
    except StoreError as e:  # the database, not the ritual: an outage counts against nothing
        log.error("ritual %s could not run (%s: %s); it runs again when the database answers",
                  name, type(e).__name__, e)
        record(tc.store, "ritual_failed", f"{name}: {type(e).__name__}: {e}", tick_id=tick_id,
               ritual=name)
        inputs_store.note_error(tc.store, [input_id], f"{type(e).__name__}: {e}")
        return
    except Exception as e:  # a failed ritual is logged and recorded; the tick goes on
        _ritual_failed(tc, name, tick_id, input_id, e)
        return
    record(tc.store, "ritual", f"{name}: archived {report.archived}, sealed "
           f"{report.sealed or 'nothing'} in {report.seconds:.1f} s",
           tick_id=tick_id, ritual=name, stats=report.as_stats())
    inputs_store.consume(tc.store, [input_id], tick_id)


class Turn:
    """Model calls and tool calls until the model ends its turn or the step cap. Taking up
    an unfinished attempt again, the steps it recorded are replayed (its responses and its
    tool results) instead of asked and run again; only what it never recorded is new."""

    def __init__(self, tc: TurnContext, tick_id: int, perception: ctx.Perception,
                 resume: turns.Attempt | None) -> None:
        self.tc = tc
        self.tick_id = tick_id
        self.perception = perception
        self.resume = resume
        self.first_input = min(perception.input_ids, default=None)
        # the messages this turn answers: a reply records them (`in_reply_to`)
        self.answering = tuple(int(e.id) for e in perception.inputs
                               if e.kind == "message" and e.id is not None)
        # an owner's message not yet answered by an earlier attempt at it: a closing text
        # answers it (`done_before` lines begin with the tool's name)
        self.owner_asked = (any(e.actor == "owner" for e in perception.inputs)
                            and not any(d.startswith("reply ") for d in perception.done_before))

    async def run(self) -> TickOutcome:
        tc, tick_id = self.tc, self.tick_id
        prefix = ctx.build_prefix(tc.home, tc.settings, tc.store, tc.registry,
                                  tc.hands.tool_definitions() if tc.hands else None)
        messages: list[dict[str, Any]] = [ctx.first_message(
            ctx.staircase(tc.store, tc.settings, before_id=tick_id,
                          shown_new=self.perception.input_ids),
            ctx.inputs_text(self.perception, tc.settings.coworker.zone))]
        recorded, done = (turns.recorded(tc.store, self.resume.tick_id) if self.resume
                          else ([], {}))
        acted = False
        tail = self.recall()
        cap = MAX_STEPS_PER_TICK
        for step in range(1, cap + 1):
            if step <= len(recorded):
                reply = Reply(content=recorded[step - 1], stop_reason="replayed",
                              model="replayed", attempts=0)
            elif over := tc.cap.reached(tc.store, tc.settings):
                return TickOutcome(Outcome.CAPPED, tick_id, step - 1, detail=over)  # inputs wait
            elif (asked := await self._ask(prefix, messages, tail)) is None:
                return self._stopped(step - 1)
            else:
                reply = asked
            self._record_response(step, reply, replayed=step <= len(recorded))
            if not reply.tool_uses:
                self._answered_in_text(reply.text)  # a reply, not an action: the outcome stays
                return TickOutcome(Outcome.ACTED if acted else Outcome.NO_ACTION, tick_id, step,
                                   active=acted)
            messages.append({"role": "assistant", "content": reply.content})
            messages.append({"role": "user", "content": [
                await self.call_tool(use, done, reply.text) for use in reply.tool_uses]})
            acted = True
            if tc.stop.requested:  # a step boundary: stop here; the inputs stay pending
                return self._stopped(step)
        record(tc.store, "step_cap", f"step cap of {cap} model calls reached; tick ends here",
               tick_id=tick_id, cap=cap)
        log.warning("tick %d hit the step cap (%d)", tick_id, cap)
        return TickOutcome(Outcome.STEP_CAP, tick_id, cap, active=acted)

    def _answered_in_text(self, text: str) -> bool:
        """An owner's message answered in the turn's closing text, with no `reply` call, is
        written as a reply (ADR-0042): a model that answers in text never leaves the owner in
        silence. Whether it wrote one."""
        if not self.owner_asked:
            return False
        tc = self.tc
        tctx = ToolContext(store=tc.store, home_root=tc.home.root, settings=tc.settings,
                           tick_id=self.tick_id, live=tc.live, answering=self.answering)
        return answer_in_text(tctx, text) is not None

    def _stopped(self, steps: int) -> TickOutcome:
        return TickOutcome(Outcome.STOPPED, self.tick_id, steps, active=True,
                           detail=self.tc.stop.reason or "")

    async def _ask(self, prefix: ctx.Prefix, messages: list[dict[str, Any]],
                   tail: str | None) -> Reply | None:
        """One model call; None when a stop cancelled it (its inputs stay pending). The recall
        block rides at the tail of each call, never in the history."""
        assert self.tc.model is not None
        stop = self.tc.stop
        stop.call = asyncio.ensure_future(self.tc.model.create(
            system=prefix.system, tools=prefix.tools, messages=ctx.with_tail(messages, tail)))
        try:
            return await stop.call
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if stop.requested and task is not None and not task.cancelling():
                log.warning("tick %d: the model call in flight was cancelled by %s; "
                            "its inputs stay pending", self.tick_id, stop.reason)
                return None
            raise
        finally:
            stop.call = None

    def _record_response(self, step: int, reply: Reply, replayed: bool) -> None:
        self.tc.work.count(reply)
        record(self.tc.store, "model_response", reply.text, tick_id=self.tick_id,
               author_kind="agent", actor="coworker", step=step, model=reply.model,
               stop_reason=reply.stop_reason, usage=reply.usage, attempts=reply.attempts,
               tool_calls=len(reply.tool_uses), content=reply.content,
               replayed_from=self.resume.tick_id if replayed and self.resume else None)

    def recall(self) -> str | None:
        """The recall reflex: what memory says about this tick's input, within the budget
        (`memory.service.Memory`, hybrid when the channel is on). A failure is logged at
        WARNING and the turn goes on without it."""
        cfg = self.tc.settings.recall
        if cfg.mode == "off":
            return None
        text, quiet = self._recall_text()
        if not text.strip() and quiet:  # decided before retrieving: a ritual that asks for
            # no memory gets none
            names = ", ".join(quiet)
            record(self.tc.store, "recall", f"recalled nothing (not injected: ritual {names} "
                   "asks for no recall)", tick_id=self.tick_id, injected=False, mode=cfg.mode,
                   chars=0, decision=f"none: ritual {names} asks for no recall", items=[])
            return None
        try:
            return self._recalled(text)
        except Exception as e:
            log.warning("recall failed (%s: %s); the turn goes on without it",
                        type(e).__name__, e, exc_info=True)
            return None

    def _recall_text(self) -> tuple[str, list[str]]:
        """What recall reads (the inputs, the promises due, the rituals' prompts that ask for
        memory) and the rituals due that ask for none."""
        p = self.perception
        quiet = {c.name for c in self.tc.settings.rituals.custom if not c.recall}
        text = "\n".join([*(e.body for e in p.inputs), *(e.body for e in p.due_promises),
                          *(prompt for name, prompt in p.rituals if name not in quiet)])
        return text, sorted(name for name, _ in p.rituals if name in quiet)

    def _recalled(self, text: str) -> str | None:
        """Recall `text`, record the `recall` event (and its telemetry), and return the block
        when it is injected."""
        from ..memory.service import Memory
        from ..render import recall_decision, recall_skip

        tc, cfg = self.tc, self.tc.settings.recall
        memory = Memory(tc.store, tc.settings, tc.semantic)
        budget = memory.budget()
        found = memory.recall(text, before_id=self.first_input or self.tick_id)
        block = found.block(budget)
        inject = cfg.mode == "on" and block is not None
        ids = ", ".join(f"#{h.event.id}" for h in found.hits[: budget.max_items]) or "nothing"
        why = "dry-run" if cfg.mode == "dry-run" else (recall_skip(found) or "nothing found")
        record(tc.store, "recall", f"recalled {ids}" + ("" if inject else
               f" (not injected: {why})"),
               tick_id=self.tick_id, injected=inject, mode=cfg.mode,
               chars=len(block or ""), block=block if cfg.mode == "dry-run" else None,
               decision=recall_decision(found), **found.as_meta(budget))
        try:  # a figure lost is no reason to take back the block the event says was given
            telemetry.record(tc.store, "recall", {"ms": round(found.ms, 3),
                                                  "items": len(found.hits),
                                                  "injected": inject})
        except Exception as e:
            log.warning("recall's telemetry was not recorded (%s: %s)", type(e).__name__, e)
        return block if inject else None

    async def call_tool(self, use: dict[str, Any], done: dict[str, tuple[str, bool]] | None = None,
                        reason: str | None = None) -> dict[str, Any]:
        """Run one tool call; a call whose result an earlier attempt recorded is not run again,
        its recorded result is used."""
        tc, tick_id = self.tc, self.tick_id
        name = str(use.get("name", ""))
        raw = use.get("input")
        use_id = use.get("id") if isinstance(use.get("id"), str) else None
        record(tc.store, "tool_call", f"{name}({json.dumps(raw, ensure_ascii=False)[:2000]})",
               tick_id=tick_id, author_kind="agent", actor="coworker", tool=name,
               input=raw, tool_use_id=use_id)
        if use_id is not None and done and use_id in done:
            result = ToolResult(*done[use_id])
        elif tc.hands is not None and tc.registry.get(name) is None and "__" in name:
            from . import hands as mcp

            result = await mcp.call(tc.hands, tc.store, tc.settings.mcp, tc.live, mcp.Call(
                name, raw, use_id, tick_id, (reason or "").strip() or None,
                list(self.perception.input_ids)))
        else:
            tctx = ToolContext(store=tc.store, home_root=tc.home.root, settings=tc.settings,
                               tick_id=tick_id, live=tc.live, first_input_id=self.first_input,
                               tool_use_id=use_id, semantic=tc.semantic,
                               answering=self.answering)
            result = tc.registry.dispatch(tctx, name, raw)
        tc.work.tools.append(name)
        self._note_side_effect(name, use_id, result)
        if result.is_error:
            log.warning("tool call %s came back as an error: %s", name, result.text)
        record(tc.store, "tool_result", result.text, tick_id=tick_id, author_kind="tool",
               actor=name or "unknown-tool", tool=name, is_error=result.is_error,
               tool_use_id=use.get("id"),
               **({"full_text": result.full_text} if result.full_text else {}))
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use.get("id"),
                                 "content": result.text}
        if result.is_error:
            block["is_error"] = True
        return block

    def _note_side_effect(self, name: str, use_id: str | None, result: ToolResult) -> None:
        """A side-effect tool that did not fail goes in the INFO line, ours and an MCP
        server's alike; a live one of ours gets its own line (the hands log an MCP one)."""
        if result.is_error or not self._has_side_effect(name):
            return
        for prefix, how in (("dry-run", "dry-run"), ("not repeated", "not repeated"),
                            ("queued", "waits for approval")):
            if result.text.startswith(prefix):
                self.tc.work.side_effects.append(f"{name} ({how})")
                return
        ours = self.tc.registry.get(name)
        if ours is not None and ours.to_owner:
            self.tc.work.side_effects.append(f"{name} (to the owner)")
            return
        self.tc.work.side_effects.append(f"{name} (live)")
        if ours is not None:
            log.info("LIVE side effect: %s (tool_use %s, tick %d): %s", name, use_id,
                     self.tick_id, result.text[:300])

    def _has_side_effect(self, name: str) -> bool:
        """Whether `name` is a side-effect tool: one of ours that says so, or an MCP server's
        tool that is not read-only."""
        if (tool := self.tc.registry.get(name)) is not None:
            return bool(tool.side_effect)
        from ..hands.classify import SideEffect

        info = self.tc.hands.tool(name) if self.tc.hands is not None else None
        return info is not None and info.side_effect is not SideEffect.READ
