"""The days and months a text names (`memory.dates`), which recall reads as time windows."""

from __future__ import annotations

from datetime import UTC, date, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from runtime.memory import dates
from runtime.memory.dates import MONTHS, named
from runtime.memory.recall import extract_terms

TODAY = date(2026, 12, 1)


def _z(day: str) -> str:
    return f"{day}T00:00:00.000Z"


@pytest.mark.parametrize(("text", "want"), [
    ("What did Gina find for her clothing store on 1 February, 2023?",
     [("2023-02-01", "2023-02-02", "day")]),
    ("Who did Maria have dinner with on May 3, 2023?", [("2023-05-03", "2023-05-04", "day")]),
    ("the deploy of July 31st, 2023", [("2023-07-31", "2023-08-01", "day")]),
    ("the 3rd of March 2024 retro", [("2024-03-03", "2024-03-04", "day")]),
    ("Sept. 5, 2024", [("2024-09-05", "2024-09-06", "day")]),
    ("logs from 2025-03-14 please", [("2025-03-14", "2025-03-15", "day")]),
    ("What workout class did Maria start in December 2023?",
     [("2023-12-01", "2024-01-01", "month")]),
    ("in May, 2023", [("2023-05-01", "2023-06-01", "month")]),
    ("What caused the outage on March 12?", [("2026-03-12", "2026-03-13", "day")]),
    ("between 2 Jan 2024 and 9 Jan 2024",
     [("2024-01-02", "2024-01-03", "day"), ("2024-01-09", "2024-01-10", "day")]),
])
def test_named_days_and_months_are_their_windows(text: str, want: list[tuple[str, str, str]]):
    windows, _ = named(text, TODAY)
    assert [(w.start, w.end, w.kind) for w in windows] == [
        (_z(a), _z(b), kind) for a, b, kind in want]
    assert [w.name for w in windows] == [a if k == "day" else a[:7] for a, _, k in want]


def test_a_day_is_the_owners_day_in_their_time_zone():
    from zoneinfo import ZoneInfo

    [berlin], _ = named("on 8 April 2024", TODAY, ZoneInfo("Europe/Berlin"))
    assert (berlin.start, berlin.end, berlin.name) == (
        "2024-04-07T22:00:00.000Z", "2024-04-08T22:00:00.000Z", "2024-04-08")
    assert berlin.holds("2024-04-08T21:30:00.000Z") and not berlin.holds(
        "2024-04-08T22:00:00.000Z")
    [la], _ = named("in March 2024", TODAY, ZoneInfo("America/Los_Angeles"))
    assert (la.start, la.end) == ("2024-03-01T08:00:00.000Z", "2024-04-01T07:00:00.000Z")
    # a day named later than today, without its year, is last year's
    [day], _ = named("on 2 December", date(2026, 12, 1), ZoneInfo("America/Los_Angeles"))
    assert day.name == "2025-12-02"


@pytest.mark.parametrize("text", [
    "What did the team decide about the zeppelin firmware?",
    "We may ship in 2023 or later",  # a year alone is not a window
    "Meet at 10:30 on Friday",
    "invoice 2025-13-40",
    "we may 3 times retry",  # without a year, a month is read only with its capital
    "I will march 5 soldiers",
    "in 2023 may 10 people come",
    "chapter 12 dec",
    "Apr 1 1899",  # a year out of range is not left for the day-only reading
    "5 may 2023-ish",
])
def test_a_text_without_a_date_is_left_as_it_is(text: str):
    assert named(text, TODAY) == ([], text)


def test_a_version_number_is_not_a_day():
    windows, rest = named("release 1.2 may 2023", TODAY)
    assert [(w.name, w.kind) for w in windows] == [("2023-05", "month")] and "1.2" in rest


def test_a_day_that_is_not_one_still_names_its_month():
    windows, rest = named("31 February 2023", TODAY)
    assert [(w.name, w.kind) for w in windows] == [("2023-02", "month")]
    assert rest.split() == ["31"]


