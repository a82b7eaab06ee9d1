"""Redaction: a secret planted in one event, sealed into the ladder by reflect, taken back out
of the event, its index, every rollup that quoted it, backups and the file's bytes; while every
other event stays as it was and the database still refuses any UPDATE without a redaction row."""

from __future__ import annotations

import random
import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rituals import reflect as rf
from runtime.errors import CoworkerError
from runtime.home import Home
from runtime.redaction import RedactionRefused, redact_event
from runtime.store import Event, Store, decisions, vectors
from runtime.store import events as ev
from runtime.store import redactions as rs

SECRET = "sk-live-SECRET123456"
TOKEN = "secret123456"  # how the index and the cards spell it
NOW = datetime.now(UTC).replace(microsecond=0)


def iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def history(start: datetime, n: int = 240, plant_at: int = 57) -> list[Event]:
    rng = random.Random(5)
    vocab = [f"topic{i}" for i in range(120)]
    out, t = [], start
    for i in range(n):
        t += timedelta(minutes=40 if rng.random() < 0.1 else 3)
        body = " ".join(rng.sample(vocab, 5)) + " meeting."
        if i == plant_at:
            body = (f"Deploy the walrus cluster with the key {SECRET} tonight. "
                    "Then tell Dana it is done.")
        out.append(Event(kind="note", body=body, actor="coworker", author_kind="agent",
                         ts=iso(t)))
    return out


def holds(data: bytes) -> bool:
    return TOKEN.encode() in data.lower()


def rollup_texts(store: Store) -> list[str]:
    return [" ".join(str(r[k] or "") for k in ("title", "body", "terms", "vocab"))
            for r in store.query("SELECT * FROM rollups")]


def fts_hits(store: Store, table: str, word: str) -> int:
    return int(store.scalar(f"SELECT COUNT(*) FROM {table} WHERE {table} MATCH ?",
                            (f'"{word}"',)) or 0)


def built(home: Home, start: datetime) -> tuple[int, list[int]]:
    with Store.open(home.db_path) as store:
        ids = ev.append_many(store, history(start))
        rf.reflect(home, home.settings(), store, now=NOW)
    return ids[57], ids


@pytest.mark.parametrize("where, start", [("archive", NOW - timedelta(days=45)),
                                           ("hot", NOW - timedelta(days=3))])
def test_a_redacted_secret_is_gone_from_event_index_ladder_backups_and_file(
        offline_home: Home, tmp_path: Path, where: str, start: datetime):
    home = offline_home
    secret_id, ids = built(home, start)
    with Store.open(home.db_path) as store:
        # the secret is everywhere to begin with
        assert ev.get(store, secret_id).source == where
        assert fts_hits(store, "events_fts", TOKEN) == 1
        assert fts_hits(store, "rollups_fts", TOKEN) >= 1
        quoting = [t for t in rollup_texts(store) if TOKEN in t.lower()]
        assert len(quoting) >= 2, "the secret should be sealed into more than one rung"
        levels = store.query("SELECT DISTINCT level FROM rollups WHERE lower(title || body || "
                             "terms || COALESCE(vocab, '')) LIKE ?", (f"%{TOKEN}%",))
        assert len(levels) >= 2
        store.backup_to(tmp_path / "before.db")
        assert holds((tmp_path / "before.db").read_bytes())
        others_before = {e.id: e for e in ev.history_after(store, 0) if e.id != secret_id}
        vectors.write(store, "m", [(secret_id, 2, b"\x00\x01", "h"), (ids[0], 2, b"\x00\x01",
                                                                     "h")])

        report = redact_event(store, secret_id, "leaked deploy key")

        # the event: its marker, in the table that holds it, audited
        e = ev.get(store, secret_id)
        assert e.source == where and report.source == where
        assert e.body == report.marker == f"[redacted #{report.redaction_id}: leaked deploy key]"
        assert e.meta == {"redacted": report.redaction_id}
        assert (e.kind, e.actor, e.author_kind) == ("note", "coworker", "agent")
        assert [r.marker for r in rs.for_item(store, "event", secret_id)] == [report.marker]
        # the index: the secret matches nothing; the marker is searchable
        assert fts_hits(store, "events_fts", TOKEN) == 0
        assert fts_hits(store, "rollups_fts", TOKEN) == 0
        assert fts_hits(store, "events_fts", "walrus") == 0
        assert secret_id in [int(r[0]) for r in store.query(
            "SELECT rowid FROM events_fts WHERE events_fts MATCH '\"leaked\"'")]
        # the ladder: no rung quotes it; each rung changed has its own redaction row
        assert not [t for t in rollup_texts(store) if TOKEN in t.lower()]
        assert len(report.rollups) >= 2
        for rid in report.rollups:
            assert rs.for_item(store, "rollup", rid)
        # citations survive the rewrite
        assert any("[#" in t for t in rollup_texts(store))
        # the vector of that event is gone; others stay
        assert [r[0] for r in vectors.all_for(store, "m")] == [ids[0]]
        # every other event is exactly as it was; one `redaction` event was added
        after = {e.id: e for e in ev.history_after(store, 0) if e.id != secret_id}
        added = [after.pop(i) for i in sorted(set(after) - set(others_before))]
        assert after == others_before
        assert [(a.kind, a.actor, a.author_kind) for a in added] == [
            ("redaction", "owner", "user")]
        assert added[0].id == report.event
        assert added[0].meta["event_id"] == secret_id
        assert added[0].meta["rollups"] == report.rollups
        assert "leaked deploy key" in added[0].body and str(secret_id) in added[0].body
        # the database is whole
        assert store.integrity_check() == "ok"
        store.fts_integrity("events_fts")
        store.fts_integrity("rollups_fts")
        # a backup taken now does not hold it
        store.backup_to(tmp_path / "after.db")
        assert not holds((tmp_path / "after.db").read_bytes())
        assert report.compacted

        # append-only still holds for everything else
        conn = sqlite3.connect(home.db_path, isolation_level=None)
        try:
            for sql in (f"UPDATE events SET body = 'x' WHERE id = {ids[-1]}",
                        f"UPDATE events_archive SET body = 'x' WHERE id = "
                        f"{(ids[0] if where == 'archive' else -1)}",
                        f"UPDATE {'events' if where == 'hot' else 'events_archive'} SET body = "
                        f"'[redacted #999: x]' WHERE id = {secret_id}",
                        "UPDATE rollups SET title = 'x' WHERE id = (SELECT MIN(id) FROM rollups "
                        "WHERE id NOT IN (SELECT item_id FROM redactions "
                        "WHERE item_kind = 'rollup'))"):
                cur_before = conn.total_changes
                try:
                    conn.execute(sql)
                except sqlite3.DatabaseError as err:
                    assert "never changes" in str(err) or "append-only" in str(err)
                else:
                    assert conn.total_changes == cur_before, f"{sql} was allowed"
        finally:
            conn.close()

    # the file itself, once closed (the WAL folded in), holds no trace
    for path in home.state.iterdir():
        if path.is_file():
            assert not holds(path.read_bytes()), path


