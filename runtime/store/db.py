"""The connection: one SQLite file in WAL mode, migrated on open, written in transactions.

Owns opening (read-write or read-only), pragmas, the `transaction()` context manager (BEGIN
IMMEDIATE at the outside, savepoints inside), writing many rows in few statements
(`insert_values`) and the translation of SQLite's lock and corruption errors into StoreError
lines that say what to do (a write the database refuses: StoreRefused, as on PostgreSQL). It
never knows what a tick is.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from itertools import chain
from pathlib import Path

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from ..errors import StoreBusy, StoreError, StoreRefused
from . import migrations

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
SqlValue = int | float | str | bytes | None  # what one SQLite column holds
ROWS_PER_INSERT = 4096  # rows of one multi-row INSERT at most (fewer when variables are few)


def _check_ours(conn: sqlite3.Connection, path: Path, readonly: bool) -> None:
    """A database the coworker made (its `_migrations` table), or an empty one a writer may
    make into one; never another program's, which a writer would fill with our tables. A
    reader that finds it empty waits a moment: the first writer may be creating it."""
    def tables() -> set[str]:
        return {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}

    names = tables()
    for _ in range(10 if readonly and not names else 0):
        time.sleep(0.1)
        if names := tables():
            break
    if "_migrations" in names:
        return
    if names:
        raise StoreError(
            f"{path} is not a coworker database (it holds other tables: "
            f"{', '.join(sorted(names)[:5])}); move it aside, then `coworker restore-backup` "
            "or point COWORKER_HOME at your coworker's folder")
    if readonly:
        raise StoreError(
            f"the database at {path} is empty: no history in it yet (a coworker that writes, "
            "`coworker tell` or `coworker run`, creates it; if one is starting, try again). "
            "If it held your history, bring it back with `coworker restore-backup`")


class SqliteRefused(StoreRefused, sqlite3.IntegrityError):
    """A write SQLite refused (a trigger, a constraint) as the store raises it: StoreRefused,
    as on PostgreSQL, and still the IntegrityError code written against sqlite3 catches."""


def _refused(e: sqlite3.IntegrityError, path: Path) -> StoreRefused:
    """The line a refused write says: as the CLI said of an untranslated IntegrityError."""
    if isinstance(e, StoreRefused):
        return e
    return SqliteRefused(f"the database failed: {path} refused a write ({e}); the command did not "
                   "finish: `coworker doctor` checks the database")


def _said(e: BaseException, outer: bool, path: Path) -> StoreError | None:
    """The store's error for what a transaction's body raised (a lock or a read-only file at
    the outermost one, a refused write at any), or None to let `e` through as it is."""
    if outer and isinstance(e, sqlite3.OperationalError) and (
            _is_lock(e) or "readonly" in str(e)):
        return _error(e, path)
    if isinstance(e, sqlite3.IntegrityError) and not isinstance(e, StoreRefused):
        return _refused(e, path)
    return None


class Store:
    """A connection to coworker.db. Use `with store.transaction():` around each logical write."""

    dialect = "sqlite"  # the SQL this store speaks (pg.PgStore: "postgres")

    def __init__(self, conn: sqlite3.Connection, path: Path, readonly: bool) -> None:
        self.conn = conn
        self.path = path
        self.readonly = readonly
        self._depth = 0
        self._lock = threading.RLock()

    # opening -----------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, *, readonly: bool = False, migrate: bool = True,
             busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> Store:
        conn: sqlite3.Connection | None = None
        try:
            if readonly:
                if not path.exists():
                    raise StoreError(
                        f"no database at {path}: run the coworker once (`coworker run --once`) "
                        "or `coworker init` to create it"
                    )
                conn = sqlite3.connect(
                    f"file:{path}?mode=ro", uri=True, isolation_level=None,
                    check_same_thread=False,
                )
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            # its rows carry what this store has said once (events.read_meta's WARNING): a
            # class of their own a connection, so nothing of it is process-wide
            conn.row_factory = type("Row", (sqlite3.Row,), {"said": set()})
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if not readonly:
                mode = _wal(conn, busy_timeout_ms)
                if mode.lower() != "wal":
                    log.warning("database %s is in %s mode, not WAL", path, mode)
                conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as e:
            if conn is not None:
                conn.close()
            raise _error(e, path) from e  # a lock is StoreBusy: a caller may wait and retry
        try:
            _check_ours(conn, path, readonly)
        except sqlite3.DatabaseError as e:
            conn.close()
            raise _error(e, path) from e
        except StoreError:
            conn.close()
            raise
        store = cls(conn, path, readonly)
        try:
            migrations.refuse_newer(store)
        except StoreError:
            conn.close()
            raise
        if migrate and not readonly:
            try:
                migrations.apply(store)
            except sqlite3.DatabaseError as e:
                conn.close()
                raise _error(e, path) from e
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see the database as of one moment (a deferred read transaction; WAL
        readers never block the writer); inside a transaction already, that one's."""
        with self._lock:
            if self.conn.in_transaction:
                yield
                return
            self.conn.execute("BEGIN")
            try:
                yield
            finally:
                if self.conn.in_transaction:
                    self.conn.execute("COMMIT")

    # writing -----------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One logical write. Outermost: BEGIN IMMEDIATE (takes the write lock up front, so a
        reader-turned-writer never dead-ends in SQLITE_BUSY); nested: a savepoint."""
        if self.readonly:
            raise StoreError("this connection is read-only; open the store read-write to write")
        with self._lock:
            outer = self._depth == 0
            name = f"sp{self._depth}"
            try:
                self.conn.execute("BEGIN IMMEDIATE" if outer else f"SAVEPOINT {name}")
            except sqlite3.OperationalError as e:
                raise _error(e, self.path) from e
            self._depth += 1
            try:
                yield self.conn
            except BaseException as e:
                self._depth -= 1
                if outer:
                    self.conn.execute("ROLLBACK")
                else:
                    self.conn.execute(f"ROLLBACK TO {name}")
                    self.conn.execute(f"RELEASE {name}")
                said = _said(e, outer, self.path)
                if said is not None:
                    raise said from e  # a line that says what to do
                raise
            else:
                self._depth -= 1
                try:
                    self.conn.execute("COMMIT" if outer else f"RELEASE {name}")
                except sqlite3.OperationalError as e:
                    if outer:
                        self.conn.execute("ROLLBACK")
                    raise _error(e, self.path) from e

    def execute(self, sql: str, params: tuple | dict = ()) -> sqlite3.Cursor:
        try:
            with self._lock:
                return self.conn.execute(sql, params)
        except sqlite3.OperationalError as e:
            if _is_lock(e) or "readonly" in str(e):
                raise _error(e, self.path) from e
            raise
        except sqlite3.IntegrityError as e:
            raise _refused(e, self.path) from e
        except sqlite3.DatabaseError as e:
            if "malformed" in str(e) or "not a database" in str(e):
                raise StoreError(_explain(e, self.path)) from e
            raise

    def query(self, sql: str, params: tuple | dict = ()) -> list[sqlite3.Row]:
        return self.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: tuple | dict = ()) -> SqlValue:
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def has_table(self, name: str) -> bool:
        """Whether the database holds a table or view `name` (a read-only open of an older
        database may not have it yet)."""
        return self.scalar("SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') "
                           "AND name = ?", (name,)) is not None

    def checkpoint(self) -> None:
        """Fold the WAL back into the main file (after big moves, so the WAL does not grow)."""
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def integrity_check(self) -> str:
        return str(self.scalar("PRAGMA integrity_check"))

    def fts_integrity(self, table: str) -> None:
        """Raise sqlite3.DatabaseError when an FTS index disagrees with its content."""
        if table not in ("events_fts", "rollups_fts"):
            raise ValueError(f"not an FTS table: {table}")
        self.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")

    def backup_to(self, target: Path) -> None:
        """A consistent copy through SQLite's backup API (copying the file would miss the WAL).

        One step under one read transaction: a loop writing meanwhile is neither blocked (WAL)
        nor half-copied. `target` must not exist; it is created 0600, and the copy is left in
        rollback-journal mode, so it is one self-contained file with no -wal beside it."""
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.chmod(target, 0o600)  # whatever the umask
        dest = sqlite3.connect(target, isolation_level=None)
        try:
            with self._lock:
                self.conn.backup(dest)
            dest.execute("PRAGMA journal_mode = DELETE")
        finally:
            dest.close()


def new_id(cur: sqlite3.Cursor) -> int:
    """The rowid the INSERT that `cur` ran just made."""
    if cur.lastrowid is None:  # only a cursor that ran no INSERT has none: a bug of ours
        raise StoreError("an INSERT made no row id")
    return cur.lastrowid


def insert_values(db: sqlite3.Connection, into: str, rows: Sequence[tuple],
                  width: int) -> tuple[int, int]:
    """Insert these rows of `width` values each with multi-row `INSERT INTO <into> VALUES
    (...), (...)` statements, as many rows a statement as SQLite's variable limit allows (up to
    ROWS_PER_INSERT); (rows written, rowid of the last). One statement for many rows is what
    makes a trigger's FTS5 insert cheap: FTS5 writes its pending terms as a new index segment
    at the end of every statement (ADR-0022). A row of another width is a ValueError, before
    anything is written (flattened, it would shift every value after it)."""
    if any(len(row) != width for row in rows):
        raise ValueError(f"every row must hold {width} values")
    written, last, i = 0, 0, 0
    for n in _chunks(len(rows), _rows_per_insert(db, width)):
        cur = db.execute(_values_sql(into, width, n), tuple(chain.from_iterable(rows[i:i + n])))
        written += cur.rowcount
        last = int(cur.lastrowid or 0)
        i += n
    return written, last


def _chunks(total: int, per: int) -> list[int]:
    """Statement sizes for `total` rows: full statements of `per`, then the rest in powers of
    two, largest first. So a connection prepares (and its statement cache keeps) one
    statement per power of two rather than one per batch size; each is large (megabytes with
    an FTS trigger), and a re-import whose batches shrink by what is already present would
    otherwise fill the cache with a new size every batch."""
    sizes = [per] * (total // per)
    rest = total % per
    while rest:
        n = 1 << (rest.bit_length() - 1)
        sizes.append(n)
        rest -= n
    return sizes


def _rows_per_insert(db: sqlite3.Connection, width: int) -> int:
    try:
        limit = db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    except (AttributeError, sqlite3.Error):  # no getlimit: SQLite's oldest default
        limit = 999
    if limit < width:
        raise ValueError(f"SQLite allows {limit} variables a statement, fewer than a row's "
                         f"{width}")
    return min(ROWS_PER_INSERT, limit // width)


@lru_cache(maxsize=16)
def _values_sql(into: str, width: int, n: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return f"INSERT INTO {into} VALUES " + ", ".join([row] * n)


def _wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> str:
    """Put the database in WAL mode (it stays so: usually it is already) and return the mode.
    Asking for WAL while other connections open the same file can answer "database is
    locked" at once, without waiting out the busy timeout (seen in 14 of 300 rounds of eight
    `tell`s at once on a new database), so that answer is retried with backoff until the busy
    timeout is spent."""
    def ask() -> str:
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
        if mode.lower() == "wal":
            return mode
        return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])

    retrying = Retrying(
        retry=retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError)
                                 and _is_lock(e)),
        stop=stop_after_delay(busy_timeout_ms / 1000),
        wait=wait_exponential(multiplier=0.005, max=0.1), reraise=True)
    return retrying(ask)


def _error(e: sqlite3.Error, path: Path) -> StoreError:
    return (StoreBusy if _is_lock(e) else StoreError)(_explain(e, path))


def _is_lock(e: sqlite3.Error) -> bool:
    text = str(e).lower()
    return "locked" in text or "busy" in text


def _explain(e: sqlite3.Error, path: Path) -> str:
    text = str(e)
    if "readonly" in text:
        return (f"cannot write database {path} ({text}): this connection or the file is "
                "read-only; check the file's permissions")
    if _is_lock(e):
        return (
            f"database {path} stayed locked past the busy timeout ({text}): "
            "another process holds a long write; wait and retry, or find it with `fuser`"
        )
    if "malformed" in text or "not a database" in text:
        return (
            f"database {path} is damaged ({text}): bring back a backup (`coworker "
            "restore-backup DIR`) or move the file aside; `coworker doctor` says more"
        )
    if "unable to open" in text:
        return f"cannot write database {path} ({text}): check the folder's permissions"
    return f"database {path}: {text}"
