"""The ladder's full text (rollups_fts) on both backends: the same rollups give the same rows,
in the same order, with the same bm25, on SQLite (FTS5) and PostgreSQL (pg_fts's fts_rollups),
for every MATCH this project writes on the ladder: `{title body terms tags} : (...)` (search),
`level : "N" AND {title body terms vocab tags} : (...)` (recall and the walk), `level : "N"`
and `terms : "w"` (rung_bm25, cards).

One SQLite store and one PostgreSQL store are given the same rollups through rollups.seal (two
levels, children adopted, a vocabulary, words only in the card terms, only in the vocabulary,
in several columns at once, only in the card terms) and the same tags through tags.add.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.store import events as ev
from runtime.store import fts, pg_fts, tags
from runtime.store import rollups as rl
from runtime.store.db import Store

from .pgserver import pg_url  # noqa: F401  (the fixture)

# (title, body, terms, vocab) of the level-1 episodes
_EPISODES = [
    ("Database migration", "We ran the database migration and it failed twice.",
     "database migration failed", "database migration failed ran twice schema"),
    ("Zeppelin sighting", "The harbour master reports a zeppelin over the harbour.",
     "zeppelin harbour", "zeppelin harbour master reports sighting"),
    ("Report review", "The report. The report. The report was reviewed by the owner.",
     "report review owner", "report reviewed owner review"),
    ("Café in Zürich", "Müller met us at the café; naïve questions about the résumé.",
     "cafe zurich muller", "café zürich müller naïve résumé questions"),
    ("Runner", "Running the runner: it runs once more, the database was locked.",
     "runner locked", "running runner runs database locked once"),
    ("Nothing much", "A quiet day with nothing relevant at all.", "quiet termsonly", ""),
    ("Apology", "Apology accepted; the apologies were sincere.", "apology sincere",
     "apology apologies sincere accepted vocabularyonly"),
    ("Machine learning", "Machine learning models learn; learning machines.",
     "machine learning models", "machine learning models learn"),
]
_TAGS = {1: ["deploy", "database"], 3: ["owner-review"], 6: ["quiet", "holiday"]}

_WORDS = [["database"], ["migration"], ["zeppelin", "harbour"], ["report"], ["owner"],
          ["cafe"], ["zurich", "muller"], ["running"], ["runs"], ["nothing"], ["apology"],
          ["vocabularyonly"], ["deploy"], ["holiday"], ["review"], ["machine", "learning"],
          ["absent"], ["the"], ["schema"], ["chapter"], ["termsonly"]]


def _seal(store: Any) -> None:
    first = 1
    for title, body, terms, vocab in _EPISODES:
        rl.seal(store, level=1, first_event=first, last_event=first + 9, source_range=None,
                first_ts="2026-12-01T00:00:00.000Z", last_ts="2026-12-01T01:00:00.000Z",
                title=title, body=body, terms=terms, method="test", vocab=vocab)
        first += 10
    rl.seal(store, level=2, first_event=None, last_event=None, source_range=None,
            first_ts=None, last_ts=None, title="Chapter one: database and zeppelin",
            body="A chapter about the database migration, the harbour and the report.",
            terms="chapter database", method="test", child_ids=[1, 2, 3, 4])
    for i, words in _TAGS.items():
        tags.add(store, "rollup", i, words, "owner")


def _both(tmp_path: Path, url: str, fill: Callable[[Any], None]) -> Iterator[tuple[Any, Any]]:
    """A SQLite store and a PostgreSQL one, each filled by `fill`."""
    from runtime.store.pg import PgStore

    lite: Any = Store.open(tmp_path / "state" / "coworker.db")
    pg: Any = PgStore.open(url, "alpha")
    for s in (lite, pg):
        fill(s)
    yield lite, pg
    lite.close()
    pg.close()


@pytest.fixture
def stores(tmp_path: Path, pg_url: str) -> Iterator[tuple[Any, Any]]:  # noqa: F811
    yield from _both(tmp_path, pg_url, _seal)


def _matches() -> list[str]:
    plain = [m for m in (ev.fts_query(w) for w in _WORDS) if m]
    return plain + ['("database") NOT ("migration")', '("report") AND ("owner")', '""',
                    '("database" OR "zeppelin") AND ("harbour" OR "report")']


def _same_scores(a: list[tuple[int, float]], b: list[tuple[int, float]], what: str) -> None:
    assert [i for i, _ in a] == [i for i, _ in b], what
    for (i, x), (_, y) in zip(a, b, strict=True):
        assert y == pytest.approx(x, rel=1e-9, abs=1e-12), f"{what}: row {i}"


def test_search_over_the_ladder_ranks_alike(stores: tuple[Any, Any]) -> None:
    lite, pg = stores
    for m in _matches():
        for level, columns in ((None, "title body terms tags"), (1, "title body terms tags"),
                               (1, "title body terms vocab tags"), (2, "title body terms tags")):
            a = rl.fts_search(lite, m, 10, level, columns)
            b = rl.fts_search(pg, m, 10, level, columns)
            what = f"{m} level {level} {columns}"
            _same_scores([(r.id, s) for r, s in a], [(r.id, s) for r, s in b], what)


def test_bounded_scans_over_the_ladder_agree(stores: tuple[Any, Any]) -> None:
    lite, pg = stores
    top = ev.fts_top_id(lite, "rollups_fts")
    assert ev.fts_top_id(pg, "rollups_fts") == top == 9
    for m in _matches():
        for expr in (f"{{title body terms tags}} : ({m})", f"terms : ({m})", m,
                     f'level : "1" AND {{title body terms vocab tags}} : ({m})'):
            for ceiling, limit in ((top, -1), (top - 3, 2), (top, 3)):
                _same_scores(ev.fts_scored(lite, expr, ceiling, limit, index="rollups_fts"),
                             ev.fts_scored(pg, expr, ceiling, limit, index="rollups_fts"), expr)
                assert (ev.fts_ids(lite, expr, ceiling, limit, "rollups_fts")
                        == ev.fts_ids(pg, expr, ceiling, limit, "rollups_fts")), expr
            for cap in (1, 3, 1000, -1):
                for ceiling in (top, top - 3):
                    assert (ev.fts_count_upto(lite, expr, ceiling, cap, "rollups_fts")
                            == ev.fts_count_upto(pg, expr, ceiling, cap, "rollups_fts")), expr


def test_rung_counts_and_texts_agree(stores: tuple[Any, Any]) -> None:
    lite, pg = stores
    for phrase in ('level : "1"', 'level : "2"', 'level : "3"', 'terms : "database"',
                   '{title body terms vocab tags} : "vocabularyonly"',
                   '{title body terms tags} : "vocabularyonly"', 'terms : "review"',
                   '{title body terms tags} : "deploy"'):
        assert fts.match_count(lite, phrase) == fts.match_count(pg, phrase), phrase
        a, b = fts.newest_bm25(lite, phrase), fts.newest_bm25(pg, phrase)
        assert (a is None) == (b is None), phrase
        if a and b:
            assert a[0] == b[0] and a[1] == b[1], phrase  # bit for bit, as rung_bm25 asks
    for level in (1, 2):
        for word in ("database", "zeppelin", "review", "owner", "absent", "chapter"):
            assert (fts.card_holders(lite, level, word)
                    == fts.card_holders(pg, level, word)), (level, word)
    ids = list(range(1, 10))
    assert {i: (sorted(t.split()), lv) for i, (t, lv) in fts.rollup_texts(lite, ids).items()} \
        == {i: (sorted(t.split()), lv) for i, (t, lv) in fts.rollup_texts(pg, ids).items()}


def test_the_kept_counts_are_the_rows_own(stores: tuple[Any, Any]) -> None:
    _, pg = stores
    assert tuple(pg.query("SELECT doc, toks FROM fts_rollup_stats WHERE term = ''")[0]) == tuple(
        pg.query("SELECT count(*), sum(ntok) FROM fts_rollups")[0])
    assert {(r[0], r[1], r[2]): r[3] for r in pg.query(
        "SELECT term, mask, level, doc FROM fts_rollup_stats WHERE doc > 0 AND term <> ''")} == {
        (r[0], r[1], r[2]): r[3] for r in pg.query(
            "SELECT u.lexeme, fts_mask(u.weights), r.level, count(*) FROM fts_rollups AS f "
            "JOIN rollups AS r USING (id), unnest(f.tsv) AS u GROUP BY 1, 2, 3")}


def test_column_filters_read_as_fts5_reads_them() -> None:
    cols = tuple(pg_fts.ROLLUP_CLASSES)
    q = pg_fts.parse('level : "1" AND {title body terms vocab tags} : ("a" OR terms : b) c',
                     cols)
    assert q.phrases == ("1", "a", "b", "c")
    assert q.columns == (frozenset({"level"}), frozenset({"title", "body", "terms", "vocab",
                                                          "tags"}),
                         frozenset({"terms"}), None)
    assert pg_fts.tsquery(q.tree, [["1"], ["a"], ["b"], ["c"]], ["B", "ACD", "A", "ABCD"]) == (
        "((('1':B) & (('a':ACD) | ('b':A))) & ('c'))")
    for bad in ('nosuch : "x"', '{title body : "x"', '{title body} "x"', 'title :'):
        with pytest.raises(ValueError):
            pg_fts.parse(bad, cols)
    # title, body and tags are one class there: a filter splitting them is refused
    assert pg_fts._classes(frozenset({"title", "body", "terms", "tags"})) == "AD"
    with pytest.raises(ValueError, match="one column class"):
        pg_fts._classes(frozenset({"title"}))
    with pytest.raises(ValueError):
        pg_fts.parse('title : "x"')  # the events' index has no column filters here


# --- memory.search over events, archive and rollups ---------------------------------------------

_HISTORY = [
    "We ran the database migration this morning and it failed twice on the schema.",
    "The harbour master reports a zeppelin over the harbour again.",
    "Owner asked for the report review before Friday.",
    "Running the runner again: the database was locked, it runs once more.",
    "Lunch at the café with Müller in Zürich, naïve questions about the résumé.",
    "Machine learning models learn; learning machines are not the same.",
    "The apology was accepted; the apologies were sincere.",
    "Deploy went out after the migration was fixed; the database is fine now.",
    "Nothing relevant happened today at all.",
    "The report was reviewed by the owner and sent to the harbour office.",
]
_QUERIES = ["database migration", "zeppelin harbour", "report owner", "café Zürich",
            "machine learning", "apology", "deploy", "runner locked", "schema", "chapter",
            "holiday quiet"]


def _history(store: Any) -> None:
    from runtime.store import archive
    from runtime.store.events import Event

    ev.append_many(store, [
        Event(kind=("message", "note", "tool_result")[i % 3], body=b,
              actor="owner" if i % 2 else "agent", ts=f"2026-12-0{1 + i // 4}T10:{i:02d}:00.000Z")
        for r in range(3) for i, b in enumerate(_HISTORY)])
    archive.move_older_than(store, "2026-12-02T00:00:00.000Z")
    _seal(store)


@pytest.fixture
def histories(tmp_path: Path, pg_url: str) -> Iterator[tuple[Any, Any]]:  # noqa: F811
    yield from _both(tmp_path, pg_url, _history)


def test_memory_search_gives_the_same_top_ten(histories: tuple[Any, Any]) -> None:
    from runtime.memory import search

    lite, pg = histories
    found = 0
    for query in _QUERIES:
        for exhaustive in (False, True):
            a = search.search(lite, query, 10, exhaustive=exhaustive)
            b = search.search(pg, query, 10, exhaustive=exhaustive)
            assert [(h.kind, h.id, h.source) for h in a] == [
                (h.kind, h.id, h.source) for h in b], query
            for x, y in zip(a, b, strict=True):
                assert y.score == pytest.approx(x.score, rel=1e-9, abs=1e-12), (query, x.id)
            assert [h.excerpt for h in a] == [h.excerpt for h in b], query
            assert a.next_cursor == b.next_cursor, query  # the same candidates, frozen alike
            found += len({h.kind for h in a}) == 2
            if a.next_cursor and b.next_cursor:  # and the next page
                assert [(h.kind, h.id) for h in search.search(lite, query, 10,
                                                              after=a.next_cursor)] == [
                    (h.kind, h.id) for h in search.search(pg, query, 10, after=b.next_cursor)]
    assert found  # events and rollups together on some pages


def test_optimize_indexes_vacuums_the_full_texts_tables_on_postgresql(
        histories: tuple[Any, Any]) -> None:
    """FTS5 merges its segments; PostgreSQL has none (GIN without a pending list): there the
    full text's tables are vacuumed and analyzed (the archive move's dead rows, the kept
    counts' updates), and search answers as before."""
    from runtime.store import archive

    lite, pg = histories
    before = [(r.id, s) for r, s in rl.fts_search(pg, '"database"', 10)]
    for s in (lite, pg):
        archive.optimize_indexes(s)
    assert {r[0] for r in pg.query(
        "SELECT relname FROM pg_stat_user_tables WHERE schemaname = ? AND "
        "last_vacuum IS NOT NULL AND last_analyze IS NOT NULL", (pg.schema,))} == {
        "events", "events_archive", "rollups", "tags", "fts_stats", "fts_rollups",
        "fts_rollup_words", "fts_rollup_terms", "fts_rollup_stats"}
    assert [(r.id, s) for r, s in rl.fts_search(pg, '"database"', 10)] == before
    assert [r.id for r, _ in rl.fts_search(lite, '"database"', 10)] == [i for i, _ in before]