def test_tags_that_hold_the_secret_go_with_it(offline_home: Home):
    """A tag is a way into search: the owner's tag on the event, and a keyword reflect put on
    an episode that quotes it, must not keep the secret findable (a fresh-user audit found
    `coworker search` still listing a redacted event by its tag). The event loses every tag
    (on a marker none means anything); a rollup loses only the tags that quote it."""
    from runtime.store import tags as tg

    home = offline_home
    secret_id, _ = built(home, NOW - timedelta(days=3))
    with Store.open(home.db_path) as store:
        [episode] = [int(r[0]) for r in store.query(
            "SELECT id FROM rollups WHERE level = 1 AND first_event <= ? AND last_event >= ?",
            (secret_id, secret_id))]
        tg.add(store, "event", secret_id, [TOKEN, "walrusops"], "owner")
        tg.add(store, "rollup", episode, [TOKEN, "deployments"], "offline")
        assert fts_hits(store, "events_fts", "walrusops") == 1
        report = redact_event(store, secret_id, "leaked deploy key")
        assert episode in report.rollups
        assert tg.listing(store, "event", secret_id) == []
        assert [w for w, _ in tg.listing(store, "rollup", episode)] == ["deployments"]
        assert not store.query("SELECT 1 FROM tags WHERE word LIKE ?", (f"%{TOKEN}%",))
        for word in (TOKEN, "walrusops"):
            assert fts_hits(store, "events_fts", word) == 0, word
        assert fts_hits(store, "rollups_fts", TOKEN) == 0
        assert fts_hits(store, "rollups_fts", "deployments") == 1
        store.fts_integrity("events_fts")
        store.fts_integrity("rollups_fts")
    for path in home.state.iterdir():
        if path.is_file():
            assert not holds(path.read_bytes()), path


def test_a_redaction_is_refused_for_an_unknown_or_redacted_event(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        eid = ev.append(store, Event(kind="note", body=f"the key is {SECRET}"))
        with pytest.raises(RedactionRefused) as exc:
            redact_event(store, 99999, "nope")
        assert isinstance(exc.value, CoworkerError) and exc.value.exit_code == 1
        assert "no event 99999" in str(exc.value)
        report = redact_event(store, eid, "a key")
        assert report.rollups == []
        with pytest.raises(RedactionRefused) as exc:
            redact_event(store, eid, "again")
        assert "already redacted" in str(exc.value)
        with pytest.raises(CoworkerError):
            redact_event(store, eid + 1, "   ")  # no reason given
        # a refused redaction wrote nothing
        assert ev.total(store) == 2
        assert len(rs.all_(store)) == 1


def test_common_words_stay_in_the_ladder(offline_home: Home):
    secret_id, _ = built(offline_home, NOW - timedelta(days=3))
    with Store.open(offline_home.db_path) as store:
        redact_event(store, secret_id, "key")
        texts = " ".join(rollup_texts(store)).lower()
        assert "meeting" in texts and "topic" in texts  # shared with other events: kept
        assert "walrus" not in texts  # said only in the redacted event


def test_a_decision_recorded_from_the_event_gets_the_marker_too(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        body = f"use {SECRET} for the deploy"
        eid = ev.append(store, Event(kind="decision", body=body, actor="coworker",
                                     author_kind="agent"))
        decisions.record(store, body, None, None, eid, ev.now_iso())
        report = redact_event(store, eid, "key in a decision")
        assert [d.body for d in decisions.all_(store)] == [report.marker]


def test_a_secret_in_turkish_capitals_is_gone_from_the_ladder(offline_home: Home,
                                                               monkeypatch: pytest.MonkeyPatch):
    """İ lowercases to i and a combining dot, which is no word character: the ladder's words
    hold "i̇zmi̇rparola77", and the scrubber must read the word through the mark."""
    monkeypatch.setattr(sys.modules[__name__], "SECRET", "İZMİRPAROLA77")
    sid, _ = built(offline_home, NOW - timedelta(days=3))
    with Store.open(offline_home.db_path) as store:
        assert any("parola77" in t.lower() for t in rollup_texts(store)), "the ladder quotes it"
        redact_event(store, sid, "leaked")
        assert [t for t in rollup_texts(store) if "parola77" in t.lower()] == []
