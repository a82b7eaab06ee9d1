"""Rituals on a real APScheduler inside the real loop: firing, catch-up, listing."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from runtime.home import Home
from runtime.loop import Loop
from runtime.scheduler import REGISTERED, definitions, next_run, register_and_find_missed
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import rituals as rr

from .conftest import coworker, run_tick, write_config
from .fakeapi import FakeMessagesAPI, text

EVERY_SECOND = "*/1 * * * * *"


def old_events(home: Home, n: int = 40, days_ago: int = 60) -> None:
    start = datetime.now(UTC) - timedelta(days=days_ago)
    with Store.open(home.db_path) as store:
        ev.append_many(store, [
            Event(kind="note", body=f"old note {i} about the parser", actor="coworker",
                  author_kind="agent",
                  ts=(start + timedelta(minutes=i)).isoformat().replace("+00:00", "Z"))
            for i in range(n)])


def runs(home: Home, ritual: str) -> list[rr.RitualRun]:
    with Store.open(home.db_path) as store:
        return [r for r in rr.recent(store, 500) if r.ritual == ritual]


def test_a_custom_ritual_fires_on_apscheduler_and_runs_a_tick_with_its_prompt(
        home: Home, api: FakeMessagesAPI):
    with (home.root / "config.toml").open("a") as f:
        f.write(f'\n[[rituals.custom]]\nname = "standup"\ncron = "{EVERY_SECOND}"\n'
                'prompt = "Write the standup now."\n')
    write_cfg = (home.root / "config.toml").read_text()
    assert "standup" in write_cfg
    (home.root / "config.toml").write_text(write_cfg.replace("tick_seconds = 1",
                                                             "tick_seconds = 300", 1)
                                           .replace("max_tick_seconds = 4",
                                                    "max_tick_seconds = 600", 1))
    api.enqueue(text("Standup: nothing new."))
    loop = Loop(home, home.settings())
    asyncio.run(asyncio.wait_for(loop.run(max_ticks=2), 60))
    assert len(api.requests) == 1
    sent = json.dumps(api.bodies[0]["messages"])
    assert "[ritual standup] Write the standup now." in sent
    done = [r for r in runs(home, "standup") if r.status != REGISTERED]
    assert done and done[0].status == "ok" and done[0].stats["outcome"] == "no_action"


def test_reflect_fires_on_schedule_without_a_model(offline_home: Home):
    write_config(offline_home.root, coworker={"tick_seconds": 300, "max_tick_seconds": 600},
                 rituals={"reflect": EVERY_SECOND})
    old_events(offline_home)
    loop = Loop(offline_home, offline_home.settings())
    asyncio.run(asyncio.wait_for(loop.run(max_ticks=2), 60))
    ok = [r for r in runs(offline_home, "reflect") if r.status == "ok"]
    assert len(ok) == 1 and ok[0].stats["archived"] == 40
    with Store.open(offline_home.db_path) as store:
        ritual_events = ev.tail(store, 10, kind="ritual")
        assert ritual_events and "reflect: archived 40" in ritual_events[0].body
        assert ev.tail(store, 1, kind="tick_end")[0].meta["outcome"] == "ritual"
    assert offline_home.memory_map.exists()


def test_first_sighting_registers_and_does_not_run(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        assert register_and_find_missed(store, offline_home.settings()) == []
        assert [r.status for r in rr.recent(store)] == [REGISTERED]
        # the second start within the same window finds nothing missed either
        assert register_and_find_missed(store, offline_home.settings()) == []


def test_missed_windows_run_once_at_start(offline_home: Home):
    write_config(offline_home.root, coworker={"tick_seconds": 300, "max_tick_seconds": 600})
    old_events(offline_home)
    three_weeks_ago = (datetime.now(UTC) - timedelta(days=21)).isoformat().replace("+00:00", "Z")
    with Store.open(offline_home.db_path) as store, store.transaction() as db:
        db.execute("INSERT INTO ritual_runs(ritual, started_at, finished_at, status, stats) "
                   "VALUES ('reflect', ?, ?, 'ok', '{}')", (three_weeks_ago, three_weeks_ago))
    for _ in range(2):  # two restarts: only the first catches up
        loop = Loop(offline_home, offline_home.settings())
        asyncio.run(asyncio.wait_for(loop.run(max_ticks=1), 60))
    ok = [r for r in runs(offline_home, "reflect") if r.status == "ok"]
    assert len(ok) == 2  # the old row and exactly one catch-up for three missed windows
    assert ok[0].stats["archived"] == 40


def test_next_run_is_in_the_configured_time_zone(offline_home: Home):
    write_config(offline_home.root, coworker={"timezone": "Europe/Berlin"})
    settings = offline_home.settings()
    reflect = definitions(settings)[0]
    after = datetime(2026, 12, 1, 12, tzinfo=UTC)  # a Tuesday
    nxt = next_run(reflect, settings.coworker.timezone, after)
    assert nxt.isoformat() == "2026-12-06T03:00:00+01:00"
    assert nxt.astimezone(UTC).hour == 2


def test_rituals_command_lists_schedule_last_and_next(offline_home: Home):
    with (offline_home.root / "config.toml").open("a") as f:
        f.write('\n[[rituals.custom]]\nname = "standup"\ncron = "0 9 * * mon-fri"\n'
                'prompt = "Standup please."\n')
    old_events(offline_home)
    assert coworker("reflect").returncode == 0
    r = coworker("rituals", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in map(json.loads, r.stdout.splitlines())}
    assert set(rows) == {"reflect", "standup"}
    assert rows["reflect"]["last_run"]["status"] == "ok"
    assert rows["reflect"]["last_run"]["stats"]["archived"] == 40
    assert rows["standup"]["last_run"] is None
    assert rows["standup"]["next_run"] > datetime.now(UTC).isoformat()[:10]
    human = coworker("rituals").stdout
    assert "reflect" in human and "standup" in human and "never" in human


def test_bad_cron_in_config_is_a_one_line_error(offline_home: Home):
    with (offline_home.root / "config.toml").open("a") as f:
        f.write('\n[rituals]\nreflect = "every sunday"\n')
    r = coworker("rituals")
    assert r.returncode == 2
    assert "[rituals] reflect" in r.stderr and "cron" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_ritual_that_asks_for_no_recall_gets_none_though_its_prompt_has_topic_words(
        home: Home, api: FakeMessagesAPI):
    """`recall = false` on a [[rituals.custom]]: its prompt names a topic the memory holds,
    yet its tick gets no recall block (decided before retrieving); the same prompt from a ritual
    without the opt-out does get one."""
    with (home.root / "config.toml").open("a", encoding="utf-8") as f:
        for name, opt in (("digest", "recall = false\n"), ("digest2", "")):
            f.write(f'\n[[rituals.custom]]\nname = "{name}"\ncron = "0 9 * * *"\n'
                    f'prompt = "Write the zeppelin deployment digest."\n{opt}')
    with Store.open(home.db_path) as store:
        ev.append_many(store, [Event(kind="note", body="The zeppelin deployment broke the "
                                     "staging cluster.", actor="coworker", author_kind="agent")
                               for _ in range(3)])
    loop = Loop(home, home.settings())
    heads = []
    for name in ("digest", "digest2"):
        loop._due_rituals.mark(name)
        api.enqueue(text("Done."))
        run_tick(loop)
        last = api.bodies[-1]["messages"][-1]["content"]
        heads.append(any(b.get("type") == "text" and b["text"].startswith("Recalled from your")
                         for b in last))
    assert heads == [False, True], heads
    with Store.open(home.db_path) as store:
        recalls = ev.tail(store, 10, kind="recall")
    quiet = [r for r in recalls if "asks for no recall" in r.body]
    assert quiet and quiet[0].meta["decision"] == "none: ritual digest asks for no recall"
