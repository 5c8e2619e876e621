"""Interim (1xx) responses forwarded to HTTP/1.1 clients (RFC 9110 15.2).

A scripted origin sends 103 Early Hints (and 102) before its final response; the cache must
pass each on, with Via and without hop-by-hop fields, before the final response, on every
path a request can take: a miss through the general path (with a disk tier), the miss fast
path (memory only), a revalidation, and a forwarded POST. HTTP/1.0 clients get none.
"""

from __future__ import annotations

import asyncio
import time

from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    RawServer,
    http_date,
    open_proxy,
    read_head,
    read_request_head,
    read_response,
    request_bytes,
)

EARLY = (
    b"HTTP/1.1 103 Early Hints\r\n"
    b"Link: </style.css>; rel=preload; as=style\r\n"
    b"Connection: X-Hop\r\n"
    b"X-Hop: dropped\r\n"
    b"\r\n"
)
BODY = b"final body"


def final(cc: str = "max-age=60") -> bytes:
    return b'HTTP/1.1 200 OK\r\nCache-Control: %b\r\nETag: "e"\r\nContent-Length: %d\r\n\r\n%b' % (
        cc.encode(),
        len(BODY),
        BODY,
    )


class EarlyOrigin:
    """Answers every request with ``interim`` responses, then ``final`` (or a 304 to a
    matching If-None-Match); records what it was asked."""

    def __init__(self, interim: bytes = EARLY, cc: str = "max-age=60") -> None:
        self.interim = interim
        self.cc = cc
        self.requests: list[tuple[str, list[tuple[str, str]]]] = []
        self.server = RawServer(self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(50):
            line, fields = await read_request_head(reader)
            self.requests.append((line, fields))
            length = next((int(v) for n, v in fields if n.lower() == "content-length"), 0)
            if length:
                await reader.readexactly(length)
            writer.write(self.interim)
            await writer.drain()
            if dict((n.lower(), v) for n, v in fields).get("if-none-match") == '"e"':
                date = http_date(time.time()).encode()
                writer.write(b'HTTP/1.1 304 Not Modified\r\nDate: %b\r\nETag: "e"\r\n\r\n' % date)
            else:
                writer.write(final(self.cc))
            await writer.drain()

    async def __aenter__(self) -> EarlyOrigin:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()


async def exchange(
    cache: CacheServer,
    request: bytes,
    *,
    method: str = "GET",
    after_head: bytes = b"",
) -> tuple[list[tuple[int, list[tuple[str, str]]]], int, bytes]:
    """Send ``request`` (then ``after_head``) on a new connection: the interim responses
    read before the final one (status and fields), the final status and its body."""
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request)
        if after_head:
            writer.write(after_head)
        interim = []
        async with asyncio.timeout(5):
            for _ in range(10):
                status, _, fields = await read_head(reader)
                if not 100 <= status < 200:
                    break
                interim.append((status, fields))
            else:
                raise AssertionError("no final response")
            length = next((int(v) for n, v in fields if n.lower() == "content-length"), 0)
            body = await reader.readexactly(length) if method != "HEAD" else b""
        return interim, status, body
    finally:
        writer.close()


def check_early_hints(interim: list[tuple[int, list[tuple[str, str]]]]) -> None:
    assert [status for status, _ in interim] == [103]
    fields = dict(interim[0][1])
    assert fields["Link"] == "</style.css>; rel=preload; as=style"
    assert "test-cache" in fields["Via"]
    assert "X-Hop" not in fields
    assert "Connection" not in fields


async def test_s15_2_early_hints_forwarded_on_a_miss(make_cache: MakeCache) -> None:
    cache = await make_cache()  # with its disk tier: the general path
    async with EarlyOrigin() as origin:
        url = origin.server.url("/early")
        interim, status, body = await exchange(cache, request_bytes("GET", url))
        check_early_hints(interim)
        assert (status, body) == (200, BODY)
        # Stored as usual: the hit that follows has no interim response.
        interim, status, body = await exchange(cache, request_bytes("GET", url))
        assert (interim, status, body) == ([], 200, BODY)
        assert len(origin.requests) == 1


