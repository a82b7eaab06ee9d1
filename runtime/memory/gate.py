"""The promotion gate: what may enter MEMORY.md, and the owner's review of the rest.

One function, `consider`, decides every candidate, whichever door it came through: the model's
`memory_propose` tool (origin "tool"), reflect's lessons ("reflect"), an owner message beginning
"remember" ("owner"), a message beginning "remember" told by another agent over MCP ("agent"):

- refused: a cited source event does not exist; too little of the candidate is found in its
  sources (it lost too much of its source text); a duplicate of an existing entry;
- doubtful, queued: confidence under 0.8; any source that is not the owner's own words
  (`Event.owners_words`: tool output, another agent, a summary, and imported history whatever
  author_kind it claims, unless the owner vouched for that line's batch and actor with
  `coworker import --mine` and has not withdrawn it: `import_keys.vouched_lines`, ADR-0033);
  a pasted document; text that reads as an instruction to the agent
  ("ignore", "always run", "from now on", commands, URLs to act on); a "remember" told by
  another agent (always: it is never the owner's word); a model or reflect proposal that is not
  a verbatim clause, or run of clauses, of a cited owner message (the owner's words turned
  around: "not Bob" made "Bob", "never" dropped), or that leaves out a condition the owner
  attached to it in the same sentence ("..., but only after review"), or whose clauses the
  owner asked, quoted or reported someone saying ("Deploys on Fridays are fine now?");
- queued with that reason: MEMORY.md would pass its character budget, or shrink by more than a
  quarter;
- confident: applied at once when `memory_promotions = "auto"`, queued when "gated"; with "off"
  nothing is proposed at all.

A candidate may supersede an entry (`supersedes="m12"`, ADR-0018): the new entry takes the old
one's place in MEMORY.md and names it, and the old one leaves the file (the snapshot an
approval writes first keeps it). The supersession is decided with the candidate, never apart:
it applies in "auto" only when the candidate passes as above (the owner's own words, cited and
checked) and the new text keeps at least half of the old entry's words (it is about the same
thing); otherwise the whole promotion is queued, its reason ending with what it would
supersede. An id that names no entry is `UnknownEntry`, raised before anything is recorded
(the tool's caller sees an error it can correct). `supersede` is the owner's own command.

Every decision is a `promotions` row with its reason; `VerdictStatus` names the verdicts
(a StrEnum, so a stored or printed verdict is the same plain word). Retrieved text never
becomes operational authority on its own: only the owner's own words, or the owner's
approval, reach MEMORY.md.
`approve` finishes an approve that was interrupted after MEMORY.md was written. It reads the
store and writes MEMORY.md; it never calls a model.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from enum import StrEnum

from ..errors import CoworkerError
from ..home import Home
from ..settings import Settings
from ..store import Event, Store
from ..store import events as ev
from ..store import import_keys as vouches
from ..store import promotions as pr
from .cards import content_words, shared_share, stem
from .memorymd import Entry, MemoryFile, snapshot
from .tokens import READ_CHARS, head

log = logging.getLogger(__name__)

MIN_CONFIDENCE = 0.8
MIN_SOURCE_SHARE = 0.5
MAX_SHRINK = 0.25
MEMORY_MD_CHARS = 4000  # MEMORY.md's budget: every tick's context carries it whole
DUPLICATE_OVERLAP = 0.8

INSTRUCTION = re.compile(
    r"""(
      \b(ignore|disregard|forget|override|bypass)\b.{0,40}\b(instruction|instructions|rules?|
         previous|prior|above|everything|system|guidelines|policy|policies)\b
    | \b(always|never)\s+(run|execute|send|forward|reply|respond|include|call|delete|approve|
         say|tell|answer|use|trust|obey|follow|click|open|visit|download|install|share|email|
         transfer|pay|grant|disable|skip)\b
    | \bfrom\s+now\s+on\b | \bhenceforth\b | \bgoing\s+forward,?\s+(you|the\s+agent)\b
    | \byou\s+(must|should|shall|will)\s+(always|never|now|immediately)?\s*\w+
    | \b(new|updated|real|actual)\s+(system\s+)?instructions?\b | \bsystem\s*(prompt|:)
    | \bact\s+as\b | \bpretend\b | \bdo\s+not\s+(tell|inform|mention|log|report)\b
    | https?://\S+ | \bwww\.\S+
    | \b(rm\s+-rf|sudo|curl|wget|chmod|eval|exec|powershell|bash\s+-c)\b | `[^`]+`
    | \b[\w.+-]+@[\w-]+\.[\w.]+\b
    | ^\s*(send|forward|delete|run|execute|ignore|email|transfer|pay|click|visit|download|
          install|disable|grant|wire)\b
    )""",
    re.IGNORECASE | re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class Candidate:
    text: str
    source_events: list[int]
    confidence: float
    origin: str  # tool (memory_propose), reflect, owner ("remember"), agent (MCP "remember")
    supersedes: str | None = None  # the MEMORY.md entry it would replace (ADR-0018)


class VerdictStatus(StrEnum):
    """What the gate decided: a stored promotion status, or "off" (nothing recorded)."""

    APPLIED = pr.Status.APPLIED
    QUEUED = pr.Status.QUEUED
    REFUSED = pr.Status.REFUSED
    OFF = "off"


@dataclass(frozen=True)
class Verdict:
    status: VerdictStatus
    reason: str
    promotion_id: int | None = None
    entry_id: str | None = None

    def describe(self) -> str:
        where = f" as [{self.entry_id}]" if self.entry_id else ""
        num = f"promotion {self.promotion_id} " if self.promotion_id else ""
        return f"{num}{self.status}{where}: {self.reason}"


PASTED = re.compile(r"```|^[^\S\n]*>|^(from|subject|to|date):\s|\bhere is\b|\bpasted?\b|"
                    r"\bforwarded\b|-----", re.I | re.M)
DETAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|https?://\S+|\b[A-Z]{2}\d{2}[A-Z0-9]{6,}\b|"
                    r"\d[\d/.:,-]*\d|\b\d\b|(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+\b")
PASTED_CHARS = 400

MIN_SUPERSEDE_SHARE = 0.5  # of the superseded entry's content words kept by the new text
MODEL_ORIGINS = ("tool", "reflect")  # proposals written by a model, not typed by anyone
AGENT_REASON = "told by another agent over MCP, not by you"
NOT_VERBATIM = "not a verbatim clause of a cited owner message"
# A sentence ends at . or ! before a space, at any question mark (also "now?)" or "now?" + an
# emoji: a question is never the owner's statement) but one inside a URL ("?id=42"), and at a
# line break.
QUESTION_MARKS = "?\uff1f\u203d\u061f\u2047\ufe56"  # ? and its fullwidth, interrobang, Arabic...
SENTENCE_END = re.compile(rf"[.!]+(?=\s|$)|[{QUESTION_MARKS}]+(?![\w=&%/#.-])|\n")
CLAUSE_END = re.compile(r"[,;:]|\s-+\s|--+|[\u2013\u2014]")
# A clause that limits the one beside it: leaving it out changes what the owner said.
QUALIFIER = re.compile(r"^(but|except|excepting|unless|until|till|only|if|provided|providing|"
                       r"as long as|so long as|without|when|whenever|once|after|before|while|"
                       r"though|although|even|other than|apart from)\b")


def _norm(text: str) -> str:
    """Lowercase, punctuation dropped, whitespace collapsed: how clauses are compared."""
    return " ".join(re.sub(r"[\W_]+", " ", text.lower()).split())


# A clause that says whose words follow it in its sentence: one ending in a verb of saying
# before a colon or a comma ("Ops-bot says: ...", "ops-bot texted, ..."), one ending in a word
# that may be a noun too ("reports", "claims") before a colon only, or "according to ...".
# The owner's own "I said: ..." is the owner's.
SAYING = re.compile(r"(?<!\bi )(?<!\bwe )\b(says|said|writes|wrote|texted|messaged|emailed|"
                    r"posted|tweeted|replied|answered|insisted|claimed|suggested|reported|"
                    r"asked|mentioned|announced|argued|explained|warned|tells? (me|us)|"
                    r"told (me|us))$")
REPORTING = re.compile(r"(?<!\bi )(?<!\bwe )\b(says?|write|claims?|asks?|reports?|thinks?|"
                       r"thought|suggests?|insists?|replies|answers|mentions|announces)$")
# The owner's own lead-ins that end in a verb of saying: "that said", "as mentioned", "as I've
# said", "with that said", "having said that" (a clause beginning so reports no one)
OWN_LEAD = re.compile(r"^(that|this|with that|having|as|so|which|all that)\b")
QUOTE_CHARS = "\"\u201c\u201d\u00ab\u00bb\u300c\u300d\u2039\u203a"  # "..." <<...>> and their kin
QUOTES = re.compile(f"[{QUOTE_CHARS}]")
# a clause wrapped in single quotes ('...' or \u2018...\u2019): quoted (an apostrophe alone is not)
SINGLE_QUOTED = re.compile(r"^['\u2018].*['\u2019]\W*$", re.S)


@dataclass(frozen=True)
class Clause:
    sentence: int  # its sentence's number in the body
    norm: str  # normalised (`_norm`): how clauses are compared
    written: str  # as written, whitespace collapsed
    not_said: str | None  # why it is not the owner's own statement: asked, quoted, reported


