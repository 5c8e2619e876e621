"""Collapsed forwarding: one upstream fetch whose response every waiting client reads.

The fetch publishes the head, then body chunks; each reader has its own cursor, so a slow
client does not hold back a fast one until the window of unread bytes fills, at which point
the fetch waits for the slowest reader. Chunks every reader has passed are dropped, so memory
stays within the window whatever the body size. A client can join while the first chunk is
still held; after that it fetches on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from harvest_cache.errors import UpstreamReset
from harvest_cache.http.headers import Headers
from harvest_cache.http.stored import StoredHead


class FlightRetry(UpstreamReset):
    """The fetch failed in a way a new attempt may not (a reused origin connection was
    found closed): each reader should start over instead of failing."""


@dataclass(slots=True)
class FlightHead:
    """What the fetch learned from the response head.

    ``shareable`` is False when the response may not be given to other clients (it cannot
    be stored); they then fetch on their own. ``refreshed`` is set when a revalidation got
    304: readers serve the stored object under that head instead of a body from here.
    """

    status: int
    reason: str
    headers: Headers
    shareable: bool
    peer_ip: str
    vary_key: str = ""
    refreshed: StoredHead | None = None
    # Where the refreshed response is stored when not under the flight's key: a stored
    # variant that a 304 named for a request that matched none.
    refreshed_key: str = ""
    stored: bool = False  # being written to the store (shareable, and not too large)
    hop: str = "HIER_DIRECT"  # the hierarchy code of where it came from, for the log


class Flight:
    # (one is made for every fetch, planned ones included: slots make that cheaper)
    __slots__ = (
        "_changed",
        "_chunks",
        "_cursors",
        "_done",
        "_error",
        "_first",
        "_head",
        "_head_future",
        "_held",
        "_make_head",
        "_next_reader",
        "_space",
        "key",
        "window",
    )

    def __init__(self, key: str, window: int) -> None:
        self.key = key
        self.window = window
        # The head (or the failure) as published; a future is made only for readers that
        # wait, as most flights have none.
        self._head: FlightHead | Exception | None = None
        self._make_head: Callable[[], FlightHead] | None = None  # a head made when asked for
        self._head_future: asyncio.Future[FlightHead] | None = None
        self._chunks: list[bytes] = []
        self._first = 0  # absolute index of _chunks[0]
        self._held = 0  # bytes in _chunks
        self._cursors: dict[int, int] = {}
        self._next_reader = 0
        self._done = False
        self._error: Exception | None = None
        self._changed: asyncio.Future[None] | None = None  # made when a reader waits
        self._space: asyncio.Future[None] | None = None

    @property
    def head(self) -> asyncio.Future[FlightHead]:
        """The response head, once published (or the fetch's error)."""
        future = self._head_future
        if future is None:
            future = self._head_future = asyncio.get_running_loop().create_future()
            self._settle(future)
        return future

    def _settle(self, future: asyncio.Future[FlightHead]) -> None:
        if self._make_head is not None:
            self._head, self._make_head = self._make_head(), None
        head = self._head
        if head is None or future.done():
            return
        if isinstance(head, FlightHead):
            future.set_result(head)
        else:
            future.set_exception(head)
            future.exception()  # readers may all have gone; mark it retrieved

    @property
    def readers(self) -> int:
        return len(self._cursors)

    @property
    def over(self) -> bool:
        """Whether the fetch has finished or failed (nothing more will be published)."""
        return self._done

    def join(self) -> FlightReader | None:
        """A reader from the first byte, or None if early chunks are already dropped."""
        if self._first > 0:
            return None
        rid = self._next_reader
        self._next_reader += 1
        self._cursors[rid] = 0
        return FlightReader(self, rid)

    # -- the fetch's side ----------------------------------------------------------------------

    def publish_head(self, head: FlightHead) -> None:
        if self._head is None and self._make_head is None:
            self._head = head
            if self._head_future is not None:
                self._settle(self._head_future)

    def publish_head_lazily(self, make: Callable[[], FlightHead]) -> None:
        """Publish the head that ``make`` returns, made only once a reader asks for it: most
        flights have no reader, and decoding a head for none is waste."""
        if self._head is None and self._make_head is None:
            self._make_head = make
            if self._head_future is not None:
                self._settle(self._head_future)

    def publish_nowait(self, chunk: bytes) -> None:
        """Add a body chunk without regard to the window (for bodies known to be small)."""
        self._chunks.append(chunk)
        self._held += len(chunk)
        self._wake()

    async def publish(self, chunk: bytes) -> None:
        """Add a body chunk; waits while readers hold a full window of unread bytes."""
        self.publish_nowait(chunk)
        while self._held > self.window and self._cursors:
            self._space = asyncio.get_running_loop().create_future()
            await self._space

    def finish(self) -> None:
        self._done = True
        self._wake()

    def fail(self, error: Exception) -> None:
        self._error = error
        if self._head is None and self._make_head is None:
            self._head = error
            if self._head_future is not None:
                self._settle(self._head_future)
        self._done = True
        self._wake()

    # -- the readers' side ---------------------------------------------------------------------

    async def _read(self, rid: int) -> bytes:
        while True:
            pos = self._cursors[rid]
            index = pos - self._first
            if index < len(self._chunks):
                chunk = self._chunks[index]
                self._cursors[rid] = pos + 1
                self._trim()
                return chunk
            if self._error is not None:
                raise self._error
            if self._done:
                return b""
            if self._changed is None:
                self._changed = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._changed)

    def _read_whole(self, rid: int, limit: int) -> bytes | None:
        if not self._done or self._error is not None:
            return None
        index = self._cursors[rid] - self._first
        rest = self._chunks[index:]
        if sum(map(len, rest)) > limit:
            return None
        self._cursors[rid] = self._first + len(self._chunks)
        self._trim()
        return b"".join(rest)

    def _leave(self, rid: int) -> None:
        if self._cursors.pop(rid, None) is not None:
            self._trim()

    def _trim(self) -> None:
        lowest = min(self._cursors.values(), default=self._first + len(self._chunks))
        drop = lowest - self._first
        if drop > 0:
            self._held -= sum(map(len, self._chunks[:drop]))
            del self._chunks[:drop]
            self._first = lowest
        if self._space is not None and not self._space.done() and self._held <= self.window:
            self._space.set_result(None)

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set_result(None)
            self._changed = None

    def __repr__(self) -> str:
        return (
            f"<Flight {self.key!r} readers={len(self._cursors)} held={self._held}"
            f" done={self._done}>"
        )


class FlightReader:
    __slots__ = ("_flight", "_rid")

    def __init__(self, flight: Flight, rid: int) -> None:
        self._flight = flight
        self._rid = rid

    async def read(self) -> bytes:
        """The next chunk, b"" at the end; raises the fetch's error if it failed."""
        return await self._flight._read(self._rid)

    def read_whole(self, limit: int) -> bytes | None:
        """The rest of the body at once, if the fetch has ended well and it is at most
        ``limit`` bytes; else None, and nothing is consumed."""
        return self._flight._read_whole(self._rid, limit)

    def close(self) -> None:
        self._flight._leave(self._rid)


class StartedFetch(NamedTuple):
    """A fetch begun on the miss fast path and continued on the general one: the flight,
    the client's place in it, and whether it revalidates a stored object."""

    flight: Flight
    reader: FlightReader
    revalidating: bool
