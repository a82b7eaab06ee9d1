"""FTS5 through its documented interfaces: what memory's kept counts ask of the two indexes.

Owns the reads `memory.rung_bm25`, `memory.docfreq` and `memory.cards` make beside a plain
MATCH: FTS5's own tokenizer on a private in-memory table read through `fts5vocab`
(`Tokenizer`), how many rows a MATCH holds, one row's `bm25()`, the texts `rollups_fts`
indexes, and the stamps that say when what memory keeps of an index no longer holds (ids that
only grow: a rollup sealed, a tag added, a redaction; the file itself, for a backup restored in
place; on PostgreSQL, where the store has no file of its own, the server's files of the
history's table and of the full text's kept counts, which a table made again or emptied by
TRUNCATE (a restore, `health.pg_fts_rebuild`) changes).

Never reads an index's shadow tables (`<index>_data`, `_idx`, `_docsize`, `_config`,
`_content`): their records are a format SQLite does not document, so a change there would
change ranking silently (issue 39 item 7; `tests/test_rung_bm25.py` scans `runtime/` for such
SQL). Read-only: nothing here writes the store.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence

from . import marks, pg_fts
from .db import Store

TOKENIZE = "porter unicode61 remove_diacritics 2"  # events_fts' and rollups_fts' tokenizer


class Tokenizer:
    """FTS5's own tokenizer (`TOKENIZE`), on a private in-memory contentless table: the terms
    an index holds for a text, read back through its `fts5vocab` instance table."""

    def __init__(self, tokenize: str = TOKENIZE) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{tokenize}', "
                        "content='')")
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")

    def terms(self, texts: Mapping[int, str]) -> dict[int, list[str]]:
        """Each text's terms, one a token (in no particular order)."""
        out: dict[int, list[str]] = {i: [] for i in texts}
        if not texts:
            return out
        self.db.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", texts.items())
        for term, doc in self.db.execute("SELECT term, doc FROM v"):
            out[int(doc)].append(str(term))
        self.db.execute("INSERT INTO t(t) VALUES ('delete-all')")
        return out


def _files(store: Store, *tables: str) -> tuple[int, ...]:
    """What changes when the store is made again in place: SQLite, the file's inode (a backup
    restored in place is another file); PostgreSQL, each of `tables`' file on the server
    (`marks.file_of`)."""
    if _pg(store):
        return marks.read(store, [marks.file_of(t) for t in tables])
    try:
        return (os.stat(store.path).st_ino,)
    except OSError:
        return (0,)


def _tops(store: Store, *tables: str) -> tuple[int, ...]:
    """The highest id of each table (0 for an empty one), in one statement."""
    row = store.query("SELECT " + ", ".join(
        f"(SELECT coalesce(max(id), 0) FROM {t})" for t in tables))[0]
    return tuple(int(x or 0) for x in row)


def _stamp(store: Store, tops: tuple[str, ...], files: tuple[str, ...]) -> tuple[int, ...]:
    """`_tops` of `tops`, then `_files` of `files`; on PostgreSQL in one round trip, or none
    inside `marks.one_moment` after the first (reflect asks for a stamp a sentence it scores:
    the round trips were most of its time there)."""
    if not _pg(store):
        return (*_tops(store, *tops), *_files(store, *files))
    return marks.read(store, [*map(marks.newest, tops), *map(marks.file_of, files)])


def history_stamp(store: Store) -> tuple[int, ...]:
    """What moves when events_fts rows are rewritten rather than appended: the newest tag
    and redaction (their ids only grow: AUTOINCREMENT) and the file (on PostgreSQL the
    events' table's and the kept counts')."""
    return _stamp(store, ("tags", "redactions"), ("events", "fts_stats"))


def rollups_stamp(store: Store) -> tuple[int, ...]:
    """What moves with every change to rollups_fts: the newest rollup (a rollup is sealed
    once and never deleted), tag and redaction (the only rewrites of a sealed rollup's words),
    and the file (on PostgreSQL the ladder's index's and its kept counts')."""
    return _stamp(store, ("rollups", "tags", "redactions"), ("fts_rollups", "fts_rollup_stats"))


