"""Moving a coworker's whole store from one backend to the other: `coworker store copy`.

Owns copying every table two stores share (a SQLite file and a PostgreSQL schema, either way;
ADR-0044), table by table in the source's order of creation, the columns both have (never a
target's generated or derived ones, such as PostgreSQL's `tsv`), in batches of rows each
written in one transaction of the target, with the source's own ids. It is idempotent and resumable: a row
the target already holds is skipped (`INSERT OR IGNORE` / `ON CONFLICT DO NOTHING`), and a
table keyed by an integer `id` resumes after the highest id the target holds (batches commit in
id order, so the target holds a prefix). On PostgreSQL an identity's sequence is set past the
copied ids. At the end each table is verified: its row count and a SHA-256 over its rows in key
order, on both sides. The full-text indexes are the target's own: its triggers or generated
columns make them as rows arrive. It never changes the source and never deletes a row of the
target.

A text value is written to PostgreSQL with each NUL character as U+FFFD (PostgreSQL's text
holds no NUL), and the digest reads both sides so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError

BATCH = 2000  # rows a transaction of the target
MAX_PARAMS = 65535  # bind parameters a PostgreSQL statement holds (its protocol counts in 16 bits)
NUL, REPLACEMENT = "\x00", "\ufffd"
# Not history: the migrations' record, SQLite's sequence table and its statistics.
# `runner` is PostgreSQL's record of which loop holds the coworker (a host's, not history);
# its `fts_*` tables are its full text's counts, which its own triggers keep as rows arrive.
SKIP = frozenset({"_migrations", "sqlite_sequence", "sqlite_stat1", "sqlite_stat4", "runner"})
DERIVED_PREFIX = "fts_"
DERIVED_COLUMNS = frozenset({"tsv", "ntok"})  # the events' full text on PostgreSQL: pg_fts fills it


@dataclass(frozen=True)
class Copied:
    """One table's copy: rows in the source, rows written now, rows in the target after,
    and whether the two sides' digests agree."""

    table: str
    source_rows: int
    written: int
    target_rows: int
    same: bool


def tables(store: Any) -> list[str]:
    """The store's tables of history, in the order they were created (full-text indexes and
    their shadow tables left out: each backend makes its own)."""
    if store.dialect == "sqlite":
        rows = store.query("SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                           "ORDER BY rowid")
        virtual = [r[0] for r in rows if (r[1] or "").upper().startswith("CREATE VIRTUAL")]
        return [r[0] for r in rows if r[0] not in SKIP and r[0] not in virtual
                and not any(r[0].startswith(v + "_") for v in virtual)]
    rows = store.query(
        "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE n.nspname = ? AND c.relkind = 'r' ORDER BY c.oid", (store.schema,))
    return [r[0] for r in rows if r[0] not in SKIP and not r[0].startswith(DERIVED_PREFIX)]


def columns(store: Any, table: str) -> list[str]:
    """The columns a row of `table` is written with (generated ones left out), in order."""
    if store.dialect == "sqlite":
        return [r[1] for r in store.query(f'PRAGMA table_xinfo("{table}")') if r[6] == 0]
    return [r[0] for r in store.query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND "
        "table_name = ? AND is_generated = 'NEVER' ORDER BY ordinal_position",
        (store.schema, table)) if r[0] not in DERIVED_COLUMNS]


def key(store: Any, table: str, cols: Sequence[str]) -> list[str]:
    """The columns that order `table`'s rows: its primary key, else every column."""
    if store.dialect == "sqlite":
        pk = sorted((r[5], r[1]) for r in store.query(f'PRAGMA table_info("{table}")') if r[5])
        found = [name for _, name in pk]
    else:
        found = [r[0] for r in store.query(
            "SELECT a.attname FROM pg_index AS i JOIN pg_attribute AS a ON a.attrelid = "
            "i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = CAST(? AS regclass) "
            "AND i.indisprimary ORDER BY array_position(CAST(i.indkey AS int2[]), a.attnum)",
            (f"{store.schema}.{table}",))]
    return [c for c in found if c in cols] or list(cols)


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


# Tables of counters that each backend's schema seeds with a row (vector_changes: every write
# to the vectors moves it, and a cache reloads when it moves): the target's own triggers count
# the rows copied in, so after the copy its counter is brought up to the source's (never down:
# a counter that went back could look unchanged to a cache that saw it).
COUNTERS = {"vector_changes": "n"}

# Tables whose rows name a row of their own table (a rollup its parent, sealed after it):
# copied parents first, whole, since the database checks each reference as a row arrives.
PARENTS_FIRST = {"rollups": '"level" DESC, "id"'}


def _rows(store: Any, table: str, cols: Sequence[str], order: Sequence[str],
          after_id: int | None = None, parents_first: bool = False) -> Iterator[tuple]:
    """`table`'s rows in key order, a page at a time (keyset on `id` when it is the key), or
    parents before children."""
    select = f'SELECT {_quoted(cols)} FROM "{table}"'
    if parents_first and table in PARENTS_FIRST:
        yield from (tuple(r) for r in store.query(f"{select} ORDER BY {PARENTS_FIRST[table]}"))
        return
    if list(order) == ["id"]:
        last = after_id or 0
        while True:
            page = store.query(f'{select} WHERE "id" > ? ORDER BY "id" LIMIT ?', (last, BATCH))
            if not page:
                return
            yield from (tuple(r) for r in page)
            last = int(page[-1][list(cols).index("id")])
    yield from (tuple(r) for r in store.query(f"{select} ORDER BY {_quoted(order)}"))


def _clean(value: Any) -> Any:
    return value.replace(NUL, REPLACEMENT) if isinstance(value, str) else value


