"""The approval queue of MCP tool calls (runtime/store/approvals.py, ADR-0017): its transitions,
`coworker actions` (list, approve, reject, --json, the refusals), the owner's authority, a planted
secret, and `coworker mcp-tools` against real servers: the fault server of tests/mcp_servers and
a command that does not exist."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runtime.actions import Actions, Door, NotOwnersDoor
from runtime.home import Home
from runtime.secrecy import register_secret
from runtime.store import Store
from runtime.store import approvals as ap
from runtime.store import events as ev

from .conftest import REPO, coworker

FAULTY = str(REPO / "tests" / "mcp_servers" / "faulty.py")
SECRET = "tok-4f1d\"9-planted-secret"  # a quote in it: JSON escapes it, redaction must not miss it


def queue(store: Store, n: int = 1, *, ttl_s: int = 3600, now: datetime | None = None,
          tool_use_id: str | None = "use", **kw) -> ap.Approval:
    args = {"tick_id": 7, "server": "git", "tool": "git_commit", "name": "git__git_commit",
            "arguments": {"repo_path": "/tmp/r", "message": f"fix {n}"},
            "reason": "the owner asked for [b]a commit[/b]", "sources": [3, 5],
            "tool_use_id": None if tool_use_id is None else f"{tool_use_id}-{n}", "ttl_s": ttl_s}
    args.update(kw)
    return ap.add(store, now=now, **args)


@pytest.fixture
def store(offline_home: Home):
    with Store.open(offline_home.db_path) as s:
        yield s


# --- the store ----------------------------------------------------------------------------------

def test_add_is_idempotent_on_the_tool_use_id(store: Store):
    first = queue(store)
    again = queue(store, reason="a replayed turn's other words")
    assert again == first and first.status == ap.Status.WAITING
    assert (first.name, first.arguments, first.sources) == (
        "git__git_commit", {"repo_path": "/tmp/r", "message": "fix 1"}, [3, 5])
    other = queue(store, 2)
    assert other.id != first.id
    # no tool_use_id: nothing to be idempotent on, each call is its own row
    assert queue(store, 3, tool_use_id=None).id != queue(store, 3, tool_use_id=None).id
    assert ap.counts(store)["waiting"] == 4


def test_decide_moves_only_a_waiting_approval(store: Store):
    a, b = queue(store, 1), queue(store, 2)
    done = ap.decide(store, a.id, ap.Status.APPROVED, None)
    assert done.status == "approved" and done.decided_at
    with pytest.raises(ap.WrongStatus) as caught:
        ap.decide(store, a.id, ap.Status.REJECTED, "changed my mind")
    assert caught.value.status == "approved" and isinstance(caught.value, ValueError)
    assert ap.decide(store, b.id, "rejected", "not today").why == "not today"
    with pytest.raises(ap.WrongStatus):
        ap.decide(store, b.id, "approved", None)
    with pytest.raises(LookupError):
        ap.decide(store, 999, "approved", None)
    with pytest.raises(ValueError, match="approved or rejected"):
        ap.decide(store, queue(store, 3).id, "running", None)
    assert [x.id for x in ap.listing(store)] == [3]  # waiting, newest first
    assert [x.id for x in ap.listing(store, None)] == [3, 2, 1]


def test_expire_marks_only_waiting_ones_past_their_time(store: Store):
    long_ago = datetime.now(UTC) - timedelta(days=2)
    old = queue(store, 1, now=long_ago, ttl_s=3600)
    old_approved = queue(store, 2, now=long_ago, ttl_s=3600)
    ap.decide(store, old_approved.id, "approved", None, now=ev.iso_z(long_ago))
    fresh = queue(store, 3)
    # past its time but not yet marked: it cannot be decided any more
    with pytest.raises(ap.WrongStatus) as caught:
        ap.decide(store, old.id, "approved", None)
    assert caught.value.status == "expired"
    assert ap.expire(store, ev.now_iso()) == [old.id]
    assert ap.expire(store, ev.now_iso()) == []
    assert ap.get(store, old.id).status == "expired"
    assert ap.get(store, old_approved.id).status == "approved"  # decided in time: it stands
    assert ap.get(store, fresh.id).status == "waiting"
    with pytest.raises(ap.WrongStatus):
        ap.decide(store, old.id, "approved", None)


def test_an_approved_action_starts_once_even_asked_twice(offline_home: Home, store: Store):
    a, b = queue(store, 1), queue(store, 2)
    assert ap.start(store, a.id) is False  # waiting: not approved
    ap.decide(store, b.id, "approved", None)
    ap.decide(store, a.id, "approved", None)
    assert [x.id for x in ap.approved(store)] == [a.id, b.id]  # oldest first
    with Store.open(offline_home.db_path) as other:  # another connection, as a second tick
        assert ap.start(store, a.id) is True
        assert ap.start(other, a.id) is False
        assert ap.start(store, a.id) is False
    assert [x.id for x in ap.approved(store)] == [b.id]
    # a kill leaves it running: it is never started again
    assert ap.get(store, a.id).status == "running"
    ap.finish(store, a.id, True, 42)
    assert (ap.get(store, a.id).status, ap.get(store, a.id).result_event) == ("done", 42)
    assert ap.start(store, a.id) is False
    assert ap.start(store, b.id) is True
    ap.finish(store, b.id, False, None)
    assert ap.get(store, b.id).status == "failed"
    with pytest.raises(ap.WrongStatus):
        ap.finish(store, b.id, True, 1)
    with pytest.raises(LookupError):
        ap.finish(store, 999, True, 1)
    assert ap.counts(store) == {"waiting": 0, "approved": 0, "rejected": 0, "expired": 0,
                                "running": 0, "done": 1, "failed": 1}


def test_the_database_refuses_to_move_an_approval_back_or_rewrite_it(store: Store):
    a = queue(store)
    ap.decide(store, a.id, "approved", None)
    assert ap.start(store, a.id)
    for sql in ("UPDATE approvals SET status = 'approved' WHERE id = ?",
                "UPDATE approvals SET status = 'waiting' WHERE id = ?",
                "UPDATE approvals SET arguments = '{}', status = 'done' WHERE id = ?",
                "DELETE FROM approvals WHERE id = ?"):
        with pytest.raises(sqlite3.IntegrityError):
            store.execute(sql, (a.id,))
    assert ap.get(store, a.id).status == "running"


# --- coworker actions ---------------------------------------------------------------------------

def test_actions_lists_what_waits_verbatim_and_as_json(offline_home: Home, store: Store):
    a = queue(store, 1, arguments={"message": "[/x] fix [m2]", "n": 1})
    queue(store, 2)
    r = coworker("actions")
    assert r.returncode == 0, r.stderr
    block = r.stdout.split(f"#{a.id} waiting git__git_commit")[1]
    assert '"message":"[/x] fix [m2]"' in block and "the owner asked for [b]a commit[/b]" in block
    assert "tick 7" in block and "#3, #5" in block and "expires" in block
    assert r.stdout.index("#2 waiting") < r.stdout.index("#1 waiting")  # newest first
    rows = [json.loads(line) for line in coworker("actions", "--json").stdout.splitlines()]
    assert [x["id"] for x in rows] == [2, 1]
    assert rows[1]["arguments"] == {"message": "[/x] fix [m2]", "n": 1}
    assert rows[1]["sources"] == [3, 5] and rows[1]["status"] == "waiting"


def test_approve_and_reject_write_the_owners_event_and_refuse_a_second_time(
        offline_home: Home, store: Store):
    a, b = queue(store, 1), queue(store, 2)
    r = coworker("actions", "approve", str(a.id))
    assert r.returncode == 0, r.stderr
    assert f"action {a.id} approved" in r.stdout and "git__git_commit" in r.stdout, r.stdout
    assert "runs once" in r.stdout, r.stdout
    again = coworker("actions", "approve", str(a.id))
    assert again.returncode == 1 and "already approved" in again.stderr
    assert "Traceback" not in again.stderr
    no_why = coworker("actions", "reject", str(b.id))
    assert no_why.returncode == 2 and "--why" in no_why.stderr
    r = coworker("actions", "reject", str(b.id), "--why", "not on a Friday")
    assert r.returncode == 0 and f"action {b.id} rejected" in r.stdout
    assert coworker("actions", "approve", str(b.id)).returncode == 1
    assert ap.get(store, a.id).status == "approved" and ap.get(store, b.id).why == "not on a Friday"
    decisions = [e for e in ev.tail(store, 20, by_id=True) if e.kind.startswith("action_")]
    assert [(e.kind, e.meta["approval_id"]) for e in decisions] == [
        ("action_approved", a.id), ("action_rejected", b.id)]
    assert all(e.actor == "owner" and e.author_kind == "user" for e in decisions)
    # the record names the server's tool: never the owner's words at the gate
    assert not any(e.owners_words for e in decisions)
    assert "not on a Friday" in decisions[1].body
    # the owner's event names the call, never carries the model's arguments as the owner's words
    assert "fix 1" not in decisions[0].body
    listed = coworker("actions").stdout.strip()
    assert "nothing waits" in listed and len(listed.splitlines()) == 1, listed
    everything = coworker("actions", "--all").stdout
    assert "#2 rejected" in everything and "why: not on a Friday" in everything


def test_refusals_and_usage_errors(offline_home: Home, store: Store):
    unknown = coworker("actions", "approve", "99")
    assert unknown.returncode == 1 and "no action 99" in unknown.stderr
    assert coworker("actions", "reject", "99", "--why", "x").returncode == 1
    missing = coworker("actions", "approve")
    assert missing.returncode == 2 and "which action?" in missing.stderr
    assert coworker("actions", "approve", "0").returncode == 2
    assert coworker("actions", "launch", "1").returncode == 2
    for r in (unknown, missing):
        assert "Traceback" not in r.stdout + r.stderr


def test_an_expired_action_cannot_be_approved(offline_home: Home, store: Store):
    a = queue(store, now=datetime.now(UTC) - timedelta(hours=80), ttl_s=72 * 3600)
    r = coworker("actions", "approve", str(a.id))
    assert r.returncode == 1 and "expired" in r.stderr and "never runs" in r.stderr
    assert ap.get(store, a.id).status == "expired"
    assert ap.approved(store) == []
    listed = coworker("actions").stdout.strip()
    assert "nothing waits" in listed and len(listed.splitlines()) == 1, listed
    assert not [e for e in ev.tail(store, 20) if e.kind == "action_approved"]
    expired = [e for e in ev.tail(store, 20) if e.kind == "action_expired"]
    assert [e.meta["approval_id"] for e in expired] == [a.id]  # said once, not per look


def test_the_mcp_door_cannot_decide(offline_home: Home, store: Store):
    a = queue(store)
    agent = Actions(offline_home, Door.MCP, client="other-agent")
    with pytest.raises(NotOwnersDoor, match="^approve_action "):
        agent.approve_action(a.id)
    with pytest.raises(NotOwnersDoor, match="^reject_action "):
        agent.reject_action(a.id, "no")
    assert ap.get(store, a.id).status == "waiting"
    assert not [e for e in ev.tail(store, 20) if e.kind.startswith("action_")]
    assert [x.id for x in agent.waiting_actions()] == [a.id]  # reading is every door's


def test_status_counts_what_waits(offline_home: Home, store: Store):
    queue(store, 1)
    ap.decide(store, queue(store, 2).id, "rejected", "no")
    data = json.loads(coworker("status", "--json").stdout)
    assert data["actions"]["waiting"] == 1 and data["actions"]["rejected"] == 1
    status = coworker("status").stdout
    said = [ln for ln in status.splitlines() if ln.startswith("actions: ")]
    assert len(said) == 1 and "1 waiting" in said[0], status
    assert "`coworker actions`" in said[0], status


def test_a_planted_secret_reaches_neither_the_database_nor_the_output(offline_home: Home):
    register_secret(SECRET)  # as loading a config with it in an [[mcp.servers]] env does
    with Store.open(offline_home.db_path) as store:
        a = queue(store, arguments={"message": f"token is {SECRET}", SECRET: [SECRET, 1]},
                  reason=f"use {SECRET} to push")
        ap.decide(store, a.id, "rejected", f"never send {SECRET}")
        store.checkpoint()
    seen = [coworker("actions", "--all").stdout, coworker("actions", "--all", "--json").stdout,
            coworker("status", "--json").stdout]
    files = [p.read_bytes() for p in offline_home.state.glob("coworker.db*")]
    assert "[redacted]" in seen[0] and "[redacted]" in seen[1]
    escaped = json.dumps(SECRET)[1:-1]
    for text in seen:
        assert SECRET not in text and escaped not in text
    for blob in files:
        assert SECRET.encode() not in blob and escaped.encode() not in blob


def test_the_cli_goes_through_the_api_for_approvals():
    import ast

    tree = ast.parse((REPO / "runtime" / "cli.py").read_text(encoding="utf-8"))
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not any(m.endswith("approvals") for m in modules) and "approvals" not in names


# --- coworker mcp-tools -------------------------------------------------------------------------

def mcp_servers(home: Home, *tables: str, writes: str = "dry-run") -> None:
    """Append [writes] and [[mcp.servers]] tables to the home's config.toml."""
    text = home.config_path.read_text(encoding="utf-8")
    text += f'\n[writes]\nmode = "{writes}"\n' + "".join(f"\n[[mcp.servers]]\n{t}\n" for t in tables)
    home.config_path.write_text(text, encoding="utf-8")


