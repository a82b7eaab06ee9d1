"""Full text on PostgreSQL: events_fts' and rollups_fts' tokens, MATCH, bm25 and snippet().

SQLite indexes events with FTS5 (`tokenize='porter unicode61 remove_diacritics 2'` over body,
kind and actor). PostgreSQL's own parser does not split text as unicode61 does (it keeps
`foo-bar`, URLs, e-mail addresses and paths whole, and `simple` does not stem), so the
PostgreSQL store keeps the project's own tokens instead (`create`): `fts_tokens(text)` folds
case (Unicode, `pg_c_utf8`), drops Latin diacritics (NFD without U+0300..U+036F, as
remove_diacritics 2), splits at every character that is no letter or digit, and stems each
token of 3 to 64 bytes with snowball's porter (the algorithm memory.tokens stems with; FTS5
leaves shorter and longer tokens as they are, so does this; a non-ASCII character counts as its
UTF-8 bytes, as in FTS5's porter). Each event (hot and archived) has two columns, made by
the trigger `fts_fill` unless a bulk append gives them (`_FILL`, runtime/store/pg_terms.py):
`tsv`, each term once with as many positions as its count in the row (up to 256: bm25 needs
counts, not places; a text of up to SHORT_CHARS characters has its tokens' places, a longer
one 1..tf), under a GIN index, and `ntok`, the row's tokens. A token past a tsvector's
longest lexeme (2,046 bytes) is cut to its first 511 characters (FTS5 keeps it whole).
The functions a row's terms are made with are inlined by the planner, and a text of ASCII
and caseless punctuation is folded by lower() alone, and a text of up to SHORT_CHARS
characters is written as a tsvector in one plpgsql loop: 40,000 synthetic events' vectors cost
the server 2.2 s of CPU where they cost 11.3 s. Snowball's porter lacks FTS5's step-2 rule
LOGI -> LOG (apology: apolog in FTS5), so `fts_stem` applies it after (its m > 0
read as a vowel then a consonant before LOGI). Of the 7,641 distinct words of this repository's
docs and code, one is split otherwise than FTS5 splits it (ǡ, which unicode61 keeps whole).

`bm25` is FTS5's, computed in SQL: k1 = 1.2, b = 0.75, IDF = ln((N - n + 0.5) / (n + 0.5))
(1e-6 when not positive) per phrase of the MATCH, summed in phrase order and negated (lower is
better) as FTS5's bm25() returns it. N, the rows' tokens (for the average length) and each
term's n (the rows holding it, fts5vocab's `doc`) are kept by statement triggers in
`fts_stats` (counted at each statement they cost 15 ms for N and 1 ms a term at
43,620 events; kept, 500 terms' n read in 4 ms); a phrase of several tokens is counted through
GIN. The events' GIN indexes keep a pending list (fastupdate: a row's terms are appended to
it and merged into the tree a few megabytes at a time, 40% of a bulk load's time saved);
a bulk append merges it at its end (`clean_pending`), as a lookup scans what it holds
(4 ms for 20,000 rows). The rollups' index has none. A row's counts of the query's tokens
come from its tsvector cut to them (setweight + ts_filter: half the time of unnest over the
whole tsvector).

The ladder's index (rollups_fts: title, body, terms, level, vocab, tags) is `fts_rollups`,
one row a rollup kept by triggers on rollups and tags, its column filters read through
tsvector weights (see `_ROLLUPS`); its bm25 is FTS5's bit for bit (memory.rung_bm25 asks it).
An event's tags, FTS5's fourth column, are `fts_event_tags` (see `_EVENT_TAGS`).

A MATCH string (the subset this project writes: quoted or bare phrases, AND, OR, NOT,
parentheses, and on rollups_fts column filters) becomes a tsquery (`parse`). A phrase of
several tokens matches rows holding all of them (positions here are counts, not places).
`snippet` cuts FTS5's snippet() (the best window of 24 tokens, sentence starts preferred, `…`
where cut) from the body in Python.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError

MAX_POSITIONS = 256  # a tsvector keeps at most 256 positions a term: bm25's tf is capped there
TSV_MAX_CHARS = 100_000  # a body whose tsvector passes 1 MB is indexed by its first characters
# the texts fts_short_vector writes (a longer one, fts_text_vector: a statement's cost a call is
# less than a loop's over many tokens); their places, and those of their tags after them, stay
# under a tsvector's highest place (16,383)
SHORT_CHARS = 4_000
MAX_LEXEME_BYTES = 2046  # a tsvector's longest lexeme: a longer token's term is cut (fts_term)
# Characters besides ASCII that fold to themselves (no case, no diacritic, no canonical
# decomposition, no letter or digit): no-break space, § © « ¬ ° ± ´ ¶ · ¸ » ¿ × ÷, and
# U+2002..U+206F (spaces, dashes, curly quotes, bullets, …). A text of these and ASCII is
# folded by lower() alone (fts_folded); a test holds each one to fts_fold.
_PLAIN = r"\u00a0-\u00a9\u00ab-\u00b1\u00b4\u00b6-\u00b8\u00bb\u00bf\u00d7\u00f7\u2002-\u206f"

_DDL = r"""
CREATE TEXT SEARCH DICTIONARY fts_porter (TEMPLATE = snowball, Language = porter);
-- FTS5's porter reads UTF-8 bytes: a character of k bytes is k letters that are no vowels.
-- Each one gets k - 1 stand-ins (U+FDD0, a noncharacter, never in a token) for the stemmer,
-- taken out after it.
CREATE FUNCTION fts_bytes(w text) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN regexp_replace(regexp_replace(regexp_replace(w,
    '([\U00010000-\U0010ffff])', '\1' || U&'\FDD0\FDD0\FDD0', 'g'),
    '([\u0800-\ufdcf\ufdd1-\uffff])', '\1' || U&'\FDD0\FDD0', 'g'),
    '([\u0080-\u07ff])', '\1' || U&'\FDD0', 'g');
-- Case folded (Unicode), Latin letters without their diacritics, as unicode61 with
-- remove_diacritics 2 reads a text (Greek and Cyrillic keep theirs there too).
-- (lower() then the letters whose case folding is not their lower case: µ ſ ς ϐ ϑ ϕ ϖ ϰ ϱ ϵ ẛ ι)
CREATE FUNCTION fts_fold(t text) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN normalize(regexp_replace(normalize(translate(lower(t COLLATE pg_c_utf8),
                                                    {fold_from}, {fold_to}), NFD),
                                '([A-Za-z])[\u0300-\u036f]+', '\1', 'g'), NFC);
