"""Safety by default (issue 2, section 4): who may use the proxy, where it may go, the limits on
what a client may send, and strict framing so that no request is smuggled through it."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    Origin,
    RawServer,
    closed_by_peer,
    open_proxy,
    proxy_client,
    read_response,
    request_bytes,
    stop_and_read_log,
    wait_until,
)


async def ok(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(text="ok", headers={"Cache-Control": "no-store"})


async def exchange(
    cache: CacheServer, data: bytes, *, expect_close: bool = True
) -> tuple[int, bytes, bool]:
    """Send ``data`` on a new connection: the status, the body and, if ``expect_close``,
    whether the proxy then closed the connection (otherwise it is not waited for)."""
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(data)
        resp = await read_response(reader)
        closed = await closed_by_peer(reader, within=3.0) if expect_close else False
    finally:
        writer.close()
    return resp.status, resp.body, closed


async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A RawServer origin that reads whatever comes and never answers."""
    while await reader.read(65536):
        pass


# -- who may use it, and where it may go -------------------------------------------------------


async def test_client_outside_the_allow_list_gets_403(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/acl", ok)
    cache = await make_cache(access={"allow": ["10.0.0.0/8", "192.168.0.0/16"]})
    async with proxy_client(cache) as client:
        resp, body = await client.get(origin.url("/acl"))
    assert resp.status == 403
    assert b"denied" in body.lower()
    assert origin.hits["/acl"] == 0


async def test_client_outside_the_allow_list_cannot_connect_either(make_cache: MakeCache) -> None:
    cache = await make_cache(access={"allow": ["10.0.0.0/8"], "connect_ports": ["1-65535"]})
    target = await RawServer(sink).start()
    try:
        status, _, _ = await exchange(
            cache,
            f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(),
            expect_close=False,
        )
    finally:
        await target.stop()
    assert status == 403
    assert target.accepted == 0


async def test_loopback_is_allowed_by_default(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/acl-default", ok)
    cache = await make_cache()
    async with proxy_client(cache) as client:
        resp, _ = await client.get(origin.url("/acl-default"))
    assert resp.status == 200


async def test_port_outside_the_default_safe_ports_gets_403(cache: CacheServer) -> None:
    # Port 25 (SMTP) is not a safe port; the proxy must refuse before connecting anywhere.
    status, body, _ = await exchange(
        cache, request_bytes("GET", "http://127.0.0.1:25/"), expect_close=False
    )
    assert status == 403
    assert b"25" in body


async def test_port_outside_configured_safe_ports_gets_403(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/port", ok)
    cache = await make_cache(access={"safe_ports": ["80", "443"]})
    async with proxy_client(cache) as client:
        resp, body = await client.get(origin.url("/port"))
        post, _ = await client.request("POST", origin.url("/port"), data=b"x")
    assert resp.status == 403
    assert post.status == 403
    assert str(origin.port).encode() in body
    assert origin.hits["/port"] == 0


# -- limits --------------------------------------------------------------------------------------


async def test_request_line_too_long_gets_414(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/long", ok)
    cache = await make_cache(server={"max_request_line": 1024})
    status, _, closed = await exchange(
        cache, request_bytes("GET", origin.url("/long?" + "q" * 2000))
    )
    assert status == 414
    assert closed
    assert origin.hits["/long"] == 0


async def test_request_line_within_the_limit_passes(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/long", ok)
    cache = await make_cache(server={"max_request_line": 1024})
    status, _, _ = await exchange(
        cache, request_bytes("GET", origin.url("/long?" + "q" * 500)), expect_close=False
    )
    assert status == 200


@pytest.mark.parametrize(
    ("field_count", "split"),
    [(3, False), (3, True), (8, False)],
    ids=["8k-one-write", "8k-dribbled", "21k-one-write"],
)
async def test_head_too_large_gets_431(
    origin: Origin, make_cache: MakeCache, field_count: int, split: bool
) -> None:
    origin.route("/big-head", ok)
    cache = await make_cache(server={"max_header_bytes": 4096})
    fields = [(f"X-Filler-{i}", "f" * 2700) for i in range(field_count)]
    data = request_bytes("GET", origin.url("/big-head"), headers=fields)
    reader, writer = await open_proxy(cache.address[1])
    try:
        resp = None
        if split:
            # Like a client uploading a head slowly: it stops once an answer comes.
            for i in range(0, len(data), 1000):
                writer.write(data[i : i + 1000])
                try:
                    resp = await read_response(reader, within=0.02)
                    break
                except TimeoutError:
                    continue
        else:
            writer.write(data)
        resp = resp or await read_response(reader)
        closed = await closed_by_peer(reader)
    finally:
        writer.close()
    assert resp.status == 431, f"a {len(data)}-byte head, limit 4096: {resp}"
    assert closed
    assert origin.hits["/big-head"] == 0


async def test_too_many_fields_gets_431(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/fields", ok)
    cache = await make_cache(server={"max_header_count": 20})
    fields = [(f"X-Field-{i}", str(i)) for i in range(30)]
    status, _, closed = await exchange(
        cache, request_bytes("GET", origin.url("/fields"), headers=fields)
    )
    assert status == 431
    assert closed
    assert origin.hits["/fields"] == 0


async def test_declared_body_too_large_gets_413(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/body", ok)
    cache = await make_cache(server={"max_body_bytes": 1000})
    status, _, closed = await exchange(
        cache,
        request_bytes("POST", origin.url("/body"), headers=[("Content-Length", "5000")])
        + b"x" * 5000,
    )
    assert status == 413
    assert closed
    assert origin.hits["/body"] == 0


async def test_body_at_the_limit_passes(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/body", ok)
    cache = await make_cache(server={"max_body_bytes": 1000})
    status, body, _ = await exchange(
        cache, request_bytes("POST", origin.url("/body"), body=b"x" * 1000), expect_close=False
    )
    assert status == 200
    assert body == b"ok"


async def test_chunked_body_too_large_gets_413_and_the_upstream_side_is_closed(
    make_cache: MakeCache,
) -> None:
    """The body streams, so the origin may see its start; but the proxy must then close that
    connection, not leave the origin waiting for the rest of a request that never comes."""

    server = await RawServer(sink).start()
    cache = await make_cache(server={"max_body_bytes": 1000})
    chunk = b"y" * 600
    body = b"%x\r\n%b\r\n" % (len(chunk), chunk) * 3 + b"0\r\n\r\n"
    try:
        status, _, closed = await exchange(
            cache,
            request_bytes("POST", server.url("/sink"), headers=[("Transfer-Encoding", "chunked")])
            + body,
        )
        assert status == 413
        assert closed
        await wait_until(lambda: server.closed == server.accepted, within=3)
    finally:
        await server.stop()


async def test_slow_loris_gets_408_and_a_close(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/loris", ok)
    cache = await make_cache(server={"header_timeout": 0.5})
    reader, writer = await open_proxy(cache.address[1])
    started = time.monotonic()
    try:
        writer.write(f"GET {origin.url('/loris')} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
        # Keep dribbling a byte now and then: the deadline is for the whole head.
        for _ in range(3):
            await asyncio.sleep(0.2)
            if writer.is_closing():
                break
            writer.write(b"X")
        resp = await read_response(reader, within=3)
        closed = await closed_by_peer(reader)
    finally:
        writer.close()
    elapsed = time.monotonic() - started
    assert resp.status == 408
    assert closed
    assert 0.4 < elapsed < 2.5
    assert origin.hits["/loris"] == 0


async def test_idle_keep_alive_connection_is_closed(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/idle", ok)
    cache = await make_cache(server={"idle_timeout": 0.5})
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/idle")))
        resp = await read_response(reader)
        assert resp.status == 200
        started = time.monotonic()
        assert await closed_by_peer(reader, within=3)
        assert time.monotonic() - started > 0.3
    finally:
        writer.close()


async def test_connection_that_never_speaks_is_closed(make_cache: MakeCache) -> None:
    cache = await make_cache(server={"idle_timeout": 0.5, "header_timeout": 0.5})
    reader, writer = await open_proxy(cache.address[1])
    try:
        assert await closed_by_peer(reader, within=3)
    finally:
        writer.close()


async def test_busy_keep_alive_connection_is_not_cut_by_the_idle_timeout(
    origin: Origin, make_cache: MakeCache
) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.8)
        return web.Response(text="slow but fine", headers={"Cache-Control": "no-store"})

    origin.route("/slow", slow)
    cache = await make_cache(server={"idle_timeout": 0.3})
    reader, writer = await open_proxy(cache.address[1])
    try:
        for _ in range(2):
            writer.write(request_bytes("GET", origin.url("/slow")))
            resp = await read_response(reader)
            assert resp.body == b"slow but fine"
    finally:
        writer.close()


async def test_max_connections(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/mc", ok)
    cache = await make_cache(server={"max_connections": 2})
    held = [await open_proxy(cache.address[1]) for _ in range(2)]
    try:
        for reader, writer in held:
            writer.write(request_bytes("GET", origin.url("/mc")))
            assert (await read_response(reader)).status == 200
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(request_bytes("GET", origin.url("/mc")))
            assert await closed_by_peer(reader, within=3), "a third connection must be refused"
        finally:
            writer.close()
        assert origin.hits["/mc"] == 2
        # The two held connections still work, and once one goes a new one is served.
        reader, writer = held[0]
        writer.write(request_bytes("GET", origin.url("/mc")))
        assert (await read_response(reader)).status == 200
        held[1][1].close()
        await wait_until(lambda: len(cache.connections) < 2, within=3)
        status, _, _ = await exchange(
            cache, request_bytes("GET", origin.url("/mc"), headers=[("Connection", "close")])
        )
        assert status == 200
    finally:
        for _, writer in held:
            writer.close()


# -- malformed requests: 400 and a closed connection ----------------------------------------------


def malformed_cases(port: int) -> dict[str, bytes]:
    url = f"http://127.0.0.1:{port}/bad"
    host = f"Host: 127.0.0.1:{port}\r\n"
    return {
        "bad-request-line": b"THIS IS NOT HTTP\r\n\r\n",
        "bad-version": f"GET {url} HTTP/1.1 trailing\r\n{host}\r\n".encode(),
        "bad-chunk-size": (
            f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n"
            "zz\r\nhello\r\n0\r\n\r\n"
        ).encode(),
        "conflicting-content-length": (
            f"POST {url} HTTP/1.1\r\n{host}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"
        ).encode(),
        "content-length-list": (
            f"POST {url} HTTP/1.1\r\n{host}Content-Length: 5, 6\r\n\r\nhello!"
        ).encode(),
        "content-length-and-transfer-encoding": (
            f"POST {url} HTTP/1.1\r\n{host}Content-Length: 5\r\n"
            "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ).encode(),
        "unknown-transfer-coding": (
            f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: identity\r\n\r\nhello"
        ).encode(),
        "obs-fold": f"GET {url} HTTP/1.1\r\n{host}X-Folded: one\r\n two\r\n\r\n".encode(),
        "bare-lf": f"GET {url} HTTP/1.1\n{host.rstrip()}\nX-A: b\n\n".encode(),
        "bare-lf-in-fields": f"GET {url} HTTP/1.1\r\n{host}X-A: b\nX-B: c\r\n\r\n".encode(),
        "bare-cr": f"GET {url} HTTP/1.1\r\n{host}X-A: b\rX-B: c\r\n\r\n".encode(),
        "space-before-colon": f"GET {url} HTTP/1.1\r\n{host}X-A : b\r\n\r\n".encode(),
        "relative-target": f"GET /bad HTTP/1.1\r\n{host}\r\n".encode(),
        "signed-content-length": (
            f"POST {url} HTTP/1.1\r\n{host}Content-Length: +5\r\n\r\nhello"
        ).encode(),
        "negative-content-length": (
            f"POST {url} HTTP/1.1\r\n{host}Content-Length: -1\r\n\r\nhello"
        ).encode(),
        "content-length-with-letters": (
            f"POST {url} HTTP/1.1\r\n{host}Content-Length: 5x\r\n\r\nhello"
        ).encode(),
        "huge-content-length": (
            f"POST {url} HTTP/1.1\r\n{host}Content-Length: 99999999999999999999999\r\n\r\n"
        ).encode(),
        "chunked-twice": (
            f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"
        ).encode(),
        "chunked-not-last": (
            f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"
        ).encode(),
        "folded-transfer-encoding": (
            f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"
        ).encode(),
        "chunk-size-overflow": (
            f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n"
            "fffffffffffffffff\r\nhello\r\n0\r\n\r\n"
        ).encode(),
        "chunk-size-0x": (
            f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n"
            "0x5\r\nhello\r\n0\r\n\r\n"
        ).encode(),
        "chunk-without-crlf": (
            f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n"
        ).encode(),
        "nul-in-a-field": f"GET {url} HTTP/1.1\r\n{host}X-A: b\x00c\r\n\r\n".encode(),
        "space-in-a-field-name": f"GET {url} HTTP/1.1\r\n{host}X A: b\r\n\r\n".encode(),
        "field-without-colon": f"GET {url} HTTP/1.1\r\n{host}X-A\r\n\r\n".encode(),
        "cr-in-the-target": f"GET {url}\rx HTTP/1.1\r\n{host}\r\n".encode(),
        "tab-separated-request-line": f"GET\t{url}\tHTTP/1.1\r\n{host}\r\n".encode(),
        "port-out-of-range": (
            b"GET http://127.0.0.1:99999/bad HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n"
        ),
    }


@pytest.mark.parametrize("case", list(malformed_cases(1)))
async def test_malformed_request_gets_400_and_a_close(cache: CacheServer, case: str) -> None:
    server = await RawServer(sink).start()
    try:
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(malformed_cases(server.port)[case])
            resp = await read_response(reader)
            closed = await closed_by_peer(reader)
        finally:
            writer.close()
        accepted = server.accepted
    finally:
        await server.stop()
    assert resp.status == 400, resp
    assert closed, "the connection must be closed after a malformed request"
    if not case.startswith(("bad-chunk", "chunk-")):
        # (a streamed body's head may be forwarded before the body's error shows: the
        # upstream side is closed then, see below)
        assert accepted == 0, "nothing of a malformed head may reach the origin"


async def test_malformed_request_after_a_good_one_answers_the_good_one_first(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/good", ok)
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/good")) + b"NOT HTTP AT ALL\r\n\r\n")
        first = await read_response(reader)
        second = await read_response(reader)
        closed = await closed_by_peer(reader)
    finally:
        writer.close()
    assert (first.status, first.body) == (200, b"ok")
    assert second.status == 400
    assert closed


async def test_bad_chunk_size_closes_the_upstream_side_too(make_cache: MakeCache) -> None:
    server = await RawServer(sink).start()
    cache = await make_cache()
    try:
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(
                request_bytes("POST", server.url("/x"), headers=[("Transfer-Encoding", "chunked")])
                + b"5\r\nhello\r\n"
            )
            await writer.drain()
            await asyncio.sleep(0.2)  # the head and the first chunk are forwarded by now
            writer.write(b"zz\r\nbad\r\n0\r\n\r\n")
            resp = await read_response(reader)
            assert await closed_by_peer(reader)
        finally:
            writer.close()
        assert resp.status == 400
        await wait_until(lambda: server.closed == server.accepted, within=3)
    finally:
        await server.stop()


# -- smuggling ---------------------------------------------------------------------------------


def smuggling_cases(port: int) -> dict[str, bytes]:
    url = f"http://127.0.0.1:{port}"
    host = f"Host: 127.0.0.1:{port}\r\n"
    hidden = f"GET {url}/smuggled HTTP/1.1\r\n{host}\r\n"
    return {
        # The front reads Content-Length, the back Transfer-Encoding (or the other way round).
        "CL.TE": (
            f"POST {url}/front HTTP/1.1\r\n{host}Content-Length: {5 + len(hidden)}\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{hidden}"
        ).encode(),
        "TE.CL": (
            f"POST {url}/front HTTP/1.1\r\n{host}Content-Length: 4\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n"
            f"{len(hidden):x}\r\n{hidden}\r\n0\r\n\r\n"
        ).encode(),
        "TE.TE-obfuscated": (
            f"POST {url}/front HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n"
            f"Transfer-Encoding: x-chunked\r\n\r\n0\r\n\r\n{hidden}"
        ).encode(),
        "TE-with-space-before-colon": (
            f"POST {url}/front HTTP/1.1\r\n{host}Content-Length: {5 + len(hidden)}\r\n"
            f"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n{hidden}"
        ).encode(),
        "duplicate-CL": (
            f"POST {url}/front HTTP/1.1\r\n{host}Content-Length: 0\r\n"
            f"Content-Length: {len(hidden)}\r\n\r\n{hidden}"
        ).encode(),
    }


@pytest.mark.parametrize("case", list(smuggling_cases(1)))
async def test_smuggling_attempt_does_not_reach_the_origin(
    origin: Origin, cache: CacheServer, case: str
) -> None:
    origin.route("/front", ok)
    origin.route("/smuggled", ok)
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(smuggling_cases(origin.port)[case])
        resp = await read_response(reader)
        closed = await closed_by_peer(reader)
    finally:
        writer.close()
    # Give a smuggled request time to arrive if one was sent.
    await asyncio.sleep(0.2)
    assert resp.status in (400, 501), resp
    assert closed
    assert origin.hits["/smuggled"] == 0
    assert origin.hits["/front"] == 0


# -- HTTP version and Host (RFC 9112 2.3, 3.2) ------------------------------------------------


def version_and_host_cases(port: int) -> dict[str, tuple[bytes, int]]:
    """A request and the status it must get."""
    url = f"http://127.0.0.1:{port}/front"
    host = f"Host: 127.0.0.1:{port}\r\n"
    return {
        "http-2.0": (f"GET {url} HTTP/2.0\r\n{host}\r\n".encode(), 505),
        "http-0.9": (f"GET {url}\r\n\r\n".encode(), 505),
        "http-2.0-with-body": (
            f"POST {url} HTTP/2.0\r\n{host}Content-Length: 5\r\n\r\nhello".encode(),
            505,
        ),
        "no-host-in-1.1": (f"GET {url} HTTP/1.1\r\nAccept: */*\r\n\r\n".encode(), 400),
        "two-hosts": (f"GET {url} HTTP/1.1\r\n{host}{host}\r\n".encode(), 400),
        "two-hosts-differing": (
            f"GET {url} HTTP/1.1\r\n{host}Host: other.example\r\n\r\n".encode(),
            400,
        ),
        "two-hosts-in-1.0": (f"GET {url} HTTP/1.0\r\n{host}{host}\r\n".encode(), 400),
        # HTTP/1.0 has no Host requirement.
        "no-host-in-1.0": (f"GET {url} HTTP/1.0\r\n\r\n".encode(), 200),
    }


@pytest.mark.parametrize("case", list(version_and_host_cases(1)))
async def test_http_version_and_host_rules(origin: Origin, cache: CacheServer, case: str) -> None:
    origin.route("/front", ok)
    data, status = version_and_host_cases(origin.port)[case]
    got, _, closed = await exchange(cache, data, expect_close=status != 200)
    assert got == status
    if status != 200:
        assert closed, "a refused head closes the connection"
        assert origin.hits["/front"] == 0


async def test_a_refused_version_is_logged_with_its_status(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    data, _ = version_and_host_cases(origin.port)["http-2.0"]
    assert (await exchange(cache, data))[0] == 505
    [line] = await stop_and_read_log(cache)
    assert (line.result, line.status) == ("NONE", 505)


# -- chunk extensions and trailers are bounded like header sections ---------------------------


async def test_endless_chunk_extensions_get_400_and_a_close(make_cache: MakeCache) -> None:
    server = await RawServer(sink).start()
    cache = await make_cache(server={"max_header_bytes": 4096})
    try:
        reader, writer = await open_proxy(cache.address[1])
        try:
            head = request_bytes(
                "POST", server.url("/x"), headers=[("Transfer-Encoding", "chunked")]
            )
            writer.write(head + b"5;name=")
            sent = 0
            answer: asyncio.Task[bytes] = asyncio.ensure_future(reader.read(1 << 16))
            while not answer.done() and sent < 8 << 20:  # 8 MiB of extension at most
                writer.write(b"v" * 65536)
                sent += 65536
                await asyncio.wait([answer], timeout=0.01)
            got = await asyncio.wait_for(answer, 5)
        finally:
            writer.close()
        assert got.startswith(b"HTTP/1.1 400 "), got[:80]
        assert b"chunk extensions too long" in got
        assert sent < 1 << 20, f"{sent} bytes of one chunk's extension read before the 400"
    finally:
        await server.stop()


async def test_chunk_extensions_within_the_bound_pass(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/ext", ok)
    cache = await make_cache(server={"max_header_bytes": 4096})
    chunks = b"".join(b"1;e=" + b"x" * 3000 + b"\r\na\r\n" for _ in range(50)) + b"0\r\n\r\n"
    head = request_bytes("POST", origin.url("/ext"), headers=[("Transfer-Encoding", "chunked")])
    status, body, _ = await exchange(cache, head + chunks, expect_close=False)
    assert (status, body) == (200, b"ok")
    assert origin.requests[-1].content_length is None  # (forwarded chunked, 50 bytes)


async def test_a_trailer_section_too_large_gets_431(make_cache: MakeCache) -> None:
    server = await RawServer(sink).start()
    cache = await make_cache(server={"max_header_bytes": 4096})
    try:
        head = request_bytes("POST", server.url("/x"), headers=[("Transfer-Encoding", "chunked")])
        trailer = b"".join(b"X-T%d: %s\r\n" % (n, b"t" * 200) for n in range(40))
        status, body, closed = await exchange(
            cache, head + b"5\r\nhello\r\n0\r\n" + trailer + b"\r\n"
        )
    finally:
        await server.stop()
    assert status == 431
    assert b"trailer" in body
    assert closed
