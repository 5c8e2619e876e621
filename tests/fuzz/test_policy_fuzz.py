"""Fuzzing the cache's decisions (storable, evaluate, stale_on_failure) and the freshness
arithmetic under them, with arbitrary response fields and times."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.freshness import Heuristic, current_age, freshness_lifetime
from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import (
    Fresh,
    MustValidate,
    StoreDecision,
    evaluate,
    request_directives,
    stale_on_failure,
    storable,
)
from harvest_cache.http.stored import StoredHead
from tests.fuzz.strategies import FUZZ, cache_control_values, fields, headers, stored_heads

heuristics = st.builds(
    lambda percent, lo, extra: Heuristic(percent, lo + extra, lo),
    st.integers(0, 200),
    st.integers(0, 3600),
    st.integers(0, 10**6),
)
# A request's directives: from its Cache-Control and Pragma fields.
request_headers = st.one_of(
    headers,
    st.lists(cache_control_values, max_size=2).map(
        lambda lines: Headers([("Cache-Control", line) for line in lines])
    ),
)
_times = st.floats(1e9, 2e9)
_methods = st.sampled_from(["GET", "HEAD", "POST", "get", "PUT"])

_REASONS = {
    "method",
    "status",
    "no-store",
    "must-understand",
    "private",
    "authorization",
    "vary-star",
    "no-freshness",
    "stale-no-validator",
}


@FUZZ
@given(_methods, request_headers, st.integers(0, 1000), headers)
def test_storable_never_raises_and_names_its_reason(
    method: str, req: Headers, status: int, response: Headers
) -> None:
    decision = storable(
        method,
        req,
        request_directives(req),
        status,
        response,
        parse_cache_control(response.get_all("Cache-Control")),
    )
    assert isinstance(decision, StoreDecision)
    if decision.ok:
        assert decision.reason == "ok"
        assert method == "GET"
        assert 200 <= status <= 599
        assert status not in (206, 304)
        assert not request_directives(req).no_store
        assert all(n == n.lower() for n in decision.omit_fields)
    else:
        assert decision.reason in _REASONS


@FUZZ
@given(stored_heads, request_headers, _times, heuristics)
def test_evaluate_never_raises_and_fresh_means_fresh(
    stored: StoredHead, req: Headers, now: float, heuristic: Heuristic
) -> None:
    request_cc = request_directives(req)
    reuse = evaluate(stored, request_cc, now, heuristic)
    assert reuse.age >= 0
    if isinstance(reuse, Fresh):
        assert reuse.ttl > 0 or reuse.reason == "max-stale"
        assert reuse.reason in ("fresh", "max-stale")
        if reuse.reason == "max-stale":
            assert request_cc.max_stale is not None
            assert -reuse.ttl <= request_cc.max_stale
        assert not request_cc.no_cache
        assert request_cc.max_age is None or reuse.age <= request_cc.max_age
        assert request_cc.min_fresh is None or reuse.ttl >= request_cc.min_fresh
    else:
        assert isinstance(reuse, MustValidate)
        assert not reuse.stale_if_error or reuse.stale_allowed
        assert not reuse.stale_while_revalidate or (reuse.stale_allowed and reuse.reason == "stale")


@FUZZ
@given(
    stored_heads,
    request_headers,
    _times,
    heuristics,
    st.booleans(),
    st.floats(0, 1e9),
)
def test_stale_on_failure_never_raises(
    stored: StoredHead,
    req: Headers,
    now: float,
    heuristic: Heuristic,
    unreachable: bool,
    max_stale: float,
) -> None:
    reuse = evaluate(stored, request_directives(req), now, heuristic)
    serve = stale_on_failure(reuse, unreachable=unreachable, max_stale=max_stale)
    assert isinstance(serve, bool)
    if serve:
        assert isinstance(reuse, MustValidate)
        assert reuse.stale_allowed


@FUZZ
@given(st.integers(0, 1000), fields, heuristics, _times, _times, st.floats(0, 1e6))
def test_lifetimes_and_ages_are_never_negative(
    status: int,
    items: list[tuple[str, str]],
    heuristic: Heuristic,
    request_time: float,
    response_time: float,
    later: float,
) -> None:
    h = Headers(items)
    cc = parse_cache_control(h.get_all("Cache-Control"))
    lifetime = freshness_lifetime(status, h, cc, heuristic, response_time=response_time)
    assert lifetime.seconds >= 0
    if lifetime.heuristic:
        assert heuristic.min_seconds <= lifetime.seconds <= heuristic.max_seconds
    now = response_time + later
    assert current_age(h, request_time, response_time, now) >= now - response_time
    # Clock steps backwards never make it younger.
    assert current_age(h, request_time, response_time, response_time - later) == current_age(
        h, request_time, response_time, response_time
    )
