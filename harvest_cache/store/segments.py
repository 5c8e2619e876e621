"""Small objects' bytes in append-only segment files, read from the page cache without a thread.

The disk tier keeps each small object (and Vary marker) as one *entry* appended to the newest
of its segment files, ``segments/NNNNNNNN`` under its directory::

    header   20 bytes, little-endian: b"HSE1", the CRC-32 of the rest of the entry, and the
             lengths of the key, the record and the body (4 bytes each)
    key      UTF-8
    record   codec.encode's bytes: the head (or the marker)
    body

An entry is written once and never changed: a newer object, head or deletion of its key only
makes the index point elsewhere, and the bytes go with their segment, the oldest first, when
the tier culls. The CRC covers key, record and body, so a read checks all of it (``locate``
may skip it for an entry this process wrote or checked before: see ``DiskTier.send_nowait``);
the key in the entry tells a read that its index entry was for another key.

Reads come two ways. ``read_nowait`` is for the event loop: ``preadv2`` with ``RWF_NOWAIT``
returns the bytes only if the kernel has them all in its page cache, never waiting for the
device; otherwise it returns None and the caller reads in a thread with ``read``. That makes a
disk hit on a warm disk tier a copy from the page cache, without the hop to a thread and back
that costs several times the copy.

Segments are created and removed under the tier's lock; reading file descriptors are opened
once per segment and kept. A removed segment's descriptor is closed only at the next removal,
so a read that found its location just before is not left with a closed (or reused) number;
the entry's key and CRC catch the rest.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
from pathlib import Path
from typing import NamedTuple

from isal.isal_zlib import crc32

# sync_file_range(2), which Python does not wrap: start writing pages back, without waiting.
_libc = ctypes.CDLL(None, use_errno=True)
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    _sync_file_range.restype = ctypes.c_int
_SYNC_FILE_RANGE_WRITE = 2


# cachestat(2) (Linux 6.5; the same number on every architecture), which Python does not
# wrap either: how many pages of a range the page cache holds, without reading them.
class _CacheRange(ctypes.Structure):
    _fields_ = (("offset", ctypes.c_uint64), ("length", ctypes.c_uint64))


class _CacheStat(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint64)
        for name in ("cached", "dirty", "writeback", "evicted", "recently_evicted")
    )


_CACHESTAT = 451
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _kernel_tells_cached() -> bool:
    """Whether this kernel answers cachestat (Linux 6.5 and later, unless a sandbox refuses
    the call), asked once of the interpreter's own file."""
    try:
        fd = os.open(sys.executable, os.O_RDONLY)
    except OSError:
        return False
    try:
        stat = _CacheStat()
        told: int = _syscall(_CACHESTAT, fd, ctypes.byref(_CacheRange(0, 1)), ctypes.byref(stat), 0)
        return told == 0
    finally:
        os.close(fd)


# Whether ``Segments.cached`` can tell (else it always says no, and entries are read).
CACHESTAT = _kernel_tells_cached()

MAGIC = b"HSE1"
HEADER = struct.Struct("<4sIIII")


class Damaged(Exception):
    """An entry that is not the one asked for: bad magic, CRC or lengths, or another key."""


class Location(NamedTuple):
    """Where an entry lies: ``length`` bytes of segment ``segment`` from ``offset``."""

    segment: int
    offset: int
    length: int


# At most this many buffers go to one writev (Linux's IOV_MAX), and about this many bytes:
# a batch of 512 16 KiB objects written in 8 MiB calls cost 50-110 us of kernel time an
# object in some runs against 3 us in 1 MiB calls (all in copying into the page cache: larger
# writes take larger page-cache folios, which come from memory the machine has not used yet).
_IOV_MAX = 1024
_WRITE_BYTES = 1 << 20


class Entry(NamedTuple):
    """One entry as it is written: its head (header, key and record) and the body, apart,
    so that the body is never copied to be written."""

    head: bytes
    body: bytes

    @property
    def size(self) -> int:
        return len(self.head) + len(self.body)


