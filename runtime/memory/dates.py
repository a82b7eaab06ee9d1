"""Days and months a text names outright: "on 1 February, 2023", "July 31st 2023",
"2025-03-14", "in May 2023", "on 3 March".

Owns reading those dates out of a query, the time window each one names (a day, or a calendar
month, as a half-open UTC range of ISO strings that compares with an event's `ts`), and the
query with them taken out, so the words of a date do not stand in for its topic ("31", "july",
"2023" would otherwise be a query's rarest words). A day named without its year is the latest
such day on or before `today` ("on 3 March", asked in December, is this year's). Relative
dates ("yesterday", "last week") and a month named without its year ("in May") are not read:
the first need the moment the words were written, the second is too often another word.

Pure: text in, windows out. It reads no store and never calls a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
_MONTH = {m: i + 1 for i, m in enumerate(MONTHS)} | {
    m[:3]: i + 1 for i, m in enumerate(MONTHS)} | {"sept": 9}
_M = (r"(january|february|march|april|may|june|july|august|september|october|november|"
      r"december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?")
_D = r"(\d{1,2})(?:st|nd|rd|th)?"
_Y = r"((?:19|20)\d\d)"
_END = r"(?![\w-])"
# (kind, pattern, where the year, month and day are among its groups); most specific first,
# and each date found is taken out of the text before the next pattern reads it
_PATTERNS: tuple[tuple[str, re.Pattern[str], tuple[int | None, int, int | None]], ...] = (
    ("day", re.compile(rf"\b{_Y}-(\d\d)-(\d\d)(?!\d)"), (0, 1, 2)),  # 2025-03-14
    ("day", re.compile(rf"\b{_D}\s+(?:of\s+)?{_M},?\s+{_Y}{_END}", re.I), (2, 1, 0)),
    ("day", re.compile(rf"\b{_M}\s+{_D},?\s+{_Y}{_END}", re.I), (2, 0, 1)),  # July 31st, 2023
    ("month", re.compile(rf"\b{_M},?\s+{_Y}{_END}", re.I), (1, 0, None)),  # May 2023
    ("day", re.compile(rf"\b{_D}\s+(?:of\s+)?{_M}{_END}", re.I), (None, 1, 0)),  # 3 March
    ("day", re.compile(rf"\b{_M}\s+{_D}{_END}", re.I), (None, 0, 1)),  # March 3rd
)


@dataclass(frozen=True)
class Window:
    """A day or a month a text names: events with `start <= ts < end` fall in it."""

    start: str
    end: str
    kind: str  # "day" or "month"

    def holds(self, ts: str) -> bool:
        return self.start <= ts < self.end

    @property
    def name(self) -> str:
        """The day ("2023-02-01") or the month ("2023-05") as ISO writes it."""
        return self.start if self.kind == "day" else self.start[:7]


def _month(text: str) -> int | None:
    if text.isdigit():
        return int(text)
    return _MONTH.get(text.lower().rstrip("."))


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


def _window(kind: str, year: int | None, month: int, day: int | None,
            today: date) -> Window | None:
    try:
        if day is None:  # a month, always with its year
            first = date(year or today.year, month, 1)
            after = date(first.year + month // 12, month % 12 + 1, 1)
        else:
            got = date(year, month, day) if year is not None else _latest(month, day, today)
            if got is None:
                return None
            first, after = got, date.fromordinal(got.toordinal() + 1)
    except ValueError:  # 31 February, month 13: not a date
        return None
    return Window(first.isoformat(), after.isoformat(), kind)


def named(text: str, today: date | None = None) -> tuple[list[Window], str]:
    """The windows `text` names, in the order found, and the text with each date taken out
    (replaced by a space). A date that is not one (31 February) stays in the text. `today`
    (default: today in UTC) places a day named without its year."""
    windows: list[Window] = []
    today = today or datetime.now(UTC).date()
    for kind, pattern, where in _PATTERNS:
        text = pattern.sub(_taker(kind, where, today, windows), text)
    return windows, text


def _taker(kind: str, where: tuple[int | None, int, int | None], today: date,
           windows: list[Window]) -> Callable[[re.Match[str]], str]:
    y, m, d = where

    def take(match: re.Match[str]) -> str:
        g = match.groups()
        month = _month(g[m])
        got = None if month is None else _window(
            kind, None if y is None else int(g[y]), month, None if d is None else int(g[d]),
            today)
        if got is None:
            return match.group(0)
        windows.append(got)
        return " "
    return take
