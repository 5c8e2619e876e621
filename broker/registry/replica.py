"""The registry's replica side: versions, and the states other members read and apply.

Every object and tombstone carries a version (harvest_common/replication/version.py): a
change made here is stamped with the time and this registry's ``member`` id, above the
version it replaces. The replicator reads a collection's changes with their versions
(``replica_changes``), asks which offered versions are newer than those held
(``replica_versions``), reads whole states (``replica_entries``) and applies another
member's (``apply_replica``: in one transaction, each entry only if its version is newer).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import broker.registry.schema as schema
from broker.errors import ReplicaError
from broker.oid import oid
from broker.registry.changes import changing
from broker.registry.objects import UPDATE_TIME, number
from broker.registry.store import Store
from harvest_common.errors import SoifError
from harvest_common.replication.version import STEP, Version
from harvest_common.replication.wire import Entry
from harvest_common.soif import Record, decode

# (seq, oid, version) of one change of a collection.
ReplicaChange = tuple[int, str, Version]


@dataclass(frozen=True, slots=True)
class ReplicaApplied:
    """What applying another member's entries did: the oids upserted and removed, how many
    entries were not newer than what is held (skipped), and the last seq after it."""

    upserted: tuple[str, ...]
    removed: tuple[str, ...]
    skipped: int
    last_seq: int

    def __repr__(self) -> str:
        return (
            f"ReplicaApplied({len(self.upserted)} upserted, {len(self.removed)} removed,"
            f" {self.skipped} skipped, last seq {self.last_seq})"
        )


def _update_time(entry: Entry, collection: str) -> float | None:
    """Check ``entry`` belongs to ``collection``, that its oid is that of its URL and gatherer
    and that its record is one SOIF object of its URL; return the record's Update-Time."""
    if entry.collection != collection:
        raise ReplicaError(f"{entry.oid} is of collection {entry.collection!r}, not {collection!r}")
    if entry.oid != oid(entry.gatherer, entry.url):
        raise ReplicaError(f"{entry.oid} is not the oid of {entry.url} by {entry.gatherer!r}")
    if entry.record is None:
        return None
    try:
        items = decode(entry.record)
    except SoifError as error:
        raise ReplicaError(f"the record of {entry.oid} is not SOIF: {error}") from None
    if len(items) != 1 or not isinstance(items[0], Record) or items[0].url != entry.url:
        raise ReplicaError(f"the record of {entry.oid} is not one SOIF object of {entry.url}")
    return number(items[0], UPDATE_TIME)


# -- reads, on a Store's thread ------------------------------------------------------------


def read_changes(store: Store, collection: str, after: int, limit: int) -> list[ReplicaChange]:
    params = {"collection": collection, "after": after, "limit": limit}
    rows = store.conn.execute(schema.REPLICA_CHANGES, params)
    return [(seq, key, Version(stamp, by, bool(gone))) for seq, key, stamp, by, gone in rows]


def read_versions(store: Store, keys: list[str]) -> dict[str, Version]:
    rows = store.conn.execute(schema.VERSIONS, {"oids": json.dumps(keys)})
    return {key: Version(stamp, by, bool(gone)) for key, stamp, by, gone in rows}


def read_collection_versions(store: Store, collection: str) -> list[tuple[str, Version]]:
    rows = store.conn.execute(schema.COLLECTION_VERSIONS, {"collection": collection})
    return [(key, Version(stamp, by, bool(gone))) for key, stamp, by, gone in rows]


def read_entries(store: Store, keys: list[str]) -> list[Entry]:
    rows = store.conn.execute(schema.ENTRIES, {"oids": json.dumps(keys)})
    return [
        Entry(key, collection, url, gatherer, expires, Version(stamp, by, blob is None), blob)
        for key, collection, url, gatherer, expires, stamp, by, blob in rows
    ]


# -- on the writer's thread ----------------------------------------------------------------


def apply_entries(
    store: Store, collection: str, entries: Sequence[Entry], now: float
) -> ReplicaApplied:
    # Every entry checked before anything is written: a bad one applies none.
    latest: dict[str, tuple[Entry, float | None]] = {}
    for entry in entries:
        update_time = _update_time(entry, collection)
        if entry.oid not in latest or latest[entry.oid][0].version < entry.version:
            latest[entry.oid] = (entry, update_time)
    conn = store.conn
    upserted: list[str] = []
    removed: list[str] = []
    with changing(store) as sequence:
        held = read_versions(store, list(latest))
        for key, (entry, update_time) in latest.items():
            version = entry.version
            if not version.deleted and entry.expires <= now:
                # Expired on the way: the tombstone its expiry makes everywhere.
                version = Version(max(entry.expires, version.stamp + STEP), version.origin, True)
            current = held.get(key)
            if current is not None and version <= current:
                continue
            if version.deleted:
                conn.execute(schema.DELETE_OBJECT, (key,))
                bury = (key, entry.url, entry.gatherer, collection, sequence.next(), now)
                conn.execute(schema.BURY, (*bury, version.stamp, version.origin))
                removed.append(key)
                continue
            record = conn.execute(schema.INSERT_RECORD, (entry.record,)).lastrowid
            row = {
                "oid": key,
                "collection": collection,
                "url": entry.url,
                "gatherer": entry.gatherer,
                "record": record,
                "expires": entry.expires,
                "update_time": update_time,
                "seq": sequence.next(),
                "stamp": version.stamp,
                "origin": version.origin,
            }
            conn.execute(schema.PUT_REPLICA, row)
            upserted.append(key)
    skipped = len(entries) - len(upserted) - len(removed)
    return ReplicaApplied(tuple(upserted), tuple(removed), skipped, sequence.last)
