"""`memory_search`: the agent's lexical search over events, archive and rollups, with ids."""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

from ..memory import walk as walker
from ..memory.search import search
from .registry import Tool, ToolContext


class SearchInput(BaseModel):
    query: str = Field(min_length=1, max_length=500, description="words to look for")
    limit: int = Field(8, ge=1, le=30, description="how many results")


def _search(ctx: ToolContext, p: SearchInput) -> str:
    hits = search(ctx.store, p.query, p.limit)
    if not hits:
        return f"no memory matches {p.query!r}"
    lines = [
        f"[{h.kind} {h.id} · {(h.ts or '')[:16]} · {h.label} · {h.source}] {h.excerpt}"
        for h in hits
    ]
    return "\n".join(lines)


class WalkInput(BaseModel):
    query: str = Field(min_length=1, max_length=500,
                       description="a few words for what you want to remember")


def _walk(ctx: ToolContext, p: WalkInput) -> str:
    result = walker.walk_recorded(ctx.store, p.query, ctx.settings.memory.walk_threshold,
                                  door="tool", before_id=ctx.first_input_id or ctx.tick_id)
    return json.dumps(result, ensure_ascii=False)


TOOLS = [
    Tool("memory_walk", "Descend your memory from coarse summaries to the raw events for a "
         "query. Returns a trace and events with ids to cite; refuses (refused: true) when "
         "nothing matches with confidence, which means your memory does not hold it.",
         WalkInput, _walk),
    Tool("memory_search", "Search your memory (all events, the archive and rollups) by words; "
         "returns ids you can cite.", SearchInput, _search),
]
