"""memory.walk on a hand-built ladder: two weeks of triage, an unlinked rollup, an archive."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runtime.home import Home
from runtime.memory.cards import MAX_QUERY_CHARS, cap_query
from runtime.memory.walk import Caps, Found, Step, WalkResult, query_tokens, walk, walk_result
from runtime.render import walk_json, walk_reason
from runtime.store import Event, Store, archive, inputs, telemetry
from runtime.store import events as ev
from runtime.store import rollups as rl

from .conftest import coworker, write_config
from .fakeapi import FakeMessagesAPI, text, tool_use

START = datetime(2026, 11, 2, 9, tzinfo=UTC)


def _ts(day: int, minute: int) -> str:
    return (START + timedelta(days=day, minutes=minute)).isoformat().replace("+00:00", "Z")


def _body(i: int) -> str:
    if i <= 10:  # week one: parser triage
        return (f"Triage of parser bugs: bug {i} reproduced on staging." if i % 2 else
                f"Dana fixed a parser issue in module {i}.")
    if i <= 20:
        return f"Billing invoice rounding error on account {i}."
    if i <= 30:
        return f"The parser crashes on unicode input, case {i}."
    if i <= 40:
        return f"Release notes draft, section {i}."
    return f"Deploy checklist item {i} for the gateway."


def build_ladder(store: Store) -> None:
    ev.append_many(store, [
        Event(kind="note", body=_body(i), actor="coworker", author_kind="agent",
              ts=_ts((i - 1) // 4, i)) for i in range(1, 46)])
    spans = {1: (1, 10), 2: (11, 20), 3: (21, 30)}
    texts = {1: ("parser bugs triage", "Triage of parser bugs, reproduced on staging [#1].",
                 "parser bugs triage staging"),
             2: ("billing invoice rounding", "Rounding errors on invoices [#11].",
                 "billing invoice rounding"),
             3: ("parser unicode crash", "The parser crashes on unicode input [#21].",
                 "parser unicode crash"),
             4: ("release notes", "Release notes draft [#31].", "release notes draft")}
    for rid in (1, 2, 3, 4):
        first, last = spans.get(rid, (None, None))
        title, body, terms = texts[rid]
        rl.seal(store, level=1, first_event=first, last_event=last,
                source_range=f"{first}-{last}" if first else None,
                first_ts=_ts(0, 0), last_ts=_ts(3, 0), title=title, body=body, terms=terms,
                method="extractive")
    rl.seal(store, level=2, first_event=1, last_event=20, source_range="1-20",
            first_ts=_ts(0, 0), last_ts=_ts(6, 0), title="parser bugs triage, billing",
            body="Week one: triage of parser bugs [rollup #1]; invoice rounding [rollup #2].",
            terms="parser bugs triage billing invoice", method="extractive", child_ids=[1, 2])
    rl.seal(store, level=2, first_event=None, last_event=None, source_range=None,
            first_ts=_ts(7, 0), last_ts=_ts(13, 0), title="parser unicode, release",
            body="Week two: the parser and unicode [rollup #3]; release notes [rollup #4].",
            terms="parser unicode release notes", method="extractive", child_ids=[3, 4])


@pytest.fixture
def ladder_home(offline_home: Home) -> Home:
    with Store.open(offline_home.db_path) as store:
        build_ladder(store)
    return offline_home


@pytest.fixture
def ro(ladder_home: Home):
    store = Store.open(ladder_home.db_path, readonly=True)
    yield store
    store.close()


def test_query_tokens():
    assert query_tokens("The Parser's BUGS, and triage-2!") == ["parser", "s", "bugs",
                                                                "triage", "2"]


def test_exact_trace_for_a_known_query(ro: Store):
    r = walk(ro, "parser bugs triage")
    assert r["refused"] is False and r["confidence"] == 1.0
    assert r["query_tokens"] == ["parser", "bugs", "triage"]
    assert r["matched_tokens"] == ["parser", "bugs", "triage"]
    odd = [{"level": 0, "id": i, "why": "event in span 1-10: 3/3 tokens"} for i in (1, 3, 5, 7, 9)]
    even = [{"level": 0, "id": i, "why": "event in span 1-10: 1/3 tokens"} for i in (2, 4, 6, 8, 10)]
    assert r["trace"] == [
        {"level": 2, "id": 5,
         "why": "entry: best lexical match at level 2 (3/3 tokens: parser, bugs, triage)"},
        {"level": 1, "id": 1, "why": "child of 5: 3/3 tokens"},
        *odd, *even]
    assert [e["id"] for e in r["events"]] == [1, 3, 5, 7, 9, 2, 4, 6, 8, 10]
    assert set(r["events"][0]) == {"id", "ts", "kind", "actor", "body", "source"}
    assert r["truncated"] is False


def test_the_typed_result_and_its_dict_are_the_json_contract(ro: Store):
    typed = walk_result(ro, "parser bugs triage")
    assert isinstance(typed, WalkResult) and typed.refused is False and typed.why is None
    assert typed.trace[0] == Step(2, 5, "entry: best lexical match at level 2 "
                                        "(3/3 tokens: parser, bugs, triage)")
    assert isinstance(typed.events[0], Found) and typed.events[0].event.id == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.refused = True  # type: ignore[misc]
    as_dict = typed.as_dict()
    assert as_dict == walk(ro, "parser bugs triage")
    # the keys in this order: the JSON every door prints, byte for byte
    assert list(as_dict) == ["refused", "entry", "confidence", "query_tokens",
                             "matched_tokens", "trace", "events", "truncated"]
    assert list(as_dict["events"][0]) == ["id", "ts", "kind", "actor", "body", "source"]
    assert list(walk(ro, "kubernetes")) == ["refused", "reason_code", "confidence",
                                            "query_tokens", "matched_tokens", "trace", "events",
                                            "truncated"]
    # a door's JSON (render.walk_json) puts the code in words, right after `refused`
    assert list(walk_json(walk_result(ro, "kubernetes")))[:3] == ["refused", "reason",
                                                                   "reason_code"]
    long = walk(ro, "parser " + "x" * MAX_QUERY_CHARS)
    assert list(long)[-1] == "query_truncated" and long["query_truncated"] is True


def test_refusal_quotes_the_best_match_and_runs_nothing_after_the_entry_scan(ro: Store):
    statements: list[str] = []
    ro.conn.set_trace_callback(statements.append)
    r = walk(ro, "kubernetes outage postmortem")
    ro.conn.set_trace_callback(None)
    assert r == {"refused": True, "reason_code": "below_threshold", "confidence": 0.0,
                 "query_tokens": ["kubernetes", "outage", "postmortem"],
                 "matched_tokens": [], "trace": [], "events": [], "truncated": False}
    joined = "\n".join(statements)
    assert "parent_id = ?" not in joined and "BETWEEN" not in joined
    # a weak match is quoted too
    weak = walk(ro, "gateway kubernetes outage")
    assert weak["reason_code"] == "below_threshold" and weak["matched_tokens"] == ["gateway"]
    assert "1/3 (0.33)" in (walk_reason(walk_result(ro, "gateway kubernetes outage")) or "")


def test_an_unlinked_rollup_is_shown_and_never_drilled_into(ro: Store):
    r = walk(ro, "release notes draft")
    rows = {(t["level"], t["id"]): t["why"] for t in r["trace"]}
    # the entry is level 2 #6, which is unlinked: shown, not descended
    assert "unlinked" in rows[(2, 6)]
    assert not any(t["why"].startswith("child of 6") for t in r["trace"])
    # events 31-40 are found, but as history no rollup covers, not through #6
    assert all(t["why"].startswith("entry: event not yet under a rollup")
               for t in r["trace"] if t["level"] == 0)


def test_an_entry_only_on_an_unlinked_rollup_is_shown_not_refused(ro: Store):
    """ADR-0008: provenance that cannot be validated is shown as unlinked; the walk does not
    refuse because the only confident node has no span to drill into."""
    r = walk_result(ro, "parser unicode release")
    assert r.refused is False and r.entry == "lexical", r.why
    assert [(s.level, s.id) for s in r.trace] == [(2, 6)] and r.trace[0].unlinked
    assert r.events == ()


@pytest.mark.parametrize("span", [("1-x", 1, 3), ("1-3", None, None), ("3-1", 3, 1),
                                  ("1-3", 1, 2), (None, 1, 3)],
                         ids=["garbage", "no-ids", "reversed", "disagrees", "null"])
def test_a_malformed_span_is_unlinked_and_never_drilled_into(
        offline_home: Home, span: tuple[str | None, int | None, int | None]):
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, [Event(kind="note", body=f"Quarterly audit of vendor contracts {i}."
                                     if i <= 3 else f"Lunch menu item {i}.", ts=_ts(0, i))
                               for i in range(1, 7)])
        source_range, first, last = span
        rl.seal(store, level=1, first_event=first, last_event=last, source_range=source_range,
                first_ts=_ts(0, 0), last_ts=_ts(0, 3), title="quarterly audit vendor",
                body="Quarterly audit of vendor contracts.", terms="quarterly audit vendor",
                method="extractive")
        rl.seal(store, level=1, first_event=4, last_event=6, source_range="4-6",
                first_ts=_ts(0, 4), last_ts=_ts(0, 6), title="lunch menu", body="Lunch menu.",
                terms="lunch menu", method="extractive")
    with Store.open(offline_home.db_path, readonly=True) as ro:
        r = walk_result(ro, "quarterly audit vendor")
    assert r.refused is False, r.why  # ADR-0008: shown as unlinked, never a reason to refuse
    assert [(s.level, s.id, s.unlinked) for s in r.trace] == [(1, 1, True)]
    assert r.events == ()


def test_archived_events_resolve_with_their_source(ladder_home: Home):
    with Store.open(ladder_home.db_path) as store:
        assert archive.move_older_than(store, _ts(1, 0)) == 4  # events 1-4
    with Store.open(ladder_home.db_path, readonly=True) as ro:
        r = walk(ro, "parser bugs triage")
    sources = {e["id"]: e["source"] for e in r["events"]}
    assert sources[1] == "archive" and sources[3] == "archive" and sources[5] == "hot"


def test_events_not_under_a_rollup_are_found(ro: Store):
    r = walk(ro, "deploy checklist gateway")
    assert r["refused"] is False
    assert [e["id"] for e in r["events"]] == list(range(41, 46))
    assert r["trace"][0]["why"] == "entry: event not yet under a rollup: 3/3 tokens"


def test_caps_and_truncation(ladder_home: Home):
    with Store.open(ladder_home.db_path) as store:
        ev.append_many(store, [Event(kind="note", body="gateway timeout " + "x" * 3000,
                                     ts=_ts(13, i)) for i in range(60)])
    with Store.open(ladder_home.db_path, readonly=True) as ro:
        r = walk(ro, "gateway timeout")
        assert r["truncated"] is True
        assert len(r["events"]) == 40
        assert all(len(e["body"]) <= 2048 for e in r["events"])
        assert r["events"][0]["body"].endswith("…")
        small = walk(ro, "gateway timeout", caps=Caps(events=5, scan=100))
        assert len(small["events"]) == 5 and small["truncated"]
        # the depth cap: a 2-level ladder walked with depth 1 stops at the entry
        shallow = walk(ro, "parser bugs triage", caps=Caps(depth=1))
        assert shallow["truncated"] and all(t["level"] == 2 for t in shallow["trace"])


def test_best_three_per_level(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, [Event(kind="note", body=f"cache warmup run {i}", ts=_ts(0, i))
                               for i in range(1, 61)])
        for k in range(6):
            first, last = 1 + 10 * k, 10 + 10 * k
            rl.seal(store, level=1, first_event=first, last_event=last,
                    source_range=f"{first}-{last}", first_ts=_ts(0, 0), last_ts=_ts(0, 1),
                    title="cache warmup", body="Cache warmup runs.", terms="cache warmup",
                    method="extractive")
    with Store.open(offline_home.db_path, readonly=True) as ro:
        r = walk(ro, "cache warmup")
    entries = [t for t in r["trace"] if t["level"] == 1]
    assert [t["id"] for t in entries] == [1, 2, 3]
    assert [e["id"] for e in r["events"]] == list(range(1, 31))


def test_the_walk_is_deterministic_and_read_only(ladder_home: Home, ro: Store):
    a = json.dumps(walk(ro, "parser bugs triage"))
    b = json.dumps(walk(ro, "parser bugs triage"))
    assert a == b
    assert ro.readonly
    with Store.open(ladder_home.db_path) as rw:
        before = rw.scalar("SELECT COUNT(*) FROM telemetry")
        walk(rw, "parser bugs triage")  # walk itself writes nothing, even given a writer
        assert rw.scalar("SELECT COUNT(*) FROM telemetry") == before


def test_the_walk_module_cannot_reach_a_model():
    code = ("import sys, runtime.memory.walk; "
            "bad = [m for m in sys.modules if m == 'anthropic' or m.startswith('anthropic.') "
            "or m == 'runtime.model']; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    src = (Path(__file__).parent.parent / "runtime" / "memory" / "walk.py").read_text()
    assert "model" not in [line.split()[1] for line in src.splitlines()
                           if line.startswith(("import ", "from "))]


def test_cli_door_exit_codes_json_and_telemetry(ladder_home: Home):
    found = coworker("walk", "parser", "bugs", "triage", "--json")
    assert found.returncode == 0, found.stderr
    with Store.open(ladder_home.db_path, readonly=True) as ro:
        assert json.loads(found.stdout) == walk(ro, "parser bugs triage")
    human = coworker("walk", "parser bugs triage")
    assert human.returncode == 0
    assert "L2 #5" in human.stdout and "  L1 #1" in human.stdout and "#9 " in human.stdout
    refused = coworker("walk", "kubernetes")
    assert refused.returncode == 1 and "refused: no confident entry point" in refused.stdout
    assert coworker("walk").returncode == 2
    with Store.open(ladder_home.db_path) as store:
        rows = store.query("SELECT data FROM telemetry WHERE kind = 'walk' ORDER BY id")
        assert len(rows) == 3
        last = json.loads(rows[-1]["data"])
        assert last["refused"] is True and last["door"] == "cli" and last["ms"] >= 0
        assert telemetry.walk_stats(store, "2000-01-01") == {"walks": 3, "refusals": 1}
    status = coworker("status", "--json")
    assert json.loads(status.stdout)["walks_7d"] == {"walks": 3, "refusals": 1}
    refused_json = coworker("walk", "kubernetes", "--json")  # the code, and its words
    as_json = json.loads(refused_json.stdout)
    assert refused_json.returncode == 1 and as_json["reason_code"] == "below_threshold"
    assert "no confident entry point" in as_json["reason"]


def test_tool_door_refusal_is_a_normal_result_the_tick_carries_on_from(
        ladder_home: Home, api: FakeMessagesAPI):
    import asyncio

    from runtime.loop import Loop

    write_config(ladder_home.root, api.url)
    with Store.open(ladder_home.db_path) as store:
        inputs.add_message(store, Event(kind="message", body="what about kubernetes?",
                                        actor="owner", author_kind="user"))
    api.enqueue(tool_use("memory_walk", {"query": "kubernetes outage"}, id="w1"),
                tool_use("memory_walk", {"query": "parser bugs triage"}, id="w2"),
                text("My memory does not hold kubernetes; parser triage was events 1-10."))
    loop = Loop(ladder_home, ladder_home.settings())

    async def go():
        try:
            return await loop.tick()
        finally:
            await loop.model.close()
    outcome = asyncio.run(go())
    assert outcome.kind == "acted" and outcome.steps == 3
    first = api.bodies[1]["messages"][2]["content"][0]
    assert "is_error" not in first and json.loads(first["content"])["refused"] is True
    second = json.loads(api.bodies[2]["messages"][4]["content"][0]["content"])
    assert second["refused"] is False and second["events"][0]["id"] == 1
    with Store.open(ladder_home.db_path) as store:
        doors = [json.loads(r[0])["door"] for r in store.query(
            "SELECT data FROM telemetry WHERE kind = 'walk'")]
    assert doors == ["tool", "tool"]


# --- one bad input never stops it: a query of any length (issue 11) ----------------------------
#
# The heavy calls run in a child process with a bound: a regression (minutes of CPU) then fails
# cleanly at the bound, and never leans on pytest-timeout.

REPO = Path(__file__).resolve().parent.parent


def child(code: str, *args: str) -> str:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=90, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_cap_query_cuts_at_the_limit_never_inside_a_word():
    assert cap_query("parser bugs") == ("parser bugs", False)
    exact = "ab " * (MAX_QUERY_CHARS // 3) + "a" * (MAX_QUERY_CHARS % 3)
    assert len(exact) == MAX_QUERY_CHARS and cap_query(exact) == (exact, False)
    head, cut = cap_query("ab " * 1000 + "parser")  # the cut falls inside "ab"
    assert cut and len(head) <= MAX_QUERY_CHARS
    assert head.split() == ["ab"] * len(head.split())  # no half word "a" at the end
    assert cap_query("x" * 5000) == ("x" * MAX_QUERY_CHARS, True)  # one word: kept, cut


LINEAR = """
from runtime.memory.recall import extract_terms
from runtime.memory.tokens import query_words, stem
from runtime.memory.walk import query_tokens
text = " ".join(f"w{i}x" for i in range(150_000))
rare = {stem("w7x"): 9.0}
print(len(query_tokens(text)), len(query_words(text)),
      extract_terms(text, 3, idf=lambda stems: {s: rare.get(s, 1.0) for s in stems}))
