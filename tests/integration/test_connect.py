"""CONNECT tunnels end to end (issue 2, section 2): a real TLS handshake through the proxy to a
local TLS server, bytes relayed both ways, half-closes passed on, and which ports may be
reached."""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from collections.abc import AsyncIterator

import pytest
import trustme

from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    RawServer,
    free_port,
    open_proxy,
    read_head,
    read_response,
    wait_until,
)

ANY_HIGH_PORT = {"connect_ports": ["1024-65535"]}
GREETING = b"hello from the TLS origin\n"


def connect_request(port: int, extra: bytes = b"") -> bytes:
    return f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode() + extra


class TLSOrigin:
    """A TLS echo server on 127.0.0.1: a greeting line, then every byte back until EOF."""

    def __init__(self) -> None:
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.server_context)
        self.client_context = ssl.create_default_context()
        self.ca.configure_trust(self.client_context)
        self.accepted = 0
        self.received = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, ssl=self.server_context
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        try:
            writer.write(GREETING)
            for _ in range(100_000):
                data = await reader.read(65536)
                if not data:
                    break
                self.received += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def stop(self) -> None:
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def tls_origin() -> AsyncIterator[TLSOrigin]:
    origin = TLSOrigin()
    await origin.start()
    yield origin
    await origin.stop()


async def open_tunnel(
    cache: CacheServer, port: int, extra: bytes = b""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await open_proxy(cache.address[1])
    writer.write(connect_request(port, extra))
    async with asyncio.timeout(5):
        status, _, _ = await read_head(reader)
    assert status == 200
    return reader, writer


async def test_tls_through_a_connect_tunnel(make_cache: MakeCache, tls_origin: TLSOrigin) -> None:
    cache = await make_cache(access=ANY_HIGH_PORT)
    reader, writer = await open_tunnel(cache, tls_origin.port)
    try:
        async with asyncio.timeout(5):
            await writer.start_tls(tls_origin.client_context, server_hostname="127.0.0.1")
            assert await reader.readexactly(len(GREETING)) == GREETING
            ssl_object = writer.get_extra_info("ssl_object")
            assert ssl_object is not None
            assert ssl_object.version() is not None
            # Echo both ways, large enough to need flow control in the tunnel.
            payload = os.urandom(2 << 20)

            async def send() -> None:
                for i in range(0, len(payload), 64 * 1024):
                    writer.write(payload[i : i + 64 * 1024])
                    await writer.drain()

            sender = asyncio.create_task(send())
            echoed = await reader.readexactly(len(payload))
            await sender
        assert hashlib.sha256(echoed).digest() == hashlib.sha256(payload).digest()
    finally:
        writer.close()
    assert tls_origin.accepted == 1
    assert tls_origin.received == len(payload)


async def test_tunnel_relays_bytes_sent_with_the_connect_head(make_cache: MakeCache) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()

    server = await RawServer(echo).start()
    cache = await make_cache(access=ANY_HIGH_PORT)
    try:
        reader, writer = await open_tunnel(cache, server.port, extra=b"early bytes|")
        try:
            writer.write(b"late bytes")
            async with asyncio.timeout(5):
                got = await reader.readexactly(len(b"early bytes|late bytes"))
        finally:
            writer.close()
    finally:
        await server.stop()
    assert got == b"early bytes|late bytes"


async def test_half_close_from_the_client_still_gets_the_servers_reply(
    make_cache: MakeCache,
) -> None:
    """The client shuts down writing; the server, on EOF, answers and only then closes."""

    async def digest_on_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(-1)
        writer.write(
            b"got %d bytes, sha256 %s" % (len(data), hashlib.sha256(data).hexdigest().encode())
        )
        await writer.drain()

    server = await RawServer(digest_on_eof).start()
    cache = await make_cache(access=ANY_HIGH_PORT)
    payload = os.urandom(300_000)
    try:
        reader, writer = await open_tunnel(cache, server.port)
        try:
            writer.write(payload)
            await writer.drain()
            writer.write_eof()
            async with asyncio.timeout(5):
                reply = await reader.read(-1)
        finally:
            writer.close()
    finally:
        await server.stop()
    assert reply == b"got %d bytes, sha256 %s" % (
        len(payload),
        hashlib.sha256(payload).hexdigest().encode(),
    )


async def test_half_close_from_the_server_lets_the_client_go_on_sending(
    make_cache: MakeCache,
) -> None:
    received: list[bytes] = []
    heard = asyncio.Event()

    async def speak_then_listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"all I have to say")
        await writer.drain()
        writer.write_eof()
        received.append(await reader.read(-1))
        heard.set()

    server = await RawServer(speak_then_listen).start()
    cache = await make_cache(access=ANY_HIGH_PORT)
    try:
        reader, writer = await open_tunnel(cache, server.port)
        try:
            async with asyncio.timeout(5):
                assert await reader.read(-1) == b"all I have to say"
                writer.write(b"but the client still talks")
                await writer.drain()
                writer.write_eof()
                await heard.wait()
                # Both directions have ended: the proxy closes the tunnel.
                assert await reader.read() == b""
        finally:
            writer.close()
    finally:
        await server.stop()
    assert received == [b"but the client still talks"]


