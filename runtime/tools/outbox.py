"""`reply`: a message to the owner. Talking to the owner is not a risky side effect (ADR-0042):
in live mode and in dry-run alike it writes an `outbox` event (its meta: `in_reply_to`, the
messages of the turn it answers, and `subject`) and a Markdown file in state/outbox/ (which other
programs may pick up); `[[notify]]` targets deliver the event. A turn that answers an owner's
message in plain text without calling `reply` is a reply too (`answer_in_text`).

It is idempotent under its tool_use id within its turn: the event carries the id, and a run
that finds the event already written by an attempt of the same turn only finishes the file
(written to a temporary name, then renamed), so a replay after a kill between the two
completes the reply instead of losing or doubling it. An event another turn wrote under the
same id (a model server numbering its ids per process) is not this reply's (ADR-0034)."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, Field

from ..store import events as ev
from ..store import turns
from .registry import Tool, ToolContext


class ReplyInput(BaseModel):
    text: str = Field(min_length=1, max_length=20000, description="the message to the owner")
    subject: str = Field("", max_length=200, description="a short subject line")


TEXT_ANSWER = "text-answer"  # the tool_use id a plain-text answer is recorded under


def _reply(ctx: ToolContext, p: ReplyInput, **meta: Any) -> str:
    attempts = None if ctx.tick_id is None else turns.chain(ctx.store, ctx.tick_id)
    earlier = (ev.by_tool_use(ctx.store, "outbox", ctx.tool_use_id, attempts)
               if ctx.tool_use_id else None)
    if earlier is not None and earlier.id is not None:
        event_id = earlier.id
    else:
        event_id = ctx.record("outbox", p.text, subject=p.subject, tool_use_id=ctx.tool_use_id,
                              in_reply_to=list(ctx.answering), **meta)
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


def answer_in_text(ctx: ToolContext, text: str) -> int | None:
    """A turn that ended in plain text after an owner's message, without a `reply` of its
    own, answered in that text: it is written as a reply (meta `from_text`), once per turn
    (a replay finds it). The event's id, or None when there is nothing to write."""
    if not text.strip() or not ctx.answering or ctx.tick_id is None:
        return None
    attempts = turns.chain(ctx.store, ctx.tick_id)
    earlier = ev.by_tool_use(ctx.store, "outbox", TEXT_ANSWER, attempts)
    if earlier is None and ev.any_in_ticks(ctx.store, "outbox", attempts):
        return None  # it replied with the tool: the closing words are not another reply
    ctx = replace(ctx, tool_use_id=TEXT_ANSWER)
    _reply(ctx, ReplyInput(text=text[:20000]), from_text=True)
    found = ev.by_tool_use(ctx.store, "outbox", TEXT_ANSWER, attempts)
    return None if found is None else found.id


TOOLS = [
    Tool("reply", "Send a message to your owner (lands in their outbox and reaches them where "
         "they are).", ReplyInput, _reply, side_effect=True, idempotent=True, to_owner=True),
]
