"""The checks every request to `coworker serve` passes before it may write anything.

Owns: the Host header against the bind address and `[serve] allowed_hosts` (a page elsewhere
that makes a browser post to 127.0.0.1 through a name it controls, DNS rebinding, is turned
away); a rate limit per source (a token bucket of requests, and a smaller one of failed
authentications that, once spent, turns the source away for a while); the body limit; the
owner's bearer token compared in constant time; and the three signature schemes of
`[[hooks]]`: GitHub's (`X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256 of the raw body
under the hook's secret), the same over a header the hook names (`hmac-sha256`), and a bearer
token. Pure functions and small classes: it never reads settings, never writes and never logs.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

MAX_BODY = 1 << 20  # 1 MiB: a GitHub payload is at most 25 MB, but the ones worth a turn are small
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
GITHUB_SIGNATURE = "X-Hub-Signature-256"
GITHUB_EVENT = "X-GitHub-Event"
GITHUB_DELIVERY = "X-GitHub-Delivery"
EVENT_HEADER = "X-Event-Type"  # the event type of a hook of another scheme (its `events` filter)


def host_name(header: str | None) -> str | None:
    """The name of a Host header, lower case, without its port or a final dot:
    "[::1]:8765" -> "::1", "Example.com.:443" -> "example.com"; None when absent or empty."""
    if not header or not header.strip():
        return None
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:h.index("]")] if "]" in h else None
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".") or None


def host_allowed(header: str | None, bind: str, allowed: Iterable[str]) -> bool:
    """Whether a request's Host header names this server: its bind address, a name in
    `allowed` (a reverse proxy's), or this machine's own loopback names (no page on the web
    can make a browser send those to another machine)."""
    name = host_name(header)
    if name is None:
        return False
    names = {host_name(h) for h in (bind, *allowed)} | LOOPBACK_NAMES
    return name in names


class Bucket:
    """Token buckets by key: `take(key)` is False when the key has spent its `burst` and has
    not earned one back at `per_s`. Thread-safe; forgets full buckets past `keep` keys."""

    def __init__(self, burst: float, per_s: float, clock: Callable[[], float] = time.monotonic,
                 keep: int = 10_000) -> None:
        self.burst, self.per_s, self.clock, self.keep = burst, per_s, clock, keep
        self._left: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _level(self, key: str, now: float) -> float:
        left, then = self._left.get(key, (self.burst, now))
        return min(self.burst, left + (now - then) * self.per_s)

    def take(self, key: str) -> bool:
        with self._lock:
            now = self.clock()
            left = self._level(key, now)
            if left < 1:
                self._left[key] = (left, now)
                return False
            self._left[key] = (left - 1, now)
            if len(self._left) > self.keep:
                self._forget(now)
            return True

    def spent(self, key: str) -> bool:
        """Whether `key` has nothing left (without taking any)."""
        with self._lock:
            return self._level(key, self.clock()) < 1

    def wait_s(self, key: str) -> int:
        """Whole seconds until `key` has one again (a Retry-After)."""
        with self._lock:
            left = self._level(key, self.clock())
        return 0 if left >= 1 else int((1 - left) / self.per_s) + 1

    def _forget(self, now: float) -> None:
        for key in [k for k in self._left if self._level(k, now) >= self.burst]:
            del self._left[key]


@dataclass
class Limits:
    """The rate limits of one server: every request, and failed authentications."""

    requests: Bucket
    failures: Bucket

    @classmethod
    def default(cls, clock: Callable[[], float] = time.monotonic) -> Limits:
        # 120 at once then 2 a second: a burst of GitHub deliveries or a script's tells pass
        # 10 failed tokens or signatures, then one more every 30 s: guessing goes nowhere
        return cls(Bucket(120, 2.0, clock), Bucket(10, 1 / 30, clock))


def same(given: str, expected: str) -> bool:
    """Constant-time equality of two secrets (as UTF-8 bytes)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               expected.encode("utf-8", "surrogatepass"))


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class Verdict(StrEnum):
    OK = "ok"
    MISSING = "missing"  # no credential at all: 401
    WRONG = "wrong"      # a credential that does not match: 403 (a token: 401)


def signature(secret: str, body: bytes) -> str:
    """`sha256=<hex>`: the HMAC-SHA256 of `body` under `secret`, as GitHub sends it."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def check_signature(secret: str, body: bytes, header: str | None) -> Verdict:
    """A `sha256=<hex>` header against the body's HMAC, compared in constant time."""
    if not header or not header.strip():
        return Verdict.MISSING
    given = header.strip().encode("latin-1", "replace")  # as the header arrived, byte for byte
    return Verdict.OK if hmac.compare_digest(given, signature(secret, body).encode()) \
        else Verdict.WRONG


def check_bearer(secret: str, header: str | None) -> Verdict:
    token = bearer(header)
    if token is None:
        return Verdict.MISSING
    return Verdict.OK if same(token, secret) else Verdict.WRONG


class TooLarge(Exception):
    """A body past the limit (413)."""


def declared_too_large(content_length: str | None, limit: int = MAX_BODY) -> bool:
    """Whether a Content-Length header already says the body is over `limit`."""
    try:
        return content_length is not None and int(content_length) > limit
    except ValueError:
        return False