def test_rung_bm25_scores_the_rung_alike(stores: tuple[Any, Any]) -> None:
    """rung_bm25 (recall's and the walk's entry scan) solves the index's tokens from one row's
    bm25 bit for bit: PostgreSQL's bm25 must give it exactly, or it falls back to the index's."""
    from runtime.memory import rung_bm25

    lite, pg = stores
    assert rung_bm25.memory_for(pg).averages(pg) == rung_bm25.memory_for(lite).averages(lite)
    assert rung_bm25.memory_for(pg).averages(pg) is not None
    for words in (["database"], ["zeppelin", "harbour"], ["report", "owner"], ["vocabularyonly"],
                  ["deploy", "quiet"], ["absent"]):
        for level in (1, 2):
            a = rung_bm25.search_rung(lite, words, level, 5)
            b = rung_bm25.search_rung(pg, words, level, 5)
            _same_scores([(r.id, s) for r, s in a], [(r.id, s) for r, s in b], str(words))


def test_the_walk_and_recall_answer_alike(histories: tuple[Any, Any]) -> None:
    """The walk's entry, trace, events and refusals, and recall's chosen events, on both."""
    from runtime.memory import recall, walk

    lite, pg = histories
    entered = refused = 0
    for query in _QUERIES:
        a, b = walk.walk_result(lite, query), walk.walk_result(pg, query)
        assert (a.refused, a.why and a.why.code) == (b.refused, b.why and b.why.code), query
        assert a.as_dict()["trace"] == b.as_dict()["trace"], query
        assert [e.as_dict() for e in a.events] == [e.as_dict() for e in b.events], query
        assert a.confidence == pytest.approx(b.confidence, rel=1e-9), query
        entered, refused = entered + (not a.refused), refused + a.refused
        ra, rb = recall.recall(lite, query), recall.recall(pg, query)
        assert [(h.event.id, h.episode) for h in ra.hits] == [
            (h.event.id, h.episode) for h in rb.hits], query
        assert [h.score for h in rb.hits] == pytest.approx([h.score for h in ra.hits],
                                                           rel=1e-9), query
        assert (ra.evidence, ra.skipped) == (pytest.approx(rb.evidence, rel=1e-9)
                                             if rb.evidence is not None else None, rb.skipped)
    assert entered and refused  # both outcomes were seen


