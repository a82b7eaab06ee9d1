"""Vectors: embeddings of events and rollups, keyed by (item kind, item, model), with the hash
of the text embedded. A rollup's text is its title and summary (`rollup_text`). Only the
newest events are embedded (`window_start`); a vector never leaves the table when its event
falls out of the window, it is only no longer loaded.

Both backends keep a vector as the float32 bytes of its row (`vector`, the same bytes, so a copy
and its digest are alike). On PostgreSQL the semantic channel needs the pgvector extension
(issue 42): with it, `embedding` is the same vector as pgvector's type, a column GENERATED from
the bytes (never out of step with them, whoever writes the row, a copy included), made with the
extension itself (when the role may) by the first writer that asks (`unavailable`); `nearest`
asks it with pgvector's exact inner-product scan. Without the extension, one WARNING a process
says what to run, nothing is loaded or embedded, and recall goes on lexical. SQLite answers
`nearest` with the same brute-force cosine over the bytes, in the same order (similarity,
then id)."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from .db import Store
from .events import now_iso

log = logging.getLogger(__name__)

EXTENSION = "vector"  # pgvector's extension name (CREATE EXTENSION vector)
MAX_DIM = 16000  # pgvector's vector holds at most this many dimensions
# store -> the schema pgvector's type lives in when this store can search with it, else None
_PGVECTOR: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
_WARNED: set[str] = set()  # databases whose missing pgvector was said in this process

# float32 little-endian bytes (numpy's, SQLite's blob) -> pgvector's vector, exactly (a float32
# is exactly a float8, and back): NULL for bytes that are not `dim` float32s, or NaN/infinite
# (pgvector refuses them; Matrix leaves such a row out too). About 1 ms a 384-dimension row.
_BYTES_TO_VECTOR = """
CREATE OR REPLACE FUNCTION vector_of_bytes(b bytea, dim integer) RETURNS {ext}.vector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $body$
DECLARE
    out float8[];
    j integer;
    e integer;
    m integer;
BEGIN
    IF b IS NULL OR dim IS NULL OR dim < 1 OR dim > {max_dim} OR length(b) <> 4 * dim THEN
        RETURN NULL;
    END IF;
    out := array_fill(0::float8, ARRAY[dim]);
    FOR i IN 0 .. dim - 1 LOOP
        j := 4 * i;
        e := ((get_byte(b, j + 3) & 127) << 1) | (get_byte(b, j + 2) >> 7);
        IF e = 255 THEN
            RETURN NULL;
        END IF;
        m := ((get_byte(b, j + 2) & 127) << 16) | (get_byte(b, j + 1) << 8) | get_byte(b, j);
        out[i + 1] := CASE WHEN e = 0 THEN m * 2.0::float8 ^ -149
                           ELSE (8388608 + m) * 2.0::float8 ^ (e - 150) END
                      * CASE WHEN get_byte(b, j + 3) >= 128 THEN -1 ELSE 1 END;
    END LOOP;
    RETURN out::{ext}.vector;
END $body$
"""
_EMBEDDING = ("ALTER TABLE vectors ADD COLUMN IF NOT EXISTS embedding {ext}.vector "
              "GENERATED ALWAYS AS (vector_of_bytes(vector, dim)) STORED")


def attach(conn: Any) -> str | None:
    """On a raw psycopg connection whose search_path is a coworker's schema, inside a
    transaction: give `vectors` its pgvector column when the extension is there. Return the
    extension's schema, or None without it."""
    from psycopg import sql

    ext = _extension(conn)
    if ext is not None:
        conn.execute(sql.SQL(_BYTES_TO_VECTOR).format(ext=sql.Identifier(ext),
                                                      max_dim=sql.Literal(MAX_DIM)))
        conn.execute(sql.SQL(_EMBEDDING).format(ext=sql.Identifier(ext)))
    return ext


def _extension(conn: Any) -> str | None:
    row = conn.execute("SELECT n.nspname FROM pg_extension AS e JOIN pg_namespace AS n "
                       "ON n.oid = e.extnamespace WHERE e.extname = %s", (EXTENSION,)).fetchone()
    return None if row is None else str(row[0])


def unavailable(store: Store) -> str | None:
    """Why this store cannot hold the semantic channel, in one line (None: it can). SQLite
    always can; PostgreSQL needs pgvector and its column on the coworker's vectors, which the
    first writer that asks makes (`_search_schema`). Said at WARNING once a process a
    database."""
    if store.dialect != "postgres":
        return None
    if store not in _PGVECTOR:
        ext, settled = _search_schema(store)
        if not settled:  # asked inside a read: answered for now, asked again next time
            return None if ext is not None else _why(store)
        _PGVECTOR[store] = ext
    return None if _PGVECTOR[store] is not None else _why(store)


