"""`coworker mcp`: the coworker's memory served over MCP (stdio) to the tools people already run.

Owns the MCP surface of one home: the tools `memory_walk`, `memory_search`, `memory_recall`,
`pins_list` and `tell`, and the resources `memory://MEMORY.md` and `memory://memory-map.md`.
It is a thin door: every tool is an action of runtime/actions.py taken through `Door.MCP`, the
door that may only read and tell as another agent (an owner's action asked through it is
refused there). Each tool call opens a fresh Store and closes it before returning, so the server never holds a
write lock between calls and a running loop is never blocked by it. The memory tools read
(`memory_walk` also records one telemetry row, door "mcp"), all through the memory service
(`memory.service.Memory`) and one semantic channel for the server's life; a walk's refusal is
a code that `render.walk_json` puts in words here. `tell` is how another agent speaks
to the coworker: it records one message as an input of the loop, as `coworker tell` does, but
authored by an agent (actor `mcp:<client name>`, or `mcp` when the client gives no name;
author_kind `agent`), never as the owner, and wakes a running loop. A "remember ..." told this
way is only ever queued for the owner's review at the promotion gate.

Who calls is the door's to say (`build`'s `who`, a `Caller` a call): over stdio the client's
own clientInfo name, free to tell; over `coworker serve`'s `/mcp` (runtime/serve/team.py, the
same tools and resources through the SDK's streamable HTTP) the NAME of the client's token,
which may `tell` only when the owner gave it `--can tell` (else a tool error, nothing
written), each of its calls counted. A count that fails is a WARNING; the call goes on.

It never prints to stdout (stdout is the protocol; logs go to stderr only), never calls a
model, never edits or deletes an event, and never changes settings.

One bad input never stops it. A query (or recall text) longer than `cards.MAX_QUERY_CHARS`
(2,000 characters) is truncated, not refused: only its head is read and the result carries
`"query_truncated": true`. When the client goes away (stdin reaches EOF) the server exits,
code 0, at once, even while a call is still running: each tool and resource runs its blocking
work in a daemon thread (`_off_loop`), so the SDK's cancelling of calls in flight at EOF takes
effect immediately and the process never waits for an abandoned call (a write it was making
rolls back; SQLite keeps the database whole).

No request goes unanswered. The SDK drops, with no reply and no log above DEBUG, a line it
cannot read; a client then waited for ever. `_mend` reads such a line again: a request whose
text holds a lone surrogate (a JSON "\\udcff" escape: half a UTF-16 pair, which the SDK's
JSON parser refuses) is served with U+FFFD in its place, as stored text everywhere (see
`events.SURROGATE`); any other line it cannot read is answered with a JSON-RPC error (the
request's id, or null when it has none). Each is logged at WARNING.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types
from mcp.server import MCPServer
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from mcp.types import ToolAnnotations
from pydantic import ValidationError

from . import __version__, render
from .actions import Actions, Door
from .errors import CoworkerError
from .home import Home
from .memory.cards import cap_query
from .memory.embed import SemanticCache
from .store.events import SURROGATE

log = logging.getLogger(__name__)

T = TypeVar("T")

READS = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
NO_MEMORY_MD = "_No MEMORY.md yet: `coworker init` creates it._\n"
NO_MAP = ("_No memory map yet: `coworker reflect` writes state/memory-map.md the first time it "
          "runs._\n")


async def _off_loop(fn: Callable[[], T]) -> T:
    """Run the blocking `fn` in a daemon thread and wait for its result (or exception).

    When the call is cancelled (the client hung up: the SDK cancels calls in flight at stdin
    EOF) it stops waiting at once; the thread finishes on its own, and being a daemon it never
    holds up the process's exit. (The SDK's own `to_thread` for plain functions cannot be
    abandoned, and its worker threads are joined at exit: a long call kept a server whose
    client was gone alive until the call ended.)"""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # cancelled: nobody waits any more
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def work() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as e:  # handed to the awaiting task, which raises it
            error = e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the event loop is closed: the server has exited
            pass

    threading.Thread(target=work, name="coworker-mcp-call", daemon=True).start()
    return await done


async def _call(fn: Callable[[], T]) -> T:
    """One tool call's work, off the event loop; a user's error becomes the tool error the
    client sees (one line, what to do), never a traceback."""
    def run() -> T:
        try:
            return fn()
        except CoworkerError as e:
            raise ToolError(str(e)) from e
    return await _off_loop(run)


def _read(path: Path, missing: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return missing


@dataclass(frozen=True)
class Caller:
    """Who calls, as the door knows it: the name a `tell` is recorded under (actor
    `mcp:<name>`; `mcp` when None), whether it may `tell` at all, and how its calls are
    counted (None: not counted). Over stdio (`stdio_caller`) the client names itself and may
    tell; over `coworker serve`'s /mcp the name and the leave come from its token
    (runtime/serve/team.py)."""

    name: str | None
    may_tell: bool = True
    counted: Callable[[str], None] | None = None  # one call of a tool or resource, by name


Who = Callable[[Context | None], Caller]


def stdio_caller(ctx: Context | None) -> Caller:
    return Caller(client_name(ctx))


def client_name(ctx: Context | None) -> str | None:
    """The MCP client's own name (clientInfo.name of its initialize request), or None when the
    session gives none. Only printable text is kept, at most 64 characters."""
    try:
        params = ctx.request_context.session.client_params if ctx is not None else None
    except (AttributeError, ValueError):  # no request context: called outside a session
        return None
    info = getattr(params, "client_info", None)
    name = " ".join(str(getattr(info, "name", "") or "").split())
    name = "".join(ch for ch in name if ch.isprintable())[:64]
    return name or None


def _tally(caller: Caller, what: str) -> None:
    """Count one call; a count that fails is a WARNING and never stops the call."""
    if caller.counted is None:
        return
    try:
        caller.counted(what)
    except Exception as e:  # noqa: BLE001 - counting must never break a call
        log.warning("coworker mcp: %s's call of %s not counted (%s: %s); the call goes on",
                    caller.name or "a client", what, type(e).__name__, e)


def read_only(name: str | None) -> str:
    """The tool error a client that may only read gets from `tell`."""
    who = name or "NAME"
    return (f"client {who} may only read here; nothing was written. The owner can let it "
            f"tell: `coworker clients revoke {who}`, then `coworker clients add {who} --can "
            "tell` (a new token)")


def build(home: Home, who: Who = stdio_caller, token_verifier: TokenVerifier | None = None,
          auth: AuthSettings | None = None) -> MCPServer:
    """The server for this home: five tools and two resources, nothing started yet. `who`
    says who each call comes from (`Caller`): over stdio the client's own name, free to tell.
    `token_verifier` and `auth` are the SDK's bearer authentication, for HTTP."""
    semantic = SemanticCache()  # one channel for the server's life, every call shares it
    mcp = MCPServer(
        name="coworker", version=__version__, token_verifier=token_verifier, auth=auth,
        instructions=(
            "The memory of a coworker (an agent that runs in the background and remembers its "
            "work). Use memory_walk to find what it knows, from coarse summaries down to raw "
            "events; a refusal means the memory does not hold it with confidence (two in a row: "
            "stop and say so). Cite event ids when you answer. memory_search is the plain "
            "keyword search; memory_recall is what the coworker itself would recall for a "
            "message; pins_list is what the owner keeps in its context; tell sends it a message "
            "from you, another agent: it arrives as an agent's message, never as its owner's."))

    async def call(what: str, ctx: Context | None, fn: Callable[[Actions, Caller], T]) -> T:
        """One call of the tool or resource `what`, counted, as `who` says the caller is
        (asked here, in the request's own context, where the HTTP door finds its token)."""
        caller = who(ctx)

        def run() -> T:
            done = fn(Actions(home, Door.MCP, caller.name, semantic=semantic), caller)
            _tally(caller, what)  # what it was given: a refused call is not counted
            return done
        return await _call(run)

    @mcp.tool(annotations=READS)
    async def memory_walk(query: str, ctx: Context) -> dict[str, Any]:
        """Walk the coworker's memory for `query` (a few content words) from coarse summaries
        down to raw events, or refuse. Returns {refused, confidence, query_tokens,
        matched_tokens, trace, events, truncated} and, when refused, a `reason` (in words)
        and a `reason_code` (no_words, below_threshold, low_weight, no_event_holds). A refusal
        means no part of the memory matches enough of the query words (at least half
        of them): the memory does not hold it with confidence. Deterministic; no model call.
        Cite the ids in `events` when you use them. At most 2000 characters of the query are
        read; a longer one is cut and the result has "query_truncated": true."""
        return await call("memory_walk", ctx, lambda a, _: render.walk_json(a.walk(query)))

    @mcp.tool(annotations=READS)
    async def memory_search(query: str, ctx: Context, limit: int = 10,
                            after: str | None = None) -> dict[str, Any]:
        """Keyword search (BM25, best first) over the whole history, hot and archived events
        and the summary ladder's rollups, a page at a time. Returns {"hits": [{kind ("event" or
        "rollup"), id, ts, label, excerpt, score, source}], "next_cursor"}: `next_cursor` is
        null when nothing is left, else pass it as `after` (with the same query) for the next
        page; paging on reaches every match once. `limit`: 1 to 200. At most 2000 characters
        of the query are read; a longer one is cut and the result has "query_truncated":
        true."""
        if not 1 <= limit <= 200:
            raise ToolError(f"limit must be between 1 and 200, not {limit}")

        def run(a: Actions, _: Caller) -> dict[str, Any]:
            hits = a.search(query, limit, after=after)
            found: dict[str, Any] = {"hits": [h.as_dict() for h in hits],
                                     "next_cursor": hits.next_cursor}
            if cap_query(query)[1]:
                found["query_truncated"] = True
            return found
        return await call("memory_search", ctx, run)

    @mcp.tool(annotations=READS)
    async def memory_recall(text: str, ctx: Context) -> dict[str, Any]:
        """What the coworker would recall for a message `text` before answering it: the
        search terms it takes from the text, the best earlier events (within the configured
        recall budget) as {id, ts, kind, actor, body, source}, and `block`, the exact recall
        text it would put in its own context (null when nothing is recalled). At most 2000
        characters of the text are read; a longer one is cut and the result has
        "query_truncated": true."""
        return await call("memory_recall", ctx, lambda a, _: a.recall(text))

    @mcp.tool(annotations=READS)
    async def pins_list(ctx: Context) -> dict[str, Any]:
        """The owner's active pins: text the coworker keeps in its context on every tick.
        Returns {"pins": [{id, ts, text}]}, oldest first."""
        return await call("pins_list", ctx, lambda a, _: {
            "pins": [{"id": p.id, "ts": p.ts, "text": p.text} for p in a.pins()]})

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False,
                                          idempotentHint=False, openWorldHint=False))
    async def tell(text: str, ctx: Context) -> dict[str, Any]:
        """Send the coworker a message from you, another agent (not from its owner): it is
        recorded as a `message` event by actor `mcp:<your client name>`, author_kind `agent`,
        and a running coworker wakes and reads it at once (otherwise when it next starts). It
        carries no owner authority: a message beginning "remember" is only queued for the
        owner's review, never written to the coworker's memory. Returns {"event_id",
        "woke_pid"} (woke_pid is null when no coworker is running)."""
        if not text.strip():
            raise ToolError('nothing to tell: pass the message as `text`')

        def run(a: Actions, caller: Caller) -> dict[str, Any]:
            if not caller.may_tell:
                raise ToolError(read_only(caller.name))
            told = a.tell(text)
            return {"event_id": told.event_id, "woke_pid": told.woke_pid}
        return await call("tell", ctx, run)

    @mcp.resource("memory://MEMORY.md", name="MEMORY.md", mime_type="text/markdown",
                  description="What this coworker always has in mind: one entry a line, with "
                              "its sources. Curated by reflect and by the owner.")
    async def memory_md() -> str:
        return await call("MEMORY.md", None, lambda *_: _read(home.memory_md, NO_MEMORY_MD))

    @mcp.resource("memory://memory-map.md", name="memory-map.md", mime_type="text/markdown",
                  description="The map of the coworker's memory (the summary ladder, coarsest "
                              "first), regenerated by each reflect run.")
    async def memory_map() -> str:
        return await call("memory-map.md", None, lambda *_: _read(home.memory_map, NO_MAP))

    return mcp


