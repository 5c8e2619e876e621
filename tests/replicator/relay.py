"""A throttling TCP relay on loopback: what the replication tests put between two members to
give their link a delay and a bandwidth, to cut it (a partition) and to corrupt what it
carries.

Each direction is a queue of chunks: a chunk occupies the link for ``len / rate`` seconds
after the previous one, then arrives ``delay`` seconds later, in order. ``cut`` closes every
connection and refuses new ones; ``corrupt`` flips a byte in every chunk of 512 bytes or more
that the target sends back (an HTTP answer with a body)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

CHUNK = 65536
CORRUPT_FROM = 512


@dataclass
class Relay:
    target_port: int = 0
    delay: float = 0.0  # seconds, each direction
    rate: float = 0.0  # bytes per second, each direction; 0: unlimited
    cut: bool = False
    corrupt: bool = False
    corrupted: int = 0  # chunks corrupted so far
    carried: int = 0  # bytes carried, both directions
    port: int = 0
    _server: asyncio.Server | None = None
    _connections: set[asyncio.StreamWriter] = field(default_factory=set)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.sever()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def sever(self) -> None:
        """Close every connection now (new ones are refused while ``cut``)."""
        for writer in list(self._connections):
            writer.transport.abort()
        self._connections.clear()

    def set_cut(self, cut: bool) -> None:
        self.cut = cut
        if cut:
            self.sever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            if self.cut or not self.target_port:
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                return
            self._connections.update((writer, up_writer))
            await asyncio.gather(
                self._pipe(reader, up_writer, back=False),
                self._pipe(up_reader, writer, back=True),
            )
        finally:
            for end in (writer, up_writer):
                if end is not None:
                    self._connections.discard(end)
                    end.transport.abort()
            self._tasks.discard(task)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, back: bool
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        deliver = asyncio.ensure_future(self._deliver(queue, writer))
        free_at = time.monotonic()
        try:
            while chunk := await reader.read(CHUNK):
                if back and self.corrupt and len(chunk) >= CORRUPT_FROM:
                    middle = len(chunk) // 2
                    chunk = chunk[:middle] + bytes([chunk[middle] ^ 0xFF]) + chunk[middle + 1 :]
                    self.corrupted += 1
                self.carried += len(chunk)
                now = time.monotonic()
                free_at = max(free_at, now) + (len(chunk) / self.rate if self.rate else 0.0)
                await queue.put((free_at + self.delay, chunk))
            await queue.put((0.0, b""))
            await deliver
        except (ConnectionError, OSError):
            pass
        finally:
            deliver.cancel()
            await asyncio.gather(deliver, return_exceptions=True)

    async def _deliver(
        self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                at, chunk = await queue.get()
                if not chunk:
                    break
                wait = at - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()
            if not writer.is_closing() and writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError, RuntimeError):  # RuntimeError: closed meanwhile
            writer.transport.abort()
