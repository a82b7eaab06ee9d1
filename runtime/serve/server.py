"""Running `coworker serve`'s app: uvicorn on a socket bound here, in the foreground or in a
thread of the loop.

Owns the listening socket (bound before uvicorn starts, so an address in use is a clear
OSError for the caller, not uvicorn's exit), uvicorn's configuration (no access log, no
lifespan, h11, the proxy headers of a reverse proxy on this machine only), the owner's token
made when there is none yet, and the two ways to run: `run_foreground` until SIGINT or SIGTERM
(a clean stop, exit 0: uvicorn's own handlers would raise the signal again after), and
`ServerThread`, which `[serve] enabled = true` starts beside the loop and the loop stops with
itself. It never decides what a request may do (app.py, guard.py).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Generator
from types import FrameType

import uvicorn

from ..home import Home
from ..secrecy import register_secret
from ..settings import Settings
from . import token as token_file
from .app import make_app
from .guard import Limits

log = logging.getLogger("runtime.serve")

STOP_S = 5.0  # how long a stop waits for requests in flight


def where(settings: Settings) -> str:
    host = settings.serve.host
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.serve.port}"


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port; OSError when it cannot (in use, no such address)."""
    family, kind, proto, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def ready(home: Home) -> str:
    """The owner's token, made now when there is none (as `coworker init` does), registered."""
    value, _ = token_file.ensure(home.secrets_path)
    register_secret(value)
    return value


class _Server(uvicorn.Server):
    """uvicorn's server; in the main thread SIGINT and SIGTERM stop it and are not raised again
    after (the CLI exits 0); in another thread it leaves signals alone (the loop owns them)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def stop(sig: int, frame: FrameType | None) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True
        saved = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)


def server(home: Home, settings: Settings, limits: Limits | None = None) -> _Server:
    app = make_app(home, settings, limits)
    config = uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="on", http="h11", ws="none",
        loop="asyncio", server_header=False, timeout_keep_alive=5,
        timeout_graceful_shutdown=int(STOP_S), limit_concurrency=100,
        # X-Forwarded-For is believed only from this machine, and only once a reverse proxy is
        # declared (allowed_hosts names it, or allow_remote): without it every stranger behind
        # the proxy would be 127.0.0.1 and share one rate limit
        proxy_headers=settings.serve.allow_remote or bool(settings.serve.allowed_hosts),
        forwarded_allow_ips="127.0.0.1,::1")
    # uvicorn's start and stop lines, and the MCP SDK's line per session: ours say what matters
    for name in ("uvicorn", "uvicorn.error", "mcp"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))
    return _Server(config)


def warn_unready_hooks(settings: Settings) -> None:
    from ..errors import ConfigError
    from ..settings_talk import SECRET_PREFIX, resolve_secret

    for hook in settings.hooks:
        try:
            register_secret(resolve_secret(SECRET_PREFIX + hook.secret, settings.secrets,
                                           f"[[hooks]] {hook.name}"))
        except ConfigError as e:
            log.warning("serve: %s (its deliveries are refused with 503 until it is)", e)


def run_foreground(home: Home, settings: Settings, said: Callable[[str], None]) -> None:
    """Serve until SIGINT or SIGTERM; `said(where)` once it listens. OSError when the
    address cannot be had."""
    ready(home)
    warn_unready_hooks(settings)
    sock = listen(settings.serve.host, settings.serve.port)
    srv = server(home, settings)
    said(where(settings))
    try:
        srv.run(sockets=[sock])
    finally:
        sock.close()


class ServerThread:
    """The server in a daemon thread of this process (the loop's, `[serve] enabled`)."""

    def __init__(self, srv: _Server, sock: socket.socket) -> None:
        self.srv, self.sock = srv, sock
        self.port = int(sock.getsockname()[1])
        self.thread = threading.Thread(target=self._run, name="coworker-serve", daemon=True)

    @classmethod
    def start(cls, home: Home, settings: Settings, limits: Limits | None = None
              ) -> ServerThread:
        """Bind (OSError here when it cannot), then serve in a thread."""
        ready(home)
        warn_unready_hooks(settings)
        sock = listen(settings.serve.host, settings.serve.port)
        t = cls(server(home, settings, limits), sock)
        t.thread.start()
        log.info("serve: listening on %s (the page at /, POST /tell, POST /hooks/NAME, MCP at "
                 "/mcp, the Hermes door at /hermes/)", where(settings))
        return t

    def _run(self) -> None:
        try:
            self.srv.run(sockets=[self.sock])
        except BaseException as e:  # noqa: BLE001 - a thread's end is logged, never raised
            log.warning("serve: the HTTP server stopped (%s: %s)", type(e).__name__, e)

    def stop(self, timeout: float = STOP_S * 2) -> None:
        self.srv.should_exit = True
        self.thread.join(timeout)
        self.sock.close()
        if self.thread.is_alive():
            log.warning("serve: the HTTP server did not stop within %.0f s", timeout)
