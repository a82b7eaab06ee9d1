"""The owner's actions (runtime/actions.py) and the doors they come through.

The CLI and the MCP server are thin doors over one API: an owner's action asked through the MCP
door is refused before anything is read or written, whatever it asks; reads and `tell` go
through, `tell` with an agent's authority, never the owner's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runtime.actions import Actions, Door, NotOwnersDoor, parse_item
from runtime.errors import Refused, UsageError
from runtime.home import Home
from runtime.memory.memorymd import MemoryFile
from runtime.store import Event, Store
from runtime.store import approvals as ap
from runtime.store import events as ev
from runtime.store import promotions as pr

from .conftest import REPO

OWNERS = [
    ("pin", ("Never deploy on Fridays",)),
    ("unpin", (1,)),
    ("strike", ("m1",)),
    ("unstrike", ("m1",)),
    ("restore", (1,)),
    ("tag", ("1", ["outage"])),
    ("approve", (1,)),
    ("reject", (1, "no")),
    ("retry", ([1],)),
    ("redact", (1, "leaked")),
    ("approve_action", (1,)),
    ("supersede", ("m1", "Dana owns the lexer")),
    ("reject_action", (1, "no")),
]


def _everything(home: Home) -> tuple[int, bytes, list]:
    with Store.open(home.db_path, readonly=True) as store:
        n = store.query("SELECT count(*) FROM history")[0][0]
        rows = [tuple(r) for t in ("pins", "tags", "promotions", "inputs", "redactions",
                                   "approvals")
                for r in store.query(f"SELECT * FROM {t}")]
    return n, home.memory_md.read_bytes(), rows


@pytest.fixture
def stocked(offline_home: Home) -> Home:
    """A home where every owner's action has something to act on."""
    owner = Actions(offline_home, Door.CLI)
    owner.tell("the parser crashes on unicode input")
    owner.pin("Keep the changelog short")
    MemoryFile.load(offline_home.memory_md)  # it parses
    offline_home.memory_md.write_text("# Memory\n\n- [m1] Dana owns the parser.\n",
                                      encoding="utf-8")
    owner.strike("m1")  # a snapshot to restore
    offline_home.memory_md.write_text("# Memory\n\n- [m1] Dana owns the parser.\n",
                                      encoding="utf-8")
    with Store.open(offline_home.db_path) as store:
        pr.add(store, "The freeze starts on the twentieth", [1], 1.0, "queued", "gated", "tool")
        ap.add(store, tick_id=None, server="s", tool="t", name="s__t", arguments={}, reason=None,
               sources=[], tool_use_id=None, ttl_s=3600)
    return offline_home


@pytest.mark.parametrize("action,args", OWNERS, ids=[a for a, _ in OWNERS])
def test_an_owners_action_through_the_mcp_door_is_refused_and_changes_nothing(
        stocked: Home, action: str, args: tuple) -> None:
    before = _everything(stocked)
    agent = Actions(stocked, Door.MCP, client="other-agent")
    with pytest.raises(NotOwnersDoor) as caught:
        getattr(agent, action)(*args)
    assert f"{action} is the owner's action" in str(caught.value)
    assert "mcp door" in str(caught.value)
    assert isinstance(caught.value, Refused) and caught.value.exit_code == 1
    assert _everything(stocked) == before


def test_the_same_actions_through_the_owners_door_do_act(stocked: Home) -> None:
    owner = Actions(stocked, Door.CLI)
    assert owner.tag("1", ["outage"]).added == ["outage"]
    assert owner.approve(1).entry_id
    owner.unpin(1)
    assert owner.pins() == []
    with Store.open(stocked.db_path, readonly=True) as store:
        kinds = [e.kind for e in ev.tail(store, 50, by_id=True)]
        owners = [e for e in ev.tail(store, 50, by_id=True) if e.kind in ("pin", "unpin")]
    assert "unpin" in kinds and "memory_strike" in kinds
    assert all(e.actor == "owner" and e.author_kind == "user" for e in owners)
    # an unpin records the owner's action; it is not text the owner wrote (Event.owners_words)
    assert not any(e.owners_words for e in owners if e.kind == "unpin")


def test_tell_carries_the_doors_authority(offline_home: Home) -> None:
    mine = Actions(offline_home, Door.CLI).tell("please triage")
    theirs = Actions(offline_home, Door.MCP, client="bot").tell("remember: deploy on Fridays")
    anon = Actions(offline_home, Door.MCP).tell("hello")
    with Store.open(offline_home.db_path, readonly=True) as store:
        by_id = {e.id: e for e in ev.tail(store, 10, by_id=True)}
    assert by_id[mine.event_id].owners_words
    assert (by_id[theirs.event_id].actor, by_id[theirs.event_id].author_kind) == ("mcp:bot", "agent")
    assert not by_id[theirs.event_id].owners_words
    assert by_id[anon.event_id].actor == "mcp"
    with pytest.raises(UsageError):
        Actions(offline_home, Door.MCP).tell("   ")


def test_reads_go_through_every_door(stocked: Home) -> None:
    for door in Door:
        actions = Actions(stocked, door)
        assert actions.search("parser")[0].kind == "event"
        assert actions.walk("parser unicode").events  # a WalkResult (ADR-0040)
        assert [p.text for p in actions.pins()] == ["Keep the changelog short"]
        assert "parser" in actions.recall("what about the parser crash?")["terms"]


@pytest.mark.parametrize("item,parsed", [("117", ("event", 117)), ("e.117", ("event", 117)),
                                         ("r.12", ("rollup", 12))])
def test_item_grammar(item: str, parsed: tuple[str, int]) -> None:
    assert parse_item(item) == parsed


@pytest.mark.parametrize("item", ["x.1", "r.", "0", "²", "r.-1", "e.1.2", str(2**63)])
def test_item_grammar_refuses(item: str) -> None:
    with pytest.raises(UsageError, match="is not an item"):
        parse_item(item)


DOMAIN = ("store.pins", "store.tags", "store.promotions", "store.inputs", "store.approvals",
          "memory.memorymd", "memory.gate", "redaction")


def _imports(path: Path) -> set[str]:
    """What `path` imports when it runs: an import under `if TYPE_CHECKING:` (a name read
    only by the type checker, e.g. for an annotation) reaches nothing."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                   for stmt in node.body for n in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = (node.module or "").lstrip(".")
            found.add(base)
            found.update(f"{base}.{a.name}".lstrip(".") for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("door", ["runtime/cli.py", "runtime/mcp_server.py"])
def test_the_doors_leave_the_owners_actions_to_the_api(door: str) -> None:
    """The CLI and the MCP server never reach past the API into what an owner's action writes:
    pins, tags, promotions, inputs, MEMORY.md, the gate, redaction."""
    reached = {m for m in _imports(REPO / door) if any(m.endswith(d) for d in DOMAIN)}
    assert not reached, f"{door} reaches {sorted(reached)} directly; go through runtime.actions"


def test_an_event_written_by_an_owners_action_names_the_owner(offline_home: Home) -> None:
    Actions(offline_home, Door.CLI).pin("x")
    with Store.open(offline_home.db_path, readonly=True) as store:
        e = ev.tail(store, 1, kind="pin")[0]
    assert isinstance(e, Event) and (e.actor, e.author_kind) == ("owner", "user")
