"""The schema, as an ordered list of small migrations `mNNN_verb_noun(db)`.

Each runs inside one transaction together with its record in `_migrations`, so a database is
never half-migrated. A shipped migration is never edited, only followed by a new one; a fresh
database and a year-old one take the same path on open. Rows written before a column existed
keep NULL there. A migration is literal SQL: it never reads a live constant (such as
`events.AUTHOR_KINDS`), so the schema a fresh database gets never changes under it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..errors import SchemaNewer

if TYPE_CHECKING:
    from .db import Store

log = logging.getLogger(__name__)


def _script(db: sqlite3.Connection, sql: str) -> None:
    """Run several statements without executescript (which would COMMIT our transaction)."""
    buf = ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            db.execute(buf)
            buf = ""
    if buf.strip():
        raise ValueError(f"incomplete SQL statement in migration: {buf[:80]!r}")


def m001_create_events(db: sqlite3.Connection) -> None:
    # AUTOINCREMENT because events move to the archive: a plain rowid would hand a moved
    # event's id to a new event, and ids are what provenance points at.
    # The author kinds as shipped: literal, never the live constant (store.events.AUTHOR_KINDS).
    kinds = "'user', 'agent', 'tool', 'third_party', 'system', 'unknown'"
    _script(
        db,
        f"""
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts TEXT NOT NULL,
            kind TEXT NOT NULL,
            actor TEXT NOT NULL,
            author_kind TEXT NOT NULL CHECK (author_kind IN ({kinds})),
            body TEXT NOT NULL DEFAULT '',
            meta TEXT,
            tick_id INTEGER
        );
        CREATE INDEX events_kind_id ON events(kind, id);
        CREATE INDEX events_ts ON events(ts);
        CREATE TABLE events_archive (
            id INTEGER PRIMARY KEY,
            ts TEXT NOT NULL,
            kind TEXT NOT NULL,
            actor TEXT NOT NULL,
            author_kind TEXT NOT NULL,
            body TEXT NOT NULL DEFAULT '',
            meta TEXT,
            tick_id INTEGER,
            archived_at TEXT NOT NULL
        );
        CREATE INDEX events_archive_ts ON events_archive(ts);
        -- One history: the hot log and the archive, same ids. Search, spans and walks read this.
        CREATE VIEW history AS
            SELECT id, ts, kind, actor, author_kind, body, meta, tick_id, 'hot' AS source
              FROM events
            UNION ALL
            SELECT id, ts, kind, actor, author_kind, body, meta, tick_id, 'archive' AS source
              FROM events_archive;
        -- External-content FTS over the history view: moving an event to the archive leaves
        -- its index row valid (same id, same text), so the move never touches the index.
        CREATE VIRTUAL TABLE events_fts USING fts5(
            body, kind, actor,
            content='history', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER events_ai AFTER INSERT ON events BEGIN
            INSERT INTO events_fts(rowid, body, kind, actor)
            VALUES (new.id, new.body, new.kind, new.actor);
        END;
        CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN
            SELECT RAISE(ABORT, 'events are append-only: write a new event instead');
        END;
        CREATE TRIGGER events_delete_only_archived BEFORE DELETE ON events
        WHEN NOT EXISTS (SELECT 1 FROM events_archive WHERE id = old.id) BEGIN
            SELECT RAISE(ABORT, 'events are never deleted: copy to events_archive first');
        END;
        CREATE TRIGGER events_archive_no_update BEFORE UPDATE ON events_archive BEGIN
            SELECT RAISE(ABORT, 'the archive is append-only');
        END;
        CREATE TRIGGER events_archive_no_delete BEFORE DELETE ON events_archive BEGIN
            SELECT RAISE(ABORT, 'the archive is never deleted');
        END;
        """,
    )


def m002_create_ladder(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE rollups (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            level INTEGER NOT NULL CHECK (level >= 1),
            parent_id INTEGER REFERENCES rollups(id),
            source_range TEXT,
            first_event INTEGER,
            last_event INTEGER,
            first_ts TEXT,
            last_ts TEXT,
            title TEXT NOT NULL DEFAULT '',
            body TEXT NOT NULL DEFAULT '',
            terms TEXT NOT NULL DEFAULT '',
            method TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX rollups_level ON rollups(level, id);
        CREATE INDEX rollups_parent ON rollups(parent_id);
        CREATE VIRTUAL TABLE rollups_fts USING fts5(
            title, body, terms,
            content='rollups', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER rollups_ai AFTER INSERT ON rollups BEGIN
            INSERT INTO rollups_fts(rowid, title, body, terms)
            VALUES (new.id, new.title, new.body, new.terms);
        END;
        -- A sealed rollup never changes; only parent_id is set once, when the parent seals.
        CREATE TRIGGER rollups_sealed BEFORE UPDATE ON rollups
        WHEN old.parent_id IS NOT NULL
          OR new.title IS NOT old.title OR new.body IS NOT old.body OR new.terms IS NOT old.terms
          OR new.level IS NOT old.level OR new.source_range IS NOT old.source_range BEGIN
            SELECT RAISE(ABORT, 'a sealed rollup never changes (only parent_id, once)');
        END;
        CREATE TRIGGER rollups_no_delete BEFORE DELETE ON rollups BEGIN
            SELECT RAISE(ABORT, 'rollups are never deleted');
        END;
        """,
    )


