"""Lexical search over the whole history (hot events and archive) and the ladder's rollups.

Owns turning a query into FTS5 terms (the words of `memory.tokens`) and merging the two
indexes into one ranked list (bm25, best first); with the semantic channel on and lexical
coverage below the gate, fusing that list with the nearest events and rollups by meaning (the
door hands it the query's vector; search embeds nothing). It reads; it never writes and never
calls a model. It reads at most `cards.MAX_QUERY_CHARS` characters of a query (the rest is ignored; a
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


ROLLUP_WEIGHT = 1.0  # the nearest rollups' ranking beside the nearest events' (weights of RRF)

# The loop's own bookkeeping is not memory worth finding: it only echoes the query back.
BOOKKEEPING = tuple(sorted(BOOKKEEPING_KINDS))


def search(store: Store, query: str, limit: int = 10, *, semantic: Semantic | None = None,
           gate: float = 0.6) -> list[Hit]:
    """The best `limit` hits for `query`, best first. With `semantic` (a door's function that
    embeds the query and hands back the vectors, as for the walk), the hybrid path recall uses:
    when the top event hits' bodies cover less than `gate` of the query's words, the nearest
    events and rollups by meaning are fused with the lexical ranking (reciprocal rank fusion,
    k = 60, the lexical side weighted by its coverage over the gate), and the hits then carry
    the fused score (higher is better) and `source` "semantic" for an item only the vectors
    found."""
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
    coverage = _coverage(words, bodies[:3])
    if semantic is not None and coverage < gate:
        got = semantic()
        if got is not None:
            return _fused(store, hits, got, limit, stale, coverage / gate if gate else 1.0)
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
           stale: dict[int, int], lexical_weight: float) -> list[Hit]:
    """Three rankings fused: the lexical hits (weighted by how much of the query they cover,
    relative to the gate: what matched a word or two of a paraphrase is mostly chance), the
    nearest events and the nearest rollups (title and summary)."""
    vector, matrix = got
    near = [("event", i) for i in matrix.nearest(vector, max(limit, 20))]
    rollups = getattr(matrix, "rollups", None)
    near_rollups = ([("rollup", i) for i in rollups.nearest(vector, max(limit, 10))]
                    if rollups is not None and len(rollups.ids) else [])
    key = {(h.kind, h.id): h for h in hits}
    fused = rrf([(h.kind, h.id) for h in hits], near, near_rollups,
                weights=(lexical_weight, 1.0, ROLLUP_WEIGHT))
    out: list[Hit] = []
    spans: list[tuple[int, int]] = []  # the spans of the rollups taken
    for item, score in fused:
        h = key.get(item) or _semantic_hit(store, item, stale)
        if h is None or _folded(store, h, out, spans):
            continue
        out.append(Hit(h.kind, h.id, h.ts, h.label, h.excerpt, round(score, 6), h.source))
        if len(out) == limit:
            break
    return out


def _folded(store: Store, h: Hit, taken: list[Hit], spans: list[tuple[int, int]]) -> bool:
    """Whether `h` repeats what is already taken: an event inside an episode's span, or an
    episode whose span holds an event taken (the better-ranked of the two stands for both).
    Coarser rollups summarise too much to stand for one event: they fold nothing."""
    if h.kind == "event":
        return any(a <= h.id <= b for a, b in spans)
    r = rl.get(store, h.id)
    if r is None or r.level != 1 or r.first_event is None or r.last_event is None:
        return False
    first, last = r.first_event, r.last_event
    if any(t.kind == "event" and first <= t.id <= last for t in taken):
        return True
    spans.append((first, last))
    return False


def _semantic_hit(store: Store, item: tuple[str, int], stale: dict[int, int]) -> Hit | None:
    """A hit only the vectors found (source "semantic")."""
    kind, i = item
    if kind == "rollup":
        r = rl.get(store, i)
        if r is None:
            return None
        text = f"{r.title}: {r.body}" if r.title else r.body
        return Hit("rollup", i, r.last_ts, f"level {r.level}", text[:240], 0.0, "semantic")
    e = ev.get(store, i)
    if e is None or e.kind in BOOKKEEPING_KINDS:
        return None
    return Hit("event", i, e.ts, _label(e, stale), e.body[:240], 0.0, "semantic")