# version 20's ladder counts: by term and class only, the rows without their rung, and no
# table of search's words
# version 22's trigger keeping the events' counts (no bulk load could defer it): its body
# stands in here (the test reads which one the migrated schema has)
_STATS_IN_20 = """CREATE OR REPLACE FUNCTION fts_stats_in() RETURNS trigger LANGUAGE plpgsql
AS $$ BEGIN RETURN NULL; END $$"""
_VERSION_20 = """
ALTER TABLE fts_rollup_stats DROP CONSTRAINT fts_rollup_stats_pkey;
ALTER TABLE fts_rollup_stats DROP COLUMN level;
TRUNCATE fts_rollup_stats;
INSERT INTO fts_rollup_stats (term, mask, doc, toks)
SELECT '', 0, count(*), sum(ntok) FROM fts_rollups UNION ALL
SELECT u.lexeme, fts_mask(u.weights), count(*), 0 FROM fts_rollups, unnest(tsv) AS u GROUP BY 1, 2;
ALTER TABLE fts_rollup_stats ADD PRIMARY KEY (term, mask);
ALTER TABLE fts_rollups DROP COLUMN level;
DROP TABLE fts_rollup_words;
DROP TABLE fts_rollup_terms;
DELETE FROM _migrations WHERE version >= 21;
"""


