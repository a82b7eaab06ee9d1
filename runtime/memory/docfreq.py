"""How many events hold each word: the document frequencies recall and the walk weigh words by.

Owns one number per stem, exact, and cheap on a long history. `events_vocab` (FTS5's vocabulary
table) counts a word's documents by reading its whole doclist, so a common word cost tens of
milliseconds at a million events, on every turn (recall builds its scorer per call) and every
walk (issue 15); so did counting the history's rows. Here each count is read once per process
and database and then kept: the history only grows between changes of another kind, so when
events are appended the kept counts are brought up to date from the new events' own words
(`memory.tokens`, which mirrors FTS5's tokenizer, over the indexed columns body, kind and
actor), and anything else that rewrites index rows (a tag added to an event, a redaction:
`store.fts.history_stamp`) empties what is kept. The number of documents is the history's
(one events_fts row an event), counted when the counts start and then grown by the events
appended. A large append (an import, or one long message) also empties it: reading the new
events would cost more than counting again.

Read-only; knows nothing of ranking; speaks no SQL (the store's `fts` and `events` do). Bounded:
at most MAX_STEMS counts are kept.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..store import Store, fts
from ..store import events as ev
from .tokens import stem, words

MAX_STEMS = 20_000  # counts kept per database (a few MB at most)
MAX_DELTA = 5_000  # appended events read to bring the counts up to date; more: count again
MAX_DELTA_CHARS = 200_000  # ... and their characters (stemming a 4 MB message took 7 s)
CHUNK = 500  # stems whose counts one query reads


@dataclass
class _Kept:
    top: int = 0  # the highest event id the counts include
    stamp: tuple[int, ...] = (0, 0, 0)  # newest tag, redaction; the file: rows rewritten
    docs: int = 0
    counts: dict[str, int] = field(default_factory=dict)


_KEPT: dict[str, _Kept] = {}
_LOCK = threading.Lock()  # the MCP server answers calls on threads of their own


def _current(store: Store, kept: _Kept | None) -> _Kept:
    """The kept counts brought up to the index as it is now, or new empty ones (with the
    history's size) when they no longer hold or catching up would cost more than counting."""
    top, stamp = ev.fts_top_id(store, "events_fts"), fts.history_stamp(store)
    if kept is not None and stamp == kept.stamp and kept.top <= top <= kept.top + MAX_DELTA \
            and _catch_up(store, kept, top):
        return kept
    return _Kept(top, stamp, ev.total(store))


def _catch_up(store: Store, kept: _Kept, top: int) -> bool:
    """Add the events appended up to `top` to the kept counts and documents; False, and
    nothing added, when their texts hold more than MAX_DELTA_CHARS (then counting again costs
    less)."""
    if top == kept.top:
        return True
    # history: reflect may have archived them since; measured in SQLite: a long text is never
    # read here
    if fts.history_chars(store, kept.top, top) > MAX_DELTA_CHARS:
        return False
    texts = fts.history_texts(store, kept.top, top)
    for cols in texts:
        have = {stem(w) for col in cols for w in words(col)}
        for s in have & kept.counts.keys():
            kept.counts[s] += 1
    kept.top, kept.docs = top, kept.docs + len(texts)
    return True


def _fill(store: Store, kept: _Kept, stems: Sequence[str]) -> None:
    """Read the counts of the stems not kept yet (emptying what is kept when it is full)."""
    missing = [s for s in dict.fromkeys(stems) if s not in kept.counts]
    if len(kept.counts) + len(missing) > MAX_STEMS:  # full: empty it, read these again
        kept.counts = {}
        missing = list(dict.fromkeys(stems))
    for i in range(0, len(missing), CHUNK):
        found = ev.doc_freqs(store, missing[i:i + CHUNK])
        for s in missing[i:i + CHUNK]:
            kept.counts[s] = found.get(s, 0)


def doc_freqs(store: Store, stems: Sequence[str]) -> tuple[dict[str, int], int]:
    """(events holding each stem, events in all), as `events.doc_freqs` and the history's
    size give them, from what is kept where it still holds."""
    key = str(store.path)
    with _LOCK, store.snapshot():  # the counts and the top they include: one moment
        kept = _KEPT[key] = _current(store, _KEPT.get(key))
        _fill(store, kept, stems)
    return {s: kept.counts[s] for s in stems}, kept.docs
