"""The owner's sign-in on the page: the session cookie, its CSRF token, and the Origin check.

Owns three small decisions, each a pure function of the owner's token (`[serve] token`):
- a session is the cookie `coworker_session_<port>` = `v1.<issued ms>.<nonce>.<mac>`, where
  `mac` is HMAC-SHA256 under the owner's token of the rest. A session holds while the token
  that signed it is the token now, for SESSION_DAYS, and when it was issued after the last
  sign-out (the page keeps that one time in state/): `coworker token --rotate` or signing out
  ends every browser's session at once, and a restart ends none;
- a note the page shows after an action (`?note=`) carries its HMAC, so a link made elsewhere
  cannot put words in the page's mouth;
- every state-changing request carries `csrf`, the HMAC of its cookie under the token (a form
  field, or the `X-CSRF-Token` header); a page elsewhere cannot read it, so cannot send it;
- a browser's `Origin` (or, lacking it, `Referer`) on a POST must name this server: the Host
  header the guard already allowed.
Every comparison is in constant time. It never reads the store and never logs a secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from urllib.parse import urlsplit

COOKIE = "coworker_session"  # and the server's port: two coworkers on one machine keep apart
SESSION_DAYS = 14
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_VERSION = "v1"


def _mac(token: str, text: str) -> str:
    return hmac.new(token.encode("utf-8"), text.encode("utf-8"), hashlib.sha256).hexdigest()


def cookie_name(port: int) -> str:
    """The session cookie of the server on `port`: a browser sends a host's cookies to every
    port of it, so each coworker's server names its own."""
    return f"{COOKIE}_{port}"


def new_session(token: str, clock: Callable[[], float] = time.time) -> str:
    """A fresh session cookie's value, signed by the owner's token (issued in milliseconds)."""
    body = f"{_VERSION}.{int(clock() * 1000)}.{secrets.token_urlsafe(12)}"
    return f"{body}.{_mac(token, 'session|' + body)}"


def valid(token: str | None, cookie: str | None, clock: Callable[[], float] = time.time,
          not_before_ms: int = 0) -> bool:
    """Whether `cookie` is a session the owner's current token signed, not yet expired and
    issued after the last sign-out (`not_before_ms`)."""
    if not token or not cookie or len(cookie) > 200:
        return False
    body, _, mac = cookie.rpartition(".")
    parts = body.split(".")
    if len(parts) != 3 or parts[0] != _VERSION or not parts[1].isdigit():
        return False
    if not hmac.compare_digest(mac.encode(), _mac(token, "session|" + body).encode()):
        return False
    issued_ms = int(parts[1])
    age = clock() - issued_ms / 1000
    # a few minutes of clock skew, then the days; and never one from before a sign-out
    return -300 <= age <= SESSION_DAYS * 86400 and issued_ms > not_before_ms


def signed_note(token: str, note: str) -> str:
    """The signature a note carries back to the page (`?note=...&sig=...`): a note in a link
    someone else made is never shown as the page's own words."""
    return _mac(token, "note|" + note)[:24]


def note_ok(token: str | None, note: str | None, sig: str | None) -> bool:
    if not token or not note or not sig:
        return False
    return hmac.compare_digest(sig.encode("utf-8", "replace"), signed_note(token, note).encode())


def csrf(token: str, cookie: str) -> str:
    """The CSRF token of one session."""
    return _mac(token, "csrf|" + cookie)[:40]


def csrf_ok(token: str | None, cookie: str | None, given: str | None) -> bool:
    if not token or not cookie or not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), csrf(token, cookie).encode())


def same_origin(origin: str | None, referer: str | None, host: str | None) -> bool:
    """A POST's Origin, or its Referer's origin when a browser sent no Origin, against this
    server's Host header (which the guard allowed): the same host and port, by http or https
    (behind a reverse proxy with TLS the browser's scheme is https where this server's is
    http). Neither header (a script, not a browser): allowed here; the cookie and the CSRF
    token still decide."""
    if not host:
        return False
    seen = origin or referer
    if not seen:
        return True
    parts = urlsplit(seen)  # "null" (a sandboxed frame, a file) has no host: never ours
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def by_tls(origin: str | None, scheme: str) -> bool:
    """Whether the browser reached the page by https (then the cookie is sent only so)."""
    return scheme == "https" or (origin or "").lower().startswith("https://")
