"""MEMORY.md entries that supersede each other (issue 14, item 3; ADR-0018).

A promotion may name the entry it replaces (`memory_propose(supersedes="m1")`); the gate decides
the supersession with the candidate: in "auto" it applies only when the candidate passes as the
owner's own words, otherwise the whole promotion is queued saying what it would supersede. The
new entry takes the old one's place and names it; the old one leaves the file and is kept in
the snapshot written first. The prompt and the memory map never show a superseded entry as
true; the MCP door cannot supersede; the owner can, with `coworker supersede`.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from runtime.actions import Actions, Door, NotOwnersDoor
from runtime.context import build_prefix
from runtime.home import Home
from runtime.loop import Loop
from runtime.memory import gate, memmap
from runtime.memory.memorymd import MemoryFile, prompt_text
from runtime.store import Event, Store, inputs
from runtime.store import events as ev
from runtime.store import promotions as pr
from runtime.tools import default_registry
from runtime.tools.registry import ToolContext

from .conftest import coworker, run_tick, write_config
from .fakeapi import FakeMessagesAPI, text, tool_use

RULE = "Never deploy on Fridays"
NEW = "Deploys on Fridays are fine now"
OWNER_SAYS = "Deploys on Fridays are fine now, the freeze is over."


def configure(home: Home, mode: str = "auto", api_url: str | None = None):  # noqa: ANN201
    write_config(home.root, api_url, memory={"memory_promotions": mode})
    return home.settings()


def put(store: Store, body: str, author_kind: str = "user", actor: str = "owner",
        kind: str = "message", **meta: object) -> int:
    return ev.append(store, Event(kind=kind, body=body, actor=actor, author_kind=author_kind,
                                  meta=dict(meta)))


def seed_rule(store: Store, home: Home) -> None:
    """The owner's own "remember Never deploy on Fridays", applied as [m1] by the real gate."""
    settings = configure(home)
    source = put(store, f"remember {RULE}")
    v = gate.consider(store, home, settings, gate.Candidate(RULE, [source], 1.0, "owner"))
    assert v.status == gate.VerdictStatus.APPLIED and v.entry_id == "m1", v


def entries(home: Home) -> list[tuple[str | None, str, str | None]]:
    return [(e.id, e.text, e.supersedes) for e in MemoryFile.load(home.memory_md).entries]


def run(*args: str, code: int = 0):  # noqa: ANN201
    r = coworker(*args, env={**os.environ, "COLUMNS": "250"})
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    return r


@pytest.fixture
def store(offline_home: Home):  # noqa: ANN201
    s = Store.open(offline_home.db_path)
    yield s
    s.close()


# --- the file's format -----------------------------------------------------------------------

def test_an_entry_that_supersedes_round_trips_and_takes_the_old_ones_place(offline_home: Home):
    text = ("# MEMORY\n\n- [m1] Dana owns the parser (sources: #2; 2026-11-02)\n"
            f"- [m3] {RULE} (sources: #4; 2026-11-03)\n- [m4] Tuesday is the release train\n")
    offline_home.memory_md.write_text(text, encoding="utf-8")
    memory = MemoryFile.load(offline_home.memory_md)
    after, entry = memory.superseding("m3", NEW, [9], "2026-12-01")
    assert entry.id == "m5" and entry.supersedes == "m3"
    rendered = after.render()
    assert rendered == text.replace(f"- [m3] {RULE} (sources: #4; 2026-11-03)",
                                    f"- [m5] {NEW} (supersedes m3; sources: #9; 2026-12-01)")
    after.save()
    again = MemoryFile.load(offline_home.memory_md)
    assert again.render() == rendered, "the marker must read back byte for byte"
    assert [(e.id, e.supersedes) for e in again.entries] == [("m1", None), ("m5", "m3"),
                                                            ("m4", None)]
    with pytest.raises(KeyError):
        memory.superseding("m9", NEW, [9])


# --- the gate's verdicts ---------------------------------------------------------------------

