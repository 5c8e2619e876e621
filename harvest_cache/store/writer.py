"""The one thread that changes the disk tier.

Every change (an object stored, a head rewritten, a Vary marker, a deletion) runs on this
thread in the order it was asked for, so no deletion is overtaken by an older store of the same
key. Small objects already held by the memory tier are written behind: the request does not
wait for them, consecutive ones are committed together in one transaction (the writer waits a
few milliseconds for more, unless a change someone awaits is queued), and when the queue
holds ``max_pending`` bytes a new one is not stored on disk at all (counted in ``skipped`` and
logged) rather than making clients wait for the disk. Several threads committing one object
each had them queue on the tier's lock and the GIL: a 1 KiB miss cost several times its CPU.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harvest_cache.http.stored import StoredHead
from harvest_cache.store.disk import DiskError, DiskTier

log = logging.getLogger(__name__)

# Objects committed in one transaction at most: a longer one would hold the tier's lock (and
# delay a deletion queued behind it) for longer than the batching saves.
MAX_BATCH = 512
# How long objects written behind wait for more to commit with, unless a change someone
# awaits comes first: a commit's own cost (a WAL write) was a tenth of a 1 KiB miss when the
# writer took each object as it came.
LINGER_SECONDS = 0.005


@dataclass(frozen=True, slots=True)
class _Behind:
    key: str
    head: StoredHead
    body: bytes


@dataclass(frozen=True, slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]


@dataclass(frozen=True, slots=True)
class _Later:
    """A change nobody awaits (a head rewritten, a stale copy deleted)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


class _Stop:
    pass


class DiskWriter:
    """Runs the disk tier's changes on a thread of its own (see the module docstring)."""

    def __init__(self, disk: DiskTier, max_pending: int) -> None:
        self.max_pending = max_pending
        self.skipped = 0  # objects not written behind: the queue was full
        self.failures = 0  # changes nobody awaits that failed (a batch written behind counts once)
        self.evicted = 0  # rows culled after written-behind batches
        self._disk = disk
        self._loop = asyncio.get_running_loop()
        self._items: deque[_Behind | _Call | _Later | _Stop] = deque()
        self._ready = threading.Condition()
        self._pending = 0  # bytes written behind and not yet committed (under _ready)
        self._awaited = 0  # items queued that are not written behind (under _ready)
        self._queued: dict[str, int] = {}  # keys written behind and not yet committed (same)
        self._last_skip_logged = -1.0
        self._thread = threading.Thread(target=self._work, name="harvest-store-writer", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<DiskWriter {len(self._items)} queued, {self._pending} bytes behind>"

    @property
    def pending(self) -> int:
        """Bytes written behind that are not on disk yet."""
        return self._pending

    def holds(self, key: str) -> bool:
        """Whether an object of ``key`` is written behind and not on disk yet (the disk may
        still hold an older one)."""
        return key in self._queued

    def write_behind(self, key: str, head: StoredHead, body: bytes) -> bool:
        """Queue ``key``'s object for the disk; False (and counted) if the queue is full."""
        with self._ready:
            if self._pending + len(body) > self.max_pending:
                full = True
            else:
                full = False
                self._pending += len(body)
                self._queued[key] = self._queued.get(key, 0) + 1
                self._items.append(_Behind(key, head, body))
                if len(self._items) == 1:  # (else the writer is busy, or lingers for more)
                    self._ready.notify()
        if full:
            self.skipped += 1
            now = self._loop.time()
            if now - self._last_skip_logged >= 10:
                self._last_skip_logged = now
                log.warning(
                    "disk tier behind by %d bytes: objects are not being stored on disk"
                    " (%d so far; harvest_cache_store_disk_skips_total)",
                    self._pending,
                    self.skipped,
                )
        return not full

    def later(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the writer thread, after every change queued before it; nobody
        waits for it (a DiskError is counted in ``failures`` and logged)."""
        with self._ready:
            self._items.append(_Later(fn, args))
            self._awaited += 1
            self._ready.notify()

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the writer thread, after every change queued before it."""
        future: asyncio.Future[Any] = self._loop.create_future()
        with self._ready:
            self._items.append(_Call(fn, args, future))
            self._awaited += 1
            self._ready.notify()
        return await future

    async def close(self) -> None:
        """Commit what is queued, close the thread's SQLite connection, end the thread."""
        with self._ready:
            self._items.append(_Stop())
            self._awaited += 1
            self._ready.notify()
        await asyncio.to_thread(self._thread.join)

    # -- on the writer thread --------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._items:
                    self._ready.wait()
                deadline = time.monotonic() + LINGER_SECONDS
                while not self._awaited and len(self._items) < MAX_BATCH:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._ready.wait(left)
                items = list(self._items)
                self._items.clear()
                self._awaited = 0
            behind: list[_Behind] = []
            for item in items:
                if isinstance(item, _Behind):
                    behind.append(item)
                    if len(behind) >= MAX_BATCH:
                        self._commit(behind)
                        behind = []
                    continue
                if behind:
                    self._commit(behind)
                    behind = []
                if isinstance(item, _Stop):
                    self._disk.close_connection(threading.Barrier(1))
                    return
                if isinstance(item, _Later):
                    self._run_later(item)
                else:
                    self._run(item)
            if behind:
                self._commit(behind)

    def _commit(self, batch: list[_Behind]) -> None:
        try:
            self.evicted += self._disk.commit_many([(b.key, b.head, b.body) for b in batch])
        except DiskError as e:
            self.failures += 1
            log.warning("disk write of %d objects failed, not stored: %s", len(batch), e)
        except Exception:  # (a bug: the thread must live on, or every change would hang)
            self.failures += 1
            log.exception("disk write of %d objects failed, not stored", len(batch))
        finally:
            with self._ready:
                for b in batch:
                    self._pending -= len(b.body)
                    left = self._queued.pop(b.key) - 1
                    if left:
                        self._queued[b.key] = left

    def _run_later(self, later: _Later) -> None:
        try:
            result = later.fn(*later.args)
        except DiskError as e:
            self.failures += 1
            log.warning("disk write failed: %s", e)
            return
        except Exception:  # (a bug: as in _commit)
            self.failures += 1
            log.exception("disk write failed")
            return
        if isinstance(result, int):
            self.evicted += result

    def _run(self, call: _Call) -> None:
        try:
            result = call.fn(*call.args)
        except BaseException as e:  # (handed to the awaiting task as it is)
            self._loop.call_soon_threadsafe(_settle, call.future, None, e)
        else:
            self._loop.call_soon_threadsafe(_settle, call.future, result, None)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled: the change happened all the same
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
