"""The schema on PostgreSQL, in PostgreSQL's own words: one schema `cw_<id>` per coworker.

Owns the DDL of the PostgreSQL store (issue 42, ADR-0044) as numbered migrations that run on a
raw psycopg connection, never through the SQLite translator: the baseline (version 20, the
number of SQLite's migrations it stands beside, so both backends speak of one schema version)
creates `_migrations`, `events` (with `tsv`, a tsvector GENERATED from the body, config
`simple`, under a GIN index), `events_archive`, the `history` view over both, `tags` (the
view reads them), `redactions` (the one audited exception to append-only) and `inputs`; the
triggers that keep events and the archive append-only exactly as SQLite's do (an UPDATE only
writes a redaction's marker, a DELETE only of an event already in the archive, never a
TRUNCATE); the shims that let SQL written for SQLite run unchanged (`json_extract` over TEXT
holding JSON, `json_valid`, and a `sqlite_sequence` view whose `events` row is the highest id
ever written); and the version check: a database newer than this code is refused with one
line. Migrations run in one transaction under a transaction-level advisory lock, so two hosts
opening one new coworker at once create it once. It never reads or writes a row of history.
The baseline holds the tables the event log and the inputs need; the ladder's, the ledgers'
and the others join it before a PostgreSQL store ships (until then it is edited in place).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from ..errors import StoreError

# The version of the baseline: SQLite's len(migrations.MIGRATIONS) when it was written (a test
# keeps VERSION equal to it, so a SQLite migration without its PostgreSQL twin fails the suite).
BASELINE = 20
MIGRATE_LOCK_TIMEOUT_MS = 120_000  # a host waits this long for another one's migration
MIN_SERVER = 160000  # PostgreSQL 16: `IS JSON`, subqueries in FROM without an alias

# Every TEXT column is COLLATE "C": SQLite compares text byte by byte (BINARY), and a
# database's own locale (en_US, say) would order ISO timestamps and kinds otherwise. A body's
# first 100,000 characters make its tsvector: a tsvector holds at most 1 MB, and a 4 MiB
# message of distinct words (inputs.MESSAGE_MAX_BYTES) would fail the INSERT that stores it.
_BASELINE = r"""
CREATE TABLE events (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    actor TEXT COLLATE "C" NOT NULL,
    author_kind TEXT COLLATE "C" NOT NULL
        CHECK (author_kind IN ('user', 'agent', 'tool', 'third_party', 'system', 'unknown')),
    body TEXT COLLATE "C" NOT NULL DEFAULT '',
    meta TEXT COLLATE "C",
    tick_id BIGINT,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', left(body, 100000))) STORED
);
CREATE INDEX events_kind_id ON events(kind, id);
CREATE INDEX events_ts ON events(ts);
CREATE INDEX events_tsv ON events USING GIN (tsv);
CREATE TABLE events_archive (
    id BIGINT PRIMARY KEY,
    ts TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    actor TEXT COLLATE "C" NOT NULL,
    author_kind TEXT COLLATE "C" NOT NULL,
    body TEXT COLLATE "C" NOT NULL DEFAULT '',
    meta TEXT COLLATE "C",
    tick_id BIGINT,
    archived_at TEXT COLLATE "C" NOT NULL,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', left(body, 100000))) STORED
);
CREATE INDEX events_archive_ts ON events_archive(ts);
CREATE INDEX events_archive_tsv ON events_archive USING GIN (tsv);
CREATE TABLE tags (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item_kind TEXT COLLATE "C" NOT NULL CHECK (item_kind IN ('event', 'rollup')),
    item_id BIGINT NOT NULL,
    word TEXT COLLATE "C" NOT NULL,
    ts TEXT COLLATE "C" NOT NULL,
    origin TEXT COLLATE "C" NOT NULL DEFAULT 'owner'
        CHECK (origin IN ('owner', 'model', 'offline')),
    UNIQUE (item_kind, item_id, word)
);
CREATE INDEX tags_origin ON tags(item_kind, origin, item_id);
CREATE VIEW history AS
    SELECT e.id, e.ts, e.kind, e.actor, e.author_kind, e.body, e.meta, e.tick_id,
           'hot'::text COLLATE "C" AS source,
           (SELECT string_agg(t.word, ' ' ORDER BY t.id) FROM tags AS t
             WHERE t.item_kind = 'event' AND t.item_id = e.id) AS tags
      FROM events AS e
    UNION ALL
    SELECT a.id, a.ts, a.kind, a.actor, a.author_kind, a.body, a.meta, a.tick_id,
           'archive'::text COLLATE "C" AS source,
           (SELECT string_agg(t.word, ' ' ORDER BY t.id) FROM tags AS t
             WHERE t.item_kind = 'event' AND t.item_id = a.id) AS tags
      FROM events_archive AS a;
