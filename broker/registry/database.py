"""``Registry``: the broker's objects and their changes in one SQLite file, and every call
made of them.

Each call is queued to one of the registry's two connections (broker/registry/store.py):
changes and the change sequence to the writer, reads of objects and of replica state to the
reader. One registry per database file: opening it drops whatever pulls were staged.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.registry.changes import (
    Change,
    changes_after,
    expire_objects,
    forget_collection,
    mark_indexed,
)
from broker.registry.objects import (
    CollectionState,
    Stored,
    all_oids,
    collection_cursor,
    collection_states,
    count_objects,
    count_outside,
    get_object,
    get_objects,
    objects_by_url,
    sample_objects,
)
from broker.registry.pulls import PullContext, drop_abandoned
from broker.registry.replica import (
    ReplicaApplied,
    ReplicaChange,
    apply_entries,
    read_changes,
    read_collection_versions,
    read_entries,
    read_versions,
)
from broker.registry.store import CHUNK, Store, Worker
from harvest_common.replication.version import Version
from harvest_common.replication.wire import Entry
from harvest_common.soif import Record

DAY = 86_400.0
# Object ids are 32 hex digits of a hash: the lowest ``share`` of their range is a uniform
# sample of that share of the objects.
_OID_RANGE = 16**32


@dataclass(frozen=True, slots=True)
class RegistryStats:
    """What the registry reports: the objects it holds, its change sequence (the last number
    given, the oldest still answered exactly, the highest the index reflects) and every
    collection that has committed a pull or holds objects."""

    objects: int
    last_seq: int
    oldest_seq: int
    indexed_seq: int
    collections: dict[str, CollectionState]


def _open_writer(path: Path, retention: float, member: str) -> Store:
    """Connect, and drop the pulls a killed process left staged."""
    store = Store.connect(path, retention, member)
    try:
        drop_abandoned(store)
        while store.sweep(CHUNK):
            pass
    except BaseException:
        store.close()
        raise
    return store


class Registry:
    """The broker's objects and their changes in one SQLite file (broker/registry/)."""

    def __init__(self, path: Path, writer: Worker, reader: Worker) -> None:
        self.path = path
        self._writer = writer
        self._reader = reader
        self._numbers = itertools.count(1)

    def __repr__(self) -> str:
        return f"Registry({str(self.path)!r}, {'closed' if self.closed else 'open'})"

    @property
    def closed(self) -> bool:
        return self._writer.closed

    @classmethod
    async def open(
        cls, path: Path, *, tombstone_retention: float = 30 * DAY, member: str = "local"
    ) -> Registry:
        """Open (creating if needed) the registry at ``path``; tombstones are kept for
        ``tombstone_retention`` seconds (and until the index has applied them). ``member``:
        this broker's id among replicas, the origin of the changes made here."""
        if not tombstone_retention >= 0:
            raise ValueError(f"tombstone_retention must be >= 0, got {tombstone_retention}")
        settings = (path, tombstone_retention, member)
        writer = await Worker.open(path, "broker-registry", _open_writer, *settings)
        try:
            # The writer has made the schema.
            reader = await Worker.open(path, "broker-registry-read", Store.connect, *settings)
        except BaseException:
            writer.close()
            raise
        return cls(path, writer, reader)

    async def __aenter__(self) -> Registry:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections once the calls already made have run; idempotent."""
        if self.closed:
            return
        # Both before any await, so they run after the queued work even if cancelled.
        self._writer.close()
        self._reader.close()
        await self._writer.wait_closed()
        await self._reader.wait_closed()

    # -- changes ----------------------------------------------------------------------------

    def begin(self, collection: str) -> PullContext:
        """Start a pull into ``collection``: ``pull = await registry.begin(name)``, or
        ``async with registry.begin(name) as pull``. Pulls may run concurrently; each is
        applied by its own commit (the later commit's cursor is the one kept). See
        broker/registry/pulls.py."""
        return PullContext(self._writer, collection, self._numbers)

    async def expire(self, now: float) -> tuple[str, ...]:
        """Remove the objects whose expiry is at or before ``now`` (each leaves a tombstone)
        and drop the tombstones older than the retention that the index has applied.
        Returns the removed oids."""
        await self._writer.sweep()
        return await self._writer.call(expire_objects, now)

    async def forget(self, collection: str, *, now: float) -> tuple[str, ...]:
        """Remove ``collection``, its cursor and all its objects (each leaves a tombstone
        dated ``now``). Returns the removed oids; an unknown collection removes nothing."""
        await self._writer.sweep()
        return await self._writer.call(forget_collection, collection, now)

    # -- the change sequence ----------------------------------------------------------------

    async def last_seq(self) -> int:
        """The last change number given (0 for a new registry)."""
        return await self._writer.call(Store.meta, "seq")

    async def oldest_seq(self) -> int:
        """The lowest ``n`` for which ``changes_since(n)`` is exact: the seq of the newest
        tombstone dropped (0 while none has been). A replica behind it takes a full copy."""
        return await self._writer.call(Store.meta, "horizon")

    async def changes_since(self, seq: int, limit: int) -> list[Change]:
        """Up to ``limit`` changes after ``seq``, in seq order: each changed object's current
        record (upsert) or its removal. Page on with the last one's seq."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        return await self._writer.call(changes_after, seq, limit)

    async def indexed_seq(self) -> int:
        """The highest seq the index is known to reflect."""
        return await self._writer.call(Store.meta, "indexed_seq")

    async def mark_indexed(self, seq: int) -> None:
        """Record that the index reflects every change up to ``seq`` (call after the index
        commits; 0 before a rebuild). ValueError outside 0..last_seq."""
        await self._writer.call(mark_indexed, seq)

    # -- reads ------------------------------------------------------------------------------

    async def stats(self) -> RegistryStats:
        """What the registry holds now (for the status routes and metrics)."""
        return RegistryStats(
            objects=await self.count(),
            last_seq=await self.last_seq(),
            oldest_seq=await self.oldest_seq(),
            indexed_seq=await self.indexed_seq(),
            collections=await self.collections(),
        )

    async def get(self, oid: str) -> Stored | None:
        return await self._reader.call(get_object, oid)

    async def get_many(self, oids: Iterable[str]) -> dict[str, Stored]:
        """The stored objects among ``oids``, in one query (unknown oids are left out)."""
        return await self._reader.call(get_objects, list(oids))

    async def by_url(self, url: str) -> list[Stored]:
        """Every object with ``url`` (one per gatherer), by collection and gatherer."""
        return await self._reader.call(objects_by_url, url)

    async def count(self, collection: str | None = None) -> int:
        """How many objects the registry holds, or ``collection`` holds."""
        return await self._reader.call(count_objects, collection)

    async def outside(self, collection: str) -> tuple[int, int]:
        """How many objects are held outside ``collection``, and the seq of the last change
        among them (an upsert or a removal; 0 for none)."""
        return await self._reader.call(count_outside, collection)

    async def sample(
        self, share: float, *, after: str = "", limit: int, excluding: str = ""
    ) -> list[tuple[str, Record]]:
        """Up to ``limit`` (oid, record), in oid order after ``after``, of a uniform sample
        of ``share`` (0 to 1) of the objects but those of collection ``excluding``: those
        whose oids, hashes, fall in the lowest ``share`` of their range, so the same ones
        while they are held. Page on with the last oid."""
        below = "g" if share >= 1 else f"{int(max(0.0, share) * _OID_RANGE):032x}"
        return await self._reader.call(sample_objects, after, below, excluding, limit)

    async def oids(self) -> set[str]:
        """Every object's oid (for garbage collection against the index)."""
        return await self._reader.call(all_oids)

    async def collections(self) -> dict[str, CollectionState]:
        """Every collection that has committed a pull here or holds objects (a replicated
        one), by name."""
        return await self._reader.call(collection_states)

    async def cursor(self, collection: str) -> str | None:
        """Where ``collection``'s next pull resumes; None if it has none (or no pull yet)."""
        return await self._reader.call(collection_cursor, collection)

    # -- replicas ---------------------------------------------------------------------------

    async def replica_changes(self, collection: str, after: int, limit: int) -> list[ReplicaChange]:
        """Up to ``limit`` (seq, oid, version) of ``collection``'s changes after ``after``."""
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        return await self._reader.call(read_changes, collection, after, limit)

    async def replica_versions(self, oids: Iterable[str]) -> dict[str, Version]:
        """The versions held (object or tombstone) of those of ``oids`` that are held."""
        return await self._reader.call(read_versions, list(oids))

    async def collection_versions(self, collection: str) -> list[tuple[str, Version]]:
        """(oid, version) of every object and tombstone of ``collection``."""
        return await self._reader.call(read_collection_versions, collection)

    async def replica_entries(self, oids: Iterable[str]) -> list[Entry]:
        """The whole state (object or tombstone) of those of ``oids`` that are held."""
        return await self._reader.call(read_entries, list(oids))

    async def apply_replica(
        self, collection: str, entries: Sequence[Entry], *, now: float
    ) -> ReplicaApplied:
        """Apply another member's ``entries`` of ``collection`` in one transaction, each only
        if its version is newer than the one held; ReplicaError (nothing applied) if one is
        invalid. A live entry already expired at ``now`` is applied as its expiry's
        tombstone."""
        await self._writer.sweep()
        return await self._writer.call(apply_entries, collection, entries, now)
