"""`Hands`: every MCP server the owner configured, as one set of tools for the model.

Owns the servers of one `[mcp]` section (a `ServerRunner` each): starting them together (one
that cannot start is a WARNING and a reason in `status()`, the others go on), offering their
tools as Anthropic tool definitions named `<server>__<tool>` in a stable order (by server,
then tool; at most MAX_ALL_TOOL_BYTES of them in all, the rest left out with one WARNING),
answering what a call to one would do (`disposition`), checking arguments against the tool's
schema (runtime/hands/schema.py: nothing fetched, no server's pattern run), making the call
(with the server's timeout; the text capped at `RESULT_CHARS`, the full text kept up to
`result.MAX_STORED_CHARS`), `reconcile` with a reloaded section, and stopping them all. It
never decides to call a side effect on its own (`call` runs what it is asked; the loop asks
`disposition` first), never records events, and never logs or returns a secret value of the
section (each text passes through `redact` first).

The coworker's own state is out of every tool's reach (runtime/hands/own_state.py): a call any
of whose arguments names a path in the home's `state/` (the inbox is the owner's door; the
database and secrets live there), its MEMORY.md or its config.toml is refused, reads included,
and never sent. `call` checks every call, whoever asks (the model's, an approved action, a
watch), so it is the one place no call gets past; `validate` checks the same so the loop refuses
before a dry run or a queued action records the call. The home is the one given (`home=`, or
`protect`, which the loop calls with its store's home), else the one the CLI would find
(COWORKER_HOME or the current folder).

Tool definitions stay byte-identical from tick to tick: a server that dies keeps offering
the tools of its last listing while it restarts (a call meanwhile is UNAVAILABLE), so a
crash does not change the model's cached prefix; only a server that never started, a
reconcile or a changed listing (`refresh`) does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from ..secrecy import REDACTED, register_secret
from ..secrecy import redact as redact_known
from ..settings_mcp import McpSection, McpServer, split_name
from .classify import Disposition, SideEffect, decide
from .own_state import OwnState
from .result import CallStatus, ToolResult, cap, keep
from .server import ServerRunner, ServerStatus, Sleep, ToolInfo, left_out_line

log = logging.getLogger("runtime.hands")

# Bytes of tool definitions offered to the model in all, every request (each server's own caps
# are runtime/hands/server.py's MAX_TOOLS and MAX_TOOL_BYTES): past it, in the stable order of
# the tools (by server, then tool), the rest are left out, said at WARNING (ADR-0039).
MAX_ALL_TOOL_BYTES = 256 * 1024
RESULT_CHARS = 20_000  # characters of a tool result the model sees; the full text is kept


class Redactor:
    """Replaces the section's secret values (longest first), then every secret the process
    knows (runtime/settings.py's registry: the model's API key, config secrets)."""

    def __init__(self, values: list[str]) -> None:
        self.values = sorted({v for v in values if v}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return redact_known(text)


class Hands:
    """The configured MCP servers. Use as `async with Hands(section) as hands:` or call
    `start()` and `stop()`."""

    def __init__(self, section: McpSection, *, sleep: Sleep = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 home: str | os.PathLike[str] | None = None) -> None:
        self.section = section
        self._sleep = sleep
        self._clock = clock
        self.redact = self._redactor(section)
        self._runners: dict[str, ServerRunner] = {}
        self._own: OwnState | None = OwnState(home) if home is not None else None
        self._over_logged: str | None = None  # the last WARNING about the bytes in all

    @staticmethod
    def _redactor(section: McpSection) -> Redactor:
        values = section.secret_values()
        for v in values:
            register_secret(v)  # so log handlers, doctor and events hide them too
        return Redactor(values)

    async def __aenter__(self) -> Hands:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- lifecycle -----------------------------------------------------------------------

    def _runner(self, config: McpServer) -> ServerRunner:
        return ServerRunner(config, redact=self.redact, sleep=self._sleep, clock=self._clock)

    async def start(self) -> dict[str, bool]:
        """Start every configured server; return once each is ready or has failed its first
        attempt ({name: ready}). A failed one keeps retrying with backoff."""
        for config in self.section.servers:
            if config.name not in self._runners:
                self._runners[config.name] = self._runner(config)
        return await self._start(list(self._runners))

    async def _start(self, names: list[str]) -> dict[str, bool]:
        for name in names:
            self._runners[name].start()
        ready = await asyncio.gather(*(self._runners[n].wait_started() for n in names))
        return dict(zip(names, ready, strict=True))

    async def stop(self) -> None:
        runners, self._runners = list(self._runners.values()), {}
        await asyncio.gather(*(r.stop() for r in runners))

    async def reconcile(self, section: McpSection) -> dict[str, list[str]]:
        """Take a reloaded `[mcp]` section: stop removed servers, restart changed ones, start
        added ones; the rest keep running untouched. Returns the names of each kind."""
        old = {name: r.config for name, r in self._runners.items()}
        new = {s.name: s for s in section.servers}
        removed = sorted(set(old) - set(new))
        changed = sorted(n for n in set(old) & set(new) if old[n] != new[n])
        added = sorted(set(new) - set(old))
        self.section = section
        self.redact = self._redactor(section)
        stopping = [self._runners.pop(n) for n in removed + changed]
        await asyncio.gather(*(r.stop() for r in stopping))
        for name in changed + added:
            self._runners[name] = self._runner(new[name])
        await self._start(changed + added)
        # Unchanged runners keep their connection; they take the new redactor for new texts.
        for runner in self._runners.values():
            runner._redact = self.redact
        if removed or changed or added:
            log.info("mcp servers reconciled: added %s, removed %s, restarted %s",
                     added or "none", removed or "none", changed or "none")
        return {"added": added, "removed": removed, "restarted": changed}

    async def refresh(self) -> dict[str, bool]:
        """Ask every ready server for its tools again: a health check (one whose connection
        is gone is restarted) that also picks up a changed listing."""
        names = sorted(self._runners)
        alive = await asyncio.gather(*(self._runners[n].refresh() for n in names))
        return dict(zip(names, alive, strict=True))

    # -- the coworker's own state ----------------------------------------------------------

    def protect(self, home: str | os.PathLike[str]) -> None:
        """Keep every tool out of the home at `home` (its state/, MEMORY.md, config.toml)."""
        root = os.path.abspath(os.path.expanduser(home))
        if self._own is None or str(self._own.root) != root:
            self._own = OwnState(root)

    @property
    def own_state(self) -> OwnState:
        if self._own is None:  # not told: the home the CLI would find
            from ..home import Home

            self._own = OwnState(Home.locate().root)
        return self._own

    def refusal(self, name: str, arguments: Any) -> str | None:
        """Why a call to this tool with these arguments is refused because they name the
        coworker's own state (one line, logged at WARNING), or None."""
        parts = split_name(name)
        runner = self._runners.get(parts[0]) if parts else None
        why = self.own_state.refusal(arguments, runner.cwd if runner is not None else None)
        if why is None:
            return None
        why = self.redact(why)
        log.warning("tool call %s not sent: %s", name, why)
        return why

    # -- tools ----------------------------------------------------------------------------

    def tools(self) -> list[ToolInfo]:
        """Every offered tool (not DISABLED), sorted by server then tool name, up to
        MAX_ALL_TOOL_BYTES of definitions in all."""
        offered, over = self._offered()
        line = left_out_line(over) if over else None
        if line is not None and line != self._over_logged:
            log.warning("mcp: tool definitions are capped at %s bytes in all; %s",
                        f"{MAX_ALL_TOOL_BYTES:,}", self.redact(line))
        self._over_logged = line
        return offered

    def _offered(self) -> tuple[list[ToolInfo], dict[str, str]]:
        """(the tools offered, {full name: why} of those left out for the bytes in all)."""
        offered: list[ToolInfo] = []
        over: dict[str, str] = {}
        used = 0
        for t in (t for name in sorted(self._runners) for t in self._runners[name].status.tools
                  if t.side_effect is not SideEffect.DISABLED):
            if over or used + t.size > MAX_ALL_TOOL_BYTES:
                over[t.name] = f"more than {MAX_ALL_TOOL_BYTES:,} bytes of tools in all"
                continue
            used += t.size
            offered.append(t)
        return offered, over

    def left_out(self, server: str) -> dict[str, str]:
        """The tools of `server` not offered to the model, and why (its own listing's caps and
        checks, and the bytes of all servers' tools together)."""
        runner = self._runners.get(server)
        mine = dict(runner.status.left_out) if runner is not None else {}
        over = self._offered()[1]
        mine.update({t.tool: why for t in (runner.status.tools if runner else [])
                     if (why := over.get(t.name)) is not None})
        return mine

    def tool_definitions(self) -> list[dict[str, Any]]:
        """The offered tools as Messages API tool definitions, in a stable order."""
        return [t.definition() for t in self.tools()]

    def tool(self, name: str) -> ToolInfo | None:
        """The offered tool with this full name (`<server>__<tool>`), or None."""
        parts = split_name(name)
        runner = self._runners.get(parts[0]) if parts else None
        info = runner.tool(parts[1]) if runner and parts else None
        if info is None or info.side_effect is SideEffect.DISABLED:
            return None
        return info if name not in self._offered()[1] else None

    def disposition(self, name: str, coworker_live: bool) -> Disposition:
        """What a call to this tool does now: RUN, DRY_RUN, QUEUE, or REFUSE (unknown or
        disabled)."""
        info = self.tool(name)
        if info is None:
            return Disposition.REFUSE
        return decide(info.side_effect, self._runners[info.server].config.mode, coworker_live)

    def validate(self, name: str, arguments: Any) -> str | None:
        """Why this call cannot be made as asked (unknown tool, arguments that break its
        schema, an argument naming the coworker's own state), in one line, or None. The loop
        checks before a dry run or a queued action records the call, so neither records a
        call that could never run."""
        info = self.tool(name)
        if info is None:
            return f"no tool named {name!r}"
        why = self._runners[info.server].check(info, arguments)
        return why if why is not None else self.refusal(name, arguments)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call the tool `<server>__<tool>` now, whatever its class (ask `disposition` first),
        unless an argument names the coworker's own state (REFUSED, nothing sent). Never
        raises for what a server does; see `CallStatus`."""
        info = self.tool(name)
        if info is None:
            parts = split_name(name) or ("", name)
            return ToolResult(parts[0], parts[1], CallStatus.UNKNOWN_TOOL,
                              self.redact(f"no tool named {name!r}"))
        if (why := self.refusal(name, arguments)) is not None:
            return ToolResult(info.server, info.tool, CallStatus.REFUSED, why)
        result = await self._runners[info.server].call(info.tool, arguments)
        text, full = cap(result.text, RESULT_CHARS)
        if full is None:
            return result
        return ToolResult(result.server, result.tool, result.status, text, keep(full),
                          result.structured, result.seconds)

    # -- status ---------------------------------------------------------------------------

    def status(self) -> list[ServerStatus]:
        """Each configured server's state, reason and tools (with classes), by name: what
        `doctor` and `coworker mcp-tools` print."""
        return [self._runners[n].status for n in sorted(self._runners)]

    def runner(self, name: str) -> ServerRunner | None:
        return self._runners.get(name)
