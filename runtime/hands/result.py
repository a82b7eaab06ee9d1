"""What a call to an MCP tool gave back, as text the model may see.

Owns `CallStatus` (how a call ended), `ToolResult` (the outcome of one call: the text capped
to the configured size, the full text kept beside it when cut, itself at most
`MAX_STORED_CHARS`, the rest dropped with its size and digest: `keep`) and the turning of an
MCP `CallToolResult`'s content blocks into plain text. It never calls a server and never
records anything; a result is untrusted data from the outside world, never owner input.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# Characters of a result's full text that are stored (in its event) at most: a server that
# answers 50 MB would otherwise grow the database by as much, and a watch fill the disk. The
# same as the most a result was ever allowed to show the model (`RESULT_CHARS` is 20,000) (ADR-0039).
MAX_STORED_CHARS = 1_000_000


class CallStatus(StrEnum):
    OK = "ok"
    TOOL_ERROR = "tool_error"                # the tool ran and said it failed (isError)
    INVALID_ARGUMENTS = "invalid_arguments"  # the arguments break the tool's input schema; not sent
    TIMEOUT = "timeout"                      # no answer within the server's timeout_s
    CRASHED = "crashed"                      # the connection closed during the call; restarting
    UNAVAILABLE = "unavailable"              # the server is not running (starting, restarting, failed)
    UNKNOWN_TOOL = "unknown_tool"            # no offered tool has this name (or it is disabled)
    PROTOCOL_ERROR = "protocol_error"        # the server answered with an MCP error
    REFUSED = "refused"                      # an argument names the coworker's own state; not sent


@dataclass(frozen=True)
class ToolResult:
    """One call's outcome. `text` is what the model sees (at most the cap plus a one-line
    marker); `full_text` is the whole text when it was cut, else None."""

    server: str
    tool: str
    status: CallStatus
    text: str
    full_text: str | None = None
    structured: Any = None
    seconds: float = 0.0

    @property
    def is_error(self) -> bool:
        return self.status is not CallStatus.OK

    @property
    def truncated(self) -> bool:
        return self.full_text is not None

    @property
    def name(self) -> str:
        return f"{self.server}__{self.tool}"


def content_text(content: list[Any], structured: Any = None) -> str:
    """The text of a result's content blocks, one per line; a block that is not text is named
    in brackets. With no content, the structured result as sorted JSON."""
    parts: list[str] = []
    for block in content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '?')}]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {getattr(block, 'uri', '?')}]")
        elif kind == "resource":
            res = getattr(block, "resource", None)
            text = getattr(res, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource: {getattr(res, 'uri', '?')}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if not parts and structured is not None:
        return json.dumps(structured, sort_keys=True, ensure_ascii=False, default=str)
    return "\n".join(parts)


def cap(text: str, limit: int) -> tuple[str, str | None]:
    """(`text` cut to `limit` characters with a marker saying so, the full text) when it is
    longer than `limit`; else (`text`, None)."""
    if len(text) <= limit:
        return text, None
    kept = ("the full result is kept" if len(text) <= MAX_STORED_CHARS else
            f"the first {MAX_STORED_CHARS:,} are kept")
    marker = f"\n[cut: the first {limit} of {len(text)} characters; {kept}]"
    return text[:limit] + marker, text


def keep(text: str) -> str:
    """What is stored of a result's full text: at most MAX_STORED_CHARS characters, the rest
    dropped with its size and digest (sha256 of the whole text) said in a last line."""
    if len(text) <= MAX_STORED_CHARS:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return (text[:MAX_STORED_CHARS] + f"\n[dropped: the last {len(text) - MAX_STORED_CHARS:,} "
            f"of {len(text):,} characters; sha256 of the whole result {digest}]")