def _pg(store: Store) -> bool:
    return getattr(store, "dialect", "sqlite") == "postgres"


def match_count(store: Store, match: str) -> int:
    """How many rows of rollups_fts hold `match`."""
    if _pg(store):
        return pg_fts.count(store, pg_fts.compile_match(store, match, "rollups_fts"),
                            "rollups_fts")
    return int(store.scalar("SELECT count(*) FROM rollups_fts WHERE rollups_fts MATCH ?",
                            (match,)) or 0)


def count_upto_many(store: Store, matches: Sequence[str], top: int, cap: int,
                    index: str = "events_fts") -> list[int]:
    """`events.fts_count_upto` of each of `matches`; on PostgreSQL the kept counts of the
    one-word ones in one statement (search counts each group of its words: a round trip
    each)."""
    if not _pg(store):
        from . import events

        return [events.fts_count_upto(store, m, top, cap, index) for m in matches]
    return pg_fts.counts_upto(store, [pg_fts.compile_match(store, m, index) for m in matches],
                              top, cap, index)


def rollup_rows(store: Store) -> int:
    """How many rows rollups_fts holds: one a rollup."""
    return int(store.scalar("SELECT count(*) FROM rollups") or 0)


def newest_bm25(store: Store, match: str) -> tuple[int, float] | None:
    """The newest row of rollups_fts holding `match` and its `bm25(rollups_fts)`, or None."""
    if _pg(store):
        got = pg_fts.scored(store, pg_fts.compile_match(store, match, "rollups_fts"), None, 1,
                            False, "rollups_fts")
        return got[0] if got else None
    rows = store.query("SELECT rowid, bm25(rollups_fts) FROM rollups_fts WHERE rollups_fts "
                       "MATCH ? ORDER BY rowid DESC LIMIT 1", (match,))
    return (int(rows[0][0]), float(rows[0][1])) if rows else None


def rollup_texts(store: Store, ids: Sequence[int]) -> dict[int, tuple[str, int]]:
    """Each rollup's text in the columns recall matches (title, body, card terms, vocabulary,
    tags: one string) and its level, as rollups_fts indexes them (its content view,
    rollups_indexed, on both backends)."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    return {int(r[0]): (" ".join(str(x) for x in r[1:6] if x), int(r[6])) for r in store.query(
        f"SELECT id, title, body, terms, vocab, tags, level FROM rollups_indexed "
        f"WHERE id IN ({marks})", tuple(ids))}


def history_chars(store: Store, after: int, upto: int) -> int:
    """The characters events_fts indexes (body, kind, actor) of the events after..upto."""
    return int(store.scalar(
        "SELECT coalesce(sum(length(body) + length(kind) + length(actor)), 0) FROM history "
        "WHERE id > ? AND id <= ?", (after, upto)) or 0)


def history_texts(store: Store, after: int, upto: int) -> list[tuple[str, ...]]:
    """(body, kind, actor) of each event after..upto (hot or archived), as events_fts reads
    them."""
    return [tuple(str(c) for c in r if c) for r in store.query(
        "SELECT body, kind, actor FROM history WHERE id > ? AND id <= ?", (after, upto))]


def card_holders(store: Store, level: int, word: str) -> int:
    """How many rollups of `level` hold `word` (as a phrase) in their card terms."""
    match = 'terms : "' + word.replace('"', '""') + '"'
    if _pg(store):
        holding = pg_fts.matching(pg_fts.compile_match(store, match, "rollups_fts"),
                                  "rollups_fts")
        return int(store.scalar(f"SELECT count(*) FROM rollups WHERE level = ? AND id IN "
                                f"({holding})", (level,)) or 0)
    return int(store.scalar(  # a join would probe FTS once a rollup
        "SELECT COUNT(*) FROM rollups WHERE level = ? AND id IN "
        "(SELECT rowid FROM rollups_fts WHERE rollups_fts MATCH ?)", (level, match)) or 0)
