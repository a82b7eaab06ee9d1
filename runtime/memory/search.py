"""Lexical search over the whole history (hot events and archive) and the ladder's rollups.

Owns turning a query into FTS5 terms (the words of `memory.tokens`), choosing the candidates
worth ranking, merging the two indexes into one ranked list (bm25, best first), and the
cursor that pages on from there; with the semantic channel on and lexical coverage below the
gate, fusing the first page with the nearest events and rollups by meaning (the door hands it
the query's vector; search embeds nothing). It reads; it never writes and never calls a model.
It reads at most `cards.MAX_QUERY_CHARS` characters of a query (the rest is ignored; a door
that shows the hits says so: `cap_query(query)[1]`), and de-duplicates its words in linear time.

Bounded, not exhaustive. A query's words are grouped by FTS term (porter stem), and each
group's rows are counted newest first, no further than RARE_BUDGET + 1. In each index (events,
rollups) the candidates are: every match when the counts add up to at most EXACT; otherwise
every row holding one of the rarest groups (rarest first, while their counts add up to at most
RARE_BUDGET), the newest ALL_WORDS rows holding every other group, and the newest RECENT
matches. Each set is read by one FTS5 statement with its bm25 for the whole query (bm25 adds
up over the query's phrases, and each statement names every phrase its rows can hold, so a row
scores what the flat ranking gives it); each statement costs one count of each phrase's rows
(FTS5's idf) and the rows it returns, not a ranking of every match. So the first page is the
flat ranking's best whenever the candidates hold it. `exhaustive=True` is the flat bm25 over
every match (one page, no cursor).

Paging. `Hits.next_cursor` is an opaque string (None when nothing is left); passing it back as
`after` pages on. A cursor freezes the highest event and rollup id and the plan (which words
counted as rare) at the first page, so a later page reads the same candidates however much
was written since: pages go through the candidates in bm25 order (a bitmap of those shown
rides in the cursor), then every other match, events then rollups, newest first. So paging on
yields every match up to the frozen ids exactly once; events written after the first page are
not in it (search again). If the candidates differ from the first page's (a redaction or a
new tag changed what matches), the cursor is refused with a line that says to search again.
A refused cursor is a `CursorError` whose `code` (`CursorRefusal`) says why; its line is the
constant `CURSOR_WORDS` gives the code, not a sentence built in the logic (ADR-0040).
Only the first page is fused with the semantic channel; later pages are lexical.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import logging
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from ..errors import UsageError
from ..store import Event, Store, fts
from ..store import decisions as dec
from ..store import events as ev
from ..store import rollups as rl
from ..store.events import BOOKKEEPING_KINDS
from .cards import cap_query
from .embed import EmbedError
from .nearest import Semantic
from .recall import (
    SEMANTIC_GATE,
    STRUCK_NOTE,
    header_field,
    named_person_or_none,
    rrf,
    struck_record,
)
from .recall import coverage as covered
from .tokens import query_words, stem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hit:
    kind: str  # "event" or "rollup"
    id: int
    ts: str | None
    label: str  # event kind, or "level N"
    excerpt: str
    score: float
    source: str  # hot, archive, ladder
    actor: str | None = None  # who wrote an event (None for a rollup: it quotes everyone)

    def as_dict(self) -> dict:
        return asdict(self)


class Hits(list):
    """A page of hits, best first, and the cursor to the next page (None when none is left)."""

    next_cursor: str | None = None


class CursorRefusal(StrEnum):
    """Why a search refuses a cursor: a code (`CursorError.code`)."""
    NOT_A_CURSOR = "not_a_cursor"  # not one a search printed, or cut, or tampered with
    OTHER_QUERY = "other_query"  # other words
    STALE = "stale_cursor"  # the candidates changed under it (a redaction, a new tag)
    EXHAUSTIVE = "exhaustive_takes_no_cursor"  # --exhaustive ranks every match in one page


# The one line a door prints for each (a usage error: the CLI exits 2, MCP returns it).
CURSOR_WORDS = {
    CursorRefusal.NOT_A_CURSOR: "{cursor!r} is not a search cursor: pass the next_cursor a "
                                "search printed, with the same words",
    CursorRefusal.OTHER_QUERY: "this cursor belongs to another query (other words): page on "
                               "with the same words, or search again without it",
    CursorRefusal.STALE: "the history changed under this cursor (a redaction or new search "
                         "words): search again without it",
    CursorRefusal.EXHAUSTIVE: "--exhaustive ranks every match in one page and takes no cursor; "
                              "drop --after, or drop --exhaustive to page on",
}


class CursorError(UsageError):
    """A cursor that is not one, belongs to another query, or no longer fits the history:
    `code` says which; its message is `CURSOR_WORDS`' line for it."""

    def __init__(self, code: CursorRefusal, cursor: str = "") -> None:
        super().__init__(CURSOR_WORDS[code].format(cursor=cursor[:40]))
        self.code = code