def clauses(body: str) -> list[Clause]:
    """Each clause of `body`: split at sentence ends (. ! ? and line breaks), then at , ; :
    and dashes. A clause is not the owner's own statement when its sentence asks (ends with
    "?"), when it lies within double quotes, or when an earlier clause of its sentence says
    whose words follow ("Ops-bot says: ...", "according to the vendor, ..."). Linear in the
    body."""
    out: list[Clause] = []
    pos, quoted = 0, False  # quoted: a double quote is open (sentence ends hold none)
    ends = [(m.start(), m.end(), m.group(0)) for m in SENTENCE_END.finditer(body)]
    for n, (start, stop, mark) in enumerate([*ends, (len(body), len(body), "")]):
        asked = any(q in mark for q in QUESTION_MARKS)
        quoted = _sentence_clauses(body[pos:start], n, asked, quoted, out)
        pos = stop
    return out


def _sentence_clauses(sentence: str, n: int, asked: bool, quoted: bool,
                      out: list[Clause]) -> bool:
    """Append the clauses of sentence number `n` to `out`; whether a double quote is still
    open after it (`quoted`: one was open before it)."""
    reported, at = False, 0
    for m in [*CLAUSE_END.finditer(sentence), None]:
        part = sentence[at:m.start() if m else len(sentence)]
        inside = quoted or bool(QUOTES.search(part)) or bool(SINGLE_QUOTED.match(part.strip()))
        quoted ^= bool(len(QUOTES.findall(part)) % 2)
        if norm := _norm(part):
            out.append(Clause(n, norm, " ".join(part.split()), _not_said(asked, inside, reported)))
            reported = reported or _reports(norm, m.group(0) if m is not None else "")
        if m is not None:
            at = m.end()
    return quoted


def _not_said(asked: bool, inside: bool, reported: bool) -> str | None:
    """Why a clause is not the owner's own statement, or None."""
    if asked:
        return "a question you asked"
    if inside:
        return "words you quoted"
    return "words you reported someone saying" if reported else None


def _reports(norm: str, mark_after: str) -> bool:
    """Whether this clause (normalised), followed by `mark_after`, says whose words follow it
    in its sentence ("according to ...", "ops-bot says:"); the owner's own lead-ins ("that
    said, ...", "as I said, ...") report no one."""
    if norm.startswith(("according to ", "per ")):
        return True
    if OWN_LEAD.match(norm) is not None:
        return False
    return (mark_after in (":", ",") and SAYING.search(norm) is not None) or (
        mark_after == ":" and REPORTING.search(norm) is not None)


def verbatim_problem(text: str, owner_bodies: list[str]) -> str | None:
    """None when `text` is one clause, or a run of consecutive clauses, of one of the owner's
    messages, each the owner's own statement (not asked, quoted or reported: `clauses`), and
    leaves out no clause of the same sentence that qualifies it; else why not. A run is a
    stretch of the clauses joined, which starts where a clause starts and ends where one ends:
    each start is one comparison in C, so a long message costs about its length times the
    places where `text` could begin (a pasted file of thousands of clauses is read once)."""
    want = _norm(text)
    dropped = not_said = None
    for body in owner_bodies:
        if want not in _norm(body):  # every run is a stretch of the normalised body
            continue
        found, left_out, unsaid = _runs_in(want, clauses(body))
        if found:
            return None
        dropped, not_said = dropped or left_out, not_said or unsaid
    if dropped is not None:
        return f"leaves out {dropped!r}, which you said with it in the same sentence"
    if not_said is not None:
        return f"{NOT_VERBATIM}: {not_said}, not a statement of yours"
    return NOT_VERBATIM


def _runs_in(want: str, cs: list[Clause]) -> tuple[bool, str | None, str | None]:
    """Whether `want` (normalised) is a run of the clauses `cs`, each the owner's statement,
    with no qualifier of its sentence beside it; else (False, the first qualifier a run leaves
    out, the first reason a clause of a run was not said), None where there is none."""
    starts, ends, bad, at = [], {}, [0], 0
    for k, c in enumerate(cs):
        starts.append(at)
        ends[at + len(c.norm)] = k
        bad.append(bad[-1] + (c.not_said is not None))
        at += len(c.norm) + 1
    joined = " ".join(c.norm for c in cs)
    dropped = not_said = None
    for i, c in enumerate(cs):
        j = ends.get(starts[i] + len(want)) if (
            want.startswith(c.norm) and joined.startswith(want, starts[i])) else None
        if j is None or j < i:
            continue  # no run starts here, or it ends inside a clause
        if bad[j + 1] > bad[i]:  # a clause of the run was asked, quoted or reported
            not_said = not_said or next(x.not_said for x in cs[i:j + 1] if x.not_said)
            continue
        beside = _qualifiers_beside(cs, i, j)
        if not beside:
            return True, None, None
        dropped = dropped or cs[beside[0]].written
    return False, dropped, not_said


