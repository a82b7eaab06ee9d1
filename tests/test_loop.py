"""The tick loop, in process, against the real anthropic client and a local Messages API."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runtime.home import Home
from runtime.loop import Loop, Outcome, RunState, TickOutcome
from runtime.store import Event, Store, iso_z, pins, telemetry
from runtime.store import events as ev

from .conftest import run_tick as tick
from .conftest import tell, write_config
from .fakeapi import FakeMessagesAPI, Scripted, error, text, tool_use


def make_loop(home: Home, **kw) -> Loop:
    return Loop(home, home.settings(), **kw)



def kinds(home: Home, after: int = 0) -> list[str]:
    with Store.open(home.db_path) as store:
        return [e.kind for e in ev.since(store, after)]


def events_of(home: Home, kind: str) -> list[Event]:
    with Store.open(home.db_path) as store:
        return ev.tail(store, 1000, kind=kind)


def test_tool_use_round_trip_ends_in_a_note_event(home: Home, api: FakeMessagesAPI):
    tell(home, "Note that the parser bugs go to Dana.")
    api.enqueue(tool_use("note", {"text": "parser bugs go to Dana"}, id="toolu_a"),
                text("Noted."))
    outcome = tick(make_loop(home))
    assert outcome.kind == "acted" and outcome.steps == 2
    # the closing text answers the owner's message: a reply (ADR-0042)
    assert kinds(home, 1) == ["tick", "recall", "model_response", "tool_call", "note", "tool_result",
                              "model_response", "outbox", "tick_end"]
    note = events_of(home, "note")[0]
    assert note.body == "parser bugs go to Dana" and note.author_kind == "agent"
    result = events_of(home, "tool_result")[0]
    assert result.author_kind == "tool" and f"event {note.id}" in result.body
    # The second request carries the tool result back to the model.
    second = api.bodies[1]["messages"]
    assert second[1]["content"][0]["type"] == "tool_use"
    block = second[2]["content"][0]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_a"
    assert f"event {note.id}" in block["content"]
    # The owner's words reach the model with their event id.
    first_text = json.dumps(api.bodies[0]["messages"][0])
    assert "parser bugs go to Dana" in first_text and "[event 1 " in first_text


def test_model_response_events_record_token_usage(home: Home, api: FakeMessagesAPI):
    tell(home, "hello")
    api.enqueue(text("Hello back.", input_tokens=321, output_tokens=12, cache_read=300,
                     cache_write=21))
    tick(make_loop(home))
    meta = events_of(home, "model_response")[0].meta
    assert meta["usage"] == {"input_tokens": 321, "output_tokens": 12,
                             "cache_read_input_tokens": 300, "cache_creation_input_tokens": 21}


def test_quiet_ticks_send_no_request_and_leave_no_event(home: Home, api: FakeMessagesAPI):
    loop = make_loop(home)
    before = kinds(home)
    outcomes = [tick(loop) for _ in range(3)]
    assert [o.kind for o in outcomes] == ["quiet"] * 3
    assert api.requests == []
    assert kinds(home) == before
    with Store.open(home.db_path) as store:
        assert telemetry.count(store, "quiet_tick") == 3


def test_a_handled_input_is_not_perceived_twice(home: Home, api: FakeMessagesAPI):
    tell(home, "one thing")
    loop = make_loop(home)
    assert tick(loop).kind == "no_action"
    assert tick(loop).kind == "quiet"
    assert len(api.requests) == 1


def _prefix(raw: bytes) -> bytes:
    """The request's system and tools exactly as sent on the wire (they close the JSON body)."""
    start = raw.index(b'"system":')
    assert raw.index(b'"tools":') > start
    return raw[start:]


def test_cached_prefix_is_byte_identical_across_ticks(home: Home, api: FakeMessagesAPI):
    loop = make_loop(home)
    tell(home, "first")
    tick(loop)
    tell(home, "second, with different words")
    tick(loop)
    a, b = api.requests[0]["raw"], api.requests[1]["raw"]
    assert a != b  # the messages differ...
    assert _prefix(a) == _prefix(b)  # ...the cached prefix does not, byte for byte
    assert api.bodies[0]["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [t["name"] for t in api.bodies[0]["tools"]] == sorted(
        t["name"] for t in api.bodies[0]["tools"])
    # The check can fail: a new pin changes the prefix.
    with Store.open(home.db_path) as store:
        pins.add(store, "Dana owns the parser")
    tell(home, "third")
    tick(loop)
    assert _prefix(api.requests[2]["raw"]) != _prefix(a)
    assert b"Dana owns the parser" in _prefix(api.requests[2]["raw"])


