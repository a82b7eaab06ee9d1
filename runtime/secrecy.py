"""What counts as a secret: the names that mark a configured value as one, and the values that
can be one. Nothing else: registering and hiding the known secrets is `settings.redact`'s.

A name is secret when one of its words (split at `_`, `-`, `.`, spaces and lower-to-upper case
changes) is KEY, TOKEN, SECRET, PASSWORD, PASSWD, AUTH, AUTHORIZATION, CREDENTIAL or APIKEY (or
their plurals): `API_KEY`, `GITHUB_TOKEN`, `X-Auth-Token`, `apiKey`, but not `GIT_AUTHOR_NAME`,
`KEYBOARD` or `TOKENIZER_PATH`.

A value is hidden only when it can be a secret: at least MIN_SECRET_CHARS characters, no
whitespace, and not letters alone or digits alone. Anything else (a name such as "Dana Smith",
"1", "debug", "production", a port) is ordinary text that appears everywhere: hiding it would
corrupt every text that holds it, so it is never redacted, and the configuration that holds it
under a secret name gets a WARNING naming the variable instead. This module never logs and
imports nothing of ours.
"""

from __future__ import annotations

import re

SECRET_WORDS = frozenset({"key", "token", "secret", "password", "passwd", "auth",
                          "authorization", "credential", "apikey"})
MIN_SECRET_CHARS = 8
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def name_words(name: str) -> list[str]:
    """`GIT_AUTHOR_NAME` -> ["git", "author", "name"]; `apiKey` -> ["api", "key"]."""
    return [w.lower() for w in _WORDS.findall(name)]


def is_secret_name(name: str) -> bool:
    """Whether a value under this name is meant to be a secret (whole words only)."""
    return any(w in SECRET_WORDS or (w.endswith("s") and w[:-1] in SECRET_WORDS)
               for w in name_words(name))


def can_be_secret(value: str) -> bool:
    """Whether `value` can be hidden without corrupting ordinary text (see the module)."""
    v = value.strip()
    return (len(v) >= MIN_SECRET_CHARS and not any(c.isspace() for c in v)
            and not v.isalpha() and not v.isdigit())
