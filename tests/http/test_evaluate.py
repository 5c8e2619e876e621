"""Whether a stored response may be reused (RFC 9111 4, 4.2.4, 5.2.1, 5.2.2)."""

from __future__ import annotations

import pytest

from harvest_cache.http.dates import format_http_date
from harvest_cache.http.freshness import Heuristic
from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import (
    Fresh,
    MustValidate,
    Reuse,
    evaluate,
    request_directives,
    stale_on_failure,
)
from harvest_cache.http.stored import StoredHead

T = 1_700_000_000.0
HEURISTIC = Heuristic(percent=10, max_seconds=86400)


def reuse(
    cache_control: str | None,
    age: float,
    request_cc: str | None = None,
    *extra: tuple[str, str],
) -> Reuse:
    """Evaluate a response received at T with ``cache_control``, ``age`` seconds later."""
    fields = [("Date", format_http_date(T)), *extra]
    if cache_control is not None:
        fields.append(("Cache-Control", cache_control))
    stored = StoredHead("http://example.com/", 200, "OK", tuple(fields), T, T, 0)
    request = Headers([("Cache-Control", request_cc)] if request_cc else [])
    return evaluate(stored, request_directives(request), T + age, HEURISTIC)


def test_s4_2_a_fresh_response_is_served_with_its_age_and_ttl() -> None:
    assert reuse("max-age=100", 30) == Fresh(age=30, ttl=70)


def test_s4_2_a_stale_response_must_be_validated_with_negative_ttl() -> None:
    assert reuse("max-age=100", 130) == MustValidate(
        age=130, ttl=-30, reason="stale", stale_allowed=True
    )


def test_s4_2_fresh_means_lifetime_greater_than_age() -> None:
    assert isinstance(reuse("max-age=100", 100), MustValidate)


def test_s4_2_heuristic_freshness_applies_to_stored_responses() -> None:
    modified = ("Last-Modified", format_http_date(T - 10_000))
    assert reuse(None, 500, None, modified) == Fresh(age=500, ttl=500)


@pytest.mark.parametrize(
    ("cache_control", "age", "request_cc", "reason"),
    [
        ("max-age=100, no-cache", 0, None, "no-cache"),
        ('max-age=100, no-cache="Set-Cookie"', 0, None, "no-cache"),
        ("max-age=100", 10, "no-cache", "request-no-cache"),
        ("max-age=100", 10, "max-age=5", "request-max-age"),
        ("max-age=100", 10, "max-age=0", "request-max-age"),
        ("max-age=100", 10, "min-fresh=95", "min-fresh"),
        ("max-age=100", 110, "max-stale=60, min-fresh=1", "min-fresh"),
        ("max-age=100, must-revalidate", 110, "max-stale", "must-revalidate"),
        ("max-age=100, proxy-revalidate", 110, "max-stale", "must-revalidate"),
        ("s-maxage=100", 110, "max-stale", "must-revalidate"),  # s-maxage implies it
        ("max-age=100", 200, "max-stale=60", "stale"),  # beyond what the client accepts
        ("max-age=100, immutable", 10, "no-cache", "request-no-cache"),  # RFC 8246 is for UAs
    ],
)
def test_s5_2_directives_that_require_validation(
    cache_control: str, age: float, request_cc: str | None, reason: str
) -> None:
    result = reuse(cache_control, age, request_cc)
    assert isinstance(result, MustValidate)
    assert result.reason == reason


@pytest.mark.parametrize(
    ("cache_control", "age", "request_cc", "expected"),
    [
        ("max-age=100", 10, "max-age=10", Fresh(10, 90)),  # age equal to max-age is fine
        ("max-age=100", 10, "min-fresh=90", Fresh(10, 90)),
        ("max-age=100", 150, "max-stale=60", Fresh(150, -50, "max-stale")),
        ("max-age=100", 150, "max-stale", Fresh(150, -50, "max-stale")),
        ("max-age=100, must-revalidate", 50, "max-stale", Fresh(50, 50)),  # still fresh
        ("max-age=100", 10, "only-if-cached", Fresh(10, 90)),
    ],
)
def test_s5_2_1_request_directives_that_still_allow_reuse(
    cache_control: str, age: float, request_cc: str, expected: Fresh
) -> None:
    assert reuse(cache_control, age, request_cc) == expected


