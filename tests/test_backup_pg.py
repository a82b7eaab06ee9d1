"""`coworker backup` and `restore-backup` with the store on PostgreSQL (issue 42 item 8).

A backup of a PostgreSQL home is its coworker's rows read in one snapshot into the backup's
SQLite file (the same shape a SQLite home's backup has), so it restores into either backend;
a restore into PostgreSQL keeps what the schema held aside (a SQLite file: nothing is lost),
replaces the rows in one transaction verified table by table, refuses while a loop holds the
coworker's claim, and settles a restore cut half-way forward or back. Real PostgreSQL
(tests/pgserver.py), homes made by `Home.init` with `[store] url` in their config.toml.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from runtime import backup
from runtime.errors import CoworkerError, StoreBusy, StoreError
from runtime.home import Home, RestoreUnfinished
from runtime.store import Event, Store, archive, inputs, pg_runner, pins, tags, vectors
from runtime.store import copy as cp
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.store.pg import PgStore

from .conftest import write_config
from .pgserver import pg_url  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow  # as tests/test_backup.py: about 20 s of restores and cuts

# A store's own bookkeeping of its full text: made by its triggers from the rows of history.
DERIVED = {"fts_stats": "term", "fts_event_tags": "id", "fts_rollups": "id",
           "fts_rollup_stats": "term, mask"}


def on_postgres(root: Path, url: str, cid: str, monkeypatch: pytest.MonkeyPatch) -> Home:
    """A new home whose store is coworker `cid`'s schema at `url` (through secret:TEAM_DB,
    so the URL may hold a password)."""
    root.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("COWORKER_HOME", str(root))
    home = Home.locate(root)
    home.init()
    write_config(root, coworker={"id": cid}, store={"url": "secret:TEAM_DB"})
    with home.secrets_path.open("a", encoding="utf-8") as f:
        f.write(f'\n[secrets]\nTEAM_DB = "{url}"\n')
    assert home.store_url() == url
    return home


def with_password(url: str) -> str:
    """The test server trusts its socket: a password in the URL is carried, never asked."""
    return url.replace("postgres:@", "postgres:hunter2-pw@", 1)


def history(store: Any, tag: str, n: int = 12) -> list[int]:
    """A coworker's worth of each kind of row: notes (an archived slice among them), a message
    waiting, tags, a ladder (two episodes under a week), a pin, a vector written twice."""
    ids = [ev.append(store, Event(kind="note", body=f"{tag} note {i}: the parser caf\u00e9 "
                                  f"{'crashed' if i % 2 else 'held'}", actor="coworker",
                                  author_kind="agent", meta={"i": i},
                                  ts=f"2026-0{1 + (i >= 4)}-0{1 + i % 9}T10:00:00.000Z"))
           for i in range(n)]
    ids.append(inputs.add_message(store, Event.owner_message(f"{tag}: check the nightly build",
                                                             "tell")))
    tags.add(store, "event", ids[5], ["nightly", f"{tag}tag"])
    one = rl.seal(store, level=1, first_event=ids[0], last_event=ids[3], source_range=None,
                  first_ts=None, last_ts=None, title=f"{tag} week one", body="parser work",
                  terms="parser", method="test")
    two = rl.seal(store, level=1, first_event=ids[4], last_event=ids[7], source_range=None,
                  first_ts=None, last_ts=None, title=f"{tag} week two", body="build work",
                  terms="build", method="test")
    assert one and two
    rl.seal(store, level=2, first_event=None, last_event=None, source_range=None, first_ts=None,
            last_ts=None, title=f"{tag} month", body="parser and build", terms="month",
            method="test", child_ids=[one, two])
    tags.add(store, "rollup", one, [f"{tag}ladder"])
    pins.add(store, f"{tag}: Dana owns the parser")
    for blob in (b"\0" * 8, b"\1" * 8):
        vectors.write(store, "m", [(ids[1], 2, blob, "h")])
    assert archive.move_older_than(store, "2026-02-01T00:00:00.000Z") == 4
    return ids


def rows(store: Any, table: str) -> list[tuple]:
    cols = cp.columns(store, table)
    return list(cp._rows(store, table, cols, cp.key(store, table, cols)))


def differing(a: Any, b: Any, but_last_event: bool = False) -> list[str]:
    """The tables of history whose rows differ between two stores (either backend); with
    `but_last_event`, b's newest event (a restore's own) left out."""
    assert sorted(cp.tables(a)) == sorted(cp.tables(b))
    out = []
    for table in cp.tables(a):
        theirs = rows(b, table)
        if but_last_event and table == "events":
            theirs = theirs[:-1]
        if [tuple(cp._token(v) for v in r) for r in rows(a, table)] != \
                [tuple(cp._token(v) for v in r) for r in theirs]:
            out.append(table)
    return out


def newest_kind(store: Any) -> str:
    newest = ev.get(store, ev.max_id(store))
    assert newest is not None
    return newest.kind


def derived(store: Any) -> dict[str, list[tuple]]:
    """The full text's own tables (counts of no row left out)."""
    return {t: [tuple(r) for r in store.query(f"SELECT * FROM {t} ORDER BY {key}")
                if not (t.endswith("_stats") and r["doc"] == 0)]
            for t, key in DERIVED.items()}


