"""docs/design.md stays true to the code, the docs stand on their own, and the wrapper works from
a link.

The contracts page is checked against the real things, not a list kept beside them: the click
group `runtime.cli.cli` walked recursively (every command and subcommand has a `### coworker
...` heading, every visible option appears under it, and its help text has an example), the
`Settings` model (every section has a `### [section]` table whose row for each key shows its
default, its range and its choices), and a freshly migrated database (every table and view has
a row naming each of its columns). sqlite-utils keeps its CLI reference honest the same way.

The README stays short and links every guide in docs/, every link between the docs resolves,
and docs/cli.md is what `runtime.clidoc` renders from the real CLI now.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import typing
from pathlib import Path

import click
import pytest
from pydantic import BaseModel

from runtime import __version__, clidoc
from runtime.cli import cli
from runtime.settings import Settings, range_text
from runtime.store import Store

from .conftest import REPO

DESIGN = REPO / "docs" / "design.md"


def design_text() -> str:
    return DESIGN.read_text(encoding="utf-8")


def commands(group: click.Group = cli, path: str = "coworker"):
    """(path, command) for every command and subcommand of the real CLI, depth first."""
    for name, cmd in sorted(group.commands.items()):
        sub = f"{path} {name}"
        yield sub, cmd
        if isinstance(cmd, click.Group):
            yield from commands(cmd, sub)


def command_section(text: str, path: str) -> str | None:
    """The text under the heading `### <path>`, up to the next heading of level 1 to 3."""
    m = re.search(rf"^### {re.escape(path)}[ \t]*\n(.*?)(?=^#{{1,3}} |\Z)", text, re.M | re.S)
    return m.group(1) if m else None


def visible_options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


def section_block(text: str, heading: str) -> str | None:
    """The text under the heading line `heading` (exactly), up to the next heading."""
    m = re.search(rf"^{re.escape(heading)}[ \t]*\n(.*?)(?=^#{{1,3}} |\Z)", text, re.M | re.S)
    return m.group(1) if m else None


def key_row(block: str, key: str) -> str | None:
    for line in block.splitlines():
        if line.startswith(f"| `{key}` |"):
            return line
    return None


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


# --- commands -----------------------------------------------------------------------------------

def test_the_walk_finds_the_commands_users_rely_on():
    """The walk itself is real: a broken walk would make every check below pass vacuously."""
    found = dict(commands())
    for path in ("coworker run", "coworker log", "coworker eval", "coworker eval locomo"):
        assert path in found, sorted(found)
    assert len(found) >= 30


@pytest.mark.parametrize("path,cmd", list(commands()), ids=[p for p, _ in commands()])
def test_every_command_and_its_options_are_in_the_design_page(path: str, cmd: click.Command):
    section = command_section(design_text(), path)
    assert section is not None, f"docs/design.md has no heading '### {path}'"
    assert f"`{path}" in section, \
        f"docs/design.md: the section for `{path}` never shows how it is called"
    missing = [opt for p in visible_options(cmd) for opt in p.opts + p.secondary_opts
               if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", section)]
    assert not missing, f"docs/design.md, `{path}`: options not documented: {missing}"


@pytest.mark.parametrize("path,cmd", [("coworker", cli), *commands()],
                         ids=["coworker", *[p for p, _ in commands()]])
def test_every_command_has_help_with_an_example(path: str, cmd: click.Command):
    assert cmd.help and "Example" in cmd.help, f"`{path} --help` has no example"


# --- config keys --------------------------------------------------------------------------------

def settings_fields():
    """Each key of a section (`[serve]`...); the arrays of tables at the top ([[notify]],
    [[hooks]]) are checked as lists below, and [secrets] holds the owner's names."""
    for section, sfield in Settings.model_fields.items():
        model = sfield.default_factory
        if isinstance(model, type) and issubclass(model, BaseModel):
            for key, field in model.model_fields.items():
                yield section, key, field