def pack(key: str, record: bytes, body: bytes) -> Entry:
    """One entry."""
    name = key.encode()
    crc = crc32(body, crc32(record, crc32(name)))
    header = HEADER.pack(MAGIC, crc, len(name), len(record), len(body))
    return Entry(header + name + record, body)


def locate(data: bytes | memoryview, key: str, *, check: bool = True) -> tuple[int, int]:
    """Where the record and the body begin in the entry ``data`` for ``key`` (the record
    ends where the body begins); Damaged if it is not that. The CRC is checked unless
    ``check`` is False (an entry this process wrote, or checked before: the page cache has
    what it wrote or read, and an entry is never changed)."""
    if len(data) < HEADER.size:
        raise Damaged(f"entry of {len(data)} bytes")
    magic, crc, key_length, record_length, body_length = HEADER.unpack_from(data)
    end = HEADER.size + key_length + record_length + body_length
    if magic != MAGIC or end != len(data):
        raise Damaged("not an entry, or not of its recorded length")
    view = memoryview(data)
    if check and crc32(view[HEADER.size :]) != crc:
        raise Damaged("entry fails its CRC")
    at = HEADER.size + key_length
    if view[HEADER.size : at] != key.encode():
        raise Damaged("entry of another key")
    return at, at + record_length


def unpack(data: bytes | memoryview, key: str) -> tuple[bytes, bytes]:
    """(record, body) of the entry ``data`` for ``key``, checked and copied out of it;
    Damaged if it is not that."""
    at, body_at = locate(data, key)
    view = memoryview(data)
    return bytes(view[at:body_at]), bytes(view[body_at:])


def _write_all(fd: int, buffers: list[bytes]) -> None:
    """``writev`` until every byte of ``buffers`` is written."""
    views = [memoryview(b) for b in buffers]
    first = 0  # (the views before it are written)
    while first < len(views):
        written = os.writev(fd, views[first:])
        while first < len(views) and written >= len(views[first]):
            written -= len(views[first])
            first += 1
        if written:
            views[first] = views[first][written:]


