"""The cache end to end: what is stored, for how long, how it is reused and revalidated.

Each test scripts a loopback origin and talks to a real cache through aiohttp; the origin's
hit counts show what reached it, Cache-Status (RFC 9211) and the access log what the cache did.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.support import (
    Handler,
    LogLine,
    MakeCache,
    Origin,
    ProxyClient,
    counting,
    http_date,
    our_cache_status,
    proxy_client,
    static,
    stop_and_read_log,
)


def results_for(lines: list[LogLine], url: str) -> list[str]:
    return [line.result for line in lines if line.url == url]


def pattern(n: int, seed: str) -> bytes:
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (n // len(block) + 1))[:n]


# -- miss, hit, tiers ------------------------------------------------------------------------


async def test_miss_then_hit_with_age_and_cache_status(origin: Origin, client: ProxyClient) -> None:
    origin.route("/a", static(b"hello", {"Cache-Control": "max-age=60"}))
    first, body = await client.get(origin.url("/a"))
    assert (first.status, body) == (200, b"hello")
    assert "Age" not in first.headers or int(first.headers["Age"]) <= 1
    second, body = await client.get(origin.url("/a"))
    assert (second.status, body) == (200, b"hello")
    assert second.headers["Cache-Status"].startswith("test-cache; hit")
    assert second.headers["Age"].isdigit()
    assert int(second.headers["Age"]) <= 1
    assert origin.hits["/a"] == 1


async def test_memory_hit_and_disk_hit(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache(cache={"memory_max_object_kb": 64})
    small, large = pattern(1000, "small"), pattern(200 * 1024, "large")
    origin.route("/small", static(small, {"Cache-Control": "max-age=60"}))
    origin.route("/large", static(large, {"Cache-Control": "max-age=60"}))
    async with proxy_client(cache) as client:
        for path, data in (("/small", small), ("/large", large)):
            for _ in range(2):
                resp, body = await client.get(origin.url(path))
                assert resp.status == 200
                assert body == data
    assert origin.hits["/small"] == origin.hits["/large"] == 1
    lines = await stop_and_read_log(cache)
    assert results_for(lines, origin.url("/small")) == ["TCP_MISS", "TCP_MEM_HIT"]
    # Above memory_max_object_kb: stored on disk only, so the hit is a disk hit.
    assert results_for(lines, origin.url("/large")) == ["TCP_MISS", "TCP_HIT"]


async def test_twenty_mib_object_read_back_from_disk_intact(
    origin: Origin, client: ProxyClient, cache: CacheServer
) -> None:
    data = pattern(20 * 1024 * 1024, "twenty")
    origin.route("/big", static(data, {"Cache-Control": "max-age=60"}))
    resp, body = await client.get(origin.url("/big"))
    assert resp.status == 200
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()
    resp, body = await client.get(origin.url("/big"))
    assert resp.status == 200
    assert resp.headers["Content-Length"] == str(len(data))
    assert len(body) == len(data)
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/big"] == 1
    lines = await stop_and_read_log(cache)
    assert results_for(lines, origin.url("/big")) == ["TCP_MISS", "TCP_HIT"]


async def test_head_served_from_stored_get(origin: Origin, client: ProxyClient) -> None:
    origin.route("/h", static(b"0123456789", {"Cache-Control": "max-age=60", "ETag": '"h1"'}))
    await client.get(origin.url("/h"))
    resp, body = await client.request("HEAD", origin.url("/h"))
    assert resp.status == 200
    assert body == b""
    assert resp.headers["Content-Length"] == "10"
    assert resp.headers["ETag"] == '"h1"'
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/h"] == 1


@pytest.mark.parametrize(
    ("head_etag", "head_body", "freshened"),
    [
        ('"a"', b"0123456789", True),  # the same validator and length: freshened
        ('"b"', b"0123456789", False),  # another ETag: invalidated
        ('"a"', b"01234567890", False),  # another Content-Length: invalidated
    ],
    ids=["same", "other-etag", "other-length"],
)
async def test_s4_3_5_head_response_freshens_or_invalidates_the_stored_get(
    origin: Origin, client: ProxyClient, head_etag: str, head_body: bytes, freshened: bool
) -> None:
    seen: list[tuple[str, str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.method, request.headers.get("If-None-Match")))
        if request.method == "HEAD":
            headers = {"ETag": head_etag, "Cache-Control": "max-age=60"}
            return web.Response(body=head_body, headers=headers)
        return web.Response(
            body=b"0123456789", headers={"ETag": '"a"', "Cache-Control": "max-age=0"}
        )

    origin.route("/hv", handler)
    url = origin.url("/hv")
    await client.get(url)  # stored, stale at once
    resp, body = await client.request("HEAD", url)  # stale: forwarded as HEAD
    assert (resp.status, body) == (200, b"")
    assert seen == [("GET", None), ("HEAD", None)]
    resp, body = await client.get(url)
    assert body == b"0123456789"
    if freshened:
        # The HEAD's max-age=60 now applies to the stored GET response: a hit.
        assert our_cache_status(resp).get("hit") is True
        assert len(seen) == 2
    else:
        # Invalidated: fetched anew, not revalidated (nothing stored to validate).
        assert seen[2] == ("GET", None)
        assert our_cache_status(resp).get("fwd") == "uri-miss"


@pytest.mark.parametrize("field", ["If-Match", "If-Unmodified-Since"])
async def test_s4_3_2_origin_preconditions_are_not_evaluated_from_the_store(
    origin: Origin, client: ProxyClient, field: str
) -> None:
    """Even with a fresh stored response, If-Match and If-Unmodified-Since go to the origin,
    which alone knows the resource's current state."""
    origin.route("/pre", counting({"Cache-Control": "max-age=60", "ETag": '"p"'}))
    url = origin.url("/pre")
    await client.get(url)
    value = '"p"' if field == "If-Match" else http_date(time.time())
    resp, body = await client.get(url, headers={field: value})
    assert (resp.status, body) == (200, b"v2")
    assert our_cache_status(resp).get("hit") is not True
    _, body = await client.get(url)  # the stored response is still the first one
    assert body == b"v1"
    assert origin.hits["/pre"] == 2


