"""The connection on PostgreSQL: one coworker's schema, the store modules' SQL translated.

Owns `PgStore` (issue 42, ADR-0044), the same surface the store modules use on db.Store:
opening a coworker's schema `cw_<id>` on a server (psycopg 3; the connection's search_path is
that schema, so SQL names tables as on SQLite; migrated on open by pg_schema, or refused when
the schema is newer than this code), `transaction()` (the outermost one takes the coworker's
write lock, a transaction-level advisory lock, as SQLite's BEGIN IMMEDIATE takes the file's;
nested ones are savepoints), execute/query/scalar, rows read by position and by column name
that carry what this store has said once (as db.py's Row), and the translation of psycopg's
errors into StoreError lines (an unreachable server: where, and what to check, never the
password; a lock waited on past the timeout: StoreBusy; a write the database's rules refuse:
StoreRefused).

The translator turns SQL written for SQLite into PostgreSQL's where that is simple and safe,
outside string literals and comments only: `?` placeholders into `%s` (and `%` into `%%`), a
negative LIMIT parameter (`LIMIT -1`, `LIMIT ?` given -1) into no limit, `INSERT OR IGNORE`
into `ON CONFLICT DO NOTHING`, `RETURNING id` added to an INSERT into a table with an `id`
column (so `lastrowid` works), SQLite's `a IS b` into `IS NOT DISTINCT FROM`, `CAST(x AS
INTEGER)` into BIGINT (SQLite's integers are 64-bit), a unary `+` before a column (a SQLite
planner hint) dropped, an `IN (?, ?, ...)` list of placeholders only into `= ANY(?)` with its
values one array (`NOT IN`: `<> ALL`; as written when the values are not of one type), so a
statement's text is the same whatever the list's length and psycopg prepares it, and booleans
read back as 1 and 0, numerics as int or float, as SQLite answers them. SQL it cannot
translate safely (FTS5, PRAGMA, sqlite_master, json_each, INSERT OR REPLACE, ...) raises
Untranslatable naming what it met: that module needs SQL of its own for PostgreSQL. It never
knows what an event or a tick is.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import psycopg
from psycopg import pq
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.conninfo import conninfo_to_dict

from ..errors import StoreBusy, StoreError, StoreRefused
from . import pg_schema
from .db import BUSY_TIMEOUT_MS

CONNECT_TIMEOUT_S = 10
# over TCP, a server that vanished (power, network) is noticed in about a minute, not the
# kernel's hours: a statement waiting on it fails and the loop connects again (ignored on a
# Unix socket; a URL's own settings win)
KEEPALIVE: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
             "keepalives_count": 3, "tcp_user_timeout": 60_000}
MAX_PARAMS = 65535  # bind parameters a statement (PostgreSQL's protocol counts them in 16 bits)
BUSY_STATES = ("55P03", "40P01", "40001")  # lock timeout, deadlock, serialization failure


class Untranslatable(NotImplementedError):
    """SQL written for SQLite that the PostgreSQL store does not translate: the module that
    sent it needs SQL of its own for PostgreSQL (issue 42)."""


# --- the translator ---------------------------------------------------------------------------

# string literals, quoted identifiers and comments: nothing in them is translated but `%`
_QUOTED = re.compile(r"""('(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/)""", re.S)
_SQLITE_ONLY = re.compile(
    r"\b(?:PRAGMA|sqlite_master|sqlite_schema|sqlite_temp_master|MATCH|GLOB|rowid|_rowid_"
    r"|INDEXED\s+BY|NOT\s+INDEXED|REPLACE\s+INTO|OR\s+(?:REPLACE|ROLLBACK|ABORT|FAIL))\b"
    r"|\b(?:bm25|snippet|highlight|json_each|json_tree|json_type|json_array_length"
    r"|json_group_array|json_group_object|json_set|json_insert|json_remove|json_replace"
    r"|json_patch|json_object|json_array|json_quote|group_concat|changes|total_changes"
    r"|last_insert_rowid|strftime|julianday|unixepoch|datetime|printf|typeof|instr|ifnull"
    r"|iif|randomblob|zeroblob)\s*\("
    r"|\?\d", re.I)
_OR_IGNORE = re.compile(r"^(\s*INSERT)\s+OR\s+IGNORE(?=\s+INTO\b)", re.I)
_INSERT_INTO = re.compile(r"^\s*INSERT\s+INTO\s+([A-Za-z_]\w*)", re.I)
_WRITES = re.compile(r"^\s*(?:INSERT|UPDATE|DELETE)\b", re.I)
_RETURNING = re.compile(r"\bRETURNING\b", re.I)
_REWRITES = (
    (re.compile(r"\bLIMIT\s+-1\b", re.I), "LIMIT ALL"),
    (re.compile(r"\bIS\s+NOT\s+(?!(?:NULL|TRUE|FALSE|UNKNOWN|DISTINCT|JSON)\b)", re.I),
     "IS DISTINCT FROM "),
    (re.compile(r"\bIS\s+(?!(?:NOT|NULL|TRUE|FALSE|UNKNOWN|DISTINCT|JSON)\b)", re.I),
     "IS NOT DISTINCT FROM "),
    (re.compile(r"\bAS\s+INTEGER\b", re.I), "AS BIGINT"),
    (re.compile(r"\bAS\s+REAL\b", re.I), "AS DOUBLE PRECISION"),
    # `+col`, SQLite's way to keep the planner off an index: where `+` can only be unary
    (re.compile(r"(\b(?:AND|OR|WHERE|ON|NOT|WHEN|THEN|ELSE|SELECT|BY)\s+|[(,=<>]\s*)\+"
                r"(?=[A-Za-z_])", re.I), r"\1"),
)
_PLACEHOLDER = re.compile(r"(\bLIMIT\s+)?\?|\b(NOT\s+)?IN\s*\(\s*\?(?:\s*,\s*\?)*\s*\)", re.I)
_LISTED = (int, str, float)  # the values an IN list of placeholders is sent as one array of


@dataclass(frozen=True)
class Translated:
    """A statement as PostgreSQL takes it."""

    sql: str
    limits: tuple[int, ...] = ()  # the parameters that are a LIMIT (a negative one: no limit)
    returns_id: bool = False  # `RETURNING id` was added: its rows are the ids, not the caller's
    writes: bool = False  # an INSERT, UPDATE or DELETE
    # each `IN (?, ?, ...)` of placeholders only, sent as `= ANY(array)` (`NOT IN`: `<> ALL`):
    # (its first parameter, how many); `plain`, the statement with every list as written
    lists: tuple[tuple[int, int], ...] = ()
    plain: str = ""

    def bound(self, params: Sequence[Any] | dict[str, Any]) -> tuple[str, list[Any]]:
        """The statement and its parameters: each IN list's values one array, so the text
        is the same however long the list (psycopg prepares it once, its query parsed once;
        a statement of its own a length cost the server a plan each time: 2.7 ms for a
        recall's tags), unless its values are not all of one type (int, str or float,
        NULLs aside): then `plain`."""
        values = bind(self, params)
        if not self.lists:
            return self.sql, values
        out: list[Any] = []
        at = 0
        for first, n in self.lists:
            some = values[first:first + n]
            kinds = {type(v) for v in some if v is not None}
            if len(kinds) > 1 or not kinds <= set(_LISTED):
                return self.plain, values
            out += values[at:first]
            out.append(_array(some, kinds))
            at = first + n
        return self.sql, out + values[at:]


def _array(values: list[Any], kinds: set[type]) -> Any:
    """An IN list's values as one parameter: ints and strings as the text of an array, which
    the server reads as an array of the other side's type (psycopg's dumping of a list, a
    regular expression an element, took 2.6 ms for 500 ids); floats as a list."""
    if kinds <= {int}:
        return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"
    if kinds <= {str}:
        return "{" + ",".join("NULL" if v is None else '"' + v.replace("\\", "\\\\").replace(
            '"', '\\"') + '"' for v in values) + "}"
    return values


def translate(text: str, id_tables: frozenset[str] = frozenset()) -> Translated:
    """SQL written for SQLite as PostgreSQL's (see the module docstring); `id_tables`: the
    tables with an `id` column, whose INSERTs get `RETURNING id`."""
    parts = _QUOTED.split(text)
    code = parts[0::2]
    _refuse_sqlite_only(text, code)
    first = next((i for i, c in enumerate(code) if c.strip()), 0)
    code[first], ignore = _OR_IGNORE.subn(r"\1", code[first])
    for pattern, repl in _REWRITES:
        code = [pattern.sub(repl, c) for c in code]
    parts[0::2] = code
    limits: list[int] = []
    lists: list[tuple[int, int]] = []
    sql, plain = (_assembled(parts, limits, lists if pack else None) for pack in (True, False))
    returning = any(_RETURNING.search(c) for c in code)
    target = _INSERT_INTO.match(code[first])
    returns_id = bool(target and target.group(1).lower() in id_tables and not returning)
    if ignore and returning:
        raise Untranslatable(f"INSERT OR IGNORE with RETURNING: {text.strip()[:80]!r}")
    clauses = ["ON CONFLICT DO NOTHING"] * bool(ignore) + ["RETURNING id"] * returns_id
    sep = "\n" if any(p.startswith("--") for p in parts[1::2]) else " "  # past a -- comment
    sql, plain = (sep.join([x.rstrip().rstrip(";").rstrip(), *clauses]) for x in (sql, plain))
    return Translated(sql, tuple(sorted(set(limits))), returns_id,
                      bool(_WRITES.match(code[first])), tuple(lists), plain)


_MARK = re.compile("'\x00(\\d+)\x00'")  # a string literal's place in a statement's shape


@functools.lru_cache(maxsize=256)
def _shape(masked: str, id_tables: frozenset[str]) -> Translated:
    return translate(masked, id_tables)


def translate_cached(text: str, id_tables: frozenset[str] = frozenset()) -> Translated:
    """`translate`, its work kept by the statement's shape: the text with each string literal
    a mark (nothing is translated inside one). pg_fts writes each tsquery into its statement
    as a literal, so its statements are new texts of a few shapes, and translating one anew
    cost 2.5 ms (the regular expressions over 2,000 characters: 12 ms a search)."""
    parts = _QUOTED.split(text)
    literals = [p.replace("%", "%%") for p in parts[1::2] if p.startswith("'")]
    if not literals:
        return _shape(text, id_tables)
    n = iter(range(len(literals)))
    masked = "".join(f"'\x00{next(n)}\x00'" if i % 2 and p.startswith("'") else p
                     for i, p in enumerate(parts))
    try:
        shape = _shape(masked, id_tables)
    except Untranslatable:
        return translate(text, id_tables)  # refused, its own text in the reason

    def fill(sql: str) -> str:
        return _MARK.sub(lambda m: literals[int(m.group(1))], sql)
    return replace(shape, sql=fill(shape.sql), plain=fill(shape.plain))


def _refuse_sqlite_only(text: str, code: list[str]) -> None:
    met = _SQLITE_ONLY.search(" ".join(code))
    if met:
        raise Untranslatable(f"SQLite-only SQL reached the PostgreSQL store ({met.group(0)!r} "
                             f"in {text.strip()[:80]!r}): this module needs SQL of its own for "
                             "PostgreSQL")


def _assembled(parts: list[str], limits: list[int], lists: list[tuple[int, int]] | None) -> str:
    """The statement's code and quoted stretches joined again, its placeholders PostgreSQL's
    (`_placeholders`) and `%` doubled."""
    counter = [0]
    return "".join(_placeholders(p.replace("%", "%%"), counter, limits, lists) if i % 2 == 0
                   else p.replace("%", "%%") for i, p in enumerate(parts))


def _placeholders(code: str, counter: list[int], limits: list[int],
                  lists: list[tuple[int, int]] | None) -> str:
    """`?` into `%s` in one stretch of code, counting them in `counter` across stretches; the
    positions of the LIMIT ones go into `limits`; with `lists`, each IN list of placeholders
    only into `= ANY(%s)` (NOT IN: `<> ALL(%s)`), its first position and length into it."""
    def one(m: re.Match[str]) -> str:
        text = m.group(0)
        if text == "?" or m.group(1):
            if m.group(1):
                limits.append(counter[0])
            counter[0] += 1
            return (m.group(1) or "") + "%s"
        n = text.count("?")
        counter[0] += n
        if lists is None or m.string[:m.start()].rstrip().endswith("?"):  # `? IN (?)`: its
            return text.replace("?", "%s")  # array's type would be unknown
        lists.append((counter[0] - n, n))
        return "<> ALL(%s)" if m.group(2) else "= ANY(%s)"
    return _PLACEHOLDER.sub(one, code)


def bind(t: Translated, params: Sequence[Any] | dict[str, Any]) -> list[Any]:
    """The parameters as PostgreSQL takes them: booleans as 1 and 0 (as sqlite3 binds them),
    a negative LIMIT as NULL (no limit)."""
    if isinstance(params, dict):
        raise Untranslatable("named parameters (:name) are not translated for PostgreSQL")
    values = [int(v) if isinstance(v, bool) else v for v in params]
    for i in t.limits:
        if i < len(values) and isinstance(values[i], int) and values[i] < 0:
            values[i] = None
    return values


# --- rows and values as SQLite gives them -------------------------------------------------------

class PgRow(tuple[Any, ...]):
    """A row read by position and by column name (case-insensitive, the first of a name, as
    sqlite3.Row), of a class of its own per store (`said`: what the store has said once)."""

    __slots__ = ()
    said: ClassVar[set[str]] = set()
    names: ClassVar[tuple[str, ...]] = ()
    positions: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                key = self.positions[key.lower()]
            except KeyError:
                raise IndexError("No item with that key") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self.names)


