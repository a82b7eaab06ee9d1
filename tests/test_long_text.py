"""One long text costs a bounded read (ADR-0032): every path that reads a text's words again on
each call reads its head (`tokens.head`, READ_CHARS characters), and the paths that cannot cut
a text (the gate, docfreq's counts, the importer, a tick's pending inputs) bound it another way.

The cost is counted, never timed: stemming is the work (snowball, once per distinct word), and
`tokens.stem`'s cache says how many distinct words a path stemmed. The long message here is
400,000 characters of distinct made-up words (about 52,000 of them); its head holds about
2,700. Before the caps each path below stemmed all of them, on every call.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import redaction
from runtime.home import Home
from runtime.importer import BadLine, import_file
from runtime.lab.bench_long import made_up
from runtime.loop import perception
from runtime.memory import docfreq, gate, ladder
from runtime.memory.cards import sentences
from runtime.memory.recall import coverage, recall
from runtime.memory.search import search
from runtime.memory.tokens import READ_CHARS, VOCAB_CHARS, head, stem
from runtime.memory.walk import walk
from runtime.secrecy import REDACTED
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import inputs as inputs_store
from runtime.store import promotions as pr
from runtime.store import rollups as rl

from .conftest import coworker, write_config

LONG_CHARS = 400_000
BOUND = 8_000  # distinct words a path may stem for one long text: its head holds ~2,700


LONG = made_up(LONG_CHARS)
WORDS = LONG.split()
INSIDE = WORDS[100:102]  # said in the head
PAST = WORDS[-3]  # said past the head only


def _stemmed(fn, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
    """`fn`'s result, and how many distinct words it stemmed (from a cold cache)."""
    stem.cache_clear()
    out = fn(*args, **kwargs)
    return out, stem.cache_info().misses


def _at(minutes: int) -> str:
    t = datetime(2026, 11, 2, 9, tzinfo=UTC) + timedelta(minutes=minutes)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def store(offline_home: Home):
    s = Store.open(offline_home.db_path)
    with s.transaction():
        for i in range(5):
            ev.append(s, Event(kind="message", body=f"note {i} about the parser deploy",
                               actor="owner", author_kind="user", ts=_at(i)))
        ev.append(s, Event(kind="message", body=LONG, actor="owner", author_kind="user",
                           ts=_at(10)))
        for i in range(12):  # an hour apart: the long text's episode of ten is complete
            ev.append(s, Event(kind="message", body=f"later note {i} about billing",
                               actor="owner", author_kind="user", ts=_at(60 * (i + 1))))
    yield s
    s.close()


def _long_id(store: Store) -> int:
    return int(store.scalar("SELECT id FROM events WHERE length(body) > ?", (READ_CHARS,)))


def test_head_cuts_at_a_blank_and_keeps_a_short_text_whole():
    assert head("short text") == "short text"
    text = "abcdefghi " * 5000
    cut = head(text)
    assert len(cut) <= READ_CHARS and cut.endswith("abcdefghi"), "no word is cut in two"
    assert head("x" * 50_000) == "x" * READ_CHARS, "one endless word is cut at the limit"


def test_coverage_reads_the_head_of_each_body():
    assert coverage(INSIDE, [LONG]) == 1.0
    assert coverage([PAST], [LONG]) == 0.0, "a word past the head is not read"
    assert coverage([PAST], [LONG[-2000:]]) == 1.0


def test_recall_scores_a_long_candidate_by_its_head(store: Store):
    result, stemmed = _stemmed(recall, store, " ".join(INSIDE))
    assert [h.event.id for h in result.hits][:1] == [_long_id(store)]
    assert stemmed < BOUND, f"recall stemmed {stemmed} words of one long text"


def test_search_coverage_reads_the_head(store: Store):
    hits, stemmed = _stemmed(search, store, " ".join(INSIDE), exhaustive=True)
    assert [h.id for h in hits][:1] == [_long_id(store)]
    assert stemmed < BOUND, f"search stemmed {stemmed} words"


def test_reflect_seals_a_long_text_from_its_head_and_the_walk_reads_a_bounded_card(
        store: Store):
    report, stemmed = _stemmed(ladder.seal, store, 10)
    assert report.sealed.get(1), report
    assert stemmed < BOUND, f"sealing stemmed {stemmed} words"
    long_id = _long_id(store)
    card = next(r for r in rl.at_level(store, 1)
                if (r.first_event or 0) <= long_id <= (r.last_event or 0))
    assert INSIDE[0] in card.vocab.split() and PAST not in card.vocab.split()
    assert len(card.vocab) <= VOCAB_CHARS
    result, stemmed = _stemmed(walk, store, " ".join(INSIDE))
    assert not result["refused"] and long_id in [f["id"] for f in result["events"]], result
    assert stemmed < BOUND, f"the walk stemmed {stemmed} words"


