"""Which clauses of an owner's message are the owner's own statements (`gate.clauses`), and the
verbatim check's cost on a long message (`gate.verbatim_problem`).

A model may turn a clause of the owner's message into a MEMORY.md entry (or supersede one with
it) only when the owner stated it: a question the owner asked ("Deploys on Fridays are fine
now?"), words the owner quoted, or words the owner reports someone else saying ("Ops-bot says:
...") are not. The end-to-end attacks are in tests/test_adversarial.py (family i)."""

from __future__ import annotations

import random

import pytest

from runtime.memory import gate

FINE = "Deploys on Fridays are fine now"


@pytest.mark.parametrize(("body", "why"), [
    ("Deploys on Fridays are fine now?", "a question you asked"),
    ("Deploys on Fridays are fine now?! Since when", "a question you asked"),
    ("Ops-bot says: deploys on Fridays are fine now. Is that true?",
     "words you reported someone saying"),
    ("According to the vendor, deploys on Fridays are fine now.",
     "words you reported someone saying"),
    ('"Deploys on Fridays are fine now," the ops lead wrote.', "words you quoted"),
    ("The ops lead wrote: \u201cwe checked, deploys on Fridays are fine now\u201d.",
     "words you quoted"),
    # found by a second review: a ? not followed by a space, a comma, other verbs, single quotes
    ("Deploys on Fridays are fine now?\U0001F642", "a question you asked"),
    ("(Deploys on Fridays are fine now?)", "a question you asked"),
    ("Deploys on Fridays are fine now\uff1f", "a question you asked"),
    ("Ops-bot says, deploys on Fridays are fine now.", "words you reported someone saying"),
    ("Ops-bot texted: deploys on Fridays are fine now.", "words you reported someone saying"),
    ("Ops-bot: 'deploys on Fridays are fine now'", "words you quoted"),
    ("Ops-bot: \u2018deploys on Fridays are fine now\u2019.", "words you quoted"),
    ("Per ops-bot, deploys on Fridays are fine now.", "words you reported someone saying"),
    ("Deploys on Fridays are fine now\u203d", "a question you asked"),
    ("\u300cDeploys on Fridays are fine now\u300d", "words you quoted"),
])
def test_an_asked_quoted_or_reported_clause_is_not_the_owners_statement(body: str, why: str):
    problem = gate.verbatim_problem(FINE, [body])
    assert problem is not None and problem.startswith(f"{gate.NOT_VERBATIM}: {why},"), problem


@pytest.mark.parametrize(("body", "why"), [
    ("Deploys on Fridays are fine now, says ops-bot. I don't buy it.", "reports"),
    ("Ops-bot wrote:\nDeploys on Fridays are fine now.", "reports"),
    ("Ops-bot said in #ops: deploys on Fridays are fine now.", "reports"),
    ("Deploys on Fridays are fine now, according to the vendor.", "reports"),
    ("Myth: deploys on Fridays are fine now.", "hypothetical"),
    ("Hypothetically, deploys on Fridays are fine now.", "hypothetical"),
    ("If CI is green, deploys on Fridays are fine now.", "hypothetical"),
    ("Deploys on Fridays are fine now -- NOT", "takes it back"),
    ("Deploys on Fridays are fine now? Really", "asks"),
    ('Ops lead: \u201cdeploys on Fridays are fine now\u201d. Hm.', "quotes"),
    ("Deploys on Fridays are fine now, 'officially'.", "quotes"),
    # a review: someone's view relayed without a verb of saying, or under a label
    ("In Dana's opinion, deploys on Fridays are fine now.", "reports"),
    ("Ops-bot's status line: deploys on Fridays are fine now.", "reports"),
    ("The vendor FAQ: deploys on Fridays are fine now.", "reports"),
    ("The vendor recommends it: deploys on Fridays are fine now.", "reports"),
])
def test_a_message_that_is_not_a_plain_statement_cannot_replace_an_entry(body: str, why: str):
    """No list of phrasings is complete ("..., says ops-bot" puts the attribution after the
    clause), so the one change a model may not make on a clause's word, replacing an entry,
    needs the whole cited message to be a plain statement."""
    assert why in (gate.not_plain(body) or ""), body


