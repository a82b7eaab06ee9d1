"""The ritual schedule: which rituals exist, when each is next due, and catch-up at start.

Owns the ritual definitions (reflect plus the owner's `[[rituals.custom]]`), the
AsyncIOScheduler with one job per ritual in the configured time zone (cron expressions are
parsed by `cron`), and catch-up: a ritual whose window passed while the process was down is
due once at start, however many windows it missed. A job only awaits the loop's `on_due(name)`
on the loop's own thread, which marks the ritual due and wakes the loop; the next tick makes
it an input. It never runs a ritual itself and never writes an input.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from .cron import parse_cron
from .settings import Settings
from .store import Store
from .store import rituals as rr

log = logging.getLogger(__name__)

BUILTIN = ("reflect",)
REGISTERED = "registered"  # a ritual_runs status: the first time a ritual was scheduled


@dataclass(frozen=True)
class RitualDef:
    name: str
    cron: str
    prompt: str | None  # None for a built-in ritual


def definitions(settings: Settings) -> list[RitualDef]:
    """reflect first, then the owner's custom rituals in config order."""
    defs = [RitualDef("reflect", settings.rituals.reflect, None)]
    defs += [RitualDef(c.name, c.cron, c.prompt) for c in settings.rituals.custom]
    return defs


def next_run(defn: RitualDef, tz: str, after: datetime | None = None) -> datetime | None:
    """When `defn` is next due after `after` (now), in the time zone `tz`."""
    after = after or datetime.now(UTC)
    return parse_cron(defn.cron, tz).get_next_fire_time(None, after.astimezone(ZoneInfo(tz)))


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def register_and_find_missed(store: Store, settings: Settings,
                             now: datetime | None = None) -> list[str]:
    """The rituals due now to catch up: those with a window between their last ritual_runs
    row (a run of any status, or the row that registered them) and `now`. A ritual seen for
    the first time is registered (a `registered` row), not due."""
    now = now or datetime.now(UTC)
    tz = settings.coworker.timezone
    due = []
    for d in definitions(settings):
        last = rr.last(store, d.name)
        if last is None:
            run_id = rr.start(store, d.name)
            rr.finish(store, run_id, REGISTERED, {"cron": d.cron, "timezone": tz})
            continue
        nxt = parse_cron(d.cron, tz).get_next_fire_time(None, _parse(last.started_at))
        if nxt is not None and nxt <= now:
            log.warning("ritual %s missed its window at %s while the coworker was down; "
                        "running it once now", d.name, nxt.isoformat())
            due.append(d.name)
    return due


class Scheduler:
    """One APScheduler job per ritual; each firing awaits `on_due(name)`. A coroutine job:
    AsyncIOScheduler runs it on the event loop's own thread, never in a worker thread."""

    def __init__(self, settings: Settings, on_due: Callable[[str], Awaitable[None]]) -> None:
        self.on_due = on_due
        self.settings = settings
        self._sched: AsyncIOScheduler | None = None

    def start(self) -> None:
        self._sched = AsyncIOScheduler(timezone=self.settings.coworker.zone)
        self._add_jobs()
        self._sched.start()

    def _add_jobs(self) -> None:
        assert self._sched is not None
        tz = self.settings.coworker.timezone
        for d in definitions(self.settings):
            self._sched.add_job(self.on_due, parse_cron(d.cron, tz), args=[d.name], id=d.name,
                                name=d.name, coalesce=True, max_instances=1,
                                misfire_grace_time=None, replace_existing=True)
        log.info("rituals scheduled: %s", ", ".join(
            f"{d.name} ({d.cron}, {tz})" for d in definitions(self.settings)))

    def reschedule(self, settings: Settings) -> None:
        self.settings = settings
        if self._sched is None:
            return
        self._sched.remove_all_jobs()
        self._add_jobs()

    def shutdown(self) -> None:
        if self._sched is not None and self._sched.running:
            self._sched.shutdown(wait=False)
        self._sched = None
