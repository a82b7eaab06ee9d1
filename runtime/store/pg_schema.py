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
holding JSON, `json_valid`, `sqlite_json_each` for SQLite's json_each, and a
`sqlite_sequence` view whose `events` row is the highest id ever written); and the version
check: a database newer than this code is refused with one line. Migrations run in one
transaction under a transaction-level advisory lock, so two hosts opening one new coworker at
once create it once. It never reads or writes a row of history. The baseline also holds every
other table, index, view and trigger SQLite's m001..m020 end with (the ladder, the memory
tables, the ledgers, the queues, the clients, the vectors as BYTEA), all but FTS5's, whose
PostgreSQL twin is pg_fts's DDL, called at its end; until a PostgreSQL store ships the baseline
is edited in place.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from ..errors import SchemaNewer, StoreError

# The version of the baseline: SQLite's len(migrations.MIGRATIONS) when it was written (a test
# keeps VERSION equal to it, so a SQLite migration without its PostgreSQL twin fails the suite).
BASELINE = 20
MIGRATE_LOCK_TIMEOUT_MS = 120_000  # a host waits this long for another one's migration
MIN_SERVER = 170000  # PostgreSQL 17: the pg_c_utf8 collation the full text folds case with (pg_fts)

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

# The ladder, the memory tables, the ledgers, the queues and the clients: SQLite's m002..m020
# as they end, but for their FTS5 tables (pg_fts owns full text on PostgreSQL).
_LADDER_AND_LEDGERS = r"""
CREATE TABLE rollups (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    level INTEGER NOT NULL CHECK (level >= 1),
    parent_id BIGINT REFERENCES rollups(id),
    source_range TEXT COLLATE "C",
    first_event BIGINT,
    last_event BIGINT,
    first_ts TEXT COLLATE "C",
    last_ts TEXT COLLATE "C",
    title TEXT COLLATE "C" NOT NULL DEFAULT '',
    body TEXT COLLATE "C" NOT NULL DEFAULT '',
    terms TEXT COLLATE "C" NOT NULL DEFAULT '',
    method TEXT COLLATE "C" NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    vocab TEXT COLLATE "C"
);
CREATE INDEX rollups_level ON rollups(level, id);
CREATE INDEX rollups_parent ON rollups(parent_id);
CREATE INDEX rollups_level_last ON rollups(level, last_event);
CREATE VIEW rollups_indexed AS
    SELECT r.id, r.title, r.body, r.terms, r.level, r.vocab,
           (SELECT string_agg(t.word, ' ' ORDER BY t.id) FROM tags AS t
             WHERE t.item_kind = 'rollup' AND t.item_id = r.id) AS tags
      FROM rollups AS r;
CREATE TABLE decisions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts TEXT COLLATE "C" NOT NULL,
    event_id BIGINT,
    body TEXT COLLATE "C" NOT NULL,
    source_events TEXT COLLATE "C",
    supersedes BIGINT REFERENCES decisions(id)
);
CREATE TABLE promotions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts TEXT COLLATE "C" NOT NULL,
    text TEXT COLLATE "C" NOT NULL,
    source_events TEXT COLLATE "C",
    confidence DOUBLE PRECISION,
    status TEXT COLLATE "C" NOT NULL
        CHECK (status IN ('applied', 'queued', 'refused', 'approved', 'rejected')),
    reason TEXT COLLATE "C",
    origin TEXT COLLATE "C",
    decided_at TEXT COLLATE "C",
    entry_id TEXT COLLATE "C",
    supersedes TEXT COLLATE "C"
);
CREATE INDEX promotions_status ON promotions(status, id);
CREATE TABLE pins (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts TEXT COLLATE "C" NOT NULL,
    text TEXT COLLATE "C" NOT NULL,
    unpinned_at TEXT COLLATE "C"
);
CREATE TABLE ritual_runs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ritual TEXT COLLATE "C" NOT NULL,
    started_at TEXT COLLATE "C" NOT NULL,
    finished_at TEXT COLLATE "C",
    status TEXT COLLATE "C" NOT NULL,
    stats TEXT COLLATE "C"
);
CREATE INDEX ritual_runs_ritual ON ritual_runs(ritual, id);
CREATE TABLE telemetry (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    data TEXT COLLATE "C"
);
CREATE INDEX telemetry_kind_ts ON telemetry(kind, ts);
CREATE TABLE vectors (
    item_kind TEXT COLLATE "C" NOT NULL CHECK (item_kind IN ('event', 'rollup')),
    item_id BIGINT NOT NULL,
    model TEXT COLLATE "C" NOT NULL,
    dim INTEGER NOT NULL,
    vector BYTEA NOT NULL,
    text_hash TEXT COLLATE "C" NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (item_kind, item_id, model)
);
CREATE TABLE vector_changes (id INTEGER PRIMARY KEY CHECK (id = 1), n BIGINT NOT NULL);
INSERT INTO vector_changes (id, n) VALUES (1, 0);
CREATE TABLE side_effects (
    key TEXT COLLATE "C" NOT NULL,
    tool TEXT COLLATE "C" NOT NULL,
    tick_id BIGINT,
    input TEXT COLLATE "C",
    status TEXT COLLATE "C" NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    result TEXT COLLATE "C",
    started_at TEXT COLLATE "C" NOT NULL,
    finished_at TEXT COLLATE "C",
    turn BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (turn, key)
);
CREATE TABLE import_keys (
    key TEXT COLLATE "C" PRIMARY KEY,
    event_id BIGINT NOT NULL,
    source TEXT COLLATE "C"
);
CREATE TABLE approvals (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts TEXT COLLATE "C" NOT NULL,
    tick_id BIGINT,
    server TEXT COLLATE "C" NOT NULL,
    tool TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    arguments TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    reason TEXT COLLATE "C",
    sources TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    tool_use_id TEXT COLLATE "C",
    status TEXT COLLATE "C" NOT NULL DEFAULT 'waiting'
        CHECK (status IN ('waiting', 'approved', 'rejected', 'expired', 'running',
                          'done', 'failed')),
    expires_at TEXT COLLATE "C" NOT NULL,
    decided_at TEXT COLLATE "C",
    why TEXT COLLATE "C",
    result_event BIGINT,
    turn BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX approvals_turn_tool_use ON approvals(turn, tool_use_id)
    WHERE tool_use_id IS NOT NULL;
CREATE INDEX approvals_status ON approvals(status, id);
CREATE TABLE deliveries (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id BIGINT NOT NULL,
    target TEXT COLLATE "C" NOT NULL,
    what TEXT COLLATE "C" NOT NULL CHECK (what IN ('reply', 'approval', 'failure')),
    status TEXT COLLATE "C" NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at TEXT COLLATE "C" NOT NULL,
    last_error TEXT COLLATE "C",
    idempotency_key TEXT COLLATE "C" NOT NULL UNIQUE,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    delivered_at TEXT COLLATE "C",
    UNIQUE (event_id, target)
);
CREATE INDEX deliveries_queue ON deliveries(status, target, event_id);
CREATE INDEX deliveries_sent ON deliveries(target, delivered_at);
CREATE TABLE delivery_cursors (
    target TEXT COLLATE "C" PRIMARY KEY,
    last_event_id BIGINT NOT NULL,
    active INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
    updated_at TEXT COLLATE "C" NOT NULL
);
CREATE TABLE hook_deliveries (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hook TEXT COLLATE "C" NOT NULL,
    delivery_id TEXT COLLATE "C",
    digest TEXT COLLATE "C" NOT NULL,
    event_type TEXT COLLATE "C",
    event_id BIGINT NOT NULL,
    received_at TEXT COLLATE "C" NOT NULL
);
CREATE UNIQUE INDEX hook_deliveries_delivery ON hook_deliveries(hook, delivery_id)
    WHERE delivery_id IS NOT NULL;
CREATE INDEX hook_deliveries_digest ON hook_deliveries(hook, digest, received_at);
CREATE TABLE clients (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL,
    token_sha256 TEXT COLLATE "C" NOT NULL UNIQUE,
    can TEXT COLLATE "C" NOT NULL CHECK (can IN ('read', 'tell')),
    created_at TEXT COLLATE "C" NOT NULL,
    revoked_at TEXT COLLATE "C"
);
CREATE UNIQUE INDEX clients_active_name ON clients(name) WHERE revoked_at IS NULL;
CREATE TABLE client_calls (
    client_id BIGINT NOT NULL REFERENCES clients(id),
    what TEXT COLLATE "C" NOT NULL,
    calls BIGINT NOT NULL DEFAULT 0,
    last_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (client_id, what)
);

-- The rules SQLite's triggers keep (m002..m020 as they end), each refused with SQLSTATE 23000.
-- A sealed rollup changes only to take its parent, once, or by a redaction of its text (m010).
CREATE FUNCTION rollups_sealed() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF (old.parent_id IS NOT NULL AND new.parent_id IS DISTINCT FROM old.parent_id)
       OR new.level IS DISTINCT FROM old.level
       OR new.source_range IS DISTINCT FROM old.source_range
       OR ((new.title IS DISTINCT FROM old.title OR new.body IS DISTINCT FROM old.body
            OR new.terms IS DISTINCT FROM old.terms OR new.vocab IS DISTINCT FROM old.vocab)
           AND NOT EXISTS (SELECT 1 FROM redactions WHERE item_kind = 'rollup'
                              AND item_id = old.id)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = 'a sealed rollup never changes (only parent_id, once)';
    END IF;
    RETURN new;
END $$;
CREATE TRIGGER rollups_sealed BEFORE UPDATE ON rollups FOR EACH ROW
    EXECUTE FUNCTION rollups_sealed();
-- An approval only moves forward; what it asks changes only by a redaction's marker (m017).
CREATE FUNCTION approvals_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF new.id IS DISTINCT FROM old.id OR new.ts IS DISTINCT FROM old.ts
       OR new.tick_id IS DISTINCT FROM old.tick_id OR new.server IS DISTINCT FROM old.server
       OR new.tool IS DISTINCT FROM old.tool OR new.name IS DISTINCT FROM old.name
       OR (new.arguments IS DISTINCT FROM old.arguments
           AND strpos(new.arguments, '[redacted]') = 0)
       OR (new.reason IS DISTINCT FROM old.reason
           AND strpos(COALESCE(new.reason, ''), '[redacted]') = 0)
       OR new.sources IS DISTINCT FROM old.sources
       OR new.tool_use_id IS DISTINCT FROM old.tool_use_id
       OR new.turn IS DISTINCT FROM old.turn OR new.expires_at IS DISTINCT FROM old.expires_at
       OR NOT ((old.status = 'waiting' AND new.status IN ('approved', 'rejected', 'expired'))
               OR (old.status = 'approved' AND new.status = 'running')
               OR (old.status = 'running' AND new.status IN ('done', 'failed'))
               OR (new.status = old.status AND (new.arguments IS DISTINCT FROM old.arguments
                                                OR new.reason IS DISTINCT FROM old.reason)))
    THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = 'an approval only moves forward, and what it asks never changes';
    END IF;
    RETURN new;
END $$;
CREATE TRIGGER approvals_forward BEFORE UPDATE ON approvals FOR EACH ROW
    EXECUTE FUNCTION approvals_forward();
-- A delivery moves only from pending, and what it sends never changes (m018).
CREATE FUNCTION deliveries_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF new.id IS DISTINCT FROM old.id OR new.event_id IS DISTINCT FROM old.event_id
       OR new.target IS DISTINCT FROM old.target OR new.what IS DISTINCT FROM old.what
       OR new.idempotency_key IS DISTINCT FROM old.idempotency_key
       OR new.created_at IS DISTINCT FROM old.created_at OR old.status <> 'pending' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = 'a delivery only moves forward, and what it sends never changes';
    END IF;
    RETURN new;
END $$;
CREATE TRIGGER deliveries_forward BEFORE UPDATE ON deliveries FOR EACH ROW
    EXECUTE FUNCTION deliveries_forward();
-- A client is only ever revoked, once (m020).
CREATE FUNCTION clients_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF new.id IS DISTINCT FROM old.id OR new.name IS DISTINCT FROM old.name
       OR new.token_sha256 IS DISTINCT FROM old.token_sha256
       OR new.can IS DISTINCT FROM old.can OR new.created_at IS DISTINCT FROM old.created_at
       OR old.revoked_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = 'a client is only ever revoked, once, and never changed';
    END IF;
    RETURN new;
END $$;
CREATE TRIGGER clients_forward BEFORE UPDATE ON clients FOR EACH ROW
    EXECUTE FUNCTION clients_forward();
-- Never deleted: a DELETE refused row by row, a TRUNCATE (which no row trigger sees) outright.
CREATE TRIGGER rollups_no_delete BEFORE DELETE ON rollups FOR EACH ROW
    EXECUTE FUNCTION refuse('rollups are never deleted');
CREATE TRIGGER rollups_no_truncate BEFORE TRUNCATE ON rollups FOR EACH STATEMENT
    EXECUTE FUNCTION refuse('rollups are never deleted');
CREATE TRIGGER approvals_no_delete BEFORE DELETE ON approvals FOR EACH ROW
    EXECUTE FUNCTION refuse('approvals are never deleted');
CREATE TRIGGER approvals_no_truncate BEFORE TRUNCATE ON approvals FOR EACH STATEMENT
    EXECUTE FUNCTION refuse('approvals are never deleted');
CREATE TRIGGER deliveries_no_delete BEFORE DELETE ON deliveries FOR EACH ROW
    EXECUTE FUNCTION refuse('deliveries are never deleted');
CREATE TRIGGER deliveries_no_truncate BEFORE TRUNCATE ON deliveries FOR EACH STATEMENT
    EXECUTE FUNCTION refuse('deliveries are never deleted');
CREATE TRIGGER clients_no_delete BEFORE DELETE ON clients FOR EACH ROW
    EXECUTE FUNCTION refuse('clients are never deleted');
CREATE TRIGGER clients_no_truncate BEFORE TRUNCATE ON clients FOR EACH STATEMENT
    EXECUTE FUNCTION refuse('clients are never deleted');
CREATE TRIGGER client_calls_no_delete BEFORE DELETE ON client_calls FOR EACH ROW
    EXECUTE FUNCTION refuse('client calls are never deleted');
CREATE TRIGGER client_calls_no_truncate BEFORE TRUNCATE ON client_calls FOR EACH STATEMENT
    EXECUTE FUNCTION refuse('client calls are never deleted');
-- Every write to the vectors moves one counter (m015), a TRUNCATE too.
CREATE FUNCTION vectors_changed() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE vector_changes SET n = n + 1 WHERE id = 1;
    RETURN NULL;
END $$;
CREATE TRIGGER vectors_changed AFTER INSERT OR UPDATE OR DELETE ON vectors FOR EACH ROW
    EXECUTE FUNCTION vectors_changed();
CREATE TRIGGER vectors_truncated AFTER TRUNCATE ON vectors FOR EACH STATEMENT
    EXECUTE FUNCTION vectors_changed();

-- SQLite's json_each(doc, path) as the store modules read it, under a name of its own (a
-- module names it by its store's dialect: the translator refuses json_each): the `value`
-- (and `key`) of each element of the array (or object) at `path`, a scalar as one row,
-- nothing for NULL or a missing path; values as json_extract answers them (TEXT: compare
-- with a number through a cast).
CREATE FUNCTION sqlite_json_each(doc text, path text)
RETURNS TABLE (key text, value text) LANGUAGE sql IMMUTABLE
PARALLEL SAFE SET search_path FROM CURRENT
BEGIN ATOMIC
    SELECT e.key, json_extract(e.doc, '$')
      FROM (SELECT (doc::json #> json_path_keys(path)) AS v) AS j,
           LATERAL (SELECT (x.n - 1)::text AS key, x.a::text AS doc
                      FROM json_array_elements(CASE json_typeof(j.v) WHEN 'array' THEN j.v END)
                           WITH ORDINALITY AS x(a, n)
                    UNION ALL
                    SELECT o.key, o.value::text FROM pg_catalog.json_each(CASE json_typeof(j.v)
                                                   WHEN 'object' THEN j.v END) AS o
                    UNION ALL
                    SELECT NULL, j.v::text
                     WHERE json_typeof(j.v) NOT IN ('array', 'object', 'null')) AS e;
END;
"""


