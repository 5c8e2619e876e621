"""The access log in Squid's native format, so existing Squid log tools read it unchanged.

One line per request, Squid's ``logformat squid``::

    %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt
    1732950000.123    145 127.0.0.1 TCP_MISS/200 1234 GET http://example.org/ - HIER_DIRECT/93.184.216.34 text/html

:func:`format_line` is pure and runs once per request; :class:`AccessLog` collects lines on the
loop and writes them in batches from its own thread.
"""  # noqa: E501

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import string
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from harvest_common.errors import ConfigError

log = logging.getLogger(__name__)

KIB = 1024


class Result(StrEnum):
    """Squid's result codes (``%Ss``): how the cache answered."""

    TCP_HIT = "TCP_HIT"
    TCP_MEM_HIT = "TCP_MEM_HIT"
    TCP_MISS = "TCP_MISS"
    TCP_CF_MISS = "TCP_CF_MISS"  # collapsed onto another client's fetch
    TCP_REFRESH_UNMODIFIED = "TCP_REFRESH_UNMODIFIED"
    TCP_REFRESH_MODIFIED = "TCP_REFRESH_MODIFIED"
    TCP_REFRESH_FAIL_OLD = "TCP_REFRESH_FAIL_OLD"  # validation failed: the stale copy served
    TCP_REFRESH_FAIL_ERR = "TCP_REFRESH_FAIL_ERR"  # validation failed: the error served
    TCP_CLIENT_REFRESH_MISS = "TCP_CLIENT_REFRESH_MISS"
    TCP_DENIED = "TCP_DENIED"
    TCP_TUNNEL = "TCP_TUNNEL"
    TCP_SWAPFAIL_MISS = "TCP_SWAPFAIL_MISS"
    TCP_OFFLINE_HIT = "TCP_OFFLINE_HIT"
    TCP_NEGATIVE_HIT = "TCP_NEGATIVE_HIT"
    NONE = "NONE"


class Hierarchy(StrEnum):
    """Squid's hierarchy codes (``%Sh``): where the response came from. The peer routes
    (``hierarchy.route``) name the rest, with a TIMEOUT_ prefix when the ICP wait ran out."""

    HIER_NONE = "HIER_NONE"
    HIER_DIRECT = "HIER_DIRECT"
    NO_DIRECT_FAIL = "NO_DIRECT_FAIL"


# Every printable ASCII character but the space stays as it is.
_SAFE = string.punctuation


def _field(text: str | None) -> str:
    """A text field as one token: ``-`` if empty; space, controls and non-ASCII %-encoded."""
    if not text:
        return "-"
    if text.isascii() and text.isprintable() and " " not in text:
        return text
    return quote(text, safe=_SAFE, errors="surrogateescape")


@lru_cache(maxsize=256)  # a handful of types, on every line
def _mime_type(content_type: str | None) -> str:
    """Like Squid, the media type alone: the Content-Type up to a ``;``, space or tab."""
    mime = content_type.partition(";")[0].strip() if content_type else ""
    if " " in mime or "\t" in mime:
        mime = mime.split(maxsplit=1)[0]
    return _field(mime)


# %-formatting: about twice as fast as the f-string with format specs, and StrEnum members
# format as their values without Enum.__format__. A line is a head (time, then elapsed, client,
# result, size) and a tail (method, URL, user, hierarchy, content type); a memory hit keeps its
# tail ready-made, and the hit fast path all but the time.
_REST = b" %6d %b %b%b/%03d %d"
_TAIL = " %s %s %s %s/%s %s\n"


def line_tail(
    method: str,
    url: str,
    hierarchy: str = Hierarchy.HIER_NONE,
    peer: str | None = None,
    user: str | None = None,
    content_type: str | None = None,
) -> bytes:
    """The fields after the size, newline included; the URL, user and type are escaped."""
    return (
        _TAIL
        % (method, _field(url), _field(user), hierarchy, peer or "-", _mime_type(content_type))
    ).encode()


# The last time field made, by its millisecond: lines come many to a millisecond.
_time_ms = -1
_time_text = b""


def time_field(now: float) -> bytes:
    """The time field of a line logged at ``now``. (A plain function: calling an object's
    ``__call__`` cost a fifth of a memory hit's Python.)"""
    global _time_ms, _time_text
    ms = round(now * 1000)
    if ms != _time_ms:
        _time_ms = ms
        _time_text = b"%d.%03d" % divmod(ms, 1000)
    return _time_text