class _Rows:
    """psycopg's row factory for one store: one PgRow class per list of column names."""

    def __init__(self) -> None:
        self.base: type[PgRow] = type("Row", (PgRow,), {"__slots__": (), "said": set()})
        self.classes: dict[tuple[str, ...], type[PgRow]] = {}

    def __call__(self, cursor: Any) -> Any:
        res = cursor.pgresult
        if not _has_rows(res):
            return tuple
        # the names from the result itself: cursor.description makes a Column object a
        # column at each call (a tenth of recall's client time at 100k events)
        names = tuple((res.fname(i) or b"").decode() for i in range(res.nfields))
        cls = self.classes.get(names)
        if cls is None:
            index = {n.lower(): i for i, n in reversed(list(enumerate(names)))}
            cls = type("Row", (self.base,), {"__slots__": (), "names": names,
                                              "positions": index})
            self.classes[names] = cls
        return cls


_ROW_STATES = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.SINGLE_TUPLE, pq.ExecStatus.TUPLES_CHUNK)


def _has_rows(res: Any) -> bool:
    """Whether a result holds rows (as psycopg's cursor.description is not None)."""
    return bool(res is not None and (res.nfields or res.status in _ROW_STATES))


class _BoolAsInt(Loader):
    """A boolean read as SQLite answers one: 1 or 0."""

    def load(self, data: Buffer) -> int:
        return 1 if bytes(data) == b"t" else 0


