"""The inbox folder: files the owner drops into state/inbox/ become owner messages.

Owns reading each regular file owned by this user, of at most MAX_BYTES, as one message (an
input) and filing it in inbox/done/, moving anything else (a link, a folder, another user's
file, a name that is not UTF-8, an unreadable file, a file over MAX_BYTES, which is never read,
contents that are not UTF-8 text) aside to inbox/rejected/ with a WARNING (a link itself
moves, never what it points at), and names for filed entries that never overwrite one and fit
NAME_MAX. Each entry is taken on its
own: one that fails in a way nobody foresaw is logged at ERROR with its name and stays for the
next tick, and after MAX_FAILURES failures in a row it moves to rejected/; the rest of the
inbox and the tick go on, and `take` never raises. A database that cannot take messages (busy
past its timeout, damaged) is no entry's fault: the whole inbox waits, and nothing is counted.
An entry squatting the name of done/ or rejected/ (a file, a link) is renamed aside in the
inbox, under a name that overwrites nothing, and read like any other file. It adds the
message through store.inputs; it never decides what a message means and never calls a model.
A file changed under SETTLE_S seconds ago may still be being written: it waits for a later tick.
An empty file (or one of blank space) is a writer that has not written yet: it stays in the
inbox until it holds text (filed, its later text would be lost in done/).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import stat
import time
from pathlib import Path

from ..errors import StoreError, StoreRefused
from ..store import Event, Store
from ..store import events as ev
from ..store import inputs as inputs_store

log = logging.getLogger("runtime.loop")  # one logger for the whole loop, as before the split

FOLDERS = ("done", "rejected")
NAME_MAX = 255  # bytes in one file name (ext4, APFS and NTFS alike)
# The largest file read as one message (store.inputs.MESSAGE_MAX_BYTES, 4 MiB). A bigger one
# is never read (its size comes from lstat), so it costs no memory, and never reaches SQLite;
# it moves to rejected/ with a WARNING saying what to do.
MAX_BYTES = inputs_store.MESSAGE_MAX_BYTES
# Unexpected failures in a row of one file (the same name and identity) before it moves to
# rejected/: a passing fault gets two more ticks, a lasting one is set aside, not retried forever.
MAX_FAILURES = 3
# A file changed less than this many seconds ago may still be being written (an editor saving,
# `cmd > state/inbox/x.txt`): it waits for a later tick, so a message is never read cut short.
# A file whose modification time lies ahead of the clock (copied with its times from a
# machine whose clock runs fast) is taken once it has stayed the same that long.
SETTLE_S = 2.0

_failures: dict[str, dict[tuple[str, str | None], int]] = {}  # per inbox: failures in a row
_settling: dict[str, dict[str, tuple[str, float]]] = {}  # per inbox: name -> (identity, since)
_empty: dict[str, dict[str, str]] = {}  # per inbox: an empty file's name -> identity, said once


def files(inbox: Path) -> list[os.DirEntry[str]]:
    """What waits in the inbox, by name: no hidden entry, not the done/ and rejected/ folders
    (a file or link of either name is an entry like any other)."""
    try:
        with os.scandir(inbox) as it:
            return sorted((e for e in it if not e.name.startswith(".") and not _is_folder(e)),
                          key=lambda e: e.name)
    except FileNotFoundError:
        return []


def news(inbox: Path) -> bool:
    """Whether the inbox holds an entry a take would act on: not an empty file already seen
    just as it is (that one waits for its writer; waking the loop for it would spin)."""
    known = _empty.get(str(inbox), {})
    for e in files(inbox):
        try:
            if known.get(e.name) != _identity(e.stat(follow_symlinks=False)):
                return True
        except OSError:  # gone, or unreadable: the take says what
            return True
    return False


def take(inbox: Path, store: Store) -> None:
    """Each entry fit to read becomes an owner message, then moves to done/; anything else
    moves to rejected/. One entry's failure never stops the others, and this never raises."""
    try:
        done = _folder(inbox, "done")
        _clear(inbox, "rejected")
        waiting = files(inbox)
    except OSError as e:
        log.error("the inbox %s cannot be taken in (%s); its files wait for the next tick",
                  inbox, e)
        return
    before = _failures.pop(str(inbox), {})
    failed: dict[tuple[str, str | None], int] = {}
    settling = _settling.setdefault(str(inbox), {})
    for gone in set(settling) - {e.name for e in waiting}:
        del settling[gone]
    for n, entry in enumerate(waiting):
        try:
            _take(inbox, done, entry, store)
        except StoreRefused as e:  # a write its rules refused: the entry's doing, as a bug
            _failed(inbox, entry, e, before, failed)
        except StoreError as e:  # busy or damaged: the database's fault, not the file's
            log.warning("the inbox waits for the next tick: the database cannot take its "
                        "messages now (%s); %d file(s) wait, none is set aside for it", e,
                        len(waiting) - n)
            failed.update({k: v for k, v in before.items() if k not in failed})
            break
        except Exception as e:  # noqa: BLE001 - one entry must never stop the inbox or the tick
            _failed(inbox, entry, e, before, failed)
    if failed:
        _failures[str(inbox)] = failed


