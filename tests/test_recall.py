"""The recall reflex (docs/design.md section 11), coworker tag, and the LoCoMo evaluation (section 14).

Ticks are driven in process against the real anthropic client and the local Messages API
(tests/fakeapi.py); the CLI is the real `coworker` in a subprocess.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.home import Home
from runtime.lab.evaluate import (
    InvariantViolated,
    aggregate,
    check_invariant,
    question_metrics,
)
from runtime.loop import Loop
from runtime.memory.cards import stem
from runtime.memory.recall import Budget, extract_terms, recall
from runtime.store import Event, Store, archive
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.store import tags as tg

from .conftest import coworker, standups, tell, write_config
from .conftest import run_tick as tick
from .fakeapi import FakeMessagesAPI, text, tool_use

HEAD = "Recalled from your memory for this turn"


# --- helpers -----------------------------------------------------------------------------------



def seed(home: Home, bodies: list[str], ts: str | None = None, kind: str = "note") -> list[int]:
    """Older memory: notes (not messages, so the loop does not perceive them as new input)."""
    with Store.open(home.db_path) as store:
        return ev.append_many(store, [
            Event(kind=kind, body=b, actor="coworker", author_kind="agent",
                  **({"ts": ts} if ts else {}))
            for b in bodies])



def events_of(home: Home, kind: str) -> list[Event]:
    with Store.open(home.db_path) as store:
        return ev.tail(store, 1000, kind=kind)


def texts(msg: dict) -> list[str]:
    content = msg["content"]
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in content if b.get("type") == "text"]


def tail_block(body: dict) -> str | None:
    """The recall block of one request: the last text block of the last user message."""
    last = body["messages"][-1]
    assert last["role"] == "user", f"the last message is not the user's: {last['role']}"
    blocks = last["content"]
    assert isinstance(blocks, list) and blocks, "the last user message has no blocks"
    final = blocks[-1]
    if final.get("type") == "text" and final["text"].startswith(HEAD):
        return final["text"]
    return None


def item_lines(block: str) -> list[str]:
    head, *items = block.split("\n")
    assert head.startswith(HEAD), head
    assert all(i.startswith("- [event ") for i in items), items
    return items


def _prefix(raw: bytes) -> bytes:
    start = raw.index(b'"system":')
    assert raw.index(b'"tools":') > start
    return raw[start:]


FILLER = ("The nightly parser run on the billing exports choked again on malformed CSV rows, "
          "and Dana traced the crash to a quoting bug in the tokenizer. ")


# --- term extraction ---------------------------------------------------------------------------

def test_terms_drop_english_and_german_stopwords():
    got = extract_terms("Could you please tell me what the parser is doing with the exports? "
                        "Aber die Rechnung und der Export sind nicht fertig.")
    low = {w.lower() for w in got}
    for stop in ("could", "you", "please", "the", "what", "with", "aber", "die", "und", "der",
                 "nicht", "sind"):
        assert stop not in low, f"stopword {stop!r} kept: {got}"
    assert {"parser", "exports", "rechnung"} <= low, got


def test_terms_are_deduplicated_by_stem():
    got = extract_terms("parser parsers Parser PARSERS crash crashes crashed")
    assert [stem(w) for w in got].count(stem("parser")) == 1, got
    assert [stem(w) for w in got].count(stem("crash")) == 1, got
    assert len(got) == 2, got


def test_terms_at_most_max_terms():
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
             "november oscar papa").split()
    assert len(extract_terms(" ".join(words))) == 8
    assert extract_terms(" ".join(words), max_terms=3) == ["alpha", "bravo", "charlie"]
    assert len(extract_terms(" ".join(words), max_terms=12)) == 12


def test_terms_keep_the_rarest_words_of_a_long_input():
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
             "november oscar papa").split()
    rare = {"kilo", "oscar", "papa", "delta"}

    def idf(stems: list[str]) -> dict[str, float]:
        return {s: 9.0 if s in {stem(w) for w in rare} else 1.0 for s in stems}

    got = extract_terms(" ".join(words), max_terms=4, idf=idf)
    assert set(got) == rare, got
    # with room for more, the rare words are all kept and the rest filled in order
    got8 = extract_terms(" ".join(words), max_terms=8, idf=idf)
    assert rare <= set(got8) and len(got8) == 8, got8


def test_terms_keep_the_rarest_words_against_a_real_log(offline_home: Home):
    from runtime.memory.cards import Distinctive

    seed(offline_home, [f"parser billing export crash report number {i}" for i in range(30)])
    seed(offline_home, ["the zeppelin anomaly", "quasar tariff"])
    question = ("parser billing export crash report parser billing zeppelin quasar tariff "
                "anomaly")
    with Store.open(offline_home.db_path) as store:
        got = extract_terms(question, max_terms=4, idf=Distinctive(store).idf)
    assert set(got) == {"zeppelin", "quasar", "tariff", "anomaly"}, got


# --- the budget --------------------------------------------------------------------------------

def _many_long(home: Home, n: int = 12) -> None:
    seed(home, [f"Report {i}: " + FILLER * 12 for i in range(n)], ts="2024-05-01T09:00:00.000Z")


def _recall_block_of_one_tick(home: Home, api: FakeMessagesAPI) -> tuple[str, Event]:
    tell(home, "Did the parser crash on the billing exports again? Dana mentioned the tokenizer.")
    api.enqueue(text("Looking."))
    loop = Loop(home, home.settings())
    outcome = tick(loop)
    assert outcome.kind == "no_action", outcome
    block = tail_block(api.bodies[-1])
    assert block is not None, "no recall block although many older events match"
    return block, events_of(home, "recall")[-1]


def test_budget_default_three_items_600_each_1800_in_all(home: Home, api: FakeMessagesAPI):
    _many_long(home)
    block, event = _recall_block_of_one_tick(home, api)
    items = item_lines(block)
    assert len(items) == 3, f"{len(items)} items: {items}"
    assert all(len(i) <= 600 for i in items), [len(i) for i in items]
    assert sum(len(i) for i in items) <= 1800, [len(i) for i in items]
    assert event.meta["injected"] is True and len(event.meta["items"]) == 3


def test_budget_of_another_size(home: Home, api: FakeMessagesAPI,
                                monkeypatch: pytest.MonkeyPatch):
    write_config(home.root, api.url)
    monkeypatch.setattr("runtime.memory.service.BUDGET", Budget(2, 250, 400))
    _many_long(home)
    block, event = _recall_block_of_one_tick(home, api)
    items = item_lines(block)
    assert 1 <= len(items) <= 2, items
    assert all(len(i) <= 250 for i in items), [len(i) for i in items]
    assert sum(len(i) for i in items) <= 400, [len(i) for i in items]
    assert len(event.meta["items"]) <= 2


@pytest.mark.parametrize("budget", [Budget(), Budget(2, 250, 400)])
def test_budget_whole_block_within_total_chars(home: Home, api: FakeMessagesAPI, budget: Budget,
                                               monkeypatch: pytest.MonkeyPatch):
    """total_chars is "characters of recall per model call": what is appended, header and
    newlines included, and what the recall event reports as `chars`."""
    monkeypatch.setattr("runtime.memory.service.BUDGET", budget)
    total = budget.total_chars
    _many_long(home)
    block, event = _recall_block_of_one_tick(home, api)
    assert event.meta["chars"] == len(block)
    assert len(block) <= total, (
        f"the injected recall block is {len(block)} chars, over total_chars={total}: "
        "Recall.block (runtime/memory/recall.py) counts only the item lines, not the header "
        "line and the newlines; start `used` at len(head) + 1 and add 1 per line")


# --- the tail position and the cached prefix --------------------------------------------------

def test_recall_block_rides_at_the_tail_of_every_call_never_in_history(home: Home,
                                                                      api: FakeMessagesAPI):
    _many_long(home, 5)
    tell(home, "Note down what we know about the parser crash on the billing exports.")
    api.enqueue(tool_use("note", {"text": "parser crash: quoting bug"}, id="toolu_r"),
                text("Noted."))
    outcome = tick(Loop(home, home.settings()))
    assert outcome.kind == "acted" and outcome.steps == 2
    assert len(api.bodies) == 2
    blocks = []
    for n, body in enumerate(api.bodies):
        block = tail_block(body)
        assert block is not None, f"request {n + 1}: the recall block is not the last text " \
                                  "block of the last user message"
        blocks.append(block)
        whole = json.dumps(body, ensure_ascii=False)
        assert whole.count(HEAD) == 1, f"request {n + 1} carries the block {whole.count(HEAD)}x"
    assert blocks[0] == blocks[1]
    first = api.bodies[0]["messages"]
    assert len(first) == 1 and len(texts(first[0])) == 3  # staircase, new, recall
    second = api.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[-1]["content"][0]["type"] == "tool_result"
    # the history is the first request's messages as they were before the tail was added
    history = json.dumps(second[:-1], ensure_ascii=False)
    assert HEAD not in history and blocks[0] not in history
    assert texts(second[0]) == texts(first[0])[:2]
    assert HEAD not in json.dumps(second[-1]["content"][:-1], ensure_ascii=False)


def test_cached_prefix_byte_identical_with_different_recall_blocks(home: Home,
                                                                  api: FakeMessagesAPI):
    seed(home, ["The parser crash on the billing exports was a quoting bug.",
                "The zeppelin deployment to the staging cluster failed on Tuesday."],
         ts="2024-05-01T09:00:00.000Z")
    loop = Loop(home, home.settings())
    tell(home, "What was the parser crash about?")
    tick(loop)
    tell(home, "And the zeppelin deployment on staging?")
    tick(loop)
    a, b = api.requests[0], api.requests[1]
    ba, bb = tail_block(a["json"]), tail_block(b["json"])
    assert ba and bb and ba != bb, (ba, bb)
    assert "parser" in ba and "zeppelin" in bb
    assert _prefix(a["raw"]) == _prefix(b["raw"]), "recall changed the cached prefix"
    assert HEAD.encode() not in _prefix(a["raw"])


# --- dry-run -----------------------------------------------------------------------------------

def test_dry_run_injects_nothing_and_records_what_it_would(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, recall={"mode": "dry-run"})
    _many_long(home, 4)
    tell(home, "Did the parser crash on the billing exports again?")
    outcome = tick(Loop(home, home.settings()))
    assert outcome.kind == "no_action"
    assert len(api.bodies) == 1
    assert HEAD not in json.dumps(api.bodies[0]), "dry-run sent a recall block"
    rec = events_of(home, "recall")
    assert len(rec) == 1
    meta = rec[0].meta
    assert meta["injected"] is False and meta["mode"] == "dry-run"
    assert isinstance(meta["block"], str) and meta["block"].startswith(HEAD)
    assert len(item_lines(meta["block"])) == len(meta["items"]) >= 1
    assert "dry-run" in rec[0].body


def test_mode_on_records_without_the_block_text(home: Home, api: FakeMessagesAPI):
    _many_long(home, 4)
    tell(home, "Did the parser crash on the billing exports again?")
    tick(Loop(home, home.settings()))
    meta = events_of(home, "recall")[0].meta
    assert meta["injected"] is True and meta["block"] is None
    assert meta["chars"] == len(tail_block(api.bodies[0]) or "")
    assert all({"id", "score", "source"} <= set(i) for i in meta["items"])
    assert meta["ms"] >= 0 and meta["terms"]


def test_mode_off_sends_no_block_and_records_nothing(home: Home, api: FakeMessagesAPI):
    write_config(home.root, api.url, recall={"mode": "off"})
    _many_long(home, 4)
    tell(home, "Did the parser crash on the billing exports again?")
    tick(Loop(home, home.settings()))
    assert HEAD not in json.dumps(api.bodies[0])
    assert events_of(home, "recall") == []


# --- what recall finds -------------------------------------------------------------------------

def test_recall_finds_hot_and_archived_events_never_the_tick_input(home: Home,
                                                                   api: FakeMessagesAPI):
    old = seed(home, ["The zeppelin deployment broke the staging cluster on Tuesday.",
                      "Lunch order for the team offsite."], ts="2024-01-10T09:00:00.000Z")
    with Store.open(home.db_path) as store:
        assert archive.move_older_than(store, "2024-06-01T00:00:00.000Z") == 2
    hot = seed(home, ["Rolled the zeppelin deployment back; staging cluster is healthy.",
                      "Printer on floor 3 is out of toner."])
    msg = tell(home, "Is the zeppelin deployment to the staging cluster safe to retry?")
    tick(Loop(home, home.settings()))
    meta = events_of(home, "recall")[0].meta
    got = {i["id"]: i["source"] for i in meta["items"]}
    assert got.get(old[0]) == "archive", f"archived event {old[0]} not recalled: {got}"
    assert got.get(hot[0]) == "hot", f"hot event {hot[0]} not recalled: {got}"
    assert msg not in got, f"recall returned the tick's own input {msg}: {got}"
    assert all(i < msg for i in got), got
    block = tail_block(api.bodies[0])
    assert block and f"[event {old[0]} " in block and f"[event {msg} " not in block


def test_recall_excludes_every_input_of_the_tick_direct(offline_home: Home):
    seed(offline_home, ["quasar billing tariff changed in March"])
    first = tell(offline_home, "what about the quasar tariff?")
    second = tell(offline_home, "quasar tariff again, billing too")
    with Store.open(offline_home.db_path) as store:
        ids = [h.event.id for h in recall(store, "quasar tariff billing", before_id=first).hits]
        assert ids == [1], ids
        everything = [h.event.id for h in recall(store, "quasar tariff billing").hits]
        assert {first, second} <= set(everything)  # without before_id they would be found


def test_recall_finds_a_recent_match_behind_many_older_unsealed_ones(offline_home: Home):
    """Before reflect seals a week of events, more than 60 of them can match a common word."""
    seed(offline_home, [f"parser report {i}: nothing unusual" for i in range(80)])
    [target] = seed(offline_home, ["parser crash fixed: the zeppelin flag was inverted"])
    with Store.open(offline_home.db_path) as store:
        ids = [h.event.id for h in recall(store, "parser zeppelin flag", k=3).hits]
    assert target in ids, (
        f"the newest, best-matching event {target} is not recalled ({ids}): "
        "events.fts_after (runtime/store/events.py) takes the OLDEST `FRESH`=60 matches past "
        "the ladder's end (ORDER BY rowid LIMIT), so newer matches are never candidates; "
        "take the newest (ORDER BY rowid DESC) or rank the fresh window with bm25")


# --- a failing index leaves the turn intact ----------------------------------------------------

@pytest.mark.parametrize("sql", ["DROP TABLE events_vocab", "DROP TABLE rollups_fts"])
def test_a_broken_index_leaves_the_turn_intact(home: Home, api: FakeMessagesAPI, caplog, sql):
    _many_long(home, 4)
    loop = Loop(home, home.settings())
    raw = sqlite3.connect(home.db_path)
    raw.execute(sql)
    raw.commit()
    raw.close()
    tell(home, "Did the parser crash on the billing exports again?")
    api.enqueue(text("Nothing to add."))
    with caplog.at_level(logging.WARNING):
        outcome = tick(loop)
    assert outcome.kind == "no_action", f"the turn did not survive a broken index: {outcome}"
    assert len(api.bodies) == 1 and HEAD not in json.dumps(api.bodies[0])
    warned = [r for r in caplog.records
              if r.levelno == logging.WARNING and "recall failed" in r.getMessage()]
    assert warned, [r.getMessage() for r in caplog.records]
    assert events_of(home, "tick_failed") == []
    assert [e.meta["outcome"] for e in events_of(home, "tick_end")] == ["no_action"]


# --- keywords: coworker tag --------------------------------------------------------------------

def _search(word: str) -> list[dict]:
    r = coworker("search", word, "--json")
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def test_tag_makes_an_event_and_a_rollup_findable(offline_home: Home):
    [eid] = seed(offline_home, ["The nightly export job timed out at 02:00."],
                 ts="2024-03-03T02:05:00.000Z")
    with Store.open(offline_home.db_path) as store:
        rid = rl.seal(store, level=1, first_event=eid, last_event=eid, source_range=f"{eid}-{eid}",
                      first_ts="2024-03-03T02:05:00.000Z", last_ts="2024-03-03T02:05:00.000Z",
                      title="export, nightly", body="The nightly export timed out.",
                      terms="export nightly", method="extractive", vocab="nightly export")
        before = ev.get(store, eid)
    assert rid is not None
    assert _search("outage") == []
    r = coworker("tag", str(eid), "outage", "incident")
    assert r.returncode == 0, r.stderr
    hits = _search("outage")
    assert [(h["kind"], h["id"]) for h in hits] == [("event", eid)], hits
    assert [(h["kind"], h["id"]) for h in _search("incident")] == [("event", eid)]
    with Store.open(offline_home.db_path) as store:
        after = ev.get(store, eid)
    assert after.body == before.body and after.ts == before.ts and after.meta == before.meta

    assert _search("hyperdrive") == []
    r = coworker("tag", f"r.{rid}", "hyperdrive")
    assert r.returncode == 0, r.stderr
    assert [(h["kind"], h["id"]) for h in _search("hyperdrive")] == [("rollup", rid)]
    # tagging again adds nothing and still succeeds
    r = coworker("tag", f"r.{rid}", "hyperdrive")
    assert r.returncode == 0 and "already" in r.stdout


def test_tag_unknown_id_exits_1_and_bad_spec_exits_2(offline_home: Home):
    seed(offline_home, ["something"])
    r = coworker("tag", "9999", "word")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "9999" in r.stderr
    r = coworker("tag", "r.9999", "word")
    assert r.returncode == 1, (r.returncode, r.stderr)
    for spec in ("x.5", "abc", "e.", "r.-1"):
        r = coworker("tag", spec, "word")
        assert r.returncode == 2, (spec, r.returncode, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    [eid] = seed(offline_home, ["another thing"])
    r = coworker("tag", str(eid), "fine", "!!!")  # the index keeps no punctuation: it finds nothing
    assert r.returncode == 2 and "'!!!' has none" in r.stderr, (r.returncode, r.stderr)
    with Store.open(offline_home.db_path) as store:
        assert not store.query("SELECT 1 FROM tags WHERE item_id = ?", (eid,)), "nothing is added"


def test_a_block_over_budget_keeps_the_best_items_not_the_oldest():
    """The block shows its items oldest first; the budget must still keep the best ranked. It
    used to sort first and stop at the first item that did not fit, so the newest (here the
    correction, ranked first) was dropped while the recall event listed it as injected."""
    from runtime.memory.recall import Budget, Hit, Recall

    def hit(i: int, day: int, score: float) -> Hit:
        return Hit(Event(kind="note", body=f"Item {i}: " + "words " * 40, actor="coworker",
                         author_kind="agent", ts=f"2026-03-0{day}T09:00:00.000Z", id=i),
                   score, None)

    ranked = [hit(5, 5, 9.0), hit(4, 4, 8.0), hit(1, 1, 3.0), hit(2, 2, 2.0), hit(3, 3, 1.0)]
    found = Recall(terms=["item"], hits=ranked)
    budget = Budget(max_items=5, item_chars=200, total_chars=len(found.head()) + 3 * 201)
    block = found.block(budget)
    shown = [int(line.split("[event ")[1].split(" ")[0]) for line in block.split("\n")[1:]]
    assert shown == [1, 4, 5], block  # the best three, oldest first
    assert len(block) <= budget.total_chars
    assert [i["id"] for i in found.as_meta(budget)["items"]] == shown


# --- eval metrics ------------------------------------------------------------------------------

def test_question_metrics_exact_values():
    ranked = ["D1:5", "D2:1", "D1:3", "D3:2", "D9:9"]
    m = question_metrics(ranked, ["D1:3", "D3:2", "D4:1"], k=3)
    assert m == pytest.approx({"turn_recall": 1 / 3, "hit": 1.0, "mrr10": 1 / 3,
                               "session_recall": 1 / 3, "hit1": 0.0, "hit10": 1.0})
    m = question_metrics(ranked, ["D1:3", "D3:2", "D4:1"], k=4)
    assert m == pytest.approx({"turn_recall": 2 / 3, "hit": 1.0, "mrr10": 1 / 3,
                               "session_recall": 2 / 3, "hit1": 0.0, "hit10": 1.0})
    m = question_metrics(ranked, ["D1:5"], k=10)
    assert m == {"turn_recall": 1.0, "hit": 1.0, "mrr10": 1.0, "session_recall": 1.0,
                 "hit1": 1.0, "hit10": 1.0}
    m = question_metrics(ranked, ["D7:1", "D7:2"], k=10)
    assert m == {"turn_recall": 0.0, "hit": 0.0, "mrr10": 0.0, "session_recall": 0.0,
                 "hit1": 0.0, "hit10": 0.0}
    # session recall counts sessions, not turns: D2:7 is missed but its session is there
    m = question_metrics(ranked, ["D2:7"], k=5)
    assert m["session_recall"] == 1.0 and m["turn_recall"] == 0.0 and m["hit"] == 0.0
    # MRR and hit@10 look at the top 10 whatever k is
    long = [f"D1:{i}" for i in range(1, 16)]
    m = question_metrics(long, ["D1:12"], k=15)
    assert m["hit"] == 1.0 and m["turn_recall"] == 1.0 and m["hit10"] == 0.0
    assert m["mrr10"] == 0.0
    m = question_metrics(long, ["D1:10"], k=5)
    assert m["hit"] == 0.0 and m["hit10"] == 1.0 and m["mrr10"] == pytest.approx(0.1)
    m = question_metrics([], ["D1:1"], k=10)
    assert m["hit1"] == 0.0 and m["mrr10"] == 0.0


def test_aggregate_means_and_n():
    rows = [question_metrics(["a:1", "b:1"], ["a:1"], 10),   # rank 1
            question_metrics(["b:1", "a:1"], ["a:1"], 10),   # rank 2
            question_metrics(["b:1", "c:1"], ["a:1"], 10),   # miss
            question_metrics(["b:1", "c:1", "a:1", "a:2"], ["a:1", "a:2"], 10)]  # rank 3, 2/2
    agg = aggregate(rows)
    assert agg["n"] == 4
    assert agg["hit1"] == 0.25 and agg["hit10"] == 0.75 and agg["hit"] == 0.75
    assert agg["mrr10"] == round((1 + 0.5 + 0 + 1 / 3) / 4, 4)
    assert agg["turn_recall"] == 0.75 and agg["session_recall"] == 0.75
    assert aggregate([]) == {"n": 0}
    check_invariant(agg)
    check_invariant(aggregate([]))


def test_invariant_passes_on_honest_metrics_and_catches_a_wrong_mrr():
    rankings = [(["a:1", "b:1"], ["a:1"]), (["b:1", "a:1"], ["a:1"]),
                (["b:1", "c:1", "a:1"], ["a:1"]), (["b:1", "c:1"], ["a:1"])]
    honest = [question_metrics(r, e, 10) for r, e in rankings]
    check_invariant(aggregate(honest))

    def first(r, e):
        return next((i for i, d in enumerate(r[:10]) if d in set(e)), None)

    # mrr10 computed as hit@10
    as_hit = [{**m, "mrr10": m["hit10"]} for m in honest]
    with pytest.raises(InvariantViolated):
        check_invariant(aggregate(as_hit), "mrr as hit@10")
    # 1/rank with the rank counted from 0 (guarded as `1 / (i or 1)`): the rank-2 hit scores 1
    from_zero = []
    for m, (r, e) in zip(honest, rankings, strict=True):
        i = first(r, e)
        from_zero.append({**m, "mrr10": 0.0 if i is None else 1.0 / (i or 1)})
    with pytest.raises(InvariantViolated):
        check_invariant(aggregate(from_zero), "rank from 0")
    # 1/(rank + 1): a hit at rank 1 scores 1/2, below hit@1
    top = [(["a:1", "b:1"], ["a:1"]), (["a:2", "b:1"], ["a:2"]), (["b:1", "c:1"], ["a:1"])]
    off_by_one = []
    for r, e in top:
        m, i = question_metrics(r, e, 10), first(r, e)
        off_by_one.append({**m, "mrr10": 0.0 if i is None else 1.0 / (i + 2)})
    check_invariant(aggregate([question_metrics(r, e, 10) for r, e in top]))
    with pytest.raises(InvariantViolated):
        check_invariant(aggregate(off_by_one), "rank + 1")


@pytest.mark.parametrize("n_rank2,n_miss", [(1, 2), (2, 4), (3, 4)])
def test_invariant_holds_on_honest_metrics_at_the_boundary(n_rank2, n_miss):
    """All hits at rank 2: MRR@10 is exactly hit@1 + (hit@10 - hit@1)/2, which the check must
    accept after aggregate() rounds to 4 decimals."""
    rows = ([question_metrics(["x:1", "a:1"], ["a:1"], 10)] * n_rank2
            + [question_metrics(["x:1", "y:1"], ["a:1"], 10)] * n_miss)
    agg = aggregate(rows)
    try:
        check_invariant(agg)
    except InvariantViolated as e:
        pytest.fail(
            f"honest metrics rejected ({agg}): {e}. aggregate() rounds each mean to 4 decimals "
            "and check_invariant (runtime/lab/evaluate.py) compares the rounded values with eps "
            "1e-9; check the unrounded means, or allow eps = 1e-4 (the rounding error)")


# --- eval end to end ---------------------------------------------------------------------------

def _session(d: int, speakers: tuple[str, str], lines: list[str]) -> list[dict]:
    return [{"speaker": speakers[i % 2], "dia_id": f"D{d}:{i + 1}", "text": t}
            for i, t in enumerate(lines)]


def _locomo(path: Path) -> Path:
    a = ("Caroline", "Melanie")
    conv1 = {
        "speaker_a": a[0], "speaker_b": a[1],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": _session(1, a, [
            "Hey Mel! I went to the LGBTQ support group yesterday.",
            "That sounds wonderful, Caroline. I painted a sunrise over the lake last week.",
            "I want to study psychology and get a counseling certification.",
            "You would be a great counselor."]),
        "session_2_date_time": "7:55 pm on 25 May, 2023",
        "session_2": _session(2, a, [
            "I ran a charity race for mental health on Saturday.",
            "My kids and I went camping in the mountains.",
            "Did you see any wildlife?"]),
        "session_3_date_time": "10:37 am on 9 June, 2023",
        "session_3": _session(3, a, [
            "The adoption agency called me back about the interview.",
            "Fingers crossed for the adoption!"]),
    }
    b = ("Jon", "Gina")
    conv2 = {
        "speaker_a": b[0], "speaker_b": b[1],
        "session_1_date_time": "4:04 pm on 20 January, 2023",
        "session_1": _session(1, b, [
            "I lost my banking job, so I am opening a dance studio.",
            "I lost my job too; I am starting an online clothing store.",
            "Dance has always been my passion."]),
        "session_2_date_time": "2:32 pm on 29 January, 2023",
        "session_2": _session(2, b, [
            "The dance studio lease is signed downtown.",
            "My clothing store got its first fashion order!",
            "Let us celebrate with a dinner."]),
    }
    data = [
        {"sample_id": "conv-a", "conversation": conv1, "qa": [
            {"question": "When did Caroline go to the LGBTQ support group?",
             "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
            {"question": "What did Melanie paint?", "answer": "a sunrise",
             "evidence": ["D1:2"], "category": 4},
            {"question": "What would Caroline pursue in her education?",
             "answer": "psychology", "evidence": ["D1:3", "D1:4"], "category": 1},
            {"question": "What did Caroline realize after the charity race?",
             "evidence": ["D2:1"], "category": 5, "adversarial_answer": "self-care"},
            {"question": "Where did Melanie go camping with her kids?", "answer": "mountains",
             "evidence": ["D2:2", "D9:9"], "category": 3},
        ]},
        {"sample_id": "conv-b", "conversation": conv2, "qa": [
            {"question": "What business did Jon start after losing his banking job?",
             "answer": "a dance studio", "evidence": ["D1:1"], "category": 4},
            {"question": "What did Gina start?", "answer": "an online clothing store",
             "evidence": ["D1:2", "D2:2"], "category": 1},
            {"question": "When did Jon sign the studio lease?", "answer": "January 2023",
             "evidence": ["D2:1"], "category": 2},
        ]},
    ]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_eval_locomo_end_to_end(tmp_path: Path):
    f = _locomo(tmp_path / "tiny-locomo.json")
    rows = tmp_path / "rows.jsonl"
    r = coworker("eval", "locomo", str(f), "--json", "--out", str(rows))
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["conversations"] == 2
    assert rep["questions_total"] == 7, rep  # the category-5 question is not asked
    assert rep["questions_invalid"] == 1, rep  # D9:9 does not exist
    assert rep["questions_valid"] == 6, rep
    assert rep["overall"]["n"] == 6
    cats = rep["per_category"]
    assert sorted(cats) == ["1 multi-hop", "2 temporal", "3 open-domain", "4 single-hop"]
    assert [cats[c]["n"] for c in sorted(cats)] == [2, 2, 0, 2]
    for c in ("1 multi-hop", "2 temporal", "4 single-hop"):
        assert {"turn_recall", "hit", "mrr10", "session_recall", "hit1", "hit10"} <= set(cats[c])
    lat = rep["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p95"], lat
    o = rep["overall"]
    assert o["hit1"] <= o["mrr10"] <= o["hit10"]
    assert o["hit"] > 0, f"nothing found on questions that quote their evidence: {o}"

    out = [json.loads(line) for line in rows.read_text().splitlines()]
    assert len(out) == 7, out
    assert [(x["sample_id"], x["qa_index"]) for x in out] == [
        ("conv-a", 0), ("conv-a", 1), ("conv-a", 2), ("conv-a", 4),
        ("conv-b", 0), ("conv-b", 1), ("conv-b", 2)]
    for x in out:
        assert set(x) == {"sample_id", "qa_index", "ranked"}
        assert len(x["ranked"]) <= 10 and len(set(x["ranked"])) == len(x["ranked"])
        assert all(isinstance(d, str) and d.startswith("D") for d in x["ranked"])
    assert out[1]["ranked"][0] == "D1:2", out[1]  # "What did Melanie paint?"
    assert out[4]["ranked"][0] == "D1:1", out[4]  # Jon's banking job and dance studio

    r = coworker("eval", "locomo", str(f), "--json", "--channels", "bm25", "--k", "5")
    assert r.returncode == 0, r.stderr
    base = json.loads(r.stdout)
    assert base["channels"] == "bm25" and base["k"] == 5
    assert (base["questions_valid"], base["questions_invalid"]) == (6, 1)


def test_eval_missing_file_exits_2_with_one_line(tmp_path: Path):
    r = coworker("eval", "locomo", str(tmp_path / "nope.json"), "--json")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope.json" in lines[0], r.stderr


# --- was true / is true, time order, breadth, decide before retrieving (issue 14) ---------

def _block_of(home: Home, question: str, k: int = 3) -> tuple[str | None, object]:
    from runtime.memory.recall import Budget

    with Store.open(home.db_path) as store:
        found = recall(store, question, k=k)
    return found.block(Budget(max_items=k)), found


def test_a_superseded_decision_is_marked_stale_in_the_block_in_search_words(offline_home: Home):
    from runtime.store import decisions as dec

    old, new = seed(offline_home, ["Decided: the zeppelin release ships on Monday.",
                                   "Decided: the zeppelin release ships on Tuesday instead."],
                    kind="decision")
    with Store.open(offline_home.db_path) as store:
        first = dec.record(store, "zeppelin ships Monday", None, None, old, "2024-05-01T09:00Z")
        second = dec.record(store, "zeppelin ships Tuesday", None, first.id, new,
                            "2024-05-02T09:00Z")
    block, found = _block_of(offline_home, "When does the zeppelin release ship?")
    assert block is not None, found
    lines = {int(line.split()[2]): line for line in item_lines(block)}
    assert f"stale: superseded by decision {second.id}" in lines[old], lines[old]
    assert "stale" not in lines[new], lines[new]
    # the same words as search
    from runtime.memory.search import search

    with Store.open(offline_home.db_path) as store:
        label = next(h.label for h in search(store, "zeppelin release") if h.id == old)
    assert f"stale: superseded by decision {second.id}" in label


def test_the_block_gives_times_in_the_owners_zone_and_names_it(offline_home: Home):
    """Recall reads "on 4 March" as the owner's day; the block dated the line that answers it
    in UTC, unlabelled, as 3 March. Its times are the owner's now, and its first line names
    the zone."""
    from zoneinfo import ZoneInfo

    from runtime.memory.recall import Budget

    [said] = seed(offline_home, ["The quasar deploy finished after the migration."],
                  ts="2026-03-03T19:30:00.000Z")  # 08:30 on 4 March in Auckland
    with Store.open(offline_home.db_path) as store:
        local = recall(store, "quasar deploy", tz=ZoneInfo("Pacific/Auckland"))
        utc = recall(store, "quasar deploy")
    block = local.block(Budget())
    assert block.splitlines()[0].startswith(HEAD) and "times in Pacific/Auckland" in block
    assert f"[event {said} · 2026-03-04 08:30 ·" in block, block
    assert "times in UTC" in utc.block(Budget()) and "2026-03-03 19:30" in utc.block(Budget())
    # the rest of the context reads the same clock: the staircase's lines, and its header
    from runtime.context import staircase

    write_config(offline_home.root, coworker={"timezone": "Pacific/Auckland"})
    with Store.open(offline_home.db_path) as store:
        past = staircase(store, offline_home.settings(), before_id=10**9)
    assert "times in Pacific/Auckland" in past.splitlines()[0], past
    assert f"[event {said} · 2026-03-04 08:30 ·" in past, past
    from runtime.tools import ToolContext, default_registry

    with Store.open(offline_home.db_path, readonly=True) as store:  # the search tool too
        ctx = ToolContext(store=store, home_root=offline_home.root,
                          settings=offline_home.settings(), tick_id=None, live=False)
        found = default_registry().dispatch(ctx, "memory_search", {"query": "quasar deploy"})
    assert "(times in Pacific/Auckland)" in found.text, found.text
    assert f"[event {said} · 2026-03-04 08:30 ·" in found.text, found.text


def test_a_time_the_owners_zone_cannot_hold_is_shown_as_stored(home: Home, api: FakeMessagesAPI):
    """Year 1, a common export's "unknown date", lies before what a zone west of UTC can
    show: the turn must go on, that line shown with its stored time (it once failed every
    turn while the line was among the recent events)."""
    from runtime.loop.turn import Outcome
    from runtime.memory import dates

    write_config(home.root, api.url, coworker={"timezone": "America/New_York"})
    [old] = seed(home, ["A line from long ago."], ts="0001-01-01T00:00:00.000Z")
    assert dates.local_minute("0001-01-01T00:00:00.000Z",
                              home.settings().coworker.zone) == "0001-01-01 00:00"
    assert dates.local_minute("2026-03-03T19:30:00", None) == "2026-03-03 19:30"
    # a year before 1000 keeps its four digits, as stored times sort (strftime drops them)
    assert dates.local_minute("0999-06-01T12:00:00.000Z",
                              home.settings().coworker.zone) == "0999-06-01 07:03"  # LMT
    tell(home, "What happened long ago?")
    api.enqueue(text("Nothing much."))
    got = tick(Loop(home, home.settings()))
    assert got.kind != Outcome.FAILED, got
    assert f"[event {old} · 0001-01-01 00:00 ·" in json.dumps(api.bodies[0], ensure_ascii=False)


def test_the_mcp_recall_items_are_marked_as_the_block_marks_them(offline_home: Home):
    """`memory_recall` (the MCP door, `Actions.recall`) lists the items the block holds, each
    marked stale or imported in the block's words, and says why there is no block."""
    from runtime.actions import Actions, Door
    from runtime.store import decisions as dec

    old, new = seed(offline_home, ["Decided: the zeppelin release ships on Monday.",
                                   "Decided: the zeppelin release ships on Tuesday instead."],
                    kind="decision")
    with Store.open(offline_home.db_path) as store:
        first = dec.record(store, "zeppelin ships Monday", None, None, old, "2024-05-01T09:00Z")
        second = dec.record(store, "zeppelin ships Tuesday", None, first.id, new,
                            "2024-05-02T09:00Z")
        [told] = ev.append_many(store, [Event(
            kind="message", body="The zeppelin release is cancelled, ship nothing.",
            actor="owner", author_kind="user", meta={"imported": True})])
    got = Actions(offline_home, Door.MCP).recall("When does the zeppelin release ship?")
    items = {i["id"]: i for i in got["items"]}
    assert got["decision"] == "inject" and set(items) == {old, new, told}, got
    assert items[old]["stale"] == f"superseded by decision {second.id} (event {new})"
    assert "stale" not in items[new] and "imported" not in items[new]
    assert items[told]["imported"] == "not your owner's words"
    quiet = Actions(offline_home, Door.MCP).recall("Thanks!")
    assert quiet["block"] is None and quiet["items"] == [], quiet
    assert quiet["decision"].startswith("none: "), quiet
    weak = Actions(offline_home, Door.MCP).recall(  # hits, but too weak to inject: no items
        "Which kubernetes namespace holds the zeppelin grafana dashboards?")
    assert weak["decision"].startswith("none: evidence") and weak["block"] is None, weak
    assert weak["items"] == [], weak


