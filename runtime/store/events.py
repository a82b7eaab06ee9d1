"""Events: the append-only log, read as one history with the archive.

Owns the Event record (frozen, UTC timestamp by default, one way to a row and back), the event
vocabulary (who writes an event: AUTHOR_KINDS; which kinds are the loop's bookkeeping or its own
state: BOOKKEEPING_KINDS, LOOP_STATE_KINDS), appending (one event, or a batch as multi-row
INSERTs, so FTS5 indexes a batch at once), reading by id, tail and cursor,
counting, and the FTS5 primitive over the history. No code path here updates or deletes an
event; the database's triggers refuse it too.

Nothing the store accepts may later fail a read: meta is written as standard JSON only
(non-finite floats become "Infinity", "-Infinity", "NaN", so json_extract never meets
malformed JSON), and a stored meta that is not a JSON object (from an older version) reads back
as {"unreadable_meta": its first 200 characters} instead of raising.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ..secrecy import redact
from . import marks, pg_fts, pg_terms
from .db import Store, insert_values, new_id

COLUMNS = "id, ts, kind, actor, author_kind, body, meta, tick_id"
IDS_PER_READ = 500  # ids per `IN (...)`, well below an old SQLite's 999 variables
UNREADABLE_META = "unreadable_meta"  # the key a stored meta that is not JSON is read back under

log = logging.getLogger(__name__)

# Who wrote an event. The events table's CHECK constraint holds the list as it was shipped
# (migrations are literal SQL); a new kind here needs a migration that widens the CHECK.
AUTHOR_KINDS = ("user", "agent", "tool", "third_party", "system", "unknown")

# The loop's own bookkeeping: not content a summary, a card, a search or a recall is made of.
BOOKKEEPING_KINDS = frozenset({
    "tick", "tick_end", "start", "stop", "crash", "tool_call", "config_reload", "config_error",
    "step_cap", "promise_due", "recall", "replies_read",
})

# The kinds the loop reads as its own state. Import refuses them (an imported `tick` or
# `promise` would steer the loop), and the loop reads them only from rows it wrote itself.
# The kinds the coworker itself writes (imported history may add its own).
KNOWN_KINDS = (
    "message", "tick", "tick_end", "tick_failed", "model_response", "tool_call", "tool_result",
    "note", "decision", "outbox", "dry_run", "promise", "promise_due", "ritual_due", "ritual",
    "ritual_failed", "recall", "promotion", "input_set_aside", "input_retry", "pin", "unpin",
    "memory_strike", "memory_supersede", "memory_restore", "redaction", "start", "stop", "crash",
    "config_reload",
    "config_error", "step_cap", "spending_cap", "backup_restored", "action_queued",
    "action_approved", "action_rejected", "action_expired", "action_result", "watch_baseline",
    "watch_change", "vouch", "unvouch", "replies_read",
    "hermes_user", "hermes_assistant", "hermes_tool", "hermes_memory")  # the Hermes provider's
# The owner's events whose body is text the owner wrote (`Event.owners_words`); the owner's
# other events record an action and may quote what someone else wrote.
OWNERS_TEXT_KINDS = frozenset({"message", "pin", "memory_supersede"})
# What an imported line the owner vouched for (`coworker import --mine`, ADR-0033) may claim to
# be: someone's text (OWNERS_TEXT_KINDS) that the file does not itself say a tool, an agent, the
# system or a third party wrote. The file's author_kind can take the vouching away, never give it.
VOUCHABLE_AUTHOR_KINDS = frozenset({"user", "unknown"})
LOOP_STATE_KINDS = ("tick", "tick_end", "tick_failed", "promise", "promise_due", "recall",
                    "ritual_due", "input_set_aside", "watch_baseline", "watch_change", "vouch",
                    "unvouch", "replies_read")


def now_iso() -> str:
    return iso_z(datetime.now(UTC))


def iso_z(when: datetime) -> str:
    """The one time format the coworker writes and prints as JSON: UTC, milliseconds, "Z"."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Event:
    kind: str
    body: str = ""
    actor: str = "system"
    author_kind: str = "system"
    meta: dict[str, Any] = field(default_factory=dict)
    tick_id: int | None = None
    ts: str = field(default_factory=now_iso)
    id: int | None = None
    source: str = "hot"

    def __post_init__(self) -> None:
        if self.author_kind not in AUTHOR_KINDS:
            raise ValueError(f"author_kind must be one of {AUTHOR_KINDS}, not {self.author_kind!r}")

    @classmethod
    def owner_message(cls, body: str, via: str, **meta: Any) -> Event:
        """A message from the owner (tell, the inbox): the input a tick perceives, in the
        owner's own words."""
        return cls(kind="message", body=body, actor="owner", author_kind="user",
                   meta={"via": via, **meta})

    @classmethod
    def agent_message(cls, body: str, client: str | None = None, **meta: Any) -> Event:
        """A message from another agent over MCP: an input the loop wakes for, never the
        owner's words (actor `mcp` or `mcp:<client name>`, author_kind `agent`)."""
        actor = f"mcp:{client}" if client else "mcp"
        return cls(kind="message", body=body, actor=actor, author_kind="agent",
                   meta={"via": "mcp", **meta})

    @property
    def imported(self) -> bool:
        return bool(self.meta.get("imported"))

    @property
    def owners_words(self) -> bool:
        """Text the owner wrote, through one of the owner's own doors: a message (tell, inbox),
        a pin, the new text of a supersede. An imported line never is, whatever author_kind it
        claims (the gate alone may count one the owner vouched for: `vouchable`); nor is the
        record of an owner's action (a strike, an approval, a restore), whose body quotes text
        the owner did not write (the struck entry, a tool's name)."""
        return (self.author_kind == "user" and self.actor == "owner" and not self.imported
                and self.kind in OWNERS_TEXT_KINDS)

    @property
    def vouchable(self) -> bool:
        """An imported line the owner's vouching for its batch and actor could make the owner's
        words at the gate (ADR-0033): text someone wrote, of a batch, that the file does not
        say a tool, agent, system or third party wrote. Whether it IS vouched is the store's
        to say (`import_keys.vouched_lines`), never the line's own meta."""
        return (self.imported and self.kind in OWNERS_TEXT_KINDS
                and self.author_kind in VOUCHABLE_AUTHOR_KINDS
                and isinstance(self.meta.get("import_batch"), str))

    def to_row(self) -> tuple:
        return event_row(self.ts, self.kind, self.actor, self.author_kind, self.body,
                         self.meta, self.tick_id)

    @classmethod
    def from_row(cls, row: Any) -> Event:
        keys = row.keys()
        return cls(
            id=row["id"],
            ts=row["ts"],
            kind=row["kind"],
            actor=row["actor"],
            author_kind=row["author_kind"],
            body=row["body"],
            meta=read_meta(row["meta"], row["id"], getattr(row, "said", None)),
            tick_id=row["tick_id"],
            source=row["source"] if "source" in keys else "hot",
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "actor": self.actor,
            "author_kind": self.author_kind,
            "body": self.body,
            "meta": self.meta,
            "tick_id": self.tick_id,
            "source": self.source,
        }


