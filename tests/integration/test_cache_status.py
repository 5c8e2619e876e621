"""Cache-Status (RFC 9211) on the answers the cache makes itself and on what it did not store."""

from __future__ import annotations

from aiohttp import web

from tests.support import (
    MakeCache,
    Origin,
    ProxyClient,
    counting,
    free_port,
    our_cache_status,
    proxy_client,
    static,
)


async def big(request: web.Request) -> web.Response:
    return web.Response(body=b"b" * (2 << 20), headers={"Cache-Control": "max-age=60"})


async def test_an_object_over_max_object_size_is_not_claimed_stored(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/big", big)
    cache = await make_cache(cache={"max_object_mb": 1})
    async with proxy_client(cache) as client:
        first, body = await client.get(origin.url("/big"))
        second, _ = await client.get(origin.url("/big"))
    assert len(body) == 2 << 20
    assert our_cache_status(first) == {"fwd": "uri-miss", "fwd-status": "200"}
    assert our_cache_status(second).get("hit") is None
    assert origin.hits["/big"] == 2


async def test_only_if_cached_miss_says_why(origin: Origin, client: ProxyClient) -> None:
    resp, _ = await client.get(origin.url("/absent"), headers={"Cache-Control": "only-if-cached"})
    assert resp.status == 504
    assert our_cache_status(resp) == {"detail": "only-if-cached"}
    assert origin.hits["/absent"] == 0


async def test_denied_client_gets_a_cache_status(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache(access={"allow": ["10.0.0.0/8"]})
    async with proxy_client(cache) as client:
        resp, _ = await client.get(origin.url("/x"))
    assert resp.status == 403
    assert our_cache_status(resp) == {"detail": "denied"}


async def test_upstream_failure_names_its_kind(client: ProxyClient) -> None:
    resp, body = await client.get(f"http://127.0.0.1:{free_port()}/nothing-here")
    assert resp.status == 502
    assert our_cache_status(resp) == {"fwd": "miss", "detail": "connect_refused"}
    assert b"refused" in body


async def test_rfc9211_2_2_fwd_vary_miss(origin: Origin, client: ProxyClient) -> None:
    """A URL whose stored responses vary, none for this request's Accept: vary-miss."""
    headers = {"Cache-Control": "max-age=60", "Vary": "Accept"}
    origin.route("/v", counting(headers))
    first, _ = await client.get(origin.url("/v"), headers={"Accept": "text/plain"})
    other, _ = await client.get(origin.url("/v"), headers={"Accept": "text/html"})
    again, _ = await client.get(origin.url("/v"), headers={"Accept": "text/html"})
    assert our_cache_status(first).get("fwd") == "uri-miss"
    assert our_cache_status(other).get("fwd") == "vary-miss"
    assert our_cache_status(again).get("hit") is True


async def test_rfc9211_2_2_fwd_request_and_stale(origin: Origin, client: ProxyClient) -> None:
    """The client's no-cache or precondition: request. A stale stored response that the
    request could not use, forwarded: stale (also for a HEAD)."""
    origin.route("/r", static(b"r", {"Cache-Control": "max-age=60", "ETag": '"r"'}))
    origin.route("/s", static(b"s", {"Cache-Control": "max-age=0", "ETag": '"s"'}))
    await client.get(origin.url("/r"))
    reload, _ = await client.get(origin.url("/r"), headers={"Cache-Control": "no-cache"})
    guarded, _ = await client.get(origin.url("/r"), headers={"If-Match": '"r"'})
    assert our_cache_status(reload).get("fwd") == "request"
    assert our_cache_status(guarded).get("fwd") == "request"
    await client.get(origin.url("/s"))
    head, _ = await client.request("HEAD", origin.url("/s"))
    revalidated, _ = await client.get(origin.url("/s"))
    assert our_cache_status(head).get("fwd") == "stale"
    assert our_cache_status(revalidated).get("fwd") == "stale"


async def test_rfc9211_2_2_fwd_bypass(origin: Origin, make_cache: MakeCache) -> None:
    """A request the configuration keeps out of the cache (cache_query_urls = false)."""
    cache = await make_cache(cache={"cache_query_urls": False})
    origin.route("/q", static(b"q", {"Cache-Control": "max-age=60"}))
    async with proxy_client(cache) as client:
        resp, _ = await client.get(origin.url("/q?x=1"))
    assert our_cache_status(resp) == {"fwd": "bypass", "fwd-status": "200"}


async def test_rfc9211_2_2_fwd_request_only_where_something_was_stored(
    origin: Origin, client: ProxyClient
) -> None:
    """A fresh stored response refused by the request's min-fresh: request. With nothing
    stored, a no-cache or If-Match request is a plain uri-miss."""
    origin.route("/fresh", static(b"f", {"Cache-Control": "max-age=60", "ETag": '"f"'}))
    await client.get(origin.url("/fresh"))
    refused, _ = await client.get(origin.url("/fresh"), headers={"Cache-Control": "min-fresh=120"})
    assert our_cache_status(refused).get("fwd") == "request"
    origin.route("/new1", static(b"n", {"Cache-Control": "max-age=60"}))
    origin.route("/new2", static(b"n", {"Cache-Control": "max-age=60", "ETag": '"n"'}))
    reload, _ = await client.get(origin.url("/new1"), headers={"Cache-Control": "no-cache"})
    guarded, _ = await client.get(origin.url("/new2"), headers={"If-Match": '"n"'})
    assert our_cache_status(reload).get("fwd") == "uri-miss"
    assert our_cache_status(guarded).get("fwd") == "uri-miss"


async def test_rfc9211_2_7_key_on_every_path_when_configured(
    origin: Origin, make_cache: MakeCache
) -> None:
    """With server.cache_status_key, each answer from or through the cache names the key
    used: on a miss, a slow hit, the hit fast path, a revalidation, and a forwarded GET;
    a forwarded POST has none. Off by default."""
    cache = await make_cache(server={"cache_status_key": True}, cache={"disk_mb": 0})
    origin.route("/k", static(b"k", {"Cache-Control": "max-age=60"}))

    async def validated(request: web.Request) -> web.Response:
        headers = {"Cache-Control": "max-age=0", "ETag": '"kv"'}
        if request.headers.get("If-None-Match") == '"kv"':
            return web.Response(status=304, headers=headers)
        return web.Response(body=b"v", headers=headers)

    origin.route("/kv", validated)
    origin.route("/post", static(b"p", {"Cache-Control": "no-store"}))
    url, reval = origin.url("/k"), origin.url("/kv")
    async with proxy_client(cache) as client:
        answers = [(await client.get(url))[0] for _ in range(4)]  # miss, hit, hot hits
        revalidations = [(await client.get(reval))[0] for _ in range(4)]
        post, _ = await client.request("POST", origin.url("/post"), data=b"x")
    assert cache.proxy is not None
    assert cache.proxy.hot_entries == 1
    assert cache.proxy.fast.planned >= 1
    for resp in answers:  # (the parameter is a String: quoted)
        assert our_cache_status(resp).get("key") == f'"{url}"'
    for resp in revalidations:
        assert our_cache_status(resp).get("key") == f'"{reval}"'
    assert "key" not in our_cache_status(post)


async def test_rfc9211_2_7_no_key_by_default(origin: Origin, client: ProxyClient) -> None:
    origin.route("/nk", static(b"n", {"Cache-Control": "max-age=60"}))
    for _ in range(3):
        resp, _ = await client.get(origin.url("/nk"))
        assert "key" not in our_cache_status(resp)


async def test_rfc9211_2_2_fwd_stale_for_a_fresh_no_cache_response(
    origin: Origin, client: ProxyClient
) -> None:
    """A response's own no-cache makes it need validation, fresh or not: that is not the
    request's doing, so fwd says stale."""
    origin.route("/nc", static(b"n", {"Cache-Control": "max-age=60, no-cache", "ETag": '"n"'}))
    await client.get(origin.url("/nc"))
    resp, _ = await client.get(origin.url("/nc"))
    assert our_cache_status(resp).get("fwd") == "stale"