def test_block_lists_items_in_time_order_with_dates(offline_home: Home):
    # the correction matches best, so it ranks first; the block still shows it last
    [early] = seed(offline_home, ["The quasar review meeting is on Monday."],
                   ts="2024-03-01T09:00:00.000Z")
    [late] = seed(offline_home, ["Update: the quasar review meeting moved to Tuesday; quasar "
                                 "review attendees please note the review moved."],
                  ts="2024-03-04T10:30:00.000Z")
    block, found = _block_of(offline_home, "quasar review meeting moved")
    assert [h.event.id for h in found.hits][:2] == [late, early], found.hits
    items = item_lines(block)
    assert [int(i.split()[2]) for i in items] == [early, late], items
    assert "2024-03-01 09:00" in items[0] and "2024-03-04 10:30" in items[1], items


def _episode(store: Store, ids: list[int], title: str) -> None:
    rl.seal(store, level=1, first_event=ids[0], last_event=ids[-1],
            source_range=f"{ids[0]}-{ids[-1]}", first_ts=None, last_ts=None, title=title,
            body=title, terms=title, method="extractive", vocab=title)


def test_breadth_top_k_covers_the_three_episodes_holding_the_evidence(offline_home: Home):
    dup = "Nightly build of the zeppelin firmware failed on the runner again, same error."
    a = seed(offline_home, [dup] * 12, ts="2024-04-01T09:00:00.000Z")
    b = seed(offline_home, ["Dana says the zeppelin firmware needs a new signing key.",
                            "Lunch was pizza."], ts="2024-04-08T09:00:00.000Z")
    c = seed(offline_home, ["Ravi flashed the zeppelin firmware onto the test rig by hand.",
                            "The printer is out of toner."], ts="2024-04-15T09:00:00.000Z")
    with Store.open(offline_home.db_path) as store:
        for ids, title in ((a, "zeppelin firmware build failed nightly runner"),
                           (b, "zeppelin firmware signing key"),
                           (c, "zeppelin firmware flashed rig")):
            _episode(store, ids, title)
    _, found = _block_of(offline_home, "What happened with the zeppelin firmware?", k=3)
    got = {h.event.id for h in found.hits}
    assert len(got & set(a)) == 1 and b[0] in got and c[0] in got, (
        f"top-3 {sorted(got)} does not cover the three episodes {a[0]}.., {b[0]}, {c[0]}")