# --- meta: standard JSON in, never an exception out ------------------------------------------

_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _finite_name(x: float) -> str:
    return "NaN" if math.isnan(x) else _NON_FINITE[x]


def finite(value: Any) -> Any:
    """A copy of JSON-like `value` in which every non-finite float (inf, -inf, nan), at any
    depth and as a key too, is its name as a string ("Infinity", "-Infinity", "NaN"): SQLite's
    JSON functions read only standard JSON, and Python's json.dumps writes those bare.
    Iterative, so no nesting depth json.loads accepts can make it recurse too deep."""
    def fix(v: Any) -> Any:
        return _finite_name(v) if isinstance(v, float) and not math.isfinite(v) else v

    if not isinstance(value, dict | list | tuple):
        return fix(value)
    root: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        src, dst = stack.pop()
        pairs = src.items() if isinstance(src, dict) else enumerate(src)
        for k, v in pairs:
            if isinstance(v, dict | list | tuple):
                new: dict[Any, Any] | list[Any] = {} if isinstance(v, dict) else []
                stack.append((v, new))
                v = new
            else:
                v = fix(v)
            if isinstance(dst, dict):
                dst[fix(k)] = v
            else:
                dst.append(v)
    return root


# json.dumps(meta, ensure_ascii=False, sort_keys=True, allow_nan=False), without building an
# encoder per call (an import writes a million metas)
_ENCODE = json.JSONEncoder(ensure_ascii=False, sort_keys=True, allow_nan=False).encode


def meta_json(meta: dict[str, Any]) -> str:
    """`meta` as standard JSON (RFC 8259), the only JSON the store writes: non-finite floats
    become their names (see `finite`), so no later json_extract over the events can fail."""
    try:
        return _ENCODE(meta)
    except ValueError:  # inf or nan somewhere
        return _ENCODE(finite(meta))


# Half a UTF-16 surrogate pair (a JSON "\ud800" escape from a model, a tool, another agent):
# no text at all, and SQLite cannot store it, so a row holding one would fail its whole turn
SURROGATE = re.compile("[\ud800-\udfff]")
# PostgreSQL's text holds no NUL character, and its JSON no \u0000 escape (where the
# backslash is not itself escaped): on PostgreSQL both become U+FFFD (`storable`)
NUL = "\x00"
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def whole_text(text: str, what: str = "text") -> str:
    """`text` with each lone surrogate replaced by U+FFFD, with a WARNING when there was one."""
    if SURROGATE.search(text) is None:
        return text
    log.warning("%s held %d lone surrogate(s) (half a UTF-16 pair, no text at all): stored "
                "as U+FFFD", what, len(SURROGATE.findall(text)))
    return SURROGATE.sub("\ufffd", text)


