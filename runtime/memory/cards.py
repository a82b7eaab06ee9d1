"""Index cards and extractive summaries: what makes a span of history distinctive.

Owns tf-idf against the whole log: term frequencies from the span, document frequencies read
from the FTS index itself (the `events_vocab` table, porter stems), so a card costs a few
indexed look-ups and no pass over the log (the store reads them: no SQL here). A parent's card
weighs its children's card words by how few rollups of their rung hold them (`rung_card`,
ADR-0035, `store.fts.card_holders`), so a word a whole rung holds
(small talk said every day) loses to the words that tell this span from its siblings. A card
never holds an id or a hash (`looks_like_id`: `7711b75`) nor a word of SMALL_TALK, though the
episode's vocabulary, which recall and the walk read, keeps every word. Cards are surface
words (what a person would type); words and stems come from `memory.tokens`, the one
tokenizer, which splits and folds as the FTS tokenizer does, so a card indexed in rollups_fts
is found by the same query words. Extractive summaries pick the most informative sentences
and cite their event ids. Deterministic; reads the store, never writes, never calls a model.

It also owns the one limit on a query's length, `MAX_QUERY_CHARS` (2,000 characters): walk,
search, recall, the agent's memory tools and the MCP tools all read at most that much of a
query, through `cap_query`. A longer query is truncated, never refused: its first
MAX_QUERY_CHARS characters are used (a word the cut splits in two is dropped) and the result
says so (`"query_truncated": true` in a walk, in an MCP search or recall, in the `recall`
event's meta; a note line from the `memory_search` tool). So a pasted book costs what 2,000
characters cost. Every de-duplication of query words is linear (a dict, never a list scan).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from ..store import Store, fts
from ..store import rollups as rl
from ..store.events import BOOKKEEPING_KINDS  # noqa: F401 - re-exported, see below
from . import docfreq
from .tokens import STOPWORDS, stem, words

# BOOKKEEPING_KINDS (store.events), `stem` and `words` (memory.tokens) are re-exported for the
# modules that still read them here (ladder, embed, gate, redaction, the CLI); they are owned
# where they are imported from.

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_CITE = re.compile(r"\s*\[(?:rollup )?#\d+\]")
_WORD_CHAR = re.compile(r"[^\W_]")

# The one limit on a query's length, for every door (see the module docstring).
MAX_QUERY_CHARS = 2000

# Greetings, thanks, meals, fillers and relative days: said in any span, telling none apart.
SMALL_TALK = frozenset("""
    hi hello hey thanks thank thx cheers bye morning afternoon evening tonight today tomorrow
    yesterday weekend lunch coffee breakfast dinner drinks anyone everyone someone somebody
    join joining ok okay yes yeah yep nope sure cool nice great awesome lol haha sorry welcome
    congrats guys folks soon later quick
