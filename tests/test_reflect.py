"""The reflect ritual: archive, ladder, index cards, summaries, memory map, record, dry run.

Histories are built with explicit old timestamps; reflect runs in process against the real
store (and, for model summaries, the real client against the local fake Messages API), or as
the real `coworker reflect` command in a subprocess.
"""

from __future__ import annotations

import json
import logging
import random
import re
from datetime import UTC, datetime, timedelta

import pytest

from rituals import reflect as rf
from runtime.home import Home
from runtime.memory import memmap
from runtime.memory.memmap import render
from runtime.memory.search import search
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import promotions as pr
from runtime.store import rollups as rl

from .conftest import coworker, write_config
from .fakeapi import FakeMessagesAPI, error, forced_tool, text, tool_use

NOW = datetime.now(UTC).replace(microsecond=0)
GAP = timedelta(minutes=40)  # more than the ladder's 30-minute quiet gap
STEP = timedelta(minutes=3)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def note(body: str, t: datetime, kind: str = "note") -> Event:
    return Event(kind=kind, body=body, actor="coworker", author_kind="agent", ts=iso(t))


def add(home: Home, events: list[Event]) -> list[int]:
    with Store.open(home.db_path) as store:
        return ev.append_many(store, events)


def run(home: Home, store: Store, **kw) -> rf.ReflectReport:
    return rf.reflect(home, home.settings(), store, now=kw.pop("now", NOW), **kw)


def dump(store: Store, table: str = "rollups") -> list[tuple]:
    return [tuple(r) for r in store.query(f"SELECT * FROM {table} ORDER BY id")]


def rollups(store: Store, level: int | None = None) -> list[rl.Rollup]:
    rows = store.query("SELECT * FROM rollups ORDER BY id")
    out = [rl._from_row(r) for r in rows]
    return [r for r in out if level is None or r.level == level]


def all_history(store: Store) -> list[Event]:
    return list(ev.history_after(store, 0))


def fts_integrity(store: Store) -> None:
    with store.transaction() as db:
        db.execute("INSERT INTO events_fts(events_fts, rank) VALUES('integrity-check', 1)")
    assert store.scalar("PRAGMA integrity_check") == "ok"


def random_history(n: int, start: datetime, seed: int = 7, words: int = 6,
                   vocab_size: int = 200, gap_p: float = 0.12, tick_every: int = 0,
                   ) -> list[Event]:
    """n notes from `start`, 3 minutes apart, with a quiet gap (40 min) before about gap_p of
    them and a `tick` event every `tick_every` events; every body holds 'meeting'."""
    rng = random.Random(seed)
    vocab = [f"topic{i}" for i in range(vocab_size)]
    t = start
    out = []
    for i in range(n):
        t += GAP if rng.random() < gap_p else STEP
        if tick_every and i % tick_every == tick_every - 1:
            out.append(note(f"tick {i}", t, kind="tick"))
        else:
            out.append(note(" ".join(rng.sample(vocab, words)) + " meeting.", t))
    return out


# --- archive ------------------------------------------------------------------------------


def test_archive_moves_old_events_keeps_ids_and_stays_searchable(offline_home: Home):
    cutoff = NOW - timedelta(days=30)
    old = [note(f"old walrus note {i} about the harbour", cutoff - timedelta(days=5, minutes=i))
           for i in range(30)]
    old.append(note("just past the cutoff walrus", cutoff - timedelta(minutes=1)))
    new = [note(f"new note {i} about the harbour", NOW - timedelta(days=1, minutes=-i))
           for i in range(20)]
    new.append(note("just inside the window", cutoff + timedelta(minutes=1)))
    ids = add(offline_home, old + new)
    old_ids, new_ids = ids[:len(old)], ids[len(old):]

    with Store.open(offline_home.db_path) as store:
        before = {e.id: e for e in all_history(store)}
        report = run(offline_home, store)
        assert report.archived == len(old)
        assert ev.counts(store) == {"hot": len(new), "archived": len(old)}
        assert [r[0] for r in store.query("SELECT id FROM events_archive ORDER BY id")] == old_ids
        assert [r[0] for r in store.query("SELECT id FROM events ORDER BY id")] == new_ids
        after = {e.id: e for e in all_history(store)}
        assert sorted(after) == sorted(before) == sorted(ids)
        for i, e in after.items():  # nothing changed on the way, only where it lives
            b = before[i]
            assert (e.ts, e.kind, e.actor, e.author_kind, e.body, e.meta) == (
                b.ts, b.kind, b.actor, b.author_kind, b.body, b.meta)
            assert e.source == ("archive" if i in old_ids else "hot")

        got = ev.get(store, old_ids[3])
        assert got is not None and got.source == "archive" and got.body == old[3].body
        assert ev.get(store, new_ids[0]).source == "hot"
        hits = [h for h in search(store, "walrus", limit=50) if h.kind == "event"]
        assert sorted(h.id for h in hits) == old_ids
        assert {h.source for h in hits} == {"archive"}
        assert {h.id for h in search(store, "harbour", limit=100) if h.kind == "event"} >= \
            set(old_ids[:30]) | set(new_ids[:20])
        fts_integrity(store)

        again = run(offline_home, store)
        assert again.archived == 0
        assert ev.counts(store) == {"hot": len(new), "archived": len(old)}
        fts_integrity(store)


