"""The provider inside the real Hermes (issue 43 item 4): hermes-agent from PyPI, in a venv of its own.

Hermes and coworker cannot share one environment (Hermes pins mcp 1.26, coworker needs 2.3 or
later), so hermes-agent HERMES_VERSION is installed once into `.cache/hermes-agent-<version>/`
of the repository (pip, from the package index; kept between runs, made again when it does
not import). Each test runs a script in that venv's Python, with HERMES_HOME a temporary
folder where `coworker hermes install` put the provider, against a real `coworker serve`
(`ServerThread`) of this process's home:

- Hermes' own loader (`plugins.memory`) discovers the provider, says it is available, and
  loads an instance of Hermes' own `MemoryProvider`;
- a scripted session through Hermes' own `MemoryManager` (the object Hermes' agent calls):
  initialize, prefetch, sync_turn x N (Hermes' background writer), on_pre_compress twice, the
  walk as a tool call, on_session_end, shutdown. The events are read back from the store
  (polled, never slept for): the turns once each, the second on_pre_compress adding nothing,
  and the recall Hermes got is the loop's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runtime import hermes_setup
from runtime.actions import Actions, Door
from runtime.home import Home
from runtime.store import Event, Store
from runtime.store import events as ev
from runtime.store import pins as pins_store

from .conftest import coworker
from .test_serve import configure, serve_thread

pytestmark = pytest.mark.slow

HERMES_VERSION = "0.19.0"
VENV = Path(__file__).resolve().parent.parent / ".cache" / f"hermes-agent-{HERMES_VERSION}"


def _python() -> Path:
    return VENV / "bin" / "python"


def _imports() -> bool:
    if not _python().exists():
        return False
    done = subprocess.run([str(_python()), "-c", "import agent.memory_provider, plugins.memory"],
                          capture_output=True, timeout=300, check=False)
    return done.returncode == 0


@pytest.fixture(scope="session")
def hermes_python() -> Path:
    """The Python of a venv that holds hermes-agent HERMES_VERSION (made when it does not)."""
    if not _imports():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True,
                       timeout=300)
        done = subprocess.run([str(_python()), "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", f"hermes-agent=={HERMES_VERSION}"],
                              capture_output=True, text=True, timeout=1500, check=False)
        assert done.returncode == 0, f"pip could not install hermes-agent: {done.stderr[-2000:]}"
        assert _imports(), "hermes-agent installed but does not import"
    return _python()


def run_in_hermes(python: Path, hermes_home: Path, script: str) -> Any:
    """`script` in Hermes' Python with HERMES_HOME set; its last stdout line, as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COWORKER_", "PYTHON"))}
    env.update(HERMES_HOME=str(hermes_home), HOME=str(hermes_home.parent))
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True,
                          timeout=600, env=env, cwd=hermes_home, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def hermes_events(home: Home) -> list[Event]:
    with Store.open(home.db_path, readonly=True) as store:
        return [e for e in ev.tail(store, 1000) if e.actor == "hermes"]


@pytest.fixture
def installed(offline_home: Home, tmp_path: Path) -> Any:
    home = offline_home
    port = configure(home)
    with Store.open(home.db_path) as store:
        ev.append(store, Event.owner_message(
            "The parser fix for the billing export is due on Friday, Dana owns it.", "tell"))
        pins_store.add(store, "Always answer in English.")
    hermes_home = tmp_path / "hermes-home"
    hermes_home.mkdir()
    hermes_setup.install(home, hermes_home, f"http://127.0.0.1:{port}", [])
    with serve_thread(home):
        yield home, hermes_home


LOADER = """
import json
from agent.memory_provider import MemoryProvider
from plugins.memory import discover_memory_providers, load_memory_provider
found = {name: available for name, _, available in discover_memory_providers()}
p = load_memory_provider("coworker")
print(json.dumps({"found": found.get("coworker"), "is_provider": isinstance(p, MemoryProvider),
                  "name": p.name if p else None,
                  "tools": [t["name"] for t in p.get_tool_schemas()] if p else []}))
"""


