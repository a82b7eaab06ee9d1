"""The loop's closed sets and the small records its rooms pass each other.

Owns the run state, the tick outcomes (a StrEnum, so every string written to events, ritual
runs, telemetry, the runfile and the log is the plain word it always was), the outcome of one
tick, and the stop signal a running turn listens to. Pure data and signals: it never touches
the store, a file or the clock.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Any


class RunState(enum.Enum):
    """Where the loop is in its life: STOPPED -> STARTING -> RUNNING -> STOPPING -> STOPPED."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


class Outcome(enum.StrEnum):
    """How a tick ended: the word tick_end, ritual runs, the runfile and the log carry."""

    QUIET = "quiet"  # no turn: nothing waits, inputs already reported wait for a model, or the
    #                  spending cap holds them; no model call, no event, a telemetry count
    ACTED = "acted"  # the model called tools, then ended its turn
    NO_ACTION = "no_action"  # the model ended its turn without a tool call
    NO_MODEL = "no_model"  # inputs wait: no model is configured
    FAILED = "failed"  # a model error or a bug; the inputs stay pending
    STEP_CAP = "step_cap"  # turn.MAX_STEPS_PER_TICK model calls; the turn ends there (completed)
    STOPPED = "stopped"  # a stop ended the turn at a step boundary or cancelled its call
    RITUAL = "ritual"  # built-in rituals only (reflect): no model turn
    CAPPED = "capped"  # the daily spending cap was reached mid-turn; the inputs wait


@dataclass
class TickOutcome:
    """How one tick ended, and what the interval and the failure count make of it."""

    kind: Outcome  # a plain string is taken too: "quiet" becomes Outcome.QUIET
    tick_id: int | None = None  # None: the tick recorded no `tick` event (a quiet tick)
    steps: int = 0  # model responses in the turn, replayed ones included
    detail: str = ""
    active: bool = False  # owner input or an action: resets the interval
    blames_input: bool = False  # a failure the inputs cause (a 400, a bug), counted against them

    def __post_init__(self) -> None:
        self.kind = Outcome(self.kind)


class Stop:
    """A stop request as a running turn sees it: why, and the model call in flight.

    `request` only signals: it keeps the first reason and cancels the call in flight (a hung
    or slow model call must not hold the stop; its inputs stay pending)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.call: asyncio.Future[Any] | None = None  # set by the turn around each model call

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def request(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        if self.call is not None and not self.call.done():
            self.call.cancel()