def test_a_day_without_its_year_is_the_latest_one_not_after_today():
    assert named("on 3 March", date(2026, 12, 1))[0][0].name == "2026-03-03"
    assert named("on 3 March", date(2026, 3, 3))[0][0].name == "2026-03-03"
    assert named("on 3 March", date(2026, 2, 1))[0][0].name == "2025-03-03"
    assert named("on 29 February", date(2026, 12, 1))[0][0].name == "2024-02-29"


def test_the_words_of_a_date_are_not_the_querys_topic():
    windows, rest = named("What did Gina find for her clothing store on 1 February, 2023?",
                          TODAY)
    assert windows and not {"1", "february", "2023"} & set(extract_terms(rest))
    assert {"gina", "clothing", "store"} <= set(extract_terms(rest))
    assert windows[0].name == "2023-02-01"
    assert named("in May 2023", TODAY)[0][0].name == "2023-05"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_valid_windows_and_keeps_what_is_not_a_date(text: str):
    windows, rest = named(text, TODAY)
    for w in windows:
        first, after = date.fromisoformat(w.start[:10]), date.fromisoformat(w.end[:10])
        assert first < after and w.holds(w.start) and not w.holds(w.end)
    if not windows:
        assert rest == text


@settings(max_examples=300, deadline=None)
@given(st.dates(min_value=date(1990, 1, 1), max_value=date(2099, 12, 31)),
       st.sampled_from(["{d} {M} {y}", "{d} {M}, {y}", "{M} {d}, {y}", "{M} {d}th {y}",
                        "{y}-{mm:02d}-{dd:02d}", "{d} of {M} {y}"]),
       st.sampled_from(["", "What happened on ", "Notes from "]),
       st.sampled_from(["", "?", " about the deploy"]))
def test_a_written_date_is_found_in_any_of_its_forms(day: date, form: str, head: str,
                                                     tail: str):
    month = MONTHS[day.month - 1]
    written = form.format(d=day.day, M=month.capitalize(), y=day.year, mm=day.month,
                          dd=day.day)
    windows, rest = named(head + written + tail, TODAY)
    assert [w.name for w in windows] == [day.isoformat()], written
    assert str(day.year) not in rest and month not in rest.lower()


WEDNESDAY = date(2026, 12, 2)


@pytest.mark.parametrize(("text", "want"), [
    ("what did we decide yesterday?", ["2026-12-01"]),
    ("the day before yesterday", ["2026-11-30"]),
    ("anything today", ["2026-12-02"]),
    ("watched it last night", ["2026-12-01"]),
    ("LAST NIGHT, on\xa0Monday", ["2026-12-01", "2026-11-30"]),  # any case, any space
    ("the day\xa0before yesterday", ["2026-11-30"]),
    ("last nıght, on Frıday", []),  # a dotless i is no i
    ("this morning", ["2026-12-02"]),
    ("tonight", ["2026-12-02"]),
    ("3 days ago", ["2026-11-29"]),
    ("on Monday", ["2026-11-30"]),
    ("last Wednesday", ["2026-11-25"]),  # the latest before today, not today
    ("last week", ["2026-11-23/2026-11-29"]),
    ("this week", ["2026-11-30/2026-12-02"]),
    ("last weekend", ["2026-11-28/2026-11-29"]),
    ("last month", ["2026-11"]),
    ("this month", ["2026-12"]),
    ("yesterday and last week", ["2026-12-01", "2026-11-23/2026-11-29"]),
    ("0 days ago, 99 days ago, this weekend", []),
    ("the weekly sync", []),
])
def test_days_named_relative_to_today(text: str, want: list[str]):
    from runtime.memory.dates import relative

    got = relative(text, WEDNESDAY)
    assert [w.name for w in got] == want
    for w in got:
        assert w.start < w.end <= "2026-12-03T00:00:00.000Z", w  # nothing after today