def test_an_older_schema_gets_its_rungs_counted_when_opened(tmp_path: Path,
                                                            pg_url: str) -> None:  # noqa: F811
    """Migrations 21 to 23 on a schema of version 20 holding a ladder: each row gets its
    rung, the counts are made again by rung, search's words and each rung's terms get their
    tables, the events' counts trigger can be deferred by a bulk load, the rung's kept counts
    and newest episodes then agree with SQLite's, and the recount doctor makes finds every kept
    table in step; new rollups are counted by rung."""
    from runtime.store import health, pg_schema
    from runtime.store.pg import PgStore

    for lite, pg in _both(tmp_path, pg_url, _seal):
        with pg.transaction() as db:
            db.execute(_VERSION_20)
            pg.raw.execute(_STATS_IN_20)
        assert pg.schema_version() == 20
        with PgStore.open(pg_url, "alpha") as again:
            assert again.schema_version() == pg_schema.VERSION == 23
            assert "deferred_counts" in again.scalar(  # migration 23's trigger function
                "SELECT prosrc FROM pg_proc WHERE proname = 'fts_stats_in' AND pronamespace = "
                "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())")
            assert {v.table: v.state for v in health.pg_fts_verdicts(again)} == dict.fromkeys(
                ("fts_event_tags", "fts_rollups", "fts_rollup_words", "fts_rollup_terms",
                 "fts_stats", "fts_rollup_stats"), "ok")
            assert again.scalar("SELECT count(*) FROM fts_rollup_terms") > 0
            top = ev.fts_top_id(lite, "rollups_fts")
            for w in ("database", "chapter", "zeppelin", "absent"):
                for level in (1, 2):
                    expr = f'level : "{level}" AND {{title body terms vocab tags}} : ("{w}")'
                    assert (ev.fts_count_upto(lite, expr, top, -1, "rollups_fts")
                            == ev.fts_count_upto(again, expr, top, -1, "rollups_fts")), expr
                    assert (ev.fts_ids(lite, expr, top, 3, "rollups_fts")
                            == ev.fts_ids(again, expr, top, 3, "rollups_fts")), expr
            rl.seal(again, level=2, first_event=None, last_event=None, source_range=None,
                    first_ts=None, last_ts=None, title="Chapter two", body="zeppelin again",
                    terms="zeppelin", method="test", child_ids=[5, 6])
            assert [tuple(r) for r in again.query(
                "SELECT mask, doc FROM fts_rollup_stats WHERE term = 'zeppelin' AND level = 2 "
                "ORDER BY mask")] == [(8, 1), (9, 1)]  # chapter one's title; two's terms, body
            assert health.pg_fts_verdicts(again)[-1].state == "ok"


