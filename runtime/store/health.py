"""The database's health as `coworker doctor` reads it, and the commands that repair it.

Owns what only the store knows of its engine: opening a database for a check so that any
failure of the engine comes out as a StoreError (`checking`, `checking_pg`, `engine_errors`),
the schema objects the applied migrations made that a database no longer holds (`missing`),
whether the full-text indexes agree with their tables (`fts_verdicts`), how to tell damage, a
lock or an index out of step from the engine's own words, and the command lines a person runs
to recover, reindex or rebuild. `DatabaseFailure` is the engine's error class, for the CLI's
last-resort catch. Its checks never write: FTS5's integrity-check is spelled as an INSERT but
changes nothing.

On PostgreSQL (issue 42) the same questions have other answers: the store opens (the server
is reached; the coworker's schema is there, at this code's version or older), the full text's
kept tables (pg_fts: `fts_stats`, `fts_event_tags`, `fts_rollups`, `fts_rollup_words`,
`fts_rollup_terms`, `fts_rollup_stats`, which triggers keep in step with events, tags and
rollups) equal a recount from the rows (`pg_fts_verdicts`), and `pg_fts_rebuild` recomputes
them under the write lock (`fts_rebuild`, which `coworker store rebuild-fts` calls, rebuilds
either backend's full text: the only functions here that write). Beside them what only
PostgreSQL has: the pgvector extension (`pgvector`), a connection pooler in transaction mode,
which breaks the runner's session advisory lock and LISTEN (`pooled_pids`, `pooled`), and the
schema's version (`schema_version`).
"""

from __future__ import annotations

import shlex
import sqlite3
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StoreError
from . import migrations
from .db import Store
from .pg_fts import ROLLUP_STATS_RECOUNT, ROLLUP_TERMS, ROLLUP_WORDS

DatabaseFailure = sqlite3.DatabaseError  # what the engine raises when a database fails
FTS_INDEXES = ("events_fts", "rollups_fts")
_DAMAGE = ("malformed", "not a database", "corrupt")


@dataclass(frozen=True)
class IndexVerdict:
    """One full-text index checked: `state` is "ok", "out_of_sync" (the index disagrees with
    its table), "busy" (another writer: not checked) or "damaged" (the file is not a
    database); `detail` is the engine's words."""

    table: str
    state: str
    detail: str = ""


@contextmanager
def checking(path: Path, *, readonly: bool = True) -> Iterator[Store]:
    """The store at `path`, never migrated; any failure of the engine while it is open comes
    out as a StoreError whose cause is the engine's error (a StoreError stays as it is)."""
    try:
        with Store.open(path, readonly=readonly, migrate=False) as store:
            yield store
    except sqlite3.DatabaseError as e:
        raise StoreError(str(e)) from e


def damaged(reason: str) -> bool:
    """Whether the engine's words say the file is damaged (not merely locked or unreadable)."""
    return any(w in reason for w in _DAMAGE)


def only_indexes(integrity: str) -> bool:
    """Whether an integrity_check verdict blames only an index (a reindex fixes it)."""
    return " index " in f" {integrity} "


def missing(store: Store) -> list[str]:
    """The tables, views, triggers and indexes the database's applied migrations made that it
    no longer holds (a dropped `pins`, an append-only trigger gone), as "table pins"."""
    def objects(conn: sqlite3.Connection) -> set[tuple[str, str]]:
        return {(r[0], r[1]) for r in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}

    applied = {r[0] for r in store.query("SELECT name FROM _migrations")}
    fresh = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for fn in migrations.MIGRATIONS:
            if fn.__name__ in applied:
                fn(fresh)
        return [f"{kind} {what}" for kind, what in sorted(objects(fresh) - objects(store.conn))]
    finally:
        fresh.close()


def fts_verdicts(store: Store) -> list[IndexVerdict]:
    """Each full-text index against its content (FTS5's integrity-check with rank 1, which
    compares the index with the history view and rollups_indexed). Needs a read-write store;
    writes nothing. On PostgreSQL, `pg_fts_verdicts` (read-only is enough there)."""
    if getattr(store, "dialect", "sqlite") == "postgres":
        return pg_fts_verdicts(store)
    return [_fts_verdict(store, table) for table in FTS_INDEXES]


