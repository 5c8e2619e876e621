"""The store's interface, as the proxy driver sees it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal, NamedTuple, Protocol

from harvest_cache.http.stored import StoredHead
from harvest_cache.store.entry import VaryMarker


@dataclass(slots=True)
class FileBody:
    """A body on disk: ``length`` bytes of ``file`` from ``offset``.

    The reader owns ``file`` and closes it; serve it with ``loop.sendfile`` or chunked reads
    in an executor (``store.tiered.file_chunks``), never a whole read on the loop.
    """

    file: BinaryIO
    offset: int
    length: int


class StoredObject(NamedTuple):
    """A stored response (a named tuple, like its head: cheap to make)."""

    head: StoredHead
    body: bytes | FileBody
    tier: Literal["memory", "disk"]


Found = StoredObject | VaryMarker


class DiskHit(NamedTuple):
    """A small object read from the disk tier on the event loop for one answer, at once: its
    body, ``length`` bytes of the segment file open as ``fd`` from ``offset``, is in the page
    cache (it was just read from there), to be sent by the kernel (sendfile); ``view`` has
    the same bytes until the tier's next read; ``where`` names the entry. Not to be kept
    beyond the answer, but to ask ``MemoryView.resend_disk`` with: the segment may go."""

    head: StoredHead
    fd: int
    offset: int
    length: int
    view: memoryview
    where: int


class ObjectWriter(Protocol):
    """Receives one response body as it streams; nothing is visible before ``commit``.

    ``confirms``: other processes share the store and likely hold copies of an older object
    under the key, which ``commit`` waits for them to drop; the caller keeps the body's last
    bytes from its client until then, so that a client who has the new object is not served
    the old one afterwards."""

    confirms: bool

    async def write(self, chunk: bytes) -> None: ...

    async def commit(self, head: StoredHead) -> None:
        """Make the object visible under its key with ``head`` (its final body_length)."""

    async def abort(self) -> None:
        """Drop what was written; the key keeps whatever it held before."""


@dataclass(slots=True)
class MemoryView:
    """The store as the fast paths see it: its memory tier, with no I/O and nothing awaited
    (each operation a callable bound once, so using one costs no frame of the view's). Only
    the store changes it (``put_limit``, when other processes come to share its disk tier)."""

    # The memory tier's object or marker under a key (a use of it: eviction order moves).
    get: Callable[[str], Found | None]
    # As ``get``, but not a use: for asking whether it is held.
    peek: Callable[[str], Found | None]
    # Store a whole body at once, its disk copy (if any) written behind; False (nothing
    # done) for a body over ``put_limit``, for which a writer (``ObjectStore.open_writer``)
    # must be used.
    put: Callable[[str, StoredHead, bytes], bool]
    # ``ObjectStore.update_head`` with the memory tier changed at once; returns the disk
    # write still to run, if it must be awaited (None: none, or written behind).
    refresh_head: Callable[[str, StoredHead], Coroutine[Any, Any, None] | None]
    # Whether the disk tier may hold a key: False means a memory miss is a miss (always,
    # without a disk tier).
    on_disk: Callable[[str], bool]
    # The disk tier's small object under a key, if it can be had without waiting for the
    # device: as promoted into the memory tier, if it took it, else a DiskHit; None says
    # nothing (a marker, or not to be had at once: ``ObjectStore.get`` tells).
    read_disk: Callable[[str], StoredObject | DiskHit | None]
    # For an object ``read_disk`` gave as a DiskHit before (the same key and hit), if the
    # disk tier still has that entry, unchanged, and the page cache all its body: the
    # descriptor to send its body from again without reading it, or the object promoted, if
    # the memory tier takes it now (as ``read_disk`` would); None otherwise.
    resend_disk: Callable[[str, DiskHit], int | StoredObject | None]
    has_disk: bool
    # The largest body ``put`` stores, in bytes (-1: none). Without a disk tier the store's
    # largest object (``put`` drops the key's copy for a larger one).
    put_limit: int


class ObjectStore(Protocol):
    """The store as the drivers see it: the operations that may wait on the disk tier, and
    the memory view for what must not."""

    @property
    def memory_view(self) -> MemoryView: ...

    @property
    def max_object(self) -> int:
        """The largest body it stores, in bytes (-1: none)."""

    async def get(self, key: str) -> Found | None:
        """Memory tier, then disk tier (small disk objects are promoted to memory)."""

    async def put_marker(self, key: str, marker: VaryMarker) -> None: ...

    def open_writer(self, key: str, expected_length: int | None) -> ObjectWriter | None:
        """A writer for a new object, or None if it cannot be stored (too large, tiers off)."""

    async def update_head(self, key: str, head: StoredHead) -> None:
        """Replace a stored object's head (after a 304 revalidation); no-op if absent."""

    async def delete(self, key: str) -> None: ...

    async def purge(self, key: str) -> bool:
        """Delete what ``key`` holds; False if it held nothing."""

    async def heads(self) -> list[StoredHead]:
        """The heads of the objects stored, one per URL (for the cache digest)."""

    async def close(self) -> None:
        """Flush and close; the disk tier survives for the next start."""
