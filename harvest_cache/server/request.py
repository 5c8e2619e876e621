"""A parsed client request, and its body as the client streams it in."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from harvest_cache.errors import RequestError
from harvest_cache.http.headers import Headers
from harvest_cache.server.flight import StartedFetch

# Past this much unread request body the client socket is paused.
_BODY_HIGH_WATER = 1 << 20


class BodyStream:
    """Request body chunks from the client, read once by whoever forwards them."""

    def __init__(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._ended = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._pause = pause
        self._resume = resume
        self._paused = False
        self.received = 0

    def feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        self.received += len(chunk)
        if self._buffered > _BODY_HIGH_WATER and not self._paused:
            self._paused = True
            self._pause()
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def fail(self, error: Exception) -> None:
        self._error = error
        self._wake()

    @property
    def ended(self) -> bool:
        return self._ended

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._paused and self._buffered < _BODY_HIGH_WATER // 2:
                    self._paused = False
                    self._resume()
                yield chunk
            if self._error is not None:
                raise self._error
            if self._ended:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


@dataclass(slots=True)
class Request:
    """One request from a client, as parsed; ``body`` is None when it has none."""

    method: str
    target: str
    version: str
    headers: Headers
    keep_alive: bool
    started: float  # time.monotonic() when the head was complete
    body: BodyStream | None = None
    chunked: bool = False
    content_length: int | None = None
    error: RequestError | None = field(default=None)
    started_fetch: StartedFetch | None = None  # the fetch the miss fast path began for it
    # A field that calls for the full policy came with it (http.decision.POLICY_FIELDS).
    slow: bool = False

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.target} HTTP/{self.version}>"
