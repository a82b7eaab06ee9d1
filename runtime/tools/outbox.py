"""`reply`: a message to the owner. A side effect: in live mode it writes an outbox event and a
Markdown file in state/outbox/ (which other programs may pick up); in dry-run the registry
records what it would have sent instead."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from .registry import Tool, ToolContext


class ReplyInput(BaseModel):
    text: str = Field(min_length=1, max_length=20000, description="the message to the owner")
    subject: str = Field("", max_length=200, description="a short subject line")


def _reply(ctx: ToolContext, p: ReplyInput) -> str:
    event_id = ctx.record("outbox", p.text, subject=p.subject)
    outbox = ctx.home_root / "state" / "outbox"
    outbox.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", p.subject.lower()).strip("-")[:40] or "reply"
    path = outbox / f"{event_id:08d}-{slug}.md"
    head = f"# {p.subject}\n\n" if p.subject else ""
    path.write_text(f"{head}{p.text}\n", encoding="utf-8")
    return f"sent to the owner as event {event_id} ({path.name})"


TOOLS = [
    Tool("reply", "Send a message to your owner (lands in their outbox).", ReplyInput, _reply,
         side_effect=True),
]