def m003_create_memory_tables(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE decisions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts TEXT NOT NULL,
            event_id INTEGER,
            body TEXT NOT NULL,
            source_events TEXT,
            supersedes INTEGER REFERENCES decisions(id)
        );
        CREATE TABLE promotions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts TEXT NOT NULL,
            text TEXT NOT NULL,
            source_events TEXT,
            confidence REAL,
            status TEXT NOT NULL
                CHECK (status IN ('applied', 'queued', 'refused', 'approved', 'rejected')),
            reason TEXT,
            origin TEXT,
            decided_at TEXT,
            entry_id TEXT
        );
        CREATE INDEX promotions_status ON promotions(status, id);
        CREATE TABLE pins (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts TEXT NOT NULL,
            text TEXT NOT NULL,
            unpinned_at TEXT
        );
        """,
    )


def m004_create_ops_tables(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE ritual_runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ritual TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            status TEXT NOT NULL,
            stats TEXT
        );
        CREATE INDEX ritual_runs_ritual ON ritual_runs(ritual, id);
        CREATE TABLE telemetry (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts TEXT NOT NULL,
            kind TEXT NOT NULL,
            data TEXT
        );
        CREATE INDEX telemetry_kind_ts ON telemetry(kind, ts);
        """,
    )


def m005_create_events_vocab(db: sqlite3.Connection) -> None:
    # Document frequencies over the whole history, read straight from the FTS index: what
    # makes a rollup's index card "distinctive against the whole log" without a second pass.
    db.execute("CREATE VIRTUAL TABLE events_vocab USING fts5vocab(events_fts, 'row')")


def m006_index_rollup_level(db: sqlite3.Connection) -> None:
    # The level becomes an indexed column, so memory.walk can ask one rung at a time
    # ("level:3 AND ...") and pay for that rung's matches, not the whole ladder's.
    _script(
        db,
        """
        DROP TRIGGER rollups_ai;
        DROP TABLE rollups_fts;
        CREATE VIRTUAL TABLE rollups_fts USING fts5(
            title, body, terms, level,
            content='rollups', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER rollups_ai AFTER INSERT ON rollups BEGIN
            INSERT INTO rollups_fts(rowid, title, body, terms, level)
            VALUES (new.id, new.title, new.body, new.terms, new.level);
        END;
        INSERT INTO rollups_fts(rollups_fts) VALUES ('rebuild');
        """,
    )


def m007_index_rollup_coverage(db: sqlite3.Connection) -> None:
    # "Where does the ladder end?" is asked before every seal and every walk: without this
    # index MAX(last_event) scans the whole level, and sealing grows quadratically.
    db.execute("CREATE INDEX rollups_level_last ON rollups(level, last_event)")