def _baseline(conn: psycopg.Connection) -> None:
    conn.execute(_BASELINE)
    conn.execute(_LADDER_AND_LEDGERS)
    from . import pg_runner  # the runner's claim and fencing token (one loop a coworker)

    pg_runner.create(conn)
    # full text on PostgreSQL (issue 42) is its own module's DDL, skipped until it is written
    if importlib.util.find_spec(f"{__package__}.pg_fts") is not None:
        importlib.import_module(f"{__package__}.pg_fts").create(conn)


def _count_rung_terms_by_level(conn: psycopg.Connection) -> None:
    """SQLite's m021: the ladder's kept term counts by rung too, and search's words in a table
    of their own (pg_fts.count_by_level)."""
    importlib.import_module(f"{__package__}.pg_fts").count_by_level(conn)


def _index_rung_terms(conn: psycopg.Connection) -> None:
    """SQLite's m022: each rung's terms in a table of their own, newest first under a B-tree
    (pg_fts.rung_terms)."""
    importlib.import_module(f"{__package__}.pg_fts").rung_terms(conn)


def _defer_bulk_counts(conn: psycopg.Connection) -> None:
    """SQLite's m023: the events' term counts a bulk load may add up once (pg_fts.defer_counts)."""
    importlib.import_module(f"{__package__}.pg_fts").defer_counts(conn)