ROLLUP_WEIGHT = 1.0  # the nearest rollups' ranking beside the nearest events' (weights of RRF)

# The loop's own bookkeeping is not memory worth finding: it only echoes the query back.
BOOKKEEPING = tuple(sorted(BOOKKEEPING_KINDS))

EXACT = 1000          # at most this many matches (by document frequency): rank them all
RARE_BUDGET = 2000    # every row holding one of the rarest words, while their counts fit this
ALL_WORDS = 200       # the newest rows holding every other word
RECENT = 200          # the newest matches
ROLLUP_COLUMNS = "{title body terms tags}"  # what rl.fts_search reads by default
CURSOR_PREFIX = "s1."
CURSOR_BYTES = 1 << 20  # a cursor's state inflates to at most this (a bitmap of the candidates)

Key = tuple[int, int]  # (0 event | 1 rollup, id)
INDEXES = (("events_fts", 0), ("rollups_fts", 1))


@dataclass(frozen=True)
class Plan:
    """What a search's candidates are made of; frozen in its cursor."""

    groups: tuple[tuple[str, ...], ...]  # the query's words, by FTS term
    tops: tuple[int, int]  # highest event id, highest rollup id
    rare: tuple[int, int]  # per index: bitmask of the groups ranked in full; -1: every match
    asked: int = 0  # the fingerprint of the query's words


@dataclass(frozen=True)
class _Query:
    """A search's query as read: its words, their FTS phrases, and the fingerprint a cursor
    must match."""
    text: str
    words: list[str]
    phrases: list[str]
    asked: int


def _read_query(query: str) -> _Query:
    text = cap_query(query)[0]
    words = query_words(text)
    phrases = ev.fts_terms(words)
    return _Query(text, words, phrases, _fingerprint(phrases))


def search(store: Store, query: str, limit: int = 10, *, semantic: Semantic | None = None,
           gate: float = SEMANTIC_GATE, after: str | None = None,
           exhaustive: bool = False) -> Hits:
    """The best `limit` hits for `query`, best first, and `next_cursor` to page on (`after`).
    With `semantic` (a door's function that embeds the query and hands back the vectors, as
    for the walk), the hybrid path recall uses: when the top event hits' bodies cover less
    than `gate` of the query's words, the nearest events and rollups by meaning are fused with
    the lexical ranking (reciprocal rank fusion, k = 60, the lexical side weighted by its
    coverage over the gate), and the hits then carry the fused score (higher is better) and
    `source` "semantic" for an item only the vectors found. First page only: a page `after` a
    cursor is lexical. `exhaustive`: the flat bm25 over every match, one page, no cursor.
    A cursor refused is a `CursorError` whose `code` says why."""
    q = _read_query(query)
    if exhaustive:
        if after is not None:
            raise CursorError(CursorRefusal.EXHAUSTIVE)
        return _exhaustive(store, q.words, ev.fts_query(q.phrases), limit, semantic, gate,
                           query)
    if not q.phrases:  # nothing to match, so nothing to look for by meaning either ("?!" and
        # "the and of" embed as near some line as any question does): no hits, as the walk
        if after is not None:
            raise CursorError(CursorRefusal.OTHER_QUERY)
        return _exhaustive(store, q.words, None, limit, None, gate, query)
    page = _open_page(store, q, after)
    if after is None and semantic is not None:
        fused = _fused_page(store, page, q.words, limit, gate, query, semantic)
        if fused is not None:
            return fused
    taken = [h.hit for h in page.take(limit)]
    return page.finish(taken, done=len(taken) < limit)


