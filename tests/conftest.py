"""Shared fixtures: every test gets its own coworker home (through COWORKER_HOME) and, when it
asks, a real HTTP server on 127.0.0.1 that speaks the Messages API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.home import Home

from .fakeapi import FakeMessagesAPI

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith("COWORKER_") or key.startswith("ANTHROPIC_"):
            monkeypatch.delenv(key)
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("COWORKER_HOME", str(root))
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def api() -> FakeMessagesAPI:
    server = FakeMessagesAPI().start()
    yield server
    server.stop()


def write_config(root: Path, api_url: str | None = None, **sections: dict) -> Path:
    """A config.toml for tests: fast ticks and retries, the fake endpoint when given."""
    cfg = {
        "coworker": {"tick_seconds": 1, "max_tick_seconds": 4},
        "model": {"retry_wait_s": 0.01, "retry_max_wait_s": 0.05, "max_retries": 3,
                  "timeout_s": 5.0, "name": "fake-model"},
    }
    if api_url:
        cfg["model"].update({"base_url": api_url, "api_key": "test-key"})
    else:
        cfg["model"]["provider"] = "none"
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    lines = []
    for name, values in cfg.items():
        lines.append(f"[{name}]")
        for k, v in values.items():
            lines.append(f"{k} = {_toml(v)}")
        lines.append("")
    path = root / "config.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    return repr(v)


@pytest.fixture
def home(isolated_home: Path, api: FakeMessagesAPI) -> Home:
    h = Home.locate(isolated_home)
    h.init()
    write_config(isolated_home, api.url)
    return h


@pytest.fixture
def offline_home(isolated_home: Path) -> Home:
    h = Home.locate(isolated_home)
    h.init()
    write_config(isolated_home)
    return h


def run_tick(loop) -> object:  # noqa: ANN001 - a runtime.loop.Loop
    """One tick of `loop` in its own event loop (the HTTP client is bound to the event loop
    that made it, so each asyncio.run makes its own and closes it)."""
    import asyncio

    async def go():  # noqa: ANN202
        loop._make_model()
        try:
            return await loop.tick()
        finally:
            if loop.model is not None:
                await loop.model.close()
    return asyncio.run(go())


def tell(home: Home, body: str) -> int:
    """An owner message as `coworker tell` records it: the event and its pending input."""
    from runtime.store import Event, Store
    from runtime.store import inputs

    with Store.open(home.db_path) as store:
        return inputs.add_message(store, Event.owner_message(body, "tell"))


def coworker(*args: str, cwd: Path | None = None, env: dict | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real `coworker` command in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "runtime.entry", *args], cwd=cwd, env=env or dict(os.environ),
        capture_output=True, text=True, timeout=timeout)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--faults-seed", type=int, default=1234,
                     help="seed of the fault-injection suite (tests/test_faults.py)")


@pytest.fixture
def faults_seed(request: pytest.FixtureRequest) -> int:
    """The seed that picks the fault suite's faults and kill points (--faults-seed N)."""
    return int(request.config.getoption("--faults-seed"))