def faulty(name: str = "faulty", extra: str = "", *flags: str) -> str:
    return (f'name = "{name}"\ncommand = {json.dumps(sys.executable)}\n'
            f"args = {json.dumps([FAULTY, *flags])}\n{extra}")


GHOST = 'name = "ghost"\ncommand = "/nonexistent/bin/mcp-ghost"\n'


def test_mcp_tools_with_no_server_says_how_to_add_one(offline_home: Home):
    r = coworker("mcp-tools")
    assert r.returncode == 0 and "no MCP servers configured" in r.stdout
    assert "[[mcp.servers]]" in r.stdout
    assert coworker("mcp-tools", "--json").stdout == ""


def test_mcp_tools_lists_classes_and_names_a_server_that_cannot_start(offline_home: Home):
    mcp_servers(offline_home, faulty(extra='disabled = ["hang"]\n'), GHOST)
    r = coworker("mcp-tools")
    assert r.returncode == 1, r.stdout + r.stderr
    # server, state ("ready (dry-run)"), tool, class, now
    rows = {parts[3]: parts[4:] for parts in map(str.split, r.stdout.splitlines())
            if parts[:3] == ["faulty", "ready", "(dry-run)"]}
    assert rows["faulty__echo"] == ["READ", "run"]
    assert rows["faulty__write_file"] == ["SIDE_EFFECT", "dry-run"]
    assert rows["faulty__wipe"] == ["APPROVE", "dry-run"]   # in dry-run nothing is queued
    assert rows["faulty__hang"] == ["DISABLED", "refused"]
    [ghost] = [ln for ln in r.stdout.splitlines() if ln.startswith("ghost ")]
    assert "cannot start" in ghost and "No such file" in ghost, r.stdout
    assert "Traceback" not in r.stdout + r.stderr and "retrying" not in r.stderr


