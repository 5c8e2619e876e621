"""Conformance end to end: the fixes of the RFC 9111 review (commit b089409).

- Trailer fields are never merged into a header section (RFC 9110 6.5.1): neither an origin's
  into the response head (on the miss or in the store) nor a client's into its next request.
- Proxy-Authentication-Info is for the proxy next to the client alone: neither forwarded nor
  stored (RFC 9110 11.7.3, RFC 9111 3.1).
- Collapsed forwarding does not give a joined client a response that needs validation before
  reuse or whose stored form omits fields (RFC 9111 5.2.2.4, 5.2.2.7, 4.2.4).
- stale-if-error is about 500, 502, 503 and 504 only (RFC 5861 4).
- Cache-Status: the cache's member follows those of caches nearer the origin (RFC 9211 2), on
  every path a response takes.
- No 100 Continue to an HTTP/1.0 client (RFC 9110 10.1.1, 15.2).

Each test drives a real cache against an origin on 127.0.0.1 (aiohttp, or a raw socket server
where the wire matters) and looks at what the client and the origin see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.integration.test_collapsed import start_together
from tests.integration.test_interim import EarlyOrigin, exchange
from tests.integration.test_miss_fast_path import (
    ScriptedOrigin,
    fetch,
    lean,
    params,
    warm,
)
from tests.integration.test_stale import (
    BODY,
    Validated,
    assert_served_stale,
    outcomes,
    start_cache,
    stored_object,
)
from tests.support import (
    Handler,
    MakeCache,
    Origin,
    RawResponse,
    RawServer,
    cache_status_members,
    http_date,
    open_proxy,
    read_chunked,
    read_request_head,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
)

BACKENDS = ["disk", "memory"]


# -- helpers -----------------------------------------------------------------------------------


def hot_entries(cache: CacheServer) -> int:
    assert cache.proxy is not None
    return cache.proxy.hot_entries


def planned(cache: CacheServer) -> int:
    assert cache.proxy is not None
    return cache.proxy.fast.planned


class RecordingOrigin:
    """A RawServer origin that reads each request whole (Content-Length or chunked body),
    records its request line, fields and body, and answers it with a small no-store 200."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, list[tuple[str, str]], bytes]] = []
        self.server = RawServer(self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(20):
            line, fields = await read_request_head(reader)
            lowered = {n.lower(): v for n, v in fields}
            body = b""
            if "chunked" in lowered.get("transfer-encoding", "").lower():
                body = await read_chunked(reader)
            elif int(lowered.get("content-length", "0")):
                body = await reader.readexactly(int(lowered["content-length"]))
            self.requests.append((line, fields, body))
            answer = line.split()[0].encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: %d\r\n\r\n%b"
                % (len(answer), answer)
            )
            await writer.drain()

    async def __aenter__(self) -> RecordingOrigin:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()


# -- RFC 9110 6.5.1: trailer fields are never merged into a header section ---------------------

TRAILED_BODY = b"hello world"
# A chunked response that announces and sends a trailer field, in one write: by the time the
# cache answers the client (or stores the response), it has parsed the trailer section too.
TRAILED = (
    b"HTTP/1.1 200 OK\r\n"
    b"Cache-Control: max-age=60\r\n"
    b"Content-Type: text/plain\r\n"
    b"Trailer: X-Checksum\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"\r\n"
    b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: abc\r\n\r\n"
)
WARM = b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 4\r\n\r\nwarm"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rfc9110_6_5_1_origin_trailer_not_merged_into_response_head(
    make_cache: MakeCache, backend: str
) -> None:
    cache = await start_cache(make_cache, backend)
    scripted: list[ScriptedOrigin] = []

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        line = scripted[0].requests[n - 1][0]
        writer.write(WARM if " /warm " in line else TRAILED)
        await writer.drain()

    async with ScriptedOrigin(respond) as origin:
        scripted.append(origin)
        # With an idle connection in the pool, a memory-only cache starts the miss on its fast
        # path (which hands a chunked body over to the general path).
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        url = origin.url("/trailed")
        miss = await fetch(cache, url)
        assert (miss.status, miss.body) == (200, TRAILED_BODY), miss
        assert "hit" not in params(miss)
        assert params(miss).get("stored") is True
        assert not miss.has("X-Checksum"), miss
        # The stored response has no trailer field in its head either: the slow hit, then the
        # hits the hit fast path answers from a prepared head.
        for _ in range(3):
            hit = await fetch(cache, url)
            assert (hit.status, hit.body) == (200, TRAILED_BODY), hit
            assert params(hit).get("hit") is True, hit
            assert not hit.has("X-Checksum"), hit
            assert hit.get("Content-Type") == "text/plain"
        assert origin.paths() == ["/warm", "/trailed"]


