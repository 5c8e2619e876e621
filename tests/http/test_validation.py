"""Validation: conditional requests and 304 handling (RFC 9111 4.3, 3.2)."""

from __future__ import annotations

import pytest

from harvest_cache.http.dates import format_http_date
from harvest_cache.http.headers import Headers
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.validation import (
    ETag,
    conditional_headers,
    freshen,
    head_confirms,
    is_not_modified_for,
    parse_etag,
)

T = 1_700_000_000.0
LM = format_http_date(T - 86400)


def head(*fields: tuple[str, str]) -> StoredHead:
    return StoredHead("http://example.com/", 200, "OK", fields, T - 1, T, 5)


@pytest.mark.parametrize(
    ("value", "etag"),
    [
        ('"abc"', ETag("abc", weak=False)),
        ('W/"abc"', ETag("abc", weak=True)),
        ('""', ETag("", weak=False)),
        (' "abc" ', ETag("abc", weak=False)),
        ("abc", None),
        ('"abc', None),
        ('w/"abc"', None),  # W/ is case-sensitive
        ('"a"b"', None),
    ],
)
def test_rfc9110_s8_8_3_entity_tags_parse(value: str, etag: ETag | None) -> None:
    assert parse_etag(value) == etag


@pytest.mark.parametrize(
    ("a", "b", "strong", "weak"),
    [
        ('W/"1"', 'W/"1"', False, True),
        ('W/"1"', 'W/"2"', False, False),
        ('W/"1"', '"1"', False, True),
        ('"1"', '"1"', True, True),
    ],
)
def test_rfc9110_s8_8_3_2_strong_and_weak_comparison(
    a: str, b: str, strong: bool, weak: bool
) -> None:
    x, y = parse_etag(a), parse_etag(b)
    assert x is not None
    assert y is not None
    assert (x.strong_match(y), x.weak_match(y)) == (strong, weak)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ([], []),
        ([("ETag", '"v1"')], [("If-None-Match", '"v1"')]),
        ([("ETag", 'W/"v1"')], [("If-None-Match", 'W/"v1"')]),
        ([("Last-Modified", LM)], [("If-Modified-Since", LM)]),
        (
            [("ETag", '"v1"'), ("Last-Modified", LM)],
            [("If-None-Match", '"v1"'), ("If-Modified-Since", LM)],
        ),
        ([("Last-Modified", "yesterday")], []),  # not a date: not sent
        ([("ETag", "v1")], []),  # not an entity-tag
        ([("ETag", '"a"'), ("ETag", '"b"')], []),  # ambiguous
        # an obsolete date format is sent as the origin wrote it
        (
            [("Last-Modified", "Sunday, 06-Nov-94 08:49:37 GMT")],
            [("If-Modified-Since", "Sunday, 06-Nov-94 08:49:37 GMT")],
        ),
    ],
)
def test_s4_3_1_conditional_request_carries_the_stored_validators(
    fields: list[tuple[str, str]], expected: list[tuple[str, str]]
) -> None:
    assert list(conditional_headers(head(*fields))) == expected


@pytest.mark.parametrize(
    ("stored", "response", "selected"),
    [
        ([("ETag", '"v1"')], [("ETag", '"v1"')], True),
        ([("ETag", '"v1"')], [("ETag", '"v2"')], False),
        ([("ETag", 'W/"v1"')], [("ETag", '"v1"')], False),  # a strong one needs a strong one
        ([("ETag", '"v1"')], [("ETag", 'W/"v1"')], True),  # a weak one compares weakly
        ([("ETag", 'W/"v1"')], [("ETag", 'W/"v1"')], True),
        ([], [("ETag", '"v1"')], False),
        ([("Last-Modified", LM)], [("Last-Modified", LM)], True),
        ([("Last-Modified", LM)], [("Last-Modified", format_http_date(T))], False),
        ([("ETag", '"v1"'), ("Last-Modified", LM)], [], True),  # no validator: ours
        ([("ETag", '"v1"')], [("Last-Modified", LM)], True),
    ],
)
def test_s4_3_4_a_304_selects_the_stored_response_by_its_validators(
    stored: list[tuple[str, str]], response: list[tuple[str, str]], selected: bool
) -> None:
    assert is_not_modified_for(head(*stored), Headers(response)) is selected


