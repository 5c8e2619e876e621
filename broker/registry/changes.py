"""The registry's change sequence, its tombstones, and the changes that only remove.

**Changes.** Each upsert, refresh and removal takes the next number of one database-wide
sequence, ``seq``: an object row keeps the seq of its last change, and a removal leaves a
tombstone with its own. ``changes_since(n)`` reports, in seq order, the current state of
everything that changed after ``n`` (an object changed twice is reported once, as it is
now; one whose record did not change after ``n`` as a ``refresh``). Tombstones are dropped
by ``expire`` once older than the retention and applied by the index; ``oldest_seq`` is then
the lowest ``n`` still answered exactly (a replica behind it must take a full copy).

**Index synchronisation.** ``indexed_seq`` is the highest seq the index is known to
reflect: the index applies ``changes_since`` that seq and calls ``mark_indexed`` after its
own commit, so after a crash the changes since the mark hold exactly what it may have missed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import broker.registry.schema as schema
from broker.registry.objects import load
from broker.registry.store import Store
from harvest_common.replication.version import STEP
from harvest_common.soif import Record


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change sequence: the object as it now is (``upsert``, with its
    record; ``refresh`` when only its expiry changed after the seq asked from), or its
    removal (``remove``, no record). ``url`` and ``gatherer`` are the
    object's, for an index or replica that needs them without the record; ``update_time``
    is as in ``Stored`` (None for a removal)."""

    seq: int
    oid: str
    kind: Literal["upsert", "refresh", "remove"]
    collection: str
    record: Record | None
    url: str
    gatherer: str
    update_time: float | None = None

    def __repr__(self) -> str:
        return f"Change({self.seq} {self.kind} {self.oid} {self.url!r} in {self.collection!r})"


def _change(row: tuple[Any, ...]) -> Change:
    seq, key, kind, collection, url, gatherer, blob, update_time = row
    record = None if blob is None else load(key, blob)
    return Change(seq, key, kind, collection, record, url, gatherer, update_time)


class Numbers:
    """The change sequence inside one write transaction: read when it begins, advanced in
    memory, saved before it commits (so a rollback discards the numbers it gave)."""

    __slots__ = ("last",)

    def __init__(self, last: int) -> None:
        self.last = last

    def next(self) -> int:
        self.last += 1
        return self.last


@contextmanager
def changing(store: Store) -> Iterator[Numbers]:
    """A write transaction that gives out change numbers."""
    with store.transaction() as conn:
        sequence = Numbers(store.meta("seq"))
        yield sequence
        conn.execute(schema.SET_META, (sequence.last, "seq"))


def remove(
    store: Store,
    sequence: Numbers,
    now: float,
    sql: str,
    params: Sequence[Any],
    *,
    expiry: bool = False,
) -> list[str]:
    """Run a DELETE on objects (returning oid, url, gatherer, collection, stamp, origin,
    expires) and leave a tombstone for each object it removed, numbered in URL order.
    Returns their oids. A removal by ``expiry`` is versioned by the object alone (its
    expiry and origin), so that every replica makes the same tombstone."""
    gone = sorted(store.conn.execute(sql, params).fetchall(), key=lambda row: (row[1], row[0]))
    tombstones = []
    for key, url, gatherer, collection, stamp, origin, expires in gone:
        at, by = (expires, origin) if expiry else (now, store.member)
        version = (max(at, stamp + STEP), by)
        tombstones.append((key, url, gatherer, collection, sequence.next(), now, *version))
    store.conn.executemany(schema.BURY, tombstones)
    return [row[0] for row in gone]


# -- on the writer's thread ----------------------------------------------------------------


def expire_objects(store: Store, now: float) -> tuple[str, ...]:
    with changing(store) as sequence:
        removed = remove(store, sequence, now, schema.DELETE_EXPIRED, (now,), expiry=True)
        dropped = store.conn.execute(
            schema.DROP_TOMBSTONES, (now - store.retention, store.meta("indexed_seq"))
        ).fetchall()
        if dropped:
            horizon = max(store.meta("horizon"), *(seq for (seq,) in dropped))
            store.conn.execute(schema.SET_META, (horizon, "horizon"))
    return tuple(removed)


def forget_collection(store: Store, collection: str, now: float) -> tuple[str, ...]:
    with changing(store) as sequence:
        removed = remove(store, sequence, now, schema.DELETE_COLLECTION, (collection,))
        store.conn.execute(schema.FORGET_COLLECTION, (collection,))
    return tuple(removed)


def mark_indexed(store: Store, seq: int) -> None:
    with store.transaction() as conn:
        last = store.meta("seq")
        if not 0 <= seq <= last:
            raise ValueError(f"indexed seq {seq} is outside 0..{last}")
        conn.execute(schema.SET_META, (seq, "indexed_seq"))


def changes_after(store: Store, after: int, limit: int) -> list[Change]:
    rows = store.conn.execute(schema.CHANGES, {"after": after, "limit": limit})
    return [_change(row) for row in rows]
