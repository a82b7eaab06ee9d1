"""An event's full-text terms made by the client (runtime/store/pg_terms.py) are the server's.

A bulk append by COPY on PostgreSQL gives each row's `tsv` and `ntok` where pg_terms can make
them, and the events tables' trigger `fts_fill` makes them on the server otherwise. Both must
be what `fts_row` and `fts_count` give the same texts, or search would rank an imported event
unlike one the loop wrote. Checked on generated ASCII texts (hypothesis, fixed seed in CI),
on real words (this repository's docs), and end to end: COPY, the archive move, a redaction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.store import archive, pg_fts, pg_terms, redactions
from runtime.store import events as ev
from runtime.store.events import Event

from .pgserver import pg_url  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent
_SAME = ("SELECT count(*) FROM {t} WHERE tsv::text <> fts_row(body, kind, actor)::text "
         "OR ntok <> fts_count(body || ' ' || kind || ' ' || actor)")


@pytest.fixture
def pg(pg_url: str) -> Iterator[Any]:  # noqa: F811
    from runtime.store.pg import PgStore

    store = PgStore.open(pg_url, "terms")
    try:
        yield store
    finally:
        store.close()


def _server(store: Any, texts: list[tuple[str, str, str]]) -> list[tuple[str, int]]:
    rows = store.query("SELECT fts_row(b, k, a)::text, fts_count(b || ' ' || k || ' ' || a) "
                       "FROM unnest(?::text[], ?::text[], ?::text[]) WITH ORDINALITY "
                       "AS t(b, k, a, n) ORDER BY n",
                       ([t[0] for t in texts], [t[1] for t in texts], [t[2] for t in texts]))
    return [(r[0], int(r[1])) for r in rows]


def _client(store: Any, texts: list[tuple[str, str, str]]) -> list[tuple[str, int] | None]:
    """pg_terms' answer for each text, its vector read by the server's tsvector input."""
    made = [pg_terms.row_terms(*t) for t in texts]
    given_ = [m[0] for m in made if m]
    parsed = iter(r[0] for r in store.query(
        "SELECT v::tsvector::text FROM unnest(?::text[]) WITH ORDINALITY AS x(v, n) ORDER BY n",
        (given_,)))
    return [None if m is None else (next(parsed), m[1]) for m in made]


def _check(store: Any, texts: list[tuple[str, str, str]]) -> int:
    """How many texts pg_terms answered; every answer must be the server's."""
    answered = 0
    for text, mine, theirs in zip(texts, _client(store, texts), _server(store, texts),
                                  strict=True):
        if mine is not None:
            answered += 1
            assert mine == theirs, text
    return answered


_ASCII = st.text(st.characters(min_codepoint=1, max_codepoint=127), max_size=300)
_WORDS = st.lists(st.sampled_from(["report", "reports", "ing", "apologi", "biology", "us", "is",
                                   "zeppelin", "x86", "64", "a", "the", "analogies", "abc",
                                   "logi", "ecologi", "yes", "sky", "ya" * 40, "e-mail",
                                   "connection", "Database", "RUNNING", "2026-12-05"]),
                  max_size=60).map(" ".join)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])  # read only
@given(st.lists(st.tuples(_ASCII | _WORDS, st.sampled_from(["message", "note", "tool_use"]),
                          st.sampled_from(["owner", "coworker", "Ana-Lu"])), min_size=1,
                max_size=20))
def test_generated_texts_get_the_servers_terms(pg: Any, texts: list[tuple[str, str, str]]) -> None:
    assert _check(pg, texts) == len(texts)  # every ASCII text short enough is answered


def test_real_words_get_the_servers_terms(pg: Any) -> None:
    words = sorted({w for f in [*ROOT.glob("docs/*.md"), ROOT / "README.md"]
                    for w in re.findall(r"[A-Za-z0-9]+", f.read_text(encoding="utf-8"))})
    assert len(words) > 3000
    texts = [(" ".join(words[i:i + 50]), "message", "owner") for i in range(0, len(words), 50)]
    assert _check(pg, texts) == len(texts)


def test_the_server_makes_what_the_client_cannot(pg: Any) -> None:
    long_token = "q" * (pg_fts.MAX_LEXEME_BYTES + 1)
    texts = [("Café in Zürich", "message", "owner"), ("x " * pg_fts.SHORT_CHARS, "note", "o"),
             (f"a {long_token} b", "message", "owner"), ("plain words", "message", "Ĳssel")]
    assert [pg_terms.row_terms(*t) for t in texts] == [None] * 4
    assert _check(pg, texts) == 0


def test_copy_archive_and_redaction_keep_the_servers_terms(pg: Any) -> None:
    bodies = ["The reports were running late", "Café au lait, naïve", "x " * 2500,
              "ecological analogies " * 3, "", "e-mail a.b@example.com at 11:00"]
    events = [Event(ts=f"2026-01-0{1 + i % 5}T10:00:00Z", kind="message", actor=a, body=b)
              for i, (b, a) in enumerate((b, a) for b in bodies for a in ("owner", "Zoë"))]
    span = ev.insert_rows(pg, [e.to_row() for e in events])
    assert span is not None and span[1] - span[0] + 1 == len(events)
    assert pg.scalar(_SAME.format(t="events")) == 0
    moved = archive.move_older_than(pg, "2026-01-04T00:00:00Z")
    assert moved > 0
    assert pg.scalar(_SAME.format(t="events_archive")) == 0
    assert pg.scalar(_SAME.format(t="events")) == 0
    # a row given terms that are not its own is written with them (the INSERT trusts the
    # client: pg_terms is held to the server above), and a redaction makes them again
    with pg.transaction() as db:
        db.execute("INSERT INTO events(ts, kind, actor, author_kind, body, meta, tsv, ntok) "
                   "VALUES ('2026-02-02T00:00:00Z', 'message', 'owner', 'user', 'zeppelin', "
                   "'{}', 'wrong:1', 1)")
    assert pg.scalar(_SAME.format(t="events")) == 1
    bad = int(pg.scalar("SELECT max(id) FROM events"))
    redactions.overwrite_event(pg, redactions.event_text(pg, bad), "test", "owner")
    assert pg.scalar(_SAME.format(t="events")) == 0
    assert "wrong" not in pg.scalar("SELECT tsv::text FROM events WHERE id = ?", (bad,))