def test_s3_2_freshen_replaces_stored_fields_with_those_of_the_304() -> None:
    stored = head(
        ("Content-Type", "text/plain"),
        ("Cache-Control", "max-age=60"),
        ("X-Old", "1"),
        ("X-Old", "2"),
        ("ETag", '"v1"'),
        ("Date", format_http_date(T)),
    )
    new_date = format_http_date(T + 500)
    fresh = freshen(
        stored,
        Headers(
            [
                ("Cache-Control", "max-age=120"),
                ("X-Old", "3"),
                ("Date", new_date),
                ("ETag", '"v1"'),
            ]
        ),
        T + 499,
        T + 500,
    )
    assert Headers(fresh.headers).get_all("X-Old") == ["3"]
    assert Headers(fresh.headers).get("Cache-Control") == "max-age=120"
    assert Headers(fresh.headers).get("Date") == new_date
    assert Headers(fresh.headers).get("Content-Type") == "text/plain"
    assert (fresh.request_time, fresh.response_time) == (T + 499, T + 500)
    assert (fresh.url, fresh.status, fresh.body_length) == (stored.url, 200, 5)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Content-Length", "999"),
        ("Content-Range", "bytes 0-1/2"),
        ("Connection", "close"),
        ("Transfer-Encoding", "chunked"),
        ("Keep-Alive", "timeout=5"),
    ],
)
def test_s3_2_freshen_keeps_content_length_and_ignores_hop_by_hop_fields(
    name: str, value: str
) -> None:
    stored = head(("Content-Length", "5"), ("Date", format_http_date(T)))
    fresh = freshen(stored, Headers([(name, value), ("Date", format_http_date(T))]), T, T)
    headers = Headers(fresh.headers)
    assert headers.get("Content-Length") == "5"
    assert name == "Content-Length" or name not in headers


def test_s3_2_freshen_drops_fields_named_by_connection() -> None:
    fresh = freshen(head(), Headers([("Connection", "X-Hop"), ("X-Hop", "1")]), T, T)
    assert "X-Hop" not in Headers(fresh.headers)


@pytest.mark.parametrize(
    ("response", "age"),
    [([], None), ([("Age", "7")], "7")],
)
def test_s4_2_3_freshen_takes_age_from_the_304_only(
    response: list[tuple[str, str]], age: str | None
) -> None:
    fresh = freshen(head(("Age", "3000")), Headers(response), T, T)
    assert Headers(fresh.headers).get("Age") == age


def test_rfc9110_s6_6_1_a_304_without_date_dates_the_response_on_receipt() -> None:
    fresh = freshen(head(("Date", format_http_date(T - 9999))), Headers(), T + 99, T + 100)
    assert Headers(fresh.headers).get_all("Date") == [format_http_date(T + 100)]


def test_s5_2_2_7_freshen_drops_fields_the_304_marks_private() -> None:
    stored = head(("Set-Cookie", "a=1"), ("X-Keep", "1"))
    fresh = freshen(stored, Headers([("Cache-Control", 'max-age=9, private="Set-Cookie"')]), T, T)
    assert "Set-Cookie" not in Headers(fresh.headers)
    assert "X-Keep" in Headers(fresh.headers)


@pytest.mark.parametrize(
    ("stored", "response", "confirms"),
    [
        ([("ETag", '"a"')], [("ETag", '"a"')], True),
        ([("ETag", '"a"'), ("Last-Modified", LM)], [("ETag", '"a"'), ("Last-Modified", LM)], True),
        ([("ETag", '"a"'), ("Last-Modified", LM)], [("Last-Modified", LM)], True),
        ([("ETag", '"a"')], [("ETag", '"b"')], False),
        ([("ETag", '"a"')], [("ETag", 'W/"a"')], False),  # the value differs
        ([("Last-Modified", LM)], [("ETag", '"a"')], False),  # a validator not stored
        ([("ETag", '"a"')], [], False),  # nothing to match on
        ([("ETag", '"a"')], [("ETag", '"a"'), ("Content-Length", "5")], True),
        ([("ETag", '"a"')], [("ETag", '"a"'), ("Content-Length", "6")], False),
    ],
)
def test_s4_3_5_head_response_confirms_the_stored_get_response(
    stored: list[tuple[str, str]], response: list[tuple[str, str]], confirms: bool
) -> None:
    # (the stored body is 5 bytes long)
    assert head_confirms(head(*stored), Headers(response)) is confirms