def _take(inbox: Path, done: Path, entry: os.DirEntry[str], store: Store) -> None:
    """One entry: recorded as a message (once for the very same file) and filed in done/, or
    moved to rejected/."""
    read = _read(inbox, entry)
    if read is None:
        return
    raw, identity = read
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as e:  # a binary file, or text in another encoding: not a message
        _reject(inbox, entry, f"its contents are not UTF-8 text (byte 0x{raw[e.start]:02x} at "
                f"offset {e.start}); save it as UTF-8 text and drop it in again")
        return
    if not text:  # a writer that has not written yet (`slow-command > inbox/x.txt`): it waits
        if _empty.setdefault(str(inbox), {}).get(entry.name) != identity:
            _empty[str(inbox)][entry.name] = identity
            log.info("inbox file %r is empty (or only blank space): it waits in the inbox "
                     "until it holds text", entry.name)
        return
    _empty.get(str(inbox), {}).pop(entry.name, None)
    digest = hashlib.sha256(raw).hexdigest()[:16]
    recorded = ev.inbox_file_seen(store, digest, entry.name, identity)
    if recorded is None:
        inputs_store.add_message(store, Event.owner_message(
            text, "inbox", file=entry.name, inbox_sha=digest, inbox_stat=identity))
    try:
        target = _filed_path(done, entry.name, stamped=False)
        os.replace(inbox / entry.name, target)
    except OSError as e:  # it was read; it must not be read again next tick
        _reject(inbox, entry, f"could not be moved to done/ ({e.strerror or e})")
        return
    if recorded is not None:
        log.info("inbox file %r was already recorded as event %s (the coworker stopped before "
                 "filing it); filed as %s", entry.name, recorded, target)


def _read(inbox: Path, entry: os.DirEntry[str]) -> tuple[bytes, str] | None:
    """The bytes of an entry fit to read as a message and the identity of the file read; None
    when it is gone or was moved aside."""
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
    if st.st_size > MAX_BYTES:
        _reject(inbox, entry, _too_big(st.st_size))
        return None
    if not _settled(inbox, entry.name, st):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
            st = os.fstat(f.fileno())
    except OSError as e:
        _reject(inbox, entry, f"unreadable ({e.strerror or e})")
        return None
    if len(raw) > MAX_BYTES:  # it grew after the lstat
        _reject(inbox, entry, _too_big(st.st_size))
        return None
    return raw, _identity(st)


