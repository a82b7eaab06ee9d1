"""The events' full text on both backends: the same corpus gives the same rows, in the same
order, with the same bm25 and the same snippets, on SQLite (FTS5) and PostgreSQL (pg_fts).

One SQLite store and one PostgreSQL store are filled with the same events (stems, case,
diacritics, punctuation, a phrase, a rare and a common word, lengths that move bm25, a
bookkeeping kind, an archived event); each full-text function of runtime/store/events.py is
asked the same questions of both and must answer alike.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.store import archive, pg_fts
from runtime.store import events as ev
from runtime.store.db import Store
from runtime.store.events import Event

from .pgserver import pg_url  # noqa: F401  (the fixture)

_BODIES = [
    "The report on running the database migration.",
    "Running late: the DATABASE was locked again; the runner runs once more.",
    "He runs the report every Monday, the database report.",
    "Café au lait with Müller in Zürich: naïve questions about the résumé.",
    "cafe MULLER zurich naive resume, without any accents at all",
    "A zeppelin over the harbour.",
    "foo-bar and foo_bar and foobar: e-mail a.b@example.com, see http://example.com/path_to.",
    "x86_64 builds on 3.14 and v2.0.1; 2026-12-05T11:00Z is the date.",
    "Machine learning is not learning machines. Machine learning models learn.",
    "learning the machine by heart, then the report",
    "The report. The report. The report. The report. The report.",
    "report",
    "Is it us or them? It is us, as it was.",
    "Apology accepted: the apologies were sincere and the apologetic tone helped.",
    "Connection refused by the server; connected again, connections pooled.",
    "Straße, Łódź, Ørsted, Æsir, œuvre: letters with no plain form.",
    "Ελληνικά κείμενα και русский текст тоже",
    "UPPER lower MiXeD case Words; 5 µs, v², ٣ and Ⅻ; ΣΊΣΥΦΟΣ σίσυφος; ſtraße; biology",
    "quoted \"phrase\" and 'single' quotes, (parentheses) [brackets] {braces}",
    "tabs\tand\nnewlines\r\nbetween words",
    "numbers 12 345 6789 and 1e5 and 0x1F",
    "the the the the the the the the the the the the the the the the the the the the",
    ("First sentence about nothing in particular. Second sentence mentions the zeppelin "
     "briefly. Third sentence is long and wanders about harbours, ships, sails, ropes, anchors, "
     "tides, gulls, fishermen, nets and the smell of salt before it ends. Fourth: database."),
    " ".join(f"word{i}" for i in range(60)) + " database " + " ".join(f"tail{i}" for i in
                                                                      range(60)),
    "migrations migrated migrating migrate migration",
    "The harbour master reports a zeppelin sighting.",
    "Reporting reports reported: the reporter's report.",
    "nothing relevant here at all",
    "decisions decided decisively; the decision stands",
    "searching searched searches; search engines",
]
_KINDS = ["note", "message", "tool_result", "tick"]

# the questions: fts_query words, and expressions as memory.search writes them
_WORDS = [["running"], ["runs"], ["database"], ["café"], ["muller"], ["zurich", "resume"],
          ["zeppelin"], ["report"], ["machine", "learning"], ["foo"], ["example"], ["com"],
          ["x86"], ["the"], ["migration"], ["apology"], ["connection"], ["straße"], ["łódź"],
          ["русский"], ["mixed"], ["decision"], ["search"], ["harbour", "zeppelin"],
          ["nothing"], ["word7", "tail59"], ["absent"], ["is", "us"], ["µs"], ["v²"],
          ["σίσυφος"], ["biology"]]
_EXPRS = ['("report") NOT ("database")', '("running" OR "runs") AND ("database")',
          '("machine") AND ("learning")', '"zeppelin" "harbour"', '("the") NOT ("report")',
          '""', '("database" OR "report") AND ("zeppelin" OR "harbour")', '"x86_64"',
          '"x86_64" OR "database"']


_SKIP = tuple(sorted(ev.BOOKKEEPING_KINDS))


def _corpus() -> list[Event]:
    return [Event(kind=_KINDS[i % len(_KINDS)], body=b, actor="owner" if i % 3 else "system",
                  ts=f"2026-12-0{1 + i % 5}T10:{i:02d}:00.000Z") for i, b in enumerate(_BODIES)]


@pytest.fixture
def stores(tmp_path: Path, pg_url: str) -> Iterator[tuple[Any, Any]]:  # noqa: F811
    from runtime.store.pg import PgStore

    lite: Any = Store.open(tmp_path / "state" / "coworker.db")
    pg: Any = PgStore.open(pg_url, "alpha")
    for s in (lite, pg):
        ev.append_many(s, _corpus())
        # the events of the first day archived (ids kept, still searched)
        archive.move_older_than(s, "2026-12-02T00:00:00.000Z")
        ev.append(s, Event(kind="note", body="a late database note after the archive move"))
    yield lite, pg
    lite.close()
    pg.close()


def _matches() -> list[str]:
    return [m for m in (ev.fts_query(w) for w in _WORDS) if m] + _EXPRS


def _same_scores(a: list[tuple[int, float]], b: list[tuple[int, float]], what: str) -> None:
    assert [i for i, _ in a] == [i for i, _ in b], what
    for (i, x), (_, y) in zip(a, b, strict=True):
        assert y == pytest.approx(x, rel=1e-9, abs=1e-12), f"{what}: row {i}"


def test_the_archive_move_left_both_stores_alike(stores: tuple[Any, Any]) -> None:
    lite, pg = stores
    assert ev.counts(lite) == ev.counts(pg)
    assert ev.counts(pg)["archived"] > 0
    # bm25's totals, kept by triggers through appends and the move, are the rows' own
    assert tuple(pg.query("SELECT doc, toks FROM fts_stats WHERE term = ''")[0]) == tuple(pg.query(
        "SELECT count(*), sum(ntok) FROM (SELECT ntok FROM events UNION ALL "
        "SELECT ntok FROM events_archive) AS r")[0])
    assert dict(pg.query("SELECT term, doc FROM fts_stats WHERE doc > 0 AND term <> ''")) == dict(pg.query(
        "SELECT t, count(*) FROM history JOIN (SELECT id, tsv FROM events UNION ALL SELECT id, "
        "tsv FROM events_archive) AS r USING (id), unnest(tsvector_to_array(r.tsv)) AS t "
        "GROUP BY t"))


def test_bare_match_and_fts_search_rank_alike(stores: tuple[Any, Any]) -> None:
    lite, pg = stores
    for m in _matches():
        assert ev.bare_match(lite, m, 10) == ev.bare_match(pg, m, 10), m
        a = ev.fts_search(lite, m, 10, _SKIP)
        b = ev.fts_search(pg, m, 10, _SKIP)
        _same_scores([(e.id or 0, s) for e, s, _ in a], [(e.id or 0, s) for e, s, _ in b], m)
        assert [x for _, _, x in a] == [x for _, _, x in b], m  # the snippets
        assert [e.source for e, _, _ in a] == [e.source for e, _, _ in b], m


def test_bounded_scans_agree(stores: tuple[Any, Any]) -> None:
    lite, pg = stores
    top = ev.fts_top_id(lite)
    assert ev.fts_top_id(pg) == top
    for m in _matches():
        for ceiling, limit, before in ((top, -1, None), (top - 5, 3, None), (top, -1, 20)):
            _same_scores(ev.fts_scored(lite, m, ceiling, limit, before),
                         ev.fts_scored(pg, m, ceiling, limit, before), m)
            assert ev.fts_ids(lite, m, ceiling, limit) == ev.fts_ids(pg, m, ceiling, limit), m
        # (a word of its own under the top: pg_fts' kept count; under a lower ceiling: GIN)
        for cap, ceiling in itertools.product((1, 3, 1000, -1), (top, top - 5)):
            assert (ev.fts_count_upto(lite, m, ceiling, cap)
                    == ev.fts_count_upto(pg, m, ceiling, cap)), (m, cap, ceiling)
        for after in (0, 10, top):
            assert ([e.id for e in ev.fts_after(lite, m, after, 5)]
                    == [e.id for e in ev.fts_after(pg, m, after, 5)]), m


def test_a_phrase_of_several_words_is_all_of_them_not_their_order(
        stores: tuple[Any, Any]) -> None:
    """The known difference: pg_fts keeps counts, not places, so a phrase of several tokens
    matches a row holding each of them anywhere (FTS5: side by side, in order). This project's
    own MATCH strings quote one word a phrase (fts_query), where the two agree."""
    lite, pg = stores
    lite_ids = set(ev.fts_ids(lite, '"machine learning"', ev.fts_top_id(lite)))
    pg_ids = set(ev.fts_ids(pg, '"machine learning"', ev.fts_top_id(pg)))
    assert lite_ids < pg_ids
    assert {e.body[:20] for e in ev.history_of(pg, sorted(pg_ids - lite_ids)).values()} == {
        "learning the machine"}


def test_snippets_are_fts5s(stores: tuple[Any, Any]) -> None:
    lite, pg = stores
    every = list(range(1, ev.fts_top_id(lite) + 1))
    for m in _matches():
        assert ev.fts_snippets(lite, m, every) == ev.fts_snippets(pg, m, every), m


def test_document_frequencies_agree(stores: tuple[Any, Any]) -> None:
    lite, pg = stores
    stems = ["run", "databas", "cafe", "muller", "report", "the", "zeppelin", "foo", "com",
             "x86", "64", "is", "us", "straße", "łodz", "русский", "absent", "learn", "machin"]
    assert ev.doc_freqs(lite, stems) == ev.doc_freqs(pg, stems)
    assert ev.doc_freqs(pg, []) == {}


def test_the_tokens_are_fts5s(stores: tuple[Any, Any]) -> None:
    """Each event's terms on PostgreSQL are those FTS5's tokenizer gives (fts.Tokenizer)."""
    from runtime.store.fts import Tokenizer

    lite, pg = stores
    texts = {int(r[0]): f"{r[1]} {r[2]} {r[3]}" for r in lite.query(
        "SELECT id, body, kind, actor FROM history")}
    want = {i: sorted(t) for i, t in Tokenizer().terms(texts).items()}
    got = {int(r[0]): sorted(r[1]) for r in pg.query("SELECT id, fts_tokens(body || ' ' || kind "
                                                     "|| ' ' || actor) FROM history")}
    assert got == want


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_event_with_a_nul_character_is_stored_and_found(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest,
        caplog: pytest.LogCaptureFixture) -> None:
    """PostgreSQL's text holds no NUL: there each one is U+FFFD (an append, a batch, a row as
    the importer writes it); SQLite keeps it, as tests/test_import_bulk.py holds."""
    if backend == "sqlite":
        store: Any = Store.open(tmp_path / "coworker.db")
        nul = "\x00"
    else:
        from runtime.store.pg import PgStore

        store = PgStore.open(request.getfixturevalue("pg_url"), "alpha")
        nul = "\ufffd"
    with store, caplog.at_level(logging.WARNING):
        i = ev.append(store, Event(kind="note", body="a\x00b", actor="x\x00", meta={"k": "\x00"}))
        j = ev.append_many(store, [Event(kind="note", body="c\x00b")])[0]
        span = ev.insert_rows(store, [("2026-12-05T00:00:00.000Z", "note", "y", "user", "d\x00b",
                                       '{"k": "\\\\u0000 \\u0000"}', None)])
        assert span is not None
        got = [ev.get(store, n) for n in (i, j, span[0])]
        assert [(e.body, e.actor) for e in got if e] == [
            (f"a{nul}b", f"x{nul}"), (f"c{nul}b", "system"), (f"d{nul}b", "y")]
        assert [e.meta for e in got if e] == [{"k": nul}, {}, {"k": f"\\u0000 {nul}"}]
        assert {e.id for e, _, _ in ev.fts_search(store, ev.fts_query(["b"]) or "", 5)} == {
            i, j, span[0]}
    assert ("NUL" in caplog.text) == (backend == "postgres")


def test_match_strings_read_as_fts5_reads_them() -> None:
    q = pg_fts.parse('("a" OR b) AND "c ""d""" NOT e f')
    assert q.phrases == ("a", "b", 'c "d"', "e", "f")
    assert q.tree == ("and", ("and", ("or", ("p", 0), ("p", 1)), ("not", ("p", 2), ("p", 3))),
                      ("p", 4))
    assert pg_fts.tsquery(q.tree, [["a"], [], ["c", "d"], ["e"], ["f"]]) == (
        "((('a') & (('c' & 'd') & !('e'))) & ('f'))")
    for bad in ('title : "x"', '"x" *', 'NEAR("a" "b")', '("a"', '"a" OR'):
        with pytest.raises(ValueError):
            pg_fts.parse(bad)


