"""memory.rung_bm25: FTS5's bm25 for chosen episodes, from counts kept while the index stands.

The contract is equality: for recall's statements on the rung, every row scores what
`bm25(rollups_fts)` gives it, to 1e-9, on a ladder reflect really built; and what is kept is
thrown away when the index changes, so a tagged episode never scores from stale text. All of it
through FTS5's documented interfaces: no SQL in the product names a shadow table of an index.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rituals import reflect as rf
from runtime.home import Home
from runtime.memory import recall as rc
from runtime.memory import rung_bm25 as rb
from runtime.memory.walk import walk
from runtime.store import Store
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.store import tags as tg

from .conftest import standups

TOPICS = ["billing export", "invoice checks", "zeppelin migration", "owner owned owns",
          "cache warming", "Straße café naïve", "deploy_script runs", "happy happiness"]


@pytest.fixture()
def ladder(offline_home: Home):
    bodies = [f"Standup {i}: {TOPICS[i % len(TOPICS)]} and {TOPICS[(i * 3) % len(TOPICS)]} "
              f"ran; {'the owners were happy' if i % 7 == 0 else 'nothing else'}."
              for i in range(400)]
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, standups(bodies, per_day=40))
        rf.reflect(offline_home, offline_home.settings(), store)
        assert rl.counts_per_level(store)[1] > 10
        yield store


STATEMENTS = [
    ["billing", "invoice"],
    ["owns", "owned", "happy"],  # porter variants: two phrases, one stem
    ["zeppelin", "cache", "deploy", "script"],
    ["caf", "stra", "naïve"],
    ["happiness", "nothing"],
]


def _fts5(store: Store, expr: str, level: int = 1) -> dict[int, float]:
    top = ev.fts_top_id(store, "rollups_fts")
    on_rung = f"{rb.level_phrase(level)} AND {rb.COLUMNS} : ({expr})"
    return dict(ev.fts_scored(store, on_rung, top, -1, index="rollups_fts"))


def _check(store: Store, words: list[str], level: int = 1) -> int:
    """Every form of statement recall makes of these words: each row scores FTS5's bm25."""
    ors = " OR ".join(f'"{w}"' for w in words)
    exprs = [ors, " AND ".join(f'"{w}"' for w in words)]
    if len(words) > 1:
        exprs.append(f'("{words[0]}") NOT ({" OR ".join(f"{chr(34)}{w}{chr(34)}" for w in words[1:])})')
    n = 0
    for expr in exprs:
        want = _fts5(store, expr, level)
        got = rb.scores(store, list(want), words, level)
        assert set(got) == set(want), (words, expr)
        for i, s in want.items():
            assert got[i] == pytest.approx(s, abs=1e-9), (words, expr, i)
        n += len(want)
    return n


def test_scores_equal_fts5_bm25_for_every_statement_recall_makes(ladder: Store):
    assert all(rb.handles(w) for w in STATEMENTS)
    rows = sum(_check(ladder, words) for words in STATEMENTS)
    assert rows > 50  # the statements matched real rows, not nothing


def test_scores_equal_fts5_bm25_on_every_rung(ladder: Store):
    levels = rl.counts_per_level(ladder)
    assert len(levels) >= 2  # a rung above the episodes, not only level 1
    for level in levels:
        assert sum(_check(ladder, words, level) for words in STATEMENTS) > 0, level


def test_search_rung_returns_what_fts5_ranks_on_every_rung(ladder: Store,
                                                           monkeypatch: pytest.MonkeyPatch):
    """The walk's entry scan: the same rows in the same order with the same scores as
    rollups.fts_search, through the kept counts, and through FTS5 past EXACT_ROWS."""
    cases = [*STATEMENTS, ["standup", "ran"], ["nothing", "else", "owners"], ["absent"]]
    for exact_rows in (1000, 2):
        monkeypatch.setattr(rb, "EXACT_ROWS", exact_rows)
        for level in rl.counts_per_level(ladder):
            for words in cases:
                for limit in (3, 50):
                    ours = rb.search_rung(ladder, words, level, limit)
                    theirs = rl.fts_search(ladder, ev.fts_query(words) or "", limit, level=level,
                                           columns="title body terms vocab tags")
                    assert [r.id for r, _ in ours] == [r.id for r, _ in theirs], (level, words)
                    assert [s for _, s in ours] == pytest.approx([s for _, s in theirs],
                                                                  abs=1e-9)
    assert rb.search_rung(ladder, [], 1, 5) == []


