"""FTS5's own bm25 for chosen rollups of one rung, without FTS5's pass over every match.

Owns one computation: the score `bm25(rollups_fts)` gives a row of rung N for recall's and the
walk's MATCH (`level : "N" AND {title body terms vocab tags} : (...)`, one-word phrases joined
by any operators), computed for rows the caller has already chosen. FTS5 computes it by first
counting, for every phrase of the statement, the rows that hold it: a pass over each phrase's
whole doclist. On a long history the rung holds tens of thousands of episodes for a common word
(and for `level : "1"` itself), so every ranked statement cost what the whole rung costs and
grew with it (issue 15). Here those counts are read once and kept while the index is
unchanged (`RungMemory`, stamped by `store.fts.rollups_stamp`: the newest rollup, tag and
redaction, which move with every change to the index), and so is each scored episode's term
counts and length, read from its own text by FTS5's own tokenizer (`store.fts.Tokenizer`, a
private in-memory table read through fts5vocab: `memory.tokens` follows FTS5 closely but not
on every word): a warm statement costs the rows it scores, a cold one also reads their text
once (ADR-0023). The formula is FTS5's, as its documentation gives it (k1 1.2, b 0.75, idf
log((N - n + 0.5) / (n + 0.5)) floored at 1e-6, every column weighted 1), summed term by term
in the statement's order as FTS5 sums it, so a score here equals FTS5's for the same row and
statement; `tests/test_rung_bm25.py` checks it to 1e-9, and equal scores stay equal.

The index's two totals come through documented doors only, never FTS5's shadow tables (issue
39 item 7): its rows are the rollups, and its tokens are read back from FTS5's own `bm25()` of
one row whose length is known here (`_totals`: the newest row of the top rung, for its rung's
phrase alone), kept only when this module's formula then gives that row FTS5's score bit for
bit. When it does not (an index out of step with its table, a future FTS5 that ranks
otherwise) nothing is scored here: every caller keeps FTS5's own bm25, with one WARNING.

Read-only: it reads the store and knows nothing of recall's ranking or the loop. A query word
FTS5 would read as more than one term is left to FTS5's bm25 (`handles`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain

from ..store import Store, fts
from ..store import events as ev
from ..store import rollups as rl
from .tokens import words

log = logging.getLogger(__name__)

K1, B = 1.2, 0.75  # FTS5's bm25 defaults
COLUMNS = "{title body terms vocab tags}"  # the columns recall matches words in
MAX_COUNTS = 50_000  # phrase counts kept for one state of the index
MAX_ROWS = 20_000  # episodes whose stem counts are kept (about 1 KB each)
EXACT_ROWS = 1000  # a rung's matches `search_rung` scores itself; more keep FTS5's bm25
TOKENIZE = fts.TOKENIZE  # rollups_fts's (a test holds them equal)
MAX_TERMS = 200_000  # words whose FTS5 terms are kept (about 30 MB at most)


class _Terms:
    """FTS5's own tokenizer (`store.fts.Tokenizer`): the terms rollups_fts holds for a text, so
    the counts here are FTS5's exactly (this project's `memory.tokens` follows it closely but
    not everywhere: snowball's porter reads "reasonably" as "reasonabli" where SQLite's reads
    "reason", and FTS5 leaves tokens under 3 bytes unstemmed). An ASCII text is split here (its
    words are runs of letters and digits, as unicode61 reads them) and each distinct word's
    terms asked of FTS5 once and kept; any other text is read by FTS5 whole."""

    def __init__(self) -> None:
        self.fts = fts.Tokenizer(TOKENIZE)
        self.known: dict[str, tuple[str, ...]] = {}  # a word: the terms FTS5 makes of it

    def learn(self, some: Iterable[str]) -> None:
        """Ask FTS5 the terms of each word not known yet (all of them known after)."""
        wanted = dict.fromkeys(some)
        if len(self.known) + len(wanted) > MAX_TERMS:
            self.known = {}  # bounded: start again rather than grow
        new = [w for w in wanted if w not in self.known]  # never a set difference: O(known)
        if not new:
            return
        for i, terms in self.fts.terms(dict(enumerate(new, 1))).items():
            self.known[new[i - 1]] = tuple(terms)

    def bags(self, texts: dict[int, str]) -> dict[int, Counter[str]]:
        """Each text's term counts (their sum: its length in tokens, as FTS5 counts it)."""
        split = {i: words(x) for i, x in texts.items() if x.isascii()}
        self.learn(chain.from_iterable(split.values()))
        out = {i: Counter(chain.from_iterable(map(self.known.__getitem__, ws)))
               for i, ws in split.items()}
        rest = {i: x for i, x in texts.items() if i not in split}
        out.update((i, Counter(terms)) for i, terms in self.fts.terms(rest).items())
        return out

    def term(self, word: str) -> str | None:
        """The one term FTS5 makes of `word` as a phrase, or None when it makes more or none."""
        self.learn([word])
        terms = self.known[word]
        return terms[0] if len(terms) == 1 else None


