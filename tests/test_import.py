"""`coworker import FILE`: historical events, one JSON object a line, in one transaction.

The first part runs the real CLI (in-process, as tests/conftest.py's `coworker` does) and
reads the real database afterwards; the part on "nothing old is replayed" (idempotent
re-import, refused loop-state kinds, timestamps read in the home's time zone, tail by time,
episodes of their own) calls the importer, the store and the CLI in process.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runtime.cli import main
from runtime.errors import UsageError
from runtime.home import Home
from runtime.importer import BadLine, ImportReport, import_file
from runtime.memory import ladder
from runtime.memory.search import search
from runtime.store import Store, archive
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.store.events import LOOP_STATE_KINDS

from .conftest import coworker, write_config


def jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def all_events(home: Home) -> list[ev.Event]:
    """Every event, hot and archived, in id order."""
    with Store.open(home.db_path) as store:
        return list(ev.history_after(store, 0))


def event_count(home: Home) -> int:
    with Store.open(home.db_path) as store:
        return ev.total(store)


GOOD = [
    {"ts": "2025-03-01T09:30:00Z", "kind": "message", "actor": "owner", "author_kind": "user",
     "body": "Please look at the flaky quokka deploy", "meta": {"channel": "chat"}},
    {"ts": "2025-03-01T11:30:00+02:00", "kind": "note", "actor": "coworker",
     "body": "Noted the quokka deploy; it fails on Tuesdays"},
    {"ts": "2025-03-01T09:45:00.123456Z", "kind": "tool_result", "author_kind": "tool",
     "body": "deploy log: 3 retries"},
    {"ts": "2025-03-01T10:00:00", "kind": "message", "author_kind": "third_party",
     "actor": "ci-bot", "body": "build 812 green", "meta": None},
]


# --- the good path ----------------------------------------------------------------------


def test_a_good_file_imports_every_line_in_order_keeping_timestamps(offline_home: Home,
                                                                    tmp_path: Path):
    path = jsonl(tmp_path / "history.jsonl", GOOD)
    r = coworker("import", str(path))
    assert r.returncode == 0, r.stderr
    assert "imported 4 events (ids 1-4)" in r.stdout, r.stdout
    assert re.search(r" in [0-9.]+ s \([0-9,]+/s\)", r.stdout), r.stdout  # how long, how fast
    assert "Traceback" not in r.stderr

    events = all_events(offline_home)
    assert [e.body for e in events] == [g["body"] for g in GOOD]
    assert [e.id for e in events] == [1, 2, 3, 4]
    assert [e.ts for e in events] == [
        "2025-03-01T09:30:00.000Z",
        "2025-03-01T09:30:00.000Z",  # +02:00 converted to UTC
        "2025-03-01T09:45:00.123Z",  # microseconds cut to milliseconds
        "2025-03-01T10:00:00.000Z",  # no offset: taken as UTC
    ]
    assert [e.kind for e in events] == ["message", "note", "tool_result", "message"]
    assert [e.author_kind for e in events] == ["user", "unknown", "tool", "third_party"]
    assert [e.actor for e in events] == ["owner", "coworker", "unknown", "ci-bot"]
    batch = events[0].meta["import_batch"]
    assert batch and all(e.meta["import_batch"] == batch for e in events)
    assert events[0].meta == {"channel": "chat", "imported": True, "import_batch": batch}
    assert all(e.meta.get("imported") is True for e in events)
    assert events[3].meta == {"imported": True, "import_batch": batch}


def test_imported_events_are_searchable(offline_home: Home, tmp_path: Path):
    assert coworker("import", str(jsonl(tmp_path / "h.jsonl", GOOD))).returncode == 0
    with Store.open(offline_home.db_path) as store:
        hits = search(store, "quokka")
    assert sorted(h.id for h in hits if h.kind == "event") == [1, 2]
    found = coworker("search", "tuesdays", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout.splitlines()[0])["id"] == 2


def test_a_second_import_appends_after_existing_events(offline_home: Home, tmp_path: Path):
    assert coworker("tell", "hello there").returncode == 0
    r = coworker("import", str(jsonl(tmp_path / "h.jsonl", GOOD[:2])))
    assert r.returncode == 0, r.stderr
    assert "imported 2 events (ids 2-3)" in r.stdout
    assert [e.body for e in all_events(offline_home)] == [
        "hello there", GOOD[0]["body"], GOOD[1]["body"]]


# --- bad lines: nothing imported ----------------------------------------------------------

OK = {"ts": "2025-03-01T09:30:00Z", "kind": "message", "body": "fine"}

BAD_LINES = {
    # case: (line text, words the error must name)
    "invalid JSON": ('{"ts": "2025-03-01T09:30:00Z", "kind": "message",', ["JSON"]),
    "not an object": ('["2025-03-01T09:30:00Z", "message"]', ["JSON object"]),
    "missing ts": (json.dumps({"kind": "message", "body": "x"}), ["'ts'"]),
    "ts not a string": (json.dumps({**OK, "ts": 1740821400}), ["'ts'"]),
    "unparsable ts": (json.dumps({**OK, "ts": "last tuesday"}), ["'ts'", "last tuesday"]),
    "impossible ts": (json.dumps({**OK, "ts": "2025-13-45T09:30:00Z"}), ["'ts'"]),
    "missing kind": (json.dumps({"ts": OK["ts"], "body": "x"}), ["'kind'"]),
    "empty kind": (json.dumps({**OK, "kind": "  "}), ["'kind'"]),
    "bad author_kind": (json.dumps({**OK, "author_kind": "robot"}), ["'author_kind'", "robot"]),
    "body not a string": (json.dumps({**OK, "body": {"text": "x"}}), ["'body'"]),
    "meta not an object": (json.dumps({**OK, "meta": "channel=chat"}), ["'meta'"]),
    "meta a list": (json.dumps({**OK, "meta": ["chat"]}), ["'meta'"]),
    "meta an empty list": (json.dumps({**OK, "meta": []}), ["'meta'"]),
    "actor not a string": (json.dumps({**OK, "actor": 7}), ["'actor'"]),
    "unknown field": (json.dumps({**OK, "channel": "chat"}), ["unknown field", "'channel'"]),
}


def write_with_bad(path: Path, good_before: int, bad: str | bytes, good_after: int = 1) -> int:
    """good lines, a blank line, the bad line, more good lines; return the bad line's number."""
    lines = [json.dumps({**OK, "body": f"line {i}"}).encode() for i in range(good_before)]
    lines.append(b"")  # blank lines are skipped but still counted
    lines.append(bad if isinstance(bad, bytes) else bad.encode())
    lines += [json.dumps({**OK, "body": f"after {i}"}).encode() for i in range(good_after)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return good_before + 2


def assert_one_line_error(r, line_no: int, names: list[str]) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error:"), lines[0]
    assert f"line {line_no}:" in lines[0], lines[0]
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert "--skip-bad" in lines[0]
    assert "imported" not in r.stdout


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_each_kind_of_bad_line_names_line_and_field_and_imports_nothing(
        case: str, offline_home: Home, tmp_path: Path):
    with Store.open(offline_home.db_path) as store:
        ev.append(store, ev.Event(kind="message", body="already here", actor="owner",
                                  author_kind="user"))
    before = event_count(offline_home)
    assert before == 1
    text, names = BAD_LINES[case]
    path = tmp_path / "bad.jsonl"
    line_no = write_with_bad(path, 3, text)
    r = coworker("import", str(path))
    assert_one_line_error(r, line_no, names)
    assert event_count(offline_home) == before


def test_invalid_utf8_names_the_line_and_imports_nothing(offline_home: Home, tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    bad = b'{"ts": "2025-03-01T09:30:00Z", "kind": "message", "body": "caf\xe9 \xff"}'
    line_no = write_with_bad(path, 2, bad)
    r = coworker("import", str(path))
    assert_one_line_error(r, line_no, ["UTF-8"])
    assert event_count(offline_home) == 0


def test_a_bad_last_line_after_many_batches_rolls_everything_back(offline_home: Home,
                                                                   tmp_path: Path):
    # More lines than the importer's batch size, so earlier batches were already written
    # inside the transaction when the bad line turns up.
    path = tmp_path / "big.jsonl"
    n = 12_000
    line_no = write_with_bad(path, n, json.dumps({**OK, "author_kind": "robot"}), good_after=0)
    r = coworker("import", str(path))
    assert_one_line_error(r, line_no, ["'author_kind'"])
    assert event_count(offline_home) == 0
    # the same file without its bad line goes in whole
    path.write_bytes(b"\n".join(path.read_bytes().splitlines()[:-1]) + b"\n")
    ok = coworker("import", str(path))
    assert ok.returncode == 0, ok.stderr
    assert f"imported {n} events" in ok.stdout
    assert event_count(offline_home) == n


# --- --skip-bad -------------------------------------------------------------------------


def test_skip_bad_imports_the_rest_and_reports_each_skipped_line(offline_home: Home,
                                                                  tmp_path: Path):
    rows: list[object] = [
        {**OK, "body": "first"},
        BAD_LINES["invalid JSON"][0],
        {**OK, "body": "second"},
        BAD_LINES["bad author_kind"][0],
        BAD_LINES["unknown field"][0],
        {**OK, "body": "third"},
        BAD_LINES["missing ts"][0],
    ]
    r = coworker("import", "--skip-bad", str(jsonl(tmp_path / "mixed.jsonl", rows)))
    assert r.returncode == 0, r.stderr
    assert "imported 3 events" in r.stdout
    assert "Traceback" not in r.stderr
    skipped = re.findall(r"^skipped line (\d+): (.*)$", r.stderr, re.M)
    assert [int(n) for n, _ in skipped] == [2, 4, 5, 7], r.stderr
    reasons = dict((int(n), why) for n, why in skipped)
    assert "'author_kind'" in reasons[4] and "'channel'" in reasons[5] and "'ts'" in reasons[7]
    assert [e.body for e in all_events(offline_home)] == ["first", "second", "third"]


def test_skip_bad_with_only_bad_lines_imports_nothing_and_says_so(offline_home: Home,
                                                                   tmp_path: Path):
    path = tmp_path / "allbad.jsonl"
    path.write_bytes(b"not json\n\xff\xfe\n")
    r = coworker("import", "--skip-bad", str(path))
    assert r.returncode == 1, r.stderr  # nothing imported is a refusal (issue 38, item 18)
    assert "imported 0 events" in r.stdout and "nothing imported" in r.stderr
    assert re.findall(r"^skipped line (\d+)", r.stderr, re.M) == ["1", "2"]
    assert event_count(offline_home) == 0


# --- no file ------------------------------------------------------------------------------


def test_a_missing_file_is_a_usage_error(offline_home: Home, tmp_path: Path):
    missing = tmp_path / "nope.jsonl"
    r = coworker("import", str(missing))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "no such file" in lines[0] and "nope.jsonl" in lines[0]
    assert event_count(offline_home) == 0


# --- nothing old is replayed (in process) --------------------------------------------------


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def load(home: Home, path: Path, **kw) -> ImportReport:
    with Store.open(home.db_path) as store:
        return import_file(store, path, **kw)


def key_rows(home: Home) -> list[tuple]:
    with Store.open(home.db_path) as store:
        return [tuple(r) for r in store.query(
            "SELECT key, event_id, source FROM import_keys ORDER BY event_id")]


def test_importing_the_same_file_twice_adds_nothing_and_counts_what_was_present(
        offline_home: Home, tmp_path: Path):
    path = jsonl(tmp_path / "h.jsonl", GOOD)
    first = load(offline_home, path)
    assert (first.imported, first.already_present, first.first_id, first.last_id) == (4, 0, 1, 4)
    keys = key_rows(offline_home)
    assert [k[1] for k in keys] == [1, 2, 3, 4] and {k[2] for k in keys} == {"h.jsonl"}
    assert len({k[0] for k in keys}) == 4

    again = load(offline_home, path)
    assert (again.imported, again.already_present) == (0, 4)
    assert (again.first_id, again.last_id) == (None, None)
    assert event_count(offline_home) == 4
    assert key_rows(offline_home) == keys

    # the same lines under another file name are the same lines
    other = jsonl(tmp_path / "renamed.jsonl", list(reversed(GOOD)))
    assert (load(offline_home, other).imported, event_count(offline_home)) == (0, 4)


def test_a_partly_new_file_imports_only_the_new_lines_with_their_own_id_span(
        offline_home: Home, tmp_path: Path):
    load(offline_home, jsonl(tmp_path / "a.jsonl", GOOD[:2]))
    with Store.open(offline_home.db_path) as store:
        live = ev.append(store, ev.Event(kind="note", body="live work in between"))
    new = [{**OK, "body": "new one"}, {**OK, "body": "new two"}]
    mixed = [GOOD[0], new[0], GOOD[1], new[1]]
    r = load(offline_home, jsonl(tmp_path / "b.jsonl", mixed))
    assert (r.imported, r.already_present) == (2, 2)
    assert (r.first_id, r.last_id) == (live + 1, live + 2)
    events = all_events(offline_home)
    assert [e.body for e in events] == [GOOD[0]["body"], GOOD[1]["body"],
                                        "live work in between", "new one", "new two"]
    assert [e.id for e in events if e.body.startswith("new")] == [r.first_id, r.last_id]


def test_a_big_reimport_looks_keys_up_in_batches_and_adds_nothing(offline_home: Home,
                                                                  tmp_path: Path):
    rows = [{**OK, "body": f"line {i}"} for i in range(12_000)]
    half = load(offline_home, jsonl(tmp_path / "half.jsonl", rows[::2]))
    assert half.imported == 6_000
    whole = load(offline_home, jsonl(tmp_path / "whole.jsonl", rows))
    assert (whole.imported, whole.already_present) == (6_000, 6_000)
    assert (whole.first_id, whole.last_id) == (6_001, 12_000)
    again = load(offline_home, jsonl(tmp_path / "whole.jsonl", rows))
    assert (again.imported, again.already_present) == (0, 12_000)
    assert event_count(offline_home) == 12_000
    assert len(key_rows(offline_home)) == 12_000


def test_two_identical_lines_in_one_file_both_stay_and_neither_comes_back(
        offline_home: Home, tmp_path: Path):
    line = {**OK, "body": "same words, same minute"}
    r = load(offline_home, jsonl(tmp_path / "twice.jsonl", [line, line]))
    assert (r.imported, r.already_present) == (2, 0)
    again = load(offline_home, jsonl(tmp_path / "twice.jsonl", [line, line]))
    assert (again.imported, again.already_present) == (0, 2)
    thrice = load(offline_home, jsonl(tmp_path / "thrice.jsonl", [line, line, line]))
    assert (thrice.imported, thrice.already_present) == (1, 2)
    assert event_count(offline_home) == 3
    # the same words at another time, or from another actor, are another line
    other = load(offline_home, jsonl(tmp_path / "o.jsonl", [
        {**line, "ts": "2025-03-01T09:31:00Z"}, {**line, "actor": "ci-bot"},
        {**line, "ts": "2025-03-01T11:30:00+02:00"}]))  # the same instant: present
    assert (other.imported, other.already_present) == (2, 1)


def test_id_keyed_lines_dedupe_even_when_the_body_differs(offline_home: Home, tmp_path: Path):
    rows = [{**OK, "id": 7, "body": "first wording"},
            {**OK, "source_id": "msg-abc", "body": "second wording"}]
    r = load(offline_home, jsonl(tmp_path / "ids.jsonl", rows))
    assert r.imported == 2
    events = all_events(offline_home)
    assert [e.meta.get("source_id") for e in events] == [7, "msg-abc"]
    assert all(e.meta["imported"] is True for e in events)
    assert [k[0] for k in key_rows(offline_home)] == ["id:7", "id:msg-abc"]

    edited = [{**OK, "source_id": 7, "body": "first wording, edited",
               "ts": "2025-03-02T09:30:00Z"},
              {**OK, "id": "msg-abc", "body": "second wording, edited"},
              {**OK, "id": "7", "body": "the same id again, as a string"},
              {**OK, "id": 8, "body": "really new"}]
    again = load(offline_home, jsonl(tmp_path / "ids2.jsonl", edited))
    assert (again.imported, again.already_present) == (1, 3)
    assert [e.body for e in all_events(offline_home)] == [
        "first wording", "second wording", "really new"]


def test_a_repeated_id_inside_one_file_is_present_after_its_first_line(offline_home: Home,
                                                                      tmp_path: Path):
    rows = [{**OK, "id": 1, "body": "one"}, {**OK, "id": 1, "body": "one again"}]
    r = load(offline_home, jsonl(tmp_path / "dup.jsonl", rows))
    assert (r.imported, r.already_present) == (1, 1)
    assert [e.body for e in all_events(offline_home)] == ["one"]


@pytest.mark.parametrize("value,names", [
    (True, ["'id'"]), (1.5, ["'id'"]), ("", ["'id'"]), ({"a": 1}, ["'id'"]), (None, ["'id'"])])
def test_a_bad_id_is_a_bad_line(value, names, offline_home: Home, tmp_path: Path):
    path = jsonl(tmp_path / "bad.jsonl", [OK, {**OK, "id": value}])
    with pytest.raises(BadLine) as caught:
        load(offline_home, path)
    assert caught.value.line_no == 2
    assert "unknown field" not in str(caught.value)
    for name in names:
        assert name in str(caught.value)
    assert event_count(offline_home) == 0


def test_id_and_source_id_that_disagree_are_a_bad_line(offline_home: Home, tmp_path: Path):
    path = jsonl(tmp_path / "both.jsonl", [{**OK, "id": 1, "source_id": 2}])
    with pytest.raises(BadLine, match="'id' and 'source_id'"):
        load(offline_home, path)
    same = jsonl(tmp_path / "same.jsonl", [{**OK, "id": 1, "source_id": 1}])
    assert load(offline_home, same).imported == 1


@pytest.mark.parametrize("kind", LOOP_STATE_KINDS)
def test_a_loop_state_kind_is_refused_naming_the_line_and_the_list(kind: str,
                                                                   offline_home: Home,
                                                                   tmp_path: Path):
    path = jsonl(tmp_path / "state.jsonl", [OK, OK | {"body": "x"}, {**OK, "kind": kind}])
    with pytest.raises(BadLine) as caught:
        load(offline_home, path)
    text = str(caught.value)
    assert caught.value.line_no == 3
    assert f"line 3: kind {kind!r}" in text and "loop state" in text, text
    assert f"(refused kinds: {', '.join(LOOP_STATE_KINDS)})" in text
    assert f"'imported_{kind}'" in text
    assert event_count(offline_home) == 0


def test_a_refused_kind_is_one_error_line_from_the_cli_and_imports_nothing(
        offline_home: Home, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = jsonl(tmp_path / "state.jsonl", [OK, {**OK, "kind": "tick", "body": "fake tick"}])
    assert main(["import", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: state.jsonl line 2: "), lines
    assert "'tick'" in lines[0] and "loop state" in lines[0], lines
    assert "tick, tick_end" in lines[0] and "'imported_tick'" in lines[0], lines
    assert "imported" not in captured.out
    assert event_count(offline_home) == 0

    assert main(["import", "--skip-bad", str(path)]) == 0
    captured = capsys.readouterr()
    assert "imported 1 events" in captured.out
    assert "skipped line 2: " in captured.err and "'tick'" in captured.err, captured.err
    assert [e.kind for e in all_events(offline_home)] == ["message"]


@pytest.mark.parametrize("kind", ["message", "note", "decision", "tool_call", "tool_result",
                                  "action", "deliberate", "tool.result", "imported_tick"])
def test_other_kinds_stay_importable(kind: str, offline_home: Home, tmp_path: Path):
    assert load(offline_home, jsonl(tmp_path / "k.jsonl", [{**OK, "kind": kind}])).imported == 1


def test_naive_timestamps_are_read_in_the_homes_time_zone(offline_home: Home, tmp_path: Path):
    rows = [{**OK, "ts": "2025-03-01T10:00:00", "body": "winter"},
            {**OK, "ts": "2025-07-01T10:00:00", "body": "summer"},
            {**OK, "ts": "2025-07-01T10:00:00+00:00", "body": "explicit offset"},
            {**OK, "ts": "2025-07-01", "body": "a date"}]
    load(offline_home, jsonl(tmp_path / "tz.jsonl", rows), timezone="Europe/Berlin")
    assert [e.ts for e in all_events(offline_home)] == [
        "2025-03-01T09:00:00.000Z", "2025-07-01T08:00:00.000Z", "2025-07-01T10:00:00.000Z",
        "2025-06-30T22:00:00.000Z"]
    # UTC is the default, and the same lines read in another zone are other lines
    r = load(offline_home, jsonl(tmp_path / "utc.jsonl", rows[:1]))
    assert r.imported == 1 and all_events(offline_home)[-1].ts == "2025-03-01T10:00:00.000Z"


def test_an_unknown_time_zone_is_a_usage_error(offline_home: Home, tmp_path: Path):
    with pytest.raises(UsageError, match="Mars/Olympus"):
        load(offline_home, jsonl(tmp_path / "a.jsonl", [OK]), timezone="Mars/Olympus")
    assert event_count(offline_home) == 0


def test_a_timestamp_more_than_a_day_ahead_is_a_bad_line(offline_home: Home, tmp_path: Path):
    now = datetime.now(UTC)
    soon = {**OK, "ts": iso(now + timedelta(hours=20)), "body": "later today, fine"}
    far = {**OK, "ts": iso(now + timedelta(days=2)), "body": "the day after tomorrow"}
    path = jsonl(tmp_path / "future.jsonl", [soon, far])
    with pytest.raises(BadLine) as caught:
        load(offline_home, path)
    assert caught.value.line_no == 2
    assert "'ts'" in str(caught.value) and "in the future" in str(caught.value)
    assert event_count(offline_home) == 0
    r = load(offline_home, path, skip_bad=True)
    assert r.imported == 1 and [n for n, _ in r.skipped] == [2]


@pytest.mark.parametrize("ts", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:30:00-05:00",
                                "0001-01-01T00:00:00"])
def test_a_timestamp_out_of_range_is_a_bad_line_not_a_traceback(
        ts: str, offline_home: Home, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = jsonl(tmp_path / "old.jsonl", [OK, {**OK, "ts": ts, "body": "year one"}])
    with pytest.raises(BadLine) as caught:
        load(offline_home, path, timezone="Asia/Tokyo")
    assert caught.value.line_no == 2 and "'ts'" in str(caught.value)
    r = load(offline_home, path, skip_bad=True, timezone="Asia/Tokyo")
    assert r.imported == 1 and [n for n, _ in r.skipped] == [2]
    assert "'ts'" in r.skipped[0][1]

    # the CLI: one error line, and --skip-bad skips it
    other = jsonl(tmp_path / "old2.jsonl", [{**OK, "ts": "0001-01-01T00:00:00+05:00"},
                                            {**OK, "body": "fine too"}])
    assert main(["import", str(other)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().startswith("error: old2.jsonl line 1: "), captured.err
    assert "'ts'" in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert main(["import", "--skip-bad", str(other)]) == 0
    captured = capsys.readouterr()
    assert "imported 1 events" in captured.out and "skipped line 1: field 'ts'" in captured.err


# --- tail by time: imported history never shows as recent ----------------------------------


def live(home: Home, *bodies: str, kind: str = "note") -> list[int]:
    with Store.open(home.db_path) as store:
        return ev.append_many(store, [ev.Event(kind=kind, body=b, actor="coworker",
                                               author_kind="agent") for b in bodies])


def test_tail_after_importing_old_history_returns_the_live_events_as_newest(
        offline_home: Home, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    live(offline_home, "live one", "live two")
    load(offline_home, jsonl(tmp_path / "old.jsonl", GOOD))  # ids 3-6, dated 2025
    with Store.open(offline_home.db_path) as store:
        assert [e.body for e in ev.tail(store, 2)] == ["live one", "live two"]
        assert [e.body for e in ev.tail(store, 3)] == [GOOD[3]["body"], "live one", "live two"]
        assert [e.body for e in ev.tail(store, 2, include_archive=False)] == [
            "live one", "live two"]
        assert [e.body for e in ev.tail(store, 1, kind="message")] == [GOOD[3]["body"]]
        assert [e.body for e in ev.tail(store, 1, kind="note")] == ["live two"]
        # before_id (the staircase: events before this tick) still filters by id
        assert [e.body for e in ev.tail(store, 2, before_id=2)] == ["live one"]
        # equal timestamps: id order
        everything = ev.tail(store, 100)
        assert [e.body for e in everything] == [
            GOOD[0]["body"], GOOD[1]["body"], GOOD[2]["body"], GOOD[3]["body"],
            "live one", "live two"]
        assert [e.id for e in everything][:2] == [3, 4]  # 09:30 and 09:30: by id

        # hot and archive merged by time: the old import moves to the archive
        assert archive.move_older_than(store, "2026-01-01T00:00:00.000Z") == 4
        assert [(e.body, e.source) for e in ev.tail(store, 3)] == [
            (GOOD[3]["body"], "archive"), ("live one", "hot"), ("live two", "hot")]
        assert [e.body for e in ev.tail(store, 10, include_archive=False)] == [
            "live one", "live two"]

    assert main(["log", "-n", "2", "--json"]) == 0
    bodies = [json.loads(x)["body"] for x in capsys.readouterr().out.splitlines()]
    assert bodies == ["live one", "live two"]


def test_tail_with_before_id_orders_the_older_ids_by_time(offline_home: Home, tmp_path: Path):
    load(offline_home, jsonl(tmp_path / "old.jsonl", [
        {**OK, "ts": "2025-03-01T12:00:00Z", "body": "noon"},
        {**OK, "ts": "2025-03-01T08:00:00Z", "body": "morning"}]))
    live(offline_home, "now")
    with Store.open(offline_home.db_path) as store:
        assert [e.body for e in ev.tail(store, 5, before_id=3)] == ["morning", "noon"]
        assert [e.body for e in ev.tail(store, 1, before_id=3)] == ["noon"]
        assert [e.body for e in ev.tail(store, 5)] == ["morning", "noon", "now"]


# --- reflect: an imported batch seals into episodes of its own ------------------------------


def test_reflect_seals_imported_batches_into_episodes_of_their_own(offline_home: Home,
                                                                    tmp_path: Path):
    now = datetime.now(UTC).replace(microsecond=0)
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, [
            ev.Event(kind="note", body=f"live note {i} about the quokka", actor="coworker",
                     author_kind="agent", ts=iso(now - timedelta(minutes=60 - i)))
            for i in range(12)])
    old = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    batch_a = [{**OK, "ts": iso(old + timedelta(minutes=i)), "body": f"march note {i} walrus"}
               for i in range(12)]
    batch_b = [{**OK, "ts": iso(old + timedelta(minutes=15 - i)), "body": f"march more {i}"}
               for i in range(4)]  # newest first: an episode is dated by its earliest and latest
    ra = load(offline_home, jsonl(tmp_path / "a.jsonl", batch_a))
    rb = load(offline_home, jsonl(tmp_path / "b.jsonl", batch_b))
    assert ra.batch and rb.batch and ra.batch != rb.batch
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, [
            ev.Event(kind="note", body=f"live again {i}", actor="coworker", author_kind="agent",
                     ts=iso(now - timedelta(minutes=40 - i))) for i in range(3)])
        batches = {e.id: (e.imported, e.meta.get("import_batch"))
                   for e in ev.history_after(store, 0)}
        assert {b for i, b in batches.values() if i} == {ra.batch, rb.batch}
        # and a chapter of today's episode alone: the March batches are more than a week
        # away, so they never share it (ADR-0035)
        assert ladder.plan(store, 10) == {1: 3, 2: 1}
        report = ladder.seal(store, 10)
        assert report.sealed == {1: 3, 2: 1}
        [chapter] = rl.at_level(store, 2)
        assert (chapter.first_event, chapter.last_event) == (1, 12)
        episodes = rl.at_level(store, 1)
        spans = [(r.first_event, r.last_event) for r in episodes]
        assert spans == [(1, 12), (ra.first_id, ra.last_id), (rb.first_id, rb.last_id)]
        for r in episodes:  # never mixed: one kind of origin, one batch
            assert len({batches[i] for i in range(r.first_event, r.last_event + 1)}) == 1
        assert episodes[0].first_ts == iso(now - timedelta(minutes=60))
        assert (episodes[1].first_ts, episodes[1].last_ts) == (
            "2025-03-01T09:00:00.000Z", "2025-03-01T09:11:00.000Z")
        assert (episodes[2].first_ts, episodes[2].last_ts) == (
            "2025-03-01T09:12:00.000Z", "2025-03-01T09:15:00.000Z")
        # the live events after the batch wait for more history; a rerun changes nothing
        assert ladder.seal(store, 10).sealed == {}


def test_a_source_id_inside_meta_is_not_the_lines_key(offline_home: Home, tmp_path: Path):
    rows = [{**OK, "body": "one", "meta": {"source_id": "x"}},
            {**OK, "body": "two", "meta": {"source_id": "x"}}]
    r = load(offline_home, jsonl(tmp_path / "m.jsonl", rows))
    assert (r.imported, r.already_present) == (2, 0)
    assert [e.meta["source_id"] for e in all_events(offline_home)] == ["x", "x"]


def test_a_lone_surrogate_escape_is_a_bad_line_not_a_traceback(offline_home: Home,
                                                               tmp_path: Path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({**OK, "body": "smile \U0001F600"}) + "\n"  # a real pair: fine
                    + '{"ts": "2025-03-01T09:30:00Z", "kind": "note", "body": "x \\ud800 y"}\n',
                    encoding="utf-8")
    with pytest.raises(BadLine, match="line 2: a lone surrogate"):
        load(offline_home, path)
    r = load(offline_home, path, skip_bad=True)
    assert r.imported == 1 and [n for n, _ in r.skipped] == [2]
    assert all_events(offline_home)[0].body == "smile \U0001F600"


def test_the_cli_says_how_many_lines_were_already_present_and_reads_the_home_zone(
        offline_home: Home, tmp_path: Path, capsys):
    write_config(offline_home.root, coworker={"timezone": "Europe/Berlin"})
    path = jsonl(tmp_path / "h.jsonl", [{**OK, "ts": "2025-03-01T10:00:00"}, OK])
    assert main(["import", str(path)]) == 0
    out = capsys.readouterr().out
    assert "imported 2 events (ids 1-2)" in out and "already present" not in out
    assert main(["import", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("imported 0 events in ")
    assert "; 2 already present" in out, out
    assert [e.ts for e in all_events(offline_home)] == ["2025-03-01T09:00:00.000Z",
                                                        "2025-03-01T09:30:00.000Z"]


# --- hostile lines: one error line, never a traceback (issue 11) ------------------------------


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


HOSTILE = {
    # case: (line text, words the error must name)
    "100k-deep nesting": ('{"ts": "2025-03-01T09:30:00Z", "kind": "note", "meta": {"a": '
                          + "[" * 100_000 + "]" * 100_000 + "}}", ["nested too deeply"]),
    "5000-digit integer": ('{"ts": "2025-03-01T09:30:00Z", "kind": "note", "meta": {"n": '
                           + "7" * 5000 + "}}", ["4300 digits", "string"]),
    "year one east of UTC": (json.dumps({**OK, "ts": "0001-01-01T00:00:00+05:00"}),
                             ["'ts'", "out of range"]),
    "lone surrogate": ('{"ts": "2025-03-01T09:30:00Z", "kind": "note", "body": "x \\udc00 y"}',
                       ["lone surrogate"]),
    "meta nested past the limit": (json.dumps({**OK, "meta": {"a": _nested(80)}}),
                                   ["'meta'", "levels deep"]),
    "a page-long ts": (json.dumps({**OK, "ts": "x" * 100_000}), ["'ts'"]),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_line_is_one_error_line_through_the_cli_and_nothing_is_written(
        case: str, offline_home: Home, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    text, names = HOSTILE[case]
    path = tmp_path / "hostile.jsonl"
    line_no = write_with_bad(path, 2, text)
    assert main(["import", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err[:2000]
    assert "Traceback" not in captured.err + captured.out
    assert lines[0].startswith(f"error: hostile.jsonl line {line_no}: "), lines[0]
    assert len(lines[0]) < 400, lines[0]  # the value is echoed short, never a page
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert event_count(offline_home) == 0

    # --skip-bad: the rest goes in, the line is reported (its handler once crashed with
    # "'ValueError' object has no attribute 'msg'")
    assert main(["import", "--skip-bad", str(path)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert "imported 3 events" in captured.out
    skipped = captured.err.strip().splitlines()
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped line {line_no}: "), skipped
    assert event_count(offline_home) == 3


def test_parse_raises_nothing_but_value_error(monkeypatch: pytest.MonkeyPatch):
    """RecursionError, OverflowError and TypeError from anywhere in parsing become a
    ValueError (so a bad line, with --skip-bad too), whatever raises them."""
    from runtime import importer

    line = json.dumps(OK)
    for exc in (RecursionError("deep"), OverflowError("big"), TypeError("odd\nthing")):
        def boom(*a, _exc=exc, **k):  # noqa: ANN002, ANN003, ANN202
            raise _exc
        monkeypatch.setattr(importer, "normalize_ts", boom)
        with pytest.raises(ValueError) as caught:
            importer.parse_line(line)
        assert type(caught.value) is ValueError
        assert type(exc).__name__ in str(caught.value)
        assert "\n" not in str(caught.value)


def test_infinity_and_nan_in_meta_are_imported_as_their_names(offline_home: Home,
                                                               tmp_path: Path):
    """Python writes Infinity and NaN into JSON by default: such a line imports, and what is
    stored is standard JSON that SQLite's json_extract reads."""
    path = tmp_path / "nan.jsonl"
    path.write_text('{"ts": "2025-03-01T09:30:00Z", "kind": "note", "body": "x", '
                    '"meta": {"score": NaN, "hi": Infinity, "lo": [-Infinity, 1e999]}}\n',
                    encoding="utf-8")
    assert load(offline_home, path).imported == 1
    with Store.open(offline_home.db_path) as store:
        assert store.scalar("SELECT json_extract(meta, '$.score') FROM events") == "NaN"
        assert ev.get(store, 1).meta["lo"] == ["-Infinity", "Infinity"]


def test_an_imported_promotion_line_never_stands_for_an_owners_remember(offline_home: Home):
    """Another home's `log --json` holds promotion lines naming its inputs by id; imported
    here, one naming the id of an owner's later "remember" must not pass for its verdict."""
    path = offline_home.root / "other-home.jsonl"
    path.write_text(json.dumps({
        "ts": "2026-01-02T09:00:00Z", "kind": "promotion", "actor": "coworker",
        "author_kind": "system", "body": "promotion 1 queued: elsewhere",
        "meta": {"input_id": 2, "promotion_id": 1}}) + "\n", encoding="utf-8")
    assert coworker("import", str(path)).returncode == 0
    told = coworker("tell", "remember that the parser ships on Fridays")
    assert told.returncode == 0 and "event 2" in told.stdout, told.stdout
    assert coworker("run", "--once").returncode == 0
    with Store.open(offline_home.db_path) as store:
        texts = [r[0] for r in store.query("SELECT text FROM promotions")]
    assert texts == ["the parser ships on Fridays"], texts
