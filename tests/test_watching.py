"""The person who runs it can see what it does, and no typed mistake shows a traceback
(issue 11): the per-tick log line, live side effects, the spending cap, status, log, tell."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest
from pydantic import BaseModel

from runtime.cli import main
from runtime.home import Home
from runtime.loop import Loop
from runtime.store import Store, inputs
from runtime.store import events as ev
from runtime.tools import Tool

from .conftest import run_tick as tick
from .conftest import tell, write_config
from .fakeapi import FakeMessagesAPI, error, text, tool_use


def make_loop(home: Home, **kw) -> Loop:
    return Loop(home, home.settings(), **kw)


def tick_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "runtime.loop" and r.levelno == logging.INFO
            and r.getMessage().startswith("tick ")]


def test_one_info_line_per_non_quiet_tick(home: Home, api: FakeMessagesAPI, caplog):
    caplog.set_level(logging.INFO, logger="runtime.loop")
    mid = tell(home, "note this and answer")
    api.enqueue(tool_use("note", {"text": "noted"}, id="toolu_w1", input_tokens=120,
                         output_tokens=30, cache_read=80),
                tool_use("reply", {"text": "Done"}, id="toolu_w2"), text("Bye."))
    loop = make_loop(home)
    tick(loop)
    tick(loop)  # quiet: no line
    lines = tick_lines(caplog)
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith(f"tick {mid + 1} acted: 1 input(s) (#{mid}), 3 model call(s)")
    assert "tokens in 320 out 70 cached 80" in line
    # a reply to the owner is written in dry-run too (ADR-0042)
    assert "tools: note, reply" in line and "side effects: reply (to the owner)" in line
    assert line.rstrip().endswith(" s")


class _Ping(BaseModel):
    to: str


def test_a_live_side_effect_gets_its_own_info_line(home: Home, api: FakeMessagesAPI, caplog):
    caplog.set_level(logging.INFO, logger="runtime.loop")
    tell(home, "ping the build box")
    api.enqueue(tool_use("ping", {"to": "build"}, id="toolu_live"), text("Pinged."))
    loop = make_loop(home, live=True)
    loop.registry.add(Tool("ping", "ping a host (a side effect in the world)", _Ping,
                           lambda _ctx, p: f"pinged {p.to}", side_effect=True))
    tick(loop)
    live = [r.getMessage() for r in caplog.records if r.getMessage().startswith("LIVE")]
    assert len(live) == 1 and "ping (tool_use toolu_live" in live[0]
    assert "side effects: ping (live)" in tick_lines(caplog)[0]


def test_a_failed_tick_line_counts_the_calls_it_spent(home: Home, api: FakeMessagesAPI, caplog):
    caplog.set_level(logging.INFO, logger="runtime.loop")
    tell(home, "hello")
    api.enqueue(*[error(529, "overloaded_error")] * 4)
    assert tick(make_loop(home)).kind == "failed"
    assert " failed: 1 input(s)" in tick_lines(caplog)[0]
    assert "4 model call(s)" in tick_lines(caplog)[0]


def test_the_daily_call_cap_stops_model_calls_and_inputs_wait(home: Home, api: FakeMessagesAPI,
                                                              caplog, capsys):
    write_config(home.root, api.url, model={"daily_calls": 2})
    first = tell(home, "first message")
    api.enqueue(tool_use("note", {"text": "n"}, id="toolu_c1"), text("ok"), text("never"))
    loop = make_loop(home)
    assert tick(loop).kind == "acted" and len(api.requests) == 2
    second = tell(home, "second message")
    assert tick(loop).kind == "quiet" and len(api.requests) == 2
    assert tick(loop).kind == "quiet"
    warnings = [r.getMessage() for r in caplog.records if "SPENDING CAP" in r.getMessage()]
    assert len(warnings) == 1 and "daily_calls 2 reached" in warnings[0]
    with Store.open(home.db_path) as store:
        assert inputs.status_of(store, first) == "consumed"
        assert inputs.status_of(store, second) == "pending"
        assert len(ev.tail(store, 10, kind="spending_cap")) == 1
    write_config(home.root, api.url, model={"daily_calls": 10})  # the owner raises it
    assert tick(loop).kind == "no_action"
    with Store.open(home.db_path) as store:
        assert inputs.status_of(store, second) == "consumed"


def test_the_token_cap_stops_a_turn_between_calls(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, model={"daily_tokens": 100})
    mid = tell(home, "a long job")
    api.enqueue(tool_use("note", {"text": "n"}, id="toolu_t1", input_tokens=90,
                         output_tokens=20), text("never asked"))
    outcome = tick(make_loop(home))
    assert outcome.kind == "capped" and len(api.requests) == 1
    with Store.open(home.db_path) as store:
        assert inputs.status_of(store, mid) == "pending"


def test_status_exits_3_when_nothing_runs(offline_home: Home, capsys):
    assert main(["status"]) == 3
    assert "not running" in capsys.readouterr().out
    assert main(["status", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["running"] is False


@pytest.mark.parametrize("args", [
    ["log", "-n", "99999999999999999999"],
    ["tag", "99999999999999999999", "x"],
    ["tag", "²", "x"],
    ["promotions", "approve", "99999999999999999999"],
    ["unpin", "99999999999999999999"],
    ["restore", "99999999999999999999"],
    ["retry", "99999999999999999999"],
    ["redact", "99999999999999999999", "--why", "x"],
    ["log", "--kind", "no_such_kind"],
])
def test_a_number_or_name_out_of_range_is_one_usage_line(offline_home: Home, capsys, args):
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert len(captured.err.strip().splitlines()) == 1 and captured.err.startswith("error: ")


def test_an_unknown_kind_lists_the_kinds(offline_home: Home, capsys):
    tell(offline_home, "hello")
    assert main(["log", "--kind", "mesage"]) == 2
    err = capsys.readouterr().err
    assert "no event kind 'mesage'" in err and "message" in err
    assert main(["log", "--kind", "decision"]) == 0  # a known kind with no events yet


def test_tell_text_that_is_not_utf8_is_kept_as_text(offline_home: Home, capsys):
    bad = os.fsdecode(b"bad \xff byte")  # what Python makes of `printf 'bad \xff'`
    assert main(["tell", bad]) == 0
    with Store.open(offline_home.db_path) as store:
        assert ev.tail(store, 1, kind="message")[0].body == "bad \ufffd byte"


def test_tell_dash_reads_standard_input(offline_home: Home, monkeypatch, capsys):
    import io

    class Stdin(io.TextIOWrapper):
        pass
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"from a pipe\nline two\n")))
    assert main(["tell", "-"]) == 0
    with Store.open(offline_home.db_path) as store:
        assert ev.tail(store, 1, kind="message")[0].body == "from a pipe\nline two"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"  \n")))
    assert main(["tell", "-"]) == 2


def test_status_says_an_invalid_edit_left_the_last_good_config_running(
        offline_home: Home, capsys):
    from runtime import process

    process.write_runfile(offline_home, {"pid": os.getpid(), "running": True,
                                         "config_hash": "x", "writes": "dry-run"})
    offline_home.config_path.write_text("[coworker]\ntick_seconds = 'often'\n")
    from runtime.settings import file_hash

    run = process.read_runfile(offline_home)
    run["rejected_config_hash"] = file_hash(offline_home.config_path)
    assert process.config_rejected(offline_home, run)
    run["rejected_config_hash"] = "something else"
    assert not process.config_rejected(offline_home, run)


@pytest.mark.slow
def test_ctrl_c_in_the_first_second_is_no_traceback(offline_home: Home):
    """Interrupt `coworker run` at several moments of its start: never a traceback."""
    checked = 0
    for delay in (0.1, 0.3, 0.8, 1.5):
        # as from a terminal: SIGINT at its default (a runner in the background may ignore it)
        proc = subprocess.Popen([sys.executable, "-m", "runtime.entry", "run"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        if "init_import_site" in err or proc.returncode == -signal.SIGINT:
            continue  # it landed in the interpreter's own start, before any of our code
        checked += 1
        assert "Traceback" not in err + out, (delay, err[-2000:])
        assert proc.returncode in (0, 130), (delay, proc.returncode, err[-500:])
    assert checked >= 2


_LOST_CTRL_C = """
import os, signal, sys


