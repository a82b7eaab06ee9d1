"""Perception: what waits for this tick, and the batch one turn takes.

Owns turning what fell due into inputs (promises past due, rituals the scheduler marked),
taking the inbox in (through inbox), choosing the batch (at most MAX_INPUTS_PER_TURN; an
unfinished attempt taken up again with exactly its inputs; after a failure its inputs caused,
the oldest input alone), the Perception the context renders, and its fingerprint. It adds
inputs through the store; it never calls a model, never runs a tool and never consumes an
input.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from .. import context as ctx
from ..home import Home
from ..scheduler import BUILTIN, definitions
from ..settings import Settings
from ..store import Event, Store, now_iso, side_effects, turns
from ..store import inputs as inputs_store
from ..store import promises as promises_store
from . import inbox


class DueRituals:
    """Ritual names the scheduler marked due, until perception makes them inputs."""

    def __init__(self) -> None:
        self._names: list[str] = []

    def mark(self, name: str) -> None:
        if name not in self._names:
            self._names.append(name)

    def take(self) -> list[str]:
        names, self._names = self._names, []
        return names


@dataclass(frozen=True)
class Batch:
    perception: ctx.Perception
    resume: turns.Attempt | None  # the unfinished attempt this batch takes up again
    more: bool  # more inputs wait than a turn takes: the next tick comes at once


def perceive(home: Home, store: Store, settings: Settings, rituals: DueRituals) -> Batch:
    """Take the inbox in, make what fell due an input, and choose this turn's batch."""
    inbox.take(home.inbox, store)
    queue_due(store, settings, rituals)
    oldest = inputs_store.pending(store, limit=MAX_INPUTS_PER_TURN)
    batch, resume = choose(store, settings, oldest)
    more = bool(batch) and inputs_store.pending_count(store) > len(batch)
    seen = _perception(batch)
    seen.done_before = done_before(store, batch)
    return Batch(seen, resume, more=more)


MAX_INPUTS_PER_TURN = 10  # inputs one turn takes; the rest wait (was [coworker] max_inputs_per_turn)
DONE_SHOWN = 20  # side effects of a failed attempt listed for the fresh ask, at most


def done_before(store: Store, batch: list[inputs_store.Input]) -> list[str]:
    """The side effects earlier attempts at these inputs already carried out (every tick that
    took one of them, since none completed), each as one line, so the model knows they are
    done and does not do them twice, whether this turn replays an attempt or asks afresh (a
    batch taken apart after a failure its inputs caused, then perhaps stopped in turn)."""
    done = [f"{tool} {' '.join(given.split())[:300]} -> "
            + (' '.join(result.split())[:200] if status == "done" else
               "(may have been done: its attempt was killed during the call)")
            for tool, given, result, status in side_effects.done_in(
                store, turns.took(store, [i.id for i in batch]))]
    if len(done) > DONE_SHOWN:  # the first ones, and how many more (the ledger has them all)
        done[DONE_SHOWN:] = [f"and {len(done) - DONE_SHOWN} more"]
    return done


def queue_due(store: Store, settings: Settings, rituals: DueRituals) -> None:
    """Promises that fell due and rituals the scheduler marked become inputs (a ritual that
    already waits as an input is never doubled)."""
    for p in promises_store.due(store, now_iso()):
        inputs_store.add(store, Event(
            kind="promise_due", body=p.body, actor="coworker", author_kind="system",
            meta={"promise_id": p.id, "made": p.ts, "due": p.meta.get("due")}), "promise")
    prompts = {d.name: d.prompt or "" for d in definitions(settings)}
    names = rituals.take()
    for at, name in enumerate(names):
        try:
            if inputs_store.pending_ritual(store, name):
                continue
            inputs_store.add(store, Event(
                kind="ritual_due", body=f"ritual {name} is due", actor="coworker",
                author_kind="system", meta={"ritual": name, "prompt": prompts.get(name, "")}),
                "ritual")
        except BaseException:  # not written: still due, the next tick tries again
            for rest in names[at:]:
                rituals.mark(rest)
            raise


def choose(store: Store, settings: Settings, oldest: list[inputs_store.Input]
           ) -> tuple[list[inputs_store.Input], turns.Attempt | None]:
    """This turn's inputs, and the unfinished attempt it replays (if any), given the oldest
    pending inputs (as many as a turn takes).

    An attempt that did not complete (killed, stopped, failed, capped) is taken up again
    with those of its inputs still pending, so its recorded steps are replayed, never asked
    again (a reply sent is not sent twice); one it consumed itself (a built-in ritual run in
    the same batch) is not waited for. They are read by id: a retried older input may wait
    ahead of them. After a failure its inputs caused, the oldest input goes alone, so a poison
    input is set aside by itself and the inputs behind it go on."""
    if not oldest:
        return [], None
    last = turns.last_attempt(store)
    if last is not None and last.outcome in turns.RESUMABLE and last.inputs:
        by_id = {i.id: i for i in inputs_store.pending(store, ids=last.inputs)}
        batch = [by_id[i] for i in last.inputs if i in by_id]
        # a built-in ritual's failure is its own (reflect ran before the turn), not the turn's
        blamed = [i for i in batch if not _builtin(i)]
        if batch and (len(batch) == 1 or all(i.failures == 0 for i in blamed)):
            return batch, last
    if oldest[0].failures > 0:
        return [oldest[0]], None
    return oldest[:MAX_INPUTS_PER_TURN], None


def _perception(batch: list[inputs_store.Input]) -> ctx.Perception:
    p = ctx.Perception(input_ids=[i.id for i in batch])
    for item in batch:
        e = item.event
        if item.kind in ("message", "watch", "action"):  # watch, action: a tool's output
            p.inputs.append(e)
        elif item.kind == "promise":
            p.due_promises.append(e)
        else:
            name = str(e.meta.get("ritual", ""))
            p.rituals.append((name, str(e.meta.get("prompt") or "")))
            p.ritual_inputs[name] = item.id
    return p


def _builtin(i: inputs_store.Input) -> bool:
    return i.kind == "ritual" and i.event.meta.get("ritual") in BUILTIN


def builtin_due(p: ctx.Perception) -> list[str]:
    """The built-in rituals (reflect) in this perception: the tick runs them, not the model."""
    return [n for n, _ in p.rituals if n in BUILTIN]


def fingerprint(p: ctx.Perception) -> str:
    """A short hash of what a tick perceived (its inputs and rituals), for its `tick` event."""
    payload = json.dumps({"inputs": p.input_ids, "rituals": p.rituals}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