@pytest.mark.parametrize("message", ["Thanks!", "ok great, thank you", "Good morning!",
                                     "Many thanks!", "Much appreciated!", "Danke schön!",
                                     "Vielen Dank!", "Merci!", "ty!"])
def test_courtesy_needs_no_memory_and_nothing_is_retrieved(offline_home: Home, message: str):
    seed(offline_home, ["Thanks for the great review this morning, good work!"] * 3)
    block, found = _block_of(offline_home, message)
    assert block is None and found.hits == [], found.hits
    assert found.skipped == "no_terms"
    meta = found.as_meta(__import__("runtime.memory.recall", fromlist=["Budget"]).Budget())
    assert meta["reason_code"] == "no_terms" and "terms" in meta


def test_a_weak_match_injects_nothing_a_real_question_still_recalls(offline_home: Home):
    seed(offline_home, ["Melanie painted a sunrise over the lake.",
                        "Melanie ran a charity race for mental health."] * 3)
    block, found = _block_of(offline_home, "What is Melanie's kubernetes cluster called?")
    assert block is None and found.skipped == "low_evidence", (found.evidence, block)
    block, found = _block_of(offline_home, "What did Melanie paint?")
    assert block is not None and "sunrise" in block and found.skipped is None, found


def test_a_ritual_prompt_with_no_informative_terms_injects_nothing(home: Home,
                                                                  api: FakeMessagesAPI):
    with (home.root / "config.toml").open("a", encoding="utf-8") as f:
        f.write('\n[[rituals.custom]]\nname = "hello"\ncron = "0 9 * * *"\n'
                'prompt = "Good morning! Thanks."\n')
    seed(home, ["Good morning, thanks for the coffee this morning."] * 3)
    loop = Loop(home, home.settings())
    loop._due_rituals.mark("hello")
    api.enqueue(text("Morning."))
    tick(loop)
    assert api.bodies and tail_block(api.bodies[-1]) is None
    meta = events_of(home, "recall")[-1].meta
    assert meta["injected"] is False and meta["reason_code"] == "no_terms"
    assert meta["decision"] == "none: no informative terms"  # the code in words, recorded
    # a real question in the same home still recalls
    seed(home, ["The zeppelin deployment broke the staging cluster."])
    tell(home, "Is the zeppelin deployment on staging fixed?")
    api.enqueue(text("Checking."))
    tick(loop)
    assert tail_block(api.bodies[-1]) is not None


