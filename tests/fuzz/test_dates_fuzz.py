"""Fuzzing HTTP dates: formatting round-trips, all three formats parse, nothing raises."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harvest_cache.http.dates import format_http_date, parse_http_date
from harvest_cache.http.headers import Headers
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.validation import conditional_headers
from tests.fuzz.strategies import (
    FUZZ,
    MAX_TS,
    MIN_TS,
    asctime,
    http_dates,
    imf,
    rfc850,
    timestamps,
    weighted,
)


@FUZZ
@given(timestamps)
def test_format_then_parse_is_identity(ts: int) -> None:
    assert parse_http_date(format_http_date(ts)) == ts


@FUZZ
@given(st.floats(MIN_TS, MAX_TS))
def test_fractions_are_dropped(ts: float) -> None:
    assert parse_http_date(format_http_date(ts)) == math.floor(ts)


@FUZZ
@given(timestamps)
def test_asctime_parses(ts: int) -> None:
    assert parse_http_date(asctime(ts)) == ts


@FUZZ
@given(st.integers(0, 3155759999))  # 1970 .. 2069: the years a two-digit year stands for
def test_rfc850_parses(ts: int) -> None:
    assert parse_http_date(rfc850(ts)) == ts


@FUZZ
@given(timestamps, st.sampled_from([imf, rfc850, asctime]), st.sampled_from(["upper", "lower"]))
def test_any_letter_case_parses(ts: int, fmt: Callable[[int], str], case: str) -> None:
    assume(fmt is not rfc850 or 0 <= ts <= 3155759999)
    text = fmt(ts)
    assert parse_http_date(getattr(text, case)()) == parse_http_date(text) == ts


@settings(FUZZ, max_examples=1000)
@given(weighted((4, http_dates), (1, st.text()), (1, st.text(st.characters(codec="ascii")))))
def test_any_text_is_a_date_or_none(value: str) -> None:
    result = parse_http_date(value)
    assert result is None or type(result) is float
    if result is not None:
        assert result == math.floor(result)
        # A valid date in range formats to an IMF-fixdate naming the same instant. (23:59:60
        # of 9999-12-31 is the one leap second past the range.)
        if result <= MAX_TS:
            assert parse_http_date(format_http_date(result)) == result


# -- regression: dates-year-0 ------------------------------------------------------------------
# Year 0000 matches the date grammar, but calendar.timegm refuses it: parse_http_date once
# raised ValueError for it (and so did every reader of a date field, on the wire too). Now
# such a date is invalid: None.

YEAR_ZERO = [
    "Sun, 01 Jan 0000 00:00:00 GMT",
    "Sat, 29 Feb 0000 12:00:00 GMT",
    "Sun Jan  1 00:00:00 0000",
]


@pytest.mark.parametrize("value", YEAR_ZERO)
def test_year_zero_is_invalid_not_a_crash(value: str) -> None:
    assert parse_http_date(value) is None


def test_year_zero_last_modified_does_not_crash_revalidation() -> None:
    stored = StoredHead("http://x/", 200, "OK", (("Last-Modified", YEAR_ZERO[0]),), 1e9, 1e9, 0)
    assert conditional_headers(stored) == ()
    assert Headers(stored.headers).get("Last-Modified") == YEAR_ZERO[0]