"""


@pytest.mark.slow
def test_deduplicating_query_words_is_linear():
    """150,000 distinct words, uncapped, through every de-duplication of query words: with a
    list scan (`w not in out`) each of these alone ran for minutes."""
    assert child(LINEAR).split() == ["150000", "150000", "['w0x',", "'w1x',", "'w7x']"]


FTS_LINEAR = """
from runtime.store.events import fts_query
print(fts_query([f"w{i}x" for i in range(150_000)] + ["W0X", "w1x w2x"]).count(" OR ") + 1)
"""


def test_the_fts_match_string_is_built_in_linear_time():
    """store.events.fts_query de-duplicates the words it quotes; with a list scan, 150,000
    distinct terms took minutes (the walk and search cap what they pass it; this is the
    primitive itself)."""
    assert child(FTS_LINEAR).split() == ["150000"]


HUGE_QUERY = """
import json, sys
from pathlib import Path
from runtime.memory import recall as rc
from runtime.memory import walk as walker
from runtime.memory.search import search
from runtime.store import Store
from runtime.store import events as ev

db = Path(sys.argv[1])
query = "parser bugs triage " + " ".join(f"w{i}x" for i in range(150_000))
used, read = [], []
real_fts, real_terms = ev.fts_query, rc.extract_terms
ev.fts_query = lambda terms, *a, **k: (used.append(len(list(terms))), real_fts(terms, *a, **k))[1]
rc.extract_terms = lambda text, *a, **k: (read.append(len(text)), real_terms(text, *a, **k))[1]
out = {}
with Store.open(db, readonly=True) as ro, Store.open(db) as rw:
    w = walker.walk_recorded(ro, query, log_to=rw)
    out["walk"] = {k: w.as_dict().get(k) for k in ("query_truncated", "query_tokens", "refused")}
    out["walk_terms"], used[:] = max(used), []
    out["search_hits"] = len(search(ro, query))
    out["search_terms"] = max(used)
    found = rc.recall(ro, query)
    out["recall"] = {"query_truncated": found.query_truncated, "terms": found.terms,
                     "meta": found.as_meta(rc.Budget()).get("query_truncated"),
                     "read": max(read)}
    out["telemetry"] = json.loads(rw.query("SELECT data FROM telemetry WHERE kind = 'walk' "
                                           "ORDER BY id DESC LIMIT 1")[0][0])
