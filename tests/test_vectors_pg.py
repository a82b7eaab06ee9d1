"""The semantic channel's vectors on PostgreSQL (issue 42 item 3): pgvector's column holds
exactly the stored bytes, its exact scan finds the same neighbours as SQLite's brute force for
the same vectors, and without the extension one WARNING says what to run while recall goes on
lexical. Real PostgreSQL (tests/pgserver.py); the missing extension is a database where it is
absent and the role opening it may not create it (a role that is no superuser)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from runtime.memory.embed import Matrix
from runtime.memory.recall import recall
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import vectors as vs
from runtime.store.pg import PgStore

from .pgserver import pg_url  # noqa: F401  (the fixture)

DIM = 24


def _open(url: str, **kw: Any) -> Any:
    """A PgStore as the store modules take it (their signatures name db.Store)."""
    return PgStore.open(url, "alpha", **kw)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _fill(store: Any, rows: np.ndarray, model: str = "m") -> list[int]:
    ids = ev.append_many(store, [Event(kind="message", body=f"note {i} about the parser",
                                       actor="dana", author_kind="user")
                                 for i in range(len(rows))])
    vs.write(store, model, [(i, DIM, v.tobytes(), "h") for i, v in zip(ids, rows, strict=True)])
    return ids


@pytest.fixture
def both(tmp_path: Path, pg_url: str) -> Iterator[tuple[Any, Any]]:  # noqa: F811
    with Store.open(tmp_path / "coworker.db") as lite, _open(pg_url) as pg:
        yield lite, pg


def test_pgvector_finds_the_same_neighbours_as_sqlite(both: tuple[Any, Any]) -> None:
    lite, pg = both
    rng = np.random.default_rng(7)
    rows = _unit(rng, 250)
    ids = _fill(lite, rows)
    assert _fill(pg, rows) == ids
    assert vs.unavailable(pg) is None and vs.unavailable(lite) is None
    queries = np.vstack([rows[[3, 150, 249]], _unit(rng, 5)])
    for q in queries:
        for k, after, before, floor in ((10, 0, None, None), (5, ids[100], None, 0.1),
                                        (7, 0, ids[200], None), (250, ids[10], ids[240], -1.0)):
            on_pg = vs.nearest(pg, "m", q, k, after_id=after, before_id=before, min_sim=floor)
            on_lite = vs.nearest(lite, "m", q, k, after_id=after, before_id=before,
                                 min_sim=floor)
            assert [i for i, _ in on_pg] == [i for i, _ in on_lite]
            assert np.allclose([s for _, s in on_pg], [s for _, s in on_lite], atol=1e-5)
            assert on_pg and len(on_pg) <= k
    # the memory's matrix reads the same rows on both (the semantic channel knows no backend)
    a, b = Matrix.load(lite, "m"), Matrix.load(pg, "m")
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.rows, b.rows)
    assert a.nearest(queries[0], 10) == b.nearest(queries[0], 10)


def test_the_pgvector_column_is_the_bytes_exactly_and_never_a_damaged_row(
        pg_url: str) -> None:  # noqa: F811
    with _open(pg_url) as pg:
        assert vs.unavailable(pg) is None  # the first writer to ask makes pgvector's column
        odd = np.array([1e-40, -0.0, 3.4e38, -2.5, 1.0, 0.1] + [0.0] * (DIM - 6), np.float32)
        ids = ev.append_many(pg, [Event(kind="message", body=f"n{i}", actor="dana",
                                        author_kind="user") for i in range(4)])
        nan = odd.copy()
        nan[1] = np.nan
        vs.write(pg, "m", [(ids[0], DIM, odd.tobytes(), "h"), (ids[1], DIM, nan.tobytes(), "h"),
                           (ids[2], DIM, odd.tobytes()[:-4], "h"), (ids[3], 0, b"", "h")])
        got = pg.query("SELECT item_id, embedding IS NULL, public.vector_send(embedding) "
                       "FROM vectors ORDER BY item_id")
        assert [bool(r[1]) for r in got] == [False, True, True, True]
        back = np.frombuffer(bytes(got[0][2])[4:], dtype=">f4").astype("<f4")
        assert back.tobytes() == odd.tobytes()  # bit for bit, subnormal and -0.0 included
        assert [i for i, _ in vs.nearest(pg, "m", odd, 5)] == [ids[0]]


def _plain_role(url: str) -> str:
    """The URL as a role that is no superuser (it may use the database, not add extensions)."""
    with psycopg.connect(url, autocommit=True) as admin:
        db = admin.info.dbname
        admin.execute("DROP ROLE IF EXISTS plain_cw")
        admin.execute("CREATE ROLE plain_cw LOGIN")
        admin.execute(f'GRANT CREATE ON DATABASE "{db}" TO plain_cw')
    return url.replace("postgresql://postgres:@", "postgresql://plain_cw@", 1)


def test_without_pgvector_one_warning_and_recall_goes_on_lexical(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    plain = _plain_role(pg_url)
    try:
        with caplog.at_level(logging.WARNING), _open(plain) as pg:
            ids = _fill(pg, _unit(np.random.default_rng(1), 3))
            why = vs.unavailable(pg)
            assert why is not None and "needs the pgvector extension" in why
            assert "CREATE EXTENSION vector" in why and "lexical recall only" in why
            assert "\n" not in why and "plain_cw@" in why and ":@" not in why
            assert vs.all_for(pg, "m") == [] and vs.missing_events(pg, "m", ["tick"]) == []
            assert vs.nearest(pg, "m", np.ones(DIM, np.float32), 3) == []
            assert len(Matrix.load(pg, "m").ids) == 0
            assert [h.event.id for h in recall(pg, "the parser note", k=3).hits]  # lexical
            assert vs.count(pg, "m") == 3 and ids  # the bytes are kept for a later pgvector
        said = [r for r in caplog.records if "needs the pgvector extension" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.WARNING
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("DROP SCHEMA IF EXISTS cw_alpha CASCADE")
            admin.execute("DROP OWNED BY plain_cw")
            admin.execute("DROP ROLE plain_cw")


def test_a_writer_gives_the_vectors_pgvector_once_the_extension_arrives(
        pg_url: str) -> None:  # noqa: F811
    plain = _plain_role(pg_url)
    rows = _unit(np.random.default_rng(2), 20)
    try:
        with _open(plain) as pg:
            ids = _fill(pg, rows)
            assert vs.unavailable(pg) is not None
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        with _open(plain, readonly=True) as reader:
            assert "no pgvector column yet" in (vs.unavailable(reader) or "")
        with _open(plain) as pg:
            assert vs.unavailable(pg) is None
            assert vs.nearest(pg, "m", rows[4], 1) == [(ids[4], pytest.approx(1.0, abs=1e-5))]
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("DROP SCHEMA IF EXISTS cw_alpha CASCADE")
            admin.execute("DROP OWNED BY plain_cw")
            admin.execute("DROP ROLE plain_cw")
