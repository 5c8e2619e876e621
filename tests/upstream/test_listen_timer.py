"""The read timeout of listened exchanges: one timer per upstream connection.

A listened exchange (``begin(..., listener)``) has no awaited wait to time, so the connection
keeps one timer that re-arms while bytes come or a new exchange has begun, and lapses once no
exchange is listened to. Whatever timer an earlier exchange left pending, a silent origin must
time the exchange out no sooner than the read timeout after it began (or after the origin's
last bytes) and within about twice that; an origin that answers in time, or keeps sending, is
never cut off, and an idle connection is never closed by the timer.

These tests drive ``UpstreamConnection`` directly against a scripted origin on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

import pytest

from harvest_cache.errors import ReadTimeout, UpstreamError
from harvest_cache.upstream.connection import ResponseHead, UpstreamConnection
from tests.support import RawServer, read_request_head

READ_TIMEOUT = 0.2
# Timers may fire a little early (libuv counts milliseconds) and late on a loaded machine.
EARLY = 0.02
LATE = 0.35
REQUEST = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

# What the origin does with one request: it answers (or does not) on its connection.
Action = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, after: float = 0.0
) -> None:
    if after:
        await asyncio.sleep(after)
    writer.write(OK)
    await writer.drain()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Say nothing until the cache hangs up (at most 10 s)."""
    async with asyncio.timeout(10):
        await reader.read()


async def part_of_the_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")
    await writer.drain()
    await silent(reader, writer)


async def trickle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, parts: int, every: float
) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % parts)
    await writer.drain()
    for _ in range(parts):
        await asyncio.sleep(every)
        writer.write(b"x")
        await writer.drain()


