"""The house stays easy to walk: the arrows between rooms run one way, every module says what it
owns, and no function grows past a cyclomatic complexity of 15 (ruff's C901, as mccabe counts).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

MODULES = sorted(p for d in ("runtime", "rituals") for p in (REPO / d).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """The runtime modules `path` imports, as dotted names from the package root."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level \
                else []
            name = ".".join([*base, node.module] if node.module else base)
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


# room -> the rooms it must never import (the loop calls memory, memory reads the store, the
# store knows nothing of the loop; no room imports a door)
NEVER = {
    "runtime.store": ("runtime.loop", "runtime.memory", "runtime.tools", "runtime.cli",
                      "runtime.actions", "runtime.mcp_server", "runtime.model", "rituals"),
    "runtime.memory": ("runtime.loop", "runtime.tools", "runtime.cli", "runtime.actions",
                       "runtime.mcp_server"),
    "runtime.tools": ("runtime.loop", "runtime.cli", "runtime.mcp_server"),
    "runtime.actions": ("runtime.loop", "runtime.cli", "runtime.mcp_server", "runtime.model"),
    "runtime.loop": ("runtime.cli", "runtime.mcp_server"),
}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_arrows_run_one_way(path: Path) -> None:
    module = ".".join(path.relative_to(REPO).with_suffix("").parts)
    for room, never in NEVER.items():
        if module == room or module.startswith(room + "."):
            bad = sorted(i for i in _imports(path)
                         if any(i == n or i.startswith(n + ".") for n in never))
            assert not bad, f"{module} imports {bad}: that arrow points the wrong way"


def test_the_walk_imports_no_model() -> None:
    imported = _imports(REPO / "runtime" / "memory" / "walk.py")
    assert not [i for i in imported if "model" in i or "embed" in i or "anthropic" in i]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_module_says_what_it_owns(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if path.name == "__init__.py" and not doc:
        pytest.fail(f"{path.relative_to(REPO)}: a package's __init__ says what the package holds")
    assert doc and len(doc) > 20, f"{path.relative_to(REPO)} has no docstring saying what it owns"


def test_no_function_above_complexity_15() -> None:
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "C901",
                        "--config", "lint.mccabe.max-complexity=15", "--output-format",
                        "concise", "runtime", "rituals"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"too complex (split them):\n{r.stdout}{r.stderr}"
