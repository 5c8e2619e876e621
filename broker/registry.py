"""The broker's registry: every summary object it holds, which collection brought it, until
when it is valid, and the numbered changes that the index and replicas follow.

**Objects.** An object is a SOIF record identified by its URL and generating gatherer (see
:mod:`broker.oid`; records without Gatherer-* attributes are filed under their collection's
name). It belongs to exactly one collection, a named source (a gatherer or another broker):
the one whose pull last wrote it. When two collections bring the same oid, the later write
wins and takes the object over; the former collection's refreshes, deletes and complete
pulls no longer touch it.

**Pulls.** A pull is staged, then applied in one transaction, so that a pull failing
mid-stream applies nothing and memory stays bounded however long the stream::

    async with registry.begin("gatherer-a") as pull:
        async for items in decoded_batches:
            await pull.add(items)
        applied = await pull.commit(cursor=until, complete=False, now=now, default_ttl=ttl)

``add`` writes the items to a staging table in small transactions of their own (the
objects are untouched). ``commit`` applies them in stream order, in one transaction that
also saves the collection's cursor:

- a bare ``Record`` or an ``Update`` upserts the whole object; it expires at ``now`` plus
  the record's Time-to-Live (when a positive number), else plus ``default_ttl``;
- a ``Refresh`` (the wrapper's record: URL, Update-Time, Time-to-Live, maybe Gatherer-*)
  sets the expiry of the matching objects the same way and changes nothing else (their
  record and update time stay: the content did not change);
- a ``Delete`` removes the matching objects.

A refresh or delete matches the object of this collection with the wrapper's oid when the
wrapper carries Gatherer-* attributes, else every object of this collection with its URL;
one that matches nothing is ignored and counted. With ``complete=True`` the pull was a full
export: the collection's objects it neither brought nor refreshed are removed. Leaving the
``async with`` block without committing (by an exception or not) aborts the pull; a pull
cut short by a crash is dropped when the registry is next opened.

**Changes.** Each upsert, refresh and removal takes the next number of one database-wide
sequence, ``seq``: an object row keeps the seq of its last change, and a removal leaves a
tombstone with its own. ``changes_since(n)`` reports, in seq order, the current state of
everything that changed after ``n`` (an object changed twice is reported once, as it is
now; one whose record did not change after ``n`` as a ``refresh``). Tombstones are dropped
by ``expire`` once older than the retention and applied by the index; ``oldest_seq`` is then
the lowest ``n`` still answered exactly (a replica behind it must take a full copy).

**Replicas.** Every object and tombstone carries a version
(harvest_common/replication/version.py): a change made here is stamped with the time and this
registry's ``member`` id, above the version it replaces. The replicator reads a collection's
changes with their versions (``replica_changes``), asks which offered versions are newer than
those held (``replica_versions``), reads whole states (``replica_entries``) and applies
another member's (``apply_replica``: in one transaction, each entry only if its version is
newer).

**Index synchronisation.** ``indexed_seq`` is the highest seq the index is known to
reflect: the index applies ``changes_since`` that seq and calls ``mark_indexed`` after its
own commit, so after a crash the changes since the mark hold exactly what it may have missed.

**Threads.** One SQLite connection (WAL) on one dedicated thread; every call is queued to
it and awaited, and the calls run one at a time in the order made. Work on many records is
cut into small transactions (staging, and freeing the records that replaced or removed
objects leave behind, which ``begin``, ``expire`` and ``forget`` do first), so a query
queued behind it waits milliseconds; a commit is one transaction and holds the thread for
its whole length (seconds for 100k objects). sqlite3 errors become
:class:`~broker.errors.StorageError`. One registry per database file: opening it drops
whatever pulls were staged.
"""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from broker import schema
from broker.errors import ReplicaError, StorageError
from broker.oid import gatherer_identity, oid
from harvest_common import sqlite
from harvest_common.errors import SoifError
from harvest_common.replication.version import STEP, Version
from harvest_common.replication.wire import Entry
from harvest_common.soif import Delete, Item, Record, Refresh, Update, decode, encode

DAY = 86_400.0
TIME_TO_LIVE = "Time-to-Live"
UPDATE_TIME = "Update-Time"

