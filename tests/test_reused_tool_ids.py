"""A tool_use id names one call only within its turn (issue 37, item 2; ADR-0034).

A compatible model server may number its ids per process (a local server restarted hands out
`toolu_0001` again). Keyed by the id alone, a new turn's reply, live MCP write or approval was
taken for an earlier turn's and dropped as "already carried out". Keyed by the turn (the first
attempt of the chain of attempts that take it up again) and the id, a new turn acts and a
replayed turn still never repeats, across an upgrade too. Real parts throughout: the SQLite
file, the loop, the anthropic client against the local Messages API, a real MCP server.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from runtime.home import Home
from runtime.loop import Loop
from runtime.loop.record import record
from runtime.store import Event, Store, approvals, inputs, migrations
from runtime.store import events as ev
from runtime.store import side_effects as ledger
from runtime.tools import Tool, ToolContext, default_registry

from .conftest import run_tick as tick
from .conftest import tell
from .fakeapi import FakeMessagesAPI, text, tool_use


class Killed(BaseException):
    """The process killed in the middle of a tool call (nothing after it is recorded)."""


class Charge(BaseModel):
    amount: int


def charging(home: Home, charged: list[int]) -> Loop:
    """A live loop with a `charge` tool (a side effect that is not idempotent) that records
    each charge in `charged`; the first charge is cut off by a kill once it took effect."""
    def charge(ctx: ToolContext, p: Charge) -> str:
        charged.append(p.amount)
        if len(charged) == 1:
            raise Killed
        return f"charged {p.amount}"

    registry = default_registry()
    registry.add(Tool("charge", "Charge a card.", Charge, charge, side_effect=True))
    return Loop(home, home.settings(), live=True, registry=registry)


def results(home: Home) -> list[str]:
    with Store.open(home.db_path, readonly=True) as store:
        return [e.body for e in ev.tail(store, 10_000, kind="tool_result", by_id=True)]


def outbox(home: Home) -> list[str]:
    with Store.open(home.db_path, readonly=True) as store:
        return [e.body for e in ev.tail(store, 10_000, kind="outbox", by_id=True)]


def test_a_new_turn_handed_an_old_reply_id_sends_its_reply(home: Home, api: FakeMessagesAPI):
    tell(home, "say hi to Dana")
    api.enqueue(tool_use("reply", {"text": "Hi Dana"}, id="toolu_0001"), text("done"))
    assert tick(Loop(home, home.settings(), live=True)).kind == "acted"
    tell(home, "now say hi to Ravi")  # the server was restarted: its ids start again
    api.enqueue(tool_use("reply", {"text": "Hi Ravi"}, id="toolu_0001"), text("done"))
    assert tick(Loop(home, home.settings(), live=True)).kind == "acted"
    assert outbox(home) == ["Hi Dana", "Hi Ravi"]
    assert len(list((home.root / "state" / "outbox").glob("*.md"))) == 2
    assert not [r for r in results(home) if r.startswith("not repeated")]


def test_a_replayed_turn_never_repeats_and_a_new_turn_with_the_same_id_acts(
        home: Home, api: FakeMessagesAPI):
    charged: list[int] = []
    tell(home, "charge Dana 5")
    api.enqueue(tool_use("charge", {"amount": 5}, id="toolu_0001"))
    with pytest.raises(Killed):
        tick(charging(home, charged))
    api.enqueue(text("done"))  # the attempt taken up again replays the recorded call
    assert tick(charging(home, charged)).kind == "acted"
    assert charged == [5]
    assert results(home)[-1].startswith("not repeated")
    tell(home, "now charge Ravi 7")
    api.enqueue(tool_use("charge", {"amount": 7}, id="toolu_0001"), text("done"))
    assert tick(charging(home, charged)).kind == "acted"
    assert charged == [5, 7] and results(home)[-1] == "charged 7"


def _ticks(store: Store) -> tuple[int, int, int]:
    """A turn's first attempt, the attempt that takes it up again, and a new turn."""
    first = record(store, "tick", "tick", inputs=[], resumes=None)
    again = record(store, "tick", "tick", inputs=[], resumes=first)
    other = record(store, "tick", "tick", inputs=[], resumes=None)
    return first, again, other


def _queue(store: Store, tick_id: int, text_: str) -> approvals.Approval:
    return approvals.add(store, tick_id=tick_id, server="files", tool="write_file",
                         name="files__write_file", arguments={"text": text_}, reason=None,
                         sources=[], tool_use_id="toolu_0001", ttl_s=3600)


def test_an_approval_is_its_turns_own(home: Home):
    """A replayed attempt gets its turn's row; a new turn reusing the id queues its own and is
    never handed the old approval."""
    with Store.open(home.db_path) as store:
        first, again, other = _ticks(store)
        asked = _queue(store, first, "one")
        approvals.decide(store, asked.id, approvals.Status.APPROVED, None)
        replayed = _queue(store, again, "one")
        assert replayed.id == asked.id and replayed.status == approvals.Status.APPROVED
        new = _queue(store, other, "two")
        assert new.id != asked.id and new.status == approvals.Status.WAITING
        assert new.arguments == {"text": "two"}


