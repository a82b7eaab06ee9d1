"""The owner's page, served by `coworker serve` at `/`: read, tell, approve, from a browser.

Owns the page's routes: `GET /login` and `POST /login` (the form field `token`, the owner's
token; a browser's Origin must be this server's), `POST /logout`, the four views (`/` the
conversation and the status, `/queue` the approvals and promotions, `/memory` MEMORY.md, the
pins and the map, `/look` search and walk), `GET /said?after=N` (new messages and replies, as
JSON, for page.js's polling), `/static/NAME` (the CSS and the one script, files of this
package) and the owner's actions under `POST /do/...`.

Only the owner acts: every view needs the session cookie (session.py), and every POST needs
it, this server's Origin and the session's CSRF token; an action is then taken through the
actions API's owner's door (`Door.PAGE`), exactly as the CLI's command. A request without
them changes nothing: a view sends the login page (303), a POST is 403. A failed sign-in is
counted against its source (the guard's failure bucket: ten, then one every 30 s) and logged
as one WARNING.

Outside text is never code: the templates autoescape every value (none is marked safe), and
every response carries a Content-Security-Policy with `script-src 'self'` and nothing inline,
so a hook's `<script>` or `<img onerror>` is text on the page. It works with JavaScript off
(forms post, views read); page.js only polls for new replies and adds them with textContent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import anyio
import jinja2
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..actions import MAX_ID, Actions, Door
from ..errors import CoworkerError, UsageError
from ..home import Home
from . import guard, session, views
from .guard import Limits

log = logging.getLogger("runtime.serve")

HERE = Path(__file__).parent
STATIC = HERE / "static"
STATIC_FILES = {"page.css": "text/css", "page.js": "text/javascript"}
FORM_LIMIT = 1 << 20  # a form's body: a told message is at most this much typed text
SIGNED_OUT = "page-signed-out"  # in state/: when the owner last signed out, in ms

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render(name: str, code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_env.get_template(name).render(**context), status_code=code,
                        headers=HEADERS)


def _back(path: str, note: str | None = None, token: str | None = None) -> RedirectResponse:
    """303 to `path`, with `note` (signed by the owner's token) for the page to show."""
    where = path
    if note and token:
        note = note[:300]
        where += f"?note={quote(note)}&sig={session.signed_note(token, note)}"
    return RedirectResponse(where, status_code=303, headers=HEADERS)


def _ours(request: Request) -> bool:
    """Whether a POST comes from this server's own page (or from no browser at all)."""
    return session.same_origin(request.headers.get("origin"), request.headers.get("referer"),
                               request.headers.get("host"))


class Page:
    """The page's routes for one home."""

    def __init__(self, home: Home, current: Any, limits: Limits,
                 wake: Callable[[Home], int | None]) -> None:
        self.home, self.current, self.limits, self.wake = home, current, limits, wake

    # -- who is asking ----------------------------------------------------------------------

    def token(self) -> str | None:
        return self.current.get().serve.token

    @property
    def cookie(self) -> str:
        return session.cookie_name(self.current.get().serve.port)

    @property
    def _signed_out_path(self) -> Path:
        return self.home.state / SIGNED_OUT

    def _not_before(self) -> int:
        """When the owner last signed out (ms): sessions issued before it are over."""
        try:
            return int(self._signed_out_path.read_text(encoding="ascii").strip() or 0)
        except (OSError, ValueError):
            return 0

    def signed_in(self, request: Request) -> str | None:
        """The session cookie when it is a valid one, else None."""
        cookie = request.cookies.get(self.cookie)
        ok = session.valid(self.token(), cookie, not_before_ms=self._not_before())
        return cookie if ok else None

    def note(self, request: Request) -> str | None:
        """The note to show, when this server signed it."""
        note = request.query_params.get("note")
        return note if session.note_ok(self.token(), note, request.query_params.get("sig")) \
            else None

    async def _form(self, request: Request) -> dict[str, str] | Response:
        """The form's fields, or the 400 or 413 that says why it cannot be read."""
        from .app import read_body

        try:
            raw = await read_body(request, FORM_LIMIT)
        except guard.TooLarge:
            return HTMLResponse(f"the form is over {FORM_LIMIT >> 20} MiB", 413, headers=HEADERS)
        try:
            fields = parse_qs(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=20,
                              strict_parsing=bool(raw))
        except (UnicodeDecodeError, ValueError) as e:
            return HTMLResponse(f"the form cannot be read ({type(e).__name__}): send it from "
                                "the page", 400, headers=HEADERS)
        return {k: v[0] for k, v in fields.items()}

    def _refused(self, request: Request, why: str) -> Response:
        log.warning("serve: page %s %s from %s refused: %s; nothing changed", request.method,
                    request.url.path, _source(request), why)
        return render("refused.html", 403, why=why, note=None)

    # -- signing in and out -----------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        if self.signed_in(request):
            return _back("/")
        return render("login.html", note=self.note(request))

    async def login(self, request: Request) -> Response:
        if not _ours(request):
            return self._refused(request, "a sign-in from another site's page")
        source = _source(request)
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        token = self.token()
        given = form.get("token", "").strip()
        if token is None or not given or not guard.same(given, token):
            # a wrong token is counted; past the limit it is not even compared (the right one
            # always is: a stranger's guesses never lock the owner out)
            if not self.limits.failures.take(source):
                wait = self.limits.failures.wait_s(source)
                log.warning("serve: page sign-in from %s refused: too many failed tokens", source)
                return render("login.html", 429,
                              note=f"Too many wrong tokens; try again in {wait} s.")
            log.warning("serve: page sign-in from %s refused: %s", source,
                        "no token given" if not given else "wrong token")
            return render("login.html", 401, note="That is not the owner's token "
                          "(`coworker token` prints it where the coworker lives).")
        response = _back("/")
        response.set_cookie(self.cookie, session.new_session(token),
                            max_age=session.SESSION_DAYS * 86400, httponly=True,
                            samesite="strict", path="/", secure=session.by_tls(
                                request.headers.get("origin"), request.url.scheme))
        log.info("serve: the owner signed in on the page from %s", source)
        return response

    async def logout(self, request: Request) -> Response:
        return await self._do(request, "/login", self._signed_out)

    def _signed_out(self, form: dict[str, str]) -> str:
        """Every session issued until now is over, on every browser."""
        from ..home import write_private

        write_private(self._signed_out_path, f"{int(time.time() * 1000)}\n")
        return "Signed out."

    # -- views ------------------------------------------------------------------------------

    def _view(self, name: str, gather: Callable[[Request], Any]
              ) -> Callable[[Request], Awaitable[Response]]:
        async def view(request: Request) -> Response:
            cookie = self.signed_in(request)
            if cookie is None:
                return _back("/login")
            page: dict[str, Any] = {
                "here": request.url.path, "note": self.note(request),
                "csrf": session.csrf(self.token() or "", cookie)}
            try:
                data = await anyio.to_thread.run_sync(gather, request)
            except CoworkerError as e:
                log.warning("serve: page %s could not be read: %s", request.url.path, e)
                return render("problem.html", 503, problem=str(e), **page)
            return render(name, **page, **data)
        return view

    def _home(self, request: Request) -> dict[str, Any]:
        said = views.conversation(self.home)
        return {"said": said, "last": max((s["id"] for s in said), default=0),
                "status": views.status(self.home)}

    def _queue(self, request: Request) -> dict[str, Any]:
        return views.queues(self.home)

    def _memory(self, request: Request) -> dict[str, Any]:
        return views.memory(self.home)

    def _look(self, request: Request) -> dict[str, Any]:
        query = request.query_params.get("q", "").strip()
        how = "walk" if request.query_params.get("how") == "walk" else "search"
        found = views.look(self.home, query, how) if query else {}
        return {"query": query, "how": how, **found}

    async def said_since(self, request: Request) -> Response:
        if self.signed_in(request) is None:
            return JSONResponse({"error": "sign in first"}, status_code=401, headers=HEADERS)
        raw = request.query_params.get("after", "0")
        if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_ID:
            return JSONResponse({"error": "after must be an event id"}, 400, headers=HEADERS)
        try:
            said = await anyio.to_thread.run_sync(views.conversation, self.home, int(raw))
        except CoworkerError as e:
            log.warning("serve: page /said could not be read: %s", e)
            return JSONResponse({"error": str(e)}, 503, headers={**HEADERS, "Retry-After": "5"})
        return JSONResponse({"said": said}, headers=HEADERS)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return Response(status_code=404, headers=HEADERS)
        return FileResponse(STATIC / name, media_type=STATIC_FILES[name],
                            headers={**HEADERS, "Cache-Control": "no-cache"})

    # -- the owner's actions ----------------------------------------------------------------

    async def _do(self, request: Request, back: str,
                  act: Callable[[dict[str, str]], str]) -> Response:
        """One owner's action: the cookie, the Origin and the CSRF token first, then `act`
        (blocking, in a worker thread) with the form; back to `back` with what it said."""
        cookie = self.signed_in(request)
        if cookie is None:
            return self._refused(request, "not signed in")
        if not _ours(request):
            return self._refused(request, "a request from another site's page")
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        given = form.get(session.CSRF_FIELD) or request.headers.get(session.CSRF_HEADER)
        if not session.csrf_ok(self.token(), cookie, given):
            return self._refused(request, "no CSRF token, or a wrong one")
        try:
            said = await anyio.to_thread.run_sync(act, form)
        except CoworkerError as e:
            said = f"Not done: {e}"
        response = _back(back, said, self.token())
        if back == "/login":
            response.delete_cookie(self.cookie, path="/")
        return response

    def _owner(self) -> Actions:
        return Actions(self.home, Door.PAGE)

    def tell(self, form: dict[str, str]) -> str:
        told = self._owner().tell(form.get("text", ""))
        if told.event_id is None:
            return f"The database is busy; your message is saved in {told.inbox_path}."
        return f"Told (#{told.event_id})." + ("" if told.woke_pid else
                                             " No coworker is running; it reads it when it starts.")

    def action(self, form: dict[str, str]) -> str:
        item, verb = _number(form.get("id")), _verb(form)
        if verb == "approve":
            done = self._owner().approve_action(item)
            return f"Approved action {item} ({done.approval.name}): it runs once at the next " \
                   "live tick."
        self._owner().reject_action(item, form.get("why", ""))
        return f"Rejected action {item}."

    def promotion(self, form: dict[str, str]) -> str:
        item, verb = _number(form.get("id")), _verb(form)
        if verb == "approve":
            got = self._owner().approve(item)
            return f"Approved promotion {item}" + (f": [{got.entry_id}] is in MEMORY.md."
                                                    if got.entry_id else ".")
        self._owner().reject(item, form.get("why", "").strip() or None)
        return f"Rejected promotion {item}."

    def strike(self, form: dict[str, str]) -> str:
        changed = self._owner().strike(form.get("entry", ""))
        return f"Struck [{changed.entry_id}] (snapshot {changed.snapshot} kept)."

    def unstrike(self, form: dict[str, str]) -> str:
        changed = self._owner().unstrike(form.get("entry", ""))
        return f"Put back [{changed.entry_id}]."

    def pin(self, form: dict[str, str]) -> str:
        return f"Pinned ({self._owner().pin(form.get('text', ''))})."

    def unpin(self, form: dict[str, str]) -> str:
        item = _number(form.get("id"))
        self._owner().unpin(item)
        return f"Unpinned {item}."

    def routes(self) -> list[BaseRoute]:
        def do(path: str, back: str, act: Callable[[dict[str, str]], str]) -> Route:
            async def endpoint(request: Request) -> Response:
                return await self._do(request, back, act)
            return Route(path, endpoint, methods=["POST"])

        return [
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/", self._view("home.html", self._home), methods=["GET"]),
            Route("/queue", self._view("queue.html", self._queue), methods=["GET"]),
            Route("/memory", self._view("memory.html", self._memory), methods=["GET"]),
            Route("/look", self._view("look.html", self._look), methods=["GET"]),
            Route("/said", self.said_since, methods=["GET"]),
            Route("/static/{name}", self.static, methods=["GET"]),
            Route("/favicon.ico", _no_icon, methods=["GET"]),
            do("/do/tell", "/", self.tell),
            do("/do/action", "/queue", self.action),
            do("/do/promotion", "/queue", self.promotion),
            do("/do/strike", "/memory", self.strike),
            do("/do/unstrike", "/memory", self.unstrike),
            do("/do/pin", "/memory", self.pin),
            do("/do/unpin", "/memory", self.unpin),
        ]


def _verb(form: dict[str, str]) -> str:
    """approve or reject, nothing else: a decision is never guessed from a typo."""
    verb = form.get("verb", "")
    if verb not in ("approve", "reject"):
        raise UsageError(f"verb must be approve or reject, not {verb[:20]!r}")
    return verb


async def _no_icon(request: Request) -> Response:
    return Response(status_code=204, headers=HEADERS)  # no icon, and no 404 in a browser's log


def _number(raw: str | None) -> int:
    """An item's id from a form."""
    text = (raw or "").strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_ID:
        raise UsageError(f"{text[:40]!r} is not an item's number")
    return int(text)


def _source(request: Request) -> str:
    client = request.scope.get("client")
    return str(client[0]) if client else "unknown"


def routes(home: Home, current: Any, limits: Limits,
           wake: Callable[[Home], int | None]) -> list[BaseRoute]:
    return Page(home, current, limits, wake).routes()