def test_the_walk_enters_as_it_did_with_fts5_ranking_every_rung(ladder: Store,
                                                                monkeypatch: pytest.MonkeyPatch):
    questions = ["billing export invoice", "who owns the zeppelin migration", "cache warming ran",
                 "happy owners", "Straße café", "deploy script", "kubernetes helm"]
    ours = [walk(ladder, q) for q in questions]
    monkeypatch.setattr(rb, "EXACT_ROWS", -1)  # every rung ranked by FTS5's bm25()
    assert [walk(ladder, q) for q in questions] == ours
    assert sum(not w["refused"] for w in ours) >= 4  # entries were made, not only refusals


def test_what_is_kept_is_dropped_when_the_index_changes(ladder: Store):
    words = ["billing", "zeppelin"]
    _check(ladder, words)  # the counts and rows are now kept
    # a tag adds words to one episode: its text and the counts change
    target = next(iter(_fts5(ladder, '"billing"')))
    tg.add(ladder, "rollup", target, ["zeppelin", "zeppelin-billing"])
    _check(ladder, words)


def test_a_word_the_tokenizer_splits_is_left_to_fts5(ladder: Store):
    assert not rb.handles(["deploy_script"])
    assert not rb.handles([])
    assert rb.handles(["naïve", "2025"])


def test_recall_ranks_the_same_with_and_without_it(ladder: Store,
                                                   monkeypatch: pytest.MonkeyPatch):
    """On the bounded path (caps set small) the episodes recall ranks, and their scores, are
    the ones FTS5's own bm25 gives them."""
    monkeypatch.setattr(rc, "EXACT_EPISODES", 2)
    monkeypatch.setattr(rc, "RARE_EPISODES", 4)
    monkeypatch.setattr(rc, "RECENT_EPISODES", 3)
    for words in STATEMENTS:
        ours = rc._episodes(ladder, words)
        with monkeypatch.context() as m:
            m.setattr(rb, "handles", lambda _words: False)
            theirs = rc._episodes(ladder, words)
        assert [r.id for r, _ in ours] == [r.id for r, _ in theirs], words
        assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], abs=1e-9)


TRICKY = ["alpha", "beta", "owner", "owns", "ms", "m", "latency", "reason", "reasonably",
          "apology", "apologize", "biology", "horribly", "horrible", "42", "x\u0301yz", "xyz",
          "ab\ue000cd", "café", "cafe", "i'm", "running", "runs"]


def test_search_rung_is_fts5s_ranking_where_the_tokenizers_part(tmp_path,
                                                                monkeypatch: pytest.MonkeyPatch):
    """Words memory.tokens reads otherwise than FTS5 (tokens under 3 bytes, snowball's porter
    against SQLite's on -logy and -bly, a combining mark with no precomposed letter) and rows
    whose scores tie: the kept-count path gives FTS5's rows, order and scores, bit for bit."""
    import random

    rng = random.Random(7)
    fts_search = rl.fts_search
    calls: list[int] = []
    monkeypatch.setattr(rl, "fts_search", lambda *a, **k: calls.append(1) or fts_search(*a, **k))
    with Store.open(tmp_path / "c.db") as store:
        for i in range(60):
            body = " ".join(rng.choices(TRICKY, k=rng.randint(1, 10)))
            rid = rl.seal(store, level=rng.choice([1, 1, 2, 3]), first_event=None,
                          last_event=None, source_range=None, first_ts=None, last_ts=None,
                          title=" ".join(rng.choices(TRICKY, k=rng.randint(0, 2))), body=body,
                          terms="", method="test", vocab=None)
            if i % 9 == 0:
                tg.add(store, "rollup", rid, rng.sample(TRICKY[:6], 2))
        checked = 0
        for _ in range(60):
            words = ev.fts_terms(rng.sample(TRICKY, rng.randint(1, 3)))
            for level in (1, 2, 3):
                for limit in (1, 3, -1):
                    calls.clear()
                    ours = rb.search_rung(store, words, level, limit)
                    assert not calls or not rb.handles(words), words  # scored here, not by FTS5
                    theirs = fts_search(store, ev.fts_query(words) or "", limit, level=level,
                                        columns="title body terms vocab tags")
                    assert [(r.id, s) for r, s in ours] == [(r.id, s) for r, s in theirs], (
                        words, level, limit)
                    checked += bool(theirs)
        assert checked > 200