async def test_rfc9110_6_5_1_request_trailer_not_merged_into_next_request(
    make_cache: MakeCache,
) -> None:
    cache = await make_cache()
    async with RecordingOrigin() as origin:
        post_url = origin.server.url("/upload")
        get_url = origin.server.url("/after")
        host = post_url.split("/")[2]
        post = (
            f"POST {post_url} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n\r\n"
            "3\r\na=1\r\n0\r\nX-Trailer-Leak: 1\r\n\r\n"
        ).encode("latin-1")
        reader, writer = await open_proxy(cache.address[1])
        try:
            # Pipelined: the GET follows the POST's trailer section on the same connection.
            writer.write(post + request_bytes("GET", get_url))
            first = await read_response(reader, method="POST")
            second = await read_response(reader)
        finally:
            writer.close()
        assert (first.status, first.body) == (200, b"POST"), first
        assert (second.status, second.body) == (200, b"GET"), second
        assert [line for line, _, _ in origin.requests] == [
            "POST /upload HTTP/1.1",
            "GET /after HTTP/1.1",
        ]
        (_, post_fields, post_body), (_, get_fields, _) = origin.requests
        assert post_body == b"a=1"
        assert all(n.lower() != "x-trailer-leak" for n, _ in post_fields), post_fields
        assert all(n.lower() != "x-trailer-leak" for n, _ in get_fields), get_fields


# -- RFC 9110 11.7.3, RFC 9111 3.1: Proxy-Authentication-Info is hop by hop --------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rfc9111_3_1_proxy_authentication_info_neither_forwarded_nor_stored(
    origin: Origin, make_cache: MakeCache, backend: str
) -> None:
    cache = await start_cache(make_cache, backend)
    await warm(cache, origin)  # (memory only: the miss takes the miss fast path)
    headers = {
        "Cache-Control": "max-age=60",
        "Proxy-Authentication-Info": 'nextnonce="abc"',
        "X-Kept": "yes",
    }
    origin.route("/pai", static(b"pai body", headers))
    url = origin.url("/pai")
    miss = await fetch(cache, url)
    assert (miss.status, miss.body) == (200, b"pai body")
    assert params(miss).get("stored") is True
    assert miss.get("X-Kept") == "yes"
    assert not miss.has("Proxy-Authentication-Info"), miss
    if backend == "memory":
        assert lean(cache) == (1, 0)
    # The slow hit, then hits from the hit fast path.
    for _ in range(3):
        hit = await fetch(cache, url)
        assert (hit.status, hit.body) == (200, b"pai body")
        assert params(hit).get("hit") is True, hit
        assert hit.get("X-Kept") == "yes"
        assert not hit.has("Proxy-Authentication-Info"), hit
    assert origin.hits["/pai"] == 1


# -- RFC 9111 5.2.2.4, 5.2.2.7, 4.2.4: what collapsed forwarding may share ---------------------