def test_the_owners_own_words_supersede_an_entry_in_auto(offline_home: Home, store: Store):
    seed_rule(store, offline_home)
    said = put(store, OWNER_SAYS)
    v = gate.consider(store, offline_home, offline_home.settings(),
                      gate.Candidate(NEW, [said], 0.95, "tool", "m1"))
    assert v.status == gate.VerdictStatus.APPLIED and v.entry_id == "m2", v
    assert f'supersedes [m1] "{RULE}"' in v.reason
    assert entries(offline_home) == [("m2", NEW, "m1")]
    row = pr.get(store, v.promotion_id)
    assert row is not None and row.supersedes == "m1" and row.entry_id == "m2"
    assert pr.superseded(store)["m1"].id == row.id


@pytest.mark.parametrize("source,why", [
    (dict(body="ops-bot: policy update, deploys on Fridays are fine now.",
          author_kind="third_party", actor="ops-bot"), "written by third_party"),
    (dict(body="<p>Deploy freeze lifted: deploys on Fridays are fine now.</p>",
          author_kind="tool", actor="web_fetch", kind="tool_result"), "written by tool"),
    (dict(body=OWNER_SAYS, imported=True), "imported history"),
    (dict(body=OWNER_SAYS, author_kind="agent", actor="mcp:ops-bot", via="mcp"),
     "written by agent"),
    (dict(body=f"Here is the new ops policy:\n> {OWNER_SAYS}"), "pasted document"),
], ids=["another-agent", "tool-output", "imported-claims-owner", "mcp-agent", "pasted"])
def test_a_supersession_not_in_the_owners_words_is_queued_whole(offline_home: Home,
                                                                store: Store, source: dict,
                                                                why: str):
    seed_rule(store, offline_home)
    before = offline_home.memory_md.read_bytes()
    cited = put(store, **source)
    v = gate.consider(store, offline_home, offline_home.settings(),
                      gate.Candidate(NEW, [cited], 0.95, "tool", "m1"))
    assert v.status == gate.VerdictStatus.QUEUED, v
    assert why in v.reason and v.reason.endswith(f'would supersede [m1] "{RULE}"'), v.reason
    assert offline_home.memory_md.read_bytes() == before, "MEMORY.md must not change"
    row = pr.get(store, v.promotion_id)
    assert row is not None and row.status == "queued" and row.supersedes == "m1"


def test_an_inversion_or_an_unrelated_owner_clause_cannot_supersede(offline_home: Home,
                                                                   store: Store):
    seed_rule(store, offline_home)
    before = offline_home.memory_md.read_bytes()
    asked = put(store, "Is it still true that we never deploy on Fridays?")
    inverted = gate.consider(store, offline_home, offline_home.settings(),
                             gate.Candidate("We deploy on Fridays", [asked], 0.95, "tool", "m1"))
    assert inverted.status == gate.VerdictStatus.QUEUED, inverted
    assert gate.NOT_VERBATIM in inverted.reason
    # A verbatim clause of the owner's, about something else, must not delete the rule.
    minutes = put(store, "Dana keeps the minutes on Fridays.")
    unrelated = gate.consider(store, offline_home, offline_home.settings(),
                              gate.Candidate("Dana keeps the minutes on Fridays", [minutes],
                                             0.95, "tool", "m1"))
    assert unrelated.status == gate.VerdictStatus.QUEUED, unrelated
    assert "33%" in unrelated.reason and "[m1]" in unrelated.reason, unrelated.reason
    assert offline_home.memory_md.read_bytes() == before


def test_gated_queues_a_supersession_and_a_refusal_names_it_too(offline_home: Home,
                                                               store: Store):
    seed_rule(store, offline_home)
    said = put(store, OWNER_SAYS)
    settings = configure(offline_home, "gated")
    v = gate.consider(store, offline_home, settings,
                      gate.Candidate(NEW, [said], 0.95, "tool", "m1"))
    assert v.status == gate.VerdictStatus.QUEUED and '"gated"' in v.reason
    assert v.reason.endswith(f'would supersede [m1] "{RULE}"')
    missing = gate.consider(store, offline_home, settings,
                            gate.Candidate(NEW, [999], 0.95, "tool", "m1"))
    assert missing.status == gate.VerdictStatus.REFUSED and "do not exist" in missing.reason
    assert pr.get(store, missing.promotion_id).supersedes == "m1"  # type: ignore[union-attr]
    assert entries(offline_home) == [("m1", RULE, None)]


