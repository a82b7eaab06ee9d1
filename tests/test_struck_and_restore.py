"""What the owner struck is never offered as a fact, and a restore says what it changes (issue 37,
items 8 and 9).

- The record of a strike (`memory_strike`, "struck [m1] <the entry>") reaches the model marked
  struck wherever it reads it: the recent past, the recall block, memory_search, memory_walk,
  memory_read, and the recall another agent asks for over MCP.
- `coworker restore N` prints what it would change and changes nothing without `--yes` when
  there is no terminal to ask on (exit 1); on a terminal it asks y/N. `coworker snapshots` says
  what restoring each version would do now. A restore refuses when MEMORY.md changed since its
  change was read.
- `coworker unstrike ID` puts one struck entry back (the same id, text, sources and date, where
  it stood; a snapshot first), an owner's action only.

Everything runs through the real parts: a real home and store, the CLI as a process runs it,
the loop with the real anthropic client against the local Messages API (tests/fakeapi.py).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from runtime.actions import Actions, Door, NotOwnersDoor
from runtime.errors import Refused
from runtime.home import Home
from runtime.loop import Loop
from runtime.memory.recall import STRUCK_NOTE
from runtime.memory.search import search
from runtime.memory.walk import walk_result
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import promotions as pr

from .conftest import coworker, tell
from .conftest import run_tick as tick
from .fakeapi import FakeMessagesAPI, message, text

ENTRIES = ("- [m1] Priya owns the parser fix (sources: #1; 2026-11-02)\n"
           "- [m2] Ravi answers billing questions (sources: none; 2026-10-01)\n"
           "- [m3] Tuesday is the release train (sources: none; 2026-10-03)\n")
MEMORY = "# MEMORY\n\nNotes kept by hand.\n\n" + ENTRIES


def cli(*args: str, code: int = 0, stdin: str | None = None) -> Any:
    """The real CLI; asserts the exit code and that no traceback reached stderr."""
    r = coworker(*args, env={**os.environ, "COLUMNS": "250"}, input=stdin)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == code, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r


def one_error(r: Any) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    return lines[0]


def events_of(home: Home, kind: str) -> list[Event]:
    with Store.open(home.db_path, readonly=True) as store:
        return ev.tail(store, 200, kind=kind, by_id=True)


def snapshot_count(home: Home) -> int:
    return len(list(home.snapshots.glob("v*.md")))


# --- item 8: what the owner struck is marked struck wherever the model reads it ---------------


def _struck_priya(home: Home) -> int:
    """MEMORY.md with m1 "Priya owns the parser fix", struck by the owner; the strike's id."""
    home.memory_md.write_text(MEMORY, encoding="utf-8")
    cli("strike", "m1")
    [strike] = events_of(home, "memory_strike")
    assert "Priya owns the parser fix" in strike.body
    return int(strike.id or 0)


def _lines(body: dict) -> list[str]:
    content = body["messages"][0]["content"]
    return [line for b in content if b.get("type") == "text" for line in b["text"].split("\n")]


def test_a_struck_entry_reaches_the_model_marked_struck_in_the_past_and_in_recall(
        home: Home, api: FakeMessagesAPI):
    strike = _struck_priya(home)
    tell(home, "Who owns the parser fix now?")
    api.enqueue(text("I will ask."))
    tick(Loop(home, home.settings()))
    body = api.bodies[0]
    assert "Priya" not in json.dumps(body["system"]), "struck: no longer in MEMORY.md's prompt"
    quoting = [line for line in _lines(body) if "Priya owns the parser fix" in line]
    # once in the recent past (context.line), once in the recall block (Recall.block)
    assert len(quoting) == 2 and quoting[1].startswith("- "), quoting
    for line in quoting:
        head = line[line.index("[event "):line.index("] struck [m1]") + 1]
        assert head.startswith(f"[event {strike} · ") and f" · {STRUCK_NOTE}]" in head, line