def _open_page(store: Store, q: _Query, after: str | None) -> _Page:
    """The page a first search, or the cursor `after`, starts from (a stale cursor refused)."""
    if after is None:
        plan, shown, phase, membership = _plan(store, q.phrases, q.asked), None, (0, 0), None
    else:
        plan, shown, phase, membership = _read_cursor(after, q.phrases, q.asked)
    cands = _candidates(store, plan)
    if membership is not None and membership != _membership(sorted(cands)):
        raise _stale_cursor()
    return _Page(store, plan, cands, shown, phase)


def _fused_page(store: Store, page: _Page, words: list[str], limit: int, gate: float,
                query: str, semantic: Semantic) -> Hits | None:
    """A first page fused with the semantic channel, when the lexical hits cover less than
    `gate` of the query's words (None: the lexical page stands)."""
    lexical = page.first(limit)
    coverage = covered(words, [h.excerpt_body for h in lexical if h.hit.kind == "event"][:3])
    if coverage >= gate:
        return None
    got = semantic()
    fused = None if got is None else _fused(
        store, [h.hit for h in lexical],
        {h.hit.id: h.excerpt_body for h in lexical if h.key[0] == 0},
        got, limit, page.stale, coverage / gate if gate else 1.0, query, semantic)
    if fused is None:
        return None
    page.mark({(0 if h.kind == "event" else 1, h.id) for h in fused})
    return page.finish(fused, done=False)


# -- the plan and its candidates -----------------------------------------------------------------


def _groups(phrases: list[str]) -> tuple[tuple[str, ...], ...]:
    """The query's phrases grouped by the FTS term they index as (`fails`, `failing`)."""
    by: dict[str, list[str]] = {}
    for p in phrases:
        by.setdefault(stem(p), []).append(p)
    return tuple(tuple(g) for g in by.values())


def _or(groups: Any) -> str:
    return " OR ".join(f'"{w}"' for g in groups for w in g)


def _wrap(index: str, expr: str) -> str:
    return f"{ROLLUP_COLUMNS} : ({expr})" if index == "rollups_fts" else expr


def _plan(store: Store, phrases: list[str], asked: int = 0) -> Plan:
    """The plan for a first page. Each group's rows are counted newest first up to
    RARE_BUDGET + 1 (no ranking), so a common word costs no more than that."""
    groups = _groups(phrases)
    tops = (ev.fts_top_id(store, "events_fts"), ev.fts_top_id(store, "rollups_fts"))
    rare = [_rare_mask(fts.count_upto_many(store, [_wrap(index, _or([g])) for g in groups], top,
                                           RARE_BUDGET + 1, index))
            for (index, _), top in zip(INDEXES, tops, strict=True)]
    return Plan(groups, tops, (rare[0], rare[1]), asked)


def _rare_mask(counts: list[int]) -> int:
    """-1 when every match is few enough to rank, else the bitmask of the rarest groups whose
    counts fit RARE_BUDGET together (rarest first). A count past RARE_BUDGET is a floor."""
    if sum(counts) <= EXACT and max(counts, default=0) <= RARE_BUDGET:
        return -1
    mask, budget = 0, RARE_BUDGET
    for i in sorted(range(len(counts)), key=lambda i: (counts[i], i)):
        if counts[i] > budget:
            break
        mask |= 1 << i
        budget -= counts[i]
    return mask


def _candidates(store: Store, plan: Plan) -> dict[Key, float]:
    """Every candidate of both indexes with its bm25 for the whole query."""
    out: dict[Key, float] = {}
    for (index, k), top, rare in zip(INDEXES, plan.tops, plan.rare, strict=True):
        for expr, limit in _exprs(plan.groups, rare):
            for i, score in ev.fts_scored(store, _wrap(index, expr), top, limit, index=index):
                out[(k, i)] = score
    return out