def test_on_a_long_history_recall_ranks_bounded_episode_candidates_with_the_flat_scores(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    """Issue 15: when a rung holds many matching episodes, recall ranks only candidates (those
    holding the rarest words, the newest holding every other word, the newest matches), each
    with the bm25 the flat ranking gives it. With the caps set small, a history of a few hundred
    episodes takes that path: the episode holding the rare word still comes first with the flat
    score, and the common-words query still returns episodes holding all its words."""
    from rituals import reflect as rf
    from runtime.memory import recall as rc

    bodies = []
    for i in range(600):
        extra = " The zeppelin migration slipped." if i == 37 else ""
        bodies.append(f"Standup {i}: billing export and invoice checks ran.{extra}")
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, standups(bodies, per_day=60))
        rf.reflect(offline_home, offline_home.settings(), store)
        assert rl.counts_per_level(store)[1] > 20
        scored: list[str] = []
        real_scored, real_ids = ev.fts_scored, ev.fts_ids

        def spy(*a, **kw):
            scored.append(a[1])
            return real_scored(*a, **kw)

        def spy_ids(*a, **kw):  # the bounded path reads unscored rowids (memory.rung_bm25)
            scored.append(a[1])
            return real_ids(*a, **kw)
        for words in (["zeppelin", "billing"], ["billing", "invoice", "export"]):
            monkeypatch.setattr(ev, "fts_scored", spy)
            monkeypatch.setattr(ev, "fts_ids", spy_ids)
            flat = rc._episodes(store, words)
            assert scored == [], "a short history must take the flat ranking"
            monkeypatch.setattr(rc, "EXACT_EPISODES", 3)
            monkeypatch.setattr(rc, "RARE_EPISODES", 5)
            monkeypatch.setattr(rc, "RECENT_EPISODES", 4)
            bounded = rc._episodes(store, words)
            monkeypatch.undo()
            assert scored, "the bounded path was not taken"
            scored.clear()
            flat_scores = {r.id: s for r, s in rl.fts_search(
                store, " OR ".join(f'"{w}"' for w in words), 10**6, level=1,
                columns="title body terms vocab tags")}
            assert bounded, words
            for r, s in bounded:  # every candidate scores what the flat ranking gives it
                assert s == pytest.approx(flat_scores[r.id], abs=1e-9), (words, r.id)
            if "zeppelin" in words:
                assert bounded[0][0].id == flat[0][0].id  # the rare word decides: same best