def test_the_walk_reads_a_bounded_part_of_a_card_sealed_before_the_cap(store: Store):
    long_id = _long_id(store)
    rl.seal(store, level=1, first_event=long_id, last_event=long_id,
            source_range=f"{long_id}-{long_id}", first_ts=_at(10), last_ts=_at(10),
            title="an old card", body="sealed whole", terms=" ".join(INSIDE), method="extractive",
            vocab=LONG)  # a card as reflect wrote it before VOCAB_CHARS
    result, stemmed = _stemmed(walk, store, " ".join(INSIDE))
    assert long_id in [f["id"] for f in result["events"]], result
    assert stemmed < 4 * BOUND, f"the walk stemmed {stemmed} words of an old card"


def test_docfreq_counts_again_after_a_long_append_and_stay_exact(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        ev.append(store, Event.owner_message("the parser deploy", "tell"))
        stems = [stem(w) for w in ("parser", "deploy", INSIDE[0], PAST)]
        docfreq.doc_freqs(store, stems)
        ev.append(store, Event.owner_message(LONG, "tell"))
        counts, stemmed = _stemmed(docfreq.doc_freqs, store, stems)
        found = ev.doc_freqs(store, stems)
        assert counts == ({s: found.get(s, 0) for s in stems}, ev.total(store))
        assert counts[0][stem(PAST)] == 1, "a word past the head is counted: counts are exact"
        assert stemmed < BOUND, f"catching up stemmed {stemmed} words"


def test_the_gate_queues_a_text_longer_than_it_reads_without_reading_its_words(
        offline_home: Home, store: Store):
    settings = offline_home.settings()
    source = _long_id(store)
    text = " ".join(LONG.split())
    v, stemmed = _stemmed(gate.consider, store, offline_home, settings,
                          gate.Candidate(text, [source], 1.0, "owner"))
    assert v.status == "queued", v
    assert f"{READ_CHARS}" in v.reason and "word by word" in v.reason
    assert "cannot be approved whole" in v.reason, "over the budget too"
    assert stemmed == 0
    missing = gate.consider(store, offline_home, settings,
                            gate.Candidate(text, [10**6], 1.0, "owner"))
    assert missing.status == "refused" and "do not exist" in missing.reason, missing


def test_a_short_candidate_citing_a_long_source_reads_its_head(offline_home: Home,
                                                               store: Store):
    settings = offline_home.settings()
    source = _long_id(store)
    inside = gate.consider(store, offline_home, settings,
                           gate.Candidate(" ".join(WORDS[100:110]), [source], 0.9, "tool"))
    assert inside.status == "queued", inside  # gated: it waits, read
    past, stemmed = _stemmed(gate.consider, store, offline_home, settings,
                             gate.Candidate(" ".join(WORDS[-10:]), [source], 0.9, "tool"))
    assert past.status == "refused", past
    assert f"of #{source} its first {READ_CHARS} characters" in past.reason, past.reason
    assert stemmed < BOUND


def test_promotions_table_shows_a_long_text_cut_and_json_whole(offline_home: Home,
                                                              store: Store):
    with store.transaction():
        pr.add(store, LONG, [_long_id(store)], 1.0, pr.Status.QUEUED, "too long", "owner",
               None, None)
    table = coworker("promotions")
    assert table.returncode == 0, table.stderr
    shown = " ".join(table.stdout.split())
    assert f"({len(LONG)} characters;" in shown and "--json" in shown, shown
    assert len(table.stdout) < 5000
    whole = coworker("promotions", "--json")
    assert json.loads(whole.stdout.splitlines()[0])["text"] == LONG


def _line(body: str, minute: int) -> str:
    return json.dumps({"ts": _at(minute), "kind": "message", "actor": "dana", "body": body})


def test_import_refuses_a_line_over_its_limit_and_skips_it_on_request(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("runtime.importer.LINE_MAX_BYTES", 1000)
    pad = 1000 - len(_line("", 2))
    at_limit = _line("y" * pad, 2)
    assert len(at_limit.encode()) == 1000
    path = offline_home.root / "history.jsonl"
    path.write_text("\n".join([_line("first", 1), at_limit, _line("z" * 5000, 3),
                               _line("last", 4)]) + "\n", encoding="utf-8")
    with Store.open(offline_home.db_path) as store:
        with pytest.raises(BadLine) as bad:
            import_file(store, path)
        assert bad.value.line_no == 3, bad.value
        assert re.search(r"5,\d{3} bytes", str(bad.value)), str(bad.value)
        assert "over the 1,000 bytes" in str(bad.value), str(bad.value)
        assert ev.total(store) == 0, "nothing of the file is written"
    r = coworker("import", "--skip-bad", str(path))
    assert r.returncode == 0, r.stderr
    assert "skipped line 3" in r.stdout + r.stderr
    with Store.open(offline_home.db_path) as store:
        bodies = [row[0] for row in store.query("SELECT body FROM events ORDER BY id")]
    assert bodies == ["first", "y" * pad, "last"], [b[:20] for b in bodies]


def test_a_tick_reads_the_inputs_it_may_take_and_resumes_by_id(
        offline_home: Home, monkeypatch: pytest.MonkeyPatch):
    write_config(offline_home.root)
    monkeypatch.setattr("runtime.loop.perception.MAX_INPUTS_PER_TURN", 2)
    settings = offline_home.settings()
    read: list[int] = []
    real = inputs_store.history_of

    def counted(store, ids):  # noqa: ANN001, ANN202
        read.extend(ids)
        return real(store, ids)

    monkeypatch.setattr(inputs_store, "history_of", counted)
    with Store.open(offline_home.db_path) as store:
        ids = [inputs_store.add_message(store, Event.owner_message(f"message {i}", "tell"))
               for i in range(12)]
        got = perception.perceive(offline_home, store, settings, perception.DueRituals())
        assert got.perception.input_ids == ids[:2] and got.resume is None and got.more
        assert len(read) <= 3, f"a tick read {len(read)} pending inputs to take 2"
        # an attempt on the next two was killed; then an older input came back (retry)
        ev.append(store, Event(kind="tick", body="tick", actor="coworker",
                               author_kind="system", meta={"inputs": ids[2:4]}))
        inputs_store.consume(store, ids[:2], None)
        store.execute("UPDATE inputs SET status = 'set_aside' WHERE event_id = ?", (ids[0],))
        inputs_store.retry(store, [ids[0]])
        got = perception.perceive(offline_home, store, settings, perception.DueRituals())
        assert got.resume is not None and got.perception.input_ids == ids[2:4], got


# --- the scrubber: one pass, the same result as one alternation of every copy and word ------

def _reference(body: str, rare: list[str]):  # noqa: ANN202
    """The scrubber as it was: one regex alternation, the copies longest first, then a
    citation, then the rare words (whole words, any case)."""
    pieces = {body.strip()}
    for s in sentences(body):
        pieces.add(s)
        if s.endswith("…"):
            pieces.add(s[:-1])
    for s in re.split(r"(?<=[.!?])\s+|\n+", body):
        if len(s.strip()) >= 12:
            pieces.add(s.strip())
    pieces.discard("")
    literal = [re.escape(p) for p in sorted(pieces, key=len, reverse=True)]
    tokens = [re.escape(t) for t in sorted(set(rare), key=len, reverse=True)]
    alts = [*literal, r"(?P<cite>\[(?:rollup )?#\d+\])"]
    if tokens:
        alts.append(r"(?<![^\W_])(?i:" + "|".join(tokens) + r")(?![^\W_])")
    if not literal and not tokens:
        return lambda text: text
    pattern = re.compile("|".join(alts))
    return lambda text: text and pattern.sub(
        lambda m: m.group(0) if m.group("cite") else REDACTED, text)


# with the letters a case-blind regex and str.lower() read differently: İ lowercases to i and
# a combining dot (U+0307, no word character); ı, ſ, ς, µ, ẞ and the Kelvin sign K each meet
# a plain letter in some case
_BITS = st.sampled_from(["key", "Key", "KEY", "sk", " ", ". ", "\n", "[#12]", "[rollup #3]",
                         "é", "ß", "ẞ", "_", "x1", "Secret value here", "!", "a", "ab.", "İ",
                         "ı", "I", "i", "i\u0307", "\u0307", "ſ", "S", "ς", "Σ", "σ", "µ", "μ",
                         "\u212a", "k"])
_RARE = ["key", "sk", "x1", "secret", "é", "value", "a", "i\u0307", "i\u0307k", "σ", "ß", "ı",
         "μs"]


@given(body=st.lists(_BITS, max_size=12).map("".join),
       rare=st.lists(st.sampled_from(_RARE), max_size=3),
       text=st.lists(_BITS, max_size=24).map("".join))
@settings(max_examples=500)
def test_scrubber_equals_one_alternation_of_every_copy_and_word(body: str, rare: list[str],
                                                                 text: str):
    assert redaction.scrubber(body, rare)(text) == _reference(body, rare)(text)


def test_the_scrubber_finds_copies_among_thousands_of_sentences():
    said = [f"Sentence {i} holds the code {w}." for i, w in enumerate(WORDS[:3000])]
    scrub = redaction.scrubber(" ".join(said), [WORDS[5]])
    quoted = f"[#12] {said[7]} and {said[2999]}, then {WORDS[5].upper()} and {WORDS[6]}"
    assert scrub(quoted) == f"[#12] {REDACTED} and {REDACTED}, then {REDACTED} and {WORDS[6]}"
