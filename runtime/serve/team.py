"""The team's MCP at `/mcp`: the coworker's memory lent to a team's agents over streamable HTTP.

Owns the MCP app `coworker serve` runs at `/mcp` (and the OAuth protected-resource metadata the
SDK's auth publishes under `/.well-known/`), built from the SDK's own pieces: its streamable
HTTP transport and session manager (run in the server's lifespan), its bearer authentication
through a token verifier, and its transport security (the `Origin` check the spec asks for,
and the Host check again). The tools and resources are runtime/mcp_server.py's `build`, the
same as `coworker mcp` serves over stdio; only who the caller is differs.

A client is one `coworker clients add NAME [--can tell]` (runtime/store/clients.py): its token
is looked up by digest in the store on every request, so a client added or revoked takes
effect at once on a running server. The caller is its token's NAME, never what the client
calls itself: it may read (memory_walk, memory_search, memory_recall, pins_list, MEMORY.md,
the memory map), and with `--can tell` it may `tell`, as actor `mcp:NAME`, author_kind
`agent`, through `Door.MCP` (never the owner's authority); a read client's `tell` is a tool
error and writes nothing. Each call is counted under its client (a count that fails is a
WARNING; the call goes on).

No token, an unknown one or a revoked one is answered 401 by the SDK (with WWW-Authenticate)
and logged as one WARNING without the token's text; an `Origin` that is not this server's is
answered 403. A refused token counts against its source as the other doors' do (app.py's
`Limits.failures`: ten, then one every 30 s); a source past it gets 429 before its token is
looked up. The allowed Hosts are the bind address, this machine's loopback names and
`[serve] allowed_hosts`, each with any port; the allowed Origins are http(s):// of those,
re-read with the settings (`Current`) on each request. Every request has passed app.py's
`Guard` (Host, rate, body limit) before it comes here.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from typing import Any

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..home import Home
from ..mcp_server import Caller, build
from ..store import clients as clients_store
from .guard import LOOPBACK_NAMES, Limits, bearer, host_name

log = logging.getLogger("runtime.serve")

PATH = "/mcp"
READ, TELL = "read", "tell"  # the scopes a client's token carries
COUNT_BUSY_MS = 1000  # a count waits this long for a busy database, then is a WARNING

# why the token of the request in hand was refused, said by the verifier to `Team`'s log line
_refusal: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "coworker_team_refusal", default=None)


class Verifier:
    """The SDK's token verifier: a client's token, looked up by its digest in the store on each
    request (an added or revoked client counts at once)."""

    def __init__(self, home: Home) -> None:
        self.home = home

    async def verify_token(self, token: str) -> AccessToken | None:
        client, why = await anyio.to_thread.run_sync(self.look_up, token)
        if client is None:
            said = _refusal.get()
            if said is not None:
                said.append(why)
            return None
        return AccessToken(token=f"sha256:{clients_store.digest(token)}", client_id=client.name,
                           subject=str(client.id),
                           scopes=[READ, TELL] if client.may_tell else [READ])

    def look_up(self, token: str) -> tuple[clients_store.Client | None, str]:
        if not self.home.has_store():
            return None, "an unknown token (no client yet: `coworker clients add NAME`)"
        try:
            with self.home.open_store(readonly=True) as store:
                client = clients_store.verify(store, token)
        except Exception as e:  # noqa: BLE001 - a token that cannot be checked is refused
            return None, f"its token could not be checked ({type(e).__name__}: {e})"
        if client is None:
            return None, "an unknown token"
        if client.revoked_at is not None:
            return None, f"the token of client {client.name}, revoked at {client.revoked_at}"
        return client, ""


def caller(home: Home, ctx: Context | None) -> Caller:
    """Who calls, from the token the SDK checked for this request: its client's NAME, whether
    it may tell, and its calls counted under its row. No token (never, behind the SDK's auth):
    a nameless reader."""
    token = get_access_token()
    if token is None or token.subject is None:
        return Caller(None, may_tell=False)
    return Caller(token.client_id, may_tell=TELL in token.scopes,
                  counted=functools.partial(_count, home, int(token.subject)))


def _count(home: Home, client_id: int, what: str) -> None:
    with home.open_store(busy_timeout_ms=COUNT_BUSY_MS) as store:
        clients_store.count(store, client_id, what)


def allowed(bind: str, names: list[str]) -> tuple[list[str], list[str]]:
    """(Hosts, Origins) the SDK's transport security lets through: the bind address, the
    loopback names and `names` (a reverse proxy's), each bare and with any port; the
    Origins are http:// and https:// of the same."""
    hosts: list[str] = []
    for raw in (bind, *sorted(LOOPBACK_NAMES), *names):
        name = host_name(raw)
        if name is None:
            continue
        shown = f"[{name}]" if ":" in name else name
        hosts += [h for h in (shown, f"{shown}:*") if h not in hosts]
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return hosts, origins


class Team:
    """ASGI: the SDK's app at /mcp, with the allowed Hosts and Origins re-read from the
    settings, the Host header as the guard read it, and one WARNING for each request refused
    for its token (counted against its source when it carried one)."""

    def __init__(self, app: ASGIApp, current: Any, security: TransportSecuritySettings,
                 limits: Limits, verifier: Verifier) -> None:
        self.app, self.current, self.security = app, current, security
        self.limits, self.verifier = limits, verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan: the SDK's session manager runs there
            await self.app(scope, receive, send)
            return
        serve = self.current.get().serve
        self.security.allowed_hosts, self.security.allowed_origins = allowed(
            serve.host, list(serve.allowed_hosts))
        scope = {**scope, "headers": _plain_host(scope["headers"])}
        client = scope.get("client")
        source = str(client[0]) if client else "unknown"
        token = bearer(Headers(scope=scope).get("authorization"))
        if self.limits.failures.spent(source) and not await self._known(token):
            await self._slowed(scope, receive, send, source)
            return
        said: list[str] = []
        mark = _refusal.set(said)

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                if token is not None:  # a guess; a request with no token at all is no guess
                    self.limits.failures.take(source)
                log.warning("serve: %s %s from %s refused: %s; nothing written",
                            scope.get("method"), scope.get("path"), source,
                            said[0] if said else "no token (send Authorization: Bearer "
                                                 "<token>; `coworker clients add NAME`)")
            await send(message)
        try:
            await self.app(scope, receive, answer)
        finally:
            _refusal.reset(mark)

    async def _known(self, token: str | None) -> bool:
        """Whether `token` is an active client's: past the failure limit only a right token
        is heard (a stranger's guesses never lock the team out)."""
        if token is None:
            return False
        client, _ = await anyio.to_thread.run_sync(self.verifier.look_up, token)
        return client is not None

    async def _slowed(self, scope: Scope, receive: Receive, send: Send, source: str) -> None:
        wait_s = self.limits.failures.wait_s(source)
        log.warning("serve: %s %s from %s refused: too many failed tokens", scope.get("method"),
                    scope.get("path"), source)
        await JSONResponse({"error": f"too many failed tokens from {source}; try again in "
                                     f"{wait_s} s"}, status_code=429,
                           headers={"Retry-After": str(wait_s)})(scope, receive, send)


def _plain_host(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The Host header as the guard compared it (lower case, no final dot on the name), so the
    SDK's own check of it agrees with the guard's."""
    out = []
    for key, value in headers:
        if key.lower() == b"host":
            raw = value.decode("latin-1").strip().lower()
            name, colon, port = raw.rpartition(":") if not raw.endswith("]") else (raw, "", "")
            if not colon or not port.isdigit():
                name, colon, port = raw, "", ""
            value = (name.rstrip(".") + colon + port).encode("latin-1")
        out.append((key, value))
    return out


def make_app(home: Home, current: Any, limits: Limits) -> ASGIApp:
    """The team's MCP for one home (`current`: app.py's `Current`, the settings on disk)."""
    from .server import where

    settings = current.get()
    here = where(settings)
    verifier = Verifier(home)
    mcp = build(home, functools.partial(caller, home), verifier,
                AuthSettings(issuer_url=here, resource_server_url=f"{here}{PATH}",
                             validate_token_resource=False))
    hosts, origins = allowed(settings.serve.host, list(settings.serve.allowed_hosts))
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                         allowed_hosts=hosts, allowed_origins=origins)
    return Team(mcp.streamable_http_app(streamable_http_path=PATH, transport_security=security,
                                        host=settings.serve.host), current, security, limits,
                verifier)