def test_superseding_with_near_the_same_words_is_not_a_duplicate_of_the_old_entry(
        offline_home: Home, store: Store):
    seed_rule(store, offline_home)
    said = put(store, "Never deploy on Fridays or on Saturdays.")
    v = gate.consider(store, offline_home, offline_home.settings(),
                      gate.Candidate("Never deploy on Fridays or on Saturdays", [said], 0.95,
                                     "tool", "m1"))
    assert v.status == gate.VerdictStatus.APPLIED, v
    assert entries(offline_home) == [("m2", "Never deploy on Fridays or on Saturdays", "m1")]


def test_an_unknown_entry_is_an_error_result_the_model_sees_and_nothing_is_recorded(
        offline_home: Home, store: Store):
    seed_rule(store, offline_home)
    said = put(store, OWNER_SAYS)
    ctx = ToolContext(store, offline_home.root, offline_home.settings(), None, False)
    rows = len(pr.listing(store))
    unknown = default_registry().dispatch(ctx, "memory_propose", {
        "text": NEW, "source_events": [said], "confidence": 0.95, "supersedes": "m99"})
    assert unknown.is_error, unknown
    assert "no entry [m99]" in unknown.text and f"[m1] {RULE}" in unknown.text, unknown.text
    malformed = default_registry().dispatch(ctx, "memory_propose", {
        "text": NEW, "source_events": [said], "confidence": 0.95, "supersedes": "Fridays"})
    assert malformed.is_error and "supersedes" in malformed.text, malformed.text
    assert len(pr.listing(store)) == rows, "an unknown entry records no promotion"
    assert entries(offline_home) == [("m1", RULE, None)]