CREATE TABLE redactions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item_kind TEXT COLLATE "C" NOT NULL CHECK (item_kind IN ('event', 'rollup')),
    item_id BIGINT NOT NULL,
    marker TEXT COLLATE "C" NOT NULL,
    why TEXT COLLATE "C" NOT NULL,
    actor TEXT COLLATE "C" NOT NULL,
    ts TEXT COLLATE "C" NOT NULL
);
CREATE INDEX redactions_item ON redactions(item_kind, item_id);
CREATE TABLE inputs (
    event_id BIGINT PRIMARY KEY,
    kind TEXT COLLATE "C" NOT NULL
        CHECK (kind IN ('message', 'promise', 'ritual', 'watch', 'action')),
    status TEXT COLLATE "C" NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'consumed', 'set_aside')),
    failures INTEGER NOT NULL DEFAULT 0,
    last_error TEXT COLLATE "C",
    tick_id BIGINT,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL
);
CREATE INDEX inputs_status ON inputs(status, event_id);

-- The rules SQLite's triggers keep (m001, m010), refused with SQLSTATE 23000 as SQLite's
-- RAISE(ABORT) is a constraint failure. An UPDATE keeps every column but body and meta, and
-- the new body is the marker of a redaction row of that event; a DELETE from events only of
-- a row already copied to the archive; the archive is never deleted. TRUNCATE, which no
-- row trigger sees, is refused outright.
CREATE FUNCTION events_no_update() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT (new.id = old.id AND new.ts = old.ts AND new.kind = old.kind
            AND new.actor = old.actor AND new.author_kind = old.author_kind
            AND new.tick_id IS NOT DISTINCT FROM old.tick_id
            AND EXISTS (SELECT 1 FROM redactions WHERE item_kind = 'event'
                           AND item_id = old.id AND marker = new.body)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000', MESSAGE = TG_ARGV[0];
    END IF;
    RETURN new;
END $$;
CREATE FUNCTION events_delete_only_archived() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM events_archive WHERE id = old.id) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = 'events are never deleted: copy to events_archive first';
    END IF;
    RETURN old;
END $$;
CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '23000', MESSAGE = TG_ARGV[0];
END $$;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events FOR EACH ROW
    EXECUTE FUNCTION events_no_update('events are append-only: write a new event instead');
CREATE TRIGGER events_delete_only_archived BEFORE DELETE ON events FOR EACH ROW
    EXECUTE FUNCTION events_delete_only_archived();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT
    EXECUTE FUNCTION refuse('events are never deleted: copy to events_archive first');
CREATE TRIGGER events_archive_no_update BEFORE UPDATE ON events_archive FOR EACH ROW
    EXECUTE FUNCTION events_no_update('the archive is append-only');
CREATE TRIGGER events_archive_no_delete BEFORE DELETE ON events_archive FOR EACH ROW
    EXECUTE FUNCTION refuse('the archive is never deleted');
CREATE TRIGGER events_archive_no_truncate BEFORE TRUNCATE ON events_archive FOR EACH STATEMENT
    EXECUTE FUNCTION refuse('the archive is never deleted');

-- SQLite's JSON functions as the store modules use them, over TEXT holding JSON. A path is
-- `$`, `$.key.key` or with `[n]`; json_extract answers a string unquoted, true and false as
-- 1 and 0 (SQLite has no booleans), a number or an object as its JSON text, null as NULL.
-- Unlike SQLite's it answers TEXT always: comparing it with a number needs a cast.
-- json_valid answers false for NULL, as the SQLite the modules were written against (3.40).
CREATE FUNCTION json_path_keys(path text) RETURNS text[] LANGUAGE plpgsql IMMUTABLE
PARALLEL SAFE AS $$
BEGIN
    IF path = '$' THEN
        RETURN '{}'::text[];
    ELSIF path ~ '^\$(\.[^.\[\]"*#]+|\[[0-9]+\])+$' THEN
        RETURN string_to_array(substr(regexp_replace(path, '\[([0-9]+)\]', '.\1', 'g'), 3), '.');
    END IF;
    RAISE EXCEPTION USING ERRCODE = '22023',
        MESSAGE = format('json_extract: the path %s is not one the PostgreSQL store reads '
                         '($, $.key.key, [n])', path);
END $$;
CREATE FUNCTION json_extract(doc text, path text) RETURNS text LANGUAGE plpgsql IMMUTABLE
PARALLEL SAFE SET search_path FROM CURRENT AS $$
DECLARE
    v json := doc::json #> json_path_keys(path);
BEGIN
    RETURN CASE json_typeof(v) WHEN 'string' THEN v #>> '{}' WHEN 'null' THEN NULL
                WHEN 'boolean' THEN CASE WHEN v::text = 'true' THEN '1' ELSE '0' END
                ELSE v::text END;
