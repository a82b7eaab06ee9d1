"""The team's MCP at `coworker serve`'s /mcp (issue 41; docs/team.md).

The server runs for real: `ServerThread` in this process, on a free port, as the loop starts it
with `[serve] enabled`; it is spoken to over loopback by the SDK's own streamable-HTTP client
with the bearer token in its headers, and by plain HTTP requests where the status and body of a
refusal are the point. Clients are made, listed and revoked through the real CLI. What is
written is read back from the real SQLite store: the event, its actor and author_kind, its
pending input, the promotion the gate made of a "remember", the counted calls.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import Implementation

from runtime.home import Home
from runtime.loop import Loop
from runtime.memory import gate
from runtime.serve.server import ServerThread
from runtime.store import Event, Store, inputs
from runtime.store import clients as clients_store
from runtime.store import events as ev
from runtime.store import promotions as pr

from .conftest import coworker, run_tick
from .test_serve import configure

READS = ["memory_recall", "memory_search", "memory_walk", "pins_list"]
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "curl", "version": "1"}}})


# --- helpers ---------------------------------------------------------------------------------

@contextlib.contextmanager
def serving(home: Home, **serve: Any) -> Iterator[int]:
    """The real server on a free port, for the length of the block; yields the port."""
    configure(home, **serve)
    t = ServerThread.start(home, home.settings())
    try:
        yield t.port
    finally:
        t.stop()


def add(name: str, *can: str) -> str:
    """`coworker clients add NAME [--can tell]`, as the owner types it: the token it prints."""
    done = coworker("clients", "add", name, *can)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and len(lines[0]) >= 43, done.stdout  # the token, alone
    assert "Authorization: Bearer" in done.stderr and "/mcp" in done.stderr
    return lines[0]


@contextlib.asynccontextmanager
async def connect(port: int, token: str | None, seen: list[int] | None = None,
                  name: str = "some-agent", **headers: str) -> AsyncIterator[Client]:
    """The SDK's streamable-HTTP client, its token in the Authorization header; `seen` gets
    the status of every HTTP response it receives."""
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"

    async def status(response: httpx2.Response) -> None:
        if seen is not None:
            seen.append(response.status_code)
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30),
                                  event_hooks={"response": [status]}) as http, \
            Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http),
                   client_info=Implementation(name=name, version="1.0")) as client:
        yield client


def talk(port: int, token: str | None, body: Callable[[Client], Awaitable[Any]],
         **kw: Any) -> Any:
    async def go() -> Any:
        with anyio.fail_after(30):
            async with connect(port, token, **kw) as client:
                return await body(client)
    return anyio.run(go)


def refused(port: int, token: str | None, **kw: Any) -> list[int]:
    """The statuses the SDK's client saw while it failed to connect with `token`."""
    seen: list[int] = []

    async def body(client: Client) -> None:
        raise AssertionError("connected")
    with pytest.raises(ExceptionGroup) as e:  # the SDK's MCPError, in its task groups
        talk(port, token, body, seen=seen, **kw)
    assert e.group_contains(MCPError, depth=None) and not e.group_contains(AssertionError)
    return seen


