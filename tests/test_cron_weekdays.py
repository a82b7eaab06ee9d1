"""The weekday field of a ritual's or a watch's cron reads as in crontab (0 or 7 = Sunday,
1 = Monday .. 6 = Saturday), not as APScheduler 3.x numbers it (0 = Monday)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.triggers.cron import CronTrigger
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.cron import checked, parse_cron
from runtime.home import Home
from runtime.scheduler import RitualDef, definitions, next_run

from .conftest import write_config

START = datetime(2026, 12, 2, tzinfo=UTC)  # Wednesday 2026-12-02 00:00 UTC
NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab numbering


def fires(expr: str, n: int, start: datetime = START) -> list[str]:
    """The first `n` fire times of `expr` at or after `start`, as 'YYYY-MM-DDTHH:MM ddd'."""
    trigger, now, out = parse_cron(expr), start, []
    for _ in range(n):
        t = trigger.get_next_fire_time(None, now)
        out.append(t.strftime("%Y-%m-%dT%H:%M %a"))
        now = t + timedelta(seconds=1)
    return out


def fire_days(trigger: CronTrigger, start: datetime = START) -> set[int]:
    """The crontab weekday numbers (0 = Sunday) `trigger` fires on in the two weeks from `start`."""
    days, now, end = set(), start, start + timedelta(days=14)
    while (t := trigger.get_next_fire_time(None, now)) is not None and t < end:
        days.add((t.weekday() + 1) % 7)
        now = t + timedelta(hours=1)
    return days


@pytest.mark.parametrize(("expr", "expected"), [
    ("0 3 * * 1", ["2026-12-07T03:00 Mon", "2026-12-14T03:00 Mon"]),
    ("0 3 * * 0", ["2026-12-06T03:00 Sun", "2026-12-13T03:00 Sun"]),
    ("0 3 * * 7", ["2026-12-06T03:00 Sun", "2026-12-13T03:00 Sun"]),
    ("0 9 * * 6", ["2026-12-05T09:00 Sat", "2026-12-12T09:00 Sat"]),
    ("0 9 * * 1-5", ["2026-12-02T09:00 Wed", "2026-12-03T09:00 Thu", "2026-12-04T09:00 Fri",
                     "2026-12-07T09:00 Mon", "2026-12-08T09:00 Tue", "2026-12-09T09:00 Wed"]),
    ("0 9 * * 5-7", ["2026-12-04T09:00 Fri", "2026-12-05T09:00 Sat", "2026-12-06T09:00 Sun",
                     "2026-12-11T09:00 Fri"]),
    ("0 9 * * 0-2", ["2026-12-06T09:00 Sun", "2026-12-07T09:00 Mon", "2026-12-08T09:00 Tue",
                     "2026-12-13T09:00 Sun"]),
    ("0 9 * * 1,3,5", ["2026-12-02T09:00 Wed", "2026-12-04T09:00 Fri", "2026-12-07T09:00 Mon"]),
    ("0 9 * * 0,7", ["2026-12-06T09:00 Sun", "2026-12-13T09:00 Sun"]),
    ("0 9 * * */2", ["2026-12-03T09:00 Thu", "2026-12-05T09:00 Sat", "2026-12-06T09:00 Sun",
                     "2026-12-08T09:00 Tue", "2026-12-10T09:00 Thu"]),
    ("0 9 * * 0-6/2", ["2026-12-03T09:00 Thu", "2026-12-05T09:00 Sat", "2026-12-06T09:00 Sun",
                       "2026-12-08T09:00 Tue"]),
    ("0 9 * * 1-5/2", ["2026-12-02T09:00 Wed", "2026-12-04T09:00 Fri", "2026-12-07T09:00 Mon",
                       "2026-12-09T09:00 Wed"]),
    ("0 9 * * */7", ["2026-12-06T09:00 Sun", "2026-12-13T09:00 Sun"]),  # crontab */7 = 0,7
    ("0 9 * * mon,3", ["2026-12-02T09:00 Wed", "2026-12-07T09:00 Mon", "2026-12-09T09:00 Wed"]),
    ("0 9 * * sat,1", ["2026-12-05T09:00 Sat", "2026-12-07T09:00 Mon", "2026-12-12T09:00 Sat"]),
    ("0 9 * * sun-tue", ["2026-12-06T09:00 Sun", "2026-12-07T09:00 Mon", "2026-12-08T09:00 Tue",
                         "2026-12-13T09:00 Sun"]),  # crontab 0-2 by name
    ("0 9 * * 1/2", ["2026-12-02T09:00 Wed", "2026-12-04T09:00 Fri", "2026-12-06T09:00 Sun",
                     "2026-12-07T09:00 Mon"]),  # `a/step` is `a-7/step`
    ("0 0 3 * * 1", ["2026-12-07T03:00 Mon", "2026-12-14T03:00 Mon"]),  # seconds first
])
def test_numeric_weekdays_fire_as_in_crontab(expr: str, expected: list[str]):
    assert fires(expr, len(expected)) == expected


@pytest.mark.parametrize("dow", ["mon-fri", "MON-FRI", "sun", "Sat", "fri-sun", "sat-sun",
                                 "mon,wed,fri", "tue-thu,sun", "*"])
def test_named_weekdays_fire_as_before(dow: str):
    """Names keep APScheduler's reading (Monday-first ranges: `fri-sun` is Friday to Sunday)."""
    expr = f"0 9 * * {dow}"
    assert fire_days(parse_cron(expr)) == fire_days(CronTrigger.from_crontab(expr, timezone=UTC))


