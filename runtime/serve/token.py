"""The bearer tokens of `coworker serve` in state/secrets.toml: the owner's, `[serve] token`,
and the Hermes memory provider's, `[serve] hermes_token` (`key`).

Owns making one (`secrets.token_urlsafe`, 256 bits), reading it, and writing it into the
secrets file without disturbing anything else the file holds (the `[secrets]` table, a model
key, comments): the one line changes, or a `[serve]` table is added. The new text is parsed
before it replaces the file (a temporary file, 0600, then an atomic rename), and written only
when it reads back with the new token; otherwise the file is left as it was and the owner is
told what to add by hand. It never logs and never prints; the caller registers the token as a
secret.
"""

from __future__ import annotations

import re
import secrets
import tomllib
from pathlib import Path

from ..errors import ConfigError, UsageError
from ..files import replace_file

TOKEN_BYTES = 32
_HEADER = re.compile(r"^[ \t]*\[[ \t]*serve[ \t]*\][ \t]*(#.*)?$", re.M)
_TABLE = re.compile(r"^[ \t]*\[", re.M)
OWNER, HERMES = "token", "hermes_token"  # the keys of [serve] a token is kept under


def _line(key: str) -> re.Pattern[str]:
    return re.compile(r"^[ \t]*" + re.escape(key) + r"[ \t]*=.*$", re.M)


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def read(path: Path, key: str = OWNER) -> str | None:
    """`[serve] <key>` of the secrets file at `path`, or None (no file, no token)."""
    text = _text(path)
    if text is None:
        return None
    serve = _parse(text).get("serve")
    token = serve.get(key) if isinstance(serve, dict) else None
    return token if isinstance(token, str) and token else None


def ensure(path: Path, key: str = OWNER) -> tuple[str, bool]:
    """The token in `path`, or a new one written there; and whether it was written."""
    token = read(path, key)
    if token is not None:
        return token, False
    return rotate(path, key), True


def rotate(path: Path, key: str = OWNER) -> str:
    """Write a new token into `path`'s `[serve] <key>` (created 0600 when absent); return it."""
    token = new_token()
    old = _text(path) or ""
    _parse(old)  # a file that does not parse is the owner's to fix: never overwritten
    new = with_token(old, token, key)
    got = _parse(new).get("serve", {})
    if not isinstance(got, dict) or got.get(key) != token:
        raise UsageError(f"{path}: could not place the token (is [serve] written some other "
                         f"way?); add the table by hand:\n[serve]\n{key} = \"...\"")
    _replace(path, new)
    return token


def with_token(text: str, token: str, key: str = OWNER) -> str:
    """`text` (a secrets file) with `[serve] <key> = "token"`: the table's line of that key
    replaced, or the line added under `[serve]`, or the table appended."""
    line = f'{key} = "{token}"'
    header = _HEADER.search(text)
    if header is None:
        sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n")
                                                             else "\n\n")
        return f"{text}{sep}[serve]\n{line}\n"
    start = header.end()
    nxt = _TABLE.search(text, start + 1)
    end = nxt.start() if nxt else len(text)
    found = _line(key).search(text, start, end)
    if found is not None:
        return text[:found.start()] + line + text[found.end():]
    return f"{text[:start]}\n{line}{text[start:]}"


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e}); "
                          "fix its permissions or contents") from e


def _parse(text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"state/secrets.toml: not valid TOML ({e}); fix it, then try "
                          "again") from e


def _replace(path: Path, text: str) -> None:
    """Write `text` to a new 0600 file beside `path`, then rename it over `path`."""
    replace_file(path, text.encode("utf-8"), 0o600)