# version -> migration; the baseline stands for SQLite's m001..m020 at once.
MIGRATIONS: dict[int, Callable[[psycopg.Connection], None]] = {
    BASELINE: _baseline,
    21: _count_rung_terms_by_level,
    22: _index_rung_terms,
    23: _defer_bulk_counts,
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
        raise SchemaNewer(f"the database's schema is version {found}, newer than this coworker "
                         f"knows ({known}): upgrade coworker on this host")


def _tables(conn: psycopg.Connection, schema: str) -> set[str]:
    rows = conn.execute("SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n "
                        "ON n.oid = c.relnamespace WHERE n.nspname = %s "
                        "AND c.relkind IN ('r', 'p', 'v', 'm', 'f')", (schema,)).fetchall()
    return {str(r[0]) for r in rows}


def _found_version(conn: psycopg.Connection, schema: str, where: str) -> int | None:
    """The schema's version (0: no migration yet), or None when it has no `_migrations`;
    refuses a schema that holds other tables and no `_migrations` (not a coworker's), and one
    this role may not use (another role's coworker: docs/postgres.md gives each its own)."""
    usable = conn.execute("SELECT has_schema_privilege(%s, 'USAGE') FROM pg_namespace "
                          "WHERE nspname = %s", (schema, schema)).fetchone()
    if usable is not None and not usable[0]:
        raise StoreError(f"permission denied: role {conn.info.user} may not use schema {schema} "
                         f"in {where}, another role's coworker; connect as the role that owns "
                         "it, or give this home its own [coworker] id")
    names = _tables(conn, schema)
    if "_migrations" in names:
        version = conn.execute("SELECT COALESCE(MAX(version), 0) FROM _migrations").fetchone()
        return int(version[0]) if version else 0
    if names:
        raise StoreError(f"schema {schema} in {where} is not a coworker's (it holds other "
                         f"tables: {', '.join(sorted(names)[:5])}): give this coworker another "
                         "[coworker] id, or move that schema aside")
    return None


class NotYet(StoreError):
    """A reader found no schema for this coworker: nothing was ever written there."""


def check(conn: psycopg.Connection, schema: str, where: str, readonly: bool) -> int:
    """The version of a schema opened without migrating (a reader): refuses one newer than
    this code, and, for a reader, one not there yet."""
    found = _found_version(conn, schema, where)
    if found is None and readonly:
        raise NotYet(f"no coworker {schema[3:]!r} in {where} yet (schema {schema}): a "
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


def drop(url: str, coworker_id: str) -> None:
    """Drop a coworker's schema and all it holds: only for one made for a single run (`coworker
    eval --store`, the bench), never a team's coworker. Its stores must be closed first."""
    from .pg import _connect, _scrub, describe

    schema = schema_name(coworker_id)
    try:
        with _connect(url, describe(url)) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except psycopg.Error as e:
        reason = _scrub(" ".join(str(e).split()), url)[:200]
        raise StoreError(f"cannot drop schema {schema} ({reason}); drop it by hand: DROP SCHEMA "
                         f"{schema} CASCADE") from e