class ScriptedOrigin:
    """Answers the n-th request on any connection with ``actions[n]``."""

    def __init__(self, actions: list[Action]) -> None:
        self.actions = actions
        self.requests = 0
        self.server = RawServer(self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(len(self.actions)):
            await read_request_head(reader)
            action = self.actions[self.requests]
            self.requests += 1
            await action(reader, writer)


class Recorder:
    """A listener that notes what it is told, and when (loop time)."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.began = 0.0
        self.heads: list[ResponseHead] = []
        self.body = b""
        self.outcome: asyncio.Future[UpstreamError | None] = loop.create_future()
        self.ended_at = 0.0

    def on_head(self, head: ResponseHead) -> None:
        self.heads.append(head)

    def on_body(self, chunk: bytes) -> None:
        self.body += chunk

    def on_end(self) -> None:
        self._settle(None)

    def on_error(self, error: UpstreamError) -> None:
        self._settle(error)

    def _settle(self, error: UpstreamError | None) -> None:
        assert not self.outcome.done(), "on_end or on_error called twice"
        self.ended_at = self.loop.time()
        self.outcome.set_result(error)

    @property
    def elapsed(self) -> float:
        return self.ended_at - self.began

    async def result(self, within: float = 5.0) -> UpstreamError | None:
        async with asyncio.timeout(within):
            return await self.outcome


@pytest.fixture
async def connect() -> AsyncIterator[Callable[[list[Action]], Awaitable[UpstreamConnection]]]:
    """Start a scripted origin and open one UpstreamConnection to it."""
    servers: list[RawServer] = []
    conns: list[UpstreamConnection] = []

    async def start(actions: list[Action]) -> UpstreamConnection:
        origin = ScriptedOrigin(actions)
        await origin.server.start()
        servers.append(origin.server)
        port = origin.server.port
        loop = asyncio.get_running_loop()
        factory = partial(UpstreamConnection, ("127.0.0.1", port), "127.0.0.1")
        _, conn = await loop.create_connection(factory, "127.0.0.1", port)
        conns.append(conn)
        return conn

    yield start
    for conn in conns:
        conn.close()
    for server in servers:
        await server.stop()


Connect = Callable[[list[Action]], Awaitable[UpstreamConnection]]


def listen(conn: UpstreamConnection, read_timeout: float = READ_TIMEOUT) -> Recorder:
    """Begin a listened exchange and send its request."""
    recorder = Recorder()
    recorder.began = recorder.loop.time()
    conn.begin(False, read_timeout, recorder)
    conn.send_now(REQUEST)
    return recorder


async def answered(conn: UpstreamConnection) -> Recorder:
    """A listened exchange the origin answers; the connection is then ready for the next
    (as the pool leaves it)."""
    recorder = listen(conn)
    assert await recorder.result() is None
    assert [h.status for h in recorder.heads] == [200]
    assert recorder.body == b"ok"
    assert conn.reusable()
    conn.finish()
    return recorder


def assert_timed_out(recorder: Recorder, error: UpstreamError | None, since: float) -> None:
    """Timed out no sooner than the read timeout after ``since`` (loop time), and within
    about twice it."""
    assert isinstance(error, ReadTimeout), error
    waited = recorder.ended_at - since
    assert READ_TIMEOUT - EARLY <= waited <= 2 * READ_TIMEOUT + LATE, waited


# -- silent origins --------------------------------------------------------------------------


async def test_silent_origin_times_out_a_listened_exchange(connect: Connect) -> None:
    conn = await connect([silent])
    recorder = listen(conn)
    error = await recorder.result()
    assert_timed_out(recorder, error, recorder.began)
    assert recorder.heads == []
    assert conn.closed
    assert not conn.listening


@pytest.mark.parametrize(
    ("answer_after", "gap"),
    [(0.0, 0.0), (0.0, 0.1), (0.15, 0.0), (0.1, 0.05)],
    ids=["at-once", "gap", "slow-answer", "slow-answer-and-gap"],
)
async def test_exchange_begun_under_a_pending_timer_still_times_out(
    connect: Connect, answer_after: float, gap: float
) -> None:
    """The earlier exchange's timer is still pending when the silent one begins: it must
    neither time the new exchange out early nor let it run on."""
    conn = await connect([partial(answer, after=answer_after), silent])
    first = await answered(conn)
    assert first.elapsed < READ_TIMEOUT, "the scenario needs the first timer still pending"
    if gap:
        await asyncio.sleep(gap)
    assert conn._timer is not None, "the scenario needs the first timer still pending"
    second = listen(conn)
    assert second.began - first.began < READ_TIMEOUT
    error = await second.result()
    assert_timed_out(second, error, second.began)
    assert conn.closed


async def test_silence_after_some_bytes_times_out_within_twice_the_timeout(
    connect: Connect,
) -> None:
    conn = await connect([part_of_the_head])
    recorder = listen(conn)
    error = await recorder.result()
    assert_timed_out(recorder, error, recorder.began)
    assert recorder.heads == []


async def test_silent_exchange_after_the_earlier_timer_lapsed(connect: Connect) -> None:
    conn = await connect([answer, silent])
    await answered(conn)
    async with asyncio.timeout(2):
        while conn._timer is not None:  # noqa: ASYNC110 - no event to wait on
            await asyncio.sleep(0.02)
    second = listen(conn)
    assert conn._timer is not None
    error = await second.result()
    assert_timed_out(second, error, second.began)


# -- origins that answer in time ---------------------------------------------------------------


async def test_answer_after_the_earlier_exchanges_timer_is_not_cut_off(
    connect: Connect,
) -> None:
    """The second exchange begins late in the first one's timer period and is answered well
    within its own read timeout, though after the first timer was due."""
    conn = await connect([answer, partial(answer, after=0.15)])
    first = await answered(conn)
    await asyncio.sleep(0.15)
    second = listen(conn)
    assert await second.result() is None
    assert second.ended_at - first.began > READ_TIMEOUT  # (past the first timer's due time)
    assert second.body == b"ok"
    assert not conn.closed


async def test_body_that_keeps_coming_is_not_cut_off(connect: Connect) -> None:
    parts = 6
    conn = await connect([partial(trickle, parts=parts, every=READ_TIMEOUT / 2)])
    recorder = listen(conn)
    assert await recorder.result() is None
    assert recorder.body == b"x" * parts
    assert recorder.elapsed > 2 * READ_TIMEOUT  # (long past one timer period)
    assert conn.reusable()


async def test_many_quick_exchanges_then_idle_keep_the_connection(connect: Connect) -> None:
    """Between exchanges nothing is listened to: the timer lapses and the idle connection
    stays open for the next exchange, whenever it comes."""
    conn = await connect([answer] * 6)
    for _ in range(5):
        await answered(conn)
    async with asyncio.timeout(2):
        while conn._timer is not None:  # noqa: ASYNC110 - no event to wait on
            await asyncio.sleep(0.02)
    await asyncio.sleep(READ_TIMEOUT)
    assert not conn.closed
    await answered(conn)
    assert conn.exchanges == 6


async def test_awaited_exchange_is_not_timed_out_by_a_listened_ones_timer(
    connect: Connect,
) -> None:
    """An exchange read with ``response_head`` after a listened one, answered after the
    listened one's timer was due: its own wait times it, not that timer."""
    conn = await connect([answer, partial(answer, after=0.15)])
    first = await answered(conn)
    await asyncio.sleep(0.1)
    conn.begin(False, READ_TIMEOUT)
    conn.send_now(REQUEST)
    async with asyncio.timeout(5):
        head = await conn.response_head()
        body = b""
        while chunk := await conn.read():
            body += chunk
    assert (head.status, body) == (200, b"ok")
    assert asyncio.get_running_loop().time() - first.began > READ_TIMEOUT
    assert conn.reusable()