def _why(store: Store) -> str:
    where = str(store.path).split("#", 1)[0]
    why = (f"the semantic channel on PostgreSQL needs the pgvector extension, which database "
           f"{where} lacks: a superuser runs CREATE EXTENSION vector there (then restart the "
           "coworker); lexical recall only until then")
    if _extension(cast(Any, store).raw) is not None:  # installed; this reader found no column
        why = (f"pgvector is in database {where}, but this coworker's vectors have no pgvector "
               "column yet: run any writing command once (coworker embed --backfill); lexical "
               "recall only until then")
    if where not in _WARNED:
        _WARNED.add(where)
        log.warning("%s", why)
    return why


def _search_schema(store: Any) -> tuple[str | None, bool]:
    """(pgvector's schema when the coworker's vectors have its column, else None; whether that
    is settled for this store). A writer outside a transaction makes what is missing: first
    CREATE EXTENSION vector in schema public (a superuser's right: refused, nothing changes),
    then the column. Inside a transaction (a snapshot's read) nothing is made, nothing settled."""
    if _has_embedding(store):
        return _extension(store.raw), True
    if store.readonly or store.conn.in_transaction:
        return None, store.readonly
    import psycopg

    with store.transaction():
        if _extension(store.raw) is None:
            try:
                with store.transaction():  # a savepoint: a refusal leaves the rest as it was
                    store.raw.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
            except psycopg.Error as e:
                log.info("no pgvector in %s (%s): the semantic channel stays off there",
                         str(store.path).split("#", 1)[0], " ".join(str(e).split()))
        attach(store.raw)
    return (_extension(store.raw), True) if _has_embedding(store) else (None, True)


def _has_embedding(store: Any) -> bool:
    return store.scalar("SELECT 1 FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = "
                        "a.attrelid JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE "
                        "n.nspname = ? AND c.relname = 'vectors' AND a.attname = 'embedding' "
                        "AND NOT a.attisdropped", (store.schema,)) is not None


def missing_events(store: Store, model: str, skip_kinds: Sequence[str], after_id: int = 0,
                   page: int = 500) -> list[tuple[int, str]]:
    """Content events (hot or archived) with no vector for `model`, in id order (none where
    the semantic channel is `unavailable`: nothing is embedded that cannot be searched)."""
    if unavailable(store):
        return []
    marks = ",".join("?" * len(skip_kinds)) or "''"
    rows = store.query(
        f"SELECT h.id, h.body FROM history AS h WHERE h.id > ? AND h.kind NOT IN ({marks}) "
        "AND h.body != '' AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.item_kind = 'event' "
        "AND v.item_id = h.id AND v.model = ?) ORDER BY h.id LIMIT ?",
        (after_id, *skip_kinds, model, page))
    return [(int(r[0]), str(r[1])) for r in rows]


def rollup_text(title: str | None, body: str) -> str:
    return f"{title}: {body}" if title else body


def missing_rollups(store: Store, model: str, after_id: int = 0, page: int = 500
                    ) -> list[tuple[int, str]]:
    """Rollups with no vector for `model`, in id order, with the text to embed (none where the
    semantic channel is `unavailable`)."""
    if unavailable(store):
        return []
    rows = store.query(
        "SELECT r.id, r.title, r.body FROM rollups AS r WHERE r.id > ? AND NOT EXISTS (SELECT 1 "
        "FROM vectors v WHERE v.item_kind = 'rollup' AND v.item_id = r.id AND v.model = ?) "
        "ORDER BY r.id LIMIT ?", (after_id, model, page))
    return [(int(r[0]), rollup_text(r[1], str(r[2]))) for r in rows]


def write(store: Store, model: str, rows: Sequence[tuple[int, int, bytes, str]],
          kind: str = "event") -> None:
    """(item_id, dim, vector bytes, text hash) rows for events (or rollups), in one
    transaction."""
    ts = now_iso()
    with store.transaction() as db:
        db.executemany(
            "INSERT INTO vectors(item_kind, item_id, model, dim, vector, text_hash, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(item_kind, item_id, model) DO UPDATE SET "
            "dim = excluded.dim, vector = excluded.vector, text_hash = excluded.text_hash, "
            "created_at = excluded.created_at",
            [(kind, i, model, dim, blob, h, ts) for i, dim, blob, h in rows])


def all_for(store: Store, model: str, kind: str = "event", after_id: int = 0
            ) -> list[tuple[int, bytes, int]]:
    """(item_id, vector, dim) of one kind and model, of items with id > after_id, in id
    order (none where the semantic channel is `unavailable`)."""
    if unavailable(store):
        return []
    return [(int(r[0]), bytes(r[1]), int(r[2] or 0)) for r in store.query(
        "SELECT item_id, vector, dim FROM vectors WHERE item_kind = ? AND model = ? AND "
        "item_id > ? ORDER BY item_id", (kind, model, after_id))]


