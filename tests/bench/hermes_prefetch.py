"""The Hermes provider's prefetch on a long history: its p50/p95 as Hermes sees it, over HTTP.

    .venv/bin/python -m tests.bench.hermes_prefetch [EVENTS]      # default 100000

Builds the bench's synthetic history of EVENTS events in a temporary home (`coworker import`
and `coworker reflect`, as `coworker bench` does), installs the provider into a temporary
Hermes home (`coworker hermes install`'s code), starts `coworker serve` in this process
(`ServerThread`, the same uvicorn), loads the installed provider file as Hermes' loader loads a
user plugin, and times `prefetch` over the bench's 200 queries after 20 to warm up: each is a
fresh HTTP request (urllib) to `/hermes/prefetch`. Prints one JSON object: the provider's
p50/p95 (what a Hermes turn waits), the server's own (recall alone), and how many queries got
a block. Reports; never fails on time.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runtime import hermes_setup
from runtime.home import Home
from runtime.lab import bench
from runtime.serve.guard import Bucket, Limits
from runtime.serve.server import ServerThread


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _provider(folder: Path) -> Any:
    spec = importlib.util.spec_from_file_location("_hermes_user_memory.coworker",
                                                  folder / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.CoworkerMemory()


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50_ms": round(xs[len(xs) // 2], 2), "p95_ms": round(xs[int(len(xs) * 0.95) - 1], 2)}


def main(n_events: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "home"
        bench.run(n_events, n_queries=10, keep=root)  # the history, imported and reflected
        home = Home(root)
        port = _port()
        config = home.config_path.read_text(encoding="utf-8")
        home.config_path.write_text(config.replace("\nport = 8765\n", f"\nport = {port}\n"),
                                    encoding="utf-8")
        folder = hermes_setup.install(home, Path(tmp) / "hermes", f"http://127.0.0.1:{port}",
                                      []).folder
        # the guard's rate limit (120 at once, then 2 a second a source) is a Hermes turn's
        # few requests many times over; the bench's 220 back to back are not a turn
        server = ServerThread.start(home, home.settings(),
                                    Limits(Bucket(10**6, 10**6), Bucket(10, 1 / 30)))
        try:
            p = _provider(folder)
            p.initialize("bench", platform="cli", agent_context="primary")
            qs = bench.queries(200)
            for q in qs[:20]:
                p.prefetch(q)
            took, served, blocks = [], [], 0
            for q in qs:
                t = time.perf_counter()
                got = p._post("prefetch", {"query": q})
                took.append((time.perf_counter() - t) * 1000)
                served.append(float(got["ms"]))
                blocks += bool(got["block"])
            p.shutdown()
        finally:
            server.stop()
        return {"events": n_events, "queries": len(qs), "with_a_block": blocks,
                "prefetch": _stats(took), "server_recall": _stats(served)}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)))
