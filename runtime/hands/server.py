"""One configured MCP server, kept running: start, list tools, call, restart when it dies, stop.

Owns the connection to one server through the official `mcp` SDK's `Client` (stdio through
`StdioServerParameters`, streamable HTTP through `streamable_http_client` with the configured
headers; no protocol code of our own), held open by one supervising asyncio task, and that
server's `ServerStatus` (state, the reason it is not running, its tools with their classes,
its restarts). It never decides whether a call may run (runtime/hands/classify.py and the
loop do), never records an event and never reads config files.

Lifecycle: the supervisor connects (the whole start, listing included, bounded by
`start_timeout_s`; a call by `timeout_s`) and waits; a call that finds the connection closed
(the process died, before or during the call) wakes it, and it reconnects after a backoff that doubles from
`RESTART_INITIAL_S` up to `RESTART_MAX_S` (reset by a successful start). A server that cannot
start is retried the same way; its reason (the error, and the last lines it wrote to stderr)
is one WARNING line when it changes and stays in `status()` for `doctor`. The wait is the
injected `sleep`, so tests never wait on the wall clock.

Every text that leaves this module (reasons, log lines, results, and each listed tool's
description, annotations and input schema, before the description is cut) passes through the
`redact` it is given, so a secret from the server's env or headers never reaches a log or the
model. A listing is taken in the order of the tools' names: a tool whose name the model cannot
take is skipped; one whose name holds a secret, whose schema cannot be used
(runtime/hands/schema.py), whose definition is over MAX_TOOL_BYTES, or past the first MAX_TOOLS
is left out (`ServerStatus.left_out`), one WARNING when that changes (ADR-0039). What the SDK
logs about a server's bytes (a line that is not JSON-RPC) becomes one WARNING line naming the
server, the first of a connection; its cache of output-schema validators gets ours, which runs
no regular expression of the server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT, Implementation

from .. import __version__
from ..settings_mcp import TOOL_NAME, McpServer, full_name
from .classify import SideEffect, classify
from .result import CallStatus, ToolResult, content_text
from .schema import SchemaUnusable, local_validator, problem, unusable

log = logging.getLogger("runtime.hands")

RESTART_INITIAL_S = 1.0  # first wait before restarting a server that died (was [mcp] setting)
RESTART_MAX_S = 300.0    # the wait doubles up to this many seconds (was [mcp] restart_max_s)
MAX_DESCRIPTION = 1024   # characters of a tool's description offered to the model
_STDERR_KEEP = 256 * 1024  # a server's stderr is kept for its last lines; trimmed past this
_PAGES = 100             # tools/list pages read at most (a paginator that never ends)
# What one server may offer the model (ADR-0039): its first MAX_TOOLS usable tools by name,
# each a definition of at most MAX_TOOL_BYTES of JSON; the rest are left out, said at WARNING.
# (All servers together: runtime/hands/hands.py's MAX_ALL_TOOL_BYTES.)
MAX_TOOLS = 128
MAX_TOOL_BYTES = 32 * 1024

Sleep = Callable[[float], Awaitable[None]]
Redact = Callable[[str], str]


class ServerState(StrEnum):
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"  # waiting out the backoff after a failure or a crash
    STOPPED = "stopped"


@dataclass(frozen=True)
class ToolInfo:
    """One tool as listed by its server, with its class under the owner's config."""

    server: str
    tool: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None
    side_effect: SideEffect
    size: int = 0  # bytes of its definition as JSON: what it costs every model request

    @property
    def name(self) -> str:
        return full_name(self.server, self.tool)

    def definition(self) -> dict[str, Any]:
        """The tool as the Messages API takes it."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass
class ServerStatus:
    name: str
    transport: str
    state: ServerState
    reason: str | None = None
    restarts: int = 0
    tools: list[ToolInfo] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # tools whose names the model could not take
    left_out: dict[str, str] = field(default_factory=dict)  # tool -> why it is not offered


def describe(exc: BaseException) -> str:
    """One line for an exception, exception groups unwrapped to their first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