# --- the ladder -----------------------------------------------------------------------------


def is_boundary(prev: Event, e: Event) -> bool:
    gap = (datetime.fromisoformat(e.ts.replace("Z", "+00:00"))
           - datetime.fromisoformat(prev.ts.replace("Z", "+00:00")))
    return e.kind == "tick" or gap >= timedelta(minutes=30)


def check_ladder(store: Store, fanout: int) -> None:
    """Every invariant of the ladder, checked from the outside."""
    history = all_history(store)
    by_id = {e.id: e for e in history}
    ids = [e.id for e in history]
    hard = fanout + fanout // 2

    # level 1: contiguous, disjoint spans from the first event, 10..15 events, cut by the rule
    eps = rollups(store, 1)
    assert eps, "no episodes sealed"
    pos = 0
    for r in eps:
        first = ids[pos]
        assert r.first_event == first, (r, first)
        assert r.source_range == f"{r.first_event}-{r.last_event}"
        size = ids.index(r.last_event) - pos + 1
        assert fanout <= size <= hard, (r.id, size)
        block = [by_id[i] for i in ids[pos:pos + size]]
        # no quiet gap or tick inside the block once it had `fanout` events
        for j in range(fanout, size):
            assert not is_boundary(block[j - 1], block[j]), (r.id, block[j].id)
        nxt = by_id[ids[pos + size]]  # a sealed block always has a successor
        assert size == hard or is_boundary(block[-1], nxt), (r.id, size)
        assert r.first_ts == block[0].ts and r.last_ts == block[-1].ts
        pos += size
    # the unsealed tail: not yet a complete block
    tail = [by_id[i] for i in ids[pos:]]
    assert 1 <= len(tail) <= hard
    for j in range(fanout, len(tail)):
        assert not is_boundary(tail[j - 1], tail[j])

    # levels above: exactly `fanout` children each, in order, spans from first to last child
    level = 1
    while True:
        below = rollups(store, level)
        above = rollups(store, level + 1)
        assert len(above) == len(below) // fanout, (level, len(below), len(above))
        for k, parent in enumerate(above):
            kids = rl.children(store, parent.id)
            assert [c.id for c in kids] == [c.id for c in below[k * fanout:(k + 1) * fanout]]
            assert parent.source_range == f"{kids[0].first_event}-{kids[-1].last_event}"
            assert (parent.first_event, parent.last_event) == (kids[0].first_event,
                                                               kids[-1].last_event)
            assert parent.first_ts == kids[0].first_ts and parent.last_ts == kids[-1].last_ts
        assert all(c.parent_id is None for c in below[len(above) * fanout:])
        assert rl.count_unparented(store, level) < fanout
        if not above:
            break
        level += 1


def test_the_archive_stops_at_a_turn_to_take_up_again(offline_home: Home):
    """A month down: the turn that took the owner's message up was stopped. Reflect archives
    what came before that turn, never the turn or what it recorded, so the loop resumes it
    from the hot log; the message itself may go (it is read from the archive all the same).
    Once the turn is over, the rest archives as usual."""
    from runtime.store import inputs

    cutoff = NOW - timedelta(days=30)
    before = add(offline_home, [note(f"older note {i}", cutoff - timedelta(days=9, minutes=-i))
                                for i in range(5)])
    with Store.open(offline_home.db_path) as store:
        waiting = inputs.add_message(store, Event(
            kind="message", body="please answer Dana", actor="owner", author_kind="user",
            ts=iso(cutoff - timedelta(days=8))))
    turn = add(offline_home, [
        Event(kind="tick", body="tick", actor="coworker", author_kind="system",
              ts=iso(cutoff - timedelta(days=7)), meta={"inputs": [waiting]}),
        Event(kind="model_response", body="", actor="coworker", author_kind="agent",
              ts=iso(cutoff - timedelta(days=7, minutes=-1)), meta={"content": []})])
    with Store.open(offline_home.db_path) as store:
        assert run(offline_home, store).archived == len(before) + 1
        hot = {int(r[0]) for r in store.query("SELECT id FROM events")}
        assert set(turn) <= hot and not {waiting, *before} & hot
        assert [i.id for i in inputs.pending(store)] == [waiting]
        inputs.consume(store, [waiting], None)
        add(offline_home, [Event(kind="tick_end", body="done", actor="coworker",
                                 author_kind="system", tick_id=turn[0],
                                 meta={"outcome": "acted"})])
        assert run(offline_home, store).archived == 2


def test_the_loops_own_reflect_archives_past_a_message_no_turn_can_answer(offline_home: Home):
    """No model configured: a message told long ago waits, and every tick that runs reflect
    takes it up again. Reflect, run by the loop inside that tick, still archives the month."""
    from runtime.loop import Loop
    from runtime.store import inputs

    from .conftest import run_tick

    old = datetime.now(UTC) - timedelta(days=40)
    with Store.open(offline_home.db_path) as store:
        waiting = inputs.add_message(store, Event(
            kind="message", body="told with no model", actor="owner", author_kind="user",
            ts=iso(old)))
    notes = add(offline_home, [note(f"old note {i}", old + timedelta(days=1, minutes=i))
                               for i in range(5)])
    loop = Loop(offline_home, offline_home.settings())
    loop._ritual_due("reflect")
    run_tick(loop)
    loop.store.close()
    with Store.open(offline_home.db_path) as store:
        hot = {int(r[0]) for r in store.query("SELECT id FROM events")}
        assert not {waiting, *notes} & hot, "the old month went to the archive"
        assert [i.id for i in inputs.pending(store)] == [waiting]


