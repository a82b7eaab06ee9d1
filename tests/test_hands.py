"""runtime/hands: the [mcp] config, side-effect classes, and real MCP servers driven through the
official SDK: mcp-server-git on a throwaway repository, mcp-server-time, and our own fault
server (tests/mcp_servers/faulty.py) for crashes, hangs, huge results, tool errors and bad
arguments. No server is faked: each test starts real processes over stdio (or HTTP)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from runtime.hands import (
    CallStatus,
    Disposition,
    McpSection,
    McpServer,
    SideEffect,
    classify,
    decide,
    full_name,
)
from runtime.hands import hands as hands_mod
from runtime.hands import server as server_mod
from runtime.hands.hands import Hands
from runtime.hands.server import ServerState
from runtime.settings_mcp import TOOL_NAME

REPO = Path(__file__).resolve().parent.parent
FAULTY = str(REPO / "tests" / "mcp_servers" / "faulty.py")
PY = sys.executable
SECRET = "s3cr3t-planted-value-9f2c"
WAIT = 60  # seconds any one test's servers may take, on a loaded 2-CPU machine


class Sleeper:
    """The injected backoff wait: records each delay; the first `free` return at once, later
    ones wait until the test ends (so a server that never starts does not spin)."""

    def __init__(self, free: int = 1) -> None:
        self.free = free
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        if len(self.delays) > self.free:
            await asyncio.Event().wait()
        await asyncio.sleep(0)


def run(coro):
    async def bounded():
        async with asyncio.timeout(WAIT * 2):
            return await coro
    return asyncio.run(bounded())


def faulty(name: str = "faulty", *extra: str, **kw) -> McpServer:
    return McpServer(name=name, command=PY, args=[FAULTY, *extra], **kw)


def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("hello\n")
    return repo


# -- config ----------------------------------------------------------------------------------

ISSUE_TOML = """
[mcp]
approval_ttl = "24h"
[[mcp.servers]]
name = "git"
command = "/home/me/coworker/.venv/bin/python"
args = ["-m", "mcp_server_git", "--repository", "/home/me/project"]
env = { }
secret_env = []
mode = "dry-run"
read_only = []
approve = ["git_commit"]
disabled = []
timeout_s = 30
[[mcp.servers]]
name = "tracker"
url = "http://127.0.0.1:8000/mcp"
headers = { Authorization = "Bearer tok-abcdef123", X-Team = "core" }
mode = "live"
[[mcp.watch]]
server = "git"
tool = "git_log"
arguments = { repo_path = "/home/me/project", max_count = 5 }
interval_s = 300
"""


def test_the_issues_toml_loads():
    section = McpSection.model_validate(tomllib.loads(ISSUE_TOML)["mcp"])
    assert [s.name for s in section.servers] == ["git", "tracker"]
    assert section.servers[0].transport == "stdio" and section.servers[1].transport == "http"
    assert section.servers[0].approve == ["git_commit"] and section.servers[0].mode == "dry-run"
    assert section.watch[0].interval_s == 300 and section.approval_ttl_s == 24 * 3600
    # The Authorization header's credential is a secret (so the header, scheme word and all,
    # never shows it); X-Team is not.
    assert section.secret_values() == ["tok-abcdef123"]


@pytest.mark.parametrize("entry, words", [
    ({"name": "Git", "command": "x"}, "pattern"),
    ({"name": "a__b", "command": "x"}, "separates server and tool"),
    ({"name": "a" * 33, "command": "x"}, "at most 32"),
    ({"name": "g"}, "exactly one of command"),
    ({"name": "g", "command": "x", "url": "http://h/mcp"}, "exactly one of command"),
    ({"name": "g", "url": "ftp://h/mcp"}, "http:// or https://"),
    ({"name": "g", "url": "http://h/mcp", "env": {"A": "b"}}, "not a url"),
    ({"name": "g", "command": "x", "headers": {"A": "b"}}, "not a command"),
    ({"name": "g", "command": "x", "secret_env": ["NOPE"]}, "which env does not set"),
    ({"name": "g", "command": "x", "approve": ["t" * 62]}, "at most 64"),
    ({"name": "g", "command": "x", "approve": ["bad tool"]}, "[a-zA-Z0-9_-]"),
    ({"name": "g", "command": "x", "approve": ["t"], "read_only": ["t"]}, "both read_only and approve"),
    ({"name": "g", "command": "x", "timeout_s": 0}, "greater than 0"),
    ({"name": "g", "command": "x", "mode": "yolo"}, "dry-run"),
    ({"name": "g", "command": "x", "typo": 1}, "Extra inputs"),
])
def test_a_bad_server_entry_is_one_clear_error(entry, words):
    with pytest.raises(ValidationError) as e:
        McpServer.model_validate(entry)
    assert words in str(e.value)


@pytest.mark.parametrize("section, words", [
    ({"servers": [{"name": "g", "command": "x"}, {"name": "g", "command": "y"}]}, "unique: g"),
    ({"servers": [], "watch": [{"server": "g", "tool": "t", "interval_s": 60}]}, "no [[mcp.servers]]"),
    ({"servers": [{"name": "g", "command": "x", "approve": ["t"]}],
      "watch": [{"server": "g", "tool": "t", "interval_s": 60}]}, "read-only tool"),
    ({"servers": [{"name": "g", "command": "x"}],
      "watch": [{"server": "g", "tool": "t"}]}, "exactly one of interval_s or cron"),
    ({"servers": [{"name": "g", "command": "x"}],
      "watch": [{"server": "g", "tool": "t", "cron": "61 * * * *"}]}, "not a valid cron"),
])
def test_a_bad_section_is_one_clear_error(section, words):
    with pytest.raises(ValidationError) as e:
        McpSection.model_validate(section)
    assert words in str(e.value)


def test_secret_values_by_name_and_by_secret_env():
    s = McpServer(name="g", command="x", env={
        "GITHUB_TOKEN": "ghp-111111", "Db_Password": "pw-222222", "API_KEY": "k-333333",
        "AUTH_HEADER": "a-444444", "CLIENT_SECRET": "c-555555", "PLAIN": "p-666666",
        "ODD_NAME": "o-777777", "EMPTY_TOKEN": " "}, secret_env=["ODD_NAME"])
    assert set(s.secret_values()) == {"ghp-111111", "pw-222222", "k-333333", "a-444444",
                                      "c-555555", "o-777777"}


@given(st.text(max_size=80))
def test_any_server_name_is_valid_for_the_model_or_refused(name):
    """Whatever name a user types: a clear error, or a name whose longest possible tool name
    still fits the Messages API once the tool part is short enough."""
    try:
        s = McpServer(name=name, command="x")
    except ValidationError:
        return
    assert TOOL_NAME.match(full_name(s.name, "t" * (64 - len(s.name) - 2)))
    assert "__" not in s.name


# -- classes ---------------------------------------------------------------------------------

R = {"readOnlyHint": True}
D = {"readOnlyHint": False, "destructiveHint": True}
W = {"readOnlyHint": False, "destructiveHint": False}


@pytest.mark.parametrize("lists, hints, expected", [
    ({}, R, SideEffect.READ),
    ({}, W, SideEffect.SIDE_EFFECT),
    ({}, None, SideEffect.SIDE_EFFECT),             # no hints: a side effect, not queued
    ({}, {"destructiveHint": True}, SideEffect.APPROVE),
    ({}, D, SideEffect.APPROVE),
    ({"approve": ["t"]}, R, SideEffect.APPROVE),     # approve beats readOnlyHint
    ({"read_only": ["t"]}, None, SideEffect.READ),   # read_only beats a missing hint
    ({"read_only": ["t"]}, D, SideEffect.READ),      # ... and a destructive one: the owner said so
    ({"disabled": ["t"], "approve": ["t"]}, R, SideEffect.DISABLED),  # disabled beats all
    ({"disabled": ["t"]}, R, SideEffect.DISABLED),
    ({"approve": ["other"]}, R, SideEffect.READ),    # lists name tools exactly
])
def test_precedence_owner_config_beats_server_hints(lists, hints, expected):
    server = McpServer(name="s", command="x", **lists)
    assert classify("t", hints, server) is expected


@pytest.mark.parametrize("cls, mode, live, expected", [
    (SideEffect.READ, "dry-run", False, Disposition.RUN),
    (SideEffect.READ, "live", True, Disposition.RUN),
    (SideEffect.SIDE_EFFECT, "dry-run", False, Disposition.DRY_RUN),
    (SideEffect.SIDE_EFFECT, "dry-run", True, Disposition.DRY_RUN),  # the server is not live
    (SideEffect.SIDE_EFFECT, "live", False, Disposition.DRY_RUN),    # the coworker is not live
    (SideEffect.SIDE_EFFECT, "live", True, Disposition.RUN),
    (SideEffect.APPROVE, "dry-run", True, Disposition.DRY_RUN),      # in dry-run: not queued
    (SideEffect.APPROVE, "live", False, Disposition.DRY_RUN),
    (SideEffect.APPROVE, "live", True, Disposition.QUEUE),
    (SideEffect.DISABLED, "live", True, Disposition.REFUSE),
])
def test_what_a_call_does(cls, mode, live, expected):
    assert decide(cls, mode, live) is expected


# -- real servers ----------------------------------------------------------------------------

@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_git_and_time_tools_are_listed_classified_called_and_stable(tmp_path):
    repo = git_repo(tmp_path)
    section = McpSection(servers=[
        McpServer(name="time", command=PY, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]),
        McpServer(name="git", command=PY, args=["-m", "mcp_server_git", "--repository", str(repo)],
                  approve=["git_commit"], disabled=["git_checkout"]),
    ])

    async def go():
        async with Hands(section, sleep=Sleeper()) as hands:
            git = {t.tool: t for t in hands.runner("git").status.tools}
            # What mcp-server-git declares, and what the owner's lists make of it.
            assert git["git_status"].annotations["readOnlyHint"] is True
            assert git["git_log"].annotations["readOnlyHint"] is True
            assert git["git_add"].annotations == {
                "readOnlyHint": False, "destructiveHint": False, "idempotentHint": True,
                "openWorldHint": False}
            classes = {n: t.side_effect for n, t in git.items()}
            assert classes["git_status"] is classes["git_log"] is SideEffect.READ
            assert classes["git_add"] is SideEffect.SIDE_EFFECT
            assert classes["git_commit"] is SideEffect.APPROVE        # the owner's approve list
            assert classes["git_reset"] is SideEffect.APPROVE         # destructiveHint: true
            assert classes["git_checkout"] is SideEffect.DISABLED
            names = [d["name"] for d in hands.tool_definitions()]
            assert "git__git_checkout" not in names and "git__git_status" in names
            assert names == sorted(names) and names[0].startswith("git__") and names[-1].startswith("time__")
            assert hands.disposition("git__git_add", coworker_live=True) is Disposition.DRY_RUN
            assert hands.disposition("git__git_checkout", coworker_live=True) is Disposition.REFUSE
            before = json.dumps(hands.tool_definitions())

            status = await hands.call("git__git_status", {"repo_path": str(repo)})
            assert status.status is CallStatus.OK, status.text
            assert "a.txt" in status.text and "No commits yet" in status.text
            now = await hands.call("time__get_current_time", {"timezone": "UTC"})
            assert now.status is CallStatus.OK and '"timezone": "UTC"' in now.text

            assert await hands.refresh() == {"git": True, "time": True}
            assert json.dumps(hands.tool_definitions()) == before  # byte-identical
    run(go())


@pytest.mark.slow
def test_a_crash_mid_call_is_an_error_result_and_the_server_restarts(caplog):
    sleeper = Sleeper(free=2)

    async def go():
        async with Hands(McpSection(servers=[faulty()]), sleep=sleeper) as hands:
            defs = json.dumps(hands.tool_definitions())
            r = await hands.call("faulty__crash", {})
            assert r.status is CallStatus.CRASHED and r.is_error
            assert "effect is unknown" in r.text
            assert json.dumps(hands.tool_definitions()) == defs   # still offered while it restarts
            runner = hands.runner("faulty")
            for _ in range(WAIT * 10):
                if runner.status.state is ServerState.READY:
                    break
                await asyncio.sleep(0.1)
            assert runner.status.state is ServerState.READY and runner.status.restarts == 1
            assert sleeper.delays == [1.0]                       # the first backoff step
            again = await hands.call("faulty__echo", {"text": "back"})
            assert again.status is CallStatus.OK and again.text == "back"
            # A good start resets the backoff: the next crash waits the first step again.
            assert (await hands.call("faulty__crash", {})).status is CallStatus.CRASHED
            for _ in range(WAIT * 10):
                if runner.status.state is ServerState.READY and runner.status.restarts == 2:
                    break
                await asyncio.sleep(0.1)
            assert runner.status.restarts == 2 and sleeper.delays == [1.0, 1.0]
    with caplog.at_level(logging.INFO, logger="runtime.hands"):
        run(go())
    assert any(r.levelno == logging.WARNING and "call to crash" in r.getMessage()
               for r in caplog.records)


@pytest.mark.slow
def test_backoff_doubles_up_to_the_cap(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(server_mod, "RESTART_INITIAL_S", 1)
    monkeypatch.setattr(server_mod, "RESTART_MAX_S", 2)
    section = McpSection(servers=[faulty("bad", "--crash-on-start")])
    sleeper = Sleeper(free=2)

    async def go():
        async with Hands(section, sleep=sleeper) as hands:
            for _ in range(WAIT * 10):
                if len(sleeper.delays) == 3:
                    break
                await asyncio.sleep(0.1)
            assert hands.runner("bad").status.state is ServerState.RESTARTING
    run(go())
    assert sleeper.delays == [1, 2, 2]


@pytest.mark.slow
def test_a_start_slower_than_a_call_may_take_is_bounded_by_start_timeout_s():
    """A busy machine starts a server slower than a call should take: `timeout_s` bounds the
    calls, `start_timeout_s` the start; a start past it is a restart with the reason."""
    async def go(server: McpServer) -> tuple[CallStatus, str]:
        async with Hands(McpSection(servers=[server]), sleep=Sleeper()) as hands:
            r = await hands.call("faulty__echo", {"text": "up"})
            return r.status, hands.runner("faulty").status.reason or ""
    slow = faulty("faulty", "--slow-start", "2", timeout_s=0.5)
    assert run(go(slow))[0] is CallStatus.OK
    status, _ = run(go(faulty("faulty", "--slow-start", "3", timeout_s=30,
                              start_timeout_s=0.5)))
    assert status is not CallStatus.OK


@pytest.mark.slow
def test_a_hang_hits_the_timeout_and_the_server_stays_usable():
    async def go():
        async with Hands(McpSection(servers=[faulty(timeout_s=1)]), sleep=Sleeper()) as hands:
            t0 = time.monotonic()
            r = await hands.call("faulty__hang", {"seconds": 600})
            assert r.status is CallStatus.TIMEOUT and "no answer within 1s" in r.text
            assert time.monotonic() - t0 < WAIT
            ok = await hands.call("faulty__echo", {"text": "still here"})
            assert ok.status is CallStatus.OK
    run(go())


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_huge_results_are_capped_and_kept_whole_tool_errors_and_bad_arguments_are_results(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hands_mod, "RESULT_CHARS", 1000)
    section = McpSection(servers=[faulty()])

    async def go():
        async with Hands(section, sleep=Sleeper()) as hands:
            big = await hands.call("faulty__huge", {"chars": 50_000})
            assert big.status is CallStatus.OK and big.truncated
            assert len(big.full_text) == 50_000 and big.text.startswith(big.full_text[:1000])
            cut = big.text[1000:].lstrip()
            assert cut.startswith("[cut:") and cut.endswith("]") and "1000 of 50000" in cut, cut
            small = await hands.call("faulty__huge", {"chars": 1000})
            assert not small.truncated and len(small.text) == 1000

            err = await hands.call("faulty__fail", {"why": "disk on fire"})
            assert err.status is CallStatus.TOOL_ERROR and "disk on fire" in err.text

            assert hands.validate("faulty__strict", {"count": 1, "label": "x"}) is None
            missing = hands.validate("faulty__strict", {"count": 1})
            assert missing is not None and "'label'" in missing and "required" in missing
            bad = await hands.call("faulty__strict", {"count": "many", "label": "x"})
            assert bad.status is CallStatus.INVALID_ARGUMENTS and "count" in bad.text
            unknown = await hands.call("faulty__nothing", {})
            assert unknown.status is CallStatus.UNKNOWN_TOOL
            assert hands.disposition("faulty__nothing", True) is Disposition.REFUSE
            classes = {t.tool: t.side_effect for t in hands.tools()}
            assert classes["write_file"] is SideEffect.SIDE_EFFECT and classes["wipe"] is SideEffect.APPROVE
    run(go())


@pytest.mark.slow
def test_a_server_that_cannot_start_is_a_warning_and_a_reason_and_the_rest_work(caplog):
    section = McpSection(servers=[
        McpServer(name="ghost", command="/nonexistent/bin/mcp-ghost"),
        faulty("bad", "--crash-on-start"),
        faulty("good"),
    ])

    async def go():
        async with Hands(section, sleep=Sleeper(free=0)) as hands:
            assert hands.runner("good").status.state is ServerState.READY
            status = {s.name: s for s in hands.status()}
            assert status["ghost"].state is ServerState.RESTARTING
            assert os.strerror(errno.ENOENT) in status["ghost"].reason
            assert "refusing to start" in status["bad"].reason          # its last stderr line
            assert [t.server for t in hands.tools()] == ["good"] * len(hands.tools())
            r = await hands.call("good__echo", {"text": "fine"})
            assert r.text == "fine"
            down = await hands.call("ghost__anything", {})
            assert down.status is CallStatus.UNKNOWN_TOOL
    with caplog.at_level(logging.INFO, logger="runtime.hands"):
        run(go())
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("mcp server ghost" in m and "No such file" in m for m in warned)
    assert any("mcp server bad" in m and "refusing to start" in m for m in warned)


@pytest.mark.slow
def test_a_planted_secret_never_reaches_logs_results_or_reasons(caplog):
    env = {"PLAIN_VAR": SECRET, "FAULTY_ECHO_ENV": "PLAIN_VAR"}
    section = McpSection(servers=[
        faulty("talker", env=env, secret_env=["PLAIN_VAR"]),
        faulty("leaky", "--crash-on-start", env=env, secret_env=["PLAIN_VAR"]),
    ])
    seen: list[str] = []

    async def go():
        async with Hands(section, sleep=Sleeper(free=0)) as hands:
            r = await hands.call("talker__echo", {"text": "env says"})
            assert r.status is CallStatus.OK
            seen.extend([r.text, repr(r)])
            assert r.text == "env says [redacted]"        # the server did get the value
            assert r.structured == {"result": "env says [redacted]"}
            crash = await hands.call("talker__crash", {})
            seen.append(crash.text)
            seen.extend(str(s) for s in hands.status())
            reason = hands.runner("leaky").status.reason
            assert "refusing to start with [redacted]" in reason
    with caplog.at_level(logging.DEBUG):
        run(go())
    seen.extend(r.getMessage() for r in caplog.records)
    assert seen and not [s for s in seen if SECRET in s]


@pytest.mark.slow
def test_reconcile_adds_removes_and_restarts_only_what_changed():
    sleeper = Sleeper()
    first = McpSection(servers=[faulty("keep"), faulty("drop"), faulty("change", timeout_s=10)])
    second = McpSection(servers=[faulty("keep"), faulty("change", timeout_s=20), faulty("new")])

    async def go():
        async with Hands(first, sleep=sleeper) as hands:
            keep = hands.runner("keep")
            change = hands.runner("change")
            done = await hands.reconcile(second)
            assert done == {"added": ["new"], "removed": ["drop"], "restarted": ["change"]}
            assert hands.runner("keep") is keep and keep.status.state is ServerState.READY
            assert hands.runner("change") is not change and change.status.state is ServerState.STOPPED
            assert hands.runner("drop") is None
            assert [s.name for s in hands.status()] == ["change", "keep", "new"]
            assert {t.server for t in hands.tools()} == {"change", "keep", "new"}
            assert (await hands.call("new__echo", {"text": "hi"})).text == "hi"
            assert await hands.reconcile(second) == {"added": [], "removed": [], "restarted": []}
    run(go())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_streamable_http_with_headers(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([PY, FAULTY, "--http", str(port)], stderr=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        server = McpServer(name="web", url=f"http://127.0.0.1:{port}/mcp",
                           headers={"Authorization": f"Bearer {SECRET}"})

        async def go():
            async with Hands(McpSection(servers=[server]), sleep=Sleeper()) as hands:
                assert hands.runner("web").status.state is ServerState.READY, hands.status()
                r = await hands.call("web__echo", {"text": "over http"})
                assert r.status is CallStatus.OK and r.text == "over http"
        run(go())
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT)