def serve(home: Home) -> None:
    """Serve `home` over stdio until the client hangs up (stdin EOF), then return at once, even
    with a call still running (see `_off_loop`). Logs go to stderr only."""
    home.require()
    settings = home.settings()  # a broken config.toml fails here, loudly, not on the first call
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(settings.logging.level)
    log.info("coworker mcp: serving %s over stdio", home.root)
    anyio.run(_serve_stdio, build(home))  # returns at stdin EOF; calls in flight are cancelled
    busy = sum(1 for t in threading.enumerate() if t.name == "coworker-mcp-call")
    log.info("coworker mcp: the client closed stdin; exiting%s",
             f" without waiting for {busy} call(s) in flight" if busy else "")


async def _serve_stdio(mcp: MCPServer) -> None:
    """`MCPServer.run_stdio_async`, with `_mend` between the transport and the server."""
    server = mcp._lowlevel_server  # noqa: SLF001 - mcp 2.x has no public way to run it on our streams
    async with stdio_server() as (read_stream, write_stream):
        mended_writer, mended = create_context_streams[SessionMessage | Exception](0)

        async def pump() -> None:
            async with mended_writer:
                async for item in read_stream:
                    message = await _mend(item, write_stream)
                    if message is not None:
                        await mended_writer.send(message)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await server.run(mended, write_stream, server.create_initialization_options())
            tg.cancel_scope.cancel()