def test_an_event_read_again_after_a_tag_is_read_with_its_tag(offline_home: Home):
    """Recall keeps the words of events it has read (their spans recur from turn to turn);
    a tag added since is part of what it reads next time, in the same process."""
    older, newer = seed(offline_home, ["Zeppelin deploy notes, alpha run.",
                                       "Zeppelin deploy notes, beta run."])
    with Store.open(offline_home.db_path) as store:
        before = recall(store, "zeppelin outage", k=2)
        assert [h.event.id for h in before.hits] == [newer, older]  # a tie: the newer first
        tg.add(store, "event", older, ["outage"])
        after = recall(store, "zeppelin outage", k=2)
        assert [h.event.id for h in after.hits] == [older, newer]
        assert after.hits[0].score > before.hits[1].score


def test_long_texts_are_read_afresh_not_kept(offline_home: Home):
    """What recall keeps of the events it read is bounded: a long text (a tool's output) is
    tokenized each time instead of being held."""
    from runtime.memory import recall as rc

    long_body = "Zeppelin rollout log: " + "step ok; " * 1000
    short, long_ = seed(offline_home, ["Zeppelin rollout checklist done.", long_body])
    rc._kept_stems.cache_clear()
    with Store.open(offline_home.db_path) as store:
        found = recall(store, "zeppelin rollout", k=2)
    assert {h.event.id for h in found.hits} == {short, long_}
    kept = rc._kept_stems.cache_info().currsize
    assert kept == 1, kept  # the short one only


