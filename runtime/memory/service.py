"""memory.service: one object every door asks for recall, search and walk (issue 39 item 4).

Owns what a memory read needs besides its words: the store it reads, the settings it takes
its figures from (recall's budget and mode, the walk's threshold, the semantic channel), the
semantic channel itself (an `embed.SemanticCache` the caller keeps for as long as it lives:
the loop from tick to tick, the MCP server from call to call, one CLI call for itself) and
the owner's time zone (the times a block shows). The CLI, the MCP server, the
loop's recall reflex and the tools the model calls all go through `Memory`, so "try the
semantic channel, fall back to lexical" and its WARNING live here once:

- recall: `recall_hybrid` when the channel is on; any failure of it is a WARNING and the
  lexical `recall` answers (ADR-0019's decision is in the result either way);
- search and walk: the channel is handed over as a function that embeds the query only when
  lexical falls short (`SemanticCache.for_query`, which logs its own failure and returns
  None: lexical only).

It returns the typed results (`recall.Recall`, `search.Hits`, `walk.WalkResult`): decisions as
codes and figures, never sentences; the words for people are the doors' (`runtime/render.py`,
the MCP tool layer). It never writes, but for the walk's one telemetry row through the
read-write store a door hands it (`walk.walk_recorded`), and it keeps nothing at module level.
"""

from __future__ import annotations

import logging
from datetime import tzinfo
from typing import Any

from ..store import Store
from .embed import SemanticCache
from .nearest import Semantic
from .recall import BUDGET, Budget, Recall, recall, recall_hybrid
from .search import Hits, search
from .walk import WalkResult, walk_recorded

log = logging.getLogger(__name__)


class Memory:
    """Recall, search and walk over one store, with one home's settings and semantic channel
    (`semantic`: the caller's cache; None, the channel off whatever the settings say)."""

    def __init__(self, store: Store, settings: Any, semantic: SemanticCache | None = None
                 ) -> None:
        self.store = store
        self.settings = settings
        self.semantic = semantic  # None: the channel is off for this object

    @property
    def tz(self) -> tzinfo:
        """The owner's time zone: the times a block shows."""
        zone: tzinfo = self.settings.coworker.zone
        return zone

    def budget(self) -> Budget:
        """The recall block's budget (recall.BUDGET: items, characters each, characters in all)."""
        return BUDGET

    def recall(self, text: str, *, before_id: int | None = None, k: int | None = None
               ) -> Recall:
        """What memory says about `text` (at most `k` hits, default the recall budget's
        items), fused with the semantic channel when it is on; lexical when it is off or
        fails (a WARNING says so)."""
        k = BUDGET.max_items if k is None else k
        try:
            got = (self.semantic.get(self.store, self.settings.semantic)
                   if self.semantic is not None else None)
            if got is not None:
                return recall_hybrid(self.store, text, embedder=got[0], matrix=got[1],
                                     before_id=before_id, k=k, tz=self.tz)
        except Exception as e:  # the channel's own failure leaves lexical recall standing
            log.warning("semantic recall failed (%s: %s); recall goes on lexical only",
                        type(e).__name__, e, exc_info=True)
        return recall(self.store, text, before_id=before_id, k=k, tz=self.tz)

    def search(self, query: str, limit: int = 10, *, after: str | None = None,
               exhaustive: bool = False) -> Hits:
        """A page of hits, best first (`search.search`); the semantic channel only on a first
        page, and only when lexical covers too little of the query."""
        semantic = self.channel(query) if after is None else None
        return search(self.store, query, limit, semantic=semantic, after=after,
                      exhaustive=exhaustive)

    def walk(self, query: str, *, before_id: int | None = None, door: str = "cli",
             log_to: Store | None = None) -> WalkResult:
        """The walk (refusing below walk.THRESHOLD), recorded in telemetry (through `log_to`
        when the store read is read-only) under `door`."""
        return walk_recorded(self.store, query, door=door, log_to=log_to, before_id=before_id,
                             semantic=self.channel(query))

    def channel(self, query: str) -> Semantic | None:
        """The semantic channel for one query (None when it is off): it embeds the query, at
        most `cards.MAX_QUERY_CHARS` of it, only when called."""
        from .cards import cap_query

        if self.semantic is None:
            return None
        return self.semantic.for_query(self.store, self.settings.semantic, cap_query(query)[0])
