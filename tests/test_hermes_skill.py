"""contrib/hermes-recall: the skill's frontmatter, size, and a worked example that is still true."""

from __future__ import annotations

import json
import os
import re
import subprocess

from .conftest import REPO, coworker

SKILL_DIR = REPO / "contrib" / "hermes-recall"
SKILL = SKILL_DIR / "SKILL.md"


def frontmatter(text: str) -> dict[str, str]:
    """The agentskills frontmatter: `key: value`, or a folded `key: >-` block."""
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert m, "SKILL.md must open with a --- frontmatter block"
    out: dict[str, str] = {}
    key = None
    for line in m.group(1).splitlines():
        if line.startswith("  ") and key:
            out[key] = (out[key] + " " + line.strip()).strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            value = value.strip()
            out[key] = "" if value in (">-", ">", "|") else value
    return out


def test_frontmatter_name_description_and_size():
    text = SKILL.read_text(encoding="utf-8")
    fm = frontmatter(text)
    assert fm["name"] == SKILL_DIR.name == "hermes-recall"
    assert 0 < len(fm["description"]) < 1024
    assert "Use it when" in fm["description"] and "Do not use it" in fm["description"]
    assert len(text.splitlines()) < 500
    assert os.access(SKILL_DIR / "scripts" / "walk.sh", os.X_OK)


def test_the_worked_example_still_matches_what_walk_prints(isolated_home):
    assert coworker("init").returncode == 0
    r = coworker("import", str(SKILL_DIR / "example" / "history.jsonl"))
    assert r.returncode == 0, r.stderr
    assert coworker("reflect").returncode == 0
    walked = coworker("walk", "cache", "double", "charges", "--json")
    assert walked.returncode == 0, walked.stderr
    block = re.search(r"<!-- example-output -->\n```json\n(.*?)\n```\n<!-- /example-output -->",
                      SKILL.read_text(encoding="utf-8"), re.S)
    assert block, "the example output block is missing from SKILL.md"
    assert json.loads(block.group(1)) == json.loads(walked.stdout), \
        "SKILL.md's example no longer matches `coworker walk cache double charges --json`"
    refused = coworker("walk", "quarterly", "budget", "offsite", "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout)["refused"] is True


def test_the_script_wrapper_walks_and_exits_like_the_cli(isolated_home):
    assert coworker("init").returncode == 0
    coworker("import", str(SKILL_DIR / "example" / "history.jsonl"))
    env = dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    script = str(SKILL_DIR / "scripts" / "walk.sh")
    found = subprocess.run([script, "cache", "double", "charges"], capture_output=True,
                           text=True, env=env)
    assert found.returncode == 0 and json.loads(found.stdout)["refused"] is False
    none = subprocess.run([script], capture_output=True, text=True, env=env)
    assert none.returncode == 2 and "usage" in none.stderr
