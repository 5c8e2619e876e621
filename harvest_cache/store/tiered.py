"""The ObjectStore the proxy uses: the memory hot tier over the disk tier.

The memory tier is read and written on the event loop; disk-tier reads run in an executor
the store owns, and every change runs on the disk tier's one writer thread (store.writer), in
the order asked. Small objects are written to both tiers, the disk tier's copy (and a
revalidated head) behind the request, a single process only: workers sharing the tier are
told of a change once it is there. A small object found on disk is promoted to memory (once
the memory tier is full, when store.admission says it pays); one the page cache holds is read
on the loop without waiting (``DiskTier.read_nowait``), the others in the executor. The disk
tier's membership answers, without I/O, whether a key may be there: a memory miss for a key
it does not hold is a miss at once (the memory view's ``on_disk``). Disk
failures never reach the caller: a failed read is a miss (counted in ``read_failures``, the
driver's TCP_SWAPFAIL_MISS), a failed write leaves the object unstored (``write_failures``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, TypeVarTuple

from harvest_cache.config import KIB, MIB, CacheConfig
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.admission import Admission
from harvest_cache.store.disk import Committed, DiskError, DiskTier, Spool
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import DiskHit, FileBody, Found, MemoryView, StoredObject
from harvest_cache.store.memory import MemoryTier, head_size
from harvest_cache.store.writer import DiskWriter

log = logging.getLogger(__name__)

EXECUTOR_THREADS = 4
# A body too big for the memory tier is handed to its spool in batches of at least this many
# bytes: one executor hop per batch, not per chunk from the network.
SPILL_BATCH = 1 * MIB
# A body in chunks up to this size is joined on the loop (1 MiB: about 25 us, less than a
# hop to a thread and back); a larger one in the store's executor.
JOIN_ON_LOOP = 1 * MIB
# Bytes of small objects waiting for the disk writer at most; beyond, new ones are not stored
# on disk (they are in the memory tier all the same).
WRITE_BEHIND_BYTES = 32 * MIB

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
W = TypeVar("W", bound=int | Committed | None)  # what a write to the disk tier returns


async def open_store(config: CacheConfig) -> TieredStore:
    """Open the store ``config`` describes (disk_mb=0: memory only; memory_mb=0: disk only)."""
    memory = MemoryTier(config.memory_mb * MIB, config.memory_max_object_kb * KIB)
    executor = ThreadPoolExecutor(EXECUTOR_THREADS, thread_name_prefix="harvest-store")
    disk = None
    if config.disk_mb > 0:
        loop = asyncio.get_running_loop()
        try:
            disk = await loop.run_in_executor(
                executor, DiskTier.open, config.dir, config.disk_mb * MIB
            )
        except BaseException:
            executor.shutdown(wait=False)
            raise
        limit = min(config.max_object_mb, config.disk_mb) * MIB
    else:
        limit = min(config.max_object_mb * MIB, memory.max_object)
    return TieredStore(memory, disk, executor, limit)


class TieredStore:
    """ObjectStore over a MemoryTier and, unless disk_mb is 0, a DiskTier.

    ``max_object`` is the largest body it stores (-1: none). The counters are for metrics.
    """

    def __init__(
        self,
        memory: MemoryTier,
        disk: DiskTier | None,
        executor: ThreadPoolExecutor,
        max_object: int,
    ) -> None:
        self.memory = memory
        self.max_object = max_object
        self.read_failures = 0
        self._write_failures = 0
        self._sharers: Sharers | None = None
        self._disk_evictions = 0  # diskcache rows culled: a head or a body each
        self._admission = Admission()
        self.promotions = 0  # objects read from disk and put into the memory tier
        self.kept_on_disk = 0  # objects read from disk and not promoted (store.admission)
        self._disk = disk
        # Every change to the disk tier goes through it (None: memory only).
        self.disk_writer = DiskWriter(disk, WRITE_BEHIND_BYTES) if disk is not None else None
        # What the disk tier may hold: its membership, and what is queued for it.
        self._may_hold = _never if disk is None else disk.may_hold
        self._written_behind = _never if self.disk_writer is None else self.disk_writer.holds
        self._executor = executor
        self._writers: set[TieredWriter] = set()
        # Keys with disk reads in flight, and those of them changed meanwhile: a read that
        # overlapped a change must not promote what it found over the newer state.
        self._reading: dict[str, int] = {}
        self._changed: set[str] = set()
        self._closed = False
        on_disk = _never if disk is None else self._on_disk
        self.memory_view = MemoryView(
            memory.get,
            memory.peek,
            self._put_now,
            self._refresh_head,
            on_disk,
            _nothing_read if disk is None else self._read_sendable,
            _nothing_resent if disk is None else self._resend,
            disk is not None,
            max_object if disk is None else min(max_object, disk.inline_limit - 1),
        )

    def __repr__(self) -> str:
        return f"<TieredStore {self.memory!r} {self._disk!r}>"

    @property
    def sharers(self) -> Sharers | None:
        """Told of each change once the disk tier has it (a new object, head or marker), and
        of each deletion: other processes sharing the store drop their memory copies."""
        return self._sharers

    @sharers.setter
    def sharers(self, sharers: Sharers | None) -> None:
        # Others learn of a change once it is on the shared disk tier, so nothing is written
        # behind (the memory view's put would be), and only this process's membership of the
        # tier is known.
        self._sharers = sharers
        if sharers is not None and self._disk is not None:
            self.memory_view.put_limit = -1

    @property
    def write_failures(self) -> int:
        """Disk writes that failed (a batch written behind counts once)."""
        behind = self.disk_writer.failures if self.disk_writer is not None else 0
        return self._write_failures + behind

    @property
    def disk_evictions(self) -> int:
        behind = self.disk_writer.evicted if self.disk_writer is not None else 0
        return self._disk_evictions + behind

    @property
    def disk_skips(self) -> int:
        """Small objects not stored on disk because the writer was too far behind."""
        return self.disk_writer.skipped if self.disk_writer is not None else 0

    # -- ObjectStore -----------------------------------------------------------------------------

    async def get(self, key: str) -> Found | None:
        found = self.memory.get(key)
        if found is not None or self._disk is None or not self._on_disk(key):
            return found
        found = self._read_nowait(key)
        if found is not None:
            # (read from the disk tier, so its hit is logged as one, whichever copy is kept)
            return found if isinstance(found, VaryMarker) else found._replace(tier="disk")
        self._reading[key] = self._reading.get(key, 0) + 1
        try:
            if self._written_behind(key):
                # (evicted from memory before its disk copy was written: not the older one)
                await self.flush()
            found = await self._read(self._disk, key)
        except DiskError as e:
            self.read_failures += 1
            log.warning("disk read failed, treated as a miss: %s", e)
            found = None
        finally:
            unchanged = self._end_read(key)
        if found is not None and unchanged:
            self._promote(key, found)
        return found

    async def put_marker(self, key: str, marker: VaryMarker) -> None:
        self._changing(key)
        self.memory.put(key, marker)
        if self._disk is not None:
            await self._write_disk(self._disk.put_marker, key, marker)
        self._tell(key)

    def open_writer(self, key: str, expected_length: int | None) -> TieredWriter | None:
        too_big = expected_length is not None and expected_length > self.max_object
        if self._closed or self.max_object < 0 or too_big:
            return None
        # Others hold copies only of what they read from the shared disk tier, and a key
        # this process holds in memory (a reload, a validation's new body) is likely held
        # there too: its body's end waits for their drops. A first fetch does not wait.
        sharing = self.sharers is not None and self._disk is not None
        confirms = sharing and self.memory.peek(key) is not None
        writer = TieredWriter(self, key, confirms)
        self._writers.add(writer)
        return writer

    def _put_now(self, key: str, head: StoredHead, body: bytes) -> bool:
        if self._closed:
            return False
        if self._disk is not None:
            if len(body) > self.memory_view.put_limit:
                return False  # (a file of its own, or told to the others: a writer's)
            self._changing(key)
            self.memory.put(key, StoredObject(head, body, "memory"))
            self._write_behind(key, head, body)
            return True
        self._changing(key)
        if len(body) <= self.max_object:
            self.memory.put(key, StoredObject(head, body, "memory"))
        else:
            self.memory.bypass(key)
        self._tell(key)
        return True

    def _read_nowait(self, key: str) -> Found | None:
        """(MemoryView.read_disk) What this process stored itself, if the page cache holds
        it (the disk tier's ``read_nowait``: no thread), promoted. Its location is known
        only for what this process wrote, and the newest of that once written."""
        if self._disk is None or self._sharers is not None or self._written_behind(key):
            return None
        found = self._disk.read_nowait(key)
        return None if found is None else self._promote(key, found)

    def _read_sendable(self, key: str) -> StoredObject | DiskHit | None:
        """(MemoryView.read_disk) As ``_read_nowait``, for an object answered at once: one
        promoted is the memory tier's copy, else the body is left to be sent from disk."""
        if self._disk is None or self._sharers is not None or self._written_behind(key):
            return None
        hit = self._disk.send_nowait(key)
        if hit is None or not self._admits(key, hit.head, hit.length):
            return hit
        return self._promoted(key, hit)

    def _resend(self, key: str, hit: DiskHit) -> int | StoredObject | None:
        """(MemoryView.resend_disk) The same checks and promotion as ``_read_sendable``,
        with nothing read unless the object is promoted."""
        if self._disk is None or self._sharers is not None or self._written_behind(key):
            return None
        fd = self._disk.resend_nowait(key, hit)
        if fd is None or not self._admits(key, hit.head, hit.length):
            return fd
        again = self._disk.send_nowait(key)
        return None if again is None else self._promoted(key, again)

    def _promoted(self, key: str, hit: DiskHit) -> StoredObject:
        promoted = StoredObject(hit.head, bytes(hit.view), "memory")
        self.memory.put(key, promoted)
        return promoted

    def _on_disk(self, key: str) -> bool:
        if self._sharers is not None:
            return True  # (the others' changes are not in this process's membership)
        return self._may_hold(key) or self._written_behind(key)

    def _write_behind(self, key: str, head: StoredHead, body: bytes) -> None:
        """Queue an object already in the memory tier for the disk tier."""
        writer, disk = self.disk_writer, self._disk
        assert writer is not None
        assert disk is not None
        if not writer.write_behind(key, head, body) and self._on_disk(key):
            writer.later(disk.delete, key)  # (not stored: an older copy must not outlive it)

    async def update_head(self, key: str, head: StoredHead) -> None:
        write = self._refresh_head(key, head)
        if write is not None:
            await write

    def _refresh_head(self, key: str, head: StoredHead) -> Coroutine[Any, Any, None] | None:
        # (every revalidation runs this: the steps of ``_changing`` and ``_tell`` inline)
        if key in self._reading:
            self._changed.add(key)
        self.memory.replace_head(key, head)
        if self._disk is None:
            return None  # (nothing to tell: others read changes only from a shared disk tier)
        if self._sharers is None:
            assert self.disk_writer is not None
            self.disk_writer.later(self._disk.update_head, key, head)
            return None
        return self._then_tell(key, self._write_disk(self._disk.update_head, key, head))

    async def delete(self, key: str) -> None:
        self._changing(key)
        self.memory.delete(key)
        if self._disk is not None:
            await self._write_disk(self._disk.delete, key)
        if self.sharers is not None:
            # (awaited: a client told that the object is gone must not get it from another)
            await self.sharers.deleted(key)

    async def close(self) -> None:
        """Abort unfinished writers, close every thread's SQLite connection, stop the threads."""
        if self._closed:
            return
        self._closed = True
        for writer in list(self._writers):
            await writer.abort()
        try:
            if self.disk_writer is not None:
                await self.disk_writer.close()
            if self._disk is not None:
                barrier = threading.Barrier(EXECUTOR_THREADS, timeout=30)
                close = self._disk.close_connection
                await asyncio.gather(*(self._run(close, barrier) for _ in range(EXECUTOR_THREADS)))
                await self._run(self._disk.release)
        finally:
            await asyncio.to_thread(self._executor.shutdown)

    # -- beyond the interface --------------------------------------------------------------------

    async def flush(self) -> None:
        """Return once every change asked for so far is on disk (objects written behind too)."""
        if self.disk_writer is not None:
            await self.disk_writer.call(_nothing)

    def dropped(self, key: str) -> None:
        """Another process sharing the store changed ``key``: forget the memory copy, and
        what a disk read in flight finds of it."""
        self._changing(key)
        self.memory.delete(key)

    async def purge(self, key: str) -> bool:
        """Delete what ``key`` holds (a Vary marker orphans its variants); False if nothing."""
        found = await self.get(key)
        if found is None:
            return False
        if isinstance(found, StoredObject) and not isinstance(found.body, bytes):
            found.body.file.close()
        await self.delete(key)
        return True

    async def heads(self) -> list[StoredHead]:
        """The heads of the whole objects in either tier (what a cache digest is made of:
        partial content, 206s, answers only some requests for its URL)."""
        heads = {h.url: h for h in self.memory.heads() if h.status != 206}
        if self._disk is not None:
            try:
                for head in await self._run(self._disk.heads):
                    if head.status != 206:
                        heads.setdefault(head.url, head)
            except DiskError as e:
                log.warning("listing the disk tier failed: %s", e)
        return list(heads.values())

    async def disk_usage(self) -> int:
        """Bytes the disk tier occupies (0 without one), as its size bound counts them."""
        return 0 if self._disk is None else await self._run(self._disk.volume)

    # -- for TieredWriter ------------------------------------------------------------------------

    async def _run(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _new_spool(self) -> Spool:
        assert self._disk is not None, "only bodies bound for the disk tier are spooled"
        return self._disk.new_spool()

    async def _commit(
        self, key: str, head: StoredHead, body: list[bytes] | Spool, confirms: bool
    ) -> None:
        self._changing(key)
        stored: bytes | Spool
        if isinstance(body, list):
            if len(body) == 1:
                stored = body[0]
            elif sum(map(len, body)) <= JOIN_ON_LOOP:
                # (no await before the memory tier has it: a request for it that came with
                # the body's last bytes would find neither it nor a fetch it could join)
                stored = b"".join(body)
            else:
                stored = await self._run(b"".join, body)
            self.memory.put(key, StoredObject(head, stored, "memory"))
            if len(stored) <= self.memory_view.put_limit and self._disk is not None:
                self._write_behind(key, head, stored)
                return
        else:
            stored = body
            self.memory.bypass(key)
        committed = None
        if self._disk is not None:
            committed = await self._write_disk(self._disk.commit, key, head, stored)
        replaced = committed is not None and committed.replaced
        if (confirms or replaced) and self.sharers is not None:
            # (Their copies are older: gone before the commit returns, as a deletion's.)
            await self.sharers.deleted(key)
        else:
            self._tell(key)

    def _tell(self, key: str) -> None:
        # A newer object is worth telling of only where the others can read it: from the
        # shared disk tier. Without one they would each fetch it again, and their stores
        # would make each other fetch again, without end; each keeps its own copy instead.
        if self.sharers is not None and self._disk is not None:
            self.sharers.changed(key)

    async def _then_tell(self, key: str, write: Coroutine[Any, Any, None]) -> None:
        await write
        self._tell(key)

    def _writer_done(self, writer: TieredWriter) -> None:
        self._writers.discard(writer)

    def _write_failed(self, error: DiskError) -> None:
        self._write_failures += 1
        log.warning("disk write failed, object not stored: %s", error)

    # -- internals -----------------------------------------------------------------------------

    async def _read(self, disk: DiskTier, key: str) -> Found | None:
        """Read from disk; if the caller is cancelled, close the file it would have got."""
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, disk.get, key, self.memory.max_object
        )
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_close_unclaimed)
            raise

    async def _write_disk(self, fn: Callable[[*Ts], W], *args: *Ts) -> W | None:
        """``fn`` on the disk writer's thread, its evictions counted; None if it failed
        (counted too)."""
        assert self.disk_writer is not None, "only a store with a disk tier writes to it"
        try:
            done: W = await self.disk_writer.call(fn, *args)
        except DiskError as e:
            self._write_failed(e)
            return None
        if isinstance(done, Committed):
            self._disk_evictions += done.evicted
        elif isinstance(done, int):
            self._disk_evictions += done
        return done

    def _promote(self, key: str, found: Found) -> Found:
        """Put what the disk tier held into the memory tier if it takes it and admission
        (store.admission) wants it there; ``found`` as the memory tier holds it then (a
        disk-tier object if it is not there)."""
        if isinstance(found, VaryMarker):
            if self.memory.admits(0):
                self.memory.put(key, found)
        elif isinstance(found.body, bytes) and self._admits(key, found.head, len(found.body)):
            promoted = StoredObject(found.head, found.body, "memory")
            self.memory.put(key, promoted)
            return promoted
        return found

    def _admits(self, key: str, head: StoredHead, length: int) -> bool:
        """Whether an object read from the disk tier is to be promoted (counted either way)."""
        memory = self.memory
        if not memory.admits(length):
            return False
        if not self._admission.admits(key, memory.has_room(head_size(head) + length), len(memory)):
            self.kept_on_disk += 1
            return False
        self.promotions += 1
        return True

    def _changing(self, key: str) -> None:
        if key in self._reading:
            self._changed.add(key)

    def _end_read(self, key: str) -> bool:
        """Finish one disk read of ``key``; True if nothing changed the key meanwhile."""
        left = self._reading.pop(key) - 1
        unchanged = key not in self._changed
        if left:
            self._reading[key] = left
        else:
            self._changed.discard(key)
        return unchanged


