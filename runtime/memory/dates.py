"""Days, weeks and months a text names: outright ("on 1 February, 2023", "July 31st 2023",
"2025-03-14", "in May 2023", "on 3 March") or from today ("yesterday", "on Monday", "last week").

Owns reading them out of a query and the time window each one names (a day, a calendar week
from Monday, or a calendar month, in the owner's time zone, as a half-open range of UTC
timestamps written as an event's `ts` is, so the two compare as strings). A date written out
is taken out of the query, so its words do not stand in for its topic ("31", "july", "2023"
would otherwise be a query's rarest words); a relative one keeps its words (a conversation says
"yesterday" too). A day named without its year is the latest such day on or before `today`
("on 3 March", asked in December, is this year's); a month named without its year ("in May")
is not read, and without a year a month counts only with its capital ("we may 3 times retry"
names no day). Nothing after today is read: memory holds no tomorrow. An event's text is
read the same way from the day it was said (`said`: "yesterday", said on 2 May, is 1 May;
its first `SAID_CHARS` characters, a stored time that is not one naming nothing).

Pure: text in, windows out. It reads no store and never calls a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
_MONTH = {m: i + 1 for i, m in enumerate(MONTHS)} | {
    m[:3]: i + 1 for i, m in enumerate(MONTHS)} | {"sept": 9}
_NAMES = ("january|february|march|april|may|june|july|august|september|october|november|"
          "december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec")
_M = rf"(?i:({_NAMES}))\.?"  # with a year beside it, a month's name in any case
# Without a year, only a capitalised name: "we may 3 times retry", "march 5 soldiers".
_M_CAP = rf"({'|'.join(n.capitalize() for n in _NAMES.split('|'))})\.?"
_D = r"(?<![\d.,])(\d{1,2})(?:st|nd|rd|th)?"  # not the tail of "1.2" or "3,5"
_Y = r"((?:19|20)\d\d)"
_END = r"(?![\w-])"
_NO_YEAR = r"(?![\w-])(?!,?\s*\d)"  # nor a number after it that could be a year we refused
# (kind, pattern, where the year, month and day are among its groups); most specific first,
# and each date found is taken out of the text before the next pattern reads it
_PATTERNS: tuple[tuple[str, re.Pattern[str], tuple[int | None, int, int | None]], ...] = (
    ("day", re.compile(rf"\b{_Y}-(\d\d)-(\d\d)(?!\d)"), (0, 1, 2)),  # 2025-03-14
    ("day", re.compile(rf"\b{_D}\s+(?:of\s+)?{_M},?\s+{_Y}{_END}"), (2, 1, 0)),
    ("day", re.compile(rf"\b{_M}\s+{_D},?\s+{_Y}{_END}"), (2, 0, 1)),  # July 31st, 2023
    ("month", re.compile(rf"\b{_M},?\s+{_Y}{_END}"), (1, 0, None)),  # May 2023
    ("day", re.compile(rf"\b{_D}\s+(?:of\s+)?{_M_CAP}{_NO_YEAR}"), (None, 1, 0)),  # 3 March
    ("day", re.compile(rf"\b{_M_CAP}\s+{_D}{_NO_YEAR}"), (None, 0, 1)),  # March 3rd
)

# What every date above holds (a digit, and a month's first three letters or an ISO date's
# dash; every relative phrase's "day", "night", ...): a text with none of them names no such
# day, and most texts an event's days are read from name none (a plain substring test costs
# ~1/20 of the patterns; the patterns are case-folded, so the tests below are on lower case).
_MONTH_CUES = tuple(m[:3] for m in MONTHS)
_DIGIT = re.compile(r"\d")
_RELATIVE_CUES = ("day", "night", "ago", "week", "month", "morning", "afternoon", "evening")


def _lower(text: str) -> str:
    """`text` lower-cased character by character, so it keeps its length and its places ("İ",
    whose lower case is two characters, stays as it is: it is no "i" of a date's word)."""
    lower = text.lower()
    if len(lower) == len(text):
        return lower
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _holds_any(text: str, cues: tuple[str, ...]) -> bool:
    lower = _lower(text)
    return any(c in lower for c in cues)


@dataclass(frozen=True)
class Window:
    """A day or a month a text names, in the owner's time zone: events with
    `start <= ts < end` fall in it (UTC, as events' `ts` are written)."""

    start: str
    end: str
    kind: str  # "day", "week" or "month"
    name: str  # the day ("2023-02-01"), the month ("2023-05"), or "first/last" day of a week

    def holds(self, ts: str) -> bool:
        return self.start <= ts < self.end

    def within(self, other: Window) -> bool:
        """Whether this window lies inside `other` ("last Saturday" inside November)."""
        return other.start <= self.start and self.end <= other.end


END_OF_TIME = "9999-12-31T23:59:59.999Z"  # no ts is written after it


def _utc(day: date, tz: tzinfo) -> str:
    """Midnight starting `day` in `tz`, as an event's UTC `ts` is written."""
    at = datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)
    # isoformat, not strftime: "%Y" writes the year 999 as "999", which no ts sorts beside
    return at.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def _month(text: str) -> int | None:
    if text.isdigit():
        return int(text)
    return _MONTH.get(text.lower().rstrip("."))


