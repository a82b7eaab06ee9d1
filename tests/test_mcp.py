"""`coworker mcp`: the real server in a subprocess, spoken to over stdio by the `mcp` client
(which introduces itself as CLIENT: `tell` records its messages as that agent's, not the owner's)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation

from rituals import reflect as rf
from runtime import process
from runtime.home import Home
from runtime.memory.recall import Budget, recall
from runtime.memory.walk import walk_result
from runtime.render import walk_json
from runtime.store import Event, Store, inputs
from runtime.store import events as ev
from runtime.store import pins as pn

# Every test here runs `coworker mcp` as a real process over stdio: the slow part.
pytestmark = pytest.mark.slow

TOOLS = ["memory_recall", "memory_search", "memory_walk", "pins_list", "tell"]
CLIENT = Implementation(name="test-agent", version="1.0")


def server_params(home: Home) -> StdioServerParameters:
    """How an MCP client starts the server: the one line to change for `coworker mcp`."""
    return StdioServerParameters(command=sys.executable, args=["-m", "runtime.cli", "mcp"],
                                 env={**os.environ, "COWORKER_HOME": str(home.root)},
                                 cwd=str(home.root))


@contextlib.asynccontextmanager
async def session(home: Home, errlog: Any = None) -> AsyncIterator[ClientSession]:
    kw = {} if errlog is None else {"errlog": errlog}
    async with stdio_client(server_params(home), **kw) as (r, w), \
            ClientSession(r, w, client_info=CLIENT) as s:
        await s.initialize()
        yield s


def talk(home: Home, body: Callable[[ClientSession], Awaitable[Any]], errlog: Any = None) -> Any:
    async def go() -> Any:
        with anyio.fail_after(60):
            async with session(home, errlog) as s:
                return await body(s)
    return anyio.run(go)


def seed(home: Home) -> dict[str, list[int]]:
    parser = [f"Triage of parser bugs: bug {i} reproduced on staging." for i in range(1, 9)]
    billing = [f"Billing invoice rounding error on account {i}: the total is off by a cent "
               f"because VAT is rounded per line; Dana wants it rounded once per invoice. "
               f"{'Details follow. ' * 40}" for i in range(9, 15)]
    other = ["The CSV exporter drops the euro sign in the amount column.",
             "Release notes draft, section 1."]
    with Store.open(home.db_path) as store:
        ids = ev.append_many(store, [Event(kind="note", body=b, actor="coworker",
                                           author_kind="agent")
                                     for b in (*parser, *billing, *other)])
        pn.add(store, "Dana owns billing; ask her before changing invoices.")
        gone = pn.add(store, "Old pin, since unpinned.")
        pn.unpin(store, gone.id)
    n, m = len(parser), len(billing)
    return {"parser": ids[:n], "billing": ids[n:n + m], "exporter": [ids[n + m]]}


def walk_rows(home: Home) -> list[dict]:
    with Store.open(home.db_path, readonly=True) as store:
        return [json.loads(r[0]) for r in
                store.query("SELECT data FROM telemetry WHERE kind = 'walk' ORDER BY id")]


def test_it_lists_exactly_the_five_tools(offline_home: Home):
    async def body(s: ClientSession):
        return (await s.list_tools()).tools
    tools = talk(offline_home, body)
    assert sorted(t.name for t in tools) == TOOLS
    by_name = {t.name: t for t in tools}
    assert all(t.description and len(t.description) > 60 for t in tools)
    assert by_name["memory_search"].input_schema["required"] == ["query"]
    assert by_name["tell"].input_schema["required"] == ["text"]
    assert list(by_name["tell"].input_schema["properties"]) == ["text"]  # ctx is not an argument
    assert "not from its owner" in by_name["tell"].description


def test_walk_is_the_direct_walk_at_its_threshold_and_records_door_mcp(
        offline_home: Home):
    ids = seed(offline_home)
    with Store.open(offline_home.db_path) as store:
        rf.reflect(offline_home, offline_home.settings(), store)  # a ladder to descend
    queries = ["billing invoice rounding", "kubernetes outage", "billing invoice release"]

    async def body(s: ClientSession):
        return [await s.call_tool("memory_walk", {"query": q}) for q in queries]
    results = talk(offline_home, body)
    assert not any(r.is_error for r in results)
    got = [r.structured_content for r in results]
    with Store.open(offline_home.db_path, readonly=True) as ro:
        assert got == [walk_json(walk_result(ro, q)) for q in queries]
        assert walk_json(walk_result(ro, queries[2], threshold=0.7))["refused"] is True
    assert got[1]["reason_code"] == "below_threshold" and got[1]["reason"]
    assert [g["refused"] for g in got] == [False, True, False]  # 2/3 passes its 0.5, not 0.7
    assert got[0]["trace"][0]["level"] == 1
    assert [e["id"] for e in got[0]["events"]] == ids["billing"]
    assert json.loads(results[0].content[0].text) == got[0]
    rows = walk_rows(offline_home)
    assert [(r["door"], r["refused"]) for r in rows] == [
        ("mcp", False), ("mcp", True), ("mcp", False)]


def test_search_finds_a_seeded_event_by_id(offline_home: Home):
    ids = seed(offline_home)

    async def body(s: ClientSession):
        return (await s.call_tool("memory_search", {"query": "exporter euro sign"}),
                await s.call_tool("memory_search", {"query": "invoice rounding", "limit": 3}),
                await s.call_tool("memory_search", {"query": "parser", "limit": 0}))
    found, billing, bad = talk(offline_home, body)
    hit = found.structured_content["hits"][0]
    assert (hit["kind"], hit["id"], hit["source"]) == ("event", ids["exporter"][0], "hot")
    assert "euro" in hit["excerpt"] and hit["label"] == "note"
    assert len(billing.structured_content["hits"]) == 3
    assert {h["id"] for h in billing.structured_content["hits"]} <= set(ids["billing"])
    assert bad.is_error and "limit" in bad.content[0].text
    assert "between 1 and 200" in bad.content[0].text


def test_recall_returns_items_and_the_block_within_its_budget(offline_home: Home):
    ids = seed(offline_home)
    text = "Any news on the invoice rounding for billing?"

    async def body(s: ClientSession):
        return (await s.call_tool("memory_recall", {"text": text})).structured_content
    default = talk(offline_home, body)
    with Store.open(offline_home.db_path, readonly=True) as ro:
        direct = recall(ro, text)
    assert default["terms"] == direct.terms and "invoice" in default["terms"]
    assert [i["id"] for i in default["items"]] == [h.event.id for h in direct.hits[:3]]
    assert set(i["id"] for i in default["items"]) <= set(ids["billing"])
    first = default["items"][0]
    assert set(first) == {"id", "ts", "kind", "actor", "body", "source"}
    assert first["body"] == direct.hits[0].event.body and len(first["body"]) > 600
    assert default["block"] == direct.block(Budget())
    head, *lines = default["block"].split("\n")
    assert len(lines) == 3 and sum(len(x) for x in lines) <= 1800
    assert all(len(x) <= 600 and x.endswith("…") for x in lines)
    assert any(f"[event {first['id']} ·" in x for x in lines)  # time order, not rank
    assert default["decision"] == "inject"



def test_a_tighter_budget_lists_only_the_items_its_block_holds(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    """The recall the MCP tool returns (`Actions.recall`, in process so the budget can be
    patched): an item the block has no room for is not listed as recalled."""
    from runtime.actions import Actions, Door

    seed(offline_home)
    monkeypatch.setattr("runtime.memory.service.BUDGET", Budget(2, 200, 300))
    tight = Actions(offline_home, Door.MCP).recall("Any news on the invoice rounding for billing?")
    assert len(tight["items"]) == len(tight["block"].split("\n")) - 1 == 1, tight
    assert tight["decision"] == "inject"
    assert sum(len(x) for x in tight["block"].split("\n")[1:]) <= 300

def test_pins_list_lists_the_active_pins(offline_home: Home):
    seed(offline_home)

    async def body(s: ClientSession):
        return (await s.call_tool("pins_list", {})).structured_content
    got = talk(offline_home, body)
    with Store.open(offline_home.db_path, readonly=True) as ro:
        pin = pn.active(ro)[0]
    assert got == {"pins": [{"id": pin.id, "ts": pin.ts,
                             "text": "Dana owns billing; ask her before changing invoices."}]}


def test_tell_records_an_agent_message_as_an_input_and_wakes_a_running_loop(offline_home: Home):
    woken: list[int] = []
    lock = process.PidLock(offline_home)  # this test process plays the running loop
    lock.acquire()
    previous = signal.signal(process.WAKE_SIGNAL, lambda sig, _f: woken.append(sig))
    try:
        async def body(s: ClientSession):
            said = await s.call_tool("tell", {"text": "  Please triage the parser bugs by Friday "})
            empty = await s.call_tool("tell", {"text": "   "})
            return said, empty
        said, empty = talk(offline_home, body)
    finally:
        signal.signal(process.WAKE_SIGNAL, previous)
        lock.release()
    assert not said.is_error
    assert said.structured_content["woke_pid"] == os.getpid() and woken == [process.WAKE_SIGNAL]
    with Store.open(offline_home.db_path, readonly=True) as ro:
        e = ev.get(ro, said.structured_content["event_id"])
        assert ev.total(ro) == 1  # the empty tell recorded nothing
        assert inputs.status_of(ro, e.id) == "pending"  # an input of the loop's next turn
    # another agent, named by its own clientInfo, never the owner
    assert (e.kind, e.actor, e.author_kind, e.body, e.meta) == (
        "message", "mcp:test-agent", "agent", "Please triage the parser bugs by Friday",
        {"via": "mcp"})
    assert not e.owners_words
    assert empty.is_error and "nothing to tell" in empty.content[0].text


def test_tell_with_no_loop_running_says_so(offline_home: Home):
    async def body(s: ClientSession):
        return (await s.call_tool("tell", {"text": "hello"})).structured_content
    got = talk(offline_home, body)
    assert got == {"event_id": 1, "woke_pid": None}


def test_resources_are_memory_md_and_the_memory_map(offline_home: Home):
    seed(offline_home)
    offline_home.memory_md.write_text(
        "# MEMORY\n\n- [m001] Dana owns billing — ask her first (sources: #9; 2026-11-30)\n",
        encoding="utf-8")

    async def read(s: ClientSession, uri: str) -> str:
        return (await s.read_resource(uri)).contents[0].text

    async def body(s: ClientSession):
        listed = (await s.list_resources()).resources
        before = await read(s, "memory://memory-map.md")
        with Store.open(offline_home.db_path) as store:
            rf.reflect(offline_home, offline_home.settings(), store)  # writes the map
        return listed, before, await read(s, "memory://MEMORY.md"), \
            await read(s, "memory://memory-map.md")
    listed, before, memory, after = talk(offline_home, body)
    assert {str(r.uri): r.mime_type for r in listed} == {
        "memory://MEMORY.md": "text/markdown", "memory://memory-map.md": "text/markdown"}
    assert "coworker reflect" in before and before.count("\n") == 1
    assert memory == offline_home.memory_md.read_text(encoding="utf-8")
    assert after == offline_home.memory_map.read_text(encoding="utf-8")
    assert "## The ladder" in after


CALLS = [("memory_walk", {"query": "billing invoice"}), ("memory_walk", {"query": "kubernetes"}),
         ("memory_search", {"query": "billing"}), ("memory_recall", {"text": "billing rounding"}),
         ("pins_list", {}), ("tell", {"text": "hi"}), ("tell", {"text": ""})]
URIS = ["memory://MEMORY.md", "memory://memory-map.md"]


def test_the_client_parses_every_reply_and_the_server_logs_no_traceback(
        offline_home: Home, tmp_path: Path, caplog: Any):
    seed(offline_home)

    async def body(s: ClientSession):
        await s.list_tools()
        await s.list_resources()
        for name, args in CALLS:
            await s.call_tool(name, args)
        for uri in URIS:
            await s.read_resource(uri)
        return (await s.call_tool("pins_list", {})).structured_content
    errfile = tmp_path / "server-stderr.txt"
    with caplog.at_level(logging.DEBUG, logger="mcp.client"), errfile.open("w") as errlog:
        last = talk(offline_home, body, errlog=errlog)
    assert last["pins"]  # the session was still healthy at the end
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    err = errfile.read_text(encoding="utf-8")
    assert "Traceback" not in err
    assert "coworker mcp: serving" in err  # the server's own logs go to stderr


def test_stdout_carries_only_json_rpc_until_the_server_exits(offline_home: Home):
    """Raw JSON-RPC over the pipes, then EOF: over the process's whole life stdout holds the
    replies and nothing else. (While serving, mcp 2.x points fd 1 at stderr, so a stray print
    in a tool lands there; what this guards is output before and after `run()`: imports,
    startup logging, shutdown.)"""
    seed(offline_home)
    params = server_params(offline_home)
    requests: list[dict[str, Any]] = [
        {"method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "0"}}},
        {"method": "tools/list"}, {"method": "resources/list"},
        *({"method": "tools/call", "params": {"name": n, "arguments": a}} for n, a in CALLS),
        *({"method": "resources/read", "params": {"uri": u}} for u in URIS)]
    proc = subprocess.Popen([params.command, *params.args], env=params.env, cwd=params.cwd,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    replies = []
    try:
        for i, req in enumerate(requests, 1):
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, **req}) + "\n")
            proc.stdin.flush()
            replies.append(json.loads(proc.stdout.readline()))
            if i == 1:
                proc.stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        proc.stdin.close()
        rest, err = proc.stdout.read(), proc.stderr.read()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [r["id"] for r in replies] == list(range(1, len(requests) + 1))
    assert all(r["jsonrpc"] == "2.0" and "result" in r for r in replies)
    assert [r["result"]["isError"] for r in replies[3:3 + len(CALLS)]] == [False] * 6 + [True]
    assert rest == "", f"not protocol, on stdout: {rest[:200]!r}"
    assert "Traceback" not in err


def test_an_uninitialised_home_fails_loudly_before_serving(tmp_path: Path):
    empty = tmp_path / "nowhere"
    empty.mkdir()
    params = server_params(Home.locate(empty))
    r = subprocess.run([params.command, *params.args], env=params.env, cwd=params.cwd,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and r.stdout == ""
    assert "coworker init" in r.stderr


# --- one bad input never stops it (issue 11) ---------------------------------------------------

def test_a_150k_word_query_is_cut_and_flagged_by_every_memory_tool(offline_home: Home):
    """A pasted book as a query: each memory tool reads its first MAX_QUERY_CHARS characters,
    says so, and answers (the walk once burned a CPU for minutes on this)."""
    from runtime.memory.cards import MAX_QUERY_CHARS

    ids = seed(offline_home)
    huge = "billing invoice rounding " + " ".join(f"w{i}x" for i in range(150_000))

    async def body(s: ClientSession):
        return (await s.call_tool("memory_walk", {"query": huge}),
                await s.call_tool("memory_search", {"query": huge, "limit": 3}),
                await s.call_tool("memory_recall", {"text": huge}),
                await s.call_tool("memory_search", {"query": "billing"}))
    walked, searched, recalled, plain = talk(offline_home, body)
    assert not any(r.is_error for r in (walked, searched, recalled, plain))
    w, s, r = walked.structured_content, searched.structured_content, \
        recalled.structured_content
    assert w["query_truncated"] is True and w["refused"] is True
    assert w["query_tokens"][:3] == ["billing", "invoice", "rounding"]
    assert len(w["query_tokens"]) <= MAX_QUERY_CHARS // 2
    assert s["query_truncated"] is True and {h["id"] for h in s["hits"]} <= set(ids["billing"])
    assert r["query_truncated"] is True and len(r["terms"]) <= 8
    assert "query_truncated" not in plain.structured_content
    assert walk_rows(offline_home)[-1]["query_truncated"] is True


def _initialize(proc: subprocess.Popen) -> dict:
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}) + "\n")
    proc.stdin.flush()
    reply = json.loads(proc.stdout.readline())
    proc.stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    proc.stdin.flush()
    return reply


@pytest.mark.parametrize("when", ["at once", "after initialize", "during a call that blocks"])
def test_the_server_exits_when_its_client_closes_stdin(offline_home: Home, when: str):
    """The client goes away (stdin EOF): the server exits, code 0, promptly, even while a call
    is still running. The blocked call: MEMORY.md is a FIFO nobody writes to, so reading the
    memory://MEMORY.md resource never returns (any slow call, e.g. a write waiting on a lock,
    is the same)."""
    if when == "during a call that blocks":
        offline_home.memory_md.unlink()
        os.mkfifo(offline_home.memory_md)
    params = server_params(offline_home)
    proc = subprocess.Popen([params.command, *params.args], env=params.env, cwd=params.cwd,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        if when != "at once":
            assert _initialize(proc)["id"] == 1
        if when == "during a call that blocks":
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                                         "params": {"uri": "memory://MEMORY.md"}}) + "\n")
            proc.stdin.flush()
            # the call is under way once the server logs nothing more for a moment; it can
            # only end by the server giving it up
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.5)
            assert proc.poll() is None, "the server ended before its client left"
        proc.stdin.close()
        rc = proc.wait(timeout=60)
        rest, err = proc.stdout.read(), proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, err
    # at most the SDK's "Connection closed" error for the abandoned call; nothing but protocol
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines())
    assert "Traceback" not in err
    assert "closed stdin" in err


# --- a request the SDK cannot read is still answered (issue 38, item 13) -----------------------

def _reply(proc: subprocess.Popen, line: str) -> dict | None:
    """Send one raw line; the server's reply, or None when none comes within 30 s."""
    import select

    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    return json.loads(proc.stdout.readline()) if ready else None


