"""Freshness lifetime and age (RFC 9111 4.2)."""

from __future__ import annotations

import re

import pytest

from harvest_cache.http.cache_control import MAX_DELTA, parse_cache_control
from harvest_cache.http.dates import format_http_date
from harvest_cache.http.freshness import (
    Heuristic,
    HeuristicRules,
    Lifetime,
    age_value,
    current_age,
    freshness_lifetime,
)
from harvest_cache.http.headers import Headers

T = 1_700_000_000.0
DATE = format_http_date(T)
HEURISTIC = Heuristic(percent=10, max_seconds=86400)


def lifetime(
    fields: list[tuple[str, str]],
    status: int = 200,
    heuristic: Heuristic = HEURISTIC,
    response_time: float | None = None,
) -> Lifetime:
    headers = Headers(fields)
    cc = parse_cache_control(headers.get_all("Cache-Control"))
    return freshness_lifetime(status, headers, cc, heuristic, response_time=response_time)


@pytest.mark.parametrize(
    ("fields", "seconds"),
    [
        ([("Cache-Control", "max-age=60, s-maxage=30")], 30),
        ([("Cache-Control", "s-maxage=90"), ("Cache-Control", "max-age=60")], 90),
        ([("Cache-Control", "s-maxage=0, max-age=60")], 0),
    ],
)
def test_s4_2_1_s_maxage_overrides_max_age_for_shared_cache(
    fields: list[tuple[str, str]], seconds: float
) -> None:
    assert lifetime(fields) == Lifetime(seconds, heuristic=False)


def test_s4_2_1_max_age_overrides_expires() -> None:
    fields = [
        ("Date", DATE),
        ("Expires", format_http_date(T + 600)),
        ("Cache-Control", "max-age=60"),
    ]
    assert lifetime(fields) == Lifetime(60, heuristic=False)


@pytest.mark.parametrize(
    ("expires", "seconds"),
    [
        ([format_http_date(T + 600)], 600),
        ([format_http_date(T - 600)], 0),  # in the past: expired, not negative
        (["0"], 0),
        (["-1"], 0),
        (["tomorrow"], 0),
        ([format_http_date(T + 600), format_http_date(T + 600)], 600),  # repeated verbatim
        ([format_http_date(T + 600), format_http_date(T + 900)], 0),  # conflicting lines
        ([format_http_date(T + 600), "junk"], 0),
    ],
)
def test_s4_2_1_expires_minus_date_and_invalid_expires_is_expired(
    expires: list[str], seconds: float
) -> None:
    fields = [("Date", DATE)] + [("Expires", v) for v in expires]
    assert lifetime(fields) == Lifetime(seconds, heuristic=False)


@pytest.mark.parametrize(
    ("response_time", "seconds"),
    [(T, 600), (T + 100, 500), (None, 0)],
)
def test_s4_2_1_expires_without_date_uses_the_receipt_time(
    response_time: float | None, seconds: float
) -> None:
    fields = [("Expires", format_http_date(T + 600))]
    assert lifetime(fields, response_time=response_time).seconds == seconds


@pytest.mark.parametrize(
    ("modified_ago", "heuristic", "seconds"),
    [
        (10_000, Heuristic(10, 86400), 1000),
        (10_000_000, Heuristic(10, 86400), 86400),  # capped at max
        (100, Heuristic(10, 86400, min_seconds=60), 60),  # raised to min
        (10_000, Heuristic(0, 86400), 0),
        (-500, Heuristic(10, 86400), 0),  # Last-Modified after Date
    ],
)
def test_s4_2_2_heuristic_is_a_share_of_the_time_since_last_modified_within_bounds(
    modified_ago: float, heuristic: Heuristic, seconds: float
) -> None:
    fields = [("Date", DATE), ("Last-Modified", format_http_date(T - modified_ago))]
    assert lifetime(fields, heuristic=heuristic) == Lifetime(seconds, heuristic=True)


@pytest.mark.parametrize(
    ("status", "cache_control", "heuristic"),
    [
        (200, None, True),
        (203, None, True),
        (204, None, True),
        (300, None, True),
        (301, None, True),
        (308, None, True),
        (404, None, True),
        (405, None, True),
        (410, None, True),
        (414, None, True),
        (501, None, True),
        (302, None, False),
        (307, None, False),
        (403, None, False),
        (500, None, False),
        (503, None, False),
        (302, "public", True),
        (500, "public", True),
    ],
)
def test_s4_2_2_heuristic_only_for_heuristically_cacheable_statuses_or_public(
    status: int, cache_control: str | None, heuristic: bool
) -> None:
    fields = [("Date", DATE), ("Last-Modified", format_http_date(T - 10_000))]
    if cache_control:
        fields.append(("Cache-Control", cache_control))
    expected = Lifetime(1000, heuristic=True) if heuristic else Lifetime(0, heuristic=False)
    assert lifetime(fields, status=status) == expected