def event_row(ts: str, kind: str, actor: str, author_kind: str, body: str,
              meta: dict[str, Any], tick_id: int | None = None) -> tuple:
    """The events row of these fields (what Event.to_row writes): secrets redacted from actor,
    body and meta, meta as standard JSON (None when empty), lone surrogates as U+FFFD."""
    text = whole_text(redact(meta_json(meta)), f"a {kind} event's meta") if meta else None
    return (ts, kind, whole_text(redact(actor), f"a {kind} event's actor"), author_kind,
            whole_text(redact(body), f"a {kind} event's body"), text, tick_id)


# bare Infinity/NaN (rows older versions wrote) read as their names, as `finite` writes them now
_DECODER = json.JSONDecoder(parse_constant=str)


def read_meta(raw: Any, event_id: Any = None, said: set[str] | None = None) -> dict[str, Any]:
    """A stored meta as a dict; never raises. Rows an older version wrote may hold what is
    not JSON, or not an object (e.g. `Infinity`): those read back as
    {"unreadable_meta": <the first 200 characters>}, with one WARNING per open store (`said`:
    the store's record of what it has said, which its rows carry; without it, each time)."""
    if not raw:
        return {}
    try:
        if isinstance(raw, bytes | bytearray):
            raw = bytes(raw).decode("utf-8", "replace")
        meta = _DECODER.decode(raw)
    except (ValueError, TypeError, RecursionError):
        meta = None
    if isinstance(meta, dict):
        return meta
    text = (raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray)
            else str(raw))
    if said is None or UNREADABLE_META not in said:
        if said is not None:
            said.add(UNREADABLE_META)
        log.warning("event %s has a meta that is not a JSON object (written by an older "
                    "version?); it reads as {\"%s\": ...}; further such events are not "
                    "logged", event_id, UNREADABLE_META)
    return {UNREADABLE_META: text[:200]}


def storable(store: Store, rows: Sequence[tuple]) -> Sequence[tuple]:
    """Event rows as this store can hold them: on PostgreSQL each NUL character of actor and
    body, and each \\u0000 escape of meta, as U+FFFD (with a WARNING); SQLite's as given."""
    if getattr(store, "dialect", "sqlite") != "postgres":
        return rows
    out = []
    for ts, kind, actor, author_kind, body, meta, tick in rows:
        if NUL in actor or NUL in body or (meta and "\\u0000" in meta):
            log.warning("a %s event held NUL character(s), which PostgreSQL cannot store: "
                        "stored as U+FFFD", kind)
            actor, body = actor.replace(NUL, "\ufffd"), body.replace(NUL, "\ufffd")
            meta = _JSON_NUL.sub(r"\1\\ufffd", meta) if meta else meta
        out.append((ts, kind, actor, author_kind, body, meta, tick))
    return out


def append(store: Store, event: Event) -> int:
    """Write one event in its own transaction (or inside the caller's); return its id."""
    with store.transaction() as db:
        cur = db.execute(
            "INSERT INTO events(ts, kind, actor, author_kind, body, meta, tick_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            storable(store, [event.to_row()])[0],
        )
        return new_id(cur)


def append_many(store: Store, events: Iterable[Event], chunk: int = 4096) -> list[int]:
    """Write these events in one transaction (or inside the caller's), in order, in batches
    (see `insert_rows`); return their ids."""
    ids: list[int] = []
    with store.transaction():
        rows: list[tuple] = []
        for e in events:
            rows.append(e.to_row())
            if len(rows) >= chunk:
                ids += _ids(insert_rows(store, rows))
                rows = []
        ids += _ids(insert_rows(store, rows))
    return ids


def _ids(span: tuple[int, int] | None) -> list[int]:
    return list(range(span[0], span[1] + 1)) if span else []


_INSERT_INTO = "events(ts, kind, actor, author_kind, body, meta, tick_id)"


def insert_rows(store: Store, rows: Sequence[tuple]) -> tuple[int, int] | None:
    """Append event rows (Event.to_row, in order) with as few INSERTs as SQLite allows; return
    the first and last new ids, or None for no rows. Inside the caller's transaction, or in its
    own.

    Why few statements: FTS5 writes its pending terms to disk as a new index segment at every
    statement that touches it, so rows inserted one statement each (the events_ai trigger
    firing per row) cost one tiny segment per event and endless merging. A multi-row INSERT
    (db.insert_values: 4,096 rows a statement where SQLite allows 28,672 variables) fires the
    same trigger for each row with the same values, so the index holds exactly what per-row
    appends write, but FTS5 writes the batch as a few large segments. Ids are contiguous:
    events has AUTOINCREMENT and the write lock is held."""
    if not rows:
        return None
    rows = storable(store, rows)
    if getattr(store, "dialect", "sqlite") == "postgres":
        return _pg_copy(store, rows)
    with store.transaction() as db:
        written, last = insert_values(db, _INSERT_INTO, rows, 7)
        if written != len(rows):  # rolls this batch back
            raise RuntimeError(f"inserted {len(rows)} events but {written} were written")
    return last - len(rows) + 1, last