def _qualifiers_beside(cs: list[Clause], i: int, j: int) -> list[int]:
    """The clauses just before and after the run i..j, in its sentences, that qualify it."""
    return [k for k in (i - 1, j + 1) if 0 <= k < len(cs)
            and cs[k].sentence in (cs[i].sentence, cs[j].sentence)
            and QUALIFIER.match(cs[k].norm)]


# What makes a whole message more than a plain statement, for the one change a model may not
# make on a clause's word: replacing an entry. Each is read anywhere in the message, since no
# list of phrasings is complete ("..., says ops-bot", "Myth:", "Hypothetically, ...").
NOT_PLAIN = (
    ("asks something", re.compile(rf"[{QUESTION_MARKS}]")),
    ("quotes someone", re.compile(f"[{QUOTE_CHARS}\u2018\u2019]" + r"|(^|\s)'|'(\W*$|\s)")),
    ("reports what someone said", re.compile(
        r"\b(says?|said|saying|wrote|writes|texted|messaged|emailed|posted|tweeted|replied|"
        r"answered|claims?|claimed|reports?|reported|told|tells|asked|according to|per|"
        r"reckons|suggests|suggested|recommends|recommended|argues|argued|insists|insisted|"
        r"announced|faq)\b|"  # someone else's view: "ops recommends", not "I recommend"
        r"\b(?!(?:my|our)\b)\w+['\u2019]s\s+(opinion|view|take)\b|"  # "In Dana's opinion"
        r"^[^\S\n]*from\s+[^:\n]{1,40}:", re.I | re.M)),
    ("is conditional or hypothetical", re.compile(
        r"\b(if|imagine|hypothetically|suppose|supposing|assuming|would|could|might|maybe|"
        r"perhaps|myth|rumou?r|not true|should)\b", re.I)),
    ("takes it back", re.compile(r"(--|\u2014|\u2013|\s-)\s*not\b|\bnot\W*$|\bjk\b|\bkidding\b",
                                 re.I)),
    # a line opening with a label that names someone else's text and a colon ("Ops-bot's
    # status line: ...", "The vendor FAQ: ..."); the owner's own labels ("Correction:",
    # "Note:", "We checked with ops:") are statements
    ("reports what someone said", re.compile(
        r"^[^\S\n]*(?![^:\n]*\b(i|we|my|our)\b)[^:\n]{0,40}?(\b(?!(?:it|that|what|here|there|"
        r"let|he|she|who)['\u2019])\w+['\u2019]s\b|\b(faq|docs?|"
        r"documentation|status|changelog|wiki|readme|bot|vendor|manual|e-?mail|slack|ticket|"
        r"thread|post|article|blog|newsletter|release notes?)\b)[^:\n]{0,40}:\s",
        re.I | re.M)),
)


def not_plain(body: str) -> str | None:
    """Why an owner's message is not a plain statement (it asks, quotes, reports, supposes or
    takes it back), or None."""
    return next((why for why, pattern in NOT_PLAIN if pattern.search(body)), None)


def looks_pasted(body: str) -> str | None:
    """An owner message that carries someone else's text: long, quoted, fenced, headed."""
    if len(body) > PASTED_CHARS:
        return f"{len(body)} characters"
    m = PASTED.search(body)
    return None if m is None else repr(m.group(0).strip())


def details_not_in(text: str, sources: list[Event]) -> list[str]:
    """Numbers, addresses, links and names in `text` that none of its sources contain: a
    model that cites the owner's words can still smuggle another source's details."""
    haystack = " ".join(s.body for s in sources).lower()
    out = []
    for m in DETAIL.finditer(text):
        token = m.group(0).strip(".,;:")
        if token and token.lower() not in haystack and token not in out:
            out.append(token)
    return out


def load_memory(store: Store, home: Home) -> MemoryFile:
    """MEMORY.md with its id floor: the highest entry id ever recorded, so struck ids retire."""
    memory = MemoryFile.load(home.memory_md)
    nums = [int(i[1:]) for i in pr.entry_ids_ever_used(store) if re.fullmatch(r"m\d+", i)]
    memory.floor = max(nums, default=0)
    return memory


def reads_as_instruction(text: str) -> str | None:
    m = INSTRUCTION.search(text)
    return " ".join(m.group(0).split())[:40] if m else None


def _overlap(a: str, b: str) -> float:
    sa, sb = {stem(w) for w in content_words(a)}, {stem(w) for w in content_words(b)}
    if not sa or not sb:
        return 1.0 if a.strip().lower() == b.strip().lower() else 0.0
    return len(sa & sb) / len(sa | sb)


def _budget_problem(before: str, after: str, settings: Settings) -> str | None:
    limit = MEMORY_MD_CHARS
    if len(after) > limit:
        return (f"MEMORY.md would be {len(after)} characters, over its budget of {limit}; "
                "strike an entry first")
    if before and len(after) < (1 - MAX_SHRINK) * len(before):
        return (f"MEMORY.md would shrink from {len(before)} to {len(after)} characters, by "
                "more than a quarter")
    return None


