"""Whether a shared cache may store a response (RFC 9111 3, 3.5, 5.2)."""

from __future__ import annotations

import pytest

from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.dates import format_http_date
from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import StoreDecision, request_directives, storable

T = 1_700_000_000.0
DATE = ("Date", format_http_date(T))
LAST_MODIFIED = ("Last-Modified", format_http_date(T - 86400))
ETAG = ("ETag", '"v1"')


def decide(
    response: list[tuple[str, str]],
    *,
    status: int = 200,
    method: str = "GET",
    request: list[tuple[str, str]] | None = None,
) -> StoreDecision:
    request_headers = Headers(request or [])
    response_headers = Headers([DATE, *response])
    return storable(
        method,
        request_headers,
        request_directives(request_headers),
        status,
        response_headers,
        parse_cache_control(response_headers.get_all("Cache-Control")),
    )


@pytest.mark.parametrize(
    ("response", "status"),
    [
        ([("Cache-Control", "max-age=60")], 200),
        ([("Cache-Control", "s-maxage=60")], 200),
        ([("Expires", format_http_date(T + 60))], 200),
        ([("Cache-Control", "public")], 200),
        ([LAST_MODIFIED], 200),
        ([ETAG], 200),  # heuristically cacheable: may be stored and validated
        ([("Cache-Control", "max-age=60")], 302),
        ([("Cache-Control", "max-age=60")], 500),
        ([LAST_MODIFIED], 404),
        ([LAST_MODIFIED], 301),
        ([("Cache-Control", "no-cache"), ETAG], 200),  # stored, revalidated on each use
        ([("Cache-Control", "max-age=0"), LAST_MODIFIED], 200),
        ([("Vary", "Accept-Encoding"), ("Cache-Control", "max-age=60")], 200),
    ],
)
def test_s3_storable_responses(response: list[tuple[str, str]], status: int) -> None:
    assert decide(response, status=status) == StoreDecision(True, "ok")


@pytest.mark.parametrize(
    ("method", "status", "response", "request_fields", "reason"),
    [
        ("POST", 200, [("Cache-Control", "max-age=60")], [], "method"),
        ("HEAD", 200, [("Cache-Control", "max-age=60")], [], "method"),
        ("get", 200, [("Cache-Control", "max-age=60")], [], "method"),
        ("GET", 100, [("Cache-Control", "max-age=60")], [], "status"),
        ("GET", 206, [("Cache-Control", "max-age=60")], [], "status"),
        ("GET", 304, [("Cache-Control", "max-age=60")], [], "status"),
        ("GET", 600, [("Cache-Control", "max-age=60")], [], "status"),
        (
            "GET",
            200,
            [("Cache-Control", "max-age=60")],
            [("Cache-Control", "no-store")],
            "no-store",
        ),
        ("GET", 200, [("Cache-Control", "max-age=60, no-store")], [], "no-store"),
        ("GET", 200, [("Cache-Control", "max-age=60, private")], [], "private"),
        ("GET", 200, [("Cache-Control", "PRIVATE, max-age=60")], [], "private"),
        ("GET", 200, [("Cache-Control", "max-age=60")], [("Authorization", "x")], "authorization"),
        ("GET", 200, [("Vary", "*"), ("Cache-Control", "max-age=60")], [], "vary-star"),
        ("GET", 302, [LAST_MODIFIED], [], "no-freshness"),
        ("GET", 307, [], [], "no-freshness"),
        ("GET", 503, [LAST_MODIFIED], [], "no-freshness"),
        ("GET", 200, [("Cache-Control", "no-cache")], [], "stale-no-validator"),
        ("GET", 200, [("Cache-Control", "max-age=0")], [], "stale-no-validator"),
        ("GET", 200, [("Expires", "0")], [], "stale-no-validator"),
        ("GET", 200, [("Cache-Control", "max-age=oops")], [], "stale-no-validator"),
    ],
)
def test_s3_responses_not_stored_and_why(
    method: str,
    status: int,
    response: list[tuple[str, str]],
    request_fields: list[tuple[str, str]],
    reason: str,
) -> None:
    assert decide(response, status=status, method=method, request=request_fields) == StoreDecision(
        False, reason
    )


@pytest.mark.parametrize(
    "directive", ["public", "s-maxage=60", "must-revalidate, max-age=60", "max-age=60, public"]
)
def test_s3_5_authorization_allows_storing_with_public_s_maxage_or_must_revalidate(
    directive: str,
) -> None:
    decision = decide([("Cache-Control", directive)], request=[("Authorization", "Basic eA==")])
    assert decision.ok


@pytest.mark.parametrize(
    ("status", "reason"),
    [(200, "ok"), (404, "ok"), (302, "ok"), (299, "must-understand"), (418, "must-understand")],
)
def test_s5_2_2_3_must_understand_overrides_no_store_for_understood_statuses(
    status: int, reason: str
) -> None:
    response = [("Cache-Control", "must-understand, no-store, max-age=60")]
    assert decide(response, status=status).reason == reason


def test_s5_2_2_3_must_understand_does_not_override_request_no_store() -> None:
    response = [("Cache-Control", "must-understand, no-store, max-age=60")]
    request = [("Cache-Control", "no-store")]
    assert decide(response, request=request).reason == "no-store"


def test_s5_2_2_7_qualified_private_stores_the_rest_without_those_fields() -> None:
    decision = decide([("Cache-Control", 'max-age=60, private="Set-Cookie, X-User"')])
    assert decision == StoreDecision(True, "ok", omit_fields=("set-cookie", "x-user"))


@pytest.mark.parametrize(
    ("request_fields", "no_cache"),
    [
        ([("Pragma", "no-cache")], True),
        ([("Pragma", "No-Cache, x")], True),
        ([("Pragma", "x")], False),
        ([("Pragma", "no-cache"), ("Cache-Control", "max-age=5")], False),
        ([("Cache-Control", "no-cache")], True),
        ([], False),
    ],
)
def test_s5_4_pragma_no_cache_counts_only_without_cache_control(
    request_fields: list[tuple[str, str]], no_cache: bool
) -> None:
    assert request_directives(Headers(request_fields)).no_cache is no_cache
