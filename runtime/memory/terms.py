"""Query terms: lowercase words with stopwords (English and German) dropped, in order, unique."""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

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


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def query_terms(text: str, limit: int | None = None) -> list[str]:
    out: dict[str, None] = {}  # insertion-ordered and O(1) to test: linear in the text
    for w in words(text):
        if w in STOPWORDS or w in out:
            continue
        out[w] = None
        if limit is not None and len(out) >= limit:
            break
    return list(out)