async def _mend(item: SessionMessage | Exception, write_stream: Any) -> SessionMessage | None:
    """The message `item` is, or None when it is a line that could not be read (answered
    here with a JSON-RPC error, logged at WARNING)."""
    if not isinstance(item, Exception):
        return item
    raw = _raw_line(item)
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:  # Python's parser reads lone surrogates; this is no JSON at all
        log.warning("coworker mcp: a line that is not JSON (%s); answered with a parse error",
                    _first_error(item))
        await _answer(write_stream, None, mcp_types.PARSE_ERROR, "not JSON: send one JSON-RPC "
                      "message a line")
        return None
    if raw is not None and (whole := _whole(data)) != data:
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_python(whole, by_name=False)
        except ValidationError:
            pass
        else:
            log.warning("coworker mcp: %s carried a lone surrogate (half a UTF-16 pair, no "
                        "text at all): read with U+FFFD in its place", _what(data))
            return SessionMessage(message)
    rid = _request_id(data)
    log.warning("coworker mcp: %s is not a JSON-RPC message the server can read (%s); "
                "answered with an error", _what(data), _first_error(item))
    await _answer(write_stream, rid, mcp_types.INVALID_REQUEST,
                  f"not a valid JSON-RPC message: {_first_error(item)}")
    return None


