"""`coworker eval locomo`'s injected-block figures (issue 14): quiet, injected and noise per
category and overall, category 5 as its own noise-only row, beside the recall metrics.

A tiny hand-made LoCoMo-shaped file, one conversation of two sessions, goes through the real
run (a fresh home, reflect, the loop's recall call and budget); lexical only, no embedder.
Each question's outcome follows from its words: a question shares words with its evidence turn
(injected, holding the evidence), or only with other turns (noise), or with nothing at all, or
holds no informative word (quiet).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.lab.evaluate import InvariantViolated, noise_counts, run
from runtime.memory.recall import BUDGET, MAX_TERMS, Budget
from runtime.settings import RecallSection

from .conftest import coworker

SPEAKERS = ("Caroline", "Melanie")


def _session(d: int, lines: list[str]) -> list[dict]:
    return [{"speaker": SPEAKERS[i % 2], "dia_id": f"D{d}:{i + 1}", "text": t}
            for i, t in enumerate(lines)]


CONVERSATION = {
    "speaker_a": SPEAKERS[0], "speaker_b": SPEAKERS[1],
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": _session(1, [
        "I went to the LGBTQ support group yesterday and it was powerful.",  # D1:1 Caroline
        "I painted a sunrise over the lake last week.",  # D1:2 Melanie
        "I want to study psychology and become a counselor.",  # D1:3 Caroline
        "That is wonderful!"]),  # D1:4 Melanie
    "session_2_date_time": "7:55 pm on 25 May, 2023",
    "session_2": _session(2, [
        "I ran a charity race for mental health on Saturday.",  # D2:1 Caroline
        "My kids and I went camping in the mountains.",  # D2:2 Melanie
        "The zeppelin museum in Friedrichshafen was amazing."]),  # D2:3 Caroline
}

QA = [
    # category 4: its words are its evidence turn's: injected, holding D1:2
    {"question": "What did Melanie paint over the lake?", "answer": "a sunrise",
     "evidence": ["D1:2"], "category": 4},
    # category 4 whose evidence does not resolve (D9:9): left out of every figure
    {"question": "What did Melanie paint?", "answer": "a sunrise",
     "evidence": ["D1:2", "D9:9"], "category": 4},
    # category 2: injected, holding D2:1
    {"question": "When did Caroline run the charity race?", "answer": "May 2023",
     "evidence": ["D2:1"], "category": 2},
    # category 1: its words are only D2:3's, its evidence is D1:3, which shares none: noise
    {"question": "What was amazing about the zeppelin museum?", "answer": "counseling",
     "evidence": ["D1:3"], "category": 1},
    # category 1, two evidence turns, words of both: injected, holding evidence
    {"question": "Did Caroline study psychology before the charity race?", "answer": "yes",
     "evidence": ["D1:3", "D2:1"], "category": 1},
    # category 3: nothing informative after stopwords and courtesy words: quiet
    {"question": "Thanks, what was that?", "answer": "wonderful",
     "evidence": ["D1:4"], "category": 3},
    # category 5, answer absent and no word of it in the conversation: quiet
    {"question": "What colour is Jon's submarine?", "adversarial_answer": "yellow",
     "evidence": ["D2:2"], "category": 5},
    # category 5, false premise on D2:1's words: injected, holding D2:1
    {"question": "What did Melanie realize after the charity race?",
     "adversarial_answer": "self-care is important", "evidence": ["D2:1"], "category": 5},
    # category 5 whose words match D2:3 and Melanie's turns, evidence D1:3: noise
    {"question": "Where is the zeppelin museum Melanie visited?",
     "adversarial_answer": "Friedrichshafen", "evidence": ["D1:3"], "category": 5},
    # category 5 whose evidence does not resolve: counted, left out
    {"question": "Which museum did Caroline visit?", "adversarial_answer": "zeppelin",
     "evidence": ["D7:1"], "category": 5},
]


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps([{"sample_id": "conv-t", "conversation": CONVERSATION,
                                 "qa": QA}]), encoding="utf-8")
    return path


NOISE_KEYS = {"injected", "noise", "quiet", "injected_rate", "noise_rate"}


@pytest.fixture(scope="module")
def lexical(tmp_path_factory: pytest.TempPathFactory) -> dict:
    f = _file(tmp_path_factory.mktemp("locomo"))
    return run(f, channels="lexical").as_dict()


def test_the_json_report_carries_the_noise_figures(tmp_path: Path):
    r = coworker("eval", "locomo", str(_file(tmp_path)), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["overall"]["noise"] == 1 and rep["adversarial"]["noise"] == 1, rep
    assert "noise" in rep["reflex"]["definition"], rep["reflex"]


def test_counts_per_category_and_overall_follow_the_data(lexical: dict):
    rep = lexical
    assert (rep["questions_total"], rep["questions_valid"], rep["questions_invalid"]) == (6, 5, 1)
    cats = rep["per_category"]
    got = {c: (row["n"], row["injected"], row["noise"], row["quiet"]) for c, row in cats.items()}
    assert got == {"1 multi-hop": (2, 2, 1, 0), "2 temporal": (1, 1, 0, 0),
                   "3 open-domain": (1, 0, 0, 1), "4 single-hop": (1, 1, 0, 0)}, got
    o = rep["overall"]
    assert (o["n"], o["injected"], o["noise"], o["quiet"]) == (5, 4, 1, 1), o
    assert (o["injected_rate"], o["noise_rate"]) == (0.8, 0.2), o
    assert (cats["1 multi-hop"]["injected_rate"], cats["1 multi-hop"]["noise_rate"]) == (1.0, 0.5)
    assert (cats["3 open-domain"]["injected_rate"], cats["3 open-domain"]["noise_rate"]) == (0, 0)


def test_category_5_is_its_own_noise_only_row(lexical: dict):
    adv = lexical["adversarial"]
    assert adv["category"] == "5 adversarial"
    assert (adv["questions_total"], adv["questions_invalid"], adv["n"]) == (4, 1, 3), adv
    assert (adv["injected"], adv["noise"], adv["quiet"]) == (2, 1, 1), adv
    assert (adv["injected_rate"], adv["noise_rate"]) == (0.6667, 0.3333), adv
    assert "evidence" in adv["note"] and "empty memory" in adv["note"], adv["note"]
    assert not {"turn_recall", "hit", "mrr10"} & set(adv), "category 5 got recall metrics"
    assert "5 adversarial" not in lexical["per_category"]
    assert lexical["overall"]["n"] == 5, "category-5 questions reached the recall metrics"


def test_recall_metrics_sit_beside_the_noise_over_the_same_n(lexical: dict):
    cats = lexical["per_category"]
    single = cats["4 single-hop"]  # D1:2 is the only turn about painting: ranked first
    assert (single["turn_recall"], single["hit1"], single["mrr10"]) == (1.0, 1.0, 1.0), single
    quiet = cats["3 open-domain"]  # no informative word: nothing ranked, nothing injected
    assert (quiet["turn_recall"], quiet["hit"], quiet["session_recall"]) == (0, 0, 0), quiet
    multi = cats["1 multi-hop"]  # the zeppelin question never reaches D1:3
    assert multi["turn_recall"] <= 0.5 and multi["hit"] == 0.5, multi
    for row in [lexical["overall"], *cats.values()]:
        assert NOISE_KEYS <= set(row), row
        assert row["injected"] + row["quiet"] == row["n"] and row["noise"] <= row["injected"]
        assert row["hit1"] <= row["mrr10"] <= row["hit10"], row


def test_the_block_is_the_loops_default(lexical: dict):
    assert lexical["reflex"]["settings"] == {
        "mode": RecallSection().mode, "max_items": BUDGET.max_items,
        "item_chars": BUDGET.item_chars, "total_chars": BUDGET.total_chars,
        "max_terms": MAX_TERMS, "call": "recall"}
    assert "noise" in lexical["reflex"]["definition"]


def test_bm25_has_no_loop_path_and_reports_no_noise(tmp_path: Path):
    rep = run(_file(tmp_path), channels="bm25").as_dict()
    assert rep["reflex"] == {} and rep["adversarial"] == {}, rep
    assert rep["overall"]["n"] == 5
    assert not NOISE_KEYS & set(rep["overall"]), rep["overall"]


def test_noise_without_a_block_is_a_bug_in_the_counting():
    assert noise_counts([]) == {"injected": 0, "noise": 0, "quiet": 0,
                                "injected_rate": None, "noise_rate": None}
    with pytest.raises(InvariantViolated):
        noise_counts([{"injected": False, "noise": True}])


@pytest.mark.parametrize("mode,budget,shown", [
    # the default: three items, all of session 1 (session 2 is 17 days later: another episode
    # since rungs are bounded in time, ADR-0035)
    ("on", Budget(), {"D1:2", "D1:3", "D1:4"}),
    ("on", Budget(max_items=1), {"D1:2"}),  # the best hit only
    ("dry-run", Budget(), None),  # the loop logs the block and injects nothing
    ("on", Budget(max_items=0), None),
    ("on", Budget(total_chars=260), {"D1:2"}),  # room for the header and the oldest item only
])
def test_the_block_follows_the_loops_recall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            mode: str, budget: Budget, shown):
    from runtime.lab.evaluate import Reflex, build_home
    from runtime.store import Store

    home, _ = build_home(tmp_path / "home", {"conversation": CONVERSATION, "qa": []})
    cfg = home.config_path.read_text(encoding="utf-8")
    assert 'mode = "on"' in cfg
    home.config_path.write_text(cfg.replace('mode = "on"', f'mode = "{mode}"'), encoding="utf-8")
    monkeypatch.setattr("runtime.memory.recall.BUDGET", budget)
    with Store.open(home.db_path, readonly=True) as store:
        reflex = Reflex(store, home, None, 0.0)
        # Melanie's painting turn first, then the turns around it
        assert reflex.shown("What did Melanie paint over the lake?") == shown
        judged = reflex.judge("What did Melanie paint over the lake?", ["D1:2"])
    assert judged == {"injected": shown is not None, "noise": False}


def test_the_text_table_shows_the_block_columns_and_the_category_5_row(tmp_path: Path,
                                                                        lexical: dict):
    from runtime.lab.evaluate import Report

    rep = Report(**lexical)
    headers, rows = rep.table()
    assert headers[-2:] == ["injected", "noise"], headers
    by_name = {r[0]: r for r in rows}
    assert list(by_name) == ["overall", "1 multi-hop", "2 temporal", "3 open-domain",
                             "4 single-hop", "5 adversarial"]
    assert by_name["overall"][1] == "5" and by_name["overall"][-2:] == ["0.800", "0.200"]
    assert by_name["5 adversarial"][1:] == ["3", "-", "-", "-", "-", "0.667", "0.333"]
    assert all(len(r) == len(headers) for r in rows)
    notes = rep.notes()
    assert len(notes) == 2 and "3 items" in notes[0] and "empty memory" in notes[1], notes

    base = run(_file(tmp_path), channels="bm25")
    headers, rows = base.table()
    assert "noise" not in headers and [r[0] for r in rows][-1] == "4 single-hop", rows
    assert base.notes() == []


@pytest.mark.parametrize("channels", ["lexical", "bm25"])
def test_a_model_without_hybrid_is_one_line_and_exit_2(tmp_path: Path, channels: str):
    """`--model` names the embedder of the hybrid channel; with any other it is a mistake."""
    got = coworker("eval", "locomo", str(_file(tmp_path)), "--channels", channels,
                   "--model", "all-minilm")
    assert got.returncode == 2, got.stderr
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --model"), lines
    assert "add --channels hybrid" in lines[0], lines


def test_hybrid_without_an_embedder_is_one_line_and_exit_2(tmp_path: Path, isolated_home: Path):
    """The embedder is checked before any conversation is built: a dead server is one line."""
    from .conftest import write_config

    write_config(isolated_home, semantic={"enabled": True, "provider": "http",
                                          "url": "http://127.0.0.1:9"})
    out = tmp_path / "ranked.jsonl"
    got = coworker("eval", "locomo", str(_file(tmp_path)), "--channels", "hybrid",
                   "--out", str(out))
    assert got.returncode == 2, got.stderr
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "--channels hybrid" in lines[0], lines
    assert "semantic channel" in lines[0], lines
    assert not out.exists(), "nothing is written before the embedder answers"
