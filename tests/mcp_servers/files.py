"""A small filesystem MCP server for runtime/hands' tests, written with the `mcp` SDK.

Tools: `read_file` (read-only), `write_file` (a side effect with no hints) and `write_many`
(several files at once, as a list of {path, text}: a path nested in the arguments). Relative
paths resolve against the server's working folder, as a real filesystem server's do. With
`FILES_CALL_LOG=PATH` every call that reaches the server is appended to PATH as one JSON line
first ({"tool": ..., "arguments": ...}), so a test can show what was never sent. Run:
`python tests/mcp_servers/files.py` (stdio). It never touches the network and writes only where
it is told to.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False)


def _logged(tool: str, arguments: dict[str, Any]) -> None:
    path = os.environ.get("FILES_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


def build() -> MCPServer:
    mcp = MCPServer(name="files", version="0.0.1")

    @mcp.tool(annotations=READ)
    def read_file(path: str) -> str:
        """Return the text of a file."""
        _logged("read_file", {"path": path})
        return Path(path).expanduser().read_text(encoding="utf-8")

    @mcp.tool()
    def write_file(path: str, text: str) -> str:
        """Write text to a file, creating its folder."""
        _logged("write_file", {"path": path, "text": text})
        target = Path(path).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return f"wrote {len(text)} characters to {path}"

    @mcp.tool()
    def write_many(files: list[dict[str, str]]) -> str:
        """Write several files: each item is {"path": ..., "text": ...}."""
        _logged("write_many", {"files": files})
        for item in files:
            Path(item["path"]).expanduser().write_text(item["text"], encoding="utf-8")
        return f"wrote {len(files)} files"

    return mcp


if __name__ == "__main__":
    build().run()