def test_ladder_seals_complete_blocks_level_by_level_and_is_idempotent(offline_home: Home):
    # 1000 events over about 3.5 days that cross the 30-day cutoff, with quiet gaps and ticks:
    # part of the history is archived first, and the ladder reads both as one.
    start = NOW - timedelta(days=33)
    add(offline_home, random_history(1000, start, tick_every=17))
    with Store.open(offline_home.db_path) as store:
        report = run(offline_home, store)
        assert 0 < report.archived < 1000
        n1, n2 = len(rollups(store, 1)), len(rollups(store, 2))
        assert n1 >= 60 and n2 == n1 // 10 >= 6
        assert report.sealed == {1: n1, 2: n2}
        assert report.methods == {"extractive": n1 + n2}
        check_ladder(store, 10)
        # episodes were sealed over archived and hot events alike, as one history
        cut = min(r[0] for r in store.query("SELECT id FROM events"))
        assert rollups(store, 1)[0].first_event < cut <= rollups(store, 1)[-1].last_event

        # a rerun with nothing new changes nothing
        before = dump(store)
        again = run(offline_home, store)
        assert again.sealed == {} and again.archived == 0
        assert dump(store) == before

        # more history: only new blocks seal; sealed rows never change (parent_id only, once)
        covered = rl.episodes_cover_up_to(store)
        last_ts = datetime.fromisoformat(all_history(store)[-1].ts.replace("Z", "+00:00"))
        add(offline_home, random_history(400, last_ts, seed=11, tick_every=23))
        third = run(offline_home, store)
        assert third.sealed.get(1, 0) >= 25
        after = {r[0]: r for r in dump(store)}
        for row in before:
            if row[2] is not None:  # already had a parent: byte-identical
                assert after[row[0]] == row
            else:  # may have gained a parent, nothing else
                assert after[row[0]][:2] + after[row[0]][3:] == row[:2] + row[3:]
        new_eps = [r for r in rollups(store, 1) if r.id > max(b[0] for b in before)]
        assert new_eps[0].first_event == covered + 1
        assert len(after) - len(before) == sum(third.sealed.values())
        check_ladder(store, 10)


def test_ladder_climbs_while_a_level_has_fanout_unparented_rollups(offline_home: Home,
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rf, "LADDER_FANOUT", 3)
    write_config(offline_home.root)
    add(offline_home, random_history(300, NOW - timedelta(days=2), seed=3, gap_p=0.2))
    with Store.open(offline_home.db_path) as store:
        report = run(offline_home, store)
        per_level = rl.counts_per_level(store)
        assert max(per_level) >= 4, per_level
        assert report.sealed == per_level
        check_ladder(store, 3)
        before = dump(store)
        assert run(offline_home, store).sealed == {}
        assert dump(store) == before


def test_an_incomplete_history_seals_nothing(offline_home: Home):
    add(offline_home, random_history(9, NOW - timedelta(days=1), gap_p=0))
    with Store.open(offline_home.db_path) as store:
        report = run(offline_home, store)
        assert report.sealed == {} and rollups(store) == []
        rr = store.query("SELECT status FROM ritual_runs WHERE ritual = 'reflect'")
        assert [r[0] for r in rr] == ["ok"]


# --- index cards ----------------------------------------------------------------------------


def test_cards_hold_words_distinctive_to_their_span_not_words_common_to_all(
        offline_home: Home):
    # blocks of exactly 12 events: a quiet gap after every 12th event
    rng = random.Random(5)
    vocab = [f"item{i}" for i in range(80)]
    t = NOW - timedelta(days=3)
    events = []
    for i in range(240):
        t += GAP if i % 12 == 0 else STEP
        body = " ".join(rng.sample(vocab, 6)) + " meeting"
        if 40 <= i <= 42:  # block 3 (events 37..48) alone mentions zanzibar
            body += " zanzibar shipment"
        events.append(note(body + ".", t))
    ids = add(offline_home, events)
    with Store.open(offline_home.db_path) as store:
        run(offline_home, store)
        eps = rollups(store, 1)
        assert [(r.first_event, r.last_event) for r in eps[:4]] == [
            (ids[0], ids[11]), (ids[12], ids[23]), (ids[24], ids[35]), (ids[36], ids[47])]
        zan = eps[3]
        assert "zanzibar" in zan.terms.split(), zan.terms
        assert all("zanzibar" not in r.terms.split() for r in eps if r.id != zan.id)
        for r in rollups(store):
            assert r.terms, r
            assert "meeting" not in r.terms.split(), (r.id, r.terms)
        # the card is indexed: a search for the word finds the rollup
        found = [h for h in search(store, "zanzibar", limit=20) if h.kind == "rollup"]
        assert zan.id in [h.id for h in found]


# --- NULL provenance --------------------------------------------------------------------------


