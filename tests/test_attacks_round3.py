"""The third round of attacks (issue 38): each case as the issue reproduced it, through the real
CLI. Here: configuration that must be refused (URLs, table spellings, a cron that never fires,
`nan` seconds) and files that are not files (a FIFO or a device where config.toml or the
pidfile should be), which must never hang a command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.home import Home

from .conftest import coworker, write_config


def one_line_error(r, code: int, phrase: str) -> None:  # noqa: ANN001 - CompletedProcess
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and phrase in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


# --- 11. [model] base_url and [semantic] url are checked -----------------------------------

@pytest.mark.parametrize("section, key, value", [
    ("model", "base_url", "http://[::1"),
    ("model", "base_url", "not a url"),
    ("model", "base_url", "ftp://example.com"),
    ("model", "base_url", "http://127.0.0.1:99999"),
    ("semantic", "url", "http://[::1"),
    ("semantic", "url", "not a url"),
])
def test_a_url_that_cannot_be_used_is_a_config_error(offline_home: Home, section, key, value):
    write_config(offline_home.root, **{section: {key: value}})
    one_line_error(coworker("run", "--once"), 2, f"[{section}] {key}")
    doctor = coworker("doctor", "--no-model")
    assert doctor.returncode == 1 and f"[{section}] {key}" in doctor.stdout


def test_a_good_url_still_loads(offline_home: Home):
    write_config(offline_home.root, model={"base_url": "https://llm.example.com:8443/v1"},
                 semantic={"url": "http://[::1]:11434"})
    assert coworker("status").returncode == 3  # not running; the config is fine


# --- 12. a FIFO or a device as config.toml or the pidfile never hangs ----------------------

@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", [("status",), ("stop", "--timeout", "1"), ("doctor",)])
def test_a_fifo_as_config_never_hangs(offline_home: Home, command):
    offline_home.config_path.unlink()
    os.mkfifo(offline_home.config_path)
    r = coworker(*command)
    assert r.returncode in (1, 2, 3) and "Traceback" not in r.stderr
    assert "not a regular file" in r.stderr + r.stdout or command[0] == "stop"


@pytest.mark.timeout(30)
def test_dev_zero_as_config_is_refused_at_once(offline_home: Home):
    offline_home.config_path.unlink()
    offline_home.config_path.symlink_to("/dev/zero")
    one_line_error(coworker("status"), 2, "not a regular file")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", [("status",), ("stop", "--timeout", "1"), ("tell", "hi")])
def test_a_fifo_as_the_pidfile_never_hangs(offline_home: Home, command):
    pidfile: Path = offline_home.pidfile
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(pidfile)
    r = coworker(*command)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "not a regular file" in r.stderr and pidfile.name in r.stderr


# --- 16. one spelling of a table ------------------------------------------------------------

def test_a_table_in_another_case_is_refused(offline_home: Home):
    with open(offline_home.config_path, "a", encoding="utf-8") as f:
        f.write('\n[COWORKER]\ntick_seconds = "abc"\n')
    one_line_error(coworker("status"), 2, "[COWORKER]")
    assert coworker("doctor", "--no-model").returncode == 1


# --- 17. a cron that never fires ------------------------------------------------------------

@pytest.mark.parametrize("cron", ["0 3 31 2 *", "0 3 30 2 *", "0 0 31 4,6,9,11 *"])
def test_a_cron_that_never_fires_is_refused(offline_home: Home, cron):
    write_config(offline_home.root, rituals={"reflect": cron})
    one_line_error(coworker("rituals"), 2, "never fires")


def test_a_rare_cron_is_still_accepted(offline_home: Home):
    write_config(offline_home.root, rituals={"reflect": "0 3 29 2 mon"})  # next in 2044
    assert coworker("rituals").returncode == 0


# --- 18. small: stop --timeout nan ----------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-1"])
def test_stop_timeout_must_be_a_number_of_seconds(offline_home: Home, value):
    one_line_error(coworker("stop", "--timeout", value), 2, "--timeout")


# --- 1. redaction never corrupts ordinary text ---------------------------------------------

AUTHOR_ENV = ('[[mcp.servers]]\nname = "git"\ncommand = "true"\n'
              'env = { GIT_AUTHOR_NAME = "Dana Smith", GIT_AUTH_DEBUG = "1", '
              'GITHUB_TOKEN = "ghp-real-0a1b2c3d" }\n')

TEXTS = ["Dana Smith agreed to own the parser fix",
         "Commit: 155b73f1, Date: 2026-12-05, 1 file changed",
         "token ghp-real-0a1b2c3d leaked"]


def test_a_name_or_a_digit_in_a_secret_looking_env_is_never_redacted(offline_home: Home,
                                                                      caplog):
    """What the running coworker writes (it has loaded the config, so its secrets are known)
    reads back whole beside such a configuration; a real secret is still hidden."""
    import logging

    from runtime.store import Event, Store
    from runtime.store import events as ev

    with open(offline_home.config_path, "a", encoding="utf-8") as f:
        f.write("\n[mcp]\n" + AUTHOR_ENV)
    caplog.set_level(logging.WARNING, logger="runtime.secrecy")
    offline_home.settings()  # what the loop does first: its secrets are registered
    with Store.open(offline_home.db_path) as store:
        ids = [ev.append(store, Event(kind="note", body=t, actor="coworker",
                                      author_kind="agent")) for t in TEXTS]
        bodies = [ev.get(store, i).body for i in ids]
    assert bodies[:2] == TEXTS[:2], "what was written is never silently changed"
    assert bodies[2] == "token [redacted] leaked", "a real secret still is"
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "GIT_AUTH_DEBUG" in warned and "NOT hidden" in warned
    assert "GIT_AUTHOR_NAME" not in warned  # not a secret name at all


def test_the_servers_own_redactor_spares_ordinary_values():
    from runtime.hands.hands import Hands
    from runtime.settings_mcp import McpSection

    section = McpSection.model_validate({"servers": [{
        "name": "git", "command": "true", "secret_env": ["PIN"],
        "env": {"GIT_AUTHOR_NAME": "Dana Smith", "GIT_AUTH_DEBUG": "1", "PIN": "1234",
                "API_KEY": "k-live-55aa77"}}]})
    hands = Hands(section)
    assert hands.redact("Dana Smith, 1 of 1234, key k-live-55aa77") == \
        "Dana Smith, 1 of 1234, key [redacted]"
    assert sorted(section.ordinary_secrets()) == [
        "[[mcp.servers]] 'git' env GIT_AUTH_DEBUG", "[[mcp.servers]] 'git' env PIN"]


@pytest.mark.parametrize("name, secret", [
    ("GIT_AUTHOR_NAME", False), ("KEYBOARD_LAYOUT", False), ("TOKENIZER_PATH", False),
    ("AUTHORS", False), ("API_KEY", True), ("apiKey", True), ("X-Auth-Token", True),
    ("Authorization", True), ("GIT_AUTH_DEBUG", True), ("DB_PASSWORD", True),
    ("OPENAI_APIKEY", True), ("SECRETS", True)])
def test_secret_names_match_whole_words(name, secret):
    from runtime.secrecy import is_secret_name

    assert is_secret_name(name) is secret


@pytest.mark.parametrize("value, secret", [
    ("Dana Smith", False), ("1", False), ("production", False), ("12345678", False),
    ("hunter2", False), ("k-333333", True), ("sk-ant-api03-xyz", True), ("ghp_abcDEF123", True)])
def test_a_value_too_short_or_too_ordinary_is_never_a_secret(value, secret):
    from runtime.secrecy import can_be_secret

    assert can_be_secret(value) is secret


# --- 18. import --skip-bad of a file whose every line is bad -------------------------------

def test_skip_bad_with_every_line_bad_exits_1(offline_home: Home, tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('not json\n{"kind": "message"}\n', encoding="utf-8")
    r = coworker("import", str(bad), "--skip-bad")
    assert r.returncode == 1 and "nothing imported" in r.stderr and "Traceback" not in r.stderr
    good = tmp_path / "good.jsonl"
    good.write_text('not json\n{"ts": "2026-11-30T10:00:00Z", "kind": "message", '
                    '"actor": "dana", "body": "hello"}\n', encoding="utf-8")
    assert coworker("import", str(good), "--skip-bad").returncode == 0


# --- 15. restore checks the snapshot first ---------------------------------------------------

def test_restore_refuses_a_snapshot_that_is_not_utf8(offline_home: Home):
    offline_home.memory_md.write_text("# MEMORY.md\n\n- [m1] Dana owns the parser fix\n",
                                      encoding="utf-8")
    assert coworker("strike", "m1").returncode == 0
    [snap] = sorted(offline_home.snapshots.glob("v*.md"))
    snap.write_bytes(b"- [m1] Dana owns the parser \xff fix\n")  # damaged on disk
    before = offline_home.memory_md.read_bytes()
    kept = len(list(offline_home.snapshots.glob("v*.md")))
    one_line_error(coworker("restore", "1", "--yes"), 2, "cannot be restored")
    assert offline_home.memory_md.read_bytes() == before, "MEMORY.md is unchanged"
    assert len(list(offline_home.snapshots.glob("v*.md"))) == kept, "no snapshot written"
    assert coworker("strike", "m1").returncode == 1  # still a MEMORY.md strike can read


# --- 10. every model call counts and respects the caps, reflect's and doctor's included -----

def _used_today(home: Home) -> int:
    from runtime.store import Store, usage

    with Store.open(home.db_path, readonly=True) as store:
        return usage.today(store).calls


def _spend(home: Home, calls: int) -> None:
    from runtime.store import Store, usage

    with Store.open(home.db_path) as store:
        usage.record_calls(store, "a turn earlier today", calls)


def test_reflect_counts_its_calls_and_stops_at_the_cap(home: Home, api):
    from rituals import reflect as rf

    from .test_reflect import FAITHFUL, parser_history

    write_config(home.root, api.url, model={"daily_calls": 4})
    parser_history(home)
    api.default = FAITHFUL
    report = rf.run(home, home.settings())
    assert len(api.requests) == 4, "it stops at the cap"
    assert _used_today(home) == 4, "and every call it made is counted"
    assert "lessons call failed" in report.promotions  # the one call past the cap: not made


def test_reflect_with_the_cap_reached_makes_no_model_call(home: Home, api):
    from rituals import reflect as rf

    from .test_reflect import FAITHFUL, parser_history

    write_config(home.root, api.url, model={"daily_calls": 3})
    parser_history(home)
    _spend(home, 3)
    api.default = FAITHFUL
    report = rf.run(home, home.settings())
    assert api.requests == [] and report.sealed.get(1), "sealed, extractively, with no call"
    assert _used_today(home) == 3


def test_doctor_counts_its_call_and_never_calls_past_the_cap(home: Home, api):
    api.default = {"type": "message", "role": "assistant", "content": [], "id": "m",
                   "model": "fake-model", "stop_reason": "end_turn", "stop_sequence": None,
                   "usage": {"input_tokens": 1, "output_tokens": 1}}
    write_config(home.root, api.url, model={"daily_calls": 2})
    _spend(home, 0)  # the database exists, with nothing spent
    coworker("doctor")
    assert len(api.requests) == 1 and _used_today(home) == 1
    _spend(home, 1)
    r = coworker("doctor")
    assert len(api.requests) == 1, "the cap is reached: no probe"
    assert "not called" in r.stdout and "daily_calls 2 reached" in r.stdout


# --- 3. redact reaches every copy ------------------------------------------------------------

PLANTED = "sk-live-PLANT9876abcd"


def _nowhere(home: Home, *outputs: str) -> None:
    """The planted secret is in no byte of the home's files and no command output."""
    for path in home.root.rglob("*"):
        if path.is_file():
            assert PLANTED.encode() not in path.read_bytes(), path
    for text in outputs:
        assert PLANTED not in text