END $$;
CREATE FUNCTION json_valid(doc text) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN COALESCE(doc IS JSON, false);

-- What SQLite's sqlite_sequence says of events (events.max_id reads it): the highest id ever
-- written. Events are never deleted, only moved to the archive with their ids, so that is the
-- highest id of the two tables, read in the reader's transaction as SQLite's row is.
CREATE VIEW sqlite_sequence AS
    SELECT 'events'::text COLLATE "C" AS name,
           GREATEST((SELECT max(id) FROM events), (SELECT max(id) FROM events_archive)) AS seq;
"""



def _baseline(conn: psycopg.Connection) -> None:
    conn.execute(_BASELINE)


# version -> migration; the baseline stands for SQLite's m001..m020 at once.
MIGRATIONS: dict[int, Callable[[psycopg.Connection], None]] = {
    BASELINE: _baseline,
}
VERSION = max(MIGRATIONS)


def schema_name(coworker_id: str) -> str:
    """The PostgreSQL schema of a coworker: `cw_<id>`; an id is lowercase letters, digits and
    `_`, at most 60 characters (a PostgreSQL name holds 63)."""
    if (not coworker_id or len(coworker_id) > 60
            or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789_" for c in coworker_id)):
        raise StoreError(f"{coworker_id[:70]!r} is not a coworker id for PostgreSQL: lowercase "
                         "letters, digits and _, 1 to 60 of them ([coworker] id)")
    return f"cw_{coworker_id}"


def lock_key(purpose: str, schema: str) -> int:
    """A stable 64-bit advisory-lock key for one purpose in one coworker's schema."""
    digest = hashlib.blake2b(f"coworker:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def refuse_newer(found: int, known: int = VERSION) -> None:
    if found > known:
        raise StoreError(f"the database's schema is version {found}, newer than this coworker "
                         f"knows ({known}): upgrade coworker on this host")


def _tables(conn: psycopg.Connection, schema: str) -> set[str]:
    rows = conn.execute("SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n "
                        "ON n.oid = c.relnamespace WHERE n.nspname = %s "
                        "AND c.relkind IN ('r', 'p', 'v', 'm', 'f')", (schema,)).fetchall()
    return {str(r[0]) for r in rows}


def _found_version(conn: psycopg.Connection, schema: str, where: str) -> int | None:
    """The schema's version (0: no migration yet), or None when it has no `_migrations`;
    refuses a schema that holds other tables and no `_migrations` (not a coworker's)."""
    names = _tables(conn, schema)
    if "_migrations" in names:
        version = conn.execute("SELECT COALESCE(MAX(version), 0) FROM _migrations").fetchone()
        return int(version[0]) if version else 0
    if names:
        raise StoreError(f"schema {schema} in {where} is not a coworker's (it holds other "
                         f"tables: {', '.join(sorted(names)[:5])}): give this coworker another "
                         "[coworker] id, or move that schema aside")
    return None


def check(conn: psycopg.Connection, schema: str, where: str, readonly: bool) -> int:
    """The version of a schema opened without migrating (a reader): refuses one newer than
    this code, and, for a reader, one not there yet."""
    found = _found_version(conn, schema, where)
    if found is None and readonly:
        raise StoreError(f"no coworker {schema[3:]!r} in {where} yet (schema {schema}): a "
                         "coworker that writes (`coworker tell`, `coworker run`) creates it")
    refuse_newer(found or 0)
    return found or 0


def migrate(conn: psycopg.Connection, schema: str, where: str) -> list[int]:
    """Bring the coworker's schema to VERSION in one transaction under an advisory lock (a
    second host waits, then finds it done); return the versions applied. `conn` is in
    autocommit mode, its search_path the schema."""
    done: list[int] = []
    with conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = {MIGRATE_LOCK_TIMEOUT_MS}")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("migrate", schema),))
        found = _found_version(conn, schema, where)
        if found is None:
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                                  (schema,)).fetchone()
            if not exists:  # a schema a DBA made (and granted) is used as it is
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute('CREATE TABLE _migrations (version INTEGER PRIMARY KEY, '
                         'name TEXT COLLATE "C" NOT NULL, applied_at TEXT COLLATE "C" NOT NULL)')
            found = 0
        refuse_newer(found)
        for version in sorted(v for v in MIGRATIONS if v > found):
            fn = MIGRATIONS[version]
            fn(conn)
            conn.execute("INSERT INTO _migrations(version, name, applied_at) VALUES "
                         "(%s, %s, %s)", (version, fn.__name__,
                                          datetime.now(UTC).isoformat(timespec="seconds")))
            done.append(version)
    return done
