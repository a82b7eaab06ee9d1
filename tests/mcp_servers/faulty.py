"""A deliberately bad MCP server for runtime/hands' tests, written with the `mcp` SDK.

Tools: `echo` (read-only, the ordinary one), `crash` (the process exits mid-call), `hang`
(sleeps far past any sane timeout), `huge` (returns N characters), `fail` (raises a tool
error), `strict` (a schema the model's arguments can violate), `write_file` (a side effect
with no hints) and `wipe` (destructiveHint). Run: `python -m tests.mcp_servers.faulty`
(stdio), or with `--http PORT` for streamable HTTP. `--crash-on-start` exits at once, like a
server whose configuration is wrong. `FAULTY_ECHO_ENV=NAME` makes `echo` append the value of
the environment variable NAME (to show the env reaches the server; `--crash-on-start` prints it
to stderr too). It never touches the
network (HTTP binds 127.0.0.1) and writes only where `write_file` is told to.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False)


def build() -> MCPServer:
    mcp = MCPServer(name="faulty", version="0.0.1")

    @mcp.tool(annotations=READ)
    def echo(text: str) -> str:
        """Return the text as given."""
        name = os.environ.get("FAULTY_ECHO_ENV")
        return text if not name else f"{text} {os.environ.get(name, '')}"

    @mcp.tool(annotations=READ)
    def crash(text: str = "") -> str:
        """Exit the whole process while the call is in flight."""
        sys.stdout.flush()
        os._exit(3)

    @mcp.tool(annotations=READ)
    async def hang(seconds: float = 3600) -> str:
        """Sleep far longer than any timeout."""
        await asyncio.sleep(seconds)
        return "woke"

    @mcp.tool(annotations=READ)
    def huge(chars: int = 100_000) -> str:
        """Return `chars` characters: a line number every 80 so a cut is visible."""
        line = "x" * 72
        out = "".join(f"{i:07d}{line}\n" for i in range(chars // 80 + 1))
        return out[:chars]

    @mcp.tool(annotations=READ)
    def fail(why: str = "it broke") -> str:
        """Raise a tool error."""
        raise ToolError(f"fail: {why}")

    @mcp.tool(annotations=READ)
    def strict(count: int, label: str) -> str:
        """Takes an integer and a string, both required."""
        return f"{label}:{count}"

    @mcp.tool()
    def write_file(path: str, text: str) -> str:
        """Write text to a file (a side effect with no hints)."""
        Path(path).write_text(text, encoding="utf-8")
        return f"wrote {len(text)} characters"

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
    def wipe(path: str) -> str:
        """Delete a file (destructive)."""
        Path(path).unlink(missing_ok=True)
        return "wiped"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port")
    parser.add_argument("--crash-on-start", action="store_true")
    parser.add_argument("--slow-start", type=float, default=0.0,
                        help="sleep this many seconds before serving: a slow start")
    args = parser.parse_args()
    if args.slow_start:
        import time

        time.sleep(args.slow_start)
    if args.crash_on_start:
        name = os.environ.get("FAULTY_ECHO_ENV")
        said = f" with {os.environ.get(name, '')}" if name else ""
        print(f"faulty: refusing to start{said} (--crash-on-start)", file=sys.stderr)
        raise SystemExit(2)
    server = build()
    if args.http:
        server.run(transport="streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