@pytest.mark.parametrize("payload", [b"repeat me", bytes(range(256)) * 1200], ids=["9B", "300k"])
async def test_repeated_hits_keep_their_headers_and_body(
    origin: Origin, cache: CacheServer, client: ProxyClient, payload: bytes
) -> None:
    """The third and later hits of a plain GET may take a faster path: same answer, whether
    the body is sent with its head or after it."""
    headers = {"Cache-Control": "max-age=60", "ETag": '"r1"', "X-Extra": "kept"}
    origin.route("/rep", static(payload, headers))
    url = origin.url("/rep")
    await client.get(url)
    assert cache.proxy is not None
    assert cache.proxy.hot_entries == 0
    for _ in range(4):
        resp, body = await client.get(url)
        assert (resp.status, body) == (200, payload)
        assert resp.headers["Content-Length"] == str(len(payload))
        assert (resp.headers["ETag"], resp.headers["X-Extra"]) == ('"r1"', "kept")
        assert "test-cache" in resp.headers["Via"]
        assert int(resp.headers["Age"]) <= 1
        params = our_cache_status(resp)
        assert params.get("hit") is True
        assert 57 <= int(str(params["ttl"])) <= 60
    assert cache.proxy.hot_entries == 1  # the later hits took the fast path
    resp, body = await client.request("HEAD", url)
    assert (resp.status, body, resp.headers["Content-Length"]) == (200, b"", str(len(payload)))
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/rep"] == 1


async def test_hit_becomes_stale_when_max_age_runs_out(origin: Origin, client: ProxyClient) -> None:
    origin.route("/short", counting({"Cache-Control": "max-age=2"}))
    url = origin.url("/short")
    began = time.monotonic()
    for _ in range(3):
        _, body = await client.get(url)
        assert body == b"v1"
    await asyncio.sleep(max(0.0, 2.1 - (time.monotonic() - began)))
    resp, body = await client.get(url)
    assert body == b"v2"
    assert "hit" not in our_cache_status(resp)
    assert origin.hits["/short"] == 2


# -- what may be stored ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "cache_control", ["no-store", "private", "max-age=60, no-store", "max-age=60, private"]
)
async def test_no_store_and_private_responses_are_not_stored(
    origin: Origin, client: ProxyClient, cache_control: str
) -> None:
    origin.route("/p", counting({"Cache-Control": cache_control}))
    _, first = await client.get(origin.url("/p"))
    resp, second = await client.get(origin.url("/p"))
    assert (first, second) == (b"v1", b"v2")
    assert origin.hits["/p"] == 2
    assert "stored" not in our_cache_status(resp)


async def test_request_no_store_is_not_stored(origin: Origin, client: ProxyClient) -> None:
    origin.route("/rns", counting({"Cache-Control": "max-age=60"}))
    await client.get(origin.url("/rns"), headers={"Cache-Control": "no-store"})
    _, body = await client.get(origin.url("/rns"))
    assert body == b"v2"
    assert origin.hits["/rns"] == 2


async def test_authorization_response_not_stored_without_public_or_s_maxage(
    origin: Origin, client: ProxyClient
) -> None:
    origin.route("/auth", counting({"Cache-Control": "max-age=60"}))
    auth = {"Authorization": "Basic dXNlcjpwYXNz"}
    _, first = await client.get(origin.url("/auth"), headers=auth)
    _, second = await client.get(origin.url("/auth"), headers=auth)
    _, third = await client.get(origin.url("/auth"))
    assert (first, second, third) == (b"v1", b"v2", b"v3")
    assert origin.hits["/auth"] == 3


@pytest.mark.parametrize("cache_control", ["public, max-age=60", "s-maxage=60"])
async def test_authorization_response_stored_when_public_or_s_maxage(
    origin: Origin, client: ProxyClient, cache_control: str
) -> None:
    """RFC 9111 3.5: public or s-maxage lets a shared cache store a response to a request
    with Authorization, and reuse it."""
    origin.route("/authpub", counting({"Cache-Control": cache_control}))
    auth = {"Authorization": "Basic dXNlcjpwYXNz"}
    _, first = await client.get(origin.url("/authpub"), headers=auth)
    resp, second = await client.get(origin.url("/authpub"), headers=auth)
    assert (first, second) == (b"v1", b"v1")
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/authpub"] == 1


