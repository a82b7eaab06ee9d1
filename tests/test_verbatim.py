"""User text is printed verbatim by every command that shows it, never read as rich markup.

A body holding `[m2]` (a MEMORY.md id), `[#12]` (a summary's citation), `[red]` or `[/x]` must
show exactly as written: before, `[/x]` crashed `coworker log` with a traceback and the others
silently vanished from the owner's view.
"""

from __future__ import annotations

import json

import pytest

from runtime.home import Home
from runtime.store import Store
from runtime.store import inputs as inputs_store
from runtime.store import promotions as pr

from .conftest import coworker, tell

MARKUP = "[m2] [#12] [red]r[/red] [/x] [bold]"


def _ok(*args: str, code: int = 0) -> str:
    r = coworker(*args)
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    return r.stdout


@pytest.fixture
def marked(offline_home: Home) -> Home:
    tell(offline_home, f"zebra {MARKUP}")
    return offline_home


def test_log_shows_markup_verbatim(marked: Home) -> None:
    assert f"zebra {MARKUP}" in _ok("log")
    assert json.loads(_ok("log", "--json").splitlines()[-1])["body"] == f"zebra {MARKUP}"


def test_search_shows_markup_verbatim(marked: Home) -> None:
    out = _ok("search", "zebra")
    assert MARKUP in out, out


def test_walk_shows_markup_verbatim(marked: Home) -> None:
    out = _ok("walk", "zebra")
    assert f"zebra {MARKUP}" in out, out


def test_pins_and_snapshots_show_markup_verbatim(marked: Home) -> None:
    _ok("pin", f"pin {MARKUP}")
    assert f"pin {MARKUP}" in _ok("pins")
    marked.memory_md.write_text(f"# Memory\n\n- [m1] entry {MARKUP}\n", encoding="utf-8")
    assert f"entry {MARKUP}" in _ok("strike", "m1")
    assert "before striking [m1]" in _ok("snapshots")


def test_promotions_show_markup_verbatim(marked: Home) -> None:
    with Store.open(marked.db_path) as store:
        pr.add(store, f"promo {MARKUP}", [1], 1.0, "queued", f"why {MARKUP}", "tool")
    out = _ok("promotions")  # a table: a long cell wraps, each piece still shows as written
    assert all(out.count(piece) == 2 for piece in MARKUP.split()), out


def test_status_shows_a_set_aside_input_and_its_error_verbatim(marked: Home) -> None:
    with Store.open(marked.db_path) as store:
        for _ in range(inputs_store.MAX_FAILURES):
            inputs_store.fail(store, [1], f"boom {MARKUP}")
    out = _ok("status", code=3)
    assert f"boom {MARKUP}" in out and f"zebra {MARKUP}" in out, out
