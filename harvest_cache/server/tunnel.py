"""CONNECT tunnels (RFC 9110 9.3.6): bytes relayed both ways, half-closes passed on."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast

from harvest_cache.server.connection import ClientConnection
from harvest_cache.upstream.pool import Pool


@dataclass(slots=True)
class TunnelStats:
    peer: str
    to_client: int = 0
    to_server: int = 0


class _ServerSide(asyncio.Protocol):
    """The origin's half: what it sends goes to the client, with flow control both ways."""

    def __init__(self, peer_ip: str, client: ClientConnection) -> None:
        self.stats = TunnelStats(peer_ip)
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._client_eof = False
        self._server_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.stats.to_client += len(data)
        self.client.write(data)
        if self.client.transport is not None and self.client.transport.get_write_buffer_size() > (
            1 << 20
        ):
            self.transport.pause_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        self._server_eof = True
        client = self.client.transport
        if client is not None and client.can_write_eof() and not self.client.closed:
            client.write_eof()
        self._maybe_done()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()

    def pause_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.client.transport is not None and not self.client.closed:
            self.client.transport.resume_reading()

    # the client's half, wired into ClientConnection's tunnel hooks

    def from_client(self, data: bytes) -> None:
        self.stats.to_server += len(data)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def client_eof(self) -> None:
        self._client_eof = True
        transport = self.transport
        if transport is not None and not transport.is_closing() and transport.can_write_eof():
            transport.write_eof()
        if self.client.closed:
            self._finish()
        else:
            self._maybe_done()

    def client_writable(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _maybe_done(self) -> None:
        if self._client_eof and self._server_eof:
            self._finish()

    def _finish(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.done.done():
            self.done.set_result(None)


async def open_tunnel(
    host: str, port: int, conn: ClientConnection, pool: Pool, *, answered: bool = False
) -> TunnelStats:
    """Connect to ``host:port``, answer 200 (unless ``answered`` already: a failure to
    connect then closes the client's connection), and relay until both sides close."""
    try:
        server = await pool.open(host, port, lambda ip: _ServerSide(ip, conn), conn.client_ip)
    except BaseException:
        if answered:
            conn.close()
        raise
    if not answered:
        conn.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    conn.attach_tunnel(server.from_client, server.client_eof, server.client_writable)
    try:
        await server.done
    finally:
        server._finish()
        conn.close()
    return server.stats