async def test_vary_star_is_never_stored(origin: Origin, client: ProxyClient) -> None:
    origin.route("/star", counting({"Cache-Control": "max-age=60", "Vary": "*"}))
    _, first = await client.get(origin.url("/star"))
    _, second = await client.get(origin.url("/star"))
    assert (first, second) == (b"v1", b"v2")
    assert origin.hits["/star"] == 2


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def test_responses_to_other_methods_are_never_stored(
    origin: Origin, client: ProxyClient, method: str
) -> None:
    origin.route("/m", counting({"Cache-Control": "public, max-age=60"}))
    resp1, first = await client.request(method, origin.url("/m"), data=b"x")
    _, second = await client.request(method, origin.url("/m"), data=b"x")
    assert (first, second) == (b"v1", b"v2")
    assert "stored" not in our_cache_status(resp1)
    # A GET afterwards is not answered with either response.
    _, third = await client.get(origin.url("/m"))
    assert third == b"v3"
    assert origin.hits["/m"] == 3


async def test_head_response_is_not_stored_as_a_get(origin: Origin, client: ProxyClient) -> None:
    origin.route("/hd", counting({"Cache-Control": "max-age=60"}))
    head, _ = await client.request("HEAD", origin.url("/hd"))
    assert head.status == 200
    _, body = await client.get(origin.url("/hd"))
    assert body == b"v2"
    assert origin.hits["/hd"] == 2


# -- freshness -------------------------------------------------------------------------------


async def hit_ttl(client: ProxyClient, url: str) -> int:
    """Fetch ``url`` twice; the second must be a hit: return its Cache-Status ttl."""
    await client.get(url)
    resp, _ = await client.get(url)
    params = our_cache_status(resp)
    assert params.get("hit") is True, resp.headers["Cache-Status"]
    ttl = params["ttl"]
    assert isinstance(ttl, str)
    return int(ttl)


async def test_s_maxage_wins_over_max_age_and_expires(origin: Origin, client: ProxyClient) -> None:
    now = time.time()
    headers = {
        "Cache-Control": "max-age=10, s-maxage=100",
        "Date": http_date(now),
        "Expires": http_date(now + 1000),
    }
    origin.route("/s", static(b"s", headers))
    assert 97 <= await hit_ttl(client, origin.url("/s")) <= 100


async def test_max_age_wins_over_expires(origin: Origin, client: ProxyClient) -> None:
    now = time.time()
    headers = {
        "Cache-Control": "max-age=200",
        "Date": http_date(now),
        "Expires": http_date(now + 1000),
    }
    origin.route("/m", static(b"m", headers))
    assert 197 <= await hit_ttl(client, origin.url("/m")) <= 200


async def test_max_age_wins_over_expires_in_the_past(origin: Origin, client: ProxyClient) -> None:
    now = time.time()
    headers = {
        "Cache-Control": "max-age=60",
        "Date": http_date(now),
        "Expires": http_date(now - 10),
    }
    origin.route("/mp", static(b"m", headers))
    assert 57 <= await hit_ttl(client, origin.url("/mp")) <= 60
    assert origin.hits["/mp"] == 1


async def test_s_maxage_zero_wins_over_max_age(origin: Origin, client: ProxyClient) -> None:
    origin.route("/s0", counting({"Cache-Control": "max-age=600, s-maxage=0"}))
    _, first = await client.get(origin.url("/s0"))
    _, second = await client.get(origin.url("/s0"))
    assert (first, second) == (b"v1", b"v2")
    assert origin.hits["/s0"] == 2


async def test_expires_gives_freshness(origin: Origin, client: ProxyClient) -> None:
    now = time.time()
    origin.route("/e", static(b"e", {"Date": http_date(now), "Expires": http_date(now + 300)}))
    assert 297 <= await hit_ttl(client, origin.url("/e")) <= 300


async def test_expires_in_the_past_is_stale(origin: Origin, client: ProxyClient) -> None:
    now = time.time()
    headers = {"Date": http_date(now), "Expires": http_date(now - 60), "ETag": '"e"'}
    origin.route("/ep", counting(headers))
    await client.get(origin.url("/ep"))
    _, body = await client.get(origin.url("/ep"))
    assert body == b"v2"
    assert origin.hits["/ep"] == 2


async def test_last_modified_heuristic_is_ten_percent(origin: Origin, client: ProxyClient) -> None:
    now = time.time()
    headers = {"Date": http_date(now), "Last-Modified": http_date(now - 1000)}
    origin.route("/lm", static(b"lm", headers))
    assert 97 <= await hit_ttl(client, origin.url("/lm")) <= 100
    assert origin.hits["/lm"] == 1


