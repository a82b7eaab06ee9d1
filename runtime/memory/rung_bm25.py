"""FTS5's own bm25 for chosen rollups of one rung, without FTS5's pass over every match.

Owns one computation: the score `bm25(rollups_fts)` gives a row of rung N for recall's and the
walk's MATCH (`level : "N" AND {title body terms vocab tags} : (...)`, one-word phrases joined
by any operators), computed for rows the caller has already chosen. FTS5 computes it by first
counting, for every phrase of the statement, the rows that hold it: a pass over each phrase's
whole doclist. On a long history the rung holds tens of thousands of episodes for a common word
(and for `level : "1"` itself), so every ranked statement cost what the whole rung costs and
grew with it (issue 15). Here those counts are read once and kept while the index is
unchanged (`RungMemory`; its stamp is FTS5's averages and structure records, and the latter's
write counter moves with every change to the index: a rollup sealed, a tag added), and so is
each scored episode's term counts, read from its own text by FTS5's own tokenizer (on a
private in-memory table, `_Terms`: `memory.tokens` follows FTS5 closely but not on every word),
with its length from `rollups_fts_docsize`: a warm statement costs the rows it scores, a cold
one also reads their text once (ADR-0023). The formula is FTS5's (fts5_aux.c: k1 1.2, b 0.75,
idf log((N - n + 0.5) / (n + 0.5)) floored at 1e-6, every column weighted 1), summed term by
term in the statement's order as FTS5 sums it, so a score here equals FTS5's for the same row
and statement; `tests/test_rung_bm25.py` checks it to 1e-9, and equal scores stay equal.

Read-only: it reads the store and knows nothing of recall's ranking or the loop. A query word
FTS5 would read as more than one term is left to FTS5's bm25 (`handles`).
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain

from ..store import Store
from ..store import events as ev
from ..store import rollups as rl
from .tokens import words

K1, B = 1.2, 0.75  # FTS5's bm25 defaults
COLUMNS = "{title body terms vocab tags}"  # the columns recall matches words in
MAX_COUNTS = 50_000  # phrase counts kept for one state of the index
MAX_ROWS = 20_000  # episodes whose stem counts are kept (about 1 KB each)
EXACT_ROWS = 1000  # a rung's matches `search_rung` scores itself; more keep FTS5's bm25
TOKENIZE = "porter unicode61 remove_diacritics 2"  # rollups_fts's (a test holds them equal)
MAX_TERMS = 200_000  # words whose FTS5 term is kept (about 30 MB at most)


class _Terms:
    """FTS5's own tokenizer, on a private in-memory table: the terms rollups_fts holds for a
    text, so the counts here are FTS5's exactly (this project's `memory.tokens` follows it
    closely but not everywhere: snowball's porter reads "reasonably" as "reasonabli" where
    SQLite's reads "reason", and FTS5 leaves tokens under 3 bytes unstemmed). An ASCII text is
    split here (its words are runs of letters and digits, as unicode61 reads them) and each
    distinct word's term asked of FTS5 once and kept; any other text is read by FTS5 whole."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{TOKENIZE}', "
                        "content='')")
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        self.known: dict[str, str | None] = {}  # a word: its one term, None if not one

    def _read(self, texts: dict[int, str]) -> dict[int, list[str]]:
        """Each text's terms as FTS5 indexes them (in no particular order)."""
        out: dict[int, list[str]] = {i: [] for i in texts}
        if not texts:
            return out
        self.db.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", texts.items())
        for term, doc in self.db.execute("SELECT term, doc FROM v"):
            out[doc].append(term)
        self.db.execute("INSERT INTO t(t) VALUES ('delete-all')")
        return out

    def learn(self, some: Iterable[str]) -> None:
        """Ask FTS5 the term of each word not known yet (all of them known after)."""
        wanted = dict.fromkeys(some)
        if len(self.known) + len(wanted) > MAX_TERMS:
            self.known = {}  # bounded: start again rather than grow
        new = [w for w in wanted if w not in self.known]  # never a set difference: O(known)
        if not new:
            return
        for i, terms in self._read(dict(enumerate(new, 1))).items():
            self.known[new[i - 1]] = terms[0] if len(terms) == 1 else None

    def bags(self, texts: dict[int, str]) -> dict[int, dict[str, int]]:
        """Each text's term counts."""
        split = {i: words(x) for i, x in texts.items() if x.isascii()}
        self.learn(chain.from_iterable(split.values()))
        out: dict[int, dict[str, int]] = {
            i: Counter(map(self.known.__getitem__, ws)) for i, ws in split.items()}
        rest = {i: x for i, x in texts.items() if i not in split}
        out.update((i, Counter(terms)) for i, terms in self._read(rest).items())
        return out

    def term(self, word: str) -> str | None:
        """The one term FTS5 makes of `word` as a phrase, or None when it makes more or none."""
        self.learn([word])
        return self.known[word]


