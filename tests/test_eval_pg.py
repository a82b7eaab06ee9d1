"""`coworker eval --store URL` (issue 42 item 3): the eval's homes keep their stores on a
PostgreSQL database, each in a schema of its own that is dropped afterwards, even when the run
fails, and give the figures the SQLite file gives on the same data. Tiny data (the LoCoMo-shaped
conversation of tests/test_eval_locomo.py), real PostgreSQL (tests/pgserver.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from runtime.home import Home
from runtime.lab import evaluate
from runtime.lab.commands import eval_group
from runtime.lab.evaluate import eval_home, run

from .pgserver import pg_url  # noqa: F401  (the fixture)
from .test_eval_locomo import _file


def _schemas(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [str(r[0]) for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'cw\\_%'").fetchall()]


def test_locomo_on_postgres_gives_sqlites_figures_and_drops_its_schema(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    data, kept = _file(tmp_path), evaluate.drop_store
    where: list[str] = []

    def drop(home: Home) -> None:
        where.append(home.store_where())
        kept(home)

    monkeypatch.setattr(evaluate, "drop_store", drop)
    on_pg = run(data, store_url=pg_url).as_dict()
    on_lite = run(data).as_dict()
    assert "(schema cw_eval_" in where[0] and where[1].endswith("coworker.db")
    assert on_pg["overall"] == on_lite["overall"] and on_pg["overall"]["n"]
    assert on_pg["per_category"] == on_lite["per_category"]
    assert _schemas(pg_url) == []


def test_the_eval_home_keeps_the_url_out_of_its_config_and_drops_on_failure(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    with eval_home(tmp_path / "home", pg_url) as home:
        assert home.store_url() == pg_url
        assert pg_url not in home.config_path.read_text(encoding="utf-8")
        with home.open_store() as store:
            pg: Any = store
            assert pg.dialect == "postgres" and pg.schema.startswith("cw_eval_")
        assert _schemas(pg_url) == [pg.schema]
    assert _schemas(pg_url) == []

    def broken(root: Path, *args: Any) -> None:
        with Home(root).open_store():  # the conversation's schema is made, then the run breaks
            assert len(_schemas(pg_url)) == 1
        raise RuntimeError("a conversation that breaks the run")

    monkeypatch.setattr(evaluate, "build_home", broken)
    with pytest.raises(RuntimeError, match="breaks the run"):
        run(_file(tmp_path), store_url=pg_url)
    assert _schemas(pg_url) == []


def test_the_store_option_takes_a_postgres_url_only(tmp_path: Path) -> None:
    got = CliRunner().invoke(eval_group, ["locomo", str(_file(tmp_path)), "--store",
                                          "/srv/coworker.db"])
    assert got.exit_code == 2 and "give a PostgreSQL URL" in got.output