""".split())
_HEX = frozenset("0123456789abcdef")
RUNG_CACHED = 20_000  # rung document frequencies one scorer keeps


def cap_query(text: str, limit: int = MAX_QUERY_CHARS) -> tuple[str, bool]:
    """`text` cut to at most `limit` characters, and whether it was cut. A word the cut splits
    in two is dropped (unless it is all there is), so no half word becomes a search term."""
    if len(text) <= limit:
        return text, False
    head = text[:limit]
    if _WORD_CHAR.match(text, limit):  # the cut may fall inside a word: drop its first half
        i = limit
        while i > 0 and _WORD_CHAR.match(head, i - 1):
            i -= 1
        if head[:i].strip():
            head = head[:i]
    return head, True


def is_content_word(w: str) -> bool:
    if w in STOPWORDS:
        return False
    if w.isdigit():
        return 2 <= len(w) <= 6  # ticket and issue numbers, not timestamps
    return len(w) >= 3


def looks_like_id(w: str) -> bool:
    """A hash or an id rather than a word: hex of six or more with a digit (`7711b75`), or
    letters and digits twelve or more long."""
    return (any(c.isdigit() for c in w) and not w.isdigit()
            and (len(w) >= 12 or (len(w) >= 6 and set(w) <= _HEX)))


def card_word(w: str) -> bool:
    """A word an index card may hold: not an id or hash, not small talk."""
    return w not in SMALL_TALK and not looks_like_id(w)


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if is_content_word(w)]


def sentences(text: str) -> list[str]:
    out = []
    for s in _SENTENCE.split(text):
        s = " ".join(s.split())
        if len(s) >= 12:
            out.append(s if len(s) <= 240 else s[:239] + "…")
    return out


class Distinctive:
    """tf-idf against the whole history. Document frequencies and the number of events come
    from `memory.docfreq`, which keeps them per process and database while they hold (at most
    its MAX_STEMS stems) and brings them up to date when events are appended."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.n_docs = 1  # set by each idf call: the events in all, as of that call
        self._rung: dict[tuple[int, str], int] = {}  # (level, word) -> rollups whose card has it
        self._rung_size: dict[int, int] = {}  # level -> its rollups, as first read

    def idf(self, stems: Sequence[str]) -> dict[str, float]:
        out: dict[str, float] = {}
        for i in range(0, len(stems), docfreq.MAX_STEMS):  # memory stays bounded
            part = stems[i:i + docfreq.MAX_STEMS]
            df, docs = docfreq.doc_freqs(self.store, part)
            self.n_docs = max(1, docs)
            out.update((s, math.log((self.n_docs + 1) / (df[s] + 1)) + 1.0) for s in part)
        return out

    def cards(self, texts: Sequence[str], k: int = 8) -> list[str]:
        """The span's k most distinctive words (surface forms), best first."""
        tf: Counter[str] = Counter()
        surface: dict[str, Counter[str]] = {}
        for text in texts:
            for w in filter(card_word, content_words(text)):
                s = stem(w)
                tf[s] += 1
                surface.setdefault(s, Counter())[w] += 1
        if not tf:
            return []
        idf = self.idf(list(tf))
        ranked = sorted(tf, key=lambda s: (-(1 + math.log(tf[s])) * idf[s], s))
        return [surface[s].most_common(1)[0][0] for s in ranked[:k]]

    def rung_df(self, level: int, word: str) -> int:
        """How many rollups of `level` hold `word` (by stem) in their card; kept per scorer."""
        key = (level, word)
        if key not in self._rung:
            if len(self._rung) >= RUNG_CACHED:
                self._rung.clear()
            self._rung[key] = fts.card_holders(self.store, level, word)
        return self._rung[key]

    def rung_card(self, level: int, cards: Sequence[Sequence[str]], k: int = 8) -> list[str]:
        """A parent's card from its children's cards (each best first, of rung `level`): a
        word weighs its ranks in them (k for a first place, down by one a place) times its idf
        over the rest of the rung (the children's siblings), so the words these children share
        and few others hold come first, and what the whole rung says sinks."""
        weights: Counter[str] = Counter()
        holders: Counter[str] = Counter()
        for card in cards:
            for rank, w in enumerate(card[:k]):
                if card_word(w):
                    weights[w] += k - rank
                    holders[w] += 1
        if level not in self._rung_size:  # a run seals a rung's parents once it is whole
            self._rung_size[level] = rl.counts_per_level(self.store).get(level, 0)
        others = max(0, self._rung_size[level] - len(cards))
        score = {w: weight * (math.log((others + 1) / (max(0, self.rung_df(level, w)
                                                                - holders[w]) + 1)) + 1)
                 for w, weight in weights.items()}
        return sorted(score, key=lambda w: (-score[w], w))[:k]

    def best_sentences(self, items: Sequence[tuple[int, str]], k: int = 2,
                       focus: Sequence[str] = ()) -> list[tuple[int, str]]:
        """The k most informative (id, sentence) pairs, returned in id order.

        A sentence scores the idf of its distinct content words over the square root of their
        count (informative, not merely long), plus a bonus for each `focus` card it holds."""
        focus_stems = {stem(f) for f in focus}
        found: list[tuple[int, str, list[str]]] = []
        seen: set[str] = set()
        for item_id, text in items:
            for s in sentences(_CITE.sub("", text)):
                key = s.lower()
                ws = sorted({stem(w) for w in content_words(s)})  # summed in one order
                if ws and key not in seen:
                    seen.add(key)
                    found.append((item_id, s, ws))
        # one look-up for the whole span (a round trip a sentence was most of reflect's time
        # on PostgreSQL)
        idf = self.idf(sorted({w for _, _, ws in found for w in ws})) if found else {}
        scored = [(sum(idf[w] for w in ws) / math.sqrt(len(ws))
                   + 2.0 * len(focus_stems.intersection(ws)), pos, item_id, s)
                  for pos, (item_id, s, ws) in enumerate(found)]
        best = sorted(scored, key=lambda t: (-t[0], t[1]))[:k]
        return [(item_id, s) for _, _, item_id, s in sorted(best, key=lambda t: t[1])]


def title_from(cards: Sequence[str], fallback: str) -> str:
    """The three best cards, words before numbers (a title of ticket numbers says little)."""
    ordered = [c for c in cards if not c.isdigit()] + [c for c in cards if c.isdigit()]
    return ", ".join(ordered[:3]) if ordered else fallback


def cite(pairs: Sequence[tuple[int, str]], max_chars: int = 600) -> str:
    parts: list[str] = []
    used = 0
    for item_id, s in pairs:
        piece = f"{s} [#{item_id}]"
        if used + len(piece) > max_chars and parts:
            break
        parts.append(piece)
        used += len(piece) + 1
    return " ".join(parts)


def shared_share(summary: str, source_texts: Sequence[str]) -> float:
    """Share of the summary's content words (by stem) found in its source: the faithfulness
    check a model-written summary must pass."""
    # Citations like [#12] are asked for and are not words of the source.
    mine = {stem(w) for w in content_words(_CITE.sub(" ", summary))}
    if not mine:
        return 0.0
    theirs: set[str] = set()
    for t in source_texts:
        theirs.update(stem(w) for w in content_words(t))
    return len(mine & theirs) / len(mine)
