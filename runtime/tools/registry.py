"""The tool registry: JSON-schema tools, their dispatch, and dry-run for side effects.

Owns the Tool record (wire name with underscores, description, a pydantic model for its input,
whether it has side effects), the schemas sent to the model (sorted, so the cached prefix is
byte-stable), and dispatch: an unknown tool, input that is not a JSON object, or input that
does not match the schema comes back as an error tool result; a tool that raises is caught and
logged and also becomes an error result. A tick never crashes on a tool. A live side effect
is written to the side-effect ledger under its turn and tool_use id before it runs, so a
replayed turn never runs it twice, and a new turn handed an id already used by an earlier one
(a model server numbering its ids per process) still acts (ADR-0034).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import CoworkerError
from ..settings import Settings
from ..store import Event, Store, side_effects
from ..store import events as ev

log = logging.getLogger(__name__)

WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass
class ToolContext:
    store: Store
    home_root: Path
    settings: Settings
    tick_id: int | None
    live: bool
    first_input_id: int | None = None  # memory reads ignore this tick's own inputs and steps
    tool_use_id: str | None = None  # with the turn of tick_id, a live side effect's ledger key
    semantic: Any = None  # the loop's `memory.embed.SemanticCache`, for walk and search
    answering: tuple[int, ...] = ()  # the messages this turn answers (a reply records them)

    def record(self, kind: str, body: str, author_kind: str = "agent", actor: str = "coworker",
               **meta: Any) -> int:
        return ev.append(self.store, Event(kind=kind, body=body, actor=actor,
                                           author_kind=author_kind, meta=meta,
                                           tick_id=self.tick_id))


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    params: type[BaseModel]
    run: Callable[[ToolContext, Any], str]
    side_effect: bool = False
    # a side effect that only talks to the owner (`reply`): carried out in dry-run too, keyed
    # against a replay like any other (ADR-0042); dry-run guards actions in the world
    to_owner: bool = False
    # safe to run again under the same tool_use id (it finds and finishes its own earlier
    # work): a replay after a kill mid-call completes it instead of refusing it
    idempotent: bool = False

    def __post_init__(self) -> None:
        if not WIRE_NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} is not a valid wire name (letters, digits, _ -)")

    def schema(self) -> dict[str, Any]:
        schema = self.params.model_json_schema()
        schema.pop("title", None)
        return {"name": self.name, "description": self.description, "input_schema": schema}


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False
    full_text: str | None = None  # the whole result when `text` was cut (kept in its event)


class Registry:
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools or []:
            self.add(t)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name} registered twice")
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self) -> list[dict[str, Any]]:
        return [self._tools[n].schema() for n in self.names()]

    def dispatch(self, ctx: ToolContext, name: str, raw_input: Any) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(
                f"unknown tool {name!r}; the tools are: {', '.join(self.names())}", True
            )
        params = _validated(tool, raw_input)
        if isinstance(params, ToolResult):
            return params
        if ctx.tool_use_id is not None:  # a lone surrogate (a JSON "\udcff" escape) cannot be stored
            ctx.tool_use_id = ev.SURROGATE.sub("\ufffd", ctx.tool_use_id)
        if tool.side_effect and not ctx.live and not tool.to_owner:
            return _dry_run(ctx, tool, params)
        key = ctx.tool_use_id if tool.side_effect else None
        if key is not None:
            done = _already_begun(ctx, tool, key, params)
            if done is not None:
                return done
        elif tool.side_effect:
            log.warning("side effect %s has no tool_use id: it cannot be keyed against a replay",
                        name)
        result = _run(ctx, tool, params)
        if key is not None:
            side_effects.finish(ctx.store, key, not result.is_error, result.text,
                                tick_id=ctx.tick_id)
        return result


def _validated(tool: Tool, raw_input: Any) -> BaseModel | ToolResult:
    """The tool's input as its model, or the error result that says what is wrong with it."""
    name = tool.name
    if not isinstance(raw_input, dict):
        return ToolResult(
            f"tool {name}: input must be a JSON object matching its schema, "
            f"got {type(raw_input).__name__}", True
        )
    try:
        return tool.params.model_validate(raw_input)
    except (OverflowError, RecursionError) as e:  # a validator past its range
        return ToolResult(f"tool {name}: input is out of range ({e}); send a smaller "
                          "value", True)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(input)'}: {err['msg']}"
            for err in e.errors()
        )
        return ToolResult(f"tool {name}: input does not match its schema: {problems}", True)


def _dry_run(ctx: ToolContext, tool: Tool, params: BaseModel) -> ToolResult:
    """The side effect does not happen; an event says what would have."""
    name = tool.name
    event_id = ctx.record("dry_run", f"would run {name}: {params.model_dump_json()}",
                          tool=name, input=params.model_dump(mode="json"))
    return ToolResult(
        f"dry-run: {name} was not carried out; recorded what it would have done as "
        f"event {event_id} (the owner runs with --live to let it act)"
    )


def _already_begun(ctx: ToolContext, tool: Tool, key: str, params: BaseModel) -> ToolResult | None:
    """Write the side effect to its ledger before it runs; the result that refuses it when an
    earlier attempt of this turn began it already (None: run it, also when it is idempotent
    and was cut off: this run completes it)."""
    name = tool.name
    earlier = side_effects.begin(ctx.store, key, name, ctx.tick_id,
                                 params.model_dump(mode="json"))
    if earlier is None:
        return None
    if earlier.status == "started" and tool.idempotent:
        log.warning("side effect %s (tool_use %s) was begun by tick %s and not "
                    "finished; it is keyed, so this run completes it", name, key,
                    earlier.tick_id)
        return None
    log.warning("side effect %s (tool_use %s) was already begun by tick %s (%s); "
                "not running it again", name, key, earlier.tick_id, earlier.status)
    if earlier.status == "started":
        return ToolResult(
            f"not repeated: {name} (tool_use {key}) was begun by an earlier attempt "
            "that was cut off before it finished; it may or may not have taken "
            "effect, and it is not run a second time")
    return ToolResult(
        f"not repeated: {name} (tool_use {key}) was already carried out by an "
        f"earlier attempt of this turn ({earlier.status}"
        + (f": {earlier.result}" if earlier.result else "") + ")")


def _run(ctx: ToolContext, tool: Tool, params: BaseModel) -> ToolResult:
    """The tool's own run; what it raises becomes an error result, never the tick's end."""
    name = tool.name
    try:
        return ToolResult(tool.run(ctx, params))
    except CoworkerError as e:  # a mistake the model can correct, not a bug
        log.warning("tool %s refused: %s", name, e)
        return ToolResult(f"tool {name}: {e}", True)
    except Exception as e:  # a tool bug must not end the tick; it goes back as an error
        log.exception("tool %s failed", name)
        return ToolResult(f"tool {name} failed: {type(e).__name__}: {e}", True)
