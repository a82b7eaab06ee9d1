"""Issue 40 end to end, as its "done" reads: a coworker started in the background with `[serve]`
on, a question asked with `coworker ask`, its answer printed and delivered to a webhook sink
and a command target; a GitHub-signed webhook waking the loop at once, its redelivery taken
once, a forged one refused. Real processes, the real anthropic client against the local
Messages API, real HTTP over loopback."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from runtime.home import Home

from .conftest import coworker
from .fakeapi import FakeMessagesAPI, text

pytestmark = pytest.mark.slow


class _Sink(BaseHTTPRequestHandler):
    got: list[tuple[str | None, dict[str, Any]]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.got.append((self.headers.get("Idempotency-Key"), json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_a: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(port: int, body: bytes, sig: str, delivery: str) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/github", data=body, method="POST",
        headers={"X-Hub-Signature-256": sig, "X-GitHub-Event": "workflow_run",
                 "X-GitHub-Delivery": delivery, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _until(check: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


@pytest.mark.timeout(180)
def test_ask_reaches_the_sink_and_the_command_and_a_signed_webhook_wakes_it(
        home: Home, api: FakeMessagesAPI) -> None:
    _Sink.got = []
    sink = HTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    port = _free_port()
    with (home.state / "secrets.toml").open("a", encoding="utf-8") as f:
        f.write('\n[secrets]\nGH_HOOK = "s3cret-hook-value"\n')
    cfg = home.config_path.read_text(encoding="utf-8")
    assert "[serve]" not in cfg  # the test home's config (tests/conftest.py write_config)
    cfg += f"""
[serve]
enabled = true
port = {port}
[[notify]]
name = "sink"
kind = "webhook"
url = "http://127.0.0.1:{sink.server_port}/hook"

[[notify]]
name = "cmd"
kind = "command"
command = ["sh", "-c", "cat >> '{home.root}/notified.txt'"]

[[hooks]]
name = "github"
scheme = "github"
secret = "GH_HOOK"
"""
    home.config_path.write_text(cfg, encoding="utf-8")
    assert coworker("start").returncode == 0
    try:
        api.enqueue(text("Dana owns the parser fix."))
        asked = coworker("ask", "--timeout", "60", "who owns the parser fix?")
        assert asked.returncode == 0 and asked.stdout.strip() == "Dana owns the parser fix."
        notified = home.root / "notified.txt"
        # `cat >>` makes the file before it writes: wait for the words, not the file
        _until(lambda: _Sink.got and notified.exists()
               and "Dana owns the parser fix." in notified.read_text())
        [(key, body)] = _Sink.got
        assert key and body["text"] == "Dana owns the parser fix."

        payload = json.dumps({"action": "completed",
                              "workflow_run": {"conclusion": "failure"}}).encode()
        sig = "sha256=" + hmac.new(b"s3cret-hook-value", payload, hashlib.sha256).hexdigest()
        api.enqueue(text("I saw the failed run."))
        before, t0 = len(api.requests), time.monotonic()
        code, got = _post(port, payload, sig, "delivery-1")
        assert code == 202 and got["event_id"]
        _until(lambda: len(api.requests) > before)
        print(f"\nwebhook -> model request: {(time.monotonic() - t0) * 1000:.0f} ms")
        assert _post(port, payload, sig, "delivery-1") == (200, {"duplicate": True,
                                                               "event_id": got["event_id"]})
        assert _post(port, payload, "sha256=" + "0" * 64, "delivery-2")[0] == 403
    finally:
        assert coworker("stop").returncode == 0
        sink.shutdown()