async def test_last_modified_heuristic_is_capped(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache(cache={"heuristic_max_seconds": 30})
    now = time.time()
    headers = {"Date": http_date(now), "Last-Modified": http_date(now - 100_000)}
    origin.route("/cap", static(b"cap", headers))
    async with proxy_client(cache) as client:
        assert 27 <= await hit_ttl(client, origin.url("/cap")) <= 30


async def test_refresh_patterns_give_heuristic_freshness_per_url(
    origin: Origin, make_cache: MakeCache
) -> None:
    patterns = [
        {
            "regex": r"\.JPG$",
            "ignore_case": True,
            "min_seconds": 0,
            "percent": 50,
            "max_seconds": 3600,
        },
        {"regex": "/news/", "min_seconds": 0, "percent": 0, "max_seconds": 0},
        {"regex": "/plain/", "min_seconds": 120, "percent": 0, "max_seconds": 600},
    ]
    cache = await make_cache(cache={"refresh_patterns": patterns})
    now = time.time()
    modified = {"Date": http_date(now), "Last-Modified": http_date(now - 1000)}
    origin.route("/pics/a.jpg", static(b"jpg", modified))
    origin.route("/news/today", counting({**modified, "ETag": '"n"'}))
    origin.route("/plain/x", static(b"x", {"Date": http_date(now)}))  # no Last-Modified
    origin.route("/other", static(b"o", modified))
    async with proxy_client(cache) as client:
        assert 497 <= await hit_ttl(client, origin.url("/pics/a.jpg")) <= 500  # 50% of 1000 s
        assert 117 <= await hit_ttl(client, origin.url("/plain/x")) <= 120  # min_seconds
        assert 97 <= await hit_ttl(client, origin.url("/other")) <= 100  # the default 10%
        # 0%: stale at once, so every request goes to the origin (to revalidate).
        await client.get(origin.url("/news/today"))
        resp, _ = await client.get(origin.url("/news/today"))
        assert our_cache_status(resp).get("hit") is not True
        assert origin.hits["/news/today"] == 2


async def test_explicit_freshness_beats_refresh_patterns(
    origin: Origin, make_cache: MakeCache
) -> None:
    patterns = [{"regex": ".", "min_seconds": 0, "percent": 0, "max_seconds": 0}]
    cache = await make_cache(cache={"refresh_patterns": patterns})
    origin.route("/explicit", static(b"e", {"Cache-Control": "max-age=300"}))
    async with proxy_client(cache) as client:
        assert 297 <= await hit_ttl(client, origin.url("/explicit")) <= 300


async def test_query_urls_are_passed_through_when_configured(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache(cache={"cache_query_urls": False})
    origin.route("/q", counting({"Cache-Control": "max-age=300"}))
    async with proxy_client(cache) as client:
        for _ in range(3):
            await client.get(origin.url("/q?a=1"))
        await client.get(origin.url("/q"))
        resp, body = await client.get(origin.url("/q"))
    assert body == b"v4"  # the fourth fetch's body, served again
    assert origin.hits["/q"] == 4  # three with a query, one without; the last a hit
    assert our_cache_status(resp).get("hit") is True
    lines = await stop_and_read_log(cache)
    assert [line.result for line in lines if "?" in line.url] == ["TCP_MISS"] * 3


async def test_response_stale_on_arrival_is_not_served_from_cache(
    origin: Origin, client: ProxyClient
) -> None:
    # Date 100 s ago with max-age=60: already 40 s stale when it arrives.
    headers = {"Cache-Control": "max-age=60", "Date": http_date(time.time() - 100)}
    origin.route("/old", counting(headers))
    _, first = await client.get(origin.url("/old"))
    _, second = await client.get(origin.url("/old"))
    assert (first, second) == (b"v1", b"v2")
    assert origin.hits["/old"] == 2


async def test_age_on_reuse_counts_the_origin_age(origin: Origin, client: ProxyClient) -> None:
    origin.route("/age", static(b"a", {"Cache-Control": "max-age=600", "Age": "30"}))
    await client.get(origin.url("/age"))
    resp, _ = await client.get(origin.url("/age"))
    assert our_cache_status(resp).get("hit") is True
    assert 30 <= int(resp.headers["Age"]) <= 32


async def test_age_on_reuse_counts_the_date(origin: Origin, client: ProxyClient) -> None:
    headers = {"Cache-Control": "max-age=600", "Date": http_date(time.time() - 20)}
    origin.route("/aged", static(b"a", headers))
    await client.get(origin.url("/aged"))
    resp, _ = await client.get(origin.url("/aged"))
    assert our_cache_status(resp).get("hit") is True
    assert 19 <= int(resp.headers["Age"]) <= 22


# -- revalidation ----------------------------------------------------------------------------


def etag_origin(body: bytes, etag: str, refreshed_cc: str = "max-age=60") -> Handler:
    """Stale at once (max-age=0) with ``etag``; a matching If-None-Match gets a 304."""

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag, "Cache-Control": refreshed_cc})
        return web.Response(body=body, headers={"ETag": etag, "Cache-Control": "max-age=0"})

    return handler


async def test_stale_revalidated_with_if_none_match(
    origin: Origin, client: ProxyClient, cache: CacheServer
) -> None:
    url = origin.url("/etag")
    origin.route("/etag", etag_origin(b"stored body", '"v1"'))
    await client.get(url)
    resp, body = await client.get(url)
    assert origin.requests[1].headers.get("If-None-Match") == '"v1"'
    assert resp.status == 200
    assert body == b"stored body"
    params = our_cache_status(resp)
    assert params.get("fwd") == "stale"
    assert params.get("fwd-status") == "304"
    # The 304's max-age=60 now applies to the stored response.
    resp, body = await client.get(url)
    assert body == b"stored body"
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/etag"] == 2
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS", "TCP_REFRESH_UNMODIFIED", "TCP_MEM_HIT"]
    assert [line.status for line in lines if line.url == url] == [200, 200, 200]


