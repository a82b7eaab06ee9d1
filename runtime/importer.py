"""`coworker import FILE`: historical events, one JSON object a line, keeping their timestamps.

Owns parsing and validating each line (ts, kind, actor, author_kind, body, meta, and an
optional `id` or `source_id` from the system it came from) and writing them all in one
transaction: a bad line names its line number and field and nothing is imported, unless
`skip_bad`, which skips and reports such lines; a killed import leaves nothing of the file.
Imported events keep their `author_kind` when given, else `unknown`. It streams the file; it
never reads it whole.

Written in batches (BATCH lines): each batch's events go in as multi-row INSERTs, so FTS5
indexes them in one pass (store.events.insert_rows), and the keys of the whole file go into
`import_keys` once, in key order, just before the commit (store.import_keys.FileWriter).
Parsing is the cheaper kind (ADR-0022's addendum): the usual line is read by json's C scanner
alone (`_json`) and meta written by an encoder made once (`_meta_text`), each held equal to
what json.loads and store.events.event_row give. A file of PROCESS_BYTES or more, on Linux
with a second core and no other thread, is parsed by a forked child while this process writes
(`_parsed_apart`, ADR-0022's third addendum); any other file is parsed and written in turn on
the caller's thread. Either way the writer redacts secrets and holds the one transaction: a
child that dies, or a writer that dies, leaves nothing of the file. One transaction is fine
for a file of millions of lines: SQLite spills its pages to the WAL (on disk, about the size
of what is imported), and the importer holds a batch or two, 12 bytes a distinct line to
number identical lines, and the file's `id:` keys (peak RSS of `coworker import` at a million
lines: 159 MB in one process; with the parser process, 76 MB the writer and 144 MB the
parser, which holds the occurrence counts).

Nothing old is replayed:
- Import is idempotent. Each line gets a stable key (`id:<value>` from `id`/`source_id`, else a
  sha256 of its UTC ts, actor, kind and body plus its occurrence number among identical lines
  of the file), written to `import_keys` with the event in the same transaction; a line whose
  key is already there is counted as `already_present` and not written again.
- Kinds the loop reads as its own state (`LOOP_STATE_KINDS`: ticks, promises, what a watch
  last saw, ...) are refused, each a bad line that says so.
- A timestamp without an offset is read in the home's time zone; one more than a day in the
  future, or out of datetime's range, is a bad line.
- Every event of one run carries `meta.import_batch`, so the ladder seals a batch into episodes
  of its own.

The owner's own past lines (`mine`, `coworker import FILE --mine ACTOR`, ADR-0033): in the same
transaction the owner's vouching is recorded for each batch that holds the actor's lines (this
run's, and those of earlier imports that wrote the lines already present), so the gate may
cite those lines as the owner's words. The lines stay imported: never input, never a proposer.
A file with no line of that actor is refused, and nothing of it is imported.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from functools import lru_cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import CoworkerError, Refused, UsageError
from .secrecy import redact, redacts
from .store import Event, Store
from .store import events as ev
from .store import import_keys as keys_store
from .store.events import AUTHOR_KINDS, LOOP_STATE_KINDS

BATCH = 4096  # lines parsed and written at a time: one INSERT (db.ROWS_PER_INSERT)
FIELDS = ("ts", "kind", "actor", "author_kind", "body", "meta", "id", "source_id")
FUTURE_SLACK = timedelta(days=1)
MAX_META_DEPTH = 64  # nesting levels of meta; deeper is a bad line, not a crash later


class BadLine(UsageError):
    def __init__(self, path: Path, line_no: int, what: str) -> None:
        super().__init__(f"{path.name} line {line_no}: {what}; fix the line, or pass "
                         "--skip-bad to import the rest without it")
        self.line_no = line_no
        self.what = what


class ParserStopped(CoworkerError):
    """The forked parser of a large file ended without finishing it (killed, out of memory, a
    bug): the import's transaction is rolled back, so nothing of the file is written."""