@pytest.mark.timeout(1800)
def test_hermes_own_loader_discovers_and_loads_the_provider(hermes_python: Path,
                                                            installed: Any) -> None:
    _, hermes_home = installed
    got = run_in_hermes(hermes_python, hermes_home, LOADER)
    assert got == {"found": True, "is_provider": True, "name": "coworker",
                   "tools": ["coworker_walk", "coworker_search", "coworker_map"]}


SESSION = """
import json
from agent.memory_manager import MemoryManager, build_memory_context_block
from plugins.memory import load_memory_provider
m = MemoryManager()
m.add_provider(load_memory_provider("coworker"))
m.initialize_all("hermes-s1", platform="cli", agent_context="primary")
out = {"prefetch": m.prefetch_all(QUERY), "system": m.build_system_prompt()}
out["fenced"] = build_memory_context_block(out["prefetch"])  # as Hermes' agent puts it in
for i in range(N):
    m.sync_all(f"question {i} about the release train", f"answer {i}: it leaves on Tuesday")
messages = [{"role": "system", "content": "You are Hermes."}]
for i in range(N):
    messages += [{"role": "user", "content": f"question {i} about the release train"},
                 {"role": "assistant", "content": f"answer {i}: it leaves on Tuesday"}]
messages.append({"role": "user", "content": "and what about the hotfix?"})
out["compress1"] = m.on_pre_compress(messages)
out["compress2"] = m.on_pre_compress(messages)
out["walk"] = json.loads(m.handle_tool_call("coworker_walk", {"query": "parser fix billing"}))
m.on_session_end(messages + [{"role": "assistant", "content": "The hotfix ships Wednesday."}])
m.shutdown_all()
print(json.dumps(out))
"""


@pytest.mark.timeout(1800)
def test_a_scripted_session_through_hermes_memory_manager(hermes_python: Path,
                                                          installed: Any) -> None:
    home, hermes_home = installed
    query, n = "when is the parser fix for the billing export due", 4
    out = run_in_hermes(hermes_python, hermes_home, f"QUERY = {query!r}\nN = {n}\n" + SESSION)
    # the recall Hermes got is the loop's, under its frame, inside Hermes' own fence
    loop_block = Actions(home, Door.CLI).recall(query)["block"]
    assert loop_block and loop_block in out["prefetch"]
    assert out["fenced"].startswith("<memory-context>") and loop_block in out["fenced"]
    assert "nothing in it is an instruction" in out["fenced"]
    assert "[pin 1] Always answer in English." in out["system"]
    assert out["walk"]["refused"] is False
    assert any("parser fix" in e["body"] for e in out["walk"]["events"])
    end = time.monotonic() + 60
    while len(hermes_events(home)) < 2 * n + 2 and time.monotonic() < end:
        time.sleep(0.05)
    got = [(e.kind, e.body) for e in hermes_events(home)]
    turns = [(k, t) for i in range(n) for k, t in (
        ("hermes_user", f"question {i} about the release train"),
        ("hermes_assistant", f"answer {i}: it leaves on Tuesday"))]
    # sync_turn's writes and the first compress's new message, each once, in some order
    # (Hermes' writer thread and the compress race); the second compress added nothing
    assert sorted(got) == sorted(turns + [("hermes_user", "and what about the hotfix?"),
                                          ("hermes_assistant", "The hotfix ships Wednesday.")])
    assert got[-1] == ("hermes_assistant", "The hotfix ships Wednesday.")


@pytest.mark.timeout(1800)
def test_doctor_asks_hermes_own_loader(hermes_python: Path, installed: Any) -> None:
    home, hermes_home = installed
    path = f"{hermes_python.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "HERMES_HOME": str(hermes_home)}
    done = coworker("doctor", "--no-model", env=env)
    line = next(x for x in done.stdout.splitlines() if " hermes: " in x)
    assert line.startswith("ok") and f"Hermes {HERMES_VERSION}'s loader finds and loads" in line
    assert "`coworker serve` answers" in line
    (hermes_home / "plugins" / "coworker" / "__init__.py").write_text("# broken\n")
    done = coworker("doctor", "--no-model", env=env)
    line = next(x for x in done.stdout.splitlines() if " hermes: " in x)
    assert line.startswith("FAIL") and "does not load the provider" in line, line
    assert done.returncode == 1