@pytest.mark.slow
def test_mcp_tools_live_shows_what_runs_and_what_queues(offline_home: Home):
    mcp_servers(offline_home, faulty(extra='mode = "live"\n'), faulty("calm"), writes="live")
    r = coworker("mcp-tools", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    servers = {s["server"]: s for s in map(json.loads, r.stdout.splitlines())}
    assert set(servers) == {"faulty", "calm"}
    now = {t["tool"]: (t["class"], t["now"]) for t in servers["faulty"]["tools"]}
    assert now["write_file"] == ("SIDE_EFFECT", "run") and now["wipe"] == ("APPROVE", "queue")
    assert now["echo"] == ("READ", "run")
    calm = {t["tool"]: t["now"] for t in servers["calm"]["tools"]}
    assert calm["write_file"] == "dry-run" and calm["wipe"] == "dry-run"  # its own mode: dry-run
    assert servers["faulty"]["state"] == "ready" and servers["faulty"]["reason"] is None


@pytest.mark.slow
def test_mcp_tools_never_shows_a_servers_secret(offline_home: Home):
    secret = "s3cr3t-mcp-tools-value"
    env = (f'env = {{ PLAIN_VAR = "{secret}", FAULTY_ECHO_ENV = "PLAIN_VAR" }}\n'
           'secret_env = ["PLAIN_VAR"]\n')
    mcp_servers(offline_home, faulty("leaky", env, "--crash-on-start"))
    r = coworker("mcp-tools")
    assert r.returncode == 1
    assert "leaky cannot start" in r.stdout and "[redacted]" in r.stdout
    assert secret not in r.stdout + r.stderr


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_the_survey_is_bounded(offline_home: Home):
    """A server that never answers its start is reported, not waited on forever."""
    import asyncio

    from runtime.hands import McpSection, McpServer
    from runtime.hands.survey import survey

    hang = McpServer(name="mute", command=sys.executable,
                     args=["-c", "import time; time.sleep(60)"], timeout_s=30)
    t0 = time.monotonic()
    reports = asyncio.run(survey(McpSection(servers=[hang]), False, bound_s=1))
    assert time.monotonic() - t0 < 15  # not its 30 s timeout_s
    assert [(r.name, r.ok) for r in reports] == [("mute", False)]
    assert reports[0].reason == "no answer within 1s"


def test_actions_and_mcp_tools_need_a_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COWORKER_HOME", str(tmp_path / "nowhere"))
    for args in (["actions"], ["mcp-tools"]):
        r = coworker(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr
