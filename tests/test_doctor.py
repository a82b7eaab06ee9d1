"""`coworker doctor`: a healthy home passes every check; each link broken on purpose fails
exactly its own check, with a line that says what to do, and never a traceback."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rituals import reflect
from runtime import doctor, process
from runtime.home import Home
from runtime.home import private_umask as private_umask_
from runtime.settings import file_hash
from runtime.store import Event, Store, tags
from runtime.store import events as ev

from .conftest import coworker, write_config
from .fakeapi import FakeMessagesAPI, error

NAMES = ["config", "config in use", "folders", "database", "fts", "memory", "rituals", "recall",
         "logging", "permissions", "model", "spending", "semantic", "mcp",  # mcp: one line a server, or one
         "notify"]  # one line a [[notify]] target, or one


@pytest.fixture(autouse=True)
def private_umask():
    """The CLI runs under umask 077 (home.private_umask at its entry); homes built in process
    here get the same, so a healthy home is a private one."""
    old = private_umask_()
    yield
    os.umask(old)


def by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {c.name: c for c in checks}


def failed(checks: list[doctor.Check]) -> list[str]:
    return [c.name for c in checks if not c.ok]


def lived_in(home: Home) -> Home:
    """A home with a history: old events archived, a sealed ladder, tags, a reflect run."""
    start = datetime.now(UTC) - timedelta(days=60)
    with Store.open(home.db_path) as store:
        ev.append_many(store, [
            Event(kind="message", actor="owner", author_kind="user",
                  body=f"parser bug {i}: unicode crash in the tokenizer",
                  ts=(start + timedelta(hours=3 * i)).isoformat().replace("+00:00", "Z"))
            for i in range(150)])
        ev.append(store, Event(kind="note", body="billing is owned by Dana", actor="coworker",
                               author_kind="agent"))
    reflect.run(home, home.settings())
    with Store.open(home.db_path) as store:
        tags.add(store, "event", 3, ["tokenizer-bug"])  # archived by now
        tags.add(store, "event", 151, ["ownership"])    # still hot
        tags.add(store, "rollup", 1, ["parser"])
        assert store.scalar("SELECT COUNT(*) FROM events_archive")
        assert store.scalar("SELECT COUNT(*) FROM rollups")
    return home


def dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# a healthy home -----------------------------------------------------------------------------
def test_a_healthy_home_passes_every_check_and_doctor_changes_nothing(offline_home: Home):
    home = lived_in(offline_home)
    before = dump(home.db_path), home.config_path.read_bytes(), home.memory_md.read_bytes()
    checks = doctor.run_checks(home)
    assert [c.name for c in checks] == NAMES
    assert failed(checks) == [], doctor.render(checks)
    assert doctor.exit_code(checks) == 0
    lines = doctor.render(checks).splitlines()
    assert len(lines) == len(NAMES)
    assert all(line.startswith("ok   ") for line in lines)
    c = by_name(checks)
    assert "not running" in c["config in use"].detail
    assert "last run" in c["rituals"].detail and "next window" in c["rituals"].detail
    assert "inputs are recorded only" in c["model"].detail  # a choice, not a failure
    assert (dump(home.db_path), home.config_path.read_bytes(),
            home.memory_md.read_bytes()) == before


def test_a_fresh_home_without_a_database_is_healthy(bare_home: Home):
    assert not bare_home.db_path.exists()
    checks = doctor.run_checks(bare_home)
    assert failed(checks) == [], doctor.render(checks)
    assert not bare_home.db_path.exists()  # doctor did not create it


def test_probe_model_false_calls_nothing(home: Home, api: FakeMessagesAPI):
    checks = doctor.run_checks(home, probe_model=False)
    assert [c.name for c in checks] == [n for n in NAMES if n != "model"]
    assert api.requests == []


def test_one_crashing_check_never_stops_the_others(offline_home: Home, monkeypatch):
    def boom(home: Home) -> int:
        raise RuntimeError("pidfile exploded")

    monkeypatch.setattr(doctor.process, "running_pid", boom)
    checks = doctor.run_checks(lived_in(offline_home))
    assert [c.name for c in checks] == NAMES
    assert failed(checks) == ["config in use"]
    assert "RuntimeError: pidfile exploded" in by_name(checks)["config in use"].detail
    assert doctor.exit_code(checks) == 1


# config --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, says", [
    ("[coworker\nname = 1\n", "not valid TOML"),
    ("[coworker]\ntick_seconds = 0\n", "[coworker] tick_seconds"),
    ("[logging]\nlevle = \"INFO\"\n", "unknown key [logging] levle"),
])
def test_an_invalid_config_fails_the_config_check_with_its_fix(offline_home: Home, text, says):
    lived_in(offline_home)
    offline_home.config_path.write_text(text, encoding="utf-8")
    checks = doctor.run_checks(offline_home)
    c = by_name(checks)
    assert not c["config"].ok
    assert says in c["config"].detail and "fix" in c["config"].detail
    # What needs the settings says so instead of guessing; the rest is still checked.
    assert set(failed(checks)) == {"config", "rituals", "recall", "logging", "model", "spending",
                                   "semantic", "mcp", "notify"}
    for name in ("rituals", "recall", "logging", "model", "spending", "semantic", "mcp", "notify"):
        assert c[name].detail == doctor.NOT_CHECKED
    assert doctor.exit_code(checks) == 1


def test_a_missing_role_file_fails_the_config_check(offline_home: Home):
    write_config(offline_home.root, coworker={"role": "role.md"})
    checks = doctor.run_checks(offline_home)
    assert failed(checks) == ["config"]  # the settings themselves load: the rest is checked
    c = by_name(checks)["config"]
    assert not c.ok and "role.md" in c.detail and "create it" in c.detail


# the running process ---------------------------------------------------------------------------
def wait_for(pred, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := pred():
            return value
        time.sleep(0.02)
    raise AssertionError(f"condition not met within {timeout} s")


def runfile_hash(home: Home) -> str | None:
    return process.read_runfile(home).get("config_hash")


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_the_running_process_uses_the_config_on_disk(offline_home: Home):
    home = offline_home
    write_config(home.root, coworker={"tick_seconds": 300, "max_tick_seconds": 600})
    r = coworker("start")
    assert r.returncode == 0, r.stderr
    try:
        pid = process.running_pid(home)
        wait_for(lambda: runfile_hash(home) == file_hash(home.config_path))
        c = by_name(doctor.run_checks(home))["config in use"]
        assert c.ok and f"pid {pid}" in c.detail

        # An edit the loop has not applied yet (its next tick is minutes away).
        write_config(home.root, coworker={"tick_seconds": 300, "max_tick_seconds": 900})
        checks = doctor.run_checks(home)
        assert failed(checks) == ["config in use"]
        c = by_name(checks)["config in use"]
        assert f"pid {pid}" in c.detail and "older config.toml" in c.detail
        assert "coworker tell" in c.detail and "coworker stop && coworker start" in c.detail

        # Woken, the loop applies it, and the check agrees again.
        assert coworker("tell", "wake up").returncode == 0
        wait_for(lambda: runfile_hash(home) == file_hash(home.config_path))
        assert by_name(doctor.run_checks(home))["config in use"].ok

        # A bad edit: the loop keeps its last good config, and says so; run.json keeps the
        # applied file's hash, so status and doctor both see the file on disk is not in use.
        home.config_path.write_text("[coworker\n", encoding="utf-8")
        assert coworker("tell", "wake up again").returncode == 0
        wait_for(lambda: "config_error" in coworker("log", "--kind", "config_error").stdout)
        assert runfile_hash(home) != file_hash(home.config_path)
        checks = doctor.run_checks(home)
        c = by_name(checks)["config in use"]
        assert not c.ok and f"pid {pid}" in c.detail
        assert not by_name(checks)["config"].ok
    finally:
        coworker("stop")


# the database ----------------------------------------------------------------------------------
def corrupt(path: Path, how: str) -> None:
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{path}{suffix}").exists()  # every connection closed, WAL folded in
    if how == "an index out of step":  # the table and its index disagree, silently
        conn = raw(path)
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_schema SET sql = 'CREATE INDEX events_ts ON events(kind)' "
                     "WHERE name = 'events_ts'")
        conn.close()
        return
    size = path.stat().st_size
    with path.open("r+b") as f:
        if how == "garbage over page 2":
            f.seek(4096)
            f.write(os.urandom(4096))
        elif how == "truncated to half":
            f.truncate(size // 2)
        else:  # "header overwritten"
            f.write(os.urandom(100))


@pytest.mark.parametrize("how, also_unchecked", [
    ("garbage over page 2", set()),
    ("truncated to half", {"fts", "rituals", "spending"}),
    ("header overwritten", {"fts", "rituals", "spending"}),
])
def test_a_corrupted_database_fails_integrity_with_a_recovery_line(offline_home: Home, how,
                                                                    also_unchecked):
    home = lived_in(offline_home)
    corrupt(home.db_path, how)
    checks = doctor.run_checks(home)
    c = by_name(checks)
    assert set(failed(checks)) == {"database"} | also_unchecked, doctor.render(checks)
    assert "damaged" in c["database"].detail and ".recover" in c["database"].detail
    assert "coworker doctor says more" not in c["database"].detail.replace("`", "")
    for name in also_unchecked:
        assert c[name].detail == doctor.DB_NOT_CHECKED
    assert "Traceback" not in doctor.render(checks)


def test_an_index_out_of_step_with_its_table_fails_and_reindex_fixes_it(offline_home: Home):
    home = lived_in(offline_home)
    corrupt(home.db_path, "an index out of step")
    checks = doctor.run_checks(home)
    assert failed(checks) == ["database"], doctor.render(checks)
    detail = by_name(checks)["database"].detail
    assert "missing from index" in detail and "events_ts" in detail, detail
    assert detail.endswith(" REINDEX"), detail
    conn = raw(home.db_path)  # the line it gives is the fix
    conn.execute("REINDEX")
    conn.close()
    assert failed(doctor.run_checks(home)) == []


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_a_database_deleted_under_a_running_loop_fails(offline_home: Home):
    home = offline_home
    write_config(home.root, coworker={"tick_seconds": 300, "max_tick_seconds": 600})
    assert coworker("start").returncode == 0
    try:
        assert by_name(doctor.run_checks(home))["database"].ok
        home.db_path.unlink()
        c = by_name(doctor.run_checks(home))["database"]
        assert not c.ok and "is gone" in c.detail and "coworker stop && coworker start" in c.detail
    finally:
        coworker("stop")


# the FTS indexes -------------------------------------------------------------------------------
@pytest.mark.parametrize("table, bogus", [
    ("events_fts", "INSERT INTO events_fts(rowid, body, kind, actor, tags) "
                   "VALUES (99999, 'x', 'y', 'z', NULL)"),
    ("events_fts", "INSERT INTO events_fts(events_fts, rowid, body, kind, actor, tags) "
                   "VALUES ('delete', 151, 'wrong', 'values', 'here', NULL)"),
    ("rollups_fts", "INSERT INTO rollups_fts(rowid, title, body, terms, level, vocab, tags) "
                    "VALUES (99999, 'x', 'y', 'z', 1, NULL, NULL)"),
])
def test_fts_out_of_sync_fails_and_its_rebuild_line_fixes_it(offline_home: Home, table, bogus):
    home = lived_in(offline_home)
    conn = raw(home.db_path)
    conn.execute(bogus)
    conn.close()
    checks = doctor.run_checks(home)
    assert failed(checks) == ["fts"], doctor.render(checks)
    detail = by_name(checks)["fts"].detail
    rebuild = f"INSERT INTO {table}({table}) VALUES('rebuild')"
    assert table in detail and rebuild in detail
    assert detail.count("out of sync") == 1  # only the broken index is named
    # The line it gives is the fix.
    conn = raw(home.db_path)
    conn.execute(rebuild)
    conn.close()
    assert failed(doctor.run_checks(home)) == []


# rituals ---------------------------------------------------------------------------------------
def iso(delta: timedelta) -> str:
    return (datetime.now(UTC) - delta).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize("status, age, ok, says", [
    ("running", timedelta(hours=7), False, "never finished"),
    ("running", timedelta(hours=1), True, "running now"),
    ("ok", timedelta(days=20), False, "nobody ran it"),
    ("ok", timedelta(days=2), True, "last run"),
    ("failed", timedelta(days=2), True, "failed"),
    ("registered", timedelta(days=30), False, "never run since it was scheduled"),
    ("registered", timedelta(days=3), True, "never run yet"),
])
def test_reflect_ran_when_it_should_have(offline_home: Home, status, age, ok, says):
    home = offline_home
    with Store.open(home.db_path):
        pass
    conn = raw(home.db_path)
    conn.execute("INSERT INTO ritual_runs(ritual, started_at, status) VALUES ('reflect', ?, ?)",
                 (iso(age), status))
    conn.close()
    checks = doctor.run_checks(home)
    c = by_name(checks)["rituals"]
    assert c.ok is ok, c.detail
    assert says in c.detail
    assert failed(checks) == ([] if ok else ["rituals"])
    if not ok:
        assert "coworker reflect" in c.detail


def test_rituals_in_the_configured_zone_are_listed(offline_home: Home):
    path = write_config(offline_home.root, coworker={"timezone": "Europe/Berlin"})
    with path.open("a", encoding="utf-8") as f:
        f.write('[[rituals.custom]]\nname = "standup"\ncron = "0 9 * * mon-fri"\n'
                'prompt = "standup"\n')
    c = by_name(doctor.run_checks(offline_home))["rituals"]
    assert c.ok and "2 ritual(s) scheduled" in c.detail and "Europe/Berlin" in c.detail


# logging ---------------------------------------------------------------------------------------
def test_logging_at_error_hides_warnings(offline_home: Home):
    write_config(offline_home.root, logging={"level": "ERROR"})
    checks = doctor.run_checks(offline_home)
    assert failed(checks) == ["logging"]
    detail = by_name(checks)["logging"].detail
    assert "ERROR" in detail and 'level = "INFO"' in detail and "[logging]" in detail


def test_logging_level_from_the_environment_names_the_variable(offline_home: Home, monkeypatch):
    monkeypatch.setenv("COWORKER_LOGGING__LEVEL", "ERROR")
    checks = doctor.run_checks(offline_home)
    assert failed(checks) == ["logging"]
    assert "COWORKER_LOGGING__LEVEL" in by_name(checks)["logging"].detail


def test_a_log_file_that_cannot_be_written_fails(offline_home: Home):
    offline_home.log_path.mkdir(parents=True)  # unwritable even for root
    checks = doctor.run_checks(offline_home)
    assert failed(checks) == ["logging"]
    assert "cannot write" in by_name(checks)["logging"].detail


# permissions -----------------------------------------------------------------------------------
def run_fix(line: str) -> None:
    """Run the fix a verdict gives (only chmod commands, joined by && or ,)."""
    import shlex
    import subprocess

    for part in line.replace(", or better", " &&").split("&&"):
        argv = shlex.split(part.strip().rstrip(","))
        assert argv[0] == "chmod", line
        subprocess.run(argv, check=True)


def test_a_key_in_a_config_others_can_read_fails_with_its_fix(offline_home: Home):
    home = offline_home
    assert by_name(doctor.run_checks(home, probe_model=False))["permissions"].ok
    write_config(home.root, model={"api_key": "sk-test-0123456789"})
    os.chmod(home.config_path, 0o644)
    checks = doctor.run_checks(home, probe_model=False)
    assert failed(checks) == ["permissions"], doctor.render(checks)
    c = by_name(checks)["permissions"]
    assert c.detail.startswith("config.toml ") and "holds a key" in c.detail, c.detail
    assert "0644" in c.detail, c.detail
    assert f"chmod 600 {home.config_path}" in c.detail
    assert "state/secrets.toml" in c.detail and "ANTHROPIC_API_KEY" in c.detail
    assert "sk-test-0123456789" not in doctor.render(checks)
    assert doctor.exit_code(checks) == 1
    assert len(doctor.render([c]).splitlines()) == 1
    # group-readable is readable by others too
    os.chmod(home.config_path, 0o640)
    assert failed(doctor.run_checks(home, probe_model=False)) == ["permissions"]
    # the line it gives is the fix
    os.chmod(home.config_path, 0o644)
    run_fix(c.detail.split(": ", 1)[1].split(", or better")[0])
    assert failed(doctor.run_checks(home, probe_model=False)) == []
    # a config without a key may be world-readable (it is tracked in git, after all)
    write_config(home.root)
    os.chmod(home.config_path, 0o644)
    assert by_name(doctor.run_checks(home, probe_model=False))["permissions"].ok


def test_a_secrets_file_others_can_read_fails(offline_home: Home):
    home = offline_home
    home.secrets_path.write_text('[model]\napi_key = "sk-test-0123456789"\n', encoding="utf-8")
    os.chmod(home.secrets_path, 0o644)
    checks = doctor.run_checks(home, probe_model=False)
    assert failed(checks) == ["permissions"], doctor.render(checks)
    detail = by_name(checks)["permissions"].detail
    assert detail.startswith("state/secrets.toml ") and "group/other" in detail, detail
    assert detail.endswith(f"chmod 600 {home.secrets_path}")
    assert "sk-test-0123456789" not in doctor.render(checks)
    run_fix(detail.rsplit(": ", 1)[1])
    assert failed(doctor.run_checks(home, probe_model=False)) == []


def test_loose_modes_elsewhere_warn_and_the_line_fixes_them(offline_home: Home):
    home = lived_in(offline_home)
    (home.state / "coworker.log").write_text("a line\n", encoding="utf-8")
    assert by_name(doctor.run_checks(home, probe_model=False))["permissions"].warn is False
    os.chmod(home.state, 0o755)
    for path in (home.memory_md, home.db_path, home.state / "coworker.log"):
        os.chmod(path, 0o644)
    checks = doctor.run_checks(home, probe_model=False)
    c = by_name(checks)["permissions"]
    assert c.ok and c.warn, c.detail
    assert failed(checks) == [] and doctor.exit_code(checks) == 0  # a warning, not a failure
    line = [ln for ln in doctor.render(checks).splitlines() if "permissions" in ln][0]
    assert line.startswith("WARN permissions: ") and "group/other" in line, line
    for what in ("state/ (0755)", "MEMORY.md (0644)", "state/coworker.db (0644)",
                 "state/coworker.log (0644)"):
        assert what in c.detail
    run_fix(c.detail.rsplit(": ", 1)[1])
    c = by_name(doctor.run_checks(home, probe_model=False))["permissions"]
    assert c.ok and not c.warn, c.detail


# MEMORY.md ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, says", [
    ("- [x7] Dana owns billing.", "looks like an entry but its id is not like [m12]"),
    ("- [m1] Dana owns billing again.", "entry id [m1] is used twice (first on line {first})"),
    ("- [m9] Mara owns the parser. (sources: twelve; 2026-01-02)", "sources must be event ids"),
])
def test_a_malformed_memory_md_line_fails_as_strike_refuses(offline_home: Home, bad, says):
    """`coworker strike` refused a broken MEMORY.md while doctor said all was well."""
    home = offline_home
    good = home.memory_md.read_text(encoding="utf-8")  # the header: 4 lines, then a blank
    home.memory_md.write_text(good + "- [m1] Dana owns the parser.\n\nSome prose.\n" + bad + "\n",
                              encoding="utf-8")
    first = len(good.splitlines()) + 1  # where [m1] is
    line, says = first + 3, says.format(first=first)
    strike = coworker("strike", "Dana")
    assert strike.returncode == 2 and f"MEMORY.md line {line}: " in strike.stderr, strike.stderr
    checks = doctor.run_checks(home, probe_model=False)
    assert failed(checks) == ["memory"], doctor.render(checks)
    c = by_name(checks)["memory"]
    assert c.detail.startswith(f"MEMORY.md line {line}: ") and says in c.detail, c.detail
    assert "coworker strike" in c.detail  # what refuses until it is fixed
    r = coworker("doctor", "--no-model")
    fails = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL")]
    assert r.returncode == 1 and fails == [f"FAIL memory: {c.detail}"], r.stdout
    home.memory_md.write_text(good + "- [m1] Dana owns the parser.\n", encoding="utf-8")
    c = by_name(doctor.run_checks(home, probe_model=False))["memory"]
    assert c.ok and not c.warn and "1 entry" in c.detail, c.detail


def test_memory_md_that_is_not_utf8_fails_with_its_line(offline_home: Home):
    offline_home.memory_md.write_bytes(b"# MEMORY\n\n- [m1] caf\xe9\n")
    c = by_name(doctor.run_checks(offline_home, probe_model=False))["memory"]
    assert not c.ok and c.detail.startswith("MEMORY.md line 3: "), c.detail
    assert "not valid UTF-8" in c.detail, c.detail


# recall ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["off", "dry-run"])
def test_recall_off_or_dry_run_warns_naming_the_setting(offline_home: Home, mode):
    write_config(offline_home.root, recall={"mode": mode})
    checks = doctor.run_checks(offline_home, probe_model=False)
    c = by_name(checks)["recall"]
    assert c.ok and c.warn, c.detail
    assert f'[recall] mode = "{mode}"' in c.detail and 'mode = "on"' in c.detail
    assert failed(checks) == [] and doctor.exit_code(checks) == 0
    r = coworker("doctor", "--no-model")
    assert r.returncode == 0, r.stdout + r.stderr
    warns = [ln for ln in r.stdout.splitlines() if ln.startswith("WARN")]
    assert len(warns) == 1 and warns[0].startswith(f'WARN recall: [recall] mode = "{mode}"')


def test_recall_from_the_environment_names_the_variable(offline_home: Home, monkeypatch):
    monkeypatch.setenv("COWORKER_RECALL__MODE", "off")
    c = by_name(doctor.run_checks(offline_home, probe_model=False))["recall"]
    assert c.ok and c.warn and "COWORKER_RECALL__MODE" in c.detail, c.detail


def test_recall_on_is_ok(offline_home: Home):
    c = by_name(doctor.run_checks(offline_home, probe_model=False))["recall"]
    assert c.ok and not c.warn and c.detail.startswith("on"), c.detail


# the spending cap -------------------------------------------------------------------------------
def spend(home: Home, calls: int, tokens: int, when: datetime | None = None) -> None:
    ts = (when or datetime.now(UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    with Store.open(home.db_path) as store:
        ev.append(store, Event(kind="model_response", body="ok", actor="coworker",
                               author_kind="agent", ts=ts,
                               meta={"attempts": calls, "usage": {
                                   "input_tokens": tokens - tokens // 4,
                                   "output_tokens": tokens // 4}}))


def test_spending_shows_today_against_the_caps(offline_home: Home):
    home = offline_home
    c = by_name(doctor.run_checks(home, probe_model=False))["spending"]
    assert c.ok and not c.warn and "0 calls" in c.detail and "no cap" in c.detail, c.detail
    spend(home, 3, 1200)
    spend(home, 50, 900_000, when=datetime.now(UTC) - timedelta(days=2))  # not today
    c = by_name(doctor.run_checks(home, probe_model=False))["spending"]
    assert c.ok and not c.warn, c.detail
    assert "3 calls" in c.detail and "1,200 tokens" in c.detail and "no cap" in c.detail
    write_config(home.root, model={"daily_calls": 10, "daily_tokens": 5000})
    c = by_name(doctor.run_checks(home, probe_model=False))["spending"]
    assert c.ok and not c.warn, c.detail
    assert "3 of 10 calls" in c.detail and "1,200 of 5,000 tokens" in c.detail


@pytest.mark.parametrize("caps, names", [
    ({"daily_tokens": 1000}, "[model] daily_tokens"),
    ({"daily_calls": 3}, "[model] daily_calls"),
])
def test_a_spending_cap_reached_warns_naming_it(offline_home: Home, caps, names):
    write_config(offline_home.root, model=caps)
    spend(offline_home, 3, 1200)
    checks = doctor.run_checks(offline_home, probe_model=False)
    c = by_name(checks)["spending"]
    assert c.ok and c.warn, c.detail
    assert names in c.detail and "reached" in c.detail and "00:00 UTC" in c.detail
    assert failed(checks) == [] and doctor.exit_code(checks) == 0
    r = coworker("doctor", "--no-model")
    assert r.returncode == 0 and "WARN spending: " in r.stdout, r.stdout


# the model -------------------------------------------------------------------------------------
def test_a_healthy_endpoint_answers_the_probe(home: Home, api: FakeMessagesAPI):
    checks = doctor.run_checks(home)
    assert failed(checks) == [], doctor.render(checks)
    assert doctor.exit_code(checks) == 0
    assert "answered" in by_name(checks)["model"].detail
    assert len(api.requests) == 1
    body = api.bodies[0]
    assert body["messages"] == [{"role": "user", "content": "ping"}]
    assert body["max_tokens"] == 1024 and body["model"] == "fake-model"


def test_an_endpoint_answering_500_fails_once_without_retries(home: Home, api: FakeMessagesAPI):
    api.enqueue(error(500))
    checks = doctor.run_checks(home)
    assert failed(checks) == ["model"]
    detail = by_name(checks)["model"].detail
    assert "HTTP 500" in detail and "fake-model" in detail and api.url in detail
    assert len(api.requests) == 1  # config says max_retries 3; the probe asks once
    assert doctor.exit_code(checks) == 1


def test_an_endpoint_that_is_down_says_to_check_base_url(offline_home: Home):
    write_config(offline_home.root, "http://127.0.0.1:9")
    t0 = time.monotonic()
    c = by_name(doctor.run_checks(offline_home))["model"]
    assert not c.ok and "base_url" in c.detail
    assert time.monotonic() - t0 < 10


def test_an_api_key_refused_says_where_to_set_it(home: Home, api: FakeMessagesAPI):
    api.enqueue(error(401, "authentication_error"))
    c = by_name(doctor.run_checks(home))["model"]
    assert not c.ok and "ANTHROPIC_API_KEY" in c.detail


# the command -----------------------------------------------------------------------------------
def test_cli_doctor_on_a_healthy_home_exits_0(offline_home: Home):
    lived_in(offline_home)
    r = coworker("doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [f"ok   {n}" for n in NAMES]


def test_cli_doctor_reports_every_failure_and_exits_1(offline_home: Home):
    lived_in(offline_home)
    write_config(offline_home.root, logging={"level": "ERROR"})
    r = coworker("doctor")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(NAMES)
    assert [line for line in lines if line.startswith("FAIL")] == [
        line for line in lines if line.startswith("FAIL logging: ")]
    assert any(line.startswith("FAIL logging: ") for line in lines)


def test_cli_doctor_with_a_broken_config_still_checks_the_rest(offline_home: Home):
    lived_in(offline_home)
    offline_home.config_path.write_text("[coworker\n", encoding="utf-8")
    r = coworker("doctor")
    assert r.returncode == 1, r.stdout + r.stderr  # a verdict, not a usage error (2)
    assert "Traceback" not in r.stdout + r.stderr
    fails = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL config: ")]
    assert len(fails) == 1 and fails[0].startswith("FAIL config: config.toml"), r.stdout
    assert "not valid TOML" in fails[0] and "line 1" in fails[0], fails
    assert "ok   database: " in r.stdout and "ok   fts: " in r.stdout


def test_the_semantic_channel_when_on_must_embed(offline_home: Home):
    from .fakeapi import FakeMessagesAPI

    dead = FakeMessagesAPI().start()
    url = dead.url
    dead.stop()
    write_config(offline_home.root, semantic={"enabled": True, "provider": "http", "url": url})
    checks = doctor.run_checks(offline_home, probe_model=False)
    assert failed(checks) == ["semantic"]
    c = by_name(checks)["semantic"]
    assert "does not embed" in c.detail and "enabled = false" in c.detail
    write_config(offline_home.root)
    assert by_name(doctor.run_checks(offline_home, probe_model=False))["semantic"].detail == "off"


def test_a_semantic_model_the_calibration_was_not_fitted_for_is_a_warning(offline_home: Home):
    """The walk's semantic confidence is fitted for all-MiniLM-L6-v2 and all-mpnet-base-v2:
    another model embeds fine, and doctor says how to refit it."""
    from .test_semantic import EmbedServer

    server = EmbedServer().start()
    try:
        for model, warned in (("all-minilm", False), ("all-mpnet-base-v2", False),
                              ("nomic-embed-text", True)):
            write_config(offline_home.root, semantic={"enabled": True, "provider": "http",
                                                      "url": server.url, "model": model})
            c = by_name(doctor.run_checks(offline_home, probe_model=False))["semantic"]
            assert c.ok and "embeds" in c.detail, c.detail
            assert c.warn is warned and ("--calibrate" in c.detail) is warned, c.detail
    finally:
        server.stop()


def test_the_semantic_channel_on_with_no_vectors_yet_is_a_warning(offline_home: Home):
    """Turned on over an existing history, the channel embeds but finds nothing by meaning
    until a backfill: doctor said "ok"; it says so, with the command."""
    from runtime.memory import embed as em

    from .test_semantic import EmbedServer, seed

    server = EmbedServer().start()
    try:
        seed(offline_home, ["The parser crashed on unicode input.", "Billing export done."])
        write_config(offline_home.root, semantic={"enabled": True, "provider": "http",
                                                  "url": server.url})
        c = by_name(doctor.run_checks(offline_home, probe_model=False))["semantic"]
        assert c.ok and c.warn and "no event has" in c.detail, c.detail
        assert "coworker embed --backfill" in c.detail
        with Store.open(offline_home.db_path) as store:
            em.backfill(store, em.make_embedder(offline_home.settings().semantic))
        c = by_name(doctor.run_checks(offline_home, probe_model=False))["semantic"]
        assert c.ok and not c.warn and "embeds" in c.detail, c.detail
    finally:
        server.stop()


# MCP servers: one check a configured server ----------------------------------------------------
def _mcp_servers(home: Home, *tables: str) -> None:
    text = home.config_path.read_text(encoding="utf-8")
    home.config_path.write_text(text + "".join(f"\n[[mcp.servers]]\n{t}\n" for t in tables),
                                encoding="utf-8")


def _faulty(name: str, *flags: str, extra: str = "") -> str:
    import json
    import sys

    from .conftest import REPO

    args = [str(REPO / "tests" / "mcp_servers" / "faulty.py"), *flags]
    return (f'name = "{name}"\ncommand = {json.dumps(sys.executable)}\n'
            f"args = {json.dumps(args)}\n{extra}")


def test_no_mcp_server_is_one_ok_line(offline_home: Home):
    checks = [c for c in doctor.run_checks(offline_home, probe_model=False) if c.name == "mcp"]
    assert [(c.ok, c.warn) for c in checks] == [(True, False)], checks
    assert "no MCP servers" in checks[0].detail and "\n" not in checks[0].detail, checks


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_each_mcp_server_is_a_check_and_one_that_cannot_start_fails(offline_home: Home):
    _mcp_servers(offline_home, _faulty("faulty", extra='approve = ["write_file"]\n'),
                 'name = "ghost"\ncommand = "/nonexistent/bin/mcp-ghost"\n')
    r = coworker("doctor", "--no-model")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if " mcp: " in line]
    assert lines[0].startswith("ok   mcp: faulty: "), lines  # tools, read-only, side effects,
    assert re.findall(r"\d+", lines[0]) == ["8", "6", "0", "2"], lines  # wait for approval
    assert lines[1].startswith("FAIL mcp: ghost: ") and "FileNotFoundError" in lines[1], lines
    assert "[[mcp.servers]]" in lines[1] and "coworker mcp-tools" in lines[1]
    assert len(lines) == 2 and "Traceback" not in r.stdout + r.stderr
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL")] == [lines[1]]


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_doctor_never_shows_an_mcp_servers_secret(offline_home: Home):
    secret = "s3cr3t-doctor-mcp-value"
    env = (f'env = {{ PLAIN_VAR = "{secret}", FAULTY_ECHO_ENV = "PLAIN_VAR" }}\n'
           'secret_env = ["PLAIN_VAR"]\n')
    _mcp_servers(offline_home, _faulty("leaky", "--crash-on-start", extra=env))
    r = coworker("doctor", "--no-model")
    assert r.returncode == 1
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("FAIL mcp: leaky"))
    assert "[redacted]" in line  # its stderr echoed the value back, and it was caught
    assert secret not in r.stdout + r.stderr


# --- issue 38, item 14: what other commands refuse, doctor sees -----------------------------

@pytest.mark.parametrize("where, how", [
    ("inbox/done", "file"), ("outbox", "file"), ("snapshots", "dangling link"),
])
def test_a_file_or_a_dangling_link_where_a_folder_must_be_fails(offline_home: Home, where, how):
    path = offline_home.state / where
    path.rmdir()
    if how == "file":
        path.write_text("not a folder\n")
    else:
        path.symlink_to(offline_home.root / "nowhere")
    refused = coworker("status")
    assert refused.returncode != 0  # the command the owner would run next refuses
    r = coworker("doctor", "--no-model")
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL folders:")]
    assert str(path) in line and ("is a file" if how == "file" else "does not exist") in line


def test_a_dropped_table_fails_the_database_check(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        store.conn.execute("DROP TABLE pins")
    assert coworker("pins").returncode != 0  # the command that needs it refuses
    checks = by_name(doctor.run_checks(offline_home, probe_model=False))
    assert not checks["database"].ok and "table pins" in checks["database"].detail
    assert checks["folders"].ok


def test_a_healthy_database_holds_everything_its_migrations_made(offline_home: Home):
    with Store.open(offline_home.db_path):
        pass
    assert by_name(doctor.run_checks(offline_home, probe_model=False))["database"].ok
