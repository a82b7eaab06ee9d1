"""Dates a text writes out ("on 1 February, 2023", "July 31st 2023", "2025-03-14", "in May
2023", "on 3 March"), and an event's time as the owner reads it.

Owns finding the dates a text writes out (`named`), so that recall's person channel does not
read "May 2023" as the speaker May (ADR-0030), with the day or month each names (a half-open
range of UTC timestamps in the owner's time zone, written as an event's `ts` is); the month
names the lab's synthetic histories use (`MONTHS`); and an event's time to the minute and the
zone's name as the doors show them (`local_minute`, `zone_name`). A day named without its year
is the latest such day on or before `today`; a month named without its year ("in May") is no
date, and without a year a month counts only with its capital ("we may 3 times retry").

The days a query names are not used to rank anything (the date rules of ADR-0025 and
ADR-0027..0029 were deleted in issue 39: docs/benchmarks.md). Pure: text in, text out. It
reads no store and never calls a model.
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
# dash): a text with none of them names no date, and most texts name none (a plain substring
# test costs ~1/20 of the patterns; the patterns are case-folded, so the tests below are on
# lower case).
_MONTH_CUES = tuple(m[:3] for m in MONTHS)
_DIGIT = re.compile(r"\d")


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
    kind: str  # "day" or "month"
    name: str  # the day ("2023-02-01") or the month ("2023-05")


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


def _span(first: date, after: date, kind: str, tz: tzinfo) -> Window:
    """The window from `first` up to `after`."""
    name = first.isoformat() if kind == "day" else first.isoformat()[:7]
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