def test_hits_read_through_an_episode_are_whole_events_with_their_meta(offline_home: Home):
    """Recall weighs an episode's events with their meta unread and reads it for the hits it
    keeps: each hit is the event as stored (an imported line stays not the owner's words)."""
    with Store.open(offline_home.db_path) as store:
        ids = ev.append_many(store, [
            Event(kind="message", body=f"Zeppelin hangar lease, clause {n}, signed by Ilse.",
                  actor="owner", author_kind="user", ts=f"2024-05-0{n + 1}T09:00:00.000Z",
                  meta={"imported": True, "source_id": f"line-{n}"} if n % 2 else {"via": "tell"})
            for n in range(4)])
        _episode(store, ids, "zeppelin hangar lease clauses")
        found = recall(store, "zeppelin hangar lease", k=4)
        assert sorted(h.event.id for h in found.hits) == ids
        for h in found.hits:
            assert h.episode is not None  # came through the episode's span
            assert h.event == ev.get(store, int(h.event.id or 0))
            assert h.event.owners_words is (h.event.meta.get("via") == "tell")


_SCORES = """
import sys
from pathlib import Path
from runtime.memory.recall import recall
from runtime.store import Store
with Store.open(Path(sys.argv[1]), readonly=True) as store:
    for q in sys.argv[2:]:
        print([repr(h.score) for h in recall(store, q, k=20).hits])
"""


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_scores_are_the_same_in_every_process(offline_home: Home):
    """A hit's score is a sum over the query's terms, taken in one order: the same bits in any
    process, whatever its hash seed (a set's order would make ties break differently)."""
    import random
    import subprocess
    import sys

    rng = random.Random(7)
    vocab = ("zeppelin hangar lease clause signed Ilse mortgage audit ledger quarterly "
             "invoice vendor freight customs broker tariff").split()
    seed(offline_home, [" ".join(rng.choices(vocab, k=rng.randint(3, 30))) for _ in range(120)])
    queries = [" ".join(rng.sample(vocab, 8)) for _ in range(12)]
    out = [subprocess.run([sys.executable, "-c", _SCORES, str(offline_home.db_path), *queries],
                          capture_output=True, text=True, check=True,
                          env={**__import__("os").environ, "PYTHONHASHSEED": str(s)}).stdout
           for s in (0, 1, 2)]
    assert out[0] and out[0] == out[1] == out[2]


