"""Cron expressions: 5 fields as crontab, or 6 with seconds first, in an IANA time zone."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger


def parse_cron(expr: str, tz: str = "UTC") -> CronTrigger:
    """A CronTrigger from '0 3 * * sun' (crontab) or '*/5 0 3 * * sun' (seconds first).

    Name weekdays (mon..sun): APScheduler counts numeric weekdays from Monday = 0."""
    fields = expr.split()
    zone = ZoneInfo(tz)
    if len(fields) == 5:
        return CronTrigger.from_crontab(expr, timezone=zone)
    if len(fields) == 6:
        second, minute, hour, day, month, dow = fields
        return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month,
                           day_of_week=dow, timezone=zone)
    raise ValueError(f"cron {expr!r} needs 5 fields (minute hour day month weekday) or 6 "
                     "(seconds first)")


def checked(expr: str) -> str:
    """`expr` when it parses as a cron expression; a ValueError a config error can show."""
    try:
        parse_cron(expr)
    except ValueError as e:
        raise ValueError(f"not a valid cron expression: {e}") from e
    return expr
