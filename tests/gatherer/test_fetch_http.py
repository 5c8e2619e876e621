"""HttpFetcher against loopback origins and the real Harvest cache as its proxy."""

from __future__ import annotations

import asyncio
import gzip
import ssl
import time
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import web

from gatherer.errors import FetchError
from gatherer.fetch.http import ROBOTS_MAX_BYTES, HttpFetcher
from gatherer.fetch.result import Validators
from gatherer.fetch.settings import FetchSettings
from harvest_cache.server.app import CacheServer
from tests.support import (
    Origin,
    RawServer,
    free_port,
    read_request_head,
    static,
    stop_and_read_log,
)
from tests.tls_support import HOST, https_cache, make_trust, tls_origin

MiB = 1024 * 1024
LAST_MODIFIED = "Mon, 02 Nov 2026 10:00:00 GMT"
LAST_MODIFIED_EPOCH = 1793613600.0


def settings(**overrides: Any) -> FetchSettings:
    values: dict[str, Any] = {
        "user_agent": "harvest-test/1.0",
        "timeout": 5.0,
        "connect_timeout": 2.0,
        "max_bytes": MiB,
        "max_redirects": 3,
    }
    values.update(overrides)
    return FetchSettings(**values)


async def fetch(url: str, **overrides: Any) -> Any:
    async with HttpFetcher(settings(**overrides)) as http:
        return await http.fetch(url)


async def failure(url: str, **overrides: Any) -> FetchError:
    with pytest.raises(FetchError) as caught:
        await fetch(url, **overrides)
    return caught.value


def redirect(to: str, status: int = 302) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, headers={"Location": to})

    return handler


async def test_fetch_fills_every_field(origin: Origin) -> None:
    headers = {
        "Content-Type": "text/html; charset=ISO-8859-1",
        "ETag": '"e1"',
        "Last-Modified": LAST_MODIFIED,
    }
    origin.route("/doc", static(b"<p>hello</p>", headers))
    fetched = await fetch(origin.url("/doc"))
    assert fetched.url == origin.url("/doc")
    assert fetched.content == b"<p>hello</p>"
    assert (fetched.content_type, fetched.charset) == ("text/html", "ISO-8859-1")
    assert (fetched.status, fetched.not_modified, fetched.redirects) == (200, False, ())
    assert (fetched.etag, fetched.last_modified) == ('"e1"', LAST_MODIFIED)
    assert fetched.modified == LAST_MODIFIED_EPOCH
    assert fetched.peer == "127.0.0.1"
    assert fetched.request_head.startswith(b"GET /doc HTTP/1.1\r\n")
    assert fetched.request_head.endswith(b"\r\n\r\n")
    assert b"\r\nUser-Agent: harvest-test/1.0\r\n" in fetched.request_head
    assert b"\r\nAccept-Encoding: gzip, deflate\r\n" in fetched.request_head
    assert fetched.response_head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b'\r\nETag: "e1"\r\n' in fetched.response_head
    assert fetched.response_head.endswith(b"\r\n\r\n")
    sent = origin.requests[0].headers
    assert sent["User-Agent"] == "harvest-test/1.0"
    assert sent["Accept-Encoding"] == "gzip, deflate"


