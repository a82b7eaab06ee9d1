"""A shipped migration is literal: the schema a fresh database gets never follows a live constant.

m001 once built its author_kind CHECK from the live `AUTHOR_KINDS` tuple, so changing that tuple
would have changed what a new database holds while old ones kept the shipped list.
"""

from __future__ import annotations

import ast
import inspect
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
