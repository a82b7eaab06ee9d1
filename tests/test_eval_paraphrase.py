"""The paraphrase set (runtime/lab/data/paraphrase.json) and `coworker eval paraphrase`.

The set's invariants: its size, unique ids, both halves present, every fact planted in the
history, every paraphrase sharing no content-word stem (memory.tokens: stems of the words left
after stopwords) with its fact's events, every unanswerable question naming words the history
never holds. Then one run of the command on the tuning half (lexical), shared by the tests that
read its report's shape and denominators, and the one-line error of a hybrid run with no
embedder."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from runtime.lab import history
from runtime.lab.paraphrase_set import FACTS, UNANSWERABLE, Fact
from runtime.memory.tokens import query_words, stem

from .conftest import coworker, write_config
from .test_eval_work import check_ids_and_halves, check_unanswerable

HISTORY = history.events()


def content_stems(text: str) -> set[str]:
    return {stem(w) for w in query_words(text)}


def fact_events(fact_id: str) -> list[dict]:
    return [e for e in HISTORY if e["meta"].get("fact") == fact_id]


def shared_with_events(question: str, fact: Fact) -> set[str]:
    """The content stems `question` shares with the body, actor or kind of `fact`'s events."""
    held: set[str] = set()
    for e in fact_events(fact.id):
        held |= content_stems(e["body"]) | content_stems(e["actor"]) | content_stems(e["kind"])
    return content_stems(question) & held


# --- the set ------------------------------------------------------------------------------------

def test_the_history_is_several_weeks_of_mixed_work_with_every_fact_planted():
    assert len(HISTORY) >= 3000
    kinds = {e["kind"] for e in HISTORY}
    assert {"message", "note", "decision", "tool_result", "tick_end"} <= kinds
    first, last = (datetime.fromisoformat(HISTORY[i]["ts"].replace("Z", "+00:00"))
                   for i in (0, -1))
    assert (last - first).days >= 21
    assert [e["ts"] for e in HISTORY] == sorted(e["ts"] for e in HISTORY)
    for fact in FACTS:
        assert [e["body"] for e in fact_events(fact.id)] == [e.body for e in fact.events], fact.id


def test_the_set_has_enough_facts_and_questions_with_unique_ids_in_both_halves():
    assert len(FACTS) >= 40
    assert len(UNANSWERABLE) >= 10
    check_ids_and_halves(FACTS, UNANSWERABLE, [q for f in FACTS for q in (f.exact, f.paraphrase)])


def test_no_paraphrase_shares_a_content_stem_with_its_facts_events():
    problems = {f.id: sorted(shared_with_events(f.paraphrase, f)) for f in FACTS}
    assert not {k: v for k, v in problems.items() if v}, problems


def test_the_stem_check_catches_a_question_in_the_facts_own_words():
    """The check above can fail: each exact question shares stems with its fact's events."""
    for f in FACTS:
        assert shared_with_events(f.exact, f), f"{f.id}: the exact question shares no word"
    broken = Fact(FACTS[0].id, FACTS[0].half, FACTS[0].day, FACTS[0].at, FACTS[0].events,
                  FACTS[0].exact, FACTS[0].paraphrase + " ledger")
    assert shared_with_events(broken.paraphrase, broken) == {"ledger"}


def test_nothing_in_the_history_answers_the_unanswerable_questions():
    check_unanswerable(UNANSWERABLE, HISTORY)


# --- the command --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tuning_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One run of the command on the tuning half, lexical, as JSON (a few seconds)."""
    root = tmp_path_factory.mktemp("eval-home")
    env = {"PATH": os.environ.get("PATH", ""), "COWORKER_HOME": str(root)}
    got = coworker("eval", "paraphrase", "--half", "tuning", "--channels", "lexical", "--json",
                   cwd=root, env=env)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


@pytest.mark.slow  # a real process, a real MCP server or a big history: the slow part
def test_the_report_counts_every_tuning_question_once_with_its_denominators(tuning_report):
    r = tuning_report
    facts = [f for f in FACTS if f.half == "tuning"]
    unanswerable = [u for u in UNANSWERABLE if u.half == "tuning"]
    assert (r["channels"], r["half"], r["facts"]) == ("lexical", "tuning", len(facts))
    assert r["events"] == len(HISTORY)
    assert sorted(q["id"] for q in r["questions"]) == sorted(
        [f"{f.id}:{k}" for f in facts for k in ("exact", "paraphrase")]
        + [u.id for u in unanswerable])
    assert {q["half"] for q in r["questions"]} == {"tuning"}
    for kind in ("exact", "paraphrase"):
        agg = r["kinds"][kind]
        assert agg["questions"] == len(facts)
        for measure in ("search_top5", "search_top5_event", "recall_top5", "recall_block",
                        "walk_found", "walk_refused", "walk_wrong"):
            assert agg[measure]["of"] == len(facts), (kind, measure)
            assert agg[measure]["rate"] == round(agg[measure]["hits"] / len(facts), 4)
        walked = agg["walk_found"]["hits"] + agg["walk_refused"]["hits"] + agg["walk_wrong"]["hits"]
        assert walked == len(facts), "every question is found, refused or answered wrongly"
        assert agg["search_top5_event"]["hits"] <= agg["search_top5"]["hits"]
    agg = r["kinds"]["unanswerable"]
    assert agg["questions"] == agg["walk_refused"]["of"] == agg["noise"]["of"] == len(unanswerable)
    assert set(r["latency_ms"]) == {"search", "recall", "walk"}