def test_a_postgres_home_backed_up_and_restored_into_a_new_schema_is_the_same(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    url = with_password(pg_url)
    alpha = on_postgres(tmp_path / "alpha", url, "alpha_1", monkeypatch)
    with alpha.open_store() as store:
        ids = history(store, "alpha")
    taken = backup.take(alpha, tmp_path / "b1")
    assert "read in one snapshot" in taken.line() and "13 events" in taken.line(), taken.line()
    text = (tmp_path / "b1" / "manifest.json").read_text(encoding="utf-8")
    manifest = json.loads(text)
    assert "hunter2" not in text and manifest["store"]["backend"] == "postgresql"
    assert manifest["store"]["where"] == alpha.store_where()
    assert manifest["store"]["tables"]["events"] == 9 and manifest["counts"]["events"] == 9

    beta = on_postgres(tmp_path / "beta", url, "beta_1", monkeypatch)
    done = backup.restore(beta, tmp_path / "b1")
    assert f"into {beta.store_where()}" in done.line(), done.line()
    with alpha.open_store(readonly=True) as a, beta.open_store() as b:
        assert differing(a, b, but_last_event=True) == []
        assert newest_kind(b) == "backup_restored"
        assert inputs.pending_count(b) == 1 and [p.text for p in pins.active(b)] == [
            "alpha: Dana owns the parser"]
        new = ev.append(b, Event(kind="note", body="after", actor="x", author_kind="agent"))
        assert new == ids[-1] + 2  # the identity set past the restored ids
        assert [e.id for e, _, _ in ev.fts_search(b, "crashed", 20)] == [
            e.id for e, _, _ in ev.fts_search(a, "crashed", 20)]


def test_a_backup_is_one_snapshot_while_another_connection_writes(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    home = on_postgres(tmp_path / "home", pg_url, "snap_1", monkeypatch)
    with home.open_store() as store:
        history(store, "snap")
        top = ev.max_id(store)
    writer: Any = PgStore.open(pg_url, "snap_1")
    real = cp.copy_table

    def meanwhile(source: Any, target: Any, table: str) -> cp.Copied:
        copied = real(source, target, table)
        if table == "events_archive":  # events are copied: a message and a tag arrive
            told = inputs.add_message(writer, Event.owner_message("told meanwhile", "tell"))
            tags.add(writer, "event", told, ["meanwhile"])
        return copied
    monkeypatch.setattr(cp, "copy_table", meanwhile)
    try:
        taken = backup.take(home, tmp_path / "b")
    finally:
        writer.close()
    with Store.open(tmp_path / "b" / "coworker.db", readonly=True) as copy:
        assert ev.max_id(copy) == top == taken.last_event_id
        assert inputs.pending_count(copy) == 1  # the message told meanwhile is not in it
        assert not copy.query("SELECT 1 FROM tags WHERE word = 'meanwhile'")
    with home.open_store(readonly=True) as store:
        assert ev.max_id(store) == top + 1 and inputs.pending_count(store) == 2


def test_restore_into_postgres_is_refused_while_a_loop_holds_the_claim(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    home = on_postgres(tmp_path / "home", pg_url, "held_1", monkeypatch)
    with home.open_store() as store:
        history(store, "held")
    backup.take(home, tmp_path / "b")
    with home.open_store() as store:
        ev.append(store, Event(kind="note", body="after the backup", actor="x",
                               author_kind="agent"))
        before = rows(store, "events")
    loop = PgStore.open(pg_url, "held_1")
    pg_runner.claim(loop, host="build-7", pid=4242)
    try:
        with pytest.raises(backup.BackupRefused, match=r"^this coworker runs on build-7 "
                           r"\(pid 4242, since .*\) on postgresql://.*: stop it there first"):
            backup.restore(home, tmp_path / "b")
        assert not list(home.state.glob(".restore-*")) and not list(home.state.glob("before-*"))
        # a loop that claims after that check is still refused when the restore takes the
        # claim itself, and nothing is changed
        monkeypatch.setattr(backup, "_refuse_claimed", lambda home: None)
        with pytest.raises(backup.BackupRefused, match=r"build-7 \(pid 4242.*rolled back"):
            backup.restore(home, tmp_path / "b")
    finally:
        loop.close()
    with home.open_store() as store:
        assert rows(store, "events") == before
    assert not home.restore_marker.exists() and not list(home.state.glob("before-*"))


def test_while_a_restore_fills_the_store_no_loop_starts_and_every_write_waits(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    home = on_postgres(tmp_path / "home", pg_url, "busy_1", monkeypatch)
    with home.open_store() as store:
        history(store, "busy")
    backup.take(home, tmp_path / "b")
    real, seen = cp.copy_table, cast("list[str]", [])

    def meanwhile(source: Any, target: Any, table: str) -> cp.Copied:
        if target.dialect == "postgres" and table == "tags" and not seen:
            with PgStore.open(pg_url, "busy_1", busy_timeout_ms=300) as other:
                with pytest.raises(StoreBusy):  # a `tell` from another host waits
                    inputs.add_message(cast(Any, other), Event.owner_message("meanwhile", "tell"))
                with pytest.raises(StoreError, match="already runs on"):
                    pg_runner.claim(other, host="build-9")  # no loop starts
                seen.append(table)
        return real(source, target, table)
    monkeypatch.setattr(cp, "copy_table", meanwhile)
    backup.restore(home, tmp_path / "b")
    assert seen == ["tags"]
    with home.open_store() as store:
        held = pg_runner.current(store)
        assert held is not None and not held.holding  # given up after
        assert inputs.add_message(store, Event.owner_message("after", "tell"))


def test_a_postgres_backup_restores_into_a_sqlite_home(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    home = on_postgres(tmp_path / "pg", pg_url, "there_1", monkeypatch)
    with home.open_store() as store:
        history(store, "there")
    backup.take(home, tmp_path / "b")
    lite = Home.locate(tmp_path / "lite")
    lite.init()
    write_config(lite.root)
    with lite.open_store() as store:
        history(store, "lite", 8)
    done = backup.restore(lite, tmp_path / "b")
    assert done.into is None and "another history" in done.line()
    with home.open_store(readonly=True) as pg, Store.open(lite.db_path) as sqlite:
        assert differing(pg, sqlite, but_last_event=True) == []
    assert (done.aside / "coworker.db").exists()  # the SQLite home's own, moved aside whole


def test_a_restore_over_a_postgres_history_keeps_it_aside_and_rebuilds_the_full_text(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    lite = Home.locate(tmp_path / "lite")  # a backup a SQLite home made
    lite.init()
    write_config(lite.root)
    with lite.open_store() as store:
        history(store, "lite")
    backup.take(lite, tmp_path / "b")
    home = on_postgres(tmp_path / "pg", pg_url, "over_1", monkeypatch)
    with home.open_store() as store:
        ids = history(store, "old", 20)
        # more rollups than the backup holds, and a tag its event's body holds too
        assert rl.seal(store, level=1, first_event=ids[8], last_event=ids[11], source_range=None,
                       first_ts=None, last_ts=None, title="old week three", body="zebra work",
                       terms="zebra", method="test")
        tags.add(store, "event", ids[6], ["parser"])
        old = PgStore.open(pg_url, "old_copy")
        cp.copy_store(store, old)  # what the schema held, to compare with what is kept aside
    done = backup.restore(home, tmp_path / "b")
    assert done.moved_aside[0] == "coworker.db" and "another history" in done.line()
    with Store.open(done.aside / "coworker.db", readonly=True) as kept:
        assert differing(old, kept) == []  # nothing is lost
    fresh = PgStore.open(pg_url, "from_scratch")
    with home.open_store() as store, Store.open(lite.db_path, readonly=True) as source:
        assert differing(source, store, but_last_event=True) == []
        cp.copy_store(store, fresh)  # the same rows into an empty schema: its triggers count
        assert derived(store) == derived(fresh)
        assert [e.id for e, _, _ in ev.fts_search(store, "crashed", 20)] == [
            e.id for e, _, _ in ev.fts_search(source, "crashed", 20)]
        assert not ev.fts_search(store, "old")  # the old history's words are gone
        assert not rl.fts_search(store, "zebra") and rl.fts_search(store, "lite")
    old.close()
    fresh.close()


@pytest.mark.parametrize("cut", ["files", "fill"])
@pytest.mark.parametrize("settle", ["finish", "rollback"])
def test_a_restore_into_postgres_cut_half_way_is_settled_either_way(
        tmp_path: Path, pg_url: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, settle: str, cut: str) -> None:
    """Cut after the store was filled (a file cannot move) or inside its fill (the connection
    drops at `tags`): rolled back with nothing changed; then with the way back cut too, left
    unfinished, and settled by `finish` or `rollback`."""
    home = on_postgres(tmp_path / "pg", pg_url, "cut_1", monkeypatch)
    with home.open_store() as store:
        history(store, "cut")
    backup.take(home, tmp_path / "b")
    home.memory_md.write_text("# MEMORY\n\n- [m001] written after the backup\n", "utf-8")
    with home.open_store() as store:
        ev.append(store, Event(kind="note", body="after the backup", actor="x",
                               author_kind="agent"))
        before = {t: rows(store, t) for t in cp.tables(store)}
    real_move, real_back, real_copy = backup._move, backup._store_back, cp.copy_table
    cuts: list[str] = []

    def cut_move(src: Path, dest: Path) -> None:
        raise OSError(30, "Read-only file system", str(src))

    def cut_fill(source: Any, target: Any, table: str) -> cp.Copied:
        if target.dialect == "postgres" and table == "tags" and not cuts:
            cuts.append(table)  # once: the way back goes through
            raise StoreError("PostgreSQL at there failed (the connection dropped)")
        return real_copy(source, target, table)
    if cut == "files":
        monkeypatch.setattr(backup, "_move", cut_move)  # the store is filled, MEMORY.md stays
    else:
        monkeypatch.setattr(cp, "copy_table", cut_fill)
    with pytest.raises(backup.BackupRefused, match="rolled back: nothing was changed"):
        backup.restore(home, tmp_path / "b")
    with home.open_store() as store:
        assert {t: rows(store, t) for t in cp.tables(store)} == before
    assert "after the backup" in home.memory_md.read_text("utf-8")
    assert not list(home.state.glob("before-restore-*")) and not home.restore_marker.exists()

    def no_way_back(*args: Any) -> bool:
        raise StoreError("PostgreSQL at there failed (the connection dropped)")
    cuts.clear()
    monkeypatch.setattr(backup, "_store_back", no_way_back)
    with pytest.raises(RestoreUnfinished, match="could not be rolled back"):
        backup.restore(home, tmp_path / "b")
    plan = json.loads(home.restore_marker.read_text("utf-8"))
    assert plan["store"]["phase"] == ("in" if cut == "files" else "filling")
    with PgStore.open(pg_url, "cut_1") as other_host:  # the marker is a file here only:
        for write in (lambda: pg_runner.claim(other_host, "host-b", 99),  # the database says so
                      lambda: inputs.add_message(cast(Any, other_host),
                                                 Event.owner_message("meanwhile", "tell"))):
            with pytest.raises(StoreError, match="stopped half-way on"):
                write()
    monkeypatch.setattr(backup, "_move", real_move)
    monkeypatch.setattr(backup, "_store_back", real_back)
    monkeypatch.setattr(cp, "copy_table", real_copy)
    if settle == "finish":
        assert "restored the backup" in backup.finish(home)
        assert "after the backup" not in home.memory_md.read_text("utf-8")
        with home.open_store() as store:
            assert newest_kind(store) == "backup_restored"
            with Store.open(tmp_path / "b" / "coworker.db", readonly=True) as taken:
                assert differing(taken, store, but_last_event=True) == []
    else:
        assert "rolled back the restore" in backup.roll_back(home)
        assert "after the backup" in home.memory_md.read_text("utf-8")
        with home.open_store() as store:
            assert {t: rows(store, t) for t in cp.tables(store)} == before
    assert not home.restore_marker.exists()
    with PgStore.open(pg_url, "cut_1") as other_host:  # settled: another host may run it again
        assert pg_runner.claim(other_host, "host-b", 99).host == "host-b"


def test_a_plan_made_for_another_store_is_refused(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    home = on_postgres(tmp_path / "pg", pg_url, "moved_1", monkeypatch)
    home.restore_marker.write_text(json.dumps({
        "what": "coworker restore-backup", "src": "/b", "taken_at": "t", "stage": ".restore-x",
        "aside": "before-restore-x", "restores": [], "line": "l"}), "utf-8")
    with pytest.raises(RestoreUnfinished, match="and this home's store is now postgresql://"):
        backup.finish(home)


def test_a_copy_brings_a_counter_up_to_the_sources(tmp_path: Path,
                                                   pg_url: str) -> None:  # noqa: F811
    with Store.open(tmp_path / "a.db") as source, PgStore.open(pg_url, "count_1") as pg, \
            Store.open(tmp_path / "b.db") as back:
        history(source, "count", 8)
        assert source.scalar("SELECT n FROM vector_changes") == 2
        assert all(c.same for c in cp.copy_store(source, pg)), "vector_changes differs"
        assert all(c.same for c in cp.copy_store(pg, back))
        assert back.scalar("SELECT n FROM vector_changes") == 2


def test_a_backup_that_cannot_be_read_whole_leaves_nothing(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    home = on_postgres(tmp_path / "pg", pg_url, "fail_1", monkeypatch)
    with home.open_store() as store:
        history(store, "fail", 8)

    def dropped(*args: Any) -> Any:
        raise StoreError("PostgreSQL at there failed (the connection dropped)")
    monkeypatch.setattr(cp, "copy_table", dropped)
    with pytest.raises(CoworkerError, match="could not copy the database postgresql://.*"
                       "the connection dropped"):
        backup.take(home, tmp_path / "b")
    assert list((tmp_path / "b").iterdir()) == []  # an empty folder: a retry may use it


def test_backup_and_restore_backup_from_the_command_line_on_postgres(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from .conftest import coworker

    home = on_postgres(tmp_path / "pg", pg_url, "cli_1", monkeypatch)
    assert coworker("tell", "Dana owns the parser fix").returncode == 0
    taken = coworker("backup", str(tmp_path / "b"))
    assert taken.returncode == 0, taken.stderr
    assert f"the store {home.store_where()}, read in one snapshot" in taken.stdout
    assert coworker("tell", "told after the backup").returncode == 0
    back = coworker("restore-backup", str(tmp_path / "b"))
    assert back.returncode == 0, back.stderr
    assert f"into {home.store_where()}" in back.stdout and "told again" in back.stdout
    with home.open_store(readonly=True) as store:
        assert [e.body for e in ev.tail(store, 5) if e.kind == "message"] == [
            "Dana owns the parser fix", "told after the backup"]
        assert inputs.pending_count(store) == 2