def _exprs(groups: tuple[tuple[str, ...], ...], rare: int) -> list[tuple[str, int]]:
    """The bounded FTS5 expressions (and row caps, -1 for all) whose rows are the candidates.
    Each names every phrase a row it returns can hold, so its bm25 is the whole query's. Each
    is one statement, and each statement's bm25 counts every phrase's rows once: so the rare
    groups' rows are read with two (with the other words, and without), not one a group."""
    full = _or(groups)
    few = [g for i, g in enumerate(groups) if rare == -1 or rare >> i & 1]
    many = [g for g in groups if g not in few]
    if not many:  # every word is rare enough: every match is ranked
        return [(full, -1)]
    out: list[tuple[str, int]] = []
    if few:
        out += [(f"({_or(few)}) AND ({_or(many)})", -1), (f"({_or(few)}) NOT ({_or(many)})", -1)]
    if len(many) >= 2:
        every = " AND ".join(f"({_or([g])})" for g in many)
        out.append((f"({every}) NOT ({_or(few)})" if few else every, ALL_WORDS))
    out.append((full, RECENT))
    return out


# -- a page --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ranked:
    key: Key
    hit: Hit
    excerpt_body: str


class _Page:
    """One page's walk: the candidates not yet shown (in bm25 order), then the rest of the
    matches (events, then rollups, newest first); what it consumed goes into the next
    cursor."""

    def __init__(self, store: Store, plan: Plan, cands: dict[Key, float],
                 shown: bytes | None, phase: tuple[int, int]) -> None:
        self.store, self.plan, self.cands = store, plan, cands
        self.order = sorted(cands)  # the bitmap's order: events by id, then rollups by id
        self.pos = {key: i for i, key in enumerate(self.order)}
        self.shown = bytearray(shown) if shown is not None else bytearray(
            (len(self.order) + 7) // 8)
        if len(self.shown) != (len(self.order) + 7) // 8:
            raise _stale_cursor()
        self.phase, self.before = phase
        self.stale = dec.stale_events(store)
        self.match = ev.fts_query([w for g in plan.groups for w in g]) or ""
        self._ranked: Iterator[_Ranked] | None = None

    # the bitmap

    def _is_shown(self, key: Key) -> bool:
        i = self.pos[key]
        return bool(self.shown[i >> 3] >> (i & 7) & 1)

    def mark(self, keys: set[Key]) -> None:
        for key in keys & self.pos.keys():
            i = self.pos[key]
            self.shown[i >> 3] |= 1 << (i & 7)

    # walking

    def first(self, limit: int) -> list[_Ranked]:
        """The best candidates not shown, up to `limit` events and `limit` rollups, best first
        (the lexical side of a fused page); marks nothing."""
        out, n = [], [0, 0]
        for r in self._best(mark=False):
            if n[r.key[0]] < limit:
                out.append(r)
                n[r.key[0]] += 1
            if min(n) >= limit:
                break
        return out

    def take(self, limit: int) -> list[_Ranked]:
        """The next `limit` hits, marking what they consume."""
        out: list[_Ranked] = []
        if self.phase == 0:
            for r in self._best():
                out.append(r)
                if len(out) == limit:
                    return out
            self.phase, self.before = 1, self.plan.tops[0] + 1
        while self.phase in (1, 2) and len(out) < limit:
            got = self._rest(limit - len(out))
            out += got
            if len(out) < limit:  # this index is done
                self.phase, self.before = self.phase + 1, self.plan.tops[1] + 1
        return out

    def _best(self, mark: bool = True) -> Iterator[_Ranked]:
        """Candidates not shown, best first; with `mark`, each is marked as it is passed
        (bookkeeping too, which is skipped: it is no match). Only what is passed is sorted."""
        heap = [(self.cands[k], k[0] == 0, k[1], k) for k in self.order
                if not self._is_shown(k)]
        heapq.heapify(heap)
        size = 16
        while heap:
            chunk = [heapq.heappop(heap)[3] for _ in range(min(size, len(heap)))]
            size *= 2
            built = self._build(chunk, {k: self.cands[k] for k in chunk})
            for key in chunk:
                if mark:
                    self.mark({key})
                if key in built:
                    yield built[key]

    def _rest(self, need: int) -> list[_Ranked]:
        """Up to `need` matches outside the candidates in the current index, newest first."""
        index, k = INDEXES[self.phase - 1]
        expr = _wrap(index, self.match)
        out: list[_Ranked] = []
        while len(out) < need:
            rows = ev.fts_scored(self.store, expr, self.plan.tops[k], need * 4 + 16,
                                 before=self.before, index=index)
            if not rows:
                break
            fresh = [((k, i), s) for i, s in rows if (k, i) not in self.pos]
            built = self._build([key for key, _ in fresh], dict(fresh))
            for key, _ in fresh:
                if key in built and len(out) < need:
                    out.append(built[key])
                    self.before = key[1]
            if len(out) < need:
                self.before = rows[-1][0]
        return out

    def _build(self, keys: list[Key], scores: dict[Key, float]) -> dict[Key, _Ranked]:
        """Hits for these keys (bookkeeping events and vanished rows left out)."""
        out: dict[Key, _Ranked] = {}
        ids = [i for kind, i in keys if kind == 0]
        events = ev.history_of(self.store, ids)
        keep = [i for i in ids if i in events and events[i].kind not in BOOKKEEPING_KINDS]
        snips = ev.fts_snippets(self.store, self.match, keep)
        for i in keep:
            e = events[i]
            out[(0, i)] = _Ranked((0, i), _event_hit(e, self.stale, snips.get(i),
                                                     scores[(0, i)]), e.body)
        rollups = rl.get_many(self.store, [i for kind, i in keys if kind == 1])
        for kind, i in keys:
            r = rollups.get(i) if kind == 1 else None
            if r is not None:
                out[(1, i)] = _Ranked((1, i), _rollup_hit(r, scores[(1, i)]), "")
        return out

    def finish(self, hits: list[Hit], done: bool) -> Hits:
        """The page, with a cursor when a match is left to show."""
        out = Hits(hits)
        if not done and self._more():
            out.next_cursor = _write_cursor(self)
        return out

    def _more(self) -> bool:
        """Whether a later page would show anything: a candidate not yet passed that is no
        bookkeeping (which shows nothing), else one step further on, undone."""
        left = [k for k in self.order if not self._is_shown(k)] if self.phase == 0 else []
        if left and ev.any_shown(self.store, [i for kind, i in left if kind == 0],
                                 [i for kind, i in left if kind == 1]):
            return True
        saved = bytes(self.shown), self.phase, self.before
        try:
            return bool(self.take(1))
        finally:
            self.shown, (self.phase, self.before) = bytearray(saved[0]), saved[1:]


# -- the cursor ----------------------------------------------------------------------------------


def _fingerprint(phrases: list[str]) -> int:
    return zlib.crc32("\x1f".join(phrases).encode())


def _membership(order: list[Key]) -> int:
    """A checksum of the candidates (their keys in bitmap order)."""
    return zlib.crc32(array("q", [x for key in order for x in key]).tobytes())


def _write_cursor(page: _Page) -> str:
    plan = page.plan
    state = {"q": plan.asked, "t": list(plan.tops),
             "r": list(plan.rare),
             "h": _membership(page.order), "p": page.phase, "b": page.before,
             "s": base64.b64encode(bytes(page.shown)).decode() if page.phase == 0 else ""}
    raw = zlib.compress(json.dumps(state, separators=(",", ":")).encode(), 9)
    return CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read_cursor(cursor: str, phrases: list[str], asked: int
                 ) -> tuple[Plan, bytes | None, tuple[int, int], int]:
    """The plan, shown-bitmap, phase and candidates' checksum a cursor carries (CursorError
    for anything else)."""
    bad = CursorError(CursorRefusal.NOT_A_CURSOR, cursor)
    if not cursor.startswith(CURSOR_PREFIX):
        raise bad
    try:
        body = cursor[len(CURSOR_PREFIX):]
        inflate = zlib.decompressobj()  # a cursor's state is small: a bomb is no cursor
        raw = inflate.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)),
                                 CURSOR_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:  # past the cap, or cut short
            raise ValueError("not a whole cursor's state")
        state = json.loads(raw)
        if not isinstance(state, dict) or not all(  # ids SQLite holds, one past them too
                isinstance(x, int) and 0 <= x < 2**63 - 1
                for x in (*state["t"], state["p"], state["b"])):
            raise ValueError("not a cursor's state")
        plan = Plan(_groups(phrases), (int(state["t"][0]), int(state["t"][1])),
                    (int(state["r"][0]), int(state["r"][1])), asked)
        phase = (int(state["p"]), int(state["b"]))
        shown = base64.b64decode(state["s"]) if phase[0] == 0 else None
        fingerprint, membership = int(state["q"]), int(state["h"])
    except (ValueError, OverflowError, RecursionError, KeyError, IndexError, TypeError,
            zlib.error, binascii.Error):
        raise bad from None
    if fingerprint != asked:
        raise CursorError(CursorRefusal.OTHER_QUERY)
    if phase[0] not in (0, 1, 2, 3):
        raise bad
    return plan, shown, phase, membership


