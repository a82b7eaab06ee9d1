"""Lexical search over the whole history (hot events and archive) and the ladder's rollups.

Owns turning a query into FTS5 terms (the words of `memory.tokens`) and merging the two
indexes into one ranked list (bm25, best first). It reads; it never writes and never calls a
model. It reads at most `cards.MAX_QUERY_CHARS` characters of a query (the rest is ignored; a
door that shows the hits says so: `cap_query(query)[1]`), and de-duplicates its words in
linear time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..store import Store
from ..store import decisions as dec
from ..store import events as ev
from ..store import rollups as rl
from ..store.events import BOOKKEEPING_KINDS
from .cards import cap_query
from .tokens import query_words


@dataclass(frozen=True)
class Hit:
    kind: str  # "event" or "rollup"
    id: int
    ts: str | None
    label: str  # event kind, or "level N"
    excerpt: str
    score: float
    source: str  # hot, archive, ladder

    def as_dict(self) -> dict:
        return asdict(self)


# The loop's own bookkeeping is not memory worth finding: it only echoes the query back.
BOOKKEEPING = tuple(sorted(BOOKKEEPING_KINDS))


def search(store: Store, query: str, limit: int = 10) -> list[Hit]:
    match = ev.fts_query(query_words(cap_query(query)[0]))
    if match is None:
        return []
    hits: list[Hit] = []
    stale = dec.stale_events(store)
    for event, score, snip in ev.fts_search(store, match, limit, BOOKKEEPING):
        label = event.kind
        if event.id in stale:
            label = f"{event.kind} (stale: superseded by decision {stale[event.id]})"
        hits.append(Hit("event", int(event.id or 0), event.ts, label, snip, score,
                        event.source))
    for rollup, score in rl.fts_search(store, match, limit):
        text = f"{rollup.title}: {rollup.body}" if rollup.title else rollup.body
        hits.append(Hit("rollup", rollup.id, rollup.last_ts, f"level {rollup.level}",
                        text[:240], score, "ladder"))
    hits.sort(key=lambda h: (h.score, h.kind != "rollup", h.id))
    return hits[:limit]