@dataclass
class ImportReport:
    imported: int = 0
    already_present: int = 0  # lines whose key an earlier import (or line) already wrote
    skipped: list[tuple[int, str]] = field(default_factory=list)
    first_id: int | None = None
    last_id: int | None = None
    seconds: float = 0.0
    batch: str = ""  # meta.import_batch of every event this run wrote
    parser: str = "inline"  # or "process": parsed by a forked child beside the writer
    mine: str | None = None  # the actor whose lines the owner vouched for (--mine)
    mine_lines: int = 0  # lines of `mine` in the file, new or already present
    vouched: list[str] = field(default_factory=list)  # the batches vouched for `mine`

    @property
    def rate(self) -> float:
        return self.imported / self.seconds if self.seconds else 0.0


def zone(name: str) -> tzinfo:
    """The IANA time zone `name` (e.g. Europe/Berlin); a usage error when unknown."""
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise UsageError(f"unknown time zone {name!r} for timestamps without an offset; give "
                         "an IANA name such as Europe/Berlin, or UTC") from e


def _shown(value: Any, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters: an error line echoes a value, never a page."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# The usual shape, already UTC: a time of day the pattern checks, a day datetime checks (once
# a day, `_real_day`), written back without a round trip
_UTC_Z = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                    r"(?:\.[0-9]{3})?Z")


@lru_cache(maxsize=4096)
def _real_day(day: str) -> bool:
    """Whether YYYY-MM-DD is a day of the calendar (a history holds few, each many times)."""
    try:
        date.fromisoformat(day)
    except ValueError:
        return False
    return True


@lru_cache(maxsize=8)
def _latest(now: datetime) -> str:
    """The latest acceptable time after `now`, in the written format (which sorts as text)."""
    return (now + FUTURE_SLACK).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def normalize_ts(value: Any, tz: tzinfo = UTC, now: datetime | None = None) -> str:
    """`value` as UTC ISO-8601 with milliseconds; a naive time is read in `tz`. Any time that
    cannot be read, is out of range, or is more than a day after `now` is a ValueError."""
    if isinstance(value, str) and _UTC_Z.fullmatch(value) and _real_day(value[:10]):
        out = value if len(value) == 24 else f"{value[:19]}.000Z"
        if out > _latest(now or datetime.now(UTC)):
            raise ValueError(f"field 'ts': {_shown(value)} is more than a day in the future")
        return out
    # anything else (the slow path says what is wrong, or reads another shape)
    if not isinstance(value, str) or not value.strip():
        raise ValueError("field 'ts': missing or not a string (want ISO-8601, e.g. "
                         "2026-03-01T09:30:00Z)")
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"field 'ts': {_shown(value)} is not an ISO-8601 time") from e
    try:
        if when.tzinfo is None:
            when = when.replace(tzinfo=tz)
        when = when.astimezone(UTC)
    except (ValueError, OverflowError, OSError) as e:
        raise ValueError(f"field 'ts': {_shown(value)} is out of range in UTC ({e})") from None
    if when > (now or datetime.now(UTC)) + FUTURE_SLACK:
        raise ValueError(f"field 'ts': {_shown(value)} is more than a day in the future")
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _source_id(obj: dict[str, Any]) -> str | int | None:
    given = {k: obj[k] for k in ("id", "source_id") if k in obj}
    for name, v in given.items():
        if isinstance(v, bool) or not isinstance(v, (str, int)) or (
                isinstance(v, str) and not v.strip()):
            raise ValueError(f"field {name!r}: must be a non-empty string or an integer "
                             "(the line's id in the system it came from)")
    values = {str(v).strip() for v in given.values()}
    if len(values) > 1:
        raise ValueError(f"fields 'id' and 'source_id' disagree ({_shown(given['id'])} and "
                         f"{_shown(given['source_id'])}); give one of them")
    if not given:
        return None
    v = given.get("source_id", given.get("id"))
    return v.strip() if isinstance(v, str) else v