async def test_s15_2_early_hints_forwarded_on_the_miss_fast_path(make_cache: MakeCache) -> None:
    cache = await make_cache(cache={"disk_mb": 0})
    assert cache.proxy is not None
    async with EarlyOrigin(cc="max-age=0") as origin:
        # The first request fills the pool; the others take the fast paths (the miss fast
        # path, then planned revalidations), each with its own 103.
        for n in range(4):
            interim, status, body = await exchange(
                cache, request_bytes("GET", origin.server.url("/fast"))
            )
            check_early_hints(interim)
            assert (status, body) == (200, BODY), n
        assert cache.proxy.fast.answered >= 2
        assert cache.proxy.fast.planned >= 1


async def test_s15_2_interim_responses_forwarded_on_a_forwarded_post(
    make_cache: MakeCache,
) -> None:
    cache = await make_cache()
    interims = b"HTTP/1.1 102 Processing\r\n\r\n" + EARLY
    async with EarlyOrigin(interim=interims) as origin:
        request = request_bytes("POST", origin.server.url("/form"), body=b"a=1")
        interim, status, body = await exchange(cache, request)
        assert [s for s, _ in interim] == [102, 103]
        check_early_hints(interim[1:])
        assert (status, body) == (200, BODY)


async def test_s15_2_the_origins_100_is_not_repeated_after_the_caches_own(
    make_cache: MakeCache,
) -> None:
    """The cache answers Expect: 100-continue itself (the field is not forwarded); a 100
    the origin sends anyway is not passed on a second time, other 1xx are."""
    cache = await make_cache()
    interims = b"HTTP/1.1 100 Continue\r\n\r\n" + EARLY
    async with EarlyOrigin(interim=interims) as origin:
        head = request_bytes(
            "POST",
            origin.server.url("/upload"),
            headers=[("Expect", "100-continue"), ("Content-Length", "3")],
        )
        interim, status, body = await exchange(cache, head, after_head=b"a=1")
        assert [s for s, _ in interim] == [100, 103]
        assert (status, body) == (200, BODY)
        assert all(n.lower() != "expect" for n, _ in origin.requests[0][1])


async def test_s15_2_no_interim_responses_to_an_http_1_0_client(make_cache: MakeCache) -> None:
    cache = await make_cache()
    async with EarlyOrigin() as origin:
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(request_bytes("GET", origin.server.url("/old"), version="1.0"))
            async with asyncio.timeout(5):
                status, _, _ = await read_head(reader)
                assert status == 200
        finally:
            writer.close()
        resp = await exchange(
            cache, request_bytes("GET", origin.server.url("/old2"), version="1.0")
        )
        assert resp[0] == []
        assert resp[1:] == (200, BODY)


async def test_s15_2_early_hints_forwarded_on_a_revalidation(make_cache: MakeCache) -> None:
    cache = await make_cache()
    async with EarlyOrigin(cc="max-age=0") as origin:
        url = origin.server.url("/reval")
        await exchange(cache, request_bytes("GET", url))
        interim, status, body = await exchange(cache, request_bytes("GET", url))
        check_early_hints(interim)
        assert (status, body) == (200, BODY)
        assert dict(origin.requests[1][1]).get("If-None-Match") == '"e"'


async def test_read_response_helper_still_skips_interim_responses(make_cache: MakeCache) -> None:
    """(The shared test helper reads past 1xx responses, as a client must.)"""
    cache = await make_cache()
    async with EarlyOrigin() as origin:
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(request_bytes("GET", origin.server.url("/skip")))
            resp = await read_response(reader)
        finally:
            writer.close()
        assert (resp.status, resp.body) == (200, BODY)
