"""One bad input never stops it, and no user ever sees a traceback (issue 11).

Targeted cases first: meta that Python's json writes but SQLite's JSON functions refuse
(Infinity, NaN), a stored meta an older version left unreadable, and a MEMORY.md that cannot be
read. Then property-based fuzzing with a fixed seed, through the real code: import lines into a
real store, and config values (and environment values, and raw bytes) through settings.load.

The fuzz tests are bounded to a few seconds each; set ROBUST_FUZZ_EXAMPLES=5000 to run them
much longer by hand.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.cli import main
from runtime.errors import ConfigError, CoworkerError, UsageError
from runtime.home import Home
from runtime.importer import FIELDS, import_file
from runtime.memory import memorymd
from runtime.memory.memorymd import MemoryFile, MemoryFileError
from runtime.settings import Settings, load
from runtime.store import Store
from runtime.store import events as ev

FUZZ_EXAMPLES = int(os.environ.get("ROBUST_FUZZ_EXAMPLES", "0") or 0)


def examples(default: int) -> int:
    return FUZZ_EXAMPLES or default


# --- 1. meta: standard JSON in, never an exception out ---------------------------------------


def test_non_finite_floats_in_meta_never_break_a_later_json_query(tmp_path: Path) -> None:
    """Python's json.dumps writes Infinity and NaN by default; SQLite's json_extract then
    failed with "malformed JSON" for every later query that passed the row."""
    with Store.open(tmp_path / "c.db") as store:
        bad = ev.append(store, ev.Event(kind="note", meta={
            "x": float("inf"), "y": [float("nan"), {"z": -math.inf}], "tool_use_id": "t1"}))
        ev.append(store, ev.Event(kind="note", body="after", meta={"tool_use_id": "t2"}))

        raw = store.scalar("SELECT meta FROM events WHERE id = ?", (bad,))
        json.loads(raw, parse_constant=lambda name: pytest.fail(f"{name} stored in {raw}"))
        assert store.scalar("SELECT COUNT(*) FROM events WHERE json_valid(meta)") == 2
        # the queries the loop makes over events all read the row
        assert ev.by_tool_use(store, "note", "t2").body == "after"
        assert ev.by_tool_use(store, "note", "t1").id == bad
        assert store.scalar("SELECT json_extract(meta, '$.x') FROM events WHERE id = ?",
                            (bad,)) == "Infinity"
        assert ev.get(store, bad).meta == {"x": "Infinity", "y": ["NaN", {"z": "-Infinity"}],
                                           "tool_use_id": "t1"}
        assert [e.id for e in ev.tail(store, 5)] == [bad, bad + 1]


def test_a_stored_meta_that_is_not_json_still_reads(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Rows an older version wrote (bare Infinity, or worse) read back, with one WARNING."""
    with Store.open(tmp_path / "c.db") as store:
        good = ev.append(store, ev.Event(kind="note", body="good", meta={"a": 1}))
        with store.transaction() as db:
            for meta in ("Infinity", '{"a": NaN, "b": -Infinity}', "{not json", "[1, 2]"):
                db.execute("INSERT INTO events(ts, kind, actor, author_kind, body, meta) "
                           "VALUES ('2026-01-01T00:00:00.000Z', 'note', 'x', 'system', 'old', ?)",
                           (meta,))
        with caplog.at_level(logging.WARNING, logger="runtime.store.events"):
            tail = ev.tail(store, 10)
            again = ev.get(store, good + 1)
        by_id = {e.id: e.meta for e in tail}
        assert by_id[good] == {"a": 1}
        assert by_id[good + 1] == {"unreadable_meta": "Infinity"}
        assert by_id[good + 2] == {"a": "NaN", "b": "-Infinity"}  # readable: names kept
        assert by_id[good + 3] == {"unreadable_meta": "{not json"}
        assert by_id[good + 4] == {"unreadable_meta": "[1, 2]"}
        assert again.meta == {"unreadable_meta": "Infinity"} and again.body == "old"
        warnings = [r for r in caplog.records if r.name == "runtime.store.events"]
        assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
        assert len(list(ev.history_after(store, 0))) == 5


def test_read_meta_never_raises() -> None:
    for raw in (None, "", b"\xff\xfe", "nul\x00", 7, "[" * 100_000, '{"a": ' + "1" * 5000 + "}"):
        assert isinstance(ev.read_meta(raw), dict)
    assert ev.read_meta(b'{"a": 1}') == {"a": 1}
    assert len(ev.read_meta("x" * 10_000)["unreadable_meta"]) == 200