def test_a_server_without_pg_c_utf8_is_refused_in_one_line() -> None:
    """PostgreSQL 16 has no pg_c_utf8: the full text's DDL says what it needs, writes nothing."""
    from runtime.errors import StoreError

    class Conn:
        sql: list[str] = []

        def execute(self, sql: Any) -> Any:
            self.sql.append(sql)
            return self

        def fetchone(self) -> tuple[str, bool]:
            return "cw_alpha", False

    conn = Conn()
    with pytest.raises(StoreError, match="PostgreSQL 17 or newer"):
        pg_fts.create(conn)
    assert len(conn.sql) == 1


def test_an_events_tags_are_its_fourth_column(stores: tuple[Any, Any]) -> None:
    """FTS5 indexes an event's tags beside its body, kind and actor (tags.add re-indexes it);
    pg_fts reads a tagged event as its row || its tags (fts_event_tags): the same matches,
    bm25 (row lengths and document frequencies with the tags' words), snippets and counts."""
    from runtime.store import tags

    lite, pg = stores
    for s in (lite, pg):
        tags.add(s, "event", 3, ["zeppelin", "quartermaster"])
        tags.add(s, "event", 6, ["database", "runbook"])  # an archived event
        tags.add(s, "event", 6, ["postmortem"])
        tags.add(s, "event", 12, ["report"])  # a word its body holds already
    for m in _matches() + ['"quartermaster"', '"runbook" OR "postmortem"',
                           '("zeppelin") AND ("report")']:
        a, b = ev.fts_search(lite, m, 10, _SKIP), ev.fts_search(pg, m, 10, _SKIP)
        _same_scores([(e.id or 0, s) for e, s, _ in a], [(e.id or 0, s) for e, s, _ in b], m)
        assert [x for _, _, x in a] == [x for _, _, x in b], m
        top = ev.fts_top_id(lite)
        assert ev.fts_count_upto(lite, m, top, 100) == ev.fts_count_upto(pg, m, top, 100), m
    stems = ["quartermast", "runbook", "postmortem", "databas", "zeppelin", "report"]
    assert ev.doc_freqs(lite, stems) == ev.doc_freqs(pg, stems)
    assert tuple(pg.query("SELECT toks FROM fts_stats WHERE term = ''")[0]) == tuple(pg.query(
        "SELECT (SELECT sum(ntok) FROM events) + (SELECT sum(ntok) FROM events_archive) "
        "+ (SELECT sum(ntok) FROM fts_event_tags)")[0])


def test_a_phrases_tokens_are_asked_of_the_server_once(stores: tuple[Any, Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """compile_match keeps each phrase's tokens (fts_tokens is IMMUTABLE): a search asks the
    same phrases many times, a round trip each; the tokens are the same as asked afresh."""

    _, pg = stores
    monkeypatch.setattr(pg_fts, "_TOKENS", {})
    first = pg_fts.compile_match(pg, '"Databases" OR "running" OR "databases"')
    asked: list[str] = []
    query = pg.query

    def counted(sql: str, *args: Any) -> Any:
        asked.append(sql)
        return query(sql, *args)
    monkeypatch.setattr(pg, "query", counted)
    again = pg_fts.compile_match(pg, '"running" AND "Databases"')
    assert asked == []
    assert again.phrases == (first.phrases[1], first.phrases[0]) == (("run",), ("databas",))
    pg_fts.compile_match(pg, '"running" OR "learning"')
    assert len(asked) == 1