async def test_stale_revalidated_with_if_modified_since(
    origin: Origin, client: ProxyClient, cache: CacheServer
) -> None:
    url = origin.url("/ims")
    modified = http_date(time.time() - 3600)

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-Modified-Since") == modified:
            return web.Response(status=304, headers={"Cache-Control": "max-age=60"})
        return web.Response(
            body=b"ims body", headers={"Last-Modified": modified, "Cache-Control": "max-age=0"}
        )

    origin.route("/ims", handler)
    await client.get(url)
    resp, body = await client.get(url)
    assert origin.requests[1].headers.get("If-Modified-Since") == modified
    assert "If-None-Match" not in origin.requests[1].headers
    assert (resp.status, body) == (200, b"ims body")
    _, body = await client.get(url)
    assert body == b"ims body"
    assert origin.hits["/ims"] == 2
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url)[:2] == ["TCP_MISS", "TCP_REFRESH_UNMODIFIED"]


async def test_revalidation_answered_200_replaces_stored_response(
    origin: Origin, client: ProxyClient, cache: CacheServer
) -> None:
    url = origin.url("/mod")

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"old"':
            return web.Response(
                body=b"new body", headers={"ETag": '"new"', "Cache-Control": "max-age=60"}
            )
        return web.Response(
            body=b"old body", headers={"ETag": '"old"', "Cache-Control": "max-age=0"}
        )

    origin.route("/mod", handler)
    _, first = await client.get(url)
    resp, second = await client.get(url)
    assert (first, second) == (b"old body", b"new body")
    assert resp.headers["ETag"] == '"new"'
    params = our_cache_status(resp)
    assert (params.get("fwd"), params.get("fwd-status"), params.get("stored")) == (
        "stale",
        "200",
        True,
    )
    resp, third = await client.get(url)
    assert third == b"new body"
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/mod"] == 2
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS", "TCP_REFRESH_MODIFIED", "TCP_MEM_HIT"]


