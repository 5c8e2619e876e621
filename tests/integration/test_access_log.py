"""The access log: one line per request in Squid's native format, with Squid's codes.

The log writer batches lines; stopping the cache flushes them, so each test stops its cache
before reading the file (tests.support.stop_and_read_log).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.support import LogLine, MakeCache, Origin, http_date, proxy_client, stop_and_read_log

TEXT = "text/plain"


def static(
    body: bytes, headers: dict[str, str]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, headers=headers, content_type=TEXT)

    return handler


def lines_for(lines: list[LogLine], url: str) -> list[LogLine]:
    return [line for line in lines if line.url == url]


def assert_direct(line: LogLine) -> None:
    assert (line.hierarchy, line.peer) == ("HIER_DIRECT", "127.0.0.1"), line


def assert_none(line: LogLine) -> None:
    assert (line.hierarchy, line.peer) == ("HIER_NONE", "-"), line


async def test_miss_memory_hit_and_disk_hit(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache(cache={"memory_max_object_kb": 16})
    small, large = b"s" * 1000, b"L" * (100 * 1024)
    origin.route("/small", static(small, {"Cache-Control": "max-age=600"}))
    origin.route("/large", static(large, {"Cache-Control": "max-age=600"}))
    began = time.time()
    async with proxy_client(cache) as client:
        for path in ("/small", "/small", "/small", "/large", "/large"):
            resp, _ = await client.get(origin.url(path))
            assert resp.status == 200
    lines = await stop_and_read_log(cache)
    ended = time.time()
    assert len(lines) == 5
    for line in lines:
        assert began - 0.01 <= line.time <= ended + 0.01
        assert 0 <= line.elapsed_ms < 5000
        assert (line.client, line.method, line.user, line.status) == ("127.0.0.1", "GET", "-", 200)
        assert line.content_type == TEXT
    small_lines = lines_for(lines, origin.url("/small"))
    large_lines = lines_for(lines, origin.url("/large"))
    assert [line.result for line in small_lines] == ["TCP_MISS", "TCP_MEM_HIT", "TCP_MEM_HIT"]
    assert [line.result for line in large_lines] == ["TCP_MISS", "TCP_HIT"]
    for miss, *hits in (small_lines, large_lines):
        assert_direct(miss)
        for hit in hits:
            assert_none(hit)
    # Bytes sent to the client: the head and the body.
    assert all(line.bytes > len(small) for line in small_lines)
    assert all(line.bytes > len(large) for line in large_lines)
    assert all(line.bytes < len(large) + 1024 for line in large_lines)


async def test_small_object_after_restart_is_a_disk_hit_then_a_memory_hit(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/s", static(b"s" * 500, {"Cache-Control": "max-age=600"}))
    first = await make_cache()
    async with proxy_client(first) as client:
        await client.get(origin.url("/s"))
    await first.stop(1.0)
    second = await make_cache()  # same store directory and log file
    async with proxy_client(second) as client:
        for _ in range(2):
            _, body = await client.get(origin.url("/s"))
            assert body == b"s" * 500
    lines = await stop_and_read_log(second)
    results = [line.result for line in lines_for(lines, origin.url("/s"))]
    assert results == ["TCP_MISS", "TCP_HIT", "TCP_MEM_HIT"]
    assert origin.hits["/s"] == 1


async def test_denied_client(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache(access={"allow": ["10.0.0.0/8"]})
    origin.route("/d", static(b"d", {"Cache-Control": "max-age=600"}))
    async with proxy_client(cache) as client:
        resp, _ = await client.get(origin.url("/d"))
    assert resp.status == 403
    assert origin.hits["/d"] == 0
    lines = await stop_and_read_log(cache)
    assert len(lines) == 1
    line = lines[0]
    assert (line.result, line.status, line.method, line.client) == (
        "TCP_DENIED",
        403,
        "GET",
        "127.0.0.1",
    )
    # The 403 page that was sent: its size and type, as Squid logs its error pages.
    assert line.bytes > 0
    assert line.content_type == TEXT
    assert_none(line)


async def test_denied_port(cache: CacheServer) -> None:
    async with proxy_client(cache) as client:
        resp, _ = await client.get("http://127.0.0.1:25/")
    assert resp.status == 403
    lines = await stop_and_read_log(cache)
    assert [(line.result, line.status) for line in lines] == [("TCP_DENIED", 403)]
    assert_none(lines[0])


async def test_refresh_unmodified_and_modified(origin: Origin, cache: CacheServer) -> None:
    modified = http_date(time.time() - 3600)
    version = 1

    async def handler(request: web.Request) -> web.Response:
        etag = f'"v{version}"'
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag, "Cache-Control": "max-age=0"})
        headers = {"ETag": etag, "Cache-Control": "max-age=0", "Last-Modified": modified}
        return web.Response(text=f"version {version}", headers=headers, content_type=TEXT)

    origin.route("/r", handler)
    url = origin.url("/r")
    async with proxy_client(cache) as client:
        await client.get(url)
        _, body = await client.get(url)
        assert body == b"version 1"
        version = 2
        _, body = await client.get(url)
        assert body == b"version 2"
    lines = lines_for(await stop_and_read_log(cache), url)
    assert [(line.result, line.status) for line in lines] == [
        ("TCP_MISS", 200),
        ("TCP_REFRESH_UNMODIFIED", 200),
        ("TCP_REFRESH_MODIFIED", 200),
    ]
    for line in lines:
        assert_direct(line)
        assert line.content_type == TEXT


async def test_client_refresh_miss(origin: Origin, cache: CacheServer) -> None:
    origin.route("/c", static(b"c", {"Cache-Control": "max-age=600"}))
    url = origin.url("/c")
    async with proxy_client(cache) as client:
        await client.get(url)
        await client.get(url, headers={"Cache-Control": "no-cache"})
        await client.get(url)
    lines = lines_for(await stop_and_read_log(cache), url)
    assert [line.result for line in lines] == ["TCP_MISS", "TCP_CLIENT_REFRESH_MISS", "TCP_MEM_HIT"]
    assert_direct(lines[1])
    assert origin.hits["/c"] == 2


async def test_methods_and_uncachable_responses_are_logged_as_misses(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/p", static(b"p", {"Cache-Control": "no-store"}))
    url = origin.url("/p")
    async with proxy_client(cache) as client:
        await client.request("POST", url, data=b"x")
        await client.request("HEAD", url)
        await client.get(url)
    lines = lines_for(await stop_and_read_log(cache), url)
    assert [(line.result, line.method, line.status) for line in lines] == [
        ("TCP_MISS", "POST", 200),
        ("TCP_MISS", "HEAD", 200),
        ("TCP_MISS", "GET", 200),
    ]
    for line in lines:
        assert_direct(line)


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    """A plain TCP echo server on 127.0.0.1; yields its port."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.write_eof()
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_tunnel(make_cache: MakeCache) -> None:
    async with echo_server() as port:
        cache = await make_cache(access={"connect_ports": [port]})
        reader, writer = await asyncio.open_connection("127.0.0.1", cache.address[1])
        try:
            async with asyncio.timeout(5):
                target = f"127.0.0.1:{port}".encode()
                writer.write(b"CONNECT %b HTTP/1.1\r\nHost: %b\r\n\r\n" % (target, target))
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200")
                writer.write(b"ping through the tunnel")
                assert await reader.readexactly(23) == b"ping through the tunnel"
                writer.write_eof()
                assert await reader.read() == b""
        finally:
            writer.close()
        lines = await stop_and_read_log(cache)
    assert len(lines) == 1
    line = lines[0]
    assert (line.result, line.status, line.method, line.url) == (
        "TCP_TUNNEL",
        200,
        "CONNECT",
        f"127.0.0.1:{port}",
    )
    assert line.bytes >= 23
    assert_direct(line)
    assert line.content_type == "-"


async def test_connect_to_port_not_allowed_is_denied(cache: CacheServer) -> None:
    async with echo_server() as port:
        target = f"127.0.0.1:{port}".encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", cache.address[1])
        try:
            async with asyncio.timeout(5):
                writer.write(b"CONNECT %b HTTP/1.1\r\nHost: %b\r\n\r\n" % (target, target))
                head = await reader.readuntil(b"\r\n\r\n")
        finally:
            writer.close()
        assert head.startswith(b"HTTP/1.1 403")
        lines = await stop_and_read_log(cache)
    assert [(line.result, line.status, line.method) for line in lines] == [
        ("TCP_DENIED", 403, "CONNECT")
    ]
    assert_none(lines[0])