PG_CLEAN_ROWS = 256  # a batch this large merges the GIN index's pending list after it


def bulk_counts(store: Store) -> contextlib.AbstractContextManager[None]:
    """For a bulk append inside the caller's transaction: on PostgreSQL the appended events'
    term counts added up once at its end, not once a batch (pg_fts.deferred_counts: an
    import of a million events in one process, 81.6 -> 63.2 s); SQLite's FTS5 keeps its own."""
    if getattr(store, "dialect", "sqlite") == "postgres":
        return pg_fts.deferred_counts(store)
    return contextlib.nullcontext()


_COPY_INTO = "events(ts, kind, actor, author_kind, body, meta, tick_id, tsv, ntok)"


def _pg_copy(store: Any, rows: Sequence[tuple]) -> tuple[int, int]:
    """insert_rows on PostgreSQL: one COPY (no statement of 65,535 parameters to build, parse
    and send back as ids; the FTS statistics' statement trigger fires once), each row's search
    vector and token count made here where pg_terms can (else NULL: the server makes them, as
    for any INSERT; a fifth of the server's time per row), the ids read from
    the identity's sequence (consecutive: the write lock is held), checked, then the GIN
    pending list merged (pg_fts.clean_pending)."""
    import psycopg

    with store.transaction():
        try:
            with store.raw.cursor() as cur:
                with cur.copy(f"COPY {_COPY_INTO} FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row((*row, *(pg_terms.row_terms(row[4], row[1], row[2])
                                                or (None, None))))
                last = int(cur.execute("SELECT currval(pg_get_serial_sequence('events', 'id'))"
                                       ).fetchone()[0])
                first = last - len(rows) + 1
                there = cur.execute("SELECT count(*) FROM events WHERE id BETWEEN %s AND %s",
                                    (first, last)).fetchone()[0]
        except psycopg.Error as e:
            raise store.error(e) from e
        if there != len(rows):  # rolls this batch back
            raise RuntimeError(f"copied {len(rows)} events but ids {first}..{last} hold {there}")
        if len(rows) >= PG_CLEAN_ROWS:
            pg_fts.clean_pending(store)
    return first, last


def get(store: Store, event_id: int) -> Event | None:
    rows = store.query(f"SELECT {COLUMNS}, source FROM history WHERE id = ?", (event_id,))
    return Event.from_row(rows[0]) if rows else None


def existing_ids(store: Store, ids: Sequence[int]) -> set[int]:
    """Which of these ids resolve to an event, hot or archived."""
    if not ids:
        return set()
    marks = ",".join("?" * len(ids))
    rows = store.query(f"SELECT id FROM history WHERE id IN ({marks})", tuple(ids))
    return {int(r[0]) for r in rows}


def tail(store: Store, n: int = 20, kind: str | None = None, before_id: int | None = None,
         include_archive: bool = True, since_ts: str | None = None,
         by_id: bool = False, skip_pending: bool = False,
         until_ts: str | None = None) -> list[Event]:
    """The newest n events by time (ts, then id; optionally of one kind, optionally with
    id < before_id), returned oldest first. By time, not by id: history imported after live work
    carries its own old timestamps and must never show as the newest.

    Each table is read newest first by its ts index, at most n rows, and the two are merged
    here (an ORDER BY over the UNION ALL view would sort the whole archive). `since_ts` keeps
    events at or after that time, `until_ts` those before it; `by_id` orders by id instead (the
    order they were written);
    `skip_pending` leaves out the events still waiting as inputs (not yet past)."""
    where: list[str] = []
    params: list[str | int] = []
    if skip_pending:
        where.append("id NOT IN (SELECT event_id FROM inputs WHERE status = 'pending')")
    if since_ts is not None:
        where.append("ts >= ?")
        params.append(since_ts)
    if until_ts is not None:
        where.append("ts < ?")
        params.append(until_ts)
    if kind:
        where.append("kind = ?")
        params.append(kind)
    if before_id is not None:
        # `+id`: not a rowid range (that would read every older event and sort them); the ts
        # index is walked newest first, and only this tick's own events fail the test.
        where.append("+id < ?")
        params.append(before_id)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    tables = [("events", "hot")] + ([("events_archive", "archive")] if include_archive else [])
    rows = []
    order = "id DESC" if by_id else "ts DESC, id DESC"
    for table, source in tables:
        rows += store.query(
            f"SELECT {COLUMNS}, '{source}' AS source FROM {table} {clause} "
            f"ORDER BY {order} LIMIT ?", (*params, n))
    rows.sort(key=(lambda r: r["id"]) if by_id else (lambda r: (r["ts"], r["id"])),
              reverse=True)
    return [Event.from_row(r) for r in reversed(rows[:n])]


