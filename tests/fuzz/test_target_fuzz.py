"""Fuzzing request targets: any string is a Target or a RequestError, and a Target's url
parses back to the same Target."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.errors import RequestError
from harvest_cache.http.target import (
    Target,
    _parse_absolute,
    canonical_url,
    parse_absolute,
    parse_authority,
)
from tests.fuzz.strategies import FUZZ, soup, weighted

_hosts = st.sampled_from(
    [
        "example.com",
        "EXAMPLE.com.",
        "127.0.0.1",
        "[::1]",
        "[fe80::1%25eth0]",
        "[v1.x]",
        "[::1",
        "a..b",
        ".a",
        "a b",
        "xn--caf-dma.example",
        "caf\u00e9.example",
        "",
        "u:p@host",
        "@host",
        "h\\x",
        "h%41",
    ]
)
_ports = st.sampled_from(
    ["", ":", ":80", ":0", ":8080", ":65535", ":65536", ":99999", ":-1", ":8a"]
)
_path_soup = soup(
    "/", "?", "#", "%", "%2F", "..", "a", " ", "\t", "\x00", "\u00e9", "//", max_size=6
)
_paths = weighted(
    (1, st.just("")),
    (4, _path_soup.map(lambda p: "/" + p)),
    (1, _path_soup.map(lambda p: "?" + p)),
    (1, _path_soup),
)

_good_hosts = st.sampled_from(
    ["example.com", "Example.COM.", "127.0.0.1", "[::1]", "[FE80::1%25eth0]", "a-b.c", "caf\u00e9"]
)
_good_ports = st.sampled_from(["", ":", ":80", ":8080", ":00080", ":65535"])

targets = weighted(
    (
        4,
        st.builds(
            lambda scheme, host, port, path: f"{scheme}{host}{port}{path}",
            st.sampled_from(["http://", "HTTP://", "Http://"]),
            _good_hosts,
            _good_ports,
            _paths,
        ),
    ),
    (
        2,
        st.builds(
            lambda scheme, host, port, path: f"{scheme}{host}{port}{path}",
            st.sampled_from(
                ["http://", "HTTP://", "hTTp://", "https://", "ftp://", "http:/", "//", ""]
            ),
            _hosts,
            _ports,
            _paths,
        ),
    ),
    (1, st.text(max_size=30)),
    (1, soup("http://", "http", "://", "[", "]", "@", ":", "/", "?", "#", max_size=10)),
)

authorities = weighted(
    (3, st.builds(lambda h, p: h + p, _hosts, _ports)),
    (1, st.text(max_size=20)),
    (1, soup(":", "[", "]", "443", "\u00b2", "\u0663", max_size=8)),
)


def _outcome(raw: str) -> Target | RequestError:
    try:
        return parse_absolute(raw)
    except RequestError as e:
        return e


@settings(FUZZ, max_examples=400)
@given(targets)
def test_absolute_targets_parse_or_are_refused(raw: str) -> None:
    outcome = _outcome(raw)
    if isinstance(outcome, RequestError):
        assert outcome.status in (400, 501)
        return
    assert outcome.scheme in ("http", "https")
    assert outcome.host
    assert 0 < outcome.port <= 65535
    assert outcome.path.startswith("/")
    # The canonical url is a fixed point: it parses back to the same Target.
    again = parse_absolute(outcome.url)
    assert again == outcome
    assert again.url == outcome.url


@settings(FUZZ, max_examples=400)
@given(targets)
def test_the_fast_path_agrees_with_urlsplit(raw: str) -> None:
    try:
        slow: Target | tuple[int, str] = _parse_absolute(raw)
    except RequestError as e:
        slow = (e.status, e.reason)
    fast = _outcome(raw)
    if isinstance(fast, RequestError):
        assert slow == (fast.status, fast.reason)
    else:
        assert slow == fast


@settings(FUZZ, max_examples=400)
@given(authorities)
def test_authorities_parse_or_are_refused(raw: str) -> None:
    try:
        host, port = parse_authority(raw)
    except RequestError as e:
        status = e.status
    else:
        assert host
        assert 0 < port <= 65535
        return
    assert status == 400


# -- regression: isdigit-int (CONNECT) ----------------------------------------------------------
# The same str.isdigit() slip in parse_authority let ValueError escape for CONNECT's port
# (superscripts, or 4301 digits over the wire). Now a RequestError 400.


@pytest.mark.parametrize("raw", ["a:\u00b2", "example.com:\u00b9\u00b3", "a:" + "1" * 4301])
def test_connect_port_that_isdigit_but_is_no_int_is_refused(raw: str) -> None:
    with pytest.raises(RequestError) as refused:
        parse_authority(raw)
    assert refused.value.status == 400


@settings(FUZZ, max_examples=600)
@given(targets)
def test_a_url_taken_as_spelt_is_its_cache_key(raw: str) -> None:
    # canonical_url skips the parse only for a target that parses to itself.
    encoded = raw.encode("utf-8", "surrogateescape")
    taken = canonical_url(encoded)
    outcome = _outcome(encoded.decode("latin-1"))
    if taken is not None:
        assert isinstance(outcome, Target)
        assert outcome.url == taken == encoded.decode("latin-1")
    elif isinstance(outcome, Target) and outcome.url == raw and raw.isascii():
        # Refused although canonical: only spellings the fast parse keeps as they are.
        assert any(c in raw for c in ' "#') or "/" not in raw[len("http://") :]


def test_canonical_urls_are_taken_as_spelt() -> None:
    for url in (
        "http://example.com/",
        "http://127.0.0.1:8080/obj/1k?r=x&n=3",
        "http://[::1]:3128/a/../b?c=%20",
    ):
        assert canonical_url(url.encode()) == url
    for url in (
        "http://Example.com/",
        "HTTP://example.com/",
        "http://example.com:80/",
        "http://example.com.:8080/x",
        "http://example.com",
        "http://example.com?q",
        "http://u@example.com/",
        "http://example.com/a b",
        "http://example.com/a#f",
    ):
        assert canonical_url(url.encode()) is None, url
