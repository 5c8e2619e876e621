"""Keeps the index equal to the registry, which is the truth.

After every pull the registry's changes since the index last caught up (its change sequence)
are applied to the index and the mark moved on; a crash between the two leaves a backlog that
the next ``catch_up`` applies. ``reconcile`` is the garbage collector's full comparison: what
the index holds that the registry does not is removed, and what it lacks is added.

The index commits once every ``COMMIT_EVERY`` changes and at the end of the backlog, not
once a read batch: each commit flushes a segment per indexing thread, and small segments
are merged again and again. Committed every 1,000, 100,000 generated records made 10
segments (199 MB), and a two-error query's p99 in the index was 19 ms; every 20,000, 3
segments (173 MB) and 6-10 ms (bench/README.md, "Broker index").

``rebuild`` fills the index with the registry's objects in one commit (searches see the old
ones until then). A new index is filled so, and stays ``unfilled`` until then (the engine
keeps that across opens), so that a filling cut short is done again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from broker.index.interface import Index, IndexedObject
from broker.registry import Change, Registry, Stored
from harvest_common.soif import Record

log = logging.getLogger(__name__)

BATCH = 1000  # changes read from the registry at a time
COMMIT_EVERY = 20_000  # changes applied between two index commits, at most


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What a full comparison changed in the index."""

    added: int
    removed: int


def attributes_text(record: Record) -> tuple[tuple[str, str], ...]:
    """A record's attributes as text, as the index, the matcher and snippets read them, and
    its URL as the attribute ``URL`` (``URL: /edu/``, or a host name as a bare word, finds
    objects by where they are), last: a result shows its URL anyway, so a snippet of it comes
    only after those of the content."""
    return (
        *((name, value.decode("utf-8", "replace")) for name, value in record.attributes),
        ("URL", record.url),
    )


def indexed(found: Stored | Change) -> IndexedObject:
    """The index's view of a stored object, or of an upsert in the change sequence."""
    record = found.record
    if record is None:
        raise ValueError(f"{found!r} has no record to index")
    size = (record.text("File-Size") or "").strip()
    return IndexedObject(
        oid=found.oid,
        url=found.url,
        attributes=attributes_text(record),
        update_time=found.update_time,
        # ASCII digits only ("²" is a digit to isdigit, not to int), and few enough for
        # int() (more than 20 are over the index's 2**64 anyway).
        file_size=int(size) if size.isascii() and size.isdigit() and len(size) <= 20 else None,
    )


class IndexSync:
    """Moves registry changes into the index."""

    def __init__(
        self, registry: Registry, index: Index, *, commit_every: int = COMMIT_EVERY
    ) -> None:
        self._registry = registry
        self._index = index
        self._commit_every = commit_every
        # While the index is filled or rebuilt: the objects added so far, of how many.
        self.filling: tuple[int, int] | None = None

    async def after_opening(self) -> None:
        """Bring a just-opened index up to the registry: an unfilled one (new, or one whose
        filling was cut short) is rebuilt; then the backlog since the mark is applied."""
        if self._index.unfilled:
            # Every change up to here is in what the rebuild reads; later ones are caught up.
            last = await self._registry.last_seq()
            log.info("index unfilled: adding every object of the registry")
            began = time.monotonic()
            added = await self.rebuild()
            await self._registry.mark_indexed(last)
            log.info("index filled: %d objects in %.1f s", added, time.monotonic() - began)
        await self.catch_up()

    async def catch_up(self) -> int:
        """Apply every change the index has not seen; returns how many were applied. The
        registry's mark moves after each index commit, so what a failure interrupts is
        applied again next time."""
        applied = pending = 0
        seq = await self._registry.indexed_seq()
        while True:
            changes = await self._registry.changes_since(seq, BATCH)
            if changes:
                # Each object is listed once, as it now is, with its record: nothing to read
                # again (reading and decoding the records twice cost 15% of a catch-up).
                removed = [c.oid for c in changes if c.kind == "remove"]
                await self._index.remove(removed)
                await self._index.add([indexed(c) for c in changes if c.kind == "upsert"])
                seq = changes[-1].seq
                applied += len(changes)
                pending += len(changes)
            if pending and (not changes or pending >= self._commit_every):
                await self._index.commit()
                await self._registry.mark_indexed(seq)
                pending = 0
            if not changes:
                return applied

    async def reconcile(self) -> Reconciled:
        """Make the index hold exactly the registry's objects (after catching up)."""
        await self.catch_up()
        in_index = await self._index.oids()
        in_registry = await self._registry.oids()
        extra = sorted(in_index - in_registry)
        missing = sorted(in_registry - in_index)
        await self._index.remove(extra)
        for start in range(0, len(missing), BATCH):
            await self._add(missing[start : start + BATCH])
        if extra or missing:
            await self._index.commit()
        return Reconciled(added=len(missing), removed=len(extra))

    async def rebuild(self) -> int:
        """Replace the index's objects with every registry object, in one commit (searches
        see the old ones until then; a failure leaves them); returns how many."""
        await self._index.clear()
        try:
            oids = sorted(await self._registry.oids())
            for start in range(0, len(oids), BATCH):
                self.filling = (start, len(oids))
                await self._add(oids[start : start + BATCH])
            self.filling = (len(oids), len(oids))
            await self._index.commit()
            if self._index.unfilled:  # (a new index, or one whose filling failed)
                await self._index.filled()
        except BaseException:
            # Otherwise the next commit would make the half-filled index the searched one.
            await asyncio.shield(self._index.rollback())
            raise
        finally:
            self.filling = None
        return len(oids)

    async def _add(self, oids: Sequence[str]) -> None:
        stored = await self._registry.get_many(oids)
        await self._index.add([indexed(s) for s in stored.values()])
