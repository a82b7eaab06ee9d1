"""The store modules beyond the event log on both backends (issue 42): each test body runs on a
SQLite Store and on a PgStore (the `store` fixture of tests/test_store_backends.py), so what
each module promises holds whichever backend is chosen.

The ladder (sealing, a sealed rollup refused a change or a delete), promotions, pins,
decisions, promises, telemetry, turns, the side-effect ledger (one row a turn and key, a tool
pattern matched without regard to case), the approval queue (decided and started once, moved
only forward, expired), deliveries (owed once, moved only forward, counted), hook deliveries (a
redelivery taken once), clients (added, verified, counted, revoked once), import keys and the
owner's vouching, usage today, replies, watches, rituals and vectors (written again in place,
the counter a loaded matrix watches)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runtime.errors import Refused, StoreRefused
from runtime.store import (
    Event,
    hooks,
    import_keys,
    pins,
    promises,
    replies,
    rituals,
    side_effects,
    telemetry,
    turns,
    usage,
    vectors,
    watches,
)
from runtime.store import approvals as ap
from runtime.store import clients as cl
from runtime.store import decisions as dec
from runtime.store import deliveries as dl
from runtime.store import events as ev
from runtime.store import promotions as pr
from runtime.store import rollups as rl
from runtime.store.events import iso_z

from . import pgserver
from . import test_store_backends as backends

# the fixtures: `store` on each backend (`backend`), a PostgreSQL database a test (`pg_url`)
backend, store, pg_url = backends.backend, backends.store, pgserver.pg_url


def _refused(store: Any, sql: str, params: tuple = (), says: str | None = None) -> None:
    """`sql` is refused by the database itself, as StoreRefused on both backends."""
    with pytest.raises(StoreRefused, match=says):
        store.execute(sql, params)


def _seal(store: Any, level: int, first: int | None, last: int | None, **kw: Any) -> int | None:
    return rl.seal(store, level=level, first_event=first, last_event=last,
                   source_range=f"{first}-{last}", first_ts=None, last_ts=None,
                   title=kw.pop("title", "t"), body="b", terms="x", method="test", **kw)


# the ladder, the memory tables -------------------------------------------------------------------

def test_rollups_seal_once_and_a_sealed_one_never_changes(store: Any) -> None:
    a, b = _seal(store, 1, 1, 5), _seal(store, 1, 6, 9, vocab="alpha beta")
    assert a and b and _seal(store, 1, 3, 4) is None  # already covered
    top = _seal(store, 2, None, None, child_ids=[a, b], title="chapter")
    assert top and _seal(store, 2, None, None, child_ids=[a, b]) is None
    assert [r.parent_id for r in rl.children(store, top)] == [top, top]
    assert rl.get_many(store, [b])[b].vocab == "alpha beta"
    assert (rl.counts_per_level(store), rl.top_level(store)) == ({1: 2, 2: 1}, 2)
    assert (rl.episode_covering(store, 7), rl.episode_covering(store, 10)) == (b, None)
    assert [r.id for r in rl.newest_per_level(store)] == [top, b]
    _refused(store, "UPDATE rollups SET title = 'x' WHERE id = ?", (a,), "never changes")
    _refused(store, "UPDATE rollups SET parent_id = NULL WHERE id = ?", (a,), "never changes")
    _refused(store, "DELETE FROM rollups WHERE id = ?", (top,), "never deleted")


def test_promotions_added_decided_and_listed(store: Any) -> None:
    q = pr.add(store, "the owner likes tea", [1, 2], 0.5, pr.Status.QUEUED, "unsure", "reflect")
    done = pr.add(store, "deploys on fridays", None, None, pr.Status.APPLIED, "ok", "tell",
                  entry_id="m1", supersedes="m0")
    assert (q.decided_at, q.source_events, done.decided_at is not None) == (None, [1, 2], True)
    pr.decide(store, q.id, pr.Status.APPROVED, "yes", entry_id="m2")
    got = pr.get(store, q.id)
    assert got and (got.status, got.entry_id, got.confidence) == ("approved", "m2", 0.5)
    assert [p.id for p in pr.listing(store)] == [done.id, q.id]
    assert [p.id for p in pr.listing(store, "applied")] == [done.id]
    assert sorted(pr.entry_ids_ever_used(store)) == ["m0", "m1", "m2"]
    assert list(pr.superseded(store)) == ["m0"]


def test_pins_and_decisions(store: Any) -> None:
    p = pins.add(store, "keep this")
    assert [x.text for x in pins.active(store)] == ["keep this"]
    assert pins.unpin(store, p.id) and not pins.unpin(store, p.id) and pins.active(store) == []
    e = ev.append(store, Event(kind="decision", body="use tabs"))
    first = dec.record(store, "use tabs", [e], None, e, "2026-01-01T00:00:00.000Z")
    later = dec.record(store, "use spaces", [e, 999999], first.id, None, "2026-01-02T00:00:00Z")
    assert (later.source_events, later.supersedes) == (None, first.id)  # 999999 does not exist
    assert dec.superseded(store) == {first.id: later.id}
    assert dec.stale_events(store) == {e: f"decision {later.id}"}
    assert (dec.by_event(store, e), [d.body for d in dec.all_(store)]) == (
        first.id, ["use tabs", "use spaces"])


# the loop's own records ------------------------------------------------------------------------

def test_promises_fall_due_until_the_loop_marks_them(store: Any) -> None:
    later = ev.append(store, Event(kind="promise", body="b", meta={"due": "2026-02-01T00:00:00Z"}))
    soon = ev.append(store, Event(kind="promise", body="a", meta={"due": "2026-01-01T00:00:00Z"}))
    ev.append(store, Event(kind="promise", body="c", meta={"due": "2020-01-01T00:00:00Z",
                                                           "imported": True}))
    assert [e.id for e in promises.due(store, "2026-01-15T00:00:00Z")] == [soon]
    ev.append(store, Event(kind="promise_due", body="", meta={"promise_id": soon}))
    assert promises.due(store, "2026-01-15T00:00:00Z") == []
    assert promises.next_due(store) == "2026-02-01T00:00:00Z" and later


def test_telemetry_counts_and_walk_stats(store: Any) -> None:
    telemetry.record(store, "walk", {"refused": True})
    telemetry.record(store, "walk", {"refused": 2})
    telemetry.record(store, "walk")
    assert telemetry.count(store, "walk") == 3
    assert telemetry.walk_stats(store, "2000-01-01") == {"walks": 3, "refusals": 3}


def test_turns_read_back_what_a_tick_took_and_gated(store: Any) -> None:
    a, b = (ev.append(store, Event(kind="message", body=t)) for t in ("a", "b"))
    first = ev.append(store, Event(kind="tick", meta={"inputs": [a, b]}))
    again = ev.append(store, Event(kind="tick", meta={"inputs": [b], "resumes": first}))
    ev.append(store, Event(kind="tick", meta={"inputs": [b], "imported": True}))
    ev.append(store, Event(kind="tick_end", tick_id=again, meta={"outcome": "acted"}))
    ev.append(store, Event(kind="promotion", meta={"input_id": b}))
    assert turns.took(store, [b]) == [first, again] and turns.took(store, [a]) == [first]
    assert turns.turn_of(store, again) == first and turns.chain(store, again) == [again, first]
    last = turns.last_attempt(store)
    assert last and (last.tick_id, last.inputs, last.completed) == (again, [b], True)
    assert turns.gated(store, b) and not turns.gated(store, a)


def test_the_side_effect_ledger_runs_a_key_once_a_turn(store: Any) -> None:
    tick = ev.append(store, Event(kind="tick", meta={"inputs": []}))
    assert side_effects.begin(store, "tu_1", "Srv__Send", tick, {"to": "x"}) is None
    again = side_effects.begin(store, "tu_1", "Srv__Send", tick, {"to": "x"})
    assert again and (again.status, again.turn) == ("started", tick)
    assert side_effects.begin(store, "tu_1", "Srv__Send", None, {}) is None  # another turn
    side_effects.finish(store, "tu_1", True, "sent", tick_id=tick)
    got = side_effects.get(store, "tu_1", tick)
    assert got and (got.status, got.result) == ("done", "sent")
    assert side_effects.count_since(store, "2000-01-01", "%srv\\_\\_%") == 2  # ASCII case folded
    assert side_effects.count_since(store, "2000-01-01", "%\\_\\_x%") == 0
    assert side_effects.done_in(store, [tick]) == [("Srv__Send", '{"to": "x"}', "sent", "done")]
    _refused(store, "INSERT INTO side_effects(key, turn, tool, status, started_at) "
             "VALUES ('tu_1', ?, 't', 'done', 'now')", (tick,))


# queues and ledgers of the outside world --------------------------------------------------------

def _queue(store: Any, tool_use_id: str | None = "tu_9", ttl_s: int = 3600) -> ap.Approval:
    return ap.add(store, tick_id=None, server="mail", tool="send", name="mail__send",
                  arguments={"to": "x"}, reason="asked", sources=[1], tool_use_id=tool_use_id,
                  ttl_s=ttl_s)


def test_approvals_move_only_forward_and_run_once(store: Any) -> None:
    a = _queue(store)
    assert _queue(store).id == a.id and ap.counts(store)["waiting"] == 1
    got = ap.decide(store, a.id, ap.Status.APPROVED, "fine")
    assert (got.status, got.why, [x.id for x in ap.approved(store)]) == ("approved", "fine", [a.id])
    with pytest.raises(ap.WrongStatus):
        ap.decide(store, a.id, ap.Status.REJECTED, None)
    assert ap.start(store, a.id) and not ap.start(store, a.id)
    ap.finish(store, a.id, True, None)
    with pytest.raises(ap.WrongStatus):
        ap.finish(store, a.id, False, None)
    _refused(store, "UPDATE approvals SET status = 'waiting' WHERE id = ?", (a.id,), "forward")
    _refused(store, "DELETE FROM approvals WHERE id = ?", (a.id,), "never deleted")
    old = _queue(store, "tu_old", ttl_s=-10)
    assert ap.expire(store, iso_z(datetime.now(UTC))) == [old.id]
    assert ap.counts(store) | {} == {s.value: int(s in ("done", "expired")) for s in ap.Status}
    assert [x.id for x in ap.listing(store, None)] == [old.id, a.id]


def test_deliveries_are_owed_once_and_move_only_forward(store: Any) -> None:
    ev.append(store, Event(kind="outbox", body="before the target", actor="coworker"))
    dl.begin(store, ["phone"])
    reply = ev.append(store, Event(kind="outbox", body="hello", actor="coworker"))
    ev.append(store, Event(kind="outbox", body="not ours", actor="someone"))
    wanted = {"phone": {"outbox": "reply"}}
    assert dl.scan(store, wanted, "coworker") == 1 and dl.scan(store, wanted, "coworker") == 0
    head = dl.head(store, "phone")
    assert head and (head.event_id, head.what, head.status) == (reply, "reply", "pending")
    dl.attempt_failed(store, head.id, "timed out", "2000-01-01T00:00:00Z", give_up=False)
    assert dl.counts(store, ["phone"], "2000-01-01") == {"pending": 1, "retrying": 1, "failed": 0}
    assert dl.last_error(store, ["phone"]) == ("phone", "timed out")
    dl.delivered(store, head.id)
    assert dl.head(store, "phone") is None and dl.sent_since(store, "phone", "2000-01-01") == 1
    _refused(store, "UPDATE deliveries SET status = 'pending' WHERE id = ?", (head.id,), "forward")
    _refused(store, "DELETE FROM deliveries WHERE id = ?", (head.id,), "never deleted")


def test_a_hook_delivery_is_taken_once(store: Any) -> None:
    first = hooks.take(store, "gh", "d-1", "sha-a", Event(kind="message", body="push"))
    again = hooks.take(store, "gh", "d-1", "sha-b", Event(kind="message", body="push"))
    replay = hooks.take(store, "gh", None, "sha-a", Event(kind="message", body="push"))
    other = hooks.take(store, "ci", "d-1", "sha-a", Event(kind="message", body="push"))
    assert (first.duplicate, again, replay, other.duplicate) == (
        False, hooks.Taken(first.event_id, True), hooks.Taken(first.event_id, True), False)
    assert (hooks.count(store), hooks.count(store, "gh")) == (2, 1)


def test_clients_added_verified_counted_and_revoked_once(store: Any) -> None:
    client, token = cl.add(store, "ci-bot", "tell")
    with pytest.raises(Refused, match="exists already"):
        cl.add(store, "ci-bot")
    found = cl.verify(store, token)
    assert found and (found.id, found.may_tell) == (client.id, True)
    assert cl.verify(store, "not a token") is None
    cl.count(store, client.id, "recall")
    cl.count(store, client.id, "recall")
    assert cl.listing(store)[0].calls == {"recall": 2}
    gone = cl.revoke(store, "ci-bot")
    assert gone.revoked_at and (cl.verify(store, token) or gone).revoked_at == gone.revoked_at
    with pytest.raises(Refused, match="no active client"):
        cl.revoke(store, "ci-bot")
    _refused(store, "UPDATE clients SET revoked_at = 'later' WHERE id = ?", (client.id,), "once")
    _refused(store, "DELETE FROM client_calls", (), "never deleted")
    assert cl.add(store, "ci-bot")[0].id != client.id  # the name is free again


def test_import_keys_and_the_owners_vouching(store: Any) -> None:
    rows = [Event(kind="message", body=f"line {i}", actor="sam", author_kind="user",
                  meta={"imported": True, "import_batch": "b1"}).to_row() for i in range(3)]
    with store.transaction():
        writer = import_keys.FileWriter(store, "chat.jsonl")
        span = writer.write(rows, ["k2", "k0", "k1"])
        assert writer.finish() == 3
    assert span and span[1] - span[0] == 2
    assert import_keys.present(store, ["k0", "k9", "k1"]) == {"k0", "k1"}
    assert import_keys.batches_of(store, ["k0", "k1"], "sam") == {"b1"}
    import_keys.vouch(store, "b1", "sam", "chat.jsonl")
    assert import_keys.vouched(store) == {"b1": {"sam"}}
    assert import_keys.unvouch(store, "b1") == ["sam"] and import_keys.vouched(store) == {}


def test_usage_today_counts_calls_and_tokens(store: Any) -> None:
    now = datetime.now(UTC)
    tick = ev.append(store, Event(kind="tick", meta={"watch_only": True}))
    ev.append(store, Event(kind="model_response", tick_id=tick, meta={
        "attempts": 2, "usage": {"input_tokens": 100, "output_tokens": 20}}))
    ev.append(store, Event(kind="tick_failed", meta={"attempts": 1}))
    ev.append(store, Event(kind="model_response", meta={"attempts": 5, "imported": True}))
    ev.append(store, Event(kind="model_response", meta={"attempts": 7},
                           ts=iso_z(now - timedelta(days=2))))
    usage.record_calls(store, "reflect", 4, {"input_tokens": 1})
    assert usage.today(store, now) == usage.Usage(calls=7, tokens=121)
    assert usage.watch_calls_today(store, now) == 2


def test_replies_read_marks_and_answers(store: Any) -> None:
    asked = ev.append(store, Event(kind="message", body="hi", actor="owner", author_kind="user"))
    one = ev.append(store, Event(kind="outbox", body="hello", meta={"in_reply_to": [asked]}))
    two = ev.append(store, Event(kind="outbox", body="also"))
    assert [(e.id, read) for e, read in replies.listed(store)] == [(one, False), (two, False)]
    assert replies.mark_read(store, [one]) and replies.mark_read(store, [one]) is None
    assert replies.read_ids(store) == {one}
    assert [(e.id, read) for e, read in replies.listed(store, every=True)] == [
        (two, False), (one, True)]
    found = replies.answering(store, asked)
    assert found and found.id == one and replies.answering(store, two) is None


def test_watches_and_rituals(store: Any) -> None:
    assert watches.last_seen(store, "inbox") is None
    ev.append(store, Event(kind="watch_baseline", meta={"watch": "inbox", "hash": "h1",
                                                        "text": "0 new"}))
    seen = ev.append(store, Event(kind="watch_change", meta={"watch": "inbox", "hash": "h2",
                                                             "text": "1 new"}))
    ev.append(store, Event(kind="watch_change", meta={"watch": "inbox", "hash": "h3",
                                                      "imported": True}))
    assert watches.last_seen(store, "inbox") == watches.Seen("h2", "1 new", seen)
    run = rituals.start(store, "reflect")
    rituals.finish(store, run, "ok", {"sealed": 2})
    failed = rituals.start(store, "reflect")
    rituals.finish(store, failed, "failed", {})
    last = rituals.last(store, "reflect", status="ok")
    assert last and (last.id, last.stats) == (run, {"sealed": 2})
    assert [r.id for r in rituals.recent(store)] == [failed, run]
    other = rituals.last(store, "reflect", exclude_status="ok")
    assert other and other.id == failed


def test_vectors_written_again_in_place_and_watched(store: Any) -> None:
    ids = [ev.append(store, Event(kind="note", body=f"text {i}")) for i in range(3)]
    assert [i for i, _ in vectors.missing_events(store, "m", ["tick"])] == ids
    before = vectors.signature(store, "m")
    vectors.write(store, "m", [(ids[0], 2, b"\x00\x01", "h0"), (ids[1], 2, b"\x02", "h1")])
    after = vectors.signature(store, "m")
    vectors.write(store, "m", [(ids[0], 2, b"\xff\x00", "h0b")])  # in place, counted anyway
    assert (before[0], after[0], vectors.signature(store, "m")[0]) == (0, 2, 2)
    assert len({before, after, vectors.signature(store, "m")}) == 3
    assert vectors.all_for(store, "m") == [(ids[0], b"\xff\x00", 2), (ids[1], b"\x02", 2)]
    assert (vectors.count(store, "m"), vectors.count(store, "m", "event", ids[0])) == (2, 1)
    assert [i for i, _ in vectors.missing_events(store, "m", ["tick"])] == [ids[2]]
    assert vectors.window_start(store, 1) == ids[2] - 1
    assert [r[2] for r in vectors.with_bodies(store, "m")] == ["h0b", "h1"]


def test_a_refused_write_is_store_refused_on_both(store: Any) -> None:
    """SQLite's refusal is StoreRefused too, and still the IntegrityError older callers catch;
    inside a transaction as outside one."""
    tick = ev.append(store, Event(kind="note", body="x"))
    with pytest.raises(StoreRefused, match="append-only"), store.transaction() as db:
        db.execute("UPDATE events SET kind = 'other' WHERE id = ?", (tick,))
    with pytest.raises(StoreRefused, match="never deleted") as refused:
        store.execute("DELETE FROM events WHERE id = ?", (tick,))
    assert isinstance(refused.value, sqlite3.IntegrityError) == (store.dialect == "sqlite")
    assert store.has_table("approvals") and not store.has_table("no_such_table")


def test_a_strikes_snapshot_is_a_number_only_when_written_as_one(store: Any) -> None:
    from runtime.store import Event, strikes

    def strike(snapshot: Any) -> int:
        return ev.append(store, Event(kind="memory_strike", body="struck [m1]", actor="owner",
                                      author_kind="user",
                                      meta={"entry_id": "m1", "snapshot": snapshot}))
    first = strike(3)
    assert strikes.latest(store, "m1") == strikes.Strike(first, 3)
    second = strike("4")  # text, not a number: never read as one (ADR-0008)
    assert strikes.latest(store, "m1") == strikes.Strike(second, None)
    assert strikes.latest(store, "m2") is None