def test_a_lone_surrogate_in_a_request_is_read_as_u_fffd_and_answered(offline_home: Home):
    """`tell` and `memory_search` with "\\udcff" (a JSON escape for half a UTF-16 pair; the
    client library refuses to encode one, so the lines are raw) were dropped by the SDK's
    parser: no reply, ever, and nothing logged. Each is answered now, its text read with
    U+FFFD, and a line that is not JSON gets a parse error; the server logs a WARNING and
    goes on serving."""
    params = server_params(offline_home)
    proc = subprocess.Popen([params.command, *params.args], env=params.env, cwd=params.cwd,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    call = ('{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", '
            '"arguments": {"%s": "half a pair \\udcff here"}}}')
    try:
        assert _initialize(proc)["id"] == 1
        told = _reply(proc, call % (2, "tell", "text"))
        found = _reply(proc, call % (3, "memory_search", "query"))
        garbage = _reply(proc, "not json at all")
        after = _reply(proc, '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": '
                             '{"name": "pins_list", "arguments": {}}}')
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert told is not None and found is not None, "a request went unanswered"
    assert told["id"] == 2 and told["result"]["isError"] is False
    event_id = told["result"]["structuredContent"]["event_id"]
    assert found["id"] == 3 and found["result"]["isError"] is False
    assert [h["id"] for h in found["result"]["structuredContent"]["hits"]] == [event_id]
    assert garbage is not None and garbage["id"] is None
    assert garbage["error"]["code"] == -32700
    assert after is not None and after["id"] == 4 and after["result"]["isError"] is False
    assert "WARNING" in err and "lone surrogate" in err and "Traceback" not in err
    with Store.open(offline_home.db_path) as store:
        assert ev.get(store, event_id).body == "half a pair \ufffd here"