# The runner whose connection this task serves: the SDK's transport tasks inherit it, so a
# line the SDK logs about what a server sent can name that server.
_CONNECTION: contextvars.ContextVar[ServerRunner | None] = contextvars.ContextVar(
    "coworker_mcp_server", default=None)


class _ServerFault(logging.Filter):
    """The SDK logs what a server sent that is not JSON-RPC (and a read that failed) at ERROR,
    with a traceback, into `coworker run`'s output; it is the server's fault. Each becomes one
    WARNING line naming the server, redacted, the first of a connection only (the rest are
    counted, `ServerRunner.faults`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR and record.exc_info is None:
            return True
        runner = _CONNECTION.get()
        exc = record.exc_info[1] if record.exc_info else None
        what = record.getMessage() + (f": {describe(exc)}" if exc is not None else "")
        name = "?"
        if runner is not None:
            runner.faults += 1
            if runner.faults > 1:
                return False
            what, name = runner._redact(what), runner.config.name
        record.msg = "mcp server %s: %s (more like it on this connection are not logged)"
        record.args = (name, what[:300])
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info = record.exc_text = record.stack_info = None
        return True


for _sdk in ("mcp.client.stdio", "mcp.client.streamable_http"):
    logging.getLogger(_sdk).addFilter(_ServerFault())


class _StderrTail:
    """The server's stderr, in an unlinked append-only file, for its last lines."""

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="coworker-mcp-")
        os.close(fd)
        self.file: TextIO = open(path, "a+", encoding="utf-8", errors="replace")  # noqa: SIM115
        os.unlink(path)

    def trim(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if os.fstat(self.file.fileno()).st_size > _STDERR_KEEP:
                self.file.truncate(0)

    def last_lines(self, n: int = 3, chars: int = 400) -> str:
        try:
            self.file.flush()
            self.file.seek(max(0, os.fstat(self.file.fileno()).st_size - 4096))
            lines = [ln.strip() for ln in self.file.read().splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-n:])[-chars:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    async with create_mcp_http_client(headers=headers or None) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


class ServerRunner:
    """One server, supervised. `start()` launches the supervisor; `wait_started()` returns
    once the first attempt succeeded or failed; `call()` and `refresh()` use the open
    connection; `stop()` closes it and ends the supervisor."""

    def __init__(self, config: McpServer, *, redact: Redact, sleep: Sleep = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic, restart_initial_s: float | None = None,
                 restart_max_s: float | None = None) -> None:
        self.config = config
        self._redact = redact
        self._sleep = sleep
        self._clock = clock
        self._initial = RESTART_INITIAL_S if restart_initial_s is None else restart_initial_s
        self._max = RESTART_MAX_S if restart_max_s is None else restart_max_s
        self.status = ServerStatus(config.name, config.transport, ServerState.STARTING)
        self.backoffs: list[float] = []          # every wait before a restart, in order
        self._client: Client | None = None
        self._tools: dict[str, ToolInfo] = {}
        self._wake = asyncio.Event()
        self._attempted = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._logged: str | None = None
        self._left_logged: str | None = None   # the last WARNING about tools left out
        self.faults = 0  # lines the SDK logged about what this connection's server sent
        self._lost: str | None = None          # why the open connection was given up
        self._tail: _StderrTail | None = None
        # The folder the server process runs in: a stdio server inherits the coworker's own
        # (the SDK's StdioServerParameters.cwd is left unset), read when it is spawned; an HTTP
        # server's is unknown, taken as ours. Relative paths in its arguments resolve here.
        self.cwd: str | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.config.name}")

    async def wait_started(self) -> bool:
        """True when the server is ready after its first attempt."""
        await self._attempted.wait()
        return self.status.state is ServerState.READY

    async def stop(self, grace_s: float = 10.0) -> None:
        self._stopping = True
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            self.status.state = ServerState.STOPPED
            return
        if self.status.state is not ServerState.READY:
            task.cancel()  # starting or backing off: nothing to close cleanly
        done, _ = await asyncio.wait({task}, timeout=grace_s)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=grace_s)
        self.status.state = ServerState.STOPPED
        self._attempted.set()

    async def _supervise(self) -> None:
        failures = 0
        try:
            while not self._stopping:
                self.status.state = ServerState.STARTING
                tail = _StderrTail()
                try:
                    await self._connect_and_wait(tail)
                    reason = self._lost or "the connection closed"
                    failures = 0
                except Exception as e:  # noqa: BLE001 - any failure to start is a reason, not a crash
                    reason = describe(e)
                    last = tail.last_lines()
                    if last:
                        reason += f" (stderr: {last})"
                finally:
                    self._client = None
                    tail.close()
                if self._stopping:
                    break
                delay = min(self._initial * 2 ** failures, self._max)
                failures += 1
                self._down(reason, delay)
                self._attempted.set()
                self.backoffs.append(delay)
                await self._sleep(delay)
                self.status.restarts += 1
        finally:
            self._client = None
            self.status.state = ServerState.STOPPED if self._stopping else self.status.state

    def _down(self, reason: str, delay: float) -> None:
        self.status.state = ServerState.RESTARTING
        self.status.reason = self._redact(reason)
        line = f"mcp server {self.config.name}: {self.status.reason}"
        if line != self._logged:
            log.warning("%s; its tools are unavailable; retrying in %gs", line, delay)
            self._logged = line
        else:
            log.debug("%s; retrying in %gs", line, delay)

    async def _connect_and_wait(self, tail: _StderrTail) -> None:
        self._wake = asyncio.Event()
        self._lost = None
        self._tail = tail
        self.faults = 0
        _CONNECTION.set(self)
        with anyio.CancelScope(deadline=anyio.current_time() + self.config.start_timeout_s
                               ) as scope:
            async with Client(self._transport(tail), client_info=Implementation(
                    name="coworker", version=__version__)) as client:
                self._set_tools(await self._list_tools(client))
                scope.deadline = math.inf
                self._client = client
                self.status.state = ServerState.READY
                self.status.reason = None
                self._logged = None
                self._attempted.set()
                counts = ", ".join(f"{n} {c}" for c, n in self._class_counts().items())
                log.info("mcp server %s ready: %d tools (%s)", self.config.name, len(self._tools), counts)
                await self._wake.wait()
        if scope.cancelled_caught:
            raise TimeoutError

    def _transport(self, tail: _StderrTail) -> Any:
        c = self.config
        if c.url is not None:
            return _http_transport(c.url, dict(c.headers))
        assert c.command is not None
        params = StdioServerParameters(command=c.command, args=list(c.args), env=dict(c.env) or None)
        with contextlib.suppress(OSError):
            self.cwd = str(params.cwd) if params.cwd is not None else os.getcwd()
        return stdio_client(params, errlog=tail.file)

    # -- tools ----------------------------------------------------------------------------

    async def _list_tools(self, client: Client, refresh: bool = False) -> list[Any]:
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh" if refresh else "use")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        _guard_output_schemas(client, tools)
        return tools

    def _set_tools(self, listed: list[Any]) -> None:
        """Take a listing: in the order of their names, the tools the model can take, each
        redacted and checked (`_tool_info`), up to MAX_TOOLS offered; the rest left out."""
        tools: dict[str, ToolInfo] = {}
        skipped: list[str] = []
        left_out: dict[str, str] = {}
        offered = 0
        for t in sorted(listed, key=lambda t: str(t.name)):
            if not TOOL_NAME.match(full_name(self.config.name, t.name)):
                skipped.append(self._redact(t.name[:80]))
                continue
            side_effect = classify(t.name, t.annotations, self.config)
            if side_effect is not SideEffect.DISABLED and offered >= MAX_TOOLS:
                left_out[t.name] = f"more than {MAX_TOOLS} tools"
                continue
            info, why = self._tool_info(t, side_effect)
            if info is None:
                left_out[self._redact(t.name)] = why
                continue
            tools[t.name] = info
            offered += side_effect is not SideEffect.DISABLED
        self._tools = tools
        self.status.tools = list(tools.values())
        self.status.skipped = skipped
        self.status.left_out = left_out
        self._warn_left_out()

    def _tool_info(self, t: Any, side_effect: SideEffect) -> tuple[ToolInfo | None, str]:
        """One listed tool as offered (its description, annotations and schema redacted, the
        description then cut), or None and why it cannot be."""
        redact = self._redact
        if redact(t.name) != t.name:
            return None, "its name holds a secret"
        schema = redact_json(dict(t.input_schema), redact)
        if side_effect is not SideEffect.DISABLED and (why := unusable(schema)) is not None:
            return None, why
        ann = t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else None
        info = ToolInfo(self.config.name, t.name, redact(t.description or "")[:MAX_DESCRIPTION],
                        schema, redact_json(ann, redact) or None, side_effect)
        size = len(json.dumps(info.definition(), ensure_ascii=False).encode("utf-8", "replace"))
        if size > MAX_TOOL_BYTES and side_effect is not SideEffect.DISABLED:
            return None, f"its definition is over {MAX_TOOL_BYTES:,} bytes"
        return dataclasses.replace(info, size=size), ""

    def _warn_left_out(self) -> None:
        """One WARNING when what this server's listing leaves out changes."""
        lines = []
        if self.status.skipped:
            names = self.status.skipped
            lines.append(f"{len(names)} tools skipped, their names do not fit <server>__<tool> "
                         f"in [a-zA-Z0-9_-]{{1,64}}: {', '.join(names[:10])}"
                         + (f" and {len(names) - 10} more" if len(names) > 10 else ""))
        if self.status.left_out:
            lines.append(left_out_line(self.status.left_out))
        line = self._redact("; ".join(lines)) if lines else None
        if line is not None and line != self._left_logged:
            log.warning("mcp server %s: %s", self.config.name, line)
        self._left_logged = line

    def _class_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self._tools.values():
            counts[t.side_effect.value] = counts.get(t.side_effect.value, 0) + 1
        return dict(sorted(counts.items()))

    def tool(self, name: str) -> ToolInfo | None:
        return self._tools.get(name)

    async def refresh(self) -> bool:
        """Ask the server for its tools again (a health check that also sees a changed
        listing). False, and a restart under way, when the connection is gone."""
        client = self._client
        if client is None or self.status.state is not ServerState.READY:
            return False
        try:
            with anyio.fail_after(self.config.timeout_s):
                listed = await self._list_tools(client, refresh=True)
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                self._connection_lost("the connection closed")
            return False
        except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        self._set_tools(listed)
        return True

    def _connection_lost(self, why: str) -> None:
        if self._client is not None:
            self._lost = why
            self._client = None
            self.status.state = ServerState.RESTARTING
            self.status.reason = self._redact(why)
            self._wake.set()

    # -- calls ----------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """Call `tool` with `arguments`, bounded by timeout_s. Never raises for what the
        server does: a crash, a hang, an error or garbage is a ToolResult with its status.
        The text is redacted and not yet capped (runtime/hands/hands.py caps it)."""
        info = self._tools.get(tool)
        if info is None:
            return self._result(tool, CallStatus.UNKNOWN_TOOL,
                                f"{self.config.name} offers no tool named {tool!r}")
        why = self.check(info, arguments)
        if why:
            return self._result(tool, CallStatus.INVALID_ARGUMENTS, why)
        client = self._client
        if client is None or self.status.state is not ServerState.READY:
            why = self.status.reason or self.status.state.value
            return self._result(tool, CallStatus.UNAVAILABLE, f"server {self.config.name} is not "
                                f"running ({why}); try again later")
        t0 = self._clock()
        status, text, structured = await self._send(client, tool, arguments)
        if self._tail is not None:
            self._tail.trim()  # a chatty server's stderr stays small
        return self._result(tool, status, text, structured, self._clock() - t0)

    def check(self, info: ToolInfo, arguments: Any) -> str | None:
        """Why a call with these arguments is not sent (they break the tool's schema, or the
        schema broke the check: one WARNING), redacted, or None."""
        try:
            why = problem(info.input_schema, arguments)
        except SchemaUnusable as e:
            why = self._redact(f"the tool cannot be called: {e}")
            log.warning("mcp tool %s: %s; the call is not sent", info.name, why)
            return why
        return self._redact(f"arguments rejected: {why}") if why else None

    async def _send(self, client: Client, tool: str,
                    arguments: dict[str, Any]) -> tuple[CallStatus, str, Any]:
        timeout = self.config.timeout_s
        try:
            r = await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as e:
            if e.code == REQUEST_TIMEOUT:
                return CallStatus.TIMEOUT, f"no answer within {timeout:g}s; the call was cancelled", None
            if e.code == CONNECTION_CLOSED:
                return self._crashed(tool)
            return CallStatus.PROTOCOL_ERROR, f"the server answered an error: {describe(e)}", None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
            return self._crashed(tool)
        except Exception as e:  # noqa: BLE001 - a malformed answer is the server's fault, not ours
            return CallStatus.PROTOCOL_ERROR, f"unusable answer: {describe(e)}", None
        text = content_text(r.content, r.structured_content)
        return (CallStatus.TOOL_ERROR if r.is_error else CallStatus.OK), text, r.structured_content

    def _crashed(self, tool: str) -> tuple[CallStatus, str, Any]:
        self._connection_lost(f"the connection closed during a call to {tool}")
        return (CallStatus.CRASHED, f"server {self.config.name} stopped during the call; it is being "
                "restarted, and whether the call took effect is unknown", None)

    def _result(self, tool: str, status: CallStatus, text: str, structured: Any = None,
                seconds: float = 0.0) -> ToolResult:
        return ToolResult(self.config.name, tool, status, self._redact(text), None,
                          redact_json(structured, self._redact), round(seconds, 3))


def redact_json(value: Any, redact: Redact) -> Any:
    """A structured result with every string in it (keys included) redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_json(k, redact): redact_json(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v, redact) for v in value]
    return value


def left_out_line(left_out: dict[str, str], names: int = 3) -> str:
    """Tools not offered (tool -> why) as one line, grouped by why, a few names each."""
    by_why: dict[str, list[str]] = {}
    for tool, why in left_out.items():
        by_why.setdefault(why, []).append(tool)
    parts = [f"{why} ({len(tools):,}: {', '.join(tools[:names])}"
             f"{', ...' if len(tools) > names else ''})" for why, tools in by_why.items()]
    return f"{len(left_out):,} tools left out, not offered to the model: {'; '.join(parts)}"


def _guard_output_schemas(client: Client, tools: list[Any]) -> None:
    """The SDK checks a result's structured content against the tool's output schema with
    jsonschema as it is, so a server's catastrophic `pattern` would run here: hand the SDK's
    cache of compiled validators ours, which runs no regular expression of the server's
    (runtime/hands/schema.py). An SDK without that cache is left as it is."""
    with contextlib.suppress(RuntimeError):
        cache = getattr(client.session, "_tool_output_validators", None)
        if not isinstance(cache, dict):
            return
        for t in tools:
            out = getattr(t, "output_schema", None)
            if isinstance(out, dict):
                with contextlib.suppress(Exception):
                    cache[t.name] = local_validator(out)
