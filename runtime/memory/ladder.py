"""The ladder: sealing rollups, rungs a factor of `fanout` apart.

Level 1 episodes are blocks of about `fanout` events (cut where a new tick starts or after a
quiet gap, at most 1.5 x fanout), read from events and archive as one history, streamed; and
always cut where imported history meets live events or another import batch, whatever the
block's size, so an episode never mixes them and is dated by its own timestamps. Level
n+1 rollups gather up to `fanout` consecutive unparented level-n rollups, and so on up.
Every rung groups what is close in time (ADR-0035): a rollup of level n never covers more than
`span_limit(n)` from its first timestamp to its last (a day for an episode, a week for a
chapter, seven times more each rung up), so a rollup that would stretch its group past that
completes the group at any size, as a change of origin completes an episode. Children are
always consecutive in ids, so a parent's span `first-last` holds its children and nothing else.
Only complete blocks seal; a sealed rollup never changes; a rerun with nothing new changes
nothing; each seal is its own transaction, so an interrupted run leaves whole rungs only.
A run holds one block of events or one group of `fanout` rollups at a time, never a whole
level, so its memory does not grow with the history (tests/test_reflect_memory.py).
Every rollup carries an index card and a summary: an episode's card is its most distinctive
words against the whole log, a parent's its children's card words weighed by how few rollups
of their rung hold them (`cards`); the summary is written by the `summarize` callable the
ritual passes in (checked against the source, with a fallback), or extractive. Spans that do
not validate are written NULL (ADR-0008).
After GIVE_UP_AFTER failed summaries in a row the run stops calling `summarize` and the rest of
it is extractive; a run's fallbacks are said once at WARNING, never once per call. The
`Summarizer` is also the run's model budget: other model calls of the run (reflect's keyword
calls, `memory.keywords`) take their calls from it with `spend` and report with `succeeded` /
`failed`, so they count against `SUMMARY_CALLS_PER_RUN` (rituals/reflect.py) and its "3
failures in a row" rule.

It reads and writes the store; it never imports the model.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from typing import TypeVar

from ..store import Event, Store
from ..store import events as ev
from ..store import rollups as rl
from . import cards as cd
from .tokens import VOCAB_CHARS, head

log = logging.getLogger(__name__)

# (level, [(id, text)]) -> (title, summary) or None; may raise, which counts as a failure.
Summarize = Callable[[int, Sequence[tuple[int, str]]], "tuple[str, str] | None"]
Extent = tuple[float, float] | None  # first and last timestamp, in seconds; None if unknown
T = TypeVar("T")

GAP_SECONDS = 30 * 60
DAY = 24 * 3600.0
MIN_SHARED = 0.6  # a model summary must share this share of its content words with the span
GIVE_UP_AFTER = 3  # failed summaries in a row, then the rest of the run is extractive
CARD_TERMS = 8
HISTORY_PAGE = 2000  # events read from the store at a time while cutting episodes


@dataclass
class LadderReport:
    sealed: dict[int, int] = field(default_factory=dict)
    methods: Counter[str] = field(default_factory=Counter)
    summary_fallbacks: int = 0
    null_spans: int = 0

    def add(self, level: int, method: str) -> None:
        self.sealed[level] = self.sealed.get(level, 0) + 1
        self.methods[method] += 1


@dataclass
class Summarizer:
    """The model-written summary path, with its per-run budget and its check.

    A model that keeps failing (garbage, an outage, summaries that are not about their source)
    is asked at most GIVE_UP_AFTER times in a row: then `gave_up` says why and every later
    span of the run is extractive. Each failure is an INFO line; the run's WARNING is one line,
    said when it gives up or by `finish()`."""

    fn: Summarize | None = None
    name: str = "model"
    budget: int = 0
    used: int = 0
    fallbacks: int = 0  # calls made whose result failed or did not pass the check
    streak: int = 0  # failures in a row, since the last summary that passed
    last_failure: str = ""
    gave_up: str | None = None  # why the model is not asked again this run

    def attempt(self, level: int, items: Sequence[tuple[int, str]]) -> tuple[str, str] | None:
        if self.fn is None or self.gave_up or self.used >= self.budget or not items:
            return None
        self.used += 1
        try:
            result = self.fn(level, items)
        except Exception as e:  # a failed call falls back to extractive
            self._failed(f"{type(e).__name__}: {e}")
            return None
        title, body = ((result[0] or "").strip(), (result[1] or "").strip()) if result else ("", "")
        share = cd.shared_share(f"{title} {body}", [t for _, t in items])
        if not body or share < MIN_SHARED:
            self._failed(f"the summary shares only {share:.0%} of its words with its source")
            return None
        self.streak = 0
        return " ".join(title.split())[:120], body[:1200]

    def _failed(self, why: str) -> None:
        self.fallbacks += 1
        self.streak += 1
        self.last_failure = why
        if self.streak >= GIVE_UP_AFTER:
            self.gave_up = (f"model summaries failed {self.streak} times in a row ({why}); "
                            "the rest of this run is extractive")
            log.warning("%s", self.gave_up)
        else:
            log.info("model summary failed (%s); using an extractive summary", why)
        return None

    # --- the same budget, for the run's other model calls (keywords) ------------------------

    def spend(self) -> bool:
        """Take one call from the run's budget: False (and nothing taken) when it is spent or
        the model was given up on this run."""
        if self.gave_up or self.used >= self.budget:
            return False
        self.used += 1
        return True

    def succeeded(self) -> None:
        self.streak = 0

    def failed(self, what: str, why: str) -> None:
        """A spent call whose answer could not be used: counts toward the streak (said at INFO;
        giving up is said once at WARNING). It is not a summary fallback."""
        self.streak += 1
        self.last_failure = why
        if self.streak >= GIVE_UP_AFTER:
            self.gave_up = (f"model calls failed {self.streak} times in a row (last, {what}: "
                            f"{why}); the model is not asked again this run")
            log.warning("%s", self.gave_up)
        else:
            log.info("model %s failed (%s)", what, why)

    def outcome(self) -> str:
        """One line for the run's figures: what became of the model summaries."""
        if self.fn is None:
            return "no model: extractive"
        if self.gave_up:
            return self.gave_up
        if self.fallbacks:
            return (f"{self.fallbacks} of {self.used} model summaries fell back to extractive")
        return f"{self.used} model summaries"

    def finish(self) -> None:
        """Say the run's fallbacks once at WARNING (giving up has said it already)."""
        if self.fallbacks and not self.gave_up:
            log.warning("%s (last: %s)", self.outcome(), self.last_failure)