def _diversify_every_round(ranked, k, stems, penalty):
    """What `diversify` must equal: every candidate compared with every pick, every round; the
    best count wins, the earlier-ranked hit on equal counts."""
    from runtime.memory.recall import _similarity

    rest, out = list(ranked), []
    while rest and len(out) < k:
        def counts(h):
            mine = stems.get(h.event.id, frozenset())
            closest = max((_similarity(mine, stems.get(t.event.id, frozenset())) for t in out),
                          default=0.0)
            return h.score * (1 - penalty * closest)
        best = max(range(len(rest)), key=lambda j: (counts(rest[j]), -j))
        out.append(rest.pop(best))
    return out


@given(st.lists(st.tuples(st.sampled_from([1.0, 2.0, 3.0, 0.5, 2.75]),
                          st.frozensets(st.sampled_from("abcdefghij"), max_size=6)),
                max_size=40),
       st.integers(1, 25), st.sampled_from([0.5, 1.0, 1.5]))
def test_diversify_picks_what_comparing_every_candidate_every_round_picks(rows, k, penalty):
    from runtime.memory.recall import Hit, diversify

    hits = [Hit(Event(kind="note", body="x", id=i + 1), score, None)
            for i, (score, _) in enumerate(rows)]
    hits.sort(key=lambda h: (-h.score, -(h.event.id or 0)))
    stems = {i + 1: words for i, (_, words) in enumerate(rows)}
    assert ([h.event.id for h in diversify(hits, k, stems, penalty)]
            == [h.event.id for h in _diversify_every_round(hits, k, stems, penalty)])