def local_minute(ts: str, tz: tzinfo | None) -> str:
    """An event's time to the minute in the owner's zone ("2026-03-04 08:30"), as the model's
    context shows it; a stored time that is not one is shown as stored."""
    if tz is not None:
        try:
            at = datetime.fromisoformat(ts.replace("Z", "+00:00"))
            at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # stored times are UTC
            at = at.astimezone(tz)  # strftime's %Y drops a year's leading zeros ("999-06-01")
            return f"{at.year:04d}-{at:%m-%d %H:%M}"
        except (ValueError, OverflowError):  # year 1 west of UTC, say: an import's "unknown"
            pass
    return ts[:16].replace("T", " ")


def zone_name(tz: tzinfo | None) -> str:
    """The zone as the context names it: its IANA key ("Europe/Berlin"), else UTC."""
    return getattr(tz, "key", None) or str(tz or "UTC")


def day_of(ts: str, tz: tzinfo) -> date:
    """The owner's day an event's UTC `ts` falls on."""
    return datetime.fromisoformat(ts).astimezone(tz).date()


def later(ts: str, days: int, tz: tzinfo) -> str:
    """The owner's midnight `days` days after the day of `ts` (a window's end is a midnight:
    seven of the owner's days, not 168 hours, across a change of clocks); past the calendar's
    last day, its end."""
    try:
        return _utc(day_of(ts, tz) + timedelta(days=days), tz)
    except OverflowError:
        return END_OF_TIME


def _latest(month: int, day: int, today: date) -> date | None:
    """The latest `month`/`day` on or before `today` (29 February: the last leap year's)."""
    for year in range(today.year, today.year - 8, -1):
        try:
            got = date(year, month, day)
        except ValueError:
            continue
        if got <= today:
            return got
    return None


