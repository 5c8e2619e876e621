"""One keep-alive HTTP/1.1 connection to an origin, parsed with httptools (llhttp).

The protocol buffers response body chunks for one reader and pauses the socket when the
reader falls behind, so a slow client slows the origin instead of filling memory.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, cast

import httptools

from harvest_cache.errors import ReadTimeout, UpstreamError, UpstreamProtocolError, UpstreamReset
from harvest_cache.http.headers import Headers
from harvest_cache.outbox import Outbox
from harvest_cache.traffic import Traffic

# Past this much unread body the socket is paused; the reader resumes it.
_HIGH_WATER = 1 << 20
# Fields that delimit a body (without either, it ends when the connection closes).
_FRAMING_FIELDS = frozenset({b"content-length", b"transfer-encoding"})
# Interim responses one exchange may bring: an origin sending them without end would hold the
# exchange open for ever, however short the read timeout.
MAX_INTERIM = 64


class ResponseHead:
    """Status, reason and header fields of one upstream response; ``raw`` holds the fields
    as received, ``headers`` decodes them when first asked (a planned 304 never is)."""

    __slots__ = ("_headers", "keep_alive", "raw", "reason", "status", "version")

    def __init__(
        self, status: int, reason: str, version: str, raw: list[tuple[bytes, bytes]]
    ) -> None:
        self.status = status
        self.reason = reason
        self.version = version
        self.raw = raw
        self._headers: Headers | None = None
        self.keep_alive = True

    @property
    def headers(self) -> Headers:
        headers = self._headers
        if headers is None:
            headers = self._headers = Headers.from_raw(self.raw)
        return headers

    def __repr__(self) -> str:
        return f"<ResponseHead {self.status} {self.reason} HTTP/{self.version}>"


# Told of each interim (1xx) response before the final one: status, reason, raw fields.
Interim = Callable[[int, str, list[tuple[bytes, bytes]]], None]
# Given the first bytes of a listened exchange's response before they are parsed: if they are
# a whole response it expected, it returns the head they stand for and the exchange ends
# (``on_end``) unparsed; None to parse them as usual.
Recognise = Callable[[bytes], "ResponseHead | None"]


class Listener(Protocol):
    """Takes an exchange's events as they are parsed, instead of a reader awaiting them.

    ``on_head`` runs inside the parser and may ``detach`` the listener, after which the body
    is buffered for ``read`` as usual; ``on_end`` and ``on_error`` end the exchange for it
    (exactly one of them is called, unless it detached first).
    """

    def on_head(self, head: ResponseHead) -> None: ...

    def on_body(self, chunk: bytes) -> None: ...

    def on_end(self) -> None: ...

    def on_error(self, error: UpstreamError) -> None: ...


def _chunked_alone(values: list[bytes]) -> bool:
    """Whether Transfer-Encoding field values name chunked and no other coding."""
    return [c.strip().lower() for v in values for c in v.split(b",")] == [b"chunked"]


class _Surplus(Exception):
    """Bytes came after the exchange's complete response: the parser stops at them."""