def m008_add_vocab_and_tags(db: sqlite3.Connection) -> None:
    # Recall through the ladder is only as good as its cards: a level-1 rollup also carries
    # its span's whole content vocabulary (`vocab`, indexed, NULL for rollups sealed before).
    # Owner keywords (`coworker tag`) live in their own table and are indexed beside the text,
    # so a tag never changes an event's body or timestamp.
    _script(
        db,
        """
        ALTER TABLE rollups ADD COLUMN vocab TEXT;
        CREATE TABLE tags (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            item_kind TEXT NOT NULL CHECK (item_kind IN ('event', 'rollup')),
            item_id INTEGER NOT NULL,
            word TEXT NOT NULL,
            ts TEXT NOT NULL,
            UNIQUE (item_kind, item_id, word)
        );
        DROP TRIGGER events_ai;
        DROP TABLE events_fts;
        DROP VIEW history;
        CREATE VIEW history AS
            SELECT e.id, e.ts, e.kind, e.actor, e.author_kind, e.body, e.meta, e.tick_id,
                   'hot' AS source,
                   (SELECT group_concat(word, ' ') FROM tags
                     WHERE item_kind = 'event' AND item_id = e.id) AS tags
              FROM events AS e
            UNION ALL
            SELECT a.id, a.ts, a.kind, a.actor, a.author_kind, a.body, a.meta, a.tick_id,
                   'archive' AS source,
                   (SELECT group_concat(word, ' ') FROM tags
                     WHERE item_kind = 'event' AND item_id = a.id) AS tags
              FROM events_archive AS a;
        CREATE VIRTUAL TABLE events_fts USING fts5(
            body, kind, actor, tags,
            content='history', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER events_ai AFTER INSERT ON events BEGIN
            INSERT INTO events_fts(rowid, body, kind, actor, tags)
            VALUES (new.id, new.body, new.kind, new.actor, NULL);
        END;
        INSERT INTO events_fts(events_fts) VALUES ('rebuild');
        DROP TABLE events_vocab;
        CREATE VIRTUAL TABLE events_vocab USING fts5vocab(events_fts, 'row');
        DROP TRIGGER rollups_ai;
        DROP TABLE rollups_fts;
        CREATE VIEW rollups_indexed AS
            SELECT r.id, r.title, r.body, r.terms, r.level, r.vocab,
                   (SELECT group_concat(word, ' ') FROM tags
                     WHERE item_kind = 'rollup' AND item_id = r.id) AS tags
              FROM rollups AS r;
        CREATE VIRTUAL TABLE rollups_fts USING fts5(
            title, body, terms, level, vocab, tags,
            content='rollups_indexed', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER rollups_ai AFTER INSERT ON rollups BEGIN
            INSERT INTO rollups_fts(rowid, title, body, terms, level, vocab, tags)
            VALUES (new.id, new.title, new.body, new.terms, new.level, new.vocab, NULL);
        END;
        INSERT INTO rollups_fts(rollups_fts) VALUES ('rebuild');
        DROP TRIGGER rollups_sealed;
        CREATE TRIGGER rollups_sealed BEFORE UPDATE ON rollups
        WHEN old.parent_id IS NOT NULL
          OR new.title IS NOT old.title OR new.body IS NOT old.body OR new.terms IS NOT old.terms
          OR new.level IS NOT old.level OR new.source_range IS NOT old.source_range
          OR new.vocab IS NOT old.vocab BEGIN
            SELECT RAISE(ABORT, 'a sealed rollup never changes (only parent_id, once)');
        END;
        """,
    )


def m009_create_vectors(db: sqlite3.Connection) -> None:
    # Embeddings live in the same file as the text they embed: one backup, one truth.
    # text_hash lets the integrity check and the backfill see a vector that no longer fits.
    _script(
        db,
        """
        CREATE TABLE vectors (
            item_kind TEXT NOT NULL CHECK (item_kind IN ('event', 'rollup')),
            item_id INTEGER NOT NULL,
            model TEXT NOT NULL,
            dim INTEGER NOT NULL,
            vector BLOB NOT NULL,
            text_hash TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (item_kind, item_id, model)
        );
        """,
    )


