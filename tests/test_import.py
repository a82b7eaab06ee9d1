"""`coworker import FILE`: historical events, one JSON object a line, in one transaction.

Everything here runs the real CLI in a subprocess and reads the real database afterwards.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runtime.home import Home
from runtime.memory.search import search
from runtime.store import Store
from runtime.store import events as ev

from .conftest import coworker


def jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def all_events(home: Home) -> list[ev.Event]:
    with Store.open(home.db_path) as store:
        return ev.tail(store, 1_000_000)


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
    assert re.search(r"imported 4 events \(ids 1-4\) in [\d.]+ s \([\d,]+/s\)", r.stdout), r.stdout
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
    assert events[0].meta == {"channel": "chat", "imported": True}
    assert all(e.meta.get("imported") is True for e in events)
    assert events[3].meta == {"imported": True}


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
    assert r.returncode == 0, r.stderr
    assert "imported 0 events" in r.stdout
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
