"""`coworker import FILE`: historical events, one JSON object a line, keeping their timestamps.

Owns parsing and validating each line (ts, kind, actor, author_kind, body, meta) and writing
them all in one transaction: a bad line names its line number and field and nothing is
imported, unless `skip_bad`, which skips and reports such lines. Imported events keep their
`author_kind` when given, else `unknown`. It streams the file; it never reads it whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import UsageError
from .store import Event, Store
from .store.migrations import AUTHOR_KINDS

BATCH = 5000
FIELDS = ("ts", "kind", "actor", "author_kind", "body", "meta")


class BadLine(UsageError):
    def __init__(self, path: Path, line_no: int, what: str) -> None:
        super().__init__(f"{path.name} line {line_no}: {what}; fix the line, or pass "
                         "--skip-bad to import the rest without it")
        self.line_no = line_no
        self.what = what


@dataclass
class ImportReport:
    imported: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    first_id: int | None = None
    last_id: int | None = None
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.imported / self.seconds if self.seconds else 0.0


def normalize_ts(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("field 'ts': missing or not a string (want ISO-8601, e.g. "
                         "2026-03-01T09:30:00Z)")
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"field 'ts': {value!r} is not an ISO-8601 time") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_line(text: str) -> Event:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from e
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
    ts = normalize_ts(obj.get("ts"))
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise ValueError("field 'kind': missing or empty (e.g. \"message\")")
    actor = obj.get("actor", "unknown")
    if not isinstance(actor, str) or not actor.strip():
        raise ValueError("field 'actor': must be a non-empty string")
    author_kind = obj.get("author_kind", "unknown")
    if author_kind not in AUTHOR_KINDS:
        raise ValueError(f"field 'author_kind': {author_kind!r} is not one of "
                         f"{', '.join(AUTHOR_KINDS)}")
    body = obj.get("body", "")
    if not isinstance(body, str):
        raise ValueError("field 'body': must be a string")
    meta = obj.get("meta")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise ValueError("field 'meta': must be a JSON object")
    return Event(kind=kind.strip(), body=body, actor=actor.strip(), author_kind=author_kind,
                 meta={**meta, "imported": True}, ts=ts)


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as f:
        yield from enumerate(f, start=1)


def import_file(store: Store, path: Path, *, skip_bad: bool = False,
                progress: Callable[[int], None] | None = None) -> ImportReport:
    import time

    if not path.is_file():
        raise UsageError(f"no such file: {path}; give the path of a .jsonl file")
    report = ImportReport()
    t0 = time.monotonic()
    sql = ("INSERT INTO events(ts, kind, actor, author_kind, body, meta, tick_id) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)")
    with store.transaction() as db:
        batch: list[tuple] = []

        def flush() -> None:
            if batch:
                db.executemany(sql, batch)
                batch.clear()

        for no, raw in _lines(path):
            if progress:
                progress(len(raw))
            if not raw.strip():
                continue
            try:
                event = parse_line(raw.decode("utf-8"))
            except ValueError as e:  # UnicodeDecodeError is a ValueError too
                what = (f"not UTF-8 text ({e.reason})" if isinstance(e, UnicodeDecodeError)
                        else str(e))
                if not skip_bad:
                    raise BadLine(path, no, what) from None
                report.skipped.append((no, what))
                continue
            batch.append(event.to_row())
            report.imported += 1
            if len(batch) >= BATCH:
                flush()
        flush()
        if report.imported:
            last = db.execute("SELECT MAX(id) FROM events").fetchone()[0]
            report.last_id = int(last)
            report.first_id = int(last) - report.imported + 1
    report.seconds = time.monotonic() - t0
    return report
