"""The agent's memory tools: `memory_search` (search over events, archive and rollups,
with ids), `memory_read` (one event's text from an offset: the rest of a message "What is new"
showed cut), `memory_walk` (the walk as JSON, blind to the tick's own inputs and steps, each walk
recorded in telemetry) and `memory_propose` (a fact for the gate, which decides it and records
the decision; it may name the MEMORY.md entry it supersedes, ADR-0018, and one that names no
entry is an error result the model can correct). Search, read and walk only read memory; no tool
here writes MEMORY.md itself (only the gate may) or calls a chat model. With the semantic
channel on, search and walk may embed the query, and only when lexical falls short (the
loop's `SemanticCache` keeps the embedder and vectors between ticks). All three go through the
memory service (`memory.service.Memory`); a walk's refusal is a code that `render.walk_json`
puts in words.

A query longer than `cards.MAX_QUERY_CHARS` is not refused: only its first MAX_QUERY_CHARS
characters are read, and the result says so (`"query_truncated": true` in a walk; a first line
in a search's answer). An event id past SQLite's 64-bit range is a schema error.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, Field

from ..errors import CoworkerError
from ..memory import dates
from ..memory.cards import MAX_QUERY_CHARS, cap_query
from ..memory.recall import authority_note, event_header, event_mark, header_field
from ..memory.service import Memory
from ..render import walk_json
from ..store import decisions as dec
from ..store import events as ev
from .registry import Tool, ToolContext

QUERY_NOTE = (f"(only the first {MAX_QUERY_CHARS} characters of the query were read; "
              "a few telling words find more)")


class SearchInput(BaseModel):
    query: str = Field(min_length=1, description="words to look for (at most "
                       f"{MAX_QUERY_CHARS} characters are read)")
    limit: int = Field(8, ge=1, le=30, description="how many results")
    after: str | None = Field(None, max_length=4000, description="to see more: the cursor "
                              "the last line of an earlier memory_search with the same query "
                              "gave")


def _search(ctx: ToolContext, p: SearchInput) -> str:
    query, cut = cap_query(p.query)
    hits = _memory(ctx).search(query, p.limit, after=p.after)
    note = [QUERY_NOTE] if cut else []
    if not hits:
        gone = "no more memory matches" if p.after else "no memory matches"
        return "\n".join([*note, f"{gone} {query[:200]!r}"])
    tz = ctx.settings.coworker.zone  # the times shown are the owner's
    note.append(f"(times in {dates.zone_name(tz)})")
    lines = [  # an event says who wrote it, as the recall block's header does
        f"[{h.kind} {h.id} · {dates.local_minute(h.ts or '', tz)} · {h.label}"
        f"{'' if h.actor is None else ' · by ' + header_field(h.actor)} · {h.source}] "
        f"{h.excerpt}" for h in hits
    ]
    if hits.next_cursor:
        lines.append(f"(more: memory_search with the same query and after={hits.next_cursor})")
    return "\n".join([*note, *lines])


class WalkInput(BaseModel):
    query: str = Field(min_length=1, description="a few words for what you want to remember "
                       f"(at most {MAX_QUERY_CHARS} characters are read)")


def _memory(ctx: ToolContext) -> Memory:
    """The memory service over the tick's store, with the loop's semantic channel."""
    return Memory(ctx.store, ctx.settings, ctx.semantic)


def _walk(ctx: ToolContext, p: WalkInput) -> str:
    result = _memory(ctx).walk(p.query, door="tool", before_id=ctx.first_input_id or ctx.tick_id)
    return json.dumps(walk_json(result), ensure_ascii=False)


# An id as SQLite can hold it (a 64-bit integer); one past that range is a schema error the
# model can correct, not an OverflowError from the database.
EventId = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class ProposeInput(BaseModel):
    text: str = Field(min_length=1, max_length=500,
                      description="one durable fact or lesson, in plain words")
    source_events: list[EventId] = Field(min_length=1,
                                         description="ids of the events it comes from")
    confidence: float = Field(ge=0, le=1, description="how sure you are, 0 to 1")
    supersedes: str | None = Field(
        None, pattern=r"^m\d{1,18}$",
        description="optional: the id of the MEMORY.md entry this one replaces, like m12, when "
                    "that entry is no longer true")


def _propose(ctx: ToolContext, p: ProposeInput) -> str:
    from ..home import Home
    from ..memory import gate

    verdict = gate.consider(ctx.store, Home(ctx.home_root), ctx.settings,
                            gate.Candidate(p.text, p.source_events, p.confidence, "tool",
                                           p.supersedes))
    return verdict.describe()  # an unknown `supersedes` raises: the registry's error result


STRETCH_CHARS = 20_000  # of one event's text, per memory_read


class ReadInput(BaseModel):
    event_id: EventId = Field(description="the event to read, as a listing or a cut message "
                              "names it")
    offset: int = Field(0, ge=0, le=2**40, description="the character to read from (a cut "
                        "message says where the rest starts)")


def _read(ctx: ToolContext, p: ReadInput) -> str:
    """A stretch of one event's text (hot or archived), as "What is new" shows it (one line),
    under the header every listing gives it, so who said it is never in doubt."""
    e = ev.history_of(ctx.store, [p.event_id]).get(p.event_id)
    if e is None:
        raise UnknownEvent(f"no event {p.event_id}: name one a listing or a message gave")
    text = " ".join(e.body.split())
    if p.offset > len(text):
        raise UnknownEvent(f"offset {p.offset} is past the end of event {p.event_id} "
                           f"({len(text):,} characters)")
    end = min(len(text), p.offset + STRETCH_CHARS)
    where = (f"characters {p.offset:,} to {end:,} of {len(text):,}"
             + (f"; memory_read with event_id {p.event_id} and offset {end} reads on"
                if end < len(text) else "; the end"))
    header = event_header(e, dates.local_minute(e.ts, ctx.settings.coworker.zone),
                          event_mark(e, dec.stale_events(ctx.store).get(p.event_id)))
    note = authority_note(e)  # one line, under its header: no line of it can pass for another
    return f"{header} ({where}) {text[p.offset:end]}" + ("" if note is None else f"\n{note}")


class UnknownEvent(CoworkerError):
    """memory_read of an id no event has, or past its end: a mistake the model can correct."""


TOOLS = [
    Tool("memory_propose", "Propose one durable fact or lesson for MEMORY.md, citing the "
         "events it comes from; when it replaces an entry that is no longer true, name that "
         "entry in `supersedes`. A gate decides: applied, queued for your owner, or refused.",
         ProposeInput, _propose),
    Tool("memory_walk", "Descend your memory from coarse summaries to the raw events for a "
         "query. Returns a trace and events with ids to cite; refuses (refused: true) when "
         "nothing matches with confidence, which means your memory does not hold it.",
         WalkInput, _walk),
    Tool("memory_search", "Search your memory (all events, the archive and rollups) by words; "
         "returns ids you can cite.", SearchInput, _search),
    Tool("memory_read", "Read one event's whole text, 20,000 characters at a time from "
         "`offset`: the rest of a message shown cut, or an event a listing named.",
         ReadInput, _read),
]