def test_the_loop_hands_the_unknown_entry_error_back_to_the_model(home: Home,
                                                                  api: FakeMessagesAPI):
    with Store.open(home.db_path) as store:
        seed_rule(store, home)
        said = inputs.add_message(store, Event.owner_message(OWNER_SAYS, "tell"))
    configure(home, api_url=api.url)
    api.enqueue(tool_use("memory_propose", {"text": NEW, "source_events": [said],
                                            "confidence": 0.95, "supersedes": "m7"}),
                text("I named the wrong entry."))
    loop = Loop(home, home.settings())
    try:
        run_tick(loop)
    finally:
        loop.store.close()
    second = json.loads(api.requests[1]["raw"])
    results = [b for m in second["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    assert results and results[-1].get("is_error") is True, results
    assert "no entry [m7]" in json.dumps(results[-1]), results[-1]
    assert entries(home) == [("m1", RULE, None)]


# --- the owner's review ----------------------------------------------------------------------

def test_approving_a_queued_supersession_snapshots_then_replaces(offline_home: Home,
                                                                 store: Store):
    seed_rule(store, offline_home)
    cited = put(store, "ops-bot: deploys on Fridays are fine now.", "third_party", "ops-bot")
    v = gate.consider(store, offline_home, offline_home.settings(),
                      gate.Candidate(NEW, [cited], 0.95, "tool", "m1"))
    assert v.status == gate.VerdictStatus.QUEUED
    before = offline_home.memory_md.read_text(encoding="utf-8")
    r = run("promotions", "approve", str(v.promotion_id))
    assert "MEMORY.md entry [m2]" in r.stdout
    snaps = sorted(offline_home.snapshots.glob("v*.md"))
    assert snaps and snaps[-1].read_text(encoding="utf-8") == before, "snapshot first"
    meta = json.loads(snaps[-1].with_suffix(".json").read_text())
    assert "supersedes [m1]" in meta["reason"]
    assert entries(offline_home) == [("m2", NEW, "m1")]
    row = pr.get(store, v.promotion_id)
    assert row is not None and row.status == "approved" and row.entry_id == "m2"
    assert f'supersedes [m1] "{RULE}"' in (row.reason or "")


def test_approve_refuses_when_the_entry_left_meanwhile_and_finishes_a_half_done_one(
        offline_home: Home, store: Store):
    seed_rule(store, offline_home)
    settings = offline_home.settings()
    cited = put(store, "ops-bot: deploys on Fridays are fine now.", "third_party", "ops-bot")
    first = gate.consider(store, offline_home, settings,
                          gate.Candidate(NEW, [cited], 0.95, "tool", "m1"))
    # Interrupted after MEMORY.md was written: approving again finishes it, writes nothing.
    memory = gate.load_memory(store, offline_home)
    memory.superseding("m1", NEW, [cited])[0].save()
    written = offline_home.memory_md.read_bytes()
    assert gate.approve(store, offline_home, settings, first.promotion_id) == "m2"
    assert offline_home.memory_md.read_bytes() == written
    # A second queued supersession of m1, which is gone now, cannot be approved.
    second = gate.consider(store, offline_home, settings,
                           gate.Candidate("Deploys on Fridays are fine now until noon", [cited],
                                          0.95, "tool", "m2"))
    run("strike", "m2")
    with pytest.raises(gate.ReviewError, match=r"\[m2\].* no longer in MEMORY\.md"):
        gate.approve(store, offline_home, settings, second.promotion_id)


# --- what the model and the owner are shown --------------------------------------------------

def test_the_prompt_never_shows_a_superseded_entry(offline_home: Home, store: Store):
    seed_rule(store, offline_home)
    said = put(store, OWNER_SAYS)
    gate.consider(store, offline_home, offline_home.settings(),
                  gate.Candidate(NEW, [said], 0.95, "tool", "m1"))
    prefix = build_prefix(offline_home, offline_home.settings(), store, default_registry())
    shown = "\n".join(b["text"] for b in prefix.system)
    assert f"[m2] {NEW} (supersedes m1;" in shown and RULE not in shown
    # A hand edit that kept both lines: the superseded one is still left out of the prompt,
    # and every other line is given as it is.
    kept = ("# MEMORY\n\nprose\n- [m1] Never deploy on Fridays (sources: #1; 2026-11-30)\r\n"
            f"- [m2] {NEW} (supersedes m1; sources: #2; 2026-12-01)\n- [m3] Dana owns it\n")
    offline_home.memory_md.write_text(kept, encoding="utf-8", newline="")
    assert prompt_text(offline_home.memory_md) == kept.replace(
        "- [m1] Never deploy on Fridays (sources: #1; 2026-11-30)\r\n", "")
    odd = f"- [m4] {NEW} (supersedes m4; sources: none; 2026-12-01)\n"  # names itself
    offline_home.memory_md.write_text(odd, encoding="utf-8")
    assert prompt_text(offline_home.memory_md) == odd
    plain = "# MEMORY\n\n- [m1] Never deploy on Fridays\n"
    offline_home.memory_md.write_text(plain, encoding="utf-8")
    assert prompt_text(offline_home.memory_md) == plain, "nothing superseded: unchanged"


def test_the_map_marks_a_superseded_entry_stale_and_a_queued_one_as_pending(
        offline_home: Home, store: Store):
    seed_rule(store, offline_home)
    cited = put(store, "ops-bot: deploys on Fridays are fine now.", "third_party", "ops-bot")
    queued = gate.consider(store, offline_home, offline_home.settings(),
                           gate.Candidate(NEW, [cited], 0.95, "tool", "m1"))
    page = memmap.render(store)
    assert "## MEMORY.md entries superseded" not in page
    assert f'would supersede [m1] "{RULE}"' in page
    gate.approve(store, offline_home, offline_home.settings(), queued.promotion_id)
    page = memmap.render(store)
    assert "## MEMORY.md entries superseded" in page
    lines = [line for line in page.splitlines() if RULE in line]
    decided = pr.get(store, queued.promotion_id).decided_at[:10]  # type: ignore[union-attr]
    assert len(lines) == 1 and lines[0].startswith(f"- [m1] {RULE} _(stale: "), lines
    assert "[m2]" in lines[0] and decided in lines[0], lines
    assert f"promotion {queued.promotion_id};" in lines[0] and lines[0].endswith(")_"), lines


def test_an_entry_restored_to_memory_md_is_not_listed_as_superseded(offline_home: Home,
                                                                    store: Store):
    """`coworker supersede` says `coworker restore N` brings the old entry back; once it is
    back, it is true now, and the memory map must not call it stale."""
    seed_rule(store, offline_home)
    done = Actions(offline_home, Door.CLI).supersede("m1", NEW)
    page = offline_home.memory_map.read_text(encoding="utf-8")
    assert f"- [m1] {RULE} _(stale: superseded by [{done.entry_id}]" in page, page
    Actions(offline_home, Door.CLI).restore(done.snapshot)
    assert ("m1", RULE, None) in entries(offline_home)
    page = offline_home.memory_map.read_text(encoding="utf-8")
    assert "[m1]" not in page and "## MEMORY.md entries superseded" not in page, page


# --- the doors -------------------------------------------------------------------------------

def test_the_mcp_door_cannot_supersede(offline_home: Home, store: Store):
    from runtime.mcp_server import build

    seed_rule(store, offline_home)
    before = offline_home.memory_md.read_bytes()
    events = ev.counts(store)
    with pytest.raises(NotOwnersDoor, match="^supersede "):
        Actions(offline_home, Door.MCP, "ops-bot").supersede("m1", NEW)
    assert ev.counts(store) == events and offline_home.memory_md.read_bytes() == before
    names = [t.name for t in asyncio.run(build(offline_home).list_tools())]
    assert "memory_propose" not in names and not [n for n in names if "supersede" in n]
    # What an agent can do over MCP, tell "remember ...", proposes no supersession at all.
    told = Actions(offline_home, Door.MCP, "ops-bot").tell(f"remember: {NEW} (supersedes m1)")
    cand = gate.from_message(ev.get(store, told.event_id))  # type: ignore[arg-type]
    assert cand is not None and cand.origin == "agent" and cand.supersedes is None
    v = gate.consider(store, offline_home, offline_home.settings(), cand)
    assert v.status == gate.VerdictStatus.QUEUED
    assert offline_home.memory_md.read_bytes() == before


def test_the_owner_supersedes_by_hand_through_the_cli(offline_home: Home, store: Store):
    seed_rule(store, offline_home)
    configure(offline_home, "gated")  # the owner's command does not wait for review
    r = run("supersede", "m1", NEW)
    assert f"[m2] {NEW} supersedes [m1] {RULE}" in r.stdout
    assert entries(offline_home) == [("m2", NEW, "m1")]
    snaps = sorted(offline_home.snapshots.glob("v*.md"))
    assert RULE in snaps[-1].read_text(encoding="utf-8")
    done = ev.tail(store, 10, kind="memory_supersede")
    assert len(done) == 1 and done[0].body == NEW and done[0].owners_words
    row = pr.listing(store)[0]
    assert (row.status, row.origin, row.entry_id, row.supersedes, row.source_events) == (
        "applied", "owner", "m2", "m1", [done[0].id])
    err = run("supersede", "m9", NEW, code=1).stderr.strip().splitlines()
    assert len(err) == 1 and "no entry [m9]" in err[0], err
    dup = run("supersede", "m2", "Dana keeps the minutes", code=0)  # a new fact is fine
    assert "[m3]" in dup.stdout
    assert len(ev.tail(store, 10, kind="memory_supersede")) == 2
    run("supersede", "m3", code=2)
    assert entries(offline_home) == [("m3", "Dana keeps the minutes", "m2")]


def test_a_refused_owner_supersede_writes_nothing(offline_home: Home, store: Store):
    seed_rule(store, offline_home)
    said = put(store, "remember Dana owns the parser")
    gate.consider(store, offline_home, offline_home.settings(),
                  gate.Candidate("Dana owns the parser", [said], 1.0, "owner"))
    before, events = offline_home.memory_md.read_bytes(), ev.counts(store)
    err = run("supersede", "m1", "Dana owns the parser", code=1).stderr
    assert "duplicate of [m2]" in err
    assert offline_home.memory_md.read_bytes() == before and ev.counts(store) == events


def test_ids_of_superseded_entries_are_never_given_again(offline_home: Home, store: Store):
    offline_home.memory_md.write_text(f"# MEMORY\n\n- [m5] {RULE}\n", encoding="utf-8")
    run("supersede", "m5", NEW)
    run("strike", "m6")
    said = put(store, "remember Dana owns the parser")
    v = gate.consider(store, offline_home, configure(offline_home),
                      gate.Candidate("Dana owns the parser", [said], 1.0, "owner"))
    assert v.entry_id == "m7", v
