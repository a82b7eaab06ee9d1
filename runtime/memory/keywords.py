"""memory.keywords: the words an episode is talked about with, kept beside its index card.

Two sources, both written as tags of the level-1 rollup (`store.tags`, never its body):

- `from_model`: reflect's `ask` callable (it owns the model; this module never imports it)
  gets batches of up to BATCH episodes, [(episode id, text)], and answers with keywords and
  synonyms per episode id. Each batch is one call taken from the run's model budget (the
  ladder's `Summarizer`: `SUMMARY_CALLS_PER_RUN` and its "3 failures in a row" rule). Only
  episodes with no 'model' tag yet are asked about, newest first, so a second run asks nothing
  for them. The answer is checked hard: a keyword is a word or a two-word phrase of letters and
  digits of at most MAX_CHARS characters; an episode gets at most MAX_PER_EPISODE; an id not in
  the batch is dropped. What is dropped is said once per batch at WARNING; a call that fails or
  leaves nothing usable counts as a failed call. Never raises for a bad answer.
- `offline`: co-occurrence over episodes (PMI): words that keep appearing, across other
  episodes, with this episode's card words, and that this episode never says. Written with
  origin 'offline', for episodes that have none yet.

Tags are found by the FTS `tags` column (search, and the walk's and recall's entry
candidates); the walk's confidence and recall's evidence read the text, never these tags.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..store import Store
from ..store import events as ev
from ..store import rollups as rl
from ..store import tags as tg
from .ladder import Summarizer
from .tokens import VOCAB_CHARS, head, stem, words

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


# --- offline: co-occurrence over episodes -----------------------------------------------------

PER_EPISODE = 6  # offline keywords per episode
MIN_SUPPORT = 2  # episodes a pair must share to count
MIN_SCORE = 2.0  # summed positive PMI (nats) a word needs
COMMON = 0.05  # a word in more than this share of the episodes (and in more than
COMMON_FLOOR = 5  # this many) is no keyword
ANCHOR_DF = 50  # a card word in more episodes than this anchors nothing


def offline(store: Store, per_episode: int = PER_EPISODE) -> int:
    """Give every episode with no 'offline' tag the words that co-occur with its card words
    across the other episodes (positive PMI over episodes, summed over its card words) and
    that it does not say itself. Returns how many episodes got keywords."""
    eps = {r.id: r for r in rl.at_level(store, 1) if r.vocab}
    todo = set(tg.episodes_without(store, "offline", len(eps) + 1)) & eps.keys()
    if len(eps) < 3 or not todo:
        return 0
    # a card sealed before reflect capped it may hold every word of a 4 MB message
    vocab = {i: head(r.vocab, VOCAB_CHARS).split() for i, r in eps.items()}
    surface = _surfaces(vocab)
    co = _Cooccurrence.over(vocab)
    found: dict[int, list[str]] = {}
    for i in sorted(todo):
        best = co.expand(i, [stem(t) for t in eps[i].terms.split()], per_episode)
        if best:
            found[i] = [surface[s] for s in best]
    if found:
        tg.add_many(store, "rollup", found, "offline")
    return len(found)


def _surfaces(vocab: dict[int, list[str]]) -> dict[str, str]:
    """Each stem as the first word that made it, to write keywords as words."""
    surface: dict[str, str] = {}
    for ws in vocab.values():
        for w in ws:
            surface.setdefault(stem(w), w)
    return surface


@dataclass
class _Cooccurrence:
    stems: dict[int, set[str]]
    posting: dict[str, list[int]]
    df: Counter[str]
    n: int
    common: float
    cache: dict[str, Counter[str]] = field(default_factory=dict)

    @classmethod
    def over(cls, vocab: dict[int, list[str]]) -> _Cooccurrence:
        """The stems of every episode's card words, their episode counts and postings."""
        stems = {i: {stem(w) for w in ws} for i, ws in vocab.items()}
        df: Counter[str] = Counter(s for ss in stems.values() for s in ss)
        posting: defaultdict[str, list[int]] = defaultdict(list)
        for i, ss in stems.items():
            for s in ss:
                posting[s].append(i)
        n = len(vocab)
        return cls(stems, posting, df, n, max(COMMON_FLOOR, COMMON * n))

    def with_anchor(self, t: str) -> Counter[str]:
        """How many episodes hold both `t` and each other word."""
        if t not in self.cache:
            c: Counter[str] = Counter()
            for j in self.posting.get(t, ()):
                c.update(self.stems[j])
            self.cache[t] = c
        return self.cache[t]

    def expand(self, i: int, anchors: Sequence[str], k: int) -> list[str]:
        own = self.stems[i]
        score: defaultdict[str, float] = defaultdict(float)
        for t in dict.fromkeys(anchors):
            dt = self.df.get(t, 0)
            if not 2 <= dt <= ANCHOR_DF:
                continue
            for w, c in self.with_anchor(t).items():
                # a word this episode says is skipped, so `c` counts other episodes only
                if (w in own or c < MIN_SUPPORT or self.df[w] > self.common
                        or len(w) < 3 or not w.isalpha()):
                    continue  # a number or a short token is no keyword
                pmi = math.log(self.n * c / (dt * self.df[w]))
                if pmi > 0:
                    score[w] += pmi
        return [w for w, s in sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))
                if s >= MIN_SCORE][:k]