class Numbered:
    """A gated aiohttp handler: the n-th request (from 1) waits (at most 5 s) for ``gate``,
    then gets body ``r<n>`` with ``headers(n)``; ``answered`` maps each request's X-Client-Id
    to its n."""

    def __init__(self, headers: Callable[[int], dict[str, str]]) -> None:
        self.headers = headers
        self.gate = asyncio.Event()
        self.calls = 0
        self.answered: dict[str, int] = {}

    async def __call__(self, request: web.Request) -> web.Response:
        self.calls += 1
        n = self.calls
        async with asyncio.timeout(5):
            await self.gate.wait()
        self.answered[request.headers.get("X-Client-Id", "none")] = n
        return web.Response(body=b"r%d" % n, headers=self.headers(n))


async def concurrent_gets(
    origin: Origin, cache: CacheServer, path: str, numbered: Numbered, n: int
) -> list[RawResponse]:
    """``n`` identical GETs but for X-Client-Id (c0, c1...), c0 first, the rest while the
    origin holds c0's answer back; their responses in client order."""
    origin.route(path, numbered)
    url = origin.url(path)

    def client(i: int) -> Callable[[], Coroutine[Any, Any, RawResponse]]:
        async def one() -> RawResponse:
            return await fetch(cache, url, headers=[("X-Client-Id", f"c{i}")])

        return one

    async with asyncio.timeout(15):
        tasks = await start_together(
            origin, cache, path, numbered.gate, [client(i) for i in range(n)]
        )
        return list(await asyncio.gather(*tasks))


def assert_each_got_its_own(responses: list[RawResponse], numbered: Numbered) -> None:
    """Every client got the response to its own request, none a collapsed one."""
    assert numbered.calls == len(responses), numbered.answered
    for i, resp in enumerate(responses):
        assert resp.status == 200, resp
        assert resp.body == b"r%d" % numbered.answered[f"c{i}"], (i, resp, numbered.answered)
        assert "collapsed" not in params(resp), resp
    assert len({resp.body for resp in responses}) == len(responses)