@pytest.mark.parametrize(
    ("cache_control", "stale_allowed", "stale_while_revalidate"),
    [
        ("max-age=100", True, False),
        ("max-age=100, stale-while-revalidate=60", True, True),
        ("max-age=100, stale-while-revalidate=10", True, False),  # 30 s stale: outside
        ("max-age=100, must-revalidate, stale-while-revalidate=60", False, False),
        ("max-age=100, proxy-revalidate", False, False),
        ("s-maxage=100, stale-while-revalidate=60", False, False),
        ("max-age=100, no-cache, stale-while-revalidate=60", False, False),
    ],
)
def test_s4_2_4_serving_stale_only_where_no_directive_forbids_it(
    cache_control: str, stale_allowed: bool, stale_while_revalidate: bool
) -> None:
    result = reuse(cache_control, 130)
    assert isinstance(result, MustValidate)
    assert (result.stale_allowed, result.stale_while_revalidate) == (
        stale_allowed,
        stale_while_revalidate,
    )


def test_rfc5861_stale_while_revalidate_is_not_offered_against_a_client_request() -> None:
    result = reuse("max-age=100, stale-while-revalidate=60", 10, "no-cache")
    assert isinstance(result, MustValidate)
    assert not result.stale_while_revalidate


def test_s4_2_3_age_header_counts_towards_the_age() -> None:
    assert reuse("max-age=100", 10, None, ("Age", "50")) == Fresh(age=60, ttl=40)


def test_s4_2_a_pragma_no_cache_request_is_validated() -> None:
    stored = StoredHead(
        "http://example.com/", 200, "OK", (("Cache-Control", "max-age=100"),), T, T, 0
    )
    request = request_directives(Headers([("Pragma", "no-cache")]))
    result = evaluate(stored, request, T, HEURISTIC)
    assert isinstance(result, MustValidate)
    assert result.reason == "request-no-cache"


@pytest.mark.parametrize(
    ("cache_control", "request_cc", "age", "expected"),
    [
        ("max-age=100, stale-if-error=60", None, 130, True),  # 30 s stale, window 60
        ("max-age=100, stale-if-error=60", None, 160, True),  # the window's edge
        ("max-age=100, stale-if-error=60", None, 161, False),
        ("max-age=100", "stale-if-error=60", 130, True),  # the client's own window
        ("max-age=100", "stale-if-error=10", 130, False),
        ("max-age=100", None, 130, False),  # no directive
        ("max-age=100, must-revalidate, stale-if-error=60", None, 130, False),
        ("s-maxage=100, stale-if-error=60", None, 130, False),
        ("max-age=100, no-cache, stale-if-error=60", None, 130, False),
    ],
)
def test_rfc5861_4_stale_if_error_window(
    cache_control: str, request_cc: str | None, age: float, expected: bool
) -> None:
    result = reuse(cache_control, age, request_cc)
    assert isinstance(result, MustValidate)
    assert result.stale_if_error is expected


@pytest.mark.parametrize(
    ("cache_control", "request_cc", "age", "unreachable", "expected"),
    [
        # Without a directive: only when the origin cannot be reached, within max_stale.
        ("max-age=100", None, 130, True, True),
        ("max-age=100", None, 130, False, False),  # a 5xx answer is not disconnection
        ("max-age=100", None, 100 + 3600, True, True),  # max_stale's edge
        ("max-age=100", None, 100 + 3601, True, False),
        ("max-age=100", "max-age=0", 130, True, False),  # the client asked for validation
        # With stale-if-error: on any failure, within its window.
        ("max-age=100, stale-if-error=60", None, 130, False, True),
        ("max-age=100, stale-if-error=60", None, 130, True, True),
        ("max-age=100", "max-age=0, stale-if-error=60", 130, False, True),
        # Forbidden whatever else says so (RFC 9111 4.2.4).
        ("max-age=100, must-revalidate", None, 130, True, False),
        ("max-age=100, proxy-revalidate, stale-if-error=60", None, 130, True, False),
        ("max-age=100, no-cache", None, 130, True, False),
    ],
)
def test_s4_2_4_stale_on_failure(
    cache_control: str, request_cc: str | None, age: float, unreachable: bool, expected: bool
) -> None:
    result = reuse(cache_control, age, request_cc)
    assert stale_on_failure(result, unreachable=unreachable, max_stale=3600) is expected


def test_s4_2_4_a_fresh_response_needs_no_stale_on_failure() -> None:
    assert not stale_on_failure(reuse("max-age=100", 10), unreachable=True, max_stale=3600)
