"""An event's full-text terms made by the client, for a bulk append by COPY on PostgreSQL.

Owns `row_terms`: the `tsv` and `ntok` that pg_fts' `fts_row` and `fts_count` give an event's
body, kind and actor, computed in Python for the texts where the two are the same by
construction, so that a COPY of thousands of events does not have the server make each row's
vector in SQL (at 100,000 synthetic events: 10.9 s of server time with the vectors made there,
2.6 s with them given). For any other text it returns None, and the events tables' BEFORE
INSERT trigger (`fts_fill`) makes the vector on the server as for any single INSERT.

Where it answers: the text `body kind actor` is ASCII and at most pg_fts.SHORT_CHARS characters,
no token is longer than pg_fts.MAX_LEXEME_BYTES. There fts_folded is lower(), a token is a run
of ASCII letters and digits, and fts_term is snowball's porter (the `porter` algorithm,
memory.tokens' stemmer) then the LOGI rule for a token of 3 to 64 bytes, the token itself
otherwise. The vector is written as fts_short_vector writes it (each token's term at its place,
1-based) and read by the server's tsvector input, which gathers, orders and caps places the
same way for both. tests/test_pg_terms.py holds the two equal on generated and real texts.

Pure; never touches the store.
"""

from __future__ import annotations

import re

import snowballstemmer

from .pg_fts import MAX_LEXEME_BYTES, SHORT_CHARS

_TOKEN = re.compile(r"[a-z0-9]+")
_LOGI = re.compile(r"[aeiouy][^aeiouy].*logi$")
_porter = snowballstemmer.stemmer("porter")
_PLACES = [f":{i}" for i in range(1, SHORT_CHARS + 3)]  # a text of SHORT_CHARS + 2 has fewer tokens
CACHED = 200_000  # distinct tokens whose terms are kept (a few MB), then forgotten at once


def term(token: str) -> str:
    """fts_term of an ASCII token (lower case letters and digits)."""
    if not 3 <= len(token) <= 64:
        return token
    stemmed = _porter.stemWord(token)
    if stemmed.endswith("logi") and _LOGI.search(stemmed):
        return stemmed[:-1]
    return stemmed


def row_terms(body: str, kind: str, actor: str) -> tuple[str, int] | None:
    """The event's tsvector (as text) and token count, or None where the server must make
    them (a text beyond ASCII, longer than SHORT_CHARS, or holding a token too long)."""
    if len(body) + len(kind) + len(actor) > SHORT_CHARS:
        return None
    text = f"{body} {kind} {actor}"
    if not text.isascii():
        return None
    tokens = _TOKEN.findall(text.lower())
    if len(text) > MAX_LEXEME_BYTES and any(len(t) > MAX_LEXEME_BYTES for t in tokens):
        return None
    if len(_terms) > CACHED:
        _terms.clear()
    return " ".join(map(str.__add__, map(_terms.__getitem__, tokens), _PLACES)), len(tokens)


class _Terms(dict[str, str]):
    """term() of each token asked, kept (a history repeats its words: half the time)."""

    def __missing__(self, token: str) -> str:
        made = self[token] = term(token)
        return made


_terms = _Terms()