def post(port: int, body: str, headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
    """One plain POST to /mcp: its status, headers and body."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/mcp", body=body.encode(), headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            **headers})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


def messages(home: Home) -> list[Event]:
    with Store.open(home.db_path, readonly=True) as store:
        return [e for e in ev.tail(store, 1000) if e.kind == "message"]


def tell(port: int, token: str, text: str, name: str = "some-agent") -> Any:
    async def body(client: Client) -> Any:
        return await client.call_tool("tell", {"text": text})
    return talk(port, token, body, name=name)


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "/mcp" in r.getMessage()
            and "refused" in r.getMessage()]


# --- refused -----------------------------------------------------------------------------------

def test_no_token_a_wrong_token_and_a_revoked_token_are_refused_401(
        offline_home: Home, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    token = add("ci-bot")
    revoked = add("old-bot", "--can", "tell")
    assert coworker("clients", "revoke", "old-bot").returncode == 0
    before = len(messages(offline_home))
    sent = 0  # requests refused
    with serving(offline_home) as port:
        for given in (None, token[:-1] + ("A" if token[-1] != "A" else "B"), revoked):
            seen = refused(port, given)
            assert set(seen) == {401}, given
            sent += len(seen) + 1
            status, headers, body = post(port, INITIALIZE, {} if given is None else
                                         {"Authorization": f"Bearer {given}"})
            assert status == 401, body
            assert headers["www-authenticate"].startswith('Bearer error="invalid_token"')
            assert "resource_metadata=" in headers["www-authenticate"]
            assert json.loads(body) == {"error": "invalid_token",
                                        "error_description": "Authentication required"}
        seen = []
        assert talk(port, token, lambda c: c.call_tool("pins_list", {}), seen=seen).is_error \
            is False  # the right token, on the same server: answered
        assert set(seen) <= {200, 202}, seen
    assert len(messages(offline_home)) == before
    said = refusals(caplog)
    reasons = [line.split("refused: ", 1)[1] for line in said]
    assert len(said) == sent, said  # one WARNING a refused request
    assert all(r.endswith("; nothing written") for r in reasons), reasons
    assert {r.split(" (")[0].split(",")[0].split(";")[0] for r in reasons} == {
        "no token", "an unknown token", "the token of client old-bot"}, reasons
    assert not [r for r in caplog.records if token in r.getMessage() or
                revoked in r.getMessage() or token[:-1] in r.getMessage()]


def test_a_wrong_origin_is_refused_403_and_nothing_is_written(offline_home: Home):
    token = add("planner", "--can", "tell")
    with serving(offline_home, allowed_hosts=["coworker.example.org"]) as port:
        assert set(refused(port, token, Origin="http://evil.example")) == {403}
        status, _, body = post(port, INITIALIZE, {"Authorization": f"Bearer {token}",
                                                  "Origin": "https://coworker.example.org.evil"})
        assert (status, body) == (403, "Invalid Origin header")
        assert messages(offline_home) == []
        # the server's own names are let through: its bind address and a reverse proxy's
        for origin in (f"http://127.0.0.1:{port}", "https://coworker.example.org",
                       "http://localhost:3000"):
            assert post(port, INITIALIZE, {"Authorization": f"Bearer {token}",
                                           "Origin": origin})[0] == 200, origin
        assert not tell(port, token, "from the right origin").is_error
    assert [e.body for e in messages(offline_home)] == ["from the right origin"]


# --- what a client may do ----------------------------------------------------------------------

def test_a_read_client_walks_searches_recalls_and_cannot_tell(offline_home: Home):
    from .test_mcp import seed

    ids = seed(offline_home)
    token = add("reader")
    before = len(messages(offline_home))

    async def body(client: Client) -> dict[str, Any]:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        got = {"tools": tools}
        for name, args in (("memory_walk", {"query": "billing invoice rounding"}),
                           ("memory_search", {"query": "exporter euro sign"}),
                           ("memory_recall", {"text": "what about the billing rounding?"}),
                           ("pins_list", {}), ("tell", {"text": "remember that Bob owns it"})):
            got[name] = await client.call_tool(name, args)
        got["MEMORY.md"] = await client.read_resource("memory://MEMORY.md")
        return got
    with serving(offline_home) as port:
        got = talk(port, token, body, name="owner")
    assert got["tools"] == sorted([*READS, "tell"])
    assert not any(got[n].is_error for n in READS)
    walked = got["memory_walk"].structured_content
    assert not walked["refused"] and {e["id"] for e in walked["events"]} & set(ids["billing"])
    assert got["memory_search"].structured_content["hits"][0]["id"] == ids["exporter"][0]
    assert got["memory_recall"].structured_content["items"]
    assert [p["text"] for p in got["pins_list"].structured_content["pins"]] == [
        "Dana owns billing; ask her before changing invoices."]
    assert got["tell"].is_error
    said = got["tell"].content[0].text
    assert "client reader may only read" in said and "--can tell" in said, said
    assert "nothing was written" in said
    assert len(messages(offline_home)) == before


def _tick(home: Home) -> None:
    loop = Loop(home, home.settings())
    try:
        run_tick(loop)
    finally:
        loop.store.close()


@pytest.mark.parametrize("mode", ["auto", "gated"])
def test_a_tell_clients_message_is_an_agents_input_and_its_remember_only_queued(
        offline_home: Home, mode: str):
    """The actor is the token's NAME, whatever the client calls itself ("owner" here)."""
    token = add("planner", "--can", "tell")
    with serving(offline_home, memory={"memory_promotions": mode}) as port:
        said = tell(port, token, "remember that Bob owns the parser fix", name="owner")
    assert not said.is_error, said
    e = messages(offline_home)[-1]
    assert e.id == said.structured_content["event_id"]
    assert (e.actor, e.author_kind, e.meta) == ("mcp:planner", "agent", {"via": "mcp"})
    assert not e.owners_words
    with Store.open(offline_home.db_path, readonly=True) as store:
        assert inputs.status_of(store, e.id) == "pending"
    _tick(offline_home)
    with Store.open(offline_home.db_path, readonly=True) as store:
        row = {p.text: p for p in pr.listing(store)}["Bob owns the parser fix"]
    assert (row.status, row.origin, row.reason) == ("queued", "agent", gate.AGENT_REASON)
    assert "Bob" not in offline_home.memory_md.read_text(encoding="utf-8")


# --- on a running server: added, revoked, counted ----------------------------------------------

def test_a_client_added_on_a_running_server_works_at_once_and_revoking_stops_it_at_once(
        offline_home: Home):
    async def body(client: Client) -> tuple[Any, list[int]]:
        first = await client.call_tool("memory_search", {"query": "anything"})
        assert coworker("clients", "revoke", "late-bot").returncode == 0
        seen.clear()
        with pytest.raises(MCPError):  # the SDK's error for a 401 mid-session
            await client.call_tool("memory_search", {"query": "anything"})
        return first, list(seen)

    with serving(offline_home) as port:
        assert set(refused(port, "not-yet-a-token")) == {401}
        seen: list[int] = []
        token = add("late-bot")  # the server is running: no restart
        first, after = talk(port, token, body, seen=seen)
        assert not first.is_error
        assert 401 in after, after
        assert set(refused(port, token)) == {401}


def test_clients_list_shows_each_clients_counted_calls(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture):
    reader, teller = add("reader"), add("teller", "--can", "tell")

    async def reads(client: Client) -> None:
        await client.call_tool("memory_search", {"query": "parser"})
        await client.call_tool("memory_search", {"query": "billing"})
        await client.call_tool("tell", {"text": "may I?"})
        await client.read_resource("memory://memory-map.md")
    with serving(offline_home) as port:
        talk(port, reader, reads)
        tell(port, teller, "the nightly build is green")
        # a count that fails is a WARNING, and the call goes on
        monkeypatch.setattr(clients_store, "count", _broken)
        assert not tell(port, teller, "counted or not, told").is_error
    assert "teller's call of tell not counted" in caplog.text
    done = coworker("clients", "list", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in map(json.loads, done.stdout.splitlines())}
    # what each was given: the reader's refused tell is no call of tell
    assert rows["reader"]["calls"] == {"memory-map.md": 1, "memory_search": 2}
    assert rows["teller"]["calls"] == {"tell": 1}
    assert rows["reader"]["can"] == "read" and rows["teller"]["can"] == "tell"
    assert rows["reader"]["last_call_at"] >= rows["reader"]["created_at"]
    assert rows["reader"]["revoked_at"] is None
    table = coworker("clients", "list").stdout
    assert "memory_search 2" in table and "teller" in table, table


def _broken(store: Store, client_id: int, what: str) -> None:
    raise RuntimeError("the disk is full")


# --- the CLI -----------------------------------------------------------------------------------

@pytest.mark.parametrize("args,code,says", [
    (("clients", "add", "two words"), 2, "is not a client name: 1 to 40 characters"),
    (("clients", "add", "mcp:x"), 2, "no spaces, no colons"),
    (("clients", "add", "dup"), 1, "`coworker clients revoke dup` first"),
    (("clients", "revoke", "nobody"), 1, "no active client named 'nobody'"),
    (("clients", "revoke", "dup-gone"), 1, "no active client named 'dup-gone'"),
    (("clients", "add", "x", "--can", "owner"), 2, "'owner' is not one of"),
])
def test_a_cli_mistake_is_one_line_and_a_nonzero_exit(offline_home: Home, args: tuple[str, ...],
                                                       code: int, says: str):
    add("dup")
    add("dup-gone")
    assert coworker("clients", "revoke", "dup-gone").returncode == 0
    done = coworker(*args)
    assert done.returncode == code, done
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert says in done.stderr, done.stderr
    with Store.open(offline_home.db_path, readonly=True) as store:
        assert [c.name for c in clients_store.listing(store)] == ["dup", "dup-gone"]


def test_a_source_that_keeps_failing_tokens_is_turned_away_429_but_a_right_token_is_heard(
        offline_home: Home):
    from runtime.serve.guard import Bucket, Limits

    now = [1000.0]
    limits = Limits(Bucket(1000, 100.0, lambda: now[0]), Bucket(2, 1 / 30, lambda: now[0]))
    token = add("ci-bot")
    configure(offline_home)
    t = ServerThread.start(offline_home, offline_home.settings(), limits)
    try:
        wrong = {"Authorization": "Bearer " + "x" * 43}
        assert [post(t.port, INITIALIZE, {})[0] for _ in range(3)] == [401] * 3  # no guesses
        assert [post(t.port, INITIALIZE, wrong)[0] for _ in range(2)] == [401, 401]
        status, headers, body = post(t.port, INITIALIZE, wrong)
        assert status == 429 and int(headers["retry-after"]) >= 30 and "too many" in body
        # a stranger's guesses from the same address (a proxy's) never lock a client out
        assert post(t.port, INITIALIZE, {"Authorization": f"Bearer {token}"})[0] == 200
        now[0] += 31  # one more guess is compared 30 s later
        assert post(t.port, INITIALIZE, wrong)[0] == 401
    finally:
        t.stop()


def test_the_host_as_the_guard_reads_it_and_each_stranger_behind_a_proxy_counted_apart(
        offline_home: Home):
    from runtime.serve.guard import Bucket, Limits

    now = [1000.0]
    limits = Limits(Bucket(1000, 100.0, lambda: now[0]), Bucket(2, 1 / 30, lambda: now[0]))
    token = add("ci-bot")
    configure(offline_home, allowed_hosts=["coworker.example.org"])  # a proxy is declared
    t = ServerThread.start(offline_home, offline_home.settings(), limits)
    try:
        ok = {"Authorization": f"Bearer {token}"}
        for host in (f"LOCALHOST:{t.port}", f"localhost.:{t.port}", "Coworker.Example.Org"):
            assert post(t.port, INITIALIZE, {**ok, "Host": host})[0] == 200, host
        wrong = {"Authorization": "Bearer " + "x" * 43, "X-Forwarded-For": "1.2.3.4"}
        assert [post(t.port, INITIALIZE, wrong)[0] for _ in range(3)] == [401, 401, 429]
        other = {**wrong, "X-Forwarded-For": "5.6.7.8"}  # another stranger: not slowed
        assert post(t.port, INITIALIZE, other)[0] == 401
    finally:
        t.stop()
