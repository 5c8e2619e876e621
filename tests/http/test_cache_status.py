"""The Cache-Status response field (RFC 9211)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.http.cache_status import cache_status, ttl_parts, with_ttl


@pytest.mark.parametrize(
    ("kwargs", "value"),
    [
        ({"hit": True, "ttl": 53}, "harvest; hit; ttl=53"),
        ({"hit": True, "ttl": 53.9}, "harvest; hit; ttl=53"),
        ({"hit": True, "ttl": -0.5}, "harvest; hit; ttl=-1"),  # stale: a negative ttl
        (
            {"hit": False, "fwd": "uri-miss", "fwd_status": 200, "stored": True},
            "harvest; fwd=uri-miss; fwd-status=200; stored",
        ),
        (
            {"hit": False, "fwd": "stale", "fwd_status": 304, "ttl": 60},
            "harvest; fwd=stale; fwd-status=304; ttl=60",
        ),
        ({"hit": False, "fwd": "method"}, "harvest; fwd=method"),
        (
            {"hit": False, "fwd": "miss", "fwd_status": 200, "collapsed": True},
            "harvest; fwd=miss; fwd-status=200; collapsed",
        ),
        ({"hit": False, "detail": "origin-error"}, "harvest; detail=origin-error"),
        ({"hit": False, "detail": "no route"}, 'harvest; detail="no route"'),
        ({"hit": True, "detail": 'say "hi"'}, 'harvest; hit; detail="say \\"hi\\""'),
        ({"hit": True, "ttl": 1e30}, "harvest; hit; ttl=999999999999999"),
    ],
)
def test_rfc9211_s2_parameters_in_order(kwargs: dict[str, Any], value: str) -> None:
    assert cache_status("harvest", **kwargs) == value


def test_rfc9211_s2_a_cache_name_that_is_not_a_token_is_a_string() -> None:
    assert cache_status("cache 1", hit=True) == '"cache 1"; hit'


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hit": True, "fwd": "miss"},  # a hit was not forwarded
        {"hit": False, "fwd": "elsewhere"},  # not an RFC 9211 reason
        {"hit": False, "detail": "caf\u00e9"},  # not ASCII
        {"hit": False, "detail": "a\nb"},
    ],
)
def test_rfc9211_s2_invalid_combinations_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Cache-Status"):
        cache_status("harvest", **kwargs)


def test_rfc9211_2_7_key_is_a_string_and_left_out_unless_printable_ascii() -> None:
    assert cache_status("c", hit=True, ttl=5, key='http://a/"x"\\') == (
        'c; hit; ttl=5; key="http://a/\\"x\\"\\\\"'
    )
    assert cache_status("c", hit=True, key="http://a/\u00e9") == "c; hit"
    assert cache_status("c", hit=False, fwd="uri-miss", key="http://a/") == (
        'c; fwd=uri-miss; key="http://a/"'
    )


@settings(max_examples=300)
@given(
    name=st.sampled_from(["harvest", "my-cache", "a b", 'q"uote', "ttl=0; x"]),
    status=st.sampled_from([200, 304, 503]),
    key=st.none() | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126)),
    ttl=st.floats(min_value=-1e18, max_value=1e18, allow_nan=False),
)
def test_ttl_parts_make_what_cache_status_makes(
    name: str, status: int, key: str | None, ttl: float
) -> None:
    parts = ttl_parts(name, fwd="stale", fwd_status=status, key=key)
    assert with_ttl(parts, ttl) == cache_status(
        name, hit=False, fwd="stale", fwd_status=status, ttl=ttl, key=key
    )
