"""`[store] url`: the one setting that puts a home's history on PostgreSQL (issue 42 item 1).

A home whose config names a database keeps everything there (its SQLite file is not used), the
commands above the store run unchanged, a password never sits in config.toml nor in an error
line, "secret:NAME" is resolved, and a home without a [coworker] id or without psycopg is one
line saying what to do. Real PostgreSQL (tests/pgserver.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import UsageError
from runtime.home import Home
from runtime.store import Store, inputs
from runtime.store import events as ev
from runtime.store.pg import PgStore

from .conftest import coworker
from .pgserver import pg_url  # noqa: F401  (the fixture)


def on_postgres(root: Path, url: str, secrets: str = "") -> Home:
    """A home made by `coworker init`, then given `[store] url` (and state/secrets.toml)."""
    assert coworker("init").returncode == 0
    home = Home.locate(root)
    text = home.config_path.read_text(encoding="utf-8")
    home.config_path.write_text(text.replace('# url = ""', f'url = "{url}"', 1)
                                if "[store]" in text else text, encoding="utf-8")
    assert f'url = "{url}"' in home.config_path.read_text(encoding="utf-8")
    if secrets:
        with (home.state / "secrets.toml").open("a", encoding="utf-8") as f:
            f.write(secrets)
    return home


def reader(url: str, home: Home) -> Any:
    """The home's coworker schema opened straight from the database (the store's surface)."""
    return PgStore.open(url, coworker_id(home), readonly=True)


def coworker_id(home: Home) -> str:
    cid = home.settings().coworker.id
    assert cid
    return cid


def test_a_home_with_a_store_url_keeps_its_history_in_postgres(
        isolated_home: Path, pg_url: str) -> None:  # noqa: F811
    home = on_postgres(isolated_home, pg_url)
    before = home.db_path.stat().st_mtime_ns if home.db_path.exists() else None
    told = coworker("tell", "Dana owns the parser fix; the nightly build failed at 03:12")
    assert told.returncode == 0, told.stderr
    with reader(pg_url, home) as pg:
        assert [e.body for e in ev.tail(pg, 5)] == [
            "Dana owns the parser fix; the nightly build failed at 03:12"]
        assert inputs.pending_count(pg) == 1
    found = coworker("search", "parser")
    assert found.returncode == 0 and "Dana owns the parser fix" in found.stdout, found
    assert "message 1" in coworker("status").stdout
    if before is not None:  # init's empty SQLite file is left as it was
        assert home.db_path.stat().st_mtime_ns == before
        with Store.open(home.db_path, readonly=True) as sqlite:
            assert ev.max_id(sqlite) == 0
    assert home.store_where().endswith(f"(schema cw_{coworker_id(home)})")


def test_two_homes_on_one_database_each_keep_their_own_history(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    homes = []
    for name in ("alpha", "beta"):
        root = tmp_path / name
        root.mkdir()
        monkeypatch.setenv("COWORKER_HOME", str(root))
        homes.append(on_postgres(root, pg_url))
        assert coworker("tell", f"only {name} was told this").returncode == 0
    for home, name in zip(homes, ("alpha", "beta"), strict=True):
        with home.open_store(readonly=True) as store:
            assert [e.body for e in ev.tail(store, 5)] == [f"only {name} was told this"]


def test_the_password_never_sits_in_config_nor_in_an_error(
        isolated_home: Path, pg_url: str) -> None:  # noqa: F811
    home = on_postgres(isolated_home, "postgresql://team:hunter2-the-password@db.internal/team")
    result = coworker("tell", "hello")
    assert result.returncode != 0
    assert "hunter2" not in result.stdout + result.stderr
    assert "holds a password" in result.stderr and "secret:NAME" in result.stderr
    assert "Traceback" not in result.stderr
    with pytest.raises(Exception, match="holds a password"):
        home.settings()


def test_a_secret_names_the_url_and_an_unreachable_one_is_one_line_without_it(
        isolated_home: Path, pg_url: str) -> None:  # noqa: F811
    home = on_postgres(isolated_home, "secret:TEAM_DB", secrets=f'\n[secrets]\nTEAM_DB = "{pg_url}"\n')
    assert coworker("tell", "through a secret").returncode == 0
    with reader(pg_url, home) as pg:
        assert [e.body for e in ev.tail(pg, 1)] == ["through a secret"]
    secrets = home.state / "secrets.toml"
    secrets.write_text(secrets.read_text(encoding="utf-8").replace(
        pg_url, "postgresql://team:s3cret-word@127.0.0.1:1/none"), encoding="utf-8")
    result = coworker("tell", "nowhere to go")
    assert result.returncode != 0
    assert "cannot reach PostgreSQL" in result.stderr and "s3cret-word" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_store_url_needs_an_id_and_psycopg(
        isolated_home: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    home = on_postgres(isolated_home, pg_url)
    text = home.config_path.read_text(encoding="utf-8")
    home.config_path.write_text(text.replace(f'id = "{coworker_id(home)}"', "", 1),
                                encoding="utf-8")
    result = coworker("tell", "who am I")
    assert result.returncode != 0 and "no [coworker] id" in result.stderr, result
    home.config_path.write_text(text, encoding="utf-8")
    import runtime.store

    monkeypatch.setitem(sys.modules, "runtime.store.pg", None)  # as when psycopg is absent
    monkeypatch.delattr(runtime.store, "pg", raising=False)
    with pytest.raises(UsageError, match=r"pip install 'coworker\[postgres\]'"):
        Home.locate(isolated_home).open_store()


def test_a_broken_config_without_a_store_url_is_still_a_sqlite_home(bare_home: Home) -> None:
    bare_home.config_path.write_text("[coworker\nname = ", encoding="utf-8")
    assert bare_home.store_url() is None
    with bare_home.open_store() as store:
        assert store.dialect == "sqlite"
    for named in ('[model]\nmax_tokens = "many"\n[store]\n# its password is in [secrets]\n'
                  'url = "postgresql://x@y/z"\n',  # a [ in a comment before url
                  'store.url = "postgresql://x@y/z"\n[model]\nmax_tokens = "many"\n',
                  'store = { url = "postgresql://x@y/z" }\n[model]\nmax_tokens = "many"\n'):
        bare_home.config_path.write_text(named, encoding="utf-8")
        with pytest.raises(Exception, match="config.toml"):  # never a new SQLite file instead
            Home.locate(bare_home.root).store_url()


def test_init_with_a_store_and_an_id_makes_a_second_host_of_one_coworker(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    for name in ("host_a", "host_b"):
        root = tmp_path / name
        monkeypatch.setenv("COWORKER_HOME", str(root))
        made = coworker("init", "--store", pg_url, "--id", "team_bot")
        assert made.returncode == 0, made.stderr
        assert not (root / "state" / "coworker.db").exists()  # the history is the database's
    assert coworker("tell", "told on host b").returncode == 0
    monkeypatch.setenv("COWORKER_HOME", str(tmp_path / "host_a"))
    assert "told on host b" in coworker("search", "host").stdout


def test_init_refuses_a_password_or_a_bad_id_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "new"
    monkeypatch.setenv("COWORKER_HOME", str(root))
    for args, said in ((("--store", "postgresql://u:pa55word@db/team"), "holds a password"),
                       (("--store", "mysql://db/team"), "PostgreSQL URL"),
                       (("--id", "Not An Id"), "--id: ")):
        result = coworker("init", *args)
        assert result.returncode == 2 and said in result.stderr, result
        assert "pa55word" not in result.stderr and "Traceback" not in result.stderr
        assert not (root / "config.toml").exists()


def test_a_role_of_its_own_keeps_one_member_out_of_anothers_coworker(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """docs/postgres.md's grants, as written: Dana's role owns cw_dana_bot; Lee's role can
    neither read nor write it (one line, no traceback), and Dana's coworker works."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    with psycopg.connect(pg_url, autocommit=True) as admin:
        db = str(conninfo_to_dict(pg_url)["dbname"])
        for statement in ("CREATE ROLE dana LOGIN", "CREATE ROLE lee LOGIN",
                          "CREATE SCHEMA cw_dana_bot AUTHORIZATION dana",
                          f'REVOKE CREATE ON DATABASE "{db}" FROM PUBLIC'):
            admin.execute(statement.encode())
    try:
        as_dana, as_lee = (pg_url.replace("//postgres:@", f"//{u}@", 1) for u in ("dana", "lee"))
        assert "//dana@" in as_dana
        for name, url in (("dana", as_dana), ("lee", as_lee)):
            root = tmp_path / name
            monkeypatch.setenv("COWORKER_HOME", str(root))
            assert coworker("init", "--id", "dana_bot").returncode == 0
            config = root / "config.toml"
            config.write_text(config.read_text(encoding="utf-8").replace(
                '# url = ""', f'url = "{url}"', 1), encoding="utf-8")
        monkeypatch.setenv("COWORKER_HOME", str(tmp_path / "dana"))
        assert coworker("tell", "only Dana may write this").returncode == 0
        monkeypatch.setenv("COWORKER_HOME", str(tmp_path / "lee"))
        for args in (("tell", "Lee speaking as Dana's owner"), ("search", "Dana")):
            refused = coworker(*args)
            assert refused.returncode != 0, refused
            assert "permission denied" in refused.stderr and "Traceback" not in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(b"DROP SCHEMA cw_dana_bot CASCADE")
            admin.execute(b"DROP OWNED BY dana, lee")
            admin.execute(b"DROP ROLE dana")
            admin.execute(b"DROP ROLE lee")


@pytest.mark.parametrize("secret", [
    "postgresql://me:Zk9/q+SECRETxx@127.0.0.1:1/db?sslmode=disable",  # a / left unencoded
    "Hunter2-s3cretWord",  # a bare password where the URL belongs
    "postgresql://me:Hunter2-s3cretWord@127.0.0.1:1/db?sslmode=disable",  # a URL, unreachable
])
def test_a_secret_url_never_shows_its_password(
        isolated_home: Path, monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
    on_postgres(isolated_home, "secret:TEAM_DB")
    monkeypatch.setenv("TEAM_DB", secret)  # from the environment, not state/secrets.toml
    for args in (("tell", "hello"), ("status",), ("search", "x"), ("doctor", "--no-model")):
        result = coworker(*args, env={**os.environ})
        said = result.stdout + result.stderr
        assert "SECRET" not in said and "s3cret" not in said, (args, said)
        assert "Traceback" not in said, (args, said)
        assert result.returncode != 0 or args[0] in ("status", "doctor"), (args, said)
