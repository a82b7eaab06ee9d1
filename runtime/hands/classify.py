"""What an MCP tool may do, and so what happens when the model calls it (ADR-0017).

Owns two closed sets and two pure functions: `SideEffect` (a tool's class: READ,
SIDE_EFFECT, APPROVE, DISABLED), from its MCP annotations and the owner's lists, and
`Disposition` (RUN, DRY_RUN, QUEUE, REFUSE), from the class, the server's `mode` and whether
the coworker runs live. It never calls a tool, never records anything and never reads config
files.

Precedence, first match wins; the owner's config beats a server's hints, which are only hints:

    1. listed in `disabled`                 -> DISABLED     (never offered, refused if called)
    2. listed in `approve`                  -> APPROVE      (beats readOnlyHint)
    3. listed in `read_only`                -> READ         (beats a missing or false hint)
    4. annotations readOnlyHint: true       -> READ
    5. annotations destructiveHint: true    -> APPROVE
    6. anything else                        -> SIDE_EFFECT  (no annotations at all included)

A missing destructiveHint counts as not destructive (the MCP spec's default is "destructive"),
so an unannotated tool is an ordinary side effect: dry-run until live, not queued.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from ..settings_mcp import McpServer


class SideEffect(StrEnum):
    READ = "read"                # runs whenever the model calls it
    SIDE_EFFECT = "side_effect"  # dry-run unless the server and the coworker are live
    APPROVE = "approve"          # live: waits in the queue for the owner
    DISABLED = "disabled"        # never offered to the model


class Disposition(StrEnum):
    RUN = "run"          # call the tool now
    DRY_RUN = "dry_run"  # record the exact call, do not make it
    QUEUE = "queue"      # record it as an action that waits for the owner's approval
    REFUSE = "refuse"    # a disabled tool: not called, not recorded as an action


def _hint(annotations: Any, snake: str, camel: str) -> bool | None:
    """One hint from an mcp ToolAnnotations, a dict (either spelling) or None."""
    if annotations is None:
        return None
    if isinstance(annotations, Mapping):
        value = annotations.get(camel, annotations.get(snake))
    else:
        value = getattr(annotations, snake, None)
    return value if isinstance(value, bool) else None


def classify(tool: str, annotations: Any, server: McpServer) -> SideEffect:
    """The side-effect class of `tool` of `server` (see the module docstring's precedence)."""
    if tool in server.disabled:
        return SideEffect.DISABLED
    if tool in server.approve:
        return SideEffect.APPROVE
    if tool in server.read_only:
        return SideEffect.READ
    if _hint(annotations, "read_only_hint", "readOnlyHint") is True:
        return SideEffect.READ
    if _hint(annotations, "destructive_hint", "destructiveHint") is True:
        return SideEffect.APPROVE
    return SideEffect.SIDE_EFFECT


def decide(side_effect: SideEffect, server_mode: str, coworker_live: bool) -> Disposition:
    """What a call to a tool of this class does now. A side effect runs (or is queued) only
    when the server's mode is "live" AND the coworker runs live; otherwise it is a dry run,
    an APPROVE tool included (in dry-run nothing is queued)."""
    if side_effect is SideEffect.DISABLED:
        return Disposition.REFUSE
    if side_effect is SideEffect.READ:
        return Disposition.RUN
    if not (server_mode == "live" and coworker_live):
        return Disposition.DRY_RUN
    return Disposition.QUEUE if side_effect is SideEffect.APPROVE else Disposition.RUN
