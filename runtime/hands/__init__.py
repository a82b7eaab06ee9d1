"""The coworker's hands and eyes: the MCP servers its owner configures (issue 13, ADR-0017).

Re-exports only the light rooms: the `[mcp]` section's model (runtime/settings_mcp.py,
beside the settings that embed it), classify.py (side-effect classes and what a call does) and
result.py (a call's outcome). The heavy ones import the MCP SDK and are imported by name
where they run: server.py (one supervised server), hands.py (all of them, as tools for the
model) and survey.py (start each once and report it, for doctor and `coworker mcp-tools`), and
schema.py (a server's JSON schemas, checked without fetching or running anything), so that
loading the settings or starting the CLI never pays for the SDK.
"""

from ..settings_mcp import McpSection, McpServer, McpWatch, full_name, split_name
from .classify import Disposition, SideEffect, classify, decide
from .result import CallStatus, ToolResult

__all__ = [
    "CallStatus",
    "Disposition",
    "McpSection",
    "McpServer",
    "McpWatch",
    "SideEffect",
    "ToolResult",
    "classify",
    "decide",
    "full_name",
    "split_name",
]
