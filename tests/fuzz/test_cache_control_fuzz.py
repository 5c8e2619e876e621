"""Fuzzing parse_cache_control: any field lines parse, to typed and restrictive results."""

from __future__ import annotations

import random
from dataclasses import fields

from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.http.cache_control import MAX_DELTA, CacheControl, parse_cache_control
from tests.fuzz.strategies import (
    CACHE_CONTROL_NAMES,
    FUZZ,
    cache_control_values,
    random_case,
    soup,
)

_DELTAS = {
    "max-age": "max_age",
    "s-maxage": "s_maxage",
    "min-fresh": "min_fresh",
    "max-stale": "max_stale",
    "stale-while-revalidate": "stale_while_revalidate",
    "stale-if-error": "stale_if_error",
}
_INT_FIELDS = set(_DELTAS.values())
_TUPLE_FIELDS = {"no_cache_fields", "private_fields"}
_KNOWN = set(CACHE_CONTROL_NAMES)


def check_typed(cc: CacheControl) -> None:
    for f in fields(cc):
        value = getattr(cc, f.name)
        if f.name in _INT_FIELDS:
            assert value is None or (type(value) is int and 0 <= value <= MAX_DELTA), (f, cc)
        elif f.name in _TUPLE_FIELDS:
            assert isinstance(value, tuple), (f, cc)
            assert all(isinstance(n, str) and n and n == n.lower() for n in value), (f, cc)
            assert list(value) == sorted(set(value)), (f, cc)
        elif f.name == "invalid":
            assert isinstance(value, frozenset), cc
            assert value <= _KNOWN, cc
        else:
            assert type(value) is bool, (f, cc)


@FUZZ
@given(st.lists(cache_control_values, max_size=4))
def test_any_lines_parse_to_typed_directives(lines: list[str]) -> None:
    check_typed(parse_cache_control(lines))


@FUZZ
@given(st.lists(st.text(), max_size=3))
def test_any_unicode_lines_parse_to_typed_directives(lines: list[str]) -> None:
    check_typed(parse_cache_control(lines))


@FUZZ
@given(
    st.sampled_from(sorted(_DELTAS)).flatmap(random_case),
    st.integers(0, 10**40),
    st.integers(0, 3),
    st.booleans(),
)
def test_delta_seconds_read_exactly_and_capped(name: str, n: int, zeros: int, quoted: bool) -> None:
    arg = "0" * zeros + str(n)
    if quoted:
        arg = f'"{arg}"'
    cc = parse_cache_control([f"{name}={arg}"])
    assert getattr(cc, _DELTAS[name.lower()]) == min(n, MAX_DELTA)
    assert cc.invalid == frozenset()


@FUZZ
@given(
    st.sampled_from(sorted(_DELTAS)),
    # No commas or quotes: those would split the member or make a quoted-string.
    soup("-", ".", "e", "+", " ", max_size=4).filter(
        lambda a: (
            "," not in a and '"' not in a and not (a.strip().isascii() and a.strip().isdigit())
        )
    ),
)
def test_malformed_delta_seconds_count_as_zero(name: str, arg: str) -> None:
    cc = parse_cache_control([f"{name}={arg}"])
    assert getattr(cc, _DELTAS[name]) == 0
    assert name in cc.invalid


# A directive member: a known or unknown name with no argument, a token or a quoted string.
_tokens = st.text(
    st.characters(codec="ascii", categories=["L", "N"], include_characters="-!#$%&'*+.^_`|~"),
    min_size=1,
    max_size=6,
)
_quoted = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=8).map(
    lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
)
_names = st.one_of(st.sampled_from(CACHE_CONTROL_NAMES), _tokens)
_members = st.tuples(
    _names, st.one_of(st.none(), _tokens, _quoted, st.integers(0, 10**12).map(str))
)


def render(name: str, arg: str | None) -> str:
    return name if arg is None else f"{name}={arg}"


@FUZZ
@given(st.lists(_members, max_size=8), st.data())
def test_directive_names_are_case_insensitive(
    members: list[tuple[str, str | None]], data: st.DataObject
) -> None:
    lower = [render(n.lower(), a) for n, a in members]
    mixed = [render(data.draw(random_case(n)), a) for n, a in members]
    assert parse_cache_control([", ".join(mixed)]) == parse_cache_control([", ".join(lower)])


@FUZZ
@given(st.lists(_members, max_size=8), st.randoms(use_true_random=False))
def test_order_and_line_breaks_do_not_matter(
    members: list[tuple[str, str | None]], rnd: random.Random
) -> None:
    rendered = [render(n, a) for n, a in members]
    shuffled = list(rendered)
    rnd.shuffle(shuffled)
    one_line = parse_cache_control([", ".join(rendered)])
    assert parse_cache_control(rendered) == one_line
    assert parse_cache_control([", ".join(shuffled)]) == one_line


@FUZZ
@given(st.lists(_members, max_size=6), st.lists(st.tuples(_tokens, st.one_of(st.none(), _quoted))))
def test_unknown_extensions_are_ignored(
    members: list[tuple[str, str | None]], extensions: list[tuple[str, str | None]]
) -> None:
    unknown = [(n, a) for n, a in extensions if n.lower() not in _KNOWN]
    base = parse_cache_control([", ".join(render(n, a) for n, a in members)])
    mixed = parse_cache_control([", ".join(render(n, a) for n, a in [*members, *unknown])])
    assert mixed == base


@FUZZ
@given(st.sampled_from(sorted(_DELTAS)), st.lists(st.integers(0, 2**40), min_size=1, max_size=4))
def test_duplicates_keep_the_most_restrictive_value(name: str, values: list[int]) -> None:
    cc = parse_cache_control([", ".join(f"{name}={v}" for v in values)])
    pick = max if name == "min-fresh" else min
    assert getattr(cc, _DELTAS[name]) == min(pick(values), MAX_DELTA)


@FUZZ
@given(
    st.sampled_from(["no-cache", "private"]),
    st.lists(_tokens, min_size=1, max_size=4),
    st.booleans(),
)
def test_field_lists_apply_to_the_fields_and_unqualified_wins(
    name: str, names: list[str], unqualified: bool
) -> None:
    members = [f'{name}="{", ".join(names)}"']
    if unqualified:
        members.append(name)
    cc = parse_cache_control([", ".join(members)])
    attr = name.replace("-", "_")
    assert getattr(cc, f"{attr}_fields") == tuple(sorted({n.lower() for n in names}))
    assert getattr(cc, attr) is unqualified


@settings(FUZZ, max_examples=50)
@given(st.sampled_from(["no-cache", "private"]), st.sampled_from(['""', '" , "', '"', '"a\\"']))
def test_empty_or_malformed_field_lists_read_as_unqualified(name: str, arg: str) -> None:
    cc = parse_cache_control([f"{name}={arg}"])
    attr = name.replace("-", "_")
    assert getattr(cc, attr) is True
    assert getattr(cc, f"{attr}_fields") == ()