def since(store: Store, after_id: int, kinds: Sequence[str] | None = None,
          limit: int | None = None) -> list[Event]:
    """Hot events with id > after_id, oldest first (inputs are never already archived); the
    first `limit` of them when given."""
    params: list[Any] = [after_id]
    clause = ""
    if kinds:
        clause = f" AND kind IN ({','.join('?' * len(kinds))})"
        params += list(kinds)
    rows = store.query(
        f"SELECT {COLUMNS} FROM events WHERE id > ?{clause} ORDER BY id LIMIT ?",
        (*params, -1 if limit is None else limit))
    return [Event.from_row(r) for r in rows]


def history_after(store: Store, after_id: int, page: int = 2000) -> Iterator[Event]:
    """Every event (hot and archived) with id > after_id, in id order, streamed page by page.

    The two tables are each read by primary key and merged here, so memory stays flat however
    long the history is (an ORDER BY over the UNION ALL view would sort it all first)."""
    def pages(table: str, source: str) -> Iterator[Event]:
        last = after_id
        while True:
            rows = store.query(
                f"SELECT {COLUMNS}, '{source}' AS source FROM {table} WHERE id > ? "
                "ORDER BY id LIMIT ?", (last, page))
            if not rows:
                return
            for r in rows:
                yield Event.from_row(r)
            last = rows[-1]["id"]

    yield from heapq.merge(pages("events", "hot"), pages("events_archive", "archive"),
                           key=lambda e: e.id or 0)


def span_resolves(store: Store, first: int, last: int) -> bool:
    """Whether both ends of an event-id span exist in the history (hot or archive)."""
    return len(existing_ids(store, [first, last])) == len({first, last})


def people_since(store: Store, after_id: int) -> list[tuple[int, str]]:
    """(id, actor) of the events after `after_id` that a person wrote: the owner or a third
    party (author_kind user or third_party), in id order."""
    return [(int(i), str(a)) for i, a in store.query(
        "SELECT id, actor FROM history WHERE id > ? AND author_kind IN ('user', 'third_party') "
        "ORDER BY id", (after_id,))]


def total(store: Store) -> int:
    c = counts(store)
    return c["hot"] + c["archived"]


def doc_freqs(store: Store, stems: Sequence[str]) -> dict[str, int]:
    """How many events (hot and archived) contain each FTS term (porter stem)."""
    if not stems:
        return {}
    if _pg(store, "events_fts"):
        return pg_fts.doc_freqs(store, stems)
    marks = ",".join("?" * len(stems))
    rows = store.query(f"SELECT term, doc FROM events_vocab WHERE term IN ({marks})",
                       tuple(stems))
    return {r[0]: int(r[1]) for r in rows}


def max_id(store: Store) -> int:
    return int(store.scalar("SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name='events'")
               or 0)


def counts(store: Store) -> dict[str, int]:
    hot = int(store.scalar("SELECT COUNT(*) FROM events") or 0)
    archived = int(store.scalar("SELECT COUNT(*) FROM events_archive") or 0)
    return {"hot": hot, "archived": archived}


def counts_by_kind(store: Store) -> dict[str, int]:
    rows = store.query(
        "SELECT kind, COUNT(*) FROM events GROUP BY kind ORDER BY COUNT(*) DESC, kind"
    )
    return {r[0]: int(r[1]) for r in rows}


# The word pattern of memory.tokens (a test keeps the two equal): the store cannot import it.
_WORD = re.compile(r"[^\W_]+")


def fts_query(terms: Iterable[str], mode: str = "OR") -> str | None:
    """A safe FTS5 MATCH string: each term quoted, joined by OR/AND; None when no terms."""
    words = list(dict.fromkeys(w for t in terms for w in _WORD.findall(t.lower())))
    if not words:
        return None
    return f" {mode} ".join(f'"{w}"' for w in words)


def fts_after(store: Store, match: str, after_id: int, limit: int = 50) -> list[Event]:
    """The newest `limit` events with id > after_id that match (FTS5 walks the rowid range
    backwards; no global ranking), returned in id order."""
    if _pg(store, "events_fts"):
        found = pg_fts.ids(store, pg_fts.compile_match(store, match), None, limit, after_id)
        return [e for _, e in sorted(history_of(store, found).items())]
    rows = store.query(
        """
        SELECT h.id, h.ts, h.kind, h.actor, h.author_kind, h.body, h.meta, h.tick_id, h.source
          FROM (SELECT rowid FROM events_fts WHERE events_fts MATCH ? AND rowid > ?
                 ORDER BY rowid DESC LIMIT ?) AS f
          JOIN history AS h ON h.id = f.rowid ORDER BY h.id
        """,
        (match, after_id, limit),
    )
    return [Event.from_row(r) for r in rows]