def consider(store: Store, home: Home, settings: Settings, cand: Candidate) -> Verdict:
    """The one gate: refused, queued (doubtful, over budget, or "gated") or applied, each
    recorded as a `promotions` row with its reason; with promotions "off", nothing at all.
    A candidate that supersedes an entry naming none raises `UnknownEntry`, recording
    nothing."""
    mode = settings.memory.memory_promotions
    if mode == "off":
        return Verdict(VerdictStatus.OFF, 'memory_promotions is "off": nothing is proposed')
    old = None if cand.supersedes is None else \
        entry_to_supersede(load_memory(store, home), cand.supersedes)
    case = _Case(store, cand, " ".join(cand.text.split()), sorted(set(cand.source_events)), old)
    verdict, sources = _unread_verdict(case, settings)
    if verdict is not None:
        return verdict
    memory = load_memory(store, home)
    if (verdict := _already_verdict(case, memory)) is not None:
        return verdict
    mine = vouches.vouched_lines(store, sources)  # imported lines the owner vouched for
    doubts = _doubts(cand, case.text, sources, mine) + _supersession_doubts(case.text, old)
    after, entry = (memory.with_entry(case.text, case.ids) if old is None
                    else memory.superseding(str(old.id), case.text, case.ids))
    if (problem := _budget_problem(memory.render() if home.memory_md.exists() else "",
                                   after.render(), settings)) is not None:
        doubts.append(problem)
    if doubts:
        return case.record(VerdictStatus.QUEUED, [*doubts, *case.would])
    if mode == "gated":
        return case.record(VerdictStatus.QUEUED,
                           ['memory_promotions is "gated": every promotion waits for you',
                            *case.would])
    return _apply(case, home, after, entry, mine)


@dataclass(frozen=True)
class _Case:
    """One candidate as the gate reads it: its text (whitespace collapsed), its sorted source
    ids and the entry it would supersede."""

    store: Store
    cand: Candidate
    text: str
    ids: list[int]
    old: Entry | None

    @property
    def would(self) -> list[str]:
        return [] if self.old is None else [f"would supersede {quoted(self.old)}"]

    def record(self, status: VerdictStatus, reasons: list[str],
               entry_id: str | None = None) -> Verdict:
        reason = "; ".join(reasons)
        row = pr.add(self.store, self.text, self.ids or None, self.cand.confidence, status,
                     reason, self.cand.origin, entry_id, None if self.old is None else self.old.id)
        log.log(logging.INFO if status == VerdictStatus.APPLIED else logging.WARNING,
                "promotion %d %s: %s (%s)", row.id, status, self.text[:80], reason)
        return Verdict(status, reason, row.id, entry_id)


def _unread_verdict(case: _Case, settings: Settings) -> tuple[Verdict | None, list[Event]]:
    """The verdict before MEMORY.md is read (too long to check word by word, or refused for
    what it cites: `_refusal`), or None; and the candidate's source events."""
    if (long := _too_long(case.text, settings)) is not None:  # before any word is read
        refused, _ = _provenance(case.store, case.text, case.ids)
        return case.record(VerdictStatus.REFUSED if refused else VerdictStatus.QUEUED,
                           [refused or long, *case.would]), []
    refused, sources = _refusal(case.store, case.text, case.ids)
    if refused is not None:
        return case.record(VerdictStatus.REFUSED, [refused, *case.would]), sources
    return None, sources


def _already_verdict(case: _Case, memory: MemoryFile) -> Verdict | None:
    """The verdict when MEMORY.md already holds the candidate: applied by an earlier attempt
    whose record was lost, or a duplicate of another entry (refused); else None."""
    left = _left_by(case.store, memory, case.text, case.ids,
                    None if case.old is None else case.old.id)
    if left is not None:
        return case.record(VerdictStatus.APPLIED,
                           ["applied before: MEMORY.md holds it, written by an earlier attempt "
                            "whose record was lost", *case.would], left)
    if (duplicate := _duplicate(case.text, memory, case.old)) is not None:
        return case.record(VerdictStatus.REFUSED, [duplicate, *case.would])
    return None


def _apply(case: _Case, home: Home, after: MemoryFile, entry: Entry,
           mine: dict[int, str]) -> Verdict:
    """Apply a confident candidate: one write, the row, then the file, then the commit (a file
    that cannot be written leaves no row; a commit that fails after it leaves the entry for
    the retry to recognise, `_left_by`). An entry replaced is kept in a snapshot first, as the
    owner's own supersede keeps it."""
    applied = ["confident: the owner's own words, cited and checked",
               *[f"source #{i} is your imported line, vouched for (import batch {b})"
                 for i, b in sorted(mine.items())],
               *([] if case.old is None else [f"supersedes {quoted(case.old)}"])]
    with case.store.transaction():
        if case.old is not None:
            snapshot(home.memory_md, home.snapshots,
                     f"before [{entry.id}] superseded [{case.old.id}]")
        verdict = case.record(VerdictStatus.APPLIED, applied, entry.id)
        after.save()
    return verdict


