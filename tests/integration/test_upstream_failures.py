"""Upstream failures end to end (issue 2, sections 2 and 6): DNS failure, refusal, timeouts and
responses cut short. The client gets a 502/503/504 whose body names the cause, and a truncated
response is neither stored nor passed off as complete."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.dns_server import ScriptedDNS, Zone, scripted_dns
from tests.support import (
    MakeCache,
    Origin,
    RawServer,
    closed_by_peer,
    free_port,
    open_proxy,
    proxy_client,
    read_head,
    read_request_head,
    read_response,
    request_bytes,
)


@pytest.fixture
async def dns_server() -> AsyncIterator[ScriptedDNS]:
    zone: Zone = {"origin.harvest.test": {"A": (300, ["127.0.0.1"])}}
    async with scripted_dns(zone, silent={"silent.harvest.test"}, delay=0.0) as server:
        yield server


async def fetch(
    cache: CacheServer, method: str, url: str, *, body: bytes = b"", within: float = 5.0
) -> tuple[int, str, float]:
    """Status, body text and seconds taken for one request on a new raw connection."""
    started = time.monotonic()
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes(method, url, body=body))
        resp = await read_response(reader, method=method, within=within)
    finally:
        writer.close()
    return resp.status, resp.text, time.monotonic() - started


# -- DNS -----------------------------------------------------------------------------------------


async def test_unknown_name_gives_502_naming_the_dns_failure(
    make_cache: MakeCache, dns_server: ScriptedDNS
) -> None:
    cache = await make_cache(dns={"nameservers": [f"127.0.0.1:{dns_server.port}"]})
    status, text, _ = await fetch(cache, "GET", "http://nowhere.harvest.test/page")
    assert status == 502
    assert "no such domain" in text
    asked = dns_server.count("nowhere.harvest.test")
    assert asked >= 1
    # The failure is remembered for a while: the next request does not ask again.
    status, text, _ = await fetch(cache, "POST", "http://nowhere.harvest.test/page", body=b"x")
    assert status == 502
    assert "no such domain" in text
    assert dns_server.count("nowhere.harvest.test") == asked


async def test_name_from_dns_reaches_the_origin(
    origin: Origin, make_cache: MakeCache, dns_server: ScriptedDNS
) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"hello {request.host}")

    origin.route("/named", hello)
    cache = await make_cache(dns={"nameservers": [f"127.0.0.1:{dns_server.port}"]})
    status, text, _ = await fetch(cache, "GET", f"http://origin.harvest.test:{origin.port}/named")
    assert status == 200
    assert text == f"hello origin.harvest.test:{origin.port}"


async def test_name_from_the_hosts_file_reaches_the_origin(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="pinned")

    origin.route("/pinned", hello)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1   pinned.harvest.test\n")
    cache = await make_cache(dns={"hosts_file": str(hosts)})
    status, text, _ = await fetch(cache, "GET", f"http://pinned.harvest.test:{origin.port}/pinned")
    assert status == 200
    assert text == "pinned"


async def test_dns_timeout_gives_an_error_naming_the_timeout(
    make_cache: MakeCache, dns_server: ScriptedDNS
) -> None:
    cache = await make_cache(dns={"nameservers": [f"127.0.0.1:{dns_server.port}"], "timeout": 0.5})
    status, text, elapsed = await fetch(cache, "GET", "http://silent.harvest.test/")
    assert status in (502, 503, 504)
    assert "timeout" in text.lower() or "timed out" in text.lower()
    assert elapsed < 3


# -- connecting ----------------------------------------------------------------------------------


async def test_connection_refused_gives_502(cache: CacheServer) -> None:
    port = free_port()
    for method in ("GET", "POST"):
        status, text, _ = await fetch(cache, method, f"http://127.0.0.1:{port}/", body=b"x")
        assert status == 502
        assert "refused" in text


async def test_connect_timeout_gives_504(make_cache: MakeCache) -> None:
    # A listener with a full accept queue: the kernel drops further SYNs, so connects hang.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[asyncio.StreamWriter] = []
    try:
        _, filler = await asyncio.open_connection("127.0.0.1", port)
        fillers.append(filler)
        cache = await make_cache(upstream={"connect_timeout": 0.5})
        status, text, elapsed = await fetch(cache, "GET", f"http://127.0.0.1:{port}/")
    finally:
        for w in fillers:
            w.close()
        listener.close()
    assert status == 504
    assert "no connection" in text
    assert elapsed < 3


# -- the origin misbehaves -----------------------------------------------------------------------


class Scripted:
    """A RawServer origin that counts requests and answers each with ``respond``."""

    def __init__(self, respond: Callable[[int, asyncio.StreamWriter], Awaitable[None]]) -> None:
        self.respond = respond
        self.requests = 0
        self.server = RawServer(self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(100):
            _, fields = await read_request_head(reader)
            length = next((int(v) for n, v in fields if n.lower() == "content-length"), 0)
            if length:
                await reader.readexactly(length)
            self.requests += 1
            await self.respond(self.requests, writer)
            if writer.is_closing():
                return

    async def __aenter__(self) -> Scripted:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()

    def url(self, path: str) -> str:
        return self.server.url(path)


async def test_read_timeout_gives_504(make_cache: MakeCache) -> None:
    async def never(n: int, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    cache = await make_cache(upstream={"read_timeout": 0.5})
    async with Scripted(never) as origin:
        for method in ("GET", "POST"):
            status, text, elapsed = await fetch(cache, method, origin.url("/silent"), body=b"b")
            assert status == 504
            assert "no response" in text
            assert elapsed < 3


async def test_origin_closing_before_answering_gives_502(cache: CacheServer) -> None:
    async def hang_up(n: int, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async with Scripted(hang_up) as origin:
        status, text, _ = await fetch(cache, "GET", origin.url("/hang-up"))
    assert status == 502
    assert "closed" in text


async def test_unparsable_response_gives_502(cache: CacheServer) -> None:
    async def garbage(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(b"THIS IS NOT HTTP\r\n\r\n")
        await writer.drain()

    async with Scripted(garbage) as origin:
        status, text, _ = await fetch(cache, "GET", origin.url("/garbage"))
    assert status == 502
    assert "unparsable" in text


async def read_cut_response(
    port: int, url: str, method: str
) -> tuple[int, list[tuple[str, str]], bytes, bool]:
    """Request ``url``; read the head and then whatever comes until the proxy closes (True) or
    stays silent for 3 s (False)."""
    reader, writer = await open_proxy(port)
    try:
        writer.write(request_bytes(method, url, body=b"b" if method == "POST" else b""))
        async with asyncio.timeout(5):
            status, _, fields = await read_head(reader)
        rest = b""
        closed = False
        try:
            async with asyncio.timeout(3):
                while chunk := await reader.read(65536):
                    rest += chunk
                closed = True
        except TimeoutError:
            pass
        except ConnectionResetError:
            closed = True
    finally:
        writer.close()
    return status, fields, rest, closed


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_reset_mid_response_closes_the_client_and_is_not_stored(
    cache: CacheServer, method: str
) -> None:
    async def cut(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 1000\r\n\r\n"
            + b"0123456789"
        )
        await writer.drain()
        writer.close()

    async with Scripted(cut) as origin:
        status, fields, rest, closed = await read_cut_response(
            cache.address[1], origin.url("/cut"), method
        )
        assert status == 200
        assert ("Content-Length", "1000") in fields
        assert rest == b"0123456789"
        assert closed, "a truncated body must end with a closed connection"
        # It was not stored: the next request goes to the origin again.
        status, fields, rest, closed = await read_cut_response(
            cache.address[1], origin.url("/cut"), method
        )
        assert origin.requests == 2
        assert closed


async def test_reset_mid_response_is_an_error_for_an_aiohttp_client(cache: CacheServer) -> None:
    async def cut(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 1000\r\n\r\n"
            + b"0123456789"
        )
        await writer.drain()
        writer.close()

    async with Scripted(cut) as origin, proxy_client(cache) as client:
        with pytest.raises(aiohttp.ClientPayloadError):
            await client.get(origin.url("/cut-aiohttp"))
        with pytest.raises(aiohttp.ClientPayloadError):
            await client.get(origin.url("/cut-aiohttp"))
        assert origin.requests == 2


async def test_truncated_chunked_response_is_not_given_a_last_chunk(cache: CacheServer) -> None:
    async def cut(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"a\r\n0123456789\r\n"
        )
        await writer.drain()
        writer.close()

    async with Scripted(cut) as origin:
        status, _, rest, closed = await read_cut_response(
            cache.address[1], origin.url("/cut-chunked"), "GET"
        )
        assert status == 200
        assert closed
        assert b"0123456789" in rest
        assert not rest.endswith(b"0\r\n\r\n"), "a truncated body was passed off as complete"
        await read_cut_response(cache.address[1], origin.url("/cut-chunked"), "GET")
        assert origin.requests == 2


async def test_origin_stalling_mid_response_closes_the_client(make_cache: MakeCache) -> None:
    async def stall(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 1000\r\n\r\n"
            + b"0123456789"
        )
        await writer.drain()
        await asyncio.sleep(30)

    cache = await make_cache(upstream={"read_timeout": 0.5})
    async with Scripted(stall) as origin:
        started = time.monotonic()
        status, _, rest, closed = await read_cut_response(
            cache.address[1], origin.url("/stall"), "GET"
        )
        assert status == 200
        assert rest == b"0123456789"
        assert closed
        assert time.monotonic() - started < 3
        await read_cut_response(cache.address[1], origin.url("/stall"), "GET")
        assert origin.requests == 2


async def test_reused_connection_the_origin_dropped_is_retried(cache: CacheServer) -> None:
    """The origin answers the first request on each connection and drops the connection when
    the next one arrives on it: the proxy sends that GET again on a new connection."""
    answered = 0

    async def one_answer_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        nonlocal answered
        await read_request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        answered += 1
        await read_request_head(reader)  # then hang up on the next request, unanswered

    server = await RawServer(one_answer_per_connection).start()
    try:
        for _ in range(3):
            status, text, _ = await fetch(cache, "GET", server.url("/flaky"))
            assert (status, text) == (200, "ok")
    finally:
        await server.stop()
    assert answered == 3
    assert server.accepted == 3


async def test_error_closes_nothing_it_need_not(cache: CacheServer) -> None:
    """After a 502 the client's keep-alive connection still serves its next request."""
    port = free_port()
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", f"http://127.0.0.1:{port}/"))
        first = await read_response(reader)
        writer.write(request_bytes("GET", f"http://127.0.0.1:{port}/again"))
        second = await read_response(reader)
        assert not await closed_by_peer(reader, within=0.2)
    finally:
        writer.close()
    assert first.status == second.status == 502
