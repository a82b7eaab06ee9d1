"""`memory_search`: the agent's lexical search over events, archive and rollups, with ids."""

from __future__ import annotations

from pydantic import BaseModel, Field

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


TOOLS = [
    Tool("memory_search", "Search your memory (all events, the archive and rollups) by words; "
         "returns ids you can cite.", SearchInput, _search),
]