@pytest.mark.parametrize(("text", "ts", "zone", "want"), [
    # said on 2 May (UTC): "last night" is 1 May
    ("I watched the trilogy last night!", "2022-05-02T10:00:00.000Z", "UTC", ["2022-05-01"]),
    # 22:30 UTC on 7 April is 8 April in Berlin: "yesterday" is the 7th there
    ("Yesterday Dana flashed the rig.", "2024-04-07T22:30:00.000Z", "Europe/Berlin",
     ["2024-04-07"]),
    ("Yesterday Dana flashed the rig.", "2024-04-07T22:30:00.000Z", "UTC", ["2024-04-06"]),
    # a day without its year is the latest one up to the day it was said, not up to today
    ("Back on 3 March we shipped it.", "2023-04-01T09:00:00.000Z", "UTC", ["2023-03-03"]),
    ("I won the final last Saturday", "2022-11-09T12:00:00.000Z", "UTC", ["2022-11-05"]),
    ("We shipped it.", "2022-11-09T12:00:00.000Z", "UTC", []),
    ("the last night of the trip", "2022-11-09T12:00:00.000Z", "UTC", []),  # no yesterday
    ("Meet again on Frıday.", "2022-11-09T12:00:00.000Z", "UTC", []),  # dotless i: no day
    ("Yesterday Dana flashed the rig.", "2022-11-09 garbage", "UTC", []),  # no day to read from
    ("Yesterday Dana flashed the rig.", "0001-01-01T00:00:00.000Z", "UTC", []),  # no day before
    # every day it names, up to six (the text's own dates first, then the relative ones)
    ("On 3 March 2024 we planned it, on Monday we built it, 3 days ago we shipped it.",
     "2024-04-11T12:00:00.000Z", "UTC", ["2024-03-03", "2024-04-08"]),
    ("Yesterday, 2 days ago, 3 days ago, 4 days ago, 5 days ago, 6 days ago, 7 days ago.",
     "2024-04-11T12:00:00.000Z", "UTC",
     ["2024-04-10", "2024-04-09", "2024-04-08", "2024-04-07", "2024-04-06", "2024-04-05"]),
    # only the first SAID_CHARS characters, cut at a space: no day from a clipped date
    ("word " * 60 + "yesterday", "2024-04-11T12:00:00.000Z", "UTC", []),
    ("x " * 149 + "Sept 21, 2023", "2024-04-11T12:00:00.000Z", "UTC", []),
    (" " * 400 + "yesterday", "2024-04-11T12:00:00.000Z", "UTC", []),  # all blank in reach
    ("y" * 400, "2024-04-11T12:00:00.000Z", "UTC", []),  # no space to cut at
    ("Tonight Dana flashed the rig.", "9999-12-31T23:00:00.000Z", "Asia/Tokyo", []),
])
def test_an_events_days_are_read_from_the_day_it_was_said(text: str, ts: str, zone: str,
                                                         want: list[str]):
    from zoneinfo import ZoneInfo

    from runtime.memory.dates import said

    assert [w.name for w in said(text, ts, ZoneInfo(zone))] == want


def test_relative_days_are_the_owners_days():
    from zoneinfo import ZoneInfo

    from runtime.memory.dates import relative

    [y] = relative("yesterday", WEDNESDAY, ZoneInfo("Asia/Tokyo"))
    assert (y.start, y.end) == ("2026-11-30T15:00:00.000Z", "2026-12-01T15:00:00.000Z")


PHRASES = ["today", "yesterday", "the day before yesterday", "5 days ago", "on Friday",
           "last Sunday", "last week", "this week", "last weekend", "this weekend", "last month",
           "this month"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PHRASES) | st.text(max_size=30), max_size=6),
       st.dates(min_value=date(2000, 1, 1), max_value=date(2099, 12, 31)))
def test_relative_reading_never_fails_and_never_looks_ahead(parts: list[str], today: date):
    from runtime.memory.dates import relative

    text = " ".join(parts)
    after_today = (today + timedelta(days=1)).isoformat() + "T00:00:00.000Z"
    for w in relative(text, today):
        assert w.start < w.end <= after_today, (text, today, w)
        assert w.start >= (today - timedelta(days=62)).isoformat(), (text, today, w)


