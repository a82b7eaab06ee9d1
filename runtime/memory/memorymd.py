"""MEMORY.md: the small always-in-context file, one entry a line, and its snapshots.

Owns the file's format and every write to it. An entry is a Markdown list line:

    - [m12] Dana owns the parser. (sources: #31, #40; 2026-11-30)

An entry that replaced an earlier one names it (ADR-0018); the one it replaced is no longer in
the file (the snapshot written before the change keeps it), so the file holds only what is
true now:

    - [m15] Deploys on Fridays are fine now. (supersedes m12; sources: #88; 2026-12-01)

Any other line (headings, prose, blank lines) is the owner's and is kept exactly. A list line
without an id is an entry the owner added by hand: it gets the next id on the next write, and
its text is kept as written. A line that looks like an entry but cannot be read (a malformed
id, a duplicate id) is an error naming the line, so nothing is silently rewritten.

Before any destructive change (strike, unstrike, restore, approve) a versioned snapshot of the
whole file is written to state/snapshots/ (vNNNN.md with a vNNNN.json sidecar: date, reason,
entries). What a restore would change, entry by entry, is `difference`; an entry struck is put
back where it stood by `MemoryFile.returning`. Writes are atomic (a temporary file, then
rename). It never reads the database.

A MEMORY.md that cannot be read (a folder of that name, no permission, not UTF-8) is a
MemoryFileError: one line that names the file and what to do, never a traceback. The loop's
prompt reads it through `prompt_text`, which never raises: a tick goes on without it; an entry
that another entry of the file supersedes (a hand edit that kept both) is left out of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import Refused, UsageError

ENTRY = re.compile(
    r"^- \[(?P<id>m\d+)\] (?P<text>.*?)"
    r"(?: \((?:supersedes (?P<supersedes>m\d+); )?sources: (?P<sources>[^;()]*); "
    r"(?P<date>\d{4}-\d{2}-\d{2})\))?\s*$")
# "- [..] text" that is not a valid entry, a checkbox ("- [ ] ", "- [x] ") or a link ("- [a](b)")
LOOKS_LIKE_ENTRY = re.compile(r"^- \[(?![ xX]\] )[^\]]*\](?!\()")
HAND_ENTRY = re.compile(r"^[-*] (?P<text>(?!\[)\S.*)$")  # "- [ ] task", "- [link](..)": owner's

log = logging.getLogger(__name__)


class MemoryFileError(UsageError):
    """MEMORY.md cannot be read as entries; the message names the line."""


def read_bytes(path: Path) -> bytes:
    """The file's bytes (b"" when it does not exist), or MemoryFileError saying what to do."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
    except IsADirectoryError:
        raise MemoryFileError(f"{path} is a folder, not a file; move it out of the way (the "
                              f"coworker writes {path.name} there)") from None
    except PermissionError:
        raise MemoryFileError(f"{path}: cannot read it (permission denied); give yourself "
                              f"read and write access, e.g. chmod 600 {path.name}") from None
    except OSError as e:
        raise MemoryFileError(f"{path}: cannot read it ({e.strerror or e}); fix or move the "
                              "file") from None


def _decode(path: Path, raw_bytes: bytes) -> str:
    try:
        return raw_bytes.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw_bytes.count(b"\n", 0, e.start) + 1
        raise MemoryFileError(f"{path.name} line {line}: not valid UTF-8 text; save the file "
                              "as UTF-8") from None


def prompt_text(path: Path) -> str:
    """MEMORY.md's text for the model's prompt; never raises. A file that cannot be read is
    left out ("" and a WARNING each time: each turn it is missing from is said): a tick goes
    on without it.
    Bytes that are not UTF-8 are replaced (U+FFFD), the rest is kept; an entry another entry
    supersedes is left out (`without_superseded`)."""
    try:
        raw = read_bytes(path)
    except MemoryFileError as e:
        log.warning("MEMORY.md left out of the prompt: %s", e)
        return ""
    try:
        return without_superseded(raw.decode("utf-8"))
    except UnicodeDecodeError:
        log.warning("%s is not valid UTF-8; the bytes that are not were replaced in the "
                    "prompt; save it as UTF-8", path)
        return without_superseded(raw.decode("utf-8", "replace"))


