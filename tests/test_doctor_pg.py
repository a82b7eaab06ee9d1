"""`coworker doctor` for a home whose store is on PostgreSQL (issue 42 items 4 and 10), against a
throwaway server (tests/pgserver.py): the connection (one line, never the password), the
coworker's schema at this code's version (a newer one refused in one line), pgvector for the
semantic channel, a pooler in transaction mode (faked: a connection that reconnects for every
statement, as PgBouncer's transaction mode hands each transaction whichever server connection is
free), who runs the coworker, and pg_fts' kept tables against a recount (a tampered count found,
`health.pg_fts_rebuild` repairs it). Doctor reads only: a schema not there yet stays absent."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runtime import doctor
from runtime.home import Home
from runtime.home import private_umask as private_umask_
from runtime.settings import Settings
from runtime.store import Event, archive, health, pg_runner, pg_schema, tags
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.store.pg import PgStore

from .conftest import coworker, write_config
from .pgserver import pg_url  # noqa: F401  (the fixture)

CID = "doctorpg"
STORE_LINES = ["database", "schema", "guards", "pgvector", "pooling", "runner"]


@pytest.fixture(autouse=True)
def private_umask() -> Iterator[None]:
    old = private_umask_()
    yield
    os.umask(old)


def _pg_home(root: Path, url: str) -> Home:
    """`coworker init`'s home, its store on PostgreSQL: [store] url and a [coworker] id."""
    home = Home.locate(root)
    home.init()
    write_config(root, coworker={"id": CID}, store={"url": url})
    return home


@pytest.fixture
def pg_home(isolated_home: Path, pg_url: str) -> Home:  # noqa: F811
    return _pg_home(isolated_home, pg_url)


def _lived_in(home: Home) -> Home:
    """Events hot and archived, a rollup, tags on an event of each and on the rollup."""
    start = datetime.now(UTC) - timedelta(days=60)
    with home.open_store() as store:
        ids = ev.append_many(store, [
            Event(kind="message", actor="owner", author_kind="user",
                  body=f"parser bug {i}: unicode crash in the tokenizer",
                  ts=(start + timedelta(hours=3 * i)).isoformat().replace("+00:00", "Z"))
            for i in range(20)])
        archive.move_older_than(store, (start + timedelta(hours=30)).isoformat())
        ids.append(ev.append(store, Event(kind="note", body="billing is owned by Dana",
                                          actor="coworker", author_kind="agent")))
        rl.seal(store, level=1, first_event=ids[0], last_event=ids[9], source_range=None,
                first_ts=None, last_ts=None, title="Parser bugs", body="Unicode crashes.",
                terms="parser unicode", method="test", vocab="parser tokenizer crash")
        tags.add(store, "event", ids[2], ["tokenizer-bug"], "owner")  # archived by now
        tags.add(store, "event", ids[-1], ["ownership"], "owner")  # still hot
        tags.add(store, "rollup", 1, ["parser"], "owner")
        assert store.scalar("SELECT count(*) FROM events_archive")
    return home


def by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {c.name: c for c in checks}


def failed(checks: list[doctor.Check]) -> list[str]:
    return [c.name for c in checks if not c.ok]


def _schemas(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname "
                                           "LIKE 'cw\\_%'").fetchall()]


# a healthy home on PostgreSQL ----------------------------------------------------------------
def test_a_home_on_postgresql_passes_the_store_checks(pg_home: Home) -> None:
    _lived_in(pg_home)
    checks = doctor.run_checks(pg_home, probe_model=False)
    names = [c.name for c in checks]
    assert names[names.index("database"):names.index("database") + 7] == [*STORE_LINES, "fts"]
    assert failed(checks) == [], doctor.render(checks)
    c = by_name(checks)
    assert c["database"].detail.startswith(pg_home.store_where())
    v = pg_schema.VERSION
    assert c["schema"].detail == f"schema cw_doctorpg at version {v} (this code knows {v})"
    assert not c["schema"].warn
    assert c["guards"].detail.startswith("the 37 triggers that keep history append-only")
    assert c["pgvector"].detail.startswith(("pgvector ", "not in this database; only the "
                                            "semantic channel needs it"))
    assert "no pooler in transaction mode" in c["pooling"].detail
    assert c["runner"].detail == "not running (never run on this database)"
    assert "agree with the history" in c["fts"].detail
    assert "no database yet" not in c["rituals"].detail + c["spending"].detail
    assert all(line.startswith("ok   ") for line in doctor.render(checks).splitlines())


def test_doctor_makes_no_schema_where_there_is_none(pg_home: Home, pg_url: str) -> None:  # noqa: F811
    checks = doctor.run_checks(pg_home, probe_model=False)
    assert failed(checks) == [], doctor.render(checks)
    c = by_name(checks)
    assert f"no coworker '{CID}' there yet" in c["database"].detail
    assert "schema" not in c  # nothing to say of a schema not there
    assert c["fts"].detail == "no database yet, so no index to check"
    assert _schemas(pg_url) == []


