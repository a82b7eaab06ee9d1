"""The history's marks, read once for one recall on PostgreSQL.

A mark is one number a reader checks before it trusts what memory keeps or to freeze a
ceiling: the newest id of a table (rollups, tags, redactions: ids only grow), the server's
file of a table (`fts._files`), an index's top id (`pg_fts.top_id`) and the last event under
an episode (`rollups.episodes_cover_up_to`). On SQLite each is read in process in
microseconds. On PostgreSQL each is a round trip, and one recall asked for eight of them in
six statements (about 1 ms of 11 at 100,000 events, 2 ms of 30 at a million).

`one_moment(store)` runs a recall's reads in one snapshot (`store.snapshot()`: what the
marks say is then true of every row read after them), and the first mark asked for inside it
reads all of `MARKS` in one statement; later ones are answered from it. Outside, `read` asks
the server for just the marks it is given, in one statement. Read-only: nothing here writes,
and nothing here knows what the marks are kept for (memory's kept counts do).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from . import pg_fts


def newest(table: str) -> str:
    """The mark of a table's newest id (0 when it is empty)."""
    return f"(SELECT coalesce(max(id), 0) FROM {table})"


def file_of(table: str) -> str:
    """The mark of a table's file on the server (new when the table is made again or
    emptied by TRUNCATE)."""
    return f"pg_relation_filenode('{table}')"


def top(index: str) -> str:
    """The mark of a full-text index's top id (hot or archived)."""
    return f"({pg_fts.top_sql(index)})"


EPISODES_COVER = "(SELECT coalesce(max(last_event), 0) FROM rollups WHERE level = 1)"

# every mark a recall asks for (fts.history_stamp, fts.rollups_stamp, the indexes' tops, the
# episodes' cover): read together the first time one is asked for in `one_moment`
MARKS = (*(newest(t) for t in ("rollups", "tags", "redactions")),
         *(file_of(t) for t in ("events", "fts_stats", "fts_rollups", "fts_rollup_stats")),
         top("events_fts"), top("rollups_fts"), EPISODES_COVER)

_READ: ContextVar[dict[int, dict[str, int]] | None] = ContextVar("marks_read", default=None)


def read(store: Any, marks: Sequence[str]) -> tuple[int, ...]:
    """Each of `marks` (SQL expressions), 0 for a NULL: inside `one_moment` on PostgreSQL from
    its one reading of MARKS, else in one statement of their own (SQLite's too, for the marks
    both dialects write alike: `newest`, `EPISODES_COVER`)."""
    kept = _READ.get()
    if kept is None or not set(marks) <= set(MARKS):
        return _select(store, marks)
    got = kept.get(id(store))
    if got is None:
        got = kept[id(store)] = dict(zip(MARKS, _select(store, MARKS), strict=True))
    return tuple(got[m] for m in marks)


def _select(store: Any, marks: Sequence[str]) -> tuple[int, ...]:
    return tuple(int(x or 0) for x in store.query("SELECT " + ", ".join(marks))[0])


@contextlib.contextmanager
def one_moment(store: Any) -> Iterator[None]:
    """On PostgreSQL, the reads inside in one snapshot and the marks read once (see the
    module); nested, the outer one's. On SQLite nothing: its reads are in process, and a
    read transaction held across a recall would hold the connection's lock."""
    if getattr(store, "dialect", "sqlite") != "postgres" or _READ.get() is not None:
        yield
        return
    token = _READ.set({})
    try:
        with store.snapshot():
            yield
    finally:
        _READ.reset(token)