async def test_response_no_cache_with_validator_is_revalidated_on_each_use(
    origin: Origin, client: ProxyClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        headers = {"ETag": '"nc1"', "Cache-Control": "no-cache"}
        if request.headers.get("If-None-Match") == '"nc1"':
            return web.Response(status=304, headers=headers)
        return web.Response(body=b"revalidate me", headers=headers)

    origin.route("/rnc", handler)
    for _ in range(3):
        resp, body = await client.get(origin.url("/rnc"))
        assert (resp.status, body) == (200, b"revalidate me")
    assert origin.hits["/rnc"] == 3
    assert [r.headers.get("If-None-Match") for r in origin.requests] == [None, '"nc1"', '"nc1"']


async def test_stale_variant_revalidated_with_its_own_etag(
    origin: Origin, client: ProxyClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        lang = request.headers.get("Accept-Language", "none")
        etag = f'"{lang}"'
        headers = {"ETag": etag, "Vary": "Accept-Language", "Cache-Control": "max-age=0"}
        if request.headers.get("If-None-Match") == etag:
            headers["Cache-Control"] = "max-age=60"
            return web.Response(status=304, headers=headers)
        return web.Response(text=f"body in {lang}", headers=headers)

    origin.route("/vr", handler)
    url = origin.url("/vr")
    for lang in ("en", "fr"):
        await client.get(url, headers={"Accept-Language": lang})
    for lang in ("fr", "en"):
        resp, body = await client.get(url, headers={"Accept-Language": lang})
        assert body == f"body in {lang}".encode()
        assert our_cache_status(resp).get("fwd-status") == "304"
    for lang in ("en", "fr"):
        resp, body = await client.get(url, headers={"Accept-Language": lang})
        assert body == f"body in {lang}".encode()
        assert our_cache_status(resp).get("hit") is True
    sent = [r.headers.get("If-None-Match") for r in origin.requests]
    # (The second, matching no stored variant, asked whether the "en" one would do.)
    assert sent == [None, '"en"', '"fr"', '"en"']


async def test_revalidation_answered_no_store_removes_stored_response(
    origin: Origin, client: ProxyClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"gone"':
            return web.Response(body=b"private now", headers={"Cache-Control": "no-store"})
        return web.Response(body=b"first", headers={"ETag": '"gone"', "Cache-Control": "max-age=0"})

    origin.route("/ns", handler)
    url = origin.url("/ns")
    await client.get(url)
    _, body = await client.get(url)
    assert body == b"private now"
    # Nothing is stored now: the next request is a plain miss, not a revalidation.
    _, body = await client.get(url)
    assert body == b"first"
    assert [r.headers.get("If-None-Match") for r in origin.requests] == [None, '"gone"', None]


async def test_only_if_cached_with_stale_entry_gives_504(
    origin: Origin, client: ProxyClient
) -> None:
    origin.route("/oics", etag_origin(b"stale", '"s1"'))
    await client.get(origin.url("/oics"))
    resp, _ = await client.get(origin.url("/oics"), headers={"Cache-Control": "only-if-cached"})
    assert resp.status == 504
    assert origin.hits["/oics"] == 1


@pytest.mark.parametrize(
    "request_headers", [{"Cache-Control": "no-cache"}, {"Pragma": "no-cache"}], ids=["cc", "pragma"]
)
async def test_client_no_cache_forces_an_origin_fetch(
    origin: Origin, client: ProxyClient, cache: CacheServer, request_headers: dict[str, str]
) -> None:
    url = origin.url("/nc")
    origin.route("/nc", counting({"Cache-Control": "max-age=60"}))
    await client.get(url)
    resp, body = await client.get(url, headers=request_headers)
    assert body == b"v2"
    assert our_cache_status(resp).get("fwd") == "request"
    # The refetched response replaced the stored one.
    resp, body = await client.get(url)
    assert body == b"v2"
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/nc"] == 2
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS", "TCP_CLIENT_REFRESH_MISS", "TCP_MEM_HIT"]


async def test_only_if_cached_miss_gives_504(origin: Origin, client: ProxyClient) -> None:
    origin.route("/oic", static(b"x", {"Cache-Control": "max-age=60"}))
    resp, _ = await client.get(origin.url("/oic"), headers={"Cache-Control": "only-if-cached"})
    assert resp.status == 504
    assert origin.hits["/oic"] == 0
    await client.get(origin.url("/oic"))
    resp, body = await client.get(origin.url("/oic"), headers={"Cache-Control": "only-if-cached"})
    assert (resp.status, body) == (200, b"x")
    assert origin.hits["/oic"] == 1


async def test_client_if_none_match_answered_304_by_the_cache(
    origin: Origin, client: ProxyClient
) -> None:
    origin.route("/cond", static(b"conditional", {"Cache-Control": "max-age=60", "ETag": '"c1"'}))
    await client.get(origin.url("/cond"))
    resp, body = await client.get(origin.url("/cond"), headers={"If-None-Match": '"c1"'})
    assert resp.status == 304
    assert body == b""
    assert resp.headers["ETag"] == '"c1"'
    assert our_cache_status(resp).get("hit") is True
    resp, body = await client.get(origin.url("/cond"), headers={"If-None-Match": '"other"'})
    assert (resp.status, body) == (200, b"conditional")
    assert origin.hits["/cond"] == 1


async def test_client_if_modified_since_answered_304_by_the_cache(
    origin: Origin, client: ProxyClient
) -> None:
    now = time.time()
    headers = {"Cache-Control": "max-age=60", "Last-Modified": http_date(now - 3600)}
    origin.route("/condlm", static(b"lm", headers))
    await client.get(origin.url("/condlm"))
    resp, _ = await client.get(origin.url("/condlm"), headers={"If-Modified-Since": http_date(now)})
    assert resp.status == 304
    early = http_date(now - 7200)
    resp, body = await client.get(origin.url("/condlm"), headers={"If-Modified-Since": early})
    assert (resp.status, body) == (200, b"lm")
    assert origin.hits["/condlm"] == 1


async def test_s4_3_2_if_modified_since_against_the_stored_date_without_last_modified(
    origin: Origin, client: ProxyClient
) -> None:
    """Without Last-Modified, the stored Date stands in for it (RFC 9110 13.1.3)."""
    now = time.time()
    origin.route("/conddate", static(b"d", {"Cache-Control": "max-age=60", "Date": http_date(now)}))
    await client.get(origin.url("/conddate"))
    later, _ = await client.get(
        origin.url("/conddate"), headers={"If-Modified-Since": http_date(now + 5)}
    )
    earlier, body = await client.get(
        origin.url("/conddate"), headers={"If-Modified-Since": http_date(now - 3600)}
    )
    assert later.status == 304
    assert (earlier.status, body) == (200, b"d")
    assert origin.hits["/conddate"] == 1


async def test_rfc9110_13_2_2_if_none_match_wins_over_if_modified_since(
    origin: Origin, client: ProxyClient
) -> None:
    """If-None-Match is evaluated and If-Modified-Since ignored when both are present; a 304
    takes precedence over Range."""
    now = time.time()
    headers = {"Cache-Control": "max-age=60", "ETag": '"o"', "Last-Modified": http_date(now - 60)}
    origin.route("/order", static(b"0123456789", headers))
    await client.get(origin.url("/order"))
    # The ETag differs (200) though the date alone would give 304.
    mismatch, body = await client.get(
        origin.url("/order"),
        headers={"If-None-Match": '"x"', "If-Modified-Since": http_date(now)},
    )
    assert (mismatch.status, body) == (200, b"0123456789")
    # The ETag matches (304) though the date alone would give 200.
    match, _ = await client.get(
        origin.url("/order"),
        headers={"If-None-Match": '"o"', "If-Modified-Since": http_date(now - 3600)},
    )
    assert match.status == 304
    ranged, body = await client.get(
        origin.url("/order"), headers={"If-None-Match": '"o"', "Range": "bytes=0-3"}
    )
    assert (ranged.status, body) == (304, b"")
    assert origin.hits["/order"] == 1


async def test_s5_2_cache_directives_pass_through_both_ways(
    origin: Origin, client: ProxyClient
) -> None:
    """A proxy forwards Cache-Control, unknown extension directives included, whether or
    not it acts on them (RFC 9111 5.2)."""
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cache-Control"))
        cc = 'max-age=60, community="UCI", x-ext'
        return web.Response(body=b"d", headers={"Cache-Control": cc})

    origin.route("/directives", handler)
    resp, _ = await client.get(
        origin.url("/directives"), headers={"Cache-Control": "max-stale=5, x-request-ext=1"}
    )
    assert seen == ["max-stale=5, x-request-ext=1"]
    assert resp.headers["Cache-Control"] == 'max-age=60, community="UCI", x-ext'
    hit, _ = await client.get(origin.url("/directives"))
    assert hit.headers["Cache-Control"] == 'max-age=60, community="UCI", x-ext'
    assert our_cache_status(hit).get("hit") is True


async def test_rfc8246_immutable_with_an_argument_is_still_immutable_and_stale_revalidated(
    origin: Origin, client: ProxyClient
) -> None:
    """immutable's argument is ignored (RFC 8246 2); immutable changes nothing for a shared
    cache's freshness: once stale, it is revalidated as usual."""
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("If-None-Match"))
        headers = {"Cache-Control": 'max-age=0, immutable="yes"', "ETag": '"i"'}
        if request.headers.get("If-None-Match") == '"i"':
            return web.Response(status=304, headers=headers)
        return web.Response(body=b"i", headers=headers)

    origin.route("/immutable", handler)
    await client.get(origin.url("/immutable"))
    resp, body = await client.get(origin.url("/immutable"))
    assert (resp.status, body) == (200, b"i")
    assert seen == [None, '"i"']
    assert our_cache_status(resp).get("fwd") == "stale"


async def test_rfc8246_2_1_a_request_max_age_0_revalidates_a_fresh_immutable_response(
    origin: Origin, client: ProxyClient
) -> None:
    """A deliberate choice (docs/rfc9111.md): RFC 8246 asks clients not to revalidate an
    immutable response on reload, but a shared cache that receives max-age=0 honours the
    request, as for any response (RFC 9111 5.2.1.1)."""
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("If-None-Match"))
        headers = {"Cache-Control": "max-age=600, immutable", "ETag": '"im"'}
        if request.headers.get("If-None-Match") == '"im"':
            return web.Response(status=304, headers=headers)
        return web.Response(body=b"im", headers=headers)

    origin.route("/im-fresh", handler)
    await client.get(origin.url("/im-fresh"))
    hit, _ = await client.get(origin.url("/im-fresh"))
    assert our_cache_status(hit).get("hit") is True
    reload, body = await client.get(origin.url("/im-fresh"), headers={"Cache-Control": "max-age=0"})
    assert (reload.status, body) == (200, b"im")
    assert seen == [None, '"im"']
    assert our_cache_status(reload).get("fwd") == "request"


# -- Vary ------------------------------------------------------------------------------------


async def language_handler(request: web.Request) -> web.Response:
    lang = request.headers.get("Accept-Language", "none")
    return web.Response(
        text=f"body in {lang}",
        headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"},
    )


class Negotiating:
    """Varies on Accept-Language; ``answer_304`` decides what a conditional request gets:
    an ETag to answer 304 with, "" for a 304 without ETag, None for a full 200."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str | None]] = []  # (Accept-Language, If-None-Match)
        self.answer_304: str | None = None

    async def __call__(self, request: web.Request) -> web.Response:
        lang = request.headers.get("Accept-Language", "en")
        inm = request.headers.get("If-None-Match")
        self.seen.append((request.headers.get("Accept-Language"), inm))
        headers = {"Cache-Control": "max-age=60", "Vary": "Accept-Language"}
        if inm is not None and self.answer_304 is not None:
            if self.answer_304:
                headers["ETag"] = self.answer_304
            return web.Response(status=304, headers=headers)
        headers["ETag"] = f'"{lang}"'
        return web.Response(text=f"body in {lang}", headers=headers)


@pytest.mark.parametrize(
    ("answer_304", "body", "fwd_status", "requests"),
    [
        ('"en"', b"body in en", "304", 3),  # the origin names a stored variant: it is served
        ('W/"fr"', b"body in fr", "304", 3),  # (weakly: a 304 may use weak comparison)
        ("", b"body in de", "200", 4),  # a 304 naming none: asked again, unconditionally
        ('"xx"', b"body in de", "200", 4),  # one naming a variant not stored: the same
        (None, b"body in de", "200", 3),  # a full response: the new variant
    ],
)
async def test_s4_3_1_a_vary_miss_asks_whether_a_stored_variant_would_do(
    origin: Origin,
    client: ProxyClient,
    answer_304: str | None,
    body: bytes,
    fwd_status: str,
    requests: int,
) -> None:
    """A request matching none of the stored variants lists their entity tags in
    If-None-Match (RFC 9111 4.3.1); a 304 selects one by its ETag (4.3.4)."""
    state = Negotiating()
    origin.route("/neg", state)
    url = origin.url("/neg")
    for lang in ("en", "fr"):
        _, got = await client.get(url, headers={"Accept-Language": lang})
        assert got == f"body in {lang}".encode()
    state.answer_304 = answer_304
    resp, got = await client.get(url, headers={"Accept-Language": "de"})
    assert (resp.status, got) == (200, body)
    params = our_cache_status(resp)
    assert (params.get("fwd"), params.get("fwd-status")) == ("vary-miss", fwd_status)
    assert len(state.seen) == requests
    assert state.seen[2] == ("de", '"en", "fr"')
    if requests == 4:
        assert state.seen[3] == ("de", None)


async def test_vary_stores_several_variants_per_url(origin: Origin, client: ProxyClient) -> None:
    origin.route("/v", language_handler)
    url = origin.url("/v")
    for lang in ("en", "fr"):
        resp, body = await client.get(url, headers={"Accept-Language": lang})
        assert body == f"body in {lang}".encode()
    assert origin.hits["/v"] == 2
    for lang in ("en", "fr", "en", "fr"):
        resp, body = await client.get(url, headers={"Accept-Language": lang})
        assert body == f"body in {lang}".encode()
        assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/v"] == 2
    resp, body = await client.get(url, headers={"Accept-Language": "de"})
    assert body == b"body in de"
    assert "hit" not in our_cache_status(resp)
    assert origin.hits["/v"] == 3
    # A request without the field matches none of them.
    _, body = await client.get(url)
    assert body == b"body in none"
    assert origin.hits["/v"] == 4


# -- invalidation ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
async def test_unsafe_method_invalidates_stored_response(
    origin: Origin, client: ProxyClient, method: str
) -> None:
    origin.route("/inv", counting({"Cache-Control": "max-age=60"}))
    url = origin.url("/inv")
    await client.get(url)
    _, body = await client.get(url)
    assert body == b"v1"
    resp, _ = await client.request(method, url, data=b"change")
    assert resp.status == 200
    _, body = await client.get(url)
    assert body == b"v3"
    assert [r.method for r in origin.requests] == ["GET", method, "GET"]


async def test_unsafe_method_invalidates_every_variant(origin: Origin, client: ProxyClient) -> None:
    origin.route("/iv", language_handler)
    url = origin.url("/iv")
    for lang in ("en", "fr"):
        await client.get(url, headers={"Accept-Language": lang})
    await client.request("POST", url, data=b"x")
    for lang in ("en", "fr"):
        resp, _ = await client.get(url, headers={"Accept-Language": lang})
        assert "hit" not in our_cache_status(resp)
    assert [r.method for r in origin.requests] == ["GET", "GET", "POST", "GET", "GET"]


async def test_unsafe_method_invalidates_location_and_content_location(
    origin: Origin, client: ProxyClient
) -> None:
    async def form(request: web.Request) -> web.Response:
        return web.Response(
            status=201,
            text="created",
            headers={"Location": "/made", "Content-Location": origin.url("/summary")},
        )

    origin.route("/form", form)
    origin.route("/made", counting({"Cache-Control": "max-age=60"}))
    origin.route("/summary", counting({"Cache-Control": "max-age=60"}))
    for path in ("/made", "/summary"):
        await client.get(origin.url(path))
        await client.get(origin.url(path))
    assert origin.hits["/made"] == origin.hits["/summary"] == 1
    resp, _ = await client.request("POST", origin.url("/form"), data=b"x")
    assert resp.status == 201
    for path in ("/made", "/summary"):
        _, body = await client.get(origin.url(path))
        assert body == b"v2"


async def test_failed_unsafe_method_does_not_invalidate(
    origin: Origin, client: ProxyClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        if request.method == "POST":
            return web.Response(status=500, text="failed")
        return web.Response(text="kept", headers={"Cache-Control": "max-age=60"})

    origin.route("/keep", handler)
    await client.get(origin.url("/keep"))
    resp, _ = await client.request("POST", origin.url("/keep"), data=b"x")
    assert resp.status == 500
    resp, body = await client.get(origin.url("/keep"))
    assert body == b"kept"
    assert our_cache_status(resp).get("hit") is True


# -- Cache-Status ----------------------------------------------------------------------------


async def test_cache_status_values(origin: Origin, client: ProxyClient) -> None:
    origin.route("/cs", static(b"cs", {"Cache-Control": "max-age=60"}))
    origin.route("/cs-no", static(b"no", {"Cache-Control": "no-store"}))
    resp, _ = await client.get(origin.url("/cs"))
    assert our_cache_status(resp) == {"fwd": "uri-miss", "fwd-status": "200", "stored": True}
    resp, _ = await client.get(origin.url("/cs"))
    params = our_cache_status(resp)
    assert set(params) == {"hit", "ttl"}
    assert params["hit"] is True
    assert 57 <= int(str(params["ttl"])) <= 60
    resp, _ = await client.get(origin.url("/cs-no"))
    assert our_cache_status(resp) == {"fwd": "uri-miss", "fwd-status": "200"}
    resp, _ = await client.request("POST", origin.url("/cs"), data=b"x")
    assert our_cache_status(resp) == {"fwd": "method", "fwd-status": "200"}
    resp, _ = await client.get(origin.url("/missing"))
    assert resp.status == 404
    params = our_cache_status(resp)
    assert (params.get("fwd"), params.get("fwd-status")) == ("uri-miss", "404")
