"""memory.walk: the pure drill-down from coarse summaries to raw events, or a refusal.

Pure: zero model calls, read-only, deterministic (the same database and query give the same
result, byte for byte). It enters the ladder where the words match, one rung at a time from the
top, and starts at the coarsest rung whose best match reaches the threshold; it keeps the best
3 nodes per level, descends by parent_id pruning children with no overlap, and resolves the
level-1 spans against events and archive. Events not yet under a rollup are scanned too.
A node whose span is NULL or malformed (not "first-last" of its own first and last event) is
shown in the trace as unlinked and never drilled into (ADR-0008); reaching one is never a
reason to refuse.
An entry must also hold the threshold's share of the query's weight (each word weighed by its
idf over the whole history, a word the history never uses weighing most), so a question whose
telling words appear nowhere is not answered by its common ones. Below the threshold it refuses
and runs no query past the entry scan: a refusal is a return value, never an exception, and a
code with its figures (`Refusal`, `Why`), never a sentence: the doors' words are
`render.walk_reason` (ADR-0040). With
the semantic channel on, a door may hand it the query's vector for a semantic entry when the
lexical one falls short (`memory.nearest`, ADR-0020). `walk` never writes; `walk_recorded` is
the door that runs it and then records one telemetry row through a read-write store the caller
hands it.

Three steps: enter (`_enter`: the entry scan of the ladder and of fresh history), descend
(`_descend`) and gather (`_gather`), returning a typed `WalkResult` (`walk_result`); its
`as_dict()` (`walk` returns it) is the JSON contract every door returns but the refusal's
words, which the door adds from the code (`render.walk_json`); `walk_recorded` returns the
`WalkResult`.
Query words are those of `memory.tokens`, the one tokenizer (Unicode words, as FTS5 splits them).

A query longer than `cards.MAX_QUERY_CHARS` (2,000 characters) is truncated to it, never
refused, and the result then carries `"query_truncated": true` (the key is absent otherwise);
query words are de-duplicated in linear time, so a pasted book costs what 2,000 characters cost.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from ..store import Event, Store, telemetry
from ..store import decisions as dec
from ..store import events as ev
from ..store import rollups as rl
from ..store.events import BOOKKEEPING_KINDS
from . import docfreq, rung_bm25
from .cards import cap_query
from .nearest import Probe, Semantic, probe
from .recall import STRUCK_NOTE, struck_record
from .tokens import VOCAB_CHARS, head, query_words, stem, words

log = logging.getLogger(__name__)

UNLINKED = "; unlinked (no provenance), not drilled into"
_SPAN = re.compile(r"^(\d+)-(\d+)$")
THRESHOLD = 0.5  # the share of the query's words an entry must match, else a refusal (ADR-0009)


@dataclass(frozen=True)
class Caps:
    per_level: int = 3
    depth: int = 8
    events: int = 40
    payload_chars: int = 2048
    scan: int = 50  # entry candidates read per rung


@dataclass(frozen=True)
class Step:
    """One line of the trace: a node (level >= 1) or an event (level 0), and why it is there."""
    level: int
    id: int
    why: str
    unlinked: bool = False  # a node whose span is NULL or malformed: shown, never drilled into

    def as_dict(self) -> dict[str, Any]:
        return {"level": self.level, "id": self.id, "why": self.why}


@dataclass(frozen=True)
class Found:
    """One raw event the walk reached, its body cut to the payload cap."""
    event: Event
    body: str
    stale_by: str | None = None  # the decision that superseded it, named

    def as_dict(self) -> dict[str, Any]:
        e = self.event
        row: dict[str, Any] = {"id": e.id, "ts": e.ts, "kind": e.kind, "actor": e.actor,
                               "body": self.body, "source": e.source}
        if self.stale_by is not None:  # the coworker can tell "was true" from "is true"
            row["stale"] = f"superseded by {self.stale_by}"
        if e.imported:  # whatever actor it claims, never the owner's authority
            row["imported"] = "not your owner's words"
        if struck_record(e):  # it quotes an entry the owner struck: never a fact
            row["struck"] = STRUCK_NOTE
        return row


class Refusal(StrEnum):
    """Why a walk refused: a code, never a sentence (the doors' words: `render.walk_reason`)."""
    NO_WORDS = "no_words"  # only stopwords or punctuation: nothing to match, nor to embed
    BELOW_THRESHOLD = "below_threshold"  # the best match holds too few of the query's words
    LOW_WEIGHT = "low_weight"  # enough words, too little of their weight (the rarer ones missing)
    NO_EVENT_HOLDS = "no_event_holds"  # it entered, and no event it reached holds the words


@dataclass(frozen=True)
class Why:
    """A refusal's code and its figures; `WalkResult.matched_tokens` holds the best match the
    code speaks of (the best seen, or the entry's)."""
    code: Refusal
    threshold: float
    entered: tuple[str, ...] = ()  # the entry's words, when it entered (or fell short on weight
    # though not the best match seen)
    weight: float | None = None  # the share of the query's weight held, floored to 2 places
    probe: Probe | None = None  # the semantic probe, when it was asked


@dataclass(frozen=True)
class WalkResult:
    """What a walk returns: a way down (trace and events) or a refusal with its reason."""
    refused: bool
    confidence: float
    query_tokens: tuple[str, ...]
    matched_tokens: tuple[str, ...]
    trace: tuple[Step, ...] = ()
    events: tuple[Found, ...] = ()
    truncated: bool = False
    why: Why | None = None  # set exactly when refused
    query_truncated: bool = False
    entry: str | None = None  # "lexical" or "semantic"; None when refused

    @property
    def code(self) -> Refusal | None:
        return self.why.code if self.why is not None else None

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract of memory_walk, `coworker walk --json` and the MCP tool, but its
        English `reason` (which a door adds from the code, `render.walk_json`); its keys in
        this order (`reason_code` only on a refusal, `entry` only when it entered,
        `query_truncated` only when true)."""
        out: dict[str, Any] = {"refused": self.refused}
        if self.why is not None:
            out["reason_code"] = self.why.code.value
        else:
            out["entry"] = self.entry
        out.update({"confidence": self.confidence, "query_tokens": list(self.query_tokens),
                    "matched_tokens": list(self.matched_tokens),
                    "trace": [s.as_dict() for s in self.trace],
                    "events": [f.as_dict() for f in self.events],
                    "truncated": self.truncated})
        if self.query_truncated:
            out["query_truncated"] = True
        return out


def query_tokens(query: str) -> list[str]:
    """Distinct lowercase words (memory.tokens), stopwords dropped, in query order (linear
    time; the caller caps the query's length)."""
    return query_words(query)


@dataclass
class _Scorer:
    tokens: list[str]
    before_id: int | None = None  # the walk's: events from this id on are not read
    stems: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.stems = {t: stem(t) for t in self.tokens}

    def matched(self, text: str) -> list[str]:
        have = {stem(w) for w in words(text)}
        return [t for t in self.tokens if self.stems[t] in have]

    def ratio(self, matched: Sequence[str]) -> str:
        return f"{len(matched)}/{len(self.tokens)}"

    def share(self, matched: Sequence[str]) -> float:
        return len(matched) / len(self.tokens)


def _node_text(r: rl.Rollup) -> str:
    # An episode's card includes its whole vocabulary: a word said anywhere in the span is a
    # way in, not only the eight most distinctive ones. Reflect keeps at most VOCAB_CHARS of
    # it; a rung sealed before that held every word of a 4 MB message (15 s a walk).
    return f"{r.title} {head(r.body)} {r.terms} {head(r.vocab, VOCAB_CHARS)}"


def _weighted(store: Store, sc: _Scorer, matched: Sequence[str]) -> float:
    """The share of the query's idf the matched words hold: a word the history never uses
    weighs most, so "the DNS outage in Singapore" is not answered by any outage at all."""
    stems = list(dict.fromkeys(sc.stems.values()))
    df, docs = docfreq.doc_freqs(store, stems)
    n_docs = max(1, docs)
    idf = {s: math.log((n_docs + 1) / (df.get(s, 0) + 1)) + 1.0 for s in stems}
    total = sum(idf[sc.stems[t]] for t in sc.tokens)
    got = sum(idf[sc.stems[t]] for t in matched)
    return got / total if total else 0.0


def _confidence(matched: Sequence[str], n: int) -> float:
    return round(len(matched) / n, 4) if n else 0.0


@dataclass(frozen=True)
class _Ask:
    """A walk's question as read: whether the query was cut, its words, the caps."""
    cut: bool
    tokens: list[str]
    sc: _Scorer | None  # None: no words to match
    threshold: float
    caps: Caps


def _ask(query: str, threshold: float, caps: Caps, before_id: int | None) -> _Ask:
    query, cut = cap_query(query)
    tokens = query_tokens(query)
    sc = _Scorer(tokens, before_id=before_id) if tokens else None
    return _Ask(cut, tokens, sc, threshold, caps)


def _refusal(ask: _Ask, why: Why, matched: Sequence[str]) -> WalkResult:
    conf = _confidence(matched, len(ask.tokens))
    if why.code is Refusal.LOW_WEIGHT and why.weight is not None:  # the weight is the figure
        conf = min(conf, why.weight)
    if why.probe is not None:  # the better of the two entries' confidences, both below it
        conf = max(conf, why.probe.confidence)
    return WalkResult(refused=True, why=why, confidence=conf, query_tokens=tuple(ask.tokens),
                      matched_tokens=tuple(matched), query_truncated=ask.cut)


def walk_result(store: Store, query: str, *, threshold: float = THRESHOLD, caps: Caps | None = None,
                before_id: int | None = None, semantic: Semantic | None = None) -> WalkResult:
    """Walk for `query`: enter, descend, gather. `before_id`: ignore events from this id on
    (the loop passes the current tick's first input, so a question never finds itself).

    With the semantic channel on, the caller passes `semantic`: a function that returns the
    query's vector and the event vectors (`embed.Matrix`), or None. It is called only when no
    lexical entry reaches the threshold (so a door pays for a model only then); the walk may
    then enter through the episode those vectors point at, if the probe's calibrated
    confidence reaches the threshold (`memory.nearest`). The walk itself embeds nothing.
    A refusal is `WalkResult.why`: a `Refusal` code and its figures, never a sentence."""
    ask = _ask(query, threshold, caps or Caps(), before_id)
    if ask.sc is None:  # nothing to match, nor to look for by meaning ("?" embeds as near
        # some line as any question does)
        return _refusal(ask, Why(Refusal.NO_WORDS, threshold), [])
    entry = _enter(store, ask.sc, threshold, ask.caps, before_id)
    weight = _weighted(store, ask.sc, entry.best)
    if ask.sc.share(entry.best) >= threshold and weight >= threshold:
        return _entered(store, ask, ask.sc, entry)
    return _unentered(store, ask, ask.sc, entry, weight, semantic)


def _entered(store: Store, ask: _Ask, sc: _Scorer, entry: _Entry) -> WalkResult:
    """Descend and gather from a confident entry; refuse when no event it reached holds the
    words (a node shown unlinked is never a reason: ADR-0008)."""
    trace, frontier, cut_depth = _descend(store, sc, entry, ask.caps)
    steps, found, cut_gather = _gather(store, sc, frontier, entry.fresh, ask.caps)
    unlinked = any(s.unlinked for s in trace)
    if not found and not cut_depth and not unlinked:  # in no event reached
        return _refusal(ask, Why(Refusal.NO_EVENT_HOLDS, ask.threshold,
                                 entered=tuple(entry.best)), entry.best)
    return WalkResult(refused=False, confidence=_confidence(entry.best, len(ask.tokens)),
                      query_tokens=tuple(ask.tokens), matched_tokens=tuple(entry.best),
                      trace=(*trace, *steps), events=tuple(found),
                      truncated=cut_depth or cut_gather, query_truncated=ask.cut,
                      entry="lexical")


def _unentered(store: Store, ask: _Ask, sc: _Scorer, entry: _Entry, weight: float,
               semantic: Semantic | None) -> WalkResult:
    """No confident lexical entry: the semantic one, when the channel is on and its probe is
    confident, else a refusal. No query runs past the entry scan."""
    seen = entry.best_seen
    why = Why(Refusal.BELOW_THRESHOLD, ask.threshold)
    if sc.share(entry.best) >= ask.threshold:  # enough words, not the telling ones
        why = Why(Refusal.LOW_WEIGHT, ask.threshold,
                  entered=tuple(entry.best) if len(entry.best) < len(seen) else (),
                  weight=math.floor(weight * 100) / 100)  # never "0.50 is below 0.5"
    got = semantic() if semantic is not None else None
    pr = probe(store, got[0], got[1], sc.before_id) if got is not None else None
    if pr is not None and pr.may_enter and pr.confidence >= ask.threshold:
        return _semantic(store, pr, ask, seen)
    return _refusal(ask, replace(why, probe=pr), seen)


def _semantic(store: Store, pr: Probe, ask: _Ask, seen: list[str]) -> WalkResult:
    """The walk entered by the vectors: the entry episode and its nearest events."""
    trace: list[Step] = []
    n = len(ask.tokens)
    entry = (f"entry: {pr.why()}; best lexical match {len(seen)}/{n} ({len(seen) / n:.2f}) "
             "was below the threshold")
    span = f"{entry}: event not yet under a rollup"  # no episode: the first event is the entry
    if pr.episode is not None:
        node = rl.get(store, pr.episode)
        span = f"event in span {node.source_range}" if node is not None else "event"
        trace.append(Step(1, pr.episode, entry))
    rows, steps, truncated = _nearest_rows(store, pr, ask.caps, span)
    return WalkResult(refused=False, confidence=pr.confidence, query_tokens=tuple(ask.tokens),
                      matched_tokens=tuple(seen), trace=(*trace, *steps), events=tuple(rows),
                      truncated=truncated, query_truncated=ask.cut, entry="semantic")


def _nearest_rows(store: Store, pr: Probe, caps: Caps, span: str
                  ) -> tuple[list[Found], list[Step], bool]:
    """The probe's nearest events, their trace lines, and whether a body was cut."""
    stale = dec.stale_events(store)
    rows: list[Found] = []
    steps: list[Step] = []
    truncated = False
    for eid, cos in pr.events[: caps.events]:
        e = ev.get(store, eid)
        if e is None:
            continue
        steps.append(Step(0, eid, f"{span}: cosine {cos:.2f}"))
        body, cut = _cut(e.body, caps.payload_chars)
        truncated = truncated or cut
        rows.append(Found(e, body, stale.get(eid)))
    return rows, steps, truncated


def _cut(body: str, chars: int) -> tuple[str, bool]:
    """A body within the payload cap, and whether it was cut."""
    if len(body) > chars:
        return body[: chars - 1] + "…", True
    return body, False


def walk(store: Store, query: str, *, threshold: float = THRESHOLD, caps: Caps | None = None,
         before_id: int | None = None, semantic: Semantic | None = None) -> dict[str, Any]:
    """`walk_result` as a JSON-ready dict (`WalkResult.as_dict`: the code, not the words)."""
    return walk_result(store, query, threshold=threshold, caps=caps, before_id=before_id,
                       semantic=semantic).as_dict()


# --- enter: the ladder, coarsest rung first; then history not yet under a rollup -------------

@dataclass(frozen=True)
class _Entry:
    nodes: list[tuple[rl.Rollup, list[str]]]  # the confident entry nodes, best first
    level: int  # the rung they are on (0: no rung was confident)
    fresh: list[tuple[Event, list[str]]]  # confident events no rollup covers yet, best first
    best: list[str]  # the entry's matched tokens (ties go to the ladder)
    best_seen: list[str]  # the best match anywhere, confident or not (a refusal quotes it)


def _enter(store: Store, sc: _Scorer, threshold: float, caps: Caps,
           before_id: int | None) -> _Entry:
    match = ev.fts_query(sc.tokens)
    assert match is not None
    nodes, level, seen_ladder = _enter_ladder(store, sc, threshold, caps)
    fresh, seen_fresh = _enter_fresh(store, sc, match, threshold, caps, before_id)
    best_seen = seen_fresh if len(seen_fresh) > len(seen_ladder) else seen_ladder
    ladder_best = nodes[0][1] if nodes else []
    fresh_best = fresh[0][1] if fresh else []
    best = ladder_best if len(ladder_best) >= len(fresh_best) else fresh_best
    return _Entry(nodes, level, fresh, best, best_seen)


_Nodes = list[tuple[rl.Rollup, list[str]]]


def _enter_ladder(store: Store, sc: _Scorer, threshold: float, caps: Caps
                  ) -> tuple[_Nodes, int, list[str]]:
    """The best nodes of the coarsest rung whose best match reaches the threshold, its level,
    and the best match seen on the rungs read (each rung's best bm25 first, `rung_bm25`)."""
    best_seen: list[str] = []
    words = ev.fts_terms(sc.tokens)
    for level in range(rl.top_level(store), 0, -1):
        scored = _rung(store, sc, words, level, caps)
        if not scored:
            continue
        if len(scored[0][1]) > len(best_seen):
            best_seen = scored[0][1]
        confident = [(r, m) for r, m, _ in scored if sc.share(m) >= threshold]
        if confident:
            return confident[: caps.per_level], level, best_seen
    return [], 0, best_seen


def _rung(store: Store, sc: _Scorer, words: list[str], level: int, caps: Caps
          ) -> list[tuple[rl.Rollup, list[str], float]]:
    """One rung's scan: its best bm25 nodes holding a query word, most words first."""
    scored = [(r, sc.matched(_node_text(r)), s)
              for r, s in rung_bm25.search_rung(store, words, level, caps.scan)]
    scored = [t for t in scored if t[1]]
    scored.sort(key=lambda t: (-len(t[1]), t[2], t[0].id))
    return scored


def _enter_fresh(store: Store, sc: _Scorer, match: str, threshold: float, caps: Caps,
                 before_id: int | None) -> tuple[list[tuple[Event, list[str]]], list[str]]:
    """The confident events past the ladder's end, best first, and the best match among all."""
    scanned = [(e, sc.matched(head(e.body))) for e in
               ev.fts_after(store, match, rl.episodes_cover_up_to(store), caps.scan)
               if e.kind not in BOOKKEEPING_KINDS and (before_id is None or (e.id or 0) < before_id)]
    scanned = sorted([t for t in scanned if t[1]], key=lambda t: (-len(t[1]), t[0].id or 0))
    best_seen = scanned[0][1] if scanned else []
    return [t for t in scanned if sc.share(t[1]) >= threshold], best_seen


# --- descend: by parent_id, the best children of the frontier, one rung at a time ------------

def _span(node: rl.Rollup) -> tuple[int, int] | None:
    """The event ids a node covers, or None when its provenance cannot be validated (ADR-0008):
    `source_range` NULL, not "first-last" with first <= last, or not its first and last event."""
    m = _SPAN.match(node.source_range or "")
    if m is None:
        return None
    first, last = int(m.group(1)), int(m.group(2))
    ok = first <= last and (node.first_event, node.last_event) == (first, last)
    return (first, last) if ok else None


def _step(node: rl.Rollup, level: int, why: str, frontier: list[rl.Rollup]) -> Step:
    """The trace line for a node; a linked node joins the frontier, an unlinked one (its span
    NULL or malformed) is shown and never drilled into."""
    if _span(node) is None:
        return Step(level, node.id, why + UNLINKED, unlinked=True)
    frontier.append(node)
    return Step(level, node.id, why)


def _descend(store: Store, sc: _Scorer, entry: _Entry, caps: Caps
             ) -> tuple[list[Step], list[rl.Rollup], bool]:
    """The trace of the descent, the level-1 nodes reached, and whether the depth cap cut it."""
    trace: list[Step] = []
    frontier: list[rl.Rollup] = []
    for r, m in entry.nodes:
        why = (f"entry: best lexical match at level {entry.level} "
               f"({sc.ratio(m)} tokens: {', '.join(m)})")
        trace.append(_step(r, entry.level, why, frontier))
    level, depth = entry.level, 1
    while level > 1 and frontier and depth < caps.depth:
        kids = _best_children(store, sc, frontier, caps.per_level)
        frontier = []
        trace.extend(_step(c, c.level, f"child of {pid}: {sc.ratio(m)} tokens", frontier)
                     for c, m, pid in kids)
        level, depth = level - 1, depth + 1
    if level > 1 and frontier:
        return trace, [], True  # the depth cap stopped the descent
    return trace, frontier, False


def _best_children(store: Store, sc: _Scorer, parents: list[rl.Rollup], keep: int
                   ) -> list[tuple[rl.Rollup, list[str], int]]:
    kids: list[tuple[rl.Rollup, list[str], int]] = []
    for parent in parents:
        for c in rl.children(store, parent.id):
            m = sc.matched(_node_text(c))
            if m:
                kids.append((c, m, parent.id))
    kids.sort(key=lambda t: (-len(t[1]), t[0].id))
    return kids[:keep]


# --- gather: the raw events of the level-1 spans, and history not yet under a rollup ---------

def _gather(store: Store, sc: _Scorer, frontier: list[rl.Rollup],
            fresh: list[tuple[Event, list[str]]], caps: Caps
            ) -> tuple[list[Step], list[Found], bool]:
    """The events' trace lines, the events (capped, bodies cut), and whether a cap cut them."""
    found = _reached(store, sc, frontier)
    found.extend((e, m, "entry: event not yet under a rollup") for e, m in fresh)
    found.sort(key=lambda t: (-len(t[1]), t[0].id or 0))
    first: dict[int, tuple[Event, list[str], str]] = {}
    for t in found:  # an event reached twice keeps its best reason
        first.setdefault(int(t[0].id or 0), t)
    unique = list(first.values())
    truncated = len(unique) > caps.events
    unique = unique[: caps.events]
    stale = dec.stale_events(store) if unique else {}
    steps, rows = [], []
    for e, m, why in unique:
        steps.append(Step(0, int(e.id or 0), f"{why}: {sc.ratio(m)} tokens"))
        body, cut = _cut(e.body, caps.payload_chars)
        truncated = truncated or cut
        rows.append(Found(e, body, stale.get(int(e.id or 0))))
    return steps, rows, truncated


def _reached(store: Store, sc: _Scorer, frontier: list[rl.Rollup]
             ) -> list[tuple[Event, list[str], str]]:
    """The events of the level-1 spans reached that hold a query word (the turn's own input,
    sealed already, left out: a question never finds itself)."""
    found: list[tuple[Event, list[str], str]] = []
    for r in frontier:
        first, last = _span(r) or (0, 0)  # the frontier holds linked nodes only
        for e in ev.span(store, first, last):
            if sc.before_id is not None and (e.id or 0) >= sc.before_id:
                continue
            m = sc.matched(head(e.body))
            if m:
                found.append((e, m, f"event in span {r.source_range}"))
    return found


def walk_recorded(store: Store, query: str, threshold: float = THRESHOLD, door: str = "cli",
                  caps: Caps | None = None, log_to: Store | None = None,
                  before_id: int | None = None, semantic: Semantic | None = None) -> WalkResult:
    """Run the walk and record it in telemetry (tokens, confidence, refused and its code,
    entry, nodes, events, milliseconds). A telemetry failure is logged loudly and never breaks
    the walk."""
    t0 = time.perf_counter()
    result = walk_result(store, query, threshold=threshold, caps=caps, before_id=before_id,
                         semantic=semantic)
    ms = (time.perf_counter() - t0) * 1000
    try:
        telemetry.record(log_to or store, "walk", {
            "door": door, "query_tokens": list(result.query_tokens),
            "confidence": result.confidence, "refused": result.refused, "entry": result.entry,
            "nodes": len(result.trace), "events": len(result.events), "ms": round(ms, 3),
            **({"reason_code": result.code.value} if result.code is not None else {}),
            **({"query_truncated": True} if result.query_truncated else {})})
    except Exception as e:
        log.warning("walk telemetry not recorded (%s: %s); the walk result stands",
                    type(e).__name__, e)
    return result
