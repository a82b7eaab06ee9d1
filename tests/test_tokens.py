"""memory.tokens, the one tokenizer: German, French and Polish text split and folded as the FTS5
tables do, and found by walk, recall and `coworker search` by words with non-ASCII letters."""

from __future__ import annotations

import re
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.home import Home
from runtime.memory import tokens
from runtime.memory.cards import Distinctive, content_words
from runtime.memory.recall import extract_terms, recall
from runtime.memory.search import search
from runtime.memory.walk import query_tokens, walk
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import rollups as rl

from .conftest import coworker

GERMAN = "Müller traf Zürich im Café"
FRENCH = "François a goûté la crème brûlée à Besançon"
POLISH = "Zażółć gęślą jaźń w Łodzi"
TEXTS = (GERMAN, FRENCH, POLISH,
         "Die Straße in Köln führt über den Fluss; Bärbel übernimmt Grüße.",
         "Où est l'hôpital? Noël, garçon, naïve, cœur, Éloïse, déjà-vu.",
         "Łukasz Żółkiewski zjadł źdźbło; pięćset złotych, Kraków i Gdańsk.")


def fts_tokenizer() -> str:
    """The tokenizer the history's FTS tables are created with, read from a fresh schema."""
    with tempfile.TemporaryDirectory() as d:
        with Store.open(Path(d) / "fresh.db") as store:
            sql = [r[0] for r in store.query(
                "SELECT sql FROM sqlite_master WHERE name IN ('events_fts', 'rollups_fts')")]
    found = {m.group(1) for s in sql if (m := re.search(r"tokenize='([^']*)'", s))}
    assert len(sql) == 2 and len(found) == 1, sql
    return found.pop()


def sqlite_terms(text: str, tokenize: str) -> list[str]:
    """The terms SQLite's FTS5 makes of `text` with `tokenize`, in order."""
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{tokenize}')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    db.execute("INSERT INTO t(rowid, x) VALUES (1, ?)", (text,))
    terms = [r[0] for r in db.execute("SELECT term FROM v ORDER BY offset")]
    db.close()
    return terms


# --- the tokens ----------------------------------------------------------------------------------

def test_words_of_german_french_and_polish_text():
    assert tokens.words(GERMAN) == ["müller", "traf", "zürich", "im", "café"]
    assert tokens.words(FRENCH) == ["françois", "a", "goûté", "la", "crème", "brûlée", "à",
                                    "besançon"]
    assert tokens.words(POLISH) == ["zażółć", "gęślą", "jaźń", "w", "łodzi"]


ASCII_TEXT = st.text(alphabet=st.characters(max_codepoint=127), max_size=80)


@given(ASCII_TEXT)
def test_ascii_text_is_read_as_unicode61_reads_it(text: str):
    """`words` reads an ASCII text by translate and split, not the pattern other text goes
    through: both give FTS5's own tokens (unicode61, no stemming), in order."""
    assert tokens.words(text) == [w.lower() for w in tokens.WORD.findall(text)]
    assert tokens.words(text) == sqlite_terms(text, "unicode61")


def test_the_walk_reads_query_words_as_recall_and_search_do():
    # The walk used to read [a-z0-9]+ only: m, ller, traf, z, rich, caf.
    assert query_tokens(GERMAN) == ["müller", "traf", "zürich", "café"]  # "im": a stopword
    for text in TEXTS:
        assert query_tokens(text) == tokens.query_words(text)
    assert query_tokens("The Parser's BUGS, and triage-2!") == ["parser", "s", "bugs",
                                                                "triage", "2"]


def test_a_decomposed_accent_is_part_of_its_letter():
    assert tokens.words("Cafe\u0301 cre\u0300me") == ["café", "crème"]
    assert tokens.stem("Cafe\u0301") == tokens.stem("café") == "cafe"


def test_fold_removes_diacritics_as_unicode61_does():
    assert [tokens.fold(w) for w in tokens.words(POLISH)] == ["zazołc", "gesla", "jazn", "w",
                                                             "łodzi"]
    assert tokens.fold("Müller") == "muller" and tokens.fold("straße") == "straße"
    assert tokens.fold("Cœur") == "cœur" and tokens.fold("Øre") == "øre"


def test_the_fts_tables_use_the_tokenizer_this_module_follows():
    assert fts_tokenizer() == "porter unicode61 remove_diacritics 2"
    assert ev._WORD.pattern == tokens.WORD.pattern  # fts_query splits terms the same way


@pytest.mark.parametrize("text", TEXTS)
def test_stems_are_the_terms_the_fts_index_holds(text: str):
    """What recall, cards and the walk compare, and what doc_freqs looks up in events_vocab
    (these texts hold no word of two letters ending in s: see memory.tokens' known gaps)."""
    assert [tokens.stem(w) for w in tokens.words(text)] == sqlite_terms(text, fts_tokenizer())