print(json.dumps(out))
"""


def test_a_150k_word_query_is_cut_to_max_query_chars_by_walk_search_and_recall(
        ladder_home: Home, ro: Store):
    got = json.loads(child(HUGE_QUERY, str(ladder_home.db_path)))
    w = got["walk"]
    assert w["query_truncated"] is True and w["refused"] is True  # 3 words of hundreds
    assert w["query_tokens"][:3] == ["parser", "bugs", "triage"]
    assert 3 < len(w["query_tokens"]) <= MAX_QUERY_CHARS // 2  # the tokens used are capped
    assert got["walk_terms"] == len(w["query_tokens"])
    assert got["search_hits"] > 0 and got["search_terms"] <= MAX_QUERY_CHARS // 2
    r = got["recall"]
    assert r["query_truncated"] is True and r["meta"] is True
    assert r["read"] <= MAX_QUERY_CHARS and len(r["terms"]) <= 8
    t = got["telemetry"]
    assert t["query_truncated"] is True and t["query_tokens"] == w["query_tokens"]
    # within the limit: no flag, as before
    assert "query_truncated" not in walk(ro, "parser bugs triage")
    assert "query_truncated" not in walk(ro, "parser " * (MAX_QUERY_CHARS // 7))


HUGE_TOOLS = """
import json, sys
from pathlib import Path
from runtime.home import Home
from runtime.store import Store
from runtime.tools import ToolContext, default_registry

