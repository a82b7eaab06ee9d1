"""The type checker's gate: mypy passes on the product and the lab with the one configuration in
pyproject.toml, which excludes no module and silences no error wholesale, and every `type:
ignore` left in the code names its error code and says why on the same line.

The mypy run is slow on a cold cache (about half a minute on 2 CPUs), so this file is one of the
slow suites (tests/conftest.py SLOW_FILES); the configuration and comment checks are fast and
stay in the default run."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO

CHECKED = ("runtime", "rituals", "lab")  # the product and the lab, wherever the lab lives
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<why>.*)$")
MIN_REASON = 8  # characters of a reason after the comment: "untyped", "stub is wrong" ...


def _mypy_config() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as f:
        config: dict[str, Any] = tomllib.load(f)["tool"]["mypy"]
    return config


def unexplained_ignores(paths: list[Path], root: Path = REPO) -> list[str]:
    """`file:line` of every `type: ignore` with no error code or no reason after it."""
    bad = []
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = IGNORE.search(line)
            if m and (not m["codes"] or len(m["why"].strip(" #:-—")) < MIN_REASON):
                bad.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return bad


def test_the_mypy_configuration_hides_nothing() -> None:
    config = _mypy_config()
    overrides = config.get("overrides", [])
    assert "exclude" not in config
    assert not [o for o in [config, *overrides] if o.get("ignore_errors")]
    assert not [o for o in [config, *overrides] if o.get("disable_error_code")]
    assert not config.get("ignore_missing_imports"), "name the untyped libraries in an override"
    assert not [o for o in overrides if o.get("follow_imports") == "skip"]
    present = {d for d in CHECKED if (REPO / d).is_dir()}
    assert present <= set(config["files"]), f"mypy must check {sorted(present)}"


def test_every_type_ignore_says_which_error_and_why(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("a = f()  # type: ignore\n"
                      "b = f()  # type: ignore[attr-defined]\n"
                      "c = f()  # type: ignore[attr-defined]  # the stub lacks `limit`\n",
                      encoding="utf-8")
    assert [line.split(":")[1] for line in unexplained_ignores([sample], tmp_path)] == ["1", "2"]
    paths = sorted(p for d in CHECKED if (REPO / d).is_dir() for p in (REPO / d).rglob("*.py"))
    bad = unexplained_ignores(paths)
    assert not bad, "a type: ignore needs [its-code] and a reason on its line:\n" + "\n".join(bad)


@pytest.mark.slow
def test_mypy_passes_on_the_product_and_the_lab() -> None:
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"mypy (pyproject.toml [tool.mypy]) found errors:\n{r.stdout}{r.stderr}"