# --- 6. a MEMORY.md that cannot be read --------------------------------------------------------


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def test_strike_with_memory_md_a_folder_is_one_line(offline_home: Home,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    offline_home.memory_md.unlink()
    offline_home.memory_md.mkdir()
    assert main(["strike", "m1"]) == 2
    line = _one_error_line(capsys)
    assert "MEMORY.md" in line and "a folder" in line and "move it out" in line


def test_strike_with_memory_md_not_utf8_is_one_line(offline_home: Home,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    offline_home.memory_md.write_bytes(b"# MEMORY\n\n- [m1] caf\xe9 owner\n")
    assert main(["strike", "m1"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("error: MEMORY.md line 3:") and "not valid UTF-8" in line
    assert "as UTF-8" in line  # what to do about it


def test_strike_and_restore_with_memory_md_unreadable_are_one_line(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """chmod 000 (the tests run as root, who reads anything: simulated)."""
    memorymd.snapshot(offline_home.memory_md, offline_home.snapshots, "a first version")
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "MEMORY.md":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    for argv in (["strike", "m1"], ["restore", "1"]):
        assert main(argv) == 2, argv
        line = _one_error_line(capsys)
        assert "MEMORY.md" in line and "permission denied" in line and "chmod" in line
    monkeypatch.undo()
    assert len(memorymd.snapshots(offline_home.snapshots)) == 1  # nothing half-written


def test_memory_file_load_raises_only_its_error(tmp_path: Path) -> None:
    folder = tmp_path / "MEMORY.md"
    folder.mkdir()
    with pytest.raises(MemoryFileError) as caught:
        MemoryFile.load(folder)
    assert isinstance(caught.value, CoworkerError) and caught.value.exit_code == 2
    assert MemoryFile.load(tmp_path / "absent.md").lines == []


def test_the_prompt_reads_memory_md_without_ever_raising(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    path = tmp_path / "MEMORY.md"
    assert memorymd.prompt_text(path) == ""  # absent
    path.write_bytes(b"- [m1] caf\xe9 fine\n")
    assert memorymd.prompt_text(path) == "- [m1] caf\ufffd fine\n"
    path.unlink()
    path.mkdir()
    with caplog.at_level(logging.WARNING, logger="runtime.memory.memorymd"):
        assert memorymd.prompt_text(path) == ""
        assert memorymd.prompt_text(path) == ""
    # each prompt it is missing from says so: a turn without it is never silent
    assert len([r for r in caplog.records if "is a folder" in r.getMessage()]) == 2


# --- 7a. fuzz: import lines into a real store ----------------------------------------------------

JSON_LEAF = (st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70)
             | st.floats() | st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0])
             | st.text(max_size=20)
             | st.sampled_from(["2025-03-01T09:30:00Z", "0001-01-01T00:00:00+05:00",
                                "9999-12-31T23:59:59-12:00", "message", "user", "owner", ""]))
JSON = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
GOOD_FIELD = {
    "ts": st.sampled_from(["2025-03-01T09:30:00Z", "2025-03-01T10:00:00", "2025-03-01T11:30+02:00",
                           "0001-01-01T00:00:00+05:00", "2999-01-01T00:00:00Z", "nope"]),
    "kind": st.sampled_from(["message", "note", "tick", "promise", " ", "x" * 300]),
    "actor": st.sampled_from(["owner", "ci-bot", " "]),
    "author_kind": st.sampled_from(["user", "agent", "tool", "third_party", "system", "unknown",
                                    "robot"]),
    "body": st.text(max_size=40),
    "meta": st.dictionaries(st.text(max_size=8), JSON, max_size=4),
    "id": st.integers(-5, 2**70) | st.text(max_size=6),
    "source_id": st.integers(-5, 5) | st.text(max_size=6),
}
EVENT_LIKE = st.fixed_dictionaries(
    {"ts": GOOD_FIELD["ts"], "kind": GOOD_FIELD["kind"]},
    optional={name: GOOD_FIELD[name] | JSON for name in FIELDS if name not in ("ts", "kind")}
    | {"extra": JSON})
# lines that mostly import: plain values, any meta
PLAUSIBLE = st.fixed_dictionaries(
    {"ts": st.sampled_from(["2025-03-01T09:30:00Z", "2025-03-01T10:00:00"]),
     "kind": st.sampled_from(["message", "note"])},
    optional={"body": st.text(max_size=40), "actor": st.sampled_from(["owner", "ci-bot"]),
              "author_kind": st.sampled_from(["user", "agent", "unknown"]),
              "meta": GOOD_FIELD["meta"], "id": st.integers(0, 2**70) | st.text(min_size=1)})


def _text_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # NaN and Infinity written bare, as Python does


LINE = st.one_of(
    PLAUSIBLE.map(_text_line),
    PLAUSIBLE.map(_text_line),
    EVENT_LIKE.map(_text_line),
    EVENT_LIKE.map(lambda v: json.dumps(v)),  # \uXXXX escapes
    JSON.map(_text_line),
    st.text(max_size=80),
    st.sampled_from(['{"ts": "2025-03-01T09:30:00Z", "kind": "note", "meta": {"a": '
                     + "[" * 5000 + "]" * 5000 + "}}",
                     '{"ts": "2025-03-01T09:30:00Z", "kind": "note", "id": ' + "1" * 4400 + "}",
                     '{"ts": "2025-03-01T09:30:00Z", "kind": "note", "body": "\\ud800"}',
                     '{"ts": "2025-03-01T09:30:00Z", "kind": "note", "meta": {"x": NaN}}']),
).map(lambda s: s.encode("utf-8", "surrogatepass")) | st.binary(max_size=60)


def _lines_of(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for raw in f if raw.strip())


def test_fuzz_import_lines_are_imported_or_one_bad_line(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state" / "coworker.db")
    seen = {"imported": 0, "bad": 0, "skipped": 0}

    @settings(derandomize=True, max_examples=examples(120), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(LINE, min_size=1, max_size=3))
    def run(lines: list[bytes]) -> None:
        path = tmp_path / "fuzz.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        n = _lines_of(path)
        before = ev.total(store)
        try:
            report = import_file(store, path)
        except UsageError as e:  # BadLine is one
            assert len(str(e).splitlines()) == 1, str(e)
            assert ev.total(store) == before, "a refused file wrote something"
            seen["bad"] += 1
        else:
            assert report.imported + report.already_present == n
            assert ev.total(store) == before + report.imported
            seen["imported"] += 1
        report = import_file(store, path, skip_bad=True)
        assert report.imported + report.already_present + len(report.skipped) == n
        for _no, why in report.skipped:
            assert len(why.splitlines()) == 1 and why.strip(), why
        seen["skipped"] += len(report.skipped)
        # whatever went in reads back, and every JSON query over the events still works
        for e in ev.tail(store, 8):
            json.dumps(e.as_dict(), allow_nan=False)
        store.scalar("SELECT COUNT(json_extract(meta, '$.imported')) FROM events")
        store.scalar("SELECT COUNT(*) FROM events WHERE json_extract(meta, '$.x') IS NOT NULL")

    run()
    assert store.scalar("PRAGMA integrity_check") == "ok"
    assert store.scalar("SELECT COUNT(*) FROM events WHERE NOT json_valid(meta)") == 0
    store.close()
    print(f"\nfuzz import: {seen}")
    assert seen["imported"] and seen["bad"], seen  # both sides of the invariant were reached


# --- 7b. fuzz: config values through settings.load -----------------------------------------------


def _toml_str(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_str(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


SECTIONS = {name: list(f.default_factory.model_fields) for name, f in Settings.model_fields.items()
            if isinstance(f.default_factory, type) and hasattr(f.default_factory, "model_fields")}
KEYS = [(s, k) for s, keys in SECTIONS.items() for k in keys]
TOML_LEAF = (st.booleans() | st.integers() | st.integers(-2**70, 2**70) | st.floats()
             | st.text(max_size=30) | st.dates()
             | st.sampled_from([0, 1, -1, 86400, 86401, 604800, 3600, 10**12, 0.5, 1e-300,
                                "0 3 * * sun", "* * * * *", "61 * * * *", "UTC", "Mars/Olympus",
                                "live", "dry-run", "none", "anthropic", "INFO", "role.md",
                                "../../etc/passwd.md", "http://127.0.0.1:1"]))
TOML_VALUE = st.recursive(TOML_LEAF, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                          max_leaves=8)
CUSTOM = st.lists(st.fixed_dictionaries(
    {"name": st.sampled_from(["standup", "a b", "", "reflect"]) | st.text(max_size=5),
     "cron": st.sampled_from(["0 9 * * mon-fri", "x", "* * * * * *"]),
     "prompt": st.text(max_size=5)}, optional={"extra": TOML_LEAF}), max_size=2)


def _plausible(section: str, key: str) -> st.SearchStrategy[Any]:
    """Values of the key's own type, near and past its bounds; then anything at all."""
    field = Settings.model_fields[section].default_factory.model_fields[key]
    kind = field.annotation
    if (section, key) == ("rituals", "custom"):
        return CUSTOM
    if kind is bool:
        own: st.SearchStrategy[Any] = st.booleans()
    elif kind is int:
        own = st.integers(-3, 3) | st.integers(0, 2 * 10**6) | st.sampled_from(
            [field.default, 86400, 86401, 604800, 604801, 10**9, 10**12, 10**12 + 1, 2**63])
    elif kind is float:
        own = st.floats(-1, 5000) | st.floats() | st.just(field.default)
    elif getattr(kind, "__args__", None) and all(isinstance(a, str) for a in kind.__args__):
        own = st.sampled_from(kind.__args__)  # a Literal
    else:
        own = st.just(field.default) if isinstance(field.default, str) else st.text(max_size=9)
    return own | own | TOML_VALUE


@st.composite
def configs(draw: st.DrawFn) -> dict[str, dict[str, Any]]:
    cfg: dict[str, dict[str, Any]] = {}
    for section, key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4)):
        value = draw(_plausible(section, key))
        if value is not None:
            cfg.setdefault(section, {})[key] = value
    if draw(st.integers(0, 4)) == 0:  # the pair the loop schedules with, set together
        ticks = draw(_plausible("coworker", "tick_seconds"))
        cfg.setdefault("coworker", {}).update(tick_seconds=ticks, max_tick_seconds=ticks)
    if draw(st.integers(0, 9)) == 0:  # a misspelt section or key now and then
        cfg.setdefault(draw(st.sampled_from([*SECTIONS, "modle"])), {})[
            draw(st.text(min_size=1, max_size=6))] = draw(TOML_LEAF)
    return cfg


def _render(cfg: dict[str, dict[str, Any]]) -> str:
    lines = []
    for section, values in cfg.items():
        lines.append(f"[{_toml_str(section)}]")
        tables = {}
        for key, value in values.items():
            if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
                tables[key] = value  # [[section.key]], after the section's own keys
            else:
                lines.append(f"{_toml_str(key)} = {_toml_value(value)}")
        for key, value in tables.items():
            for x in value:
                lines.append(f"[[{_toml_str(section)}.{_toml_str(key)}]]")
                lines += [f"{_toml_str(k)} = {_toml_value(v)}" for k, v in x.items()]
    return "\n".join(lines) + "\n"


def _load_or_one_line(path: Path, seen: dict[str, int]) -> None:
    try:
        s = load(path)
    except ConfigError as e:
        msg = str(e)
        assert len(msg.splitlines()) == 1 and msg.strip(), msg
        assert len(msg) < 2000, msg[:300]
        seen["error"] += 1
    else:
        assert isinstance(s, Settings)
        # what the loop and reflect compute from them works (10**12 seconds once passed
        # validation and crashed the loop: "year 33715 is out of range")
        now = datetime.now(UTC)
        for seconds in (s.coworker.tick_seconds, s.coworker.max_tick_seconds,
                        s.model.timeout_s):
            now + timedelta(seconds=seconds)
            time.monotonic() + seconds
        now - timedelta(days=s.memory.archive_after_days)
        seen["ok"] += 1


def _fuzz_config_texts(path: Path, texts: st.SearchStrategy[str], n: int, what: str) -> None:
    """Each text as config.toml: settings or one config error line; both are met."""
    seen = {"ok": 0, "error": 0}

    @settings(derandomize=True, max_examples=examples(n), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(texts)
    def run(text: str) -> None:
        path.write_text(text, encoding="utf-8")
        _load_or_one_line(path, seen)

    run()
    print(f"\nfuzz {what}: {seen}")
    assert seen["ok"] and seen["error"], seen


def test_fuzz_config_values_give_settings_or_one_config_error_line(
        isolated_home: Path) -> None:
    _fuzz_config_texts(isolated_home / "config.toml", configs().map(_render), 150,
                       "config values")


def test_fuzz_config_bytes_and_environment_values(isolated_home: Path) -> None:
    path = isolated_home / "config.toml"
    seen = {"ok": 0, "error": 0}
    env_names = [f"COWORKER_{s.upper()}__{k.upper()}" for s, k in KEYS] + [
        f"COWORKER_{s.upper()}" for s in SECTIONS] + ["COWORKER_MODLE__NAME"]
    env_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                              blacklist_characters="\x00"), max_size=30)

    @settings(derandomize=True, max_examples=examples(120), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.binary(max_size=80) | configs().map(lambda c: _render(c).encode()),
           st.dictionaries(st.sampled_from(env_names),
                           env_text | TOML_LEAF.map(lambda v: json.dumps(v, default=str)),
                           max_size=2))
    def run(raw: bytes, env: dict[str, str]) -> None:
        path.write_bytes(raw)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            _load_or_one_line(path, seen)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    logging.getLogger("runtime.settings").setLevel(logging.ERROR)  # the misspelt variable
    try:
        run()
    finally:
        logging.getLogger("runtime.settings").setLevel(logging.NOTSET)
    print(f"\nfuzz config bytes and environment: {seen}")
    assert seen["ok"] and seen["error"], seen


def test_sqlite_accepts_what_the_store_writes() -> None:
    """The premise of the meta tests: SQLite's json_valid refuses what Python writes bare."""
    db = sqlite3.connect(":memory:")
    assert db.execute("SELECT json_valid(?)", (json.dumps({"x": math.inf}),)).fetchone()[0] == 0
    row = ev.Event(kind="note", meta={"x": math.inf}).to_row()
    assert db.execute("SELECT json_valid(?)", (row[5],)).fetchone()[0] == 1


# [[notify]] and [[hooks]] (issue 40): what users type there, fuzzed like the sections above
NOTIFY = st.fixed_dictionaries(
    {"name": st.sampled_from(["phone", "Phone", "", "a b", "x" * 40]) | st.text(max_size=6),
     "kind": st.sampled_from(["webhook", "command", "email"])},
    optional={"url": st.sampled_from(["http://127.0.0.1:9/h", "https://hooks.slack.com/x",
                                      "secret:NTFY_URL", "ftp://x", ""]) | st.text(max_size=8),
              "preset": st.sampled_from(["slack", "ntfy", "teams"]),
              "command": st.lists(st.text(max_size=5), max_size=2) | TOML_LEAF,
              "events": st.lists(st.sampled_from(["reply", "approval", "bogus"]), max_size=2),
              "timeout_s": TOML_LEAF, "max_per_hour": TOML_LEAF,
              "quiet_hours": st.sampled_from(["22:00-07:00", "25:00-07:00", "night"]),
              "headers": st.dictionaries(st.text(max_size=5), TOML_LEAF, max_size=2),
              "extra": TOML_LEAF})
HOOK = st.fixed_dictionaries(
    {"name": st.sampled_from(["github", "ci", "", "a/b"]),
     "scheme": st.sampled_from(["github", "hmac-sha256", "bearer", "md5"])},
    optional={"secret": st.sampled_from(["GH", "secret:GH", "not a name", ""]) | TOML_LEAF,
              "events": st.lists(st.text(max_size=8), max_size=2) | TOML_LEAF,
              "signature_header": TOML_LEAF})


PLAIN_NOTIFY = st.fixed_dictionaries(  # entries a user writes right, so both outcomes are met
    {"name": st.sampled_from(["phone", "ops"]), "kind": st.just("webhook"),
     "url": st.sampled_from(["http://127.0.0.1:9/h", "secret:NTFY_URL"])},
    optional={"preset": st.sampled_from(["slack", "ntfy", "discord"])})
PLAIN_HOOK = st.fixed_dictionaries({"name": st.sampled_from(["github", "ci"]),
                                    "scheme": st.just("github"), "secret": st.just("GH")})


def _render_lists(notify: list[dict[str, Any]], hooks: list[dict[str, Any]]) -> str:
    lines = []
    for table, entries in (("notify", notify), ("hooks", hooks)):
        for entry in entries:
            lines.append(f"[[{table}]]")
            lines += [f"{_toml_str(k)} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


def test_fuzz_notify_and_hooks_give_settings_or_one_config_error_line(
        isolated_home: Path) -> None:
    _fuzz_config_texts(isolated_home / "config.toml",
                       st.builds(_render_lists, st.lists(PLAIN_NOTIFY | NOTIFY, max_size=2),
                                 st.lists(PLAIN_HOOK | HOOK, max_size=2)),
                       120, "notify and hooks")