def m010_create_inputs_and_ledgers(db: sqlite3.Connection) -> None:
    # Issue 10: nothing told is lost, nothing old is replayed, nobody else speaks as the owner.
    # - `inputs`: what a tick must deliver to a model turn (owner and agent messages, due
    #   promises, due rituals). An input stays pending until a completed turn consumes it, in
    #   the same transaction as that turn's `tick_end`; the cursor in the `tick` event is no
    #   longer read. Imported events never get a row: history is never input.
    # - `side_effects`: a live side effect is recorded under its tool_use id before it runs,
    #   so a replayed turn finds the record and does not run it again.
    # - `import_keys`: one stable key per imported line, so importing a file twice adds nothing.
    # - `redactions`: the one audited exception to append-only. An event's body (and a sealed
    #   rollup's text that quotes it) may be overwritten only with the marker of a redaction
    #   row written in the same transaction.
    # The author kinds as shipped in m001: literal, never the live constant.
    kinds = "'user', 'agent', 'tool', 'third_party', 'system', 'unknown'"
    _script(
        db,
        f"""
        CREATE TABLE inputs (
            event_id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('message', 'promise', 'ritual')),
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'consumed', 'set_aside')),
            failures INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            tick_id INTEGER,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX inputs_status ON inputs(status, event_id);
        INSERT INTO inputs(event_id, kind, status, created_at, updated_at)
            SELECT id, 'message', 'pending', ts, ts FROM events
             WHERE kind = 'message' AND author_kind IN ({kinds})
               AND id > COALESCE((SELECT CAST(json_extract(meta, '$.cursor') AS INTEGER)
                                    FROM events WHERE kind = 'tick' AND json_valid(meta)
                                   ORDER BY id DESC LIMIT 1), 0)
               AND (meta IS NULL OR NOT json_valid(meta)
                    OR json_extract(meta, '$.imported') IS NULL);
        CREATE TABLE side_effects (
            key TEXT PRIMARY KEY,
            tool TEXT NOT NULL,
            tick_id INTEGER,
            input TEXT,
            status TEXT NOT NULL CHECK (status IN ('started', 'done', 'failed')),
            result TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT
        );
        CREATE TABLE import_keys (
            key TEXT PRIMARY KEY,
            event_id INTEGER NOT NULL,
            source TEXT
        );
        CREATE TABLE redactions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            item_kind TEXT NOT NULL CHECK (item_kind IN ('event', 'rollup')),
            item_id INTEGER NOT NULL,
            marker TEXT NOT NULL,
            why TEXT NOT NULL,
            actor TEXT NOT NULL,
            ts TEXT NOT NULL
        );
        CREATE INDEX redactions_item ON redactions(item_kind, item_id);
        DROP TRIGGER events_no_update;
        CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        WHEN NOT (new.id = old.id AND new.ts = old.ts AND new.kind = old.kind
                  AND new.actor = old.actor AND new.author_kind = old.author_kind
                  AND new.tick_id IS old.tick_id
                  AND EXISTS (SELECT 1 FROM redactions WHERE item_kind = 'event'
                                 AND item_id = old.id AND marker = new.body)) BEGIN
            SELECT RAISE(ABORT, 'events are append-only: write a new event instead');
        END;
        DROP TRIGGER events_archive_no_update;
        CREATE TRIGGER events_archive_no_update BEFORE UPDATE ON events_archive
        WHEN NOT (new.id = old.id AND new.ts = old.ts AND new.kind = old.kind
                  AND new.actor = old.actor AND new.author_kind = old.author_kind
                  AND new.tick_id IS old.tick_id
                  AND EXISTS (SELECT 1 FROM redactions WHERE item_kind = 'event'
                                 AND item_id = old.id AND marker = new.body)) BEGIN
            SELECT RAISE(ABORT, 'the archive is append-only');
        END;
        DROP TRIGGER rollups_sealed;
        CREATE TRIGGER rollups_sealed BEFORE UPDATE ON rollups
        WHEN (old.parent_id IS NOT NULL AND new.parent_id IS NOT old.parent_id)
          OR new.level IS NOT old.level OR new.source_range IS NOT old.source_range
          OR ((new.title IS NOT old.title OR new.body IS NOT old.body
               OR new.terms IS NOT old.terms OR new.vocab IS NOT old.vocab)
              AND NOT EXISTS (SELECT 1 FROM redactions WHERE item_kind = 'rollup'
                                 AND item_id = old.id)) BEGIN
            SELECT RAISE(ABORT, 'a sealed rollup never changes (only parent_id, once)');
        END;
        """,
    )


def m011_widen_input_kinds(db: sqlite3.Connection) -> None:
    # An MCP watch's change and the result of an action the owner approved are inputs of the
    # next tick too (issue 13). SQLite cannot change a CHECK in place: copy the table into one
    # that allows them, in this migration's transaction, then put it in the old one's place.
    _script(db, """
        CREATE TABLE inputs_new (
            event_id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('message', 'promise', 'ritual', 'watch', 'action')),
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'consumed', 'set_aside')),
            failures INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            tick_id INTEGER,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        INSERT INTO inputs_new(event_id, kind, status, failures, last_error, tick_id,
                               created_at, updated_at)
            SELECT event_id, kind, status, failures, last_error, tick_id, created_at, updated_at
              FROM inputs;
        DROP TABLE inputs;
        ALTER TABLE inputs_new RENAME TO inputs;
        CREATE INDEX inputs_status ON inputs(status, event_id);
    """)


