"""The team's MCP at `/mcp` (placeholder: being written)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.types import ASGIApp

from ..home import Home


def make_app(home: Home, current: object) -> ASGIApp:
    return Starlette(routes=[])