def _tool_results(body: dict) -> list[str]:
    return [b["content"] if isinstance(b["content"], str) else json.dumps(b["content"])
            for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


def test_memory_tools_mark_a_strike_record_struck(home: Home, api: FakeMessagesAPI):
    strike = _struck_priya(home)
    tell(home, "Who owns the parser fix?")
    calls = [("memory_search", {"query": "parser fix Priya"}),
             ("memory_walk", {"query": "Priya parser fix"}),
             ("memory_read", {"event_id": strike})]
    api.enqueue(message([{"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}
                         for i, (name, args) in enumerate(calls)], stop_reason="tool_use"),
                text("done"))
    tick(Loop(home, home.settings()))
    found, walked, read = _tool_results(api.bodies[-1])
    [hit] = [line for line in found.split("\n") if "Priya" in line]
    assert hit.startswith(f"[event {strike} · ") and f"memory_strike ({STRUCK_NOTE})" in hit, hit
    rows = {r["id"]: r for r in json.loads(walked)["events"]}
    assert rows[strike]["struck"] == STRUCK_NOTE, walked
    assert read.startswith(f"[event {strike} · ") and f" · {STRUCK_NOTE}] " in read, read


def test_search_walk_and_mcp_recall_mark_only_the_strike_record(offline_home: Home):
    strike = _struck_priya(offline_home)
    told = Actions(offline_home, Door.CLI).tell("Priya said the parser fix lands Monday")
    with Store.open(offline_home.db_path, readonly=True) as store:
        labels = {h.id: h.label for h in search(store, "Priya parser fix")}
        rows = {r["id"]: r for r in walk_result(store, "Priya parser fix").as_dict()["events"]}
    assert labels[strike] == f"memory_strike ({STRUCK_NOTE})", labels
    assert labels[told.event_id] == "message", labels
    assert rows[strike]["struck"] == STRUCK_NOTE and "struck" not in rows[told.event_id], rows
    items = Actions(offline_home, Door.MCP, client="bot").recall("who owns the parser fix")
    marks = {i["id"]: i.get("struck") for i in items["items"]}
    assert marks[strike] == STRUCK_NOTE and marks.get(told.event_id) is None, items


def test_an_imported_strike_record_is_marked_imported_not_struck(offline_home: Home,
                                                                 tmp_path: Path):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"ts": "2025-03-01T09:30:00Z", "actor": "owner",
                                "author_kind": "user", "kind": "memory_strike",
                                "body": "struck [m4] Dana owns the lexer"}) + "\n",
                    encoding="utf-8")
    cli("import", str(path))
    with Store.open(offline_home.db_path, readonly=True) as store:
        [label] = [h.label for h in search(store, "Dana lexer")]
    assert label == "memory_strike (imported: not your owner's words)", label


# --- item 9: restore shows what it changes, and asks --------------------------------------------


@pytest.fixture
def approved(offline_home: Home) -> Home:
    """MEMORY.md with m1, then promotion 1 approved as m4: v1 is "before approving promotion
    1", and restoring it drops m4 (the issue's trap)."""
    offline_home.memory_md.write_text("# MEMORY\n\n- [m1] Priya owns the parser fix\n",
                                      encoding="utf-8")
    Actions(offline_home, Door.CLI).tell("The freeze starts on the twentieth")
    with Store.open(offline_home.db_path) as store:
        pr.add(store, "The freeze starts on the twentieth", [1], 1.0, "queued", "gated", "tool")
    cli("promotions", "approve", "1")
    assert "The freeze starts" in offline_home.memory_md.read_text(encoding="utf-8")
    return offline_home


def test_restore_without_yes_and_no_terminal_prints_the_change_and_changes_nothing(
        approved: Home):
    before, snaps = approved.memory_md.read_bytes(), snapshot_count(approved)
    [entry] = [line for line in before.decode().splitlines() if "freeze" in line]
    new_id = entry.split("]")[0][3:]
    r = cli("restore", "1", code=1)
    assert "before approving promotion 1" in r.stdout, r.stdout
    assert f"  - [{new_id}] The freeze starts on the twentieth" in r.stdout, r.stdout
    assert "--yes" in one_error(r)
    assert approved.memory_md.read_bytes() == before and snapshot_count(approved) == snaps
    assert events_of(approved, "memory_restore") == []

    r = cli("restore", "1", "--yes")
    assert f"- [{new_id}]" in r.stdout and "restored v1" in r.stdout, r.stdout
    assert "freeze" not in approved.memory_md.read_text(encoding="utf-8")
    assert len(events_of(approved, "memory_restore")) == 1


def test_snapshots_say_what_restoring_each_would_do_now(approved: Home):
    new_id = approved.memory_md.read_text(encoding="utf-8").splitlines()[-1].split("]")[0][3:]
    rows = [line for line in cli("snapshots").stdout.splitlines() if line.strip()[:1] == "1"]
    assert len(rows) == 1 and f"removes {new_id}" in rows[0], rows


def test_restore_of_the_version_in_place_changes_nothing(approved: Home):
    cli("restore", "1", "--yes")  # MEMORY.md is v1 now
    snaps = snapshot_count(approved)
    r = cli("restore", "1")  # no --yes needed: there is nothing to confirm
    assert "no change" in r.stdout and snapshot_count(approved) == snaps, r.stdout
    assert len(events_of(approved, "memory_restore")) == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("answer,code", [("n\n", 1), ("y\n", 0)])
