"""The house stays easy to walk: the arrows between rooms run one way, every module says what it
owns, and no function grows past a cyclomatic complexity of 15 as radon counts it (boolean
operators and conditional expressions included, closures scored on their own). The type
checker's gate lives in tests/test_types.py (it is slow on a cold cache).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

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


def test_arrows_run_one_way() -> None:
    wrong = []
    for path in MODULES:  # one test over every module (issue 39: not one case a module)
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for room, never in NEVER.items():
            if module == room or module.startswith(room + "."):
                bad = sorted(i for i in _imports(path)
                             if any(i == n or i.startswith(n + ".") for n in never))
                if bad:
                    wrong.append(f"{module} imports {bad}")
    assert not wrong, f"arrows pointing the wrong way: {wrong}"


def test_the_walk_imports_no_model() -> None:
    imported = _imports(REPO / "runtime" / "memory" / "walk.py")
    assert not [i for i in imported if "model" in i or "embed" in i or "anthropic" in i]


def test_every_module_says_what_it_owns() -> None:
    silent = [str(path.relative_to(REPO)) for path in MODULES
              if len(ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "") <= 20]
    assert not silent, f"modules (packages' __init__ too) with no docstring saying what they own: {silent}"


MAX_COMPLEXITY = 15
# the product and the lab (wherever the lab lives: runtime/lab/ today, maybe a top-level lab/)
COUNTED = sorted(p for d in ("runtime", "rituals", "lab") if (REPO / d).is_dir()
                 for p in (REPO / d).rglob("*.py"))


def _functions(blocks: Iterable[Function | Class], outer: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, score) of every function radon scored: top-level ones, methods, and their
    closures (a nested def is not counted in its parent's score, so it answers for itself). A
    Class block is skipped: its score sums its methods, which cc_visit lists on their own."""
    for block in blocks:
        if isinstance(block, Function):
            name = f"{outer}{block.fullname}"
            yield name, block.complexity
            yield from _functions(block.closures, f"{name}.")


def too_complex(paths: Iterable[Path], root: Path = REPO) -> list[str]:
    """`file:function:score` of every function above MAX_COMPLEXITY, worst first."""
    found = [(score, f"{path.relative_to(root)}:{name}:{score}") for path in paths
             for name, score in _functions(cc_visit(path.read_text(encoding="utf-8")))
             if score > MAX_COMPLEXITY]
    return [line for _, line in sorted(found, key=lambda x: -x[0])]


def test_the_complexity_count_sees_boolean_operators_and_closures(tmp_path: Path) -> None:
    conditions = " and ".join(f"a{i}" for i in range(15))  # one branch and 14 `and`s: 16
    sample = tmp_path / "sample.py"
    sample.write_text(f"def flat(*a):\n    return 1 if {conditions} else 0\n\n\n"
                      f"def outer():\n    def inner(*a):\n        if {conditions}:\n"
                      f"            return 1\n    return inner\n\n\n"
                      f"def fine(*a):\n    return a0 and a1\n", encoding="utf-8")
    assert too_complex([sample], tmp_path) == ["sample.py:flat:16", "sample.py:outer.inner:16"]


def test_no_function_above_complexity_15() -> None:
    offenders = too_complex(COUNTED)
    assert not offenders, ("too complex (split them into named helpers or tables), "
                           "file:function:score:\n" + "\n".join(offenders))
