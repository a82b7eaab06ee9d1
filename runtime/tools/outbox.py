"""`reply`: a message to the owner. A side effect: in live mode it writes an outbox event and a
Markdown file in state/outbox/ (which other programs may pick up); in dry-run the registry
records what it would have sent instead.

It is idempotent under its tool_use id within its turn: the event carries the id, and a run
that finds the event already written by an attempt of the same turn only finishes the file
(written to a temporary name, then renamed), so a replay after a kill between the two
completes the reply instead of losing or doubling it. An event another turn wrote under the
same id (a model server numbering its ids per process) is not this reply's (ADR-0034)."""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, Field

from ..store import events as ev
from ..store import turns
from .registry import Tool, ToolContext


class ReplyInput(BaseModel):
    text: str = Field(min_length=1, max_length=20000, description="the message to the owner")
    subject: str = Field("", max_length=200, description="a short subject line")


def _reply(ctx: ToolContext, p: ReplyInput) -> str:
    attempts = None if ctx.tick_id is None else turns.chain(ctx.store, ctx.tick_id)
    earlier = (ev.by_tool_use(ctx.store, "outbox", ctx.tool_use_id, attempts)
               if ctx.tool_use_id else None)
    if earlier is not None and earlier.id is not None:
        event_id = earlier.id
    else:
        event_id = ctx.record("outbox", p.text, subject=p.subject, tool_use_id=ctx.tool_use_id)
    outbox = ctx.home_root / "state" / "outbox"
    outbox.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", p.subject.lower()).strip("-")[:40] or "reply"
    path = outbox / f"{event_id:08d}-{slug}.md"
    if not path.exists():
        head = f"# {p.subject}\n\n" if p.subject else ""
        tmp = outbox / f".{path.name}.tmp"
        tmp.write_text(f"{head}{p.text}\n", encoding="utf-8")
        os.replace(tmp, path)
    return f"sent to the owner as event {event_id} ({path.name})"


TOOLS = [
    Tool("reply", "Send a message to your owner (lands in their outbox).", ReplyInput, _reply,
         side_effect=True, idempotent=True),
]