_SPAN = f"SELECT {COLUMNS}, source FROM history WHERE id BETWEEN ? AND ? ORDER BY id"


def span(store: Store, first: int, last: int) -> list[Event]:
    """Every event (hot or archived) with first <= id <= last, in id order."""
    return [Event.from_row(r) for r in store.query(_SPAN, (first, last))]


def span_meta_unread(store: Store, first: int, last: int) -> list[tuple[Event, Any]]:
    """`span`, each event with its meta left unread ({}) beside the meta as stored: for a
    caller that weighs many events and keeps few (recall reads ~140 a turn and keeps 3), which
    reads the meta of those it keeps (`meta_read`) and never lets the others out."""
    return _meta_unread(store.query(_SPAN, (first, last)))


def _meta_unread(rows: Sequence[Any]) -> list[tuple[Event, Any]]:
    """Rows of COLUMNS then source (by position) as events with their meta left unread (the
    raw meta and what the rows' store has said, one for them all). Each row is unpacked, not
    indexed: a PostgreSQL row's index is a Python call (0.7 ms of a recall's 140 events)."""
    said = getattr(rows[0], "said", None) if rows else None
    return [(Event(id=i, ts=ts, kind=kind, actor=actor, author_kind=ak, body=body, tick_id=tick,
                   source=source), (meta, said))
            for i, ts, kind, actor, ak, body, meta, tick, source, *_ in rows]


# each span's events, one span after another (a span's events are read by their own scan of the
# primary key: spans may overlap, each gets all of its own)
_SPANS = (f"SELECT h.*, r.n FROM unnest(?::bigint[], ?::bigint[]) WITH ORDINALITY AS r(a, b, n) "
          f"CROSS JOIN LATERAL (SELECT {COLUMNS}, source FROM history "
          "WHERE id BETWEEN r.a AND r.b) AS h ORDER BY r.n, h.id")


def spans_meta_unread(store: Store, spans: Sequence[tuple[int, int]]
                      ) -> list[list[tuple[Event, Any]]]:
    """`span_meta_unread` of each (first, last) of `spans` (the events of rollups'
    spans), in their order. On PostgreSQL one statement for them all: a round trip a span was
    most of recall's statements' time there (12 spans a recall, 0.7 ms each at 100k events;
    together 1.3 ms)."""
    if getattr(store, "dialect", "sqlite") != "postgres" or len(spans) < 2:
        return [span_meta_unread(store, first, last) for first, last in spans]
    out: list[list[tuple[Event, Any]]] = [[] for _ in spans]
    rows = store.query(_SPANS, ([int(a) for a, _ in spans], [int(b) for _, b in spans]))
    for r, got in zip(rows, _meta_unread(rows), strict=True):
        out[int(r[9]) - 1].append(got)
    return out


def meta_read(e: Event, unread: tuple[Any, set[str] | None]) -> Event:
    """An event of `span_meta_unread` with its meta read."""
    return replace(e, meta=read_meta(unread[0], e.id, unread[1]))


def bare_match(store: Store, match: str, limit: int = 10) -> list[int]:
    """One plain FTS5 MATCH ranked by bm25: the floor benchmarks compare against."""
    if _pg(store, "events_fts"):
        return [i for i, _ in pg_fts.scored(store, pg_fts.compile_match(store, match), None,
                                            limit, True)]
    rows = store.query("SELECT rowid FROM events_fts WHERE events_fts MATCH ? ORDER BY rank "
                       "LIMIT ?", (match, limit))
    return [int(r[0]) for r in rows]


def by_tool_use(store: Store, kind: str, tool_use_id: str,
                ticks: Sequence[int] | None = None) -> Event | None:
    """The event of this kind a tool wrote under this tool_use id in one of `ticks` (the
    attempts of one turn: an id names one call only within its turn, ADR-0034), or outside any
    tick when `ticks` is None; None if there is none (a keyed side effect finishing what a
    killed attempt of its turn began)."""
    where = "tick_id IS NULL"
    params: tuple[int, ...] = ()
    if ticks is not None:
        where, params = f"tick_id IN ({','.join('?' * len(ticks))})", tuple(ticks)
    rows = store.query(
        f"SELECT {COLUMNS} FROM events WHERE kind = ? AND {where} "
        "AND json_extract(meta, '$.tool_use_id') = ? ORDER BY id LIMIT 1",
        (kind, *params, tool_use_id))
    return Event.from_row(rows[0]) if rows else None


def any_in_ticks(store: Store, kind: str, ticks: Sequence[int]) -> bool:
    """Whether an event of `kind` was written in one of `ticks` (the attempts of one turn)."""
    if not ticks:
        return False
    return store.scalar(
        f"SELECT EXISTS (SELECT 1 FROM events WHERE kind = ? AND tick_id IN "
        f"({','.join('?' * len(ticks))}))", (kind, *ticks)) == 1


