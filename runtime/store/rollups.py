"""Rollups: the ladder's rungs above raw events (level 1 episodes, level 2 chapters, ...).

Owns reading the ladder and sealing a rung. What a reader walks over the whole ladder is
read a bounded page at a time (`unparented_groups`, `newest_unparented`, `recent_at_level`),
never as a list of every rung, so reflect's memory does not grow with the history. A seal is
one transaction: it re-checks, under the write lock, that its block is still unsealed (so a
retried or concurrent reflect cannot seal it twice), inserts the rollup, and sets `parent_id`
on its children. A sealed rollup never changes; the database refuses it (migration m002).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import marks, pg_fts
from .db import Store, new_id
from .events import now_iso


@dataclass(frozen=True)
class Rollup:
    id: int
    level: int
    parent_id: int | None
    source_range: str | None
    first_event: int | None
    last_event: int | None
    first_ts: str | None
    last_ts: str | None
    title: str
    body: str
    terms: str
    method: str
    created_at: str = ""
    vocab: str = ""  # a level-1 episode's whole vocabulary (m008); empty before and above


def _from_row(r: Any) -> Rollup:
    return Rollup(r["id"], r["level"], r["parent_id"], r["source_range"], r["first_event"],
                  r["last_event"], r["first_ts"], r["last_ts"], r["title"], r["body"],
                  r["terms"], r["method"], r["created_at"],
                  (r["vocab"] or "") if "vocab" in r.keys() else "")


def get(store: Store, rollup_id: int) -> Rollup | None:
    rows = store.query("SELECT * FROM rollups WHERE id = ?", (rollup_id,))
    return _from_row(rows[0]) if rows else None


def get_many(store: Store, ids: Sequence[int]) -> dict[int, Rollup]:
    """The rollups of these ids that exist, by id (one statement)."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    return {int(r["id"]): _from_row(r) for r in store.query(
        f"SELECT * FROM rollups WHERE id IN ({marks})", tuple(ids))}


def all_(store: Store) -> list[Rollup]:
    return [_from_row(r) for r in store.query("SELECT * FROM rollups ORDER BY id")]


def newest_per_level(store: Store) -> list[Rollup]:
    """The newest rollup at each level, coarsest first: the top of the context's staircase."""
    rows = store.query(
        "SELECT * FROM rollups WHERE id IN (SELECT MAX(id) FROM rollups GROUP BY level) "
        "ORDER BY level DESC"
    )
    return [_from_row(r) for r in rows]


def children(store: Store, parent_id: int) -> list[Rollup]:
    return [_from_row(r) for r in store.query(
        "SELECT * FROM rollups WHERE parent_id = ? ORDER BY id", (parent_id,))]


def at_level(store: Store, level: int, unparented_only: bool = False) -> list[Rollup]:
    extra = " AND parent_id IS NULL" if unparented_only else ""
    return [_from_row(r) for r in store.query(
        f"SELECT * FROM rollups WHERE level = ?{extra} ORDER BY id", (level,))]


def unparented_groups(store: Store, level: int, size: int) -> Iterator[list[Rollup]]:
    """The unparented rollups of one level, oldest first, `size` at a time: only full groups
    (the last, short one is not yielded). Each group is read when the one before it has been
    used, after its last id, so sealing a group's parent meanwhile changes nothing here; at
    most `size` rollups are held at once, however long the ladder."""
    last = 0
    while True:
        group = [_from_row(r) for r in store.query(
            "SELECT * FROM rollups WHERE level = ? AND parent_id IS NULL AND id > ? "
            "ORDER BY id LIMIT ?", (level, last, size))]
        if len(group) < size:
            return
        yield group
        last = group[-1].id


def newest_unparented(store: Store, level: int, limit: int) -> list[Rollup]:
    """At most `limit` unparented rollups of one level, newest first."""
    return [_from_row(r) for r in store.query(
        "SELECT * FROM rollups WHERE level = ? AND parent_id IS NULL ORDER BY id DESC LIMIT ?",
        (level, limit))]


def recent_at_level(store: Store, level: int, since: str, limit: int) -> list[Rollup]:
    """The newest `limit` rollups of one level created at or after `since`, oldest first."""
    rows = store.query(
        "SELECT * FROM rollups WHERE level = ? AND created_at >= ? ORDER BY id DESC LIMIT ?",
        (level, since, limit))
    return [_from_row(r) for r in reversed(rows)]


