"""The `[mcp]` section of config.toml: the MCP servers the owner gives the coworker, and its watches.

Owns the schema (pydantic, `extra="forbid"`, every number bounded) of one `[[mcp.servers]]`
entry, one `[[mcp.watch]]` entry and the `[mcp]` section around them, the checks that tie them
together (unique server names that keep `<server>__<tool>` a valid Anthropic tool name, a
watch that names a configured server), and the list of secret values a server's entry holds.
It never starts a server, never reads the file itself (runtime/settings.py embeds `McpSection`
and loads it), and never logs. It sits beside settings.py, below runtime/hands (which imports
its models and the tool-name helpers from here), so the settings import nothing above them.

Tool names reach the model as `<server>__<tool>`. Anthropic accepts `^[a-zA-Z0-9_-]{1,64}$`,
so a server name is `[a-z0-9_-]`, at most 32 characters, and holds no `__` (the first `__`
of a full name is where the server's part ends). A tool whose full name would not fit is
skipped when its server lists it (runtime/hands/server.py says so at WARNING).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .secrecy import can_be_secret, is_secret_name

SEP = "__"
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what the Messages API accepts
SERVER_NAME = r"^[a-z0-9_-]+$"
MAX_SERVER_NAME = 32
MAX_TOOL_NAME = 64
# An env or header name holding one of these words (any case) holds a secret.
# "Bearer abc...": the credential alone may be echoed back without its scheme word.
_SCHEME = re.compile(r"^(?:bearer|basic|token|digest)\s+(\S+)$", re.IGNORECASE)


def full_name(server: str, tool: str) -> str:
    """The name the model sees for `tool` of `server`."""
    return f"{server}{SEP}{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """(`server`, `tool`) of a full name, or None when it holds no `__`."""
    server, sep, tool = name.partition(SEP)
    return (server, tool) if sep and server and tool else None


def _duration_s(text: str) -> int:
    """'30m', '72h', '7d' (as the field's pattern admits them) in seconds."""
    text = text.strip()
    return int(text[:-1].strip()) * {"m": 60, "h": 3600, "d": 86400}[text[-1]]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class McpServer(_Entry):
    """One `[[mcp.servers]]` entry: a stdio command, or a streamable HTTP url."""

    name: str = Field(min_length=1, max_length=MAX_SERVER_NAME, pattern=SERVER_NAME,
                      description="its tools reach the model as <name>__<tool>")
    command: str | None = Field(None, min_length=1, description="stdio: the executable to run")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: environment passed to it")
    secret_env: list[str] = Field(
        default_factory=list, description="env names to treat as secrets (beyond the words KEY, "
        "TOKEN, SECRET, PASSWORD, AUTH in the name)")
    url: str | None = Field(None, description="streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers sent to the url")
    mode: Literal["dry-run", "live"] = Field(
        "dry-run", description='"live": its side effects may run when the coworker runs live')
    read_only: list[str] = Field(default_factory=list, description="tools to treat as read-only")
    approve: list[str] = Field(default_factory=list, description="tools that always wait for the owner")
    disabled: list[str] = Field(default_factory=list, description="tools never offered to the model")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="seconds a call may take")
    start_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="seconds a start may take (spawn, handshake, tool "
        "listing): a busy machine starts a server slower than a call should take")

    @field_validator("name")
    @classmethod
    def _no_separator(cls, v: str) -> str:
        if SEP in v:
            raise ValueError(f"a server name cannot hold {SEP!r} (it separates server and tool)")
        return v

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s/]+", v):
            raise ValueError(f"url must start with http:// or https://, not {v[:40]!r}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"server {self.name!r}: set exactly one of command (stdio) or url (HTTP)")
        if self.url is not None and (self.args or self.env or self.secret_env):
            raise ValueError(f"server {self.name!r}: args, env and secret_env are for a command, "
                             "not a url (send credentials as headers)")
        if self.command is not None and self.headers:
            raise ValueError(f"server {self.name!r}: headers are for a url, not a command (use env)")
        unknown = sorted(set(self.secret_env) - set(self.env))
        if unknown:
            raise ValueError(f"server {self.name!r}: secret_env names {', '.join(unknown)}, "
                             "which env does not set")
        for field in ("read_only", "approve", "disabled"):
            for tool in getattr(self, field):
                if not TOOL_NAME.match(full_name(self.name, tool)):
                    raise ValueError(
                        f"server {self.name!r}: {field} holds {tool[:40]!r}, but "
                        f"{self.name}{SEP}<tool> must match [a-zA-Z0-9_-] and be at most "
                        f"{MAX_TOOL_NAME} characters")
        both = sorted(set(self.read_only) & set(self.approve))
        if both:
            raise ValueError(f"server {self.name!r}: {', '.join(both)} cannot be both read_only "
                             "and approve (approve always waits for you; drop one)")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def secret_values(self) -> list[str]:
        """Every value this entry holds that must never be shown: env and header values whose
        name holds the word KEY, TOKEN, SECRET, PASSWORD or AUTH, the env values `secret_env` names,
        when they can be secrets (`secrecy.can_be_secret`), and
        the credential part of an "Authorization: Bearer <credential>" style header."""
        return sorted(set(self._secrets()), key=lambda s: (-len(s), s))

    def _secrets(self) -> Iterator[str]:
        return (v for _, v in self._named_secrets() if can_be_secret(v))

    def ordinary_secrets(self) -> list[str]:
        """Where this entry holds a secret-named value too ordinary to hide (said at WARNING,
        never redacted: `secrecy.can_be_secret`)."""
        return [f"[[mcp.servers]] {self.name!r} {where}" for where, v in self._named_secrets()
                if not can_be_secret(v)]

    def _named_secrets(self) -> Iterator[tuple[str, str]]:
        for name, value in self.env.items():
            if value.strip() and (name in self.secret_env or is_secret_name(name)):
                yield f"env {name}", value.strip()
        for name, value in self.headers.items():
            if value.strip() and is_secret_name(name):
                m = _SCHEME.match(value.strip())
                if m:  # "Bearer <credential>": the credential is the secret
                    yield f"header {name}", m.group(1)
                    if not can_be_secret(value.strip()):
                        continue
                yield f"header {name}", value.strip()


class McpWatch(_Entry):
    """One `[[mcp.watch]]` entry: call a read-only tool on schedule; a changed result wakes a tick."""

    server: str = Field(min_length=1, description="a configured server's name")
    tool: str = Field(min_length=1, description="one of its read-only tools")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments")
    interval_s: int | None = Field(None, ge=10, le=604800, description="seconds between calls")
    cron: str | None = Field(None, description="or a cron expression, e.g. '*/15 * * * *'")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, v: str | None) -> str | None:
        from .cron import checked

        return v if v is None else checked(v)

    @model_validator(mode="after")
    def _one_schedule(self) -> McpWatch:
        if (self.interval_s is None) == (self.cron is None):
            raise ValueError(f"watch {self.server}{SEP}{self.tool}: set exactly one of interval_s or cron")
        return self


