"""The dates a text writes out (`memory.dates.named`): recall's person channel reads no date as a name."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
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
        assert first < after and w.start < w.end
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


DATE_PARTS = ["3 March 2024", "2024-04-05", "July 31st, 2023", "May 2023", "on 3 March",
              "Sept 2 2022", "we may 3 times retry", "market 12", "1.5 days", "3 ſept 2023",
              "ISO 2024-13-01", "FRİDAY 3 May"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(DATE_PARTS) | st.text(max_size=20), max_size=6),
       st.dates(min_value=date(2000, 1, 1), max_value=date(2099, 12, 31)))
def test_the_quick_look_for_a_date_never_changes_what_is_read(
        parts: list[str], today: date):
    """Most texts name no date, so a plain look for a month's letters or a digit decides
    whether the patterns run; it must never skip a text they would read."""
    text = " ".join(parts)
    quick = named(text, today)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dates, "_holds_any", lambda text, cues: True)
        m.setattr(dates, "_DIGIT", __import__("re").compile(""))
        full = named(text, today)
    assert quick == full, text


def test_a_day_at_the_calendars_edge_names_no_window_rather_than_raising():
    from zoneinfo import ZoneInfo

    auckland = ZoneInfo("Pacific/Auckland")  # midnight of 1 January of year 1 is before UTC's
    assert named("crash on 31 December", date(9999, 12, 31))[0] == []
    assert named("crash on 1 January", date(1, 1, 1), auckland)[0] == []
    assert [w.name for w in named("crash on 1 January", date(9999, 12, 31))[0]] == [
        "9999-01-01"]