def _write_back(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing ``length`` bytes from ``offset`` to the device now
    rather than when they are 30 s old (as RocksDB's ``bytes_per_sync``): pages written back
    are clean, so the memory they hold is taken back without waiting, and a cache writing
    200 MB/s never has gigabytes of dirty pages to flush at once (a memory cgroup full of them
    stalled the disk writer for hundreds of milliseconds). Not a durability step: nothing
    waits for the device, and a failure is for the kernel's writeback to report."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


class Segments:
    """The segment files of one disk tier. ``append`` and ``remove`` run under the tier's
    lock (its writer); ``read`` in any thread; ``read_nowait`` on the event loop."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._readers: dict[int, int] = {}
        self._retired: list[int] = []
        self._opening = threading.Lock()
        self._active: tuple[int, int] | None = None  # (number, descriptor to append to)
        self._buffer = bytearray(64 << 10)  # ``read_nowait``'s
        # ``cached``'s arguments, made once (like the buffer, for the event loop's thread).
        self._range, self._stat = _CacheRange(), _CacheStat()
        self._range_ref, self._stat_ref = ctypes.byref(self._range), ctypes.byref(self._stat)
        # Segments this process started: every entry in them is one it wrote.
        self.own: set[int] = set()

    def path(self, number: int) -> Path:
        return self.directory / f"{number:08d}"

    def existing(self) -> list[int]:
        """The numbers of the segment files there are."""
        return sorted(int(p.name) for p in self.directory.iterdir() if p.name.isdigit())

    @property
    def active(self) -> int | None:
        return None if self._active is None else self._active[0]

    def start(self, number: int) -> None:
        """Append from now on to a new segment ``number``."""
        self.finish()
        path = self.path(number)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._active = (number, fd)
        self.own.add(number)
        self.open_reader(number)

    def open_reader(self, number: int) -> None:
        """Open segment ``number`` for reading (before the event loop reads it)."""
        self._reader(number)

    def finish(self) -> None:
        """Stop appending to the active segment (it stays readable)."""
        if self._active is not None:
            os.close(self._active[1])
            self._active = None

    def append(self, entries: list[Entry]) -> list[Location]:
        """Write ``entries`` at the end of the active segment (with ``writev``: no batch is
        joined into one buffer). If that fails, the segment is finished: what follows goes
        to a new one, never after bytes of unknown length."""
        assert self._active is not None, "a segment is started before the first append"
        number, fd = self._active
        buffers = [part for entry in entries for part in entry if part]
        try:
            offset = os.fstat(fd).st_size
            start = size = 0
            for end, buffer in enumerate(buffers, 1):
                size += len(buffer)
                if size >= _WRITE_BYTES or end - start == _IOV_MAX:
                    _write_all(fd, buffers[start:end])
                    start, size = end, 0
            if start < len(buffers):
                _write_all(fd, buffers[start:])
        except OSError:
            self.finish()
            raise
        _write_back(fd, offset, sum(entry.size for entry in entries))
        out = []
        for entry in entries:
            out.append(Location(number, offset, entry.size))
            offset += entry.size
        return out

    def read(self, where: Location) -> bytes:
        """The entry at ``where`` (may wait for the device); OSError if it cannot be read."""
        data = os.pread(self._reader(where.segment), where.length, where.offset)
        if len(data) != where.length:
            raise Damaged(f"segment {where.segment} ends within an entry")
        return data

    def descriptor(self, number: int) -> int | None:
        """The reading descriptor of segment ``number`` if it is open (for the event loop:
        as ``read_nowait``, it opens none)."""
        return self._readers.get(number)

    def cached(self, fd: int, offset: int, length: int) -> bool:
        """Whether the page cache holds all ``length`` bytes of ``fd`` from ``offset``: they
        can then be sent without waiting on the device, and without reading them first
        (``read_nowait`` copies them). False where the kernel cannot tell (before Linux 6.5,
        or a sandbox refusing the call): ask ``read_nowait`` instead."""
        if not CACHESTAT or length <= 0:
            return False
        self._range.offset, self._range.length = offset, length
        if _syscall(_CACHESTAT, fd, self._range_ref, self._stat_ref, 0) < 0:
            return False
        pages = (offset + length - 1) // _PAGE - offset // _PAGE + 1
        return int(self._stat.cached) >= pages

    def read_nowait(self, where: Location) -> memoryview | None:
        """The entry at ``where`` if the page cache holds all of it, else None: a view of a
        buffer the next call reuses (one thread only: the event loop's), so the entry is
        copied once, out of it, and no buffer is made and zeroed for each."""
        fd = self._readers.get(where.segment)
        if fd is None:
            return None  # (another process's segment, not opened yet: for a thread)
        if len(self._buffer) < where.length:
            self._buffer = bytearray(where.length)
        view = memoryview(self._buffer)[: where.length]
        try:
            got = os.preadv(fd, [view], where.offset, os.RWF_NOWAIT)
        except OSError:
            return None  # (EAGAIN: not all cached; anything else: ``read`` will say)
        return view if got == where.length else None

    def remove(self, number: int) -> None:
        """Delete segment ``number``'s file (its descriptor is closed at the next removal)."""
        if self.active == number:
            self.finish()
        for fd in self._retired:
            os.close(fd)
        self._retired = []
        if number in self._readers:
            self._retired.append(self._readers.pop(number))
        self.own.discard(number)
        self.path(number).unlink(missing_ok=True)

    def prune(self, known: set[int]) -> None:
        """Let go of the descriptors of segments not in ``known`` (removed by another
        process sharing the tier: the file's space is freed once nothing holds it open);
        closed at the next prune or removal, as ``remove``'s are."""
        for fd in self._retired:
            os.close(fd)
        gone = [number for number in self._readers if number not in known]
        self._retired = [self._readers.pop(number) for number in gone]

    def close(self) -> None:
        self.finish()
        for fd in [*self._readers.values(), *self._retired]:
            os.close(fd)
        self._readers.clear()
        self._retired = []

    def _reader(self, number: int) -> int:
        fd = self._readers.get(number)
        if fd is not None:
            return fd
        with self._opening:
            fd = self._readers.get(number)
            if fd is None:
                fd = os.open(self.path(number), os.O_RDONLY)
                self._readers[number] = fd
            return fd