class UpstreamConnection(asyncio.Protocol):
    """A connection that carries one exchange at a time (no pipelining upstream).

    An exchange is either read (``response_head`` and ``read``, awaited) or listened to
    (a ``Listener`` given to ``begin``, called from the parser).
    """

    def __init__(
        self,
        key: tuple[str, int, bool],
        peer_ip: str,
        *,
        traffic: Traffic | None = None,
        outbox: Outbox | None = None,
    ) -> None:
        """``key``: host, port and whether over TLS (its pool's stack); ``outbox``: where
        request heads sent at once (``send_now``) are held to the end of
        the loop's round (without one they are written at once)."""
        self.key = key
        self.peer_ip = peer_ip
        self._traffic = traffic if traffic is not None else Traffic()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.exchanges = 0
        self._loop = asyncio.get_running_loop()
        self._parser: httptools.HttpResponseParser | None = None
        # The parser of the last exchange when it ended cleanly: llhttp is then back at the
        # start of a message, ready for the next response on this connection.
        self._spare_parser: httptools.HttpResponseParser | None = None
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._framed = False  # the head has Content-Length or Transfer-Encoding
        self._codings: list[bytes] = []  # the values of its Transfer-Encoding fields
        self._interims = 0  # interim responses so far in this exchange
        self._reason = b""
        self._head: ResponseHead | None = None  # the exchange's final head, once parsed
        # Made only when a reader awaits the head (a listened exchange never does).
        self._head_waiter: asyncio.Future[None] | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._complete = False
        self._head_only = False
        self._close_delimited = False
        self._read_timeout = 60.0
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._outbox = outbox
        self._held = b""  # a request head held in the outbox
        self._listener: Listener | None = None
        self._interim: Interim | None = None
        self._recognise: Recognise | None = None
        self._ended = False  # the listened exchange is complete; on_end is due
        self._heard = False  # bytes arrived since the listener's timer last looked
        self._timer: asyncio.TimerHandle | None = None
        self._listen_began = 0.0  # loop time at which the listened exchange began

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()
        if self._parser is not None and not self._complete:
            if self._close_delimited:
                # A body with neither Content-Length nor chunking ends with the connection.
                self._complete = True
                self._wake()
            else:
                self._fail(UpstreamReset("the origin closed the connection mid-response"))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        if self._parser is None:
            # Bytes outside an exchange: never parsed as an answer, never reused.
            self._cut_surplus()
            return
        self._heard = True
        self._traffic.bytes_from_upstream += len(data)
        recognise = self._recognise
        if recognise is not None:
            self._recognise = None
            head = recognise(data)
            if head is not None:
                # (the parser, never fed, is still at the start of a message)
                self._head = head
                self._complete = True
                listener = self._stop_listening()
                if listener is not None:
                    listener.on_end()
                return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            if self._complete:
                # A response ends at its framing: what follows it (a second response, a body
                # after a HEAD's or a 204's head) is never part of it, nor of the next one.
                self._cut_surplus()
            else:
                cause = e.__context__
                if not isinstance(cause, UpstreamProtocolError):
                    cause = UpstreamProtocolError(f"unparsable response from the origin: {e}")
                self._fail(cause)
                self.close()
                return
        if self._ended:
            # Called once the parser is done with this data, so the listener may hand the
            # connection on (or back to the pool) at once.
            listener = self._stop_listening()
            if listener is not None:
                listener.on_end()

    def _cut_surplus(self) -> None:
        self._traffic.upstream_surplus += 1
        self.close()

    # -- httptools callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete:
            raise _Surplus

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._head is not None:
            return  # a trailer field: never merged into the head (RFC 9110 6.5.1)
        self._raw_headers.append((name, value))
        if len(name) in (14, 17) and name.lower() in _FRAMING_FIELDS:
            self._framed = True
            if len(name) == 17:
                self._codings.append(value)

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            # Interim responses are handed on here; the final one follows on this connection.
            self._interims += 1
            if self._interims > MAX_INTERIM:
                raise UpstreamProtocolError(
                    f"the origin sent more than {MAX_INTERIM} interim (1xx) responses"
                )
            if self._interim is not None:
                self._interim(status, self._reason.decode("latin-1"), self._raw_headers)
            self._raw_headers = []
            self._reason = b""
            self._framed = False
            self._codings = []
            return
        if self._codings and not _chunked_alone(self._codings):
            # A coding other than chunked cannot be undone here, nor passed on (transfer
            # codings are hop by hop): 502 before anything is sent, like Squid and nginx.
            codings = b", ".join(self._codings).decode("latin-1")
            raise UpstreamProtocolError(f"the origin's transfer coding {codings!r} is not chunked")
        head = ResponseHead(
            status,
            self._reason.decode("latin-1"),
            parser.get_http_version(),
            self._raw_headers,
        )
        head.keep_alive = parser.should_keep_alive()
        self._close_delimited = (
            not self._head_only and status not in (204, 304) and not self._framed
        )
        if self._close_delimited:
            head.keep_alive = False
        self._head = head
        if self._head_waiter is not None and not self._head_waiter.done():
            self._head_waiter.set_result(None)
        if self._listener is not None:
            self._listener.on_head(head)
        if self._head_only:
            self._complete = True
            self._wake()

    def on_body(self, body: bytes) -> None:
        if self._head_only:
            raise _Surplus  # (a body after a HEAD response's head)
        if self._listener is not None:
            self._listener.on_body(body)
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._parser is None:
            return
        parser = self._parser
        if parser.get_status_code() < 200:
            return
        self._complete = True
        if self._listener is not None:
            self._ended = True
        self._wake()

    # -- the exchange ------------------------------------------------------------------------

    def begin(
        self,
        head_only: bool,
        read_timeout: float,
        listener: Listener | None = None,
        interim: Interim | None = None,
        recognise: Recognise | None = None,
    ) -> None:
        """Start a new exchange; ``response_head`` then waits for its final head, or
        ``listener`` is told of it. ``interim`` is told of each 1xx response before it;
        ``recognise`` (with a listener) sees the first bytes of the response.

        ``read_timeout`` bounds that wait and each wait for body bytes (for a listener: each
        silence of the origin, noticed within twice the timeout).
        """
        self._interim = interim
        self._recognise = recognise
        self._read_timeout = read_timeout
        self._close_delimited = False
        self._parser = self._spare_parser or httptools.HttpResponseParser(self)
        self._spare_parser = None
        self._raw_headers = []
        self._reason = b""
        self._framed = False
        self._codings = []
        self._interims = 0
        self._chunks.clear()
        self._buffered = 0
        self._complete = False
        self._error = None
        self._head_only = head_only
        loop = self._loop
        self._head = None
        self.exchanges += 1
        self._listener = listener
        self._ended = False
        if listener is not None:
            self._heard = False
            self._listen_began = loop.time()
            if self._timer is None:
                self._timer = loop.call_later(read_timeout, self._check_heard)

    def send_now(self, data: bytes) -> None:
        """Send a request head without waiting (for a listened exchange): held in the outbox
        to the end of the loop's round."""
        if self.transport is None or self.closed:
            raise UpstreamReset("the connection to the origin is closed")
        if self._outbox is None:
            self.transport.write(data)
            return
        if not self._held:
            self._outbox.hold(self)
        self._held += data

    def flush(self) -> None:
        """Write the request head held in the outbox."""
        held, self._held = self._held, b""
        transport = self.transport
        if held and transport is not None and not self.closed and not transport.is_closing():
            transport.write(held)

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def detach(self) -> None:
        """Stop calling the listener: from here the exchange is read like any other."""
        self._stop_listening()
        if self._ended:
            self._ended = False
            self._wake()

    def _stop_listening(self) -> Listener | None:
        listener, self._listener = self._listener, None
        return listener

    def _check_heard(self) -> None:
        # One timer per connection while exchanges are listened to: re-armed while bytes
        # keep coming or a new exchange has begun since, and left to lapse once none is
        # listened to, so an exchange costs no timer calls.
        self._timer = None
        if self._listener is None:
            return
        if self._heard:
            self._heard = False
            delay = self._read_timeout
        elif (waited := self._loop.time() - self._listen_began) < self._read_timeout:
            delay = self._read_timeout - waited
        else:
            self._time_out()
            return
        self._timer = self._loop.call_later(delay, self._check_heard)

    async def write(self, data: bytes) -> None:
        if self.transport is None or self.closed:
            raise UpstreamReset("the connection to the origin closed while sending the request")
        if self._held:
            self.flush()
        self.transport.write(data)
        if not self._writable.is_set():
            await self._writable.wait()

    async def response_head(self) -> ResponseHead:
        """The final response head, within the read timeout (else ReadTimeout, closed)."""
        assert self._parser is not None, "no exchange in progress"
        if self._head is None and self._error is None:
            self._head_waiter = self._loop.create_future()
            try:
                await self._wait(self._head_waiter)
            finally:
                self._head_waiter = None
        if self._head is None:
            assert self._error is not None
            raise self._error
        return self._head

    async def read(self) -> bytes:
        """The next body chunk, b"" at the end of the body; raises on truncation or timeout."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._complete:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._wait(self._waiter)
            finally:
                self._waiter = None
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < _HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    async def _wait(self, event: asyncio.Future[Any]) -> None:
        # A plain timer rather than asyncio.timeout(): one per wait, on every miss, and a
        # timer callback that fails the exchange is all a timeout needs to do here.
        timer = self._loop.call_later(self._read_timeout, self._time_out)
        try:
            await event
        finally:
            timer.cancel()
        if self._error is not None and isinstance(self._error, ReadTimeout):
            raise self._error

    def _time_out(self) -> None:
        self._fail(ReadTimeout(f"the origin sent nothing for {self._read_timeout:g} s"))
        self.close()

    @property
    def complete(self) -> bool:
        return self._complete

    def reusable(self) -> bool:
        """Whether the finished exchange left the connection fit for another."""
        head = self._head
        return (
            not self.closed
            and self._complete
            and self._error is None
            and head is not None
            and head.keep_alive
        )

    def finish(self) -> None:
        """End the exchange; the parser is dropped so stray bytes are noticed."""
        if self._complete and self._error is None and not self._head_only:
            # (after a HEAD response llhttp may still expect the body its head announced)
            self._spare_parser = self._parser
        self._parser = None
        self._head = None

    def close(self) -> None:
        self.closed = True
        self._held = b""  # (a request not sent yet is abandoned with the connection)
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: UpstreamError) -> None:
        if self._error is None:
            self._error = error
        if self._head_waiter is not None and not self._head_waiter.done():
            self._head_waiter.set_result(None)
        listener = self._stop_listening()
        if listener is not None:
            listener.on_error(error)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def __repr__(self) -> str:
        host, port, tls = self.key
        scheme = "https" if tls else "http"
        where = f"{scheme}://{host}:{port} via {self.peer_ip}"
        return f"<UpstreamConnection {where} exchanges={self.exchanges}>"
