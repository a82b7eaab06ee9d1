"""The CLI: every command documented with an example, in --help and in the README; init; log."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import pytest

from runtime.cli import cli

from .conftest import REPO, coworker, coworker_process, write_config

COMMANDS = sorted(cli.commands)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_is_in_the_readme(name):
    readme = (REPO / "README.md").read_text()
    assert f"coworker {name}" in readme, f"README.md does not mention `coworker {name}`"


def test_init_creates_a_home_and_is_idempotent(isolated_home: Path):
    r = coworker("init")
    assert r.returncode == 0, r.stderr
    assert (isolated_home / "config.toml").exists() and (isolated_home / "MEMORY.md").exists()
    assert (isolated_home / "state" / "coworker.db").exists()
    (isolated_home / "MEMORY.md").write_text("# mine\n")
    again = coworker("init")
    assert again.returncode == 0 and "nothing changed" in again.stdout
    assert (isolated_home / "MEMORY.md").read_text() == "# mine\n"


def test_init_off_the_path_names_this_clones_script(isolated_home: Path):
    """Off the PATH, init says how to link the command, with this clone's own script (it once
    printed a literal /path/to/clone/coworker), quoted for the shell."""
    import shlex

    r = coworker("init", env={**os.environ, "PATH": str(isolated_home)})  # no coworker on it
    assert r.returncode == 0, r.stderr
    assert f"ln -s {shlex.quote(str(REPO / 'coworker'))} ~/.local/bin/coworker" in r.stdout, \
        r.stdout


def test_commands_outside_a_home_say_run_init(isolated_home: Path):
    for args in (["status"], ["tell", "hi"], ["log"], ["run", "--once"]):
        r = coworker(*args)
        assert r.returncode == 2, args
        assert r.stderr.startswith("error:") and "coworker init" in r.stderr
        assert "Traceback" not in r.stderr


def test_tell_log_and_search_offline(offline_home):
    assert coworker("tell", "the", "parser", "crashes", "on", "emoji").returncode == 0
    r = coworker("tell", "   ")
    assert r.returncode == 2 and "nothing to tell" in r.stderr
    rows = [json.loads(line) for line in coworker("log", "--json").stdout.splitlines()]
    assert rows[-1]["body"] == "the parser crashes on emoji"
    assert rows[-1]["author_kind"] == "user" and rows[-1]["actor"] == "owner"
    found = coworker("search", "emoji", "--json")
    assert json.loads(found.stdout.splitlines()[0])["id"] == rows[-1]["id"]
    assert coworker("search", "nonexistentword").returncode == 1
    assert "message" in coworker("log", "--kind", "message").stdout


def test_unknown_command_and_bad_option_are_usage_errors(offline_home):
    r = coworker("fly")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = coworker("log", "-n", "zero")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_the_systemd_unit_runs_the_foreground_loop_and_stops_it_cleanly():
    import configparser

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # keys are case-sensitive in systemd units
    unit.read(REPO / "contrib" / "systemd" / "coworker.service")
    service = unit["Service"]
    assert service["ExecStart"].endswith("/coworker run")
    assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "on-failure"
    assert "COWORKER_HOME=" in service["Environment"]
    assert unit["Install"]["WantedBy"] == "default.target"
    # issue 37, item 5: it says which mode it runs and how to choose; nothing that does nothing
    text = (REPO / "contrib" / "systemd" / "coworker.service").read_text()
    assert "--live" not in service["ExecStart"] and '[writes]' in text and 'mode = "live"' in text
    assert "network-online" not in text and "in this file" not in text


def test_log_file_rotates_and_json_lines_parse(isolated_home):
    import logging

    from runtime import logs
    from runtime.home import Home

    home = Home.locate(isolated_home)
    home.init()
    root = logging.getLogger()
    level = root.level
    logs.setup(home, "INFO", "json", stderr=False)
    try:
        handler, = [h for h in root.handlers if isinstance(h, logs.PrivateRotatingFileHandler)]
        handler.maxBytes = 2000  # rotate soon, to see it happen
        for i in range(100):
            logging.getLogger("test").info("line %d %s", i, "x" * 40)
    finally:
        logs.teardown()
        root.setLevel(level)
    rotated = sorted(p.name for p in home.state.glob("coworker.log*"))
    assert rotated[:2] == ["coworker.log", "coworker.log.1"] and len(rotated) <= 4
    last = (home.state / "coworker.log.1").read_text().splitlines()[-1]
    assert json.loads(last)["msg"].startswith("line ")


# the tests' in-process `coworker(...)` ---------------------------------------------------------
@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_in_process_runs_give_what_the_real_command_gives(offline_home):
    for args in (["fly"], ["status"]):
        inproc, real = coworker(*args), coworker_process(*args)
        assert (inproc.returncode, inproc.stdout, inproc.stderr) == (
            real.returncode, real.stdout, real.stderr), args
    message = "from standard input: Zürich\r\nline two\n"
    assert coworker("tell", "-", input=message).returncode == 0
    assert coworker_process("tell", "-", input=message).returncode == 0
    rows = [json.loads(line) for line in coworker("log", "--json", "--kind", "message").stdout
            .splitlines()]
    assert [r["body"] for r in rows] == ["from standard input: Zürich\r\nline two"] * 2


def test_an_in_process_run_leaves_the_test_process_as_it_was(offline_home, tmp_path):
    write_config(offline_home.root, logging={"level": "DEBUG"})
    from runtime import secrecy

    def state() -> tuple:
        root = logging.getLogger()
        return (list(root.handlers), root.level, logging.getLogger("httpx").level,
                {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM,
                                                   signal.SIGUSR1)},
                os.getcwd(), dict(os.environ), set(secrecy._SECRETS), os.umask(os.umask(0o22)))

    before = state()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, COWORKER_HOME=str(offline_home.root), ANTHROPIC_API_KEY="sk-abcdef-1")
    r = coworker("run", "--once", cwd=elsewhere, env=env)
    assert r.returncode == 0, r.stderr
    assert "coworker started" in r.stderr  # the run's log lines went to its own stderr
    assert state() == before


def test_logs_setup_twice_keeps_one_set_and_teardown_removes_only_its_own(isolated_home):
    from runtime import logs
    from runtime.home import Home

    home = Home.locate(isolated_home)
    home.init()
    root = logging.getLogger()
    level, other = root.level, logging.NullHandler()
    try:
        logs.setup(home, "INFO", "text")
        logs.setup(home, "INFO", "json")
        ours = [h for h in root.handlers if isinstance(h, logs.PrivateRotatingFileHandler)]
        assert len(ours) == 1 and len(root.handlers) == 2  # the file and stderr, once each
        root.addHandler(other)
        logs.teardown()
        assert root.handlers == [other]
    finally:
        root.removeHandler(other)
        root.setLevel(level)
