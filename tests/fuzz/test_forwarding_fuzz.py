"""Fuzzing what the proxy changes in forwarded messages: no hop-by-hop field survives, and
nothing raises on any fields."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvest_cache.http.forwarding import (
    HOP_BY_HOP,
    end_to_end,
    forwarded_head,
    max_forwards,
    request_fields,
)
from harvest_cache.http.headers import Headers, split_list
from tests.fuzz.strategies import (
    FUZZ,
    field,
    field_text,
    numerals,
    soup,
    weighted,
)

_hop_names = st.sampled_from(sorted(HOP_BY_HOP)).flatmap(
    lambda n: st.sampled_from([n, n.upper(), n.title()])
)
_connection_values = soup("close", "keep-alive", "x-a", "X-B", "upgrade", "te", '"x-a"', max_size=6)
mixed_fields = st.lists(
    weighted(
        (3, field),
        (1, st.tuples(_hop_names, field_text)),
        (1, st.tuples(st.sampled_from(["Connection", "connection"]), _connection_values)),
        (1, st.tuples(st.sampled_from(["X-A", "x-b", "Via", "X-Forwarded-For"]), field_text)),
    ),
    max_size=10,
)


@FUZZ
@given(mixed_fields, st.sets(st.sampled_from(["expect", "host", "x-a"])).map(frozenset))
def test_no_hop_by_hop_field_survives_end_to_end(
    items: list[tuple[str, str]], without: frozenset[str]
) -> None:
    out = end_to_end(items, without)
    named = {o.lower() for n, v in items if n.lower() == "connection" for o in split_list(v)}
    drop = HOP_BY_HOP | without | named
    # Exactly the other fields, in their order; and the index agrees with them.
    assert out.items() == [(n, v) for n, v in items if n.lower() not in drop]
    for name, _ in out:
        assert out.get_all(name) == [v for n, v in out.items() if n.lower() == name.lower()]
    assert set(out.names()) == {n.lower() for n, _ in out.items()}


@FUZZ
@given(
    mixed_fields,
    st.sampled_from(["on", "off", "delete"]),
    st.sampled_from(["example.com", "[::1]:8080"]),
)
def test_request_fields_never_raise_and_frame_the_request(
    items: list[tuple[str, str]], xff: str, authority: str
) -> None:
    out = request_fields(Headers(items), authority, "1.1 fuzz", xff, "10.0.0.1")
    assert out.items()[0] == ("Host", authority)
    assert out.get_all("Host") == [authority]
    assert "Expect" not in out
    assert not set(out.names()) & HOP_BY_HOP
    vias = out.get_all("Via")
    assert len(vias) == 1
    assert vias[0].endswith("1.1 fuzz")
    forwarded = out.get_all("X-Forwarded-For")
    if xff == "on":
        assert len(forwarded) == 1
        assert forwarded[0].endswith("10.0.0.1")
    elif xff == "delete":
        assert forwarded == []


_STATUS_LINE = re.compile(rb"HTTP/1\.1 [0-9]{3} [^\r\n]*\r\n")


@FUZZ
@given(
    st.integers(100, 599),
    st.sampled_from(["OK", "", "Not Modified"]),
    mixed_fields,
    st.lists(
        st.tuples(st.sampled_from(["Content-Length", "Age", "X-New"]), field_text), max_size=3
    ),
)
def test_forwarded_head_never_raises(
    status: int, reason: str, items: list[tuple[str, str]], replace: list[tuple[str, str]]
) -> None:
    replaced = frozenset(n.lower() for n, _ in replace)
    head = forwarded_head(status, reason, items, "1.1 fuzz", replace, replaced)
    assert _STATUS_LINE.match(head)
    assert head.endswith(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")[1:]
    names = [line.partition(b":")[0].decode("latin-1").lower() for line in lines]
    assert names.count("via") == 1
    for name in replaced:
        assert names.count(name) == sum(1 for n, _ in replace if n.lower() == name)


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Max-Forwards", "max-forwards"]),
            st.one_of(numerals, soup(" ", max_size=4)),
        ),
        max_size=2,
    )
)
def test_max_forwards_is_a_count_or_none(items: list[tuple[str, str]]) -> None:
    hops = max_forwards(Headers(items))
    assert hops is None or (type(hops) is int and hops >= 0)
    if len(items) == 1 and items[0][1].strip().isascii() and items[0][1].strip().isdigit():
        value = items[0][1].strip()
        assert hops == (min(int(value), 2**31) if len(value) <= 10 else 2**31)


# -- regression: isdigit-int (Max-Forwards) -----------------------------------------------------
# str.isdigit() is true for superscript digits (\xb2 \xb3 \xb9), which int() refuses, and int()
# refuses more than 4300 digits: max_forwards once raised ValueError for them, which killed the
# connection's handler on OPTIONS and TRACE. Now: None, or a count capped at 2**31.


@pytest.mark.parametrize("value", ["\u00b2", " \u00b9\u00b3 "])
def test_max_forwards_that_isdigit_but_is_no_int_is_none(value: str) -> None:
    assert max_forwards(Headers([("Max-Forwards", value)])) is None


def test_max_forwards_beyond_what_int_takes_is_capped() -> None:
    assert max_forwards(Headers([("Max-Forwards", "9" * 4301)])) == 2**31
