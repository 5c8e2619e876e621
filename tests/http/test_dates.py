"""HTTP dates (RFC 9110 5.6.7)."""

from __future__ import annotations

import pytest

from harvest_cache.http.dates import format_http_date, header_date, parse_http_date
from harvest_cache.http.headers import Headers

NOV_6_1994 = 784111777.0  # Sun, 06 Nov 1994 08:49:37 GMT


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT",  # obsolete RFC 850
        "Sun Nov  6 08:49:37 1994",  # asctime
        "Sun Nov 06 08:49:37 1994",  # asctime with a two-digit day
        "sun, 06 nov 1994 08:49:37 gmt",  # case-insensitive
        "  Sun, 06 Nov 1994 08:49:37 GMT ",  # surrounding whitespace
        "Sun, 6 Nov 1994 08:49:37 GMT",  # one-digit day
        "Mon, 06 Nov 1994 08:49:37 GMT",  # a wrong weekday is not checked
    ],
)
def test_s5_6_7_all_three_formats_parse(value: str) -> None:
    assert parse_http_date(value) == NOV_6_1994


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Thursday, 01-Jan-70 00:00:00 GMT", 0.0),
        ("Friday, 31-Dec-99 23:59:59 GMT", 946684799.0),
        ("Saturday, 01-Jan-00 00:00:00 GMT", 946684800.0),
        ("Sunday, 06-Nov-69 08:49:37 GMT", 3150953377.0),
    ],
)
def test_s5_6_7_rfc850_two_digit_years_pivot_at_70(value: str, expected: float) -> None:
    assert parse_http_date(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "0",
        "-1",
        "now",
        "Sun, 06 Nov 1994 08:49:37 UTC",  # only GMT
        "Sun, 06 Nov 1994 08:49:37 +0000",
        "Sun, 06 Nov 1994 08:49:37",  # no zone
        "Sun, 06 Foo 1994 08:49:37 GMT",  # no such month
        "Sun, 31 Nov 1994 08:49:37 GMT",  # no such day
        "Sun, 29 Feb 1995 08:49:37 GMT",  # not a leap year
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",  # two-digit year in IMF-fixdate
        "Sun, 06 Nov 1994 08:49:37 GMT, Mon, 07 Nov 1994 08:49:37 GMT",  # two lines combined
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994 GMT",
        "Sun, 06 Nov 1994 0\u0668:49:37 GMT",  # an Arabic-Indic digit
    ],
)
def test_s5_6_7_invalid_dates_are_none(value: str) -> None:
    assert parse_http_date(value) is None


def test_s5_6_7_leap_second_is_accepted() -> None:
    assert parse_http_date("Sat, 31 Dec 2016 23:59:60 GMT") == 1483228800.0


def test_s5_6_7_leap_day_in_a_leap_year() -> None:
    assert parse_http_date("Thu, 29 Feb 1996 00:00:00 GMT") == 825552000.0


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        (NOV_6_1994, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (NOV_6_1994 + 0.999, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (0.0, "Thu, 01 Jan 1970 00:00:00 GMT"),
        (1700000000.0, "Tue, 14 Nov 2023 22:13:20 GMT"),
    ],
)
def test_s5_6_7_format_generates_imf_fixdate(ts: float, expected: str) -> None:
    assert format_http_date(ts) == expected


@pytest.mark.parametrize("ts", [0.0, NOV_6_1994, 1700000000.0, 4102444800.0])
def test_s5_6_7_format_then_parse_round_trips(ts: float) -> None:
    assert parse_http_date(format_http_date(ts)) == ts


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([], None),
        (["Sun, 06 Nov 1994 08:49:37 GMT"], NOV_6_1994),
        (["garbage"], None),
        (["Sun, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT"], None),
    ],
)
def test_s5_6_7_header_date_needs_one_valid_line(lines: list[str], expected: float | None) -> None:
    assert header_date(Headers(("Date", v) for v in lines), "date") == expected
