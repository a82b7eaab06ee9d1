"""What a hostile MCP server may send (issue 38, items 4-8 and 18; ADR-0039): schemas that
point elsewhere or backtrack forever, secrets in its tools' descriptions, 20,000 tools, a
50 MB answer, lines that are not JSON-RPC. Each must leave the tick, the model's requests, the
database and `coworker run`'s output as they should be.

The fast tests call runtime/hands' checks and caps directly (`ServerRunner` takes the SDK's own
`Tool` objects, as a listing gives them); the slow ones run tests/mcp_servers/hostile.py, a real
server over stdio, under the real loop and the real anthropic client against the local
Messages API."""

from __future__ import annotations

import http.server
import json
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from runtime.hands import McpSection, McpServer, SideEffect
from runtime.hands import hands as hands_mod
from runtime.hands.hands import Hands, Redactor
from runtime.hands.result import MAX_STORED_CHARS, cap, keep
from runtime.hands.schema import SchemaUnusable, local_validator, problem, unusable
from runtime.hands.server import MAX_TOOL_BYTES, MAX_TOOLS, ServerRunner
from runtime.home import Home
from runtime.loop import Loop

from .conftest import coworker, tell, write_config
from .fakeapi import FakeMessagesAPI, text, tool_use
from .test_hands_loop import events, ticks

HOSTILE = str(Path(__file__).resolve().parent / "mcp_servers" / "hostile.py")
SECRET = "tok-hostile-5be1c0de77"
CATASTROPHIC = "a" * 40 + "!"  # ^(a+)+$ backtracks 2**40 times before it says no


@pytest.fixture
def web() -> Iterator[tuple[str, list[str]]]:
    """A local web server that counts the GETs it answers: (its url, the paths asked for)."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/x", asked
    finally:
        server.shutdown()
        server.server_close()


def runner(secret: str | None = None, **kw: Any) -> ServerRunner:
    """A runner of a server named `h` that is never started: its listing is handed to it."""
    config = McpServer(name="h", command=sys.executable, **kw)
    return ServerRunner(config, redact=Redactor([secret] if secret else []))


def tool(name: str, schema: dict[str, Any] | None = None, title: str | None = None,
         **kw: Any) -> types.Tool:
    return types.Tool(name=name, input_schema=schema or {"type": "object"}, title=title,
                      annotations=types.ToolAnnotations(readOnlyHint=True, title=title), **kw)


REF = {"type": "object", "properties": {"x": {"$ref": "URL"}}}
PATTERN = {"type": "object", "required": ["text"],
           "properties": {"text": {"type": "string", "pattern": "^(a+)+$"}}}


# --- 4. a schema's $ref is never fetched ------------------------------------------------------

def test_a_remote_ref_is_never_fetched_and_breaks_only_that_call(web, caplog):
    url, asked = web
    schema = json.loads(json.dumps(REF).replace("URL", url))
    assert "refers outside itself" in (unusable(schema) or "")
    with pytest.raises(SchemaUnusable):
        problem(schema, {"x": 1})
    r = runner()
    r._set_tools([tool("fetchy", schema), tool("echo")])
    assert [t.tool for t in r.status.tools] == ["echo"] and list(r.status.left_out) == ["fetchy"]
    info = r.tool("echo")
    with caplog.at_level(logging.WARNING, "runtime.hands"):
        why = r.check(info.__class__(**{**info.__dict__, "input_schema": schema}), {"x": 1})
    assert why and "cannot be called" in why
    assert [rec.levelname for rec in caplog.records if "not sent" in rec.getMessage()] == ["WARNING"]
    assert asked == [], "a server's schema made the coworker fetch a URL"


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "int"}}},  # not JSON Schema
    {"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}},  # relative, elsewhere
    {"type": "object", "$schema": ["not", "a", "uri"]},
])
def test_a_schema_that_cannot_be_used_leaves_its_tool_out_with_one_warning(schema, caplog):
    r = runner()
    with caplog.at_level(logging.WARNING, "runtime.hands"):
        r._set_tools([tool("bad", schema), tool("echo")])
        r._set_tools([tool("bad", schema), tool("echo")])  # a refresh: said once, not again
    assert [t.tool for t in r.status.tools] == ["echo"] and list(r.status.left_out) == ["bad"]
    assert len([rec for rec in caplog.records if "left out" in rec.getMessage()]) == 1


def test_a_ref_within_the_schema_still_checks_arguments():
    schema = {"type": "object", "$defs": {"n": {"type": "integer"}},
              "properties": {"a": {"$ref": "#/$defs/n"}}}
    assert unusable(schema) is None
    assert problem(schema, {"a": 3}) is None and "integer" in (problem(schema, {"a": "x"}) or "")


# --- 6. no regular expression of a server's runs here ---------------------------------------

@pytest.mark.timeout(30)
@pytest.mark.parametrize("schema, arguments", [
    (PATTERN, {"text": CATASTROPHIC}),
    ({"type": "object", "propertyNames": {"pattern": "^(a+)+$"}}, {CATASTROPHIC: 1}),
    ({"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}},
      "additionalProperties": False}, {CATASTROPHIC: 1}),
    ({"type": "object", "patternProperties": {"^(a+)+$": {}},
      "unevaluatedProperties": False}, {CATASTROPHIC: 1}),
])
def test_a_catastrophic_pattern_is_never_run(schema, arguments):
    assert unusable(schema) is None  # the tool stays usable; the server judges its pattern
    assert problem(schema, arguments) is None
    assert "string" in (problem(PATTERN, {"text": 5}) or "")  # the rest is still checked


@pytest.mark.timeout(30)
def test_an_output_schema_pattern_is_never_run_either():
    out = {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(a+)+$"}}}
    assert list(local_validator(out).iter_errors({"text": CATASTROPHIC})) == []


# --- 5. a secret in what a server lists never reaches the model -----------------------------

def test_a_secret_in_a_tools_description_title_or_schema_is_redacted():
    r = runner(SECRET)
    r._set_tools([
        tool("leak", {"type": "object", "description": f"key {SECRET}",
                      "properties": {SECRET: {"type": "string", "default": SECRET}}},
             title=f"Leaky {SECRET}", description=("x" * 1014) + SECRET),
        tool(f"x{SECRET}"),  # a name that holds it: left out, the name redacted
    ])
    [info] = r.status.tools
    assert SECRET not in json.dumps(info.definition()) + json.dumps(info.annotations)
    assert "[redacted]" in info.definition()["input_schema"]["description"]
    assert SECRET[:8] not in info.description  # redacted before the cut, never a prefix left
    assert list(r.status.left_out) == ["x[redacted]"]


# --- 7. a server's tools are capped ---------------------------------------------------------

def test_twenty_thousand_tools_offer_the_first_few_by_name_with_one_warning(caplog):
    r = runner()
    listed = [tool(f"t{i:05d}", description="d" * 200) for i in reversed(range(20_000))]
    with caplog.at_level(logging.WARNING, "runtime.hands"):
        r._set_tools(listed)
    assert [t.tool for t in r.status.tools] == [f"t{i:05d}" for i in range(MAX_TOOLS)]
    assert len(r.status.left_out) == 20_000 - MAX_TOOLS
    [warning] = [rec for rec in caplog.records if "left out" in rec.getMessage()]
    assert "19,872" in warning.getMessage()


def test_a_disabled_tool_does_not_count_against_the_cap():
    r = runner(disabled=["t00000"])
    r._set_tools([tool(f"t{i:05d}") for i in range(MAX_TOOLS + 1)])
    offered = [t for t in r.status.tools if t.side_effect is not SideEffect.DISABLED]
    assert len(offered) == MAX_TOOLS and not r.status.left_out


def test_a_tool_over_its_byte_cap_is_left_out():
    r = runner()
    r._set_tools([tool("bloated", {"type": "object", "description": "x" * MAX_TOOL_BYTES}),
                  tool("echo")])
    assert [t.tool for t in r.status.tools] == ["echo"] and "bytes" in r.status.left_out["bloated"]


def test_the_bytes_of_all_servers_tools_are_capped_in_a_stable_order(monkeypatch, caplog):
    section = McpSection(servers=[McpServer(name=n, command=sys.executable) for n in "ab"])
    hands = Hands(section)
    for config in section.servers:
        hands._runners[config.name] = r = hands._runner(config)
        r._set_tools([tool(f"t{i}", description="d" * 300) for i in range(4)])
    # room for all of a's tools and a little more, not for one of b's
    monkeypatch.setattr(hands_mod, "MAX_ALL_TOOL_BYTES",
                        sum(t.size for t in hands._runners["a"].status.tools) + 50)
    with caplog.at_level(logging.WARNING, "runtime.hands"):
        first = [t["name"] for t in hands.tool_definitions()]
        assert first == [t["name"] for t in hands.tool_definitions()]
    assert first == ["a__t0", "a__t1", "a__t2", "a__t3"]
    assert hands.tool("b__t0") is None and hands.tool("a__t0") is not None
    assert sorted(hands.left_out("b")) == ["t0", "t1", "t2", "t3"]
    assert len([rec for rec in caplog.records if "in all" in rec.getMessage()]) == 1


# --- 8. what is stored of a result is capped ------------------------------------------------

def test_a_huge_result_is_stored_capped_with_its_size_and_digest():
    huge = "y" * (MAX_STORED_CHARS * 3)
    shown, full = cap(huge, 20_000)
    assert full is not None and "are kept" in shown
    stored = keep(full)
    assert len(stored) < MAX_STORED_CHARS + 200
    assert f"{len(huge):,}" in stored and "sha256" in stored
    assert keep("small") == "small"


# --- slow: the real hostile server under the real loop ----------------------------------------

def configure(home: Home, api: FakeMessagesAPI, *flags: str, env: str = "{}") -> None:
    write_config(home.root, api.url)
    with open(home.config_path, "a", encoding="utf-8") as f:
        f.write(f'\n[mcp]\n[[mcp.servers]]\nname = "h"\ncommand = {json.dumps(sys.executable)}\n'
                f"args = {json.dumps([HOSTILE, *flags])}\nenv = {env}\ntimeout_s = 30\n")


def one_tick(home: Home) -> Any:
    return ticks(Loop(home, home.settings()), 1)[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_remote_ref_tool_is_not_offered_and_the_tick_goes_on(home: Home, api, web):
    url, asked = web
    configure(home, api, "--ref", url)
    tell(home, "use fetchy")
    api.enqueue(tool_use("h__fetchy", {"x": 1}), text("it is not there"))
    one_tick(home)
    names = [t["name"] for t in api.bodies[0]["tools"]]
    assert "h__echo" in names and "h__fetchy" not in names
    assert asked == []
    [result] = events(home, "tool_result")
    assert "not offered" in result.body or "no tool" in result.body
    assert events(home, "reply") or len(api.bodies) == 2  # the turn finished


@pytest.mark.slow
@pytest.mark.timeout(120)  # held, it would run for hours
def test_a_catastrophic_pattern_does_not_hold_the_tick(home: Home, api):
    configure(home, api, "--pattern")
    tell(home, "match this")
    api.enqueue(tool_use("h__match", {"text": CATASTROPHIC}), text("done"))
    one_tick(home)
    [result] = events(home, "tool_result")
    assert "match:" in result.body  # sent: the server judged its own pattern


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_secret_a_server_lists_never_reaches_the_model(home: Home, api):
    configure(home, api, "--leak", "HOSTILE_TOKEN", env=f'{{ HOSTILE_TOKEN = "{SECRET}" }}')
    tell(home, "anything?")
    api.enqueue(text("nothing"))
    one_tick(home)
    body = json.dumps(api.bodies[0])
    assert "h__leak" in body and SECRET not in body


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_five_thousand_tools_are_capped_in_requests_and_doctor_says_so(home: Home, api):
    configure(home, api, "--tools", "5000")  # the cap at 20k is checked in process above
    tell(home, "anything?")
    api.enqueue(text("nothing"))
    one_tick(home)
    mcp = [t for t in api.bodies[0]["tools"] if t["name"].startswith("h__")]
    assert len(mcp) == MAX_TOOLS
    assert len(json.dumps(api.bodies[0]["tools"])) < hands_mod.MAX_ALL_TOOL_BYTES + 100_000
    r = coworker("doctor", "--no-model")
    [line] = [ln for ln in r.stdout.splitlines() if " mcp: h:" in ln]
    assert line.startswith("WARN") and f"more than {MAX_TOOLS} tools" in line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_huge_result_is_stored_capped(home: Home, api):
    configure(home, api)
    tell(home, "fetch it all")
    api.enqueue(tool_use("h__huge", {"chars": MAX_STORED_CHARS * 3}), text("long"))
    one_tick(home)
    [result] = events(home, "tool_result")
    stored = result.meta.get("full_text") or ""
    assert len(stored) < MAX_STORED_CHARS + 200 and "sha256" in stored


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_line_that_is_not_json_is_one_warning_in_runs_output(home: Home, api):
    configure(home, api)
    tell(home, "make noise")
    api.enqueue(tool_use("h__noise", {"text": "x"}), text("heard"))
    r = coworker("run", "--once")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "ERROR" not in r.stderr, r.stderr
    said = [ln for ln in r.stderr.splitlines() if "JSON" in ln]
    assert len(said) == 1 and "WARNING" in said[0] and "mcp server h" in said[0], r.stderr