def m012_create_approvals(db: sqlite3.Connection) -> None:
    # Issue 13, ADR-0017: an MCP tool call that waits for the owner. `arguments` and `sources`
    # are JSON; `tool_use_id` is unique where set, so a replayed turn queues nothing twice.
    # The trigger keeps what was asked unchanged and lets a status only move forward
    # (waiting -> approved | rejected | expired; approved -> running -> done | failed): a row
    # left `running` by a kill can never be started again. Nothing is deleted.
    _script(db, """
        CREATE TABLE approvals (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts TEXT NOT NULL,
            tick_id INTEGER,
            server TEXT NOT NULL,
            tool TEXT NOT NULL,
            name TEXT NOT NULL,
            arguments TEXT NOT NULL DEFAULT '{}',
            reason TEXT,
            sources TEXT NOT NULL DEFAULT '[]',
            tool_use_id TEXT,
            status TEXT NOT NULL DEFAULT 'waiting'
                CHECK (status IN ('waiting', 'approved', 'rejected', 'expired', 'running',
                                  'done', 'failed')),
            expires_at TEXT NOT NULL,
            decided_at TEXT,
            why TEXT,
            result_event INTEGER
        );
        CREATE UNIQUE INDEX approvals_tool_use ON approvals(tool_use_id)
            WHERE tool_use_id IS NOT NULL;
        CREATE INDEX approvals_status ON approvals(status, id);
        CREATE TRIGGER approvals_forward BEFORE UPDATE ON approvals
        WHEN new.id IS NOT old.id OR new.ts IS NOT old.ts OR new.tick_id IS NOT old.tick_id
          OR new.server IS NOT old.server OR new.tool IS NOT old.tool OR new.name IS NOT old.name
          OR new.arguments IS NOT old.arguments OR new.reason IS NOT old.reason
          OR new.sources IS NOT old.sources OR new.tool_use_id IS NOT old.tool_use_id
          OR new.expires_at IS NOT old.expires_at
          OR NOT ((old.status = 'waiting' AND new.status IN ('approved', 'rejected', 'expired'))
                  OR (old.status = 'approved' AND new.status = 'running')
                  OR (old.status = 'running' AND new.status IN ('done', 'failed'))) BEGIN
            SELECT RAISE(ABORT, 'an approval only moves forward, and what it asks never changes');
        END;
        CREATE TRIGGER approvals_no_delete BEFORE DELETE ON approvals BEGIN
            SELECT RAISE(ABORT, 'approvals are never deleted');
        END;
    """)


def m013_add_promotion_supersedes(db: sqlite3.Connection) -> None:
    """The MEMORY.md entry a promotion replaces (`m12`), or NULL: ADR-0018."""
    _script(db, "ALTER TABLE promotions ADD COLUMN supersedes TEXT;")


def m014_add_tag_origin(db: sqlite3.Connection) -> None:
    # Who gave a tag: 'owner' (`coworker tag`), 'model' (reflect's keywords per episode) or
    # 'offline' (reflect's co-occurrence keywords). Tags written before were the owner's. The
    # views and the FTS rows read every tag whatever its origin, so nothing is re-indexed.
    _script(
        db,
        """
        ALTER TABLE tags ADD COLUMN origin TEXT NOT NULL DEFAULT 'owner'
            CHECK (origin IN ('owner', 'model', 'offline'));
        CREATE INDEX tags_origin ON tags(item_kind, origin, item_id);
        """,
    )


def m015_count_vector_changes(db: sqlite3.Connection) -> None:
    # Every write to the vectors (a backfill, a redaction or a hand-made delete) moves one
    # counter, so a process keeping them loaded (the loop, the MCP server) reloads when they
    # changed, whatever the count and the rowids look like after (SQLite reuses a deleted top
    # rowid). One row; the triggers cost one UPDATE per vector written.
    _script(
        db,
        """
        CREATE TABLE vector_changes (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
        INSERT INTO vector_changes (id, n) VALUES (1, 0);
        CREATE TRIGGER vectors_inserted AFTER INSERT ON vectors
            BEGIN UPDATE vector_changes SET n = n + 1 WHERE id = 1; END;
        CREATE TRIGGER vectors_deleted AFTER DELETE ON vectors
            BEGIN UPDATE vector_changes SET n = n + 1 WHERE id = 1; END;
        CREATE TRIGGER vectors_updated AFTER UPDATE ON vectors
            BEGIN UPDATE vector_changes SET n = n + 1 WHERE id = 1; END;
        """,
    )


