"""The work set (runtime/lab/data/work.json) and `coworker eval work`.

The set's invariants: six weeks of interleaved actors and the loop's own kinds, at least 60
questions (half in other words) and 10 that nothing answers, unique ids, both halves, every fact
planted with its answering events, every paraphrase sharing no content-word stem
(memory.tokens) with its answering events, every unanswerable question naming words the history
never holds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from runtime.lab import work_set
from runtime.lab.paraphrase_set import Unanswerable
from runtime.lab.work_set import FACTS, HALVES, UNANSWERABLE, WorkFact
from runtime.memory.tokens import query_words, stem, words

HISTORY = work_set.events()


def content_stems(text: str) -> set[str]:
    return {stem(w) for w in query_words(text)}


def shared_with_answers(question: str, fact: WorkFact) -> set[str]:
    """The content stems `question` shares with the body, actor or kind of `fact`'s answers."""
    held: set[str] = set()
    for e in fact.events:
        if e.key in fact.answers:
            held |= content_stems(e.body) | content_stems(e.actor) | content_stems(e.kind)
    return content_stems(question) & held


# --- the set ------------------------------------------------------------------------------------

def test_the_history_is_six_weeks_of_interleaved_actors_with_every_fact_planted():
    assert len(HISTORY) >= 1000
    kinds = {e["kind"] for e in HISTORY}
    assert {"message", "tick", "tick_end", "model_response", "tool_call", "tool_result",
            "outbox", "note", "decision", "ticket", "commit", "ci"} <= kinds
    actors = {e["actor"] for e in HISTORY}
    assert {"owner", "coworker", "dana.k@corp.example", "jdoe", "ci-bot"} <= actors
    first, last = (datetime.fromisoformat(HISTORY[i]["ts"].replace("Z", "+00:00"))
                   for i in (0, -1))
    assert (last - first).days >= 35
    assert [e["ts"] for e in HISTORY] == sorted(e["ts"] for e in HISTORY)
    planted = {e["meta"][work_set.TAG]: e["body"] for e in HISTORY if work_set.TAG in e["meta"]}
    for fact in FACTS:
        assert set(fact.answers) <= {e.key for e in fact.events}, fact.id
        assert all(planted[e.key] == e.body for e in fact.events), fact.id


def check_ids_and_halves(facts: Sequence[Any], unanswerable: Sequence[Any],
                         questions: list[str]) -> None:
    """Unique ids and questions; both halves in each list, split by id (even tunes, odd is
    held). Shared with tests/test_eval_paraphrase.py."""
    ids = [f.id for f in facts] + [u.id for u in unanswerable]
    assert len(ids) == len(set(ids))
    questions = questions + [u.question for u in unanswerable]
    assert len({q.lower() for q in questions}) == len(questions)
    for items in (facts, unanswerable):
        assert {x.half for x in items} == set(HALVES), "both halves need questions"
        assert all(x.half == ("tuning" if int(x.id[1:]) % 2 == 0 else "held") for x in items)


def check_unanswerable(unanswerable: Sequence[Unanswerable], history: list[dict]) -> None:
    """Every unanswerable question names words that no event's body or actor holds."""
    held = {stem(w) for e in history for w in words(f"{e['body']} {e['actor']}")}
    for u in unanswerable:
        assert u.absent and all(stem(a) in content_stems(u.question) for a in u.absent), u.id
        assert not {stem(a) for a in u.absent} & held, u.id


def test_the_set_has_enough_questions_with_unique_ids_in_both_halves():
    assert 2 * len(FACTS) >= 60
    assert len(UNANSWERABLE) >= 10
    keys = [e.key for f in FACTS for e in f.events]
    assert len(keys) == len(set(keys))
    check_ids_and_halves(FACTS, UNANSWERABLE, [q for f in FACTS for q in (f.exact, f.paraphrase)])


def test_no_paraphrase_shares_a_content_stem_with_its_answering_events():
    problems = {f.id: sorted(shared_with_answers(f.paraphrase, f)) for f in FACTS}
    assert not {k: v for k, v in problems.items() if v}, problems


def test_the_stem_check_catches_a_question_in_the_facts_own_words():
    """The check above can fail: each exact question shares stems with its answering events."""
    for f in FACTS:
        assert shared_with_answers(f.exact, f), f"{f.id}: the exact question shares no word"
    f = FACTS[0]
    broken = WorkFact(f.id, f.half, f.events, f.answers, f.exact, f.paraphrase + " ledger")
    assert shared_with_answers(broken.paraphrase, broken) == {"ledger"}


def test_nothing_in_the_history_answers_the_unanswerable_questions():
    check_unanswerable(UNANSWERABLE, HISTORY)


# --- the ablation's switches and verdict ----------------------------------------------------------

