"""The shapes of a notification: what a message is (`Message`), and for each `[[notify]]` preset
the body a receiver takes and the length it accepts (`PRESETS`).

    generic     JSON {kind, subject, text, event_id, in_reply_to, coworker, ts, idempotency_key}
    slack       JSON {"text"}: mrkdwn, & < > escaped (no <!channel> from a model's text)
    discord     JSON {"content", "allowed_mentions": {"parse": []}} (no @everyone pings)
    mattermost  JSON {"text"}: @channel, @all and @here defused
    ntfy        the text itself (text/plain) with a Title header

A text longer than its preset allows is cut, and the cut says so and names the event that
holds it whole (`fit`): never silently. Pure: no I/O, no settings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from email.header import Header

COMMAND_LIMIT = 100_000  # characters a command target's standard input takes at most


@dataclass(frozen=True)
class Message:
    """One notification: a reply, an approval waiting, a failure, or a test."""

    what: str                # reply | approval | failure | test
    subject: str
    text: str
    key: str                 # the idempotency key: the same for every attempt
    event_id: int | None = None
    ts: str = ""
    coworker: str = "coworker"
    in_reply_to: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Body:
    data: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


def marker(m: Message) -> str:
    where = f": the whole {'reply' if m.what == 'reply' else 'message'} is event {m.event_id}" \
        if m.event_id is not None else ""
    return f"\n[… cut{where}]"


def fit(m: Message, render: Callable[[str], str], limit: int, in_bytes: bool = False) -> str:
    """`render(m.text)` when it is within `limit` (characters, or UTF-8 bytes); else the
    longest start of the text that, with the cut marker, renders within it."""
    def size(s: str) -> int:
        return len(s.encode("utf-8")) if in_bytes else len(s)

    whole = render(m.text)
    if size(whole) <= limit:
        return whole
    mark = marker(m)
    lo, hi = 0, len(m.text)
    while lo < hi:  # the largest n with render(text[:n] + mark) within the limit
        mid = (lo + hi + 1) // 2
        if size(render(m.text[:mid].rstrip() + mark)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return render(m.text[:lo].rstrip() + mark)


def _headline(m: Message, bold: str) -> str:
    return f"{bold}{m.subject}{bold}\n" if m.subject else ""


def _json(data: dict[str, object]) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


def _slack_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_MASS = re.compile(r"@(channel|all|here)\b", re.I)


def _defused(s: str) -> str:
    return _MASS.sub(lambda g: "@\u200b" + g.group(1), s)


def header_value(s: str) -> str:
    """A value safe in an HTTP header: one line; RFC 2047 when it is not ASCII."""
    line = " ".join(re.sub(r"[\x00-\x1f\x7f]+", " ", s).split())[:200]
    return line if line.isascii() else Header(line, "utf-8").encode()


def generic(m: Message) -> Body:
    text = fit(m, lambda t: t, 20_000)
    return Body(_json({"kind": m.what, "subject": m.subject, "text": text,
                       "event_id": m.event_id, "in_reply_to": m.in_reply_to,
                       "coworker": m.coworker, "ts": m.ts, "idempotency_key": m.key}),
                "application/json")


def slack(m: Message) -> Body:
    head = _slack_escape(_headline(m, "*"))
    return Body(_json({"text": fit(m, lambda t: head + _slack_escape(t), 4_000)}),
                "application/json")


def discord(m: Message) -> Body:
    head = _headline(m, "**")
    return Body(_json({"content": fit(m, lambda t: head + t, 2_000),
                       "allowed_mentions": {"parse": []}}), "application/json")


def mattermost(m: Message) -> Body:
    head = _defused(_headline(m, "**"))
    return Body(_json({"text": fit(m, lambda t: head + _defused(t), 16_000)}),
                "application/json")


def ntfy(m: Message) -> Body:
    text = fit(m, lambda t: t, 4_000, in_bytes=True)  # ntfy takes 4,096 bytes as a message
    return Body(text.encode("utf-8"), "text/plain; charset=utf-8",
                {"Title": header_value(m.subject or m.coworker)})


def plain(m: Message) -> str:
    """What a command target reads on standard input: the subject, a blank line, the text."""
    head = f"{m.subject}\n\n" if m.subject else ""
    return fit(m, lambda t: head + t, COMMAND_LIMIT)


PRESETS: dict[str, Callable[[Message], Body]] = {
    "generic": generic, "slack": slack, "discord": discord, "mattermost": mattermost,
    "ntfy": ntfy,
}
LIMITS = {"generic": "20,000 characters", "slack": "4,000 characters",
          "discord": "2,000 characters", "mattermost": "16,000 characters",
          "ntfy": "4,000 bytes"}
