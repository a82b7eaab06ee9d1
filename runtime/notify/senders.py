"""One attempt to reach the owner through one `[[notify]]` target, and what doctor says of one.

`resolve` reads a target's `secret:NAME` values (`settings_talk.resolve_secret`) and registers
every URL and header value for redaction before anything is sent, written or logged: a Slack,
Discord or Mattermost URL, an ntfy topic, a header's token are credentials. `send` makes one
attempt: a webhook is one POST (no redirect followed: a redirect would carry the body and the
headers elsewhere) with an `Idempotency-Key` header, a command is its argv run with the message
on standard input (its own process group, killed whole at the timeout) and NOTIFY_* variables.
A failure is a `SendError` whose text never holds a URL's path; `permanent` marks an answer a
retry cannot change (a 4xx other than 408, 425 and 429). `describe` is what may be printed of a
target: a URL's scheme and host only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from .. import __version__
from ..secrecy import redact, register_secret
from ..settings_talk import NotifyTarget, is_local, resolve_secret
from .presets import PRESETS, Message, plain

RETRYABLE_4XX = (408, 425, 429)
ANSWER_CHARS = 200  # how much of a failed answer's body an error quotes


class SendError(Exception):
    """An attempt failed: the line says why (no URL path, secrets redacted)."""

    def __init__(self, why: str, permanent: bool = False, retry_after: float | None = None):
        super().__init__(redact(why))
        self.permanent = permanent
        self.retry_after = retry_after


@dataclass(frozen=True)
class Resolved:
    """A target with its secrets read: what one attempt needs."""

    target: NotifyTarget
    url: str | None
    headers: dict[str, str]


def resolve(target: NotifyTarget, secrets: Mapping[str, str]) -> Resolved:
    """The target's URL and headers with every `secret:NAME` read, each value registered for
    redaction; ConfigError (one line) when a named secret is not set."""
    where = f"[[notify]] {target.name}"
    url = None
    if target.url:
        url = resolve_secret(target.url, secrets, f"{where} url")
        register_secret(url)
        with contextlib.suppress(ValueError):  # the path alone is the credential too (an
            parts = urlsplit(url)              # answer may echo it): a Slack token, a topic
            register_secret(parts.path)
            register_secret(parts.query)
    headers = {}
    for name, value in target.headers.items():
        headers[name] = resolve_secret(value, secrets, f"{where} header {name}")
        for word in (headers[name], *headers[name].split()):  # "Bearer <token>": the token
            register_secret(word)
    return Resolved(target, url, headers)


def where(url: str | None) -> str:
    """What may be printed of a URL: its scheme and host (and port), never its path."""
    if not url:
        return "no url"
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "a URL that does not parse"
    return f"{parts.scheme}://{parts.hostname or '?'}{port}"


def send(r: Resolved, m: Message) -> None:
    """One attempt; SendError when it failed."""
    if r.target.kind == "command":
        _command(r.target, m)
    else:
        _webhook(r, m)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx comes back as an HTTPError


_OPENER = urllib.request.build_opener(_NoRedirect)


def _webhook(r: Resolved, m: Message) -> None:
    body = PRESETS[r.target.preset](m)
    headers = {"Content-Type": body.content_type, "User-Agent": f"coworker/{__version__}",
               "Idempotency-Key": m.key, **body.headers, **r.headers}
    request = urllib.request.Request(str(r.url), data=body.data, headers=headers,
                                     method="POST")
    host = where(r.url)
    try:
        with _OPENER.open(request, timeout=r.target.timeout_s) as answer:
            answer.read(64 * 1024)
    except urllib.error.HTTPError as e:
        raise _http_error(e, host) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, TimeoutError):
            raise SendError(f"{host} did not answer within {r.target.timeout_s:g} s") from None
        raise SendError(f"cannot reach {host}: {reason}") from None


def _http_error(e: urllib.error.HTTPError, host: str) -> SendError:
    try:
        said = e.read(ANSWER_CHARS).decode("utf-8", "replace")
    except Exception:
        said = ""
    said = " ".join(said.split())[:ANSWER_CHARS]
    why = f"{host} answered HTTP {e.code}" + (f": {said}" if said else "")
    if 300 <= e.code < 400:
        return SendError(why + " (a redirect, not followed: give the final URL)", True)
    permanent = 400 <= e.code < 500 and e.code not in RETRYABLE_4XX
    return SendError(why, permanent, _retry_after(e.headers.get("Retry-After")))


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    try:
        from datetime import UTC, datetime

        return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


# what a notifying command may need from the coworker's environment (a desktop notifier its
# session bus, a mailer its locale); never the rest, which holds the model's API key and any
# secret:NAME kept in the environment
PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "SHELL",
              "DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")


def _command(target: NotifyTarget, m: Message) -> None:
    passed = {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith("LC_")}
    env = {**passed, "NOTIFY_IDEMPOTENCY_KEY": m.key, "NOTIFY_KIND": m.what,
           "NOTIFY_SUBJECT": " ".join(m.subject.split()),
           "NOTIFY_EVENT_ID": "" if m.event_id is None else str(m.event_id)}
    try:
        proc = subprocess.Popen(target.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as e:
        raise SendError(f"command {target.command[0]!r} cannot start ({e.strerror or e})") \
            from None
    try:
        _, err = proc.communicate(plain(m).encode("utf-8"), timeout=target.timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise SendError(f"command {target.command[0]!r} did not finish within "
                        f"{target.timeout_s:g} s (killed)") from None
    if proc.returncode != 0:
        line = next((ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()), "")
        raise SendError(f"command {target.command[0]!r} exited {proc.returncode}"
                        + (f": {line.strip()[:ANSWER_CHARS]}" if line else ""))


def describe(target: NotifyTarget, secrets: Mapping[str, str]) -> tuple[bool, bool, str]:
    """(ok, warn, detail) of a target for doctor, without sending anything: its secrets are
    set, a webhook's host answers a TCP connection (plain http only to this machine), a
    command is found."""
    r = resolve(target, secrets)  # a missing secret: ConfigError, the check's FAIL line
    if target.kind == "command":
        exe = target.command[0]
        found = shutil.which(exe)
        if found is None:
            return False, False, (f"command {exe!r} is not found (not on PATH, or not "
                                  "executable): fix command in config.toml")
        return True, False, f"command {exe} ({found}), events {', '.join(target.events)}"
    host = where(r.url)
    parts = urlsplit(str(r.url))
    try:
        with socket.create_connection((parts.hostname or "", parts.port or (
                443 if parts.scheme == "https" else 80)), timeout=min(target.timeout_s, 5.0)):
            pass
    except OSError as e:
        return False, False, f"webhook {host} cannot be reached ({e.strerror or e})"
    detail = f"webhook {host} ({target.preset}), events {', '.join(target.events)}"
    if parts.scheme == "http" and not is_local(parts.hostname or ""):
        return True, True, (f"{detail}: plain http to another machine sends the message and "
                            "the URL's credential in clear; use https")
    return True, False, detail + ", reachable"


