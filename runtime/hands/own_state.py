"""The coworker's own state, out of reach of MCP tools: no tool argument may name it.

Only the owner's words carry the owner's authority, and files dropped in `state/inbox/` are
read as the owner's messages; `state/` also holds the database, `secrets.toml`, the logs and
the snapshots, and the home holds MEMORY.md and config.toml. A tool call whose arguments name
any of these would let a tool (so the model, or whatever a tool result talked it into) speak as
the owner, rewrite memory or config, or read the secrets. So such a call is refused, reads
included, before anything is sent to its server.

Owns `OwnState` (the protected places of one home) and its `refusal`: the
one-line reason a call's arguments are refused, or None. The rule:

- every string value in the arguments, recursively through lists and dicts (a key names a
  field, not a file), `file:` URLs taken as their path; a path longer than PATH_MAX once
  resolved against the server's folder and normalised is one no OS opens. Plain words are checked
  too: a server started from the home (as `coworker start` starts it) opens `MEMORY.md`,
  `config.toml` or `state` there. An ordinary word or sentence resolves to `<cwd>/<it>`, which
  is protected only when it is one of those names, a link into them, or the server's working
  folder is inside state/ itself; so no ordinary argument is refused;
- each is resolved twice, as given (`~` expanded; absolute, or relative to the coworker's own
  working folder) and relative to the server's working folder, `..` and symlinks resolved
  (`os.path.realpath`: symlinks along the part that exists, the rest lexically);
- it is refused when either resolution is `state/` or inside it, or is MEMORY.md or
  config.toml, compared with the realpath of each (and their plain absolute paths), or when it
  (or, for state/, a folder above it) is the same file as one of them (device and inode: a
  case-insensitive disk, a bind mount, a hard link to MEMORY.md or config.toml).

It never calls a server, never records anything and never logs (runtime/hands/hands.py does).
What it cannot see: a path a server builds from parts (`{"dir": "state", "name": "x"}`), a path
inside a shell command string, a hard link to a file inside state/, or a tool that moves or
deletes a folder that contains the home.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

MAX_SHOWN = 200  # characters of an offending argument quoted in the reason
PATH_MAX = 4096  # a longer string cannot be a path the OS opens (Linux's PATH_MAX)
MAX_DEPTH = 64   # nesting of the arguments walked (JSON from the model is shallow)


def _real(path: str) -> str:
    """`path` (absolute) with `..` and symlinks resolved; lexical when the OS cannot say. Only
    the part that exists is asked of the OS (past a missing folder no link can hide), so a
    long made-up path costs a few calls, not one per component."""
    path = os.path.normpath(path)
    try:
        head, tail = path, ""
        while not os.path.lexists(head):  # the longest prefix that exists
            parent, name = os.path.split(head)
            if parent == head:
                break
            head, tail = parent, os.path.join(name, tail) if tail else name
        return os.path.normpath(os.path.join(os.path.realpath(head), tail))
    except (OSError, ValueError):  # an embedded NUL, a loop: fall back to the letters
        return path


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string value in a JSON-like value (a key names a field, not a file: GitHub's
    `{"state": "open"}` is no path)."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v, depth + 1)


def _as_path(text: str) -> str:
    """The path a string names: a `file:` URL's path (`file:///x`, `file:/x`), `~` expanded."""
    if text[:5].lower() == "file:":
        try:
            text = unquote(urlsplit(text).path) or text
        except ValueError:  # "file://[/x": no URL a server could open either; read as written
            pass
    return os.path.expanduser(text)


def _inside(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip(os.sep) + os.sep)


class OwnState:
    """The protected places of the home at `root`: state/ (everything under it), MEMORY.md and
    config.toml, each as its realpath and its plain absolute path, and (read at each check, as
    MEMORY.md is replaced whole when it changes) the identity of each that exists."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(os.path.expanduser(root)))
        self.named = {"state": str(self.root / "state"), "MEMORY.md": str(self.root / "MEMORY.md"),
                      "config.toml": str(self.root / "config.toml")}
        # (place as compared, its name in the reason, a folder?)
        self.places: list[tuple[str, str, bool]] = []
        for name, path in self.named.items():
            for form in dict.fromkeys((_real(path), os.path.normpath(path))):
                self.places.append((form, name, name == "state"))

    def _identities(self) -> dict[tuple[int, int], str]:
        """(st_dev, st_ino) of each protected place that exists now: the same file or folder
        under another spelling (a case-insensitive disk, a bind mount, a hard link)."""
        ids: dict[tuple[int, int], str] = {}
        for name, path in self.named.items():
            with contextlib.suppress(OSError, ValueError):
                st = os.stat(path)
                ids[(st.st_dev, st.st_ino)] = name
        return ids

    def _hit(self, path: str, ids: dict[tuple[int, int], str]) -> str | None:
        """The protected place `path` (absolute) resolves into, or None."""
        real = _real(path)
        for candidate in dict.fromkeys((real, os.path.normpath(path))):
            for place, name, folder in self.places:
                if _inside(candidate, place) if folder else candidate == place:
                    return name
        at, itself = real, True  # the path itself, then each folder above it that exists
        while True:
            try:
                st = os.stat(at)
            except (OSError, ValueError):
                st = None
            found = ids.get((st.st_dev, st.st_ino)) if st is not None else None
            if found == "state" or (found is not None and itself):
                return found
            itself = False
            parent = os.path.dirname(at)
            if parent == at:
                return None
            at = parent

    def _where(self, text: str, cwd: str, here: str,
               ids: dict[tuple[int, int], str]) -> tuple[str, str] | None:
        """(protected place, the resolved path) that the string `text` names, or None. A word
        is a path too: a server started in the home opens `state`, `MEMORY.md` there."""
        for variant in dict.fromkeys((text, text.strip())):
            if not variant:
                continue
            path = _as_path(variant)
            bases = [path] if os.path.isabs(path) else [os.path.join(cwd, path),
                                                        os.path.join(here, path)]
            for full in dict.fromkeys(os.path.normpath(b) for b in bases):
                if len(full) > PATH_MAX:  # as the server resolves it: no OS opens it
                    continue
                name = self._hit(full, ids)
                if name is not None:
                    return name, _real(full)
        return None

    def refusal(self, arguments: Any, cwd: str | None) -> str | None:
        """Why a call with these arguments is refused (one line), or None. `cwd` is the
        server's working folder (None: unknown, taken as the coworker's own)."""
        here = _cwd(str(self.root))
        cwd = os.path.abspath(cwd) if cwd else here
        ids = self._identities()
        for text in _strings(arguments):
            if not text:
                continue
            found = self._where(text, cwd, here, ids)
            if found is not None:
                return self.reason(text, *found)
        return None

    @staticmethod
    def reason(text: str, place: str, resolved: str) -> str:
        shown = text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."
        shown = " ".join(shown.split())
        via = f" (it resolves to {resolved})" if resolved != os.path.normpath(text) else ""
        if place == "state":
            return (f"refused: the path {shown}{via} is inside the coworker's own state "
                    "(state/inbox/ is the owner's door; the database and secrets live there); "
                    "tools may neither write nor read there")
        return (f"refused: the path {shown}{via} is the coworker's own {place}; tools may "
                "neither write nor read it")


def _cwd(default: str) -> str:
    try:
        return os.getcwd()
    except OSError:  # the working folder was removed under us
        return default