def nearest(store: Store, model: str, query: Any, k: int, kind: str = "event",
            after_id: int = 0, before_id: int | None = None,
            min_sim: float | None = None) -> list[tuple[int, float]]:
    """The `k` items of one kind and model (id > after_id, and < before_id when given) most
    similar to `query` (unit float32s, as stored: similarity is the inner product, the cosine),
    as (item_id, similarity), most similar first, ties by id, none below `min_sim`. A row that
    is not `query`'s size, or damaged, is never a neighbour. PostgreSQL: pgvector's exact scan
    (<#>); SQLite: the same over the bytes in numpy; nothing where `unavailable`."""
    q = np.asarray(query, dtype=np.float32).ravel()
    if k <= 0 or not q.size or unavailable(store):
        return []
    if store.dialect == "postgres":
        got = _nearest_pg(store, model, q, k, kind, after_id, before_id)
    else:
        got = _nearest_numpy(store, model, q, k, kind, after_id, before_id)
    return [(i, s) for i, s in got if min_sim is None or s >= min_sim]


def _nearest_pg(store: Store, model: str, q: np.ndarray, k: int, kind: str, after_id: int,
                before_id: int | None) -> list[tuple[int, float]]:
    ext = str(_PGVECTOR[store]).replace('"', '""')
    distance = f'embedding OPERATOR("{ext}".<#>) CAST(? AS "{ext}".vector)'
    text = "[" + ",".join(repr(float(x)) for x in q) + "]"  # a float32 is exact as a float8
    until = "" if before_id is None else " AND item_id < ?"
    rows = store.query(
        f"SELECT item_id, {distance} AS d FROM vectors WHERE item_kind = ? AND model = ? AND "
        f"item_id > ?{until} AND dim = ? AND embedding IS NOT NULL ORDER BY d, item_id LIMIT ?",
        (text, kind, model, after_id, *(() if before_id is None else (before_id,)), q.size, k))
    return [(int(r[0]), -float(r[1])) for r in rows]


def _nearest_numpy(store: Store, model: str, q: np.ndarray, k: int, kind: str, after_id: int,
                   before_id: int | None) -> list[tuple[int, float]]:
    rows = [(i, np.frombuffer(b, dtype=np.float32)) for i, b, dim in
            all_for(store, model, kind, after_id)
            if dim == q.size and len(b) == 4 * dim and (before_id is None or i < before_id)]
    rows = [(i, v) for i, v in rows if np.isfinite(v).all()]
    if not rows:
        return []
    ids = np.fromiter((i for i, _ in rows), dtype=np.int64, count=len(rows))
    sims = np.vstack([v for _, v in rows]) @ q
    top = np.lexsort((ids, -sims))[:k]
    return [(int(ids[i]), float(sims[i])) for i in top]


def window_start(store: Store, window: int) -> int:
    """The id after which the newest `window` events lie (0: the history is shorter)."""
    top = int(store.scalar("SELECT MAX(id) FROM (SELECT MAX(id) AS id FROM events UNION ALL "
                           "SELECT MAX(id) FROM events_archive) AS top") or 0)
    return max(0, top - window)


def count(store: Store, model: str, kind: str | None = None, after_id: int = 0) -> int:
    """How many vectors this model has (of one kind, of items with id > after_id)."""
    if kind is None:
        return int(store.scalar("SELECT COUNT(*) FROM vectors WHERE model = ?", (model,)) or 0)
    return int(store.scalar("SELECT COUNT(*) FROM vectors WHERE model = ? AND item_kind = ? "
                            "AND item_id > ?", (model, kind, after_id)) or 0)


def signature(store: Store, model: str, after_id: int = 0) -> tuple[int, ...]:
    """What changes whenever a loaded matrix would: the count of this model's event vectors
    with id > after_id and of its rollup vectors, and the counter every write to the vectors
    moves (migration m015: a delete and a rewrite leave count and rowids as they were)."""
    out: list[int] = []
    for kind, after in (("event", after_id), ("rollup", 0)):
        out.append(int(store.scalar("SELECT COUNT(*) FROM vectors WHERE item_kind = ? AND "
                                    "item_id > ? AND model = ?", (kind, after, model)) or 0))
    if store.has_table("vector_changes"):
        out.append(int(store.scalar("SELECT n FROM vector_changes WHERE id = 1") or 0))
    else:  # a database not migrated yet (a reader never migrates): the figures before m015
        out += [int(store.scalar("SELECT coalesce(MAX(rowid), 0) FROM vectors WHERE "
                                 "item_kind = ?", (kind,)) or 0) for kind in ("event", "rollup")]
        out.append(int(store.scalar("SELECT coalesce(MAX(id), 0) FROM redactions") or 0))
    return tuple(out)


def with_bodies(store: Store, model: str) -> list[tuple[int, bytes, str, str]]:
    """(item_id, vector, text_hash, current body) for the integrity check."""
    return [(int(r[0]), bytes(r[1]), str(r[2]), str(r[3])) for r in store.query(
        "SELECT v.item_id, v.vector, v.text_hash, h.body FROM vectors v JOIN history h "
        "ON h.id = v.item_id WHERE v.item_kind = 'event' AND v.model = ? ORDER BY v.item_id",
        (model,))]