def test_who_runs_the_coworker(pg_home: Home) -> None:
    _lived_in(pg_home)
    with pg_home.open_store() as loop:
        held = pg_runner.claim(loop, host="build-7", pid=4242)
        line = by_name(doctor.run_checks(pg_home, probe_model=False))["runner"]
        assert line.ok and line.detail == f"runs on build-7 (pid 4242, since {held.since})"
        pg_runner.release(loop)
    line = by_name(doctor.run_checks(pg_home, probe_model=False))["runner"]
    assert line.ok and line.detail == (f"not running; last ran on build-7 (pid 4242, since "
                                       f"{held.since})")


# the schema's version ------------------------------------------------------------------------
def test_a_schema_newer_than_this_code_is_one_line(pg_home: Home) -> None:
    _lived_in(pg_home)
    with pg_home.open_store() as store, store.transaction() as db:
        db.execute("INSERT INTO _migrations(version, name, applied_at) VALUES (99, 'm099', 'x')")
    checks = doctor.run_checks(pg_home, probe_model=False)
    c = by_name(checks)
    assert c["database"].ok
    assert not c["schema"].ok
    assert c["schema"].detail == ("the database's schema is version 99, newer than this coworker "
                                  f"knows ({pg_schema.VERSION}): upgrade coworker on this host")
    assert "\n" not in c["schema"].detail
    assert not c["fts"].ok and c["fts"].detail == doctor.DB_NOT_CHECKED


# the connection --------------------------------------------------------------------------------
def test_an_unreachable_server_is_one_line_without_the_password(isolated_home: Path,
                                                                tmp_path: Path) -> None:
    url = f"postgresql://cw:hunter2secret@/team?host={tmp_path / 'nowhere'}&port=5999"
    home = _pg_home(isolated_home, "secret:TEAM_DB")  # a password never sits in config.toml
    home.secrets_path.write_text(f'[secrets]\nTEAM_DB = "{url}"\n', encoding="utf-8")
    home.secrets_path.chmod(0o600)
    checks = doctor.run_checks(home, probe_model=False)
    c = by_name(checks)
    assert not c["database"].ok
    text = doctor.render(checks)
    assert not [c.name for c in checks if "hunter2secret" in c.detail]  # before render's redact
    line = c["database"].detail
    assert "\n" not in line and line.startswith("cannot reach PostgreSQL at ")
    assert "check that the server runs" in line
    assert failed(checks) == ["database", "fts", "rituals", "spending"], text
    assert c["rituals"].detail == c["spending"].detail == doctor.DB_NOT_CHECKED


# pgvector ------------------------------------------------------------------------------------
def _settings(semantic: bool) -> Settings:
    return Settings.model_validate({"semantic": {"enabled": semantic}})