def test_searchs_filter_reads_its_own_vector() -> None:
    """Search's filter ({title body terms tags}) is read through fts_rollup_words' weightless
    vector; any other filter through the whole vector with weights."""
    where = pg_fts._rollup_where
    assert where("(('deploy':AD) & !('db':AD))") == (
        "id IN (SELECT id FROM fts_rollup_words WHERE ad @@ "
        "'((''deploy'') & !(''db''))'::tsquery)")
    for other in ("('a':A)", "(('a':AD) & ('b':ACD))", "('1':B)", "(('1':B) & ('a':ACD))",
                  "('a')"):
        assert where(other).startswith("tsv @@ "), other


def test_a_rungs_newest_episodes_are_read_from_its_terms(stores: tuple[Any, Any]) -> None:
    """Recall's MATCH on a rung, newest first and cut (`level : "N" AND {title body terms vocab
    tags} : (...)`), is read from fts_rollup_terms: the same ids as FTS5's for every operator,
    a phrase of two words, a tag, a word absent, at each ceiling, cut and floor; any other
    filter, or a NOT of the rung itself, is not."""
    lite, pg = stores
    top = ev.fts_top_id(lite, "rollups_fts")
    inner = [*_matches(), '"database" OR "deploy"', '"owner review"', '"quiet" AND "holiday"',
             '("report" OR "zeppelin") NOT ("owner" OR "master")', '"absent" OR "report"']
    taken = 0
    for m in inner:
        for level in (1, 2):
            expr = f'level : "{level}" AND {{title body terms vocab tags}} : ({m})'
            c = pg_fts.compile_match(pg, expr, "rollups_fts")
            taken += pg_fts._newest_on_rung(c, top, 5, 0) is not None
            for ceiling, limit, above in ((top, 100, 0), (top, 2, 0), (top - 2, 3, 1),
                                          (top, 100, 4)):
                want = [i for i in ev.fts_ids(lite, expr, ceiling, -1, "rollups_fts")
                        if i > above][:limit]
                assert pg_fts.ids(pg, c, ceiling, limit, above, "rollups_fts") == want, (
                    expr, ceiling, limit, above)
    assert taken == 2 * (len(inner) - 1)  # all but '""', which matches nothing
    for other in ('level : "1" AND {title body terms tags} : ("database")',
                  'level : "1" NOT {title body terms vocab tags} : ("database")',
                  '{title body terms vocab tags} : ("database")'):
        assert pg_fts._newest_on_rung(pg_fts.compile_match(pg, other, "rollups_fts"),
                                      top, 5, 0) is None, other


def test_only_a_rungs_one_word_match_is_read_from_the_rung_counts() -> None:
    """`_on_level` takes `level : "N" AND {...} : "word"` and nothing else: no empty level
    phrase, no number FTS5 would not read as the level column's (², 01), no OR or NOT."""
    def c(q: str, phrases: tuple[tuple[str, ...], ...], classes: tuple[str, ...]) -> Any:
        return pg_fts.Compiled(q, phrases, classes)

    assert pg_fts._on_level(c("(('1':B) & ('a':ACD))", (("1",), ("a",)), ("B", "ACD"))) == (
        1, ("a",), "ACD")
    for phrases in ((("²",), ("a",)), (("01",), ("a",)), ((), ("a",)), (("1",), ("a", "b"))):
        assert pg_fts._on_level(c("(x & y)", phrases, ("B", "ACD"))) is None, phrases
    assert pg_fts._on_level(c("(('1':B) & !('a':ACD))", (("1",), ("a",)), ("B", "ACD"))) is None
    assert pg_fts._on_level(c("(('1':A) & ('a':ACD))", (("1",), ("a",)), ("A", "ACD"))) is None