def _stale_cursor() -> CursorError:
    return CursorError(CursorRefusal.STALE)


# -- the flat ranking, the labels, the hybrid path ------------------------------------------------


def _exhaustive(store: Store, words: list[str], match: str | None, limit: int,
                semantic: Semantic | None, gate: float, query: str = "") -> Hits:
    """Every match ranked (bm25 over both indexes, the top `limit` of each, best first),
    fused as the first page is when lexical coverage falls short."""
    stale = dec.stale_events(store)
    hits, bodies = _flat(store, match, limit, stale) if match is not None else ([], {})
    hits.sort(key=lambda h: (h.score, h.kind != "rollup", h.id))
    coverage = covered(words, [bodies[h.id] for h in hits if h.kind == "event"][:3])
    out = Hits(hits[:limit])
    if semantic is not None and coverage < gate:
        got = semantic()
        fused = None if got is None else _fused(
            store, hits, bodies, got, limit, stale, coverage / gate if gate else 1.0, query,
            semantic)
        if fused is not None:
            out = Hits(fused)
    return out


def _flat(store: Store, match: str, limit: int, stale: dict[int, str]
          ) -> tuple[list[Hit], dict[int, str]]:
    """The flat ranking's hits (unsorted) and the events' whole texts."""
    hits: list[Hit] = []
    bodies: dict[int, str] = {}
    for event, score, snip in ev.fts_search(store, match, limit, BOOKKEEPING):
        hits.append(_event_hit(event, stale, snip, score))
        bodies[int(event.id or 0)] = event.body
    for rollup, score in rl.fts_search(store, match, limit):
        hits.append(_rollup_hit(rollup, score))
    return hits, bodies


