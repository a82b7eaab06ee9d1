"""The routes of `coworker serve`: `POST /tell` and `POST /hooks/NAME`, a starlette app.

`POST /tell` is the owner's door over HTTP: JSON `{"text": "..."}` with `Authorization:
Bearer <the owner's token>` tells exactly as `coworker tell` does (runtime/actions.py, the
owner's door: actor `owner`, author_kind `user`; a busy database saves it in the inbox) and
answers 202 `{"event_id": N, "woke_pid": ...}`.

`POST /hooks/NAME` is another system's door: a `[[hooks]]` entry's signature (or bearer
token) is checked over the raw body, then the payload becomes a `message` event of actor
`hook:NAME`, author_kind `agent`, meta `via = "hook"` (never the owner's words: the gate
proposes nothing from it, and a proposal citing it is queued), and a pending input that wakes
the loop at once; answered 202 `{"event_id": N}`. Its body is the payload, cut at
HOOK_BODY_CHARS (the whole payload is then in meta `payload`). A delivery id seen before, or
the same body within the store's window, is a redelivery: 200 `{"duplicate": true}`, nothing
written (runtime/store/hooks.py). An event type the hook does not take is answered 200
`{"ignored": "<type>"}`, nothing written; so is GitHub's `ping` unless `events` names it.

Every request first passes `Guard` (runtime/serve/guard.py: Host, rate limit per source,
body limit). A missing or wrong token or signature writes nothing but one WARNING line. Every
error is a JSON `{"error": "..."}` with a 4xx (5xx only when the database or a hook's secret
is not ready). The settings are re-read when config.toml or state/secrets.toml changes (a
rotated token, a new hook), keeping the last good ones when they no longer load. It never
calls a model and never imports the loop.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import process
from ..actions import Actions, Door
from ..errors import ConfigError, StoreError, UsageError
from ..home import Home
from ..secrecy import register_secret
from ..settings import Settings
from ..settings_talk import SECRET_PREFIX, Hook, resolve_secret
from ..store import Event
from ..store import hooks as hooks_store
from . import guard
from .guard import Limits, TooLarge, Verdict

log = logging.getLogger("runtime.serve")

HOOK_BODY_CHARS = 64_000  # of a payload in its event's body (the model reads it whole)
MAX_ID_CHARS = 200  # of a delivery id or an event type


def _error(status: int, why: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": why}, status_code=status, headers=headers)


class Current:
    """The home's settings as they are on disk now: re-read when config.toml or
    state/secrets.toml changed since (a rotated token, a new hook); when they no longer load,
    the last good ones stay, with one WARNING a change."""

    def __init__(self, home: Home, settings: Settings) -> None:
        self.home = home
        self.settings = settings
        self._seen = self._stamp()
        self._register(settings)

    def _stamp(self) -> tuple[tuple[int, int] | None, ...]:
        def one(p: Path) -> tuple[int, int] | None:
            try:
                st = p.stat()
            except OSError:
                return None
            return st.st_mtime_ns, st.st_size
        return one(self.home.config_path), one(self.home.secrets_path)

    def get(self) -> Settings:
        stamp = self._stamp()
        if stamp != self._seen:
            self._seen = stamp
            try:
                self.settings = self.home.settings()
                self._register(self.settings)
            except ConfigError as e:
                log.warning("serve: the config on disk does not load (%s); the last good one "
                            "stays in use", e)
        return self.settings

    def _register(self, settings: Settings) -> None:
        register_secret(settings.serve.token)
        register_secret(settings.serve.hermes_token)
        for hook in settings.hooks:
            try:
                self.secret(hook)
            except ConfigError:
                pass  # said when a delivery comes for it, and by `coworker serve` at start

    def secret(self, hook: Hook) -> str:
        """The hook's secret, registered for redaction; ConfigError when it is not set."""
        value = resolve_secret(SECRET_PREFIX + hook.secret, self.settings.secrets,
                               f"[[hooks]] {hook.name}")
        register_secret(value)
        return value