_TERMS = _Terms()


def handles(fts_words: Sequence[str]) -> bool:
    """Whether these FTS words can be scored here: each one term, as FTS5 reads its phrase."""
    with _LOCK:
        return bool(fts_words) and all(_TERMS.term(w) is not None for w in fts_words)


class RungMemory:
    """For one database, while its index is unchanged (`stamp`): how many rows of rollups_fts
    hold each phrase, each scored episode's stem counts and length, and the index's totals.
    Bounded: at most MAX_COUNTS phrases and MAX_ROWS episodes (a full table is emptied and
    read again). Episodes are sealed once, so a row read again has the text it had; any write
    to the index (a new rollup, a tag, a redaction) changes the stamp."""

    def __init__(self) -> None:
        self.stamp: tuple[int, ...] | None = None
        self.counts: dict[str, int] = {}
        self.rows: dict[int, tuple[Counter[str], int]] = {}
        self.totals: tuple[int, int] | None = None  # (rows, tokens) of the index
        self.totals_read = False

    def fresh(self, stamp: tuple[int, ...]) -> None:
        if stamp != self.stamp:
            self.stamp, self.counts, self.rows = stamp, {}, {}
            self.totals, self.totals_read = None, False
        if len(self.counts) >= MAX_COUNTS:
            self.counts = {}
        if len(self.rows) >= MAX_ROWS:
            self.rows = {}

    def count_upto(self, store: Store, match: str, top: int, cap: int) -> int:
        """`events.fts_count_upto` on rollups_fts, kept like the phrase counts."""
        key = f"{top}\x00{cap}\x00{match}"
        with _LOCK:
            if key not in self.counts:
                self.counts[key] = ev.fts_count_upto(store, match, top, cap, "rollups_fts")
            return self.counts[key]

    def count(self, store: Store, phrase: str) -> int:
        if phrase not in self.counts:
            self.counts[phrase] = fts.match_count(store, phrase)
        return self.counts[phrase]

    def stems(self, store: Store, ids: Sequence[int]) -> dict[int, tuple[Counter[str], int]]:
        """Each episode's stem counts over the columns recall matches, and its length in
        tokens over every column (its level's too), as FTS5 counts it."""
        missing = [i for i in ids if i not in self.rows]
        if missing:
            texts = fts.rollup_texts(store, missing)
            bags = _TERMS.bags({i: text for i, (text, _) in texts.items()})
            levels = _TERMS.bags({i: str(level) for i, (_, level) in texts.items()})
            for i, bag in bags.items():
                self.rows[i] = (bag, sum(bag.values()) + sum(levels[i].values()))
        return {i: self.rows[i] for i in ids if i in self.rows}

    def averages(self, store: Store) -> tuple[int, float] | None:
        """(rows, average length in tokens) of the index, read once for this stamp; None when
        they cannot be had exactly (`_totals`)."""
        if not self.totals_read:
            self.totals, self.totals_read = _totals(store, self), True
        if self.totals is None:
            return None
        rows, tokens = self.totals
        return rows, tokens / rows  # FTS5's own division


_MEMORY: dict[str, RungMemory] = {}
_LOCK = threading.RLock()


def memory_for(store: Store) -> RungMemory:
    """What is kept for this database file (one per process), emptied if the index changed."""
    with _LOCK:
        kept = _MEMORY.setdefault(str(store.path), RungMemory())
        kept.fresh(fts.rollups_stamp(store))
        return kept


def _idf(rows: int, holding: int) -> float:
    x = math.log((rows - holding + 0.5) / (holding + 0.5))
    return x if x > 0 else 1e-6


def _term(idf: float, freq: float, size: int, avgdl: float) -> float:
    """One phrase's part of a row's score, in FTS5's order of operations."""
    return idf * ((freq * (K1 + 1.0)) / (freq + K1 * (1 - B + B * size / avgdl)))