def _turns(home: Home, turns: list[tuple[str, str, str]]) -> list[int]:
    """(actor, author_kind, body) in order, an hour apart."""
    with Store.open(home.db_path) as store:
        return ev.append_many(store, [
            Event(kind="message", body=b, actor=a, author_kind=k,
                  ts=f"2024-05-02T{9 + n:02d}:00:00.000Z")
            for n, (a, k, b) in enumerate(turns)])


TURNS = [  # (actor, author_kind, body); the first two are replaced per test
    ("Joanna", "third_party", "GET /books?enjoy=1: What books do you enjoy reading?"),
    ("Sam", "third_party", "I love this series: adventures, magic and great characters."),
    ("Joanna", "third_party", "I enjoy long walks by the river."),
    ("Nate", "third_party", "I enjoy cooking on weekends."),
    ("Joanna", "third_party", "The library reopens on Monday with new books."),
    ("Nate", "third_party", "Your turtles look great."),
]


def test_the_reply_to_a_matching_question_ranks_with_it(offline_home: Home):
    """"What books do you enjoy reading?" matches the query; the answer is the reply after
    it, in other words. The reply inherits most of the question's score, so it ranks above
    turns that share a word of the query."""
    ids = _turns(offline_home, TURNS)
    _, found = _block_of(offline_home, "Which books do people enjoy?", k=2)
    assert {h.event.id for h in found.hits} == {ids[0], ids[1]}, found.hits


def test_the_reply_that_opens_the_next_episode_is_read_with_its_question(offline_home: Home):
    """The question ends one episode and its reply opens the next, whose words are not the
    query's: the reply is still read, after the question it answers."""
    ids = _turns(offline_home, [TURNS[2], TURNS[3], ("Joanna", "third_party",
                                                     "What books do you enjoy reading?"),
                                TURNS[1], TURNS[5], ("Sam", "third_party", "See you soon.")])
    with Store.open(offline_home.db_path) as store:
        _episode(store, ids[:3], "walks river cooking weekends books enjoy reading")
        _episode(store, ids[3:], "series adventures magic turtles")
    _, found = _block_of(offline_home, "Which books do people enjoy?", k=3)
    assert ids[3] in {h.event.id for h in found.hits}, found.hits


@pytest.mark.parametrize(("asker", "kind", "next_speaker"), [
    ("web", "tool", "Sam"),  # a tool's output is no one asking (a URL holds "?" too)
    ("Sam", "third_party", "Sam"),  # the asker going on is no reply
])
def test_no_reply_without_someone_asking_someone_else(offline_home: Home, asker: str,
                                                      kind: str, next_speaker: str):
    ids = _turns(offline_home, [(asker, kind, TURNS[0][2]),
                                (next_speaker, "third_party", TURNS[1][2]), *TURNS[2:]])
    _, found = _block_of(offline_home, "Which books do people enjoy?", k=2)
    assert ids[1] not in {h.event.id for h in found.hits}, found.hits


def test_a_reply_ranked_first_carries_its_questions_words_as_evidence(offline_home: Home):
    """When the reply outranks the question it answers, recall still decides the turn needs
    memory: the pair holds the query's words, the reply alone only its speaker's name."""
    ids = _turns(offline_home, [
        ("Joanna", "third_party", "What books do you enjoy reading, Nate?"),
        ("Nate", "third_party", "I love this series: adventures, magic and great characters."),
        *TURNS[2:]])
    block, found = _block_of(offline_home, "Which books does Nate enjoy?", k=2)
    assert found.hits[0].event.id == ids[1], found.hits
    assert found.skipped is None and block is not None, (found.skipped, found.evidence)
    assert f"[event {ids[1]} " in block