async def test_rfc9111_5_2_2_4_no_cache_response_not_shared_with_joined_clients(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    numbered = Numbered(lambda n: {"Cache-Control": "no-cache", "ETag": f'"n{n}"'})
    responses = await concurrent_gets(origin, cache, "/no-cache", numbered, 3)
    assert_each_got_its_own(responses, numbered)
    assert origin.hits["/no-cache"] == 3
    for i, resp in enumerate(responses):
        assert resp.get("ETag") == f'"n{numbered.answered[f"c{i}"]}"'
    lines = await stop_and_read_log(cache)
    assert "TCP_CF_MISS" not in [line.result for line in lines]


async def test_rfc9111_5_2_2_7_private_field_response_not_shared_with_joined_clients(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    numbered = Numbered(
        lambda n: {"Cache-Control": 'max-age=60, private="Set-Cookie"', "Set-Cookie": f"a={n}"}
    )
    responses = await concurrent_gets(origin, cache, "/private-field", numbered, 3)
    assert_each_got_its_own(responses, numbered)
    for i, resp in enumerate(responses):
        # Its own cookie, never another client's.
        assert resp.get("Set-Cookie") == f"a={numbered.answered[f'c{i}']}", resp
    assert origin.hits["/private-field"] == 3
    # Stored without the field private= names.
    later = await fetch(cache, origin.url("/private-field"))
    assert later.status == 200
    assert params(later).get("hit") is True, later
    assert not later.has("Set-Cookie"), later
    assert origin.hits["/private-field"] == 3


async def test_rfc9111_4_2_4_stale_on_arrival_response_not_shared_with_joined_clients(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    numbered = Numbered(lambda n: {"Cache-Control": "max-age=0", "ETag": f'"s{n}"'})
    responses = await concurrent_gets(origin, cache, "/stale-on-arrival", numbered, 3)
    assert_each_got_its_own(responses, numbered)
    assert origin.hits["/stale-on-arrival"] == 3
    lines = await stop_and_read_log(cache)
    assert "TCP_CF_MISS" not in [line.result for line in lines]


async def test_rfc9111_4_control_fresh_response_still_collapsed(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    numbered = Numbered(lambda n: {"Cache-Control": "max-age=60"})
    responses = await concurrent_gets(origin, cache, "/fresh", numbered, 3)
    assert origin.hits["/fresh"] == 1
    assert [(r.status, r.body) for r in responses] == [(200, b"r1")] * 3
    assert "collapsed" not in params(responses[0])
    assert params(responses[0]).get("stored") is True
    for resp in responses[1:]:
        found = params(resp)
        assert found.get("collapsed") is True, resp
        assert "stored" not in found
    url = origin.url("/fresh")
    lines = await stop_and_read_log(cache)
    assert sorted(outcomes(lines, url)) == [
        ("TCP_CF_MISS", 200),
        ("TCP_CF_MISS", 200),
        ("TCP_MISS", 200),
    ]


@pytest.mark.parametrize("stale_by", ["age", "date"])
async def test_rfc9111_4_2_4_stale_on_arrival_by_age_not_shared_with_joined_clients(
    origin: Origin, make_cache: MakeCache, stale_by: str
) -> None:
    """``max-age=60`` with ``Age: 120`` (or a ``Date`` ten minutes old) is as stale on
    arrival (RFC 9111 4.2.3) as ``max-age=0``: it may not answer the joined clients without
    validation either."""
    cache = await make_cache()

    def headers(n: int) -> dict[str, str]:
        fields = {"Cache-Control": "max-age=60", "ETag": f'"a{n}"'}
        if stale_by == "age":
            fields["Age"] = "120"
        else:
            fields["Date"] = http_date(time.time() - 600)
        return fields

    numbered = Numbered(headers)
    responses = await concurrent_gets(origin, cache, "/stale-by-age", numbered, 3)
    concurrent_calls = numbered.calls
    # The cache itself takes the stored response for stale: the next request validates it.
    later = await fetch(cache, origin.url("/stale-by-age"))
    assert later.status == 200
    assert params(later).get("fwd") == "stale", later
    assert origin.requests[-1].headers.get("If-None-Match") is not None
    # Yet the clients that joined the first fetch were given that response.
    statuses = [resp.get("Cache-Status") for resp in responses]
    assert concurrent_calls == 3, statuses
    assert len({resp.body for resp in responses}) == 3, statuses


# -- RFC 5861 4: stale-if-error is about 500, 502, 503 and 504 ---------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rfc5861_4_stale_if_error_not_applied_to_501(
    origin: Origin, make_cache: MakeCache, backend: str
) -> None:
    cache = await start_cache(make_cache, backend)
    state = Validated("max-age=0, stale-if-error=60")
    url = await stored_object(cache, origin, "/sie-501", state)
    state.fail = 501
    resp = await fetch(cache, url)
    assert (resp.status, resp.body) == (501, b"origin failure 501"), resp
    found = params(resp)
    assert found.get("fwd-status") == "501", found
    assert "hit" not in found
    assert state.seen[-1].get("If-None-Match") == state.etag
    assert origin.hits["/sie-501"] == 2
    lines = await stop_and_read_log(cache)
    results = outcomes(lines, url)
    assert results[0] == ("TCP_MISS", 200)
    assert results[1][1] == 501, results
    assert results[1][0] != "TCP_REFRESH_FAIL_OLD", results


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rfc5861_4_control_stale_if_error_applied_to_502(
    origin: Origin, make_cache: MakeCache, backend: str
) -> None:
    cache = await start_cache(make_cache, backend)
    state = Validated("max-age=0, stale-if-error=60")
    url = await stored_object(cache, origin, "/sie-502", state)
    state.fail = 502
    resp = await fetch(cache, url)
    assert_served_stale(resp, BODY, "502")
    assert origin.hits["/sie-502"] == 2
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [("TCP_MISS", 200), ("TCP_REFRESH_FAIL_OLD", 200)]


# -- RFC 9211 2: the cache's Cache-Status member follows the upstream ones ---------------------
#
# One test per path a response takes, each asserting on that path's responses only (so each
# fails when that path alone replaces the upstream member or drops it).

UPSTREAM_STATUS = "upstream-cache; hit"
CS_BODY = b"cs body"
CS_ETAG = '"cs1"'


def ours_after_upstream(resp: RawResponse) -> dict[str, str | bool]:
    """The upstream member first, as it came; exactly one of ours, last: its parameters."""
    value = resp.get("Cache-Status")
    assert value is not None, resp
    members = cache_status_members(value)
    assert members[0] == ("upstream-cache", {"hit": True}), value
    assert [name for name, _ in members].count("test-cache") == 1, value
    assert members[-1][0] == "test-cache", value
    return members[-1][1]


def upstream_cached(cc: str) -> Handler:
    """A handler for an object an upstream cache answered (its Cache-Status member) with
    ``cc`` and an ETag; a matching If-None-Match gets a 304 (without Cache-Status)."""

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == CS_ETAG:
            return web.Response(status=304, headers={"ETag": CS_ETAG, "Cache-Control": cc})
        headers = {"ETag": CS_ETAG, "Cache-Control": cc, "Cache-Status": UPSTREAM_STATUS}
        return web.Response(body=CS_BODY, headers=headers)

    return handler


async def cs_object(
    cache: CacheServer,
    origin: Origin,
    path: str,
    cc: str,
    headers: list[tuple[str, str]] | None = None,
) -> tuple[str, RawResponse]:
    """Route ``path`` to an upstream-cached object and request it once, with ``headers`` (the
    pool then holds an idle connection to the origin); its URL and that first response."""
    await warm(cache, origin)
    origin.route(path, upstream_cached(cc))
    url = origin.url(path)
    first = await fetch(cache, url, headers=headers)
    assert (first.status, first.body) == (200, CS_BODY), first
    return url, first


@pytest.mark.parametrize("path", ["general", "fast"])
async def test_rfc9211_2_upstream_member_kept_on_a_miss(
    origin: Origin, make_cache: MakeCache, path: str
) -> None:
    """With a request field (Cache-Control) the miss takes the general path, else the miss
    fast path."""
    cache = await start_cache(make_cache, "disk")
    fields = [("Cache-Control", "no-transform")] if path == "general" else None
    _, miss = await cs_object(cache, origin, "/cs-miss", "max-age=60", fields)
    ours = ours_after_upstream(miss)
    assert (ours.get("fwd"), ours.get("fwd-status"), ours.get("stored")) == (
        "uri-miss",
        "200",
        True,
    ), ours
    assert lean(cache) == ((1, 0) if path == "fast" else (0, 0))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rfc9211_2_upstream_member_kept_on_a_hit(
    origin: Origin, make_cache: MakeCache, backend: str
) -> None:
    cache = await start_cache(make_cache, backend)
    url, _ = await cs_object(cache, origin, "/cs-hit", "max-age=60")
    assert hot_entries(cache) == 0
    hit = await fetch(cache, url)  # the slow path: a request object, a store lookup
    assert (hit.status, hit.body) == (200, CS_BODY)
    assert ours_after_upstream(hit).get("hit") is True, hit
    assert origin.hits["/cs-hit"] == 1


async def test_rfc9211_2_upstream_member_kept_on_hits_of_the_hit_fast_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await start_cache(make_cache, "memory")
    url, _ = await cs_object(cache, origin, "/cs-hot", "max-age=60")
    await fetch(cache, url)  # the one slow memory hit, which makes the prepared head
    assert hot_entries(cache) == 1
    for _ in range(3):
        hot = await fetch(cache, url)
        assert (hot.status, hot.body) == (200, CS_BODY)
        ours = ours_after_upstream(hot)
        assert ours.get("hit") is True, hot
        assert isinstance(ours.get("ttl"), str), hot
    assert origin.hits["/cs-hot"] == 1
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [("TCP_MISS", 200)] + [("TCP_MEM_HIT", 200)] * 4


async def test_rfc9211_2_upstream_member_kept_on_a_revalidation(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A request field (Cache-Control) keeps the revalidation off the fast paths."""
    cache = await start_cache(make_cache, "disk")
    fields = [("Cache-Control", "no-transform")]
    url, _ = await cs_object(cache, origin, "/cs-reval", "max-age=0", fields)
    again = await fetch(cache, url, headers=fields)
    assert (again.status, again.body) == (200, CS_BODY), again
    ours = ours_after_upstream(again)
    assert (ours.get("fwd"), ours.get("fwd-status")) == ("stale", "304"), ours
    assert origin.requests[-1].headers.get("If-None-Match") == CS_ETAG
    assert lean(cache) == (0, 0)


async def test_rfc9211_2_upstream_member_kept_on_a_fast_path_revalidation(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await start_cache(make_cache, "memory")
    url, _ = await cs_object(cache, origin, "/cs-reval-fast", "max-age=0")
    before = lean(cache)
    again = await fetch(cache, url)
    assert (again.status, again.body) == (200, CS_BODY), again
    ours = ours_after_upstream(again)
    assert (ours.get("fwd"), ours.get("fwd-status")) == ("stale", "304"), ours
    assert origin.requests[-1].headers.get("If-None-Match") == CS_ETAG
    assert lean(cache) == (before[0] + 1, before[1])
    assert planned(cache) == 0


async def test_rfc9211_2_upstream_member_kept_on_planned_revalidations(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await start_cache(make_cache, "memory")
    url, _ = await cs_object(cache, origin, "/cs-planned", "max-age=0")
    await fetch(cache, url)  # worked out in full on the miss fast path; leaves a plan
    assert planned(cache) == 0
    for n in range(1, 4):
        again = await fetch(cache, url)
        assert (again.status, again.body) == (200, CS_BODY), again
        ours = ours_after_upstream(again)
        assert (ours.get("fwd"), ours.get("fwd-status")) == ("stale", "304"), ours
        assert planned(cache) == n
    assert origin.hits["/cs-planned"] == 5
    assert all(r.headers.get("If-None-Match") == CS_ETAG for r in origin.requests[-4:])


async def test_rfc9211_2_upstream_member_kept_on_a_forwarded_post(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    origin.route("/cs-post", static(b"posted", {"Cache-Status": UPSTREAM_STATUS}))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("POST", origin.url("/cs-post"), body=b"a=1"))
        resp = await read_response(reader, method="POST")
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, b"posted")
    ours = ours_after_upstream(resp)
    assert (ours.get("fwd"), ours.get("fwd-status")) == ("method", "200"), ours


# -- RFC 9110 10.1.1, 15.2: no 100 Continue to an HTTP/1.0 client ------------------------------


@pytest.mark.parametrize(
    ("version", "interim_statuses"), [("1.0", []), ("1.1", [100])], ids=["http10", "http11"]
)
async def test_rfc9110_10_1_1_100_continue_only_to_http11_clients(
    make_cache: MakeCache, version: str, interim_statuses: list[int]
) -> None:
    cache = await make_cache()
    async with EarlyOrigin(interim=b"") as origin:
        head = request_bytes(
            "POST",
            origin.server.url("/expect"),
            version=version,
            headers=[("Expect", "100-continue"), ("Content-Length", "3")],
        )
        interim, status, body = await exchange(cache, head, after_head=b"a=1")
        assert [s for s, _ in interim] == interim_statuses
        assert status == 200
        assert body == b"final body"
        assert len(origin.requests) == 1
        assert origin.requests[0][0].startswith("POST /expect ")