def m016_key_side_effects_by_turn(db: sqlite3.Connection) -> None:
    # Issue 37, ADR-0034: a tool_use id names one call only within its turn (a model server
    # may number its ids per process, so a new turn can be handed an old id). The side-effect
    # ledger and the approval queue gain `turn`: the tick of the first attempt of the row's
    # chain (each `tick` names in `resumes` the attempt it took up again; 0 outside any tick).
    # The ledger is unique on (turn, key), an approval on (turn, tool_use_id). The turn of a
    # row written before is computed here the way the loop computes it (a chain of at most 100
    # of the loop's own ticks, each resuming an earlier one), so a turn in flight across the
    # upgrade still finds what its earlier attempts began.
    _script(db, """
        CREATE TEMP TABLE m016_turns AS
        WITH RECURSIVE up(start, cur, n) AS (
            SELECT t, t, 1 FROM (SELECT tick_id AS t FROM side_effects
                                 UNION SELECT tick_id FROM approvals) WHERE t IS NOT NULL
            UNION ALL
            SELECT up.start, json_extract(e.meta, '$.resumes'), up.n + 1
              FROM up JOIN events AS e ON e.id = up.cur AND e.kind = 'tick'
             WHERE up.n < 100 AND json_valid(e.meta)
               AND json_extract(e.meta, '$.imported') IS NULL
               AND json_type(e.meta, '$.resumes') = 'integer'
               AND json_extract(e.meta, '$.resumes') < up.cur)
        SELECT start AS tick_id, min(cur) AS turn FROM up GROUP BY start;
        CREATE TABLE side_effects_new (
            key TEXT NOT NULL,
            tool TEXT NOT NULL,
            tick_id INTEGER,
            input TEXT,
            status TEXT NOT NULL CHECK (status IN ('started', 'done', 'failed')),
            result TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            turn INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (turn, key)
        );
        INSERT INTO side_effects_new(key, tool, tick_id, input, status, result, started_at,
                                     finished_at, turn)
            SELECT s.key, s.tool, s.tick_id, s.input, s.status, s.result, s.started_at,
                   s.finished_at, COALESCE(t.turn, 0)
              FROM side_effects AS s LEFT JOIN m016_turns AS t ON t.tick_id = s.tick_id;
        DROP TABLE side_effects;
        ALTER TABLE side_effects_new RENAME TO side_effects;
        DROP TRIGGER approvals_forward;
        ALTER TABLE approvals ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;
        UPDATE approvals SET turn = (SELECT t.turn FROM m016_turns AS t
                                      WHERE t.tick_id = approvals.tick_id)
         WHERE tick_id IN (SELECT tick_id FROM m016_turns);
        DROP TABLE m016_turns;
        DROP INDEX approvals_tool_use;
        CREATE UNIQUE INDEX approvals_turn_tool_use ON approvals(turn, tool_use_id)
            WHERE tool_use_id IS NOT NULL;
        CREATE TRIGGER approvals_forward BEFORE UPDATE ON approvals
        WHEN new.id IS NOT old.id OR new.ts IS NOT old.ts OR new.tick_id IS NOT old.tick_id
          OR new.server IS NOT old.server OR new.tool IS NOT old.tool OR new.name IS NOT old.name
          OR new.arguments IS NOT old.arguments OR new.reason IS NOT old.reason
          OR new.sources IS NOT old.sources OR new.tool_use_id IS NOT old.tool_use_id
          OR new.turn IS NOT old.turn OR new.expires_at IS NOT old.expires_at
          OR NOT ((old.status = 'waiting' AND new.status IN ('approved', 'rejected', 'expired'))
                  OR (old.status = 'approved' AND new.status = 'running')
                  OR (old.status = 'running' AND new.status IN ('done', 'failed'))) BEGIN
            SELECT RAISE(ABORT, 'an approval only moves forward, and what it asks never changes');
        END;
    """)


def m017_let_redaction_reach_approvals(db: sqlite3.Connection) -> None:
    # Issue 38, ADR-0038: `coworker redact` reaches every copy of an event's text, and an
    # approval copies a tool call's arguments and the model's reason. What an approval asks
    # still never changes, except by a redaction: the one sideways update let through writes
    # the redaction marker into `arguments` or `reason` and leaves the status where it was.
    _script(db, """
        DROP TRIGGER approvals_forward;
        CREATE TRIGGER approvals_forward BEFORE UPDATE ON approvals
        WHEN new.id IS NOT old.id OR new.ts IS NOT old.ts OR new.tick_id IS NOT old.tick_id
          OR new.server IS NOT old.server OR new.tool IS NOT old.tool OR new.name IS NOT old.name
          OR (new.arguments IS NOT old.arguments AND instr(new.arguments, '[redacted]') = 0)
          OR (new.reason IS NOT old.reason AND instr(COALESCE(new.reason, ''), '[redacted]') = 0)
          OR new.sources IS NOT old.sources OR new.tool_use_id IS NOT old.tool_use_id
          OR new.turn IS NOT old.turn OR new.expires_at IS NOT old.expires_at
          OR NOT ((old.status = 'waiting' AND new.status IN ('approved', 'rejected', 'expired'))
                  OR (old.status = 'approved' AND new.status = 'running')
                  OR (old.status = 'running' AND new.status IN ('done', 'failed'))
                  OR (new.status = old.status AND (new.arguments IS NOT old.arguments
                                                   OR new.reason IS NOT old.reason))) BEGIN
            SELECT RAISE(ABORT, 'an approval only moves forward, and what it asks never changes');
        END;
    """)


