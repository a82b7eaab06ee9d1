"""Failures a memory step meets are loud, and cost nothing: an audit's findings (2026-12-03),
each seen red before its fix.

- an owner's "remember" the gate cannot check is queued for them, never dropped; an entry
  applied to MEMORY.md and its promotion row are one write, and an auto-applied supersede keeps
  a snapshot of what it replaced;
- the recall event says what the model got; a due ritual survives a failed write; the loop
  survives a database that cannot say when the next promise is due; a reflect that meets a
  busy database counts nothing against its input; a memory map that cannot be written is said
  in the run's figures; the model's keywords that cannot be stored are a WARNING and do not
  count against the model; a stop's failed steps are WARNINGs.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from runtime.errors import StoreBusy
from runtime.home import Home
from runtime.loop import Loop
from runtime.store import Store, telemetry, turns
from runtime.store import events as ev
from runtime.store import promotions as pr

from .conftest import run_tick, tell, write_config
from .fakeapi import FakeMessagesAPI, text


def make_loop(h: Home) -> Loop:
    return Loop(h, h.settings())


def busy_once(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
    """`module.name` meets a locked database on its first call only (another process held
    the write lock past the timeout), then works."""
    real = getattr(module, name)
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreBusy("database is locked")
        return real(*a, **k)
    monkeypatch.setattr(module, name, flaky)


def events_of(h: Home, kind: str):
    with Store.open(h.db_path) as store:
        return ev.tail(store, 1000, kind=kind)


# F1: an owner's "remember" that meets an unreadable MEMORY.md is queued for them, unchecked,
# with the reason; the turn goes on
def test_remember_with_broken_memory_md_is_not_lost(home: Home, api: FakeMessagesAPI, caplog):
    write_config(home.root, api.url, memory={"memory_promotions": "auto"})
    home.memory_md.write_text("# M\n- [x1] hand edit gone wrong\n", encoding="utf-8")
    tell(home, "remember that the parser freeze starts on the 20th")
    api.enqueue(text("Got it, I will remember."))
    with caplog.at_level(logging.WARNING):
        out = run_tick(make_loop(home))
    with Store.open(home.db_path) as store:
        rows = pr.listing(store, None, limit=100)
    assert [(p.status, p.text) for p in rows] == [
        ("queued", "the parser freeze starts on the 20th")], rows
    assert rows[0].reason.startswith("not checked: MemoryFileError"), rows[0].reason
    assert [e.meta.get("promotion_id") for e in events_of(home, "promotion")] == [rows[0].id]
    assert out.kind in turns.COMPLETED and any("queued for you unchecked" in r.getMessage()
                                           for r in caplog.records)


# F2: the entry applied to MEMORY.md and its promotion row are one write: a row that fails
# leaves MEMORY.md as it was, and the retried turn applies it (not REFUSED as a duplicate)
def test_applied_entry_and_its_row_are_one_write(offline_home: Home, monkeypatch):
    from runtime.memory import gate
    write_config(offline_home.root, memory={"memory_promotions": "auto"})
    settings = offline_home.settings()
    eid = tell(offline_home, "remember that Dana owns the parser fix")
    busy_once(monkeypatch, pr, "add")
    with Store.open(offline_home.db_path) as store:
        e = ev.get(store, eid)
        cand = gate.from_message(e)
        with pytest.raises(StoreBusy):
            gate.consider(store, offline_home, settings, cand)
        assert "Dana owns the parser fix" not in offline_home.memory_md.read_text(), \
            "MEMORY.md holds an entry no promotion row records"
        again = gate.consider(store, offline_home, settings, cand)  # the retried turn
        rows = [(p.status, p.entry_id) for p in pr.listing(store, None, limit=100)]
    assert again.status == "applied" and rows == [("applied", "m1")], rows
    assert "Dana owns the parser fix" in offline_home.memory_md.read_text()


# F3: the recall event says what the model got: telemetry that fails takes no block back
def test_recall_event_matches_what_the_model_got(home: Home, api: FakeMessagesAPI, monkeypatch):
    from runtime.store import Event
    with Store.open(home.db_path) as store:
        for i in range(5):
            ev.append(store, Event(kind="note", body=f"parser billing export crash report {i}",
                                   actor="coworker", author_kind="agent"))
    tell(home, "Did the parser crash on the billing exports again?")
    api.enqueue(text("Looking."))
    monkeypatch.setattr(telemetry, "record", lambda *a, **k: (_ for _ in ()).throw(
        StoreBusy("database is locked")))
    run_tick(make_loop(home))
    rec = events_of(home, "recall")[0]
    sent = str(api.bodies[-1]["messages"])
    assert rec.meta.get("injected") is True and "Recalled from your memory" in sent, rec.body


# F4: a ritual marked due survives a write of its input that fails: the next tick makes it
def test_due_ritual_survives_a_failed_add(offline_home: Home, monkeypatch):
    from runtime.loop import perception
    from runtime.store import inputs
    due = perception.DueRituals()
    due.mark("standup")
    busy_once(monkeypatch, inputs, "add")
    settings = offline_home.settings()
    with Store.open(offline_home.db_path) as store:
        with pytest.raises(StoreBusy):
            perception.queue_due(store, settings, due)
        perception.queue_due(store, settings, due)  # next tick
        waiting = inputs.pending_ritual(store, "standup")
    assert waiting, "the due ritual was taken from the scheduler's marks and never made an input"


# F5: a database that cannot say when the next promise falls due never crashes the loop
def test_loop_survives_a_store_failure_between_ticks(offline_home: Home, monkeypatch):
    from runtime.store import promises
    write_config(offline_home.root, coworker={"tick_seconds": 1, "max_tick_seconds": 1})
    loop = make_loop(offline_home)
    monkeypatch.setattr(promises, "next_due", lambda store: (_ for _ in ()).throw(
        StoreBusy("database is locked")))
    asyncio.run(loop.run(max_ticks=3))  # raises StoreBusy: the loop crashed
    assert not events_of(offline_home, "crash")


# F6: a store failure writing the model's episode keywords is a WARNING, and the model is not
# blamed for it (three such would have given the model up for the run)
def test_keyword_store_failure_is_loud(offline_home: Home, monkeypatch, caplog):
    from runtime.memory import keywords as kw
    from runtime.memory import ladder
    from runtime.store import Event
    from runtime.store import tags as tg
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, [Event(kind="note", body=f"parser billing export crash {i}",
                                     actor="coworker", author_kind="agent",
                                     ts=f"2025-03-01T{9 + i // 6:02d}:{(i % 6) * 10:02d}:00.000Z")
                               for i in range(40)])
        ladder.seal(store, 10)
        monkeypatch.setattr(tg, "add_many", lambda *a, **k: (_ for _ in ()).throw(
            StoreBusy("database is locked")))
        budget = ladder.Summarizer(None, "m", budget=10)

        def ask(items):
            return kw.Answer(keywords={i: ["invoice"] for i, _ in items})
        with caplog.at_level(logging.DEBUG):
            rep = kw.from_model(store, ask, budget)
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert rep.calls >= 1 and rep.failed == rep.calls and rep.episodes == 0
    assert len(loud) == rep.calls and all("could not be stored" in m for m in loud), loud
    assert budget.streak == 0 and not budget.gave_up


# F7: a memory map that cannot be written (a folder squats its name) is an ERROR, said in the
# run's figures; the run's work stands and nothing half-written is left beside the map
def test_reflect_map_failure_is_recorded_consistently(offline_home: Home, caplog):
    from rituals import reflect as rf
    from runtime.store import rituals as rr
    offline_home.memory_map.mkdir(parents=True, exist_ok=True)
    settings = offline_home.settings()
    with Store.open(offline_home.db_path) as store, caplog.at_level(logging.ERROR):
        report = rf.reflect(offline_home, settings, store)
        last = rr.last(store, "reflect")
    assert report.map_bytes == 0 and report.map_error and "IsADirectoryError" in report.map_error
    assert last.status == "ok" and last.stats["map_error"] == report.map_error, last
    assert any("memory map" in r.getMessage() and "was not written" in r.getMessage()
               for r in caplog.records)
    assert not offline_home.memory_map.with_suffix(".md.tmp").exists()


def test_reflect_says_a_map_not_written_in_one_line(offline_home: Home):
    from .conftest import coworker

    offline_home.memory_map.mkdir(parents=True, exist_ok=True)
    got = coworker("reflect")
    assert got.returncode == 1, got.stderr
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "was not written" in lines[0] and "Traceback" not in got.stderr


# F8: a database outage during reflect counts nothing against its input, as in a model turn
def test_reflect_outage_is_not_blamed_on_its_input(offline_home: Home, monkeypatch):
    from rituals import reflect as rf
    from runtime.store import Event, inputs
    with Store.open(offline_home.db_path) as store:
        rid = inputs.add(store, Event(kind="ritual_due", body="ritual reflect is due",
                                      actor="coworker", author_kind="system",
                                      meta={"ritual": "reflect", "prompt": ""}), "ritual")
    monkeypatch.setattr(rf, "run", lambda *a, **k: (_ for _ in ()).throw(
        StoreBusy("database is locked")))
    loop = make_loop(offline_home)
    for _ in range(3):
        run_tick(loop)
    with Store.open(offline_home.db_path) as store:
        status = inputs.status_of(store, rid)
    assert status == "pending"


# F9: an auto-applied supersession keeps what it replaced in a snapshot, as the owner's own
# supersede does (ADR-0018)
def test_auto_supersede_keeps_a_snapshot(offline_home: Home):
    from runtime.memory import gate
    from runtime.store import Event
    write_config(offline_home.root, memory={"memory_promotions": "auto"})
    settings = offline_home.settings()
    with Store.open(offline_home.db_path) as store:
        a = ev.append(store, Event.owner_message("Dana owns the parser fix", "tell"))
        v1 = gate.consider(store, offline_home, settings,
                           gate.Candidate("Dana owns the parser fix", [a], 1.0, "owner"))
        assert v1.status == "applied"
        before = set(offline_home.snapshots.glob("v*.md")) if offline_home.snapshots.exists() \
            else set()
        b = ev.append(store, Event.owner_message("Ravi owns the parser fix now", "tell"))
        v2 = gate.consider(store, offline_home, settings,
                           gate.Candidate("Ravi owns the parser fix now", [b], 0.95, "tool",
                                          supersedes="m1"))
    snaps = sorted(set(offline_home.snapshots.glob("v*.md")) - before)
    assert v2.status == "applied", v2.reason
    assert len(snaps) == 1 and "Dana owns the parser fix" in snaps[0].read_text(), snaps
    assert "Dana owns the parser fix" not in offline_home.memory_md.read_text()


# F10: a stop's steps that fail are WARNINGs naming them, and the stop goes on
def test_a_failed_step_of_a_stop_is_a_warning(offline_home: Home, monkeypatch, caplog):
    from runtime import scheduler

    def broken(self, *a, **k):
        raise RuntimeError("scheduler stuck")
    monkeypatch.setattr(scheduler.Scheduler, "shutdown", broken)
    loop = make_loop(offline_home)
    with caplog.at_level(logging.WARNING):
        asyncio.run(loop.run(max_ticks=1))
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("while stopping" in m and "RuntimeError: scheduler stuck" in m for m in said), said
    assert events_of(offline_home, "stop"), "the stop after it is still recorded"


def test_an_entry_written_before_its_row_was_lost_is_recognised(offline_home: Home):
    """A commit that failed after MEMORY.md was saved leaves the entry with no row: the retried
    turn records it as applied under its id, and never refuses it as its own duplicate."""
    from runtime.memory import gate

    write_config(offline_home.root, memory={"memory_promotions": "auto"})
    settings = offline_home.settings()
    eid = tell(offline_home, "remember that Dana owns the parser fix")
    with Store.open(offline_home.db_path) as store:
        cand = gate.from_message(ev.get(store, eid))
        after, entry = gate.load_memory(store, offline_home).with_entry(cand.text,
                                                                        cand.source_events)
        after.save()  # the file written, its row never committed
        got = gate.consider(store, offline_home, settings, cand)
        rows = [(p.status, p.entry_id) for p in pr.listing(store, None, limit=100)]
    assert got.status == "applied" and rows == [("applied", entry.id)], (got.reason, rows)
    assert "applied before" in got.reason
    assert offline_home.memory_md.read_text().count("Dana owns the parser fix") == 1


# --- files and terminals the CLI cannot use: one line, never a traceback (a hunt, 2026-12-03)

def _one_line(got) -> str:
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 1 and len(lines) == 1 and "Traceback" not in got.stderr, got.stderr
    return lines[0]


def test_a_memory_file_that_cannot_be_written_is_one_line_and_nothing_half_done(
        offline_home: Home):
    from .conftest import coworker

    offline_home.memory_md.write_text("# MEMORY\n\n- [m1] one\n", encoding="utf-8")
    tmp = offline_home.memory_md.with_suffix(".md.tmp")
    tmp.mkdir()  # the atomic write's copy cannot be made
    got = coworker("strike", "m1")
    line = _one_line(got)
    assert "could not use" in line and "MEMORY.md.tmp" in line, line
    assert "[m1] one" in offline_home.memory_md.read_text(encoding="utf-8")


def test_a_home_that_links_to_itself_is_one_line(tmp_path: Path):
    import os

    from .conftest import coworker

    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    got = coworker("status", env={**os.environ, "COWORKER_HOME": str(loop)})
    assert "Symlink loop" in _one_line(got)


def test_a_terminal_that_cannot_show_the_text_is_one_line(offline_home: Home):
    import os

    from .conftest import coworker

    tell(offline_home, "héllo 🤖")
    got = coworker("log", process=True, env={**os.environ, "PYTHONIOENCODING": "ascii",
                                             "COWORKER_HOME": str(offline_home.root)})
    assert "cannot show the text" in _one_line(got)
