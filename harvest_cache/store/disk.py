"""The disk tier: objects in a diskcache.Cache, large bodies moved into place by rename.

Every method is synchronous and thread-safe: the tiered store calls them through its
executor, never on the event loop. Under the cache directory::

    objects/   the diskcache.Cache: its SQLite index and body files (objects/xx/yy/*.val)
    tmp/       spools of bodies being written; any found at open belong to a dead process

An object under 32 KiB and a Vary marker are one row of a table of their own (``Small``: key,
time stored, record, body) in the same SQLite file: storing a batch of them is one
``executemany``, a fraction of what diskcache's ``set`` costs per row. The body is the row's
last column, so listing or rewriting records reads no body. A larger object is two
diskcache rows: ``h:KEY`` holds its record (codec.py), which names a body row ``b:TOKEN``, a
file, with a fresh token per commit. Since a record holds or names exactly one body, a reader
never pairs a head with another version's body, however a concurrent commit interleaves with
its two lookups. A key is in one table or the other: storing in one drops it from the other.

Crash safety. A body is written to a spool in tmp/; both rows are committed in one SQLite
transaction; then the spool is renamed to the file name the body row already holds. A kill
before the commit leaves a spool (removed at open); a kill after it and before the rename
leaves rows whose file is missing, which read as absent (diskcache's ``get`` treats a missing
file as a miss) until the key is stored again or evicted. No file is ever left in objects/
without a row, and the body's length, and CRC-32 when it is read whole, is checked on read.

Membership. The tier keeps, in memory, a fingerprint (``hash``) of every key it holds, read
at open and kept up to date by every change, cull included: whether a key may be on disk is
known without I/O, so a miss for a key it does not hold is a miss at once (the fast paths
take it, and ICP answers it). A fingerprint shared by two keys only sends a request the long
way; about 60 bytes a key, as Squid's in-memory index of its cache_dir.

Eviction. diskcache culls by ``least-recently-stored`` (FIFO by store time), and so does
``Small``. We chose it over
``least-recently-used`` because LRU makes every disk hit a SQLite write transaction,
serialising readers behind writers; the hot set lives in the LRU memory tier anyway, as in
Squid where the memory cache shields the disk store. Automatic culling inside ``set`` is off
(``cull_limit=0``); each commit culls explicitly, so the tier stays within its bound after
every commit and the number of evicted rows can be counted. The cull is the policy's own query
over both tables (the ten oldest rows of either at a time), made here because diskcache's
``cull`` knows neither ``Small`` nor says which keys it removed, and the membership must
forget them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import diskcache
from diskcache.core import MODE_BINARY, UNKNOWN

from harvest_cache.errors import HarvestCacheError
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.codec import CorruptRecord, ObjectRecord, decode, encode
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import FileBody, Found, StoredObject

EVICTION_POLICY = "least-recently-stored"
# Pages of the index each SQLite connection caches (4 KiB each).
SQLITE_CACHE_PAGES = 1024
# The policy's cull over diskcache's rows and Small's, keys included (see "Eviction" above).
_OLDEST = "SELECT store_time, rowid, key, filename FROM Cache ORDER BY store_time LIMIT 10"
_SMALL_OLDEST = "SELECT stored, rowid, key FROM Small ORDER BY stored LIMIT 10"
_SMALL_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS Small (key TEXT PRIMARY KEY, stored REAL NOT NULL,"
    " record BLOB NOT NULL, body BLOB)",
    "CREATE INDEX IF NOT EXISTS Small_stored ON Small (stored)",
)
_SMALL_PUT = "INSERT OR REPLACE INTO Small (key, stored, record, body) VALUES (?, ?, ?, ?)"
_SMALL_GET = "SELECT record FROM Small WHERE key = ?"
_SMALL_GET_WHOLE = "SELECT record, body FROM Small WHERE key = ?"
_SMALL_REWRITE = "UPDATE Small SET stored = ?, record = ? WHERE key = ?"
_SMALL_DELETE = "DELETE FROM Small WHERE key = ?"
_SMALL_KEYS = "SELECT key FROM Small"
_SMALL_RECORDS = "SELECT record FROM Small"
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
                self.crc32 = zlib.crc32(chunk, self.crc32)

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
    """Objects and Vary markers in a size-bounded diskcache.Cache (see the module docstring)."""

    def __init__(
        self, cache: diskcache.Cache, tmp: Path, lock_fd: int, held: set[int] | None = None
    ) -> None:
        self._cache = cache
        # Fingerprints of the keys stored (see "Membership"): changed under the lock, read
        # from any thread (a set's look-up is atomic).
        self._held: set[int] = held if held is not None else set()
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
        try:
            tmp.mkdir(parents=True, exist_ok=True)
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
            for statement in _SMALL_SCHEMA:
                cache._sql(statement)
            held = {hash(name[2:]) for (name,) in cache._sql(_ALL_RECORDS)}
            held.update(hash(name) for (name,) in cache._sql(_SMALL_KEYS))
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot open the disk tier in {directory}: {e}") from e
        return cls(cache, tmp, lock_fd, held)

    def may_hold(self, key: str) -> bool:
        """Whether ``key`` may have an object or marker here (False: certainly not); no I/O."""
        return hash(key) in self._held

    def new_spool(self) -> Spool:
        """A spool for one body; no I/O until its first append."""
        return Spool(self._tmp / f"{uuid.uuid4().hex}.part")

    def get(self, key: str, read_limit: int) -> Found | None:
        """The marker or object under ``key``, or None.

        Bodies up to ``read_limit`` bytes come back as checked bytes (for promotion); larger
        ones as a FileBody the caller must close, after a length check.
        """
        try:
            row = self._cache._sql(_SMALL_GET_WHOLE, (key,)).fetchone()
            if row is not None:
                small = decode(row[0])
                if isinstance(small, VaryMarker):
                    return small
                return StoredObject(small.head, _checked(small, row[1] or b"", -1), "disk")
            record = self._large_or_none(key, strict=True)
            if not isinstance(record, ObjectRecord):
                return record
            body = self._cache.get(record.body_key, read=True)
            if body is None:  # evicted, or committed and not yet renamed into place
                return None
            return StoredObject(record.head, _checked(record, body, read_limit), "disk")
        except (CorruptRecord, _DamagedBody) as e:
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
                    replaced = self._store(key, ObjectRecord(head, "", zlib.crc32(body)), body)
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
        """Bodies shorter than this are kept in Small, beside their records (``commit_many``
        takes them)."""
        return self._min_file_size

    def commit_many(self, objects: list[tuple[str, StoredHead, bytes]]) -> int:
        """Store objects whose bodies are shorter than ``inline_limit``, in one transaction;
        the rows evicted to make room. (Only this process writes behind, so the membership
        tells which keys are new: for those the record replaced is not looked for.)"""
        try:
            with self._mutating(), self._cache.transact():
                now = time.time()
                new = []
                for key, head, body in objects:
                    assert len(body) < self._min_file_size, "only inline bodies are batched"
                    record = ObjectRecord(head, "", zlib.crc32(body))
                    if self.may_hold(key):
                        self._store(key, record, body)
                    else:  # (in order: a key twice in a batch keeps its last object)
                        new.append((key, now, encode(record), body))
                self._cache._con.executemany(_SMALL_PUT, new)
                self._held.update(hash(key) for key, _, _, _ in new)
                return self._cull()
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot store {len(objects)} objects: {e}") from e

    def put_marker(self, key: str, marker: VaryMarker) -> int:
        """Store a Vary marker under ``key``; returns the number of rows evicted."""
        try:
            with self._mutating():
                self._store(key, marker)
                return self._cull()
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot store the marker {key!r}: {e}") from e

    def update_head(self, key: str, head: StoredHead) -> None:
        """Rewrite an object's record only; the body is unchanged, so its length is kept."""
        try:
            with self._mutating(), self._cache.transact():
                old, small = self._locate(key)
                if isinstance(old, ObjectRecord):
                    new_head = head.with_body_length(old.head.body_length)
                    new = encode(ObjectRecord(new_head, old.body_key, old.body_crc32))
                    if small:
                        self._cache._sql(_SMALL_REWRITE, (time.time(), new, key))
                    else:
                        self._cache.set(_head_key(key), new)
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot update the head of {key!r}: {e}") from e

    def delete(self, key: str) -> None:
        try:
            with self._mutating():
                self._delete(key)
        except STORAGE_ERRORS as e:
            raise DiskError(f"cannot delete {key!r}: {e}") from e

    def volume(self) -> int:
        """Bytes the tier occupies, as diskcache bounds it: index pages plus body files."""
        try:
            return int(self._cache.volume())
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
        """Let go of the file lock and this process's spool directory (after the last use)."""
        os.close(self._lock_fd)
        shutil.rmtree(self._tmp, ignore_errors=True)

    # -- under the lock ----------------------------------------------------------------------

    def _store(
        self, key: str, record: ObjectRecord | VaryMarker, body: bytes | _Staged | None = None
    ) -> bool:
        """Put ``record`` under ``key`` with its ``body``: a marker (no body) or an object with
        its body's bytes in Small, an object with its body file (``_Staged``) in diskcache;
        dropping what the key held in either table; whether it held anything."""
        cache = self._cache
        with cache.transact():
            old, small = self._locate(key)
            if not isinstance(body, _Staged):
                cache._sql(_SMALL_PUT, (key, time.time(), encode(record), body))
                if old is not None and not small:
                    self._drop_large(key, old)
            else:
                assert isinstance(record, ObjectRecord)
                cache.set(record.body_key, body)
                cache.set(_head_key(key), encode(record))
                if small:
                    cache._sql(_SMALL_DELETE, (key,))
                elif isinstance(old, ObjectRecord):
                    cache.delete(old.body_key)
        self._held.add(hash(key))
        return old is not None

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
            self._cache._sql(_SMALL_DELETE, (key,))
            old = self._large_or_none(key)
            self._cache.delete(_head_key(key))
            if isinstance(old, ObjectRecord):
                self._cache.delete(old.body_key)
        self._held.discard(hash(key))

    def _cull(self) -> int:
        """Remove the oldest rows until the tier is within its bound; the rows removed."""
        cache = self._cache
        evicted = 0
        while cache.volume() > cache.size_limit:
            with cache._transact() as (sql, remove_file):
                large = sql(_OLDEST).fetchall()
                small = sql(_SMALL_OLDEST).fetchall()
                oldest = sorted([(row[0], 1, row) for row in large] + [(r[0], 0, r) for r in small])
                if not oldest:
                    break
                gone_large = [row for _, kind, row in oldest[:10] if kind]
                gone_small = [row for _, kind, row in oldest[:10] if not kind]
                for table, rows in (("Cache", gone_large), ("Small", gone_small)):
                    if rows:
                        marks = ",".join("?" * len(rows))
                        sql(f"DELETE FROM {table} WHERE rowid IN ({marks})", [r[1] for r in rows])
                for _, _, name, filename in gone_large:
                    remove_file(filename)  # (after the commit; None for an inline body)
                    if isinstance(name, str) and name.startswith("h:"):
                        self._held.discard(hash(name[2:]))
                for _, _, name in gone_small:
                    self._held.discard(hash(name))
            evicted += len(gone_large) + len(gone_small)
        return evicted

    # -- reading -------------------------------------------------------------------------------

    def heads(self) -> list[StoredHead]:
        """The heads of all stored objects (unreadable records are left out)."""
        out = []
        try:
            for (raw,) in self._cache._sql(_SMALL_RECORDS).fetchall():
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
        """The record ``key`` holds, and whether it is in Small (a damaged one counts as
        absent, since it goes anyway)."""
        row = self._cache._sql(_SMALL_GET, (key,)).fetchone()
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


def _checked(record: ObjectRecord, body: bytes | BinaryIO, read_limit: int) -> bytes | FileBody:
    """The body after its integrity check: bytes if small enough, else a FileBody."""
    length = record.head.body_length
    if not isinstance(body, bytes):
        if length > read_limit:
            return _file_body(body, length)
        with body:
            body = body.read(length + 1)
    if len(body) != length or zlib.crc32(body) != record.body_crc32:
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