def m019_create_hook_deliveries(db: sqlite3.Connection) -> None:
    # Issue 40: a webhook another system sends (`coworker serve`, POST /hooks/NAME) is taken
    # once. A redelivery is known by its delivery id (GitHub's X-GitHub-Delivery, or the
    # header a hook names), unique per hook, and, since that header is not signed, by the
    # digest of its body within a window. A row is written in the same transaction as the
    # hook's input event; it holds no payload (the event does).
    _script(db, """
        CREATE TABLE hook_deliveries (
            id INTEGER PRIMARY KEY,
            hook TEXT NOT NULL,
            delivery_id TEXT,
            digest TEXT NOT NULL,
            event_type TEXT,
            event_id INTEGER NOT NULL,
            received_at TEXT NOT NULL
        );
        CREATE UNIQUE INDEX hook_deliveries_delivery ON hook_deliveries(hook, delivery_id)
            WHERE delivery_id IS NOT NULL;
        CREATE INDEX hook_deliveries_digest ON hook_deliveries(hook, digest, received_at);
    """)


def m018_create_deliveries(db: sqlite3.Connection) -> None:
    # Issue 40: a reply (an approval waiting, a failure) reaching the owner through each
    # `[[notify]]` target, at least once. One row a (event, target), made in the same
    # transaction that moves the target's cursor past the event, so a kill between a reply and
    # its send leaves a pending row (or an event past no cursor) and the send happens after
    # the restart, under the row's idempotency key. A status only moves forward (pending ->
    # delivered | failed); nothing is deleted. `delivery_cursors`: per target, the last event
    # scanned, and whether the target was configured at the last pass (a target removed and
    # added again starts from then, not from where it was left).
    _script(db, """
        CREATE TABLE deliveries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id INTEGER NOT NULL,
            target TEXT NOT NULL,
            what TEXT NOT NULL CHECK (what IN ('reply', 'approval', 'failure')),
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'delivered', 'failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_at TEXT NOT NULL,
            last_error TEXT,
            idempotency_key TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            delivered_at TEXT,
            UNIQUE (event_id, target)
        );
        CREATE INDEX deliveries_queue ON deliveries(status, target, event_id);
        CREATE INDEX deliveries_sent ON deliveries(target, delivered_at);
        CREATE TRIGGER deliveries_forward BEFORE UPDATE ON deliveries
        WHEN new.id IS NOT old.id OR new.event_id IS NOT old.event_id
          OR new.target IS NOT old.target OR new.what IS NOT old.what
          OR new.idempotency_key IS NOT old.idempotency_key
          OR new.created_at IS NOT old.created_at OR old.status <> 'pending' BEGIN
            SELECT RAISE(ABORT, 'a delivery only moves forward, and what it sends never changes');
        END;
        CREATE TRIGGER deliveries_no_delete BEFORE DELETE ON deliveries BEGIN
            SELECT RAISE(ABORT, 'deliveries are never deleted');
        END;
        CREATE TABLE delivery_cursors (
            target TEXT PRIMARY KEY,
            last_event_id INTEGER NOT NULL,
            active INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
            updated_at TEXT NOT NULL
        );
    """)