_TERMS = _Terms()


def handles(fts_words: Sequence[str]) -> bool:
    """Whether these FTS words can be scored here: each one term, as FTS5 reads its phrase."""
    with _LOCK:
        return bool(fts_words) and all(_TERMS.term(w) is not None for w in fts_words)


class RungMemory:
    """For one database, while its index is unchanged (`stamp`): how many rows of rollups_fts
    hold each phrase, and each scored episode's stem counts and length. Bounded: at most
    MAX_COUNTS phrases and MAX_ROWS episodes (a full table is emptied and read again). Episodes
    are sealed once, so a row read again has the text it had; any write to the index (a new
    rollup, a tag) changes the stamp."""

    def __init__(self) -> None:
        self.stamp: tuple[bytes, bytes] | None = None
        self.counts: dict[str, int] = {}
        self.rows: dict[int, tuple[dict[str, int], int]] = {}

    def fresh(self, stamp: tuple[bytes, bytes]) -> None:
        if stamp != self.stamp:
            self.stamp, self.counts, self.rows = stamp, {}, {}
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
            self.counts[phrase] = int(store.scalar(
                "SELECT count(*) FROM rollups_fts WHERE rollups_fts MATCH ?", (phrase,)) or 0)
        return self.counts[phrase]

    def stems(self, store: Store, ids: Sequence[int]) -> dict[int, tuple[dict[str, int], int]]:
        """Each episode's stem counts over its indexed text, and its length in tokens."""
        missing = [i for i in ids if i not in self.rows]
        if missing:
            marks = ",".join("?" * len(missing))
            sizes = {int(r[0]): sum(ev.varints(bytes(r[1] or b""))) for r in store.query(
                f"SELECT id, sz FROM rollups_fts_docsize WHERE id IN ({marks})", missing)}
            for i, bag in _TERMS.bags(_texts(store, missing)).items():
                self.rows[i] = (bag, sizes.get(i, 0))
        return {i: self.rows[i] for i in ids if i in self.rows}


_MEMORY: dict[str, RungMemory] = {}
_LOCK = threading.RLock()


def memory_for(store: Store) -> RungMemory:
    """What is kept for this database file (one per process), emptied if the index changed."""
    with _LOCK:
        kept = _MEMORY.setdefault(str(store.path), RungMemory())
        kept.fresh(_stamp(store))
        return kept


def _stamp(store: Store) -> tuple[bytes, bytes]:
    """The index's state: FTS5's averages record (rows, token totals) and its structure
    record, whose write counter moves with every change to the index."""
    rows = dict(store.query("SELECT id, block FROM rollups_fts_data WHERE id IN (1, 10)"))
    return bytes(rows.get(1) or b""), bytes(rows.get(10) or b"")


def _texts(store: Store, ids: Sequence[int]) -> dict[int, str]:
    """Each rollup's indexed text (title, body, card terms, vocabulary, tags), one string."""
    marks = ",".join("?" * len(ids))
    out = {int(r[0]): " ".join(x for x in r[1:] if x) for r in store.query(
        f"SELECT id, title, body, terms, vocab FROM rollups WHERE id IN ({marks})", tuple(ids))}
    for r in store.query(
            "SELECT item_id, group_concat(word, ' ') FROM tags WHERE item_kind = 'rollup' "
            f"AND item_id IN ({marks}) GROUP BY item_id", tuple(ids)):
        if int(r[0]) in out and r[1]:
            out[int(r[0])] += " " + str(r[1])
    return out


def level_phrase(level: int) -> str:
    """The phrase every row of rung `level` holds once, in its level column."""
    return f'level : "{int(level)}"'


def _scores(store: Store, ids: Sequence[int], fts_words: Sequence[str], level: int
            ) -> dict[int, float]:
    """`scores`, under its lock."""
    if not ids:
        return {}
    kept = memory_for(store)
    totals = ev.varints(kept.stamp[0]) if kept.stamp else []
    if not totals or totals[0] <= 0:
        return {}
    n_rows, avgdl = totals[0], sum(totals[1:]) / totals[0]

    def idf(phrase: str) -> float:
        n = kept.count(store, phrase)
        x = math.log((n_rows - n + 0.5) / (n + 0.5))
        return x if x > 0 else 1e-6

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