class _NumericAsNumber(Loader):
    """A numeric (SUM of integers, AVG) read as SQLite answers one: int when whole, else float."""

    def load(self, data: Buffer) -> int | float:
        text = bytes(data).decode()
        try:
            return int(text)
        except ValueError:
            return float(text)


# --- the connection as the store modules see it -------------------------------------------------

class PgCursor:
    """What `execute` returns: sqlite3.Cursor's fetchone, fetchall, iteration, rowcount and
    lastrowid (the id of the last row an INSERT made on this connection, as SQLite's)."""

    def __init__(self, cur: psycopg.Cursor[Any] | None, rowcount: int,
                 lastrowid: int | None) -> None:
        self._cur = cur if cur is not None and _has_rows(cur.pgresult) else None
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    @property
    def description(self) -> Any:
        return None if self._cur is None else self._cur.description

    def fetchone(self) -> Any:
        return None if self._cur is None else self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        return [] if self._cur is None else self._cur.fetchall()

    def fetchmany(self, size: int = 1) -> list[Any]:
        return [] if self._cur is None else self._cur.fetchmany(size)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    def close(self) -> None:
        if self._cur is not None:
            self._cur.close()


class PgConnection:
    """What `transaction()` yields and `store.conn` is: `execute` and `executemany` take SQL
    written for SQLite (translated), and turn psycopg's errors into the store's."""

    def __init__(self, raw: psycopg.Connection[Any], store: PgStore) -> None:
        self.raw = raw
        self._store = store
        self._translated: dict[str, Translated] = {}
        self.last_rowid = 0

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    def translate(self, sql: str) -> Translated:
        t = self._translated.get(sql)
        if t is None:
            if len(self._translated) > 512:
                self._translated.clear()
            t = self._translated[sql] = translate_cached(sql, self._store.id_tables)
        return t

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> PgCursor:
        t = self.translate(sql)
        text, values = t.bound(params)
        try:
            cur = self.raw.execute(text, values)
            if not t.returns_id:
                return self._cursor(cur, t)
            ids = [int(r[0]) for r in cur.fetchall()]
        except psycopg.Error as e:
            raise self._store.error(e) from e
        if ids:
            self.last_rowid = max(ids)
        return PgCursor(None, len(ids), self.last_rowid)

    def _cursor(self, cur: psycopg.Cursor[Any], t: Translated) -> PgCursor:
        inserts = t.writes and t.sql.lstrip()[:6].upper() == "INSERT"
        rowcount = -1 if _has_rows(cur.pgresult) else cur.rowcount
        return PgCursor(cur, rowcount, self.last_rowid if inserts else None)

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]]) -> PgCursor:
        t = translate(sql)  # no RETURNING: sqlite3 gives executemany no lastrowid either
        try:
            with self.raw.cursor() as cur:
                cur.executemany(t.plain, [bind(t, p) for p in seq])
                return PgCursor(None, cur.rowcount, None)
        except psycopg.Error as e:
            raise self._store.error(e) from e

    def getlimit(self, category: int) -> int:
        """What db.insert_values asks of a connection: the variables a statement may hold."""
        if category != sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER:
            raise ValueError(f"no PostgreSQL limit for SQLite's limit {category}")
        return MAX_PARAMS


