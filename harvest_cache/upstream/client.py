"""Send one request to an origin and hand back its response head and body stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from harvest_cache.errors import ReadTimeout, UpstreamReset
from harvest_cache.upstream.connection import Interim, ResponseHead, UpstreamConnection
from harvest_cache.upstream.pool import Pool

# The client address the cache's own requests (to peers) are sent for: they may go anywhere.
OWN_REQUEST = "127.0.0.1"


@dataclass(slots=True)
class OutgoingRequest:
    """A request ready for the wire: ``head`` is the complete request head, sent to
    ``host:port`` over TLS if ``tls``.

    ``body`` yields the decoded request body; ``chunked`` says whether it is sent with
    chunked framing (otherwise ``head`` carries its Content-Length). ``interim`` is told of
    1xx responses before the final one.
    """

    method: str
    host: str
    port: int
    tls: bool
    head: bytes
    client_ip: str  # the client it is sent for (the pool may refuse some origins for it)
    body: AsyncIterator[bytes] | None = None
    chunked: bool = False
    interim: Interim | None = None


class Exchange:
    """A response in progress: read the body, then ``release`` (or ``abort``)."""

    __slots__ = ("_conn", "_pool", "head")

    def __init__(self, pool: Pool, conn: UpstreamConnection, head: ResponseHead) -> None:
        self._pool = pool
        self._conn = conn
        self.head = head

    @property
    def peer_ip(self) -> str:
        return self._conn.peer_ip

    @property
    def complete(self) -> bool:
        """Whether the whole response has arrived (what is left to read is buffered)."""
        return self._conn.complete

    async def read(self) -> bytes:
        """The next body chunk; b"" once the body is complete."""
        return await self._conn.read()

    def release(self) -> None:
        """Return the connection to the pool if the exchange ended cleanly, else close it."""
        self._pool.release(self._conn)

    def abort(self) -> None:
        self._conn.finish()
        self._conn.close()


async def _send_body(conn: UpstreamConnection, req: OutgoingRequest) -> None:
    assert req.body is not None
    async for chunk in req.body:
        if not chunk:
            continue
        if req.chunked:
            await conn.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        else:
            await conn.write(chunk)
    if req.chunked:
        await conn.write(b"0\r\n\r\n")


async def send(pool: Pool, req: OutgoingRequest, read_timeout: float) -> Exchange:
    """Send ``req`` and wait for the final response head.

    A reused connection that the origin had already closed is retried once on a new one,
    when the request has no streamed body (nothing has been consumed that could not be sent
    again).
    """
    conn = pool.take_idle(req.host, req.port, req.tls, req.client_ip)
    while True:
        reused = conn is not None
        if conn is None:
            conn = await pool.connect(req.host, req.port, req.tls, req.client_ip)
        conn.begin(req.method == "HEAD", read_timeout, interim=req.interim)
        try:
            await conn.write(req.head)
            if req.body is not None:
                await _send_body(conn, req)
            head = await conn.response_head()
        except ReadTimeout:
            conn.close()
            raise ReadTimeout(
                f"no response from {req.host}:{req.port} within {read_timeout:g} s"
            ) from None
        except UpstreamReset:
            conn.close()
            if reused and req.body is None:
                conn = None
                continue
            raise
        except BaseException:
            # Including a client body that failed midway: the origin must not wait for it.
            conn.close()
            raise
        return Exchange(pool, conn, head)