class Guard:
    """ASGI middleware: the checks before any route (guard.py), each a JSON 4xx."""

    def __init__(self, app: ASGIApp, current: Current, limits: Limits) -> None:
        self.app, self.current, self.limits = app, current, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = self.check(scope)
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        serve = self.current.get().serve
        if not guard.host_allowed(headers.get("host"), serve.host, serve.allowed_hosts):
            log.info("serve: a request for Host %r refused (not %s or [serve] allowed_hosts)",
                     headers.get("host"), serve.host)
            return _error(400, "the Host header does not name this server; add the name you "
                               "reach it by to [serve] allowed_hosts")
        source = source_of(scope)
        # the request rate only: failed credentials are counted where they fail (`refused`),
        # so a source that failed too often is still heard when its credential is right
        if not self.limits.requests.take(source):
            wait = self.limits.requests.wait_s(source)
            return _error(429, f"too many requests from {source}; try again in {wait} s",
                          {"Retry-After": str(wait)})
        if guard.declared_too_large(headers.get("content-length")):
            return _too_large()
        return None


def source_of(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _too_large() -> JSONResponse:
    return _error(413, f"the body is over the limit of {guard.MAX_BODY >> 20} MiB")


async def read_body(request: Request, limit: int = guard.MAX_BODY) -> bytes:
    """The whole body, or TooLarge as soon as it passes `limit` (chunked bodies too)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class Delivery:
    """A hook's request once its signature checked out."""

    hook: Hook
    body: bytes
    event_type: str | None
    delivery_id: str | None


class Routes:
    """The two doors, for one home."""

    def __init__(self, home: Home, current: Current, limits: Limits,
                 wake: Callable[[Home], int | None] = process.wake) -> None:
        self.home, self.current, self.limits, self.wake = home, current, limits, wake

    def refused(self, request: Request, status: int, why: str) -> JSONResponse:
        """A missing or wrong credential: one WARNING, a failure counted against the source,
        nothing written."""
        source = source_of(request.scope)
        if not self.limits.failures.take(source):  # guessing: slowed, never a valid request
            wait = self.limits.failures.wait_s(source)
            log.warning("serve: %s %s from %s refused: too many failed credentials",
                        request.method, request.url.path, source)
            return _error(429, f"too many failed credentials from {source}; try again in "
                          f"{wait} s", {"Retry-After": str(wait)})
        log.warning("serve: %s %s from %s refused: %s; nothing written", request.method,
                    request.url.path, source, why)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return _error(status, why, headers)

    # -- POST /tell ----------------------------------------------------------------------------

    async def tell(self, request: Request) -> Response:
        token = self.current.get().serve.token
        given = guard.bearer(request.headers.get("authorization"))
        if token is None:
            return _error(503, "the owner's token is not set yet: run `coworker token` where "
                               "the coworker lives")
        if given is None:
            return self.refused(request, 401, "no token: send Authorization: Bearer <token> "
                                              "(`coworker token` prints it)")
        if not guard.same(given, token):
            return self.refused(request, 401, "wrong token")
        text = _told_text(await read_body(request))
        if isinstance(text, Response):
            return text
        try:
            told = await anyio.to_thread.run_sync(Actions(self.home, Door.CLI).tell, text)
        except UsageError as e:
            return _error(400, str(e))
        except StoreError as e:
            log.warning("serve: POST /tell could not be recorded (%s)", e)
            return _error(503, str(e), {"Retry-After": "5"})
        answer: dict[str, Any] = {"event_id": told.event_id, "woke_pid": told.woke_pid}
        if told.inbox_path is not None:
            answer["inbox"] = str(told.inbox_path)
        log.info("serve: POST /tell recorded %s", f"event {told.event_id}" if told.event_id
                 else f"{told.inbox_path} (the database was busy)")
        return JSONResponse(answer, status_code=202)

    # -- POST /hooks/NAME ----------------------------------------------------------------------

    async def hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        settings = self.current.get()
        hook = next((h for h in settings.hooks if h.name == name), None)
        if hook is None:
            return _error(404, f"no hook named {name[:64]!r}: add a [[hooks]] entry with "
                               "that name to config.toml")
        try:
            secret = self.current.secret(hook)
        except ConfigError as e:
            log.warning("serve: POST /hooks/%s refused: %s", name, e)
            return _error(503, f"hook {name} is not ready: its secret is not set (the "
                               "coworker's log says which)")
        got = await self._signed(request, hook, secret)
        if isinstance(got, Response):
            return got
        return await self._take(got)

    async def _signed(self, request: Request, hook: Hook, secret: str) -> Delivery | Response:
        """The request's body once its credential checks out, or the refusal."""
        headers = request.headers
        if hook.scheme == "bearer":
            verdict = guard.check_bearer(secret, headers.get("authorization"))
            body = await read_body(request) if verdict is Verdict.OK else b""
        else:
            body = await read_body(request)
            header = guard.GITHUB_SIGNATURE if hook.scheme == "github" else hook.signature_header
            verdict = guard.check_signature(secret, body, headers.get(header))
        if verdict is not Verdict.OK:
            what = "token" if hook.scheme == "bearer" else "signature"
            return self.refused(request, 401 if verdict is Verdict.MISSING else 403,
                                f"{verdict} {what} for hook {hook.name}")
        return _delivery(hook, headers, body)

    async def _take(self, d: Delivery) -> Response:
        if (ignored := _ignored(d)) is not None:
            log.info("serve: hook %s: event %s ignored (not in its events)", d.hook.name,
                     ignored)
            return JSONResponse({"ignored": ignored}, status_code=200)
        try:
            text = d.body.decode("utf-8")
        except UnicodeDecodeError as e:
            return _error(400, f"the body is not UTF-8 text (byte 0x{d.body[e.start]:02x} at "
                               f"offset {e.start})")
        if not text.strip():
            return _error(400, "the body is empty: a hook's payload is its message")
        digest = hashlib.sha256(d.body).hexdigest()
        event = hook_event(d, text, digest)
        try:
            taken = await anyio.to_thread.run_sync(self._record, d, digest, event)
        except StoreError as e:
            log.warning("serve: hook %s: delivery not recorded (%s); the sender may retry",
                        d.hook.name, e)
            return _error(503, str(e), {"Retry-After": "5"})
        if taken.duplicate:
            log.info("serve: hook %s: delivery %s is a redelivery of event %d; taken once",
                     d.hook.name, d.delivery_id or digest[:12], taken.event_id)
            return JSONResponse({"duplicate": True, "event_id": taken.event_id}, status_code=200)
        pid = self.wake(self.home)
        log.info("serve: hook %s: %s delivery %s recorded as event %d; %s", d.hook.name,
                 d.event_type or "a", d.delivery_id or digest[:12], taken.event_id,
                 "no coworker running" if pid is None else f"woke pid {pid}")
        return JSONResponse({"event_id": taken.event_id}, status_code=202)

    def _record(self, d: Delivery, digest: str, event: Event) -> hooks_store.Taken:
        with self.home.open_store() as store:
            return hooks_store.take(store, d.hook.name, d.delivery_id, digest, event,
                                    d.event_type)


def _delivery(hook: Hook, headers: Headers, body: bytes) -> Delivery | Response:
    """A signed request's event type and delivery id (GitHub's headers, or the hook's own),
    or the 400 when one is too long to be one."""
    github = hook.scheme == "github"
    event_type = headers.get(guard.GITHUB_EVENT if github else guard.EVENT_HEADER)
    id_header = hook.id_header or (guard.GITHUB_DELIVERY if github else None)
    delivery_id = headers.get(id_header) if id_header else None
    for what, value in (("event type", event_type), ("delivery id", delivery_id)):
        if value is not None and len(value) > MAX_ID_CHARS:
            return _error(400, f"the {what} is over {MAX_ID_CHARS} characters")
    return Delivery(hook, body, event_type or None, delivery_id or None)


def _told_text(body: bytes) -> str | Response:
    """The text of a /tell body (`{"text": "..."}`), or the 400 that says what is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _error(400, 'the body is not JSON: send {"text": "..."}')
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        return _error(400, 'send a JSON object with the message as "text": {"text": "..."}')
    if extra := sorted(set(data) - {"text"}):
        return _error(400, f"unknown field(s) {', '.join(map(repr, extra))}: send only "
                           '{"text": "..."}')
    if not data["text"].strip():
        return _error(400, 'nothing to tell: "text" is empty')
    return str(data["text"])


def _ignored(d: Delivery) -> str | None:
    """The event type when the hook does not take it, else None. A hook with no `events`
    takes every type but GitHub's `ping` (sent once when a webhook is made)."""
    kind = d.event_type
    if not d.hook.events:
        return kind if d.hook.scheme == "github" and kind == "ping" else None
    if kind is None:
        return "(no event type)"
    return None if kind in d.hook.events else kind


def hook_event(d: Delivery, text: str, digest: str) -> Event:
    """The input a hook's payload becomes: another system's words, never the owner's."""
    meta: dict[str, Any] = {"via": "hook", "hook": d.hook.name, "event": d.event_type,
                            "delivery": d.delivery_id, "digest": digest}
    body = text
    if len(text) > HOOK_BODY_CHARS:
        body = (text[:HOOK_BODY_CHARS] + f"\n[cut: the first {HOOK_BODY_CHARS:,} of "
                f"{len(text):,} characters of the payload; the whole is in this event's meta]")
        meta["payload"] = text
    return Event(kind="message", body=body, actor=f"hook:{d.hook.name}", author_kind="agent",
                 meta=meta)


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return _error(404, f"no such path {request.url.path[:100]!r}: POST /tell, "
                           "POST /hooks/NAME, POST /hermes/..., the page at / or MCP at /mcp")
    if status == 405:
        allow = (getattr(exc, "headers", None) or {}).get("Allow", "POST")
        return _error(405, f"{request.method} is not taken here: {allow}", {"Allow": allow})
    return _error(status, str(getattr(exc, "detail", "")) or "bad request")


async def _too_large_error(request: Request, exc: Exception) -> Response:
    return _too_large()


async def _crash(request: Request, exc: Exception) -> Response:
    """A request the server failed on: logged whole at ERROR, answered as every error is."""
    log.error("serve: %s %s failed (%s: %s)", request.method, request.url.path,
              type(exc).__name__, exc, exc_info=exc)
    return _error(500, "the server failed on this request; its log says why")


async def _gone(request: Request, exc: Exception) -> Response:
    return Response(status_code=400)  # the client left mid-body: nobody reads the answer


class Dispatch:
    """ASGI: the team's MCP (`/mcp`, and the OAuth resource metadata the SDK's auth names
    under `/.well-known/`) to its own app, which also gets the server's lifespan (the SDK's
    session manager runs there); every other path to the doors and the page."""

    def __init__(self, doors: ASGIApp, team: ASGIApp) -> None:
        self.doors, self.team = doors, team

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or _team_path(scope.get("path", "")):
            await self.team(scope, receive, send)
        else:
            await self.doors(scope, receive, send)


def _team_path(path: str) -> bool:
    return path == "/mcp" or path.startswith(("/mcp/", "/.well-known/"))


def make_app(home: Home, settings: Settings, limits: Limits | None = None,
             wake: Callable[[Home], int | None] = process.wake) -> ASGIApp:
    """The app for one home: the doors, the page and the team's MCP, behind the guard."""
    from . import hermes, page, team

    current = Current(home, settings)
    limits = limits or Limits.default()
    routes = Routes(home, current, limits, wake)
    doors = Starlette(
        routes=[Route("/tell", routes.tell, methods=["POST"]),
                Route("/hooks/{name}", routes.hook, methods=["POST"]),
                *hermes.routes(routes),
                *page.routes(home, current, limits, wake)],
        exception_handlers={HTTPException: _http_error, TooLarge: _too_large_error,
                            ClientDisconnect: _gone, Exception: _crash})
    return Guard(Dispatch(doors, team.make_app(home, current, limits)), current, limits)
