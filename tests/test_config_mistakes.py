"""Config mistakes the owner makes, through the real `coworker` command and the real loop.

A role file that cannot be read is a config error when the loop starts (one line, exit 2,
before any tick; the owner's message stays pending, untouched). One that goes missing while
the loop runs keeps the last good role text, loudly, once: it is never a failure charged to
the owner's input. A TOML value of the wrong type (true where a number goes, "yes" where
true or false goes) is a config error naming the key, the value and the type; environment
overrides, which are always strings, still work.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from runtime.home import Home
from runtime.loop import Loop, Outcome
from runtime.settings import load
from runtime.store import Store
from runtime.store import events as ev
from runtime.store import inputs as inputs_store

from .conftest import coworker, run_tick, tell, write_config
from .fakeapi import FakeMessagesAPI

ROLE = "You triage parser bugs and nothing else."


def one_error_line(result) -> str:  # noqa: ANN001 - a subprocess.CompletedProcess
    """The single `error: ...` line a config mistake prints, exit 2, no traceback."""
    both = result.stdout + result.stderr
    assert result.returncode == 2, both
    assert "Traceback" not in both, both
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def the_input(home: Home, event_id: int) -> inputs_store.Input:
    with Store.open(home.db_path) as store:
        found = [i for i in inputs_store.pending(store) if i.id == event_id]
        assert inputs_store.status_of(store, event_id) == "pending"
    assert len(found) == 1
    return found[0]


def kinds(home: Home) -> list[str]:
    with Store.open(home.db_path) as store:
        return [e.kind for e in ev.since(store, 0)]


def system_text(body: dict) -> str:
    return "\n".join(block["text"] for block in body["system"])


# --- bug 1: a role file that cannot be read -----------------------------------------------------


def test_run_with_a_missing_role_file_exits_2_before_any_tick(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, coworker={"role": "missing.md"})
    told = coworker("tell", "hi")
    assert told.returncode == 0, told.stderr
    event_id = the_input(home, 1).id

    for _ in range(3):  # three runs once set an owner's message aside as if it were at fault
        line = one_error_line(coworker("run", "--once"))
        assert "[coworker] role" in line and "missing.md" in line, line
        assert "create it" in line and "config.toml" in line, line

    waiting = the_input(home, event_id)
    assert waiting.failures == 0 and waiting.last_error is None
    assert api.requests == []  # no model call
    assert not {"tick", "tick_failed", "tick_end", "input_set_aside"} & set(kinds(home))


@pytest.mark.slow
def test_run_with_a_missing_role_file_in_a_real_process(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, coworker={"role": "missing.md"})
    event_id = tell(home, "hi")
    line = one_error_line(coworker("run", "--once", process=True))
    assert "missing.md" in line, line
    assert the_input(home, event_id).failures == 0


def test_start_with_a_missing_role_file_says_so_and_starts_nothing(home: Home,
                                                                   api: FakeMessagesAPI):
    write_config(home.root, api.url, coworker={"role": "missing.md"})
    line = one_error_line(coworker("start"))
    assert "missing.md" in line and "create it" in line and "config.toml" in line
    assert not home.pidfile.exists(), "no background process was started"


@pytest.mark.parametrize("how", ["deleted", "not UTF-8", "a folder"])
def test_a_role_file_gone_bad_while_running_keeps_the_last_good_role(
        home: Home, api: FakeMessagesAPI, caplog: pytest.LogCaptureFixture, how: str):
    role = home.root / "role.md"
    role.write_text(ROLE, encoding="utf-8")
    write_config(home.root, api.url, coworker={"role": "role.md"})
    loop = Loop(home, home.settings())
    role.unlink()
    if how == "not UTF-8":
        role.write_bytes(b"You triage \xff bugs.\n")
    elif how == "a folder":
        role.mkdir()

    with caplog.at_level(logging.WARNING):
        for n in range(3):
            event_id = tell(home, f"message {n}")
            outcome = run_tick(loop)
            assert outcome.kind == Outcome.NO_ACTION, outcome
            with Store.open(home.db_path) as store:
                assert inputs_store.status_of(store, event_id) == "consumed"
    assert len(api.bodies) == 3
    assert all(ROLE in system_text(body) for body in api.bodies)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors  # once, not once a tick
    assert "[coworker] role" in errors[0] and "role.md" in errors[0], errors[0]
    assert "last good role" in errors[0], errors[0]
    assert kinds(home).count("config_error") == 1
    assert "tick_failed" not in kinds(home) and "input_set_aside" not in kinds(home)

    # fixed: the next turn reads the file again, and says so
    if role.is_dir():
        role.rmdir()
    role.write_text("You now review pull requests.", encoding="utf-8")
    tell(home, "again")
    with caplog.at_level(logging.WARNING):
        assert run_tick(loop).kind == Outcome.NO_ACTION
    assert "You now review pull requests." in system_text(api.bodies[-1])
    assert any("readable again" in r.getMessage() for r in caplog.records)


def test_a_config_edit_naming_a_missing_role_file_keeps_the_last_good_role(
        home: Home, api: FakeMessagesAPI, caplog: pytest.LogCaptureFixture):
    (home.root / "role.md").write_text(ROLE, encoding="utf-8")
    write_config(home.root, api.url, coworker={"role": "role.md"})
    loop = Loop(home, home.settings())
    write_config(home.root, api.url, coworker={"role": "new-role.md"})
    event_id = tell(home, "hi")
    with caplog.at_level(logging.ERROR):
        assert run_tick(loop).kind == Outcome.NO_ACTION
    with Store.open(home.db_path) as store:
        assert inputs_store.status_of(store, event_id) == "consumed"
    assert ROLE in system_text(api.bodies[-1])
    assert any("new-role.md" in r.getMessage() for r in caplog.records)

    (home.root / "new-role.md").write_text("You now review pull requests.", encoding="utf-8")
    tell(home, "again")  # creating the file is enough: config.toml need not be saved again
    assert run_tick(loop).kind == Outcome.NO_ACTION
    assert "You now review pull requests." in system_text(api.bodies[-1])


# --- bug 2: a TOML value of the wrong type ------------------------------------------------------


def write_raw(root: Path, toml: str) -> None:
    (root / "config.toml").write_text('[model]\nprovider = "none"\n\n' + toml, encoding="utf-8")


@pytest.mark.parametrize(("toml", "fragments"), [
    ("[coworker]\ntick_seconds = true\n",
     ["config.toml: [coworker] tick_seconds:", "whole number", "not true or false", "got true"]),
    ("timeout_s = true\n",  # in write_raw's [model]
     ["[model] timeout_s:", "must be a number", "got true"]),
    ('[semantic]\nenabled = "yes"\n',
     ["[semantic] enabled:", "must be true or false", 'got "yes"']),
    ("[mcp]\ndaily_live_calls = false\n",
     ["[mcp] daily_live_calls:", "whole number", "got false"]),
    ('[[rituals.custom]]\nname = "standup"\ncron = "0 9 * * mon-fri"\nprompt = "p"\n'
     'recall = "no"\n',
     ["[rituals] custom.0.recall:", "must be true or false", 'got "no"']),
])
def test_a_toml_value_of_the_wrong_type_is_one_config_error_line(
        offline_home: Home, toml: str, fragments: list[str]):
    write_raw(offline_home.root, toml)
    event_id = tell(offline_home, "hi")
    line = one_error_line(coworker("run", "--once"))
    for fragment in fragments:
        assert fragment in line, line
    assert the_input(offline_home, event_id).failures == 0


def test_a_wrong_type_in_the_secrets_file_names_that_file(offline_home: Home):
    (offline_home.state / "secrets.toml").write_text("[model]\nmax_tokens = true\n",
                                                     encoding="utf-8")
    line = one_error_line(coworker("run", "--once"))
    assert "state/secrets.toml" in line and "[model] max_tokens" in line, line
    assert "whole number" in line, line


def test_values_of_their_own_type_still_load(isolated_home: Path):
    write_raw(isolated_home, "timeout_s = 3\n\n[coworker]\ntick_seconds = 5\n\n"
              "[semantic]\nenabled = true\n")  # timeout_s: in write_raw's [model]
    s = load(isolated_home / "config.toml")
    assert (s.coworker.tick_seconds, s.model.timeout_s, s.semantic.enabled) == (5, 3.0, True)


def test_environment_overrides_arrive_as_strings_and_still_work(
        isolated_home: Path, monkeypatch: pytest.MonkeyPatch):
    write_raw(isolated_home, "[coworker]\ntick_seconds = true\n")  # the variable wins over it
    monkeypatch.setenv("COWORKER_COWORKER__TICK_SECONDS", "5")
    monkeypatch.setenv("COWORKER_SEMANTIC__ENABLED", "true")
    monkeypatch.setenv("COWORKER_MODEL__TIMEOUT_S", "0.25")
    s = load(isolated_home / "config.toml")
    assert s.coworker.tick_seconds == 5 and s.semantic.enabled is True
    assert s.model.timeout_s == 0.25
