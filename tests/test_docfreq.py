"""memory.docfreq: document frequencies kept per process, equal to the index's at every turn.

The contract is equality with what FTS5's vocabulary table and row count say now, through what
happens to a history in life: events appended (by the loop, by an import), archived by
reflect, tagged, redacted; and the kept counts are brought up to date from the appended events
alone, without counting a common word's documents again (what cost tens of milliseconds a
word at a million events).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runtime.home import Home
from runtime.memory import docfreq
from runtime.memory.tokens import stem
from runtime.redaction import redact_event
from runtime.store import Event, Store, archive
from runtime.store import events as ev
from runtime.store import tags as tg

WORDS = ["billing", "export", "invoice", "zeppelin", "owner", "nightly", "absent"]
STEMS = [stem(w) for w in WORDS]


def _truth(store: Store) -> tuple[dict[str, int], int]:
    found = ev.doc_freqs(store, STEMS)
    return {s: found.get(s, 0) for s in STEMS}, ev.total(store)


def _note(body: str, days_ago: int = 0) -> Event:
    ts = (datetime.now(UTC) - timedelta(days=days_ago)).isoformat(timespec="milliseconds")
    return Event(kind="note", body=body, actor="coworker", author_kind="agent",
                 ts=ts.replace("+00:00", "Z"))


def test_kept_counts_equal_the_index_through_a_historys_life(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, [_note(f"Nightly billing export {i}, owner Dana.", 90)
                               for i in range(30)])
        assert docfreq.doc_freqs(store, STEMS) == _truth(store)

        counted: list[list[str]] = []
        real = ev.doc_freqs

        def spy(s, stems):  # noqa: ANN001, ANN202
            counted.append(list(stems))
            return real(s, stems)
        monkeypatch.setattr(ev, "doc_freqs", spy)
        # the loop appends: the kept counts follow from the new events' words alone
        ids = ev.append_many(store, [_note("The zeppelin invoice export slipped."),
                                     _note("Owners of the nightly billing job: Ravi.", 90)])
        got = docfreq.doc_freqs(store, STEMS)
        assert counted == [], "the appended events were not read: every word was counted again"
        monkeypatch.undo()
        assert got == _truth(store)
        # an imported old event is archived by reflect before the next turn: read from history
        ev.append_many(store, [_note("Old zeppelin billing notes, owner Mei.", 90)])
        archive.move_older_than(store, (datetime.now(UTC) - timedelta(days=30)).isoformat())
        ev.append_many(store, [_note("Billing again.")])
        assert docfreq.doc_freqs(store, STEMS) == _truth(store)
        # a tag rewrites an event's index row with one more word
        tg.add(store, "event", ids[0], ["absent", "billing"])
        assert docfreq.doc_freqs(store, STEMS) == _truth(store)
        # a redaction takes words out of the index
        redact_event(store, ids[1], "test")
        assert docfreq.doc_freqs(store, STEMS) == _truth(store)


def test_an_import_sized_append_counts_again(offline_home: Home,
                                             monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(docfreq, "MAX_DELTA", 5)
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, [_note("billing export")])
        docfreq.doc_freqs(store, STEMS)
        ev.append_many(store, [_note(f"zeppelin billing {i}") for i in range(12)])
        read: list[int] = []
        real = docfreq._catch_up
        monkeypatch.setattr(docfreq, "_catch_up",
                            lambda *a: read.append(1) or real(*a))  # noqa: ARG005
        assert docfreq.doc_freqs(store, STEMS) == _truth(store)
        assert read == [], "12 appended events (over MAX_DELTA) were read one by one"


def test_the_counts_stay_bounded(offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(docfreq, "MAX_STEMS", 4)
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, [_note("billing export owner nightly zeppelin invoice")])
        for i in range(0, len(STEMS), 2):
            got, _ = docfreq.doc_freqs(store, STEMS[i:i + 2])
            assert got == {s: _truth(store)[0][s] for s in STEMS[i:i + 2]}
            assert len(docfreq._KEPT[str(store.path)].counts) <= 4
