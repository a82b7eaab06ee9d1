"""`coworker import FILE`: historical events, one JSON object a line, keeping their timestamps.

Owns parsing and validating each line (ts, kind, actor, author_kind, body, meta, and an
optional `id` or `source_id` from the system it came from) and writing them all in one
transaction: a bad line names its line number and field and nothing is imported, unless
`skip_bad`, which skips and reports such lines. Imported events keep their `author_kind` when
given, else `unknown`. It streams the file; it never reads it whole.

Nothing old is replayed:
- Import is idempotent. Each line gets a stable key (`id:<value>` from `id`/`source_id`, else a
  sha256 of its UTC ts, actor, kind and body plus its occurrence number among identical lines
  of the file), written to `import_keys` with the event in the same transaction; a line whose
  key is already there is counted as `already_present` and not written again.
- Kinds the loop reads as its own state (`LOOP_STATE_KINDS`) are refused.
- A timestamp without an offset is read in the home's time zone; one more than a day in the
  future, or out of datetime's range, is a bad line.
- Every event of one run carries `meta.import_batch`, so the ladder seals a batch into episodes
  of its own.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import UsageError
from .store import Event, Store
from .store import import_keys as keys_store
from .store.events import AUTHOR_KINDS, LOOP_STATE_KINDS

BATCH = 5000
FIELDS = ("ts", "kind", "actor", "author_kind", "body", "meta", "id", "source_id")
FUTURE_SLACK = timedelta(days=1)
MAX_META_DEPTH = 64  # nesting levels of meta; deeper is a bad line, not a crash later


class BadLine(UsageError):
    def __init__(self, path: Path, line_no: int, what: str) -> None:
        super().__init__(f"{path.name} line {line_no}: {what}; fix the line, or pass "
                         "--skip-bad to import the rest without it")
        self.line_no = line_no
        self.what = what


@dataclass
class ImportReport:
    imported: int = 0
    already_present: int = 0  # lines whose key an earlier import (or line) already wrote
    skipped: list[tuple[int, str]] = field(default_factory=list)
    first_id: int | None = None
    last_id: int | None = None
    seconds: float = 0.0
    batch: str = ""  # meta.import_batch of every event this run wrote

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


def normalize_ts(value: Any, tz: tzinfo = UTC, now: datetime | None = None) -> str:
    """`value` as UTC ISO-8601 with milliseconds; a naive time is read in `tz`. Any time that
    cannot be read, is out of range, or is more than a day after `now` is a ValueError."""
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
    try:
        return _parse(text, tz, now, batch)
    except ValueError as e:
        raise ValueError(" ".join(str(e).splitlines()) or type(e).__name__) from None
    except (RecursionError, OverflowError, TypeError) as e:
        raise ValueError(" ".join(f"cannot be read ({type(e).__name__}: {e})".splitlines())
                         ) from None


def _json(text: str) -> Any:
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


def _parse(text: str, tz: tzinfo, now: datetime | None,
           batch: str | None) -> tuple[Event, str | int | None]:
    obj = _json(text)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if "\\ud" in text.lower():  # a \uXXXX escape of half a surrogate pair is no text at all
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate escape (\\ud800-\\udfff) is not text") from None
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field {_shown(unknown[0])} (fields: {', '.join(FIELDS)})")
    ts = normalize_ts(obj.get("ts"), tz, now)
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
    meta = obj.get("meta")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise ValueError("field 'meta': must be a JSON object")
    if any(isinstance(v, dict | list) for v in meta.values()) and _depth_over(meta,
                                                                           MAX_META_DEPTH):
        raise ValueError(f"field 'meta': nested more than {MAX_META_DEPTH} levels deep")
    source_id = _source_id(obj)
    extra: dict[str, Any] = {"imported": True}
    if source_id is not None:
        extra["source_id"] = source_id
    if batch:
        extra["import_batch"] = batch
    return Event(kind=kind, body=body, actor=actor.strip(), author_kind=author_kind,
                 meta={**meta, **extra}, ts=ts), source_id


def content_digest(event: Event) -> str:
    """sha256 of what makes two lines the same line: UTC ts, actor, kind, body (each prefixed
    by its length, so no two different lines read the same)."""
    parts = (event.ts, event.actor, event.kind, event.body)
    head = ",".join(str(len(x)) for x in parts)
    text = f"{head}\n{''.join(parts)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Keys:
    """The stable key of each line of one file: `id:<value>` for a line with an id, else
    `sha256:<digest>#<n>`, n counting identical lines of this file from 1 (so two real
    identical lines both stay, and a re-import adds neither)."""

    def __init__(self) -> None:
        # 12 bytes of the digest per distinct line: occurrence counts, not keys
        self._seen: dict[bytes, int] = {}

    def of(self, event: Event, source_id: str | int | None) -> str:
        if source_id is not None:
            return f"id:{source_id}"
        digest = content_digest(event)
        short = bytes.fromhex(digest[:24])
        n = self._seen.get(short, 0) + 1
        self._seen[short] = n
        return f"sha256:{digest}#{n}"


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    try:
        with path.open("rb") as f:
            yield from enumerate(f, start=1)
    except OSError as e:
        raise UsageError(f"cannot read {path} ({e.strerror or e}); check that it is a "
                         "readable file") from None


def import_file(store: Store, path: Path, *, skip_bad: bool = False,
                progress: Callable[[int], None] | None = None,
                timezone: str = "UTC") -> ImportReport:
    """Import `path` in one transaction; `timezone` (IANA) reads timestamps without an offset."""
    import time

    if not path.is_file():
        raise UsageError(f"no such file: {path}; give the path of a .jsonl file")
    tz = zone(timezone)
    now = datetime.now(UTC)
    report = ImportReport(batch=uuid.uuid4().hex[:12])
    t0 = time.monotonic()
    keys = Keys()
    with store.transaction():
        pending: list[tuple[str, Event]] = []

        def flush() -> None:
            if not pending:
                return
            there = keys_store.present(store, [k for k, _ in pending])
            rows: list[tuple] = []
            new: list[str] = []
            for key, event in pending:
                if key in there:
                    report.already_present += 1
                    continue
                there.add(key)  # a repeated id later in this same chunk
                rows.append(event.to_row())
                new.append(key)
            pending.clear()
            span = keys_store.write(store, rows, new, path.name)
            if span:
                if report.first_id is None:
                    report.first_id = span[0]
                report.last_id = span[1]
                report.imported += len(rows)

        for no, raw in _lines(path):
            if progress:
                progress(len(raw))
            if not raw.strip():
                continue
            try:
                event, source_id = parse(raw.decode("utf-8"), tz, now, report.batch)
            except ValueError as e:  # UnicodeDecodeError is a ValueError too
                what = (f"not UTF-8 text ({e.reason} at offset {e.start})"
                        if isinstance(e, UnicodeDecodeError) else str(e))
                if not skip_bad:
                    raise BadLine(path, no, what) from None
                report.skipped.append((no, what))
                continue
            pending.append((keys.of(event, source_id), event))
            if len(pending) >= BATCH:
                flush()
        flush()
    report.seconds = time.monotonic() - t0
    return report