def test_redact_reaches_the_promotion_a_remember_queued(offline_home: Home, tmp_path: Path):
    from runtime.loop import Loop
    from runtime.store import Store

    from .conftest import run_tick, tell

    mid = tell(offline_home, f"remember that the deploy key is {PLANTED}")
    run_tick(Loop(offline_home, offline_home.settings()))  # the remember is queued at the gate
    with Store.open(offline_home.db_path, readonly=True) as store:
        assert PLANTED in store.scalar("SELECT text FROM promotions")
    r = coworker("redact", str(mid), "--why", "a key in a message")
    assert r.returncode == 0 and "promotions (1)" in r.stdout
    assert coworker("backup", str(offline_home.root / "later-backup")).returncode == 0
    approve = coworker("promotions", "approve", "1")
    outputs = [approve.stdout + approve.stderr]
    for args in (("promotions", "--all", "--json"), ("log", "-n", "1000", "--json"),
                 ("search", "deploy", "key"), ("status",)):
        outputs.append(coworker(*args).stdout)
    _nowhere(offline_home, *outputs)


def test_redact_reaches_the_ledger_and_the_approval_queue(offline_home: Home):
    from runtime.store import Event, Store, approvals, side_effects
    from runtime.store import events as ev

    args = {"path": "/srv/deploy", "token": PLANTED}
    with Store.open(offline_home.db_path) as store:
        call = ev.append(store, Event(kind="tool_call", body=f"files__write({args})",
                                      actor="coworker", author_kind="agent",
                                      meta={"tool": "files__write", "input": args}))
        side_effects.begin(store, "toolu_1", "files__write", None, args)
        side_effects.finish(store, "toolu_1", True, f"wrote with {PLANTED}", tick_id=None)
        approvals.add(store, tick_id=None, server="files", tool="wipe", name="files__wipe",
                      arguments=args, reason=f"using {PLANTED}", sources=[call],
                      tool_use_id="toolu_2", ttl_s=3600)
    before = coworker("actions", "--all").stdout
    assert PLANTED in before  # the attack: it is printed
    r = coworker("redact", str(call), "--why", "a token in a tool call")
    assert r.returncode == 0 and "side_effects (1)" in r.stdout and "approvals (1)" in r.stdout
    _nowhere(offline_home, coworker("actions", "--all").stdout,
             coworker("actions", "--all", "--json").stdout)