def line_rest(
    elapsed_ms: int, client: bytes, result: bytes, status: int, size: int, aborted: bool
) -> bytes:
    """The fields after the time, up to the size; ``client`` and ``result`` as bytes."""
    suffix = b"_ABORTED" if aborted else b""
    return _REST % (elapsed_ms, client, result, suffix, status, size)


def line_head(
    now: float, elapsed_ms: int, client: bytes, result: bytes, status: int, size: int, aborted: bool
) -> bytes:
    """The fields up to the size; ``client`` and ``result`` already as bytes."""
    return time_field(now) + line_rest(elapsed_ms, client, result, status, size, aborted)


def format_line(
    *,
    now: float,
    elapsed_ms: int,
    client: str,
    result: Result,
    status: int,
    size: int,
    method: str,
    url: str,
    hierarchy: str = Hierarchy.HIER_NONE,
    peer: str | None = None,
    user: str | None = None,
    content_type: str | None = None,
    aborted: bool = False,
) -> bytes:
    """One access.log line, newline included.

    ``now`` is the wall-clock time the request ended (``time.time()``), ``size`` the bytes sent
    to the client, ``status`` 0 if no response was sent, ``peer`` the address of the next hop,
    ``aborted`` whether the client went away first. ``client``, ``method`` and the codes are
    tokens by construction; the URL, user and content type are escaped.
    """
    head = line_head(now, elapsed_ms, client.encode(), result.encode(), status, size, aborted)
    return head + line_tail(method, url, hierarchy, peer, user, content_type)


@dataclass(frozen=True, slots=True)
class Rotation:
    """Rotate the file when it reaches ``max_bytes`` (0: never), keeping ``keep`` old ones."""

    max_bytes: int = 0
    keep: int = 5


