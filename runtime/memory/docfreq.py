"""How many events hold each word: the document frequencies recall and the walk weigh words by.

Owns one number per stem, exact, and cheap on a long history. `events_vocab` (FTS5's vocabulary
table) counts a word's documents by reading its whole doclist, so a common word cost tens of
milliseconds at a million events, on every turn (recall builds its scorer per call) and every
walk (issue 15); so did counting the history's rows. Here each count is read once per process
and database and then kept: the history only grows between changes of another kind, so when
events are appended the kept counts are brought up to date from the new events' own words
(`memory.tokens`, which mirrors FTS5's tokenizer, over the indexed columns body, kind and
actor), and anything else that rewrites index rows (a tag added to an event, a redaction)
empties what is kept. The number of documents is FTS5's own row count. A large append (an
import, or one long message) also empties it: reading the new events would cost more than
counting again.

Read-only; knows nothing of ranking. Bounded: at most MAX_STEMS counts are kept.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..store import Store
from ..store import events as ev
from .tokens import stem, words

MAX_STEMS = 20_000  # counts kept per database (a few MB at most)
MAX_DELTA = 5_000  # appended events read to bring the counts up to date; more: count again
MAX_DELTA_CHARS = 200_000  # ... and their characters (stemming a 4 MB message took 7 s)
CHUNK = 500  # stems whose counts one query reads


@dataclass
class _Kept:
    top: int = 0  # the highest event id the counts include
    stamp: tuple[int, int, int] = (0, 0, 0)  # newest tag, redaction; the file: rows rewritten
    docs: int = 0
    counts: dict[str, int] = field(default_factory=dict)


_KEPT: dict[str, _Kept] = {}
_LOCK = threading.Lock()  # the MCP server answers calls on threads of their own


def _state(store: Store) -> tuple[int, tuple[int, int, int], int]:
    top = ev.fts_top_id(store, "events_fts")
    try:
        inode = os.stat(store.path).st_ino  # a backup restored in place is another file
    except OSError:
        inode = 0
    stamp = (int(store.scalar("SELECT coalesce(max(id), 0) FROM tags") or 0),
             int(store.scalar("SELECT coalesce(max(id), 0) FROM redactions") or 0), inode)
    return top, stamp, ev.fts_rows(store, "events_fts")


def _catch_up(store: Store, kept: _Kept, top: int) -> bool:
    """Add the appended events' documents to the kept counts; False, and nothing added, when
    their texts hold more than MAX_DELTA_CHARS (then counting again costs less)."""
    span = (kept.top, top)  # history: reflect may have archived them since
    size = store.scalar("SELECT coalesce(sum(length(body) + length(kind) + length(actor)), 0) "
                        "FROM history WHERE id > ? AND id <= ?", span)
    if int(size or 0) > MAX_DELTA_CHARS:  # measured in SQLite: a long text is never read here
        return False
    for r in store.query("SELECT body, kind, actor FROM history WHERE id > ? AND id <= ?", span):
        have = {stem(w) for col in r if col for w in words(str(col))}
        for s in have & kept.counts.keys():
            kept.counts[s] += 1
    return True


def doc_freqs(store: Store, stems: Sequence[str]) -> tuple[dict[str, int], int]:
    """(events holding each stem, events in all), as `events.doc_freqs` and the row count of
    the index give them, from what is kept where it still holds."""
    key = str(store.path)
    with _LOCK, store.snapshot():  # the counts and the top they include: one moment
        kept = _KEPT.get(key)
        top, stamp, docs = _state(store)
        if kept is None or stamp != kept.stamp or top < kept.top or top - kept.top > MAX_DELTA \
                or (top > kept.top and not _catch_up(store, kept, top)):
            kept = _KEPT[key] = _Kept(top, stamp, docs)
        elif top > kept.top:
            kept.top, kept.docs = top, docs
        missing = [s for s in dict.fromkeys(stems) if s not in kept.counts]
        if len(kept.counts) + len(missing) > MAX_STEMS:  # full: empty it, read these again
            kept.counts = {}
            missing = list(dict.fromkeys(stems))
        for i in range(0, len(missing), CHUNK):
            found = ev.doc_freqs(store, missing[i:i + CHUNK])
            for s in missing[i:i + CHUNK]:
                kept.counts[s] = found.get(s, 0)
    return {s: kept.counts[s] for s in stems}, kept.docs