# Records staged, or freed, per transaction: work on many records is cut into these, so that
# a call queued behind it (a query's get_many) waits for one chunk (a quarter megabyte of
# records, 2 ms), not for the whole batch (256 made that wait 15 ms, for no faster staging).
CHUNK = 64
# Staged rows a commit reads at a time: its memory does not grow with the pull.
COMMIT_BATCH = 1_000

P = ParamSpec("P")
T = TypeVar("T")


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


@dataclass(frozen=True, slots=True)
class Applied:
    """What a commit did: the oids it left upserted and those it removed (each once, by the
    last thing the pull did to it), how many objects it refreshed, and how many refreshes
    and deletes matched no object of the collection."""

    upserted: tuple[str, ...]
    removed: tuple[str, ...]
    refreshed: int
    ignored: int

    def __repr__(self) -> str:
        return (
            f"Applied({len(self.upserted)} upserted, {len(self.removed)} removed,"
            f" {self.refreshed} refreshed, {self.ignored} ignored)"
        )


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


@dataclass(frozen=True, slots=True)
class CollectionState:
    """A collection's object count, its cursor (opaque: where its next pull resumes) and
    when its last pull was committed (epoch seconds)."""

    count: int
    cursor: str | None
    last_pull: float

    def __repr__(self) -> str:
        return (
            f"CollectionState({self.count} objects, cursor {self.cursor!r},"
            f" last pull {self.last_pull:.0f})"
        )


def _number(record: Record, name: str) -> float | None:
    """Attribute ``name`` as a finite number, or None if absent or not one."""
    text = record.text(name)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _lifetime(record: Record) -> float | None:
    """The record's Time-to-Live in seconds when it is a positive number, else None."""
    ttl = _number(record, TIME_TO_LIVE)
    return ttl if ttl is not None and ttl > 0 else None


_StagingRow = tuple[str, str | None, str, str | None, bytes | None, float | None, float | None]


def _staging_row(item: Item, collection: str) -> _StagingRow:
    """(kind, oid, url, gatherer, encoded record, ttl, update_time) for one item; a refresh
    or delete without Gatherer-* attributes has no oid (it matches by URL) nor record."""
    if isinstance(item, Refresh | Delete):
        wrapper = item.record
        kind = schema.REFRESH if isinstance(item, Refresh) else schema.DELETE
        gatherer = gatherer_identity(wrapper)
        key = None if gatherer is None else oid(gatherer, wrapper.url)
        return (kind, key, wrapper.url, gatherer, None, _lifetime(wrapper), None)
    record = item.record if isinstance(item, Update) else item
    if not isinstance(record, Record):
        raise TypeError(f"a pull takes SOIF items, not {type(item).__name__}")
    gatherer = gatherer_identity(record) or collection
    return (
        schema.UPSERT,
        oid(gatherer, record.url),
        record.url,
        gatherer,
        encode(record),
        _lifetime(record),
        _number(record, UPDATE_TIME),
    )


# (seq, oid, version) of one change of a collection.
ReplicaChange = tuple[int, str, Version]


def _replica_update_time(entry: Entry, collection: str) -> float | None:
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
    return _number(items[0], UPDATE_TIME)


def _load(oid: str, blob: bytes) -> Record:
    try:
        items = decode(blob)
    except SoifError as error:
        raise StorageError(f"stored record of {oid} is not SOIF: {error}") from error
    if len(items) != 1 or not isinstance(items[0], Record):
        raise StorageError(f"stored record of {oid} is not one SOIF object")
    return items[0]


def _stored(row: tuple[Any, ...]) -> Stored:
    key, collection, url, gatherer, blob, expires, seq, update_time = row
    return Stored(key, collection, url, gatherer, _load(key, blob), expires, seq, update_time)


def _change(row: tuple[Any, ...]) -> Change:
    seq, key, kind, collection, url, gatherer, blob, update_time = row
    record = None if blob is None else _load(key, blob)
    return Change(seq, key, kind, collection, record, url, gatherer, update_time)


class _Sequence:
    """The change sequence inside one write transaction: read when it begins, advanced in
    memory, saved before it commits (so a rollback discards the numbers it gave)."""

    __slots__ = ("last",)

    def __init__(self, last: int) -> None:
        self.last = last

    def next(self) -> int:
        self.last += 1
        return self.last


