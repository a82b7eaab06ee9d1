"""`promise`: a follow-up at a time. The due time wakes a tick, which sees the promise as input."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, Field, field_validator

from .registry import Tool, ToolContext

_RELATIVE = re.compile(r"^\s*in\s+(\d+)\s*(s|sec|m|min|h|hour|hours|d|day|days)\s*$", re.I)
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "hours": 3600,
          "d": 86400, "day": 86400, "days": 86400}


def parse_due(text: str, now: datetime | None = None) -> datetime:
    """'in 30m', 'in 2h', 'in 1d', or an ISO-8601 time (naive means UTC) -> aware UTC datetime."""
    now = now or datetime.now(UTC)
    m = _RELATIVE.match(text)
    if m:
        try:
            return now + timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2).lower()])
        except OverflowError as e:  # "in 99999999999999 d": past the calendar
            raise ValueError(f"due {text.strip()!r} is too far ahead; promise something "
                             "within a few years") from e
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError("due must be ISO-8601 (2026-12-01T09:00:00Z) or 'in 30m' / 'in 2h' / "
                         "'in 1d'") from e
    return when if when.tzinfo else when.replace(tzinfo=UTC)


class PromiseInput(BaseModel):
    text: str = Field(min_length=1, max_length=2000, description="what you will follow up on")
    due: str = Field(description="when: ISO-8601 UTC time, or 'in 30m', 'in 2h', 'in 1d'")

    @field_validator("due")
    @classmethod
    def _parses(cls, v: str) -> str:
        parse_due(v)
        return v


def _promise(ctx: ToolContext, p: PromiseInput) -> str:
    when = parse_due(p.due).astimezone(UTC)
    due = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    event_id = ctx.record("promise", p.text, due=due)
    return f"promise {event_id} recorded; a tick wakes at {due}"


TOOLS = [
    Tool("promise", "Promise a follow-up at a time; a tick wakes you then with this text.",
         PromiseInput, _promise),
]