def m020_create_clients(db: sqlite3.Connection) -> None:
    # Issue 41: the team's agents reach the memory at `coworker serve`'s /mcp, each with a
    # bearer token of its own (`coworker clients add NAME [--can tell]`). A token is kept only
    # as its SHA-256 (it is random, not a password); `can` is `read` (the memory tools and
    # resources) or `tell` (those and `tell`, as actor `mcp:NAME`). A revoked client keeps
    # its row (`revoked_at` set once); a name is held by one client at a time. Each client's
    # calls are counted by what it called (a tool's or a resource's name).
    _script(db, """
        CREATE TABLE clients (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL,
            token_sha256 TEXT NOT NULL UNIQUE,
            can TEXT NOT NULL CHECK (can IN ('read', 'tell')),
            created_at TEXT NOT NULL,
            revoked_at TEXT
        );
        CREATE UNIQUE INDEX clients_active_name ON clients(name) WHERE revoked_at IS NULL;
        CREATE TRIGGER clients_forward BEFORE UPDATE ON clients
        WHEN new.id IS NOT old.id OR new.name IS NOT old.name
          OR new.token_sha256 IS NOT old.token_sha256 OR new.can IS NOT old.can
          OR new.created_at IS NOT old.created_at OR old.revoked_at IS NOT NULL BEGIN
            SELECT RAISE(ABORT, 'a client is only ever revoked, once, and never changed');
        END;
        CREATE TRIGGER clients_no_delete BEFORE DELETE ON clients BEGIN
            SELECT RAISE(ABORT, 'clients are never deleted');
        END;
        CREATE TABLE client_calls (
            client_id INTEGER NOT NULL REFERENCES clients(id),
            what TEXT NOT NULL,
            calls INTEGER NOT NULL DEFAULT 0,
            last_at TEXT NOT NULL,
            PRIMARY KEY (client_id, what)
        );
        CREATE TRIGGER client_calls_no_delete BEFORE DELETE ON client_calls BEGIN
            SELECT RAISE(ABORT, 'client calls are never deleted');
        END;
    """)



def m021_count_rung_terms_by_level(db: sqlite3.Connection) -> None:
    # Issue 42: on PostgreSQL the ladder's kept term counts are kept by rung as well, so
    # recall counts a word's episodes of one rung without reading each one, and search's
    # filter has its words in a table of their own. SQLite's FTS5 counts from its own
    # doclists and filters columns itself: nothing changes here. One schema version for both
    # backends (a host refuses a newer one, on either).
    del db


def m022_index_rung_terms(db: sqlite3.Connection) -> None:
    # Issue 42: on PostgreSQL each rung's terms get a table of their own, so recall reads a
    # word's newest episodes of a rung in order, where GIN keeps none. FTS5's doclists are
    # read in rowid order already: nothing changes here.
    del db


def m023_defer_bulk_counts(db: sqlite3.Connection) -> None:
    # Issue 42: on PostgreSQL a bulk import adds its events' term counts up once, before its
    # commit, where each batch updated every term's row again. FTS5 keeps its own counts:
    # nothing changes here.
    del db


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    m001_create_events,
    m002_create_ladder,
    m003_create_memory_tables,
    m004_create_ops_tables,
    m005_create_events_vocab,
    m006_index_rollup_level,
    m007_index_rollup_coverage,
    m008_add_vocab_and_tags,
    m009_create_vectors,
    m010_create_inputs_and_ledgers,
    m011_widen_input_kinds,
    m012_create_approvals,
    m013_add_promotion_supersedes,
    m014_add_tag_origin,
    m015_count_vector_changes,
    m016_key_side_effects_by_turn,
    m017_let_redaction_reach_approvals,
    m018_create_deliveries,
    m019_create_hook_deliveries,
    m020_create_clients,
    m021_count_rung_terms_by_level,
    m022_index_rung_terms,
    m023_defer_bulk_counts,
]


def applied(store: Store) -> list[str]:
    store.conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    return [r[0] for r in store.conn.execute("SELECT name FROM _migrations ORDER BY rowid")]


def refuse_newer(store: Store) -> None:
    """A database a newer coworker migrated (a migration this code does not know) is refused
    in one line, as on PostgreSQL: this code would misread what it cannot know."""
    try:
        names = [r[0] for r in store.conn.execute("SELECT name FROM _migrations")]
    except sqlite3.OperationalError:  # no table yet: a new database
        return
    known = {fn.__name__ for fn in MIGRATIONS}
    if any(n not in known for n in names):
        raise SchemaNewer(f"the database's schema is version {len(names)}, newer than this "
                         f"coworker knows ({len(MIGRATIONS)}): upgrade coworker on this host")


def apply(store: Store, upto: int | None = None) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction; return their names."""
    done = set(applied(store))
    ran = []
    for fn in MIGRATIONS[:upto]:
        if fn.__name__ in done:
            continue
        with store.transaction() as db:
            # Re-check inside the write lock: two processes may open a new database at once.
            if db.execute("SELECT 1 FROM _migrations WHERE name = ?", (fn.__name__,)).fetchone():
                continue
            fn(db)
            db.execute(
                "INSERT INTO _migrations(name, applied_at) VALUES (?, ?)",
                (fn.__name__, datetime.now(UTC).isoformat(timespec="seconds")),
            )
        log.info("database migrated: %s", fn.__name__)
        ran.append(fn.__name__)
    return ran
