"""The miss fast path end to end: plain GET misses and revalidations fetched in callbacks.

A plain GET that the memory tier cannot answer fresh, for an origin with an idle pooled
connection, is sent upstream from the client parser's callback and answered from the upstream
parser's callbacks when the response is a 304 for the stored object or a small body of known
length without Vary. Anything else is moved to the general path with the same upstream
exchange. These tests drive a real cache on loopback and tell the two paths apart by the
counters ``answered`` and ``handed_over`` of ``cache.proxy.fast``; the origin's hit counts
show that a moved fetch was not sent twice, and raw sockets show framing and ordering.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from harvest_cache.store.interface import StoredObject
from tests.support import (
    Handler,
    LogLine,
    MakeCache,
    Origin,
    RawResponse,
    RawServer,
    cache_status_members,
    closed_by_peer,
    counting,
    http_date,
    open_proxy,
    read_head,
    read_request_head,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
    wait_until,
)

SMALL_BODY = 64 * 1024
OK_WARM = b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 4\r\n\r\nwarm"


# -- helpers -----------------------------------------------------------------------------------


def pattern(n: int, seed: str) -> bytes:
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (n // len(block) + 1))[:n]


def chunked(parts: list[bytes], headers: dict[str, str]) -> Handler:
    """A handler that streams ``parts`` with chunked framing (no Content-Length)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=headers)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for part in parts:
            await resp.write(part)
            await asyncio.sleep(0.005)
        await resp.write_eof()
        return resp

    return handler


def gated(body: bytes, headers: dict[str, str], gate: asyncio.Event) -> Handler:
    """A handler that waits (at most 5 s) for ``gate`` before answering."""

    async def handler(request: web.Request) -> web.Response:
        async with asyncio.timeout(5):
            await gate.wait()
        return web.Response(body=body, headers=headers)

    return handler


def delayed(body: bytes, headers: dict[str, str], delay: float) -> Handler:
    """A handler that answers after ``delay`` seconds."""

    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(delay)
        return web.Response(body=body, headers=headers)

    return handler


def etag_origin(body: bytes, etag: str, refreshed_cc: str = "max-age=60") -> Handler:
    """Stale at once (max-age=0) with ``etag``; a matching If-None-Match gets a 304."""

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag, "Cache-Control": refreshed_cc})
        return web.Response(body=body, headers={"ETag": etag, "Cache-Control": "max-age=0"})

    return handler


async def memory_cache(make_cache: MakeCache, **sections: dict[str, object]) -> CacheServer:
    """A cache whose store has no disk tier (so small misses may be stored on the fast path)."""
    cache_section: dict[str, object] = {"disk_mb": 0}
    cache_section.update(sections.pop("cache", {}))
    return await make_cache(cache=cache_section, **sections)


def lean(cache: CacheServer) -> tuple[int, int]:
    """(answered, handed_over) of the cache's miss fast path."""
    assert cache.proxy is not None
    return cache.proxy.fast.answered, cache.proxy.fast.handed_over


async def fetch(
    cache: CacheServer,
    url: str,
    *,
    method: str = "GET",
    version: str = "1.1",
    headers: list[tuple[str, str]] | None = None,
    within: float = 5.0,
) -> RawResponse:
    """One request on a new raw connection to the cache; its complete response."""
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes(method, url, version=version, headers=headers))
        return await read_response(reader, method=method, within=within)
    finally:
        writer.close()


async def warm(cache: CacheServer, origin: Origin) -> None:
    """One request to ``origin`` so the pool holds an idle keep-alive connection to it."""
    origin.route("/warm", static(b"warm", {"Cache-Control": "no-store"}))
    before = lean(cache)
    resp = await fetch(cache, origin.url("/warm"))
    assert (resp.status, resp.body) == (200, b"warm")
    # With no idle connection to the origin yet, the fast path could not start.
    assert lean(cache) == before


def params(resp: RawResponse, name: str = "test-cache") -> dict[str, str | bool]:
    """The parameters of the last Cache-Status member, which must be this cache's."""
    value = resp.get("Cache-Status")
    assert value is not None, resp
    last, found = cache_status_members(value)[-1]
    assert last == name, value
    return found


def results_for(lines: list[LogLine], url: str) -> list[str]:
    return [line.result for line in lines if line.url == url]


