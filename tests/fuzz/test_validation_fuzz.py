"""Fuzzing validation: entity tags, conditional requests, 304 and HEAD updates of a stored
head, with arbitrary header fields."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harvest_cache.http.conditional import not_modified
from harvest_cache.http.dates import parse_http_date
from harvest_cache.http.forwarding import HOP_BY_HOP
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
from tests.fuzz.strategies import FUZZ, etags, field, fields, headers, stored_heads

_opaque = st.text(st.characters(exclude_characters='"'), max_size=10)


@FUZZ
@given(st.one_of(etags, st.text()))
def test_parse_etag_returns_a_tag_that_prints_back(value: str) -> None:
    tag = parse_etag(value)
    if tag is not None:
        assert '"' not in tag.opaque
        assert parse_etag(str(tag)) == tag


@FUZZ
@given(_opaque, st.booleans(), st.sampled_from(["", " ", "\t", " \t "]))
def test_printed_tags_parse_back(opaque: str, weak: bool, ows: str) -> None:
    tag = ETag(opaque, weak)
    assert parse_etag(f"{ows}{tag}{ows}") == tag


@FUZZ
@given(stored_heads)
def test_conditional_headers_carry_only_valid_validators(stored: StoredHead) -> None:
    out = conditional_headers(stored)
    assert {name for name, _ in out} <= {"If-None-Match", "If-Modified-Since"}
    for name, value in out:
        if name == "If-None-Match":
            assert parse_etag(value) is not None
        else:
            assert parse_http_date(value) is not None


@FUZZ
@given(stored_heads, headers)
def test_is_not_modified_for_never_raises(stored: StoredHead, update: Headers) -> None:
    assert isinstance(is_not_modified_for(stored, update), bool)


@FUZZ
@given(stored_heads)
def test_a_304_with_the_stored_strong_etag_selects_it(stored: StoredHead) -> None:
    etags_ = [v for n, v in stored.headers if n.lower() == "etag"]
    tag = parse_etag(etags_[0]) if len(etags_) == 1 else None
    if tag is not None and not tag.weak:
        assert is_not_modified_for(stored, Headers([("ETag", str(tag))]))


@FUZZ
@given(stored_heads, headers, st.floats(1e9, 2e9), st.floats(1e9, 2e9))
def test_freshen_never_raises_and_keeps_what_a_304_must_not_change(
    stored: StoredHead, update: Headers, request_time: float, response_time: float
) -> None:
    out = freshen(stored, update, request_time, response_time)
    assert (out.url, out.status, out.reason, out.body_length, out.vary_key) == (
        stored.url,
        stored.status,
        stored.reason,
        stored.body_length,
        stored.vary_key,
    )
    assert (out.request_time, out.response_time) == (request_time, response_time)
    update_items = list(update)
    for name, value in out.headers:
        low = name.lower()
        # Every field is the stored one's or the 304's, or the Date the 304 lacked ...
        assert (name, value) in stored.headers or (name, value) in update_items or name == "Date"
        # ... and what describes the stored body, or a connection, is not the 304's.
        if low in ("content-length", "content-range") or low in HOP_BY_HOP:
            assert (name, value) in stored.headers, (name, value)
        # The old Age went: it aged an earlier exchange.
        if low == "age":
            assert (name, value) in update_items, (name, value)


@FUZZ
@given(stored_heads, headers)
def test_head_confirms_never_raises(stored: StoredHead, response: Headers) -> None:
    confirmed = head_confirms(stored, response)
    assert isinstance(confirmed, bool)
    if confirmed:
        assert "ETag" in response or "Last-Modified" in response


@FUZZ
@given(stored_heads, st.booleans())
def test_a_head_response_repeating_the_stored_fields_confirms(
    stored: StoredHead, with_length: bool
) -> None:
    fields_ = [(n, v) for n, v in stored.headers if n.lower() != "content-length"]
    if with_length:
        fields_.append(("Content-Length", str(stored.body_length)))
    stored = stored.revalidated(tuple(fields_), stored.request_time, stored.response_time)
    response = Headers(fields_)
    has_validator = "ETag" in response or "Last-Modified" in response
    assert head_confirms(stored, response) is has_validator


@FUZZ
@given(headers, fields.map(Headers), st.lists(field, max_size=3))
def test_client_conditionals_never_raise(
    req: Headers, stored: Headers, extra: list[tuple[str, str]]
) -> None:
    for name, value in extra:
        req.add(name, value)
    assert isinstance(not_modified(req, stored), bool)