def test_the_report_agrees_with_its_questions_and_finds_the_exact_ones(tuning_report):
    rows = tuning_report["questions"]
    exact = [q for q in rows if q["kind"] == "exact"]
    found = sum(q["walk"] == "found" for q in exact)
    assert tuning_report["kinds"]["exact"]["walk_found"]["hits"] == found
    noisy = sum(q["noise"] for q in rows if q["kind"] == "unanswerable")
    assert tuning_report["kinds"]["unanswerable"]["noise"]["hits"] == noisy
    # The history's own words find their fact: an exact question search misses is a broken set.
    assert all(q["search_top5_event"] for q in exact), [q["id"] for q in exact
                                                         if not q["search_top5_event"]]


@pytest.mark.parametrize("server", ["dead", "words, not numbers"])
def test_hybrid_without_an_embedder_is_one_line_and_exit_2(offline_home, isolated_home: Path,
                                                         server: str):
    from .test_semantic import EmbedServer

    embed_server = EmbedServer().start()
    embed_server.words = True
    url = "http://127.0.0.1:9" if server == "dead" else embed_server.url
    write_config(isolated_home, semantic={"enabled": True, "provider": "http",
                                          "url": url})
    try:
        got = coworker("eval", "paraphrase", "--channels", "hybrid")
    finally:
        embed_server.stop()
    assert got.returncode == 2, got.stderr
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "--channels hybrid" in lines[0], lines
    assert "semantic channel" in lines[0], lines
    assert "Traceback" not in got.stderr


def test_recalibrating_keeps_a_probe_behind_a_routine_line_at_no_confidence():
    """`--calibrate` recomputes every probe's confidence from (best, margin); a probe below a
    line said three times has a confidence of 0 by rule (memory.nearest), which a refit must
    not turn into a confident entry in the reliability it reports."""
    from runtime.lab.eval_paraphrase import recalibrated, reliability
    from runtime.memory.nearest import CALIBRATION, confidence

    probe = {"best": 0.8, "margin": 0.1, "holds_answer": False}
    assert confidence(probe["best"], probe["margin"], CALIBRATION) > 0.5  # else it shows nothing
    rows = [{"half": "held", "probe": {**probe, "confidence": 0.0, "behind_routine": True}},
            {"half": "held", "probe": {**probe, "confidence": 0.9, "behind_routine": False}}]
    again = recalibrated(rows, CALIBRATION)
    assert [r["probe"]["confidence"] for r in again] == [
        0.0, confidence(probe["best"], probe["margin"], CALIBRATION)]
    assert reliability(again, "held")["confident"]["questions"] == 1


def test_a_model_without_hybrid_is_one_line_and_exit_2(isolated_home: Path):
    got = coworker("eval", "paraphrase", "--model", "all-mpnet")
    assert got.returncode == 2, got.stderr
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --model"), lines
    assert "add --channels hybrid" in lines[0], lines


def test_a_model_named_is_used_whatever_the_home_says(offline_home, isolated_home: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    """`--model` embeds in process with the packaged model named, even when this home's
    [semantic] names a server (here a dead one, which would be a usage error)."""
    from runtime.lab import evaluate
    from runtime.memory import embed
    from runtime.memory.recall import SEMANTIC_GATE

    write_config(isolated_home, semantic={"enabled": True, "provider": "http",
                                          "url": "http://127.0.0.1:9"})
    monkeypatch.setenv("COWORKER_HOME", str(isolated_home))
    made: list[str] = []

    class Packaged:  # stands in for the in-process model: loading torch is not what is tested
        def __init__(self, name: str) -> None:
            made.append(name)
            self.name = f"local:{name}"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    monkeypatch.setattr(embed, "LocalEmbedder", Packaged)
    got, gate = evaluate.eval_embedder("all-mpnet")
    assert made == ["all-mpnet"] and got.name == "local:all-mpnet" and 0 < gate <= 1
    with pytest.raises(evaluate.UsageError, match="needs the semantic channel"):
        evaluate.eval_embedder()  # the home's dead server, when no model is named
    # a home whose channel is off: MiniLM in process, with the gate
    write_config(isolated_home, semantic={"enabled": False})
    got, gate = evaluate.eval_embedder()
    assert made[-1] == "all-minilm" and gate == SEMANTIC_GATE