def test_pgvector_is_named_when_the_semantic_channel_needs_it(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    with PgStore.open(pg_url, CID) as store:
        store.raw.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        version = store.scalar("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        present = doctor._pgvector(store, _settings(True))
        assert present.ok and present.detail.startswith(f"pgvector {version}")
        assert health.pgvector(store) == (version, True)
        # a database without it (the server has it, or not)
        for available, how in ((True, "a superuser runs CREATE EXTENSION vector"),
                               (False, "install pgvector on the server, then")):
            monkeypatch.setattr(health, "pgvector", lambda _s, a=available: (None, a))
            off = doctor._pgvector(store, _settings(False))
            assert off.ok and "[semantic] is off" in off.detail and how in off.detail
            on = doctor._pgvector(store, _settings(True))
            assert not on.ok and how in on.detail
            assert on.detail.startswith("[semantic] enabled, but the semantic channel needs the "
                                        "pgvector extension, which this database lacks")


# the guards the database keeps -----------------------------------------------------------------
def test_a_disabled_or_dropped_guard_fails_with_its_name_and_the_fix(pg_home: Home) -> None:
    _lived_in(pg_home)
    with pg_home.open_store() as store:
        store.execute("ALTER TABLE events DISABLE TRIGGER events_no_update")
        store.execute("DROP TRIGGER rollups_sealed ON rollups")
    line = by_name(doctor.run_checks(pg_home, probe_model=False))["guards"]
    assert not line.ok
    assert line.detail == (
        "the database no longer enforces what it promises: missing: rollups.rollups_sealed "
        "(restore the schema from a backup: `coworker restore-backup`); disabled: "
        "events.events_no_update (the schema's owner runs ALTER TABLE <table> ENABLE TRIGGER "
        "<trigger> for each)")
    with pg_home.open_store() as store:
        store.execute("ALTER TABLE events ENABLE TRIGGER events_no_update")
    line = by_name(doctor.run_checks(pg_home, probe_model=False))["guards"]
    assert not line.ok and "disabled" not in line.detail


# a pooler in transaction mode ------------------------------------------------------------------
class _TransactionPooled:
    """A store as a pooler in transaction mode serves it: each statement (a transaction of its
    own) on whichever server connection is free; here a new one every time."""

    def __init__(self, url: str) -> None:
        self.url = url

    def scalar(self, sql: str) -> Any:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(sql.encode()).fetchone()
            return row[0] if row else None


def test_a_pooler_in_transaction_mode_fails_with_the_fix(pg_url: str) -> None:  # noqa: F811
    with PgStore.open(pg_url, CID) as store, PgStore.open(pg_url, CID) as other:
        direct = health.pooled_pids(store, other)
        assert len(direct) == 3 and not health.pooled(direct)
        assert doctor._pooling(store, other).ok
        pooled = health.pooled_pids(_TransactionPooled(pg_url), other)
        assert health.pooled(pooled)
        line = doctor._pooling(_TransactionPooled(pg_url), other)
    assert not line.ok
    assert line.detail.endswith("use session pooling (pool_mode = session) or connect to "
                                "PostgreSQL directly")
    assert not health.pooled([7, 7, 7]) and health.pooled([7, 8, 7])


class _PoolOfOne:
    """Two clients of a pooler in transaction mode with one server connection: a statement of
    either, and `snapshot`'s whole transaction, waits until the server is free."""

    def __init__(self, url: str) -> None:
        self.server = psycopg.connect(url, autocommit=True)
        self.free = threading.Lock()

    def client(self) -> Any:
        pool = self

        class Client:
            def scalar(self, sql: str) -> Any:
                with pool.free:
                    row = pool.server.execute(sql.encode()).fetchone()
                    return row[0] if row else None

            @contextmanager
            def snapshot(self) -> Iterator[None]:
                with pool.free:
                    yield

            def scalar_in_snapshot(self, sql: str) -> Any:
                return pool.server.execute(sql.encode()).fetchone()[0]
        return Client()


def test_a_pool_of_one_in_transaction_mode_fails_without_hanging(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setattr(health, "POOL_WAIT_S", 0.5)
    pool = _PoolOfOne(pg_url)
    store, other = pool.client(), pool.client()
    other.scalar = other.scalar_in_snapshot  # inside its snapshot: the server is its own
    try:
        line = doctor._pooling(store, other)
    finally:
        pool.server.close()
    assert not line.ok
    assert line.detail.startswith("a connection waited 0.5 s for a server while another was in "
                                  "a transaction: a pooler in transaction mode")


# the full text's kept tables -------------------------------------------------------------------
def test_a_tampered_count_is_found_and_the_rebuild_repairs_it(pg_home: Home) -> None:
    _lived_in(pg_home)
    with pg_home.open_store() as store:
        store.execute("UPDATE fts_stats SET doc = doc + 1 WHERE term = 'parser'")
        store.execute("UPDATE fts_stats SET toks = toks - 3 WHERE term = ''")
        store.execute("DELETE FROM fts_event_tags WHERE id = (SELECT min(id) FROM fts_event_tags)")
        store.execute("UPDATE fts_rollups SET ntok = ntok + 1")
        store.execute("UPDATE fts_rollup_stats SET doc = doc + 2 WHERE term = 'parser'")
        store.execute("DELETE FROM fts_rollup_words WHERE id = (SELECT max(id) FROM rollups)")
        store.execute("DELETE FROM fts_rollup_terms WHERE id = (SELECT min(id) FROM rollups)")
        verdicts = {v.table: v for v in health.fts_verdicts(store)}
    assert {t: v.state for t, v in verdicts.items()} == dict.fromkeys(
        ("fts_event_tags", "fts_rollups", "fts_rollup_words", "fts_rollup_terms", "fts_stats",
         "fts_rollup_stats"), "out_of_sync")
    assert "'parser' in 21 row(s), counted 20" in verdicts["fts_stats"].detail
    assert "the totals: 21 row(s)" in verdicts["fts_stats"].detail
    assert "tagged event 3 missing" in verdicts["fts_event_tags"].detail
    assert "rollup 1 stale" in verdicts["fts_rollups"].detail
    fts = by_name(doctor.run_checks(pg_home, probe_model=False))["fts"]
    assert not fts.ok and fts.detail.endswith(f"rebuild them: {health.REBUILD_FTS_COMMAND}")
    assert "\n" not in fts.detail

    rebuilt = coworker("store", "rebuild-fts")  # the command the fts line names
    assert rebuilt.returncode == 0 and "they agree with the history" in rebuilt.stdout, rebuilt
    with pg_home.open_store() as store:
        assert {v.state for v in health.fts_verdicts(store)} == {"ok"}
        assert health.pg_fts_rebuild(store) == list(verdicts)
        assert store.scalar("SELECT doc FROM fts_stats WHERE term = 'parser'") == 20
        assert [e.id for e, _, _ in ev.fts_search(store, '"ownership"', 10)] == [21]
    assert by_name(doctor.run_checks(pg_home, probe_model=False))["fts"].ok
