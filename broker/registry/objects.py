"""The registry's objects: what it holds of each, until when, and the reads of them.

An object is a SOIF record identified by its URL and generating gatherer (see
:mod:`broker.oid`; records without Gatherer-* attributes are filed under their collection's
name). It belongs to exactly one collection, a named source (a gatherer or another broker):
the one whose pull last wrote it. When two collections bring the same oid, the later write
wins and takes the object over; the former collection's refreshes, deletes and complete
pulls no longer touch it.

An object expires when its last pull says (its record's Time-to-Live, ``lifetime``, else
the pull's default TTL: broker/registry/pulls.py) or, when replicated, when its entry says;
``expire`` then removes it, leaving a tombstone (broker/registry/changes.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import broker.registry.schema as schema
from broker.errors import StorageError
from broker.registry.store import Store
from harvest_common.errors import SoifError
from harvest_common.soif import Record, decode

TIME_TO_LIVE = "Time-to-Live"
UPDATE_TIME = "Update-Time"


@dataclass(frozen=True, slots=True)
class Stored:
    """An object as the registry holds it. ``seq``: its last upsert's change number;
    ``update_time``: the record's Update-Time (epoch seconds), None if it has none."""

    oid: str
    collection: str
    url: str
    gatherer: str
    record: Record
    expires: float
    seq: int
    update_time: float | None

    def __repr__(self) -> str:
        return (
            f"Stored({self.oid} {self.url!r} by {self.gatherer!r} in {self.collection!r},"
            f" seq {self.seq}, expires {self.expires:.0f})"
        )


@dataclass(frozen=True, slots=True)
class CollectionState:
    """A collection's object count, its cursor (opaque: where its next pull resumes) and
    when its last pull was committed (epoch seconds); both None for a collection whose
    objects came only from other members (a replica's: never pulled here)."""

    count: int
    cursor: str | None
    last_pull: float | None

    @property
    def replicated(self) -> bool:
        """Held only through replication: never pulled here."""
        return self.last_pull is None

    def __repr__(self) -> str:
        pulled = "replicated" if self.last_pull is None else f"last pull {self.last_pull:.0f}"
        return f"CollectionState({self.count} objects, cursor {self.cursor!r}, {pulled})"


def number(record: Record, name: str) -> float | None:
    """Attribute ``name`` as a finite number, or None if absent or not one."""
    text = record.text(name)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def lifetime(record: Record) -> float | None:
    """The record's Time-to-Live in seconds when it is a positive number, else None."""
    ttl = number(record, TIME_TO_LIVE)
    return ttl if ttl is not None and ttl > 0 else None


def load(oid: str, blob: bytes) -> Record:
    """A stored record, decoded; StorageError if it is not one SOIF object."""
    try:
        items = decode(blob)
    except SoifError as error:
        raise StorageError(f"stored record of {oid} is not SOIF: {error}") from error
    if len(items) != 1 or not isinstance(items[0], Record):
        raise StorageError(f"stored record of {oid} is not one SOIF object")
    return items[0]


def _stored(row: tuple[Any, ...]) -> Stored:
    key, collection, url, gatherer, blob, expires, seq, update_time = row
    return Stored(key, collection, url, gatherer, load(key, blob), expires, seq, update_time)


# -- reads, on a Store's thread ------------------------------------------------------------


def get_object(store: Store, key: str) -> Stored | None:
    row = store.conn.execute(schema.OBJECT_BY_OID, (key,)).fetchone()
    return None if row is None else _stored(row)


def get_objects(store: Store, keys: list[str]) -> dict[str, Stored]:
    rows = store.conn.execute(schema.OBJECTS_BY_OIDS, (json.dumps(keys),))
    return {row[0]: _stored(row) for row in rows}


def objects_by_url(store: Store, url: str) -> list[Stored]:
    return [_stored(row) for row in store.conn.execute(schema.OBJECTS_BY_URL, (url,))]


def count_objects(store: Store, collection: str | None) -> int:
    if collection is None:
        row = store.conn.execute(schema.COUNT_ALL).fetchone()
    else:
        row = store.conn.execute(schema.COUNT_COLLECTION, (collection,)).fetchone()
    return int(row[0])


def sample_objects(
    store: Store, after: str, below: str, excluded: str, limit: int
) -> list[tuple[str, Record]]:
    params = {"after": after, "below": below, "excluded": excluded, "limit": limit}
    return [(key, load(key, blob)) for key, blob in store.conn.execute(schema.SAMPLE, params)]


def count_outside(store: Store, excluded: str) -> tuple[int, int]:
    count, seq = store.conn.execute(schema.OUTSIDE, {"excluded": excluded}).fetchone()
    return int(count), int(seq)


def all_oids(store: Store) -> set[str]:
    return {key for (key,) in store.conn.execute(schema.ALL_OIDS)}


def collection_states(store: Store) -> dict[str, CollectionState]:
    rows = store.conn.execute(schema.COLLECTIONS)
    return {name: CollectionState(count, cursor, last) for name, cursor, last, count in rows}


def collection_cursor(store: Store, collection: str) -> str | None:
    row = store.conn.execute(schema.CURSOR, (collection,)).fetchone()
    return None if row is None else row[0]