def _fts_verdict(store: Store, table: str) -> IndexVerdict:
    try:
        store.fts_integrity(table)
    except sqlite3.DatabaseError as e:
        text = str(e)
        if "not a database" in text:
            return IndexVerdict(table, "damaged", text)
        if "locked" in text or "busy" in text:
            return IndexVerdict(table, "busy", text)
        return IndexVerdict(table, "out_of_sync", text)
    return IndexVerdict(table, "ok")


# --- what a person runs to repair ------------------------------------------------------------

def recover_command(db: Path, fresh: Path) -> str:
    """The command line that copies what can be read of a damaged `db` into `fresh`."""
    return f"sqlite3 {shlex.quote(str(db))} .recover | sqlite3 {shlex.quote(str(fresh))}"


def reindex_command(db: Path) -> str:
    """The command line that rebuilds every index of `db` from its tables."""
    return f"sqlite3 {shlex.quote(str(db))} REINDEX"


def fts_rebuild_command(db: Path, table: str) -> str:
    """The command line that rebuilds the full-text index `table` of `db` from its content."""
    return f"sqlite3 {shlex.quote(str(db))} \"INSERT INTO {table}({table}) VALUES('rebuild')\""


def fts_rebuild_hint(store: Any, table: str) -> str:
    """What a person runs to rebuild the full-text index `table` of this store."""
    if getattr(store, "dialect", "sqlite") == "postgres":
        return REBUILD_FTS_COMMAND
    return fts_rebuild_command(Path(store.path), table)


# --- PostgreSQL ---------------------------------------------------------------------------------

REBUILD_FTS_COMMAND = "coworker store rebuild-fts"  # runs fts_rebuild on the home's store
POOLING_FIX = "use session pooling (pool_mode = session) or connect to PostgreSQL directly"


@contextmanager
def engine_errors() -> Iterator[None]:
    """Any failure of either engine inside comes out as a StoreError whose cause is the
    engine's error (a StoreError stays as it is). psycopg is looked up, never imported: a home
    on SQLite needs none."""
    try:
        yield
    except StoreError:
        raise
    except sqlite3.DatabaseError as e:
        raise StoreError(str(e)) from e
    except Exception as e:
        psycopg = sys.modules.get("psycopg")
        if psycopg is not None and isinstance(e, psycopg.Error):
            raise StoreError(" ".join(str(e).split())) from e
        raise


@contextmanager
def checking_pg(url: str, coworker_id: str) -> Iterator[Any]:
    """The coworker's schema at `url`, read-only and never migrated (nor created: a schema
    not there yet is pg_schema.NotYet, a newer one SchemaNewer); any failure comes out as a
    StoreError."""
    from .pg import PgStore

    store = PgStore.open(url, coworker_id, readonly=True, migrate=False)
    with engine_errors(), store:
        yield store


def schema_version(store: Any) -> tuple[int, int]:
    """(the schema's version, the version this code knows)."""
    from . import pg_schema

    return store.schema_version(), pg_schema.VERSION


def pgvector(store: Any) -> tuple[str | None, bool]:
    """(the pgvector extension's version in this database or None, whether the server has it
    to create)."""
    version = store.scalar("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    available = store.scalar("SELECT count(*) FROM pg_available_extensions "
                             "WHERE name = 'vector'")
    return (None if version is None else str(version)), bool(available)


POOL_WAIT_S = 5.0  # how long `store` may wait for a server while `other` holds a transaction
WAITED = -1  # in pooled_pids: `store` got no server while `other` held one


