"""Invalidation after unsafe requests (RFC 9111 4.4)."""

from __future__ import annotations

import pytest

from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import invalidated_urls, invalidates


@pytest.mark.parametrize(
    ("method", "status", "expected"),
    [
        ("POST", 200, True),
        ("PUT", 201, True),
        ("DELETE", 204, True),
        ("PATCH", 303, True),
        ("PURGE", 200, True),  # unknown methods are unsafe
        ("get", 200, True),  # method names are case-sensitive
        ("POST", 199, False),
        ("POST", 404, False),
        ("POST", 500, False),
        ("GET", 200, False),
        ("HEAD", 200, False),
        ("OPTIONS", 200, False),
        ("TRACE", 200, False),
    ],
)
def test_s4_4_unsafe_method_with_non_error_status_invalidates(
    method: str, status: int, expected: bool
) -> None:
    assert invalidates(method, status) is expected


TARGET = "http://example.com/a/b"


@pytest.mark.parametrize(
    ("fields", "urls"),
    [
        ([], [TARGET]),
        ([("Location", "/c")], [TARGET, "http://example.com/c"]),
        ([("Location", "c?x=1")], [TARGET, "http://example.com/a/c?x=1"]),
        ([("Content-Location", "http://EXAMPLE.com:80/d#frag")], [TARGET, "http://example.com/d"]),
        (
            [("Location", "/c"), ("Content-Location", "/d")],
            [TARGET, "http://example.com/c", "http://example.com/d"],
        ),
        ([("Location", "/a/b")], [TARGET]),  # the target itself is listed once
        ([("Location", "http://other.example/c")], [TARGET]),  # another origin
        ([("Location", "http://example.com:8080/c")], [TARGET]),  # another port
        ([("Location", "https://example.com/c")], [TARGET]),  # another scheme
        ([("Location", "http://[::1/c")], [TARGET]),  # malformed
    ],
)
def test_s4_4_location_and_content_location_are_invalidated_only_on_the_same_origin(
    fields: list[tuple[str, str]], urls: list[str]
) -> None:
    assert invalidated_urls(TARGET, Headers(fields)) == urls
