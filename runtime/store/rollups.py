"""Rollups: the ladder's rungs above raw events. Read side only until reflect seals them."""

from __future__ import annotations

from dataclasses import dataclass

from .db import Store


@dataclass(frozen=True)
class Rollup:
    id: int
    level: int
    parent_id: int | None
    source_range: str | None
    first_ts: str | None
    last_ts: str | None
    title: str
    body: str
    method: str


def _from_row(r) -> Rollup:  # noqa: ANN001
    return Rollup(r["id"], r["level"], r["parent_id"], r["source_range"], r["first_ts"],
                  r["last_ts"], r["title"], r["body"], r["method"])


def newest_per_level(store: Store) -> list[Rollup]:
    """The newest rollup at each level, coarsest first: the top of the context's staircase."""
    rows = store.query(
        "SELECT * FROM rollups WHERE id IN (SELECT MAX(id) FROM rollups GROUP BY level) "
        "ORDER BY level DESC"
    )
    return [_from_row(r) for r in rows]


def fts_search(store: Store, match: str, limit: int = 10) -> list[tuple[Rollup, float]]:
    rows = store.query(
        """
        SELECT r.*, f.score FROM (
            SELECT rowid, bm25(rollups_fts) AS score FROM rollups_fts
             WHERE rollups_fts MATCH ? ORDER BY score LIMIT ?) AS f
          JOIN rollups AS r ON r.id = f.rowid ORDER BY f.score, r.id
        """,
        (match, limit),
    )
    return [(_from_row(r), float(r["score"])) for r in rows]