def inbox_file_seen(store: Store, digest: str, name: str, identity: str) -> int | None:
    """The id of the owner message the loop itself recorded from this very inbox file (same
    name, content hash and identity: device, inode, size, mtime, ctime), else None. It is
    for a crash between recording a file and filing it in done/, which must not record it
    twice. The same text dropped again is another file (a second message), and an imported
    line is never a match, whatever meta it carries."""
    found = store.scalar(  # a meta that is not JSON (an old row's bare NaN) is no match
        "SELECT id FROM (SELECT id, CASE WHEN json_valid(meta) THEN meta END AS m FROM events "
        "WHERE kind = 'message' AND actor = 'owner') "
        "WHERE json_extract(m, '$.via') = 'inbox' AND json_extract(m, '$.imported') IS NULL "
        "AND json_extract(m, '$.inbox_sha') = ? AND json_extract(m, '$.file') = ? "
        "AND json_extract(m, '$.inbox_stat') = ? ORDER BY id DESC LIMIT 1",
        (digest, name, identity))
    return None if found is None else int(found)


def fts_search(store: Store, match: str, limit: int = 10,
               exclude_kinds: Sequence[str] = ()) -> list[tuple[Event, float, str | None]]:
    """Events (hot and archived) for an FTS5 MATCH string, best bm25 first, with a snippet
    (None for a body too long to cut one from: `fts_snippets`)."""
    skip = f"WHERE h.kind NOT IN ({','.join('?' * len(exclude_kinds))})" if exclude_kinds else ""
    # Over-fetch when filtering kinds, so the filter does not starve the result.
    inner = limit * 4 if exclude_kinds else limit
    if _pg(store, "events_fts"):
        return _pg_search(store, match, inner, limit, exclude_kinds)
    rows = store.query(
        f"""
        SELECT h.id, h.ts, h.kind, h.actor, h.author_kind, h.body, h.meta, h.tick_id, h.source,
               f.score
          FROM (SELECT rowid, bm25(events_fts) AS score
                  FROM events_fts WHERE events_fts MATCH ? ORDER BY score LIMIT ?) AS f
          JOIN history AS h ON h.id = f.rowid
          {skip}
         ORDER BY f.score, h.id
         LIMIT ?
        """,
        (match, inner, *exclude_kinds, limit),
    )
    found = [(Event.from_row(r), float(r["score"])) for r in rows]
    snips = fts_snippets(store, match, [int(e.id or 0) for e, _ in found])
    return [(e, score, snips.get(int(e.id or 0))) for e, score in found]


# -- bounded FTS5 scans for paged search (memory.search) ----------------------------------------
# Each reads one of the two FTS5 indexes with the id ceiling a search froze at its first page, so
# the same call gives the same rows however much is written after. bm25 is FTS5's, over the whole
# index: a score read here equals the one a flat ranking of the same MATCH would give that row.

FTS_INDEXES = {"events_fts": "events_fts", "rollups_fts": "rollups_fts"}


def _pg(store: Store, index: str) -> bool:
    """Whether this index is read through pg_fts (either index on a PostgreSQL store)."""
    return getattr(store, "dialect", "sqlite") == "postgres" and index in FTS_INDEXES


def _pg_search(store: Store, match: str, inner: int, limit: int,
               exclude_kinds: Sequence[str]) -> list[tuple[Event, float, str | None]]:
    """fts_search on PostgreSQL: the best `inner` rows by bm25, less `exclude_kinds`."""
    found = pg_fts.scored(store, pg_fts.compile_match(store, match), None, inner, True)
    rows = history_of(store, [i for i, _ in found])
    kept = [(rows[i], s) for i, s in found if i in rows and rows[i].kind not in exclude_kinds]
    kept = sorted(kept, key=lambda p: (p[1], p[0].id or 0))[:limit]
    snips = fts_snippets(store, match, [int(e.id or 0) for e, _ in kept])
    return [(e, score, snips.get(int(e.id or 0))) for e, score in kept]


def _index(name: str) -> str:
    if name not in FTS_INDEXES:
        raise ValueError(f"not an FTS index: {name!r}")
    return FTS_INDEXES[name]


def fts_top_id(store: Store, index: str = "events_fts") -> int:
    """The highest rowid in an FTS index (the ceiling a paged search freezes)."""
    table = _index(index)
    if _pg(store, index):
        return marks.read(store, [marks.top(index)])[0]
    return int(store.scalar(f"SELECT rowid FROM {table} ORDER BY rowid DESC LIMIT 1") or 0)


def fts_count_upto(store: Store, match: str, top: int, cap: int,
                   index: str = "events_fts") -> int:
    """How many rows <= top match, counted newest first and no further than `cap`."""
    table = _index(index)
    if _pg(store, index):
        return pg_fts.count_upto(store, pg_fts.compile_match(store, match, index), top, cap,
                                 index)
    return int(store.scalar(
        f"SELECT COUNT(*) FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? AND rowid <= ? "
        "ORDER BY rowid DESC LIMIT ?)", (match, top, cap)) or 0)