def hand_sealed_episodes(store: Store, n: int = 10, linked: set[int] = frozenset()) -> list[int]:
    out = []
    for i in range(n):
        span = (i * 10 + 1, i * 10 + 10) if i in linked else (None, None)
        out.append(rl.seal(
            store, level=1, first_event=span[0], last_event=span[1],
            source_range=f"{span[0]}-{span[1]}" if i in linked else None,
            first_ts=iso(NOW - timedelta(days=3, hours=-i)),
            last_ts=iso(NOW - timedelta(days=3, hours=-i, minutes=-30)),
            title=f"legacy episode {i}",
            body=f"Legacy episode {i} about the lighthouse, written before provenance.",
            terms=f"lighthouse legacy{i}", method="legacy"))
    return out


def test_unlinked_children_give_a_null_parent_span_with_a_warning(offline_home: Home, caplog):
    with Store.open(offline_home.db_path) as store:
        kids = hand_sealed_episodes(store)
        caplog.set_level(logging.WARNING)
        report = run(offline_home, store)
        parents = rollups(store, 2)
        assert len(parents) == 1
        p = parents[0]
        assert p.source_range is None and p.first_event is None and p.last_event is None
        assert [c.id for c in rl.children(store, p.id)] == kids
        assert report.null_spans == 1 and report.sealed == {2: 1}
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                    and "ADR-0008" in r.getMessage()]
        assert warnings, [r.getMessage() for r in caplog.records]
        text = offline_home.memory_map.read_text()
        line = next(ln for ln in text.splitlines() if f"**L2 #{p.id}**" in ln)
        assert "unlinked" in line
        assert all("unlinked" in ln for ln in text.splitlines() if "**L1 #" in ln)


def test_one_unlinked_child_is_enough_for_a_null_parent_span(offline_home: Home, caplog):
    add(offline_home, random_history(100, NOW - timedelta(days=2), gap_p=0))
    with Store.open(offline_home.db_path) as store:
        hand_sealed_episodes(store, linked=set(range(10)) - {4})
        caplog.set_level(logging.WARNING)
        report = run(offline_home, store)
        p = rollups(store, 2)[0]
        assert p.source_range is None  # never a span faked from the linked nine
        assert report.null_spans == 1
        assert any("ADR-0008" in r.getMessage() for r in caplog.records
                   if r.levelno == logging.WARNING)


# --- model summaries --------------------------------------------------------------------------

SPAN_WORDS = ("the parser crashed on emoji input during the nightly build; "
              "Mara filed ticket about the tokenizer regression")


def parser_history(home: Home, n: int = 50, start: datetime | None = None) -> list[int]:
    # 3 minutes apart, no gaps: blocks of 15, so 50 events make 3 episodes and a tail of 5
    t = start or NOW - timedelta(days=2)
    return add(home, [note(f"{SPAN_WORDS}.", t + i * STEP) for i in range(n)])


def answer(title: str, summary: str) -> dict:
    """The answer to reflect's forced `write_summary` call, as the real API gives it."""
    return tool_use("write_summary", {"title": title, "summary": summary})


FAITHFUL = answer("Parser crash on emoji", "The parser crashed on emoji input during the "
                  "nightly build; Mara filed a ticket about the tokenizer regression.")


def methods(home: Home) -> list[str]:
    with Store.open(home.db_path) as store:
        return [r.method for r in rollups(store, 1)]


def summary_requests(api: FakeMessagesAPI) -> list[dict]:
    """The requests that are not reflect's keyword calls (tests/test_keywords.py has those)."""
    return [r for r in api.requests if forced_tool(r) != "record_keywords"]


def no_lessons(home: Home, api: FakeMessagesAPI) -> None:
    """These tests count summary calls: turn promotions off so reflect asks for no lessons."""
    write_config(home.root, api.url, memory={"memory_promotions": "off"})


def test_model_summaries_are_used_when_they_are_faithful(home: Home, api: FakeMessagesAPI):
    no_lessons(home, api)
    ids = parser_history(home)
    api.default = FAITHFUL
    report = rf.run(home, home.settings())
    assert report.sealed == {1: 3}
    assert methods(home) == ["fake-model"] * 3
    assert report.summary_calls == 3 and report.summary_fallbacks == 0
    # then one keyword call for the 3 new episodes, from what is left of the budget
    assert [forced_tool(r) for r in api.requests] == ["write_summary"] * 3 + ["record_keywords"]
    with Store.open(home.db_path) as store:
        r = rollups(store, 1)[0]
    assert r.title == "Parser crash on emoji" and r.body.startswith("The parser crashed")
    prompt = json.dumps(api.bodies[0]["messages"])
    assert f"[#{ids[0]}]" in prompt and "emoji input" in prompt


def test_summaries_and_lessons_are_asked_for_through_a_forced_tool(home: Home,
                                                                   api: FakeMessagesAPI):
    """No pattern digs an answer out of text: each request forces one tool, whose schema
    names the fields the answer must fill."""
    write_config(home.root, api.url, memory={"memory_promotions": "gated"})
    ids = parser_history(home, 20)  # one episode: one summary call, then one lessons call
    api.enqueue(FAITHFUL, tool_use("record_lessons", {"lessons": [
        {"text": "The parser crashed on emoji input", "source_events": [ids[0]],
         "confidence": 0.9}]}))
    report = rf.run(home, home.settings())
    assert [forced_tool(r) for r in api.requests] == ["write_summary", "record_lessons",
                                                      "record_keywords"]
    summary, lessons, _ = api.bodies
    assert [t["name"] for t in summary["tools"]] == ["write_summary"]
    schema = summary["tools"][0]["input_schema"]
    assert schema["required"] == ["title", "summary"]
    assert schema["additionalProperties"] is False
    item = lessons["tools"][0]["input_schema"]["properties"]["lessons"]["items"]
    assert item["required"] == ["text", "source_events"]
    assert methods(home) == ["fake-model"]
    assert report.promotions == "queued 1", report.promotions  # "gated": it waits for you
    with Store.open(home.db_path) as store:
        assert [p.text for p in pr.listing(store)] == ["The parser crashed on emoji input"]