def parse_line(text: str, tz: tzinfo = UTC, now: datetime | None = None,
               batch: str | None = None) -> Event:
    """One line as an Event: meta.imported set, meta.source_id when the line has an id,
    meta.import_batch when a batch is given. Whatever the line holds, the only exception is a
    ValueError whose message is one line naming the field."""
    return parse(text, tz, now, batch)[0]


def parse(text: str, tz: tzinfo = UTC, now: datetime | None = None,
          batch: str | None = None) -> tuple[Event, str | int | None]:
    """One line as an Event, and its top-level `id`/`source_id` (None when it has none).
    Raises only ValueError (one line), never RecursionError, OverflowError or TypeError."""
    ts, kind, actor, author_kind, body, meta, source_id = fields(text, tz, now, batch)
    return Event(kind=kind, body=body, actor=actor, author_kind=author_kind, meta=meta,
                 ts=ts), source_id


Fields = tuple[str, str, str, str, str, dict[str, Any], str | int | None]


def fields(text: str, tz: tzinfo = UTC, now: datetime | None = None,
           batch: str | None = None) -> Fields:
    """One line as (ts, kind, actor, author_kind, body, meta, source_id): what `parse` makes
    an Event of, without making one (import writes rows straight from these). Raises only
    ValueError (one line)."""
    try:
        return _parse(text, tz, now, batch)
    except ValueError as e:
        raise ValueError(" ".join(str(e).splitlines()) or type(e).__name__) from None
    except (RecursionError, OverflowError, TypeError) as e:
        raise ValueError(" ".join(f"cannot be read ({type(e).__name__}: {e})".splitlines())
                         ) from None


# the C scanner json.loads runs, this module's own
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by __init__; typeshed omits it


def _json(text: str) -> Any:
    """The JSON value of a line. The usual line (one value, nothing but JSON whitespace around
    it) is read by the scanner alone, which is what json.loads returns for it; anything else
    goes through json.loads, for its result or its error in one line."""
    inner = text.strip(" \t\n\r")  # JSON's whitespace, exactly what json.loads skips
    try:
        value, end = _SCAN(inner, 0)
    except (StopIteration, ValueError, RecursionError):
        end = -1
    if end == len(inner):
        return value
    return _loads(text)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    except ValueError as e:
        if "digits" in str(e):  # int() refuses more than sys.get_int_max_str_digits() digits
            raise ValueError("a number of more than 4300 digits (write it as a string)"
                             ) from None
        raise ValueError(f"not valid JSON ({e})") from None


