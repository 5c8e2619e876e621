"""The disk tier: objects in a diskcache.Cache, large bodies moved into place by rename.

Every method is synchronous and thread-safe: the tiered store calls them through its
executor, never on the event loop. Under the cache directory::

    objects/   the diskcache.Cache: its SQLite index and body files (objects/xx/yy/*.val)
    tmp/       spools of bodies being written; any found at open belong to a dead process

An object under 32 KiB and a Vary marker are one entry appended to a segment file
(store.segments: key, record and body under one CRC), and a row of the ``Logged`` table
naming where it lies (key, segment, offset, length, and the record, so that listing heads
reads no body). A revalidation rewrites the record in the row alone, not the entry, body and
all; such an object is read in a thread, the row's record with the entry's body, until it is
stored anew. Storing a batch of them is one write and one
``executemany``; reading one on the event loop is a copy from the page cache when the kernel
holds it (``read_nowait``), else a read in a thread. A larger object is two diskcache rows:
``h:KEY`` holds its record (codec.py), which names a body row ``b:TOKEN``, a file, with a
fresh token per commit. Since a record holds or names exactly one body, a reader never pairs a
head with another version's body, however a concurrent commit interleaves with its two
lookups. A key is in one table or the other: storing in one drops it from the other. (Small
objects of the layout before segments, rows of a ``Small`` table, are moved into segments at
open.)

Crash safety. A body is written to a spool in tmp/; both rows are committed in one SQLite
transaction; then the spool is renamed to the file name the body row already holds. A kill
before the commit leaves a spool (removed at open); a kill after it and before the rename
leaves rows whose file is missing, which read as absent (diskcache's ``get`` treats a missing
file as a miss) until the key is stored again or evicted. No file is ever left in objects/
without a row, and the body's length, and CRC-32 when it is read whole, is checked on read.
A segment entry is appended before the transaction that adds its row commits: a kill between
leaves bytes no row names, gone with their segment. A segment file without a row (a kill
before its first commit) is removed at open.

Membership. The tier keeps, in memory, where each small object's entry lies (by the
``hash`` of its key) and a fingerprint of every larger object's key, read at open and kept up
to date by every change, cull included: whether a key may be on disk is known without I/O, so
a miss for a key it does not hold is a miss at once (the fast paths take it, and ICP answers
it). A hash shared by two keys only sends a request the long way; about 125 bytes a small
object and 60 a large one, as Squid's in-memory index of its cache_dir.

Eviction. diskcache culls by ``least-recently-stored`` (FIFO by store time), and so do the
segments, a whole segment (a sixteenth of the tier, 1 to 64 MiB) at a time, the oldest
first. We chose it over ``least-recently-used`` because LRU makes every disk hit a write,
serialising readers behind writers; the hot set lives in the LRU memory tier anyway, as in
Squid where the memory cache shields the disk store. Automatic culling inside ``set`` is off
(``cull_limit=0``); each commit culls explicitly, so the tier stays within its bound after
every commit and the number of evicted objects can be counted. The cull is the policy's own,
over diskcache's rows and the segments (whichever is older goes first), made here because
diskcache's ``cull`` knows no segments nor says which keys it removed, and the membership
must forget them. A dropped segment's file and its ``Segment`` row go at once; its objects'
rows, which no query reads any more (they name no segment there is), are deleted a few
hundred with each later batch, so that no commit waits for tens of thousands of deletions.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import diskcache
from diskcache.core import MODE_BINARY, UNKNOWN
from isal.isal_zlib import crc32

from harvest_cache.errors import HarvestCacheError
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.codec import CorruptRecord, ObjectRecord, decode, encode
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import DiskHit, FileBody, Found, StoredObject
from harvest_cache.store.segments import Damaged, Location, Segments, locate, pack, unpack

EVICTION_POLICY = "least-recently-stored"
# Pages of the index each SQLite connection caches (4 KiB each): 1 MiB, as 4 MiB cost a
# 16 KiB miss storm 7 MiB more at its peak and no less CPU.
SQLITE_CACHE_PAGES = 256
# The policy's cull over diskcache's rows, keys included (see "Eviction" above).
_OLDEST = "SELECT store_time, rowid, key, filename FROM Cache ORDER BY store_time LIMIT 10"
# Segments take a sixteenth of the tier each, within these bounds.
SEGMENT_MIN = 1 << 20
SEGMENT_MAX = 64 << 20
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS Segment (number INTEGER PRIMARY KEY AUTOINCREMENT,"
    " created REAL NOT NULL, size INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS Logged (key TEXT PRIMARY KEY, segment INTEGER NOT NULL,"
    " offset INTEGER NOT NULL, length INTEGER NOT NULL, record BLOB NOT NULL,"
    " rewritten INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS Logged_segment ON Logged (segment)",
)
_LOGGED_PUT = (
    "INSERT OR REPLACE INTO Logged (key, segment, offset, length, record, rewritten)"
    " VALUES (?, ?, ?, ?, ?, 0)"
)
# Rows whose segment was dropped are left to be deleted a few at a time (``_trim``): every
# reading query takes only rows of segments there are.
_LIVE = "EXISTS (SELECT 1 FROM Segment WHERE number = Logged.segment)"
_LOGGED_GET = f"SELECT segment, offset, length, record FROM Logged WHERE key = ? AND {_LIVE}"
_LOGGED_REWRITE = "UPDATE Logged SET record = ?, rewritten = 1 WHERE key = ?"
_LOGGED_REWRITTEN = f"SELECT key FROM Logged WHERE rewritten AND {_LIVE}"
# Logged as the first segment layout made it, without ``rewritten``.
_LOGGED_COLUMNS = "PRAGMA table_info(Logged)"
_LOGGED_ADD_REWRITTEN = "ALTER TABLE Logged ADD COLUMN rewritten INTEGER NOT NULL DEFAULT 0"
_LOGGED_RECORD = f"SELECT record FROM Logged WHERE key = ? AND {_LIVE}"
_LOGGED_DELETE = "DELETE FROM Logged WHERE key = ?"
_LOGGED_ALL = f"SELECT key, segment, offset, length FROM Logged WHERE {_LIVE}"
_LOGGED_RECORDS = f"SELECT record FROM Logged WHERE {_LIVE}"
_LOGGED_COUNT = "SELECT count(*) FROM Logged WHERE segment = ?"
_LOGGED_DROP = "DELETE FROM Logged WHERE segment = ?"
_LOGGED_TRIM = (
    "DELETE FROM Logged WHERE rowid IN (SELECT rowid FROM Logged WHERE segment = ? LIMIT ?)"
)
_LOGGED_DANGLING = "SELECT DISTINCT segment FROM Logged WHERE NOT " + _LIVE
# Rows of dropped segments deleted with each commit at most: deleting a 64 MiB segment's rows
# at once (50,000 for 1 KiB objects) held the writer for 160-280 ms, long enough for 32 MiB of
# objects to queue behind it.
TRIM_ROWS = 500
# Entries of earlier processes' segments remembered as checked, at most (about 60 bytes each).
CHECKED_MAX = 1 << 18
_SEGMENT_NEW = "INSERT INTO Segment (created, size) VALUES (?, 0)"
_SEGMENT_GROW = "UPDATE Segment SET size = ? WHERE number = ?"
_SEGMENT_SIZE = "SELECT size FROM Segment WHERE number = ?"
_SEGMENT_OLDEST = "SELECT number, created FROM Segment ORDER BY number LIMIT 1"
_SEGMENT_TOTAL = "SELECT coalesce(sum(size), 0) FROM Segment"
_SEGMENT_ALL = "SELECT number FROM Segment"
_SEGMENT_DROP = "DELETE FROM Segment WHERE number = ?"
# The layout before segments: small objects' rows with their bodies (moved at open).
_FORMER_SMALL = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'Small'"
_FORMER_ROWS = "SELECT key, record, body FROM Small ORDER BY stored LIMIT 256"
_FORMER_DELETE = "DELETE FROM Small WHERE key = ?"
# What the storage layers raise; each is mapped to DiskError at this module's boundary.
STORAGE_ERRORS = (OSError, sqlite3.Error, diskcache.Timeout)


class DiskError(HarvestCacheError):
    """A disk-tier operation failed (I/O, SQLite, damaged data); the cause is chained."""


class _DamagedBody(Exception):
    """A body whose length or checksum does not match its record."""


class Spool:
    """A body being written to a file in tmp/, with its running size and CRC-32.

    A lock orders ``append`` and ``discard``: when a writer's task is cancelled mid-append,
    its abort may run on another executor thread while the append is still going.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self.crc32 = 0
        self._file: BinaryIO | None = None
        self._discarded = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Spool {self.path.name} {self.size} bytes>"

    def append(self, chunks: list[bytes]) -> None:
        with self._lock:
            if self._discarded:
                return
            try:
                if self._file is None:
                    self._file = open(self.path, "xb")  # noqa: SIM115 - kept open across calls
                self._file.writelines(chunks)
            except OSError as e:
                raise DiskError(f"cannot write spool {self.path}: {e}") from e
            for chunk in chunks:
                self.size += len(chunk)
                self.crc32 = crc32(chunk, self.crc32)

    def finish(self) -> None:
        """Close the file so it can be renamed into place."""
        with self._lock:
            assert self._file is not None, "only a spool that was written to is finished"
            self._file.close()

    def discard(self) -> None:
        """Close and remove the file; harmless after it has been renamed away.

        Best effort: the data is garbage either way, and a file that cannot be removed now
        is removed with the rest of tmp/ at the next open.
        """
        with self._lock:
            self._discarded = True
            with suppress(OSError):
                if self._file is not None:
                    self._file.close()
            with suppress(OSError):
                self.path.unlink()


