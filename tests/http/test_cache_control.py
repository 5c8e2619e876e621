"""Cache-Control parsing (RFC 9111 5.2, 1.2.2, 4.2.1)."""

from __future__ import annotations

from typing import Any

import pytest

from harvest_cache.http.cache_control import (
    MAX_DELTA,
    CacheControl,
    delta_seconds,
    parse_cache_control,
)


def test_s5_2_no_field_lines_give_every_default() -> None:
    assert parse_cache_control([]) == CacheControl()
    assert parse_cache_control([""]) == CacheControl()


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["max-age=60"], {"max_age": 60}),
        (["s-maxage=30"], {"s_maxage": 30}),
        (["min-fresh=5"], {"min_fresh": 5}),
        (["max-stale=7"], {"max_stale": 7}),
        (["stale-while-revalidate=8"], {"stale_while_revalidate": 8}),
        (["stale-if-error=9"], {"stale_if_error": 9}),
        (["no-cache"], {"no_cache": True}),
        (["private"], {"private": True}),
        (["no-store"], {"no_store": True}),
        (["public"], {"public": True}),
        (["must-revalidate"], {"must_revalidate": True}),
        (["proxy-revalidate"], {"proxy_revalidate": True}),
        (["must-understand"], {"must_understand": True}),
        (["no-transform"], {"no_transform": True}),
        (["only-if-cached"], {"only_if_cached": True}),
        (["immutable"], {"immutable": True}),
        (["public, max-age=60, immutable"], {"public": True, "max_age": 60, "immutable": True}),
    ],
)
def test_s5_2_each_directive_is_recognised(lines: list[str], expected: dict[str, Any]) -> None:
    assert parse_cache_control(lines) == CacheControl(**expected)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["MAX-AGE=60"], {"max_age": 60}),
        (["No-Store"], {"no_store": True}),
        (['max-age="60"'], {"max_age": 60}),
        (["  max-age = 60  "], {"max_age": 60}),
        (["max-age=60", "public"], {"max_age": 60, "public": True}),
        (["max-age=60,,public,"], {"max_age": 60, "public": True}),
        (['community="UCI", max-age=60'], {"max_age": 60}),
        (['x-ext="a, no-store", max-age=60'], {"max_age": 60}),
        (["x-unknown, x-other=1"], {}),
    ],
)
def test_s5_2_names_are_case_insensitive_quotes_accepted_extensions_ignored(
    lines: list[str], expected: dict[str, Any]
) -> None:
    assert parse_cache_control(lines) == CacheControl(**expected)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["max-age=60, max-age=60"], 60),
        (["max-age=60, max-age=10"], 10),
        (["max-age=10", "max-age=60"], 10),
        (["max-age=60, max-age=abc"], 0),
    ],
)
def test_s4_2_1_conflicting_duplicates_keep_the_most_restrictive(
    lines: list[str], expected: int
) -> None:
    assert parse_cache_control(lines).max_age == expected


def test_s4_2_1_duplicate_min_fresh_keeps_the_largest() -> None:
    assert parse_cache_control(["min-fresh=5, min-fresh=50"]).min_fresh == 50


@pytest.mark.parametrize(
    "arg",
    ["-1", "1.5", "abc", "", '""', "0x10", "+5", "\u0665", '"60', "1 2"],
)
def test_s4_2_1_invalid_max_age_makes_the_response_stale(arg: str) -> None:
    cc = parse_cache_control([f"max-age={arg}"])
    assert cc.max_age == 0
    assert cc.invalid == {"max-age"}


@pytest.mark.parametrize("name", ["max-age", "s-maxage", "min-fresh", "stale-if-error"])
def test_s5_2_delta_directive_without_argument_is_invalid(name: str) -> None:
    cc = parse_cache_control([name])
    assert cc.invalid == {name}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2147483647", 2147483647),
        ("2147483648", MAX_DELTA),
        ("2147483649", MAX_DELTA),
        ("99999999999", MAX_DELTA),
        ("9" * 5000, MAX_DELTA),  # beyond int()'s digit limit: capped without converting
        ("0000000000060", 60),  # leading zeros do not count towards the overflow
        ("0" * 5000, 0),
        ("000", 0),
    ],
)
def test_s1_2_2_delta_seconds_overflow_is_capped_at_2_pow_31(value: str, expected: int) -> None:
    assert parse_cache_control([f"max-age={value}"]).max_age == expected
    assert delta_seconds(value) == expected


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["max-stale"], MAX_DELTA),
        (["max-stale=30"], 30),
        (["max-stale, max-stale=30"], 30),
        (["max-stale=oops"], 0),
    ],
)
def test_s5_2_1_2_bare_max_stale_accepts_any_staleness(lines: list[str], expected: int) -> None:
    assert parse_cache_control(lines).max_stale == expected


@pytest.mark.parametrize(
    ("lines", "no_cache", "fields"),
    [
        (['no-cache="Set-Cookie"'], False, ("set-cookie",)),
        (['no-cache="Set-Cookie, X-Foo"'], False, ("set-cookie", "x-foo")),
        (["no-cache=Set-Cookie"], False, ("set-cookie",)),
        (['no-cache="b", no-cache="a"'], False, ("a", "b")),
        (['no-cache=""'], True, ()),
        (['no-cache="a", no-cache'], True, ("a",)),
    ],
)
def test_s5_2_2_4_qualified_no_cache_lists_fields(
    lines: list[str], no_cache: bool, fields: tuple[str, ...]
) -> None:
    cc = parse_cache_control(lines)
    assert (cc.no_cache, cc.no_cache_fields) == (no_cache, fields)


@pytest.mark.parametrize(
    ("lines", "private", "fields"),
    [
        (["private"], True, ()),
        (['private="Set-Cookie"'], False, ("set-cookie",)),
        (['PRIVATE="x-a, X-B"'], False, ("x-a", "x-b")),
    ],
)
def test_s5_2_2_7_qualified_private_lists_fields(
    lines: list[str], private: bool, fields: tuple[str, ...]
) -> None:
    cc = parse_cache_control(lines)
    assert (cc.private, cc.private_fields) == (private, fields)


@pytest.mark.parametrize(
    ("line", "invalid"),
    [
        ('no-cache="unterminated', {"no-cache"}),
        ('private="a\\"', {"private"}),
        ("no-store=1", {"no-store"}),
        ("public=yes", {"public"}),
    ],
)
def test_s5_2_malformed_arguments_still_apply_the_directive(line: str, invalid: set[str]) -> None:
    cc = parse_cache_control([line])
    assert cc.invalid == invalid
    assert cc.no_cache or cc.private or cc.no_store or cc.public


def test_s5_2_quoted_string_escapes_are_removed() -> None:
    assert parse_cache_control(['no-cache="a\\-b"']).no_cache_fields == ("a-b",)


def test_s5_2_parse_is_memoised_on_the_lines() -> None:
    assert parse_cache_control(["max-age=5"]) is parse_cache_control(iter(["max-age=5"]))


def test_repr_shows_only_present_directives() -> None:
    cc = parse_cache_control(["public, max-age=60"])
    assert repr(cc) == "CacheControl(max_age=60, public=True)"