async def test_connect_to_a_port_not_in_connect_ports_is_refused_by_default(
    cache: CacheServer, tls_origin: TLSOrigin
) -> None:
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(connect_request(tls_origin.port))
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 403
    assert str(tls_origin.port).encode() in resp.body
    assert tls_origin.accepted == 0


async def test_connect_port_list_is_configurable(
    make_cache: MakeCache, tls_origin: TLSOrigin
) -> None:
    cache = await make_cache(access={"connect_ports": [tls_origin.port]})
    reader, writer = await open_tunnel(cache, tls_origin.port)
    try:
        async with asyncio.timeout(5):
            await writer.start_tls(tls_origin.client_context, server_hostname="127.0.0.1")
            assert await reader.readexactly(len(GREETING)) == GREETING
    finally:
        writer.close()
    other = await make_cache(
        server={"name": "other-cache"}, access={"connect_ports": [tls_origin.port + 1]}
    )
    reader, writer = await open_proxy(other.address[1])
    try:
        writer.write(connect_request(tls_origin.port))
        assert (await read_response(reader)).status == 403
    finally:
        writer.close()


async def test_connect_to_a_closed_port_gives_502(make_cache: MakeCache) -> None:
    cache = await make_cache(access=ANY_HIGH_PORT)
    port = free_port()
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(connect_request(port))
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 502
    assert b"refused" in resp.body


@pytest.mark.parametrize("authority", ["127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", ":443"])
async def test_connect_without_a_valid_authority_gets_400(
    make_cache: MakeCache, authority: str
) -> None:
    cache = await make_cache(access=ANY_HIGH_PORT)
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        resp = await read_response(reader)
    finally:
        writer.close()
    assert resp.status == 400


async def test_bytes_sent_while_the_tunnel_opens_are_not_lost(make_cache: MakeCache) -> None:
    """A client may send its first bytes (a TLS ClientHello) before the 200 arrives; whenever
    they come in, they belong to the tunnel."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()

    server = await RawServer(echo).start()
    cache = await make_cache(access=ANY_HIGH_PORT)
    lost: list[int] = []
    try:
        for yields in range(12):
            reader, writer = await open_proxy(cache.address[1])
            try:
                writer.write(connect_request(server.port))
                for _ in range(yields):
                    await asyncio.sleep(0)
                writer.write(b"first flight")
                async with asyncio.timeout(5):
                    status, _, _ = await read_head(reader)
                    assert status == 200
                    writer.write(b"|second")
                    want = b"first flight|second"
                    got = b""
                    try:
                        async with asyncio.timeout(0.5):
                            while len(got) < len(want):
                                chunk = await reader.read(64)
                                if not chunk:
                                    break
                                got += chunk
                    except TimeoutError:
                        pass
                if got != want:
                    lost.append(yields)
            finally:
                writer.close()
    finally:
        await server.stop()
    assert lost == [], f"early tunnel bytes lost after {lost} loop yields"


async def test_client_closing_the_tunnel_closes_the_server_side(make_cache: MakeCache) -> None:
    async def listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(-1)

    server = await RawServer(listen).start()
    cache = await make_cache(access=ANY_HIGH_PORT)
    try:
        _, writer = await open_tunnel(cache, server.port)
        writer.write(b"bye")
        await writer.drain()
        writer.close()
        await wait_until(lambda: server.accepted == 1 and server.closed == 1, within=3)
        await wait_until(lambda: not cache.connections, within=3)
    finally:
        await server.stop()