def test_restore_on_a_terminal_asks_first(approved: Home, monkeypatch: pytest.MonkeyPatch,
                                          answer: str, code: int):
    from runtime import cli as cli_module

    before = approved.memory_md.read_bytes()
    monkeypatch.setattr("sys.stdin", _Terminal(answer))
    monkeypatch.setattr("sys.stdout", _Terminal())
    assert cli_module.main(["restore", "1"]) == code
    asked = os.sys.stdout.getvalue()  # type: ignore[attr-defined]
    assert "restore v1?" in asked and "The freeze starts" in asked, asked
    changed = approved.memory_md.read_bytes() != before
    assert changed == (code == 0)
    assert len(events_of(approved, "memory_restore")) == (code == 0)


def test_a_restore_refuses_when_memory_md_changed_since_its_change_was_read(approved: Home):
    owner = Actions(approved, Door.CLI)
    plan = owner.restore_plan(1)
    approved.memory_md.write_text(approved.memory_md.read_text() + "- Dana reviews\n",
                                  encoding="utf-8")
    snaps = snapshot_count(approved)
    with pytest.raises(Refused, match="changed since"):
        owner.restore(1, expect=plan.digest)
    assert "Dana reviews" in approved.memory_md.read_text() and snapshot_count(approved) == snaps


# --- item 9: unstrike ----------------------------------------------------------------------------


def test_unstrike_puts_the_entry_back_where_it_stood_after_a_snapshot(offline_home: Home):
    offline_home.memory_md.write_text(MEMORY, encoding="utf-8")
    cli("strike", "m2")
    cli("strike", "m3")
    assert "unstrike m1" in cli("strike", "m1").stdout
    r = cli("unstrike", "m2")
    assert "[m2] Ravi answers billing questions" in r.stdout, r.stdout
    cli("unstrike", "1")  # a bare number names m1
    assert offline_home.memory_md.read_text(encoding="utf-8") == MEMORY.replace(
        ENTRIES.splitlines(keepends=True)[2], ""), "same id, text, sources, date and place"
    reasons = [json.loads(p.read_text())["reason"]
               for p in sorted(offline_home.snapshots.glob("v*.json"))]
    assert reasons[-2:] == ["before unstriking [m2]", "before unstriking [m1]"], reasons
    restores = events_of(offline_home, "memory_restore")
    strikes = {e.meta["entry_id"]: e.id for e in events_of(offline_home, "memory_strike")}
    assert [e.meta for e in restores] == [
        {"entry_id": "m2", "unstruck": strikes["m2"], "snapshot": 4},
        {"entry_id": "m1", "unstruck": strikes["m1"], "snapshot": 5}]
    assert all(e.actor == "owner" and not e.owners_words for e in restores)


def test_unstrike_refuses_what_it_cannot_put_back(offline_home: Home, tmp_path: Path):
    offline_home.memory_md.write_text(MEMORY, encoding="utf-8")
    cli("strike", "m2")
    before, snaps = offline_home.memory_md.read_bytes(), snapshot_count(offline_home)
    assert "never struck" in one_error(cli("unstrike", "m9", code=1))
    assert "in MEMORY.md now" in one_error(cli("unstrike", "m1", code=1))
    assert "e.g." in one_error(cli("unstrike", "billing", code=2))
    path = tmp_path / "old.jsonl"  # an imported strike is history, not this MEMORY.md's
    path.write_text(json.dumps({"ts": "2025-03-01T09:30:00Z", "kind": "memory_strike",
                                "body": "struck [m7] x", "meta": {"entry_id": "m7"}}) + "\n",
                    encoding="utf-8")
    cli("import", str(path))
    assert "never struck" in one_error(cli("unstrike", "m7", code=1))
    with offline_home.memory_md.open("a", encoding="utf-8") as f:
        f.write("- ravi answers  billing questions\n")  # by hand, the same words
    after = offline_home.memory_md.read_bytes()
    line = one_error(cli("unstrike", "m2", code=1))
    assert "[m4]" in line and "same text" in line, line
    assert before != after == offline_home.memory_md.read_bytes()
    assert snapshot_count(offline_home) == snaps and events_of(offline_home, "memory_restore") == []


def test_unstrike_is_the_owners_action_only(offline_home: Home):
    offline_home.memory_md.write_text(MEMORY, encoding="utf-8")
    cli("strike", "m2")
    before = offline_home.memory_md.read_bytes()
    agent = Actions(offline_home, Door.MCP, client="bot")
    for action, args in (("unstrike", ("m2",)), ("restore_plan", (1,))):
        with pytest.raises(NotOwnersDoor):
            getattr(agent, action)(*args)
    assert offline_home.memory_md.read_bytes() == before
    assert events_of(offline_home, "memory_restore") == []