def test_a_turn_in_flight_across_the_upgrade_still_never_repeats(home: Home,
                                                                  api: FakeMessagesAPI):
    """Rows written before m016 (keyed by the bare id) protect the replay of the turn that
    was in flight, and a new turn reusing the id acts."""
    for f in home.db_path.parent.glob(home.db_path.name + "*"):
        f.unlink()
    use = {"type": "tool_use", "id": "toolu_0001", "name": "charge", "input": {"amount": 5}}
    with Store.open(home.db_path, migrate=False) as old:
        migrations.apply(old, upto=15)
        mid = inputs.add_message(old, Event.owner_message("charge Dana 5", "tell"))
        first = record(old, "tick", "tick", inputs=[mid], resumes=None)  # killed at once
        again = record(old, "tick", "tick", inputs=[mid], resumes=first)
        record(old, "model_response", "", tick_id=again, step=1, content=[use])
        with old.transaction() as db:  # killed mid-call, as the old code wrote it
            db.execute("INSERT INTO side_effects(key, tool, tick_id, input, status, started_at) "
                       "VALUES ('toolu_0001', 'charge', ?, '{}', 'started', 'now')", (again,))
            db.execute("INSERT INTO approvals(ts, tick_id, server, tool, name, tool_use_id, "
                       "expires_at) VALUES ('now', ?, 'files', 'write_file', "
                       "'files__write_file', 'toolu_0002', '9999')", (again,))
    charged = [0]  # no kill this time
    api.enqueue(text("done"))
    assert tick(charging(home, charged)).kind == "acted"
    assert charged == [0] and results(home)[-1].startswith("not repeated")
    tell(home, "now charge Ravi 7")
    api.enqueue(tool_use("charge", {"amount": 7}, id="toolu_0001"), text("done"))
    assert tick(charging(home, charged)).kind == "acted" and charged == [0, 7]
    with Store.open(home.db_path) as store:
        assert ledger.get(store, "toolu_0001", again).status == "started"
        resumed = record(store, "tick", "tick", inputs=[], resumes=again)
        waited = approvals.listing(store, None)
        assert [a.tool_use_id for a in waited] == ["toolu_0002"]
        assert approvals.add(store, tick_id=resumed, server="files", tool="write_file",
                             name="files__write_file", arguments={}, reason=None, sources=[],
                             tool_use_id="toolu_0002", ttl_s=60).id == waited[0].id
        fresh = record(store, "tick", "tick", inputs=[], resumes=None)
        assert approvals.add(store, tick_id=fresh, server="files", tool="write_file",
                             name="files__write_file", arguments={}, reason=None, sources=[],
                             tool_use_id="toolu_0002", ttl_s=60).id != waited[0].id


# a live MCP write and an approval, through a real MCP server: slow by the house's rule (run
# by `./run-tests --slow-only` and `--all`)
FILES = str(Path(__file__).resolve().parent / "mcp_servers" / "files.py")


def _files_server(home: Home, api: FakeMessagesAPI, approve: str = "[]") -> None:
    from .conftest import write_config

    write_config(home.root, api.url)
    with open(home.config_path, "a", encoding="utf-8") as f:
        f.write(f'\n[mcp]\n[[mcp.servers]]\nname = "files"\ncommand = "{sys.executable}"\n'
                f'args = ["{FILES}"]\nmode = "live"\napprove = {approve}\ntimeout_s = 20\n')


def _ask_write(home: Home, api: FakeMessagesAPI, path: Path, then: str) -> None:
    """The owner asks for `path` to be written; the model writes it under `toolu_0001` (the
    id a restarted server hands out first), then says `then`."""
    tell(home, f"write {path.name}")
    api.enqueue(tool_use("files__write_file", {"path": str(path), "text": path.stem},
                         id="toolu_0001"), text(then))


def _turns(home: Home, n: int, between: Any = None) -> list[Any]:
    from .test_hands_loop import ticks

    return ticks(Loop(home, home.settings(), live=True), n, between)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_new_turn_handed_an_old_id_makes_its_live_mcp_write(home: Home, api: FakeMessagesAPI,
                                                               tmp_path: Path):
    _files_server(home, api)
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    _ask_write(home, api, one, "done")
    _turns(home, 2, lambda i: _ask_write(home, api, two, "done") if i == 0 else None)
    assert one.read_text() == "one" and two.read_text() == "two"
    with Store.open(home.db_path, readonly=True) as store:
        assert store.scalar("SELECT count(*) FROM side_effects WHERE key = 'toolu_0001' "
                            "AND status = 'done'") == 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_new_turn_handed_an_old_id_queues_its_own_approval(home: Home, api: FakeMessagesAPI,
                                                             tmp_path: Path):
    _files_server(home, api, approve='["write_file"]')
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    _ask_write(home, api, one, "it waits")

    def approve(i: int) -> None:
        if i == 0:
            with Store.open(home.db_path) as store:
                [waiting] = approvals.listing(store)
                approvals.decide(store, waiting.id, approvals.Status.APPROVED, None)
            api.enqueue(text("it ran"))  # the turn its result is the input of
        elif i == 1:
            _ask_write(home, api, two, "it waits too")

    _turns(home, 3, approve)
    assert one.read_text() == "one" and not two.exists()
    with Store.open(home.db_path, readonly=True) as store:
        rows = approvals.listing(store, None)
    assert [(a.arguments["path"], a.status) for a in reversed(rows)] == [
        (str(one), "done"), (str(two), "waiting")]
