"""`coworker bench --store URL` (runtime.lab.bench_pg): one run measures both backends, the
PostgreSQL column in a schema of its own (a fresh `bench_<random>` coworker) that is dropped
afterwards, also when the run fails. Small N; the bench's `coworker` subprocesses run in this
process (conftest.coworker), so a run costs seconds, not minutes.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from runtime.lab import bench, bench_pg

from .conftest import coworker
from .pgserver import pg_url  # noqa: F401  (the fixture)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def cli(args: list[str], env: dict[str, str]) -> tuple[str, float]:
        t0 = time.monotonic()
        r = coworker(*args, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"coworker {' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout, time.monotonic() - t0
    monkeypatch.setattr(bench, "_cli", cli)


def _schemas(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'cw\\_%'").fetchall()]


def test_the_bench_measures_both_backends_and_drops_its_schema(
        pg_url: str, in_process: None) -> None:  # noqa: F811
    r = bench_pg.run(100, pg_url, 10)
    lite, pg = r["sqlite"], r["postgres"]
    assert lite["events"] == pg["events"] == lite["archived"] == pg["archived"] == 100
    assert pg["rollups_per_level"] == lite["rollups_per_level"]  # the same ladder
    assert "(schema cw_bench_" in pg["store"]
    for side in (lite, pg):
        assert side["walk_refused_unanswerable"] == side["queries"] // 5 == 2
        for key in ("walk", "search", "recall", "bare_fts5"):
            assert 0 < side[key]["p50_ms"] <= side[key]["p95_ms"], key
    fig = r["compared"]
    assert set(fig) == {name for name, _ in bench_pg.COMPARED}
    for name in ("import_per_s", "recall_p95_ms", "search_p95_ms", "walk_p95_ms"):
        assert fig[name]["postgres_over_sqlite"] == pytest.approx(
            fig[name]["postgres"] / fig[name]["sqlite"], abs=0.01), name
    text = "\n".join(bench_pg.lines(r))
    assert "PostgreSQL" in text and "recall_p95_ms" in text
    assert _schemas(pg_url) == []


def test_a_bench_that_fails_drops_its_schema_too(
        pg_url: str, in_process: None, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    seen: list[str] = []

    def fails(store: Any, n_queries: int) -> dict[str, Any]:
        seen.append(store.schema)
        raise RuntimeError("measuring failed")
    monkeypatch.setattr(bench, "measure_store", fails)
    with pytest.raises(RuntimeError, match="measuring failed"):
        bench_pg.run_postgres(50, pg_url, 5)
    assert seen and seen[0].startswith("cw_bench_")
    assert _schemas(pg_url) == []


# --- the bulk path the import rate depends on (runtime/store/events.py, pg_fts.py) ------------

_TEXTS = ["The report on running the database migration.", "Apology: biology, apologies.",
          "Café au lait with Müller in Zürich — “naïve” questions…", "x86_64 v2.0.1 µs ² Ⅻ",
          "the " * 300, "ΣΊΣΥΦΟΣ σίσυφος ſtraße", "tabs\tand\nnewlines", "", "a " * 1990, "a " * 2010]


def test_the_short_ways_give_the_full_ways_terms(pg_url: str) -> None:  # noqa: F811
    """fts_folded is fts_fold for ASCII and each character of pg_fts._PLAIN; fts_row (the plpgsql
    loop up to SHORT_CHARS, fts_text_vector past it) gives each term the count the full
    fts_vector(fts_tokens(...)) gives; a token past 2,046 bytes is cut, never an error."""
    from runtime.store import pg_fts
    from runtime.store.pg import PgStore

    plain = [chr(c) for c in range(0xA0, 0x2070) if pg_fts.re.fullmatch(
        "[" + pg_fts._PLAIN + "]", chr(c))]
    texts = [*_TEXTS, *(f"Foo{c}Bar {c} x" for c in plain), "z " * 8100 + "logi", "y " * 1999 + "biology",
             "a " + "x" * 3000 + " b"]
    with PgStore.open(pg_url, "alpha") as store:
        folded = store.query("SELECT fts_folded(t) = fts_fold(t) FROM unnest(?::text[]) AS t",
                             (texts,))
        assert all(r[0] for r in folded) and len(plain) > 100
        card = ("(SELECT array_agg(lexeme || ':' || cardinality(positions) ORDER BY lexeme) "
                "FROM unnest({}))")
        rows = store.query(
            f"SELECT t, {card.format('fts_row(t, ?, ?)')} IS NOT DISTINCT FROM "
            f"{card.format('fts_vector(fts_tokens(t || ? || ?))')} FROM unnest(?::text[]) AS t",
            ("note", "owner", " note ", "owner", texts))
        assert [r[0][:20] for r in rows if not r[1]] == []
        long = store.scalar("SELECT max(length(x)) FROM unnest(tsvector_to_array("
                            "fts_row(?, 'note', 'owner'))) AS x", ("a " + "x" * 3000 + " b",))
        assert long == pg_fts.MAX_LEXEME_BYTES // 4


def test_a_bulk_append_is_copied_with_consecutive_ids_and_found_alike(
        pg_url: str, tmp_path: Any) -> None:  # noqa: F811
    from runtime.store import events as ev
    from runtime.store.db import Store
    from runtime.store.pg import PgStore

    rows = [ev.event_row(f"2026-12-05T10:{i % 60:02d}:00.000Z", "note", "owner", "user",
                         _TEXTS[i % len(_TEXTS)] + f" n{i}", {"i": i}) for i in range(300)]
    rows.append(ev.event_row("2026-12-05T11:00:00.000Z", "note", "owner", "user",
                             "a blob " + "Q" * 5000, {}))
    lite: Any = Store.open(tmp_path / "coworker.db")
    pg: Any = PgStore.open(pg_url, "alpha")
    with pg, lite:
        for s in (lite, pg):
            ev.append(s, ev.Event(kind="note", body="before"))
        spans = [ev.insert_rows(s, rows) for s in (lite, pg)]
        assert spans[0] == spans[1] == (2, 302)
        assert [e.body for e in ev.span(pg, 2, 302)] == [r[4] for r in rows]
        for words in (["report"], ["apology"], ["naive", "zurich"], ["n17"], ["blob"], ["the"]):
            m = ev.fts_query(words) or ""
            assert ev.bare_match(pg, m, 10) == ev.bare_match(lite, m, 10), words
        assert ev.doc_freqs(pg, ["report", "n17", "the", "blob"]) == ev.doc_freqs(
            lite, ["report", "n17", "the", "blob"])