def pooled_pids(store: Any, other: Any, rounds: int = 3) -> list[int]:
    """The server process that answers `store` in separate transactions, `rounds` times, with
    `other` (a second connection to the same server) inside a transaction between them. Each
    statement of `store` (autocommit) is a transaction of its own; directly, or through a
    pooler in session mode, one connection is one server process throughout. A pooler in
    transaction mode hands a server connection to whichever client starts a transaction:
    `other`, taking the one `store` just gave back (PgBouncer reuses the last released first),
    leaves `store` another, or, in a pool of one, none: `store`'s statement waits until
    `other` commits (never, were it asked on the same thread), so it is asked on a thread of
    its own and a wait past POOL_WAIT_S is WAITED. More than one pid or WAITED: transaction
    pooling (`pooled`)."""
    pids = [int(store.scalar("SELECT pg_backend_pid()"))]
    for _ in range(rounds - 1):
        answer: list[Any] = []
        asking = threading.Thread(target=_pid_into, args=(store, answer), name="doctor-pooling",
                                  daemon=True)
        with other.snapshot():
            other.scalar("SELECT pg_backend_pid()")
            asking.start()
            asking.join(POOL_WAIT_S)
            waited = not answer
        asking.join(POOL_WAIT_S)  # `other` committed: a waiting statement gets its server now
        if answer and isinstance(answer[0], Exception):
            raise answer[0]
        if waited:
            return [*pids, WAITED]
        pids.append(answer[0])
    return pids


def expected_triggers() -> dict[str, str]:
    """Each trigger a coworker's PostgreSQL schema holds (pg_schema's and pg_fts' DDL), by name,
    with its table: the guards that keep history append-only, rollups sealed, approvals moving
    forward, and the full text and its counts current."""
    import re

    from . import pg_fts, pg_schema

    texts = [pg_schema._BASELINE, pg_schema._LADDER_AND_LEDGERS, pg_fts._ROLLUPS,
             pg_fts._EVENT_TAGS, *(pg_fts._TABLE.replace("{table}", t)
                                   for t in ("events", "events_archive"))]
    made = re.compile(r"CREATE TRIGGER (\w+)\s.*?\sON (\w+)", re.S)
    return {m[1]: m[2] for text in texts for m in made.finditer(text)}


def guards(store: Any) -> tuple[list[str], list[str]]:
    """(missing, disabled): the expected triggers the schema lacks, and those there but
    disabled (ALTER TABLE ... DISABLE TRIGGER), as `table.trigger`."""
    expected = expected_triggers()
    found = {r[0]: str(r[1]) for r in store.query(
        "SELECT t.tgname, t.tgenabled FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = "
        "t.tgrelid JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = ? AND "
        "NOT t.tgisinternal", (store.schema,))}
    missing = sorted(f"{table}.{name}" for name, table in expected.items() if name not in found)
    disabled = sorted(f"{table}.{name}" for name, table in expected.items()
                      if found.get(name) == "D")
    return missing, disabled


def _pid_into(store: Any, answer: list[Any]) -> None:
    """`store`'s server process into `answer`, or what it raised."""
    try:
        answer.append(int(store.scalar("SELECT pg_backend_pid()")))
    except Exception as e:  # noqa: BLE001  (raised again on the caller's thread)
        answer.append(e)


def pooled(pids: Sequence[int]) -> bool:
    """Whether one connection was answered by several server processes, or waited for one
    (`pooled_pids`): a pooler in transaction mode, under which session advisory locks and
    LISTEN break."""
    return len(set(pids)) > 1


# The full text's kept tables as the rows make them (pg_fts' triggers, done at once): an
# event's tags (fts_event_tags), a rollup's row (fts_rollups), and the counts beside them.
_EVENT_TAGS = ("SELECT item_id AS id, fts_vector(fts_tokens(t)) AS tsv, fts_count(t) AS ntok "
               "FROM (SELECT item_id, string_agg(word, ' ' ORDER BY id) AS t FROM tags "
               "WHERE item_kind = 'event' GROUP BY item_id) AS g")
