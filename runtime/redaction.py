"""`coworker redact ID --why TEXT`: take a secret (or anything else) back out of the history.

Owns the one audited exception to append-only, as orchestration; the SQL is in
runtime/store/redactions.py. `redact_event` works in ONE transaction:

1. records a `redactions` row and overwrites the event's body with its marker,
   "[redacted #<id>: <why>]" (meta becomes {"redacted": <id>}), in whichever table holds it
   (hot or archive), re-indexing it in events_fts (delete with the exact old values, insert
   the new) and deleting its tags (a tag can hold the secret too) and its vectors; a decision
   recorded from the event gets the marker too;
2. rewrites every sealed rollup whose span covers the event, at every level: each token of the
   old body that is rare (in no other event: document frequency at most 1 in `events_vocab`,
   read before the overwrite) becomes "[redacted]", and so does any verbatim copy of the whole
   old body or of one of its sentences, and a tag (reflect's keywords) that is such a token
   is dropped; each rollup changed gets its own `redactions` row and is re-indexed in
   rollups_fts the same way;
3. scrubs, the same way, every other copy of event text the database keeps
   (`redactions.COPIES`: queued promotions and their reasons, pins, the side-effect ledger's
   inputs and results, approvals' arguments and reasons, inputs' errors, telemetry), so that
   neither a later backup, nor an approval into MEMORY.md, nor `actions --all` holds it;
4. appends a `redaction` event (actor owner, author_kind user): who, why, which event, which
   rollups, how many copies.

A word the secret shares with other events (a common word) stays in the rollups: only what
this event alone said is taken out. A secret written in two events needs two redactions (the
second finds it rare once the first is gone).

So that no backup taken later holds the old bytes, the connection runs with
`PRAGMA secure_delete = ON` (freed cells and pages are zeroed), and after the commit the FTS
indexes are optimized (their old segments hold the old terms until merged) and the WAL is
checkpointed with TRUNCATE. The optimize rewrites each whole index, so it costs time in
proportion to the index (the same work as reflect's index step, its `index_seconds`), however
small the redaction. Backups taken before,
MEMORY.md and its snapshots (an entry applied before the redaction), and copies outside the
database are not touched: the report says
what was done, the owner handles the rest.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from .errors import StoreError, UsageError
from .memory.cards import sentences
from .memory.tokens import STOPWORDS, stem, words
from .secrecy import REDACTED
from .store import Event, Store
from .store import events as ev
from .store import redactions as rs
from .store import tags as tg
from .store.redactions import RedactionRefused

__all__ = ["RedactionRefused", "RedactionReport", "redact_event", "scrubber"]

log = logging.getLogger(__name__)

_CITE = re.compile(r"\[(?:rollup )?#\d+\]")
_WORD_CHAR = re.compile(r"[^\W_]")
_MIN_SENTENCE = 12


@dataclass
class RedactionReport:
    event_id: int
    redaction_id: int
    marker: str
    source: str                                   # 'hot' or 'archive'
    rollups: list[int] = field(default_factory=list)
    rare_tokens: int = 0
    copies: dict[str, int] = field(default_factory=dict)  # rows scrubbed in rs.COPIES' tables
    event: int | None = None                      # the `redaction` event's id
    compacted: bool = True                        # the WAL was folded in and truncated

    def line(self) -> str:
        rolls = (f"{len(self.rollups)} rollup(s) rewritten ({', '.join(map(str, self.rollups))})"
                 if self.rollups else "no rollup quoted it")
        if self.copies:
            rolls += "; copies scrubbed in " + ", ".join(
                f"{table} ({n})" for table, n in sorted(self.copies.items()))
        tail = "" if self.compacted else (
            "; compaction did not finish while another connection was busy, so old bytes may "
            "linger in the file: stop the coworker (the WAL folds in when the last connection "
            "closes) and run `coworker reflect` (it merges the indexes)")
        return (f"redacted event {self.event_id} (redaction #{self.redaction_id}, "
                f"{self.source}); {rolls}; recorded as event {self.event}{tail}")


def _fts_term(word: str) -> str:
    """The FTS index's term for a word (the one tokenizer's stem matches the index's)."""
    return stem(word)


def rare_tokens(store: Store, body: str) -> list[str]:
    """The body's words that no other event holds (document frequency <= 1 by FTS term; a word
    the index does not know counts as rare). Stopwords are common by nature and never taken."""
    toks = list(dict.fromkeys(w for w in words(body) if w not in STOPWORDS))
    terms = {w: _fts_term(w) for w in toks}
    stems = sorted(set(terms.values()))
    df: dict[str, int] = {}
    for i in range(0, len(stems), 500):
        df.update(ev.doc_freqs(store, stems[i:i + 500]))
    return [w for w in toks if df.get(terms[w], 0) <= 1]