home = Home.locate(Path(sys.argv[1]))
query = "parser bugs triage " + " ".join(f"w{i}x" for i in range(150_000))
registry = default_registry()
with Store.open(home.db_path) as store:
    ctx = ToolContext(store=store, home_root=home.root, settings=home.settings(), tick_id=None,
                      live=False)
    print(json.dumps([registry.dispatch(ctx, name, {"query": q}).__dict__ for name, q in (
        ("memory_walk", query), ("memory_search", query), ("memory_search", "parser bugs"))]))
"""


@pytest.mark.slow
def test_a_huge_query_through_the_cli_and_the_agent_tools_is_cut_and_says_so(
        ladder_home: Home):
    words = [f"w{i}x" for i in range(56_000)]  # the CLI took 28 s on this many
    walked = coworker("walk", "parser", "bugs", "triage", *words, "--json", timeout=90)
    assert walked.returncode == 1, walked.stderr  # refused: 3 words of many
    out = json.loads(walked.stdout)
    assert out["query_truncated"] is True and len(out["query_tokens"]) <= MAX_QUERY_CHARS // 2
    found = coworker("search", "parser", *words, timeout=90)
    assert found.returncode == 0 and "parser" in found.stdout.lower(), found.stderr

    walk_tool, search_tool, short = json.loads(child(HUGE_TOOLS, str(ladder_home.root)))
    assert not walk_tool["is_error"] and json.loads(walk_tool["text"])["query_truncated"]
    assert not search_tool["is_error"]
    note, *hits = search_tool["text"].split("\n")
    assert f"first {MAX_QUERY_CHARS} characters" in note and hits
    assert "characters of the query" not in short["text"]


def test_half_the_words_are_not_enough_when_the_telling_ones_appear_nowhere(tmp_path: Path):
    """"What caused the DNS outage in Singapore?": "caused" and "outage" match an outage the
    history holds, but "dns" and "singapore" appear nowhere in it. Half the words reach the
    0.5 threshold by count; they hold too little of the query's weight (idf), so the walk
    refuses rather than answer with a different outage."""
    with Store.open(tmp_path / "w.db") as store:
        bodies = ([f"Outage {i}: the payments gateway was down, caused by an expired "
                   "certificate." for i in range(3)]
                  + [f"Weekly sync {i}: the roadmap, the hiring plan and the offsite."
                     for i in range(30)])
        ev.append_many(store, [Event(kind="note", body=b, actor="coworker", author_kind="agent")
                               for b in bodies])
        got = walk_result(store, "What caused the DNS outage in Singapore?")
        plain = walk_result(store, "What caused the payments outage?")
    assert got.refused, f"entered on common words alone: {got.as_dict()}"
    assert got.code == "low_weight" and len(got.matched_tokens) == 2, got.why
    # the refusal's confidence is the weight that fell short, not the 0.5 of the word count
    assert got.why is not None and got.confidence < 0.5 and got.why.weight == got.confidence
    assert f"holding {got.confidence:.2f}" in (walk_reason(got) or "")
    assert not plain.refused and plain.entry == "lexical", plain.why


def test_the_turns_own_input_is_not_found_even_once_sealed(offline_home: Home):
    """`before_id` (the tool door passes the turn's first input) holds inside sealed spans too;
    a walk whose words were only there refuses rather than enter with nothing to show."""
    with Store.open(offline_home.db_path) as store:
        older = ev.append(store, Event(kind="note", body="Billing export ran.", actor="coworker",
                                       author_kind="agent", ts="2025-03-05T09:00:00.000Z"))
        ask, more = ev.append_many(store, [
            Event(kind="message", body="Why did the parser crash?", actor="owner",
                  author_kind="user", ts="2025-03-05T12:00:00.000Z"),
            Event(kind="note", body="The parser crashed.", actor="coworker",
                  author_kind="agent", ts="2025-03-05T12:01:00.000Z")])
        rl.seal(store, level=1, first_event=older, last_event=more,
                source_range=f"{older}-{more}", first_ts="2025-03-05T09:00:00.000Z",
                last_ts="2025-03-05T12:01:00.000Z", title="parser crash",
                body="Billing export ran. Why did the parser crash? The parser crashed.",
                terms="parser crash", method="extractive")
    with Store.open(offline_home.db_path, readonly=True) as store:
        every = walk_result(store, "parser crash")
        before = walk_result(store, "parser crash", before_id=ask)
    assert not every.refused and {f.event.id for f in every.events} == {ask, more}
    assert before.refused and before.events == ()
    assert before.code == "no_event_holds" and before.matched_tokens == ("parser", "crash")


def test_times_shown_are_the_owners_and_any_year_reads_as_written(monkeypatch):
    import time
    from zoneinfo import ZoneInfo

    from runtime import render

    berlin = ZoneInfo("Europe/Berlin")
    assert render.when("2025-03-04T23:30:00.000Z", berlin) == "2025-03-05 00:30"
    assert render.day("2025-03-04T23:30:00.000Z", berlin) == "2025-03-05"
    assert render.when("0500-06-01T07:03:00.000Z", UTC) == "0500-06-01 07:03"
    # no offset: UTC, as the store writes it, whatever the machine's own zone
    monkeypatch.setenv("TZ", "America/Los_Angeles")
    time.tzset()
    try:
        assert render.when("2025-03-05T12:00:00", berlin) == "2025-03-05 13:00"
    finally:
        monkeypatch.undo()
        time.tzset()
    assert render.when("not a time", berlin) == "not a time"
    assert render.day(None, berlin) == ""
