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