def without_superseded(text: str) -> str:
    """`text` without the entry lines that another entry of it supersedes: what is no longer
    true is never put before the model as true. Any other text comes back unchanged."""
    if "(supersedes m" not in text:
        return text
    lines = text.splitlines(keepends=True)
    matches = [ENTRY.match(line.rstrip("\r\n")) for line in lines]
    gone = {m["supersedes"] for m in matches
            if m is not None and m["supersedes"] and m["supersedes"] != m["id"]}
    return "".join(line for line, m in zip(lines, matches, strict=True)
                   if m is None or m["id"] not in gone)


@dataclass(frozen=True)
class Entry:
    id: str | None  # None: added by hand, not yet numbered
    text: str
    sources: tuple[int, ...] = ()
    date: str | None = None
    supersedes: str | None = None  # the entry this one replaced (ADR-0018)

    def render(self) -> str:
        assert self.id is not None
        if self.sources or self.date or self.supersedes:
            src = ", ".join(f"#{s}" for s in self.sources) or "none"
            was = f"supersedes {self.supersedes}; " if self.supersedes else ""
            return f"- [{self.id}] {self.text} ({was}sources: {src}; {self.date or _today()})"
        return f"- [{self.id}] {self.text}"


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


@dataclass
class MemoryFile:
    """The file as lines: each either an Entry or a verbatim owner line."""

    path: Path
    lines: list[Entry | str]
    floor: int = 0

    @classmethod
    def load(cls, path: Path) -> MemoryFile:
        return cls.parse(path, read_bytes(path))

    @classmethod
    def parse(cls, path: Path, raw: bytes) -> MemoryFile:
        """The file `path` as `raw` holds it (its name is the one errors give)."""
        text = _decode(path, raw)
        lines: list[Entry | str] = []
        seen: dict[str, int] = {}
        for no, line in enumerate(text.splitlines(), start=1):
            m = ENTRY.match(line)
            if m:
                eid = m["id"]
                if eid in seen:
                    raise MemoryFileError(
                        f"{path.name} line {no}: entry id [{eid}] is used twice (first on line "
                        f"{seen[eid]}); give one of them another id or remove its [..] to let "
                        "the coworker number it")
                seen[eid] = no
                sources: tuple[int, ...] = ()
                if m["sources"] and m["sources"].strip() != "none":
                    try:
                        sources = tuple(int(s.strip().lstrip("#")) for s in
                                        m["sources"].split(",") if s.strip())
                    except ValueError:
                        raise MemoryFileError(
                            f"{path.name} line {no}: sources must be event ids like #12, #40; "
                            "fix them or delete the (sources: ...) part") from None
                lines.append(Entry(eid, m["text"].strip(), sources, m["date"], m["supersedes"]))
            elif LOOKS_LIKE_ENTRY.match(line):
                raise MemoryFileError(
                    f"{path.name} line {no}: {line[:60]!r} looks like an entry but its id is not "
                    "like [m12]; fix the id or remove the [..] to let the coworker number it")
            elif (h := HAND_ENTRY.match(line)) is not None:
                lines.append(Entry(None, h["text"].strip()))
            else:
                lines.append(line)
        return cls(path, lines)

    # reading -----------------------------------------------------------------------------
    @property
    def entries(self) -> list[Entry]:
        return [x for x in self.lines if isinstance(x, Entry)]

    def next_id(self) -> str:
        """The next id, never one used before: struck ids stay retired (`floor` is the highest
        id the store has ever recorded, so a citation of [m3] never changes meaning)."""
        nums = [int(e.id[1:]) for e in self.entries if e.id]
        return f"m{max([*nums, self.floor], default=0) + 1}"

    def numbered(self) -> MemoryFile:
        """A copy in which hand-added entries have ids (in file order)."""
        out = MemoryFile(self.path, list(self.lines), self.floor)
        for i, x in enumerate(out.lines):
            if isinstance(x, Entry) and x.id is None:
                out.lines[i] = Entry(out.next_id(), x.text, x.sources, x.date or _today(),
                                     x.supersedes)
        return out

    def render(self) -> str:
        body = "\n".join(x.render() if isinstance(x, Entry) else x for x in self.numbered().lines)
        return body + "\n"

    def find(self, key: str) -> list[Entry]:
        """Entries whose id is `key` (m12 or 12), else whose text contains it (any case)."""
        k = key.strip()
        eid = k if re.fullmatch(r"m\d+", k) else f"m{k}" if k.isdigit() else None
        if eid:
            hits = [e for e in self.numbered().entries if e.id == eid]
            if hits:
                return hits
        low = k.lower()
        return [e for e in self.numbered().entries if low and low in e.text.lower()]

    # changing ----------------------------------------------------------------------------
    def with_entry(self, text: str, sources: list[int], date: str | None = None) -> tuple[
            MemoryFile, Entry]:
        base = self.numbered()
        entry = Entry(base.next_id(), " ".join(text.split()), tuple(sources), date or _today())
        lines = list(base.lines)
        lines.insert(_end(lines), entry)
        return MemoryFile(self.path, lines, self.floor), entry

    def returning(self, entry: Entry, then: MemoryFile) -> MemoryFile:
        """A copy with `entry`, as an earlier version `then` held it, back where it stood
        there: after the nearest entry before it that is still here, else before the nearest
        after it; when `then` shares no entry with this file, before the first entry with a
        higher id, else where a new entry goes (`with_entry`)."""
        base = self.numbered()
        lines = list(base.lines)
        here = {x.id: i for i, x in enumerate(lines) if isinstance(x, Entry)}
        order = [e.id for e in then.entries]
        at = order.index(entry.id)
        before = next((here[i] + 1 for i in reversed(order[:at]) if i in here), None)
        after = next((here[i] for i in order[at + 1:] if i in here), None)
        higher = next((i for eid, i in here.items() if _number_of(eid) > _number_of(entry.id)),
                      None)
        where = next((i for i in (before, after, higher) if i is not None), _end(lines))
        lines.insert(where, entry)
        return MemoryFile(self.path, lines, self.floor)

    def superseding(self, old_id: str, text: str, sources: list[int],
                    date: str | None = None) -> tuple[MemoryFile, Entry]:
        """A copy in which a new entry, naming `old_id`, stands where entry `old_id` stood;
        the new entry gets the next id. KeyError when there is no entry `old_id`."""
        base = self.numbered()
        at = next((i for i, x in enumerate(base.lines)
                   if isinstance(x, Entry) and x.id == old_id), None)
        if at is None:
            raise KeyError(old_id)
        entry = Entry(base.next_id(), " ".join(text.split()), tuple(sources), date or _today(),
                      old_id)
        lines = list(base.lines)
        lines[at] = entry
        return MemoryFile(self.path, lines, self.floor), entry

    def without(self, entry_id: str) -> MemoryFile:
        base = self.numbered()
        return MemoryFile(self.path, [x for x in base.lines
                                      if not (isinstance(x, Entry) and x.id == entry_id)],
                          self.floor)

    def save(self) -> None:
        replace_atomically(self.path, self.render().encode("utf-8"))