def _depth_over(value: Any, limit: int) -> bool:
    """Whether `value` nests dicts and lists more than `limit` levels deep (iteratively)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack += [(c, depth + 1) for c in children if isinstance(c, dict | list)]
    return False


_FIELD_SET = frozenset(FIELDS)


def _parse(text: str, tz: tzinfo, now: datetime | None, batch: str | None) -> Fields:
    obj = _json(text)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if "\\u" in text and "\\ud" in text.lower():  # half a surrogate pair is no text at all
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate escape (\\ud800-\\udfff) is not text") from None
    if not obj.keys() <= _FIELD_SET:
        unknown = sorted(set(obj) - _FIELD_SET)
        raise ValueError(f"unknown field {_shown(unknown[0])} (fields: {', '.join(FIELDS)})")
    ts = normalize_ts(obj.get("ts"), tz, now)
    kind, actor, author_kind, body = _text_fields(obj)
    # meta nested deeper than MAX_META_DEPTH needs that many brackets in the line: only then
    # is its depth worth measuring
    meta = _meta(obj.get("meta"), text.count("{") + text.count("[") > MAX_META_DEPTH)
    source_id = _source_id(obj) if "id" in obj or "source_id" in obj else None
    meta["imported"] = True
    if source_id is not None:
        meta["source_id"] = source_id
    if batch:
        meta["import_batch"] = batch
    return ts, kind, actor, author_kind, body, meta, source_id


def _text_fields(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    """kind, actor, author_kind and body of a line, checked."""
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise ValueError("field 'kind': missing or empty (e.g. \"message\")")
    kind = kind.strip()
    if kind in LOOP_STATE_KINDS:
        raise ValueError(f"kind {kind!r} is loop state and cannot be imported (refused kinds: "
                         f"{', '.join(LOOP_STATE_KINDS)}); rename the kind, e.g. "
                         f"'imported_{kind}'")
    actor = obj.get("actor", "unknown")
    if not isinstance(actor, str) or not actor.strip():
        raise ValueError("field 'actor': must be a non-empty string")
    author_kind = obj.get("author_kind", "unknown")
    if not isinstance(author_kind, str) or author_kind not in AUTHOR_KINDS:
        raise ValueError(f"field 'author_kind': {_shown(author_kind)} is not one of "
                         f"{', '.join(AUTHOR_KINDS)}")
    body = obj.get("body", "")
    if not isinstance(body, str):
        raise ValueError("field 'body': must be a string")
    return kind, actor.strip(), author_kind, body


def _meta(meta: Any, maybe_deep: bool = True) -> dict[str, Any]:
    """A line's meta, checked, as a new dict the importer may add its own keys to; its depth is
    measured only when `maybe_deep`."""
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise ValueError("field 'meta': must be a JSON object")
    if maybe_deep and _depth_over(meta, MAX_META_DEPTH):
        raise ValueError(f"field 'meta': nested more than {MAX_META_DEPTH} levels deep")
    return dict(meta)


def _digest(ts: str, actor: str, kind: str, body: str) -> bytes:
    text = f"{len(ts)},{len(actor)},{len(kind)},{len(body)}\n{ts}{actor}{kind}{body}"
    return hashlib.sha256(text.encode("utf-8")).digest()


class Keys:
    """The stable key of each line of one file: `id:<value>` for a line with an id, else
    `sha256:<digest>#<n>`, n counting identical lines of this file from 1 (so two real
    identical lines both stay, and a re-import adds neither)."""

    def __init__(self) -> None:
        # 12 bytes of the digest per distinct line: occurrence counts, not keys
        self._seen: dict[bytes, int] = {}

    def of(self, event: Event, source_id: str | int | None) -> str:
        return self.key(event.ts, event.actor, event.kind, event.body, source_id)

    def key(self, ts: str, actor: str, kind: str, body: str,
            source_id: str | int | None) -> str:
        """The key of the line with these (parsed) fields."""
        if source_id is not None:
            return f"id:{source_id}"
        digest = _digest(ts, actor, kind, body)
        short = digest[:12]
        n = self._seen.get(short, 0) + 1
        self._seen[short] = n
        return f"sha256:{digest.hex()}#{n}"


def _no_default(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _meta_encoder() -> Callable[[dict[str, Any]], str]:
    """A meta writer that writes what store.events.meta_json writes, made once: the C encoder
    json.dumps builds afresh on every call (half of meta_json's time on a short meta). Where
    this Python has no such encoder, or it writes anything else, meta_json itself."""
    try:
        from json.encoder import (  # type: ignore[attr-defined]  # CPython's C accelerators: private
            c_encode_basestring,
            c_make_encoder,
        )
        encode = c_make_encoder(None, _no_default, c_encode_basestring, None, ": ", ", ",
                                True, False, False)
        probe = {"é": [1, 2.5, None, True, {"b": "\n", "a": -0.0}], "a": "日本\u2028"}
        if "".join(encode(probe, 0)) != ev.meta_json(probe):
            return ev.meta_json
    except (ImportError, TypeError, ValueError):
        return ev.meta_json

    def meta_text(meta: dict[str, Any]) -> str:
        try:
            return "".join(encode(meta, 0))
        except ValueError:  # inf or nan somewhere: meta_json writes their names
            return ev.meta_json(meta)
    return meta_text


_meta_text = _meta_encoder()


def _row(ts: str, kind: str, actor: str, author_kind: str, body: str,
         meta: dict[str, Any]) -> tuple:
    """The events row store.events.event_row makes of these fields (tests hold the two
    equal): secrets redacted from actor, body and meta; meta as standard JSON."""
    return _redacted(_raw_row(ts, kind, actor, author_kind, body, meta))


def _raw_row(ts: str, kind: str, actor: str, author_kind: str, body: str,
             meta: dict[str, Any]) -> tuple:
    """The events row of these fields before redaction (what the parser makes: the writer
    redacts, so secrets are redacted in one place whichever process parsed)."""
    return (ts, kind, actor, author_kind, body, _meta_text(meta) if meta else None, None)


def _redacted(row: tuple) -> tuple:
    """A raw row with the registered secrets redacted from actor, body and meta."""
    ts, kind, actor, author_kind, body, meta, tick = row
    return (ts, kind, redact(actor), author_kind, redact(body),
            redact(meta) if meta else meta, tick)


LINE_MAX_BYTES = 16 << 20  # of one line: a message's 4 MiB, as JSON may escape it


def _lines(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(line number, its bytes, its size). A line over LINE_MAX_BYTES is read through in
    pieces and yielded empty, with its size: a file with no line breaks is never held whole."""
    try:
        with path.open("rb") as f:
            no = 0
            while raw := f.readline(LINE_MAX_BYTES + 1):
                no += 1
                if len(raw) <= LINE_MAX_BYTES or raw.endswith(b"\n"):
                    yield no, raw, len(raw)
                    continue
                size = len(raw)
                while rest := f.readline(1 << 20):
                    size += len(rest)
                    if rest.endswith(b"\n"):
                        break
                yield no, b"", size
    except OSError as e:
        raise UsageError(f"cannot read {path} ({e.strerror or e}); check that it is a "
                         "readable file") from None


def _too_long(size: int) -> ValueError:
    limit = (f"{LINE_MAX_BYTES >> 20} MiB" if LINE_MAX_BYTES % (1 << 20) == 0
             else f"{LINE_MAX_BYTES:,} bytes")
    return ValueError(f"{size:,} bytes, over the {limit} one line may hold; split its text "
                      "across lines")


@dataclass
class _Parsed:
    """One batch of parsed lines, ready to be written: each line's key and events row, and the
    bytes of the file read for it (for the progress callback)."""
    keys: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    read: int = 0


def _parsed(path: Path, tz: tzinfo, now: datetime, batch: str,
            skipped: list[tuple[int, str]] | None) -> Generator[_Parsed, None, None]:
    """The lines of `path`, parsed and keyed, BATCH at a time (the last batch may hold only
    bytes read). A bad line raises BadLine, or is added to `skipped` when that is a list
    (--skip-bad)."""
    keys = Keys()
    out = _Parsed()
    for no, raw, size in _lines(path):
        out.read += size
        if not raw.strip() and size == len(raw):
            continue
        try:
            if size > len(raw):
                raise _too_long(size)
            ts, kind, actor, author_kind, body, meta, source_id = fields(
                raw.decode("utf-8"), tz, now, batch)
        except ValueError as e:  # UnicodeDecodeError is a ValueError too
            what = (f"not UTF-8 text ({e.reason} at offset {e.start})"
                    if isinstance(e, UnicodeDecodeError) else str(e))
            if skipped is None:
                raise BadLine(path, no, what) from None
            skipped.append((no, what))
            continue
        out.keys.append(keys.key(ts, actor, kind, body, source_id))
        out.rows.append(_raw_row(ts, kind, actor, author_kind, body, meta))
        if len(out.rows) >= BATCH:
            yield out
            out = _Parsed()
    if out.rows or out.read:
        yield out


PROCESS_BYTES = 4 << 20  # files this large are parsed by a second process (_parsed_apart)
PARSER = "auto"  # or "inline" / "process" to choose regardless (tests)


def _parse_apart(path: Path) -> bool:
    """Whether to parse `path` in a forked child while this process writes: a large file, a
    second core, Linux (fork is safe there), and no other thread that a fork could catch
    holding a lock. PARSER other than "auto" decides instead."""
    import os
    import sys
    import threading

    if PARSER != "auto":
        return PARSER == "process"
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return (sys.platform.startswith("linux") and cores >= 2
            and threading.active_count() == 1 and path.stat().st_size >= PROCESS_BYTES)


def _parsed_apart(path: Path, tz: tzinfo, now: datetime, batch: str,
                  skipped: list[tuple[int, str]] | None) -> Generator[_Parsed, None, None]:
    """What `_parsed` yields, parsed by a forked child while this process writes. The child
    sends each batch through a pipe (a batch or two ahead at most: the pipe is small) and
    ends with a message that says how it ended; a child that dies without one is an error
    here, so the caller's transaction rolls back."""
    import multiprocessing
    import signal

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_parse_to, args=(send, receive, path, tz, now, batch,
                                                skipped is not None), daemon=True)
    # Ctrl-C held back across the fork: the child ignores it before it can arrive there
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        child.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    send.close()
    ended = False
    try:
        while True:
            try:
                message = receive.recv()
            except EOFError:
                break
            if message[0] == "batch":
                if skipped is not None:
                    skipped += message[4]
                yield _Parsed(message[1], message[2], message[3])
            elif message[0] == "bad":
                raise BadLine(path, message[1], message[2])
            elif message[0] == "usage":
                raise UsageError(message[1])
            else:
                ended = message[0] == "end"
                if not ended:
                    raise ParserStopped(f"the import's parser failed on {path.name} "
                                        f"({message[1]}); nothing was imported")
                break
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join()
    if not ended:
        raise ParserStopped(f"the import's parser process stopped (exit code {child.exitcode}) "
                            f"before the end of {path.name}; nothing was imported, run the "
                            "import again")


