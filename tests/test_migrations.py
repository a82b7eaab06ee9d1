"""A shipped migration is literal: the schema a fresh database gets never follows a live constant.

m001 once built its author_kind CHECK from the live `AUTHOR_KINDS` tuple, so changing that tuple
would have changed what a new database holds while old ones kept the shipped list. And an old
database upgrades: m014 makes every tag written before it the owner's.
"""

from __future__ import annotations

import ast
import inspect
import sqlite3
import textwrap
from pathlib import Path

import pytest

from runtime.store import Store, migrations
from runtime.store import events as ev

SHIPPED_AUTHOR_KINDS = ("CHECK (author_kind IN "
                        "('user', 'agent', 'tool', 'third_party', 'system', 'unknown'))")


@pytest.mark.parametrize("fn", migrations.MIGRATIONS, ids=lambda f: f.__name__)
def test_a_shipped_migration_reads_no_name_from_outside_itself(fn) -> None:  # noqa: ANN001
    """It may call `_script` and use its own locals, never a module-level constant."""
    body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body  # not annotations
    tree = ast.Module(body=body, type_ignores=[])
    local = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store)} | {"db"}
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}
    assert read - local <= {"_script"}, read - local


def test_the_author_kind_check_is_the_shipped_literal(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev, "AUTHOR_KINDS", ("user", "robot"))
    monkeypatch.setattr(migrations, "AUTHOR_KINDS", ("user", "robot"), raising=False)
    with Store.open(tmp_path / "fresh.db") as store:
        sql = store.scalar("SELECT sql FROM sqlite_master WHERE name = 'events'")
    assert SHIPPED_AUTHOR_KINDS in sql


def test_m014_an_old_databases_tags_become_the_owners(tmp_path: Path) -> None:
    """Tags written before m014 were all `coworker tag`'s: they become 'owner', keep being
    found through the FTS `tags` column, and new ones carry their origin."""
    from runtime.store import rollups as rl
    from runtime.store import tags as tg

    path = tmp_path / "old.db"
    with Store.open(path, migrate=False) as old:
        migrations.apply(old, upto=13)
        assert "origin" not in {r[1] for r in old.query("PRAGMA table_info(tags)")}
        rid = rl.seal(old, level=1, first_event=None, last_event=None, source_range=None,
                      first_ts=None, last_ts=None, title="Invoices", body="reconciled",
                      terms="invoices", method="extractive", vocab="invoices ledger")
        assert rid is not None
        with old.transaction() as db:  # as m008's `coworker tag` wrote it: no origin
            db.execute("INSERT INTO tags(item_kind, item_id, word, ts) VALUES "
                       "('rollup', ?, 'billing', '2026-01-01T00:00:00.000Z')", (rid,))
        old.execute("INSERT INTO rollups_fts(rollups_fts) VALUES ('rebuild')")
    with Store.open(path) as store:
        assert "m014_add_tag_origin" in migrations.applied(store)
        assert tg.listing(store, "rollup", rid) == [("billing", "owner")]
        assert [r.id for r, _ in rl.fts_search(store, "billing", columns="tags")] == [rid]
        assert tg.add(store, "rollup", rid, ["receivables"], origin="model") == ["receivables"]
        assert tg.listing(store, "rollup", rid) == [("billing", "owner"),
                                                    ("receivables", "model")]
        assert [r.id for r, _ in rl.fts_search(store, "receivables", columns="tags")] == [rid]
        assert [r.id for r, _ in rl.fts_search(store, "receivables", columns="body vocab")] == []
        with pytest.raises(ValueError, match="unknown tag origin"):
            tg.add(store, "rollup", rid, ["x"], origin="robot")
        with pytest.raises(sqlite3.IntegrityError), store.transaction() as db:
            db.execute("INSERT INTO tags(item_kind, item_id, word, ts, origin) VALUES "
                       "('rollup', ?, 'y', 'now', 'robot')", (rid,))