@pytest.mark.parametrize(
    ("fields", "seconds"),
    [
        ([("Date", DATE)], 0),  # no Last-Modified: min_seconds, 0 by default
        ([("Date", DATE), ("Last-Modified", "junk")], 0),
        ([("Last-Modified", format_http_date(T - 10_000))], 0),  # no Date, no receipt time
    ],
)
def test_s4_2_2_heuristic_needs_last_modified_and_date(
    fields: list[tuple[str, str]], seconds: float
) -> None:
    assert lifetime(fields) == Lifetime(seconds, heuristic=True)


def test_s4_2_2_min_seconds_is_the_default_without_last_modified() -> None:
    assert lifetime([("Date", DATE)], heuristic=Heuristic(10, 3600, 120)).seconds == 120


@pytest.mark.parametrize(
    ("percent", "max_seconds", "min_seconds"), [(-1, 10, 0), (10, 10, 20), (10, 10, -1)]
)
def test_heuristic_rejects_impossible_bounds(
    percent: int, max_seconds: int, min_seconds: int
) -> None:
    with pytest.raises(ValueError, match="percent"):
        Heuristic(percent, max_seconds, min_seconds)


@pytest.mark.parametrize(
    ("fields", "request_time", "response_time", "now", "age"),
    [
        ([("Date", DATE)], T, T, T, 0),
        ([("Date", DATE)], T, T, T + 30, 30),  # resident time
        ([("Date", DATE)], T + 10, T + 10, T + 10, 10),  # apparent age: Date is 10 s old
        ([("Date", DATE), ("Age", "100")], T, T, T, 100),
        ([("Date", DATE), ("Age", "100")], T - 2, T, T + 5, 107),  # Age corrected by the delay
        ([("Date", DATE), ("Age", "5")], T + 19, T + 20, T + 20, 20),  # apparent age wins
        ([("Date", format_http_date(T + 50))], T, T, T, 0),  # Date ahead of us: not negative
        ([], T, T + 3, T + 10, 10),  # no Date: only delay and resident time
        ([("Date", "junk"), ("Age", "junk")], T, T, T + 1, 1),
        ([("Age", "40, 50")], T, T, T, 40),  # the first member counts (RFC 9111 5.1)
        ([("Age", "abc, 40, 50")], T, T, T, 0),  # an invalid first member: Age ignored
        ([("Age", "-5"), ("Age", "7")], T, T, T, 0),
        ([("Age", "99999999999")], T, T, T, MAX_DELTA),
        ([], T, T, T - 100, 0),  # the clock went back: never younger than at receipt
    ],
)
def test_s4_2_3_current_age(
    fields: list[tuple[str, str]], request_time: float, response_time: float, now: float, age: float
) -> None:
    assert current_age(Headers(fields), request_time, response_time, now) == age


@pytest.mark.parametrize(
    ("age", "value"),
    [
        (0, "0"),
        (0.9, "0"),
        (1, "1"),
        (59.99, "59"),
        (-3, "0"),
        (-0.5, "0"),
        (2.0**31 - 0.5, "2147483647"),
        (2.0**31, "2147483648"),
        (2.0**40, "2147483648"),
    ],
)
def test_s5_1_age_value_is_whole_seconds_capped(age: float, value: str) -> None:
    assert age_value(age) == value


def test_s4_2_2_heuristic_per_url_first_matching_pattern_wins() -> None:
    images = Heuristic(percent=50, max_seconds=3600, min_seconds=60)
    news = Heuristic(percent=0, max_seconds=0)
    rules = HeuristicRules(
        [
            (re.compile(r"\.jpg$", re.IGNORECASE), images),
            (re.compile(r"/news/"), news),
            (re.compile(r"."), Heuristic(percent=99, max_seconds=99)),  # never reached first
        ],
        HEURISTIC,
    )
    assert rules.for_url("http://example.com/news/a.JPG") is images
    assert rules.for_url("http://example.com/news/today") is news
    assert rules.for_url("http://example.com/NEWS/") == Heuristic(percent=99, max_seconds=99)


def test_s4_2_2_heuristic_without_a_matching_pattern_is_the_default() -> None:
    rules = HeuristicRules([(re.compile(r"^http://other/"), Heuristic(1, 1))], HEURISTIC)
    assert rules.for_url("http://example.com/other/") is HEURISTIC
    assert HeuristicRules([], HEURISTIC).for_url("http://example.com/") is HEURISTIC
