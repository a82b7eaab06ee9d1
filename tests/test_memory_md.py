"""MEMORY.md under the owner's control (issue 5, docs/design.md section 10): the file's format and hand
edits, every gate verdict with real events in the store, review (promotions approve/reject),
strike, snapshots and restore, pins in the cached prefix, and provenance (author_kind, stale
decisions). Commands the issue names run through the real CLI (in-process, tests/conftest.py)."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runtime import cli
from runtime.context import build_prefix
from runtime.home import MEMORY_MD_HEADER, Home
from runtime.memory import gate, memmap
from runtime.memory.memorymd import MemoryFile, MemoryFileError, snapshot
from runtime.memory.search import search
from runtime.memory.walk import walk
from runtime.store import Event, Store
from runtime.store import decisions as dec
from runtime.store import events as ev
from runtime.store import promotions as pr
from runtime.tools import default_registry

from .conftest import coworker, write_config

# The owner's file: prose, headings, blank lines, odd spacing and a nested bullet, around
# three entries (one with two sources, one with "none", one with neither sources nor date).
SAMPLE = (
    "# MEMORY\n"
    "\n"
    "Notes the owner wrote by hand.  Two spaces, kept.\n"
    "\n"
    "## People\n"
    "- [m1] Dana owns the parser. (sources: #31, #40; 2026-11-02)\n"
    "- [m2] Ravi answers billing questions (sources: none; 2026-10-01)\n"
    "\n"
    "   an indented prose line with trailing spaces   \n"
    "## Habits\n"
    "- [m7] Tuesday is the release train\n"
    "  - a nested bullet the owner keeps as prose\n"
    "\n"
)
M2_LINE = "- [m2] Ravi answers billing questions (sources: none; 2026-10-01)\n"


def today() -> str:
    return datetime.now(UTC).date().isoformat()


def run(*args: str, code: int = 0) -> object:
    """The real CLI; asserts the exit code and that no traceback reached stderr."""
    r = coworker(*args, env={**os.environ, "COLUMNS": "250"})
    where = f"`coworker {' '.join(args)}`"
    assert "Traceback" not in r.stderr, f"{where} printed a traceback:\n{r.stderr}"
    assert r.returncode == code, (f"{where} exited {r.returncode}, expected {code}\n"
                                  f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def refusal(*args: str, code: int = 1) -> str:
    """A refusal or usage error from our own code: exactly one line on stderr, `error: ...`."""
    r = run(*args, code=code)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), (
        f"`coworker {' '.join(args)}` should print one `error:` line, got {r.stderr!r}")
    return lines[0]


def put(store: Store, body: str, author_kind: str = "user", kind: str = "message",
        actor: str = "owner") -> int:
    return ev.append(store, Event(kind=kind, body=body, actor=actor, author_kind=author_kind))


def configure(home: Home, **memory: object):
    write_config(home.root, memory=memory)
    return home.settings()


def snaps(home: Home) -> list[Path]:
    return sorted(home.snapshots.glob("v*.md"))


def snap_meta(home: Home, n: int) -> dict:
    return json.loads((home.snapshots / f"v{n:04d}.json").read_text())


def log_json(kind: str) -> list[dict]:
    r = run("log", "--kind", kind, "-n", "200", "--json")
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.fixture
def store(offline_home: Home):
    s = Store.open(offline_home.db_path)
    yield s
    s.close()


# --- the file's format ---------------------------------------------------------------------

def test_memory_md_round_trips_byte_identical_and_parses_entries(offline_home: Home):
    path = offline_home.memory_md
    path.write_text(SAMPLE, encoding="utf-8")
    memory = MemoryFile.load(path)
    assert memory.render() == SAMPLE, "render() must give back the owner's file byte for byte"
    assert [(e.id, e.text, e.sources, e.date) for e in memory.entries] == [
        ("m1", "Dana owns the parser.", (31, 40), "2026-11-02"),
        ("m2", "Ravi answers billing questions", (), "2026-10-01"),
        ("m7", "Tuesday is the release train", (), None),
    ]
    owner_lines = [x for x in memory.lines if isinstance(x, str)]
    assert "   an indented prose line with trailing spaces   " in owner_lines
    assert "  - a nested bullet the owner keeps as prose" in owner_lines
    memory.save()
    assert path.read_bytes() == SAMPLE.encode(), "saving an unchanged file must not change it"
    ends_in_an_entry = SAMPLE.rstrip("\n") + "\n"
    path.write_text(ends_in_an_entry, encoding="utf-8")
    after, entry = MemoryFile.load(path).with_entry("The parser  freeze starts on the 20th",
                                                    [3, 5])
    assert entry.id == "m8", "the next id follows the highest one in the file"
    assert after.render() == ends_in_an_entry + (
        f"- [m8] The parser freeze starts on the 20th (sources: #3, #5; {today()})\n")


def test_hand_added_line_is_numbered_on_the_next_write_and_keeps_its_text(offline_home: Home,
                                                                         store: Store):
    hand = (
        "# MEMORY\n"
        "\n"
        "Prose the owner wrote.\n"
        "\n"
        "- [m1] Dana owns the parser (sources: #1; 2026-11-02)\n"
        "- The staging box is called  kestrel\n"
        "* Ravi answers billing questions\n"
        "## Later\n"
        "- [m4] Tuesday is the release train\n"
    )
    offline_home.memory_md.write_text(hand, encoding="utf-8")
    settings = configure(offline_home, memory_promotions="gated")
    source = put(store, "The parser freeze starts on the twentieth")
    v = gate.consider(store, offline_home, settings,
                      gate.Candidate("The parser freeze starts on the twentieth", [source], 1.0,
                                     "tool"))
    assert v.status == "queued", v
    assert offline_home.memory_md.read_text() == hand, "a queued promotion must not write"
    run("promotions", "approve", str(v.promotion_id))
    assert offline_home.memory_md.read_text() == (
        "# MEMORY\n"
        "\n"
        "Prose the owner wrote.\n"
        "\n"
        "- [m1] Dana owns the parser (sources: #1; 2026-11-02)\n"
        f"- [m5] The staging box is called  kestrel (sources: none; {today()})\n"
        f"- [m6] Ravi answers billing questions (sources: none; {today()})\n"
        "## Later\n"
        "- [m4] Tuesday is the release train\n"
        f"- [m7] The parser freeze starts on the twentieth (sources: #{source}; {today()})\n"
    )
    assert snaps(offline_home)[0].read_text() == hand, "the snapshot holds the hand-edited file"


def test_approving_into_a_fresh_home_keeps_the_header_and_its_blank_line(offline_home: Home,
                                                                        store: Store):
    assert offline_home.memory_md.read_text() == MEMORY_MD_HEADER
    settings = configure(offline_home, memory_promotions="gated")
    source = put(store, "Dana owns the parser")
    v = gate.consider(store, offline_home, settings,
                      gate.Candidate("Dana owns the parser", [source], 1.0, "tool"))
    run("promotions", "approve", str(v.promotion_id))
    text = offline_home.memory_md.read_text()
    assert text.startswith(MEMORY_MD_HEADER), (
        "the owner's lines must be kept exactly, but the blank line closing the MEMORY.md "
        "header was dropped when the first entry was appended (MemoryFile.with_entry pops "
        f"trailing blank lines):\n{text!r}")
    assert text.endswith(f"- [m1] Dana owns the parser (sources: #{source}; {today()})\n")


MALFORMED = {
    "bad id": ("# M\n\n- [x12] a bad id\n", "line 3", "[m12]"),
    "duplicate id": ("# M\n- [m1] one\n\n- [m1] two\n", "line 4", "used twice"),
    "bad sources": ("# M\n- [m1] one (sources: #x; 2026-01-01)\n", "line 2", "sources"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_is_a_one_line_error_naming_the_line_and_left_untouched(
        offline_home: Home, case: str):
    text, where, what = MALFORMED[case]
    offline_home.memory_md.write_text(text, encoding="utf-8")
    with pytest.raises(MemoryFileError, match=where):
        MemoryFile.load(offline_home.memory_md)
    line = refusal("strike", "one", code=2)
    assert where in line and what in line, line
    assert offline_home.memory_md.read_text() == text, "a malformed file must not be rewritten"
    assert snaps(offline_home) == [], "nothing may be snapshotted or changed on a bad file"


def test_malformed_file_refuses_approve_and_keeps_the_promotion_queued(offline_home: Home,
                                                                      store: Store):
    settings = configure(offline_home, memory_promotions="gated")
    source = put(store, "Dana owns the parser")
    v = gate.consider(store, offline_home, settings,
                      gate.Candidate("Dana owns the parser", [source], 1.0, "tool"))
    broken = MEMORY_MD_HEADER + "- [m1] fine\n- [m1] twice\n"
    offline_home.memory_md.write_text(broken, encoding="utf-8")
    line = refusal("promotions", "approve", str(v.promotion_id), code=2)
    assert "line 7" in line and "[m1]" in line, line
    assert offline_home.memory_md.read_text() == broken
    assert snaps(offline_home) == []
    assert pr.get(store, v.promotion_id).status == "queued"


def test_non_utf8_file_is_a_clear_error_not_a_traceback(offline_home: Home):
    raw = b"# M\n- [m1] one\n- caf\xe9 opens at nine\n"
    offline_home.memory_md.write_bytes(raw)
    r = coworker("strike", "one", env={**os.environ, "COLUMNS": "250"})
    assert "Traceback" not in r.stderr, (
        "a MEMORY.md that is not UTF-8 crashes `coworker strike` with a UnicodeDecodeError "
        f"traceback instead of a one-line error naming the line:\n{r.stderr[-400:]}")
    assert r.returncode == 2 and r.stderr.startswith("error:") and "line 3" in r.stderr, r.stderr
    assert offline_home.memory_md.read_bytes() == raw


# --- the gate ------------------------------------------------------------------------------

def _check_row(store: Store, v: gate.Verdict) -> pr.Promotion:
    assert v.promotion_id is not None, f"every decision but 'off' is a promotions row: {v}"
    row = pr.get(store, v.promotion_id)
    assert row is not None and row.status == v.status and row.reason == v.reason and row.reason
    return row


REFUSALS = {
    # name: (candidate text, which sources, reason fragment)
    "a source does not exist": ("Dana owns the parser", "own+missing", "do not exist"),
    "lost its source text": ("Quarterly invoices go to Ravi in finance", "own",
                             "lost too much of its source text"),
    "duplicate of an entry": ("dana OWNS the parser", "own", "duplicate of [m1]"),
    "no sources": ("Dana owns the parser", "none", "no source events"),
    "empty text": ("   \n ", "own", "empty text"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_gate_refusals(offline_home: Home, store: Store, case: str):
    text, which, why = REFUSALS[case]
    settings = configure(offline_home, memory_promotions="auto")
    before = "# M\n\n- [m1] Dana owns the parser. (sources: none; 2026-11-02)\n" \
        if case == "duplicate of an entry" else "# M\n"
    offline_home.memory_md.write_text(before, encoding="utf-8")
    own = put(store, "Dana owns the parser, and she reviews every change to it")
    ids = {"own": [own], "own+missing": [own, own + 1000], "none": []}[which]
    v = gate.consider(store, offline_home, settings, gate.Candidate(text, ids, 1.0, "tool"))
    assert v.status == "refused", v
    assert why in v.reason, v.reason
    assert _check_row(store, v).status == "refused"
    assert offline_home.memory_md.read_text() == before


DOUBTS = {
    # name: (text, author_kind of its source, confidence, reason fragment)
    "low confidence": ("Dana owns the parser", "user", 0.79, "confidence 0.79 is under 0.8"),
    "tool output": ("Dana owns the parser", "tool", 1.0, "written by tool"),
    "third party": ("Dana owns the parser", "third_party", 1.0, "written by third_party"),
    "another agent": ("Dana owns the parser", "agent", 1.0, "written by agent"),
    "from now on": ("From now on the parser team ships on Mondays", "user", 1.0,
                    "reads as an instruction"),
    "always run": ("Always run the parser migrations before a release", "user", 1.0,
                   "reads as an instruction"),
    "a URL": ("The parser docs live at https://wiki.example.com/parser", "user", 1.0,
              "reads as an instruction"),
    "rm -rf": ("Clean the parser build with rm -rf build before packaging", "user", 1.0,
               "reads as an instruction"),
}


@pytest.mark.parametrize("case", sorted(DOUBTS))
def test_gate_doubts_are_queued_even_in_auto(offline_home: Home, store: Store, case: str):
    text, author, confidence, why = DOUBTS[case]
    settings = configure(offline_home, memory_promotions="auto")
    before = offline_home.memory_md.read_bytes()
    source = put(store, text, author_kind=author, actor="owner" if author == "user" else "x")
    v = gate.consider(store, offline_home, settings,
                      gate.Candidate(text, [source], confidence, "tool"))
    assert v.status == "queued", f"{case}: {v}"
    assert why in v.reason, v.reason
    assert _check_row(store, v).confidence == confidence
    assert offline_home.memory_md.read_bytes() == before, "a doubtful candidate must not write"


@pytest.mark.parametrize("text,confidence", [
    ("Dana owns the parser and reviews its changes", 1.0),
    ("Ravi answers the billing questions on Tuesdays", 0.8),
])
def test_gate_positive_controls_apply_in_auto(offline_home: Home, store: Store, text: str,
                                              confidence: float):
    settings = configure(offline_home, memory_promotions="auto")
    source = put(store, text)
    v = gate.consider(store, offline_home, settings,
                      gate.Candidate(text, [source], confidence, "owner"))
    assert v.status == "applied" and v.entry_id == "m1", v
    assert _check_row(store, v).entry_id == "m1"
    assert offline_home.memory_md.read_text().endswith(
        f"- [m1] {text} (sources: #{source}; {today()})\n")


def test_gate_over_budget_is_queued_with_that_reason_and_approve_refuses(
        offline_home: Home, store: Store, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(gate, "MEMORY_MD_CHARS", 200)
    settings = configure(offline_home, memory_promotions="auto")
    offline_home.memory_md.write_text("# M\n", encoding="utf-8")
    text = ("The parser team meets on Thursday afternoons in the small room to go over open "
            "crash reports, and Dana keeps the minutes of that meeting in the shared folder "
            "for the parser group, together with the list of owners for each module")
    source = put(store, text)
    v = gate.consider(store, offline_home, settings, gate.Candidate(text, [source], 1.0, "tool"))
    assert v.status == "queued", v
    assert v.reason.startswith("MEMORY.md would be") and "over its budget of 200" in v.reason
    _check_row(store, v)
    assert offline_home.memory_md.read_text() == "# M\n", "nothing is silently truncated"
    line = refusal("promotions", "approve", str(v.promotion_id))
    assert "over its budget of 200" in line, line
    assert offline_home.memory_md.read_text() == "# M\n" and snaps(offline_home) == []
    short = put(store, "Dana owns the parser")
    ok = gate.consider(store, offline_home, settings,
                       gate.Candidate("Dana owns the parser", [short], 1.0, "tool"))
    assert ok.status == "applied", f"a candidate within the budget applies: {ok}"


def test_gate_modes_gated_auto_off(offline_home: Home, store: Store):
    source = put(store, "Dana owns the parser")
    cand = gate.Candidate("Dana owns the parser", [source], 0.95, "tool")
    offline_home.memory_md.write_text("# M\n", encoding="utf-8")

    off = gate.consider(store, offline_home, configure(offline_home, memory_promotions="off"),
                        cand)
    assert off.status == "off" and off.promotion_id is None, off
    assert pr.listing(store) == [], '"off" records nothing'
    assert offline_home.memory_md.read_text() == "# M\n"

    gated = gate.consider(store, offline_home,
                          configure(offline_home, memory_promotions="gated"), cand)
    assert gated.status == "queued" and "gated" in gated.reason, gated
    _check_row(store, gated)
    assert offline_home.memory_md.read_text() == "# M\n"

    auto = gate.consider(store, offline_home, configure(offline_home, memory_promotions="auto"),
                         cand)
    assert auto.status == "applied" and auto.entry_id == "m1", auto
    _check_row(store, auto)
    assert offline_home.memory_md.read_text() == (
        f"# M\n- [m1] Dana owns the parser (sources: #{source}; {today()})\n")
    assert [p.status for p in pr.listing(store)] == ["applied", "queued"]


def test_owner_message_beginning_remember_goes_through_the_gate(offline_home: Home):
    configure(offline_home, memory_promotions="auto")
    told = run("tell", "remember that the parser freeze starts on the 20th.")
    event_id = int(re.search(r"event (\d+)", told.stdout)[1])
    run("run", "--once")
    assert offline_home.memory_md.read_text().endswith(
        f"- [m1] the parser freeze starts on the 20th (sources: #{event_id}; {today()})\n")
    rows = [json.loads(x) for x in run("promotions", "--all", "--json").stdout.splitlines()]
    assert [(r["status"], r["origin"], r["entry_id"]) for r in rows] == [
        ("applied", "owner", "m1")]


# --- review --------------------------------------------------------------------------------

@pytest.fixture
def queued(offline_home: Home, store: Store) -> dict[str, int]:
    """Three promotions: a confident one queued by "gated", a doubtful one, a refused one."""
    settings = configure(offline_home, memory_promotions="gated")
    own = put(store, "Dana owns the parser and reviews every change to it")
    tool = put(store, "The billing service restarts nightly at two", author_kind="tool",
               kind="tool_result", actor="coworker")
    ids = {"own": own, "tool": tool}
    for name, cand in {
        "confident": gate.Candidate("Dana owns the parser and reviews every change to it",
                                    [own], 0.95, "tool"),
        "doubtful": gate.Candidate("The billing service restarts nightly at two", [tool], 0.5,
                                   "tool"),
        "refused": gate.Candidate("Dana owns billing", [own + 99], 0.9, "tool"),
    }.items():
        ids[name] = gate.consider(store, offline_home, settings, cand).promotion_id
    return ids


def test_promotions_lists_queued_with_status_confidence_reason_sources(queued: dict[str, int]):
    out = run("promotions").stdout
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()[:1].isdigit()}
    assert set(rows) == {str(queued["confident"]), str(queued["doubtful"])}, out
    confident, doubtful = rows[str(queued["confident"])], rows[str(queued["doubtful"])]
    assert "queued" in confident and "0.95" in confident and f"#{queued['own']}" in confident
    assert '"gated"' in confident, confident
    assert "0.50" in doubtful and f"#{queued['tool']}" in doubtful
    assert "confidence 0.50 is under 0.8" in doubtful and "written by tool" in doubtful
    assert "Dana owns billing" not in out, "the default list shows only queued promotions"

    rows = [json.loads(x) for x in run("promotions", "--all", "--json").stdout.splitlines()]
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {queued["confident"], queued["doubtful"], queued["refused"]}
    assert by_id[queued["refused"]]["status"] == "refused"
    assert "do not exist" in by_id[queued["refused"]]["reason"]
    assert by_id[queued["doubtful"]]["source_events"] == [queued["tool"]]
    assert by_id[queued["confident"]]["confidence"] == 0.95
    assert all(r["reason"] for r in rows)
    assert "refused" in run("promotions", "--all").stdout


def test_approve_snapshots_the_file_first_then_applies(offline_home: Home, store: Store,
                                                      queued: dict[str, int]):
    before = offline_home.memory_md.read_bytes()
    assert snaps(offline_home) == []
    pid = queued["confident"]
    out = run("promotions", "approve", str(pid)).stdout
    assert "[m1]" in out, out
    assert [p.name for p in snaps(offline_home)] == ["v0001.md"]
    assert snaps(offline_home)[0].read_bytes() == before, "the snapshot is the file as it was"
    meta = snap_meta(offline_home, 1)
    assert meta["reason"] == f"before approving promotion {pid}" and meta["entries"] == 0
    assert offline_home.memory_md.read_text().endswith(
        "- [m1] Dana owns the parser and reviews every change to it "
        f"(sources: #{queued['own']}; {today()})\n")
    row = pr.get(store, pid)
    assert row.status == "approved" and row.entry_id == "m1" and row.decided_at
    assert offline_home.memory_map.exists()
    assert f"promotion #{pid}" not in offline_home.memory_map.read_text()

    after = offline_home.memory_md.read_bytes()
    for bad, why in [(pid, "approved, not queued"), (queued["refused"], "refused, not queued"),
                     (4242, "no promotion 4242")]:
        line = refusal("promotions", "approve", str(bad))
        assert why in line, line
    assert offline_home.memory_md.read_bytes() == after
    assert len(snaps(offline_home)) == 1, "a refused approve writes no snapshot"
    run("promotions", "approve", code=2)
    run("promotions", "bogus", code=2)


def test_an_interrupted_approve_is_finished_by_approving_again(offline_home: Home,
                                                               store: Store,
                                                               queued: dict[str, int]):
    """`promotions approve` killed between writing MEMORY.md and marking the row: the entry is
    in the file and the promotion still queued. Approving again finishes it (no second entry,
    no second snapshot) instead of refusing it as a duplicate of its own entry."""
    pid = queued["confident"]
    p = pr.get(store, pid)
    # the half-done approve: the file change (snapshot first, then the entry), not the row
    snapshot(offline_home.memory_md, offline_home.snapshots, f"before approving {pid}")
    after, entry = gate.load_memory(store, offline_home).with_entry(p.text, p.source_events)
    after.save()
    written = offline_home.memory_md.read_bytes()
    assert pr.get(store, pid).status == "queued"

    out = run("promotions", "approve", str(pid)).stdout
    assert f"[{entry.id}]" in out, out
    row = pr.get(store, pid)
    assert (row.status, row.entry_id) == ("approved", entry.id) and row.decided_at
    assert "interrupted approve" in row.reason
    assert offline_home.memory_md.read_bytes() == written, "nothing written twice"
    assert len(snaps(offline_home)) == 1
    assert "approved, not queued" in refusal("promotions", "approve", str(pid))


def test_the_same_text_under_other_sources_or_another_promotions_id_is_still_a_duplicate(
        offline_home: Home, store: Store, queued: dict[str, int]):
    settings = offline_home.settings()  # "gated"
    p = pr.get(store, queued["confident"])
    twin = gate.consider(store, offline_home, settings,
                         gate.Candidate(p.text, p.source_events, 0.95, "tool"))
    assert twin.status == "queued", twin  # the same candidate, queued twice
    other = put(store, "Dana owns the parser and reviews every change to it, as agreed")
    after, _ = gate.load_memory(store, offline_home).with_entry(p.text, [other])
    after.save()  # same text, other sources: not this promotion's entry
    with pytest.raises(gate.ReviewError, match="duplicates"):
        gate.approve(store, offline_home, settings, p.id)
    assert pr.get(store, p.id).status == "queued"

    offline_home.memory_md.write_text("# M\n", encoding="utf-8")
    first = gate.approve(store, offline_home, settings, p.id)
    # the twin's text and sources are in the file, under an id the first promotion recorded
    with pytest.raises(gate.ReviewError, match=f"duplicates \\[{first}\\]"):
        gate.approve(store, offline_home, settings, twin.promotion_id)
    assert pr.get(store, twin.promotion_id).status == "queued"


def test_reject_records_why(offline_home: Home, store: Store, queued: dict[str, int]):
    before = offline_home.memory_md.read_bytes()
    run("promotions", "reject", str(queued["doubtful"]), "--why", "that was a one-off")
    row = pr.get(store, queued["doubtful"])
    assert row.status == "rejected" and "that was a one-off" in row.reason, row
    run("promotions", "reject", str(queued["confident"]))
    assert "no reason given" in pr.get(store, queued["confident"]).reason
    assert "not queued" in refusal("promotions", "reject", str(queued["doubtful"]))
    assert "no promotion 999" in refusal("promotions", "reject", "999")
    assert offline_home.memory_md.read_bytes() == before and snaps(offline_home) == []
    assert "nothing is queued" in run("promotions").stdout


def test_memory_map_shows_queued_promotions_with_their_reason(store: Store,
                                                             queued: dict[str, int]):
    page = memmap.render(store)
    waiting = page.split("## Waiting for your review")[1].split("## Decisions")[0]
    assert f"promotion #{queued['doubtful']} (confidence 0.50)" in waiting
    reason = pr.get(store, queued["doubtful"]).reason
    assert "0.50" in reason and "0.8" in reason and reason in waiting, (reason, waiting)
    assert f"promotion #{queued['confident']} (confidence 0.95)" in waiting
    assert f"promotion #{queued['refused']}" not in waiting


# --- strike --------------------------------------------------------------------------------

def test_strike_by_id_snapshots_first_records_an_event_and_renders_the_map(offline_home: Home):
    offline_home.memory_md.write_text(SAMPLE, encoding="utf-8")
    assert not offline_home.memory_map.exists()
    out = run("strike", "m2").stdout
    assert "struck [m2]" in out and "unstrike m2" in out, out
    assert offline_home.memory_md.read_text() == SAMPLE.replace(M2_LINE, ""), \
        "strike removes exactly that line and keeps every other byte"
    assert snaps(offline_home)[0].read_text() == SAMPLE, "the snapshot is the pre-strike file"
    assert snap_meta(offline_home, 1) | {"date": None} == {
        "date": None, "reason": "before striking [m2]", "entries": 3}
    strikes = log_json("memory_strike")
    assert len(strikes) == 1 and strikes[0]["author_kind"] == "user"
    assert strikes[0]["meta"] == {"entry_id": "m2", "snapshot": 1}
    assert "Ravi answers billing questions" in strikes[0]["body"]
    assert offline_home.memory_map.exists(), "strike re-renders the memory map"
    assert offline_home.memory_map.read_text().startswith("# Memory map")


def test_strike_by_number_and_by_unique_text(offline_home: Home):
    offline_home.memory_md.write_text(SAMPLE, encoding="utf-8")
    run("strike", "7")
    assert "[m7]" not in offline_home.memory_md.read_text()
    run("strike", "RAVI", "answers")
    text = offline_home.memory_md.read_text()
    assert "[m2]" not in text and "- [m1] Dana owns the parser." in text
    assert [snap_meta(offline_home, n)["reason"] for n in (1, 2)] == [
        "before striking [m7]", "before striking [m2]"]
    assert len(log_json("memory_strike")) == 2


@pytest.mark.parametrize("key,listed,not_listed", [
    ("kubernetes", ["[m1]", "[m2]", "[m7]"], []),
    ("the", ["[m1]", "[m7]"], ["[m2]"]),
])
def test_strike_no_match_or_several_is_a_refusal_listing_them(offline_home: Home, key: str,
                                                              listed: list[str],
                                                              not_listed: list[str]):
    offline_home.memory_md.write_text(SAMPLE, encoding="utf-8")
    line = refusal("strike", key)
    for entry_id in listed:
        assert entry_id in line, line
    for entry_id in not_listed:
        assert entry_id not in line, line
    assert offline_home.memory_md.read_text() == SAMPLE
    assert snaps(offline_home) == [] and log_json("memory_strike") == []


def test_strike_with_a_blank_key_is_a_usage_error(offline_home: Home):
    offline_home.memory_md.write_text(SAMPLE, encoding="utf-8")
    r = coworker("strike", "   ", env={**os.environ, "COLUMNS": "250"})
    assert "Traceback" not in r.stderr
    assert r.returncode == 2, (
        f"`coworker strike '   '` exited {r.returncode}: a blank key is a usage error (exit 2), "
        f"as for `tell`, `pin` and `walk`; stderr: {r.stderr!r}")
    assert offline_home.memory_md.read_text() == SAMPLE


# --- snapshots and restore -----------------------------------------------------------------

def test_snapshots_list_and_restore_brings_the_exact_bytes_back(offline_home: Home):
    assert "no snapshots yet" in run("snapshots").stdout
    offline_home.memory_md.write_text(SAMPLE, encoding="utf-8")
    run("strike", "m1")
    run("strike", "m7")
    latest = offline_home.memory_md.read_bytes()
    listing = run("snapshots").stdout.splitlines()
    rows = [line.split(None, 2) for line in listing if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "2"], listing
    for _number, date, _rest in rows:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", date), date
    assert re.fullmatch(r"before striking \[m1\]\s+3\s+adds m1, m7", rows[0][2].strip()), rows[0]
    assert re.fullmatch(r"before striking \[m7\]\s+2\s+adds m7", rows[1][2].strip()), rows[1]

    out = run("restore", "1", "--yes").stdout
    assert "restored v1" in out and re.search(r"\bv3\b", out), out
    assert offline_home.memory_md.read_bytes() == SAMPLE.encode(), "restore is byte-exact"
    assert snaps(offline_home)[-1].read_bytes() == latest, "the current file is snapshotted first"
    assert snap_meta(offline_home, 3)["reason"] == "before restoring v1"
    restores = log_json("memory_restore")
    assert len(restores) == 1 and restores[0]["meta"] == {"restored": 1, "snapshot": 3}

    line = refusal("restore", "99")
    assert "no snapshot 99" in line and "1, 2, 3" in line, line
    assert len(snaps(offline_home)) == 3 and offline_home.memory_md.read_bytes() == SAMPLE.encode()
    run("restore", "two", code=2)


def test_restore_is_byte_exact_for_a_crlf_file(offline_home: Home):
    crlf = SAMPLE.replace("\n", "\r\n").encode()
    offline_home.memory_md.write_bytes(crlf)
    run("strike", "m2")
    assert snaps(offline_home)[0].read_bytes() == crlf, (
        "the snapshot must hold the file's exact bytes, but snapshot() reads it with "
        "read_text(), which turns CRLF into LF")
    run("restore", "1", "--yes")
    assert offline_home.memory_md.read_bytes() == crlf, "restore must bring the exact bytes back"


# --- pins ----------------------------------------------------------------------------------

def pin_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`coworker pin` in this process (its budget patched): the exit code and stderr."""
    capsys.readouterr()
    code = cli.main(["pin", *args])
    return code, capsys.readouterr().err.strip()