def _totals(store: Store, kept: RungMemory) -> tuple[int, int] | None:
    """(rows, tokens) of rollups_fts, as FTS5's bm25 reads them, through documented doors: the
    rows are the rollups (one index row each); the tokens are solved from FTS5's own score for
    the newest row of the top rung under its rung's phrase alone (one phrase, held once, by a
    row whose length `stems` reads), and kept only if this module's formula then gives that
    row FTS5's score exactly. None (FTS5 ranks instead) when it does not."""
    rows, phrase = fts.rollup_rows(store), level_phrase(rl.top_level(store))
    probe = fts.newest_bm25(store, phrase) if rows else None
    if probe is None:
        return None
    rowid, score = probe
    size = kept.stems(store, [rowid]).get(rowid, (Counter(), 0))[1]
    idf = _idf(rows, kept.count(store, phrase))
    # -score = idf * (K1 + 1) / (1 + K1 * (1 - B + B * size / avgdl)), solved for size / avgdl
    share = ((idf * (K1 + 1.0) / -score - 1.0) / K1 - (1 - B)) / B if score < 0 else 0.0
    guess = round(size / share * rows) if share > 0 and size > 0 else 0
    for tokens in sorted(range(guess - 2, guess + 3), key=lambda t: (abs(t - guess), t)):
        if tokens > 0 and -1.0 * (0.0 + _term(idf, 1.0, size, tokens / rows)) == score:
            return rows, tokens
    log.warning("rung_bm25: FTS5's bm25 of rollup %d (%r) is not this module's formula for its "
                "length %d; recall and the walk rank the ladder with FTS5's own bm25", rowid,
                score, size)
    return None


def level_phrase(level: int) -> str:
    """The phrase every row of rung `level` holds once, in its level column."""
    return f'level : "{int(level)}"'


def _scores(store: Store, ids: Sequence[int], fts_words: Sequence[str], level: int
            ) -> dict[int, float]:
    """`scores`, under its lock."""
    if not ids:
        return {}
    kept = memory_for(store)
    averages = kept.averages(store)
    if averages is None:
        return {}
    n_rows, avgdl = averages

    def idf(phrase: str) -> float:
        return _idf(n_rows, kept.count(store, phrase))

    # FTS5's sum, term by term in the statement's order (the rung's phrase first), so equal
    # scores stay equal and the order of ties is FTS5's
    rung = idf(level_phrase(level))
    phrases = [(idf(f'{COLUMNS} : "{w}"'), _TERMS.term(w)) for w in fts_words]
    out: dict[int, float] = {}
    for i, (bag, size) in kept.stems(store, ids).items():
        d = K1 * (1 - B + B * size / avgdl)
        score = 0.0 + rung * ((1.0 * (K1 + 1.0)) / (1.0 + d))
        for w, term in phrases:
            f = bag.get(term, 0) if term is not None else 0
            if f:  # a term the row lacks adds exactly 0.0: skipping it changes no bit
                score += w * ((f * (K1 + 1.0)) / (f + d))
        out[i] = -1.0 * score
    return out


def scores(store: Store, ids: Sequence[int], fts_words: Sequence[str], level: int = 1
           ) -> dict[int, float]:
    """bm25 (negative, best lowest, as FTS5 gives it) of each rollup in `ids` for a MATCH of
    `fts_words` on rung `level` (any operators between them), as FTS5 would compute it for
    that statement. `fts_words` must pass `handles`; ids must be of that level.
    One caller at a time (the MCP server answers calls on threads of their own)."""
    with _LOCK:
        return _scores(store, ids, fts_words, level)


def search_rung(store: Store, fts_words: Sequence[str], level: int, limit: int
                ) -> list[tuple[rl.Rollup, float]]:
    """What `rollups.fts_search(store, <OR of fts_words>, limit, level=level, columns=...)`
    returns (recall's columns: the walk's entry scan), the same rows, order and scores, without
    FTS5 counting every row of the index that holds each word: when the rung holds at most
    EXACT_ROWS matches, they are read unscored and scored from the kept counts (at a million
    events one ranked statement on a rung of six rollups cost 2-20 ms, all of it counting).
    More matches, or words this module cannot score, go to FTS5's bm25."""
    match = ev.fts_query(fts_words)
    if match is None:
        return []
    if handles(fts_words):
        expr = f"{level_phrase(level)} AND {COLUMNS} : ({match})"
        top = ev.fts_top_id(store, "rollups_fts")
        if memory_for(store).count_upto(store, expr, top, EXACT_ROWS + 1) <= EXACT_ROWS:
            ids = ev.fts_ids(store, expr, top, -1, "rollups_fts")
            got = scores(store, ids, fts_words, level)
            if len(got) == len(ids):
                best = sorted(got, key=lambda i: (got[i], i))
                best = best[:limit] if limit >= 0 else best  # SQL's LIMIT -1: every row
                rows = rl.get_many(store, best)
                return [(rows[i], got[i]) for i in best if i in rows]
    return rl.fts_search(store, match, limit, level=level, columns=COLUMNS.strip("{}"))
