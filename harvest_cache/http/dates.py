"""HTTP dates (RFC 9110 5.6.7): parsed to POSIX seconds (UTC), formatted as IMF-fixdate.

Recipients must accept the three formats below; senders generate only the first::

    Sun, 06 Nov 1994 08:49:37 GMT    IMF-fixdate
    Sunday, 06-Nov-94 08:49:37 GMT   obsolete RFC 850 format
    Sun Nov  6 08:49:37 1994         ANSI C's asctime() format

Parsing is robust in the ways RFC 9110 encourages (any letter case, a one-digit day, the
weekday not checked against the date) and strict about the rest: a value that is not one of
the formats, or names an impossible time, is invalid (None), which callers treat as a date in
the past (for Expires) or as absent (for Date, Last-Modified).
"""

from __future__ import annotations

import calendar
import math
import re
import time
from functools import lru_cache

from harvest_cache.http.headers import Headers

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH_NUMBER = {name.lower(): number for number, name in enumerate(_MONTHS, 1)}

_DAY = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = "(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_TIME = r"(\d\d):(\d\d):(\d\d)"
_FLAGS = re.ASCII | re.IGNORECASE
# Groups, in every pattern: day, month, year, hour, minute, second.
_IMF_FIXDATE = re.compile(rf"{_DAY}, (\d\d?) ([a-z]{{3}}) (\d{{4}}) {_TIME} GMT", _FLAGS)
_RFC850 = re.compile(rf"{_LONG_DAY}, (\d\d?)-([a-z]{{3}})-(\d\d) {_TIME} GMT", _FLAGS)
_ASCTIME = re.compile(rf"{_DAY} (?P<m>[a-z]{{3}}) +(?P<d>\d\d?) {_TIME} (?P<y>\d{{4}})", _FLAGS)

# RFC 850 years have two digits. RFC 9110 reads them relative to the current year (at most
# 50 years ahead); a fixed pivot keeps parsing free of the clock and agrees with that rule
# for every date an origin plausibly sends (such dates are old: the format died in 1996).
_PIVOT = 70


@lru_cache(maxsize=4096)
def parse_http_date(value: str) -> float | None:
    """POSIX seconds of an HTTP date in any of the three formats, or None if invalid.

    Memoised: a stored response's Date and Last-Modified are parsed on every hit.
    """
    value = value.strip()
    if m := _IMF_FIXDATE.fullmatch(value):
        day, month, year, hh, mm, ss = m.groups()
        return _timestamp(int(year), month, day, hh, mm, ss)
    if m := _RFC850.fullmatch(value):
        day, month, yy, hh, mm, ss = m.groups()
        year = int(yy) + (1900 if int(yy) >= _PIVOT else 2000)
        return _timestamp(year, month, day, hh, mm, ss)
    if m := _ASCTIME.fullmatch(value):
        hh, mm, ss = m.group(3, 4, 5)
        return _timestamp(int(m["y"]), m["m"], m["d"], hh, mm, ss)
    return None


def header_date(headers: Headers, name: str) -> float | None:
    """The date in field ``name``; None when absent or invalid (several lines are invalid)."""
    value = headers.get(name)
    return None if value is None else parse_http_date(value)


def _timestamp(year: int, month_name: str, day: str, hh: str, mm: str, ss: str) -> float | None:
    month = _MONTH_NUMBER.get(month_name.lower())
    # (Year 0 matches the grammar, but no calendar function takes it.)
    if month is None or year < 1 or not 1 <= int(day) <= calendar.monthrange(year, month)[1]:
        return None
    hour, minute, second = int(hh), int(mm), int(ss)
    # second = 60 is a leap second (RFC 9110 5.6.7); timegm folds it into the next minute.
    if hour > 23 or minute > 59 or second > 60:
        return None
    return float(calendar.timegm((year, month, int(day), hour, minute, second)))


def format_http_date(ts: float) -> str:
    """IMF-fixdate of POSIX seconds ``ts`` (fractions dropped), e.g. for Date and Expires."""
    t = time.gmtime(math.floor(ts))
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:04d} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )
