"""The forward proxy end to end on loopback: methods, persistent connections, framing, streaming,
upstream reuse and the fields a proxy must change (issue 2, section 2)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    Origin,
    ProxyClient,
    RawServer,
    cache_argv,
    open_proxy,
    proxy_client,
    read_head,
    read_request_head,
    read_response,
    request_bytes,
    static,
)


def proxy_port(cache: CacheServer) -> int:
    return cache.address[1]


async def echo(request: web.Request) -> web.Response:
    """Answers with the method and the body it received, uncachable."""
    body = await request.read()
    return web.Response(
        body=f"{request.method} {len(body)} ".encode() + body,
        headers={"Cache-Control": "no-store", "X-Got-Method": request.method},
    )


# -- methods ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def test_method_is_forwarded_with_its_body(
    origin: Origin, client: ProxyClient, method: str
) -> None:
    origin.route("/m", echo)
    payload = b"" if method in ("GET", "HEAD") else f"payload of {method}".encode() * 10
    resp, body = await client.request(method, origin.url("/m"), data=payload or None)
    assert resp.status == 200
    assert resp.headers["X-Got-Method"] == method
    assert origin.hits["/m"] == 1
    seen = origin.requests[-1]
    assert seen.method == method
    if method == "HEAD":
        assert body == b""
        assert resp.headers["Content-Length"] == str(len(b"HEAD 0 "))
    else:
        assert body == f"{method} {len(payload)} ".encode() + payload


# -- persistent connections, HTTP/1.0 and pipelining -------------------------------------------


async def test_http11_keep_alive_serves_several_requests_on_one_connection(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/k", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        for i in range(4):
            body = f"request {i}".encode()
            writer.write(request_bytes("POST", origin.url("/k"), body=body))
            resp = await read_response(reader)
            assert resp.status == 200
            assert resp.body == b"POST %d " % len(body) + body
            assert (resp.get("Connection") or "").lower() != "close"
        # A GET on the same connection as well (the cache path, not the forwarding one).
        writer.write(request_bytes("GET", origin.url("/k")))
        resp = await read_response(reader)
        assert resp.body == b"GET 0 "
    finally:
        writer.close()
    assert origin.hits["/k"] == 5
    assert len(cache.connections) <= 1


async def test_http10_client_gets_the_response_then_a_close(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/ten", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(request_bytes("GET", origin.url("/ten"), version="1.0"))
        resp = await read_response(reader)
        assert resp.status == 200
        assert resp.body == b"GET 0 "
        async with asyncio.timeout(3):
            assert await reader.read() == b"", "an HTTP/1.0 connection must close after it"
    finally:
        writer.close()
    assert origin.requests[-1].headers["Via"] == "1.0 test-cache"


async def test_http10_keep_alive_client_keeps_its_connection(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/ten-ka", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        for i in range(3):
            body = b"x" * (i + 1)
            writer.write(
                request_bytes(
                    "POST",
                    origin.url("/ten-ka"),
                    version="1.0",
                    headers=[("Connection", "keep-alive")],
                    body=body,
                )
            )
            resp = await read_response(reader)
            assert resp.status == 200
            assert resp.body == b"POST %d " % len(body) + body
            assert (resp.get("Connection") or "").lower() == "keep-alive"
    finally:
        writer.close()
    assert origin.hits["/ten-ka"] == 3


async def test_pipelined_requests_are_answered_in_order(origin: Origin, cache: CacheServer) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.3)
        return web.Response(text="first", headers={"Cache-Control": "no-store"})

    async def middle(request: web.Request) -> web.Response:
        return web.Response(text=f"second {await request.text()}")

    async def fast(request: web.Request) -> web.Response:
        return web.Response(text="third", headers={"Cache-Control": "no-store"})

    origin.route("/p1", slow)
    origin.route("/p2", middle)
    origin.route("/p3", fast)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes("GET", origin.url("/p1"))
            + request_bytes("POST", origin.url("/p2"), body=b"with a body")
            + request_bytes("GET", origin.url("/p3"))
        )
        bodies = [(await read_response(reader)).body for _ in range(3)]
    finally:
        writer.close()
    assert bodies == [b"first", b"second with a body", b"third"]


async def test_pipelined_hits_of_all_sizes_are_answered_in_order(
    origin: Origin, cache: CacheServer
) -> None:
    """Hits answered in the parser callback: small bodies joined to their head, larger ones
    written gathered with it (and the largest in two writes); pipelined, in order, whole."""
    sizes = [10, 5000, 100, 16384, 70000, 4096, 4095]
    bodies = {n: hashlib.sha256(str(n).encode()).digest() * (n // 32 + 1) for n in sizes}
    for n in sizes:
        origin.route(f"/hot/{n}", static(bodies[n][:n], {"Cache-Control": "max-age=60"}))
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        for _ in range(2):  # stored, then hot
            for n in sizes:
                writer.write(request_bytes("GET", origin.url(f"/hot/{n}")))
                assert (await read_response(reader)).body == bodies[n][:n]
        order = sizes * 3
        writer.write(b"".join(request_bytes("GET", origin.url(f"/hot/{n}")) for n in order))
        answers = [await read_response(reader) for _ in order]
    finally:
        writer.close()
    assert [a.body for a in answers] == [bodies[n][:n] for n in order]
    assert all("hit" in (a.get("Cache-Status") or "") for a in answers)
    assert all(origin.hits[f"/hot/{n}"] == 1 for n in sizes)


# -- framing both ways -------------------------------------------------------------------------


async def test_chunked_upload_arrives_intact(origin: Origin, cache: CacheServer) -> None:
    seen: dict[str, object] = {}

    async def upload(request: web.Request) -> web.Response:
        data = await request.read()
        seen["body"] = data
        seen["te"] = request.headers.get("Transfer-Encoding")
        seen["cl"] = request.headers.get("Content-Length")
        return web.Response(text=hashlib.sha256(data).hexdigest())

    origin.route("/up", upload)
    pieces = [b"a" * 1, b"hello chunked world", os.urandom(100_000), b"\r\n0\r\n", b"end"]
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes("POST", origin.url("/up"), headers=[("Transfer-Encoding", "chunked")])
            + chunked
        )
        resp = await read_response(reader)
        # The connection stays usable after a chunked request body.
        writer.write(request_bytes("POST", origin.url("/up"), body=b"next"))
        second = await read_response(reader)
    finally:
        writer.close()
    whole = b"".join(pieces)
    assert resp.status == 200
    assert resp.text == hashlib.sha256(whole).hexdigest()
    assert seen["body"] == b"next"
    assert second.text == hashlib.sha256(b"next").hexdigest()
    assert origin.hits["/up"] == 2


async def test_chunked_upload_is_sent_upstream_with_one_framing(
    origin: Origin, cache: CacheServer
) -> None:
    seen: list[tuple[str | None, str | None, bytes]] = []

    async def upload(request: web.Request) -> web.Response:
        data = await request.read()
        seen.append(
            (request.headers.get("Transfer-Encoding"), request.headers.get("Content-Length"), data)
        )
        return web.Response(text="ok")

    origin.route("/up1", upload)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes("PUT", origin.url("/up1"), headers=[("Transfer-Encoding", "chunked")])
            + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        )
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 200
    te, cl, data = seen[0]
    assert data == b"hello world"
    assert (te is None) != (cl is None), "exactly one of Transfer-Encoding and Content-Length"


def chunked_origin(parts: list[bytes]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Cache-Control": "no-store"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for part in parts:
            await resp.write(part)
        await resp.write_eof()
        return resp

    return handler


PARTS = [b"alpha-", b"beta-" * 1000, os.urandom(70_000).hex().encode(), b"-omega"]


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_chunked_response_reaches_http11_client_chunked(
    origin: Origin, cache: CacheServer, method: str
) -> None:
    origin.route("/chunks", chunked_origin(PARTS))
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        body = b"b" if method == "POST" else b""
        writer.write(request_bytes(method, origin.url("/chunks"), body=body))
        resp = await read_response(reader)
        assert resp.chunked, f"expected a chunked response, got {resp.fields}"
        assert not resp.has("Content-Length")
        assert resp.body == b"".join(PARTS)
        # Still a persistent connection.
        writer.write(request_bytes(method, origin.url("/chunks"), body=body))
        again = await read_response(reader)
        assert again.body == b"".join(PARTS)
    finally:
        writer.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_chunked_response_reaches_http10_client_close_delimited(
    origin: Origin, cache: CacheServer, method: str
) -> None:
    origin.route("/chunks10", chunked_origin(PARTS))
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        body = b"b" if method == "POST" else b""
        writer.write(
            request_bytes(
                method,
                origin.url("/chunks10"),
                version="1.0",
                headers=[("Connection", "keep-alive")],
                body=body,
            )
        )
        async with asyncio.timeout(5):
            status, _, fields = await read_head(reader)
            rest = await reader.read(-1)
    finally:
        writer.close()
    names = {n.lower() for n, _ in fields}
    assert status == 200
    assert "transfer-encoding" not in names, "HTTP/1.0 has no chunked coding"
    assert "content-length" not in names
    assert rest == b"".join(PARTS), "the body ends where the connection closes"


async def test_close_delimited_origin_response_is_reframed(cache: CacheServer) -> None:
    """An HTTP/1.0 origin ends its body by closing: a 1.1 client gets it chunked, complete."""
    body = b"from an old origin " * 500

    async def old(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request_head(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nCache-Control: no-store\r\n\r\n")
        for i in range(0, len(body), 1000):
            writer.write(body[i : i + 1000])
            await writer.drain()
        writer.close()

    server = await RawServer(old).start()
    try:
        reader, writer = await open_proxy(proxy_port(cache))
        try:
            for _ in range(2):
                writer.write(request_bytes("GET", server.url("/old")))
                resp = await read_response(reader)
                assert resp.status == 200
                assert resp.chunked
                assert resp.body == body
        finally:
            writer.close()
    finally:
        await server.stop()
    assert server.accepted == 2


async def test_http11_client_asking_to_close_gets_a_close(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/bye", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(request_bytes("GET", origin.url("/bye"), headers=[("Connection", "close")]))
        resp = await read_response(reader)
        assert resp.status == 200
        assert (resp.get("Connection") or "").lower() == "close"
        async with asyncio.timeout(3):
            assert await reader.read() == b""
    finally:
        writer.close()


async def test_expect_100_continue(origin: Origin, cache: CacheServer) -> None:
    origin.route("/continue", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes(
                "PUT",
                origin.url("/continue"),
                headers=[("Content-Length", "5"), ("Expect", "100-continue")],
            )
        )
        async with asyncio.timeout(3):
            status, _, _ = await read_head(reader)
        assert status == 100
        writer.write(b"hello")
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 200
    assert resp.body == b"PUT 5 hello"


# -- streaming ---------------------------------------------------------------------------------


async def test_request_body_is_streamed_to_the_origin(origin: Origin, cache: CacheServer) -> None:
    half = 64 * 1024
    got_first = asyncio.Event()

    async def upload(request: web.Request) -> web.Response:
        first = await request.content.readexactly(half)
        got_first.set()
        rest = await request.content.read()
        return web.Response(
            text=f"{len(first) + len(rest)} {hashlib.sha256(first + rest).hexdigest()}"
        )

    origin.route("/stream-up", upload)
    data = os.urandom(2 * half)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes(
                "POST", origin.url("/stream-up"), headers=[("Content-Length", str(len(data)))]
            )
            + data[:half]
        )
        await writer.drain()
        # The origin must have the first half while the client still holds the second.
        async with asyncio.timeout(3):
            await got_first.wait()
        writer.write(data[half:])
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 200
    assert resp.text == f"{len(data)} {hashlib.sha256(data).hexdigest()}"


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_response_is_streamed_to_the_client_as_it_arrives(
    origin: Origin, cache: CacheServer, method: str
) -> None:
    client_has_first = asyncio.Event()
    first, second = b"F" * 10_000, b"S" * 10_000

    async def dribble(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(
            headers={"Cache-Control": "max-age=60", "Content-Length": str(len(first + second))}
        )
        await resp.prepare(request)
        await resp.write(first)
        async with asyncio.timeout(3):
            await client_has_first.wait()
        await resp.write(second)
        await resp.write_eof()
        return resp

    origin.route("/dribble", dribble)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes(method, origin.url("/dribble"), body=b"b" if method == "POST" else b"")
        )
        async with asyncio.timeout(3):
            _, _, fields = await read_head(reader)
            got = await reader.readexactly(len(first))
        assert got == first
        client_has_first.set()
        async with asyncio.timeout(3):
            assert await reader.readexactly(len(second)) == second
    finally:
        client_has_first.set()
        writer.close()
    assert dict((n.lower(), v) for n, v in fields)["content-length"] == "20000"


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_slow_client_holds_back_the_origin(
    origin: Origin, cache: CacheServer, method: str
) -> None:
    """While the client reads nothing, the origin gets only a bounded way ahead of it."""
    total, block = 128 << 20, os.urandom(256 << 10)
    written = 0

    async def firehose(request: web.Request) -> web.StreamResponse:
        nonlocal written
        await request.read()
        resp = web.StreamResponse(
            headers={"Content-Length": str(total), "Cache-Control": "no-store"}
        )
        await resp.prepare(request)
        for _ in range(total // len(block)):
            await resp.write(block)
            written += len(block)
        await resp.write_eof()
        return resp

    origin.route("/firehose", firehose)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes(method, origin.url("/firehose"), body=b"b" if method == "POST" else b"")
        )
        async with asyncio.timeout(3):
            await read_head(reader)
        await asyncio.sleep(1.0)  # the client reads nothing for a second
        ahead = written
        received = 0
        async with asyncio.timeout(20):
            while received < total:
                chunk = await reader.read(1 << 20)
                assert chunk, "the response ended early"
                received += len(chunk)
    finally:
        writer.close()
    assert received == total
    assert ahead < 48 << 20, f"the origin got {ahead >> 20} MiB ahead of a stalled client"


# -- upstream connection reuse -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cachable", "uncachable", "post"])
async def test_upstream_connection_is_reused(
    origin: Origin, client: ProxyClient, kind: str
) -> None:
    ports: list[int] = []

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        assert request.transport is not None
        ports.append(request.transport.get_extra_info("peername")[1])
        cc = "max-age=60" if kind == "cachable" else "no-store"
        return web.Response(text=request.path, headers={"Cache-Control": cc})

    for i in range(5):
        origin.route(f"/reuse{i}", handler)
    for i in range(5):
        if kind == "post":
            resp, body = await client.request("POST", origin.url(f"/reuse{i}"), data=b"x")
        else:
            resp, body = await client.get(origin.url(f"/reuse{i}"))
        assert resp.status == 200
        assert body == f"/reuse{i}".encode()
    assert len(ports) == 5
    assert len(set(ports)) == 1, f"5 sequential requests used {len(set(ports))} connections"


# -- fields a proxy changes --------------------------------------------------------------------


async def test_hop_by_hop_request_fields_are_removed(origin: Origin, cache: CacheServer) -> None:
    origin.route("/hop", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes(
                "GET",
                origin.url("/hop"),
                headers=[
                    ("Connection", "keep-alive, X-Named-Hop"),
                    ("X-Named-Hop", "secret"),
                    ("Keep-Alive", "timeout=5"),
                    ("Proxy-Connection", "keep-alive"),
                    ("Proxy-Authorization", "Basic dXNlcjpwYXNz"),
                    ("TE", "trailers"),
                    ("Trailer", "X-Checksum"),
                    ("Upgrade", "h2c"),
                    ("X-End-To-End", "kept"),
                ],
            )
        )
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 200
    seen = origin.requests[-1].headers
    for name in (
        "X-Named-Hop",
        "Keep-Alive",
        "Proxy-Connection",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Upgrade",
    ):
        assert name not in seen, f"{name} was forwarded: {dict(seen)}"
    for token in (seen.get("Connection") or "").lower().split(","):
        assert token.strip() in ("", "keep-alive", "close"), seen.get("Connection")
    assert seen["X-End-To-End"] == "kept"


async def test_hop_by_hop_response_fields_are_removed(cache: CacheServer) -> None:
    body = b"hello from a chatty origin"

    async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request_head(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\n"
            b"Connection: keep-alive, X-Named-Hop\r\n"
            b"X-Named-Hop: secret\r\n"
            b"Keep-Alive: timeout=5, max=100\r\n"
            b"Proxy-Connection: keep-alive\r\n"
            b"Proxy-Authenticate: Basic realm=origin\r\n"
            b"Trailer: X-Checksum\r\n"
            b"Upgrade: h2c\r\n"
            b"X-End-To-End: kept\r\n"
            b"Cache-Control: no-store\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
        )
        await writer.drain()
        await reader.read()

    server = await RawServer(chatty).start()
    try:
        reader, writer = await open_proxy(proxy_port(cache))
        try:
            writer.write(request_bytes("GET", server.url("/chatty")))
            resp = await read_response(reader)
        finally:
            writer.close()
    finally:
        await server.stop()
    assert resp.status == 200
    assert resp.body == body
    for name in (
        "X-Named-Hop",
        "Keep-Alive",
        "Proxy-Connection",
        "Proxy-Authenticate",
        "Trailer",
        "Upgrade",
    ):
        assert not resp.has(name), f"{name} reached the client: {resp.fields}"
    for token in (resp.get("Connection") or "").lower().split(","):
        assert token.strip() in ("", "keep-alive", "close"), resp.get("Connection")
    assert resp.get("X-End-To-End") == "kept"


async def test_upgrade_request_is_served_as_plain_http_and_the_connection_goes_on(
    origin: Origin, cache: CacheServer
) -> None:
    """The proxy does not do Upgrade: it drops the field, and the connection stays HTTP/1.1."""
    origin.route("/up-h2c", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes(
                "GET",
                origin.url("/up-h2c"),
                headers=[
                    ("Connection", "Upgrade, HTTP2-Settings"),
                    ("Upgrade", "h2c"),
                    ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"),
                ],
            )
        )
        first = await read_response(reader)
        assert first.status == 200
        writer.write(request_bytes("POST", origin.url("/up-h2c"), body=b"after"))
        second = await read_response(reader, within=3)
    finally:
        writer.close()
    assert "Upgrade" not in origin.requests[0].headers
    assert "HTTP2-Settings" not in origin.requests[0].headers
    assert second.status == 200
    assert second.body == b"POST 5 after"


async def test_host_is_rewritten_to_the_target_authority(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/host", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes("GET", origin.url("/host"), headers=[("Host", "elsewhere.example")])
        )
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 200
    assert origin.requests[-1].headers.getall("Host") == [f"127.0.0.1:{origin.port}"]


async def test_via_is_added_to_requests_and_responses(origin: Origin, client: ProxyClient) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            text="v", headers={"Via": "1.1 origin-side", "Cache-Control": "no-store"}
        )

    origin.route("/via", handler)
    resp, _ = await client.get(origin.url("/via"), headers={"Via": "1.0 browser-side"})
    assert resp.status == 200
    assert origin.requests[-1].headers["Via"] == "1.0 browser-side, 1.1 test-cache"
    assert resp.headers["Via"] == "1.1 origin-side, 1.1 test-cache"
    resp, _ = await client.request("POST", origin.url("/via"), data=b"p")
    assert origin.requests[-1].headers["Via"] == "1.1 test-cache"
    assert resp.headers["Via"].endswith("1.1 test-cache")


async def test_x_forwarded_for_on_off_delete(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    origin.route("/xff", echo)
    expected = {"on": "192.0.2.7, 127.0.0.1", "off": "192.0.2.7", "delete": None}
    for mode, want in expected.items():
        cache = await make_cache(
            server={"name": f"xff-{mode}"},
            access={"x_forwarded_for": mode},
            cache={"dir": str(tmp_path / f"cache-{mode}")},
            log={"access_log": "none"},
        )
        async with proxy_client(cache) as client:
            resp, _ = await client.get(origin.url("/xff"), headers={"X-Forwarded-For": "192.0.2.7"})
            assert resp.status == 200
            assert origin.requests[-1].headers.get("X-Forwarded-For") == want, mode
            # And without one from the client.
            await client.request("POST", origin.url("/xff"), data=b"p")
            seen = origin.requests[-1].headers.get("X-Forwarded-For")
            assert seen == ("127.0.0.1" if mode == "on" else None), mode
    assert origin.hits["/xff"] == 6


# -- Max-Forwards, TRACE and loops ---------------------------------------------------------------


async def test_options_with_max_forwards_zero_is_answered_by_the_proxy(
    origin: Origin, client: ProxyClient
) -> None:
    origin.route("/opt", echo)
    resp, _ = await client.request("OPTIONS", origin.url("/opt"), headers={"Max-Forwards": "0"})
    assert resp.status == 200
    assert origin.hits["/opt"] == 0
    assert "test-cache" in resp.headers["Via"]
    assert "GET" in resp.headers.get("Allow", "")


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE"])
async def test_max_forwards_is_decremented(origin: Origin, cache: CacheServer, method: str) -> None:
    origin.route("/mf", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(request_bytes(method, origin.url("/mf"), headers=[("Max-Forwards", "2")]))
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 200
    assert origin.hits["/mf"] == 1
    assert origin.requests[-1].headers["Max-Forwards"] == "1"


async def test_trace_with_max_forwards_zero_is_echoed(origin: Origin, cache: CacheServer) -> None:
    origin.route("/trace", echo)
    reader, writer = await open_proxy(proxy_port(cache))
    try:
        writer.write(
            request_bytes(
                "TRACE",
                origin.url("/trace"),
                headers=[("Max-Forwards", "0"), ("X-Trace-Probe", "42")],
            )
        )
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 200
    assert origin.hits["/trace"] == 0
    assert (resp.get("Content-Type") or "").startswith("message/http")
    assert resp.text.startswith(f"TRACE {origin.url('/trace')} HTTP/1.1\r\n")
    assert "X-Trace-Probe: 42" in resp.text


@pytest.mark.parametrize("via", ["1.1 test-cache", "1.0 far-away, 1.1 test-cache (Harvest)"])
async def test_request_already_via_us_is_a_loop(
    origin: Origin, client: ProxyClient, via: str
) -> None:
    origin.route("/loop", echo)
    resp, body = await client.get(origin.url("/loop"), headers={"Via": via})
    assert resp.status == 403
    assert b"loop" in body
    assert origin.hits["/loop"] == 0


async def test_via_of_another_cache_is_not_a_loop(origin: Origin, client: ProxyClient) -> None:
    origin.route("/noloop", echo)
    resp, _ = await client.get(origin.url("/noloop"), headers={"Via": "1.1 test-cache-2"})
    assert resp.status == 200
    assert origin.hits["/noloop"] == 1


# -- a large response through a real cache process, in bounded memory --------------------------

LARGE = 1 << 30
BLOCK = 1 << 20
RSS_LIMIT_MIB = 200


def vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


class _Counter(asyncio.Protocol):
    """Counts response bytes without keeping them, so the test itself stays small."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.in_head = True
        self.body = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        if self.in_head:
            self.head += data
            if b"\r\n\r\n" in self.head:
                head, _, rest = bytes(self.head).partition(b"\r\n\r\n")
                self.head = bytearray(head)
                self.in_head = False
                self.body += len(rest)
            elif len(self.head) > 65536:
                raise AssertionError("no end of the response head in 64 KiB")
        else:
            self.body += len(data)
        if self.body >= LARGE and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


