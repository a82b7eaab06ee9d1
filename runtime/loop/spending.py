"""The daily spending cap: whether today's model usage reached [model] daily_tokens or
daily_calls.

Owns the check, saying it once a day (a WARNING and a `spending_cap` event), and the reason
the runfile shows as `capped`. It reads usage through the store; it never calls the model and
never ends a turn itself: the tick and the turn ask it, and stop.
"""

from __future__ import annotations

import logging

from ..settings import Settings
from ..store import Store, usage
from .record import record

log = logging.getLogger("runtime.loop")  # one logger for the whole loop, as before the split


class SpendingCap:
    def __init__(self) -> None:
        self.said: str | None = None  # the UTC day the cap was last said
        self.reason: str | None = None  # the last check's answer, for the runfile
        self.watch_said: str | None = None  # the UTC day the watch budget was last said

    def reached(self, store: Store, settings: Settings) -> str | None:
        """Which daily cap today's usage reached, if any; said once a day at WARNING. Until the
        next day (UTC) no model call is made."""
        reason = usage.cap_reason(store, settings.model)
        day = usage.day_start()
        if reason and self.said != day:
            self.said = day
            log.warning("SPENDING CAP: [model] %s; no more model calls until 00:00 UTC, inputs "
                        "wait (raise it in config.toml to go on now)", reason)
            record(store, "spending_cap", f"[model] {reason}; model calls resume tomorrow",
                   reason=reason)
        self.reason = reason
        return reason

    def watches_reached(self, store: Store, settings: Settings) -> str | None:
        """Whether turns woken by watches alone spent [mcp] watch_daily_calls today; said once a
        day at WARNING. Until tomorrow, a change a watch sees waits as an input (a turn that
        something else wakes takes it)."""
        cap = settings.mcp.watch_daily_calls
        used = usage.watch_calls_today(store)
        if used < cap:
            return None
        reason = f"[mcp] watch_daily_calls {cap} reached ({used} calls today)"
        day = usage.day_start()
        if self.watch_said != day:
            self.watch_said = day
            log.warning("WATCH BUDGET: %s; what the watches see waits until 00:00 UTC or the "
                        "next turn something else wakes (raise it in config.toml to go on now)",
                        reason)
            record(store, "spending_cap", f"{reason}; watches wake no turn until tomorrow",
                   reason=reason)
        return reason