-- The same text as fts_fold gives, the short way for a text of ASCII and of punctuation that
-- has no case, no diacritic and no canonical decomposition (nearly every text): lower() alone.
CREATE FUNCTION fts_folded(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN t ~ '^[\x01-\x7f{plain}]*$' THEN lower(t COLLATE pg_c_utf8) ELSE fts_fold(t) END;
-- The functions a row's terms are made with are neither STRICT nor subqueries, so the planner
-- inlines them into the statement: called a token at a time they cost 4 times as much.
-- Snowball's porter on a token (non-ASCII characters counted as their bytes)...
CREATE FUNCTION fts_porter(w text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN octet_length(w) = length(w)
            THEN coalesce((ts_lexize('{schema}.fts_porter', w))[1], w)
            ELSE replace(coalesce((ts_lexize('{schema}.fts_porter', fts_bytes(w)))[1], w),
                         U&'\FDD0', '') END;
-- ...then the step-2 rule (m>0) LOGI -> LOG that FTS5's porter has and snowball's lacks.
CREATE FUNCTION fts_logi(s text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN s LIKE '%logi' AND s ~ '[aeiouy][^aeiouy].*logi$' THEN left(s, -1) ELSE s END;
CREATE FUNCTION fts_stem(w text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN fts_logi(fts_porter(w));
-- A token's term: stemmed when of 3 to 64 bytes; one longer than a tsvector's longest lexeme
-- (2,046 bytes: a blob of base64) cut to its first {long_chars} characters.
CREATE FUNCTION fts_term(w text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN octet_length(w) BETWEEN 3 AND 64 THEN fts_stem(w)
            WHEN octet_length(w) > {long_bytes} THEN left(w, {long_chars}) ELSE w END;
CREATE FUNCTION fts_tokens(t text) RETURNS text[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ARRAY(
    SELECT fts_term(w)
      FROM regexp_split_to_table(fts_folded(t) COLLATE pg_c_utf8, '[^{token}]+')
           WITH ORDINALITY AS s(w, n)
     WHERE w <> '' ORDER BY n);
-- How many tokens a text holds (bm25's row length): split as fts_tokens, nothing stemmed.
CREATE FUNCTION fts_count(t text) RETURNS integer LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN regexp_count(fts_folded(t) COLLATE pg_c_utf8, '[{token}]+');
-- Each term once, with positions 1..tf (at most 256): counts for bm25, not places.
CREATE FUNCTION fts_vector(toks text[]) RETURNS tsvector LANGUAGE sql IMMUTABLE STRICT
PARALLEL SAFE
RETURN (SELECT coalesce(string_agg('''' || w || ''':'
                                   || array_to_string(('{positions}'::int[])[1:least(n, 256)],
                                                      ','), ' '), '')::tsvector
          FROM (SELECT w, count(*) AS n FROM unnest(toks) AS w GROUP BY w) AS g);
-- fts_vector(fts_tokens(t)) in one pass, each distinct token stemmed once (half the time).
CREATE FUNCTION fts_text_vector(t text) RETURNS tsvector LANGUAGE sql IMMUTABLE STRICT
PARALLEL SAFE
RETURN (SELECT coalesce(string_agg('''' || w || ''':'
                                   || array_to_string(('{positions}'::int[])[1:least(n, 256)],
                                                      ','), ' '), '')::tsvector
          FROM (SELECT fts_term(w) AS w, count(*) AS n
                  FROM regexp_split_to_table(fts_folded(t) COLLATE pg_c_utf8, '[^{token}]+')
                       AS s(w)
                 WHERE w <> '' GROUP BY 1) AS g);
-- The same (a term's count the same) for a text of at most {short} characters, in half the
-- time (the per-call cost of fts_text_vector's statement is most of a short text's): each
-- token's term written at the token's place (the tsvector's input gathers a
-- term's places; a place never passes 16,383 here, where a tsvector stops counting).
CREATE FUNCTION fts_short_vector(t text) RETURNS tsvector LANGUAGE plpgsql IMMUTABLE STRICT
PARALLEL SAFE AS $$
DECLARE w text; i integer := 0; v text[] := '{}';
BEGIN
    FOREACH w IN ARRAY regexp_split_to_array({schema}.fts_folded(t) COLLATE pg_c_utf8,
                                             '[^{token}]+') LOOP
        CONTINUE WHEN w = '';
        i := i + 1;
        v := v || ('''' || {schema}.fts_term(w) || ''':' || i);  -- appended in place
    END LOOP;
    RETURN array_to_string(v, ' ')::tsvector;
END $$;
-- A row's tsvector (body, kind, actor, as events_fts indexes them). A tsvector holds at most
-- 1 MB: a text of {cut} characters makes at most 850 KB (6 bytes a character's lexeme, 2.5
-- of positions), so only a longer one can pass it, and is then indexed by its body's first
-- {cut} characters (fts_row_long: its exception block is a subtransaction a row).
CREATE FUNCTION fts_row_long(body text, kind text, actor text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path FROM CURRENT AS $$
BEGIN
    RETURN fts_text_vector(body || ' ' || kind || ' ' || actor);
EXCEPTION WHEN program_limit_exceeded THEN
    RETURN fts_text_vector(left(body, {cut}) || ' ' || kind || ' ' || actor);
END $$;
CREATE FUNCTION fts_row(body text, kind text, actor text) RETURNS tsvector LANGUAGE sql
IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN length(body) + length(kind) + length(actor) <= {short}
            THEN fts_short_vector(body || ' ' || kind || ' ' || actor)
            WHEN length(body) + length(kind) + length(actor) <= {cut}
            THEN fts_text_vector(body || ' ' || kind || ' ' || actor)
            ELSE fts_row_long(body, kind, actor) END;
"""

# The counts an insert adds. A bulk load (`deferred_counts`) appends each statement's counts to
# a table of its own session instead, and adds them up once before its commit: a row updated
# again and again in one transaction leaves a chain of versions that each later update walks,
# so a million events imported in one transaction spent 21 s of the server's 62 s upserting
# these counts (migration 23).
_STATS_IN = r"""
CREATE OR REPLACE FUNCTION fts_stats_in() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$ BEGIN
    IF current_setting('coworker.deferred_counts', true) = 'on' THEN
        INSERT INTO pg_temp.fts_stats_deferred (term, doc, toks)
            SELECT '', count(*), coalesce(sum(ntok), 0) FROM new_rows
            UNION ALL SELECT t, count(*), 0
              FROM new_rows, unnest(tsvector_to_array(new_rows.tsv)) AS t GROUP BY t;
        RETURN NULL;
    END IF;
    UPDATE fts_stats SET doc = doc + (SELECT count(*) FROM new_rows),
                         toks = toks + (SELECT coalesce(sum(ntok), 0) FROM new_rows)
     WHERE term = '';
    INSERT INTO fts_stats AS v (term, doc)
        SELECT t, count(*) FROM new_rows, unnest(tsvector_to_array(new_rows.tsv)) AS t
         GROUP BY t ORDER BY t
    ON CONFLICT (term) DO UPDATE SET doc = v.doc + excluded.doc;
    RETURN NULL;
END $$;
"""

_STATS = r"""
-- FTS5's own counts, kept by statement triggers (an archive move adds to one table what it
-- takes from the other), in one table: each term's rows (fts5vocab's 'row' doc: bm25's n),
-- and under the empty term, which no token is, all the rows and their tokens (bm25's N and
-- average length). (store copy leaves fts_stats out: the target's triggers keep its own.)
CREATE TABLE fts_stats (term text COLLATE "C" PRIMARY KEY, doc bigint NOT NULL,
                        toks bigint NOT NULL DEFAULT 0);
INSERT INTO fts_stats VALUES ('', 0, 0);
{stats_in}
CREATE FUNCTION fts_stats_out() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$ BEGIN
    UPDATE fts_stats SET doc = doc - (SELECT count(*) FROM old_rows),
                         toks = toks - (SELECT coalesce(sum(ntok), 0) FROM old_rows)
     WHERE term = '';
    UPDATE fts_stats AS v SET doc = v.doc - d.n
      FROM (SELECT t, count(*) AS n FROM old_rows, unnest(tsvector_to_array(old_rows.tsv)) AS t
             GROUP BY t) AS d
     WHERE v.term = d.t;
    RETURN NULL;
END $$;
CREATE FUNCTION fts_stats_change() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$ BEGIN
    UPDATE fts_stats SET toks = toks + (SELECT coalesce(sum(ntok), 0) FROM new_rows)
                                     - (SELECT coalesce(sum(ntok), 0) FROM old_rows)
     WHERE term = '';
    -- (a term the event's tags hold stays in its row whatever its body says: fts_event_tags)
    UPDATE fts_stats AS v SET doc = v.doc - d.n
      FROM (SELECT t, count(*) AS n FROM old_rows, unnest(tsvector_to_array(old_rows.tsv)) AS t
             WHERE NOT EXISTS (SELECT 1 FROM fts_event_tags AS g WHERE g.id = old_rows.id
                                  AND t = ANY(tsvector_to_array(g.tsv)))
             GROUP BY t) AS d
     WHERE v.term = d.t;
    INSERT INTO fts_stats AS v (term, doc)
        SELECT t, count(*) FROM new_rows, unnest(tsvector_to_array(new_rows.tsv)) AS t
         WHERE NOT EXISTS (SELECT 1 FROM fts_event_tags AS g WHERE g.id = new_rows.id
                              AND t = ANY(tsvector_to_array(g.tsv)))
         GROUP BY t ORDER BY t
    ON CONFLICT (term) DO UPDATE SET doc = v.doc + excluded.doc;
    RETURN NULL;
END $$;
"""

# events_fts' fourth column on SQLite is the event's tags (re-indexed by tags.add). Here an
# event's tags are a row of their own, fts_event_tags (its tags' vector and tokens, kept by a
# trigger on tags), and a tagged event matches and scores as its row's vector || its tags'
# (positions are counts, which the concatenation keeps). fts_stats holds the tags' terms a
# row's body, kind and actor lack, and their tokens.
_EVENT_TAGS = r"""
CREATE TABLE fts_event_tags (id bigint PRIMARY KEY, tsv tsvector NOT NULL,
                             ntok integer NOT NULL);
CREATE FUNCTION fts_event_tags_keep() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE eid bigint; tagged text; t0 tsvector; t1 tsvector; n0 integer; n1 integer; e tsvector;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF old.item_kind <> 'event' THEN RETURN NULL; END IF;
        eid := old.item_id;
    ELSE
        IF new.item_kind <> 'event' THEN RETURN NULL; END IF;
        eid := new.item_id;
    END IF;
    tagged := (SELECT string_agg(word, ' ' ORDER BY id) FROM tags
                WHERE item_kind = 'event' AND item_id = eid);
    SELECT tsv, ntok INTO t0, n0 FROM fts_event_tags WHERE id = eid;
    t1 := fts_vector(fts_tokens(tagged));
    n1 := fts_count(tagged);
    e := coalesce((SELECT tsv FROM events WHERE id = eid),
                  (SELECT tsv FROM events_archive WHERE id = eid), ''::tsvector);
    IF tagged IS NULL THEN
        DELETE FROM fts_event_tags WHERE id = eid;
    ELSE
        INSERT INTO fts_event_tags VALUES (eid, t1, n1)
        ON CONFLICT (id) DO UPDATE SET tsv = excluded.tsv, ntok = excluded.ntok;
    END IF;
    UPDATE fts_stats SET toks = toks + coalesce(n1, 0) - coalesce(n0, 0) WHERE term = '';
    INSERT INTO fts_stats AS v (term, doc)
        SELECT t, sum(d) FROM (
            SELECT unnest(tsvector_to_array(coalesce(t1, ''::tsvector))) AS t, 1 AS d
            UNION ALL SELECT unnest(tsvector_to_array(coalesce(t0, ''::tsvector))), -1) AS x
         WHERE t <> ALL(tsvector_to_array(e)) GROUP BY t HAVING sum(d) <> 0 ORDER BY t
    ON CONFLICT (term) DO UPDATE SET doc = v.doc + excluded.doc;
    RETURN NULL;
END $$;
CREATE TRIGGER tags_events_fts AFTER INSERT OR UPDATE OR DELETE ON tags FOR EACH ROW
    EXECUTE FUNCTION fts_event_tags_keep();
"""

# A row's tsv and ntok (fts_row and fts_count of its body, kind and actor) are made by fts_fill
# before the row is written, unless the INSERT gives both: a bulk append by COPY gives those of
# the texts pg_terms makes exactly as the server does (a server-made vector cost 80 µs a row
# there), and the archive move carries them over. An UPDATE (a redaction) always makes them
# again from the row's new texts.
_FILL = r"""
CREATE FUNCTION fts_fill() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' OR new.tsv IS NULL OR new.ntok IS NULL THEN
        new.tsv := fts_row(new.body, new.kind, new.actor);
        new.ntok := fts_count(new.body || ' ' || new.kind || ' ' || new.actor);
    END IF;
    RETURN new;
END $$;
"""

_TABLE = r"""
ALTER TABLE {table} DROP COLUMN IF EXISTS tsv;
ALTER TABLE {table} ADD COLUMN tsv tsvector NOT NULL, ADD COLUMN ntok integer NOT NULL;
CREATE TRIGGER {table}_fts_fill BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW
    EXECUTE FUNCTION fts_fill();
CREATE INDEX {table}_tsv ON {table} USING GIN (tsv) WITH (fastupdate = on);
CREATE TRIGGER {table}_fts_in AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fts_stats_in();
CREATE TRIGGER {table}_fts_out AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fts_stats_out();
CREATE TRIGGER {table}_fts_change AFTER UPDATE ON {table}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fts_stats_change();
"""

# rollups_fts on SQLite: FTS5 over title, body, terms, level, vocab and tags (the tags joined
# from their table, re-indexed by tags.add). Here one row a rollup in fts_rollups, kept by
# triggers on rollups (a seal, a redaction) and on tags. Column filters are read through
# tsvector weights, one a class of columns: terms A, level B, vocab C, title/body/tags D (the
# filters this project writes: {title body terms tags}, {title body terms vocab tags}, level,
# terms). A term's positions say its class too (bm25 counts a phrase in its filter's columns
# only, and cutting a row to the query's tokens loses the weights): tags at 1.., terms at
# 1000.., title and body at 5000.., level at 9000.., vocab at 13000.. (`base`: all but the
# tags; `tsv` = the tags' vector || base, which shifts base by the tags' highest position, at
# most 256). The kept counts are each term's rows by the classes a row holds it in (a bitmask:
# A 1, B 2, C 4, D 8) and by the row's rung (`level`, kept beside the row), so a filter's
# document frequency is a sum, and so is how many episodes of one rung hold a word (recall's
# `level : "1" AND {...} : "word"`: counted through GIN, 15 to 25 ms for a common word at a
# million events, whose episodes' rows are each read); the empty term holds the rows and their
# tokens (every column's: FTS5's row length). Search's filter's words are also read through a
# vector of their own, without weights or places (`_CLASS_VECTORS`, `_rollup_where`).
_ROLLUPS = r"""
CREATE TABLE fts_rollups (id bigint PRIMARY KEY, base tsvector NOT NULL,
                          base_ntok integer NOT NULL, tsv tsvector NOT NULL,
                          ntok integer NOT NULL, level smallint NOT NULL DEFAULT 0);
CREATE INDEX fts_rollups_tsv ON fts_rollups USING GIN (tsv) WITH (fastupdate = off);
{class_vectors}
CREATE TABLE fts_rollup_stats (term text COLLATE "C", mask smallint, doc bigint NOT NULL,
                               toks bigint NOT NULL DEFAULT 0,
                               level smallint NOT NULL DEFAULT 0,
                               PRIMARY KEY (term, mask, level));
INSERT INTO fts_rollup_stats VALUES ('', 0, 0, 0, 0);
CREATE FUNCTION fts_rollup_base(title text, body text, terms text, level integer, vocab text)
RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (SELECT coalesce(string_agg('''' || w || ''':' || ps, ' '), '')::tsvector FROM (
    SELECT w, string_agg(ps, ',' ORDER BY start) AS ps FROM (
        SELECT c.start, t.w, (SELECT string_agg((c.start + c.k * 256 + i)::text || c.wt, ',')
                                FROM generate_series(0, least(t.n, 256) - 1) AS i) AS ps
          FROM (VALUES (1000, 0, 'A', terms), (5000, 0, 'D', title), (5000, 1, 'D', body),
                       (9000, 0, 'B', level::text), (13000, 0, 'C', vocab))
                   AS c(start, k, wt, txt),
               LATERAL (SELECT w, count(*) AS n FROM unnest(fts_tokens(c.txt)) AS w
                         GROUP BY w) AS t) AS x
     GROUP BY w) AS y);
CREATE FUNCTION fts_mask(ws text[]) RETURNS smallint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (SELECT bit_or(CASE w WHEN 'A' THEN 1 WHEN 'B' THEN 2 WHEN 'C' THEN 4 ELSE 8 END)
          FROM unnest(ws) AS w)::smallint;
"""

# The functions the rows and counts of the ladder's index are kept by (migration 21 replaces
# them: `count_by_level`).
_ROLLUP_KEEP = r"""
CREATE OR REPLACE FUNCTION fts_rollup_keep() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE rid bigint; tagged text; tv tsvector;
BEGIN
    IF TG_TABLE_NAME = 'tags' THEN
        IF TG_OP = 'DELETE' THEN
            IF old.item_kind <> 'rollup' THEN RETURN NULL; END IF;
            rid := old.item_id;
        ELSE
            IF new.item_kind <> 'rollup' THEN RETURN NULL; END IF;
            rid := new.item_id;
        END IF;
    ELSE
        rid := new.id;
    END IF;
    tagged := (SELECT string_agg(word, ' ' ORDER BY id) FROM tags
                WHERE item_kind = 'rollup' AND item_id = rid);
    tv := coalesce(fts_vector(fts_tokens(tagged)), ''::tsvector);
    IF TG_TABLE_NAME = 'rollups' THEN
        INSERT INTO fts_rollups AS f (id, base, base_ntok, tsv, ntok, level)
        SELECT rid, b, n, tv || b, n + coalesce(fts_count(tagged), 0), new.level
          FROM (SELECT fts_rollup_base(new.title, new.body, new.terms, new.level, new.vocab) AS b,
                       coalesce(fts_count(new.title), 0) + coalesce(fts_count(new.body), 0)
                       + coalesce(fts_count(new.terms), 0) + fts_count(new.level::text)
                       + coalesce(fts_count(new.vocab), 0) AS n) AS x
        ON CONFLICT (id) DO UPDATE SET base = excluded.base, base_ntok = excluded.base_ntok,
                                       tsv = excluded.tsv, ntok = excluded.ntok,
                                       level = excluded.level;
    ELSE
        UPDATE fts_rollups SET tsv = tv || base,
                               ntok = base_ntok + coalesce(fts_count(tagged), 0)
         WHERE id = rid;
    END IF;
    RETURN NULL;
END $$;
"""
_ROLLUP_STATS_KEEP = r"""
CREATE OR REPLACE FUNCTION fts_rollup_stats_keep() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$ BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM fts_rollup_words WHERE id IN (SELECT id FROM old_rows);
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        DELETE FROM fts_rollup_terms AS t USING ({terms_of_old_rows}) AS o
         WHERE t.term = o.term AND t.level = o.level AND t.id = o.id;
        UPDATE fts_rollup_stats SET doc = doc - (SELECT count(*) FROM old_rows),
                                    toks = toks - (SELECT coalesce(sum(ntok), 0) FROM old_rows)
         WHERE term = '' AND mask = 0;
        UPDATE fts_rollup_stats AS v SET doc = v.doc - d.n
          FROM (SELECT u.lexeme AS t, fts_mask(u.weights) AS k, old_rows.level AS l,
                       count(*) AS n
                  FROM old_rows, unnest(old_rows.tsv) AS u GROUP BY 1, 2, 3) AS d
         WHERE v.term = d.t AND v.mask = d.k AND v.level = d.l;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        UPDATE fts_rollup_stats SET doc = doc + (SELECT count(*) FROM new_rows),
                                    toks = toks + (SELECT coalesce(sum(ntok), 0) FROM new_rows)
         WHERE term = '' AND mask = 0;
        INSERT INTO fts_rollup_stats AS v (term, mask, level, doc)
            SELECT u.lexeme, fts_mask(u.weights), new_rows.level, count(*)
              FROM new_rows, unnest(new_rows.tsv) AS u GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (term, mask, level) DO UPDATE SET doc = v.doc + excluded.doc;
        INSERT INTO fts_rollup_words AS w (id, ad) {words_of_new_rows}
        ON CONFLICT (id) DO UPDATE SET ad = excluded.ad;
        INSERT INTO fts_rollup_terms (term, level, id) {terms_of_new_rows} ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
"""
_ROLLUP_TRIGGERS = r"""
CREATE TRIGGER rollups_fts_in AFTER INSERT ON rollups FOR EACH ROW
    EXECUTE FUNCTION fts_rollup_keep();
CREATE TRIGGER rollups_fts_change AFTER UPDATE OF title, body, terms, level, vocab ON rollups
    FOR EACH ROW EXECUTE FUNCTION fts_rollup_keep();
CREATE TRIGGER tags_rollups_fts AFTER INSERT OR UPDATE OR DELETE ON tags FOR EACH ROW
    EXECUTE FUNCTION fts_rollup_keep();
CREATE TRIGGER fts_rollups_in AFTER INSERT ON fts_rollups REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fts_rollup_stats_keep();
CREATE TRIGGER fts_rollups_out AFTER DELETE ON fts_rollups REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fts_rollup_stats_keep();
CREATE TRIGGER fts_rollups_change AFTER UPDATE ON fts_rollups
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fts_rollup_stats_keep();
"""
# The terms of search's filter ({title body terms tags}: classes A and D), each rollup's in a
# narrow table of their own, without weights or places, under GIN (`fts_rollup_words`, kept
# beside fts_rollups by fts_rollup_stats_keep). GIN keeps no weights, so a tsquery restricted
# to some makes it recheck every row holding the word in any column: "fail" is in 67,848 of
# 75,727 rollups at a million events (nearly all in their vocabulary), in the titles, bodies
# and terms of 869; matching those took 101 ms, through their own vector 2.7 ms. (As a column
# of fts_rollups it made its rows half as large again and recall's reads along it slower;
# recall's filter, read newest first a hundred rows at a time, was slower through a table of
# its own than along fts_rollups, so it has none.)
_CLASS_VECTORS = r"""
CREATE TABLE IF NOT EXISTS fts_rollup_words (id bigint PRIMARY KEY, ad tsvector NOT NULL);
"""
_CLASS_INDEX = r"""
CREATE INDEX IF NOT EXISTS fts_rollup_words_ad ON fts_rollup_words USING GIN (ad)
    WITH (fastupdate = off);
"""
# a rollup's row of fts_rollup_words, from its row of fts_rollups (`{rows}`, aliased f)
ROLLUP_WORDS = "SELECT f.id, strip(ts_filter(f.tsv, '{a,d}')) AS ad FROM {rows}"
# Recall's newest episodes of a rung holding its words (`level : "1" AND {title body terms
# vocab tags} : (...)`, the newest 100) are read from each rung's terms, one row a term a rollup
# under a B-tree: a term's rollups of one rung newest first, where GIN keeps no order (read
# backwards along fts_rollups, each row's vector tested, three words' newest 100 took 4 to 8 ms
# at a million events, from this table 0.5 to 1.3 ms). Every term of a rollup but its level's
# (class B) is here: the classes of recall's filter (`_newest_on_rung`).
_RUNG_TERMS = r"""
CREATE TABLE IF NOT EXISTS fts_rollup_terms (term text COLLATE "C" NOT NULL,
    level smallint NOT NULL, id bigint NOT NULL, PRIMARY KEY (term, level, id));
"""
# a rollup's rows of fts_rollup_terms, from its row of fts_rollups (`{rows}`, aliased f)
ROLLUP_TERMS = ("SELECT u.lexeme AS term, f.level, f.id FROM {rows}, unnest(f.tsv) AS u "
                "WHERE u.weights <> '{B}'")
_ROLLUP_STATS_KEEP = (_ROLLUP_STATS_KEEP.replace(
    "{words_of_new_rows}", ROLLUP_WORDS.replace("{rows}", "new_rows AS f"))
    .replace("{terms_of_new_rows}", ROLLUP_TERMS.replace("{rows}", "new_rows AS f"))
    .replace("{terms_of_old_rows}", ROLLUP_TERMS.replace("{rows}", "old_rows AS f")))
_ROLLUPS = (_ROLLUPS + _ROLLUP_KEEP + _ROLLUP_STATS_KEEP + _ROLLUP_TRIGGERS).replace(
    "{class_vectors}", _CLASS_VECTORS + _CLASS_INDEX + _RUNG_TERMS)
# fts_rollup_stats as a recount of the rows `{rows}` (fts_rollups, or a recount of them) gives
ROLLUP_STATS_RECOUNT = (
    "SELECT '' AS term, 0 AS mask, 0 AS level, count(*) AS doc, coalesce(sum(ntok), 0) AS toks "
    "FROM {rows} UNION ALL SELECT u.lexeme, fts_mask(u.weights), f.level, count(*), 0 "
    "FROM {rows}, unnest(f.tsv) AS u GROUP BY 1, 2, 3")


def count_by_level(conn: Any) -> None:
    """Migration 21: the ladder's kept counts by rung as well (see _ROLLUPS), and search's
    words in a table of their own (_CLASS_VECTORS): each rollup's row gets its level, the
    functions that keep them are replaced, the words table is filled, the counts recounted.
    On a new schema (the baseline made them so) it changes nothing."""
    conn.execute("ALTER TABLE fts_rollups ADD COLUMN IF NOT EXISTS level smallint NOT NULL "
                 "DEFAULT 0")
    conn.execute("ALTER TABLE fts_rollup_stats ADD COLUMN IF NOT EXISTS level smallint NOT NULL "
                 "DEFAULT 0")
    conn.execute("ALTER TABLE fts_rollup_stats DROP CONSTRAINT fts_rollup_stats_pkey, "
                 "ADD PRIMARY KEY (term, mask, level)")
    conn.execute(_RUNG_TERMS.encode())  # the functions below keep it (filled by migration 22)
    conn.execute((_ROLLUP_KEEP + _ROLLUP_STATS_KEEP).encode())
    # each row's rung, the table written anew (an UPDATE of every row would leave it twice
    # its size, and its later reads slower); no trigger fires, the indexes are built again
    conn.execute("CREATE OR REPLACE FUNCTION pg_temp.rung(bigint) RETURNS smallint LANGUAGE sql STABLE "
                 "RETURN (SELECT level FROM rollups WHERE id = $1)")
    conn.execute("ALTER TABLE fts_rollups ALTER COLUMN level TYPE smallint "
                 "USING coalesce(pg_temp.rung(id), 0)")
    conn.execute(_CLASS_VECTORS.encode())  # search's filter's words, a table of their own
    conn.execute("INSERT INTO fts_rollup_words (id, ad) "
                 + ROLLUP_WORDS.replace("{rows}", "fts_rollups AS f") + " ON CONFLICT DO NOTHING")
    conn.execute(_CLASS_INDEX.encode())  # after the rows: one build
    conn.execute("TRUNCATE fts_rollup_stats")
    conn.execute("INSERT INTO fts_rollup_stats (term, mask, level, doc, toks) "
                 + ROLLUP_STATS_RECOUNT.replace("{rows}", "fts_rollups AS f"))


def defer_counts(conn: Any) -> None:
    """Migration 23: the events' counts trigger that a bulk load can defer (`_STATS_IN`)."""
    conn.execute(_STATS_IN.encode())


@contextlib.contextmanager
def deferred_counts(store: Any) -> Iterator[None]:
    """Inside the caller's transaction, the events' term counts of every insert kept aside in
    a table of this session, then added to fts_stats in one statement, each term once, before
    the transaction goes on (see `_STATS_IN`). Left by an error, nothing is added: the
    caller's transaction is then rolled back, and the kept-aside table with it."""
    store.execute("CREATE TEMP TABLE IF NOT EXISTS fts_stats_deferred (term text COLLATE \"C\", "
                  "doc bigint, toks bigint) ON COMMIT DROP")
    store.execute("SELECT set_config('coworker.deferred_counts', 'on', true)")
    yield
    store.execute("SELECT set_config('coworker.deferred_counts', 'off', true)")
    store.execute("INSERT INTO fts_stats AS v (term, doc, toks) SELECT term, sum(doc), sum(toks) "
                  "FROM pg_temp.fts_stats_deferred GROUP BY term ORDER BY term ON CONFLICT (term) "
                  "DO UPDATE SET doc = v.doc + excluded.doc, toks = v.toks + excluded.toks")
    store.execute("TRUNCATE pg_temp.fts_stats_deferred")


def rung_terms(conn: Any) -> None:
    """Migration 22: each rung's terms in a table of their own (`_RUNG_TERMS`), filled from
    the ladder's index, and the function that keeps them. On a new schema (the baseline made
    it so) it changes nothing."""
    conn.execute(_RUNG_TERMS.encode())
    conn.execute(_ROLLUP_STATS_KEEP.encode())
    conn.execute("INSERT INTO fts_rollup_terms (term, level, id) SELECT * FROM ("
                 + ROLLUP_TERMS.replace("{rows}", "fts_rollups AS f")
                 + ") AS t ORDER BY 1, 2, 3 ON CONFLICT DO NOTHING")


# Case foldings FTS5's unicode61 makes that are not lower(): µ -> μ, ſ -> s, final ς -> σ...
_FOLD_FROM = "\u00b5\u017f\u03c2\u03d0\u03d1\u03d5\u03d6\u03f0\u03f1\u03f5\u1e9b\u1fbe"
_FOLD_TO = "\u03bc\u0073\u03c3\u03b2\u03b8\u03c6\u03c0\u03ba\u03c1\u03b5\u1e61\u03b9"


def _u(text: str) -> str:
    """`text` as the inside of a U&'...' literal (every character escaped)."""
    return "".join(f"\\{ord(c):04X}" for c in text)


@functools.cache
def _token_class() -> str:
    """What a token is made of, as a bracket expression's inside: unicode61's categories L*,
    N* and Co. pg_c_utf8's [:alpha:] holds the letters but its [:digit:] only 0-9, so the
    numbers past ASCII (², ٣, Ⅻ: each character Python reads as numeric, up to U+2FFFF where
    the last of them are) and the private use areas are named by their ranges."""
    ranges = [(0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)]
    for cp in range(0x80, 0x30000):
        if chr(cp).isnumeric():
            if ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))

    def esc(cp: int) -> str:
        return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"
    return "[:alpha:][:digit:]" + "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}"
                                          for a, b in ranges)


def create(conn: Any) -> None:
    """The full text's DDL on the coworker's schema (the current one): the tokenizer, the
    events' tsv and ntok columns, the trigger that fills them and their GIN indexes. Replaces
    the baseline's `tsv`."""
    schema, unicode = conn.execute("SELECT current_schema(), EXISTS (SELECT 1 FROM pg_collation "
                                   "WHERE collname = 'pg_c_utf8')").fetchone()
    if not unicode:
        raise StoreError("the events' full text on PostgreSQL needs PostgreSQL 17 or newer (its "
                         "pg_c_utf8 collation folds case and classes letters by Unicode)")
    positions = "{" + ",".join(str(i) for i in range(1, MAX_POSITIONS + 1)) + "}"
    conn.execute(_DDL.replace("{schema}", schema).replace("{positions}", positions)
                 .replace("{cut}", str(TSV_MAX_CHARS)).replace("{token}", _token_class())
                 .replace("{plain}", _PLAIN).replace("{long_bytes}", str(MAX_LEXEME_BYTES))
                 .replace("{long_chars}", str(MAX_LEXEME_BYTES // 4))
                 .replace("{short}", str(SHORT_CHARS))
                 .replace("{fold_from}", f"U&'{_u(_FOLD_FROM)}'")
                 .replace("{fold_to}", f"U&'{_u(_FOLD_TO)}'").encode())
    conn.execute(_STATS.replace("{stats_in}", _STATS_IN).encode())
    conn.execute(_FILL.encode())
    for table in ("events", "events_archive"):
        conn.execute(_TABLE.replace("{table}", table).encode())
    conn.execute(_ROLLUPS.encode())
    conn.execute(_EVENT_TAGS.encode())


# --- MATCH -> tsquery ----------------------------------------------------------------------------

_LEX = re.compile(r'\s*(?:"((?:[^"]|"")*)"|(\()|(\))|([{}:])|([^\s()"{}:*^+]+)|(\S))')


@dataclass(frozen=True)
class Query:
    """A MATCH string read: `tree` (nested tuples: ("or"|"and"|"not", a, b) or ("p", i)),
    its phrases in order (FTS5's phrase numbers), each as its text, and each phrase's column
    filter (None: every column)."""
    tree: Any
    phrases: tuple[str, ...]
    columns: tuple[frozenset[str] | None, ...] = ()


class _Parser:
    """FTS5's query syntax as this project writes it: phrases, AND, OR, NOT (NOT binds
    tightest, then AND, then OR, as in FTS5's grammar), parentheses; two phrases side by
    side are AND; with `columns` (an index's), column filters (`col :` and `{a b} :` before a
    phrase or a parenthesis, nested ones intersected). NEAR, prefixes and, without `columns`,
    column filters are refused (ValueError)."""

    def __init__(self, text: str, columns: Sequence[str] | None = None) -> None:
        self.toks: list[tuple[str, str]] = []
        for m in _LEX.finditer(text):
            quoted, op, cl, punct, word, other = m.groups()
            if other is not None or (punct is not None and columns is None):
                raise ValueError(f"MATCH syntax not translated for PostgreSQL: {other or punct!r}")
            if quoted is not None:
                self.toks.append(("p", quoted.replace('""', '"')))
            elif op or cl or punct:
                self.toks.append((op or cl or punct, ""))
            elif word in ("AND", "OR", "NOT"):
                self.toks.append((word, ""))
            elif word == "NEAR":
                raise ValueError("NEAR is not translated for PostgreSQL")
            else:
                self.toks.append(("p", word))
        self.at = 0
        self.phrases: list[str] = []
        self.known = frozenset(columns or ())
        self.filters: list[frozenset[str] | None] = [None]
        self.cols: list[frozenset[str] | None] = []

    def peek(self, ahead: int = 0) -> str:
        at = self.at + ahead
        return self.toks[at][0] if at < len(self.toks) else ""

    def take(self) -> tuple[str, str]:
        self.at += 1
        return self.toks[self.at - 1] if self.at <= len(self.toks) else ("", "")

    def parse(self) -> Query:
        tree = self.or_() if self.toks else None
        if self.at != len(self.toks):
            raise ValueError("MATCH syntax not translated for PostgreSQL: unbalanced")
        return Query(tree, tuple(self.phrases), tuple(self.cols))

    def or_(self) -> Any:
        node = self.and_()
        while self.peek() == "OR":
            self.take()
            node = ("or", node, self.and_())
        return node

    def and_(self) -> Any:
        node = self.not_()
        while self.peek() in ("AND", "p", "(", "{"):
            if self.peek() == "AND":
                self.take()
            node = ("and", node, self.not_())
        return node

    def not_(self) -> Any:
        node = self.primary()
        while self.peek() == "NOT":
            self.take()
            node = ("not", node, self.primary())
        return node

    def colset(self) -> frozenset[str] | None:
        """A column filter before a phrase or a parenthesis (`col :`, `{a b} :`), or None."""
        if self.peek() == "p" and self.peek(1) == ":":
            names = [self.take()[1]]
        elif self.peek() == "{":
            self.take()
            names = []
            while self.peek() == "p":
                names.append(self.take()[1])
            if self.take()[0] != "}":
                raise ValueError("MATCH syntax not translated for PostgreSQL: column set")
        else:
            return None
        if self.take()[0] != ":":
            raise ValueError("MATCH syntax not translated for PostgreSQL: column filter")
        unknown = [n for n in names if n not in self.known]
        if unknown:
            raise ValueError(f"no such column: {unknown[0]}")
        return frozenset(names)

    def primary(self) -> Any:
        cols = self.colset()
        if cols is not None:
            outer = self.filters[-1]
            self.filters.append(cols if outer is None else cols & outer)
            try:
                return self.primary()
            finally:
                self.filters.pop()
        kind, text = self.take()
        if kind == "(":
            node = self.or_()
            if self.take()[0] != ")":
                raise ValueError("MATCH syntax not translated for PostgreSQL: unbalanced")
            return node
        if kind != "p":
            raise ValueError(f"MATCH syntax not translated for PostgreSQL: {kind or 'end'!r}")
        self.phrases.append(text)
        self.cols.append(self.filters[-1])
        return ("p", len(self.phrases) - 1)


def parse(match: str, columns: Sequence[str] | None = None) -> Query:
    return _Parser(match, columns).parse()


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


ALL_CLASSES = "ABCD"


def tsquery(tree: Any, lexemes: Sequence[Sequence[str]],
            classes: Sequence[str] = ()) -> str | None:
    """The tsquery text of a parsed MATCH, each phrase as its tokens (`lexemes`), restricted
    to its weight classes (`classes`, letters; none or all four: any); None for one that
    matches nothing (a phrase without tokens, as FTS5's `""`, matches no row)."""
    if tree is None:
        return None
    if tree[0] == "p":
        return _leaf(lexemes[tree[1]], classes[tree[1]] if classes else ALL_CLASSES)
    a, b = tsquery(tree[1], lexemes, classes), tsquery(tree[2], lexemes, classes)
    if tree[0] == "or":
        return f"({a} | {b})" if a and b else a or b
    if tree[0] == "and":
        return f"({a} & {b})" if a and b else None
    return (f"({a} & !{b})" if b else a) if a else None


def _leaf(toks: Sequence[str], cl: str) -> str | None:
    """One phrase's tsquery: each token, in the weight classes `cl` (none: no row)."""
    tail = "" if cl == ALL_CLASSES else ":" + cl
    return "(" + " & ".join(_quote(t) + tail for t in toks) + ")" if toks and cl else None


@dataclass(frozen=True)
class Compiled:
    """A MATCH as PostgreSQL reads it: the tsquery (None: no row matches), each phrase's
    tokens, in FTS5's phrase order, and each phrase's weight classes (rollups' column
    filters; empty for the events), and the parsed MATCH (`parse`'s tree; None: not kept)."""
    query: str | None
    phrases: tuple[tuple[str, ...], ...]
    classes: tuple[str, ...] = ()
    tree: Any = None


# rollups_fts' columns and the weight class each is kept in (see _ROLLUPS)
ROLLUP_CLASSES = {"title": "D", "body": "D", "tags": "D", "terms": "A", "level": "B",
                  "vocab": "C"}


def _classes(cols: frozenset[str] | None) -> str:
    """The weight classes of a column filter on rollups_fts. Title, body and tags are one
    class: a filter naming some of them but not all is refused (ValueError)."""
    if cols is None:
        return ALL_CLASSES
    d = cols & {"title", "body", "tags"}
    if d and len(d) != 3:
        raise ValueError("title, body and tags are one column class on PostgreSQL: a filter "
                         "names all three or none")
    return "".join(sorted({ROLLUP_CLASSES[c] for c in cols}))


# Each phrase's tokens, as the schema's fts_tokens (IMMUTABLE) gave them: a search or a
# recall compiles the same few phrases 4 to 10 times, a round trip each (1.5 ms)
_TOKENS: dict[tuple[str, str], tuple[str, ...]] = {}  # (store.path, phrase) -> tokens
TOKENS_KEPT = 4096


def _tokens(store: Any, phrases: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Each phrase's tokens by the store's own `fts_tokens`, asked once a phrase."""
    schema = str(getattr(store, "path", ""))  # the database and schema
    missing = list(dict.fromkeys(p for p in phrases if (schema, p) not in _TOKENS))
    if missing:
        rows = store.query("SELECT fts_tokens(x) FROM unnest(?::text[]) WITH ORDINALITY AS "
                           "u(x, n) ORDER BY n", (missing,))
        if len(_TOKENS) + len(missing) > TOKENS_KEPT:
            _TOKENS.clear()
        got = {p: tuple(r[0] or ()) for p, r in zip(missing, rows, strict=True)}
        _TOKENS.update(((schema, p), t) for p, t in got.items())
        return tuple(got[p] if p in got else _TOKENS[(schema, p)] for p in phrases)
    return tuple(_TOKENS[(schema, p)] for p in phrases)


def compile_match(store: Any, match: str, index: str = "events_fts") -> Compiled:
    """`match` as a tsquery, its phrases tokenized by the store's own `fts_tokens`."""
    rollups = _index(index).rollups
    q = parse(match, tuple(ROLLUP_CLASSES) if rollups else None)
    if not q.phrases:
        return Compiled(None, ())
    lexemes = _tokens(store, q.phrases)
    classes = tuple(_classes(c) for c in q.columns) if rollups else ()
    return Compiled(tsquery(q.tree, lexemes, classes), lexemes, classes, q.tree)


# --- reads ---------------------------------------------------------------------------------------

# Every tsquery is written into its statement as a literal, never a parameter: a prepared
# statement's generic plan cannot weigh `tsv @@ $1` and scans the table (psycopg prepares a
# statement run 5 times: fts_ids took 18 ms a call where its own plan took 2 ms).
# (a tagged event is read with its tags, in the third part: fts_event_tags)
_BRANCHES = ("SELECT id, tsv, ntok FROM events AS e WHERE tsv @@ {q} AND id <= ? AND NOT EXISTS "
             "(SELECT 1 FROM fts_event_tags AS g WHERE g.id = e.id)",
             "SELECT id, tsv, ntok FROM events_archive AS e WHERE tsv @@ {q} AND id <= ? AND "
             "NOT EXISTS (SELECT 1 FROM fts_event_tags AS g WHERE g.id = e.id)",
             "SELECT g.id, x.tsv || g.tsv, x.ntok + g.ntok FROM fts_event_tags AS g JOIN "
             "(SELECT id, tsv, ntok FROM events UNION ALL SELECT id, tsv, ntok FROM events_archive)"
             " AS x ON x.id = g.id WHERE (x.tsv || g.tsv) @@ {q} AND g.id <= ?")
_MATCHES = " UNION ALL ".join(_BRANCHES)


def _text(value: str) -> str:
    """A string as an SQL literal."""
    return "'" + value.replace("'", "''") + "'"


def _lit(query: str) -> str:
    """A tsquery's text as an SQL literal."""
    return _text(query) + "::tsquery"


@dataclass(frozen=True)
class _Index:
    """One full-text index as pg_fts reads it: the rows (id, tsv, ntok) matching `{q}` under
    one ceiling a `?` (`ceilings` of them), how many rows match `{q}` (`hits`), its top id,
    and the statements whose rows `matches` unites (`branches`)."""
    matches: str
    ceilings: int
    hits: str
    top: str
    rollups: bool = False
    branches: tuple[str, ...] = ()


_INDEXES = {
    "events_fts": _Index(_MATCHES, 3, "(SELECT count(*) FROM ("
                         + _MATCHES.replace("id <= ?", f"id <= {(1 << 63) - 1}") + ") AS h)",
                         "SELECT greatest((SELECT max(id) FROM events), "
                         "(SELECT max(id) FROM events_archive))", branches=_BRANCHES),
    "rollups_fts": _Index("SELECT id, tsv, ntok FROM fts_rollups WHERE {where} AND id <= ?",
                          1, "(SELECT count(*) FROM fts_rollups WHERE {where})",
                          "SELECT max(id) FROM fts_rollups", True)}


def _index(name: str) -> _Index:
    if name not in _INDEXES:
        raise ValueError(f"not an FTS index: {name!r}")
    return _INDEXES[name]


_LEXEME = re.compile(r"'(?:[^']|'')*'(?::([A-D]+))?")  # a quoted lexeme and its weights
_MARKS = re.compile(r"':[A-D]+")  # a lexeme's weights (its text holds no quote of its own)


def _rollup_where(query: str) -> str:
    """How a rollup matches `query`: through fts_rollup_words where every word has search's
    filter (classes A and D), else through the whole vector with its weights. The same rows
    either way."""
    if {m[1] for m in _LEXEME.finditer(query)} == {"AD"}:
        words = _lit(_MARKS.sub("'", query))
        return f"id IN (SELECT id FROM fts_rollup_words WHERE ad @@ {words})"
    return f"tsv @@ {_lit(query)}"


def _fill(template: str, query: str) -> str:
    """`template` with its tsquery `{q}` (the events) or its condition `{where}` (rollups)."""
    if "{where}" in template:
        template = template.replace("{where}", _rollup_where(query))
    return template.replace("{q}", _lit(query))


def _matches(query: str, index: str = "events_fts") -> str:
    return _fill(_index(index).matches, query)


def _newest(query: str, index: str, limit: int, above: int = 0) -> str:
    """`_matches` cut to its newest `limit` rows with id > above: each table's statement with
    its own ORDER BY and LIMIT, which the planner reads backwards along the primary key,
    checking `tsv @@` a row (2 ms for the newest 200 of 29,000 matches), where the statements
    united are first read whole through GIN and sorted (30 ms)."""
    parts = _index(index).branches or (_index(index).matches,)
    return " UNION ALL ".join(
        f"(SELECT * FROM ({_fill(b, query)}) AS b WHERE id > {int(above)} "
        f"ORDER BY id DESC LIMIT {int(limit)})" for b in parts)


_NO_CEILING = (1 << 63) - 1

# FTS5's bm25 (fts5_aux.c): for each phrase, IDF * tf * (k1 + 1) / (tf + k1 * (1 - b + b * D /
# avgdl)), summed and negated. tf of a phrase of several tokens: its rarest token's count.
_HITS = _INDEXES["events_fts"].hits
# each phrase's IDF and the average length, once a query; then the matching rows
_WEIGHTS = """
WITH w AS MATERIALIZED (  -- each phrase counted once, not once a matching row
    SELECT p.n, p.lx, CASE WHEN ln((s.rows - p.h + 0.5) / (p.h + 0.5)) > 0
                           THEN ln((s.rows - p.h + 0.5) / (p.h + 0.5)) ELSE 1e-6 END AS idf,
           s.toks / greatest(s.rows, 1) AS avgdl
      FROM (VALUES {phrases}) AS p(n, lx, h),
           (SELECT doc::float8 AS rows, toks::float8 AS toks FROM fts_stats WHERE term = '')
               AS s),
m AS MATERIALIZED ({matches})"""
_BM25 = _WEIGHTS + """
SELECT m.id, -coalesce((  -- a row's score from its own terms (see _SCORE)
    SELECT sum(idf * f * (1.2::float8 + 1.0)
               / (f + 1.2::float8 * (1 - 0.75::float8 + 0.75::float8 * m.ntok / avgdl))
               ORDER BY n)  -- in FTS5's order: the same float sums
      FROM (SELECT w.n, w.idf, w.avgdl, min(cardinality(u.positions)::float8) AS f
              FROM unnest(ts_filter(setweight(m.tsv, 'A', ?::text[]), '{a}')) AS u
              JOIN w ON u.lexeme = ANY(w.lx)
             GROUP BY w.n, w.idf, w.avgdl, w.lx HAVING count(*) = cardinality(w.lx)) AS pt),
    0) AS score
  FROM m
"""


# The same scores set-based, each phrase's rows joined to the matches: for ranking every match
# of the events (bare_match, fts_search: 29,000 rows of a common word) a fifth faster than a
# subquery a row; the rung's scored() keeps _BM25's form, where the planner, reading the
# matches as one row, joined the whole rung's scores to each row (4.5 s for 440 rollups).
_BM25_ALL = _WEIGHTS + """,
tf AS (  -- each matching row's count of each of the query's tokens it holds
    SELECT m.id, m.ntok, u.lexeme, cardinality(u.positions)::float8 AS f
      FROM m, unnest(ts_filter(setweight(m.tsv, 'A', ?::text[]), '{a}')) AS u),
pt AS (  -- each phrase a row holds, its count there (of several tokens: the rarest's)
    SELECT tf.id, tf.ntok, w.n, w.idf, w.avgdl, min(tf.f) AS f
      FROM tf JOIN w ON tf.lexeme = ANY(w.lx)
     GROUP BY tf.id, tf.ntok, w.n, w.idf, w.avgdl, w.lx HAVING count(*) = cardinality(w.lx))
SELECT m.id, -coalesce(s.score, 0) AS score
  FROM m LEFT JOIN (
      SELECT id, sum(idf * f * (1.2::float8 + 1.0)
                     / (f + 1.2::float8 * (1 - 0.75::float8 + 0.75::float8 * ntok / avgdl))
                     ORDER BY n) AS score  -- in FTS5's order: the same float sums
        FROM pt GROUP BY id) AS s USING (id)
"""

def _phrases(c: Compiled) -> tuple[str, list[Any]]:
    """_BM25's VALUES rows (each phrase's tokens and how many rows hold it: fts_stats' doc for
    one token, else counted through GIN, a statement of its own) and their parameters."""
    rows, params = [], []
    for n, p in enumerate(c.phrases):
        if len(p) == 1:
            rows.append(f"({n}, ?::text[], coalesce((SELECT doc FROM fts_stats WHERE term = ?), "
                        "0)::float8)")
            params += [list(p), p[0]]
        elif p:
            q = "(" + " & ".join(_quote(t) for t in p) + ")"
            rows.append(f"({n}, ?::text[], ({_fill(_HITS, q)})::float8)")
            params.append(list(p))
        else:
            rows.append(f"({n}, ?::text[], 0::float8)")
            params.append([])
    return ", ".join(rows), params


# rollups_fts' bm25: as _BM25, each phrase counted in its filter's classes only (its n from
# the kept counts of the masks sharing a class with it; its tf from the row's positions in
# those classes), and the score in FTS5's own order of operations (fts5Bm25Function:
# idf * ((tf * (k1 + 1)) / (tf + k1 * (1 - b + b * D / avgdl))), summed from the first
# phrase), so a score is FTS5's bit for bit (rung_bm25 checks one so).
_BM25_ROLLUPS = """
WITH w AS MATERIALIZED (
    SELECT p.n, p.lx, p.cu, CASE WHEN ln((s.rows - p.h + 0.5) / (p.h + 0.5)) > 0
                                 THEN ln((s.rows - p.h + 0.5) / (p.h + 0.5)) ELSE 1e-6 END AS idf,
           s.toks / greatest(s.rows, 1) AS avgdl
      FROM (VALUES {phrases}) AS p(n, lx, cu, h),
           (SELECT doc::float8 AS rows, toks::float8 AS toks FROM fts_rollup_stats
             WHERE term = '' AND mask = 0) AS s),
m AS MATERIALIZED ({matches})
SELECT m.id, -coalesce((
    SELECT sum(idf * ((f * (1.2::float8 + 1.0))
                      / (f + 1.2::float8 * (1 - 0.75::float8 + 0.75::float8 * m.ntok / avgdl)))
               ORDER BY n)
      FROM (SELECT w.n, w.idf, w.avgdl,
                   min(width_bucket(w.cu[2], u.positions) - width_bucket(w.cu[1], u.positions)
                       + width_bucket(w.cu[4], u.positions) - width_bucket(w.cu[3], u.positions)
                       + width_bucket(w.cu[6], u.positions)
                       - width_bucket(w.cu[5], u.positions))::float8 AS f
              FROM unnest(ts_filter(setweight(setweight(m.tsv, 'D'), 'A', ?::text[]), '{a}'))
                   AS u
              JOIN w ON u.lexeme = ANY(w.lx)
             GROUP BY w.n, w.idf, w.avgdl, w.lx HAVING count(*) = cardinality(w.lx)) AS pt),
    0) AS score
  FROM m
"""
_MASKS = {cl: [m for m in range(1, 16) if any(m >> "ABCD".index(x) & 1 for x in cl)]
          for cl in ("A", "B", "C", "D", "AD", "ACD", "ABCD")}


# Where each class's positions lie (see _ROLLUPS): (class, after, up to)
_SPANS = (("D", 0, 999), ("A", 999, 4999), ("D", 4999, 8999), ("B", 8999, 12999),
          ("C", 12999, 16383))


def _cuts(cl: str) -> list[int]:
    """A phrase's count in the classes `cl` from a term's sorted positions, as three spans
    (after, up to]: the positions in one are width_bucket(up to) - width_bucket(after), a
    binary search each (a function of a subquery over the positions cost 10 us a term)."""
    spans: list[list[int]] = []
    for c, after, upto in _SPANS:
        if c in cl:
            if spans and spans[-1][1] == after:
                spans[-1][1] = upto
            else:
                spans.append([after, upto])
    spans += [[0, 0]] * (3 - len(spans))
    return [x for span in spans for x in span]


def _masks(cl: str) -> list[int]:
    """The kept masks that share a class with `cl`."""
    return _MASKS.get(cl) or [m for m in range(1, 16) if any(m >> "ABCD".index(x) & 1
                                                            for x in cl)]


def _rollup_phrases(c: Compiled) -> tuple[str, list[Any]]:
    """_BM25_ROLLUPS' VALUES rows and their parameters (as `_phrases`)."""
    rows, params = [], []
    for n, (p, cl) in enumerate(zip(c.phrases, c.classes, strict=True)):
        if len(p) == 1:
            rows.append(f"({n}, ?::text[], ?::int[], coalesce((SELECT sum(doc) FROM fts_rollup_stats "
                        "WHERE term = ? AND mask = ANY(?::smallint[])), 0)::float8)")
            params += [list(p), _cuts(cl), p[0], _masks(cl)]
        elif p and cl:
            hits = _fill(_INDEXES["rollups_fts"].hits, _leaf(p, cl) or "")
            rows.append(f"({n}, ?::text[], ?::int[], ({hits})::float8)")
            params += [list(p), _cuts(cl)]
        else:
            rows.append(f"({n}, ?::text[], ?::int[], 0::float8)")
            params += [list(p), _cuts(cl)]
    return ", ".join(rows), params


def scored(store: Any, c: Compiled, ceiling: int | None, limit: int,
           best_first: bool, index: str = "events_fts") -> list[tuple[int, float]]:
    """(id, bm25) of the rows matching `c` with id <= ceiling: best first (ties by id) or
    newest first, at most `limit` (-1: all)."""
    if c.query is None:
        return []
    top = _NO_CEILING if ceiling is None else ceiling
    order = "score, id" if best_first else "id DESC"
    rollups = _index(index).rollups
    values, params = _rollup_phrases(c) if rollups else _phrases(c)
    matches = _matches(c.query, index)
    if not best_first and limit >= 0:  # a row's score is its own: only the rows returned
        matches = _newest(c.query, index, limit)
    form = _BM25_ROLLUPS if rollups else _BM25_ALL if best_first else _BM25
    sql = form.replace("{phrases}", values).replace(
        "{matches}", matches)
    tokens = sorted({t for p in c.phrases for t in p})
    rows = store.query(f"{sql} ORDER BY {order} LIMIT ?",
                       (*params, *[top] * _index(index).ceilings, tokens, limit))
    return [(int(r[0]), float(r[1])) for r in rows]


def ids(store: Any, c: Compiled, ceiling: int | None, limit: int, above: int = 0,
        index: str = "events_fts") -> list[int]:
    """The ids of the rows matching `c` with above < id <= ceiling, newest first, at most
    `limit` (-1: all), unscored."""
    if c.query is None:
        return []
    top = _NO_CEILING if ceiling is None else ceiling
    if limit >= 0 and _index(index).rollups and (on := _newest_on_rung(c, top, limit, above)):
        return [int(r[0]) for r in store.query(on)]
    if limit >= 0:
        rows = store.query(f"SELECT id FROM ({_newest(c.query, index, limit, above)}) AS m "
                           f"ORDER BY id DESC LIMIT {int(limit)}", [top] * _index(index).ceilings)
        return [int(r[0]) for r in rows]
    rows = store.query(f"SELECT id FROM ({_matches(c.query, index)}) AS m WHERE id > ? "
                       "ORDER BY id DESC", (*[top] * _index(index).ceilings, above))
    return [int(r[0]) for r in rows]


_RECALLS = "ACD"  # the classes of recall's filter on a rung: every column but the level


def _level(c: Compiled, i: int) -> int | None:
    """The rung phrase `i` names (`level : "N"`: its one token a number as FTS5 reads the level
    column's), else None."""
    if c.classes[i] != "B" or len(c.phrases[i]) != 1:
        return None
    level = c.phrases[i][0]
    if not (level.isascii() and level.isdigit()) or str(int(level)) != level:
        return None
    return int(level)


def _holds(c: Compiled, node: Any, level: int, held: str) -> str | None:
    """Whether a rollup `o` of the rung, which holds the term `held`, holds `node` of a rung's
    MATCH: a condition on fts_rollup_terms, "TRUE" or "FALSE" where `held` decides it; None
    when a phrase is not in recall's classes or has no token."""
    if node[0] == "p":
        toks, cl = c.phrases[node[1]], c.classes[node[1]]
        if not toks or cl != _RECALLS:
            return None
        return " AND ".join(
            f"EXISTS (SELECT 1 FROM fts_rollup_terms AS x WHERE x.term = {_text(t)} AND "
            f"x.level = {level} AND x.id = o.id)" for t in dict.fromkeys(toks) if t != held
        ) or "TRUE"
    a, b = _holds(c, node[1], level, held), _holds(c, node[2], level, held)
    if a is None or b is None:
        return None
    if node[0] == "or":
        return "TRUE" if "TRUE" in (a, b) else f"({a} OR {b})"
    if node[0] == "not":
        b = "FALSE" if b == "TRUE" else f"NOT ({b})"
    return b if a == "TRUE" else a if b == "TRUE" else f"({a} AND {b})"


def _drivers(c: Compiled, node: Any) -> list[str]:
    """Terms one of which every rollup holding `node` holds (a phrase's first token; either
    side of AND, both of OR, the left of NOT)."""
    if node[0] == "p":
        return [c.phrases[node[1]][0]] if c.phrases[node[1]] else []
    return _drivers(c, node[1]) + (_drivers(c, node[2]) if node[0] == "or" else [])


def _newest_on_rung(c: Compiled, top: int, limit: int, above: int) -> str | None:
    """`ids`' statement (ids newest first, above < id <= top, at most `limit`) read from
    fts_rollup_terms, for a rung's MATCH in recall's classes (`level : "N" AND {title body
    terms vocab tags} : (...)`): each driving term's rollups of the rung newest first along
    the B-tree, each tested for the rest of the MATCH and cut at `limit`; else None. Its
    terms are literals, as the tsqueries are (a prepared statement's generic plan tested
    each candidate by a subplan: 8 to 15 ms where its own plan took 1.3)."""
    t = c.tree
    if t is None or t[0] != "and" or t[1][0] != "p" or (level := _level(c, t[1][1])) is None:
        return None
    parts = []
    for term in dict.fromkeys(_drivers(c, t[2])):
        cond = _holds(c, t[2], level, term)
        if cond is None:
            return None
        parts.append(f"(SELECT o.id FROM fts_rollup_terms AS o WHERE o.term = {_text(term)} "
                     f"AND o.level = {level} AND o.id <= {int(top)} AND o.id > {int(above)} "
                     f"AND {cond} ORDER BY o.id DESC LIMIT {int(limit)})")
    if not parts:
        return None
    return (f"SELECT id FROM ({' UNION ALL '.join(parts)}) AS m GROUP BY id ORDER BY id DESC "
            f"LIMIT {int(limit)}")


def count_upto(store: Any, c: Compiled, top: int, cap: int, index: str = "events_fts") -> int:
    """How many rows with id <= top match `c`, at most `cap` (-1: all). A MATCH of one token
    (every phrase that one token, in one column class, and no NOT) under a ceiling at the
    index's top id is its kept count (fts_stats' doc, the sum of fts_rollup_stats' masks that
    share a class with it): the rows a scan of the GIN index would count (a common word's
    20,000 at 100,000 events: 30 to 70 ms, the kept count 1 ms)."""
    return counts_upto(store, [c], top, cap, index)[0]


def _on_level(c: Compiled) -> tuple[int, tuple[str, ...], str] | None:
    """(level, the other phrase's tokens, its classes) when `c` is a rung's MATCH of one word
    (`level : "N" AND {...} : "word"`: two phrases, AND, the first the level column's one
    number); else None."""
    if len(c.phrases) != 2 or "|" in (c.query or "") or "!" in (c.query or ""):
        return None
    if (level := _level(c, 0)) is None:
        return None
    if len(c.phrases[1]) != 1 or "B" in c.classes[1] or not c.classes[1]:
        return None
    return level, c.phrases[1], c.classes[1]


def _kept(c: Compiled, index: str) -> tuple[str, list[Any]] | None:
    """The statement of `c`'s kept count and its parameters, when `c` is one token in one
    column class with no NOT, or a rung's MATCH of one word (`_on_level`: the kept counts of
    that rung) (see count_upto); else None."""
    if c.query is None or "!" in c.query:
        return None
    if _index(index).rollups and (on := _on_level(c)) is not None:
        return ("SELECT coalesce(sum(doc), 0) FROM fts_rollup_stats WHERE term = ? "
                "AND level = ? AND mask = ANY(?::smallint[])", [on[1][0], on[0], _masks(on[2])])
    if len(set(c.phrases)) != 1 or len(c.phrases[0]) != 1:
        return None
    if len(set(c.classes)) > 1 or not all(c.classes):
        return None
    if _index(index).rollups:
        return ("SELECT coalesce(sum(doc), 0) FROM fts_rollup_stats WHERE term = ? "
                "AND mask = ANY(?::smallint[])", [c.phrases[0][0], _masks(c.classes[0])])
    return "SELECT coalesce((SELECT doc FROM fts_stats WHERE term = ?), 0)", [c.phrases[0][0]]


def counts_upto(store: Any, cs: Sequence[Compiled], top: int, cap: int,
                index: str = "events_fts") -> list[int]:
    """count_upto of each of `cs`: the kept counts of those that have one in one statement
    (with the index's top id), the others each by its own."""
    kept = {i: k for i, c in enumerate(cs) if (k := _kept(c, index)) is not None}
    out: dict[int, int] = {}
    if kept:
        row = store.query("SELECT " + ", ".join(f"({sql})" for sql, _ in kept.values())
                          + f", ({_index(index).top})",
                          [p for _, params in kept.values() for p in params])[0]
        high = row[-1]
        if high is None or top >= int(high):
            out = {i: int(n) if cap < 0 else min(int(n), cap)
                   for i, n in zip(kept, row[:-1], strict=True)}
    return [out[i] if i in out else 0 if c.query is None
            else len(ids(store, c, top, cap, index=index)) for i, c in enumerate(cs)]


def matching(c: Compiled, index: str = "events_fts") -> str:
    """A statement of the ids of every row matching `c` (none when it matches nothing), to
    nest in another statement: it takes no parameters."""
    if c.query is None:
        return "SELECT NULL::bigint AS id WHERE false"
    return f"SELECT id FROM ({_matches(c.query, index)}) AS m".replace(
        "id <= ?", f"id <= {_NO_CEILING}")


def count(store: Any, c: Compiled, index: str = "events_fts") -> int:
    """How many rows match `c`: its kept count when it has one (see count_upto; a common
    word's 8,600 rollups of 75,000 at a million events: 12 to 50 ms counted, 1 ms kept)."""
    if _kept(c, index) is not None:
        return count_upto(store, c, _NO_CEILING, -1, index)
    return int(store.scalar(f"SELECT count(*) FROM ({matching(c, index)}) AS c") or 0)


def top_sql(index: str = "events_fts") -> str:
    """The statement of the highest id the index holds (hot or archived): `marks.top`."""
    return _index(index).top


def doc_freqs(store: Any, stems: Sequence[str]) -> dict[str, int]:
    """How many rows (hot and archived) hold each term; terms no row holds are left out, as
    fts5vocab has no row for them."""
    rows = store.query("SELECT term, doc FROM fts_stats WHERE term = ANY(?) AND term <> '' "
                       "AND doc > 0",
                       (list(dict.fromkeys(stems)),))
    return {str(r[0]): int(r[1]) for r in rows if int(r[1])}


def clean_pending(store: Any, table: str = "events") -> None:
    """Merge the pending list of `table`'s GIN index into its tree (after a bulk append, so no
    lookup scans it). Only the index's owner may: for another role it is left to autovacuum."""
    import psycopg

    try:
        with store.transaction():  # a savepoint: a refusal leaves the caller's writes alone
            store.execute(f"SELECT gin_clean_pending_list('{table}_tsv'::regclass)")
    except (StoreError, psycopg.Error):
        pass


# --- snippet() -----------------------------------------------------------------------------------

# A token of the body, as fts_tokens splits it: letters and digits, with the combining marks
# it drops before splitting
_TOKEN = re.compile(r"(?:[^\W_]|[\u0300-\u036f])+")
SNIPPET_TOKENS = 24
ELLIPSIS = "…"


def snippets(store: Any, c: Compiled, ids_: Sequence[int], max_chars: int) -> dict[int, str]:
    """FTS5's snippet(events_fts, 0, '', '', '…', 24) of each matching row of `ids_` whose
    body has at most `max_chars` characters."""
    if c.query is None or not ids_:
        return {}
    marks = ",".join("?" * len(ids_))
    # the rows of `ids_` that match, each looked up by its id (not every matching row read)
    among = _matches(c.query).replace("id <= ?", "id = ANY(?::bigint[])")
    rows = store.query(
        f"SELECT id, body, fts_tokens(body) FROM history WHERE id IN ({marks}) "
        f"AND length(body) <= ? AND id IN (SELECT id FROM ({among}) AS m)",
        (*ids_, max_chars, *[list(ids_)] * _index("events_fts").ceilings))
    out: dict[int, str] = {}
    for r in rows:
        cut = snippet(str(r[1]), list(r[2] or ()), c.phrases)
        if cut is not None:
            out[int(r[0])] = cut
    return out


def _instances(lexemes: Sequence[str], phrases: Sequence[Sequence[str]]) -> list[tuple[int, int]]:
    """(phrase, token offset) of each phrase instance in the body, in offset order."""
    found = []
    for at in range(len(lexemes)):
        for i, p in enumerate(phrases):
            if p and tuple(lexemes[at:at + len(p)]) == tuple(p):
                found.append((i, at))
    return found


def _window_score(inst: list[tuple[int, int]], sizes: Sequence[int], ndoc: int, start: int,
                  ntok: int) -> tuple[int, int]:
    """fts5SnippetScore: a window's score (1000 a phrase first seen, 1 each again) and the
    start that centres its hits."""
    seen: set[int] = set()
    score, first, last = 0, -1, 0
    for p, off in inst:
        if start <= off < start + ntok:
            score += 1 if p in seen else 1000
            seen.add(p)
            first = off if first < 0 else first
            last = off + sizes[p]
    adj = first - (ntok - (last - first)) // 2
    adj = ndoc - ntok if adj + ntok > ndoc else adj
    return score, max(adj, 0)


def _sentence_starts(body: str, spans: Sequence[tuple[int, int]]) -> list[int]:
    """Tokens that open a sentence: the first, and each after a '.' or ':' and white space."""
    starts = [0] if spans else []
    for i, (s, _) in enumerate(spans[1:], 1):
        j = s - 1
        while j >= 0 and body[j] in " \t\n\r":
            j -= 1
        if j != s - 1 and j >= 0 and body[j] in ".:":
            starts.append(i)
    return starts


def _best_start(body: str, spans: Sequence[tuple[int, int]], inst: list[tuple[int, int]],
                sizes: Sequence[int], ntok: int) -> int:
    """fts5SnippetFunction's choice of the window's first token."""
    ndoc, best, start = len(spans), 0, 0
    firsts = _sentence_starts(body, spans)
    for _, off in inst:
        score, adj = _window_score(inst, sizes, ndoc, off, ntok)
        if score > best:
            best, start = score, adj
        if firsts and ndoc > ntok:
            jj = 0
            while jj < len(firsts) - 1 and firsts[jj + 1] <= off:
                jj += 1
            if firsts[jj] < off:
                score = _window_score(inst, sizes, ndoc, firsts[jj], ntok)[0]
                score += 120 if firsts[jj] == 0 else 100
                if score > best:
                    best, start = score, firsts[jj]
    return start


def snippet(body: str, lexemes: Sequence[str], phrases: Sequence[Sequence[str]],
            ntok: int = SNIPPET_TOKENS) -> str | None:
    """FTS5's snippet() of `body` (no markers, ELLIPSIS where cut, `ntok` tokens), its tokens
    (`lexemes`, as fts_tokens gives them) matched against `phrases`; None when the body's
    tokens cannot be lined up with `lexemes`."""
    spans = [m.span() for m in _TOKEN.finditer(body)]
    if len(spans) != len(lexemes):
        return None
    if not spans:
        return body
    inst = _instances(lexemes, phrases)
    start = _best_start(body, spans, inst, [len(p) for p in phrases], ntok)
    end = min(start + ntok, len(spans)) - 1
    text = body[spans[start][0] if start else 0:spans[end][1]]
    head = ELLIPSIS if start > 0 else ""
    tail = body[spans[end][1]:] if start + ntok - 1 >= len(spans) - 1 else ELLIPSIS
    return head + text + tail