def scrubber(body: str, rare: list[str]):  # noqa: ANN201 - returns str -> str
    """A function that replaces, in one pass, verbatim copies of `body` and of its sentences
    and every rare token (whole words, any case) with [redacted]; citations like [#12] stay.

    At each place in a text the longest copy that starts there is taken first, then a rare
    word, then a citation (as one regex alternation of them all would: a citation starts with
    "[", which no word does);
    the copies are looked up by their first characters and the words in a set, so a text
    costs its length, however many copies and words there are (the alternation took 73 s
    for a 1 MB secret)."""
    pieces: set[str] = set()
    whole = body.strip()
    if whole:
        pieces.add(whole)
    for s in sentences(body):  # as the ladder's extractive summaries quote them
        pieces.add(s)
        if s.endswith("…"):
            pieces.add(s[:-1])
    for s in re.split(r"(?<=[.!?])\s+|\n+", body):
        if len(s.strip()) >= _MIN_SENTENCE:
            pieces.add(s.strip())
    pieces.discard("")
    if not pieces and not rare:
        return lambda text: text
    copies = _Copies(pieces)
    tokens = _Words(rare)

    def scrub(text: str | None) -> str | None:
        if not text:
            return text
        out: list[str] = []
        i = last = 0
        while i < len(text):
            n = copies.at(text, i) or tokens.at(text, i)
            if n:
                out += (text[last:i], REDACTED)
                i = last = i + n
            elif cite := _CITE.match(text, i):
                i = cite.end()
            else:
                i += 1
        return "".join(out) + text[last:] if out else text

    return scrub


def _fold(c: str) -> str:
    """One character as the rare words are compared, in any case: its lower case's upper case
    (ı, i and I; ſ, s and S; ς, σ and Σ; ß and ẞ; µ and μ each meet), and İ as I. Wherever a
    case-blind regex takes two characters for one, so does this (it may take a few more)."""
    return "I" if c == "İ" else c.lower().upper()


class _Words:
    """Rare words to find as whole words, in any case, by their folded characters in a set.

    A word of the secret may hold U+0307 (İ lowercased is i and a combining dot), which is no
    word character: a run read here goes through it, and a word may end wherever the text's
    word does (at the run's end, or at such a mark)."""

    _RUN = re.compile(r"(?:[^\W_]|[\u0307\u0345])+")

    def __init__(self, rare: list[str]) -> None:
        self.keys = {tuple(map(_fold, w)) for w in rare if w}
        self.longest = max(map(len, self.keys), default=0)

    def at(self, text: str, i: int) -> int:
        """The length of the rare word that starts at `i`, or 0."""
        if not self.keys or (i and _WORD_CHAR.match(text, i - 1)):
            return 0
        run = self._RUN.match(text, i, min(len(text), i + self.longest + 1))
        if run is None or not _WORD_CHAR.match(text, i):
            return 0
        ends = [j for j in range(min(len(run.group()), self.longest), 0, -1)
                if not _WORD_CHAR.match(text, i + j)]
        if not ends:
            return 0
        key = tuple(map(_fold, run.group()[:ends[0]]))
        return next((j for j in ends if key[:j] in self.keys), 0)


class _Copies:
    """Verbatim copies to find: each looked up by its first PREFIX characters (a shorter one
    by its first), longest first."""

    PREFIX = 8

    def __init__(self, pieces: set[str]) -> None:
        self.long: dict[str, list[str]] = {}
        self.short: dict[str, list[str]] = {}
        for p in sorted(pieces, key=len, reverse=True):
            if len(p) >= self.PREFIX:
                self.long.setdefault(p[:self.PREFIX], []).append(p)
            else:
                self.short.setdefault(p[0], []).append(p)

    def at(self, text: str, i: int) -> int:
        """The length of the longest copy that starts at `i`, or 0."""
        for p in (*self.long.get(text[i:i + self.PREFIX], ()), *self.short.get(text[i], ())):
            if text.startswith(p, i):
                return len(p)
        return 0


def redact_event(store: Store, event_id: int, why: str, actor: str = "owner") -> RedactionReport:
    """Redact one event (see the module docstring). RedactionRefused (exit 1) for an unknown
    id or an event already redacted; UsageError for an empty reason."""
    why = " ".join((why or "").split())
    if not why:
        raise UsageError("say why: `coworker redact ID --why \"leaked API key\"`")
    previous = rs.secure_delete(store, True)
    try:
        with store.transaction():
            old = rs.event_text(store, event_id)
            rare = rare_tokens(store, old.body)  # before the overwrite changes the index
            scrub = scrubber(old.body, rare)
            rid, text = rs.overwrite_event(store, old, why, actor)
            report = RedactionReport(event_id, rid, text, old.source, rare_tokens=len(rare))
            for r in rs.rollups_covering(store, event_id):
                new = {"title": scrub(r.title), "body": scrub(r.body), "terms": scrub(r.terms),
                       "vocab": scrub(r.vocab) if r.vocab else None}
                quoting = [w for w, _ in tg.listing(store, "rollup", r.id) if scrub(w) != w]
                if not quoting and (new["title"], new["body"], new["terms"],
                                    new["vocab"] or "") == (r.title, r.body, r.terms,
                                                            r.vocab or ""):
                    continue
                rs.rewrite_rollup(store, r.id, why=f"event {event_id} redacted (#{rid}): {why}",
                                  actor=actor, drop_tags=quoting, **new)
                report.rollups.append(r.id)
            report.copies = rs.scrub_copies(store, scrub)
            rolls = ", ".join(map(str, report.rollups)) or "none"
            report.event = ev.append(store, Event(
                kind="redaction", actor=actor, author_kind="user",
                body=f"{actor} redacted event {event_id}: {why} (rollups rewritten: {rolls})",
                meta={"event_id": event_id, "redaction_id": rid, "why": why, "by": actor,
                      "rollups": report.rollups, "copies": report.copies,
                      "source": old.source}))
        try:
            report.compacted = rs.compact(store)
        except StoreError as e:  # committed already; only the compaction waits
            log.warning("redaction #%d committed, but compacting the file failed: %s",
                        report.redaction_id, e)
            report.compacted = False
    finally:
        rs.secure_delete(store, previous)
    return report