class Finalized:
    def __del__(self):  # where Python cannot raise: an exception here is printed and lost
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))  # the handler runs here


class WhileTheCliImports:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            Finalized()
        return None


MODULE = sys.argv[1]
sys.meta_path.insert(0, WhileTheCliImports())
sys.argv = ["coworker", *sys.argv[2:]]
from runtime.entry import main
sys.exit(main())
"""


@pytest.mark.parametrize("module, args", [("runtime.cli", ["--version"]),
                                          ("runtime.loop", ["run", "--help"])])
@pytest.mark.slow
def test_ctrl_c_where_a_library_cannot_raise_it_still_stops_the_start(module: str,
                                                                       args: list[str]):
    """A Ctrl-C that lands while the CLI's modules import (or the loop's, for `run`), inside
    code that cannot raise (a finalizer here; pydantic's model construction in life), is not
    lost: exit 130, no traceback, and nothing after the import runs (no version, no help)."""
    proc = subprocess.run([sys.executable, "-c", _LOST_CTRL_C, module, *args],
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr[-1000:])
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr[-1000:]


def test_tell_with_a_read_only_database_is_one_line(offline_home: Home, capsys):
    """A database the user cannot write (here: immutable, which binds root too) is one line,
    exit 1, nothing written."""
    tell(offline_home, "before")
    db = str(offline_home.db_path)
    made_immutable = subprocess.run(["chattr", "+i", db], capture_output=True).returncode == 0
    try:
        if not made_immutable:  # a file system without attributes: a read-only connection
            import runtime.store.db as dbmod
            real = dbmod.sqlite3.connect

            def ro(path, *a, **k):
                conn = real(path, *a, **k)
                conn.execute("PRAGMA query_only = ON")
                return conn
            dbmod.sqlite3.connect = ro
        try:
            assert main(["tell", "while read-only"]) == 1
        finally:
            if not made_immutable:
                dbmod.sqlite3.connect = real
    finally:
        if made_immutable:
            subprocess.run(["chattr", "-i", db], check=True)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "read-only" in err
    with Store.open(offline_home.db_path) as store:
        assert [e.body for e in ev.tail(store, 10, kind="message")] == ["before"]


def _imported_then_live(home: Home, tmp_path) -> None:
    src = tmp_path / "old.jsonl"
    src.write_text(json.dumps({"ts": "2020-01-01T09:00:00Z", "kind": "note", "actor": "x",
                               "body": "an old imported note"}) + "\n")
    tell(home, "live message one")
    assert main(["import", str(src)]) == 0


def test_log_orders_by_time_and_by_id_on_request(offline_home: Home, tmp_path, capsys):
    _imported_then_live(offline_home, tmp_path)
    capsys.readouterr()
    assert main(["log", "--json"]) == 0
    bodies = [json.loads(x)["body"] for x in capsys.readouterr().out.splitlines()]
    assert bodies == ["an old imported note", "live message one"]  # by time: old first
    assert main(["log", "--json", "--by-id"]) == 0
    bodies = [json.loads(x)["body"] for x in capsys.readouterr().out.splitlines()]
    assert bodies == ["live message one", "an old imported note"]  # as written


def test_log_since_keeps_the_recent_and_refuses_nonsense(offline_home: Home, tmp_path, capsys):
    _imported_then_live(offline_home, tmp_path)
    capsys.readouterr()
    assert main(["log", "--since", "2h", "--json"]) == 0
    bodies = [json.loads(x)["body"] for x in capsys.readouterr().out.splitlines()]
    assert bodies == ["live message one"]
    assert main(["log", "--since", "2019-12-31", "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    for bad in ("yesterday-ish", "9999999w", "2h30"):
        assert main(["log", "--since", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --since") and "Traceback" not in err


def test_log_follow_prints_new_events_as_they_come(offline_home: Home, capsys):
    import threading

    from runtime import cli

    tell(offline_home, "already there")
    told = threading.Event()
    polls_after = []

    def later() -> None:
        tell(offline_home, "arrived while following")
        told.set()

    def stop() -> bool:  # two polls after the second tell was written
        if told.is_set():
            polls_after.append(1)
        return len(polls_after) >= 2
    timer = threading.Timer(0.2, later)
    timer.start()
    real_follow = cli._follow
    try:
        cli._follow = lambda *a, **k: real_follow(*a, stop=stop, **k)
        assert main(["log", "--follow", "--json"]) == 0
    finally:
        cli._follow = real_follow
        timer.join()
    bodies = [json.loads(x)["body"] for x in capsys.readouterr().out.splitlines()]
    assert bodies == ["already there", "arrived while following"]


def test_log_json_with_nothing_to_show_prints_nothing(offline_home: Home, capsys):
    assert main(["log", "--kind", "decision", "--json"]) == 0
    assert capsys.readouterr().out == ""
