"""The cache's decisions as values (harvest_cache.http.decision): what to do with a request
(RFC 9111 4, 4.3.2, 5.2.1.7; RFC 5861 3), with a fetch's response (3, 4.3.3, 4.3.4), how the
client of a fetch is answered (4.2.4, RFC 5861 4) and what a forwarded response changes
(4.3.5, 4.4). Each names its reason: the log's result code and Cache-Status's ``fwd``."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from harvest_cache.http.dates import format_http_date
from harvest_cache.http.decision import (
    Asked,
    Changes,
    DontStore,
    Fetch,
    Forward,
    Freshen,
    FromCache,
    GiveUp,
    Held,
    Invalidate,
    Lookup,
    Mismatch,
    Refetch,
    Refuse,
    Relay,
    Revalidate,
    ServeRefreshed,
    ServeStale,
    Store,
    TryStale,
    after_forward,
    bypass,
    lookup,
    relay,
    respond,
    serve_stale,
)
from harvest_cache.http.freshness import Heuristic
from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import evaluate, request_directives
from harvest_cache.http.stored import StoredHead

T = 1_700_000_000.0
URL = "http://example.com/a"
HEURISTIC = Heuristic(percent=10, max_seconds=86400)
ETAG = ("ETag", '"v1"')


def stored(cache_control: str = "max-age=100", *extra: tuple[str, str]) -> StoredHead:
    fields = (("Date", format_http_date(T)), ("Cache-Control", cache_control), *extra)
    return StoredHead(URL, 200, "OK", fields, T, T, 5)


def asked(
    *fields: tuple[str, str], method: str = "GET", body: bool = False, looped: bool = False
) -> Asked:
    plain = method == "GET" and not body and not fields
    return Asked(method, Headers(list(fields)), body, looped, plain)


def decide(request: Asked, held: Held, age: float = 10) -> Lookup:
    return lookup(request, held, T + age, HEURISTIC)


FRESH = Held(stored(), "memory")
STALE = Held(stored("max-age=1", ETAG), "disk")


@pytest.mark.parametrize(
    ("request_", "held", "age", "expected"),
    [
        # RFC 9111 4.2: a fresh response is served; the memory tier's may be prepared.
        (asked(), FRESH, 10, FromCache(10, 90, "TCP_MEM_HIT", prepare=True)),
        (asked(), Held(stored(), "disk"), 10, FromCache(10, 90, "TCP_HIT", prepare=False)),
        (asked(method="HEAD"), FRESH, 10, FromCache(10, 90, "TCP_MEM_HIT", prepare=False)),
        (asked(), Held(stored(), varies=True), 10, FromCache(10, 90, "TCP_MEM_HIT", False)),
        # 4.3.2: preconditions on the resource's current state are the origin's to evaluate.
        (asked(("If-Match", '"v1"')), FRESH, 10, Forward("TCP_MISS", "request")),
        (asked(("If-Unmodified-Since", "x")), Held(None), 10, Forward("TCP_MISS", "uri-miss")),
        # 4.2.4: stale means validation, by a fetch others may join.
        (asked(), STALE, 10, Revalidate("stale")),
        # 5.2.1.4: a request's no-cache refetches (RFC 9211: fwd=request).
        (asked(("Cache-Control", "no-cache")), FRESH, 10, Fetch("request")),
        (asked(("Pragma", "no-cache")), FRESH, 10, Fetch("request")),
        # 5.2.1.1, 5.2.1.3: fresh, but too old or not fresh enough for this request.
        (asked(("Cache-Control", "max-age=5")), FRESH, 10, Revalidate("request")),
        (asked(("Cache-Control", "min-fresh=95")), FRESH, 10, Revalidate("request")),
        # 5.2.1.2: max-stale accepts a stale response.
        (asked(("Cache-Control", "max-stale=20")), STALE, 10, FromCache(10, -9, "TCP_HIT", False)),
        # 5.2.1.7: only-if-cached with nothing to serve: 504, not a fetch.
        (
            asked(("Cache-Control", "only-if-cached")),
            STALE,
            10,
            Refuse(504, "only-if-cached: the object is not in the cache"),
        ),
        (
            asked(("Cache-Control", "only-if-cached")),
            Held(None),
            10,
            Refuse(504, "only-if-cached: the object is not in the cache"),
        ),
        # Nothing stored: a fetch; behind a Vary marker, a vary-miss offering the variants.
        (asked(), Held(None), 10, Fetch("uri-miss")),
        (asked(), Held(None, varies=True), 10, Fetch("vary-miss", alternatives=True)),
        (asked(("Cache-Control", "no-cache")), Held(None, varies=True), 10, Fetch("vary-miss")),
        # Requests whose responses are their own are forwarded, never collapsed.
        (asked(method="HEAD"), Held(None), 10, Forward("TCP_MISS", "uri-miss")),
        (asked(method="HEAD"), STALE, 10, Forward("TCP_MISS", "stale", describe=True)),
        (asked(body=True), STALE, 10, Forward("TCP_MISS", "stale")),
        (asked(("Range", "bytes=0-1")), Held(None), 10, Forward("TCP_MISS", "uri-miss")),
        (asked(("If-None-Match", '"v0"')), STALE, 10, Forward("TCP_MISS", "stale")),
        (asked(looped=True), Held(None), 10, Forward("TCP_MISS", "uri-miss")),
        (
            asked(("Cache-Control", "no-cache"), method="HEAD"),
            FRESH,
            10,
            Forward("TCP_CLIENT_REFRESH_MISS", "request", describe=True),
        ),
    ],
)
def test_rfc9111_s4_lookup(request_: Asked, held: Held, age: float, expected: Lookup) -> None:
    assert decide(request_, held, age) == expected


def test_rfc5861_s3_stale_while_revalidate_serves_at_once_and_revalidates_behind() -> None:
    held = Held(stored("max-age=1, stale-while-revalidate=60"), "memory")
    assert decide(asked(), held, 10) == ServeStale(10, -9, "TCP_MEM_HIT")
    assert decide(asked(), held, 100) == Revalidate("stale")  # past its window
    # A request with a body goes forward: it is not served from the store.
    assert isinstance(decide(asked(body=True), held, 10), Forward)


def test_a_query_url_is_bypassed_unless_query_urls_are_cached() -> None:
    assert bypass("/search?q=x", cache_query_urls=False) == Forward("TCP_MISS", "bypass")
    assert bypass("/search?q=x", cache_query_urls=True) is None
    assert bypass("/plain", cache_query_urls=False) is None


# -- responses to a fetch ---------------------------------------------------------------------

TIMES = (T + 10, T + 11)


def response_fields(*fields: tuple[str, str]) -> Headers:
    return Headers([("Date", format_http_date(T + 11)), *fields])


def test_rfc9111_s4_3_4_a_304_that_selects_the_stored_response_freshens_it() -> None:
    old = stored("max-age=1", ETAG)
    answer = respond(Headers(), old, 304, response_fields(ETAG, ("X-New", "1")), TIMES)
    assert isinstance(answer, Freshen)
    assert (answer.head.request_time, answer.head.response_time) == TIMES
    assert ("X-New", "1") in answer.head.headers


def test_rfc9111_s4_3_4_a_304_for_another_response_is_a_mismatch() -> None:
    old = stored("max-age=1", ETAG)
    assert respond(Headers(), old, 304, response_fields(("ETag", '"v2"')), TIMES) == Mismatch()


@pytest.mark.parametrize(
    ("validating", "status", "fields", "proxy_only", "expected"),
    [
        (False, 200, [("Cache-Control", "max-age=60")], False, Store),
        (False, 200, [("Cache-Control", "no-store")], False, DontStore("no-store")),
        (True, 200, [("Cache-Control", "private")], False, Invalidate("private")),
        # 4.3.3: a 5xx answer to a validation leaves the stored response in place.
        (True, 503, [], False, DontStore("validation-failed")),
        (False, 200, [("Cache-Control", "max-age=60")], True, DontStore("proxy-only")),
    ],
)
def test_rfc9111_s3_what_a_fetch_stores(
    validating: bool,
    status: int,
    fields: list[tuple[str, str]],
    proxy_only: bool,
    expected: object,
) -> None:
    old = stored("max-age=1", ETAG) if validating else None
    got = respond(Headers(), old, status, response_fields(*fields), TIMES, proxy_only=proxy_only)
    if expected is Store:
        assert isinstance(got, Store)
        assert got.vary == ()
    else:
        assert got == expected


def test_a_varying_response_is_stored_with_its_vary_names() -> None:
    fields = response_fields(("Cache-Control", "max-age=60"), ("Vary", "Accept, Accept-Language"))
    got = respond(Headers(), None, 200, fields, TIMES)
    assert isinstance(got, Store)
    assert got.vary == ("accept", "accept-language")


# -- the client of a fetch --------------------------------------------------------------------


def cacheable() -> Headers:
    return Headers([("Cache-Control", "max-age=60")])


@dataclass(frozen=True)
class Head:
    status: int = 200
    headers: Headers = field(default_factory=cacheable)
    refreshed: StoredHead | None = None
    shareable: bool = True
    vary_key: str = ""


def relayed(
    fetched: Head | None,
    *,
    revalidating: bool = False,
    joined: bool = False,
    fwd: str = "uri-miss",
    tried: bool = False,
    fields: tuple[tuple[str, str], ...] = (),
) -> object:
    return relay(
        fetched,
        Headers(list(fields)),
        revalidating=revalidating,
        joined=joined,
        fwd=fwd,
        tried_stale=tried,
        now=T,
    )


def test_rfc9111_s4_results_of_a_fetch() -> None:
    assert relayed(Head()) == Relay("TCP_MISS")
    assert relayed(Head(), joined=True) == Relay("TCP_CF_MISS")
    assert relayed(Head(), fwd="request") == Relay("TCP_CLIENT_REFRESH_MISS")
    assert relayed(Head(), revalidating=True) == Relay("TCP_REFRESH_MODIFIED")
    assert relayed(Head(refreshed=stored()), revalidating=True) == ServeRefreshed()


def test_rfc5861_s4_a_failed_validation_tries_the_stored_response_once() -> None:
    assert relayed(None, revalidating=True) == TryStale(None)
    assert relayed(None, revalidating=True, tried=True) == GiveUp()
    assert relayed(None) == GiveUp()
    assert relayed(Head(503), revalidating=True) == TryStale(503)
    assert relayed(Head(503), revalidating=True, tried=True) == Relay("TCP_REFRESH_FAIL_ERR")
    assert relayed(Head(404), revalidating=True) == Relay("TCP_REFRESH_MODIFIED")


@pytest.mark.parametrize(
    ("head", "fields", "shared"),
    [
        (Head(), (), True),
        (Head(shareable=False), (), False),
        # 5.2.2.4, 5.2.2.7: no-cache or private="..." answers only the client that asked.
        (Head(headers=Headers([("Cache-Control", "no-cache")])), (), False),
        (Head(headers=Headers([("Cache-Control", 'private="Set-Cookie"')])), (), False),
        # Stale on arrival (4.2): not for others.
        (Head(headers=Headers([("Cache-Control", "max-age=5"), ("Age", "10")])), (), False),
        # Vary (4.1): only for requests that select the same variant.
        (
            Head(
                headers=Headers([("Cache-Control", "max-age=60"), ("Vary", "Accept")]),
                vary_key="accept=text/html",
            ),
            (("Accept", "text/html"),),
            True,
        ),
        (
            Head(
                headers=Headers([("Cache-Control", "max-age=60"), ("Vary", "Accept")]),
                vary_key="accept=text/html",
            ),
            (("Accept", "image/png"),),
            False,
        ),
    ],
)
def test_rfc9111_s4_a_joined_client_gets_a_response_only_if_it_may_be_shared(
    head: Head, fields: tuple[tuple[str, str], ...], shared: bool
) -> None:
    expected = Relay("TCP_CF_MISS") if shared else Refetch()
    assert relayed(head, joined=True, fields=fields) == expected


def test_rfc9111_s4_2_4_stale_on_failure_only_where_allowed() -> None:
    def reuse(cache_control: str, age: float) -> object:
        return evaluate(
            stored(cache_control, ETAG), request_directives(Headers()), T + age, HEURISTIC
        )

    assert serve_stale(reuse("max-age=1", 10), None, max_stale=60)  # type: ignore[arg-type]
    assert not serve_stale(reuse("max-age=1", 100), None, max_stale=60)  # type: ignore[arg-type]
    assert not serve_stale(reuse("max-age=1", 10), 503, max_stale=60)  # type: ignore[arg-type]
    assert serve_stale(reuse("max-age=1, stale-if-error=60", 10), 503, max_stale=0)  # type: ignore[arg-type]
    assert not serve_stale(reuse("max-age=1, must-revalidate", 10), None, 60)  # type: ignore[arg-type]


# -- a forwarded request's response -----------------------------------------------------------


def test_rfc9111_s4_4_an_unsafe_methods_success_invalidates_the_url_and_its_locations() -> None:
    fields = response_fields(("Location", "/b"), ("Content-Location", "http://other.example/c"))
    changes = after_forward("POST", URL, 201, fields, None, TIMES)
    assert changes == Changes(("http://example.com/a", "http://example.com/b"))
    assert after_forward("POST", URL, 500, fields, None, TIMES) == Changes()
    assert after_forward("GET", URL, 200, fields, None, TIMES) == Changes()


def test_rfc9111_s4_3_5_a_heads_200_freshens_or_invalidates_the_stored_get_response() -> None:
    old = stored("max-age=1", ETAG)
    same = after_forward("HEAD", URL, 200, response_fields(ETAG), old, TIMES)
    assert same.freshened is not None
    assert not same.drop_described
    other = after_forward("HEAD", URL, 200, response_fields(("ETag", '"v2"')), old, TIMES)
    assert other == Changes(drop_described=True)
    assert after_forward("HEAD", URL, 404, response_fields(ETAG), old, TIMES) == Changes()