def _parse_to(send: Any, receive: Any, path: Path, tz: tzinfo, now: datetime, batch: str,
              skip_bad: bool) -> None:
    """The forked parser: `_parsed` of the file, each batch sent as it is made. It closes its
    copy of the pipe's reading end, so that a writer that dies leaves the pipe with no reader
    and the next send ends this process. Ctrl-C is the writer's to handle (it stops this
    process), so it is ignored here."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    receive.close()
    skipped: list[tuple[int, str]] | None = [] if skip_bad else None
    try:
        try:
            for parsed in _parsed(path, tz, now, batch, skipped):
                send.send(("batch", parsed.keys, parsed.rows, parsed.read, skipped or []))
                if skipped:
                    skipped.clear()  # the list _parsed goes on adding to
        except BadLine as e:
            send.send(("bad", e.line_no, e.what))
        except UsageError as e:
            send.send(("usage", str(e)))
        except BrokenPipeError:
            raise
        except Exception as e:  # noqa: BLE001 - said to the writer, which raises it
            send.send(("failed", f"{type(e).__name__}: {e}"))
        else:
            send.send(("end",))
    except BrokenPipeError:
        pass  # the writer is gone, and its transaction with it: nobody to say anything to
    finally:
        send.close()


class _Batches:
    """Parsed batches on their way into the store: lines whose key an earlier import wrote,
    or an earlier line of this file (only `id:` keys can repeat: content keys carry their
    occurrence number), are counted and dropped; the rest are written."""

    def __init__(self, store: Store, source: str, report: ImportReport) -> None:
        self.writer = keys_store.FileWriter(store, source)
        self.store = store
        self.report = report
        self.ids: set[str] = set()  # the `id:` keys of this file so far
        self.mine_new = 0  # lines of report.mine this run writes
        self.earlier: set[str] = set()  # batches of earlier imports holding lines of report.mine
        self.actors: set[str] = set()  # a few actors of the file, to name when mine has none

    def _new(self, key: str, there: set[str]) -> bool:
        """Whether the line of this key is to be written (else it is counted as present)."""
        if key in there or key in self.ids:
            self.report.already_present += 1
            return False
        if key.startswith("id:"):
            self.ids.add(key)
        return True

    def write(self, batch: _Parsed) -> None:
        if not batch.rows:
            return
        there = self.writer.present(batch.keys)
        keep = [i for i, key in enumerate(batch.keys) if self._new(key, there)]
        if self.report.mine is not None:
            self._mine(batch, there, keep)
        keys, rows = batch.keys, batch.rows
        if len(keep) < len(keys):
            keys = [keys[i] for i in keep]
            rows = [rows[i] for i in keep]
        if redacts():
            rows = [_redacted(r) for r in rows]
        span = self.writer.write(rows, keys)
        if span:
            if self.report.first_id is None:
                self.report.first_id = span[0]
            self.report.last_id = span[1]
            self.report.imported += len(rows)

    def _mine(self, batch: _Parsed, there: set[str], keep: list[int]) -> None:
        """Count the lines of the actor the owner vouches for, and note the earlier batches that
        hold those already present (an actor's lines are the rows' raw actor, as parsed)."""
        mine = self.report.mine
        own = [i for i, row in enumerate(batch.rows) if row[2] == mine]
        if not own and len(self.actors) < 8:
            self.actors.update(row[2] for row in batch.rows[:64])
        self.report.mine_lines += len(own)
        self.mine_new += len(set(own) & set(keep))
        present = [batch.keys[i] for i in own if batch.keys[i] in there]
        if present and mine is not None:
            self.earlier |= keys_store.batches_of(self.store, present, mine)

    def finish(self) -> None:
        self.writer.finish()

    def vouch(self, path: Path) -> None:
        """Record the owner's vouching for the batches that hold the lines of report.mine; a
        file with none of them is refused (the caller's transaction then writes nothing)."""
        mine, report = self.report.mine, self.report
        if mine is None:
            return
        if not report.mine_lines:
            some = ", ".join(repr(a) for a in sorted(self.actors)[:8]) or "none"
            raise Refused(f"--mine {mine!r}: no line of {path.name} has that actor (some of "
                          f"its actors: {some}); nothing was imported: name the actor as the "
                          "file spells it")
        report.vouched = sorted(self.earlier - {report.batch})
        if self.mine_new:
            report.vouched.append(report.batch)
        already = keys_store.vouched(self.store)
        for batch in report.vouched:
            if mine not in already.get(batch, ()):  # said once is enough
                keys_store.vouch(self.store, batch, mine, path.name)


def import_file(store: Store, path: Path, *, skip_bad: bool = False,
                progress: Callable[[int], None] | None = None,
                timezone: str = "UTC", mine: str | None = None) -> ImportReport:
    """Import `path` in one transaction; `timezone` (IANA) reads timestamps without an offset.
    `progress` is called with the bytes of each batch once it is written. `mine`: the actor
    whose lines the owner vouches for as the owner's own (ADR-0033), recorded in the same
    transaction; Refused, and nothing imported, when no line has that actor."""
    import time

    if not path.is_file():
        raise UsageError((f"{path} is not a regular file" if path.exists() else
                          f"no such file: {path}") + "; give the path of a .jsonl file")
    tz = zone(timezone)
    if mine is not None and not mine.strip():
        raise UsageError("--mine needs the actor whose lines are yours, as the file spells it")
    report = ImportReport(batch=uuid.uuid4().hex[:12],
                          mine=None if mine is None else mine.strip())
    t0 = time.monotonic()
    if _parse_apart(path):
        report.parser = "process"
    parse = _parsed_apart if report.parser == "process" else _parsed
    parsed = parse(path, tz, datetime.now(UTC), report.batch,
                   report.skipped if skip_bad else None)
    # closed however the writing ends, so a parser process never outlives a failed import
    with closing(parsed), store.transaction(), ev.bulk_counts(store):
        batches = _Batches(store, path.name, report)
        for batch in parsed:
            batches.write(batch)
            if progress and batch.read:
                progress(batch.read)
        batches.finish()
        batches.vouch(path)
    report.seconds = time.monotonic() - t0
    return report