@pytest.mark.slow
async def test_one_gib_response_streams_through_in_bounded_memory(
    origin: Origin, tmp_path: Path
) -> None:
    block = os.urandom(BLOCK)

    async def huge(request: web.Request) -> web.StreamResponse:
        # Cachable, but over max_object_mb: passed through, not stored.
        resp = web.StreamResponse(
            headers={"Content-Length": str(LARGE), "Cache-Control": "max-age=600"}
        )
        await resp.prepare(request)
        for _ in range(LARGE // BLOCK):
            await resp.write(block)
        await resp.write_eof()
        return resp

    origin.route("/huge", huge)
    config = tmp_path / "harvest.toml"
    config.write_text(
        '[server]\nname = "big-cache"\n'
        "[cache]\nmax_object_mb = 16\nmemory_mb = 32\ndisk_mb = 64\n"
        '[log]\naccess_log = "none"\nlevel = "info"\n'
        '[dns]\nhosts_file = "none"\nnameservers = ["127.0.0.1:9"]\n'
    )
    argv = await asyncio.to_thread(
        cache_argv,
        config,
        "--listen",
        "127.0.0.1:0",
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stderr is not None
        port = 0
        async with asyncio.timeout(15):
            while port == 0:
                line = await proc.stderr.readline()
                assert line, "the cache exited before listening"
                m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", line)
                if m:
                    port = int(m.group(1))
        loop = asyncio.get_running_loop()
        transport, counter = await loop.create_connection(_Counter, "127.0.0.1", port)
        started = time.monotonic()
        transport.write(request_bytes("GET", origin.url("/huge")))
        async with asyncio.timeout(50):
            await counter.done
        elapsed = time.monotonic() - started
        transport.close()
        peak_mib = vm_hwm_kib(proc.pid) / 1024
        print(
            f"\n1 GiB through the cache in {elapsed:.1f} s"
            f" ({LARGE / (1 << 20) / elapsed:.0f} MiB/s), peak RSS {peak_mib:.0f} MiB"
        )
        assert bytes(counter.head).startswith(b"HTTP/1.1 200")
        assert counter.body == LARGE, bytes(counter.head)
        assert peak_mib < RSS_LIMIT_MIB
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(10):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