def span_limit(level: int) -> float:
    """The longest stretch of time, in seconds, a rollup of `level` covers from its first
    timestamp to its last: a day for an episode, a week for a chapter, then x7 a rung."""
    return DAY * 7 ** (level - 1)


def _seconds(ts: str | None) -> float | None:
    try:
        return datetime.fromisoformat((ts or "").replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _ts(e: Event) -> float:
    return _seconds(e.ts) or 0.0


def _boundary(prev: Event, e: Event) -> bool:
    # a gap either way: an imported file need not be in time order
    return e.kind == "tick" or abs(_ts(e) - _ts(prev)) >= GAP_SECONDS


def _origin(e: Event) -> tuple[bool, str | None]:
    """Live, or which import batch: an episode holds events of one origin only."""
    return (True, e.meta.get("import_batch")) if e.imported else (False, None)


def _join(a: Extent, b: Extent) -> Extent:
    """The stretch of time two extents cover together; an unknown one adds nothing."""
    return (min(a[0], b[0]), max(a[1], b[1])) if a and b else a or b


def _too_long(extent: Extent, level: int) -> bool:
    return extent is not None and extent[1] - extent[0] > span_limit(level)


def episode_blocks(store: Store, fanout: int, after_id: int) -> Iterator[list[Event]]:
    """Complete blocks of about `fanout` events after `after_id`, streamed in id order. A
    change of origin (live to imported, one import batch to another), or an event that would
    stretch the block over more than a day, completes a block at any size: nothing later can
    join it."""
    block: list[Event] = []
    extent: Extent = None
    hard = fanout + fanout // 2
    for e in ev.history_after(store, after_id, HISTORY_PAGE):
        t = _ts(e)
        if block and (_origin(e) != _origin(block[-1])
                      or _too_long(_join(extent, (t, t)), 1)
                      or (len(block) >= fanout and _boundary(block[-1], e))
                      or len(block) >= hard):
            yield block
            block, extent = [], None
        block.append(e)
        extent = _join(extent, (t, t))
    # the trailing block is incomplete: it waits for more history


def _extent(r: rl.Rollup) -> Extent:
    first, last = _seconds(r.first_ts), _seconds(r.last_ts)
    return (first, last) if first is not None and last is not None else None


def groups(items: Iterable[T], extent: Callable[[T], Extent], fanout: int,
           level: int) -> Iterator[list[T]]:
    """Complete groups of consecutive `items` (oldest first), one parent of `level` each:
    `fanout` of them, or fewer when the next item would stretch the group over more than
    `span_limit(level)` (nothing later can join it then). The trailing group is incomplete."""
    group: list[T] = []
    covered: Extent = None
    for item in items:
        joined = _join(covered, extent(item))
        if group and _too_long(joined, level):
            yield group
            group, joined = [], extent(item)
        group.append(item)
        covered = joined
        if len(group) == fanout:
            yield group
            group, covered = [], None


def _unparented(store: Store, level: int) -> Iterator[rl.Rollup]:
    """A level's unparented rollups, oldest first, each read when the one before is used."""
    for (r,) in rl.unparented_groups(store, level, 1):
        yield r


def _span(store: Store, first: int | None, last: int | None, what: str,
          report: LadderReport) -> str | None:
    if first is not None and last is not None and ev.span_resolves(store, first, last):
        return f"{first}-{last}"
    log.warning("provenance for %s does not validate (span %s-%s); writing source_range NULL "
                "(ADR-0008)", what, first, last)
    report.null_spans += 1
    return None


def vocabulary(block: Sequence[Event]) -> str:
    """Every distinct content word of the span and who spoke: the episode's full index card,
    so recall can find the episode by any word said in it, not only by its top terms. Of each
    text its head is read (`tokens.head`), and the card stops at VOCAB_CHARS: a 4 MB message
    of distinct words made a card the walk took 15 s to read."""
    seen: dict[str, None] = {}
    size = 0
    for e in block:
        if e.kind in ev.BOOKKEEPING_KINDS:
            continue
        for w in (*cd.content_words(head(e.body)), *cd.words(e.actor)):
            if w not in seen:
                size += len(w) + 1
                if size > VOCAB_CHARS:
                    return " ".join(seen)
                seen[w] = None
    return " ".join(seen)


def seal_episode(store: Store, block: list[Event], scorer: cd.Distinctive,
                 summarizer: Summarizer, report: LadderReport) -> int | None:
    first, last = block[0].id, block[-1].id
    # of each text its head: the cards, the summary and its check read no further (a 4 MB
    # message took 16 s and 430 MB to seal whole)
    items = [(int(e.id or 0), head(e.body)) for e in block
             if e.kind not in ev.BOOKKEEPING_KINDS and e.body.strip()]
    terms = scorer.cards([t for _, t in items], CARD_TERMS)
    written = summarizer.attempt(1, items)
    if written:
        title, body = written
        method = summarizer.name
    else:
        title = cd.title_from(terms, "quiet stretch")
        body = (cd.cite(scorer.best_sentences(items, 2, terms)) if items else
                f"bookkeeping only: {len(block)} events ({', '.join(sorted({e.kind for e in block}))})")
        method = "extractive"
    span = _span(store, first, last, f"episode {first}-{last}", report)
    rid = rl.seal(store, level=1, first_event=first, last_event=last, source_range=span,
                  first_ts=min(block, key=_ts).ts, last_ts=max(block, key=_ts).ts,
                  title=title, body=body,
                  terms=" ".join(terms), method=method, vocab=vocabulary(block))
    if rid is not None:
        report.add(1, method)
    return rid


def seal_parent(store: Store, level: int, kids: list[rl.Rollup], scorer: cd.Distinctive,
                summarizer: Summarizer, report: LadderReport) -> int | None:
    terms = scorer.rung_card(level - 1, [k.terms.split() for k in kids], CARD_TERMS)
    title, body, method = _parent_text(level, kids, terms, scorer, summarizer)
    first, last, span = _parent_span(store, level, kids, report)
    rid = rl.seal(store, level=level, first_event=first, last_event=last, source_range=span,
                  first_ts=min((k.first_ts for k in kids if k.first_ts), default=None),
                  last_ts=max((k.last_ts for k in kids if k.last_ts), default=None),
                  title=title, body=body, terms=" ".join(terms), method=method,
                  child_ids=[k.id for k in kids])
    if rid is not None:
        report.add(level, method)
    return rid


def _parent_text(level: int, kids: list[rl.Rollup], terms: list[str], scorer: cd.Distinctive,
                 summarizer: Summarizer) -> tuple[str, str, str]:
    """(title, body, method) of a parent: the model's summary, else the children's best
    sentences."""
    written = summarizer.attempt(level, [(k.id, f"{k.title}. {k.body}") for k in kids])
    if written:
        return written[0], written[1], summarizer.name
    title = cd.title_from(terms, f"level {level} rollup")
    # Child bodies carry [#event] citations; keep them by citing the child's sentences.
    pairs = scorer.best_sentences([(k.id, k.body) for k in kids], 3, terms)
    return title, cd.cite(pairs).replace("[#", "[rollup #"), "extractive"


def _parent_span(store: Store, level: int, kids: list[rl.Rollup], report: LadderReport
                 ) -> tuple[int | None, int | None, str | None]:
    """(first event, last event, source_range) a parent covers; all None when a child is
    unlinked (ADR-0008: provenance that cannot be shown is not made up)."""
    if not all(k.source_range for k in kids):
        log.warning("level %d rollup over %d-%d has unlinked children; writing source_range "
                    "NULL (ADR-0008)", level, kids[0].id, kids[-1].id)
        report.null_spans += 1
        return None, None, None
    first = min((k.first_event for k in kids if k.first_event is not None), default=None)
    last = max((k.last_event for k in kids if k.last_event is not None), default=None)
    span = _span(store, first, last, f"level {level} rollup over {kids[0].id}-{kids[-1].id}",
                 report)
    return (first, last, span) if span else (None, None, span)


def seal(store: Store, fanout: int, summarizer: Summarizer | None = None,
         progress: Callable[[int], None] | None = None) -> LadderReport:
    """Seal every complete block, level by level. Idempotent. Memory is bounded: episodes come
    from a stream of events, parents from a level's unparented rollups read one at a time and
    held one group at a time, never from a list of a whole level."""
    summarizer = summarizer or Summarizer()
    report = LadderReport()
    scorer = cd.Distinctive(store)
    after = rl.episodes_cover_up_to(store)
    for block in episode_blocks(store, fanout, after):
        seal_episode(store, block, scorer, summarizer, report)
        if progress:
            progress(len(block))
    level = 1
    while rl.count_unparented(store, level):
        for kids in groups(_unparented(store, level), _extent, fanout, level + 1):
            seal_parent(store, level + 1, kids, scorer, summarizer, report)
        level += 1
    report.summary_fallbacks = summarizer.fallbacks
    summarizer.finish()
    return report


def plan(store: Store, fanout: int) -> dict[int, int]:
    """What `seal` would seal now, per level, without writing anything: the same groups, cut
    from the extents of what is unparented and what would be sealed."""
    after = rl.episodes_cover_up_to(store)
    new: list[Extent] = [(min(map(_ts, b)), max(map(_ts, b)))
                         for b in episode_blocks(store, fanout, after)]
    out = {1: len(new)}
    level = 1
    while new or rl.count_unparented(store, level):
        items = [_extent(r) for r in _unparented(store, level)] + new
        new = [reduce(_join, g) for g in groups(items, lambda x: x, fanout, level + 1)]
        level += 1
        out[level] = len(new)
    return {lvl: n for lvl, n in out.items() if n}
