"""What an MCP watch saw last: read back from its own events, so a restart loses nothing.

A watch (`[[mcp.watch]]`) records a `watch_baseline` event the first time it sees a result and
a `watch_change` event each time the result differs; both carry the watch's key, the result's
hash and its text in their meta. This module finds the newest of them for a key (hot or
archived) among the rows the loop wrote itself: an imported row is never loop state, whatever
kind it claims. It never writes: the loop records the events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .db import Store

KINDS = ("watch_baseline", "watch_change")


@dataclass(frozen=True)
class Seen:
    hash: str
    text: str
    event_id: int


def last_seen(store: Store, key: str) -> Seen | None:
    """The newest result the watch `key` recorded itself (imported rows are not read), or None
    when it has never run."""
    rows = store.query(
        "SELECT id, meta FROM history WHERE kind IN (?, ?) "
        "AND json_extract(meta, '$.watch') = ? AND json_extract(meta, '$.imported') IS NULL "
        "ORDER BY id DESC LIMIT 1", (*KINDS, key))
    if not rows:
        return None
    meta = json.loads(rows[0]["meta"] or "{}")
    return Seen(str(meta.get("hash", "")), str(meta.get("text", "")), int(rows[0]["id"]))
