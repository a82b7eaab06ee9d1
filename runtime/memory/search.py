"""Lexical search over the whole history (hot events and archive) and the ladder's rollups.

Owns turning a query into FTS5 terms (the words of `memory.tokens`) and merging the two
indexes into one ranked list (bm25, best first). It reads; it never writes and never calls a
model. It reads at most `cards.MAX_QUERY_CHARS` characters of a query (the rest is ignored; a
door that shows the hits says so: `cap_query(query)[1]`), and de-duplicates its words in
linear time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..store import Event, Store
from ..store import decisions as dec
from ..store import events as ev
from ..store import rollups as rl
from ..store.events import BOOKKEEPING_KINDS
from .cards import cap_query
from .nearest import Semantic
from .recall import rrf
from .tokens import query_words, stem
from .tokens import words as tokens_of


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


def search(store: Store, query: str, limit: int = 10, *, semantic: Semantic | None = None,
           gate: float = 0.6) -> list[Hit]:
    """The best `limit` hits for `query`, best first. With `semantic` (a door's function that
    embeds the query and hands back the vectors, as for the walk), the hybrid path recall uses:
    when the top event hits' bodies cover less than `gate` of the query's words, the nearest
    events by meaning are fused with the lexical ranking (reciprocal rank fusion, k = 60), and
    the hits then carry the fused score (higher is better) and `source` "semantic" for an event
    only the vectors found."""
    words = query_words(cap_query(query)[0])
    match = ev.fts_query(words)
    hits: list[Hit] = []
    stale = dec.stale_events(store)
    bodies: list[str] = []
    if match is not None:
        for event, score, snip in ev.fts_search(store, match, limit, BOOKKEEPING):
            hits.append(Hit("event", int(event.id or 0), event.ts, _label(event, stale), snip,
                            score, event.source))
            bodies.append(event.body)
        for rollup, score in rl.fts_search(store, match, limit):
            text = f"{rollup.title}: {rollup.body}" if rollup.title else rollup.body
            hits.append(Hit("rollup", rollup.id, rollup.last_ts, f"level {rollup.level}",
                            text[:240], score, "ladder"))
    hits.sort(key=lambda h: (h.score, h.kind != "rollup", h.id))
    if semantic is not None and _coverage(words, bodies[:3]) < gate:
        got = semantic()
        if got is not None:
            return _fused(store, hits, got, limit, stale)
    return hits[:limit]


def _label(event: Event, stale: dict[int, int]) -> str:
    if event.id in stale:
        return f"{event.kind} (stale: superseded by decision {stale[event.id]})"
    return event.kind


def _coverage(words: list[str], bodies: list[str]) -> float:
    """Share of the query's words (by stem) the bodies hold: tags are not evidence."""
    if not words:
        return 0.0
    q = {stem(w) for w in words}
    have = {stem(w) for b in bodies for w in tokens_of(b)}
    return len(q & have) / len(q)


def _fused(store: Store, hits: list[Hit], got: tuple[Any, Any], limit: int,
           stale: dict[int, int]) -> list[Hit]:
    vector, matrix = got
    near = matrix.nearest(vector, max(limit, 20))
    key = {(h.kind, h.id): h for h in hits}
    fused = rrf([(h.kind, h.id) for h in hits], [("event", i) for i in near])
    out: list[Hit] = []
    for item, score in fused:
        h = key.get(item)
        if h is None:
            e = ev.get(store, item[1])
            if e is None or e.kind in BOOKKEEPING_KINDS:
                continue
            h = Hit("event", item[1], e.ts, _label(e, stale), e.body[:240], 0.0, "semantic")
        out.append(Hit(h.kind, h.id, h.ts, h.label, h.excerpt, round(score, 6), h.source))
        if len(out) == limit:
            break
    return out