def test_a_switched_rule_is_restored_however_the_block_is_left():
    from runtime.lab.ablation import RULES, switched
    from runtime.memory import recall, search

    rule = next(r for r in RULES if r.key == "person")
    real = (recall._named_speaker, recall.named_person_or_none, search.named_person_or_none)
    try:
        with switched(rule):
            assert recall._named_speaker("Dana", [], [], 10) == ()
            assert search.named_person_or_none(None, "Dana", None) is None
            raise KeyError("inside")
    except KeyError:
        pass
    assert (recall._named_speaker, recall.named_person_or_none,
            search.named_person_or_none) == real


def test_every_rule_switches_attributes_the_product_has():
    """A rule whose module attribute was renamed must fail here, not measure nothing."""
    import importlib

    from runtime.lab.ablation import RULES

    missing = [(r.key, p.module, p.attr) for r in RULES for p in r.patches
               if not hasattr(importlib.import_module(p.module), p.attr)]
    assert not missing


def test_a_missing_attribute_is_refused_and_nothing_stays_switched():
    from runtime.lab.ablation import Patch, Rule, RuleMissing, switched
    from runtime.memory import recall

    real = recall.ANSWER_WEIGHT
    rule = Rule("x", "x", (Patch("runtime.memory.recall", "ANSWER_WEIGHT", lambda _r: 0.0),
                           Patch("runtime.memory.recall", "NO_SUCH_RULE", lambda _r: 0.0)))
    with pytest.raises(RuleMissing), switched(rule):
        pass
    assert recall.ANSWER_WEIGHT == real


def test_the_verdict_follows_the_issues_rule():
    from runtime.lab.ablation import DELETE, STAYS, Figures, Measured, verdict

    def m(work: Figures, locomo: float) -> Measured:
        base = {"tuning": Figures(5, 5, 5, 0, 1, 10), "held": Figures(5, 5, 5, 0, 1, 10)}
        return Measured({"paraphrase": base, "work": {"tuning": work, "held": base["held"]}},
                        (locomo, 0.5))

    same, better = Figures(5, 5, 5, 0, 1, 10), Figures(6, 5, 5, 0, 1, 10)
    wrong, noisy = Figures(6, 6, 6, 1, 1, 10), Figures(5, 5, 5, 0, 2, 10)
    assert verdict(m(better, 0.70), m(same, 0.70)) == STAYS  # improves a work-shaped set
    assert verdict(m(same, 0.70), m(noisy, 0.70)) == STAYS  # less noise, nothing lower
    assert verdict(m(same, 0.70), m(same, 0.70)) == DELETE  # changes nothing
    assert verdict(m(same, 0.71), m(same, 0.70)) == STAYS  # +0.01 on LoCoMo, no set lower
    assert verdict(m(same, 0.709), m(same, 0.70)) == DELETE  # less than 0.01
    assert verdict(m(noisy, 0.75), m(same, 0.70)) == DELETE  # LoCoMo, but a set is noisier
    assert verdict(m(wrong, 0.70), m(same, 0.70)) == DELETE  # answers more, one of them wrong


def test_an_unknown_rule_or_a_calibration_without_hybrid_is_one_line_and_exit_2(isolated_home):
    from .conftest import coworker

    for args in (("eval", "ablate", "--rule", "no-such-rule"),
                 ("eval", "work", "--calibrate"),
                 ("eval", "ablate", "--locomo", str(isolated_home / "absent.json"))):
        got = coworker(*args)
        assert got.returncode == 2, (args, got.stderr)
        assert len(got.stderr.strip().splitlines()) == 1 and "Traceback" not in got.stderr


# --- the command --------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_report_counts_every_held_question_once(tmp_path):
    """One run of `coworker eval work` on the held half, lexical, as JSON (several seconds)."""
    import json
    import os

    from .conftest import coworker

    env = {"PATH": os.environ.get("PATH", ""), "COWORKER_HOME": str(tmp_path)}
    got = coworker("eval", "work", "--half", "held", "--json", cwd=tmp_path, env=env)
    assert got.returncode == 0, got.stderr
    r = json.loads(got.stdout)
    facts = [f for f in FACTS if f.half == "held"]
    assert (r["half"], r["facts"], r["events"]) == ("held", len(facts), len(HISTORY))
    assert sorted(q["id"] for q in r["questions"]) == sorted(
        [f"{f.id}:{k}" for f in facts for k in ("exact", "paraphrase")]
        + [u.id for u in UNANSWERABLE if u.half == "held"])
    for kind in ("exact", "paraphrase"):
        agg = r["kinds"][kind]
        walked = sum(agg[m]["hits"] for m in ("walk_found", "walk_refused", "walk_wrong"))
        assert agg["questions"] == walked == len(facts)
    # the history's own words find their fact: an exact question search misses is a broken set
    assert all(q["search_top5"] for q in r["questions"] if q["kind"] == "exact")
