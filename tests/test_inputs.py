"""Nothing told is lost: an input is consumed only by a turn that completed (issue 10).

Each test is a reproduction from the issue, run in process against the real anthropic client
and the local Messages API server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
from pathlib import Path

import pytest

from runtime import context
from runtime.cli import main
from runtime.errors import StoreBusy, StoreRefused
from runtime.home import Home
from runtime.loop import Loop
from runtime.store import Event, Store, archive, inputs
from runtime.store import events as ev
from runtime.store import side_effects as ledger
from runtime.tools import ToolContext, default_registry

from .conftest import run_tick as tick
from .conftest import tell, tells_at_once, write_config
from .fakeapi import FakeMessagesAPI, Scripted, error, text, tool_use
from .fakeapi import message as fakeapi_message


def make_loop(home: Home, **kw) -> Loop:
    return Loop(home, home.settings(), **kw)


def stopped_mid_call(loop: Loop, api: FakeMessagesAPI, requests: int):
    """Run one tick and SIGTERM it once the server has seen `requests` requests (the last one
    hangs): what a kill or a stop during a model call leaves behind."""
    async def go():
        loop._make_model()
        try:
            task = asyncio.create_task(loop.tick())
            # the server is another thread: its request count is the signal to poll
            while len(api.requests) < requests and not task.done():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            loop.stop("SIGTERM")
            return await task
        finally:
            await loop.model.close()
    return asyncio.run(go())


def completed_turns_for(home: Home, input_id: int) -> int:
    with Store.open(home.db_path) as store:
        ends = ev.tail(store, 10_000, kind="tick_end")
    return sum(1 for e in ends if e.meta.get("outcome") in ("acted", "no_action", "step_cap")
               and input_id in e.meta.get("inputs", []))


def status(home: Home, input_id: int) -> str | None:
    with Store.open(home.db_path) as store:
        return inputs.status_of(store, input_id)


def saw(api: FakeMessagesAPI, body: str) -> list[int]:
    """Indexes of the requests whose JSON carries `body`."""
    return [i for i, r in enumerate(api.requests) if body in r["raw"].decode()]


def new_part(request: dict) -> str:
    """What a request offers the model as new this tick (not the staircase of the past)."""
    return request["json"]["messages"][0]["content"][1]["text"]


def test_a_message_told_during_an_outage_is_delivered_after_it(home: Home,
                                                                api: FakeMessagesAPI):
    # 529 five times (the first tick spends its 4 attempts), then a tool call and an answer
    mid = tell(home, "please reply about the parser")
    api.enqueue(*[error(529, "overloaded_error")] * 5,
                tool_use("note", {"text": "replied"}, id="toolu_o"), text("Done."))
    loop = make_loop(home)
    first = tick(loop)
    assert first.kind == "failed" and status(home, mid) == "pending"
    second = tick(loop)
    assert second.kind == "acted"
    assert status(home, mid) == "consumed" and completed_turns_for(home, mid) == 1
    assert saw(api, "please reply about the parser")[-1] >= 5
    third = tick(loop)  # a completed turn never sees the same input twice
    assert third.kind == "quiet" and len(api.requests) == 7


def test_an_outage_is_not_counted_against_the_input(home: Home, api: FakeMessagesAPI):
    mid = tell(home, "hello during a long outage")
    api.enqueue(*[error(500)] * 16)
    loop = make_loop(home)
    for _ in range(4):
        assert tick(loop).kind == "failed"
    assert status(home, mid) == "pending"  # four failed ticks, never set aside
    api.enqueue(text("Back."))
    assert tick(loop).kind == "no_action" and status(home, mid) == "consumed"


def test_a_failing_tick_backs_off(home: Home, api: FakeMessagesAPI):
    tell(home, "anyone there?")
    api.default = {"not": "a message"}  # garbage, every time
    loop = make_loop(home)
    seen = []
    for _ in range(4):
        loop._after_tick(tick(loop))
        seen.append(loop.interval)
    assert seen == [2.0, 4.0, 4.0, 4.0]  # tick_seconds 1 doubling up to max_tick_seconds 4


def test_a_poison_input_is_set_aside_and_the_rest_go_on(home: Home, api: FakeMessagesAPI,
                                                       caplog):
    poison = tell(home, "POISON: a prompt far too long")
    fine = tell(home, "an ordinary message")
    too_long = error(400, "invalid_request_error", "prompt is too long")
    api.enqueue(too_long, too_long, too_long, text("Fine."))
    loop = make_loop(home)
    assert [tick(loop).kind for _ in range(3)] == ["failed"] * 3
    assert status(home, poison) == "set_aside" and status(home, fine) == "pending"
    assert "SET ASIDE" in caplog.text
    # the second and third attempts isolate the oldest input
    assert "an ordinary message" in new_part(api.requests[0])
    assert "an ordinary message" not in new_part(api.requests[1])
    assert tick(loop).kind == "no_action"
    assert status(home, fine) == "consumed"
    assert "an ordinary message" in new_part(api.requests[3])
    assert "POISON" not in new_part(api.requests[3])
    with Store.open(home.db_path) as store:
        aside = ev.tail(store, 10, kind="input_set_aside")
    assert [e.meta["input_id"] for e in aside] == [poison]


def test_status_shows_a_set_aside_input_and_retry_puts_it_back(home: Home, api: FakeMessagesAPI,
                                                              capsys):
    poison = tell(home, "POISON again")
    api.enqueue(*[error(400, "invalid_request_error", "prompt is too long")] * 3)
    loop = make_loop(home)
    for _ in range(3):
        tick(loop)
    assert main(["status"]) == 3  # nothing runs here; the inputs are shown all the same
    shown = capsys.readouterr().out
    assert "1 set aside" in shown and f"set aside: #{poison}" in shown
    assert "prompt is too long" in shown
    assert main(["status", "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["inputs"]["set_aside"] == 1 and data["set_aside"][0]["id"] == poison
    assert main(["retry", "999"]) == 1  # not set aside: refused, one line
    assert "nothing to retry" in capsys.readouterr().err
    assert main(["retry"]) == 0
    assert status(home, poison) == "pending"
    api.enqueue(text("Handled now."))
    assert tick(loop).kind == "no_action" and status(home, poison) == "consumed"


def test_a_set_aside_input_archived_by_reflect_is_retried_months_later(home: Home,
                                                                        api: FakeMessagesAPI):
    """Set aside, then reflect moves its event to the archive (the owner retries much later):
    the retried message still reaches the model and is consumed."""
    poison = tell(home, "POISON archived meanwhile")
    api.enqueue(*[error(400, "invalid_request_error", "prompt is too long")] * 3)
    loop = make_loop(home)
    for _ in range(3):
        tick(loop)
    assert status(home, poison) == "set_aside"
    with Store.open(home.db_path) as store:
        assert archive.move_older_than(store, "2999-01-01T00:00:00.000Z") >= 1
        assert store.scalar("SELECT COUNT(*) FROM events WHERE id = ?", (poison,)) == 0
    assert main(["retry"]) == 0
    api.enqueue(text("Handled now."))
    assert tick(loop).kind == "no_action" and status(home, poison) == "consumed"
    assert "POISON archived meanwhile" in new_part(api.requests[-1])


def test_a_busy_database_during_a_turn_counts_against_nothing(home: Home, api: FakeMessagesAPI):
    """Another process (an import, a manual reflect) holds the write lock while the model
    answers: the turn cannot record the answer, and that is an outage, not the message's
    fault. The lock is let go when the turn gives up on it (no clock decides)."""
    mid = tell(home, "please answer Dana")
    loop = make_loop(home)
    loop.store.conn.execute("PRAGMA busy_timeout = 200")
    holder = sqlite3.connect(home.db_path, isolation_level=None, check_same_thread=False)

    def answer(request):  # noqa: ANN001, ANN202 - the lock is taken as the model answers
        holder.execute("BEGIN IMMEDIATE")
        return text("ok")

    class LetGo(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if holder.in_transaction and "failed" in record.getMessage():
                holder.execute("COMMIT")

    api.responder = answer
    handler = LetGo(logging.WARNING)
    logging.getLogger("runtime").addHandler(handler)
    try:
        outcome = tick(loop)
    finally:
        logging.getLogger("runtime").removeHandler(handler)
        api.responder = None
        holder.close()
    assert outcome.kind == "failed" and not outcome.blames_input, outcome
    with Store.open(home.db_path) as store:
        row = store.query("SELECT status, failures FROM inputs WHERE event_id = ?", (mid,))[0]
    assert (row["status"], row["failures"]) == ("pending", 0)


def test_inputs_left_for_a_later_turn_are_never_shown_as_past(
        home: Home, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    """Four messages wait and a turn takes two: the other two are not "Your past" now (they
    would read as seen) and come as new in the next turn, once."""
    write_config(home.root, api.url)
    monkeypatch.setattr("runtime.loop.perception.MAX_INPUTS_PER_TURN", 2)
    ids = [tell(home, f"message number {i}") for i in range(4)]
    api.enqueue(text("ok"), text("ok too"))
    loop = make_loop(home)
    tick(loop)
    tick(loop)
    for turn, (now, later) in enumerate([(ids[:2], ids[2:]), (ids[2:], [])]):
        past, new = (part["text"] for part in
                     api.requests[turn]["json"]["messages"][0]["content"][:2])
        for i in now:
            assert f"message number {ids.index(i)}" in new and f"message number {ids.index(i)}" \
                not in past, (turn, past)
        for i in later:
            assert f"message number {ids.index(i)}" not in past + new, (turn, past)
    assert all(status(home, i) == "consumed" for i in ids)


def test_a_long_message_is_shown_whole_within_the_budget_and_cut_says_where_the_rest_is(
        home: Home, api: FakeMessagesAPI):
    """60,000 characters are shown whole; 110,000 are cut at the budget, with the event and
    offset `memory_read` reads the rest from, and the end of the message reaches the model."""
    whole = tell(home, " ".join(f"a{i}" for i in range(10_000)) + " END-OF-THE-FIRST")
    loop = make_loop(home)
    api.enqueue(text("ok"))
    tick(loop)
    assert "END-OF-THE-FIRST" in new_part(api.requests[-1]) and "(cut:" not in \
        new_part(api.requests[-1]) and status(home, whole) == "consumed"
    body = " ".join(f"bb{i}" for i in range(14_000)) + " THE-ASK-AT-THE-END"
    assert context.NEW_CHARS < len(body) < context.NEW_CHARS + 20_000  # one read gets the rest
    cut = tell(home, body)
    shown = context.NEW_CHARS - 1
    api.enqueue(tool_use("memory_read", {"event_id": cut, "offset": shown}, id="toolu_r"),
                text("Read it all."))
    tick(loop)
    new = new_part(api.requests[-2])
    assert "THE-ASK-AT-THE-END" not in new
    assert "(cut:" in new and f"{shown:,} of its {len(body):,}" in new
    assert "memory_read" in new and f"event_id {cut} and offset {shown}" in new
    rest = json.dumps(api.requests[-1]["json"]["messages"][-1])
    assert "THE-ASK-AT-THE-END" in rest and status(home, cut) == "consumed"


def _outbox(home: Home) -> list[str]:
    return sorted(p.name for p in home.outbox.iterdir()) if home.outbox.is_dir() else []


@pytest.mark.parametrize("reflect_fails", [False, True])
def test_a_stopped_turn_that_ran_reflect_in_its_batch_is_replayed_not_asked_again(
        home: Home, api: FakeMessagesAPI, monkeypatch, reflect_fails: bool):
    """Reflect was due with the owner's message: it consumed its own input before the model
    turn (or failed, a failure counted against that input, not the turn's), which sent a reply
    and was stopped. The next attempt replays the reply it recorded (the message is still
    pending) instead of asking the model again and sending it twice."""
    if reflect_fails:
        import rituals.reflect as rf

        def broken(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise RuntimeError("reflect broke")

        monkeypatch.setattr(rf, "run", broken)
    write_config(home.root, api.url, model={"timeout_s": 60.0})
    mid = tell(home, "please answer Dana")
    api.enqueue(tool_use("reply", {"text": "Dana: ships Friday"}, id="toolu_reply1"),
                Scripted(200, text("late"), delay=30))
    loop = make_loop(home, live=True)
    loop._ritual_due("reflect")
    assert stopped_mid_call(loop, api, 2).kind == "stopped" and len(_outbox(home)) == 1
    asked = len(api.requests)
    api.enqueue(text("done"))
    again = tick(make_loop(home, live=True))
    assert again.kind == "acted" and status(home, mid) == "consumed"
    assert len(_outbox(home)) == 1, "the reply was replayed, not sent again"
    assert len(api.requests) == asked + 1, "only the step after the replayed one is asked"


DONE_NOTE = ("(Earlier attempts at these did not complete, after they had already done the "
             "following; it is done, do not do it again:)\n- reply ")


def test_a_batch_taken_apart_after_a_sent_reply_is_told_what_was_done(home: Home,
                                                                       api: FakeMessagesAPI):
    """Two messages; the turn sends a reply, then the next call fails by their fault (a 400).
    The oldest goes alone to a fresh ask (a poison input must be found), and each of the two,
    when its turn comes, is told the reply was already sent, so the model does not send it
    again."""
    a = tell(home, "please answer Dana")
    b = tell(home, "and tell me the deploy date")
    api.enqueue(tool_use("reply", {"text": "Dana: ships Friday"}, id="toolu_reply1"),
                error(400, "invalid_request_error", "prompt is too long"))
    loop = make_loop(home, live=True)
    assert tick(loop).kind == "failed" and len(_outbox(home)) == 1
    api.enqueue(text("Already answered."), text("Also answered."))
    for mine, other in ((a, "and tell me the deploy date"), (b, "please answer Dana")):
        assert tick(loop).kind == "no_action" and status(home, mine) == "consumed"
        new = new_part(api.requests[-1])
        assert other not in new and DONE_NOTE in new, new
        assert "Dana: ships Friday" in new.split(DONE_NOTE)[1], new
    assert len(_outbox(home)) == 1


def test_a_fresh_ask_stopped_and_taken_up_again_is_still_told_what_was_done(
        home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, model={"timeout_s": 60.0})
    tell(home, "please answer Dana")
    tell(home, "and tell me the deploy date")
    api.enqueue(tool_use("reply", {"text": "Dana: ships Friday"}, id="toolu_reply1"),
                error(400, "invalid_request_error", "prompt is too long"))
    loop = make_loop(home, live=True)
    assert tick(loop).kind == "failed"
    api.enqueue(Scripted(200, text("late"), delay=30))
    assert stopped_mid_call(make_loop(home, live=True), api, 3).kind == "stopped"
    api.enqueue(text("Already answered."))
    assert tick(make_loop(home, live=True)).kind == "no_action"
    assert DONE_NOTE in new_part(api.requests[-1]) and len(_outbox(home)) == 1


def test_a_turn_capped_mid_way_is_replayed_when_the_cap_allows(home: Home,
                                                               api: FakeMessagesAPI):
    write_config(home.root, api.url, model={"daily_calls": 1})
    mid = tell(home, "please answer Dana")
    api.enqueue(tool_use("reply", {"text": "Dana: ships Friday"}, id="toolu_reply1"))
    loop = make_loop(home, live=True)
    assert tick(loop).kind == "capped" and status(home, mid) == "pending"
    assert len(_outbox(home)) == 1
    write_config(home.root, api.url, model={"daily_calls": 100})
    api.enqueue(text("done"))
    assert tick(loop).kind == "acted" and status(home, mid) == "consumed"
    assert len(_outbox(home)) == 1 and len(api.requests) == 2


def test_a_bug_in_a_turn_counts_against_its_input(home: Home, api: FakeMessagesAPI,
                                                  monkeypatch):
    mid = tell(home, "this one trips a bug")
    loop = make_loop(home)

    def broken(*a, **k):
        raise RuntimeError("a bug in building the context")
    monkeypatch.setattr("runtime.context.inputs_text", broken)
    outcomes = [tick(loop).kind for _ in range(3)]
    assert outcomes == ["failed"] * 3 and status(home, mid) == "set_aside"


def test_a_turn_takes_at_most_max_inputs_and_the_rest_follow(
        home: Home, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    write_config(home.root, api.url)
    monkeypatch.setattr("runtime.loop.perception.MAX_INPUTS_PER_TURN", 2)
    ids = [tell(home, f"message number {i}") for i in range(3)]
    api.enqueue(text("First two."), text("The third."))
    loop = make_loop(home)
    assert tick(loop).kind == "no_action"
    assert [status(home, i) for i in ids] == ["consumed", "consumed", "pending"]
    assert loop._more_pending  # the loop goes on at once, without waiting out the interval
    assert tick(loop).kind == "no_action" and status(home, ids[2]) == "consumed"


def test_without_a_model_more_inputs_than_a_turn_takes_do_not_spin(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    """Inputs waiting for a model must not make the loop tick again at once, for ever (it spun
    at full CPU and could not hear SIGTERM)."""
    write_config(offline_home.root)
    monkeypatch.setattr("runtime.loop.perception.MAX_INPUTS_PER_TURN", 2)
    for i in range(3):
        tell(offline_home, f"waiting {i}")
    loop = make_loop(offline_home)
    assert tick(loop).kind == "no_model"
    assert tick(loop).kind == "quiet" and not loop._more_pending


def test_without_a_model_inputs_wait_and_are_reported_once(offline_home: Home):
    mid = tell(offline_home, "hello, no model yet")
    loop = make_loop(offline_home)
    assert tick(loop).kind == "no_model"
    assert tick(loop).kind == "quiet"
    assert status(offline_home, mid) == "pending"


def test_stop_cancels_a_hung_model_call_and_the_input_stays_pending(home: Home,
                                                                    api: FakeMessagesAPI):
    write_config(home.root, api.url, model={"timeout_s": 60.0})
    mid = tell(home, "a question the server never answers")
    api.enqueue(Scripted(200, text("too late"), delay=30))
    loop = make_loop(home)

    outcome = stopped_mid_call(loop, api, 1)
    assert outcome.kind == "stopped"
    assert status(home, mid) == "pending"


def test_a_dripping_server_cannot_outlast_timeout_s(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, model={"timeout_s": 0.5, "max_retries": 0})
    mid = tell(home, "a question answered a byte at a time")
    api.enqueue(Scripted(200, text("x" * 400), drip=0.05))  # 20 s of dripping
    outcome = tick(make_loop(home))
    assert outcome.kind == "failed" and "deadline" in outcome.detail
    assert status(home, mid) == "pending"


def test_a_stopped_turn_is_replayed_without_repeating_its_side_effect(home: Home,
                                                                      api: FakeMessagesAPI):
    """The first attempt sends a live reply, then is stopped while its next call hangs; the
    restarted loop replays the recorded response and tool result and sends nothing twice."""
    write_config(home.root, api.url, model={"timeout_s": 60.0})
    mid = tell(home, "please answer Dana")
    api.enqueue(tool_use("reply", {"text": "Dana: the fix ships Friday"}, id="toolu_reply1"),
                Scripted(200, text("late"), delay=30))
    loop = make_loop(home, live=True)

    assert stopped_mid_call(loop, api, 2).kind == "stopped"
    assert status(home, mid) == "pending"
    outbox = home.root / "state" / "outbox"
    assert len(list(outbox.iterdir())) == 1

    api.enqueue(text("Answered Dana."))
    again = make_loop(home, live=True)
    outcome = tick(again)
    assert outcome.kind == "acted" and status(home, mid) == "consumed"
    assert len(list(outbox.iterdir())) == 1  # the reply was not sent again
    assert len(api.requests) == 3  # step 1 was replayed, not asked again
    with Store.open(home.db_path) as store:
        assert len(ev.tail(store, 100, kind="outbox")) == 1
        responses = ev.tail(store, 100, kind="model_response")
    assert responses[-2].meta.get("replayed_from") is not None
    assert completed_turns_for(home, mid) == 1


def test_an_attempt_killed_while_replaying_does_not_lose_the_record(home: Home,
                                                                   api: FakeMessagesAPI):
    """Attempt 1 sent a reply and was stopped; attempt 2 took it up and was killed before it
    re-recorded anything; attempt 3 must still replay attempt 1's steps, not ask afresh (a
    fresh answer would be a second reply to the same message)."""
    write_config(home.root, api.url, model={"timeout_s": 60.0})
    mid = tell(home, "please answer Ravi")
    api.enqueue(tool_use("reply", {"text": "Ravi: done"}, id="toolu_ravi"),
                Scripted(200, text("late"), delay=30))
    loop = make_loop(home, live=True)

    assert stopped_mid_call(loop, api, 2).kind == "stopped"
    with Store.open(home.db_path) as store:
        first = ev.tail(store, 1, kind="tick")[0]
        ev.append(store, Event(kind="tick", body="tick: killed at once", actor="coworker",
                               author_kind="system", meta={"inputs": [mid],
                                                           "resumes": first.id}))
    api.enqueue(text("Answered."))
    outcome = tick(make_loop(home, live=True))
    assert outcome.kind == "acted" and status(home, mid) == "consumed"
    assert len(api.requests) == 3  # attempt 3 asked only for the step after the reply
    last = api.requests[-1]["json"]["messages"]
    assert [b["tool_use_id"] for b in last[-1]["content"] if b.get("type") == "tool_result"] \
        == ["toolu_ravi"]
    with Store.open(home.db_path) as store:
        assert [e.body for e in ev.tail(store, 10, kind="outbox")] == ["Ravi: done"]


def test_a_side_effect_begun_before_a_kill_is_not_run_again(home: Home):
    """A kill between the ledger entry and the tool's end: a side effect that cannot finish
    its own work is never run a second time; a fresh key runs exactly once."""
    from pydantic import BaseModel

    from runtime.tools import Registry, Tool

    class Charge(BaseModel):
        amount: int

    charged: list[int] = []

    def charge(ctx: ToolContext, p: Charge) -> str:
        charged.append(p.amount)
        return f"charged {p.amount}"
    registry = Registry([Tool("charge", "Charge a card.", Charge, charge, side_effect=True)])
    with Store.open(home.db_path) as store:
        tctx = ToolContext(store=store, home_root=home.root, settings=home.settings(),
                           tick_id=None, live=True, tool_use_id="toolu_k")
        assert ledger.begin(store, "toolu_k", "charge", None, {"amount": 5}) is None
        result = registry.dispatch(tctx, "charge", {"amount": 5})
        assert result.text.startswith("not repeated") and "may or may not" in result.text
        assert charged == []
        tctx.tool_use_id = "toolu_new"
        assert registry.dispatch(tctx, "charge", {"amount": 7}).text == "charged 7"
        assert registry.dispatch(tctx, "charge", {"amount": 7}).text.startswith("not repeated")
        assert charged == [7] and ledger.get(store, "toolu_new").status == "done"


def test_a_reply_cut_off_mid_way_is_finished_once_by_the_replay(home: Home):
    """The kill landed after the outbox event and before its file (or before the event): the
    keyed reply finishes what is missing and never sends twice."""
    registry = default_registry()
    outbox = home.root / "state" / "outbox"
    with Store.open(home.db_path) as store:
        tctx = ToolContext(store=store, home_root=home.root, settings=home.settings(),
                           tick_id=None, live=True, tool_use_id="toolu_half")
        assert ledger.begin(store, "toolu_half", "reply", None, {"text": "hi"}) is None
        ev.append(store, Event(kind="outbox", body="hi", actor="coworker", author_kind="agent",
                               meta={"subject": "", "tool_use_id": "toolu_half"}))
        result = registry.dispatch(tctx, "reply", {"text": "hi"})
        assert result.text.startswith("sent") and not result.is_error
        assert len(ev.tail(store, 10, kind="outbox")) == 1
        assert [p.read_text() for p in outbox.iterdir()] == ["hi\n"]
        assert ledger.get(store, "toolu_half").status == "done"
        again = registry.dispatch(tctx, "reply", {"text": "hi"})
        assert again.text.startswith("not repeated")
        tctx.tool_use_id = "toolu_before_event"  # cut off before its event: sent once now
        assert ledger.begin(store, "toolu_before_event", "reply", None, {"text": "yo"}) is None
        assert registry.dispatch(tctx, "reply", {"text": "yo"}).text.startswith("sent")
        assert len(ev.tail(store, 10, kind="outbox")) == 2
        assert len([p for p in outbox.iterdir() if not p.name.startswith(".")]) == 2


def test_imported_history_is_never_input(home: Home, api: FakeMessagesAPI, tmp_path: Path):
    lines = [{"ts": f"2026-0{m}-0{d}T09:00:00Z", "kind": "message", "actor": "owner",
              "author_kind": "user", "body": f"old message {m}-{d}"}
             for m in range(1, 4) for d in range(1, 4)]
    src = tmp_path / "history.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert main(["import", str(src)]) == 0
    loop = make_loop(home)
    assert tick(loop).kind == "quiet" and api.requests == []
    tell(home, "what is new today")
    assert tick(loop).kind == "no_action"
    assert "what is new today" in new_part(api.requests[0])
    assert "old message" not in new_part(api.requests[0])


def test_tell_falls_back_to_the_inbox_when_the_database_is_busy(home: Home,
                                                               api: FakeMessagesAPI, capsys):
    with Store.open(home.db_path):
        pass
    holder = sqlite3.connect(home.db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # an import holds the write lock
    try:
        assert main(["tell", "do not lose me"]) == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    said = capsys.readouterr().err
    assert "database is busy" in said and "inbox" in said
    files = [p for p in home.inbox.iterdir() if p.is_file()]
    assert len(files) == 1 and files[0].read_text() == "do not lose me\n"
    assert tick(make_loop(home)).kind == "no_action"
    assert "do not lose me" in api.requests[0]["raw"].decode()


def test_the_inbox_reads_only_regular_files_of_the_user(home: Home, api: FakeMessagesAPI,
                                                        tmp_path: Path, caplog):
    secret = tmp_path / "shadow"
    secret.write_text("root:SECRETHASH:19000")
    home.inbox.mkdir(parents=True, exist_ok=True)
    os.symlink(secret, home.inbox / "s.txt")
    (home.inbox / "folder").mkdir()
    bad_name = os.fsencode(home.inbox) + b"/caf\xe9.txt"
    with open(bad_name, "wb") as f:
        f.write(b"a note with a latin-1 name")
    if os.geteuid() == 0:  # root can hand a file to another user, as an attacker would
        other = home.inbox / "theirs.txt"
        other.write_text("from someone else")
        os.chown(other, 4242, 4242)
    (home.inbox / "ok.txt").write_text("a real note from me")
    outcome = tick(make_loop(home))
    assert outcome.kind == "no_action"
    sent = api.requests[0]["raw"].decode()
    assert "a real note from me" in sent
    assert "SECRETHASH" not in sent and "latin-1" not in sent and "someone else" not in sent
    rejected = sorted(p.name for p in (home.inbox / "rejected").iterdir())
    assert len(rejected) == (4 if os.geteuid() == 0 else 3)
    assert secret.read_text() == "root:SECRETHASH:19000"  # the link moved, not its target
    assert len([r for r in caplog.records if r.levelno == logging.WARNING
                and "not read as" in r.getMessage()]) == len(rejected)
    assert caplog.text.count("not a regular file") == 2  # the link and the folder
    assert "is not UTF-8" in caplog.text
    assert [p for p in home.inbox.iterdir() if p.name not in ("done", "rejected")] == []
    assert tick(make_loop(home)).kind == "quiet"  # nothing left to warn about every tick


def test_a_due_ritual_is_an_input_a_failed_turn_leaves_pending(home: Home, api: FakeMessagesAPI):
    home.config_path.write_text(home.config_path.read_text() + (
        '\n[[rituals.custom]]\nname = "standup"\ncron = "0 9 * * mon-fri"\n'
        'prompt = "Write the standup."\n'))
    loop = make_loop(home)
    loop._ritual_due("standup")
    api.enqueue(*[error(529, "overloaded_error")] * 4)
    assert tick(loop).kind == "failed"
    loop._ritual_due("standup")  # fired again while it waits: never doubled
    with Store.open(home.db_path) as store:
        waiting = inputs.pending(store)
    assert [(i.kind, i.event.meta["ritual"]) for i in waiting] == [("ritual", "standup")]
    api.enqueue(text("Standup written."))
    assert tick(loop).kind == "no_action"
    assert "Write the standup." in new_part(api.requests[-1])
    with Store.open(home.db_path) as store:
        assert inputs.pending(store) == []


def test_a_due_promise_is_delivered_once_even_after_a_failed_turn(home: Home,
                                                                  api: FakeMessagesAPI):
    with Store.open(home.db_path) as store:
        ev.append(store, Event(kind="promise", body="check the deploy", actor="coworker",
                               author_kind="agent", meta={"due": "2026-01-01T00:00:00.000Z"}))
    api.enqueue(*[error(503)] * 4, text("Checked."))
    loop = make_loop(home)
    assert tick(loop).kind == "failed"
    assert tick(loop).kind == "no_action"
    assert "check the deploy" in new_part(api.requests[-1])
    assert tick(loop).kind == "quiet"


def test_concurrent_tells_while_the_loop_writes_are_all_inputs(home: Home):
    assert tells_at_once(home, 8, "concurrent") == []
    with Store.open(home.db_path) as store:
        assert inputs.counts(store)["pending"] == 8


@pytest.mark.parametrize("outcome_kind", ["acted", "no_action"])
def test_consuming_inputs_and_writing_tick_end_is_one_transaction(home: Home,
                                                                   api: FakeMessagesAPI,
                                                                   outcome_kind, monkeypatch):
    """A failure while writing the tick_end leaves the input pending: never consumed without
    its completed turn on record."""
    mid = tell(home, "atomic please")
    if outcome_kind == "acted":
        api.enqueue(tool_use("note", {"text": "n"}, id="toolu_at"), text("ok"))
    real_append = ev.append

    def failing_append(store, event):
        if event.kind == "tick_end":
            raise sqlite3.OperationalError("disk I/O error")
        return real_append(store, event)
    monkeypatch.setattr("runtime.store.events.append", failing_append)
    with pytest.raises(sqlite3.OperationalError):
        tick(make_loop(home))
    monkeypatch.undo()
    assert status(home, mid) == "pending"


def test_one_bad_tool_argument_does_not_fail_the_tick_or_drop_its_neighbours(
        home: Home, api: FakeMessagesAPI):
    """A promise due "in 99999999999999 d" once raised inside the validator and failed the
    whole tick, dropping the other tool calls of that reply."""
    mid = tell(home, "remind me and note it")
    api.enqueue(fakeapi_message([
        {"type": "tool_use", "id": "toolu_p", "name": "promise",
         "input": {"text": "later", "due": "in 99999999999999 d"}},
        {"type": "tool_use", "id": "toolu_n", "name": "note", "input": {"text": "noted it"}}]),
        text("Done."))
    outcome = tick(make_loop(home))
    assert outcome.kind == "acted" and status(home, mid) == "consumed"
    with Store.open(home.db_path) as store:
        results = ev.tail(store, 10, kind="tool_result")
        notes = ev.tail(store, 10, kind="note")
    assert results[0].meta["is_error"] and "too far ahead" in results[0].body
    assert not results[1].meta["is_error"] and [n.body for n in notes] == ["noted it"]


def test_a_memory_md_that_cannot_be_read_does_not_fail_the_tick(home: Home,
                                                                 api: FakeMessagesAPI, caplog):
    """A broken MEMORY.md is left out of the prompt with a WARNING; the turn goes on (it failed
    every tick, and so set the owner's messages aside)."""
    home.memory_md.unlink()
    home.memory_md.mkdir()  # unreadable as a file
    mid = tell(home, "hello despite the broken memory")
    outcome = tick(make_loop(home))
    assert outcome.kind == "no_action" and status(home, mid) == "consumed"
    assert "MEMORY.md" in caplog.text


def past_part(request: dict) -> str:
    """The staircase of the past a request opens with."""
    return request["json"]["messages"][0]["content"][0]["text"]


def test_a_new_input_is_shown_once_as_new_and_the_past_keeps_its_count(
        home: Home, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    """The turn's inputs are shown whole under "What is new"; the past leaves them out (a copy
    there reads as already seen) and still shows RECENT_EVENTS events before them."""
    from runtime import context as ctx

    monkeypatch.setattr(ctx, "RECENT_EVENTS", 3)
    with Store.open(home.db_path) as store:
        older = [ev.append(store, Event(kind="note", body=f"older note {i}", actor="coworker",
                                        author_kind="agent")) for i in range(5)]
    first = tell(home, "please check the parser")
    second = tell(home, "and the lexer too")
    api.enqueue(text("Looking."))
    tick(make_loop(home))
    [request] = api.requests
    past, new = past_part(request), new_part(request)
    assert "please check the parser" in new and "and the lexer too" in new
    assert f"[event {first} " not in past and f"[event {second} " not in past, past
    assert [f"[event {i} " in past for i in older] == [False, False, True, True, True], past


def test_the_past_leaves_out_only_the_inputs_shown_and_keeps_its_count(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    """RECENT_EVENTS = 0 shows no event; an input older than the window leaves the count at
    N; inputs among the newest are replaced by the events before them."""
    from runtime import context as ctx

    with Store.open(offline_home.db_path) as store:
        ids = [ev.append(store, Event(kind="note", body=f"n{i}", actor="coworker",
                                      author_kind="agent")) for i in range(6)]
        s = offline_home.settings()
        monkeypatch.setattr(ctx, "RECENT_EVENTS", 0)
        assert "[event" not in ctx.staircase(store, s, before_id=100, shown_new=[ids[-1]])
        monkeypatch.setattr(ctx, "RECENT_EVENTS", 3)
        out = ctx.staircase(store, s, before_id=100, shown_new=[ids[0]])
        assert [f"[event {i} " in out for i in ids] == [False, False, False, True, True, True]
        out = ctx.staircase(store, s, before_id=100, shown_new=[ids[4], ids[5]])
        assert [f"[event {i} " in out for i in ids] == [False, True, True, True, False, False]


@pytest.mark.parametrize("answer", ["text", "tool"])
def test_an_answer_holding_half_a_surrogate_pair_never_counts_against_the_message(
        answer: str, home: Home, api: FakeMessagesAPI, caplog: pytest.LogCaptureFixture):
    """A JSON "\\ud800" escape in the model's text or in a tool call's input is valid JSON
    but no text: SQLite could not store it, and the tick failed 'unexpectedly' against the
    owner's message, three times and the message was set aside. It is read as U+FFFD, with a
    WARNING, and the turn goes on."""
    mid = tell(home, "please note the parser status")
    if answer == "text":
        api.enqueue(text("lone \ud800 surrogate"))
    else:
        api.enqueue(tool_use("note", {"text": "lone \udcff surrogate"}, id="toolu_s"),
                    text("Noted."))
    with caplog.at_level(logging.WARNING):
        outcome = tick(make_loop(home))
    assert outcome.kind in ("acted", "no_action"), outcome
    assert status(home, mid) == "consumed" and completed_turns_for(home, mid) == 1
    assert any("lone surrogate" in r.getMessage() for r in caplog.records)
    with Store.open(home.db_path) as store:
        bodies = [e.body for e in ev.tail(store, 50, by_id=True)]
    assert any("lone \ufffd surrogate" in b for b in bodies), bodies
    if answer == "tool":  # the tool result went back to the model in the next request
        assert len(api.requests) == 2


def test_a_row_holding_half_a_surrogate_pair_is_stored_with_a_warning(
        offline_home: Home, caplog: pytest.LogCaptureFixture):
    """Any door (an MCP tool's result, another agent's words): the store keeps the row, the
    half pair as U+FFFD, and says so."""
    with Store.open(offline_home.db_path) as store, caplog.at_level(logging.WARNING):
        i = ev.append(store, Event(kind="action", body="result \ud83d here",
                                   actor="board__status\udc80", author_kind="tool",
                                   meta={"raw": "x\udfff"}))
        e = ev.get(store, i)
    assert (e.body, e.actor, e.meta["raw"]) == ("result \ufffd here", "board__status\ufffd",
                                               "x\ufffd")
    assert sum("lone surrogate" in r.getMessage() for r in caplog.records) == 3


@pytest.mark.parametrize("error_, blamed", [
    (StoreBusy("database is locked"), False),  # the database's state: the input waits
    (StoreRefused("a trigger refused the write"), True),  # the turn's doing: counted
])
def test_a_refused_write_is_the_turns_doing_a_busy_database_is_not(
        home: Home, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch,
        error_: Exception, blamed: bool):
    from runtime.loop import turn as turn_mod

    mid = tell(home, "write something the database refuses")

    async def raises(self: object) -> None:
        raise error_
    monkeypatch.setattr(turn_mod.Turn, "run", raises)
    loop = make_loop(home)
    for _ in range(3):
        assert tick(loop).kind == "failed"
    assert status(home, mid) == ("set_aside" if blamed else "pending")