@dataclass(frozen=True, slots=True)
class _Staged:
    """A spooled body as a diskcache value: the row records ``filename``, nothing is copied."""

    filename: str
    size: int


class _StagingDisk(diskcache.Disk):  # type: ignore[misc]  # diskcache has no type hints
    """diskcache's Disk, taught one more kind of value: a _Staged body.

    Plain ``Disk.store`` copies a file-like value into a new file; for a spooled body that
    would write a large body twice. Here the row just names the file the spool will be
    renamed to once the transaction has committed.
    """

    def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> tuple[Any, ...]:
        if isinstance(value, _Staged):
            return value.size, MODE_BINARY, value.filename, None
        return tuple(super().store(value, read, key=key))


# Every record's key (diskcache keeps str keys as TEXT, so this is a range of its index).
_ALL_RECORDS = "SELECT key FROM Cache WHERE key >= 'h:' AND key < 'h;'"


def _head_key(key: str) -> str:
    return "h:" + key


def _new_body_key() -> str:
    return "b:" + uuid.uuid4().hex


def _remove_dead_spools(spools: Path) -> None:
    """Remove spool directories of processes that are gone (and files of older versions)."""
    for entry in spools.iterdir():
        if entry.is_file():
            entry.unlink()
        elif not (entry.name.isdigit() and _alive(int(entry.name))):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    return True