def _settled(inbox: Path, name: str, st: os.stat_result) -> bool:
    """Whether a file has stayed unchanged for SETTLE_S seconds: by its modification time,
    or, when that lies ahead of the clock (by more than a clock tick's rounding), since this
    process first saw it as it is now."""
    settling = _settling.setdefault(str(inbox), {})
    age = max(time.time() - st.st_mtime, 0.0)
    ahead = st.st_mtime - time.time() > 1.0
    if not ahead and age >= SETTLE_S:
        settling.pop(name, None)
        return True
    identity, now = _identity(st), time.monotonic()
    seen, since = settling.get(name, (None, now))
    if seen != identity:
        settling[name] = (identity, now)
        log.debug("inbox file %r changed under %.0f s ago: it waits for a later tick", name,
                  SETTLE_S)
        return False
    if not ahead or now - since < SETTLE_S:
        return False
    settling.pop(name, None)
    return True


def _identity(st: os.stat_result) -> str:
    """Which file this is, not only what it holds: device, inode, size, modification and
    change times. The same file after a crash has the same; the same text dropped again (a
    new file, or one moved back from done/, which changes its ctime) has another."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _too_big(size: int) -> str:
    return (f"it is {size:,} bytes, over the {MAX_BYTES:,}-byte ({MAX_BYTES >> 20} MiB) limit "
            "of one inbox message, and was not read; split it into smaller files, or bring "
            "past history in with `coworker import` (JSON lines)")


def _failed(inbox: Path, entry: os.DirEntry[str], error: Exception,
            before: dict[tuple[str, str | None], int],
            failed: dict[tuple[str, str | None], int]) -> None:
    """An entry whose taking-in raised: logged at ERROR and left for the next tick, or moved to
    rejected/ once it failed MAX_FAILURES times in a row."""
    shown = _printable(entry.name)
    key: tuple[str, str | None]
    try:
        key = (entry.name, _identity(os.lstat(entry.path)))
    except OSError:
        key = (entry.name, None)
    n = before.get(key, 0) + 1
    what = f"{type(error).__name__}: {error}"
    if n < MAX_FAILURES:
        failed[key] = n
        log.error("inbox entry %r could not be taken in (%s); it stays in the inbox and is "
                  "tried again at the next tick (failure %d of %d)", shown, what, n,
                  MAX_FAILURES, exc_info=error)
        return
    log.error("inbox entry %r could not be taken in (%s), %d times in a row; moving it to "
              "rejected/", shown, what, n, exc_info=error)
    if not _reject(inbox, entry, f"taking it in failed {n} times in a row ({what}); move it "
                   "back into the inbox to try again"):
        failed[key] = n  # still there: try to move it aside again next tick


def _is_folder(entry: os.DirEntry[str]) -> bool:
    """done/ or rejected/ itself (a real folder, not a link to one)."""
    try:
        return entry.name in FOLDERS and entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _folder(inbox: Path, name: str) -> Path:
    """The inbox's folder `name`, made when missing (whatever squatted its name moved aside)."""
    _clear(inbox, name)
    folder = inbox / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _clear(inbox: Path, name: str) -> None:
    """An entry that holds the name of the inbox's folder `name` but is no folder (a file, a
    link) is renamed aside in the inbox, under a name that overwrites nothing, so that it is
    read (or set aside) like any other entry and the folder can be made."""
    path = inbox / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        return
    target = _filed_path(inbox, name, stamped=True)
    os.replace(path, target)
    log.warning("inbox entry %r is not a folder, but the inbox files entries in a folder of "
                "that name; renamed it to %r, which is read like any other inbox file, and "
                "made the folder %s/", name, target.name, name)


def _reject(inbox: Path, entry: os.DirEntry[str], why: str) -> bool:
    """Move a bad inbox entry aside (the entry itself, never what a link points at); whether
    it moved."""
    shown = _printable(entry.name)
    try:
        rejected = _folder(inbox, "rejected")
        target = _filed_path(rejected, shown, stamped=True)
        os.replace(entry.path, target)
    except OSError as e:
        log.error("inbox entry %r is not readable as a message (%s) and could not be moved "
                  "aside (%s); remove it by hand", shown, why, e)
        return False
    log.warning("inbox entry %r is not read as a message: %s; moved to %s", shown, why, target)
    return True


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