def fts_scored(store: Store, match: str, top: int, limit: int = -1, before: int | None = None,
               index: str = "events_fts") -> list[tuple[int, float]]:
    """(rowid, bm25) of the matches with rowid <= top (and < before), newest first, at most
    `limit` (-1: all). Cost grows with the rows returned, not with the index."""
    table = _index(index)
    ceiling = top if before is None else min(top, before - 1)
    if _pg(store, index):
        return pg_fts.scored(store, pg_fts.compile_match(store, match, index), ceiling, limit,
                             False, index)
    rows = store.query(
        f"SELECT rowid, bm25({table}) FROM {table} WHERE {table} MATCH ? AND rowid <= ? "
        "ORDER BY rowid DESC LIMIT ?", (match, ceiling, limit))
    return [(int(r[0]), float(r[1])) for r in rows]


def any_shown(store: Store, event_ids: Sequence[int], rollup_ids: Sequence[int]) -> bool:
    """Whether any of these events is there and no bookkeeping, or any of these rollups is
    there (what a search page would show), read IDS_PER_READ ids at a time."""
    skip = tuple(sorted(BOOKKEEPING_KINDS))
    reads = ((event_ids, f"SELECT 1 FROM history WHERE id IN ({{}}) AND kind NOT IN "
              f"({','.join('?' * len(skip))}) LIMIT 1", skip),
             (rollup_ids, "SELECT 1 FROM rollups WHERE id IN ({}) LIMIT 1", ()))
    for ids, sql, more in reads:
        for n in range(0, len(ids), IDS_PER_READ):
            part = tuple(ids[n:n + IDS_PER_READ])
            if store.query(sql.format(",".join("?" * len(part))), (*part, *more)):
                return True
    return False


def fts_ids(store: Store, match: str, top: int, limit: int = -1,
            index: str = "events_fts") -> list[int]:
    """The rowids of the matches with rowid <= top, newest first, at most `limit` (-1: all),
    unscored: FTS5 reads each phrase's doclist only as far as the limit needs, where bm25()
    first counts every row holding each phrase of the statement."""
    table = _index(index)
    if _pg(store, index):
        return pg_fts.ids(store, pg_fts.compile_match(store, match, index), top, limit,
                          index=index)
    return [int(r[0]) for r in store.query(
        f"SELECT rowid FROM {table} WHERE {table} MATCH ? AND rowid <= ? "
        "ORDER BY rowid DESC LIMIT ?", (match, top, limit))]


# FTS5's snippet() weighs every window of a body against every match: its cost grows with the
# square of the body (a 92,000-character body of matching words: 0.3 s; 368,000: 4.7 s; a pasted
# 3.9 MB message held `coworker search` for 9 minutes). Past this many characters a body gets
# no snippet, and a door shows its first characters instead.
SNIPPET_MAX_CHARS = 16_000


def fts_snippets(store: Store, match: str, ids: Sequence[int]) -> dict[int, str]:
    """The FTS5 snippet of each event id for `match`, for bodies of at most SNIPPET_MAX_CHARS
    (a longer one is left out: see SNIPPET_MAX_CHARS)."""
    if not ids:
        return {}
    if _pg(store, "events_fts"):
        return pg_fts.snippets(store, pg_fts.compile_match(store, match), ids, SNIPPET_MAX_CHARS)
    marks = ",".join("?" * len(ids))
    short = [int(r[0]) for r in store.query(
        f"SELECT id FROM history WHERE id IN ({marks}) AND length(body) <= ?",
        (*ids, SNIPPET_MAX_CHARS))]
    if not short:
        return {}
    rows = store.query(
        "SELECT rowid, snippet(events_fts, 0, '', '', '…', 24) FROM events_fts "
        f"WHERE events_fts MATCH ? AND rowid IN ({','.join('?' * len(short))})",
        (match, *short))
    return {int(r[0]): r[1] for r in rows}


def history_of(store: Store, ids: Sequence[int]) -> dict[int, Event]:
    """The events (hot or archived) with these ids, by id."""
    got: dict[int, Event] = {}
    for n in range(0, len(ids), IDS_PER_READ):
        part = tuple(ids[n:n + IDS_PER_READ])
        rows = store.query(f"SELECT {COLUMNS}, source FROM history WHERE id IN "
                           f"({','.join('?' * len(part))})", part)
        got.update((int(r["id"]), Event.from_row(r)) for r in rows)
    return got


def fts_terms(terms: Iterable[str]) -> list[str]:
    """The words `fts_query` quotes for these terms, in its order (each one phrase)."""
    return list(dict.fromkeys(w for t in terms for w in _WORD.findall(t.lower())))