class McpSection(BaseModel):
    """`[mcp]`: servers, watches and the budgets around them."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    servers: list[McpServer] = Field(
        default_factory=list, description="[[mcp.servers]]: name, command/args/env or url/headers, "
        "mode, read_only, approve, disabled, timeout_s, start_timeout_s")
    watch: list[McpWatch] = Field(
        default_factory=list, description="[[mcp.watch]]: server, tool, arguments, interval_s or cron")
    approval_ttl: str = Field(
        "72h", pattern=r"^\s*[1-9][0-9]{0,5}\s*[mhd]\s*$",
        description='a queued action not decided within this long expires: 30m, 72h, 7d (at most 1 year)')
    daily_live_calls: int = Field(
        50, ge=0, le=100_000, description="live side-effect calls a day (UTC), at most (0: no cap)")

    @property
    def approval_ttl_s(self) -> int:
        """`approval_ttl` in seconds."""
        return _duration_s(self.approval_ttl)

    @field_validator("approval_ttl")
    @classmethod
    def _ttl_at_most_a_year(cls, v: str) -> str:
        if _duration_s(v) > 366 * 86400:
            raise ValueError("approval_ttl is at most a year (366d)")
        return v.strip()

    @model_validator(mode="after")
    def _names(self) -> McpSection:
        names = [s.name for s in self.servers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"mcp server names must be unique: {', '.join(dupes)}")
        by_name = {s.name: s for s in self.servers}
        for w in self.watch:
            server = by_name.get(w.server)
            if server is None:
                raise ValueError(f"watch {w.server}{SEP}{w.tool}: no [[mcp.servers]] entry is "
                                 f"named {w.server!r}")
            if w.tool in server.approve or w.tool in server.disabled:
                raise ValueError(f"watch {w.server}{SEP}{w.tool}: a watch calls a read-only tool, "
                                 "and this one is listed in approve or disabled")
        return self

    def server(self, name: str) -> McpServer | None:
        return next((s for s in self.servers if s.name == name), None)

    def ordinary_secrets(self) -> list[str]:
        """Every server entry's secret-named values too ordinary to hide."""
        return [w for s in self.servers for w in s.ordinary_secrets()]

    def secret_values(self) -> list[str]:
        """Every secret value of every server entry (see `McpServer.secret_values`)."""
        return sorted({v for s in self.servers for v in s.secret_values()}, key=lambda s: (-len(s), s))