def _event_hit(e: Event, stale: dict[int, str], snippet: str | None, score: float,
               source: str | None = None) -> Hit:
    """An event as a hit: its FTS snippet (else its first 240 characters) on one line, so no
    line break in a body opens a line of its own in a door's output."""
    excerpt = " ".join((e.body[:240] if snippet is None else snippet).split())
    return Hit("event", int(e.id or 0), e.ts, _label(e, stale), excerpt, score,
               source or e.source, e.actor)


def _rollup_hit(r: Any, score: float, source: str = "ladder") -> Hit:
    """A rollup as a hit: its title and summary, one line, 240 characters."""
    text = f"{r.title}: {r.body}" if r.title else r.body
    return Hit("rollup", r.id, r.last_ts, f"level {r.level}", " ".join(text[:240].split()),
               score, source)


def _label(event: Event, stale: dict[int, str]) -> str:
    """The hit's kind, and what the reader must know of it: stale, or imported (whatever actor
    an imported line claims, it never carries the owner's authority; the words of the loop's
    context and recall block)."""
    label = header_field(event.kind)
    if event.id in stale:
        label += f" (stale: superseded by {stale[event.id]})"
    if event.imported:
        label += " (imported: not your owner's words)"
    if struck_record(event):
        label += f" ({STRUCK_NOTE})"
    return label


