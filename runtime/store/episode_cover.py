"""Episode cover: which level-1 rollup (episode) covers an event id, one indexed look-up.

Owns the one read the semantic probe (`memory.nearest`) makes of the ladder: episodes' spans
never overlap, so the first episode ending at or after an id is the only one that may hold it
(the (level, last_event) index). Read-only.
"""

from __future__ import annotations

from .db import Store


def covering(store: Store, event_id: int) -> int | None:
    """The id of the level-1 rollup whose span holds `event_id`, or None (no episode covers
    it yet). It reads two columns only: an episode's vocabulary may be 200,000 characters."""
    rows = store.query("SELECT id, first_event FROM rollups WHERE level = 1 AND "
                       "last_event >= ? AND first_event IS NOT NULL ORDER BY last_event "
                       "LIMIT 1", (event_id,))
    return int(rows[0][0]) if rows and int(rows[0][1]) <= event_id else None