def _number_of(entry_id: str | None) -> int:
    return int(entry_id[1:]) if entry_id else 0


def _end(lines: list[Entry | str]) -> int:
    """Where a new entry goes: right after the last line when that is an entry (before
    trailing blank lines); otherwise at the very end, so the owner's prose and blank lines
    stay as they are."""
    last = max((i for i, x in enumerate(lines) if x != ""), default=None)
    return last + 1 if last is not None and isinstance(lines[last], Entry) else len(lines)


@dataclass(frozen=True)
class Difference:
    """What putting one version of MEMORY.md in place of another changes, entry by entry:
    the entries that come back, those that leave, those whose text differs under the same
    id (now, then). `prose` when lines that are not entries (headings, notes) differ too;
    `unreadable` (why) when either cannot be read as entries, so only the whole can be said
    to change; `same` when the bytes are equal (nothing changes)."""

    added: tuple[Entry, ...] = ()
    removed: tuple[Entry, ...] = ()
    changed: tuple[tuple[Entry, Entry], ...] = ()
    prose: bool = False
    unreadable: str | None = None
    same: bool = False


def _key(e: Entry) -> str:
    return e.id or "+" + " ".join(e.text.lower().split())  # a hand-added entry by its text


def difference(now_path: Path, then_path: Path) -> Difference:
    """What replacing the file at `now_path` by the one at `then_path` changes. A file that
    cannot be read at all is a MemoryFileError, as everywhere."""
    now_raw, then_raw = read_bytes(now_path), read_bytes(then_path)
    if now_raw == then_raw:
        return Difference(same=True)
    try:
        now, then = MemoryFile.parse(now_path, now_raw), MemoryFile.parse(then_path, then_raw)
    except MemoryFileError as e:
        return Difference(unreadable=str(e))
    return _entries_apart(now, then)


def _entries_apart(now: MemoryFile, then: MemoryFile) -> Difference:
    """The entries `then` adds, removes and rewords, and whether its prose differs."""
    a, b = {_key(e): e for e in now.entries}, {_key(e): e for e in then.entries}
    return Difference(
        added=tuple(e for k, e in b.items() if k not in a),
        removed=tuple(e for k, e in a.items() if k not in b),
        changed=tuple((a[k], b[k]) for k in a if k in b and a[k].text != b[k].text),
        prose=_prose(now) != _prose(then))


