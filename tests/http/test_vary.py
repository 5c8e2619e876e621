"""Vary: selecting header fields and their normalised key (RFC 9111 4.1)."""

from __future__ import annotations

import pytest

from harvest_cache.http.headers import Headers
from harvest_cache.http.vary import vary_key, vary_names


@pytest.mark.parametrize(
    ("lines", "names"),
    [
        ([], ()),
        ([""], ()),
        (["Accept-Encoding"], ("accept-encoding",)),
        (["User-Agent, accept-encoding"], ("accept-encoding", "user-agent")),
        (["Accept-Encoding", "ACCEPT-ENCODING, Cookie"], ("accept-encoding", "cookie")),
        (["Accept-Encoding, *"], None),
        (["*"], None),
        (["Cookie", "*"], None),
    ],
)
def test_s4_1_vary_names_are_lowercased_deduplicated_sorted_and_star_is_none(
    lines: list[str], names: tuple[str, ...] | None
) -> None:
    assert vary_names(Headers(("Vary", v) for v in lines)) == names


def key(names: tuple[str, ...], *fields: tuple[str, str]) -> str:
    return vary_key(names, Headers(fields))


def test_s4_1_no_selecting_fields_give_the_empty_key() -> None:
    assert key((), ("Accept-Encoding", "gzip")) == ""


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # whitespace around commas and at the ends, empty list members
        ([("Accept-Encoding", "gzip,deflate")], [("Accept-Encoding", " gzip ,  deflate ")]),
        ([("Accept-Encoding", "gzip, deflate")], [("Accept-Encoding", "gzip,,deflate,")]),
        # several field lines combine into one
        (
            [("Accept-Encoding", "gzip, deflate")],
            [("accept-encoding", "gzip"), ("Accept-Encoding", "deflate")],
        ),
        # parameters of the Accept family: whitespace around ';'
        ([("Accept-Encoding", "gzip;q=1.0")], [("Accept-Encoding", "gzip ; q=1.0")]),
        ([("Accept", "text/html;level=1")], [("Accept", "text/html; level=1")]),
        # case-insensitive values: codings, charsets, language tags
        ([("Accept-Encoding", "GZIP")], [("Accept-Encoding", "gzip")]),
        ([("Accept-Language", "en-US")], [("Accept-Language", "en-us")]),
        # fields not selected by Vary do not matter
        ([("Accept-Encoding", "gzip"), ("Cookie", "a=1")], [("Accept-Encoding", "gzip")]),
    ],
)
def test_s4_1_requests_differing_only_in_permitted_ways_share_a_key(
    a: list[tuple[str, str]], b: list[tuple[str, str]]
) -> None:
    names = ("accept", "accept-encoding", "accept-language")
    assert key(names, *a) == key(names, *b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([], [("Accept-Encoding", "")]),  # absent differs from empty
        ([("Accept-Encoding", "gzip")], [("Accept-Encoding", "deflate")]),
        ([("Accept-Encoding", "gzip, br")], [("Accept-Encoding", "br, gzip")]),  # order kept
        ([("User-Agent", "Mozilla")], [("User-Agent", "mozilla")]),  # case matters elsewhere
        ([("Cookie", "a=1")], [("Cookie", "a=2")]),
        ([("Accept-Encoding", "gzip"), ("Cookie", "")], [("Accept-Encoding", "gzip")]),
    ],
)
def test_s4_1_requests_with_different_selecting_values_do_not_share_a_key(
    a: list[tuple[str, str]], b: list[tuple[str, str]]
) -> None:
    names = ("accept-encoding", "cookie", "user-agent")
    assert key(names, *a) != key(names, *b)


def test_s4_1_key_is_readable_one_line_per_name() -> None:
    assert key(("accept-encoding", "cookie"), ("Accept-Encoding", "gzip")) == (
        "accept-encoding=gzip\ncookie"
    )


def test_s4_1_quoted_commas_are_not_list_separators() -> None:
    names = ("x-tag",)
    assert key(names, ("X-Tag", '"a,b"')) != key(names, ("X-Tag", '"a, b"'))