def queue_unchecked(store: Store, cand: Candidate, why: str) -> Verdict:
    """A candidate the gate could not check (MEMORY.md unreadable, a failure of the gate's
    own): queued for the owner with the reason, so an owner's "remember" is never lost to it."""
    text = " ".join(cand.text.split())
    reason = f"not checked: {why}; review it with `coworker promotions`"
    row = pr.add(store, text, sorted(set(cand.source_events)) or None, cand.confidence,
                 VerdictStatus.QUEUED, reason, cand.origin, None, cand.supersedes)
    log.warning("promotion %d queued unchecked: %s (%s)", row.id, text[:80], why)
    return Verdict(VerdictStatus.QUEUED, reason, row.id, None)


def quoted(entry: Entry) -> str:
    """An entry as a reason names it: [m12] "its text"."""
    return f'[{entry.id}] "{entry.text}"'


def entry_to_supersede(memory: MemoryFile, key: str,
                       otherwise: str = ", or leave supersedes out") -> Entry:
    """The entry `key` names (m12, [m12] or 12), or UnknownEntry listing the entries and what
    else the caller may do (`otherwise`: the model's tool may leave the field out)."""
    k = key.strip().strip("[]").strip()
    eid = f"m{k}" if k.isdigit() else k
    entries = memory.numbered().entries
    for e in entries:
        if e.id == eid:
            return e
    known = ", ".join(f"[{e.id}] {e.text[:40]}" for e in entries) or "none"
    raise UnknownEntry(f"supersedes {key!r}: MEMORY.md has no entry [{eid}] (its entries: "
                       f"{known}); name one of them by its id{otherwise}")


def _supersession_doubts(text: str, old: Entry | None) -> list[str]:
    """Why replacing `old` with `text` waits for the owner, besides the candidate's doubts:
    a new text that keeps too few of the old entry's words may not be about the same thing
    (a verbatim clause of the owner's about something else must not delete an entry)."""
    if old is None:
        return []
    share = shared_share(old.text, [text])
    if share < MIN_SUPERSEDE_SHARE:
        return [f"keeps only {share:.0%} of the words of [{old.id}], which it would replace: "
                "it may not be about the same thing"]
    return []


def _too_long(text: str, settings: Settings) -> str | None:
    """Why a text is queued unread: longer than the gate reads word by word
    (`tokens.READ_CHARS`; a 4 MB "remember ..." took 23 s to check)."""
    if len(text) <= READ_CHARS:
        return None
    limit = MEMORY_MD_CHARS
    over = (f"; MEMORY.md's whole budget is {limit}: it cannot be approved whole"
            ) if len(text) > limit else ""
    return (f"{len(text)} characters, more than the {READ_CHARS} the gate checks word by word: "
            f"read it yourself{over}")


def _provenance(store: Store, text: str, ids: list[int]) -> tuple[str | None, list[Event]]:
    """Why the candidate is refused for what it cites (no text, no sources, sources that do
    not exist), or None; and its source events."""
    if not text:
        return "empty text", []
    if not ids:
        return "no source events: a promotion must cite the events it comes from", []
    found = ev.existing_ids(store, ids)
    missing = [i for i in ids if i not in found]
    if missing:
        return f"source events {missing} do not exist (provenance does not validate)", []
    return None, [e for e in (ev.get(store, i) for i in ids) if e is not None]


def _refusal(store: Store, text: str, ids: list[int]) -> tuple[str | None, list[Event]]:
    """Why the candidate is refused before MEMORY.md is read (`_provenance`, or a text not
    from its sources), or None; and its source events. Of a long source its head is read
    (`tokens.head`)."""
    refused, sources = _provenance(store, text, ids)
    if refused is not None:
        return refused, sources
    share = shared_share(text, [head(s.body) for s in sources])
    if share < MIN_SOURCE_SHARE:
        cut = [f"#{s.id}" for s in sources if len(s.body) > READ_CHARS]
        read = f" (of {', '.join(cut)} its first {READ_CHARS} characters)" if cut else ""
        return (f"only {share:.0%} of its words are in its sources{read}: it lost too much of "
                "its source text"), sources
    return None, sources