def _next_month(first: date) -> date:
    return date(first.year + first.month // 12, first.month % 12 + 1, 1)


def _span(first: date, after: date, kind: str, tz: tzinfo, until: date | None = None) -> Window:
    """The window from `first` up to `after` (never past `until`, when given)."""
    if until is not None:
        after = min(after, until)
    name = first.isoformat() if kind == "day" else (
        first.isoformat()[:7] if kind == "month" else f"{first}/{after - timedelta(days=1)}")
    return Window(_utc(first, tz), _utc(after, tz), kind, name)


def _window(kind: str, year: int | None, month: int, day: int | None,
            today: date, tz: tzinfo) -> Window | None:
    try:
        if day is None:  # a month, always with its year
            first = date(year or today.year, month, 1)
            return _span(first, _next_month(first), kind, tz)
        got = date(year, month, day) if year is not None else _latest(month, day, today)
        return None if got is None else _span(got, got + timedelta(days=1), kind, tz)
    except ValueError:  # 31 February, month 13: not a date
        return None
    except OverflowError:  # the calendar's first or last day, in the owner's zone: no window
        return None


def named(text: str, today: date | None = None, tz: tzinfo | None = None, mark: str = " "
          ) -> tuple[list[Window], str]:
    """The windows `text` names, in the order they stand in it, and the text with each date
    blanked out (each of its characters replaced by `mark`, so the rest keeps its place). A
    date that is not one (31 February) stays in the text. A day is the owner's day: midnight
    to midnight in `tz` (default UTC); `today` (default: today in `tz`) places a day named
    without its year."""
    found: list[tuple[int, Window]] = []
    if not _DIGIT.search(text):  # each has a number
        return [], text
    iso, months = "-" in text, _holds_any(text, _MONTH_CUES)
    if not (iso or months):
        return [], text
    tz = tz or UTC
    today = today or datetime.now(tz).date()
    for n, (kind, pattern, where) in enumerate(_PATTERNS):
        if iso if n == 0 else months:  # the first is the ISO date, the rest name a month
            text = pattern.sub(_taker(kind, where, today, tz, found, mark), text)
    return [w for _, w in sorted(found, key=lambda f: f[0])], text


def _taker(kind: str, where: tuple[int | None, int, int | None], today: date, tz: tzinfo,
           found: list[tuple[int, Window]], mark: str) -> Callable[[re.Match[str]], str]:
    y, m, d = where

    def take(match: re.Match[str]) -> str:
        g = match.groups()
        month = _month(g[m])
        got = None if month is None else _window(
            kind, None if y is None else int(g[y]), month, None if d is None else int(g[d]),
            today, tz)
        if got is None:
            return match.group(0)
        found.append((match.start(), got))
        return mark * len(match.group(0))
    return take


# --- days named relative to today ("yesterday", "last week") ------------------------------------

WINDOWS_SAID = 6  # days one text names, read at most (an event's, not a query's)
QUERY_WINDOWS = 3  # days a query names, read at most (recall, search and the walk)
SAID_CHARS = 300  # of an event's text, read for the days it names (a log may run to megabytes)
DATE_MARK = "\x00"  # `named(..., mark=DATE_MARK)` blanks a date so "on Monday, 1 April" is one day
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_RELATIVE = re.compile(
    r"\b(?:((?:the\s+)?day\s+before\s+yesterday)|(yesterday|(?<!the\s)last\s+night)|"
    r"(today|tonight|this\s+(?:morning|afternoon|evening))|"
    r"(?<![\d.,])(\d{1,2})\s+days?\s+ago|(last|this)\s+(week|month|weekend)|"
    r"(?:last|on)\s+(" + "|".join(WEEKDAYS) + r")(?!,?\s*" + DATE_MARK + r"))\b")
# matched against the lower-cased text, not case-folded: "Frıday" (a dotless i) is no weekday,
# as the quick look (also on lower case) agrees, and any space ("last\xa0week") is a space


def _relative_one(m: re.Match[str], today: date, tz: tzinfo) -> Window | None:
    """The window one relative phrase names, never past today."""
    before2, yesterday, now, ago, which, unit, weekday = m.groups()
    one = timedelta(days=1)
    until = today + one
    if before2 or yesterday or now or ago:
        back = 2 if before2 else 1 if yesterday else 0 if now else int(ago)
        day = today - timedelta(days=back)
        return _span(day, day + one, "day", tz, until)
    if weekday:  # the latest such day before today ("on Monday", asked on a Wednesday)
        back = (today.weekday() - WEEKDAYS.index(weekday.lower()) - 1) % 7 + 1
        day = today - timedelta(days=back)
        return _span(day, day + one, "day", tz, until)
    monday = today - timedelta(days=today.weekday())
    if unit.lower() == "week":  # a calendar week, Monday to Sunday
        first = monday - timedelta(days=7) if which.lower() == "last" else monday
        return _span(first, first + timedelta(days=7), "week", tz, until)
    if unit.lower() == "weekend":  # Saturday and Sunday
        saturday = monday - timedelta(days=2) if which.lower() == "last" else monday + \
            timedelta(days=5)
        if saturday > today:
            return None
        return _span(saturday, saturday + timedelta(days=2), "week", tz, until)
    first = today.replace(day=1)
    if which.lower() == "last":
        first = (first - one).replace(day=1)
    return _span(first, _next_month(first), "month", tz, until)


def relative(text: str, today: date | None = None, tz: tzinfo | None = None,
             spans: list[tuple[int, int]] | None = None) -> list[Window]:
    """The days a text names relative to `today` (default: today in `tz`, UTC by default):
    "today" ("tonight", "this morning / afternoon / evening"), "yesterday" ("last night", not
    "the last night of ..."), "the day before yesterday", "3 days ago", "on Monday" / "last
    Monday" (the latest before today), "last week" / "this week" (Monday to Sunday), "last
    weekend", "last month" / "this month". Their words stay in the text: a conversation says
    "yesterday" too, and a stored question may have been asked on another day than today.
    `spans`, when given, gets where each phrase that named a day stands in `text`."""
    if not _holds_any(text, _RELATIVE_CUES):
        return []
    tz = tz or UTC
    today = today or datetime.now(tz).date()
    out = []
    for m in _RELATIVE.finditer(_lower(text)):
        if m.group(4) is not None and not 0 < int(m.group(4)) <= 31:
            continue
        try:
            got = _relative_one(m, today, tz)
        except (OverflowError, ValueError):  # "yesterday" on the calendar's first day: none
            continue
        if got is not None:
            out.append(got)
            if spans is not None:
                spans.append(m.span())
    return out


def windows(text: str, today: date | None = None, tz: tzinfo | None = None,
            at_most: int = 3, words_of_relative: bool = True) -> tuple[list[Window], str]:
    """The first `at_most` distinct windows a text names (written out first, in the order they
    stand, then relative to today: "on Monday, 1 April 2024" is one day), and the text with the
    written-out dates blanked (a relative date keeps its words, unless `words_of_relative` is
    False: then they are blanked too)."""
    found, marked = named(text, today, tz, mark=DATE_MARK)
    spans: list[tuple[int, int]] = []
    found += relative(marked, today, tz, spans)
    for a, b in spans if not words_of_relative else ():
        marked = marked[:a] + DATE_MARK * (b - a) + marked[b:]
    seen: set[tuple[str, str]] = set()
    out = []
    for w in found:
        if (w.start, w.end) not in seen:
            seen.add((w.start, w.end))
            out.append(w)
    return out[:at_most], marked.replace(DATE_MARK, " ")


def head(text: str) -> str:
    """The part of a text read for the days it names: its first SAID_CHARS characters, cut at
    a space ("Sept 21, 2023" is not clipped to "Sept 2"; all blank: nothing)."""
    if len(text) <= SAID_CHARS:
        return text
    return (text[:SAID_CHARS].rsplit(None, 1) or [""])[0]


def said(text: str, ts: str, tz: tzinfo | None = None) -> list[Window]:
    """The windows a text names, read from the day it was said (an event's UTC `ts`):
    "yesterday", said on 2 May, is 1 May; "on 3 March", said in April, is this year's."""
    tz = tz or UTC
    try:
        day = day_of(ts, tz)
    except (ValueError, OverflowError):  # a stored ts that is not a time: no day (ADR-0008)
        return []
    try:
        return windows(head(text), day, tz, at_most=WINDOWS_SAID)[0]
    except OverflowError:  # "yesterday", said on the calendar's first day
        return []