class _LogFile:
    """The open file and the one thread that touches it: a stalled disk stalls only that thread.

    One worker keeps batches in order; the loop's default executor stays free for other work.
    """

    def __init__(
        self, path: Path, executor: ThreadPoolExecutor, file: io.FileIO, rotation: Rotation
    ) -> None:
        self._path = path
        self._executor = executor
        self._file = file
        self._rotation = rotation
        self._size = 0  # bytes in the file (set when opened)

    @classmethod
    async def open(cls, path: Path, rotation: Rotation) -> _LogFile:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harvest-accesslog")
        loop = asyncio.get_running_loop()
        try:
            file = await loop.run_in_executor(executor, _open, path)
        except OSError as e:
            executor.shutdown(wait=False)
            raise ConfigError([f"log.access_log: cannot open {path}: {e.strerror}"]) from None
        log_file = cls(path, executor, file, rotation)
        log_file._size = await loop.run_in_executor(executor, _length, file)
        return log_file

    async def write(self, lines: list[bytes], reopen_at: int | None) -> None:
        """Write ``lines``; if ``reopen_at`` is set, those from that index go to a new file."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._write, lines, reopen_at)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._file.close)
        self._executor.shutdown(wait=False)

    # -- in the writer thread --

    def _write(self, lines: list[bytes], reopen_at: int | None) -> None:
        if reopen_at is None:
            self._append(lines)
            return
        self._append(lines[:reopen_at])
        self._reopen()
        self._append(lines[reopen_at:])

    def _append(self, lines: list[bytes]) -> None:
        data = memoryview(b"".join(lines))
        self._size += len(data)
        try:
            while data:  # an unbuffered write may be short
                data = data[self._file.write(data) :]
        except OSError as e:
            log.error("access log: %d lines lost: cannot write %s: %s", len(lines), self._path, e)
        limit = self._rotation.max_bytes
        if limit and self._size >= limit:
            self._rotate()

    def _rotate(self) -> None:
        """access.log becomes access.log.1 (and .1 becomes .2...), and a new file begins."""
        keep = self._rotation.keep
        try:
            for n in range(keep - 1, 0, -1):
                older = self._path.with_name(f"{self._path.name}.{n}")
                if older.exists():
                    older.rename(self._path.with_name(f"{self._path.name}.{n + 1}"))
            if keep:
                self._path.rename(self._path.with_name(f"{self._path.name}.1"))
            else:
                self._path.unlink()
        except OSError as e:
            log.error("access log: cannot rotate %s: %s", self._path, e)
            return
        self._reopen()

    def _reopen(self) -> None:
        try:
            file = _open(self._path)
        except OSError as e:
            log.error("access log: cannot reopen %s, keeping the old file: %s", self._path, e)
            return
        self._file.close()
        self._file = file
        self._size = _length(file)


def _length(file: io.FileIO) -> int:
    """What the file held when opened (a pipe: 0); lines are appended after it."""
    return os.fstat(file.fileno()).st_size


def _open(path: Path) -> io.FileIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unbuffered: each batch is one write, and a failed write leaves nothing behind to retry.
    return io.FileIO(path, "ab")


class AccessLog:
    """Collects lines on the loop and writes them in batches, off the loop.

    A batch is written every ``flush_interval`` seconds, or as soon as it holds ``batch_bytes``.
    While the disk stalls, lines beyond ``max_pending_bytes`` are counted in ``dropped`` rather
    than held. Create with ``await AccessLog.open(path)``; a path of None turns logging off and
    every call into a cheap no-op (``enabled`` lets callers skip formatting too).
    """

    def __init__(
        self,
        file: _LogFile | None,
        *,
        flush_interval: float = 0.5,
        batch_bytes: int = 64 * KIB,
        max_pending_bytes: int = 64 * KIB * KIB,
    ) -> None:
        self.enabled = file is not None
        self.dropped = 0
        self._file = file
        self._flush_interval = flush_interval
        self._batch_bytes = batch_bytes
        self._max_pending_bytes = max_pending_bytes
        self._batch: list[bytes] = []
        self._pending = 0
        self._reopen_at: int | None = None
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        path: Path | None,
        *,
        flush_interval: float = 0.5,
        batch_bytes: int = 64 * KIB,
        max_pending_bytes: int = 64 * KIB * KIB,
        rotation: Rotation | None = None,
    ) -> AccessLog:
        """Open (creating parent directories) and start the writer; ConfigError if it can't.
        ``rotation``: when to rotate the file by size (besides ``reopen`` after an outside
        rotation)."""
        rotation = rotation or Rotation()
        file = None if path is None else await _LogFile.open(path, rotation)
        access_log = cls(
            file,
            flush_interval=flush_interval,
            batch_bytes=batch_bytes,
            max_pending_bytes=max_pending_bytes,
        )
        if file is not None:
            access_log._writer = asyncio.create_task(
                access_log._run(file), name="harvest-accesslog"
            )
        return access_log

    def __repr__(self) -> str:
        return (
            f"<AccessLog enabled={self.enabled} pending={len(self._batch)} lines"
            f" ({self._pending} bytes) dropped={self.dropped}>"
        )

    def write(self, line: bytes) -> None:
        """Queue one line (from :func:`format_line`); never blocks."""
        if not self.enabled:
            return
        if self._pending >= self._max_pending_bytes:
            self.dropped += 1
            return
        self._batch.append(line)
        self._pending += len(line)
        if self._pending >= self._batch_bytes:
            self._wake.set()

    def reopen(self) -> None:
        """After rotation: lines queued so far go to the old file, later ones to a new file."""
        if not self.enabled:
            return
        self._reopen_at = len(self._batch)
        self._wake.set()

    async def close(self) -> None:
        """Write every queued line and close the file; later lines are ignored."""
        if self._file is None or self._writer is None:
            return
        # The writer is stopped, not cancelled: cancelling it while it awaits the thread would
        # also cancel a batch still queued there.
        self.enabled = False
        self._wake.set()
        await self._writer
        self._writer = None
        await self._flush(self._file)  # lines queued while the writer's last batch was written
        await self._file.close()

    async def _run(self, file: _LogFile) -> None:
        while self.enabled:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._flush_interval):
                    await self._wake.wait()
            self._wake.clear()
            await self._flush(file)

    async def _flush(self, file: _LogFile) -> None:
        batch, self._batch, self._pending = self._batch, [], 0
        reopen_at, self._reopen_at = self._reopen_at, None
        if batch or reopen_at is not None:
            await file.write(batch, reopen_at)


__all__ = ["AccessLog", "Hierarchy", "Result", "format_line"]