def test_a_number_is_its_own_stem_as_porter_and_the_index_leave_it():
    """`stem` returns digits unstemmed without asking porter (a history is full of numbers
    seen once, and the pure-Python stemmer costs tens of microseconds a new word)."""
    numbers = ["0", "7", "42", "1980", "3079", "00012", "9" * 64, "12345678901234567890"]
    for n in numbers:
        assert tokens.stem(n) == tokens._stemmer.stemWord(n) == n
    assert [tokens.stem(n) for n in numbers] == sqlite_terms(" ".join(numbers), fts_tokenizer())
    # letters with digits still go to porter: "1980s" is 1980, "v2s" is v2
    assert tokens.stem("1980s") == tokens._stemmer.stemWord("1980s") == "1980"
    assert sqlite_terms("1980s v2s", fts_tokenizer()) == ["1980", "v2"]
    assert [tokens.stem("1980s"), tokens.stem("v2s")] == ["1980", "v2"]


def test_every_latin_letter_folds_as_sqlite_folds_it():
    letters = [chr(c) for c in [*range(0xC0, 0x250), *range(0x1E00, 0x1F00)]
               if re.fullmatch(r"[^\W_]", chr(c))]
    word = "".join(letters)
    assert len(letters) > 400
    assert [tokens.fold(w) for w in tokens.words(word)] == sqlite_terms(
        word, "unicode61 remove_diacritics 2")


def test_content_words_and_terms_keep_their_letters():
    assert content_words(FRENCH) == ["françois", "goûté", "crème", "brûlée", "besançon"]
    assert extract_terms("Müller und Mueller trafen Müllers Café") == [
        "müller", "mueller", "trafen", "café"]  # müllers: the stem of müller


# --- found by walk, recall and search --------------------------------------------------------------

START = datetime(2026, 3, 2, 9, tzinfo=UTC)
NEEDLES = {GERMAN: ("Zürich", "Müller zürich"), FRENCH: ("Besançon", "crème brûlée"),
           POLISH: ("Łodzi", "gęślą jaźń")}


def seed(store: Store) -> dict[str, int]:
    """Forty filler notes a day apart around the three texts; their ids by text."""
    bodies = [f"Routine standup note number {i} about the deploy pipeline." for i in range(40)]
    for i, text in enumerate(NEEDLES):
        bodies[5 + 10 * i] = text
    ids = ev.append_many(store, [
        Event(kind="note", body=b, actor="coworker", author_kind="agent",
              ts=(START + timedelta(hours=6 * i)).isoformat().replace("+00:00", "Z"))
        for i, b in enumerate(bodies)])
    return {b: i for b, i in zip(bodies, ids, strict=True) if b in NEEDLES}


def found_by_every_door(store: Store, ids: dict[str, int]) -> None:
    for text, queries in NEEDLES.items():
        for q in queries:
            w = walk(store, q)
            assert not w["refused"], (q, w["reason"])
            assert ids[text] in [e["id"] for e in w["events"]], (q, w)
            assert w["matched_tokens"] == tokens.query_words(q)
            r = recall(store, q)
            assert r.hits and r.hits[0].event.id == ids[text], (q, r.terms)
            hits = [h for h in search(store, q) if h.kind == "event"]
            assert hits and hits[0].id == ids[text], q


def test_each_language_is_found_in_history_no_rollup_covers(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        ids = seed(store)
    with Store.open(offline_home.db_path, readonly=True) as ro:
        assert rl.episodes_cover_up_to(ro) == 0
        found_by_every_door(ro, ids)
        # FTS folds diacritics, and the walk's own scoring agrees: zurich finds Zürich
        plain = walk(ro, "zurich muller")
        assert not plain["refused"] and plain["matched_tokens"] == ["zurich", "muller"]


def test_each_language_is_found_through_the_ladder_after_reflect(offline_home: Home):
    from rituals.reflect import reflect

    with Store.open(offline_home.db_path) as store:
        ids = seed(store)
        reflect(offline_home, offline_home.settings(), store, now=START + timedelta(days=30))
        assert rl.episodes_cover_up_to(store) >= max(ids.values())
        # the episode's card keeps the letters a person would type
        vocab = " ".join(r.vocab or "" for r in rl.at_level(store, 1))
        assert "zürich" in vocab.split() and "łodzi" in vocab.split()
        assert Distinctive(store).idf([tokens.stem("Zürich")])[tokens.stem("Zürich")] < \
            Distinctive(store).idf(["neverseen"])["neverseen"]  # its df is read from the index
    with Store.open(offline_home.db_path, readonly=True) as ro:
        found_by_every_door(ro, ids)
        w = walk(ro, "gęślą jaźń")
        assert any(t["why"].startswith("event in span") for t in w["trace"]), w["trace"]


def test_coworker_search_finds_each_language(offline_home: Home):
    with Store.open(offline_home.db_path) as store:
        ids = seed(store)
    for text, (word, _) in NEEDLES.items():
        r = coworker("search", word)
        assert r.returncode == 0, r.stderr
        assert f"#{ids[text]}" in r.stdout or str(ids[text]) in r.stdout, r.stdout
        assert word in r.stdout, r.stdout