def test_pin_pins_unpin_and_the_budget(offline_home: Home, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr("runtime.actions.PINS_CHARS", 100)
    assert "no pins" in run("pins").stdout
    first, second = "Never deploy on Fridays; the parser release waits till Monday.", \
        "Dana reviews each parser change first."
    assert len(first) + len(second) == 100
    assert "pinned as 1" in run("pin", first).stdout
    assert "pinned as 2" in run("pin", *second.split()).stdout
    code, line = pin_here(capsys, "x")
    assert code == 1 and "101 characters" in line and "budget of 100" in line, line
    assert run("pins").stdout.splitlines() == [f"1: {first}", f"2: {second}"]
    assert "unpinned 1" in run("unpin", "1").stdout
    assert "no active pin 1" in refusal("unpin", "1")
    assert "no active pin 42" in refusal("unpin", "42")
    assert run("pins").stdout.splitlines() == [f"2: {second}"]
    assert pin_here(capsys, "x")[0] == 0, "unpinning frees its budget"
    refusal("pin", "   ", code=2)
    run("unpin", "one", code=2)
    assert [e["meta"]["pin_id"] for e in log_json("pin")] == [1, 2, 3]
    assert [e["meta"]["pin_id"] for e in log_json("unpin")] == [1]


def test_pins_and_memory_md_are_in_the_cached_prefix(offline_home: Home, store: Store):
    offline_home.memory_md.write_text(SAMPLE, encoding="utf-8")
    run("pin", "Never deploy on Fridays")
    run("pin", "Dana reviews parser changes")
    settings = offline_home.settings()

    def prefix_text() -> str:
        prefix = build_prefix(offline_home, settings, store, default_registry())
        assert "cache_control" in prefix.system[-1], "the prefix carries the cache mark"
        return "\n".join(b["text"] for b in prefix.system)

    text = prefix_text()
    assert "- [m1] Dana owns the parser." in text and "Ravi answers billing questions" in text
    assert "[pin 1] Never deploy on Fridays" in text and "[pin 2] Dana reviews" in text
    assert prefix_text() == text, "the prefix is deterministic while nothing changed"
    run("unpin", "1")
    text = prefix_text()
    assert "Never deploy on Fridays" not in text, "an unpinned pin leaves the prefix"
    assert "[pin 2] Dana reviews parser changes" in text


# --- provenance ----------------------------------------------------------------------------

def test_author_kind_from_tell_inbox_and_import(offline_home: Home, tmp_path: Path):
    run("tell", "the parser freeze starts on the 20th")
    (offline_home.inbox / "note.txt").write_text("Ravi is out next week", encoding="utf-8")
    run("run", "--once")
    history = tmp_path / "history.jsonl"
    history.write_text(
        json.dumps({"ts": "2026-01-05T09:00:00Z", "kind": "message", "actor": "alice",
                    "body": "an old note without an author kind"}) + "\n"
        + json.dumps({"ts": "2026-01-05T10:00:00Z", "kind": "message", "actor": "vendor",
                      "author_kind": "third_party", "body": "a vendor's note"}) + "\n",
        encoding="utf-8")
    run("import", str(history))
    kinds = {e["body"]: (e["author_kind"], e["meta"].get("via")) for e in log_json("message")}
    assert kinds["the parser freeze starts on the 20th"] == ("user", "tell")
    assert kinds["Ravi is out next week"] == ("user", "inbox")
    assert kinds["an old note without an author kind"] == ("unknown", None)
    assert kinds["a vendor's note"] == ("third_party", None)


def _superseded_history(store: Store) -> dict[str, int]:
    """Two decisions about the parser release, the second superseding the first; no ladder."""
    said = put(store, "We ship the parser release on Friday")
    first_event = put(store, "Decided: ship the parser release on Friday", author_kind="agent",
                      kind="decision", actor="coworker")
    first = dec.record(store, "Ship the parser release on Friday.", [said], None, first_event,
                       "2026-11-20T10:00:00.000Z")
    changed = put(store, "Change of plan: the parser release moves to Monday")
    second_event = put(store, "Decided: ship the parser release on Monday instead",
                       author_kind="agent", kind="decision", actor="coworker")
    second = dec.record(store, "Ship the parser release on Monday instead.", [changed],
                        first.id, second_event, "2026-11-21T10:00:00.000Z")
    assert first.source_events == [said] and second.supersedes == first.id
    return {"said": said, "first_event": first_event, "first": first.id, "changed": changed,
            "second_event": second_event, "second": second.id}


def test_superseded_decision_is_stale_in_search_walk_and_the_map(offline_home: Home,
                                                                store: Store):
    h = _superseded_history(store)
    stale = f"superseded by decision {h['second']} (event {h['second_event']})"

    labels = {hit.id: hit.label for hit in search(store, "parser release Friday Monday")}
    assert "stale" in labels[h["first_event"]] and stale in labels[h["first_event"]], labels
    for fresh in ("said", "changed", "second_event"):
        assert "stale" not in labels[h[fresh]], (fresh, labels)

    result = walk(store, "parser release friday", threshold=0.5)
    assert not result["refused"], result
    events = {e["id"]: e for e in result["events"]}
    assert events[h["first_event"]].get("stale") == stale, events
    assert "stale" not in events[h["said"]]
    assert "stale" not in events.get(h["second_event"], {})

    page = memmap.render(store)  # the map lists decisions by their own ids
    lines = {int(m[1]): m[0] for m in re.finditer(r"^- decision (\d+) .*$", page, re.M)}
    assert f"stale: superseded by decision {h['second']};" in lines[h["first"]], lines
    assert "stale" not in lines[h["second"]], lines
    assert f"#{h['said']}" in lines[h["first"]]


def test_stale_shows_through_the_cli_search_and_walk(offline_home: Home, store: Store):
    h = _superseded_history(store)
    hits = [json.loads(x) for x in run("search", "parser", "release", "friday",
                                       "--json").stdout.splitlines()]
    labels = {x["id"]: x["label"] for x in hits}
    assert f"stale: superseded by decision {h['second']}" in labels[h["first_event"]], labels
    result = json.loads(run("walk", "parser", "release", "friday", "--json").stdout)
    events = {e["id"]: e for e in result["events"]}
    assert "stale" in events[h["first_event"]] and "stale" not in events[h["said"]]


def test_the_staircase_marks_a_superseded_decision_as_the_recall_block_does(
        offline_home: Home, store: Store):
    """The same request showed a superseded decision unmarked in "Your past" and marked in the
    recall block: the staircase says it too, in the block's words."""
    from runtime.context import staircase

    h = _superseded_history(store)
    got = staircase(store, offline_home.settings(), before_id=10**9)
    lines = {int(m[1]): m[0] for m in re.finditer(r"^\[event (\d+) .*$", got, re.M)}
    assert (f" · stale: superseded by decision {h['second']} (event {h['second_event']})]"
            in lines[h["first_event"]]), lines[h["first_event"]]
    assert all("stale" not in lines[h[k]] for k in ("said", "changed", "second_event")), lines


def test_the_decide_tool_supersedes_by_the_event_id_the_model_sees(offline_home: Home,
                                                                   store: Store):
    """Every door shows a decision as [event N · ... · decision]; the decisions table's own ids
    are never shown. `decide(supersedes=N)` took a decision id: the model's event id dropped
    the supersede in silence, or marked whichever decision had that number stale. It takes the
    event id, and an id that is no decision is an error the model can correct."""
    from runtime.tools import ToolContext

    registry = default_registry()
    ctx = ToolContext(store=store, home_root=offline_home.root, settings=offline_home.settings(),
                      tick_id=None, live=False)
    notes = [put(store, f"Standup notes {i}") for i in range(3)]  # ids no longer coincide
    hetzner = registry.dispatch(ctx, "decide", {"text": "Staging database on Hetzner."})
    redis = registry.dispatch(ctx, "decide", {"text": "Staging cache runs on Redis."})
    first = int(re.search(r"recorded as event (\d+)", hetzner.text)[1])
    cache = int(re.search(r"recorded as event (\d+)", redis.text)[1])
    moved = registry.dispatch(ctx, "decide", {"text": "Staging database moves to AWS.",
                                              "supersedes": first})
    assert not moved.is_error and "supersedes" in moved.text, moved.text
    assert f"event {first}" in moved.text, moved.text
    new = int(re.search(r"recorded as event (\d+)", moved.text)[1])
    stale = dec.stale_events(store)
    assert set(stale) == {first} and cache not in stale, stale  # the cache decision: untouched
    assert stale[first].endswith(f"(event {new})"), stale
    wrong = registry.dispatch(ctx, "decide", {"text": "Drop Redis.", "supersedes": notes[-1]})
    assert wrong.is_error and f"event {notes[-1]}" in wrong.text, wrong.text
    assert "not a decision" in wrong.text, wrong.text
    # a decision already superseded: replacing it again would leave two current decisions
    again = registry.dispatch(ctx, "decide", {"text": "Staging database on GCP.",
                                              "supersedes": first})
    assert again.is_error and f"already superseded by {stale[first]}" in again.text, again.text
    # a decision line imported from history is shown as one, but was never recorded as one
    imported = put(store, "Decided: staging on bare metal.", kind="decision", actor="coworker",
                   author_kind="agent")
    before = (len(dec.all_(store)), ev.counts(store))
    odd = registry.dispatch(ctx, "decide", {"text": "Staging on VMs.", "supersedes": imported})
    assert odd.is_error and "not recorded with decide" in odd.text, odd.text
    assert (len(dec.all_(store)), ev.counts(store)) == before, "a refused decide wrote nothing"
    assert dec.stale_events(store) == stale, "a refused decide marked nothing stale"


def test_decision_provenance_is_validated(offline_home: Home, store: Store):
    said = put(store, "We ship the parser release on Friday")
    bad = dec.record(store, "Ship it.", [said, said + 500], None, None,
                     "2026-11-20T10:00:00.000Z")
    assert bad.source_events is None, "sources that do not resolve are NULL (ADR-0008)"
    orphan = dec.record(store, "Ship it later.", [said], 777, None, "2026-11-20T11:00:00.000Z")
    assert orphan.supersedes is None and orphan.source_events == [said]
    assert dec.superseded(store) == {} and dec.stale_events(store) == {}
    assert f"- decision {bad.id} (2026-11-20, no validated sources)" in memmap.render(store)
