"""Tools the agent can call, one module a family; `default_registry()` assembles them."""

from . import memory, notes, outbox, promises
from .registry import Registry, Tool, ToolContext, ToolResult


def default_registry() -> Registry:
    return Registry([*notes.TOOLS, *outbox.TOOLS, *promises.TOOLS, *memory.TOOLS])


__all__ = ["Registry", "Tool", "ToolContext", "ToolResult", "default_registry"]