def test_retries_inside_a_tick_then_success(home: Home, api: FakeMessagesAPI):
    tell(home, "hi")
    api.enqueue(error(429, "rate_limit_error"), error(529, "overloaded_error"), text("hi!"))
    outcome = tick(make_loop(home))
    assert outcome.kind == "no_action"
    assert len(api.requests) == 3
    assert events_of(home, "model_response")[0].meta["attempts"] == 3


def test_permanent_failure_fails_the_tick_and_the_loop_lives_on(home: Home,
                                                              api: FakeMessagesAPI, caplog):
    tell(home, "are you there?")
    for _ in range(4):
        api.enqueue(error(500))
    loop = make_loop(home)
    with caplog.at_level(logging.ERROR):
        assert tick(loop).kind == "failed"
    failed = events_of(home, "tick_failed")
    assert len(failed) == 1 and "after 4 attempt" in failed[0].body
    assert any("failed" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    # the next tick works
    tell(home, "and now?")
    api.enqueue(text("Here."))
    assert tick(loop).kind == "no_action"


def test_garbage_from_the_model_fails_the_tick_cleanly(home: Home, api: FakeMessagesAPI):
    tell(home, "hi")
    api.enqueue(Scripted(200, "{not json"))
    assert tick(make_loop(home)).kind == "failed"
    said = events_of(home, "tick_failed")[0].body
    assert "Messages API response" in said and "[model] base_url" in said, said


@pytest.mark.parametrize("name,payload,expect", [
    ("launch_rockets", {"x": 1}, "unknown tool 'launch_rockets'"),
    ("note", "just a string", "input must be a JSON object"),
    ("note", {"txt": "typo"}, "does not match its schema: text: Field required"),
    ("promise", {"text": "x", "due": "someday"}, "due must be ISO-8601"),
])
def test_malformed_tool_calls_go_back_as_errors(home: Home, api: FakeMessagesAPI, name,
                                                payload, expect):
    tell(home, "do something")
    api.enqueue(tool_use(name, payload, id="toolu_bad"), text("Sorry, fixed nothing."))
    outcome = tick(make_loop(home))
    assert outcome.kind == "acted"  # the tick went on to a second step
    block = api.bodies[1]["messages"][2]["content"][0]
    assert block["is_error"] is True and expect in block["content"]
    assert events_of(home, "tool_result")[0].meta["is_error"] is True


def test_step_cap_ends_the_tick(home: Home, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    write_config(home.root, api.url)
    monkeypatch.setattr("runtime.loop.turn.MAX_STEPS_PER_TICK", 3)
    api.default = tool_use("note", {"text": "again"})
    tell(home, "loop forever")
    outcome = tick(make_loop(home))
    assert outcome.kind == "step_cap" and outcome.steps == 3
    assert len(api.requests) == 3
    assert len(events_of(home, "step_cap")) == 1


def test_deciding_not_to_act_is_an_outcome(home: Home, api: FakeMessagesAPI):
    tell(home, "FYI: nothing needed")
    api.enqueue(text("Nothing to do."))
    outcome = tick(make_loop(home))
    assert outcome.kind == "no_action"
    assert events_of(home, "tick_end")[0].meta["outcome"] == "no_action"


def test_a_reply_in_dry_run_is_written_as_in_live(home: Home, api: FakeMessagesAPI):
    """Talking to the owner is not a risky side effect (ADR-0042): in dry-run the reply lands
    as its event and file, and records the message it answers."""
    asked = tell(home, "say hi")
    api.enqueue(tool_use("reply", {"text": "hi owner", "subject": "greeting"}), text("done"))
    tick(make_loop(home))
    out = events_of(home, "outbox")
    assert [e.body for e in out] == ["hi owner"] and out[0].meta["in_reply_to"] == [asked]
    assert len(list(home.outbox.iterdir())) == 1
    assert events_of(home, "dry_run") == []
    assert "dry-run" not in api.bodies[1]["messages"][2]["content"][0]["content"]


def test_an_answer_in_plain_text_is_a_reply_once(home: Home, api: FakeMessagesAPI):
    """A model that answers the owner in text, without `reply`, does not leave them in
    silence: its text is written as a reply (from_text), and a turn that did call `reply`
    gets no second one from its closing words."""
    asked = tell(home, "what is the build status?")
    api.enqueue(text("The build is green."))
    loop = make_loop(home)
    tick(loop)
    [out] = events_of(home, "outbox")
    assert out.body == "The build is green." and out.meta["from_text"] is True
    assert out.meta["in_reply_to"] == [asked]
    tell(home, "and the deploy?")
    api.enqueue(tool_use("reply", {"text": "Deployed."}), text("Told them."))
    tick(loop)
    assert [e.body for e in events_of(home, "outbox")] == ["The build is green.", "Deployed."]


def test_reply_live_writes_outbox_event_and_file(home: Home, api: FakeMessagesAPI):
    tell(home, "say hi")
    api.enqueue(tool_use("reply", {"text": "hi owner", "subject": "greeting"}), text("done"))
    tick(make_loop(home, live=True))
    out = events_of(home, "outbox")
    assert len(out) == 1 and out[0].body == "hi owner"
    files = list(home.outbox.iterdir())
    assert len(files) == 1 and "hi owner" in files[0].read_text()
    assert events_of(home, "dry_run") == []


def test_writes_live_in_config_is_live(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, writes={"mode": "live"})
    assert make_loop(home).live is True


def test_a_due_promise_wakes_a_tick_once(home: Home, api: FakeMessagesAPI,
                                         monkeypatch: pytest.MonkeyPatch):
    tell(home, "check the build later")
    api.enqueue(tool_use("promise", {"text": "check the build", "due": "in 1h"}), text("ok"))
    loop = make_loop(home)
    tick(loop)
    assert tick(loop).kind == "quiet"  # not due yet
    # two hours on, by the clock perception reads (no sleeping, whatever the machine's load)
    later = iso_z(datetime.now(UTC) + timedelta(hours=2))
    monkeypatch.setattr("runtime.loop.perception.now_iso", lambda: later)
    api.enqueue(text("Build is fine."))
    outcome = tick(loop)
    assert outcome.kind == "no_action"
    assert "promise" in json.dumps(api.bodies[-1]["messages"][0]) and \
        "check the build" in json.dumps(api.bodies[-1]["messages"][0])
    assert len(events_of(home, "promise_due")) == 1
    assert tick(loop).kind == "quiet"


def test_inbox_file_becomes_an_owner_message_and_moves_to_done(home: Home,
                                                               api: FakeMessagesAPI):
    (home.inbox / "note.txt").write_text("Please look at ticket 42.\n")
    tick(make_loop(home))
    msg = events_of(home, "message")[0]
    assert msg.body == "Please look at ticket 42." and msg.author_kind == "user"
    assert msg.meta["via"] == "inbox"
    assert not (home.inbox / "note.txt").exists()
    assert (home.inbox / "done" / "note.txt").read_text() == "Please look at ticket 42.\n"
    assert "ticket 42" in json.dumps(api.bodies[0])


def test_interval_doubles_when_quiet_and_resets_on_activity(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, coworker={"tick_seconds": 5, "max_tick_seconds": 30})
    loop = make_loop(home)
    seen = []
    for outcome in ["quiet", "quiet", "no_action", "quiet", "quiet"]:
        loop._after_tick(TickOutcome(outcome))
        seen.append(loop.interval)
    loop._after_tick(TickOutcome("acted", active=True))
    seen.append(loop.interval)
    assert seen == [10, 20, 30, 30, 30, 5]


def test_no_model_records_inputs_and_says_so_loudly(offline_home: Home, caplog):
    with caplog.at_level(logging.WARNING):
        loop = make_loop(offline_home)
    assert any("NO MODEL CONFIGURED" in r.getMessage() for r in caplog.records)
    tell(offline_home, "are you there?")
    outcome = tick(loop)
    assert outcome.kind == "no_model"
    assert events_of(offline_home, "tick_end")[0].meta["outcome"] == "no_model"


def test_config_edit_is_applied_at_the_next_tick(home: Home, api: FakeMessagesAPI, caplog):
    loop = make_loop(home)
    write_config(home.root, api.url, model={"name": "other-model"})
    tell(home, "hi")
    with caplog.at_level(logging.WARNING):
        tick(loop)
    assert api.bodies[0]["model"] == "other-model"
    reload = events_of(home, "config_reload")
    assert reload and reload[0].meta["changed"]["model.name"] == ["fake-model", "other-model"]
    assert any("model.name" in r.getMessage() for r in caplog.records)


def test_invalid_config_edit_keeps_the_last_good_config(home: Home, api: FakeMessagesAPI,
                                                        caplog):
    loop = make_loop(home)
    (home.root / "config.toml").write_text("[model]\nmax_tokens = 'lots'\n")
    tell(home, "hi")
    with caplog.at_level(logging.ERROR):
        tick(loop)
    assert api.bodies[0]["model"] == "fake-model"
    assert "max_tokens" in events_of(home, "config_error")[0].body
    assert any("INVALID" in r.getMessage() for r in caplog.records)


def test_decide_with_unknown_sources_writes_null_provenance(home: Home, api: FakeMessagesAPI,
                                                            caplog):
    tell(home, "decide something")
    api.enqueue(tool_use("decide", {"text": "ship it", "source_events": [1, 9999]}),
                tool_use("decide", {"text": "ship it, really", "source_events": [1]}, id="t2"),
                text("done"))
    with caplog.at_level(logging.WARNING):
        tick(make_loop(home))
    with Store.open(home.db_path) as store:
        rows = store.query("SELECT body, source_events FROM decisions ORDER BY id")
    assert [tuple(r) for r in rows] == [("ship it", None), ("ship it, really", "[1]")]
    assert any("ADR-0008" in r.getMessage() for r in caplog.records)


def test_memory_search_tool_finds_earlier_events(home: Home, api: FakeMessagesAPI):
    tell(home, "The flaky test is test_parser_unicode.")
    api.enqueue(text("ok"))
    loop = make_loop(home)
    tick(loop)
    tell(home, "which test was flaky?")
    api.enqueue(tool_use("memory_search", {"query": "flaky test"}), text("test_parser_unicode"))
    tick(loop)
    result = api.bodies[-1]["messages"][2]["content"][0]["content"]
    assert "[event 1 " in result and "test_parser_unicode" in result


def test_a_crash_is_logged_apart_from_a_stop(home: Home, api: FakeMessagesAPI, caplog,
                                             monkeypatch):
    loop = make_loop(home)

    async def broken_sleep(seconds: float) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(loop, "_sleep", broken_sleep)
    with caplog.at_level(logging.INFO), pytest.raises(RuntimeError):
        asyncio.run(loop.run(max_ticks=5))
    assert [e.body for e in events_of(home, "crash")] == ["RuntimeError: disk on fire"]
    assert events_of(home, "stop") == []
    assert any(r.levelno == logging.CRITICAL and "CRASHED" in r.getMessage()
               for r in caplog.records)


def test_a_clean_run_records_start_and_stop(home: Home, api: FakeMessagesAPI, caplog):
    loop = make_loop(home)
    with caplog.at_level(logging.INFO):
        asyncio.run(loop.run(max_ticks=1))
    assert len(events_of(home, "start")) == 1
    assert events_of(home, "stop")[0].meta["reason"] == "ran 1 tick(s)"
    assert events_of(home, "crash") == []
    assert any("stopped cleanly" in r.getMessage() for r in caplog.records)
    run = json.loads(Path(home.runfile).read_text())
    assert run["running"] is False and run["ticks"] == 1


def test_the_run_state_goes_running_then_stopped(home: Home, api: FakeMessagesAPI):
    loop = make_loop(home)
    seen = [loop.state]
    real_tick = loop.tick

    async def watched_tick() -> TickOutcome:
        seen.append(loop.state)
        return await real_tick()

    loop.tick = watched_tick
    asyncio.run(loop.run(max_ticks=1))
    seen.append(loop.state)
    assert seen == [RunState.STOPPED, RunState.RUNNING, RunState.STOPPED]


def test_async_with_starts_and_stops_and_a_stop_only_signals(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, coworker={"tick_seconds": 3600, "max_tick_seconds": 3600})

    async def go() -> tuple[Loop, list[object]]:
        async with make_loop(home) as loop:
            seen: list[object] = [loop.state]
            real_sleep, sleeping = loop._sleep, asyncio.Event()

            async def watched_sleep(seconds: float) -> None:
                sleeping.set()
                await real_sleep(seconds)

            loop._sleep = watched_sleep
            serving = asyncio.create_task(loop.run_until_stopped())
            await sleeping.wait()  # the first tick ran; the loop sleeps an hour now
            loop.stop("test stop")
            # stop() only signals: nothing is torn down until the context ends
            run = await asyncio.to_thread(Path(home.runfile).read_text)
            seen += [loop.state, json.loads(run)["running"]]
            await asyncio.wait_for(serving, 30)  # the hour's sleep was cut short
            seen.append(loop.state)
        return loop, seen

    loop, seen = asyncio.run(go())
    assert seen == [RunState.RUNNING, RunState.STOPPING, True, RunState.STOPPING]
    assert loop.state is RunState.STOPPED
    assert json.loads(Path(home.runfile).read_text())["running"] is False
    assert [e.meta["reason"] for e in events_of(home, "stop")] == ["test stop"]


def test_tick_outcomes_are_written_as_their_plain_words(home: Home, api: FakeMessagesAPI):
    tell(home, "hello")
    api.enqueue(text("Hello."))
    loop = make_loop(home)
    outcome = tick(loop)
    assert outcome.kind is Outcome.NO_ACTION
    loop._after_tick(outcome)
    with Store.open(home.db_path) as store:
        raw = store.query("SELECT body, meta FROM events WHERE kind = 'tick_end'")[0]
    assert raw["body"].endswith(": no_action") and '"outcome": "no_action"' in raw["meta"]
    assert json.loads(Path(home.runfile).read_text())["last_outcome"] == "no_action"
    assert TickOutcome("step_cap").kind is Outcome.STEP_CAP
    with pytest.raises(ValueError):
        TickOutcome("sleepy")  # a closed set: a word outside it is a bug, caught at once
