"""Cron expressions: 5 fields as crontab, or 6 with seconds first, in an IANA time zone."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger

CRONTAB_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab: 0 (and 7) = Sunday
APS_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # APScheduler 3.x: 0 = Monday
_DAY = r"[0-9]+|[A-Za-z]+"
_ITEM = re.compile(rf"(?:(?P<all>\*)|(?P<first>{_DAY})(?:-(?P<last>{_DAY}))?)(?:/(?P<step>[0-9]+))?")


def _day(token: str, field: str) -> int:
    """A crontab weekday number, 0..7, from '0'..'7' or a name (sun = 0)."""
    if token.isdigit():
        if int(token) > 7:
            raise ValueError(f"day of week {field!r}: {token} is out of range, use 0-7 "
                             "(0 and 7 are Sunday) or mon..sun")
        return int(token)
    if token.lower() not in CRONTAB_DAYS:
        raise ValueError(f"day of week {field!r}: {token!r} is not 0-7 or a name mon..sun")
    return CRONTAB_DAYS.index(token.lower())


def _span(m: re.Match[str], item: str, field: str) -> tuple[int, int]:
    """The first and last crontab day of one list item (`*`, `n`, `a-b`, `a/step`)."""
    if m["all"]:
        return 0, 7
    first = _day(m["first"], field)
    if m["last"] is None:
        return first, 7 if m["step"] else first
    last = _day(m["last"], field)
    if m["last"].lower() == "sun" and first > 0:
        last = 7
    if first > last:
        raise ValueError(f"day of week {field!r}: the range {item!r} runs backwards")
    return first, last


def _item_days(item: str, field: str) -> set[int]:
    """The crontab days (0 = Sunday .. 6) one list item gives."""
    m = _ITEM.fullmatch(item)
    if not m:
        raise ValueError(f"day of week {field!r}: {item!r} is not a weekday, range or step")
    step = int(m["step"]) if m["step"] else 1
    if step == 0:
        raise ValueError(f"day of week {field!r}: a step must be higher than 0")
    first, last = _span(m, item, field)
    return {d % 7 for d in range(first, last + 1, step)}


def _aps_ranges(days: set[int]) -> str:
    """crontab days written as APScheduler's Monday-first name ranges, which never wrap."""
    runs: list[list[int]] = []
    for d in sorted((d - 1) % 7 for d in days):
        if runs and d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return ",".join(APS_DAYS[r[0]] if len(r) == 1 else f"{APS_DAYS[r[0]]}-{APS_DAYS[r[-1]]}"
                    for r in runs)


def crontab_weekdays(field: str) -> str:
    """crontab's day-of-week field as APScheduler 3.x reads it: names, one list.

    crontab numbers the weekdays 0 (or 7) = Sunday, 1 = Monday .. 6 = Saturday; APScheduler
    3.x counts 0 = Monday and rejects 7. Each list item (`*`, `n`, `a-b`, with an optional
    `/step`; numbers 0-7 or names) gives the days crontab gives (a range steps from its first
    day; `*` is 0-7; `a/step` is a-7/step; `sun` ending a range is 7, so `fri-sun` is
    Friday to Sunday as before), and the union is written as Monday-first name ranges,
    which never wrap: crontab `5-7` -> 'fri-sun', `0-2` -> 'mon-tue,sun'. `*` stays `*`."""
    if field == "*":
        return field
    return _aps_ranges(set().union(*(_item_days(item, field) for item in field.split(","))))


def parse_cron(expr: str, tz: str = "UTC") -> CronTrigger:
    """A CronTrigger from '0 3 * * sun' (crontab) or '*/5 0 3 * * sun' (seconds first).

    The weekday field reads as in crontab in both forms: 0 or 7 = Sunday, 1 = Monday ..
    6 = Saturday, or names (`crontab_weekdays`). Day of month and day of week both
    restricted must both match (APScheduler's rule; crontab fires when either matches)."""
    fields = expr.split()
    zone = ZoneInfo(tz)
    if len(fields) == 5:
        return CronTrigger.from_crontab(" ".join([*fields[:4], crontab_weekdays(fields[4])]),
                                        timezone=zone)
    if len(fields) == 6:
        second, minute, hour, day, month, dow = fields
        return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month,
                           day_of_week=crontab_weekdays(dow), timezone=zone)
    raise ValueError(f"cron {expr!r} needs 5 fields (minute hour day month weekday) or 6 "
                     "(seconds first)")


def checked(expr: str) -> str:
    """`expr` when it parses as a cron expression; a ValueError a config error can show."""
    try:
        trigger = parse_cron(expr)
    except ValueError as e:
        raise ValueError(f"not a valid cron expression: {e}") from e
    now = datetime.now(UTC)
    trigger.end_date = now + timedelta(days=366 * CALENDAR_CYCLE_YEARS)
    if trigger.get_next_fire_time(None, now) is None:
        raise ValueError(f"cron {expr!r} never fires: no date matches it (a 31 February?)")
    return expr


# The Gregorian calendar's days of the week repeat every 28 years (between century leaps): an
# expression that fires at all fires within one cycle. Searching further would take seconds.
CALENDAR_CYCLE_YEARS = 29
