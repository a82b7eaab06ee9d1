"""Redaction (the one audited exception to append-only) on both backends (issue 42): each test
runs on a SQLite Store in a temporary file and on a PgStore in a fresh database of a throwaway
PostgreSQL server (tests/pgserver.py), through the owner's `redact_event` and the store's
runtime/store/redactions.py.

A secret planted in one event (hot or archived), tagged, quoted by a rollup (tagged too), by a
decision, a queued promotion, a pin, the side-effect ledger and an approval, with a vector: after
the redaction the secret's words match nothing in the events' or the ladder's full text
(events.fts_search, events.bare_match, rollups.fts_search), the marker does, every copy is
scrubbed, the vectors are gone, and the full text's kept counts are the rows' own (PostgreSQL:
fts_stats and fts_rollup_stats against a recount; SQLite: FTS5's integrity-check, which reads the
index against its content). On PostgreSQL secure_delete is a no-op and compact is a VACUUM."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.redaction import redact_event
from runtime.store import (
    Event,
    Store,
    approvals,
    archive,
    decisions,
    pg_fts,
    pins,
    promotions,
    side_effects,
    tags,
    vectors,
)
from runtime.store import events as ev
from runtime.store import redactions as rs
from runtime.store import rollups as rl
from runtime.store.pg import PgStore

from .pgserver import pg_url  # noqa: F401  (the fixture)

SECRET = "zanzibarquokka"
NOW = datetime.now(UTC).replace(microsecond=0)


def iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        s: Any = Store.open(tmp_path / "state" / "coworker.db")
    else:
        s = PgStore.open(request.getfixturevalue("pg_url"), "alpha")
    yield s
    s.close()


def _seeded(store: Any, where: str) -> tuple[int, list[int]]:
    """Twelve events (the secret in the sixth, all old when `where` is 'archive' and then
    moved), two episodes (the first quotes the secret), tags, a decision, the copies, vectors;
    return (the secret's event id, all ids)."""
    start = NOW - timedelta(days=45 if where == "archive" else 1)
    bodies = [f"routine meeting about topic{i} and the harbour" for i in range(12)]
    bodies[5] = f"Deploy the walrus cluster with {SECRET} tonight, then tell Dana."
    ids = ev.append_many(store, [Event(kind="note", body=b, actor="coworker",
                                       author_kind="agent", ts=iso(start + timedelta(minutes=i)))
                                 for i, b in enumerate(bodies)])
    if where == "archive":
        assert archive.move_older_than(store, iso(NOW - timedelta(days=30))) == 12
    secret_id = ids[5]
    for first, title, body, terms, vocab in (
            (ids[0], f"Walrus deploy with {SECRET}", f"Deployed walrus using {SECRET} [#{secret_id}].",
             f"walrus {SECRET}", f"walrus {SECRET} deploy harbour"),
            (ids[6], "Harbour meetings", "Routine meetings about the harbour.", "harbour meeting",
             "harbour meeting routine")):
        rl.seal(store, level=1, first_event=first, last_event=first + 5, source_range=None,
                first_ts=None, last_ts=None, title=title, body=body, terms=terms, method="test",
                vocab=vocab)
    tags.add(store, "event", secret_id, [SECRET, "walrusops"], "owner")
    tags.add(store, "event", ids[0], ["harbourops"], "owner")
    tags.add(store, "rollup", 1, [SECRET, "deployments"], "owner")
    decisions.record(store, f"use {SECRET} for the walrus", [secret_id], None, secret_id,
                     iso(NOW))
    promotions.add(store, f"the walrus key is {SECRET}", [secret_id], 0.9, "queued",
                   f"seen in {SECRET}", "reflect")
    pins.add(store, f"remember {SECRET}")
    side_effects.begin(store, "k1", "shell", None, {"cmd": f"echo {SECRET}"})
    side_effects.finish(store, "k1", True, f"printed {SECRET}", tick_id=None)
    approvals.add(store, tick_id=None, server="s", tool="t", name="send",
                  arguments={"text": f"key {SECRET}"}, reason=f"send {SECRET}", sources=[],
                  tool_use_id="u1", ttl_s=600)
    vectors.write(store, "m", [(secret_id, 2, b"\x00\x01", "h"), (ids[0], 2, b"\x00\x01", "h")])
    return secret_id, ids


def _event_hits(store: Any, word: str) -> list[int]:
    match = f'"{word}"'
    found = [int(e.id or 0) for e, _, _ in ev.fts_search(store, match, 50)]
    assert sorted(found) == sorted(ev.bare_match(store, match, 50)), word
    return found


def _rollup_hits(store: Any, word: str) -> list[int]:
    return [r.id for r, _ in rl.fts_search(store, f'"{word}"', 50,
                                           columns="title body terms vocab tags")]


def _counts_are_the_rows_own(store: Any) -> None:
    if store.dialect == "sqlite":
        store.fts_integrity("events_fts")
        store.fts_integrity("rollups_fts")
        return
    assert tuple(store.query("SELECT doc, toks FROM fts_stats WHERE term = ''")[0]) == tuple(
        store.query("SELECT count(*), sum(r.ntok + coalesce(t.ntok, 0)) FROM (SELECT id, ntok "
                    "FROM events UNION ALL SELECT id, ntok FROM events_archive) AS r "
                    "LEFT JOIN fts_event_tags AS t USING (id)")[0])
    assert dict(store.query("SELECT term, doc FROM fts_stats WHERE doc > 0 AND term <> ''")) == dict(
        store.query("SELECT u, count(*) FROM (SELECT r.id, r.tsv || coalesce(t.tsv, '') AS v "
                    "FROM (SELECT id, tsv FROM events UNION ALL SELECT id, tsv "
                    "FROM events_archive) AS r LEFT JOIN fts_event_tags AS t USING (id)) AS x, "
                    "unnest(tsvector_to_array(x.v)) AS u GROUP BY u"))
    assert tuple(store.query("SELECT doc, toks FROM fts_rollup_stats WHERE term = ''")[0]) == tuple(
        store.query("SELECT count(*), sum(ntok) FROM fts_rollups")[0])
    assert {(r[0], r[1]): r[2] for r in store.query(
        "SELECT term, mask, doc FROM fts_rollup_stats WHERE doc > 0 AND term <> ''")} == {
        (r[0], r[1]): r[2] for r in store.query(
            "SELECT u.lexeme, fts_mask(u.weights), count(*) FROM fts_rollups, "
            "unnest(tsv) AS u GROUP BY 1, 2")}
    assert sorted(map(tuple, store.query("SELECT term, level, id FROM fts_rollup_terms"))) == sorted(
        map(tuple, store.query(pg_fts.ROLLUP_TERMS.replace("{rows}", "fts_rollups AS f"))))


@pytest.mark.parametrize("where", ["hot", "archive"])
def test_a_redacted_secret_matches_nothing_and_its_marker_does(store: Any, where: str) -> None:
    secret_id, ids = _seeded(store, where)
    assert _event_hits(store, SECRET) == [secret_id]
    assert _event_hits(store, "walrusops") == [secret_id]
    assert _rollup_hits(store, SECRET) == [1]
    _counts_are_the_rows_own(store)

    report = redact_event(store, secret_id, "leaked deploy key")

    e = ev.get(store, secret_id)
    assert e is not None and e.source == where == report.source
    assert e.body == report.marker == f"[redacted #{report.redaction_id}: leaked deploy key]"
    assert e.meta == {"redacted": report.redaction_id}
    assert [w for w in (SECRET, "walrus", "walrusops", "dana")
            if _event_hits(store, w) or _rollup_hits(store, w)] == []
    assert secret_id in _event_hits(store, "leaked")
    assert _event_hits(store, "harbourops") == [ids[0]]
    assert _rollup_hits(store, "deployments") == [1] and sorted(_rollup_hits(store, "harbour")) == [1, 2]
    _the_ladder_and_tags_follow(store, secret_id, report.rollups)
    _counts_are_the_rows_own(store)


def _the_ladder_and_tags_follow(store: Any, secret_id: int, rewritten: list[int]) -> None:
    assert ev.doc_freqs(store, [SECRET]).get(SECRET, 0) == 0
    assert rewritten == [1] and rs.for_item(store, "rollup", 1)
    assert [w for w, _ in tags.listing(store, "event", secret_id)] == []
    assert [w for w, _ in tags.listing(store, "rollup", 1)] == ["deployments"]


def test_every_copy_of_the_text_is_scrubbed(store: Any) -> None:
    secret_id, ids = _seeded(store, "hot")
    report = redact_event(store, secret_id, "leaked deploy key")
    assert report.copies == {"promotions": 1, "pins": 1, "side_effects": 1, "approvals": 1}
    [d] = decisions.all_(store)
    assert d.body == report.marker
    assert [r[0] for r in vectors.all_for(store, "m")] == [ids[0]]
    texts = [str(v) for table in ("promotions", "pins", "side_effects", "approvals", "rollups",
                                  "tags", "decisions")
             for row in store.query(f"SELECT * FROM {table}") for v in tuple(row)]
    assert not [t for t in texts if SECRET in t.lower()]
    assert "[redacted]" in store.query("SELECT arguments FROM approvals")[0][0]
    # the rest of the history is untouched; the redaction left its own event
    assert [getattr(ev.get(store, i), "body", None) for i in ids if i != secret_id] == [
        f"routine meeting about topic{i} and the harbour" for i in range(12) if i != 5]
    assert getattr(ev.get(store, int(report.event or 0)), "kind", None) == "redaction"


def test_an_update_without_a_redaction_is_still_refused(store: Any) -> None:
    secret_id, _ = _seeded(store, "hot")
    redact_event(store, secret_id, "leaked deploy key")
    for sql in ("UPDATE events SET body = 'x' WHERE id = 1",
                f"UPDATE events SET body = '[redacted #999: x]' WHERE id = {secret_id}",
                "UPDATE rollups SET title = 'x' WHERE id = 2"):
        with pytest.raises(Exception):  # noqa: B017 - sqlite3's IntegrityError or StoreRefused
            store.execute(sql)


def test_secure_delete_and_compact_on_each_backend(store: Any) -> None:
    secret_id, _ = _seeded(store, "hot")
    report = redact_event(store, secret_id, "leaked deploy key")
    assert report.compacted
    if store.dialect == "sqlite":
        before = rs.secure_delete(store, True)  # the redaction put back what it found
        assert rs.secure_delete(store, False) is True and rs.secure_delete(store, before) is False
        return
    # no PRAGMA on PostgreSQL: nothing to set, nothing was set
    assert rs.secure_delete(store, True) is False and rs.secure_delete(store, False) is False
    # compact is a VACUUM of every table a redaction writes
    vacuumed = dict(store.query(
        "SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE schemaname = "
        "current_schema()"))
    assert {t for t in rs.PG_COMPACTED if vacuumed.get(t, 0) < 1} == set()
