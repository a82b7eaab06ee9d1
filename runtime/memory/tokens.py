"""memory.tokens: the one tokenizer of walk, recall, search, index cards and the gate.

Owns how text becomes words and words become index terms, the same way the FTS5 tables split
and fold them (`tokenize='porter unicode61 remove_diacritics 2'` on events_fts and
rollups_fts), because query words become FTS MATCH terms and document frequencies are read
from the FTS vocabulary:

- `words`: Unicode letters and digits (`[^\\W_]+`, what unicode61 calls tokens), lowercase,
  after NFC normalisation (so an "e" followed by a combining accent is one letter, as unicode61
  reads it). Surface forms: "Müller traf Zürich im Café" gives müller, traf, zürich, im, café.
- `fold`: a word as unicode61 with remove_diacritics 2 indexes it: case folded, and a Latin
  letter with diacritics becomes its plain letter (ü -> u, é -> e, ż -> z); letters that are
  not an accented plain letter keep their shape (ł, ø, ß, Greek, Cyrillic).
- `stem`: the term the FTS index holds for a word: `fold`, then porter over its UTF-8 bytes
  as FTS5's porter reads them (a token longer than 64 bytes passes through unstemmed, as in
  FTS5).
- `query_words`: the distinct words of a query, stopwords (English and German) dropped, in
  order, de-duplicated in linear time.
- `head`: the part of one text that is read for its words where words are read again on each
  call (recall's scoring, coverage, the walk, index cards, the gate): its first READ_CHARS
  characters. FTS5 indexes the whole text, so a word past the head still finds it; only the
  score and the word checks read the head (ADR-0032). Stemming is what costs: a 4 MB text of
  distinct words took 7 s to stem, on every recall that read it.

Known gaps, both in stems: the porter algorithm here is snowball's, which stems a
few words differently from SQLite's (apology: apologi vs apolog); and FTS5 leaves tokens under
3 bytes unstemmed while snowball stems them (us -> u, is -> i). The second is kept on purpose:
"used" stems to "us", and read as FTS5 reads it, every "us" in the history would count as a
use of "used" (LoCoMo turn recall fell 0.0014). FTS matching is unaffected (SQLite stems both
the query and the text); only a document frequency looked up for such a stem is off.

Pure functions; never touches the store, never calls a model.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import snowballstemmer

WORD = re.compile(r"[^\W_]+")
# An ASCII text's words are its runs of letters and digits: `words` reads such a text as
# bytes, every other byte a space and every capital its small letter, in one translate, then
# one split (no regex, no list of matches to lower one by one; about a third of the time on
# recall's texts). `tests/test_tokens.py` holds the two readings equal.
_ASCII_WORDS = bytes(ord(chr(b).lower()) if chr(b).isascii() and chr(b).isalnum() else 32
                     for b in range(256))

STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    let lets please tell know think also get got like one two us may might must shall
    aber alle als am an auch auf aus bei bin bis bist da damit dann das dass dem den der des die
    dies diese dieser doch dort du durch ein eine einem einen einer eines er es für hat hatte
    hier ich ihr im in ist ja kein man mit nach nicht noch nur oder sich sie sind so um und uns
    von vor war was wie wir wird zu zum zur über
    """.split()
)

_stemmer = snowballstemmer.stemmer("porter")  # the algorithm FTS5's porter tokenizer uses
_PORTER_MAX_BYTES = 64  # FTS5's porter leaves longer tokens unstemmed
_BYTE = 0xF0000  # private-use plane: stand-ins for UTF-8 bytes while stemming
# Accented Latin letters unicode61 keeps whole (its diacritics table has no entry for them).
_KEPT = frozenset("ǡǠ")


READ_CHARS = 20_000  # of one text, read for its words per call (as much as a tool result keeps)
VOCAB_CHARS = 10 * READ_CHARS  # of an episode's vocabulary card, kept by reflect, read by the walk


def head(text: str, limit: int = READ_CHARS) -> str:
    """The first `limit` characters of `text`, cut at a space where one is near the end (a word
    cut in two would be a word the text never held)."""
    if len(text) <= limit:
        return text
    for i in range(limit, max(limit - 100, 0), -1):
        if text[i].isspace():
            return text[:i]
    return text[:limit]


def words(text: str) -> list[str]:
    """The words of `text`: lowercase surface forms, in order (see the module docstring)."""
    if text.isascii():
        return text.encode().translate(_ASCII_WORDS).decode().split()
    text = unicodedata.normalize("NFC", text)
    return [w.lower() for w in WORD.findall(text)]


def query_words(text: str) -> list[str]:
    """The distinct words of `text`, stopwords dropped, in order, in linear time (a dict, never
    a list scan); the caller caps the text's length."""
    return list(dict.fromkeys(w for w in words(text) if w not in STOPWORDS))


@lru_cache(maxsize=4096)
def _fold_char(c: str) -> str:
    if unicodedata.combining(c):
        return ""  # a stray accent inside a word: unicode61 drops it
    folded = c.casefold()
    if len(folded) != 1:  # ß -> ss, ŉ -> ʼn: unicode61 folds one letter to one letter
        folded = c.lower()
    if folded in _KEPT:
        return folded
    base = unicodedata.normalize("NFD", folded)
    if len(base) > 1 and base[0].isascii() and all(unicodedata.combining(m) for m in base[1:]):
        return base[0]
    return folded


def fold(word: str) -> str:
    """`word` as unicode61 with remove_diacritics 2 indexes it (see the module docstring)."""
    if word.isascii():
        return word.lower()
    return "".join(_fold_char(c) for c in word)


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The FTS index's term for `word`: folded, then porter-stemmed."""
    plain = fold(word)
    if plain.isascii():
        # digits are no suffix porter strips (a history is full of numbers seen once)
        if len(plain) > _PORTER_MAX_BYTES or plain.isdigit():
            return plain
        return _stemmer.stemWord(plain)
    raw = plain.encode()
    if len(raw) > _PORTER_MAX_BYTES:
        return plain
    # FTS5's porter reads UTF-8 bytes, so a letter outside ASCII is a consonant per byte there
    # (straße -> straß): stem the bytes, each non-ASCII byte a private-use stand-in.
    stand_in = "".join(chr(b) if b < 0x80 else chr(_BYTE + b) for b in raw)
    out = _stemmer.stemWord(stand_in)
    return bytes(ord(c) if ord(c) < 0x80 else ord(c) - _BYTE for c in out).decode(
        "utf-8", "replace")