class Committed(NamedTuple):
    """What storing an object did: rows evicted to make room, and whether it replaced one."""

    evicted: int
    replaced: bool


class DiskTier:
    """Objects and Vary markers in a size-bounded diskcache.Cache and segment files (see the
    module docstring)."""

    def __init__(
        self,
        cache: diskcache.Cache,
        segments: Segments,
        tmp: Path,
        lock_fd: int,
        segment_bytes: int,
    ) -> None:
        self._cache = cache
        self._segments = segments
        self._segment_bytes = segment_bytes
        self._active_size = 0  # bytes in this process's active segment
        # Where each small object's entry lies, and fingerprints of the larger objects' keys
        # (see "Membership"): changed under the lock, read from any thread (a dict's or a
        # set's look-up is atomic).
        self._logged: dict[int, int] = {}  # hash -> its Location, packed (see _packed)
        self._held: set[int] = set()
        # Dropped segments whose rows are still to be deleted (``_trim``), oldest first.
        self._dangling: list[int] = []
        # Small objects whose record was rewritten (a revalidation) in their row, not in
        # their entry: read in a thread, which takes the row's record with the entry's body.
        self._rewritten: set[int] = set()
        # Entries of segments this process did not write that it has read and checked (their
        # packed locations): read again, they are not checked again (``send_nowait``).
        self._checked: set[int] = set()
        self._tmp = tmp
        self._min_file_size = int(cache.disk.min_file_size)
        # Serialise mutations, so no cull or delete can run between a commit and its rename
        # (it would remove a file that is not there yet, and the rename would leave an orphan):
        # between this process's threads, and (a file lock) between the processes of a cache
        # with several workers.
        self._lock = threading.Lock()
        self._lock_fd = lock_fd

    @contextmanager
    def _mutating(self) -> Iterator[None]:
        with self._lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def __repr__(self) -> str:
        return f"<DiskTier {self._cache.directory}>"

    @classmethod
    def open(cls, directory: Path, size_limit: int) -> DiskTier:
        """Open or create the tier in ``directory``, removing spools left by dead processes
        (each process spools in a directory of its own: workers share the tier)."""
        spools = directory / "tmp"
        tmp = spools / str(os.getpid())
        segment_bytes = max(SEGMENT_MIN, min(SEGMENT_MAX, size_limit // 16))
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            (directory / "segments").mkdir(exist_ok=True)
            _remove_dead_spools(spools)
            lock_fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
            cache = diskcache.Cache(
                directory / "objects",
                disk=_StagingDisk,
                size_limit=size_limit,
                eviction_policy=EVICTION_POLICY,
                cull_limit=0,
                statistics=0,  # statistics would make every get a write transaction
                # Each thread has a connection of its own; with diskcache's defaults each
                # mapped 64 MiB of the index and cached 32 MiB of its pages, counted once per
                # connection (a 1 KiB miss storm peaked at 326 MiB with a 64 MiB memory tier).
                # The kernel's page cache holds the index once for all of them.
                sqlite_mmap_size=0,
                sqlite_cache_size=SQLITE_CACHE_PAGES,
            )
            for statement in _SCHEMA:
                cache._sql(statement)
            if "rewritten" not in {row[1] for row in cache._sql(_LOGGED_COLUMNS)}:
                cache._sql(_LOGGED_ADD_REWRITTEN)
            tier = cls(cache, Segments(directory / "segments"), tmp, lock_fd, segment_bytes)
            with tier._mutating():
                tier._open_segments()
                tier._move_former_small()
            tier._held = {hash(name[2:]) for (name,) in cache._sql(_ALL_RECORDS)}
            tier._logged = {
                hash(key): _packed(Location(segment, offset, length))
                for key, segment, offset, length in cache._sql(_LOGGED_ALL)
            }
            tier._rewritten = {hash(key) for (key,) in cache._sql(_LOGGED_REWRITTEN)}
            tier._dangling = sorted(number for (number,) in cache._sql(_LOGGED_DANGLING))
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot open the disk tier in {directory}: {e}") from e
        return tier

    def _open_segments(self) -> None:
        """Open the segments the tier has for reading; remove files without a row (a kill
        before their first commit) and rows without a file."""
        known = {number for (number,) in self._cache._sql(_SEGMENT_ALL)}
        files = set(self._segments.existing())
        for number in files - known:
            self._segments.remove(number)
        with self._cache.transact():
            for number in known - files:
                self._cache._sql(_LOGGED_DROP, (number,))
                self._cache._sql(_SEGMENT_DROP, (number,))
        for number in sorted(known & files):
            self._segments.open_reader(number)

    def _move_former_small(self) -> None:
        """Move the objects of the layout before segments into them (a few hundred a
        transaction, so a kill midway loses nothing)."""
        cache = self._cache
        if cache._sql(_FORMER_SMALL).fetchone() is None:
            return
        while rows := cache._sql(_FORMER_ROWS).fetchall():
            with cache.transact():
                self._logged.update(self._log([(k, r, b or b"") for k, r, b in rows]))
                cache._con.executemany(_FORMER_DELETE, [(row[0],) for row in rows])
        cache._sql("DROP TABLE Small")

    def may_hold(self, key: str) -> bool:
        """Whether ``key`` may have an object or marker here (False: certainly not); no I/O."""
        h = hash(key)
        return h in self._logged or h in self._held

    def new_spool(self) -> Spool:
        """A spool for one body; no I/O until its first append."""
        return Spool(self._tmp / f"{uuid.uuid4().hex}.part")

    def read_nowait(self, key: str) -> Found | None:
        """The small object or marker under ``key`` if this process knows where it lies and
        the page cache holds it all, checked; for the event loop, as it never waits on the
        device. None says nothing: ``get`` in a thread tells (it may be there, or large)."""
        h = hash(key)
        where = self._logged.get(h)
        if where is None or h in self._rewritten:
            return None
        data = self._segments.read_nowait(_unpacked(where))
        if data is None:
            return None
        try:
            record, body = unpack(data, key)
            found = decode(record)
        except (Damaged, CorruptRecord):
            return None  # (``get`` reads it again, and drops it if it is damaged)
        if isinstance(found, VaryMarker):
            return found
        if found.head.body_length != len(body):
            return None
        return StoredObject(found.head, body, "disk")

    def send_nowait(self, key: str) -> DiskHit | None:
        """As ``read_nowait``, for an object to be answered at once: its body is left where
        it was read, to be sent from there. Read whole all the same, so the page cache is
        known to hold it; checked by its CRC on this process's first read unless this process
        wrote it. None for a marker, or as ``read_nowait`` says."""
        h = hash(key)
        where = self._logged.get(h)
        if where is None or h in self._rewritten:
            return None
        location = _unpacked(where)
        data = self._segments.read_nowait(location)
        if data is None:
            return None
        trusted = location.segment in self._segments.own or where in self._checked
        try:
            at, body_at = locate(data, key, check=not trusted)
            found = decode(bytes(data[at:body_at]))
        except (Damaged, CorruptRecord):
            return None
        if not trusted:
            if len(self._checked) >= CHECKED_MAX:
                self._checked.clear()  # (bounded: what is forgotten is checked again)
            self._checked.add(where)
        fd = self._segments.descriptor(location.segment)
        length = len(data) - body_at
        if isinstance(found, VaryMarker) or fd is None or found.head.body_length != length:
            return None
        return DiskHit(found.head, fd, location.offset + body_at, length, data[body_at:], where)

    def resend_nowait(self, key: str, hit: DiskHit) -> int | None:
        """For an object ``send_nowait`` gave as ``hit`` before: the descriptor to send its
        body from again, unread, if ``key`` still has that very entry (an entry's place is
        never reused: segment numbers are not, and segments are only appended to) with no
        newer head, and the page cache holds the body; else None."""
        h = hash(key)
        if self._logged.get(h) != hit.where or h in self._rewritten:
            return None
        fd = self._segments.descriptor(hit.where >> _SEGMENT_SHIFT)
        if fd is None or not self._segments.cached(fd, hit.offset, hit.length):
            return None
        return fd

    def get(self, key: str, read_limit: int) -> Found | None:
        """The marker or object under ``key``, or None.

        Bodies up to ``read_limit`` bytes come back as checked bytes (for promotion); larger
        ones as a FileBody the caller must close, after a length check.
        """
        try:
            row = self._cache._sql(_LOGGED_GET, (key,)).fetchone()
            if row is not None:
                # (the row's record: the entry's, or a newer one a revalidation wrote)
                _, body = unpack(self._segments.read(Location(*row[:3])), key)
                small = decode(row[3])
                if isinstance(small, VaryMarker):
                    return small
                if small.head.body_length != len(body):
                    raise _DamagedBody(f"body of {len(body)} bytes, expected otherwise")
                return StoredObject(small.head, body, "disk")
            large = self._large_or_none(key, strict=True)
            if not isinstance(large, ObjectRecord):
                return large
            body = self._cache.get(large.body_key, read=True)
            if body is None:  # evicted, or committed and not yet renamed into place
                return None
            return StoredObject(large.head, _checked(large, body, read_limit), "disk")
        except (CorruptRecord, _DamagedBody, Damaged) as e:
            with suppress(DiskError):
                self.delete(key)
            raise DiskError(f"damaged object {key!r} removed: {e}") from e
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot read {key!r}: {e}") from e

    def commit(self, key: str, head: StoredHead, body: bytes | Spool) -> Committed:
        """Store an object, replacing what ``key`` held; the rows evicted, and whether ``key``
        held anything (other processes sharing the tier may hold copies of that)."""
        spool = body if isinstance(body, Spool) else None
        try:
            if isinstance(body, bytes) and len(body) >= self._min_file_size:
                # diskcache would write this file itself before its transaction, where a kill
                # leaves an orphan; going through a spool keeps the one crash-safe path.
                spool = self.new_spool()
                spool.append([body])
            if spool is not None:
                spool.finish()
            with self._mutating():
                if spool is None:
                    assert isinstance(body, bytes)
                    replaced = self._store(key, ObjectRecord(head, "", 0), body)
                else:
                    staged = _Staged(self._cache.disk.filename()[0], spool.size)
                    record = ObjectRecord(head, _new_body_key(), spool.crc32)
                    replaced = self._store(key, record, staged)
                    self._place(key, spool, staged.filename)
                return Committed(self._cull(), replaced)
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot store {key!r}: {e}") from e
        finally:
            if spool is not None:
                spool.discard()

    @property
    def inline_limit(self) -> int:
        """Bodies shorter than this are kept in segments (``commit_many`` takes them)."""
        return self._min_file_size

    def commit_many(self, objects: list[tuple[str, StoredHead, bytes]]) -> int:
        """Store objects whose bodies are shorter than ``inline_limit``, in one write and one
        transaction; the objects evicted to make room. (A key whose object is large now
        goes the long way, which drops that.)"""
        try:
            with self._mutating():
                with self._cache.transact():
                    batch = []
                    for key, head, body in objects:
                        assert len(body) < self._min_file_size, "only inline bodies are batched"
                        record = ObjectRecord(head, "", 0)
                        if hash(key) in self._held:
                            self._store(key, record, body)
                        else:  # (in order: a key twice in a batch keeps its last object)
                            batch.append((key, encode(record), body))
                    placed = self._log(batch)
                self._logged.update(placed)
                self._rewritten.difference_update(h for h, _ in placed)
                return self._cull()
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot store {len(objects)} objects: {e}") from e

    def put_marker(self, key: str, marker: VaryMarker) -> int:
        """Store a Vary marker under ``key``; returns the number of objects evicted."""
        try:
            with self._mutating():
                self._store(key, marker)
                return self._cull()
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot store the marker {key!r}: {e}") from e

    def update_head(self, key: str, head: StoredHead) -> None:
        """Rewrite an object's record only; the body is unchanged, so its length is kept.
        (A small object's new record goes in its row alone: its entry, body and all, is not
        written again for each revalidation.)"""
        try:
            with self._mutating():
                rewritten = False
                with self._cache.transact():
                    old, small = self._locate(key)
                    if isinstance(old, ObjectRecord):
                        new_head = head.with_body_length(old.head.body_length)
                        new = encode(ObjectRecord(new_head, old.body_key, old.body_crc32))
                        if small:
                            self._cache._sql(_LOGGED_REWRITE, (new, key))
                            rewritten = True
                        else:
                            self._cache.set(_head_key(key), new)
                if rewritten:
                    self._rewritten.add(hash(key))
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot update the head of {key!r}: {e}") from e

    def delete(self, key: str) -> None:
        try:
            with self._mutating():
                self._delete(key)
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot delete {key!r}: {e}") from e

    def volume(self) -> int:
        """Bytes the tier occupies, as its bound counts them: index pages, body files and
        segments."""
        try:
            return self._volume()
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot measure the disk tier: {e}") from e

    def close_connection(self, barrier: threading.Barrier) -> None:
        """Close the calling thread's SQLite connection (diskcache keeps one per thread).

        The store runs one of these on every executor thread at once; the barrier keeps each
        thread from taking two, so every thread's connection is closed.
        """
        barrier.wait()
        self._cache.close()

    def release(self) -> None:
        """Let go of the file lock, the segments and this process's spool directory (after
        the last use)."""
        self._segments.close()
        os.close(self._lock_fd)
        shutil.rmtree(self._tmp, ignore_errors=True)

    # -- under the lock ----------------------------------------------------------------------

    def _store(
        self, key: str, record: ObjectRecord | VaryMarker, body: bytes | _Staged | None = None
    ) -> bool:
        """Put ``record`` under ``key`` with its ``body``: a marker (no body) or an object with
        its body's bytes in a segment, an object with its body file (``_Staged``) in
        diskcache; dropping what the key held in either; whether it held anything."""
        cache = self._cache
        placed = []
        with cache.transact():
            old, small = self._locate(key)
            if not isinstance(body, _Staged):
                placed = self._log([(key, encode(record), body or b"")])
                if old is not None and not small:
                    self._drop_large(key, old)
            else:
                assert isinstance(record, ObjectRecord)
                cache.set(record.body_key, body)
                cache.set(_head_key(key), encode(record))
                if small:
                    cache._sql(_LOGGED_DELETE, (key,))
                elif isinstance(old, ObjectRecord):
                    cache.delete(old.body_key)
        h = hash(key)
        self._rewritten.discard(h)
        if placed:
            self._logged.update(placed)
            self._held.discard(h)
        else:
            self._logged.pop(h, None)
            self._held.add(h)
        return old is not None

    def _log(self, entries: list[tuple[str, bytes, bytes]]) -> list[tuple[int, int]]:
        """Append entries (key, record, body) to the active segment and their rows, within
        the caller's transaction; where each now lies, for ``_logged`` once it commits."""
        if not entries:
            return []
        packs = [pack(key, record, body) for key, record, body in entries]
        number = self._segment_with_room()
        locations = self._segments.append(packs)
        self._active_size = locations[-1].offset + locations[-1].length
        rows = [
            (key, where.segment, where.offset, where.length, record)
            for (key, record, _), where in zip(entries, locations, strict=True)
        ]
        self._cache._con.executemany(_LOGGED_PUT, rows)
        self._cache._sql(_SEGMENT_GROW, (self._active_size, number))
        return [(hash(row[0]), _packed(where)) for row, where in zip(rows, locations, strict=True)]

    def _segment_with_room(self) -> int:
        """The segment to append to: this process's active one, unless it is full or was
        culled (by another process too), else a new one."""
        number = self._segments.active
        if number is not None:
            row = self._cache._sql(_SEGMENT_SIZE, (number,)).fetchone()
            if row is not None and self._active_size < self._segment_bytes:
                return number
        # (now and then: what other processes culled is let go of)
        self._segments.prune({number for (number,) in self._cache._sql(_SEGMENT_ALL)})
        number = int(self._cache._con.execute(_SEGMENT_NEW, (time.time(),)).lastrowid)
        self._segments.start(number)
        self._active_size = 0
        return number

    def _drop_large(self, key: str, old: ObjectRecord | VaryMarker) -> None:
        """Remove ``key``'s diskcache record ``old`` and the body it names."""
        self._cache.delete(_head_key(key))
        if isinstance(old, ObjectRecord):
            self._cache.delete(old.body_key)

    def _place(self, key: str, spool: Spool, filename: str) -> None:
        """Rename a committed body's spool to its file; on failure, unstore the object."""
        target = Path(self._cache.directory, filename)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(spool.path, target)
        except OSError:
            self._delete(key)
            raise

    def _delete(self, key: str) -> None:
        with self._cache.transact():
            self._cache._sql(_LOGGED_DELETE, (key,))
            old = self._large_or_none(key)
            self._cache.delete(_head_key(key))
            if isinstance(old, ObjectRecord):
                self._cache.delete(old.body_key)
        h = hash(key)
        self._logged.pop(h, None)
        self._rewritten.discard(h)
        self._held.discard(h)

    def _volume(self) -> int:
        segments = self._cache._sql(_SEGMENT_TOTAL).fetchone()[0]
        return int(self._cache.volume()) + int(segments)

    def _cull(self) -> int:
        """Remove the oldest objects until the tier is within its bound: diskcache's rows
        ten at a time, or a whole segment, whichever is older; the objects removed. (First,
        some rows of segments dropped before: ``_trim``.)"""
        cache = self._cache
        if self._dangling:
            with cache.transact():
                self._trim()
        evicted = 0
        while self._volume() > cache.size_limit:
            large = cache._sql(_OLDEST).fetchall()
            segment = cache._sql(_SEGMENT_OLDEST).fetchone()
            if segment is not None and (not large or segment[1] <= large[0][0]):
                evicted += self._drop_segment(segment[0])
            elif large:
                evicted += self._drop_large_rows(large)
            else:
                break
        return evicted

    def _drop_segment(self, number: int) -> int:
        """Remove segment ``number`` and the objects whose entries lie there (their rows no
        longer count, and go later: ``_trim``); how many objects that was."""
        with self._cache.transact():
            (count,) = self._cache._sql(_LOGGED_COUNT, (number,)).fetchone()
            self._cache._sql(_SEGMENT_DROP, (number,))
        gone = [h for h, where in self._logged.items() if where >> _SEGMENT_SHIFT == number]
        for h in gone:
            del self._logged[h]
            self._rewritten.discard(h)
        # (a copy to look through: the event loop adds to the set meanwhile)
        for where in [w for w in list(self._checked) if w >> _SEGMENT_SHIFT == number]:
            self._checked.discard(where)
        self._segments.remove(number)
        self._dangling.append(number)
        return int(count)

    def _trim(self) -> None:
        """Delete up to ``TRIM_ROWS`` rows of dropped segments (in the caller's transaction)."""
        budget = TRIM_ROWS
        while self._dangling and budget:
            deleted = self._cache._sql(_LOGGED_TRIM, (self._dangling[0], budget)).rowcount
            if deleted < budget:
                self._dangling.pop(0)
            budget -= deleted

    def _drop_large_rows(self, rows: list[Any]) -> int:
        """Remove diskcache rows (store time, rowid, key, file name) and their files."""
        with self._cache._transact() as (sql, remove_file):
            marks = ",".join("?" * len(rows))
            sql(f"DELETE FROM Cache WHERE rowid IN ({marks})", [row[1] for row in rows])
            for _, _, name, filename in rows:
                remove_file(filename)  # (after the commit; None for an inline body)
                if isinstance(name, str) and name.startswith("h:"):
                    self._held.discard(hash(name[2:]))
        return len(rows)

    # -- reading -------------------------------------------------------------------------------

    def heads(self) -> list[StoredHead]:
        """The heads of all stored objects (unreadable records are left out)."""
        out = []
        try:
            for (raw,) in self._cache._sql(_LOGGED_RECORDS).fetchall():
                with suppress(CorruptRecord):
                    small = decode(raw)
                    if isinstance(small, ObjectRecord):
                        out.append(small.head)
            for name in self._cache.iterkeys():
                if isinstance(name, str) and name.startswith("h:"):
                    large = self._large_or_none(name[2:])
                    if isinstance(large, ObjectRecord):
                        out.append(large.head)
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot list the stored objects: {e}") from e
        return out

    def _locate(self, key: str) -> tuple[ObjectRecord | VaryMarker | None, bool]:
        """The record ``key`` holds, and whether it lies in a segment (a damaged one counts
        as absent, since it goes anyway)."""
        row = self._cache._sql(_LOGGED_RECORD, (key,)).fetchone()
        if row is not None:
            try:
                return decode(row[0]), True
            except CorruptRecord:
                return None, True
        return self._large_or_none(key), False

    def _large_or_none(self, key: str, strict: bool = False) -> ObjectRecord | VaryMarker | None:
        """``key``'s record in diskcache's rows; a damaged one counts as absent, unless
        ``strict`` (then CorruptRecord is raised)."""
        raw = self._cache.get(_head_key(key))
        try:
            return None if raw is None else decode(raw)
        except CorruptRecord:
            if strict:
                raise
            return None


# A Location as one int in the membership: a NamedTuple of three ints took 188 bytes an
# object there, an int 124 (measured with tracemalloc over 200,000 keys), and a disk tier may
# hold millions of small objects. Entries are under 2**24 bytes (16 MiB: bodies under 32 KiB
# and their heads), offsets under 2**36.
_OFFSET_SHIFT = 24
_SEGMENT_SHIFT = 60


def _packed(where: Location) -> int:
    if where.length >> _OFFSET_SHIFT or where.offset >> (_SEGMENT_SHIFT - _OFFSET_SHIFT):
        raise DiskError(f"an entry of {where.length} bytes at {where.offset} is out of range")
    return where.segment << _SEGMENT_SHIFT | where.offset << _OFFSET_SHIFT | where.length


def _unpacked(value: int) -> Location:
    return Location(
        value >> _SEGMENT_SHIFT,
        value >> _OFFSET_SHIFT & (1 << (_SEGMENT_SHIFT - _OFFSET_SHIFT)) - 1,
        value & (1 << _OFFSET_SHIFT) - 1,
    )


def _checked(record: ObjectRecord, body: bytes | BinaryIO, read_limit: int) -> bytes | FileBody:
    """The body after its integrity check: bytes if small enough, else a FileBody."""
    length = record.head.body_length
    if not isinstance(body, bytes):
        if length > read_limit:
            return _file_body(body, length)
        with body:
            body = body.read(length + 1)
    if len(body) != length or crc32(body) != record.body_crc32:
        raise _DamagedBody(f"body of {len(body)} bytes fails its check (expected {length})")
    return body


def _file_body(file: BinaryIO, length: int) -> FileBody:
    """Serve a large body from its file after checking its length (a CRC would read it all)."""
    try:
        size = os.fstat(file.fileno()).st_size
    except OSError:
        file.close()
        raise
    if size != length:
        file.close()
        raise _DamagedBody(f"body file is {size} bytes, expected {length}")
    return FileBody(file, 0, length)
