"""The settings of talking with the owner and the world: `[serve]`, `[[notify]]`, `[[hooks]]`.

Owns the schema (pydantic, `extra="forbid"`, every number bounded) of the local HTTP server
(`[serve]`), of one place replies reach the owner (`[[notify]]`: a webhook or a command) and of
one signed webhook from another system (`[[hooks]]`), the checks that tie each together, and
`secret_ref`: how a value names a secret (`secret:NAME`, read from `state/secrets.toml`'s
`[secrets]` table, else the environment's NAME). It never opens a socket, never sends, never
reads a file and never logs; runtime/settings.py embeds these models and loads them, and
`resolve_secret` is the one reading of a `secret:NAME` (the caller registers what it reads for
redaction).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .errors import ConfigError

NAME = r"^[a-z0-9][a-z0-9_-]{0,31}$"  # a target's or a hook's name: part of a URL path
SECRET_PREFIX = "secret:"
EVENTS = ("reply", "approval", "failure")
PRESETS = ("generic", "slack", "discord", "mattermost", "ntfy")
SCHEMES = ("github", "hmac-sha256", "bearer")
_QUIET = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def is_local(host: str) -> bool:
    """Whether `host` (a bind address or name) is this machine only."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServeSection(_Section):
    enabled: bool = Field(False, description="true: the loop starts the local HTTP server too "
                          "(`coworker serve` starts it alone)")
    host: str = Field("127.0.0.1", description="the address it listens on; a non-local one "
                      "needs allow_remote = true")
    port: int = Field(8765, ge=1, le=65535, description="its port")
    allow_remote: bool = Field(False, description="true: listen on a non-local address (put a "
                               "reverse proxy with TLS in front of it)")
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Host headers accepted besides the bind address "
        "(a reverse proxy's name)")
    token: str | None = Field(None, description="the owner's bearer token: kept in "
                              "state/secrets.toml by `coworker init`, never here")
    hermes_token: str | None = Field(None, description="the Hermes memory provider's bearer "
                                     "token (read and record, never tell): kept in "
                                     "state/secrets.toml by `coworker hermes install`, never "
                                     "here")

    @model_validator(mode="after")
    def _remote_is_chosen(self) -> ServeSection:
        if not is_local(self.host) and not self.allow_remote:
            raise ValueError(f"host {self.host!r} is not this machine only; set allow_remote = "
                             "true to listen there (behind a reverse proxy with TLS), or use "
                             "127.0.0.1")
        return self


class NotifyTarget(_Section):
    """One `[[notify]]` entry: where replies (and, if asked, approvals waiting and failures)
    reach the owner."""
    name: str = Field(pattern=NAME, description="the target's name (`coworker notify --test NAME`)")
    kind: Literal["webhook", "command"]
    url: str | None = Field(None, description='kind webhook: http(s) URL, or "secret:NAME"')
    preset: Literal["generic", "slack", "discord", "mattermost", "ntfy"] = "generic"
    headers: dict[str, str] = Field(default_factory=dict,
                                    description='header values may be "secret:NAME"')
    command: list[str] = Field(default_factory=list,
                               description="kind command: an argv; the message on stdin")
    events: list[Literal["reply", "approval", "failure"]] = Field(
        default_factory=lambda: list[Literal["reply", "approval", "failure"]](["reply"]))
    timeout_s: float = Field(10.0, gt=0, le=120)
    max_per_hour: int = Field(60, ge=1, le=10_000, description="at most this many sends an hour")
    quiet_hours: str | None = Field(None, description='"22:00-07:00" in the owner\'s time zone: '
                                    "held until they end")

    @model_validator(mode="after")
    def _complete(self) -> NotifyTarget:
        if self.kind == "webhook" and not self.url:
            raise ValueError(f"notify target {self.name!r}: kind webhook needs a url")
        if self.kind == "command" and not self.command:
            raise ValueError(f"notify target {self.name!r}: kind command needs a command "
                             '(an argv list, e.g. ["notify-send", "coworker"])')
        if self.url and not self.url.startswith(SECRET_PREFIX) \
                and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"notify target {self.name!r}: url must start with http:// or "
                             'https://, or name a secret as "secret:NAME"')
        if self.quiet_hours is not None and not _QUIET.match(self.quiet_hours):
            raise ValueError(f"notify target {self.name!r}: quiet_hours is HH:MM-HH:MM, "
                             'e.g. "22:00-07:00"')
        return self


class Hook(_Section):
    """One `[[hooks]]` entry: a signed webhook another system sends to `POST /hooks/NAME`."""
    name: str = Field(pattern=NAME)
    scheme: Literal["github", "hmac-sha256", "bearer"]
    secret: str = Field(min_length=1, description="the NAME of the secret, never its value")
    events: list[str] = Field(default_factory=list,
                              description="event types taken (GitHub's X-GitHub-Event); "
                              "empty: all")
    signature_header: str = Field("X-Signature-256", description="hmac-sha256: the header "
                                  'holding "sha256=<hex>"')
    id_header: str | None = Field(None, description="the header holding a delivery id "
                                  "(github: X-GitHub-Delivery)")

    @field_validator("secret")
    @classmethod
    def _a_name(cls, v: str) -> str:
        v = v.removeprefix(SECRET_PREFIX)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("secret is the NAME of a secret (letters, digits, _), never its "
                             "value: put the value in state/secrets.toml under [secrets]")
        return v


def unique_names(entries: list[NotifyTarget] | list[Hook], what: str) -> None:
    """ValueError when two entries share a name."""
    seen: set[str] = set()
    for e in entries:
        if e.name in seen:
            raise ValueError(f"two {what} entries are named {e.name!r}: names must be unique")
        seen.add(e.name)


def resolve_secret(value: str, secrets: Mapping[str, str], where: str) -> str:
    """`value` itself, or for "secret:NAME" the `[secrets]` table's NAME, else the
    environment's NAME; ConfigError (one line, what to do) when neither holds it."""
    if not value.startswith(SECRET_PREFIX):
        return value
    name = value[len(SECRET_PREFIX):]
    got = secrets.get(name) or os.environ.get(name)
    if not got:
        raise ConfigError(f"{where}: secret {name} is not set; add {name} = \"...\" under "
                          f"[secrets] in state/secrets.toml, or set the environment variable "
                          f"{name}")
    return got
