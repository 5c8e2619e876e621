"""A client connection: parses requests with httptools and answers them in order.

Requests are parsed as bytes arrive (pipelined ones queue up); one handler coroutine per
connection answers them in order. Limits are enforced while parsing: request line (414),
head size and field count (431), body size (413), a deadline for the whole head (408, against
slow-loris clients) and an idle timeout between requests.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol, cast

import httptools

from harvest_cache.config import Config
from harvest_cache.errors import RequestError
from harvest_cache.http.decision import POLICY_FIELDS
from harvest_cache.http.headers import Headers
from harvest_cache.outbox import Outbox
from harvest_cache.server.head_memo import HeadMemo, ParsedHead
from harvest_cache.server.request import BodyStream, Request
from harvest_common.tasks import TaskSet

# Seconds a connection closed after an error keeps draining the client's input.
_LINGER = 2.0
# Pipelined requests held before the socket is paused.
_MAX_QUEUED = 32
# Bodies from this size are written gathered with their head (see ``write_response``).
_GATHER = 4096
# The framing of one chunk without extensions: a size line (16 hex digits at most, CRLF) and
# the CRLF after its data.
_CHUNK_LINE = 20


class Answered(Enum):
    """What ``Handler.try_answer`` did with a head."""

    NO = 0  # nothing: the request goes the general way
    HIT = 1  # answered it at once (a head a client is likely to send again)
    AGAIN = 2  # began answering it from a plan (a revalidation: likely to come again)
    ONCE = 3  # began answering it from a plan (a miss: its URL is new, its fields not)
    FETCH = 4  # began fetching for it on the fast path, worked out in full


class Handler(Protocol):
    heads: HeadMemo  # heads answered at once or from a revalidation plan, to answer unparsed

    async def handle(self, req: Request, conn: ClientConnection) -> None: ...

    def try_answer(self, conn: ClientConnection, head: ParsedHead, parsed: bool) -> Answered:
        """Answer a plain GET or HEAD at once, or begin answering it on the fast path (the
        connection is then told ``lean_done`` or ``lean_handoff`` later); ``NO`` if neither
        applies. A head not ``parsed`` (found in the memo) is answered from what is prepared
        alone (else it is parsed, and goes on as any other)."""


class ClientConnection(asyncio.Protocol):
    def __init__(
        self,
        config: Config,
        handler: Handler,
        tasks: TaskSet,
        on_close: Callable[[ClientConnection], None],
        *,
        refuse: bool = False,
        outbox: Outbox | None = None,
        origin: bytes | None = None,
    ) -> None:
        """``outbox``: where whole responses are held to the end of the loop's round (without
        one they are written at once). ``origin`` (``https://host:port``): the connection is
        an intercepted tunnel's, whose requests come in origin form for that origin alone
        (they are taken as its absolute URLs)."""
        self._config = config.server
        self.origin = origin
        self.handler = handler
        self._tasks = tasks
        self._on_close = on_close
        self._refuse = refuse  # over the connection limit: accepted only to be closed
        self.transport: asyncio.Transport | None = None
        self._fileno = -1  # the client socket's, for sendfile
        self.client_ip = "-"
        self.client_bytes = b"-"
        self._loop = asyncio.get_running_loop()
        self.closed = False
        self.must_close = False  # set by the handler when this response ends the connection
        self._parser = httptools.HttpRequestParser(self)
        self._queue: deque[Request] = deque()
        # The handler task lives as long as the connection once a request needed it, waiting
        # between requests: a keep-alive client's misses then cost no task each.
        self._worker: asyncio.Task[Any] | None = None
        self._wakeup: asyncio.Future[None] | None = None  # set while the worker waits
        self._handling = False
        self._lean = False  # a request is being answered on the miss fast path
        self._close_when_idle = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._outbox = outbox
        self._held: list[bytes] = []  # whole responses held in the outbox
        self._reading_paused = False
        self._stopped_reading = False
        # per-request parse state
        self._url = bytearray()
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._slow = False  # a field seen that keeps this request off the hit fast path
        # heads parsed in the current read, and the last if it was answered (``_answer``),
        # with whether the client may well send it again
        self._heads_read = 0
        self._answered: ParsedHead | None = None
        self._again = False
        self._field_bytes = 0
        self._hosts = 0  # Host fields in the head being read
        # Of its chunked body: chunks begun, bytes of chunk framing read, trailer bytes.
        self._chunks = 0
        self._framing = 0
        self._trailer_bytes = 0
        self._head_bytes = 0
        self._in_head = False
        self._current: Request | None = None
        # One lazily re-armed timer serves both deadlines, so a request costs no timer calls:
        # _mark is when the current head began (in a head) or when the connection went idle.
        self._timer: asyncio.TimerHandle | None = None
        self._mark = 0.0
        # CONNECT: bytes that arrived after the request head, and where tunnel data goes
        self.tunnel_preface = b""
        self._tunnel_pending = False
        self._method = ""
        self.tunnel_sink: Callable[[bytes], None] | None = None
        self.tunnel_eof: Callable[[], None] | None = None
        self.tunnel_resume: Callable[[], None] | None = None

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        # (never sendfile under TLS: the kernel would send the body in the clear)
        tls = transport.get_extra_info("ssl_object") is not None
        self._fileno = sock.fileno() if sock is not None and not tls else -1
        peer = transport.get_extra_info("peername")
        self.client_ip = peer[0] if peer else "-"
        self.client_bytes = self.client_ip.encode()
        if self._refuse:
            self.close()
            return
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._current is not None and self._current.body is not None:
            self._current.body.fail(RequestError(400, "the client closed the connection"))
        if self.tunnel_eof is not None:
            self.tunnel_eof()
        self._wake_worker()
        self._on_close(self)

    def eof_received(self) -> bool:
        if self.tunnel_eof is not None:
            self.tunnel_eof()
            return True
        if self._current is not None and self._current.body is not None:
            self._current.body.fail(RequestError(400, "the client closed mid-body"))
        # Keep the socket open for writing if answers are still due; close after them.
        self.must_close = True
        if self._stopped_reading and not self.busy:
            return False  # lingering after an error: the client is done
        return self.busy

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()
        if self.tunnel_resume is not None:
            self.tunnel_resume()

    def data_received(self, data: bytes) -> None:
        if self.tunnel_sink is not None:
            self.tunnel_sink(data)
            return
        if self._tunnel_pending:
            self.tunnel_preface += data
            return
        if self._stopped_reading:
            return
        fresh = False  # this read begins a request while none is being answered
        if not self._in_head and self._current is None:
            if not self.busy:
                if self._answer_unparsed(data):
                    return
                fresh = True
            self._start_head()
        if self._in_head:
            self._head_bytes += len(data)
            body = None
        else:
            body = self._current.body if self._current is not None else None
        received = body.received if body is not None else 0
        size = len(data)
        while data:
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserUpgrade as e:
                data = data[e.args[0] :]
                if self._method == "CONNECT":
                    # The rest is tunnel data, held until the tunnel is open.
                    self._tunnel_pending = True
                    self.tunnel_preface = data
                    self._pause_reading()
                    return
                # Other upgrades are not done (Upgrade is dropped as hop-by-hop): what
                # follows is the next HTTP/1.1 request, for a fresh parser.
                self._parser = httptools.HttpRequestParser(self)
                fresh = False  # (``data`` is only the rest of the read now)
                continue
            except httptools.HttpParserCallbackError as e:
                if isinstance(e.__context__, RequestError):
                    self._reject(e.__context__)
                    return
                raise
            except httptools.HttpParserError as e:
                self._reject(RequestError(400, f"malformed request: {e}"))
                return
            break
        if self._heads_read:
            # One head that came alone in one read, and was answered: these bytes will parse
            # the same way again.
            answered = self._answered
            if fresh and self._heads_read == 1 and answered is not None and not self._in_head:
                if self._again:
                    self.handler.heads.add(data, answered, self.origin)
                if self.origin is None:
                    self.handler.heads.add_fields(data, answered)
            self._answered = None
            self._heads_read = 0
        limit = self._config.max_request_line + self._config.max_header_bytes
        if self._in_head and self._head_bytes > limit:
            self._reject(RequestError(431, "request head too large"))
        elif body is not None and self._current is not None and self._current.body is body:
            # A read wholly inside a body: what of it was not body is chunk framing. llhttp
            # reads chunk extensions without a bound (and tells nothing of them), so they are
            # bounded here, each chunk's like a header section.
            self._framing += size - (body.received - received)
            each = self._config.max_header_bytes + _CHUNK_LINE
            if self._framing > (self._chunks + 1) * each + self._trailer_bytes:
                self._reject(RequestError(400, "chunk extensions too long"))

    def _answer_unparsed(self, data: bytes) -> bool:
        """Answer a read that is a remembered head, or a plain request line and known fields
        (the head is then remembered whole if the client may send it again)."""
        heads = self.handler.heads
        if self.origin is not None:  # (origin form: remembered by the tunnel's origin too)
            parsed = heads.get_in(self.origin, data)
            if parsed is None or self._answer(parsed, parsed=False) is Answered.NO:
                return False
            heads.reused += 1
            return True
        parsed = heads.get(data)
        if parsed is not None:
            answered = self._answer(parsed, parsed=False)
        else:
            parsed = heads.by_fields(data)
            if parsed is None:
                return False
            answered = self._answer(parsed, parsed=False)
            if answered is Answered.HIT or answered is Answered.AGAIN:
                heads.add(data, parsed)
        if answered is Answered.NO:
            return False
        heads.reused += 1
        return True

    def attach_tunnel(
        self, sink: Callable[[bytes], None], eof: Callable[[], None], resume: Callable[[], None]
    ) -> None:
        """From now on, bytes from the client go to ``sink``, beginning with any that came
        early; ``eof`` is called on the client's half-close, ``resume`` when it drains."""
        self.tunnel_sink, self.tunnel_eof, self.tunnel_resume = sink, eof, resume
        self._tunnel_pending = False
        preface, self.tunnel_preface = self.tunnel_preface, b""
        if preface:
            sink(preface)
        self._resume_reading()

    # -- httptools callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if not self._in_head:
            self._start_head()

    def on_url(self, url: bytes) -> None:
        if self.origin is not None and not self._url:
            if not url.startswith(b"/"):
                raise RequestError(400, "a request in an intercepted tunnel is in origin form")
            self._url += self.origin
        self._url += url
        if len(self._url) > self._config.max_request_line:
            raise RequestError(414, "request line too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:
            # A trailer field after a chunked body: never merged into a header section
            # (RFC 9110 6.5.1), and never left for the next request's; bounded like one.
            self._trailer_bytes += len(name) + len(value) + 4
            if self._trailer_bytes > self._config.max_header_bytes:
                raise RequestError(431, "request trailer fields too large")
            return
        self._raw_headers.append((name, value))
        if name.lower() in POLICY_FIELDS:
            self._slow = True
        if len(name) == 4 and name.lower() == b"host":
            self._hosts += 1
        if len(self._raw_headers) > self._config.max_header_count:
            raise RequestError(431, "too many header fields")
        self._field_bytes += len(name) + len(value) + 4
        if self._field_bytes > self._config.max_header_bytes:
            raise RequestError(431, "request header fields too large")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._heads_read += 1
        parser = self._parser
        version = parser.get_http_version()
        if version[:2] != "1.":
            raise RequestError(505, f"HTTP/{version} is not supported: this proxy speaks HTTP/1.1")
        if self._hosts != 1 and (self._hosts or version != "1.0"):
            # RFC 9112 3.2: every HTTP/1.1 request carries one Host field; none or several: 400.
            raise RequestError(400, f"{self._hosts or 'no'} Host fields: a request has one")
        if not self.busy and self._try_fast(version):
            return
        self._method = parser.get_method().decode("ascii", "replace")
        headers = Headers.from_raw(self._raw_headers)
        req = Request(
            method=self._method,
            target=self._url.decode("latin-1"),
            version=version,
            headers=headers,
            keep_alive=parser.should_keep_alive(),
            started=time.monotonic(),
            slow=self._slow,
        )
        self._url = bytearray()
        self._raw_headers = []
        if self._slow:  # (Content-Length and Transfer-Encoding are slow fields)
            _check_framing(req, headers, self._config.max_body_bytes)
        if req.chunked or (req.content_length or 0) > 0:
            req.body = BodyStream(self._pause_reading, self._resume_reading)
        self._current = req
        self._enqueue(req)

    def _try_fast(self, version: str) -> bool:
        method = self._parser.get_method()
        if self._slow or method not in (b"GET", b"HEAD"):
            return False
        parser = self._parser
        head: ParsedHead = (
            method,
            bytes(self._url),
            version,
            parser.should_keep_alive(),
            tuple(self._raw_headers),
        )
        answered = self._answer(head)
        if answered is Answered.NO:
            return False
        self._url = bytearray()
        self._raw_headers = []
        # (the heads answered at once or from a plan are remembered: see ``data_received``)
        self._answered = None if answered is Answered.FETCH else head
        self._again = answered is Answered.HIT or answered is Answered.AGAIN
        return True

    def _answer(self, head: ParsedHead, parsed: bool = True) -> Answered:
        """Have ``head`` answered at once or on the fast path (see ``Handler.try_answer``)."""
        self._lean = True  # (before: a fast fetch may end, or fail, as it begins)
        answered = self.handler.try_answer(self, head, parsed)
        if answered is Answered.HIT:
            self._lean = False
            if not head[3]:  # (not keep-alive)
                self._stop_reading()
                self.close()
            else:
                self._arm_idle()
        elif answered is Answered.NO:
            self._lean = False
        return answered

    def on_body(self, body: bytes) -> None:
        req = self._current
        if req is None or req.body is None:
            return
        req.body.feed(body)
        if req.body.received > self._config.max_body_bytes:
            req.body.fail(RequestError(413, "request body too large"))
            raise RequestError(413, "request body too large")

    def on_message_complete(self) -> None:
        req = self._current
        if req is not None and req.body is not None:
            req.body.end()
        self._current = None

    # -- answering ---------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            if self._held:
                self.flush()
            self.transport.write(data)

    def write_response(self, head: bytes, body: bytes) -> None:
        """A whole response: a small body joined to its head, a larger one written gathered
        with it (writev), as it is: copying a 16 KiB body into one buffer with its head
        cost a fifth of a hit's time."""
        if self.transport is not None and not self.closed:
            if self._held:
                self.flush()
            if len(body) < _GATHER:
                self.transport.write(head + body)
            else:
                self.transport.writelines((head, body))

    def hold_response(self, head: bytes, body: bytes) -> None:
        """A whole response made from an origin's answer, held in the outbox to the end of
        the loop's round (written at once without one)."""
        if self.transport is None or self.closed:
            return
        if self._outbox is None:
            self.write_response(head, body)
            return
        if not self._held:
            self._outbox.hold(self)
        if len(body) < _GATHER:
            self._held.append(head + body)
        else:
            self._held += (head, body)

    def flush(self) -> None:
        """Write the responses held in the outbox."""
        held = self._held
        if not held:
            return
        self._held = []
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return
        if len(held) == 1:
            transport.write(held[0])
        else:
            transport.writelines(held)

    def write_sent(self, head: bytes, body: bytes | memoryview, fd: int, offset: int) -> None:
        """A whole response whose body is also in a file, ``fd`` from ``offset`` (a memory
        file of hot bodies, or a disk-tier segment just read from the page cache): the head
        written, then the body sent from the file's pages by the kernel (sendfile), and
        whatever the socket did not take at once written from ``body`` (copied if it is a
        view: its buffer may be reused once this returns).

        The file is used only while nothing is queued before it: the bytes must go out in
        order, and a queued transport may even be closing."""
        transport = self.transport
        if transport is None or self.closed:
            return
        if self._held:
            self.flush()
        length = len(body)
        if self._fileno < 0 or transport.get_write_buffer_size():
            transport.writelines((head, bytes(body) if isinstance(body, memoryview) else body))
            return
        transport.write(head)
        sent = self._send_from(transport, fd, offset, length)
        if sent < length:
            rest = memoryview(body)[sent:]
            transport.write(bytes(rest) if isinstance(body, memoryview) else rest)

    def sends_files(self) -> bool:
        """Whether a response's body can go from a file now: a plain socket (not TLS), open,
        with nothing queued before it."""
        transport = self.transport
        return (
            self._fileno >= 0
            and not self._held
            and transport is not None
            and not self.closed
            and not transport.get_write_buffer_size()
        )

    def send_file(self, head: bytes, fd: int, offset: int, length: int) -> None:
        """A whole response whose body is ``length`` bytes of the file ``fd`` from ``offset``,
        all in the page cache, when ``sends_files`` has just said yes: the head written, the
        body sent by the kernel, and what the socket does not take at once read from those
        pages and queued (a copy from memory, as sendfile's own)."""
        transport = self.transport
        assert transport is not None
        transport.write(head)
        sent = self._send_from(transport, fd, offset, length)
        if sent < length:
            transport.write(os.pread(fd, length - sent, offset + sent))

    def _send_from(self, transport: asyncio.Transport, fd: int, offset: int, length: int) -> int:
        """Bytes of a body sent from ``fd`` by the kernel, if the head went out whole."""
        if transport.get_write_buffer_size() or transport.is_closing():
            return 0
        try:
            return os.sendfile(self._fileno, fd, offset, length)
        except OSError:
            return 0  # a full socket, or a broken one: the transport finds out when written

    async def drain(self) -> None:
        if not self._writable.is_set():
            await self._writable.wait()

    def hold_input(self) -> None:
        """Leave what the client sends in its socket until the connection is handed over
        or a tunnel attached (an intercepted tunnel's first flight is peeked at there)."""
        self._pause_reading()

    def hand_over(self) -> asyncio.Transport | None:
        """Give up the client's socket, and end this connection without closing it: an
        intercepted tunnel's TLS takes it over, with a connection of its own above."""
        transport, self.transport = self.transport, None
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._on_close(self)
        return transport

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            if self._held:
                self.flush()
            self.closed = True
            self.transport.close()

    def _linger(self) -> None:
        """Half-close, drain and drop what the client still sends, and close soon after.

        Closing a socket with unread input makes the kernel send a reset, which can destroy
        the error response before the client reads it.
        """
        self._stopped_reading = True
        self._resume_reading()
        transport = self.transport
        if transport is None or self.closed:
            return
        if self._held:
            self.flush()
        if transport.can_write_eof():
            transport.write_eof()
        self._loop.call_later(_LINGER, self.close)

    def _enqueue(self, req: Request) -> None:
        self._queue.append(req)
        if len(self._queue) > _MAX_QUEUED:
            self._pause_reading()
        if not self._lean:  # else answered in order once the fast path is done
            self._run_worker()

    def _run_worker(self) -> None:
        if self._worker is None:
            self._worker = self._tasks.spawn(self._work(), f"client {self.client_ip}")
        else:
            self._wake_worker()

    def lean_done(self, keep_alive: bool) -> None:
        """The miss fast path has answered its request."""
        self._lean = False
        if self.closed:
            return
        if not keep_alive or self.must_close:
            self._queue.clear()
            self.close()
        elif self._queue:
            self._run_worker()
        elif self._close_when_idle:
            self.close()
        else:
            self._arm_idle()

    def lean_handoff(self, req: Request) -> None:
        """The miss fast path passes its request on, to be answered before any queued."""
        self._lean = False
        self._queue.appendleft(req)
        self._run_worker()

    @property
    def busy(self) -> bool:
        """Whether a request is being answered or waits to be."""
        return self._handling or self._lean or bool(self._queue)

    def close_when_idle(self) -> None:
        """Close the connection now if it is between requests, else once the answers due are
        sent (at shutdown)."""
        self._close_when_idle = True
        if not self.busy:
            self.close()  # a request head still arriving has no answer due yet

    def _wake_worker(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _work(self) -> None:
        try:
            while not self.closed:
                if not self._queue:
                    if self._close_when_idle:
                        self.close()
                        return
                    self._arm_idle()
                    self._wakeup = self._loop.create_future()
                    try:
                        await self._wakeup
                    finally:
                        self._wakeup = None
                    continue
                req = self._queue.popleft()
                if self._reading_paused and len(self._queue) < _MAX_QUEUED // 2:
                    self._resume_reading()
                if req.error is not None:
                    self.must_close = True
                self._handling = True
                try:
                    await self.handler.handle(req, self)
                finally:
                    self._handling = False
                unread = req.error is not None or (req.body is not None and not req.body.ended)
                if unread:
                    # What the client still sends can't be parsed as a next request (RFC 9112
                    # 9.6): answer, then close gently so the answer is read before a reset.
                    self._queue.clear()
                    self._linger()
                    return
                if not req.keep_alive or self.must_close:
                    self._queue.clear()
                    self.close()
                    return
                if self.tunnel_sink is not None:
                    return  # the connection carries a tunnel now, not requests
        finally:
            self._worker = None
            if not self.closed and self.tunnel_sink is None:
                self._arm_idle()

    def _reject(self, error: RequestError) -> None:
        """Answer a request that could not be parsed, after those before it, then close."""
        self._stop_reading()
        if self._current is not None and self._current.body is not None:
            self._current.body.fail(error)
        self._current = None
        req = Request(
            method="-",
            target=self._url.decode("latin-1") or "-",
            version="1.1",
            headers=Headers(),
            keep_alive=False,
            started=time.monotonic(),
            error=error,
        )
        self._enqueue(req)

    # -- timers and flow control ---------------------------------------------------------------

    def _start_head(self) -> None:
        self._in_head = True
        self._slow = False
        self._field_bytes = 0
        self._hosts = 0
        self._head_bytes = 0
        self._chunks = 0
        self._framing = 0
        self._trailer_bytes = 0
        self._mark = self._loop.time()
        self._ensure_timer()

    def _arm_idle(self) -> None:
        if not self._in_head:
            self._mark = self._loop.time()
            if self._timer is None:  # (usually armed: the timer re-arms itself lazily)
                self._ensure_timer()

    def _ensure_timer(self) -> None:
        if self._timer is None and not self.closed:
            self._schedule(self._loop.time())

    def _schedule(self, now: float) -> None:
        # Never sleep longer than the shorter timeout, so a head that starts while the timer
        # waits out an idle period is still caught within twice the header timeout.
        tick = min(self._config.header_timeout, self._config.idle_timeout)
        limit = self._config.header_timeout if self._in_head else self._config.idle_timeout
        when = min(self._mark + limit, now + tick)
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        """Act on the deadline that applies now, or look again later."""
        self._timer = None
        if self.closed or self.tunnel_sink is not None:
            return
        now = self._loop.time()
        if self._in_head:
            if now >= self._mark + self._config.header_timeout:
                self._reject(RequestError(408, "the request head took too long"))
                return
        elif not self.busy:
            if now >= self._mark + self._config.idle_timeout:
                self.close()
                return
        else:
            self._mark = now  # busy answering: idle time starts after the answer
        self._schedule(now)

    def _stop_reading(self) -> None:
        self._stopped_reading = True
        self._in_head = False

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()

    def __repr__(self) -> str:
        return f"<ClientConnection {self.client_ip} queued={len(self._queue)}>"


def _check_framing(req: Request, headers: Headers, max_body: int) -> None:
    """Reject bodies whose framing could be read two ways (RFC 9112 6.1-6.3)."""
    te = headers.get_all("Transfer-Encoding")
    cl = headers.get_all("Content-Length")
    if te and cl:
        raise RequestError(400, "both Transfer-Encoding and Content-Length")
    if te:
        codings = [c.strip().lower() for v in te for c in v.split(",")]
        if codings != ["chunked"]:
            raise RequestError(501 if "chunked" in codings[-1:] else 400, "unsupported coding")
        req.chunked = True
        return
    if cl:
        values = {v.strip() for line in cl for v in line.split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise RequestError(400, "invalid or conflicting Content-Length")
        length = int(values.pop())
        if length > max_body:
            raise RequestError(413, "request body too large")
        req.content_length = length