BAD_ARGUMENTS = {
    "missing-field": {"title": "Parser crash on emoji"},
    "wrong-type": {"title": "Parser crash on emoji",
                   "summary": ["The parser crashed on emoji input during the nightly build."]},
    "extra-junk": {"title": "Parser crash on emoji", "summary": "The parser crashed on emoji "
                   "input during the nightly build.", "confidence": "high"},
    "not-an-object": "The parser crashed on emoji input during the nightly build.",
}


@pytest.mark.parametrize("bad", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_a_summary_call_with_invalid_arguments_falls_back_to_extractive(
        home: Home, api: FakeMessagesAPI, caplog, bad):
    """Arguments the schema does not allow are an unusable answer, exactly like garbage:
    that rollup is extractive (nothing of the answer is written), one failure is counted, and
    the run says so once at WARNING."""
    no_lessons(home, api)
    parser_history(home)
    api.enqueue(tool_use("write_summary", bad))
    api.default = FAITHFUL
    caplog.set_level(logging.INFO)
    report = rf.run(home, home.settings())
    assert methods(home) == ["extractive", "fake-model", "fake-model"]
    assert report.summary_calls == 3 and report.summary_fallbacks == 1
    with Store.open(home.db_path) as store:
        first = rollups(store, 1)[0]
    # no half of the bad answer was kept: the span's own sentence, citing its event
    assert first.title != "Parser crash on emoji"
    assert first.body.startswith("the parser crashed on emoji input") and "[#" in first.body
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("1 of 3 "), warnings
    assert "extractive" in warnings[0] and "ValueError" in warnings[0], warnings
    assert "write_summary" in warnings[0] and "does not validate" in warnings[0], warnings


@pytest.mark.parametrize("reply", [
    text(json.dumps({"title": "Parser crash on emoji", "summary": "The parser crashed on emoji "
                     "input during the nightly build."})),
    tool_use("note", {"title": "Parser crash on emoji", "summary": "The parser crashed on "
                      "emoji input during the nightly build."}),
], ids=["json-in-text", "another-tool"])
def test_a_summary_not_given_through_the_forced_tool_falls_back(home: Home,
                                                                api: FakeMessagesAPI,
                                                                caplog, reply):
    """Even a faithful summary is not dug out of text or another tool's call."""
    no_lessons(home, api)
    parser_history(home)
    api.enqueue(reply)
    api.default = FAITHFUL
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    assert methods(home) == ["extractive", "fake-model", "fake-model"]
    assert report.summary_fallbacks == 1
    assert any("did not call" in r.getMessage() and "write_summary" in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING), \
        [r.getMessage() for r in caplog.records]


BAD_LESSONS = {
    "missing-field": {},
    "wrong-type": {"lessons": "The parser crashed on emoji input"},
    "extra-junk": {"lessons": [], "notes": "nothing else"},
    "text-answer": None,  # the answer is text, not the forced call
}


@pytest.mark.parametrize("bad", BAD_LESSONS.values(), ids=BAD_LESSONS.keys())
def test_a_lessons_call_with_invalid_arguments_proposes_nothing(home: Home,
                                                                api: FakeMessagesAPI, caplog,
                                                                bad,
                                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 0)
    write_config(home.root, api.url, memory={"memory_promotions": "auto"})
    parser_history(home, 20)
    api.enqueue(text('[{"text": "x", "source_events": [1]}]') if bad is None
                else tool_use("record_lessons", bad))
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    assert len(api.requests) == 1
    assert report.promotions == "lessons call failed: ValueError", report.promotions
    with Store.open(home.db_path) as store:
        assert store.scalar("SELECT COUNT(*) FROM promotions") == 0
        assert store.scalar("SELECT status FROM ritual_runs WHERE ritual = 'reflect'") == "ok"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("lessons call failed (ValueError: ")


def test_one_malformed_lesson_is_skipped_and_the_rest_go_through_the_gate(
        home: Home, api: FakeMessagesAPI, caplog, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 0)
    write_config(home.root, api.url, memory={"memory_promotions": "gated"})
    ids = parser_history(home, 20)
    good = {"text": "The parser crashed on emoji input", "source_events": [ids[0]],
            "confidence": 0.9}
    api.enqueue(tool_use("record_lessons", {"lessons": [
        {**good, "confidence": "very"},  # wrong type
        {"text": "Mara filed a ticket"},  # no sources
        {**good, "why": "it matters"},  # a field nobody asked for
        {**good, "source_events": [2**70]},  # past SQLite's range
        "Mara filed a ticket about the tokenizer",  # not an object
        good]}))
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    assert report.promotions == "malformed 5, queued 1", report.promotions
    with Store.open(home.db_path) as store:
        assert [p.text for p in pr.listing(store)] == [good["text"]]
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().endswith("; skipped")]
    assert len(skipped) == 5 and all("does not validate" in m for m in skipped)