def count_unparented(store: Store, level: int) -> int:
    return int(store.scalar(
        "SELECT COUNT(*) FROM rollups WHERE level = ? AND parent_id IS NULL", (level,)) or 0)


def top_level(store: Store) -> int:
    return int(store.scalar("SELECT COALESCE(MAX(level), 0) FROM rollups") or 0)


def counts_per_level(store: Store) -> dict[int, int]:
    return {int(r[0]): int(r[1]) for r in store.query(
        "SELECT level, COUNT(*) FROM rollups GROUP BY level ORDER BY level")}


def episode_covering(store: Store, event_id: int) -> int | None:
    """The id of the level-1 rollup whose span holds `event_id`, or None (no episode covers it
    yet): episodes' spans never overlap, so the first one ending at or after the id is the only
    one that may hold it (the (level, last_event) index). It reads two columns only: an
    episode's vocabulary may be 200,000 characters."""
    rows = store.query("SELECT id, first_event FROM rollups WHERE level = 1 AND "
                       "last_event >= ? AND first_event IS NOT NULL ORDER BY last_event "
                       "LIMIT 1", (event_id,))
    return int(rows[0][0]) if rows and int(rows[0][1]) <= event_id else None


def episodes_cover_up_to(store: Store) -> int:
    """The highest event id under a level-1 rollup (0 when none): sealing resumes after it."""
    return marks.read(store, [marks.EPISODES_COVER])[0]


def seal(store: Store, *, level: int, first_event: int | None, last_event: int | None,
         source_range: str | None, first_ts: str | None, last_ts: str | None, title: str,
         body: str, terms: str, method: str, child_ids: list[int] | None = None,
         vocab: str | None = None) -> int | None:
    """Insert one rollup (and adopt its children) in one transaction; None if already sealed."""
    with store.transaction() as db:
        if child_ids:
            marks = ",".join("?" * len(child_ids))
            free = db.execute(
                f"SELECT COUNT(*) FROM rollups WHERE id IN ({marks}) AND parent_id IS NULL",
                tuple(child_ids)).fetchone()[0]
            if free != len(child_ids):
                return None
        elif level == 1 and first_event is not None:
            covered = db.execute(
                "SELECT COALESCE(MAX(last_event), 0) FROM rollups WHERE level = 1").fetchone()[0]
            if covered >= first_event:
                return None
        cur = db.execute(
            "INSERT INTO rollups(level, parent_id, source_range, first_event, last_event, "
            "first_ts, last_ts, title, body, terms, method, created_at, vocab) "
            "VALUES (?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (level, source_range, first_event, last_event, first_ts, last_ts, title, body,
             terms, method, now_iso(), vocab))
        rid = new_id(cur)
        if child_ids:
            marks = ",".join("?" * len(child_ids))
            db.execute(f"UPDATE rollups SET parent_id = ? WHERE id IN ({marks})",
                       (rid, *child_ids))
        return rid


def fts_search(store: Store, match: str, limit: int = 10, level: int | None = None,
               columns: str = "title body terms tags") -> list[tuple[Rollup, float]]:
    """Rollups whose title, body, card or tags match (an FTS5 expression), best bm25 first;
    with `level`, one rung only (the level is an indexed column, so this costs that rung's
    matches, not the whole ladder's). `columns` adds `vocab` for recall."""
    expr = f"{{{columns}}} : ({match})"
    if level is not None:
        expr = f'level : "{int(level)}" AND {expr}'
    if getattr(store, "dialect", "sqlite") == "postgres":
        found = pg_fts.scored(store, pg_fts.compile_match(store, expr, "rollups_fts"), None,
                              limit, True, "rollups_fts")
        got = get_many(store, [i for i, _ in found])
        return [(got[i], score) for i, score in found if i in got]
    rows = store.query(
        """
        SELECT r.*, f.score FROM (
            SELECT rowid, bm25(rollups_fts) AS score FROM rollups_fts
             WHERE rollups_fts MATCH ? ORDER BY score LIMIT ?) AS f
          JOIN rollups AS r ON r.id = f.rowid ORDER BY f.score, r.id
        """,
        (expr, limit),
    )
    return [(_from_row(r), float(r["score"])) for r in rows]
