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