async def test_no_content_type_and_bad_date() -> None:
    async def bare(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nLast-Modified: yesterday\r\n\r\nx")
        await writer.drain()

    server = await RawServer(bare).start()
    try:
        fetched = await fetch(server.url("/bare"))
    finally:
        await server.stop()
    assert fetched.content == b"x"
    assert (fetched.content_type, fetched.charset) == (None, None)  # (none sent, none made up)
    assert (fetched.last_modified, fetched.modified) == ("yesterday", None)


async def test_conditional_request_gives_not_modified(origin: Origin) -> None:
    async def conditional(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"v7"':
            return web.Response(status=304)
        return web.Response(body=b"body", headers={"ETag": '"v7"'})

    origin.route("/c", conditional)
    async with HttpFetcher(settings()) as http:
        validators = Validators(etag='"v7"', last_modified=LAST_MODIFIED)
        fetched = await http.fetch(origin.url("/c"), validators=validators)
        fresh = await http.fetch(origin.url("/c"))
    assert fetched.not_modified
    assert (fetched.status, fetched.content) == (304, b"")
    # The 304 repeated neither validator: the ones held still stand.
    assert (fetched.etag, fetched.last_modified) == ('"v7"', LAST_MODIFIED)
    assert origin.requests[0].headers["If-Modified-Since"] == LAST_MODIFIED
    assert (fresh.not_modified, fresh.content) == (False, b"body")


async def test_redirect_chain_is_followed_and_recorded(origin: Origin) -> None:
    origin.route("/r1", redirect("/r2", 301))
    origin.route("/r2", redirect(origin.url("/final"), 307))
    origin.route("/final", static(b"arrived", {"Content-Type": "text/plain"}))
    asked: list[str] = []

    def permit(url: str) -> bool:
        asked.append(url)
        return True

    async with HttpFetcher(settings()) as http:
        fetched = await http.fetch(origin.url("/r1"), permit=permit)
    assert fetched.url == origin.url("/final")
    assert fetched.content == b"arrived"
    assert fetched.redirects == (origin.url("/r1"), origin.url("/r2"))
    assert asked == [origin.url("/r2"), origin.url("/final")]
    assert fetched.request_head.startswith(b"GET /final HTTP/1.1\r\n")


async def test_too_many_redirects(origin: Origin) -> None:
    origin.route("/loop", redirect("/loop"))
    error = await failure(origin.url("/loop"), max_redirects=3)
    assert (error.kind, error.status) == ("redirects", 302)
    assert origin.hits["/loop"] == 4  # the first request and three redirects followed


async def test_refused_redirect_is_not_followed(origin: Origin) -> None:
    origin.route("/away", redirect("/private"))
    origin.route("/private", static(b"secret"))
    async with HttpFetcher(settings()) as http:
        with pytest.raises(FetchError) as caught:
            await http.fetch(origin.url("/away"), permit=lambda url: "private" not in url)
    assert caught.value.kind == "refused"
    assert origin.hits["/private"] == 0


async def test_redirect_out_of_http_is_refused(origin: Origin) -> None:
    origin.route("/ftp", redirect("ftp://127.0.0.1/pub/"))
    assert (await failure(origin.url("/ftp"))).kind == "refused"


async def test_bad_location_is_a_protocol_error(origin: Origin) -> None:
    origin.route("/bad", redirect("http://127.0.0.1:99999/"))
    error = await failure(origin.url("/bad"))
    assert (error.kind, error.url) == ("protocol", origin.url("/bad"))


async def test_https_with_an_untrusted_certificate_fails_to_connect(tmp_path: Path) -> None:
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    app = web.Application()
    app.router.add_get("/", static(b"secret"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        port = runner.addresses[0][1]
        error = await failure(f"https://127.0.0.1:{port}/")
    finally:
        await runner.cleanup()
    assert error.kind == "connect"  # (certificate verification is never skipped)


@pytest.mark.parametrize("status", [404, 410, 500])
async def test_error_status(origin: Origin, status: int) -> None:
    origin.route("/e", static(b"no", status=status))
    error = await failure(origin.url("/e"))
    assert (error.kind, error.status) == ("status", status)


class Firehose:
    """Streams 50 MB in 64 KiB writes, with or without announcing the length; notes how
    much it managed to write before the client went away."""

    TOTAL = 50 * MiB

    def __init__(self, *, announce: bool) -> None:
        self.announce = announce
        self.written = 0
        self.ended = asyncio.Event()

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if self.announce:
            response.content_length = self.TOTAL
        chunk = b"z" * (64 * 1024)
        try:
            await response.prepare(request)
            while self.written < self.TOTAL:
                await response.write(chunk)
                self.written += len(chunk)
        except ConnectionError:
            pass  # the client hung up, as it should
        finally:
            self.ended.set()
        return response


@pytest.mark.parametrize("announce", [True, False], ids=["content-length", "chunked"])
async def test_too_large_stops_reading(origin: Origin, announce: bool) -> None:
    firehose = Firehose(announce=announce)
    origin.route("/big", firehose)
    tracemalloc.start()
    started = time.monotonic()
    try:
        error = await failure(origin.url("/big"), max_bytes=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.kind == "too_large"
    assert time.monotonic() - started < 5
    assert peak < 8 * MiB  # (a read to the end would have held 50 MB)
    async with asyncio.timeout(10):
        await firehose.ended.wait()
    assert firehose.written < firehose.TOTAL // 2


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)),  # raw, common
    ],
    ids=["gzip", "deflate-zlib", "deflate-raw"],
)
async def test_content_coding_is_decoded(
    origin: Origin, coding: str, encode: Callable[[bytes], bytes]
) -> None:
    text = b"the same words again and again. " * 2000
    origin.route("/z", static(encode(text), {"Content-Encoding": coding}))
    fetched = await fetch(origin.url("/z"))
    assert fetched.content == text
    assert f"\r\nContent-Encoding: {coding}\r\n".encode() in fetched.response_head


async def test_compression_bomb_is_capped(origin: Origin) -> None:
    bomb = gzip.compress(bytes(64 * MiB), compresslevel=9)  # ~64 KB on the wire
    origin.route("/bomb", static(bomb, {"Content-Encoding": "gzip"}))
    tracemalloc.start()
    try:
        error = await failure(origin.url("/bomb"), max_bytes=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.kind == "too_large"
    assert peak < 8 * MiB


async def test_corrupt_and_unknown_codings_are_protocol_errors(origin: Origin) -> None:
    origin.route(
        "/corrupt", static(b"\x1f\x8b\x08\x00 not gzip at all", {"Content-Encoding": "gzip"})
    )
    origin.route("/br", static(b"\x0b\x02\x80hi\x03", {"Content-Encoding": "br"}))
    assert (await failure(origin.url("/corrupt"))).kind == "protocol"
    assert (await failure(origin.url("/br"))).kind == "protocol"


async def test_slow_origin_times_out(origin: Origin) -> None:
    release = asyncio.Event()

    async def stall(request: web.Request) -> web.Response:
        async with asyncio.timeout(10):
            await release.wait()
        return web.Response(body=b"late")

    origin.route("/slow", stall)
    started = time.monotonic()
    try:
        error = await failure(origin.url("/slow"), timeout=0.5)
    finally:
        release.set()
    assert error.kind == "timeout"
    assert time.monotonic() - started < 3


async def test_connection_refused() -> None:
    error = await failure(f"http://127.0.0.1:{free_port()}/")
    assert error.kind == "connect"


async def test_through_the_harvest_cache(
    origin: Origin, make_cache: Callable[..., Awaitable[CacheServer]]
) -> None:
    origin.route(
        "/cached",
        static(
            b"from the origin",
            {"Cache-Control": "max-age=60", "ETag": '"c1"', "Content-Type": "text/plain"},
        ),
    )
    cache = await make_cache()
    proxy = f"http://127.0.0.1:{cache.address[1]}"
    url = origin.url("/cached")
    async with HttpFetcher(settings(proxy=proxy)) as http:
        first = await http.fetch(url)
        second = await http.fetch(url)
        again = await http.fetch(url, validators=Validators(etag='"c1"'))
    assert first.content == second.content == b"from the origin"
    assert origin.hits["/cached"] == 1  # the second fetch was a cache hit
    assert "Via" in origin.requests[0].headers
    assert again.not_modified
    assert again.content == b""
    # To a proxy the request target is absolute; the peer is the proxy.
    assert first.request_head.startswith(f"GET {url} HTTP/1.1\r\n".encode())
    assert first.peer == "127.0.0.1"
    assert b"\r\nVia: " in second.response_head


@pytest.mark.parametrize("https_via_proxy", ["absolute", "tunnel"])
async def test_https_through_the_harvest_cache(
    make_cache: Callable[..., Awaitable[CacheServer]], tmp_path: Path, https_via_proxy: str
) -> None:
    """In absolute form (the default) the cache fetches an https:// URL over TLS and caches
    it; as a tunnel it relays bytes, and the gatherer verifies the origin itself (here it
    cannot: the origin's authority is the cache's alone to trust)."""
    trust = make_trust(tmp_path)
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:
        origin.route("/doc", static(b"secure document", {"Cache-Control": "max-age=60"}))
        cache = await https_cache(make_cache, trust, access={"connect_ports": ["1024-65535"]})
        proxy = f"http://127.0.0.1:{cache.address[1]}"
        url = origin.url("/doc", HOST)
        overrides = {"proxy": proxy, "https_via_proxy": https_via_proxy}
        if https_via_proxy == "tunnel":
            assert (await failure(url, **overrides)).kind == "connect"
            lines = await stop_and_read_log(cache)
            assert [line.method for line in lines] == ["CONNECT"]
            return
        async with HttpFetcher(settings(**overrides)) as http:
            first = await http.fetch(url)
            second = await http.fetch(url)
        assert first.content == second.content == b"secure document"
        assert origin.hits["/doc"] == 1  # the second fetch was a cache hit
        assert first.request_head.startswith(f"GET {url} HTTP/1.1\r\n".encode())
        lines = await stop_and_read_log(cache)
    assert [(line.result, line.url) for line in lines] == [
        ("TCP_MISS", url),
        ("TCP_MEM_HIT", url),
    ]


async def test_robots(origin: Origin) -> None:
    origin.route("/robots.txt", static(b"User-agent: *\nDisallow: /private\n"))
    async with HttpFetcher(settings()) as http:
        status, body = await http.get_robots(origin.url("/some/page.html?q=1"))
    assert (status, body) == (200, b"User-agent: *\nDisallow: /private\n")
    assert origin.hits["/robots.txt"] == 1


async def test_robots_missing_large_redirected_and_unreachable(origin: Origin) -> None:
    async with HttpFetcher(settings()) as http:
        assert await http.get_robots(origin.url("/")) == (404, b"")

        origin.route("/robots.txt", static(b"#" * (ROBOTS_MAX_BYTES + 100_000)))
        status, body = await http.get_robots(origin.url("/"))
        assert (status, len(body)) == (200, ROBOTS_MAX_BYTES)  # truncated, not refused

        origin.route("/robots.txt", redirect("/robots.txt", 301))
        assert await http.get_robots(origin.url("/")) == (301, b"")
        assert origin.hits["/robots.txt"] == 2 + 6  # five redirects followed, no more

        assert await http.get_robots(f"http://127.0.0.1:{free_port()}/") == (None, b"")