class Sharers(Protocol):
    """The other processes sharing a store, as it tells them of its changes."""

    def changed(self, key: str) -> None:
        """``key`` has a newer object, head or marker on the shared disk tier."""

    async def deleted(self, key: str) -> None:
        """``key`` is deleted, or replaced by an object the others must not serve an older
        copy of: return once they hold no copy of it."""


# ``file_chunks``'s reads: large, so that a body takes few hops to a thread and back.
FILE_CHUNK = 1 << 20


async def file_chunks(body: FileBody) -> AsyncIterator[bytes]:
    """``body``'s bytes in reads of up to FILE_CHUNK, each in the default executor; OSError
    if the file ends early."""
    loop = asyncio.get_running_loop()
    fd = body.file.fileno()
    pos, end = body.offset, body.offset + body.length
    while pos < end:
        chunk = await loop.run_in_executor(None, os.pread, fd, min(FILE_CHUNK, end - pos), pos)
        if not chunk:
            raise OSError(f"stored body ended {end - pos} bytes early")
        pos += len(chunk)
        yield chunk


def _nothing_read(key: str) -> None:
    return None


def _nothing_resent(key: str, hit: DiskHit) -> None:
    return None


def _close_unclaimed(future: asyncio.Future[Found | None]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    found = future.result()
    if isinstance(found, StoredObject) and isinstance(found.body, FileBody):
        found.body.file.close()


class TieredWriter:
    """One body on its way into the store (ObjectWriter).

    Chunks are kept in memory while the body could still go in the memory tier; beyond that
    they are spilled to a spool in SPILL_BATCH batches. A body that grows past the store's
    largest object, or whose spool fails, is abandoned: later calls do nothing and the key
    keeps what it held.
    """

    def __init__(self, store: TieredStore, key: str, confirms: bool) -> None:
        self.key = key
        self.confirms = confirms
        self.size = 0
        self.abandoned = False
        self._store = store
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._spool: Spool | None = None
        self._finished = False

    def __repr__(self) -> str:
        state = "abandoned" if self.abandoned else "finished" if self._finished else "open"
        return f"<TieredWriter {self.key!r} {self.size} bytes {state}>"

    async def write(self, chunk: bytes) -> None:
        self._check_open()
        if self.abandoned or not chunk:
            return
        self.size += len(chunk)
        if self.size > self._store.max_object:
            log.debug("not storing %r: body exceeds %d bytes", self.key, self._store.max_object)
            await self._abandon()
            return
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered >= SPILL_BATCH and self.size > self._store.memory.max_object:
            await self._spill()

    async def commit(self, head: StoredHead) -> None:
        self._check_open()
        if not self.abandoned and head.body_length != self.size:
            log.warning(
                "not storing %r: head says %d body bytes, %d were written",
                self.key,
                head.body_length,
                self.size,
            )
            await self._abandon()
        if not self.abandoned and self._spool is not None:
            await self._spill()  # the last partial batch
        self._finish()
        if not self.abandoned:
            await self._store._commit(self.key, head, self._spool or self._chunks, self.confirms)

    async def abort(self) -> None:
        if not self._finished:
            self._finish()
            await self._abandon()

    async def _spill(self) -> None:
        chunks, self._chunks, self._buffered = self._chunks, [], 0
        if self._spool is None:
            self._spool = self._store._new_spool()
        try:
            await self._store._run(self._spool.append, chunks)
        except DiskError as e:
            self._store._write_failed(e)
            await self._abandon()
        except asyncio.CancelledError:
            # Whether the batch landed is unknown, so the body can no longer be committed.
            self.abandoned = True
            raise

    async def _abandon(self) -> None:
        self.abandoned = True
        self._chunks = []
        if self._spool is not None:
            await self._store._run(self._spool.discard)

    def _finish(self) -> None:
        self._finished = True
        self._store._writer_done(self)

    def _check_open(self) -> None:
        if self._finished:
            raise RuntimeError(f"{self!r} was already committed or aborted")


def _nothing() -> None:
    pass


def _never(key: str) -> bool:
    return False