def test_a_summary_citing_ids_as_the_prompt_asks_passes_the_check(home: Home,
                                                                  api: FakeMessagesAPI):
    ids = parser_history(home)
    # the prompt asks for citations like [#12]; cited ids are not unsupported words
    for k in range(3):  # each episode's answer cites ids from its own span
        cited = " ".join(f"[#{ids[k * 15 + j]}]" for j in (2, 7, 11, 14))
        api.enqueue(answer("Emoji crash", f"The parser crashed on emoji input {cited}."))
    report = rf.run(home, home.settings())
    assert report.summary_fallbacks == 0
    assert methods(home) == ["fake-model"] * 3


def test_an_unfaithful_summary_falls_back_to_extractive(home: Home, api: FakeMessagesAPI,
                                                        caplog):
    parser_history(home)
    api.enqueue(answer("Quarterly budget review", "Finance approved the spring marketing "
                       "budget and hired two contractors."))
    api.default = FAITHFUL
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    assert methods(home) == ["extractive", "fake-model", "fake-model"]
    assert report.summary_fallbacks == 1 and report.summary_calls == 3
    with Store.open(home.db_path) as store:
        first = rollups(store, 1)[0]
    assert "budget" not in (first.title + first.body).lower()
    assert any(r.levelno == logging.WARNING and "extractive" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_failed_call_falls_back_to_extractive_and_reflect_completes(home: Home,
                                                                      api: FakeMessagesAPI,
                                                                      caplog):
    write_config(home.root, api.url, model={"max_retries": 1},
                 memory={"memory_promotions": "off"})  # no lessons call: summaries only
    parser_history(home)
    api.enqueue(error(500), error(500))  # the first call and its one retry
    api.default = FAITHFUL
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    assert len(summary_requests(api)) == 4
    assert methods(home) == ["extractive", "fake-model", "fake-model"]
    assert report.summary_fallbacks == 1
    assert any(r.levelno == logging.WARNING and "extractive" in r.getMessage()
               for r in caplog.records)
    with Store.open(home.db_path) as store:
        status = store.scalar("SELECT status FROM ritual_runs WHERE ritual = 'reflect'")
    assert status == "ok"
    assert home.memory_map.exists()


def test_the_summary_budget_caps_model_calls_per_run(home: Home, api: FakeMessagesAPI,
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 2)
    write_config(home.root, api.url,
                 memory={"memory_promotions": "off"})
    parser_history(home)
    api.default = FAITHFUL
    report = rf.run(home, home.settings())
    assert len(api.requests) == 2 and report.summary_calls == 2
    assert methods(home) == ["fake-model", "fake-model", "extractive"]
    # a new run has a new budget: the next block gets a model summary again
    parser_history(home, 40, start=NOW - timedelta(days=1))  # the tail of 5 + 40: 2 blocks
    rf.run(home, home.settings())
    assert len(api.requests) == 4
    assert methods(home)[3:] == ["fake-model", "fake-model"]


GARBAGE = text("I'm sorry, I can't summarise that right now.")  # text, not the forced call
UNRELATED = answer("Quarterly budget review", "Finance approved the spring marketing budget "
                   "and hired two contractors.")  # JSON, but not about its source


@pytest.mark.parametrize("reply", [GARBAGE, UNRELATED], ids=["text-answer", "unfaithful"])
def test_three_failed_summaries_in_a_row_make_the_rest_of_the_run_extractive(
        home: Home, api: FakeMessagesAPI, caplog, reply):
    """A model that answers garbage once cost 31 calls and 30 identical WARNING lines a run:
    after 3 failures in a row reflect stops asking it (summaries and lessons alike) and says
    so once."""
    parser_history(home, 200)  # 13 episodes and a chapter: far more than 3 summaries
    api.default = reply
    caplog.set_level(logging.INFO)
    report = rf.run(home, home.settings())  # promotions "gated": a lessons call is possible
    assert len(api.requests) == 3, [b["messages"][0]["content"][:60] for b in api.bodies]
    assert report.summary_calls == 3 and report.summary_fallbacks == 3
    assert report.sealed == {1: 13, 2: 1}
    assert set(methods(home)) == {"extractive"}
    assert "3 times in a row" in report.summaries
    assert report.promotions.startswith("skipped")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "3 times in a row" in warnings[0] and warnings[0].endswith("extractive"), warnings
    with Store.open(home.db_path) as store:
        row = store.query("SELECT status, stats FROM ritual_runs WHERE ritual = 'reflect' "
                          "ORDER BY id DESC LIMIT 1")[0]
    assert row["status"] == "ok"
    assert "3 times in a row" in json.loads(row["stats"])["summaries"]
    # the next run has a fresh streak: it asks the model again
    api.default = FAITHFUL
    parser_history(home, 15, start=NOW - timedelta(days=1))  # the tail of 5 + 15: one block
    report = rf.run(home, home.settings())
    assert report.summary_calls >= 1 and report.summary_fallbacks == 0
    assert methods(home)[-1] == "fake-model"


def test_failures_that_are_not_in_a_row_never_stop_the_model(home: Home, api: FakeMessagesAPI,
                                                              caplog):
    no_lessons(home, api)
    parser_history(home, 95)  # 6 episodes
    api.enqueue(GARBAGE, GARBAGE, FAITHFUL, UNRELATED, GARBAGE)
    api.default = FAITHFUL
    caplog.set_level(logging.INFO)
    report = rf.run(home, home.settings())
    assert len(summary_requests(api)) == 6 and report.summary_calls == 6
    assert report.summary_fallbacks == 4
    assert methods(home) == ["extractive", "extractive", "fake-model", "extractive",
                             "extractive", "fake-model"]
    assert report.summaries.startswith("4 of 6 ") and "extractive" in report.summaries
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("4 of 6 "), warnings


def test_a_malformed_memory_md_costs_the_promotions_not_the_run(home: Home,
                                                                 api: FakeMessagesAPI, caplog,
                                                                 monkeypatch: pytest.MonkeyPatch):
    """The gate refuses to read a MEMORY.md with a malformed line (doctor FAILs it); reflect
    then proposes nothing, says why once, and still seals and records an ok run."""
    monkeypatch.setattr(rf, "SUMMARY_CALLS_PER_RUN", 0)
    write_config(home.root, api.url)
    ids = parser_history(home, 20)
    home.memory_md.write_text(home.memory_md.read_text(encoding="utf-8")
                              + "- [x1] a line that looks like an entry\n", encoding="utf-8")
    api.enqueue(tool_use("record_lessons", {"lessons": [{
        "text": "The parser crashed on emoji input", "source_events": [ids[0]],
        "confidence": 0.9}]}))
    caplog.set_level(logging.WARNING)
    report = rf.run(home, home.settings())
    assert api.requests == []  # no lessons asked for: the gate could not use them
    assert report.promotions.startswith("MEMORY.md"), report.promotions
    assert "cannot be read" in report.promotions, report.promotions
    assert "line 6" in report.promotions and "coworker doctor" in report.promotions
    assert report.sealed == {1: 1}
    with Store.open(home.db_path) as store:
        assert store.scalar("SELECT status FROM ritual_runs WHERE ritual = 'reflect' "
                            "ORDER BY id DESC LIMIT 1") == "ok"
        assert store.scalar("SELECT COUNT(*) FROM promotions") == 0
    assert sum("MEMORY.md" in r.getMessage() and "cannot be read" in r.getMessage()
               for r in caplog.records) == 1


# --- memory map ------------------------------------------------------------------------------


def test_memory_map_layout_totals_and_determinism(offline_home: Home):
    events = random_history(330, NOW - timedelta(days=31), seed=9)
    # a long body with no sentence break, so its first sentence must be cut
    events[30] = note(" ".join(f"quasar{i}" for i in range(30)),
                      datetime.fromisoformat(events[30].ts.replace("Z", "+00:00")))
    add(offline_home, events)
    with Store.open(offline_home.db_path) as store:
        with store.transaction() as db:
            db.execute("INSERT INTO promotions(ts, text, confidence, status, reason) VALUES "
                       "(?, 'Mara owns the tokenizer. She reviews every parser change.', 0.7, "
                       "'queued', 'confidence below the auto threshold')", (iso(NOW),))
            db.execute("INSERT INTO promotions(ts, text, confidence, status, reason) VALUES "
                       "(?, 'An applied promotion never shows here', 0.9, 'applied', 'ok')",
                       (iso(NOW),))
        report = run(offline_home, store)
        text = offline_home.memory_map.read_text(encoding="utf-8")
        assert text == render(store, "coworker") == render(store, "coworker")
        assert report.map_bytes == len(text.encode("utf-8"))
        all_r = rollups(store)
        counts = ev.counts(store)
        per_level = rl.counts_per_level(store)

    lines = text.splitlines()
    assert lines[0] == "# Memory map: coworker"
    assert "generated" in lines[2].lower() and "no code reads" in lines[2].lower()
    # queued promotions come first, before the ladder
    promo = next(i for i, ln in enumerate(lines) if "promotion #1" in ln)
    ladder_at = lines.index("## The ladder")
    assert promo < ladder_at
    assert "Mara owns the tokenizer." in lines[promo]
    assert "An applied promotion" not in text

    # the ladder: every rollup once, L2 before its L1 children, children indented under it
    where = {}
    for r in all_r:
        found = [i for i, ln in enumerate(lines) if f"**L{r.level} #{r.id}**" in ln]
        assert len(found) == 1, (r.id, found)
        where[r.id] = found[0]
        assert found[0] > ladder_at
    l2 = [r for r in all_r if r.level == 2]
    assert len(l2) >= 2
    for p in l2:
        assert lines[where[p.id]].startswith(f"- **L2 #{p.id}**")
        kids = [r for r in all_r if r.parent_id == p.id]
        assert [where[k.id] for k in kids] == list(range(where[p.id] + 1,
                                                         where[p.id] + 1 + len(kids)))
        for k in kids:
            assert lines[where[k.id]].startswith(f"  - **L1 #{k.id}** ")
            assert f"events {k.source_range}" in lines[where[k.id]]
    for r in all_r:  # first sentences: at most 120 characters, a prefix of the body
        line = lines[where[r.id]]
        first = line.split(f" — {r.title}: ", 1)[1]
        assert len(first) <= 120, (r.id, len(first))
        assert " ".join(r.body.split()).startswith(first.rstrip("…"))
    assert any(line.endswith("…") for line in lines), "the long body was not cut"

    totals = lines.index("## Totals")
    assert totals > max(where.values())
    assert f"- events: {counts['hot']} hot, {counts['archived']} archived" in lines
    assert counts["archived"] > 0 and counts["hot"] > 0
    assert "- rollups: " + ", ".join(f"level {k}: {v}" for k, v in per_level.items()) in lines
    assert any(ln.startswith("- last reflect:") and f"archived {report.archived}" in ln
               for ln in lines)
    footer = "\n".join(lines[totals:])
    assert "coworker walk" in footer.split("## Drilling down", 1)[1]


def test_first_sentence_is_at_most_120_characters():
    assert memmap.first_sentence("Short one. Then more.") == "Short one."
    long = "word " * 80
    assert len(memmap.first_sentence(long)) == 120
    late = "x" * 150 + ". tail"
    assert len(memmap.first_sentence(late)) <= 120


# --- the record and the dry run ----------------------------------------------------------------


def test_a_run_is_recorded_with_its_figures(offline_home: Home):
    add(offline_home, random_history(150, NOW - timedelta(days=40), seed=2))
    with Store.open(offline_home.db_path) as store:
        report = run(offline_home, store)
        rows = store.query("SELECT * FROM ritual_runs WHERE ritual = 'reflect'")
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "ok" and row["finished_at"] and row["started_at"]
    stats = json.loads(row["stats"])
    assert stats["archived"] == report.archived == 150
    assert stats["sealed"] == {str(k): v for k, v in report.sealed.items()}
    assert stats["sealed"]["1"] >= 10 and stats["sealed"]["2"] >= 1
    assert "seconds" in stats


def counts_of(home: Home) -> dict[str, int]:
    with Store.open(home.db_path) as store:
        return {t: int(store.scalar(f"SELECT COUNT(*) FROM {t}")) for t in (
            "events", "events_archive", "rollups", "ritual_runs", "promotions")}


def test_dry_run_reports_what_the_real_run_does_and_writes_nothing(offline_home: Home):
    add(offline_home, random_history(300, NOW - timedelta(days=300), seed=4))
    add(offline_home, random_history(40, datetime.now(UTC) - timedelta(days=1), seed=6))
    before = counts_of(offline_home)
    db_bytes = offline_home.db_path.read_bytes()

    r = coworker("reflect", "--dry-run")
    assert r.returncode == 0, r.stderr
    m = re.search(r"would archive (\d+) events and seal (.*); nothing written", r.stdout)
    assert m, r.stdout
    dry = json.loads(coworker("reflect", "--dry-run", "--json").stdout)
    assert dry["dry_run"] is True
    assert int(m.group(1)) == dry["archived"] == 300
    assert dry["sealed"]["1"] >= 20 and dry["sealed"]["2"] >= 2
    assert counts_of(offline_home) == before
    assert before["ritual_runs"] == 0 and before["rollups"] == 0
    assert not offline_home.memory_map.exists()
    assert offline_home.db_path.read_bytes() == db_bytes

    real = coworker("reflect", "--json")
    assert real.returncode == 0, real.stderr
    done = json.loads(real.stdout)
    assert done["archived"] == dry["archived"]
    assert done["sealed"] == dry["sealed"]
    after = counts_of(offline_home)
    assert after["events_archive"] == 300 and after["events"] == 40
    assert after["rollups"] == sum(dry["sealed"].values())
    assert after["ritual_runs"] == 1
    assert offline_home.memory_map.exists()

    # with the ladder part-built, the dry run still predicts the next real run exactly
    add(offline_home, random_history(260, datetime.now(UTC) - timedelta(hours=12), seed=8))
    dry2 = json.loads(coworker("reflect", "--dry-run", "--json").stdout)
    done2 = json.loads(coworker("reflect", "--json").stdout)
    assert dry2["sealed"] == done2["sealed"] and dry2["sealed"]
    assert dry2["archived"] == done2["archived"] == 0


def test_a_ladder_larger_than_the_map_shows_its_newest_rollups_and_counts_the_rest(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    """A year's ladder has tens of thousands of rollups: the map shows at most MAP_NODES, the
    roots and then the newest children rung by rung, and says how many it left out."""
    add(offline_home, random_history(330, NOW - timedelta(days=31), seed=9))
    with Store.open(offline_home.db_path) as store:
        run(offline_home, store)
        full = render(store, "coworker")
        monkeypatch.setattr(memmap, "MAP_NODES", 6)
        short = render(store, "coworker")
        all_r = rollups(store)
    assert len(all_r) > 6 and "not shown here" not in full
    ladder = [ln for ln in short.splitlines() if re.match(r"^\s*- \*\*L\d+ #\d+\*\*", ln)]
    assert len(ladder) == 6 and all(ln in full.splitlines() for ln in ladder), ladder
    assert f" {len(all_r) - 6} older rollups" in short, short
    top = max(r.level for r in all_r)
    newest_top = max(r.id for r in all_r if r.level == top)
    assert ladder[0].startswith(f"- **L{top} #{newest_top}**"), ladder  # coarsest, newest first