def test_the_reported_reflect_schedule_runs_on_monday(offline_home: Home):
    """`[rituals] reflect = "0 3 * * 1"` on Wed 2026-12-02: next run Mon 2026-12-07 03:00."""
    write_config(offline_home.root, rituals={"reflect": "0 3 * * 1"})
    reflect = definitions(offline_home.settings())[0]
    assert reflect.cron == "0 3 * * 1"
    assert next_run(reflect, "UTC", START).isoformat() == "2026-12-07T03:00:00+00:00"
    custom = RitualDef("standup", "30 8 * * 1-5", "Standup please.")
    assert next_run(custom, "Europe/Berlin", datetime(2026, 12, 5, 12, tzinfo=UTC)).isoformat() \
        == "2026-12-07T08:30:00+01:00"  # from Saturday: Monday, in Berlin


def test_day_of_month_and_weekday_both_restricted_must_both_match():
    """Unlike crontab (either matches), both must: `0 9 13 * 5` is Friday the 13th only."""
    assert fires("0 9 13 * 5", 2) == ["2027-08-13T09:00 Fri", "2028-10-13T09:00 Fri"]
    assert fires("0 9 13 * fri", 1) == ["2027-08-13T09:00 Fri"]


@pytest.mark.parametrize("dow", ["8", "1-8", "mon-", "mon-fri-sat", "monday", "x", "every", "1-",
                                 "-1", "1,", ",1", "1,,2", "5-1", "sat-mon", "*/0", "1-5/0", "?",
                                 "L", "1#2", "１"])
def test_an_invalid_weekday_field_is_a_one_line_config_error(dow: str):
    with pytest.raises(ValueError, match="^not a valid cron expression: ") as e:
        checked(f"0 3 * * {dow}")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="^not a valid cron expression: "):
        checked(f"0 0 3 * * {dow}")


# A crontab day-of-week field, built from parts whose crontab meaning the reference knows.
VALUE = st.one_of(st.integers(0, 7).map(str),
                  st.sampled_from(NAMES).map(lambda s: s.upper() if len(s) % 2 else s))


def crontab_value(v: str) -> int:
    return int(v) if v.isdigit() else NAMES.index(v.lower())


@st.composite
def item(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["star", "one", "range"]))
    step = draw(st.one_of(st.none(), st.integers(1, 8)))
    if kind == "star":
        body = "*"
    elif kind == "one":
        body = draw(VALUE)
        if step is not None:
            return body  # `n/step` is not crontab(5); ranges and `*` carry steps
    else:
        a, b = draw(VALUE), draw(VALUE)
        if crontab_value(a) > crontab_value(b):
            a, b = b, a
        body = f"{a}-{b}"
    return body if step is None else f"{body}/{step}"


def crontab_days(field: str) -> set[int]:
    """Reference: the weekdays (0 = Sunday .. 6) crontab's day-of-week `field` selects, the way
    Vixie cron/cronie read it: values 0-7 or names, `*` is 0-7, a step counts from a range's
    first value, and 7 is Sunday."""
    bits: set[int] = set()
    for part in field.split(","):
        rng, _, step = part.partition("/")
        if rng == "*":
            lo, hi = 0, 7
        elif "-" in rng:
            lo, hi = (crontab_value(v) for v in rng.split("-"))
        else:
            lo = hi = crontab_value(rng)
        bits.update(range(lo, hi + 1, int(step or 1)))
    if 7 in bits:
        bits = (bits - {7}) | {0}
    return bits


@settings(derandomize=True, max_examples=300, deadline=None, database=None)
@given(st.lists(item(), min_size=1, max_size=4).map(",".join))
def test_weekday_fields_fire_on_the_days_crontab_gives(dow: str):
    assert fire_days(parse_cron(f"0 9 * * {dow}")) == crontab_days(dow)


@settings(derandomize=True, max_examples=300, deadline=None, database=None)
@given(st.text(alphabet="0123456789*/-,monwedfrisatuhMONSUL?# ", min_size=1, max_size=12))
def test_any_weekday_text_parses_or_is_a_value_error(dow: str):
    try:
        checked(f"0 9 * * {dow}")
    except ValueError as e:
        assert str(e).startswith("not a valid cron expression: ")
