"""The ladder groups what is close in time, and its cards tell a span apart (issue 37, ADR-0035).

An episode never covers more than a day, a chapter more than a week (seven times more each rung
up): old history imported after today's events is sealed into chapters of its own, however few
episodes that leaves today's chapter, and a parent's children stay consecutive, so its span
holds them and nothing else and the walk still drills through it. A card holds no hash and no
small talk, and a parent's card puts the words its children share and their siblings do not
before what the whole rung says. Real store, real reflect parts, real walk.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runtime.home import Home
from runtime.memory import cards as cd
from runtime.memory import ladder
from runtime.memory.walk import walk
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import rollups as rl

NOW = datetime.now(UTC).replace(microsecond=0)
STEP = timedelta(minutes=3)


def iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def notes(n: int, start: datetime, body: str, step: timedelta = STEP,
          batch: str | None = None) -> list[Event]:
    meta = {"imported": True, "import_batch": batch} if batch else {}
    return [Event(kind="note", body=body.format(i=i), actor="coworker", author_kind="agent",
                  ts=iso(start + i * step), meta=meta) for i in range(n)]


def seconds(ts: str | None) -> float:
    return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()


def check_time_and_spans(store: Store) -> None:
    """Every rollup within its rung's stretch of time; every parent over consecutive children,
    its span from the first child's first event to the last child's last."""
    for r in rl.all_(store):
        assert seconds(r.last_ts) - seconds(r.first_ts) <= ladder.span_limit(r.level), r
        if r.level > 1:
            kids = rl.children(store, r.id)
            rung = [k.id for k in rl.at_level(store, r.level - 1)]
            at = rung.index(kids[0].id)
            assert [k.id for k in kids] == rung[at:at + len(kids)], r.id
            assert r.source_range == f"{kids[0].first_event}-{kids[-1].last_event}", r


def test_old_history_imported_after_today_never_shares_a_chapter_with_today(
        offline_home: Home):
    """The issue's chapter: today's conversation, then three-week-old imports. Today's two
    episodes make a chapter of their own, the import its own chapters, the walk finds both."""
    with Store.open(offline_home.db_path) as store:
        today = ev.append_many(store, notes(30, NOW - timedelta(hours=3),
                                            "zephyr rollout step {i} checked"))
        old = ev.append_many(store, notes(160, NOW - timedelta(days=21),
                                          "budget forecast line {i} reviewed", batch="slack"))
        ev.append_many(store, notes(12, NOW - timedelta(hours=1), "afterwards note {i}"))
        planned = ladder.plan(store, 10)
        report = ladder.seal(store, 10)
        assert report.sealed == planned == {1: 2 + 11, 2: 2}
        check_time_and_spans(store)
        first = rl.at_level(store, 2)[0]
        assert (first.first_event, first.last_event) == (today[0], today[-1])
        assert len(rl.children(store, first.id)) == 2

        got = walk(store, "zephyr rollout")
        assert not got["refused"] and got["trace"][0]["level"] == 2
        assert {e["id"] for e in got["events"]} <= set(today)
        got = walk(store, "budget forecast")
        assert not got["refused"] and {e["id"] for e in got["events"]} <= set(old)


def test_an_episode_never_spans_more_than_a_day(offline_home: Home):
    """A note every six hours: an episode ends where a day would be passed, whatever its
    size; and a rerun with nothing new seals nothing."""
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, notes(120, NOW - timedelta(days=31), "watering plant {i}",
                                    step=timedelta(hours=6)))
        planned = ladder.plan(store, 10)
        assert ladder.seal(store, 10).sealed == planned
        check_time_and_spans(store)
        sizes = [int(r.last_event or 0) - int(r.first_event or 0) + 1
                 for r in rl.at_level(store, 1)]
        assert sizes and max(sizes) == 5, sizes
        assert rl.counts_per_level(store)[2] >= 4
        assert ladder.plan(store, 10) == {} and ladder.seal(store, 10).sealed == {}


def test_cards_hold_no_hashes_and_no_small_talk(offline_home: Home):
    """Each block merges a commit and asks who joins for lunch: its card holds its topic,
    never the hash or the chit-chat; its vocabulary keeps the hash, so recall finds it."""
    hashes = ["7711b75", "81365ac", "a3f9c21", "0be44d7", "9c0ffee1"]
    topics = ["ledger", "invoice", "webhook", "sitemap", "tokenizer"]
    events = []
    for b, (h, topic) in enumerate(zip(hashes, topics, strict=True)):
        start = NOW - timedelta(days=2, hours=-2 * b)
        for i in range(12):
            body = (f"anyone join lunch today? thanks {topic}" if i % 3 == 0
                    else f"merged {h} fixing the {topic} path, step {i}")
            events.append(Event(kind="note", body=body, actor="coworker", author_kind="agent",
                                ts=iso(start + i * STEP)))
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, events)
        ladder.seal(store, 10)
        eps = rl.at_level(store, 1)
        assert len(eps) >= 4
        for r, h, topic in zip(eps, hashes, topics, strict=False):
            card = r.terms.split()
            assert topic in card, card
            assert not [w for w in card if cd.looks_like_id(w) or w in cd.SMALL_TALK], card
            assert h in r.vocab.split()


def test_a_parent_card_puts_what_tells_it_apart_before_what_the_whole_rung_says(
        offline_home: Home):
    """A hundred episodes whose cards all hold 'standup'; three of the first ten also hold
    'kafka', one a commit hash. The first chapter's card leads with kafka, holds no hash."""
    with Store.open(offline_home.db_path) as store:
        for i in range(100):
            card = [f"topic{i}", "standup", *(["kafka"] if i < 3 else []), f"extra{i}"]
            if i == 5:
                card.insert(0, "7711b75")
            t = iso(NOW - timedelta(days=3, minutes=-10 * i))
            rl.seal(store, level=1, first_event=None, last_event=None, source_range=None,
                    first_ts=t, last_ts=t, title=f"episode {i}", body=f"Episode {i}.",
                    terms=" ".join(card), method="extractive")
        ladder.seal(store, 10)
        chapter = rl.at_level(store, 2)[0]
        card = chapter.terms.split()
        assert card[0] == "kafka", card
        assert "7711b75" not in card and card.index("kafka") < card.index("standup")
