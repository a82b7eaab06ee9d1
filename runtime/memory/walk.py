"""memory.walk: the pure drill-down from coarse summaries to raw events, or a refusal.

Pure: zero model calls, read-only, deterministic (the same database and query give the same
result, byte for byte). It enters the ladder where the words match, one rung at a time from the
top, and starts at the coarsest rung whose best match reaches the threshold; it keeps the best
3 nodes per level, descends by parent_id pruning children with no overlap, and resolves the
level-1 spans against events and archive. Events not yet under a rollup are scanned too.
Below the threshold it refuses and runs no query past the entry scan: a refusal is a return
value, never an exception. `walk` never writes; `walk_recorded` is the door that runs it and
then records one telemetry row through a read-write store the caller hands it.

A query longer than `cards.MAX_QUERY_CHARS` (2,000 characters) is truncated to it, never
refused, and the result then carries `"query_truncated": true` (the key is absent otherwise);
query words are de-duplicated in linear time, so a pasted book costs what 2,000 characters cost.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..store import Event, Store, telemetry
from ..store import decisions as dec
from ..store import events as ev
from ..store import rollups as rl
from .cards import BOOKKEEPING_KINDS, cap_query, stem
from .terms import STOPWORDS

log = logging.getLogger(__name__)

TOKEN = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Caps:
    per_level: int = 3
    depth: int = 8
    events: int = 40
    payload_chars: int = 2048
    scan: int = 50  # entry candidates read per rung


def query_tokens(query: str) -> list[str]:
    """Distinct lowercase [a-z0-9]+ words, stopwords dropped, in query order (linear time; the
    caller caps the query's length)."""
    return list(dict.fromkeys(w for w in TOKEN.findall(query.lower()) if w not in STOPWORDS))


@dataclass
class _Scorer:
    tokens: list[str]
    stems: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.stems = {t: stem(t) for t in self.tokens}

    def matched(self, text: str) -> list[str]:
        have = {stem(w) for w in TOKEN.findall(text.lower())}
        return [t for t in self.tokens if self.stems[t] in have]

    def ratio(self, matched: list[str]) -> str:
        return f"{len(matched)}/{len(self.tokens)}"


def _node_text(r: rl.Rollup) -> str:
    # An episode's card includes its whole vocabulary: a word said anywhere in the span is a
    # way in, not only the eight most distinctive ones.
    return f"{r.title} {r.body} {r.terms} {r.vocab}"


def _refusal(reason: str, tokens: list[str], best: list[str], n: int) -> dict[str, Any]:
    return {"refused": True, "reason": reason,
            "confidence": round(len(best) / n, 4) if n else 0.0,
            "query_tokens": tokens, "matched_tokens": best, "trace": [], "events": [],
            "truncated": False}


def walk(store: Store, query: str, *, threshold: float = 0.5, caps: Caps | None = None,
         before_id: int | None = None) -> dict[str, Any]:
    """Walk for `query`. `before_id`: ignore events from this id on (the loop passes the
    current tick's first input, so a question never finds itself)."""
    query, cut = cap_query(query)
    result = _walk(store, query, threshold, caps or Caps(), before_id)
    if cut:
        result["query_truncated"] = True
    return result


def _walk(store: Store, query: str, threshold: float, caps: Caps,
          before_id: int | None) -> dict[str, Any]:
    tokens = query_tokens(query)
    n = len(tokens)
    if not n:
        return _refusal("no confident entry point: the query has no words to match (only "
                        f"stopwords or punctuation); best lexical match 0/0 (0.00) is below "
                        f"the {threshold} threshold", tokens, [], 0)
    sc = _Scorer(tokens)
    match = ev.fts_query(tokens)
    assert match is not None

    # --- entry scan: the ladder, coarsest rung first; then history not yet under a rollup
    best_seen: list[str] = []
    entry: list[tuple[rl.Rollup, list[str], float]] = []
    entry_level = 0
    for level in range(rl.top_level(store), 0, -1):
        scored = [(r, sc.matched(_node_text(r)), s)
                  for r, s in rl.fts_search(store, match, caps.scan, level=level,
                                            columns="title body terms vocab tags")]
        scored = [t for t in scored if t[1]]
        if not scored:
            continue
        scored.sort(key=lambda t: (-len(t[1]), t[2], t[0].id))
        if len(scored[0][1]) > len(best_seen):
            best_seen = scored[0][1]
        confident = [t for t in scored if len(t[1]) / n >= threshold]
        if confident:
            entry, entry_level = confident[: caps.per_level], level
            break
    fresh = [(e, sc.matched(e.body)) for e in
             ev.fts_after(store, match, rl.episodes_cover_up_to(store), caps.scan)
             if e.kind not in BOOKKEEPING_KINDS and (before_id is None or (e.id or 0) < before_id)]
    fresh = sorted([t for t in fresh if t[1]], key=lambda t: (-len(t[1]), t[0].id or 0))
    if fresh and len(fresh[0][1]) > len(best_seen):
        best_seen = fresh[0][1]
    fresh = [t for t in fresh if len(t[1]) / n >= threshold]

    ladder_best = entry[0][1] if entry else []
    fresh_best = fresh[0][1] if fresh else []
    best = ladder_best if len(ladder_best) >= len(fresh_best) else fresh_best  # ties: ladder
    if len(best) / n < threshold:
        return _refusal(
            f"no confident entry point: best lexical match {len(best_seen)}/{n} "
            f"({len(best_seen) / n:.2f}) is below the {threshold} threshold",
            tokens, best_seen, n)

    # --- descend
    trace: list[dict[str, Any]] = []
    truncated = False
    frontier: list[rl.Rollup] = []
    for r, m, _ in entry:
        why = (f"entry: best lexical match at level {entry_level} "
               f"({sc.ratio(m)} tokens: {', '.join(m)})")
        if r.source_range is None:
            why += "; unlinked (no provenance), not drilled into"
        else:
            frontier.append(r)
        trace.append({"level": entry_level, "id": r.id, "why": why})
    level, depth = entry_level, 1
    while level > 1 and frontier and depth < caps.depth:
        kids: list[tuple[rl.Rollup, list[str], int]] = []
        for parent in frontier:
            for c in rl.children(store, parent.id):
                m = sc.matched(_node_text(c))
                if m:
                    kids.append((c, m, parent.id))
        kids.sort(key=lambda t: (-len(t[1]), t[0].id))
        if len(kids) > caps.per_level:
            kids = kids[: caps.per_level]
        frontier = []
        for c, m, pid in kids:
            why = f"child of {pid}: {sc.ratio(m)} tokens"
            if c.source_range is None:
                why += "; unlinked (no provenance), not drilled into"
            else:
                frontier.append(c)
            trace.append({"level": c.level, "id": c.id, "why": why})
        level, depth = level - 1, depth + 1
    if level > 1 and frontier:
        truncated = True  # the depth cap stopped the descent
        frontier = []

    # --- raw events: the level-1 spans, and history not yet under a rollup
    found: list[tuple[Event, list[str], str]] = []
    for r in frontier:
        for e in ev.span(store, int(r.first_event or 0), int(r.last_event or 0)):
            m = sc.matched(e.body)
            if m:
                found.append((e, m, f"event in span {r.source_range}"))
    for e, m in fresh:
        found.append((e, m, "entry: event not yet under a rollup"))
    found.sort(key=lambda t: (-len(t[1]), t[0].id or 0))
    seen: set[int] = set()
    unique = []
    for t in found:
        if t[0].id not in seen:
            seen.add(int(t[0].id or 0))
            unique.append(t)
    if len(unique) > caps.events:
        unique, truncated = unique[: caps.events], True
    events = []
    stale = dec.stale_events(store) if unique else {}
    for e, m, why in unique:
        trace.append({"level": 0, "id": e.id, "why": f"{why}: {sc.ratio(m)} tokens"})
        body = e.body
        if len(body) > caps.payload_chars:
            body, truncated = body[: caps.payload_chars - 1] + "…", True
        row = {"id": e.id, "ts": e.ts, "kind": e.kind, "actor": e.actor, "body": body,
               "source": e.source}
        if e.id in stale:  # the coworker can tell "was true" from "is true"
            row["stale"] = f"superseded by decision {stale[e.id]}"
        events.append(row)
    return {"refused": False, "confidence": round(len(best) / n, 4), "query_tokens": tokens,
            "matched_tokens": best, "trace": trace, "events": events, "truncated": truncated}


def walk_recorded(store: Store, query: str, threshold: float = 0.5, door: str = "cli",
                  caps: Caps | None = None, log_to: Store | None = None,
                  before_id: int | None = None) -> dict[str, Any]:
    """Run the walk and record it in telemetry (tokens, confidence, refused, nodes, events,
    milliseconds). A telemetry failure is logged loudly and never breaks the walk."""
    t0 = time.perf_counter()
    result = walk(store, query, threshold=threshold, caps=caps, before_id=before_id)
    ms = (time.perf_counter() - t0) * 1000
    try:
        telemetry.record(log_to or store, "walk", {
            "door": door, "query_tokens": result["query_tokens"],
            "confidence": result["confidence"], "refused": result["refused"],
            "nodes": len(result["trace"]), "events": len(result["events"]), "ms": round(ms, 3),
            **({"query_truncated": True} if result.get("query_truncated") else {})})
    except Exception as e:
        log.warning("walk telemetry not recorded (%s: %s); the walk result stands",
                    type(e).__name__, e)
    return result
