"""A one-off look at every configured MCP server: does it start, which tools, what each would do.

Owns `survey`: start each `[[mcp.servers]]` entry once (through `Hands`, with a backoff
`sleep` that never returns, so a server that fails is not retried), read its tools and their
side-effect classes and the tools it leaves out (caps, unusable schemas), work out what a
call to each does now (`classify.decide` with the
server's `mode` and whether the coworker runs live), and stop them all, the whole within a
bound. `coworker mcp-tools` prints it; `coworker doctor` turns it into one check a server. It
never calls a tool, never records anything and never writes a file; every reason it returns
has passed through the section's redactor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..settings_mcp import McpSection
from .classify import Disposition, SideEffect, decide
from .hands import Hands
from .server import ServerState

# What a call does now, in the words `coworker mcp-tools` prints.
NOW = {Disposition.RUN: "run", Disposition.DRY_RUN: "dry-run", Disposition.QUEUE: "queue",
       Disposition.REFUSE: "refused"}
SLACK_S = 10.0  # beyond the slowest server's timeout_s, for the processes to start and stop


@dataclass(frozen=True)
class ToolRow:
    """One tool of a server that started: its class and what a call does now."""

    server: str
    tool: str
    name: str               # <server>__<tool>, as the model sees it
    side_effect: SideEffect
    now: str                # run | dry-run | queue | refused

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "tool": self.tool, "class": self.side_effect.name,
                "now": self.now}


@dataclass(frozen=True)
class ServerReport:
    """One configured server as the survey found it."""

    name: str
    transport: str          # stdio | http
    mode: str               # the server's own mode: dry-run | live
    ok: bool                # it started and listed its tools
    reason: str | None      # why not, redacted
    tools: list[ToolRow] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # tools whose names the model cannot take
    left_out: dict[str, str] = field(default_factory=dict)  # tool -> why it is not offered

    def count(self, side_effect: SideEffect) -> int:
        return sum(1 for t in self.tools if t.side_effect is side_effect)

    def as_dict(self) -> dict[str, Any]:
        return {"server": self.name, "transport": self.transport, "mode": self.mode,
                "state": "ready" if self.ok else "failed", "reason": self.reason,
                "tools": [t.as_dict() for t in self.tools], "skipped": self.skipped,
                "left_out": self.left_out}


async def _never(_delay: float) -> None:
    """The backoff wait of a survey: forever, so a server that failed once is not retried."""
    await asyncio.Event().wait()


def bound_for(section: McpSection) -> float:
    """How long a whole survey may take: the slowest server's start, plus slack."""
    return max((s.start_timeout_s for s in section.servers), default=0.0) + SLACK_S


async def survey(section: McpSection, live: bool,
                 bound_s: float | None = None) -> list[ServerReport]:
    """Start every server of `section` once and report each, sorted by name. `live` is
    whether the coworker runs live (`--live` or `[writes] mode = "live"`). A server not ready
    when the bound passes is reported as not started."""
    if not section.servers:
        return []
    bound = bound_for(section) if bound_s is None else bound_s
    with _quiet():
        return await _survey(section, live, bound)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The servers' own WARNING lines ("retrying in 1s") would mislead here: the survey never
    retries, and its report carries each reason."""
    logger = logging.getLogger("runtime.hands")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


async def _survey(section: McpSection, live: bool, bound: float) -> list[ServerReport]:
    hands = Hands(section, sleep=_never)
    try:
        try:
            await asyncio.wait_for(hands.start(), bound)
        except TimeoutError:
            pass  # each runner's status says where it got to
        modes = {s.name: s.mode for s in section.servers}
        return [_report(status, modes[status.name], live, bound, hands)
                for status in hands.status()]
    finally:
        with contextlib.suppress(TimeoutError):  # a server slow to stop is not the survey's fault
            await asyncio.wait_for(hands.stop(), SLACK_S * 3)


def _report(status: Any, mode: str, live: bool, bound: float, hands: Hands) -> ServerReport:
    if status.state is not ServerState.READY:
        reason = status.reason or f"no answer within {bound:g}s"
        return ServerReport(status.name, status.transport, mode, False, hands.redact(reason))
    left_out = hands.left_out(status.name)
    rows = [ToolRow(t.server, t.tool, t.name, t.side_effect,
                    NOW[decide(t.side_effect, mode, live)]) for t in status.tools
            if t.tool not in left_out]
    return ServerReport(status.name, status.transport, mode, True, None, rows,
                        list(status.skipped), left_out)