class _Store:
    """The registry's connection; every method runs on the registry's thread."""

    def __init__(self, conn: sqlite3.Connection, tombstone_retention: float, member: str) -> None:
        self._conn = conn
        self._retention = tombstone_retention
        self._member = member

    @classmethod
    def open(cls, path: Path, tombstone_retention: float, member: str) -> _Store:
        """Connect, and drop the pulls a killed process left staged."""
        store = cls(schema.connect(path), tombstone_retention, member)
        try:
            with store._transaction() as conn:
                conn.execute(schema.DROP_ALL_STAGED_RECORDS)
                conn.execute(schema.DROP_ALL_STAGED)
            while store.sweep(CHUNK):
                pass
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def reader(cls, path: Path, tombstone_retention: float, member: str) -> _Store:
        """A second connection, for reads only (the writer has made the schema)."""
        return cls(schema.connect(path), tombstone_retention, member)

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            if self._conn.in_transaction:  # SQLite may have rolled back already (disk full)
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    @contextmanager
    def _changing(self) -> Iterator[_Sequence]:
        """A write transaction that gives out change numbers."""
        with self._transaction() as conn:
            sequence = _Sequence(self.meta("seq"))
            yield sequence
            conn.execute(schema.SET_META, (sequence.last, "seq"))

    def meta(self, key: str) -> int:
        return int(self._conn.execute(schema.GET_META, (key,)).fetchone()[0])

    def _remove(
        self,
        sequence: _Sequence,
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
        gone = sorted(self._conn.execute(sql, params).fetchall(), key=lambda row: (row[1], row[0]))
        tombstones = []
        for key, url, gatherer, collection, stamp, origin, expires in gone:
            at, by = (expires, origin) if expiry else (now, self._member)
            version = (max(at, stamp + STEP), by)
            tombstones.append((key, url, gatherer, collection, sequence.next(), now, *version))
        self._conn.executemany(schema.BURY, tombstones)
        return [row[0] for row in gone]

    # -- pulls ------------------------------------------------------------------------------

    def stage(self, pull: int, collection: str, items: Sequence[Item]) -> None:
        rows = [_staging_row(item, collection) for item in items]  # a bad item stages none
        with self._transaction() as conn:
            for kind, key, url, gatherer, blob, ttl, update_time in rows:
                record = (
                    None if blob is None else conn.execute(schema.INSERT_RECORD, (blob,)).lastrowid
                )
                conn.execute(
                    schema.STAGE, (pull, kind, key, url, gatherer, record, ttl, update_time)
                )

    def discard(self, pull: int) -> None:
        with self._transaction() as conn:
            conn.execute(schema.DROP_STAGED_RECORDS, (pull,))
            conn.execute(schema.DROP_STAGED, (pull,))

    def sweep(self, limit: int) -> int:
        """Free up to ``limit`` records of the garbage; returns how many."""
        with self._transaction() as conn:
            freed = conn.execute(schema.TAKE_GARBAGE, (limit,)).fetchall()
            conn.executemany(schema.FREE_RECORD, freed)
        return len(freed)

    def commit(
        self,
        pull: int,
        collection: str,
        cursor: str | None,
        complete: bool,
        now: float,
        default_ttl: float,
    ) -> Applied:
        conn = self._conn
        with self._changing() as sequence:
            before = sequence.last  # objects with a higher seq are this pull's upserts
            outcome: dict[str, bool] = {}  # oid → upserted (True) or removed, last wins
            refreshed: set[str] = set()
            ignored = 0
            staged = conn.execute(schema.STAGED, (pull,))
            while rows := staged.fetchmany(COMMIT_BATCH):
                for kind, key, url, gatherer, record, ttl, update_time in rows:
                    expires = now + (default_ttl if ttl is None else ttl)
                    if kind == schema.UPSERT:
                        conn.execute(
                            schema.UPSERT_OBJECT,
                            {
                                "oid": key,
                                "collection": collection,
                                "url": url,
                                "gatherer": gatherer,
                                "record": record,
                                "expires": expires,
                                "update_time": update_time,
                                "seq": sequence.next(),
                                "stamp": now,
                                "origin": self._member,
                            },
                        )
                        outcome[key] = True
                        continue
                    target = (collection, url if key is None else key)
                    if kind == schema.REFRESH:
                        sql = schema.OIDS_BY_URL if key is None else schema.OIDS_BY_OID
                        matched = [found for (found,) in conn.execute(sql, target).fetchall()]
                        conn.executemany(
                            schema.REFRESH_OBJECT,
                            [(expires, sequence.next(), now, self._member, m) for m in matched],
                        )
                        refreshed.update(matched)
                    else:
                        sql = schema.DELETE_BY_URL if key is None else schema.DELETE_BY_OID
                        matched = self._remove(sequence, now, sql, target)
                        outcome.update(dict.fromkeys(matched, False))
                    ignored += not matched
            if complete:
                unseen = (collection, before, json.dumps(list(refreshed)))
                gone = self._remove(sequence, now, schema.DELETE_UNSEEN, unseen)
                outcome.update(dict.fromkeys(gone, False))
            conn.execute(schema.SAVE_COLLECTION, (collection, cursor, now))
            conn.execute(schema.DROP_STAGED, (pull,))  # the records are the objects' now
        return Applied(
            tuple(key for key, upserted in outcome.items() if upserted),
            tuple(key for key, upserted in outcome.items() if not upserted),
            len(refreshed),
            ignored,
        )

    # -- other changes ----------------------------------------------------------------------

    def expire(self, now: float) -> tuple[str, ...]:
        with self._changing() as sequence:
            removed = self._remove(sequence, now, schema.DELETE_EXPIRED, (now,), expiry=True)
            dropped = self._conn.execute(
                schema.DROP_TOMBSTONES, (now - self._retention, self.meta("indexed_seq"))
            ).fetchall()
            if dropped:
                horizon = max(self.meta("horizon"), *(seq for (seq,) in dropped))
                self._conn.execute(schema.SET_META, (horizon, "horizon"))
        return tuple(removed)

    def forget(self, collection: str, now: float) -> tuple[str, ...]:
        with self._changing() as sequence:
            removed = self._remove(sequence, now, schema.DELETE_COLLECTION, (collection,))
            self._conn.execute(schema.FORGET_COLLECTION, (collection,))
        return tuple(removed)

    def mark_indexed(self, seq: int) -> None:
        with self._transaction() as conn:
            last = self.meta("seq")
            if not 0 <= seq <= last:
                raise ValueError(f"indexed seq {seq} is outside 0..{last}")
            conn.execute(schema.SET_META, (seq, "indexed_seq"))

    # -- reads ------------------------------------------------------------------------------

    def get(self, key: str) -> Stored | None:
        row = self._conn.execute(schema.OBJECT_BY_OID, (key,)).fetchone()
        return None if row is None else _stored(row)

    def get_many(self, keys: list[str]) -> dict[str, Stored]:
        rows = self._conn.execute(schema.OBJECTS_BY_OIDS, (json.dumps(keys),))
        return {row[0]: _stored(row) for row in rows}

    def by_url(self, url: str) -> list[Stored]:
        return [_stored(row) for row in self._conn.execute(schema.OBJECTS_BY_URL, (url,))]

    def count(self, collection: str | None) -> int:
        if collection is None:
            row = self._conn.execute(schema.COUNT_ALL).fetchone()
        else:
            row = self._conn.execute(schema.COUNT_COLLECTION, (collection,)).fetchone()
        return int(row[0])

    def oids(self) -> set[str]:
        return {key for (key,) in self._conn.execute(schema.ALL_OIDS)}

    def collections(self) -> dict[str, CollectionState]:
        rows = self._conn.execute(schema.COLLECTIONS)
        return {name: CollectionState(count, cursor, last) for name, cursor, last, count in rows}

    def cursor(self, collection: str) -> str | None:
        row = self._conn.execute(schema.CURSOR, (collection,)).fetchone()
        return None if row is None else row[0]

    def changes(self, after: int, limit: int) -> list[Change]:
        rows = self._conn.execute(schema.CHANGES, {"after": after, "limit": limit})
        return [_change(row) for row in rows]

    # -- replicas ---------------------------------------------------------------------------

    def replica_changes(self, collection: str, after: int, limit: int) -> list[ReplicaChange]:
        params = {"collection": collection, "after": after, "limit": limit}
        rows = self._conn.execute(schema.REPLICA_CHANGES, params)
        return [(seq, key, Version(stamp, by, bool(gone))) for seq, key, stamp, by, gone in rows]

    def versions(self, keys: list[str]) -> dict[str, Version]:
        rows = self._conn.execute(schema.VERSIONS, {"oids": json.dumps(keys)})
        return {key: Version(stamp, by, bool(gone)) for key, stamp, by, gone in rows}

    def collection_versions(self, collection: str) -> list[tuple[str, Version]]:
        rows = self._conn.execute(schema.COLLECTION_VERSIONS, {"collection": collection})
        return [(key, Version(stamp, by, bool(gone))) for key, stamp, by, gone in rows]

    def entries(self, keys: list[str]) -> list[Entry]:
        rows = self._conn.execute(schema.ENTRIES, {"oids": json.dumps(keys)})
        return [
            Entry(key, collection, url, gatherer, expires, Version(stamp, by, blob is None), blob)
            for key, collection, url, gatherer, expires, stamp, by, blob in rows
        ]

    def apply_replica(
        self, collection: str, entries: Sequence[Entry], now: float
    ) -> ReplicaApplied:
        # Every entry checked before anything is written: a bad one applies none.
        latest: dict[str, tuple[Entry, float | None]] = {}
        for entry in entries:
            update_time = _replica_update_time(entry, collection)
            if entry.oid not in latest or latest[entry.oid][0].version < entry.version:
                latest[entry.oid] = (entry, update_time)
        conn = self._conn
        upserted: list[str] = []
        removed: list[str] = []
        with self._changing() as sequence:
            held = self.versions(list(latest))
            for key, (entry, update_time) in latest.items():
                version = entry.version
                if not version.deleted and entry.expires <= now:
                    # Expired on the way: the tombstone its expiry makes everywhere.
                    version = Version(
                        max(entry.expires, version.stamp + STEP), version.origin, True
                    )
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


async def _result(future: Future[T], context: str) -> T:
    return await sqlite.awaited(future, context, StorageError)


class Pull:
    """One pull into a collection, staged until committed; see the module docstring.

    Calls run in the order made; ``add`` and ``commit`` raise RuntimeError once the pull
    has been committed or aborted (a commit that failed leaves it to be aborted).
    """

    def __init__(self, registry: Registry, collection: str, number: int) -> None:
        self.collection = collection
        self.number = number  # tells this pull's staged rows from concurrent pulls'
        self.staged = 0  # items added so far
        self._registry = registry
        self._open = True  # add and commit allowed
        self._committed = False

    def __repr__(self) -> str:
        state = "committed" if self._committed else "open" if self._open else "closed"
        return f"Pull({self.collection!r} #{self.number}, {self.staged} staged, {state})"

    def _check_open(self, action: str) -> None:
        if not self._open:
            raise RuntimeError(f"cannot {action}: {self!r}")

    async def add(self, items: Sequence[Item]) -> None:
        """Stage ``items`` (records, or Update, Refresh and Delete wrappers), in order."""
        for start in range(0, len(items), CHUNK):
            self._check_open("add")
            chunk = items[start : start + CHUNK]
            await self._registry._call(
                self._registry._store.stage, self.number, self.collection, chunk
            )
            self.staged += len(chunk)

    async def commit(
        self, *, cursor: str | None, complete: bool, now: float, default_ttl: float
    ) -> Applied:
        """Apply everything staged and save ``cursor``, in one transaction."""
        if not default_ttl > 0:
            raise ValueError(f"default_ttl must be positive, got {default_ttl}")
        self._check_open("commit")
        # One attempt only: a retry after a cancelled commit could find the staging already
        # applied and, if complete, empty the collection.
        self._open = False
        applied = await self._registry._call(
            self._registry._store.commit,
            self.number,
            self.collection,
            cursor,
            complete,
            now,
            default_ttl,
        )
        self._committed = True
        return applied

    async def abort(self) -> None:
        """Drop what was staged; nothing of it is applied. Idempotent; nothing to do after
        a commit, or once the registry is closed (its next open drops the staging)."""
        self._open = False
        if not self._committed and not self._registry.closed:
            await self._registry._call(self._registry._store.discard, self.number)


class PullContext:
    """What :meth:`Registry.begin` returns: await it for the :class:`Pull`, or enter it
    with ``async with`` to have the pull aborted unless committed when the block ends."""

    __slots__ = ("_collection", "_pull", "_registry")

    def __init__(self, registry: Registry, collection: str) -> None:
        self._registry = registry
        self._collection = collection
        self._pull: Pull | None = None

    def __repr__(self) -> str:
        return f"PullContext({self._collection!r}, {self._pull!r})"

    def __await__(self) -> Generator[Any, None, Pull]:
        return self._start().__await__()

    async def _start(self) -> Pull:
        return await self._registry._new_pull(self._collection)

    async def __aenter__(self) -> Pull:
        self._pull = await self._start()
        return self._pull

    async def __aexit__(self, *_: object) -> None:
        if self._pull is not None:
            await self._pull.abort()


class Registry:
    """The broker's objects and their changes in one SQLite file; see the module docstring."""

    def __init__(
        self,
        path: Path,
        executor: ThreadPoolExecutor,
        store: _Store,
        reading: ThreadPoolExecutor,
        reader: _Store,
    ) -> None:
        self.path = path
        self._executor = executor
        self._store = store
        # Reads have a connection and thread of their own: a pull's commit (seconds for 100k
        # objects) must not hold up queries, and WAL lets them read the last committed state.
        self._reading = reading
        self._reader = reader
        self._numbers = itertools.count(1)
        self._closed = False

    def __repr__(self) -> str:
        return f"Registry({str(self.path)!r}, {'closed' if self._closed else 'open'})"

    @property
    def closed(self) -> bool:
        return self._closed

    @classmethod
    async def open(
        cls, path: Path, *, tombstone_retention: float = 30 * DAY, member: str = "local"
    ) -> Registry:
        """Open (creating if needed) the registry at ``path``; tombstones are kept for
        ``tombstone_retention`` seconds (and until the index has applied them). ``member``:
        this broker's id among replicas, the origin of the changes made here."""
        if not tombstone_retention >= 0:
            raise ValueError(f"tombstone_retention must be >= 0, got {tombstone_retention}")
        executor = ThreadPoolExecutor(1, thread_name_prefix="broker-registry")
        opening = executor.submit(_Store.open, path, tombstone_retention, member)
        try:
            store = await _result(opening, f"cannot open registry {path}")
        except BaseException:
            # Cancelled mid-open: the connection is closed once made, on its own thread.
            executor.submit(sqlite.close_made, opening)
            executor.shutdown(wait=False)
            raise
        reading = ThreadPoolExecutor(1, thread_name_prefix="broker-registry-read")
        connecting = reading.submit(_Store.reader, path, tombstone_retention, member)
        try:
            reader = await _result(connecting, f"cannot open registry {path}")
        except BaseException:
            reading.submit(sqlite.close_made, connecting)
            reading.shutdown(wait=False)
            executor.submit(store.close)
            executor.shutdown(wait=False)
            raise
        return cls(path, executor, store, reading, reader)

    async def __aenter__(self) -> Registry:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection once the calls already made have run; idempotent."""
        if self._closed:
            return
        self._closed = True
        # Submitted before any await, so they run after the queued work even if cancelled.
        closing = self._executor.submit(self._store.close)
        closing_reader = self._reading.submit(self._reader.close)
        self._executor.shutdown(wait=False)
        self._reading.shutdown(wait=False)
        await _result(closing, f"registry {self.path}")
        await _result(closing_reader, f"registry {self.path}")

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._closed:
            raise StorageError(f"registry {self.path} is closed")
        return await _result(self._executor.submit(fn, *args, **kwargs), f"registry {self.path}")

    async def _read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._closed:
            raise StorageError(f"registry {self.path} is closed")
        return await _result(self._reading.submit(fn, *args, **kwargs), f"registry {self.path}")

    async def _new_pull(self, collection: str) -> Pull:
        if not collection:
            raise ValueError("a collection needs a name")
        await self._sweep()
        return Pull(self, collection, next(self._numbers))

    async def _sweep(self) -> None:
        """Free the records the last writes dropped, a chunk per transaction (other calls
        run between the chunks)."""
        while await self._call(self._store.sweep, CHUNK):
            pass

    # -- changes ----------------------------------------------------------------------------

    def begin(self, collection: str) -> PullContext:
        """Start a pull into ``collection``: ``pull = await registry.begin(name)``, or
        ``async with registry.begin(name) as pull``. Pulls may run concurrently; each is
        applied by its own commit (the later commit's cursor is the one kept)."""
        return PullContext(self, collection)

    async def expire(self, now: float) -> tuple[str, ...]:
        """Remove the objects whose expiry is at or before ``now`` (each leaves a tombstone)
        and drop the tombstones older than the retention that the index has applied.
        Returns the removed oids."""
        await self._sweep()
        return await self._call(self._store.expire, now)

    async def forget(self, collection: str, *, now: float) -> tuple[str, ...]:
        """Remove ``collection``, its cursor and all its objects (each leaves a tombstone
        dated ``now``). Returns the removed oids; an unknown collection removes nothing."""
        await self._sweep()
        return await self._call(self._store.forget, collection, now)

    # -- the change sequence ----------------------------------------------------------------

    async def last_seq(self) -> int:
        """The last change number given (0 for a new registry)."""
        return await self._call(self._store.meta, "seq")

    async def oldest_seq(self) -> int:
        """The lowest ``n`` for which ``changes_since(n)`` is exact: the seq of the newest
        tombstone dropped (0 while none has been). A replica behind it takes a full copy."""
        return await self._call(self._store.meta, "horizon")

    async def changes_since(self, seq: int, limit: int) -> list[Change]:
        """Up to ``limit`` changes after ``seq``, in seq order: each changed object's current
        record (upsert) or its removal. Page on with the last one's seq."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        return await self._call(self._store.changes, seq, limit)

    async def indexed_seq(self) -> int:
        """The highest seq the index is known to reflect."""
        return await self._call(self._store.meta, "indexed_seq")

    async def mark_indexed(self, seq: int) -> None:
        """Record that the index reflects every change up to ``seq`` (call after the index
        commits; 0 before a rebuild). ValueError outside 0..last_seq."""
        await self._call(self._store.mark_indexed, seq)

    # -- reads ------------------------------------------------------------------------------

    async def get(self, oid: str) -> Stored | None:
        return await self._read(self._reader.get, oid)

    async def get_many(self, oids: Iterable[str]) -> dict[str, Stored]:
        """The stored objects among ``oids``, in one query (unknown oids are left out)."""
        return await self._read(self._reader.get_many, list(oids))

    async def by_url(self, url: str) -> list[Stored]:
        """Every object with ``url`` (one per gatherer), by collection and gatherer."""
        return await self._read(self._reader.by_url, url)

    async def count(self, collection: str | None = None) -> int:
        """How many objects the registry holds, or ``collection`` holds."""
        return await self._read(self._reader.count, collection)

    async def oids(self) -> set[str]:
        """Every object's oid (for garbage collection against the index)."""
        return await self._read(self._reader.oids)

    async def collections(self) -> dict[str, CollectionState]:
        """Every collection that has committed a pull, by name."""
        return await self._read(self._reader.collections)

    async def cursor(self, collection: str) -> str | None:
        """Where ``collection``'s next pull resumes; None if it has none (or no pull yet)."""
        return await self._read(self._reader.cursor, collection)

    # -- replicas ---------------------------------------------------------------------------

    async def replica_changes(self, collection: str, after: int, limit: int) -> list[ReplicaChange]:
        """Up to ``limit`` (seq, oid, version) of ``collection``'s changes after ``after``."""
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        return await self._read(self._reader.replica_changes, collection, after, limit)

    async def replica_versions(self, oids: Iterable[str]) -> dict[str, Version]:
        """The versions held (object or tombstone) of those of ``oids`` that are held."""
        return await self._read(self._reader.versions, list(oids))

    async def collection_versions(self, collection: str) -> list[tuple[str, Version]]:
        """(oid, version) of every object and tombstone of ``collection``."""
        return await self._read(self._reader.collection_versions, collection)

    async def replica_entries(self, oids: Iterable[str]) -> list[Entry]:
        """The whole state (object or tombstone) of those of ``oids`` that are held."""
        return await self._read(self._reader.entries, list(oids))

    async def apply_replica(
        self, collection: str, entries: Sequence[Entry], *, now: float
    ) -> ReplicaApplied:
        """Apply another member's ``entries`` of ``collection`` in one transaction, each only
        if its version is newer than the one held; ReplicaError (nothing applied) if one is
        invalid. A live entry already expired at ``now`` is applied as its expiry's
        tombstone."""
        await self._sweep()
        return await self._call(self._store.apply_replica, collection, entries, now)