def _duplicate(text: str, memory: MemoryFile, replacing: Entry | None = None) -> str | None:
    """The entry `text` duplicates, as a reason; the entry it would replace does not count."""
    for entry in memory.numbered().entries:
        if replacing is not None and entry.id == replacing.id:
            continue
        if _overlap(text, entry.text) >= DUPLICATE_OVERLAP:
            return f"duplicate of [{entry.id}] {entry.text[:60]}"
    return None


def _doubts(cand: Candidate, text: str, sources: list[Event],
            mine: dict[int, str] | None = None) -> list[str]:
    """Every reason to queue the candidate for the owner rather than apply it, in order.
    `mine`: the imported sources the owner vouched for, by id (`import_keys.vouched_lines`),
    read as the owner's words."""
    mine = mine or {}
    doubts = []
    if cand.origin == "agent":
        doubts.append(AGENT_REASON)
    if cand.confidence < MIN_CONFIDENCE:
        doubts.append(f"confidence {cand.confidence:.2f} is under {MIN_CONFIDENCE}")
    doubts += [d for s in sources if (d := _source_doubt(cand, s, s.id in mine)) is not None]
    if cand.origin != "owner" and (extra := details_not_in(text, sources)):
        doubts.append(f"holds details its cited sources do not: {', '.join(extra[:4])}")
    doubts += _model_doubts(cand, text, [s.body for s in sources
                                         if s.owners_words or s.id in mine])
    if (phrase := reads_as_instruction(text)) is not None:
        doubts.append(f"reads as an instruction to the agent ({phrase!r})")
    return doubts


def _model_doubts(cand: Candidate, text: str, owner_bodies: list[str]) -> list[str]:
    """A model's or reflect's proposal that cites the owner's messages (`owner_bodies`): not a
    verbatim run of their clauses (`verbatim_problem`), or replacing an entry on the word of a
    message that is not a plain statement (`not_plain`)."""
    if cand.origin not in MODEL_ORIGINS or not owner_bodies:
        return []
    doubts = [] if (problem := verbatim_problem(text, owner_bodies)) is None else [problem]
    if cand.supersedes is not None:
        doubts += [f"it would replace an entry, and the message of yours it cites {why}"
                   for body in owner_bodies if (why := not_plain(body)) is not None]
    return doubts


def _source_doubt(cand: Candidate, s: Event, vouched: bool = False) -> str | None:
    """Why source `s` is not the owner's own words for this candidate, or None. `vouched`:
    an imported line the owner vouched for, read as the owner's message."""
    if s.imported and not vouched:
        return f"source #{s.id} was imported history, not your words"
    if not s.owners_words and not vouched:
        if cand.origin == "agent" and s.meta.get("via") == "mcp":
            return None  # the agent's own message: AGENT_REASON says it
        if s.actor == "owner" and s.author_kind == "user":
            return (f"source #{s.id} records an action of yours ({s.kind}); the text it "
                    "quotes is not your words")
        return (f"source #{s.id} was written by {s.author_kind} ({s.actor}, a {s.kind}), not "
                "by you")
    if cand.origin != "owner" and (why := looks_pasted(s.body)) is not None:
        return f"source #{s.id} looks like a pasted document ({why}), not your own words"
    return None


class ReviewError(CoworkerError):
    """A review command that cannot be carried out (exit 1)."""


class UnknownEntry(ReviewError):
    """`supersedes` names no entry of MEMORY.md."""


def approve(store: Store, home: Home, settings: Settings, promotion_id: int) -> str:
    """The owner approves a queued promotion: snapshot, then apply. Returns the entry id."""
    p = pr.get(store, promotion_id)
    if p is None:
        raise ReviewError(f"no promotion {promotion_id}; `coworker promotions` lists them")
    if p.status != pr.Status.QUEUED:
        raise ReviewError(f"promotion {promotion_id} is {p.status}, not queued; only queued "
                          "promotions can be approved")
    memory = load_memory(store, home)
    if (done := _half_done(store, memory, p)) is not None:
        # an approve interrupted after MEMORY.md was written: finish it, write nothing
        pr.decide(store, promotion_id, pr.Status.APPROVED, "approved by the owner (finished an "
                  f"interrupted approve: [{done}] was already in MEMORY.md)", done)
        return done
    old = _still_there(memory, p)
    for entry in memory.numbered().entries:
        if entry is not old and _overlap(p.text, entry.text) >= DUPLICATE_OVERLAP:
            raise ReviewError(f"promotion {promotion_id} duplicates [{entry.id}]; reject it")
    after, entry = (memory.with_entry(p.text, p.source_events or []) if old is None
                    else memory.superseding(str(old.id), p.text, p.source_events or []))
    _within_budget(after, settings)
    snapshot(home.memory_md, home.snapshots, f"before approving promotion {promotion_id}"
             + ("" if old is None else f" (supersedes [{old.id}])"))
    after.save()
    pr.decide(store, promotion_id, pr.Status.APPROVED, "approved by the owner"
              + ("" if old is None else f"; supersedes {quoted(old)}"), entry.id)
    return str(entry.id)