@pytest.mark.parametrize("body", [
    "Deploys on Fridays are fine now, the freeze is over.",
    "We checked with ops: deploys on Fridays are fine now.",
    "Deploys on Fridays are fine now. I don't see a reason to wait.",
    "I think: deploys on Fridays are fine now.",  # the owner's own lead-in, with a colon
    "Our call: deploys on Fridays are fine now.",
    # the owner's own labels and views are statements (a second review)
    "Correction: deploys on Fridays are fine now.",
    "Note: deploys on Fridays are fine now.",
    "It's settled: deploys on Fridays are fine now.",
    "In my opinion deploys on Fridays are fine now.",
    "Deploys on Fridays are fine now; I recommend them.",
    "Deploys on Fridays are fine now.\nReason: the freeze is over.",
])
def test_a_plain_statement_can_replace_an_entry(body: str):
    assert gate.not_plain(body) is None


@pytest.mark.parametrize("body", [
    "Deploys on Fridays are fine now.",
    "I think: deploys on Fridays are fine now.",
    "We checked with ops: deploys on Fridays are fine now.",
    "Is the freeze over? Yes. Deploys on Fridays are fine now",
    'The "freeze" is over. Deploys on Fridays are fine now.',
    "We went through the crash reports; deploys on Fridays are fine now.",  # a noun, no colon
    "We went through the crash reports, deploys on Fridays are fine now.",
    "I said: deploys on Fridays are fine now.",
    "It's late, deploys on Fridays are fine now.",  # an apostrophe is no quote
    "Deploys on Fridays are fine now, the team's agreed.",
    # a third review: the owner's own lead-ins, and a ? inside a URL
    "That said, deploys on Fridays are fine now.",
    "As I've said, deploys on Fridays are fine now.",
    "As mentioned, deploys on Fridays are fine now.",
    "Deploys on Fridays are fine now, see https://wiki/page?id=42 for the runbook.",
])
def test_the_owners_own_statement_passes_wherever_it_stands(body: str):
    assert gate.verbatim_problem(FINE, [body]) is None


def test_the_same_clause_stated_elsewhere_in_the_message_still_passes():
    body = "Ops-bot says: deploys on Fridays are fine now. I checked. Deploys on Fridays are " \
           "fine now."
    assert gate.verbatim_problem(FINE, [body]) is None


@pytest.mark.slow  # a big input on purpose: its timeout catches a quadratic read
@pytest.mark.timeout(60)  # 150 KB of this took 25 s; 450 KB now takes a second or two
def test_a_repetitive_message_is_read_in_about_its_length():
    """Every clause may begin a run and every run matches, but the message asks: each place
    is tried and none passes (the old check built each run anew: 25 s for a third of this)."""
    body = "a, " * 150_000 + "?"
    problem = gate.verbatim_problem(", ".join(["a"] * 2000), [body])
    assert problem is not None and problem.startswith(f"{gate.NOT_VERBATIM}: "), problem
    assert "a question you asked" in problem, problem
    assert gate.verbatim_problem(", ".join(["a"] * 2000), ["a, " * 150_000]) is None


@pytest.mark.slow
@pytest.mark.timeout(60)  # the old check took 90 s on half of this (360 s here); now a second or two
def test_a_long_pasted_message_is_read_in_about_its_length():
    rng = random.Random(7)
    lines = [",".join(str(rng.randint(0, 10**6)) for _ in range(8)) for _ in range(15_000)]
    body = "\n".join(lines)  # 0.8 MB, 120,000 clauses
    assert gate.verbatim_problem(lines[7_500], [body]) is None
    assert gate.verbatim_problem(" ".join(lines[7_500:7_508]), [body]) is None
    assert gate.verbatim_problem("x" * 500, [body]) == gate.NOT_VERBATIM


def test_line_start_patterns_read_indented_lines_and_never_cross_a_blank_line():
    """The gate's line-start patterns skip blanks within the line only (`^[^\\S\\n]*`): an
    indented quote or report is still read as one, and a label after a run of blank lines is
    read on its own line (`^\\s*` ran through every blank line that followed, quadratic in a
    run of them)."""
    from runtime.memory import gate

    assert gate.PASTED.search("note\n   > the vendor said so")
    assert gate.not_plain("fine\n\t from Dana: deploy on Fridays") is not None
    assert gate.not_plain("fine\n" + "\n" * 5000 + "  from Dana: deploy on Fridays") is not None
    assert gate.PASTED.search("plain words\n\n\n  no quote here") is None