def _prose(file: MemoryFile) -> list[str]:
    """The file's lines that are no entry."""
    return [x for x in file.lines if isinstance(x, str)]


# --- snapshots -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    number: int
    date: str
    reason: str
    entries: int
    path: Path


_VERSION = re.compile(r"v([0-9]{1,9})")  # ASCII digits only: "v²" or "v٣" is no version


def _number(path: Path) -> int | None:
    """The version a snapshot file's name gives ("v0002.md" -> 2), None for any other file."""
    m = _VERSION.fullmatch(path.stem)
    return int(m.group(1)) if m else None


def snapshots(folder: Path) -> list[Snapshot]:
    """Every version kept, by number. A version whose .json sidecar is missing or damaged (by
    hand) is still listed from its .md, so it can be seen and restored, never hidden."""
    out = []
    for md in sorted(folder.glob("v*.md")):
        number = _number(md)
        if number is None:
            continue
        meta = md.with_suffix(".json")
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
            out.append(Snapshot(number, str(data["date"]), str(data["reason"]),
                                int(data["entries"]), md))
            continue
        except (ValueError, KeyError, TypeError, OSError):
            pass
        try:
            stamp = datetime.fromtimestamp(md.stat().st_mtime, UTC).isoformat(
                timespec="seconds").replace("+00:00", "Z")
            entries = len(MemoryFile.load(md).entries)
        except (OSError, MemoryFileError):
            stamp, entries = "?", -1
        out.append(Snapshot(number, stamp, f"(its {meta.name} is missing or damaged; the "
                            "date is the file's)", entries, md))
    return sorted(out, key=lambda s: s.number)


def snapshot(memory_md: Path, folder: Path, reason: str) -> Snapshot:
    """Copy MEMORY.md as it is now into the next version; return it. The number is one past
    every snapshot file's, listed or not, and an existing file is never overwritten."""
    folder.mkdir(parents=True, exist_ok=True)
    taken = [n for n in (_number(f) for f in folder.glob("v*")) if n is not None]
    number = max(taken, default=0) + 1
    data = read_bytes(memory_md)  # one that cannot be read cannot be kept: say so, first
    try:
        entries = len(MemoryFile.load(memory_md).entries)
    except MemoryFileError:
        entries = -1  # a file the owner broke is still worth keeping as it is
    while True:  # another writer may take the number first: take the next
        target = folder / f"v{number:04d}.md"
        try:
            with target.open("xb") as f:  # byte for byte: line endings and all
                f.write(data)
            break
        except FileExistsError:
            number += 1
    stamp = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    with (folder / f"v{number:04d}.json").open("w", encoding="utf-8") as meta:  # its .md is ours
        meta.write(json.dumps({"date": stamp, "reason": reason, "entries": entries},
                           sort_keys=True))
    return Snapshot(number, stamp, reason, entries, target)


def chosen_snapshot(folder: Path, number: int) -> Snapshot:
    """Version `number`; a refusal listing the versions when there is none."""
    kept = snapshots(folder)
    chosen = {s.number: s for s in kept}.get(number)
    if chosen is None:
        known = ", ".join(str(s.number) for s in kept) or "none yet"
        raise Refused(f"no snapshot {number} (snapshots: {known}); `coworker snapshots` "
                      "lists them")
    return chosen


def put_back(memory_md: Path, chosen: Snapshot) -> None:
    """MEMORY.md replaced, byte for byte, by a snapshot's copy, once the copy reads as a
    MEMORY.md (UTF-8, entries that parse): a snapshot every later command would refuse is
    refused here, before anything changes."""
    replace_atomically(memory_md, restorable(chosen))


def restorable(chosen: Snapshot) -> bytes:
    """The snapshot's bytes, or MemoryFileError when they do not read as a MEMORY.md."""
    data = read_bytes(chosen.path)
    try:
        MemoryFile.parse(chosen.path, data)
    except MemoryFileError as e:
        raise MemoryFileError(f"snapshot v{chosen.number} cannot be restored, it is not a "
                              f"MEMORY.md that reads ({e}); MEMORY.md is unchanged") from None
    return data


def replace_atomically(path: Path, data: bytes) -> None:
    """`path` replaced atomically by `data`; a write that fails leaves no copy beside it."""
    tmp = path.with_suffix(".md.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):  # none there, or not ours to remove
            tmp.unlink()
        raise