def _raw_line(error: Exception) -> str | None:
    """The line a transport could not parse, as the SDK's ValidationError carries it (None
    for a line that parsed but is no JSON-RPC message: then only its parts are kept)."""
    if not isinstance(error, ValidationError):
        return None
    for detail in error.errors():
        if detail.get("type") == "json_invalid" and isinstance(detail.get("input"), str):
            return detail["input"]
    return None


def _first_error(error: Exception) -> str:
    if isinstance(error, ValidationError) and error.errors():
        return str(error.errors()[0].get("msg", "invalid"))[:200]
    return f"{type(error).__name__}: {error}"[:200]


def _whole(value: Any) -> Any:
    """`value` (parsed JSON) with each lone surrogate in its text, keys included, as U+FFFD."""
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {_whole(k): _whole(v) for k, v in value.items()}
    return value


def _request_id(data: Any) -> str | int | None:
    """The id of a request (a message with a method and an id), or None."""
    if not isinstance(data, dict) or "method" not in data:
        return None
    rid = data.get("id")
    if isinstance(rid, bool) or not isinstance(rid, str | int):
        return None
    return _whole(rid)


def _what(data: Any) -> str:
    """How a log line names a message: its method and id, when it has them."""
    rid = _request_id(data)
    method = data.get("method") if isinstance(data, dict) else None
    name = _whole(method) if isinstance(method, str) else "a message"
    return f"{name[:80]!r} (id {rid!r})" if rid is not None else repr(name[:80])


async def _answer(write_stream: Any, rid: str | int | None, code: int, message: str) -> None:
    error = mcp_types.JSONRPCError(jsonrpc="2.0", id=rid,
                                   error=mcp_types.ErrorData(code=code, message=message))
    await write_stream.send(SessionMessage(error))