_ROLLUPS = (
    "SELECT r.id, b.base, b.n AS base_ntok, "
    "coalesce(fts_vector(fts_tokens(g.t)), ''::tsvector) || b.base AS tsv, "
    "b.n + coalesce(fts_count(g.t), 0) AS ntok, r.level FROM rollups AS r "
    "CROSS JOIN LATERAL (SELECT fts_rollup_base(r.title, r.body, r.terms, r.level, r.vocab) "
    "AS base, coalesce(fts_count(r.title), 0) + coalesce(fts_count(r.body), 0) "
    "+ coalesce(fts_count(r.terms), 0) + fts_count(CAST(r.level AS TEXT)) "
    "+ coalesce(fts_count(r.vocab), 0) AS n) AS b "
    "LEFT JOIN (SELECT item_id, string_agg(word, ' ' ORDER BY id) AS t FROM tags "
    "WHERE item_kind = 'rollup' GROUP BY item_id) AS g ON g.item_id = r.id")
_EVENT_ROWS = ("SELECT r.tsv || coalesce(g.tsv, ''::tsvector) AS v, r.ntok + coalesce(g.ntok, 0) "
               "AS ntok FROM (SELECT id, tsv, ntok FROM events UNION ALL SELECT id, tsv, ntok "
               "FROM events_archive) AS r LEFT JOIN ({tags}) AS g ON g.id = r.id")
# (ts_stat counts each term's rows in C: half the time of unnest and GROUP BY)
_STATS = ("SELECT '' AS term, count(*) AS doc, coalesce(sum(ntok), 0) AS toks FROM ({rows}) AS i "
          "UNION ALL SELECT word, ndoc, 0 FROM ts_stat('SELECT v FROM ({quoted}) AS i')")


@dataclass(frozen=True)
class _Kept:
    """One kept table of pg_fts: its key, its kept columns, and the rows it should hold."""

    table: str
    key: tuple[str, ...]
    values: tuple[str, ...]
    recount: str  # a SELECT of key + values
    one: str  # what one row is, for the verdict's words
    counts: bool = False  # a table of counts: a row counting nothing is as good as absent


def _kept(rollups: str = "fts_rollups") -> tuple[_Kept, ...]:
    rows = _EVENT_ROWS.replace("{tags}", _EVENT_TAGS)
    return (
        _Kept("fts_event_tags", ("id",), ("tsv", "ntok"), _EVENT_TAGS, "tagged event"),
        _Kept("fts_rollups", ("id",), ("base", "base_ntok", "tsv", "ntok", "level"), _ROLLUPS,
              "rollup"),
        _Kept("fts_rollup_words", ("id",), ("ad",),
              ROLLUP_WORDS.replace("{rows}", f"({_ROLLUPS}) AS f"), "rollup's words"),
        # (a term of a rollup is one row: its level the value compared)
        _Kept("fts_rollup_terms", ("term", "id"), ("level",),
              ROLLUP_TERMS.replace("{rows}", f"({_ROLLUPS}) AS f"), "term of a rollup"),
        _Kept("fts_stats", ("term",), ("doc", "toks"),
              _STATS.replace("{rows}", rows).replace("{quoted}", rows.replace("'", "''")),
              "term", counts=True),
        _Kept("fts_rollup_stats", ("term", "mask", "level"), ("doc", "toks"),
              ROLLUP_STATS_RECOUNT.replace("{rows}", f"({_ROLLUPS}) AS f"),
              "term, class and rung", counts=True),
    )


def _differences(store: Any, kept: _Kept) -> tuple[int, list[tuple[Any, ...]]]:
    """How many rows of a kept table differ from its recount (a term counted in no row, with
    a count of 0, is as good as absent), and the first three: key, kept values, recounted
    ones."""
    on = " AND ".join(f"k.{c} = r.{c}" for c in kept.key)
    key = ", ".join(f"coalesce(k.{c}, r.{c})" for c in kept.key)
    kv = ", ".join(f"k.{c}" for c in kept.values)
    rv = ", ".join(f"r.{c}" for c in kept.values)
    zero = " AND NOT (doc = 0 AND toks = 0)" if kept.counts else ""
    found = store.query(
        f"SELECT count(*) OVER (), {key}, {kv}, {rv} "
        f"FROM (SELECT * FROM {kept.table} WHERE TRUE{zero}) AS k "
        f"FULL JOIN (SELECT * FROM ({kept.recount}) AS x WHERE TRUE{zero}) AS r ON {on} "
        f"WHERE ({kv}) IS DISTINCT FROM ({rv}) ORDER BY {key} LIMIT 3")
    return (int(found[0][0]) if found else 0), [tuple(r[1:]) for r in found]