class ScriptedOrigin:
    """A RawServer origin: ``respond(n, writer)`` answers the n-th request it reads (from 1,
    over all connections); a connection ends when ``respond`` closes it."""

    def __init__(self, respond: Callable[[int, asyncio.StreamWriter], Awaitable[None]]) -> None:
        self.respond = respond
        self.requests: list[tuple[str, list[tuple[str, str]]]] = []
        self.server = RawServer(self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(100):
            line, fields = await read_request_head(reader)
            self.requests.append((line, fields))
            await self.respond(len(self.requests), writer)
            if writer.is_closing():
                return

    async def __aenter__(self) -> ScriptedOrigin:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()

    def url(self, path: str) -> str:
        return self.server.url(path)

    def paths(self) -> list[str]:
        return [line.split()[1] for line, _ in self.requests]


async def read_until_closed(
    reader: asyncio.StreamReader, within: float = 3.0
) -> tuple[bytes, bool]:
    """Whatever arrives until the peer closes (True) or stays silent for ``within`` s."""
    rest = b""
    try:
        async with asyncio.timeout(within):
            while chunk := await reader.read(65536):
                rest += chunk
            return rest, True
    except TimeoutError:
        return rest, False
    except ConnectionResetError:
        return rest, True


# -- answered on the fast path -----------------------------------------------------------------


async def test_plain_miss_is_answered_on_the_fast_path_then_hit(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    body = b"fast path body"
    headers = {
        "Cache-Control": "max-age=60",
        "ETag": '"f1"',
        "Content-Type": "text/plain",
        "X-Extra": "kept",
    }
    origin.route("/small", static(body, headers))
    url = origin.url("/small?q=1")
    resp = await fetch(cache, url)
    assert (resp.status, resp.body) == (200, body)
    assert lean(cache) == (1, 0)
    assert resp.get("Content-Length") == str(len(body))
    assert not resp.has("Transfer-Encoding")
    assert (resp.get("ETag"), resp.get("X-Extra")) == ('"f1"', "kept")
    assert resp.get("Content-Type") == "text/plain"
    assert resp.has("Date")
    assert resp.get("Via") == "1.1 test-cache"
    status = params(resp)
    assert (status.get("fwd"), status.get("fwd-status"), status.get("stored")) == (
        "uri-miss",
        "200",
        True,
    )
    assert "hit" not in status
    # What the origin saw: the path with its query, Via and X-Forwarded-For.
    seen = origin.requests[-1]
    assert (seen.path, seen.query_string) == ("/small", "q=1")
    assert "test-cache" in seen.headers.get("Via", "")
    assert seen.headers.get("X-Forwarded-For") == "127.0.0.1"
    assert "If-None-Match" not in seen.headers
    # Stored: the next two are hits (the second by the hit fast path), the origin saw one.
    for _ in range(2):
        again = await fetch(cache, url)
        assert (again.status, again.body) == (200, body)
        assert params(again).get("hit") is True
        assert again.get("X-Extra") == "kept"
    assert origin.hits["/small"] == 1
    assert lean(cache) == (1, 0)
    lines = await stop_and_read_log(cache)
    mine = [line for line in lines if line.url == url]
    assert [line.result for line in mine] == ["TCP_MISS", "TCP_MEM_HIT", "TCP_MEM_HIT"]
    first = mine[0]
    assert (first.status, first.method, first.content_type) == (200, "GET", "text/plain")
    assert (first.hierarchy, first.peer) == ("HIER_DIRECT", "127.0.0.1")
    assert first.bytes == len(resp.head) + len(resp.body)


async def test_first_request_to_an_origin_takes_the_general_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    """No idle connection to the origin yet: the fast path cannot start; the next miss to the
    same origin can."""
    cache = await memory_cache(make_cache)
    origin.route("/one", static(b"one", {"Cache-Control": "max-age=60"}))
    origin.route("/two", static(b"two", {"Cache-Control": "max-age=60"}))
    first = await fetch(cache, origin.url("/one"))
    assert (first.status, first.body) == (200, b"one")
    assert params(first).get("fwd") == "uri-miss"
    assert lean(cache) == (0, 0)
    second = await fetch(cache, origin.url("/two"))
    assert (second.status, second.body) == (200, b"two")
    assert lean(cache) == (1, 0)
    assert origin.hits["/one"] == origin.hits["/two"] == 1


async def test_several_misses_on_one_keep_alive_connection(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    paths = [f"/k{i}" for i in range(4)]
    for path in paths:
        origin.route(path, static(path.encode() * 10, {"Cache-Control": "max-age=60"}))
    reader, writer = await open_proxy(cache.address[1])
    try:
        for path in paths:
            writer.write(request_bytes("GET", origin.url(path)))
            resp = await read_response(reader)
            assert (resp.status, resp.body) == (200, path.encode() * 10)
            assert not resp.has("Connection")
        assert not await closed_by_peer(reader, within=0.2)
    finally:
        writer.close()
    assert lean(cache) == (len(paths), 0)
    assert all(origin.hits[path] == 1 for path in paths)


async def test_uncachable_small_response_is_answered_but_not_stored(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/ns", counting({"Cache-Control": "no-store"}))
    first = await fetch(cache, origin.url("/ns"))
    second = await fetch(cache, origin.url("/ns"))
    assert (first.body, second.body) == (b"v1", b"v2")
    assert "stored" not in params(first)
    assert "stored" not in params(second)
    assert lean(cache) == (2, 0)
    assert origin.hits["/ns"] == 2


async def test_empty_body_is_answered_on_the_fast_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/empty", static(b"", {"Cache-Control": "max-age=60"}))
    resp = await fetch(cache, origin.url("/empty"))
    assert (resp.status, resp.body, resp.get("Content-Length")) == (200, b"", "0")
    assert lean(cache) == (1, 0)
    again = await fetch(cache, origin.url("/empty"))
    assert (again.status, again.body) == (200, b"")
    assert params(again).get("hit") is True
    assert origin.hits["/empty"] == 1


async def test_uncachable_status_is_answered_and_passed_through(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/gone", static(b"nothing here", {"Cache-Control": "no-store"}, status=404))
    resp = await fetch(cache, origin.url("/gone"))
    assert (resp.status, resp.body) == (404, b"nothing here")
    assert params(resp).get("fwd-status") == "404"
    assert lean(cache) == (1, 0)


@pytest.mark.parametrize(
    ("size", "on_fast_path"),
    [(SMALL_BODY, True), (SMALL_BODY + 1, False)],
    ids=["64KiB", "64KiB+1"],
)
async def test_small_body_limit(
    origin: Origin, make_cache: MakeCache, size: int, on_fast_path: bool
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    data = pattern(size, "limit")
    origin.route("/limit", static(data, {"Cache-Control": "max-age=60"}))
    resp = await fetch(cache, origin.url("/limit"))
    assert resp.status == 200
    assert resp.body == data
    assert resp.get("Content-Length") == str(size)
    assert lean(cache) == ((1, 0) if on_fast_path else (0, 1))
    again = await fetch(cache, origin.url("/limit"))
    assert again.body == data
    assert params(again).get("hit") is True
    assert origin.hits["/limit"] == 1


async def test_fast_path_answer_has_the_general_path_fields(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The same response through either path: hop-by-hop fields (and those Connection names)
    dropped, the origin's Via extended, the rest kept."""
    cache = await memory_cache(make_cache)
    headers = {
        "Cache-Control": "max-age=60",
        "ETag": '"same"',
        "Via": "1.0 upstream-proxy",
        "Connection": "X-Private",
        "X-Private": "secret",
        "Keep-Alive": "timeout=5",
        "Set-Cookie": "a=b",
        "Content-Type": "text/html",
    }
    origin.route("/same-general", static(b"<p>same</p>", headers))
    origin.route("/same-fast", static(b"<p>same</p>", headers))
    general = await fetch(cache, origin.url("/same-general"))
    assert lean(cache) == (0, 0)
    fast = await fetch(cache, origin.url("/same-fast"))
    assert lean(cache) == (1, 0)

    def comparable(resp: RawResponse) -> list[tuple[str, str]]:
        return sorted(
            (name.lower(), value)
            for name, value in resp.fields
            if name.lower() not in ("date", "cache-status")
        )

    assert comparable(fast) == comparable(general)
    assert fast.get("Via") == "1.0 upstream-proxy, 1.1 test-cache"
    assert not fast.has("X-Private")
    assert not fast.has("Keep-Alive")
    assert fast.has("Date")
    assert params(fast) == params(general)
    assert fast.body == general.body


async def test_origin_age_is_passed_on_as_on_the_general_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A response that already aged upstream keeps its Age (RFC 9111 5.1): the general path
    passes the origin's Age on, and so must the fast path."""
    cache = await memory_cache(make_cache)
    origin.route("/aged-general", static(b"a", {"Cache-Control": "max-age=600", "Age": "30"}))
    origin.route("/aged-fast", static(b"b", {"Cache-Control": "max-age=600", "Age": "30"}))
    general = await fetch(cache, origin.url("/aged-general"))
    assert lean(cache) == (0, 0)
    fast = await fetch(cache, origin.url("/aged-fast"))
    assert lean(cache) == (1, 0)
    assert general.get("Age") is not None
    assert int(general.get("Age") or 0) >= 30
    assert fast.get("Age") is not None, f"the origin's Age was dropped: {fast.fields}"
    assert int(fast.get("Age") or 0) >= 30


async def test_too_big_for_the_memory_tier_is_not_claimed_stored(
    origin: Origin, make_cache: MakeCache
) -> None:
    """An object over memory_max_object_kb is not stored; Cache-Status must not say it was
    (as the general path does not)."""
    cache = await memory_cache(make_cache, cache={"memory_max_object_kb": 16})
    data = pattern(32 * 1024, "big-for-memory")
    origin.route("/general-32k", static(data, {"Cache-Control": "max-age=60"}))
    origin.route("/fast-32k", static(data, {"Cache-Control": "max-age=60"}))
    general = await fetch(cache, origin.url("/general-32k"))
    assert lean(cache) == (0, 0)
    assert general.body == data
    assert "stored" not in params(general)
    fast = await fetch(cache, origin.url("/fast-32k"))
    assert lean(cache) == (1, 0)
    assert fast.body == data
    again = await fetch(cache, origin.url("/fast-32k"))
    assert again.body == data
    assert origin.hits["/fast-32k"] == 2, "it was not stored"
    assert "stored" not in params(fast), (
        f"claimed stored but not stored: {fast.get('Cache-Status')}"
    )


async def test_client_leaving_early_does_not_stop_the_fetch(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The client closes before the origin answers: the object is still fetched and stored."""
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/left", delayed(b"kept anyway", {"Cache-Control": "max-age=60"}, 0.2))
    _, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/left")))
        await writer.drain()
        await wait_until(lambda: origin.hits["/left"] == 1)
    finally:
        writer.close()
    await wait_until(lambda: lean(cache) == (1, 0))
    resp = await fetch(cache, origin.url("/left"))
    assert resp.body == b"kept anyway"
    assert params(resp).get("hit") is True
    assert origin.hits["/left"] == 1
    lines = await stop_and_read_log(cache)
    assert results_for(lines, origin.url("/left")) == ["TCP_MISS", "TCP_MEM_HIT"]


async def test_client_half_closing_after_its_request_gets_the_answer(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/half", delayed(b"answered", {"Cache-Control": "max-age=60"}, 0.1))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/half")))
        writer.write_eof()
        resp = await read_response(reader)
        rest, closed = await read_until_closed(reader)
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, b"answered")
    assert (rest, closed) == (b"", True)
    assert lean(cache) == (1, 0)


async def test_idle_timeout_does_not_cut_a_slow_fast_path_fetch(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The client connection is busy while its miss is fetched, not idle; it goes idle (and
    is closed after the idle timeout) once answered."""
    cache = await memory_cache(make_cache, server={"idle_timeout": 0.2})
    await warm(cache, origin)
    origin.route("/slowish", delayed(b"worth the wait", {"Cache-Control": "max-age=60"}, 0.7))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/slowish")))
        resp = await read_response(reader)
        answered_at = time.monotonic()
        rest, closed = await read_until_closed(reader, within=2.0)
        idle_for = time.monotonic() - answered_at
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, b"worth the wait")
    assert lean(cache) == (1, 0)
    assert (rest, closed) == (b"", True)
    assert 0.1 <= idle_for < 1.0


@pytest.mark.parametrize("size", [100, 200 * 1024], ids=["answered", "moved"])
async def test_shutdown_lets_a_fast_path_fetch_finish(
    origin: Origin, make_cache: MakeCache, size: int
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    data = pattern(size, "shutdown")
    origin.route("/stopping", delayed(data, {"Cache-Control": "max-age=60"}, 0.3))
    async with asyncio.timeout(10):
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(request_bytes("GET", origin.url("/stopping")))
            await wait_until(lambda: origin.hits["/stopping"] == 1)
            stopping = asyncio.create_task(cache.stop(3.0))
            resp = await read_response(reader)
            rest, closed = await read_until_closed(reader)
            await stopping
        finally:
            writer.close()
    assert (resp.status, resp.body) == (200, data)
    assert (rest, closed) == (b"", True)
    assert lean(cache) == ((1, 0) if size < SMALL_BODY else (0, 1))


# -- revalidation ------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["memory", "disk"])
async def test_stale_object_confirmed_by_304_on_the_fast_path(
    origin: Origin, make_cache: MakeCache, store: str
) -> None:
    cache = await (memory_cache(make_cache) if store == "memory" else make_cache())
    url = origin.url("/etag")
    origin.route("/etag", etag_origin(b"stored body", '"v1"'))
    first = await fetch(cache, url)
    assert (first.status, first.body) == (200, b"stored body")
    assert lean(cache) == (0, 0)  # the first request to the origin warms the pool
    resp = await fetch(cache, url)
    assert lean(cache) == (1, 0)
    assert origin.requests[-1].headers.get("If-None-Match") == '"v1"'
    assert (resp.status, resp.body) == (200, b"stored body")
    assert resp.get("Content-Length") == str(len(b"stored body"))
    assert resp.get("ETag") == '"v1"'
    assert resp.get("Via") == "1.1 test-cache"
    age = resp.get("Age")
    assert age is not None
    assert 0 <= int(age) <= 1
    status = params(resp)
    assert (status.get("fwd"), status.get("fwd-status")) == ("stale", "304")
    assert 58 <= int(str(status["ttl"])) <= 60  # the 304's max-age=60 now applies
    # Fresh again: a hit, and the origin saw two requests.
    again = await fetch(cache, url)
    assert again.body == b"stored body"
    assert params(again).get("hit") is True
    assert origin.hits["/etag"] == 2
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS", "TCP_REFRESH_UNMODIFIED", "TCP_MEM_HIT"]
    refreshed = [line for line in lines if line.url == url][1]
    assert (refreshed.status, refreshed.hierarchy) == (200, "HIER_DIRECT")
    assert refreshed.bytes == len(resp.head) + len(resp.body)


@pytest.mark.parametrize("store", ["memory", "disk"])
async def test_revalidation_answered_200_replaces_the_object(
    origin: Origin, make_cache: MakeCache, store: str
) -> None:
    """The new body is served and stored on the fast path (with a disk tier, its disk copy
    written behind)."""
    cache = await (memory_cache(make_cache) if store == "memory" else make_cache())

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"old"':
            return web.Response(
                body=b"new body", headers={"ETag": '"new"', "Cache-Control": "max-age=60"}
            )
        return web.Response(
            body=b"old body", headers={"ETag": '"old"', "Cache-Control": "max-age=0"}
        )

    url = origin.url("/replace")
    origin.route("/replace", handler)
    assert (await fetch(cache, url)).body == b"old body"
    resp = await fetch(cache, url)
    assert origin.requests[-1].headers.get("If-None-Match") == '"old"'
    assert (resp.status, resp.body, resp.get("ETag")) == (200, b"new body", '"new"')
    assert resp.get("Content-Length") == "8"
    status = params(resp)
    assert (status.get("fwd"), status.get("fwd-status"), status.get("stored")) == (
        "stale",
        "200",
        True,
    )
    assert lean(cache) == (1, 0)
    again = await fetch(cache, url)
    assert (again.body, again.get("ETag")) == (b"new body", '"new"')
    assert params(again).get("hit") is True
    assert origin.hits["/replace"] == 2
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS", "TCP_REFRESH_MODIFIED", "TCP_MEM_HIT"]


async def test_revalidation_answered_no_store_removes_the_object(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"gone"':
            return web.Response(body=b"second", headers={"Cache-Control": "no-store"})
        return web.Response(body=b"first", headers={"ETag": '"gone"', "Cache-Control": "max-age=0"})

    url = origin.url("/ns-reval")
    origin.route("/ns-reval", handler)
    assert (await fetch(cache, url)).body == b"first"
    resp = await fetch(cache, url)
    assert (resp.status, resp.body) == (200, b"second")
    assert lean(cache) == (0, 1)  # deleting the stored object is left to the general path
    third = await fetch(cache, url)
    assert third.body == b"first"
    sent = [r.headers.get("If-None-Match") for r in origin.requests if r.path == "/ns-reval"]
    assert sent == [None, '"gone"', None]


async def test_304_for_another_response_is_refetched_unconditionally(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A 304 whose ETag does not select the stored response (RFC 9111 4.3.4) cannot refresh
    it: the fetch moves to the general path, which asks again without conditions."""
    cache = await memory_cache(make_cache)

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") is not None:
            return web.Response(status=304, headers={"ETag": '"other"'})
        body = b"fetched %d" % origin.hits["/mismatch"]
        return web.Response(body=body, headers={"ETag": '"mine"', "Cache-Control": "max-age=0"})

    url = origin.url("/mismatch")
    origin.route("/mismatch", handler)
    assert (await fetch(cache, url)).body == b"fetched 1"
    resp = await fetch(cache, url)
    assert (resp.status, resp.body) == (200, b"fetched 3")
    assert lean(cache) == (0, 1)
    sent = [r.headers.get("If-None-Match") for r in origin.requests if r.path == "/mismatch"]
    assert sent == [None, '"mine"', None]


async def test_large_stale_object_confirmed_by_304_is_sent_whole(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A stored body over 64 KiB confirmed by a 304 is still answered on the fast path (no
    body comes from the origin), written after its head."""
    cache = await memory_cache(make_cache)
    data = pattern(300 * 1024, "large-stale")
    url = origin.url("/large-etag")
    origin.route("/large-etag", etag_origin(data, '"L"'))
    assert (await fetch(cache, url)).body == data
    resp = await fetch(cache, url)
    assert (resp.status, resp.body) == (200, data)
    assert resp.get("Content-Length") == str(len(data))
    assert params(resp).get("fwd-status") == "304"
    assert lean(cache) == (1, 0)
    assert origin.hits["/large-etag"] == 2


# -- moved to the general path -----------------------------------------------------------------


async def test_large_body_is_moved_with_the_same_exchange(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    data = pattern(200 * 1024, "large")
    origin.route("/large", static(data, {"Cache-Control": "max-age=60", "X-Extra": "kept"}))
    resp = await fetch(cache, origin.url("/large"))
    assert resp.status == 200
    assert resp.body == data
    assert resp.get("Content-Length") == str(len(data))
    assert resp.get("X-Extra") == "kept"
    assert resp.get("Via") == "1.1 test-cache"
    status = params(resp)
    assert (status.get("fwd"), status.get("stored")) == ("uri-miss", True)
    assert lean(cache) == (0, 1)
    assert origin.hits["/large"] == 1
    again = await fetch(cache, origin.url("/large"))
    assert again.body == data
    assert params(again).get("hit") is True
    assert origin.hits["/large"] == 1


async def test_chunked_body_is_moved_with_the_same_exchange(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    parts = [pattern(3000, f"part{i}") for i in range(4)]
    origin.route("/chunked", chunked(parts, {"Cache-Control": "max-age=60"}))
    resp = await fetch(cache, origin.url("/chunked"))
    assert resp.status == 200
    assert resp.chunked
    assert resp.body == b"".join(parts)
    assert lean(cache) == (0, 1)
    assert origin.hits["/chunked"] == 1
    again = await fetch(cache, origin.url("/chunked"))
    assert again.body == b"".join(parts)
    assert again.get("Content-Length") == str(len(again.body))
    assert params(again).get("hit") is True
    assert origin.hits["/chunked"] == 1


async def test_close_delimited_body_is_moved_with_the_same_exchange(
    make_cache: MakeCache,
) -> None:
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            writer.write(OK_WARM)
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\nuntil the end")
            await writer.drain()
            writer.close()

    async with ScriptedOrigin(respond) as origin:
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        resp = await fetch(cache, origin.url("/eof"))
        assert (resp.status, resp.body, resp.chunked) == (200, b"until the end", True)
        assert lean(cache) == (0, 1)
        again = await fetch(cache, origin.url("/eof"))
        assert again.body == b"until the end"
        assert params(again).get("hit") is True
        assert origin.paths() == ["/warm", "/eof"]


async def test_vary_response_is_moved_and_stored_per_variant(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)

    async def by_language(request: web.Request) -> web.Response:
        language = request.headers.get("Accept-Language", "none")
        return web.Response(
            text=f"in {language}",
            headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"},
        )

    origin.route("/vary", by_language)
    url = origin.url("/vary")
    english = [("Accept-Language", "en")]
    resp = await fetch(cache, url, headers=english)
    assert (resp.status, resp.body, resp.get("Vary")) == (200, b"in en", "Accept-Language")
    assert lean(cache) == (0, 1)
    assert origin.hits["/vary"] == 1
    again = await fetch(cache, url, headers=english)
    assert again.body == b"in en"
    assert params(again).get("hit") is True
    french = await fetch(cache, url, headers=[("Accept-Language", "fr")])
    assert french.body == b"in fr"
    assert origin.hits["/vary"] == 2
    assert lean(cache) == (0, 1)  # a URL with a Vary marker does not start there


async def test_no_content_response_is_moved(origin: Origin, make_cache: MakeCache) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/204", static(b"", {"Cache-Control": "no-store"}, status=204))
    resp = await fetch(cache, origin.url("/204"))
    assert (resp.status, resp.body) == (204, b"")
    assert lean(cache) == (0, 1)
    assert origin.hits["/204"] == 1


async def test_disk_backed_miss_for_a_key_the_disk_lacks_takes_the_fast_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    """With a disk tier, a key its membership does not hold is a miss at once: the fast path
    fetches it, stores it in memory and writes the disk copy behind; after a restart (memory
    empty) it is served from disk, by the general path, without asking the origin."""
    cache = await make_cache()
    await warm(cache, origin)
    origin.route("/disk", static(b"on disk", {"Cache-Control": "max-age=60"}))
    resp = await fetch(cache, origin.url("/disk"))
    assert (resp.status, resp.body) == (200, b"on disk")
    assert params(resp).get("stored") is True
    assert lean(cache) == (1, 0)
    again = await fetch(cache, origin.url("/disk"))
    assert again.body == b"on disk"
    assert params(again).get("hit") is True
    await cache.stop(0.5)  # (commits what is written behind)
    restarted = await make_cache()
    await warm(restarted, origin)
    from_disk = await fetch(restarted, origin.url("/disk"))
    assert (from_disk.status, from_disk.body) == (200, b"on disk")
    assert params(from_disk).get("hit") is True
    assert lean(restarted) == (0, 0)  # (on disk: looking is I/O, for the general path)
    assert origin.hits["/disk"] == 1


async def test_disk_backed_stale_object_revalidated_by_date_and_replaced_on_the_fast_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A stale object held in memory starts the fast path with a disk tier (it asks with
    If-Modified-Since); a small storable new answer is stored there, its disk copy behind."""
    cache = await make_cache()
    origin.route(
        "/restore", counting({"Cache-Control": "max-age=0", "Last-Modified": http_date(0)})
    )
    url = origin.url("/restore")
    assert (await fetch(cache, url)).body == b"v1"
    resp = await fetch(cache, url)
    assert (resp.status, resp.body) == (200, b"v2")
    assert origin.requests[-1].headers.get("If-Modified-Since") == http_date(0)
    assert lean(cache) == (1, 0)
    assert params(resp).get("stored") is True
    await cache.store.flush()
    cache.store.memory.delete(url)  # (as memory pressure would): the disk has v2, not v1
    found = await cache.store.get(url)
    assert isinstance(found, StoredObject)
    assert (found.tier, found.body) == ("disk", b"v2")


async def test_disk_backed_storable_small_replacement_on_the_fast_path_then_hit(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A stale object in memory, a storable replacement: stored on the fast path, then a hit."""
    cache = await make_cache()
    calls = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        cc = "max-age=0" if calls == 1 else "max-age=60"
        return web.Response(
            body=b"v%d" % calls, headers={"Cache-Control": cc, "ETag": f'"{calls}"'}
        )

    origin.route("/dsk", handler)
    url = origin.url("/dsk")
    assert (await fetch(cache, url)).body == b"v1"
    resp = await fetch(cache, url)
    assert (resp.status, resp.body) == (200, b"v2")
    assert lean(cache) == (1, 0)
    again = await fetch(cache, url)
    assert again.body == b"v2"
    assert params(again).get("hit") is True
    assert origin.hits["/dsk"] == 2


async def test_disk_backed_body_too_big_to_write_behind_is_moved(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A body the disk tier keeps in a file of its own (32 KiB and more) must reach it through
    a writer: moved to the general path with its exchange, stored, then a hit."""
    cache = await make_cache()
    await warm(cache, origin)
    body = pattern(40 * 1024, "big")
    origin.route("/big", static(body, {"Cache-Control": "max-age=60"}))
    resp = await fetch(cache, origin.url("/big"))
    assert (resp.status, resp.body) == (200, body)
    assert params(resp).get("stored") is True
    assert lean(cache) == (0, 1)
    again = await fetch(cache, origin.url("/big"))
    assert (again.body, params(again).get("hit")) == (body, True)
    assert origin.hits["/big"] == 1


# -- HTTP/1.0 and Connection: close clients ----------------------------------------------------


async def test_http10_client_gets_a_length_and_a_close(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/h10", static(b"for an old client", {"Cache-Control": "max-age=60"}))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/h10"), version="1.0"))
        resp = await read_response(reader)
        assert await closed_by_peer(reader)
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, b"for an old client")
    assert resp.get("Content-Length") == str(len(resp.body))
    assert resp.get("Connection") == "close"
    assert not resp.has("Transfer-Encoding")
    assert lean(cache) == (1, 0)


async def test_http10_keep_alive_client_keeps_its_connection(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/h10ka", static(b"kept alive", {"Cache-Control": "max-age=60"}))
    keep = [("Connection", "keep-alive")]
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/h10ka"), version="1.0", headers=keep))
        first = await read_response(reader)
        assert lean(cache) == (1, 0)
        writer.write(request_bytes("GET", origin.url("/h10ka"), version="1.0", headers=keep))
        second = await read_response(reader)
        assert not await closed_by_peer(reader, within=0.2)
    finally:
        writer.close()
    assert (first.status, first.body, first.get("Connection")) == (200, b"kept alive", "keep-alive")
    assert (second.body, second.get("Connection")) == (b"kept alive", "keep-alive")
    assert params(second).get("hit") is True


async def test_http10_client_of_a_moved_chunked_response_reads_to_the_close(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    parts = [b"alpha-", b"beta-", b"gamma"]
    origin.route("/h10chunked", chunked(parts, {"Cache-Control": "max-age=60"}))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/h10chunked"), version="1.0"))
        resp = await read_response(reader)
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, b"alpha-beta-gamma")
    assert not resp.has("Transfer-Encoding")
    assert not resp.has("Content-Length")
    assert resp.get("Connection") == "close"
    assert lean(cache) == (0, 1)


@pytest.mark.parametrize("size", [100, 200 * 1024], ids=["answered", "moved"])
async def test_connection_close_client(origin: Origin, make_cache: MakeCache, size: int) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    data = pattern(size, "close")
    origin.route("/close", static(data, {"Cache-Control": "max-age=60"}))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/close"), headers=[("Connection", "close")]))
        resp = await read_response(reader)
        assert await closed_by_peer(reader)
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, data)
    assert resp.get("Content-Length") == str(size)
    assert resp.get("Connection") == "close"
    assert lean(cache) == ((1, 0) if size < SMALL_BODY else (0, 1))


# -- pipelining --------------------------------------------------------------------------------


@pytest.mark.parametrize("first_size", [10, 200 * 1024], ids=["answered", "moved"])
async def test_pipelined_requests_are_answered_in_order_after_the_fast_path(
    origin: Origin, make_cache: MakeCache, first_size: int
) -> None:
    """Three requests in one write; the first (slow at the origin) goes down the fast path,
    the others wait for it and are answered after it, in order."""
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    slow_body = pattern(first_size, "slow")
    origin.route("/p-slow", delayed(slow_body, {"Cache-Control": "max-age=60"}, 0.3))
    origin.route("/p-quick", static(b"quick", {"Cache-Control": "max-age=60"}))
    urls = [origin.url("/p-slow"), origin.url("/p-quick"), origin.url("/p-slow")]
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(b"".join(request_bytes("GET", url) for url in urls))
        responses = [await read_response(reader) for _ in urls]
        assert not await closed_by_peer(reader, within=0.2)
    finally:
        writer.close()
    assert [r.status for r in responses] == [200, 200, 200]
    assert [r.body for r in responses] == [slow_body, b"quick", slow_body]
    assert params(responses[0]).get("fwd") == "uri-miss"
    assert params(responses[1]).get("fwd") == "uri-miss"
    assert params(responses[2]).get("hit") is True
    assert lean(cache) == ((1, 0) if first_size < SMALL_BODY else (0, 1))
    assert (origin.hits["/p-slow"], origin.hits["/p-quick"]) == (1, 1)


async def test_pipelined_requests_on_a_connection_that_already_has_a_worker(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A connection that has taken the general path before keeps its handler waiting; the
    requests queued behind a fast-path miss wake it up, in order."""
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/w-general", static(b"general", {"Cache-Control": "max-age=60"}))
    origin.route("/w-fast", delayed(b"fast", {"Cache-Control": "max-age=60"}, 0.2))
    origin.route("/w-next", static(b"next", {"Cache-Control": "max-age=60"}))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(
            request_bytes("GET", origin.url("/w-general"), headers=[("Pragma", "no-cache")])
        )
        first = await read_response(reader)
        assert lean(cache) == (0, 0)
        writer.write(
            request_bytes("GET", origin.url("/w-fast"))
            + request_bytes("GET", origin.url("/w-next"))
        )
        second = await read_response(reader)
        third = await read_response(reader)
        # And once more a fast-path miss alone, then a hit, on the same connection.
        writer.write(request_bytes("GET", origin.url("/w-general?again")))
        fourth = await read_response(reader)
        writer.write(request_bytes("GET", origin.url("/w-next")))
        fifth = await read_response(reader)
    finally:
        writer.close()
    assert [r.body for r in (first, second, third, fourth, fifth)] == [
        b"general",
        b"fast",
        b"next",
        b"general",
        b"next",
    ]
    assert params(fifth).get("hit") is True
    assert lean(cache) == (2, 0)


async def test_pipelined_request_after_a_connection_close_is_not_answered(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/last", delayed(b"last", {"Cache-Control": "max-age=60"}, 0.1))
    origin.route("/never", static(b"never", {"Cache-Control": "max-age=60"}))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(
            request_bytes("GET", origin.url("/last"), headers=[("Connection", "close")])
            + request_bytes("GET", origin.url("/never"))
        )
        resp = await read_response(reader)
        rest, closed = await read_until_closed(reader)
    finally:
        writer.close()
    assert (resp.status, resp.body, resp.get("Connection")) == (200, b"last", "close")
    assert (rest, closed) == (b"", True)
    assert lean(cache) == (1, 0)
    assert origin.hits["/never"] == 0


async def test_pipelined_requests_behind_a_fast_path_failure_are_answered(
    make_cache: MakeCache,
) -> None:
    """The first request fails on the fast path (garbage from the origin): its error answer
    comes first, then the queued request's answer, on the same connection."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            writer.write(OK_WARM)
        elif n == 2:
            await asyncio.sleep(0.1)
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            await writer.drain()
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nafter")

    async with ScriptedOrigin(respond) as origin:
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(
                request_bytes("GET", origin.url("/bad")) + request_bytes("GET", origin.url("/ok"))
            )
            first = await read_response(reader)
            second = await read_response(reader)
        finally:
            writer.close()
    assert first.status == 502
    assert (second.status, second.body) == (200, b"after")
    assert lean(cache) == (0, 1)


async def test_forty_pipelined_requests_behind_a_fast_path_miss_come_back_in_order(
    origin: Origin, make_cache: MakeCache
) -> None:
    """More requests than the connection queues before pausing its reads."""
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/pl-first", delayed(b"first", {"Cache-Control": "max-age=60"}, 0.2))
    for i in range(5):
        origin.route(f"/pl{i}", static(b"body %d" % i, {"Cache-Control": "max-age=60"}))
    paths = ["/pl-first"] + [f"/pl{i % 5}" for i in range(39)]
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(b"".join(request_bytes("GET", origin.url(path)) for path in paths))
        async with asyncio.timeout(10):
            bodies = [(await read_response(reader)).body for _ in paths]
        assert not await closed_by_peer(reader, within=0.2)
    finally:
        writer.close()
    assert bodies == [b"first"] + [b"body %d" % (i % 5) for i in range(39)]
    assert lean(cache) == (1, 0)
    assert all(origin.hits[f"/pl{i}"] == 1 for i in range(5))


async def test_pipelined_post_with_a_body_after_the_fast_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/pp-get", delayed(b"got", {"Cache-Control": "max-age=60"}, 0.2))

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=b"posted " + await request.read())

    origin.route("/pp-post", echo)
    payload = pattern(20000, "post")
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(
            request_bytes("GET", origin.url("/pp-get"))
            + request_bytes("POST", origin.url("/pp-post"), body=payload)
        )
        first = await read_response(reader)
        second = await read_response(reader)
    finally:
        writer.close()
    assert (first.status, first.body) == (200, b"got")
    assert (second.status, second.body) == (200, b"posted " + payload)
    assert lean(cache) == (1, 0)


async def test_malformed_request_pipelined_after_the_fast_path_gets_400_after_the_answer(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/pm", delayed(b"good", {"Cache-Control": "max-age=60"}, 0.1))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/pm")) + b"THIS IS NOT HTTP\r\n\r\n")
        first = await read_response(reader)
        second = await read_response(reader)
        rest, closed = await read_until_closed(reader)
    finally:
        writer.close()
    assert (first.status, first.body) == (200, b"good")
    assert second.status == 400
    assert (rest, closed) == (b"", True)
    assert lean(cache) == (1, 0)


# -- collapsed forwarding ----------------------------------------------------------------------


@pytest.mark.parametrize("size", [32 * 1024, 200 * 1024], ids=["answered", "moved"])
async def test_clients_join_a_fast_path_fetch(
    origin: Origin, make_cache: MakeCache, size: int
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    gate = asyncio.Event()
    data = pattern(size, "collapsed")
    origin.route("/cf", gated(data, {"Cache-Control": "max-age=60"}, gate))
    url = origin.url("/cf")
    async with asyncio.timeout(10):
        first = asyncio.create_task(fetch(cache, url))
        await wait_until(lambda: origin.hits["/cf"] == 1)
        open_before = len(cache.connections)
        others = [asyncio.create_task(fetch(cache, url)) for _ in range(4)]
        await wait_until(lambda: len(cache.connections) >= open_before + len(others))
        await asyncio.sleep(0.2)  # their requests are parsed and have joined the flight
        assert origin.hits["/cf"] == 1
        gate.set()
        responses = await asyncio.gather(first, *others)
    assert all(r.status == 200 for r in responses)
    assert all(r.body == data for r in responses)
    assert origin.hits["/cf"] == 1
    assert "collapsed" not in params(responses[0])
    assert all(params(r).get("collapsed") is True for r in responses[1:])
    assert lean(cache) == ((1, 0) if size < SMALL_BODY else (0, 1))
    again = await fetch(cache, url)
    assert again.body == data
    assert params(again).get("hit") is True
    assert origin.hits["/cf"] == 1


async def test_clients_join_a_fast_path_revalidation(origin: Origin, make_cache: MakeCache) -> None:
    """While a 304 is awaited on the fast path, other clients wait for it too, and are all
    answered from the refreshed stored object."""
    cache = await memory_cache(make_cache)
    gate = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"rv"':
            async with asyncio.timeout(5):
                await gate.wait()
            return web.Response(status=304, headers={"ETag": '"rv"', "Cache-Control": "max-age=60"})
        return web.Response(
            body=b"revalidated", headers={"ETag": '"rv"', "Cache-Control": "max-age=0"}
        )

    origin.route("/rv", handler)
    url = origin.url("/rv")
    assert (await fetch(cache, url)).body == b"revalidated"
    async with asyncio.timeout(10):
        first = asyncio.create_task(fetch(cache, url))
        await wait_until(lambda: origin.hits["/rv"] == 2)
        open_before = len(cache.connections)
        others = [asyncio.create_task(fetch(cache, url)) for _ in range(3)]
        await wait_until(lambda: len(cache.connections) >= open_before + len(others))
        await asyncio.sleep(0.2)
        gate.set()
        responses = await asyncio.gather(first, *others)
    assert all((r.status, r.body) == (200, b"revalidated") for r in responses)
    assert all(params(r).get("fwd-status") == "304" for r in responses)
    assert origin.hits["/rv"] == 2
    assert lean(cache) == (1, 0)
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS"] + ["TCP_REFRESH_UNMODIFIED"] * 4


async def test_every_reader_retries_once_when_the_reused_connection_was_dropped(
    make_cache: MakeCache,
) -> None:
    """Clients that joined a fast-path fetch whose reused connection turns out dead all start
    over on the general path, together: one new origin request for all of them."""
    cache = await memory_cache(make_cache)
    gate = asyncio.Event()
    heads: list[str] = []
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        mine = connections
        for _ in range(100):
            line, _ = await read_request_head(reader)
            heads.append(line)
            if mine == 1 and len(heads) > 1:
                async with asyncio.timeout(5):
                    await gate.wait()
                return  # hang up on the reused connection, unanswered
            path = line.split()[1].encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: %d\r\n\r\n%b"
                % (len(path), path)
            )
            await writer.drain()

    server = await RawServer(handler).start()
    try:
        assert (await fetch(cache, server.url("/warm"))).body == b"/warm"
        url = server.url("/together")
        async with asyncio.timeout(10):
            first = asyncio.create_task(fetch(cache, url))
            await wait_until(lambda: len(heads) == 2)
            open_before = len(cache.connections)
            others = [asyncio.create_task(fetch(cache, url)) for _ in range(3)]
            await wait_until(lambda: len(cache.connections) >= open_before + len(others))
            await asyncio.sleep(0.2)
            gate.set()
            responses = await asyncio.gather(first, *others)
    finally:
        await server.stop()
    assert all((r.status, r.body) == (200, b"/together") for r in responses)
    assert [line.split()[1] for line in heads] == ["/warm", "/together", "/together"]
    assert connections == 2
    assert lean(cache) == (0, 1)


async def test_running_flight_keeps_the_fast_path_off(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A request for a URL whose fetch is already running joins it instead of starting a
    fast-path fetch, even with an idle connection to the origin."""
    cache = await memory_cache(make_cache)
    warm_gate = asyncio.Event()
    # Two requests at once (for two URLs, so they are not collapsed) leave two idle
    # connections to the origin.
    paths = ["/warm-a", "/warm-b"]
    for path in paths:
        origin.route(path, gated(b"w", {"Cache-Control": "no-store"}, warm_gate))
    async with asyncio.timeout(10):
        warming = [asyncio.create_task(fetch(cache, origin.url(path))) for path in paths]
        await wait_until(lambda: all(origin.hits[path] == 1 for path in paths))
        warm_gate.set()
        await asyncio.gather(*warming)
    gate = asyncio.Event()
    origin.route("/flying", gated(b"one fetch", {"Cache-Control": "max-age=60"}, gate))
    url = origin.url("/flying")
    async with asyncio.timeout(10):
        # A no-cache request starts a flight on the general path, on one idle connection.
        first = asyncio.create_task(fetch(cache, url, headers=[("Cache-Control", "no-cache")]))
        await wait_until(lambda: origin.hits["/flying"] == 1)
        second = asyncio.create_task(fetch(cache, url))
        await asyncio.sleep(0.2)
        gate.set()
        a, b = await asyncio.gather(first, second)
    assert (a.body, b.body) == (b"one fetch", b"one fetch")
    assert params(b).get("collapsed") is True
    assert origin.hits["/flying"] == 1
    assert lean(cache) == (0, 0)


# -- upstream failures -------------------------------------------------------------------------


async def test_origin_dropping_the_reused_connection_is_retried_on_a_new_one(
    make_cache: MakeCache,
) -> None:
    """Each origin connection answers its first request and hangs up on the next, unanswered:
    the fast path's fetch fails before any head, and the general path sends it again on a
    new connection (one more origin request, one more connection)."""
    cache = await memory_cache(make_cache)
    heads: list[str] = []

    async def one_answer_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        line, _ = await read_request_head(reader)
        heads.append(line)
        path = line.split()[1].encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: %d\r\n\r\n%b"
            % (len(path), path)
        )
        await writer.drain()
        line, _ = await read_request_head(reader)
        heads.append(line)  # then the connection closes, the request unanswered

    server = await RawServer(one_answer_per_connection).start()
    try:
        assert (await fetch(cache, server.url("/warm"))).body == b"/warm"
        for i, path in enumerate(["/x", "/y"], start=1):
            resp = await fetch(cache, server.url(path))
            assert (resp.status, resp.body) == (200, path.encode())
            assert lean(cache) == (0, i)
            assert server.accepted == 1 + i
        hit = await fetch(cache, server.url("/x"))
        assert hit.body == b"/x"
        assert params(hit).get("hit") is True
    finally:
        await server.stop()
    paths = [line.split()[1] for line in heads]
    assert paths == ["/warm", "/x", "/x", "/y", "/y"]


async def test_retry_that_fails_again_gives_502(make_cache: MakeCache) -> None:
    """Only one retry: if the new connection is dropped too, the client gets a 502."""
    cache = await memory_cache(make_cache)
    connections = 0

    async def first_connection_only(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        nonlocal connections
        connections += 1
        await read_request_head(reader)
        if connections == 1:
            writer.write(OK_WARM)
            await writer.drain()
            await read_request_head(reader)
        # else: hang up on the request at once

    server = await RawServer(first_connection_only).start()
    try:
        assert (await fetch(cache, server.url("/warm"))).body == b"warm"
        resp = await fetch(cache, server.url("/dropped"))
    finally:
        await server.stop()
    assert resp.status == 502
    assert params(resp).get("detail") == "reset"
    assert resp.get("Via") == "1.1 test-cache"
    assert lean(cache) == (0, 1)
    assert connections == 2


async def test_origin_closing_idle_connections_after_each_answer(
    make_cache: MakeCache,
) -> None:
    """The origin answers (keep-alive, by its framing) and then closes the connection at
    once: a request right after finds the connection dead or gone, whichever the timing
    gives, and is answered either way, on a new connection."""
    cache = await memory_cache(make_cache)

    async def answer_and_close(n: int, writer: asyncio.StreamWriter) -> None:
        body = b"answer %d" % n
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
        await writer.drain()
        writer.close()

    async with ScriptedOrigin(answer_and_close) as origin:
        for i in range(1, 6):
            resp = await fetch(cache, origin.url(f"/again{i}"))
            assert (resp.status, resp.body) == (200, b"answer %d" % i)
        assert origin.paths() == [f"/again{i}" for i in range(1, 6)]
        assert origin.server.accepted == 5


async def test_read_timeout_before_the_head_gives_504(make_cache: MakeCache) -> None:
    cache = await memory_cache(make_cache, upstream={"read_timeout": 0.3})

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 2:
            await asyncio.sleep(30)
        else:
            writer.write(OK_WARM)

    async with ScriptedOrigin(respond) as origin:
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        started = time.monotonic()
        resp = await fetch(cache, origin.url("/silent"))
        elapsed = time.monotonic() - started
        assert resp.status == 504
        assert params(resp).get("detail") == "read_timeout"
        assert "0.3 s" in resp.text
        assert elapsed < 2.0
        assert lean(cache) == (0, 1)
        # The silent connection was closed, not given back to the pool: a new one is opened.
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        assert origin.server.accepted == 2


@pytest.mark.parametrize(
    "garbage",
    [
        b"THIS IS NOT HTTP\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"b\r\nhello world\r\n0\r\n\r\n",
    ],
    ids=["not-http", "length-and-chunked"],
)
async def test_unparsable_response_gives_502(make_cache: MakeCache, garbage: bytes) -> None:
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(OK_WARM if n == 1 else garbage)

    async with ScriptedOrigin(respond) as origin:
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        resp = await fetch(cache, origin.url("/garbage"))
        assert resp.status == 502
        assert params(resp).get("detail") == "protocol"
        assert "unparsable" in resp.text
        assert lean(cache) == (0, 1)
        assert origin.paths() == ["/warm", "/garbage"]


async def test_reset_mid_body_closes_the_client_and_stores_nothing(
    make_cache: MakeCache,
) -> None:
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            writer.write(OK_WARM)
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 1000\r\n\r\n"
            + b"0123456789"
        )
        await writer.drain()
        writer.close()

    async with ScriptedOrigin(respond) as origin:
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        for _ in range(2):
            reader, writer = await open_proxy(cache.address[1])
            try:
                writer.write(request_bytes("GET", origin.url("/cut")))
                async with asyncio.timeout(5):
                    status, _, fields = await read_head(reader)
                rest, closed = await read_until_closed(reader)
            finally:
                writer.close()
            assert status == 200
            assert ("Content-Length", "1000") in fields
            assert rest == b"0123456789"
            assert closed, "a truncated body must end with a closed connection"
        # Nothing was stored: the second request went to the origin again.
        assert origin.paths() == ["/warm", "/cut", "/cut"]
        assert lean(cache) == (0, 1)


async def test_origin_stalling_mid_body_closes_the_client(make_cache: MakeCache) -> None:
    cache = await memory_cache(make_cache, upstream={"read_timeout": 0.3})

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            writer.write(OK_WARM)
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 1000\r\n\r\n"
            + b"0123456789"
        )
        await writer.drain()
        await asyncio.sleep(30)

    async with ScriptedOrigin(respond) as origin:
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        started = time.monotonic()
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(request_bytes("GET", origin.url("/stall")))
            async with asyncio.timeout(5):
                status, _, _ = await read_head(reader)
            rest, closed = await read_until_closed(reader)
        finally:
            writer.close()
        assert (status, rest, closed) == (200, b"0123456789", True)
        assert time.monotonic() - started < 2.0
        assert lean(cache) == (0, 1)


async def test_stray_bytes_after_a_304_do_not_stop_later_revalidation(
    make_cache: MakeCache,
) -> None:
    """An origin that sends a body after its 304 (a 304 has none, so the bytes cannot be
    parsed): whatever the client gets for that request, the object (still stale, as the 304
    said max-age=0) must be revalidated with the origin on the next request, not be taken
    from the fetch that went wrong."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            writer.write(
                b'HTTP/1.1 200 OK\r\nETag: "s1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Length: 6\r\n\r\nstored"
            )
        elif n == 2:
            writer.write(
                b'HTTP/1.1 304 Not Modified\r\nETag: "s1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Length: 5\r\n\r\nstray"
            )
        else:
            writer.write(
                b'HTTP/1.1 304 Not Modified\r\nETag: "s1"\r\nCache-Control: max-age=0\r\n\r\n'
            )

    async with ScriptedOrigin(respond) as origin:
        url = origin.url("/stray")
        assert (await fetch(cache, url)).body == b"stored"
        odd = await fetch(cache, url)
        assert odd.status in (200, 502)
        assert lean(cache) in ((1, 0), (0, 1))
        later = await fetch(cache, url)
        assert (later.status, later.body) == (200, b"stored")
        conditional = [dict(fields).get("If-None-Match") for _, fields in origin.requests]
        assert conditional == [None, '"s1"', '"s1"'], (
            f"the origin saw {len(origin.requests)} requests; the third request was answered"
            f" without revalidation: {later.get('Cache-Status')}"
        )


async def test_response_with_connection_close_is_answered_and_not_reused(
    make_cache: MakeCache,
) -> None:
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 2:
            writer.write(
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nCache-Control: max-age=60\r\n"
                b"Content-Length: 5\r\n\r\nlast!"
            )
            await writer.drain()
            writer.close()
        else:
            writer.write(OK_WARM)

    async with ScriptedOrigin(respond) as origin:
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        resp = await fetch(cache, origin.url("/closing"))
        assert (resp.status, resp.body) == (200, b"last!")
        assert not resp.has("Connection")  # the client's connection stays open
        assert lean(cache) == (1, 0)
        # The origin's connection was not pooled: the next miss opens a new one.
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        assert origin.server.accepted == 2
        assert lean(cache) == (1, 0)


async def test_fast_path_misses_reuse_one_origin_connection(make_cache: MakeCache) -> None:
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        body = b"response %d" % n
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: %d\r\n\r\n%b"
            % (len(body), body)
        )

    async with ScriptedOrigin(respond) as origin:
        for n in range(1, 6):
            resp = await fetch(cache, origin.url(f"/reuse{n}"))
            assert (resp.status, resp.body) == (200, b"response %d" % n)
        assert lean(cache) == (4, 0)
        assert origin.server.accepted == 1
        line, fields = origin.requests[-1]
        assert line == "GET /reuse5 HTTP/1.1"
        assert ("Host", f"127.0.0.1:{origin.server.port}") in fields


async def test_interim_response_before_the_answer_is_skipped(make_cache: MakeCache) -> None:
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n != 2:
            writer.write(OK_WARM)
            return
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\nfinal"
        )

    async with ScriptedOrigin(respond) as origin:
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        resp = await fetch(cache, origin.url("/hints"))
        assert (resp.status, resp.body) == (200, b"final")
        assert lean(cache) == (1, 0)
        # The connection is still in step: the next miss is answered on it.
        assert (await fetch(cache, origin.url("/warm"))).body == b"warm"
        assert origin.server.accepted == 1


# -- requests that keep off the fast path ------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        ("Cache-Control", "no-cache"),
        ("Cache-Control", "max-age=0"),
        ("Pragma", "no-cache"),
        ("Authorization", "Basic dXNlcjpwYXNz"),
        ("Proxy-Authorization", "Basic dXNlcjpwYXNz"),
        ("Range", "bytes=0-3"),
        ("If-None-Match", '"nope"'),
        ("If-Modified-Since", "Thu, 01 Jan 1970 00:00:00 GMT"),
        ("Max-Forwards", "5"),
        ("Via", "1.1 elsewhere"),
    ],
    ids=lambda f: f"{f[0]}:{f[1]}",
)
async def test_request_fields_that_keep_a_get_off_the_fast_path(
    origin: Origin, make_cache: MakeCache, field: tuple[str, str]
) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/off", static(b"general", {"Cache-Control": "max-age=60"}))
    resp = await fetch(cache, origin.url("/off"), headers=[field])
    assert (resp.status, resp.body) == (200, b"general")
    assert resp.get("Via") == "1.1 test-cache"
    assert origin.hits["/off"] == 1
    assert lean(cache) == (0, 0)


async def test_head_and_post_keep_off_the_fast_path(origin: Origin, make_cache: MakeCache) -> None:
    cache = await memory_cache(make_cache)
    await warm(cache, origin)
    origin.route("/m", static(b"method body", {"Cache-Control": "max-age=60"}))
    head = await fetch(cache, origin.url("/m"), method="HEAD")
    assert (head.status, head.body, head.get("Content-Length")) == (200, b"", "11")
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("POST", origin.url("/m"), body=b"data"))
        post = await read_response(reader)
    finally:
        writer.close()
    assert (post.status, post.body) == (200, b"method body")
    assert origin.hits["/m"] == 2
    assert lean(cache) == (0, 0)


async def test_fresh_object_is_a_hit_not_a_fast_path_fetch(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache)
    origin.route("/fresh", static(b"fresh", {"Cache-Control": "max-age=60"}))
    await fetch(cache, origin.url("/fresh"))  # stored by the general path (cold pool)
    for _ in range(3):
        resp = await fetch(cache, origin.url("/fresh"))
        assert resp.body == b"fresh"
        assert params(resp).get("hit") is True
    assert origin.hits["/fresh"] == 1
    assert lean(cache) == (0, 0)


async def test_client_no_cache_on_a_stored_object_is_a_client_refresh(
    origin: Origin, make_cache: MakeCache
) -> None:
    """With no-cache the GET takes the general path (TCP_CLIENT_REFRESH_MISS) as before,
    while a plain GET for a stale object would have been revalidated on the fast path."""
    cache = await memory_cache(make_cache)
    origin.route("/ncache", counting({"Cache-Control": "max-age=60"}))
    url = origin.url("/ncache")
    assert (await fetch(cache, url)).body == b"v1"
    resp = await fetch(cache, url, headers=[("Cache-Control", "no-cache")])
    assert resp.body == b"v2"
    assert params(resp).get("fwd") == "request"
    assert lean(cache) == (0, 0)
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS", "TCP_CLIENT_REFRESH_MISS"]
