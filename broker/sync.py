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

A new index is filled the same way, from the first change, and committed once at the end;
until its filling ends it stays ``unfilled`` (the engine keeps that across opens), so one
cut short is done again. ``rebuild`` replaces a live index in one commit instead: searches
see the old objects until then.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from broker.index.interface import Index, IndexedObject
from broker.registry import Change, Registry, Stored
from gatherer.soif import Record

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
    size = record.text("File-Size")
    return IndexedObject(
        oid=found.oid,
        url=found.url,
        attributes=attributes_text(record),
        update_time=found.update_time,
        file_size=int(size) if size is not None and size.strip().isdigit() else None,
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
        filling was cut short) gets every object, as changes from the first; otherwise the
        backlog a crash may have left is applied."""
        if not self._index.unfilled:
            await self.catch_up()
            return
        total = await self._registry.count()
        log.info("index unfilled: adding the registry's %d objects", total)
        began = time.monotonic()
        await self._registry.mark_indexed(0)
        await self.catch_up(total)
        await self._index.filled()
        log.info("index filled: %d objects in %.1f s", total, time.monotonic() - began)

    async def catch_up(self, objects: int | None = None) -> int:
        """Apply every change the index has not seen; returns how many were applied. The
        registry's mark moves after each index commit, so what a failure interrupts is
        applied again next time. Given ``objects`` (a fill), ``filling`` shows how many were
        added of them, and the index commits only at the end: a fill cut short is done again
        from the first change, so committing on the way would only make more segments."""
        commit_every = self._commit_every if objects is None else math.inf
        applied = pending = added = 0
        seq = await self._registry.indexed_seq()
        try:
            while True:
                if objects is not None:
                    self.filling = (added, objects)
                changes = await self._registry.changes_since(seq, BATCH)
                if changes:
                    # Each object is listed once, as it now is, with its record: nothing to
                    # read again (reading and decoding the records twice cost 15% of a
                    # catch-up).
                    removed = [c.oid for c in changes if c.kind == "remove"]
                    await self._index.remove(removed)
                    upserts = [indexed(c) for c in changes if c.kind == "upsert"]
                    await self._index.add(upserts)
                    added += len(upserts)
                    seq = changes[-1].seq
                    applied += len(changes)
                    pending += len(changes)
                if pending and (not changes or pending >= commit_every):
                    await self._index.commit()
                    await self._registry.mark_indexed(seq)
                    pending = 0
                if not changes:
                    return applied
        finally:
            if objects is not None:
                self.filling = None

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
            if self._index.unfilled:  # (a fill that failed before)
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