def _still_there(memory: MemoryFile, p: pr.Promotion) -> Entry | None:
    """The entry a queued promotion would supersede, as MEMORY.md holds it now (None when it
    supersedes nothing); ReviewError when it has left the file since."""
    if p.supersedes is None:
        return None
    try:
        return entry_to_supersede(memory, p.supersedes)
    except UnknownEntry:
        raise ReviewError(
            f"promotion {p.id} would supersede [{p.supersedes}], which is no longer in "
            "MEMORY.md (struck, superseded or edited away since it was queued); reject it, "
            "or bring the entry back first (`coworker snapshots`, `coworker restore N`)"
        ) from None


def _within_budget(after: MemoryFile, settings: Settings) -> None:
    limit = MEMORY_MD_CHARS
    if len(after.render()) > limit:
        raise ReviewError(f"MEMORY.md would be {len(after.render())} characters, over its "
                          f"budget of {limit}: strike an entry first")


@dataclass(frozen=True)
class Superseded:
    """The owner replaced entry `old` with `new`: the promotion row that records it, and the
    snapshot written before."""

    old: Entry
    new: Entry
    promotion_id: int
    snapshot: int


def supersede(store: Store, home: Home, settings: Settings, old_id: str, text: str,
              event_id: int) -> Superseded:
    """The owner's own command: replace entry `old_id` with `text`, whose source is the
    owner's event `event_id`. Snapshot, then write MEMORY.md; recorded as an applied promotion
    of origin "owner". Run it inside the transaction that wrote the event: a refusal
    (unknown entry, a duplicate, over budget) raises before anything is written."""
    memory = load_memory(store, home)
    old = entry_to_supersede(memory, old_id)
    body = " ".join(text.split())
    if not body:
        raise ReviewError(f"nothing to put in place of [{old.id}]: give the new text")
    if (duplicate := _duplicate(body, memory, old)) is not None:
        raise ReviewError(f"not superseded: the new text is a {duplicate}")
    after, entry = memory.superseding(str(old.id), body, [event_id])
    _within_budget(after, settings)
    snap = snapshot(home.memory_md, home.snapshots, f"before superseding [{old.id}]")
    row = pr.add(store, body, [event_id], 1.0, pr.Status.APPLIED,
                 f"superseded by the owner: {quoted(old)}", "owner", entry.id, old.id)
    after.save()
    log.info("promotion %d applied: [%s] supersedes [%s] (the owner's command)", row.id,
             entry.id, old.id)
    return Superseded(old, entry, row.id, snap.number)


def _half_done(store: Store, memory: MemoryFile, p: pr.Promotion) -> str | None:
    """The entry an interrupted approve of `p` left in MEMORY.md (`_left_by`)."""
    return _left_by(store, memory, " ".join(p.text.split()), list(p.source_events or ()),
                    p.supersedes)


def _left_by(store: Store, memory: MemoryFile, text: str, sources: list[int],
             supersedes: str | None) -> str | None:
    """The entry an interrupted write left in MEMORY.md: exactly `text` and its `sources`,
    under an id no promotion or strike has recorded. None when there is none."""
    used = set(pr.entry_ids_ever_used(store))
    for entry in memory.entries:
        if entry.id and entry.id not in used and entry.text == text and \
                tuple(entry.sources) == tuple(sources) and entry.supersedes == supersedes:
            return entry.id
    return None


def reject(store: Store, promotion_id: int, why: str | None) -> None:
    p = pr.get(store, promotion_id)
    if p is None:
        raise ReviewError(f"no promotion {promotion_id}; `coworker promotions` lists them")
    if p.status != pr.Status.QUEUED:
        raise ReviewError(f"promotion {promotion_id} is {p.status}, not queued")
    pr.decide(store, promotion_id, pr.Status.REJECTED,
              f"rejected by the owner: {why or 'no reason given'}")


REMEMBER = re.compile(r"^\s*remember(?:\s*:|\s+that\b|\b)\s*(?P<text>.+)$", re.I | re.S)


def from_message(e: Event) -> Candidate | None:
    """A message beginning "remember": from the owner (tell, the inbox), a candidate in the
    owner's own words (origin "owner"); from another agent over MCP, a candidate that `consider`
    always queues (origin "agent"). Anything else, imported history above all, proposes
    nothing."""
    if e.id is None or e.kind != "message" or e.imported:
        return None
    if e.owners_words:
        origin = "owner"
    elif e.author_kind == "agent" and e.meta.get("via") == "mcp":
        origin = "agent"
    else:
        return None
    m = REMEMBER.match(e.body)
    if not m:
        return None
    return Candidate(m["text"].strip().rstrip("."), [e.id], 1.0, origin)


from_owner_message = from_message  # the loop's name for it
