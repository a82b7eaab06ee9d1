"""A local HTTP server on 127.0.0.1 that speaks the Messages API, for tests.

Not a mock of our classes: the real anthropic client serialises a real request, sends it over
real HTTP, and parses a real response. Scripted like a fake model with a queue: `enqueue()` a
reply (or an HTTP error, or garbage) and read `requests` for what was asked. When the queue is
empty, a `responder` (a callable given each request as recorded, returning a Scripted or a
body) picks the answer, else `default` is sent. A Scripted answer may hang (`delay`), drip its
body a byte at a time (`drip`), or drop the connection without a word (`reset`).
`forced_tool(request)` names the tool a request forces its answer through (reflect's summaries
and lessons); `tool_use(that name, input)` answers it as the real API would.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def usage(input_tokens: int = 100, output_tokens: int = 20, cache_read: int = 0,
          cache_write: int = 0) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write}


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn",
            **usage_kw: int) -> dict[str, Any]:
    return {
        "id": f"msg_{time.monotonic_ns()}",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage(**usage_kw),
    }


def text(t: str, **usage_kw: int) -> dict[str, Any]:
    return message([{"type": "text", "text": t}], "end_turn", **usage_kw)


def tool_use(name: str, input: Any, id: str = "toolu_1", say: str | None = None,
             **usage_kw: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if say:
        content.append({"type": "text", "text": say})
    content.append({"type": "tool_use", "id": id, "name": name, "input": input})
    return message(content, stop_reason="tool_use", **usage_kw)


def forced_tool(request: dict[str, Any]) -> str | None:
    """The tool a recorded request forces the answer through (`tool_choice` of type "tool"),
    or None. A forced call is answered with `tool_use(that name, input)`, as the real API
    does; a test that answers it with text or another tool checks the caller copes."""
    choice = (request.get("json") or {}).get("tool_choice") or {}
    return choice.get("name") if choice.get("type") == "tool" else None


@dataclass
class Scripted:
    status: int = 200
    body: Any = None  # dict -> JSON; str/bytes -> sent as is
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a large one: a hung server)
    drip: float = 0.0  # seconds between the body's bytes (a dripping server)
    reset: bool = False  # close the connection at once, no status line (a reset connection)


def error(status: int, kind: str = "api_error", msg: str = "scripted failure",
          headers: dict[str, str] | None = None) -> Scripted:
    return Scripted(status, {"type": "error", "error": {"type": kind, "message": msg}},
                    headers or {})


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 with a start/stop lifecycle; subclasses give the
    handler. Shared by the Messages API server here and the embedding server of the tests."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._stopped = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        # shutdown() waits for serve_forever's next poll: 0.5 s by default, at every test's end
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       kwargs={"poll_interval": 0.02})

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self):  # noqa: ANN201 - returns the subclass instance
        self.thread.start()
        return self

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.server.shutdown()
            self.server.server_close()


class FakeMessagesAPI(LocalServer):
    def __init__(self, default: dict[str, Any] | None = None) -> None:
        self.queue: list[Scripted] = []
        self.requests: list[dict[str, Any]] = []
        self.default = default if default is not None else text("Nothing to do.")
        # picks the answer when the queue is empty: request record -> Scripted or a body
        self.responder: Callable[[dict[str, Any]], Scripted | dict[str, Any]] | None = None
        self.lock = threading.Lock()
        self.closing = threading.Event()  # cuts a hung answer's delay short on stop()
        self.got_request = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = None
                record = {"path": self.path, "headers": dict(self.headers), "json": payload,
                          "raw": raw, "t": time.monotonic(), "wall": time.time()}
                with api.lock:
                    api.requests.append(record)
                    if api.queue:
                        item = api.queue.pop(0)
                    elif api.responder is not None:
                        answer = api.responder(record)
                        item = (answer if isinstance(answer, Scripted)
                                else Scripted(200, answer))
                    else:
                        item = Scripted(200, api.default)
                api.got_request.set()
                if item.delay:
                    api.closing.wait(item.delay)
                if item.reset:
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        # SO_LINGER 0: the close sends a RST, not a FIN
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                   struct.pack("ii", 1, 0))
                        self.connection.close()
                    return
                body = item.body
                data = (json.dumps(body).encode() if isinstance(body, dict | list)
                        else body.encode() if isinstance(body, str) else (body or b""))
                try:
                    self.send_response(item.status)
                    self.send_header("content-type", item.headers.get("content-type",
                                                                      "application/json"))
                    for k, v in item.headers.items():
                        if k.lower() != "content-type":
                            self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    if not item.drip:
                        self.wfile.write(data)
                        return
                except OSError:  # the client gave up waiting (a hung answer): nothing to say
                    self.close_connection = True
                    return
                try:
                    for i in range(len(data)):
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                        if api.closing.wait(item.drip):
                            break
                except OSError:  # the client gave up: that is the point of the drip
                    pass

        self._serve(Handler)

    def stop(self) -> None:
        self.closing.set()
        super().stop()

    def enqueue(self, *items: dict[str, Any] | Scripted) -> None:
        with self.lock:
            for it in items:
                self.queue.append(it if isinstance(it, Scripted) else Scripted(200, it))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r["json"] for r in self.requests]
