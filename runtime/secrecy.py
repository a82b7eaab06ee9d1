"""Secrets: what counts as one (the names that mark a configured value as one, and the values
that can be one), the secrets known to this process, and `redact`, which hides them. Everything
the coworker writes (events, logs, errors, doctor output) passes through `redact` first;
`settings.load` registers what it finds (`register_secret`), and so do MCP server entries.

A name is secret when one of its words (split at `_`, `-`, `.`, spaces and lower-to-upper case
changes) is KEY, TOKEN, SECRET, PASSWORD, PASSWD, AUTH, AUTHORIZATION, CREDENTIAL or APIKEY (or
their plurals): `API_KEY`, `GITHUB_TOKEN`, `X-Auth-Token`, `apiKey`, but not `GIT_AUTHOR_NAME`,
`KEYBOARD` or `TOKENIZER_PATH`.

A value is hidden only when it can be a secret: at least MIN_SECRET_CHARS characters, no
whitespace, and not letters alone or digits alone. Anything else (a name such as "Dana Smith",
"1", "debug", "production", a port) is ordinary text that appears everywhere: hiding it would
corrupt every text that holds it, so it is never redacted, and the configuration that holds it
under a secret name gets a WARNING naming the variable instead (`warn_ordinary_secret`,
logger runtime.secrecy, once per name: the only thing this module logs). It imports nothing of
ours and never reads a file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

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


# Secrets known to this process (the model's API key, configured secret values). Everything
# the coworker writes (events, logs, errors, doctor output) passes through `redact` first.
_SECRETS: set[str] = set()
REDACTED = "[redacted]"
_WARNED: set[str] = set()  # configured names whose value is too ordinary to hide, said once


def register_secret(value: str | None) -> None:
    """Remember a secret value so `redact` hides it; a value that cannot be a secret (too
    short or too ordinary: `can_be_secret`) is ignored, since hiding it would corrupt
    ordinary text."""
    if value and can_be_secret(value):
        _SECRETS.add(value.strip())


def warn_ordinary_secret(where: str) -> None:
    """One WARNING per process for a secret-named setting whose value is never redacted."""
    if where not in _WARNED:
        _WARNED.add(where)
        log.warning("%s is named like a secret, but its value is too short or too ordinary to "
                    "be one (a secret has at least 8 characters, no spaces, and not letters or "
                    "digits alone): it is NOT hidden from what the coworker writes. If it is a "
                    "secret, use a stronger one; if not, ignore this", where)


def redacts() -> bool:
    """Whether any secret is registered, i.e. whether `redact` can change a text."""
    return bool(_SECRETS)


def redact(text: str) -> str:
    """`text` with every registered secret replaced by [redacted]."""
    if not _SECRETS or not text:
        return text
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def secret_values(data: Any) -> Iterator[str]:
    """Every non-empty string held under a secret-named key, anywhere in nested TOML data."""
    return (value for _, value in secret_items(data))


def secret_items(data: Any, path: str = "", _under_secret: bool = False
                 ) -> Iterator[tuple[str, str]]:
    """(dotted key, value) of every non-empty string held under a secret-named key."""
    if isinstance(data, Mapping):
        for k, v in data.items():
            yield from secret_items(v, f"{path}.{k}" if path else str(k),
                                    _under_secret or is_secret_name(str(k)))
    elif isinstance(data, list | tuple):
        for i, v in enumerate(data):
            yield from secret_items(v, f"{path}[{i}]", _under_secret)
    elif isinstance(data, str) and _under_secret and data.strip():
        yield path, data
