"""Writing one response to a client, framed for that client.

The framing is chosen per client, not copied from upstream: Content-Length when the length
is known, chunked for HTTP/1.1 clients otherwise, and a close-delimited body for HTTP/1.0.
"""

from __future__ import annotations

import asyncio
import os

from harvest_cache.http.forwarding import response_head
from harvest_cache.http.headers import Headers
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.request import Request
from harvest_cache.store.interface import FileBody

_FILE_CHUNK = 1024 * 1024


class ClientGone(Exception):
    """The client closed its connection while its response was being written."""


def bodyless(method: str, status: int) -> bool:
    return method == "HEAD" or status in (204, 304) or 100 <= status < 200


class Reply:
    __slots__ = ("_chunked", "_conn", "_no_body", "_req", "bytes_sent", "content_type", "status")

    def __init__(self, conn: ClientConnection, req: Request) -> None:
        self._conn = conn
        self._req = req
        self._chunked = False
        self._no_body = False
        self.status = 0
        self.bytes_sent = 0
        self.content_type = "-"

    @property
    def started(self) -> bool:
        return self.status != 0

    def start(
        self, status: int, reason: str, headers: Headers, length: int | None, body: bytes = b""
    ) -> None:
        """Send the head; ``headers`` are end-to-end fields, ``length`` the body's if known.

        ``body``, the start of the body (or all of it), goes in the same write: one send for a
        small response instead of two.
        """
        conn, req = self._conn, self._req
        self.status = status
        self.content_type = headers.get("Content-Type") or "-"
        self._no_body = bodyless(req.method, status)
        if not self._no_body:
            if length is not None:
                headers.set("Content-Length", str(length))
            elif req.version == "1.1":
                headers.remove("Content-Length")
                headers.add("Transfer-Encoding", "chunked")
                self._chunked = True
            else:
                headers.remove("Content-Length")
                conn.must_close = True
        if not req.keep_alive or conn.must_close:
            conn.must_close = True
            headers.add("Connection", "close")
        elif req.version == "1.0":
            headers.add("Connection", "keep-alive")
        data = response_head(status, reason, headers)
        self.bytes_sent += len(data)
        if body and not self._no_body:
            if conn.closed:
                raise ClientGone  # as write() would: the head counted, the body not
            data += self._frame(body)
            self.bytes_sent += len(body)
        conn.write(data)

    def _frame(self, chunk: bytes) -> bytes:
        return b"%x\r\n%b\r\n" % (len(chunk), chunk) if self._chunked else chunk

    async def write(self, chunk: bytes) -> None:
        if self._conn.closed:
            raise ClientGone
        if self._no_body or not chunk:
            return
        self._conn.write(self._frame(chunk))
        self.bytes_sent += len(chunk)
        await self._conn.drain()

    async def send_file(self, body: FileBody) -> None:
        """Stream a stored body from disk in large reads done in an executor (uvloop has no
        sendfile); the file is closed either way."""
        loop = asyncio.get_running_loop()
        fd = body.file.fileno()
        try:
            pos, end = body.offset, body.offset + body.length
            while pos < end:
                chunk = await loop.run_in_executor(
                    None, os.pread, fd, min(_FILE_CHUNK, end - pos), pos
                )
                if not chunk:
                    raise OSError(f"stored body ended {end - pos} bytes early")
                pos += len(chunk)
                await self.write(chunk)
        finally:
            await loop.run_in_executor(None, body.file.close)

    async def send_text(self, status: int, reason: str, text: str, headers: Headers) -> None:
        """A complete small response (errors, OPTIONS, TRACE); text/plain unless set."""
        body = text.encode("utf-8")
        if "Content-Type" not in headers:
            headers.add("Content-Type", "text/plain; charset=utf-8")
        self.start(status, reason, headers, len(body))
        await self.write(body)
        await self.end()

    async def end(self) -> None:
        if self._chunked and not self._conn.closed:
            self._conn.write(b"0\r\n\r\n")
            self.bytes_sent += 5
        await self._conn.drain()
