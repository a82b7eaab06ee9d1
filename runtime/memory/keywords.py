"""memory.keywords: the words an episode is talked about with, kept beside its index card.

Written as tags of the level-1 rollup (`store.tags`, never its body), origin 'model':
`from_model`: reflect's `ask` callable (it owns the model; this module never imports it)
gets batches of up to BATCH episodes, [(episode id, text)], and answers with keywords and
synonyms per episode id. Each batch is one call taken from the run's model budget (the
ladder's `Summarizer`: `SUMMARY_CALLS_PER_RUN` and its "3 failures in a row" rule). Only
episodes with no 'model' tag yet are asked about, newest first, so a second run asks nothing
for them. The answer is checked hard: a keyword is a word or a two-word phrase of letters and
digits of at most MAX_CHARS characters; an episode gets at most MAX_PER_EPISODE; an id not in
the batch is dropped. What is dropped is said once per batch at WARNING; a call that fails or
leaves nothing usable counts as a failed call. Never raises for a bad answer. (The offline
keywords of co-occurrence were deleted in issue 39: they earned nothing measured,
docs/benchmarks.md; tags a store holds from them, origin 'offline', stay and are read.)

Tags are found by the FTS `tags` column (search, and the walk's and recall's entry
candidates); the walk's confidence and recall's evidence read the text, never these tags.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..store import Store
from ..store import events as ev
from ..store import rollups as rl
from ..store import tags as tg
from .ladder import Summarizer
from .tokens import words

log = logging.getLogger(__name__)

BATCH = 8  # episodes per model call
MAX_PER_EPISODE = 12
MAX_WORDS = 2
MAX_CHARS = 40
EPISODE_CHARS = 1500  # of an episode's text shown to the model
SHOWN_DROPS = 4  # reasons quoted in a batch's WARNING


@dataclass
class Answer:
    """A model answer whose shape was checked: keywords per episode id, and why items of it
    were dropped already (an item that did not validate)."""

    keywords: dict[int, list[str]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


# [(episode id, text)] -> Answer; raises when the answer is unusable (counts as a failed call)
Ask = Callable[[Sequence[tuple[int, str]]], Answer]


@dataclass
class KeywordReport:
    calls: int = 0
    failed: int = 0
    episodes: int = 0  # episodes that got keywords
    words: int = 0
    dropped: int = 0
    stopped: str = ""

    def outcome(self) -> str:
        if not self.calls:
            return self.stopped or "no episode needed keywords"
        out = (f"{self.words} keywords on {self.episodes} episodes from {self.calls} calls"
               f" ({self.failed} failed, {self.dropped} items dropped)")
        return f"{out}; {self.stopped}" if self.stopped else out


def keyword(raw: str) -> str | None:
    """`raw` as a keyword (lowercase, single spaces), or None when it is not a word or a
    two-word phrase of letters and digits."""
    parts = raw.lower().split()
    if not 1 <= len(parts) <= MAX_WORDS or any(words(p) != [p] for p in parts):
        return None
    w = " ".join(parts)
    return w if len(w) <= MAX_CHARS else None


def clean(answer: Answer, asked: Sequence[int]) -> tuple[dict[int, list[str]], list[str]]:
    """The keywords to write per episode, and why the rest was dropped."""
    kept: dict[int, list[str]] = {}
    dropped = list(answer.dropped)
    for rid, raw in answer.keywords.items():
        if rid not in asked:
            dropped.append(f"episode {rid} was not asked about")
            continue
        if len(raw) > MAX_PER_EPISODE:
            dropped.append(f"episode {rid}: {len(raw)} keywords, at most {MAX_PER_EPISODE}")
            continue
        good = []
        for w in raw:
            k = keyword(w)
            if k is None:
                dropped.append(f"episode {rid}: {w[:40]!r} is not a word or two-word phrase")
            else:
                good.append(k)
        if good:
            kept[rid] = list(dict.fromkeys(good))
    return kept, dropped


def episode_text(store: Store, r: rl.Rollup) -> str:
    """What the model reads of an episode: its title and its events' words."""
    parts = [r.title]
    if r.first_event is not None and r.last_event is not None:
        parts += [e.body for e in ev.span(store, r.first_event, r.last_event)
                  if e.kind not in ev.BOOKKEEPING_KINDS and e.body.strip()]
    else:
        parts.append(r.body)
    return " ".join(" ".join(parts).split())[:EPISODE_CHARS]


def from_model(store: Store, ask: Ask, budget: Summarizer, batch: int = BATCH) -> KeywordReport:
    """Ask for the keywords of episodes that have no 'model' tag yet, one call per batch,
    while the run's budget lasts."""
    report = KeywordReport()
    left = max(0, budget.budget - budget.used)
    if budget.gave_up or not left:
        report.stopped = ("model given up on this run: no keywords asked for" if budget.gave_up
                          else "model budget spent on summaries: no keywords asked for")
        return report
    todo = tg.episodes_without(store, "model", left * batch)
    for i in range(0, len(todo), batch):
        shown = [(r.id, episode_text(store, r)) for rid in todo[i:i + batch]
                 if (r := rl.get(store, rid)) is not None]
        if not budget.spend():
            report.stopped = budget.gave_up or "model budget spent"
            break
        report.calls += 1
        _one_batch(store, ask, shown, budget, report)
    if budget.gave_up and not report.stopped:
        report.stopped = budget.gave_up
    return report


def _one_batch(store: Store, ask: Ask, shown: list[tuple[int, str]], budget: Summarizer,
               report: KeywordReport) -> None:
    ids = [i for i, _ in shown]
    what = f"keywords for episodes {min(ids)}-{max(ids)}"
    try:
        kept, dropped = clean(ask(shown), ids)
        if not kept:
            raise ValueError("no usable keyword in the answer" + (
                f" ({'; '.join(dropped[:SHOWN_DROPS])})" if dropped else ""))
    except Exception as e:  # the model's failure: it counts toward giving the model up
        report.failed += 1
        budget.failed("keywords", f"{what}: {type(e).__name__}: {e}")
        return
    budget.succeeded()
    try:
        added = tg.add_many(store, "rollup", kept, "model")
    except Exception as e:  # the store's, not the model's: loud, and never breaks the ritual
        report.failed += 1
        log.warning("%s: the model's keywords could not be stored (%s: %s); those episodes are "
                    "asked again on the next run", what, type(e).__name__, e)
        return
    report.episodes += len(added)
    report.words += sum(len(ws) for ws in added.values())
    if dropped:
        report.dropped += len(dropped)
        more = f" and {len(dropped) - SHOWN_DROPS} more" if len(dropped) > SHOWN_DROPS else ""
        log.warning("%s: dropped %d items of the answer (%s%s)", what, len(dropped),
                    "; ".join(dropped[:SHOWN_DROPS]), more)