def _fused(store: Store, hits: list[Hit], bodies: dict[int, str], got: tuple[Any, Any],
           limit: int, stale: dict[int, str], lexical_weight: float,
           query: str = "", semantic: Semantic | None = None) -> list[Hit] | None:
    """Three rankings fused: the lexical hits (weighted by how much of the query they cover,
    relative to the gate: what matched a word or two of a paraphrase is mostly chance), the
    nearest events and the nearest rollups (title and summary); and a fourth when the query
    names one person who speaks in the history: that person's nearest events to the query in
    their own words (`semantic` embeds it), as recall fuses them (ADR-0030). `bodies`: the
    lexical event hits' whole texts. A text said again (a reminder posted every week) is one
    hit: its best copy stands for the rest, which would otherwise fill the page with one line.
    None, with a WARNING, when the vectors cannot be read against the query's (the model
    changed): the caller keeps its lexical page."""
    try:
        near, near_rollups, person = _nearest(store, got, limit, query, semantic)
    except EmbedError as e:
        log.warning("semantic channel unusable (%s); search goes on lexical only", e)
        return None
    fused = rrf([(h.kind, h.id) for h in hits], near, near_rollups, person,
                weights=(lexical_weight, 1.0, ROLLUP_WEIGHT, 1.0))
    said: set[str] = set()  # the texts of the events taken
    out: list[Hit] = []
    key = {(h.kind, h.id): (h, bodies.get(h.id, "") if h.kind == "event" else "")
           for h in hits}
    _take_fused(store, fused, key, out, said, stale, limit)
    return out


def _nearest(store: Store, got: tuple[Any, Any], limit: int, query: str,
             semantic: Semantic | None = None
             ) -> tuple[list[tuple[str, int]], list[tuple[str, int]], list[tuple[str, int]]]:
    """The nearest events, the nearest rollups, and the named person's nearest events to the
    query in their own words (empty when it names no one who speaks)."""
    vector, matrix = got
    near = [("event", i) for i in matrix.nearest(vector, max(limit, 20))]
    rollups = getattr(matrix, "rollups", None)
    near_rollups = ([("rollup", i) for i in rollups.nearest(vector, max(limit, 10))]
                    if rollups is not None and len(rollups.ids) else [])
    named = (named_person_or_none(store, query, matrix) if query and hasattr(matrix, "people")
             else None)
    if named is None:
        return near, near_rollups, []
    theirs = semantic(named.asked) if semantic is not None else None
    person = [("event", i) for i in matrix.nearest(
        vector if theirs is None else theirs[0], max(limit, 20), among=named.mask)]
    return near, near_rollups, person


def _take_fused(store: Store, fused: list[tuple[Any, float]],
                key: dict[tuple[str, int], tuple[Hit, str]], out: list[Hit], said: set[str],
                stale: dict[int, str], limit: int) -> None:
    """Fill `out` up to `limit` from the fused ranking: a lexical hit as it was, an item only
    the vectors found as a semantic hit, neither repeated nor folded into one taken."""
    taken = {(h.kind, h.id) for h in out}
    spans: list[tuple[int, int]] = []  # the spans of the rollups taken
    for item, score in fused:
        if len(out) >= limit:
            return
        found = key.get(item) or _semantic_hit(store, item, stale)
        if found is None or item in taken:
            continue
        h, body = found
        if _folded(store, h, out, spans) or _said_again(body, said):
            continue
        out.append(replace(h, score=round(score, 6)))


def _said_again(body: str, said: set[str]) -> bool:
    """Whether an event's text (case and spacing aside) is one already taken; else it is noted.
    A rollup (no body here) is never a repeat."""
    text = " ".join(body.casefold().split())
    if not text:
        return False
    if text in said:
        return True
    said.add(text)
    return False


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


def _semantic_hit(store: Store, item: tuple[str, int], stale: dict[int, str]
                  ) -> tuple[Hit, str] | None:
    """A hit only the vectors found (source "semantic"), and an event's whole text."""
    kind, i = item
    if kind == "rollup":
        r = rl.get(store, i)
        if r is None:
            return None
        return _rollup_hit(r, 0.0, "semantic"), ""
    e = ev.get(store, i)
    if e is None or e.kind in BOOKKEEPING_KINDS:
        return None
    return _event_hit(e, stale, None, 0.0, "semantic"), e.body