@pytest.mark.parametrize(("text", "want"), [
    ("Kestrel yesterday, yesterday and today", ["2026-12-01", "2026-12-02"]),  # once each
    ("3 March 2024 and again 3 March 2024", ["2024-03-03"]),
    ("day before yesterday", ["2026-11-30"]),
    ("1.5 days ago", []),  # not "5 days ago"
    ("last  week", ["2026-11-23/2026-11-29"]),
    ("last\nweek", ["2026-11-23/2026-11-29"]),
    ("On Monday, 1 April 2024", ["2024-04-01"]),  # one day, not also last Monday
    ("on 3 March 2024, 2024-04-05, 1 April 2024, 2 Jan 2024",  # the first three, in order
     ["2024-03-03", "2024-04-05", "2024-04-01"]),
])
def test_the_windows_a_text_names_are_distinct_in_order_and_at_most_three(text: str,
                                                                           want: list[str]):
    from runtime.memory.dates import windows

    got, rest = windows(text, WEDNESDAY)
    assert [w.name for w in got] == want
    assert "\x00" not in rest and len(rest) == len(text)


DATE_PARTS = ["3 March 2024", "2024-04-05", "July 31st, 2023", "May 2023", "on 3 March",
              "Sept 2 2022", "tonight", "last night", "this morning", "4 days ago", "on Monday",
              "last weekend", "this month", "we may 3 times retry", "market 12", "1.5 days",
              "last nıght", "on Frıday", "3 ſept 2023", "ISO 2024-13-01", "the last night",
              "last\xa0week", "3\u202fdays ago", "LAST NIGHT", "FRİDAY"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(DATE_PARTS) | st.text(max_size=20), max_size=6),
       st.dates(min_value=date(2000, 1, 1), max_value=date(2099, 12, 31)))
def test_the_quick_look_for_a_date_never_changes_what_is_read(
        parts: list[str], today: date):
    """Most texts name no day, so a plain look for a month's letters, a digit or a word like
    "day" decides whether the patterns run; it must never skip a text they would read."""
    from runtime.memory import dates

    text = " ".join(parts)
    quick = dates.windows(text, today, at_most=10)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dates, "_holds_any", lambda text, cues: True)
        m.setattr(dates, "_DIGIT", __import__("re").compile(""))
        full = dates.windows(text, today, at_most=10)
    assert quick == full, text


@example(" " * 400 + "yesterday", "2024-04-11T12:00:00.000Z")
@example("yesterday", "0001-01-01T00:00:00.000Z")
@example("on Frıday", "garbage")
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600) | st.text(alphabet=" \t\n\xa0yesterday", max_size=600),
       st.text(max_size=30) | st.datetimes().map(
           lambda d: d.isoformat(timespec="milliseconds") + "Z"))
def test_reading_a_stored_text_never_fails(text: str, ts: str):
    """Recall reads the days of stored texts it did not write: any text, any `ts`."""
    from runtime.memory.dates import said

    for w in said(text, ts):
        assert w.start < w.end, (text, ts, w)


def test_a_window_before_the_year_1000_and_the_week_after_the_calendars_end():
    # "%Y" writes 999, which no stored ts sorts beside; "later" read it back and raised
    monday = dates.windows("deploy on Monday", date(1000, 1, 1), UTC)[0][0]
    assert monday.start == "0999-12-30T00:00:00.000Z" and monday.end == "0999-12-31T00:00:00.000Z"
    assert dates.later(monday.end, 7, UTC) == "1000-01-07T00:00:00.000Z"
    assert dates.later("9999-12-30T00:00:00.000Z", 7, UTC) == dates.END_OF_TIME


def test_a_day_at_the_calendars_edge_names_no_window_rather_than_raising():
    from zoneinfo import ZoneInfo

    auckland = ZoneInfo("Pacific/Auckland")  # midnight of 1 January of year 1 is before UTC's
    assert dates.windows("crash on 31 December", date(9999, 12, 31))[0] == []
    assert dates.windows("crash on 1 January", date(1, 1, 1), auckland)[0] == []
    assert [w.name for w in dates.windows("crash on 1 January", date(9999, 12, 31))[0]] == [
        "9999-01-01"]
