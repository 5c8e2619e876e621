"""Writing one response to a client, framed for that client.

The framing is chosen per client, not copied from upstream: Content-Length when the length
is known, chunked for HTTP/1.1 clients otherwise, and a close-delimited body for HTTP/1.0.
"""

from __future__ import annotations

from harvest_cache.http.forwarding import add_via, interim_head, response_head
from harvest_cache.http.freshness import age_value
from harvest_cache.http.headers import Headers
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.request import Request
from harvest_cache.store.interface import FileBody
from harvest_cache.store.tiered import file_chunks
from harvest_cache.upstream.connection import Interim


class ClientGone(Exception):
    """The client closed its connection while its response was being written."""


def interim_relay(
    conn: ClientConnection, version: str, via: str, *, sent_continue: bool = False
) -> Interim | None:
    """What forwards an exchange's 1xx responses to ``conn`` before its final one (RFC 9110
    15.2): nothing for an HTTP/1.0 client, which must not get them, and no 100 once the
    cache has sent its own (``sent_continue``)."""
    if version != "1.1":
        return None

    def relay(status: int, reason: str, raw: list[tuple[bytes, bytes]]) -> None:
        if not conn.closed and not (status == 100 and sent_continue):
            conn.write(interim_head(status, reason, raw, via))

    return relay


def bodyless(method: str, status: int) -> bool:
    return method == "HEAD" or status in (204, 304) or 100 <= status < 200


def framing(
    length: int | None, version: str, close: bool, no_body: bool
) -> tuple[list[tuple[str, str]], bool, bool]:
    """The fields that frame a response for this client (in place of any Content-Length or
    Connection it had), whether it is chunked, and whether the connection closes after it.

    A body of unknown length is chunked for HTTP/1.1 and ends with the connection for 1.0.
    """
    fields = []
    chunked = False
    if not no_body:
        if length is not None:
            fields.append(("Content-Length", str(length)))
        elif version == "1.1":
            fields.append(("Transfer-Encoding", "chunked"))
            chunked = True
        else:
            close = True
    if close:
        fields.append(("Connection", "close"))
    elif version == "1.0":
        fields.append(("Connection", "keep-alive"))
    return fields, chunked, close


def from_store(headers: Headers, age: float, status_value: str, name: str) -> Headers:
    """``headers`` (a stored response's) as sent from the cache: with Age, Via and
    Cache-Status."""
    headers.set("Age", age_value(age))
    add_via(headers, "1.1", name)
    headers.add("Cache-Status", status_value)  # after those of caches nearer the origin
    return headers


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
        close = not req.keep_alive or conn.must_close
        fields, self._chunked, conn.must_close = framing(length, req.version, close, self._no_body)
        if not self._no_body:
            headers.remove("Content-Length")
        for name, value in fields:
            headers.add(name, value)
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
        sendfile); the caller closes the file."""
        async for chunk in file_chunks(body):
            await self.write(chunk)

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
