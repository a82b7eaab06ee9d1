"""The command reference, rendered from the real click group into Markdown (docs/cli.md).

Owns one thing: turning `runtime.cli.cli` and every command and subcommand under it into the text
`coworker COMMAND --help` prints, one section a command, at a fixed width so the output is the
same on every machine. `tests/test_docs.py` fails when docs/cli.md differs from what this makes
now. It never runs a command, reads a home or touches the store.

Regenerate: `.venv/bin/python -m runtime.clidoc > docs/cli.md`
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from runtime.cli import cli

WIDTH = 100  # the help text's width, fixed: a terminal's size must not change the file
REGENERATE = ".venv/bin/python -m runtime.clidoc > docs/cli.md"

HEADER = f"""# Command reference

Every command's `--help`, generated from the real CLI; do not edit by hand. Regenerate it with
`{REGENERATE}`
(`tests/test_docs.py` fails when it is stale). The contracts behind each command (exit codes,
what it writes) are in [design.md](design.md#1-commands).
"""


def walk(group: click.Group = cli, path: str = "coworker") -> Iterator[tuple[str, click.Command]]:
    """(path, command) for the group itself and every command under it, depth first, by name."""
    yield path, group
    for name, cmd in sorted(group.commands.items()):
        if cmd.hidden:
            continue
        if isinstance(cmd, click.Group):
            yield from walk(cmd, f"{path} {name}")
        else:
            yield f"{path} {name}", cmd


def help_text(path: str) -> str:
    """What `<path> --help` prints, at WIDTH columns (each parent's context gives the usage line
    its full path, as a real call would)."""
    ctx: click.Context | None = None
    command: click.Command = cli
    for i, name in enumerate(path.split()):
        if i:
            assert isinstance(command, click.Group)
            command = command.commands[name]
        # the command's own context settings (the group's `-h`), as `make_context` gives a real
        # call: click caches a command's help option on first use, so they must never differ
        ctx = click.Context(command, info_name=name, parent=ctx, terminal_width=WIDTH,
                            max_content_width=WIDTH, **command.context_settings)
    assert ctx is not None
    return command.get_help(ctx).rstrip()


def render() -> str:
    """docs/cli.md as it should be now: an index, then one section a command."""
    entries = list(walk())
    index = "\n".join(f"- [`{path}`](#{anchor(path)})" for path, _ in entries)
    sections = "\n\n".join(f"## {path}\n\n```text\n{help_text(path)}\n```"
                           for path, _ in entries)
    return f"{HEADER}\n{index}\n\n{sections}\n"


def anchor(path: str) -> str:
    """The anchor GitHub gives the heading `## <path>`."""
    return path.lower().replace(" ", "-")


if __name__ == "__main__":
    sys.stdout.write(render())