def top_lists():
    """The top-level arrays of tables ([[notify]], [[hooks]]) and their entry models."""
    for section, sfield in Settings.model_fields.items():
        for arg in typing.get_args(sfield.annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield section, arg


def test_every_config_key_is_in_the_design_page_with_its_default_and_range():
    text = design_text()
    problems = []
    for section, key, field in settings_fields():
        block = section_block(text, f"### [{section}]")
        if block is None:
            problems.append(f"no heading '### [{section}]'")
            continue
        row = key_row(block, key)
        if row is None:
            problems.append(f"[{section}] {key}: no table row '| `{key}` |'")
            continue
        if field.default_factory is None:
            shown = "unset" if field.default is None else f"`{toml_value(field.default)}`"
            if len(shown) <= 80 and shown not in row:  # a long text default is named, not shown
                problems.append(f"[{section}] {key}: default {shown} not in its row")
        bounds = range_text(field)
        if bounds and bounds not in row:
            problems.append(f"[{section}] {key}: range '{bounds}' not in its row")
        if typing.get_origin(field.annotation) is typing.Literal:
            problems += [f"[{section}] {key}: choice \"{c}\" not in its row"
                         for c in typing.get_args(field.annotation) if f'"{c}"' not in row]
    assert not problems, "docs/design.md section 3 is out of step with runtime/settings.py:\n" \
        + "\n".join(problems)


def test_keys_of_list_sections_are_documented_too():
    """[[rituals.custom]] and any other list of tables: each of its keys as `section.key.sub`."""
    text = design_text()
    nested = []
    for section, key, field in settings_fields():
        for arg in typing.get_args(field.annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                nested += [f"{section}.{key}.{sub}" for sub in arg.model_fields]
    nested += [f"{section}.{sub}" for section, model in top_lists() for sub in model.model_fields]
    assert "rituals.custom.cron" in nested and "notify.url" in nested
    missing = [name for name in nested if f"`{name}`" not in text]
    assert not missing, f"docs/design.md: keys not documented: {missing}"


# --- tables -------------------------------------------------------------------------------------

def schema(tmp_path: Path) -> dict[str, list[str]]:
    """Every table and view a freshly migrated database has (FTS shadow tables and
    sqlite_sequence aside), with its columns."""
    Store.open(tmp_path / "fresh.db").close()
    db = sqlite3.connect(tmp_path / "fresh.db")
    try:
        rows = db.execute("SELECT name, sql FROM sqlite_master "
                          "WHERE type IN ('table', 'view') ORDER BY name").fetchall()
        virtual = [n for n, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL")]
        return {n: [c[1] for c in db.execute(f'PRAGMA table_info("{n}")')]
                for n, _ in rows
                if n != "sqlite_sequence" and not any(n.startswith(v + "_") for v in virtual)}
    finally:
        db.close()


def test_every_table_and_its_columns_are_in_the_design_page(tmp_path: Path):
    tables = schema(tmp_path)
    assert {"events", "events_archive", "rollups", "inputs", "_migrations"} <= set(tables)
    block = section_block(design_text(), "## 5. Tables")
    assert block is not None, "docs/design.md has no '## 5. Tables'"
    problems = []
    for name, columns in tables.items():
        row = key_row(block, name)
        if row is None:
            problems.append(f"{name}: no row '| `{name}` |'")
            continue
        problems += [f"{name}.{c}: column not in its row" for c in columns
                     if f"`{c}`" not in row]
    assert not problems, "docs/design.md section 5 is out of step with the migrations:\n" \
        + "\n".join(problems)


# --- tools --------------------------------------------------------------------------------------

def test_every_tool_the_model_sees_is_in_the_design_page():
    from runtime.tools import default_registry

    block = section_block(design_text(), "## 7. Tools the model sees")
    assert block is not None
    missing = [n for n in default_registry().names() if key_row(block, n) is None]
    assert not missing, f"docs/design.md section 7: tools not documented: {missing}"


# --- the docs stand on their own ----------------------------------------------------------------

OUTSIDE = re.compile(r"\.\./shared|shared/DESIGN|DESIGN\.md|\bDESIGN (sections? )?\d")


def readable_files() -> list[Path]:
    """What users and the next engineer read: the README, docs, ADRs, contrib, state's README,
    and the code and tests (docstrings, error messages)."""
    files = [REPO / "README.md", REPO / "state" / "README.md"]
    for folder, pattern in (("docs", "*.md"), ("adr", "*.md"), ("contrib", "*"),
                            ("runtime", "*.py"), ("rituals", "*.py"), ("tests", "*.py")):
        files += [p for p in sorted((REPO / folder).rglob(pattern)) if p.is_file()]
    return [p for p in files if p != Path(__file__) and "__pycache__" not in p.parts]


def test_nothing_points_outside_the_repository():
    hits = []
    for path in readable_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for no, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{no}: {line.strip()[:100]}")
    for path, cmd in [("coworker", cli), *commands()]:
        if OUTSIDE.search(cmd.help or ""):
            hits.append(f"`{path} --help`")
    assert not hits, "these point at files a clone does not have (use docs/design.md):\n" + \
        "\n".join(hits)


def test_the_readme_points_at_the_design_page():
    assert "docs/design.md" in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_short_and_links_every_guide():
    """A newcomer reads it to the end: at most about 300 lines, the rest in docs/ and linked."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    unlinked = [p.name for p in sorted((REPO / "docs").glob("*.md"))
                if f"](docs/{p.name})" not in readme]
    assert not unlinked, f"README.md links no guide {unlinked}"


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("page", [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))],
                         ids=lambda p: p.name)
def test_every_link_between_the_docs_resolves(page: Path):
    """A guide moved or a heading renamed breaks no link: each relative link names a file that
    exists, and its #anchor a heading in it."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in headings(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


def test_the_command_reference_is_current():
    """docs/cli.md is every command's --help, rendered from the real CLI by runtime.clidoc."""
    current = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == clidoc.render(), \
        f"docs/cli.md is stale: regenerate it with `{clidoc.REGENERATE}` and commit it"


# --- the wrapper, from a link on the PATH --------------------------------------------------------

def test_the_wrapper_finds_its_clone_through_a_chain_of_links(tmp_path: Path):
    """`ln -s "$PWD/coworker" ~/.local/bin/coworker`, as the README says, plus a relative link
    on top: the wrapper follows both back to its clone and runs that clone's .venv.

    The clone here is a copy of the real wrapper beside a set-up .venv whose `coworker` is this
    repository's, so the test never depends on (or rebuilds) the repository's own .venv stamp.
    A wrapper that does not follow links looks for pyproject.toml beside the link, and fails.
    """
    clone = tmp_path / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    shutil.copy2(REPO / "coworker", clone / "coworker")
    (clone / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    stamp = hashlib.sha256((clone / "pyproject.toml").read_bytes()).hexdigest()[:12]
    (clone / ".venv" / f".coworker-installed-{stamp}").touch()
    (clone / ".venv" / "bin" / "coworker").symlink_to(REPO / ".venv" / "bin" / "coworker")
    for folder in ("lib", "bin", "work"):
        (tmp_path / folder).mkdir()
    (tmp_path / "lib" / "coworker").symlink_to(clone / "coworker")
    (tmp_path / "bin" / "coworker").symlink_to(Path("..") / "lib" / "coworker")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    r = subprocess.run(["coworker", "--version"], cwd=tmp_path / "work", env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"coworker, version {__version__}"
    assert "setting up" not in r.stderr
    assert sorted(tmp_path.rglob(".venv")) == [clone / ".venv"]  # nothing was set up elsewhere
