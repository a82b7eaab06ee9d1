"""The inbox folder: files the owner drops into state/inbox/ become owner messages.

Owns reading each regular file owned by this user as one message (an input) and filing it in
inbox/done/, moving anything else (a link, a folder, another user's file, a name that is not
UTF-8, an unreadable file) aside to inbox/rejected/ (a link itself moves, never what it points
at), and names for filed entries that never overwrite one and fit NAME_MAX. It adds the
message through store.inputs; it never decides what a message means and never calls a model.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import stat
import time
from pathlib import Path

from ..store import Event, Store
from ..store import events as ev
from ..store import inputs as inputs_store

log = logging.getLogger("runtime.loop")  # one logger for the whole loop, as before the split

FOLDERS = ("done", "rejected")
NAME_MAX = 255  # bytes in one file name (ext4, APFS and NTFS alike)


def files(inbox: Path) -> list[os.DirEntry[str]]:
    """What waits in the inbox, by name: no hidden entry, not done/ or rejected/."""
    try:
        with os.scandir(inbox) as it:
            return sorted((e for e in it if not e.name.startswith(".")
                           and e.name not in FOLDERS), key=lambda e: e.name)
    except FileNotFoundError:
        return []


def take(inbox: Path, store: Store) -> None:
    """Each entry fit to read becomes an owner message (once per content and name), then
    moves to done/; anything else moves to rejected/."""
    done = inbox / "done"
    done.mkdir(parents=True, exist_ok=True)
    for entry in files(inbox):
        raw = _read(inbox, entry)
        if raw is None:
            continue
        digest = hashlib.sha256(raw).hexdigest()[:16]
        text = raw.decode("utf-8", errors="replace").strip()
        if text and not ev.inbox_file_seen(store, digest, entry.name):
            inputs_store.add_message(store, Event.owner_message(
                text, "inbox", file=entry.name, inbox_sha=digest))
        try:
            os.replace(inbox / entry.name, _filed_path(done, entry.name, stamped=False))
        except OSError as e:  # it was read; it must not be read again next tick
            _reject(inbox, entry, f"could not be moved to done/ ({e.strerror or e})")


def _read(inbox: Path, entry: os.DirEntry[str]) -> bytes | None:
    """The bytes of an entry fit to read as a message; None when it is gone or was moved aside."""
    if _printable(entry.name) != entry.name:
        _reject(inbox, entry, "its name is not UTF-8 text")
        return None
    path = inbox / entry.name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        _reject(inbox, entry, "not a regular file (a link, folder or device)")
        return None
    if st.st_uid != os.geteuid():
        _reject(inbox, entry, f"owned by uid {st.st_uid}, not by you")
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            return f.read()
    except OSError as e:
        _reject(inbox, entry, f"unreadable ({e.strerror or e})")
        return None


def _reject(inbox: Path, entry: os.DirEntry[str], why: str) -> None:
    """Move a bad inbox entry aside (the entry itself, never what a link points at)."""
    rejected = inbox / "rejected"
    rejected.mkdir(parents=True, exist_ok=True)
    shown = _printable(entry.name)
    target = _filed_path(rejected, shown, stamped=True)
    try:
        os.replace(entry.path, target)
    except OSError as e:
        log.error("inbox entry %r is not readable as a message (%s) and could not be moved "
                  "aside (%s); remove it by hand", shown, why, e)
        return
    log.warning("inbox entry %r is not read as a message: %s; moved to %s", shown, why, target)


def _filed_path(folder: Path, name: str, stamped: bool) -> Path:
    """Where an inbox entry is filed in `folder`: a name not taken yet (nothing filed is ever
    overwritten) that fits NAME_MAX bytes, cut at a character boundary. First `name` (done/)
    or `{time}-{name}` (rejected/), then `{time}-{name}`, then `{time}.{n}-{name}`."""
    stamp = int(time.time())
    heads = itertools.chain([f"{stamp}-" if stamped else "", f"{stamp}-"],
                            (f"{stamp}.{n}-" for n in itertools.count(1)))
    for head in heads:
        fitted = (head + name).encode("utf-8", "surrogateescape")[:NAME_MAX]
        target = folder / fitted.decode("utf-8", "ignore")
        if not os.path.lexists(target):
            return target
    raise AssertionError("unreachable: the names above never run out")


def _printable(name: str) -> str:
    """A file name as text: undecodable bytes (kept as surrogates by os) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