def _write(target: Any, table: str, cols: Sequence[str], rows: list[tuple]) -> int:
    """Write a batch in one transaction of the target; return how many it did not hold."""
    if not rows:
        return 0
    marks = ", ".join("?" * len(cols))
    with target.transaction():
        if target.dialect == "sqlite":
            cur = target.conn.executemany(
                f'INSERT OR IGNORE INTO "{table}"({_quoted(cols)}) VALUES ({marks})', rows)
            return int(cur.rowcount)
        # many rows a statement: a statement trigger (the full text's counts) runs once for
        # them, where one a row made a copy 4 ms a row, and quadratic in one transaction
        # (each update of a counts row walks the versions that transaction left of it)
        one = f"({', '.join(['%s'] * len(cols))})"
        step = max(1, MAX_PARAMS // len(cols))
        written = 0
        with target.raw.cursor() as cur:
            for at in range(0, len(rows), step):
                part = rows[at:at + step]
                cur.execute(f'INSERT INTO "{table}"({_quoted(cols)}) OVERRIDING SYSTEM VALUE '
                            f"VALUES {', '.join([one] * len(part))} ON CONFLICT DO NOTHING",
                            [_clean(v) for r in part for v in r])
                written += max(int(cur.rowcount), 0)
        return written


def _count(store: Any, table: str) -> int:
    return int(store.scalar(f'SELECT COUNT(*) FROM "{table}"') or 0)


def digest(store: Any, table: str, cols: Sequence[str], order: Sequence[str]) -> str:
    """SHA-256 over `table`'s rows in key order, each value written one way whichever backend
    holds it (NUL as U+FFFD)."""
    h = hashlib.sha256()
    for row in _rows(store, table, cols, order):
        for v in row:
            h.update(_token(v))
        h.update(b"\x1e")
    return h.hexdigest()


def _token(v: Any) -> bytes:
    if v is None:
        return b"\x00N\x1f"
    if isinstance(v, bytes | bytearray | memoryview):
        return b"\x00B" + bytes(v).hex().encode() + b"\x1f"
    if isinstance(v, float):
        return b"\x00F" + repr(v).encode() + b"\x1f"
    if isinstance(v, bool | int):
        return b"\x00I" + str(int(v)).encode() + b"\x1f"
    return str(_clean(v)).encode("utf-8", "surrogatepass") + b"\x1f"


def _sequences(target: Any, table: str, cols: Sequence[str]) -> None:
    """Set a PostgreSQL identity past the ids copied into it (a new row takes the next)."""
    if target.dialect != "postgres" or "id" not in cols:
        return
    seq = target.scalar("SELECT pg_get_serial_sequence(?, 'id')", (f"{target.schema}.{table}",))
    if seq:
        with target.transaction():
            target.execute(f'SELECT setval(?, (SELECT COALESCE(MAX("id"), 0) + 1 FROM "{table}"), '
                           "false)", (seq,))


def _counters(source: Any, target: Any, table: str) -> None:
    """A counter table's rows in the target brought up to the source's counts (COUNTERS)."""
    col = COUNTERS.get(table)
    if col is None:
        return
    for row in source.query(f'SELECT "id", "{col}" FROM "{table}"'):
        with target.transaction():
            target.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE "id" = ? AND "{col}" < ?',
                           (row[1], row[0], row[1]))


def copy_table(source: Any, target: Any, table: str) -> Copied:
    """Copy one table's rows the target does not hold yet, then verify it."""
    target_cols = set(columns(target, table))
    source_cols = columns(source, table)
    cols = [c for c in source_cols if c in target_cols]
    if missing := sorted(target_cols - set(source_cols)):
        raise StoreError(f"table {table}: the target has columns the source lacks "
                         f"({', '.join(missing)}); is one side of another coworker version?")
    order = key(source, table, cols)
    after = None
    if order == ["id"] and table not in PARENTS_FIRST:
        after = int(target.scalar(f'SELECT COALESCE(MAX("id"), 0) FROM "{table}"') or 0)
    written, batch = 0, []
    for row in _rows(source, table, cols, order, after, parents_first=True):
        batch.append(row)
        if len(batch) >= BATCH:
            written += _write(target, table, cols, batch)
            batch = []
    written += _write(target, table, cols, batch)
    _sequences(target, table, cols)
    _counters(source, target, table)
    same = digest(source, table, cols, order) == digest(target, table, cols, order)
    return Copied(table, _count(source, table), written, _count(target, table), same)


def refuse_running(target: Any, then: str = "copy") -> None:
    """StoreError naming the host when a loop holds this coworker's claim on the PostgreSQL
    store `target` (nothing to refuse on a SQLite file: its pidfile is the home's)."""
    if target.dialect != "postgres":
        return
    from . import pg_runner

    held = pg_runner.current(target)
    if held is not None and held.holding:
        raise StoreError(f"this coworker runs on that database ({held.host}, pid "
                         f"{held.pid}): stop it there first, then {then}")


def copy_store(source: Any, target: Any,
               said: Callable[[Copied], None] = lambda c: None,
               then: str = "copy") -> list[Copied]:
    """Copy every table of history the source holds into the target (which must have them
    all: it is migrated to the same schema version first, by opening it); `said` hears each
    table as it is done. A table the target lacks is a StoreError before anything is written,
    so is a PostgreSQL target whose coworker runs (`then`: what the message says to do after
    stopping it)."""
    refuse_running(target, then)
    wanted = tables(source)
    have = set(tables(target))
    if missing := [t for t in wanted if t not in have]:
        raise StoreError(f"the target has no table {', '.join(missing[:5])}: is it migrated to "
                         "this coworker's version?")
    done = []
    for table in wanted:
        copied = copy_table(source, target, table)
        said(copied)
        done.append(copied)
    return done