# --- the store --------------------------------------------------------------------------------

class PgStore:
    """One coworker's schema on a PostgreSQL server. Use `with store.transaction():` around
    each logical write, as with db.Store."""

    dialect = "postgres"

    def __init__(self, raw: psycopg.Connection[Any], path: str, schema: str, readonly: bool,
                 id_tables: frozenset[str]) -> None:
        self.raw = raw
        self.path = path  # names this store in messages (no password) and in caches' keys
        self.schema = schema
        self.readonly = readonly
        self.id_tables = id_tables
        self.conn = PgConnection(raw, self)
        self._depth = 0
        self._lock = threading.RLock()
        self._write_key = pg_schema.lock_key("write", schema)
        # the loop's fencing token (pg_runner.claim sets it): every write transaction checks
        # it after the write lock, so a loop another one took over from can never commit
        self.fence: int | None = None
        self._url = ""  # for reconnect(): it may hold a password, never shown (see path)
        self._busy_ms = BUSY_TIMEOUT_MS

    # opening -----------------------------------------------------------------------------
    @classmethod
    def open(cls, url: str, coworker_id: str, *, readonly: bool = False, migrate: bool = True,
             busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> PgStore:
        schema = pg_schema.schema_name(coworker_id)
        where = describe(url)
        raw = _connect(url, where)
        try:
            _prepare(raw, schema, readonly, busy_timeout_ms, where)
            if migrate and not readonly:
                pg_schema.migrate(raw, schema, where)
            else:
                pg_schema.check(raw, schema, where, readonly)
            id_tables = _id_tables(raw, schema)
        except psycopg.Error as e:
            raw.close()
            raise _error(e, where) or StoreError(f"database {where}: {_one_line(e)}") from e
        except BaseException:
            raw.close()
            raise
        store = cls(raw, f"{where}#{schema}", schema, readonly, id_tables)
        store._url, store._busy_ms = url, busy_timeout_ms
        return store

    def sibling(self, readonly: bool = False) -> PgStore:
        """Another connection to this coworker's schema (the loop's listener has its own)."""
        return PgStore.open(self._url, self.schema[3:], readonly=readonly, migrate=False,
                            busy_timeout_ms=self._busy_ms)

    @property
    def broken(self) -> bool:
        """Whether the connection is gone (the server restarted, the network cut)."""
        return bool(self.raw.closed or self.raw.broken)

    def reconnect(self) -> None:
        """A new connection in place of a broken one: the same schema and session settings;
        the fence stays (a loop's claim is taken again by pg_runner.reclaim). A transaction
        in flight on the old one is gone: the server rolled it back."""
        with self._lock:
            where = self.path.rsplit("#", 1)[0]
            raw = _connect(self._url, where)
            try:
                _prepare(raw, self.schema, self.readonly, self._busy_ms, where)
            except psycopg.Error as e:
                raw.close()
                raise self.error(e) from e
            old, self.raw, self.conn, self._depth = self.raw, raw, PgConnection(raw, self), 0
            try:
                old.close()
            except psycopg.Error:
                pass

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def error(self, e: psycopg.Error) -> Exception:
        """The store's error for psycopg's `e` (StoreError, StoreBusy, StoreRefused), or `e`
        itself when it is a mistake in our SQL."""
        return _error(e, self.path) or e

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see the database as of one moment (a REPEATABLE READ transaction);
        inside a transaction already, that one's."""
        with self._lock:
            if self.conn.in_transaction:
                yield
                return
            self._run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield
            finally:
                if self.conn.in_transaction:
                    self._run("COMMIT")

    # writing -----------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[PgConnection]:
        """One logical write. Outermost: BEGIN, then the coworker's write lock (one writer at
        a time, as SQLite's BEGIN IMMEDIATE: a reader-turned-writer never races another, and
        a statement's new ids are consecutive); nested: a savepoint."""
        if self.readonly:
            raise StoreError("this connection is read-only; open the store read-write to write")
        with self._lock:
            outer = self._depth == 0
            name = f"sp{self._depth}"
            self._begin(outer, name)
            self._depth += 1
            try:
                yield self.conn
            except BaseException:
                self._depth -= 1
                self._undo(outer, name)
                raise
            self._depth -= 1
            self._end(outer, name)

    def _begin(self, outer: bool, name: str) -> None:
        if not outer:
            self._run(f"SAVEPOINT {name}")
            return
        try:
            self._run(f"BEGIN; SELECT pg_advisory_xact_lock({self._write_key})")
            if self.fence is not None:
                from . import pg_runner

                pg_runner.check(self, self.fence)
        except BaseException:
            self._undo(True, name)
            raise

    def _undo(self, outer: bool, name: str) -> None:
        if self.raw.closed or self.raw.broken:
            return
        if outer:
            self.raw.execute("ROLLBACK")
        else:
            self.raw.execute(f"ROLLBACK TO {name}; RELEASE {name}")

    def _end(self, outer: bool, name: str) -> None:
        try:
            self._run("COMMIT" if outer else f"RELEASE {name}")
        except BaseException:
            if outer and self.conn.in_transaction:
                self._undo(True, name)
            raise

    def _run(self, sql: str) -> None:
        """Our own statement (no parameters, no translation), its errors the store's."""
        try:
            self.raw.execute(sql.encode())
        except psycopg.Error as e:
            raise self.error(e) from e

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> PgCursor:
        """One statement; a write outside a transaction is one of its own (with the lock)."""
        with self._lock:
            if self._depth == 0 and not self.readonly and self.conn.translate(sql).writes:
                with self.transaction() as db:
                    return db.execute(sql, params)
            return self.conn.execute(sql, params)

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return self.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def has_table(self, name: str) -> bool:
        """Whether the coworker's schema holds a table or view `name`."""
        return self.scalar("SELECT 1 FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = "
                           "c.relnamespace WHERE n.nspname = ? AND c.relname = ? "
                           "AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                           (self.schema, name)) is not None

    def checkpoint(self) -> None:
        """Nothing to do: the server keeps its own write-ahead log."""

    def schema_version(self) -> int:
        return int(self.scalar("SELECT COALESCE(MAX(version), 0) FROM _migrations") or 0)


# --- connecting and errors ----------------------------------------------------------------------

def describe(url: str) -> str:
    """The URL as messages name it: user, host or socket folder, port, database; never the
    password (libpq's environment fills in what the URL leaves out)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        return "postgresql://(a URL libpq cannot read)"
    host = str(info.get("host") or "")
    port = f":{info['port']}" if info.get("port") else ""
    user = f"{info['user']}@" if info.get("user") else ""
    db = str(info.get("dbname") or "")
    if host.startswith("/"):
        return f"postgresql://{user}/{db}?host={host}{port.replace(':', '&port=')}"
    return f"postgresql://{user}{host}{port}/{db}"


def _secrets(url: str) -> list[str]:
    found: list[str] = []
    try:
        found.append(str(conninfo_to_dict(url).get("password") or ""))
    except psycopg.Error:
        pass
    m = re.search(r"://[^:/@?]*:([^@/?]*)@", url)
    if m:
        found.append(m.group(1))
    return [s for s in found if s]


def _scrub(text: str, url: str) -> str:
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def _one_line(e: object) -> str:
    return " ".join(str(e).split())


def _connect(url: str, where: str) -> psycopg.Connection[Any]:
    try:
        conninfo_to_dict(url)
    except psycopg.Error:  # its reason would quote the URL, password and all
        raise StoreError(f"{where} is not a connection URL libpq can read: write it as "
                         "postgresql://USER@HOST[:PORT]/DB (percent-encode / ? # @ : in a "
                         "password)") from None
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                               application_name="coworker", row_factory=_Rows(), **KEEPALIVE)
    except psycopg.Error as e:
        place = where.split("?host=")[-1] if "?host=" in where else where
        reason = _scrub(_one_line(e), url)
        raise StoreError(
            f"cannot reach PostgreSQL at {place} ({reason}): check that the server runs and "
            "listens there, the [store] url's host, port or socket folder and database, and "
            "the credentials (secret:NAME, PGPASSWORD or ~/.pgpass)") from None


def _prepare(raw: psycopg.Connection[Any], schema: str, readonly: bool, busy_timeout_ms: int,
             where: str) -> None:
    """The session as the store needs it: a server new enough, the coworker's schema first on
    the search_path, the lock timeout, read-only when asked; SQLite's answers for booleans and
    numerics."""
    version = raw.info.server_version
    if version < pg_schema.MIN_SERVER:
        raise StoreError(f"PostgreSQL at {where} is version {version // 10000}: the coworker "
                         f"needs {pg_schema.MIN_SERVER // 10000} or newer")
    # a small GIN pending list: the loop appends one event at a time, and a search scans
    # what is pending linearly (a bulk append merges it at once: events.insert_rows)
    raw.execute(f"SET search_path TO {schema}; SET lock_timeout = {int(busy_timeout_ms)}; "
                f"SET default_transaction_read_only = {'on' if readonly else 'off'}; "
                "SET gin_pending_list_limit = '256kB'".encode())
    raw.adapters.register_loader("bool", _BoolAsInt)
    raw.adapters.register_loader("numeric", _NumericAsNumber)


def _id_tables(raw: psycopg.Connection[Any], schema: str) -> frozenset[str]:
    rows = raw.execute("SELECT c.relname FROM pg_attribute AS a JOIN pg_class AS c "
                       "ON c.oid = a.attrelid JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                       "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND a.attname = 'id' "
                       "AND NOT a.attisdropped", (schema,)).fetchall()
    return frozenset(str(r[0]) for r in rows)


def _error(e: psycopg.Error, where: str) -> StoreError | None:
    """The store's error for psycopg's `e`, or None for a mistake in our own SQL."""
    state = e.sqlstate or ""
    text = " ".join((e.diag.message_primary or str(e)).split())
    if state in BUSY_STATES:
        return StoreBusy(f"database {where} stayed locked past the lock timeout ({text}): "
                         "another process holds a long write (an import, a reflect); wait and "
                         "retry")
    if state == "25006":
        return StoreError(f"cannot write database {where} ({text}): this connection is "
                          "read-only")
    if state.startswith("23"):
        return StoreRefused(f"database {where}: {text}")
    if state.startswith("54"):
        return StoreError(f"database {where}: a limit of PostgreSQL's was reached ({text}); the "
                          "command did not finish: make the input smaller")
    if state == "42501":
        return StoreError(f"database {where}: permission denied ({text}): this role may not do "
                          "that; connect as the role that owns this coworker's schema")
    if isinstance(e, psycopg.OperationalError):
        return StoreError(f"PostgreSQL at {where} failed ({text}): check that the server runs "
                          "and can be reached, then try again")
    return None

