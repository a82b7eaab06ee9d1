"""The coworker's own records: `note` (remember something) and `decide` (a decision that cites
its source events and may supersede an earlier one). Neither has side effects outside the home."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from ..errors import UsageError
from ..store import decisions, events, now_iso
from .registry import Tool, ToolContext


class NoteInput(BaseModel):
    text: str = Field(min_length=1, max_length=4000, description="what to remember")


def _note(ctx: ToolContext, p: NoteInput) -> str:
    event_id = ctx.record("note", p.text)
    return f"noted as event {event_id}"


# An id as SQLite holds it (64-bit): one past that range is a schema error the model can
# correct, not an OverflowError inside the tool.
EventId = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class DecideInput(BaseModel):
    text: str = Field(min_length=1, max_length=4000, description="the decision and why")
    source_events: list[EventId] = Field(
        default_factory=list, description="ids of the events this decision rests on"
    )
    supersedes: EventId | None = Field(
        None, description="the event id of an earlier decision this replaces, as your memory "
        "shows it: [event N · ... · decision]")


def _decide(ctx: ToolContext, p: DecideInput) -> str:
    # the model sees decisions by their event ids, never by the decisions table's own: an id
    # that names no decision is an error it can correct, not a supersede dropped in silence
    # or laid on whichever decision happens to have that number
    old = _superseded(ctx, p.supersedes) if p.supersedes is not None else None
    event_id = ctx.record("decision", p.text, source_events=p.source_events,
                          supersedes=p.supersedes)
    d = decisions.record(ctx.store, p.text, p.source_events or None, old, event_id,
                         now_iso())
    cited = "no valid source events (provenance NULL)" if d.source_events is None and \
        p.source_events else f"sources {d.source_events}" if d.source_events else "no sources"
    replaced = f"; it supersedes the decision of event {p.supersedes}" if old is not None else ""
    return f"decision {d.id} recorded as event {event_id}; {cited}{replaced}"


def _superseded(ctx: ToolContext, event_id: int) -> int:
    """The decision recorded as `event_id`, which must still be current; else UsageError, a
    message the model can act on (nothing is recorded)."""
    old = decisions.by_event(ctx.store, event_id)
    if old is None:
        e = events.get(ctx.store, event_id)
        what = ("a decision line that was not recorded with decide (imported, say), so "
                "nothing can mark it stale; record the new decision without supersedes"
                if e is not None and e.kind == "decision" else
                "not a decision: supersedes takes the event id of an earlier decision, as "
                "your memory shows it ([event N · ... · decision])")
        raise UsageError(f"event {event_id} is {what}; nothing was recorded")
    later = decisions.stale_events(ctx.store).get(event_id)
    if later is not None:  # two decisions replacing one would leave two current
        raise UsageError(f"the decision of event {event_id} was already superseded by {later}: "
                         "supersede that one instead; nothing was recorded")
    return old


TOOLS = [
    Tool("note", "Remember something: writes a note event to your memory.", NoteInput, _note),
    Tool("decide", "Record a decision, citing the event ids it rests on; may supersede an "
         "earlier decision by its event id.", DecideInput, _decide),
]