def pg_fts_verdicts(store: Any) -> list[IndexVerdict]:
    """Each of pg_fts' kept tables against a recount from events, tags and rollups (what its
    triggers would have made of them): "ok", or "out_of_sync" with how many rows differ and
    the first of them. Reads only, in one snapshot. A history of a million events takes some
    seconds (every event's terms are counted again)."""
    verdicts = []
    with store.snapshot():
        for kept in _kept():
            n, first = _differences(store, kept)
            if not n:
                verdicts.append(IndexVerdict(kept.table, "ok"))
                continue
            shown = "; ".join(_shown(kept, row) for row in first)
            verdicts.append(IndexVerdict(kept.table, "out_of_sync",
                                         f"{n:,} row(s) differ from a recount from the "
                                         f"history, e.g. {shown}"))
    return verdicts


def _shown(kept: _Kept, row: tuple[Any, ...]) -> str:
    """One differing row in words: "term 'deploy' in 4 rows, counted 5", "rollup 7 stale"."""
    n = len(kept.key)
    key = "/".join(repr(x) if isinstance(x, str) else str(x) for x in row[:n])
    held, counted = row[n:n + len(kept.values)], row[n + len(kept.values):]
    if kept.counts and row[0] == "":  # (doc, toks)
        return (f"the totals: {held[0] or 0} row(s) of {held[1] or 0} token(s), counted "
                f"{counted[0] or 0} of {counted[1] or 0}")
    if kept.counts:
        return f"{kept.one} {key} in {held[0] or 0} row(s), counted {counted[0] or 0}"
    return f"{kept.one} {key} " + ("missing" if held[0] is None else "left over"
                                    if counted[0] is None else "stale")


def fts_rebuild(store: Any) -> list[str]:
    """Rebuild the full text from the history, on either backend, under the write lock; return
    what was rebuilt. SQLite: FTS5's 'rebuild' of events_fts and rollups_fts (each index made
    again from its content); PostgreSQL: `pg_fts_rebuild`."""
    if getattr(store, "dialect", "sqlite") == "postgres":
        return pg_fts_rebuild(store)
    with store.transaction() as db:
        for table in FTS_INDEXES:
            db.execute(f"INSERT INTO {table}({table}) VALUES('rebuild')")
    return list(FTS_INDEXES)


def pg_fts_rebuild(store: Any) -> list[str]:
    """Make pg_fts' kept tables what a recount of the rows gives (`pg_fts_verdicts` then says
    ok), in one write transaction under the coworker's write lock (a running loop's writes
    wait for it, and its searches for the commit: TRUNCATE locks the tables); return the
    tables rebuilt. Each is emptied by TRUNCATE, so it gets a new file on the server, and the
    stamps of what memory keeps of the counts (fts.history_stamp, rollups_stamp) move. Search
    and bm25 read these tables, so a rebuild changes no event, rollup or tag: only what they
    are found and ranked by."""
    kept = _kept()
    with store.transaction() as db:
        for k in kept:
            columns = ", ".join(k.key + k.values)
            recount = k.recount
            if k.table == "fts_rollup_stats":  # from the rows just rebuilt
                recount = ROLLUP_STATS_RECOUNT.replace("{rows}", "fts_rollups AS f")
            if k.table == "fts_rollup_words":
                recount = ROLLUP_WORDS.replace("{rows}", "fts_rollups AS f")
            if k.table == "fts_rollup_terms":
                recount = ROLLUP_TERMS.replace("{rows}", "fts_rollups AS f")
            db.execute(f"TRUNCATE {k.table}")  # a new file: the memory's stamps move (fts.py)
            db.execute(f"INSERT INTO {k.table} ({columns}) SELECT {columns} FROM ({recount}) AS x")
    return [k.table for k in kept]
