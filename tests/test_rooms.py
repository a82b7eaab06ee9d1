"""The rooms of the house, read from the source with `ast` (issue 39): the lab (runtime/lab)
stands beside the product and nothing in the product imports it, but for the one hook in
runtime/cli.py that registers `coworker bench` and `coworker eval`; registering them loads none of
the lab's runs; the lab's modules import each other in no circle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from runtime.cli import cli

ROOT = Path(__file__).resolve().parent.parent
LAB = "runtime.lab"
# The one arrow from the product into the lab: runtime/cli.py's `from .lab.commands import register`.
HOOK = {("runtime.cli", "runtime.lab.commands"), ("runtime.cli", "runtime.lab.commands.register")}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, top_only: bool = False) -> set[str]:
    """Every module `path` imports (relative imports resolved; `from a import b` counts a and
    a.b), anywhere in the file, or only in its top-level statements."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes = tree.body if top_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            found |= {name} | {f"{name}.{a.name}" for a in node.names}
    return found


def _files(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def _in_lab(name: str) -> bool:
    return name == LAB or name.startswith(LAB + ".")


def test_nothing_in_the_product_imports_the_lab_but_the_cli_hook():
    arrows = {(_module(p), name) for p in _files("runtime", "rituals")
              if not _in_lab(_module(p)) for name in _imports(p) if _in_lab(name)}
    assert arrows == HOOK, "only runtime/cli.py's hook may import runtime.lab.commands"


def test_registering_the_lab_commands_loads_none_of_its_runs():
    top = {n for n in _imports(ROOT / "runtime/lab/commands.py", top_only=True) if _in_lab(n)}
    assert top <= {LAB, *(f"{LAB}.{n}" for n in ("CHANNELS", "LOCAL_MODELS",
                                                 "PARAPHRASE_HALVES"))}
    assert {"bench", "eval"} <= set(cli.commands)


def test_the_lab_modules_import_each_other_in_no_circle():
    graph = {_module(p): {n for n in _imports(p) if _in_lab(n) and n != LAB}
             for p in _files("runtime/lab")}
    graph = {m: {n for n in names if n in graph and n != m} for m, names in graph.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start] - seen:
            if nxt == goal or reaches(nxt, goal, seen | {nxt}):
                return True
        return False

    circles = sorted(m for m in graph if reaches(m, m, set()))
    assert not circles, f"import circles through {circles}"


# A statement's first word and more of it, or one of the two that stand alone ("DELETE", a
# name's value, is not SQL; "DELETE FROM" is).
SQL = re.compile(r"\s*((SELECT|INSERT|UPDATE|DELETE|WITH|PRAGMA|CREATE|ATTACH|VACUUM|BEGIN)"
                 r"\s+\S|(VACUUM|BEGIN)\s*;?\s*$)")
STORE = "runtime.store"


def _sql_in(path: Path) -> list[str]:
    """Where `path` speaks SQL: a string literal (or an f-string's opening text) that starts
    with a statement's first word, or an import of sqlite3; as "file:line"."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inner = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for v in node.values[1:]}  # an f-string's later parts do not start a statement
    where = f"{path.relative_to(ROOT)}"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inner:
            if SQL.match(node.value):
                found.append(f"{where}:{node.lineno}")
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "sqlite3"
                                                  for a in node.names):
            found.append(f"{where}:{node.lineno}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlite3":
            found.append(f"{where}:{node.lineno}")
    return found


def test_the_store_is_the_only_room_that_speaks_sql():
    """Above runtime/store/ no code knows the store is SQLite: no SQL text, no sqlite3 (the
    PostgreSQL backend of issue 42 replaces the store alone)."""
    speaking = [hit for p in _files("runtime", "rituals")
                if not (_module(p) + ".").startswith(STORE + ".") for hit in _sql_in(p)]
    def place(hit: str) -> tuple[str, int]:
        path, _, line = hit.rpartition(":")
        return path, int(line)

    assert not speaking, f"SQL outside runtime/store/: {', '.join(sorted(speaking, key=place))}"