def test_the_kept_terms_are_bounded_and_start_again_when_full(tmp_path,
                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rb, "MAX_TERMS", 40)
    monkeypatch.setattr(rb, "_TERMS", rb._Terms())
    with Store.open(tmp_path / "c.db") as store:
        for i in range(30):  # 30 ASCII episodes of 25 words of their own: 750 words in all
            rl.seal(store, level=1, first_event=None, last_event=None, source_range=None,
                    first_ts=None, last_ts=None, title="zeppelin notes",
                    body=" ".join(f"word{i}x{j}s" for j in range(25)), terms="",
                    method="test", vocab=None)
        for limit in (5, -1):
            ours = rb.search_rung(store, ["zeppelin", "notes"], 1, limit)
            theirs = rl.fts_search(store, '"zeppelin" OR "notes"', limit, level=1,
                                   columns="title body terms vocab tags")
            assert [(r.id, s) for r, s in ours] == [(r.id, s) for r, s in theirs]
    assert 0 < len(rb._TERMS.known) < 750 // 2  # started again, did not keep every word


def test_the_private_tokenizer_is_rollups_fts_own(ladder: Store):
    sql = ladder.scalar("SELECT sql FROM sqlite_master WHERE name = 'rollups_fts'")
    assert f"tokenize='{rb.TOKENIZE}'" in sql


ROOT = Path(__file__).resolve().parent.parent
# A shadow table of an FTS5 index: `<index>_data`, `_idx`, `_docsize`, `_config`, `_content`,
# named outright (`rollups_fts_data`), built from a name (`{table}_data`) or glued on ("_data")
SHADOW = re.compile(r"(\w*fts\w*|\{[^{}]*\}|[\"'])_(data|idx|docsize|config|content)\b", re.I)


def test_no_source_names_an_fts5_shadow_table():
    """FTS5's shadow-table records are a format SQLite does not document (issue 39 item 7):
    the product reads its indexes through MATCH, bm25(), fts5vocab and counts of its own, and
    no line of it (SQL, or prose that would describe such a read) names a shadow table."""
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
             for top in ("runtime", "rituals") for path in sorted((ROOT / top).rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if SHADOW.search(line)]
    assert found == []
    for sql in ('f"SELECT block FROM {table}_data WHERE id = 1"',
                "SELECT sz FROM rollups_fts_docsize", "table + '_idx'"):
        assert SHADOW.search(sql), sql  # the pattern does see each way of naming one


def test_the_totals_are_fts5s_own_and_a_mismatch_leaves_fts5_to_rank(
        ladder: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """The index's rows and tokens, solved from FTS5's bm25 of one row, give FTS5's scores; a
    row count that is not the index's (an index out of step with its table) is found out by
    the check, and nothing is scored here: every caller keeps FTS5's own bm25."""
    kept = rb.memory_for(ladder)
    rows, avgdl = kept.averages(ladder) or (0, 0.0)
    assert rows == sum(rl.counts_per_level(ladder).values()) and avgdl > 1
    words = ["billing", "invoice"]
    want = _fts5(ladder, '"billing" OR "invoice"')
    monkeypatch.setattr(rb, "_MEMORY", {})
    monkeypatch.setattr(rb.fts, "rollup_rows", lambda store: rows + 3)
    assert rb.scores(ladder, list(want), words) == {}
    assert "FTS5's own bm25" in caplog.text
    got = rb.search_rung(ladder, words, 1, 5)  # through FTS5: the same rows and scores
    assert [(r.id, s) for r, s in got] == sorted(want.items(), key=lambda x: (x[1], x[0]))[:5]
