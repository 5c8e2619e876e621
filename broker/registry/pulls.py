"""Pulls into the registry: staged, then applied in one transaction.

A pull is staged so that a pull failing mid-stream applies nothing and memory stays bounded
however long the stream::

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
cut short by a crash is dropped when the registry is next opened (``drop_abandoned``).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import broker.registry.schema as schema
from broker.oid import gatherer_identity, oid
from broker.registry.changes import changing, remove
from broker.registry.objects import UPDATE_TIME, lifetime, number
from broker.registry.store import CHUNK, Store, Worker
from harvest_common.soif import Delete, Item, Record, Refresh, Update, encode

# Staged rows a commit reads at a time: its memory does not grow with the pull.
COMMIT_BATCH = 1_000


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


_StagingRow = tuple[str, str | None, str, str | None, bytes | None, float | None, float | None]


def _staging_row(item: Item, collection: str) -> _StagingRow:
    """(kind, oid, url, gatherer, encoded record, ttl, update_time) for one item; a refresh
    or delete without Gatherer-* attributes has no oid (it matches by URL) nor record."""
    if isinstance(item, Refresh | Delete):
        wrapper = item.record
        kind = schema.REFRESH if isinstance(item, Refresh) else schema.DELETE
        gatherer = gatherer_identity(wrapper)
        key = None if gatherer is None else oid(gatherer, wrapper.url)
        return (kind, key, wrapper.url, gatherer, None, lifetime(wrapper), None)
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
        lifetime(record),
        number(record, UPDATE_TIME),
    )


# -- on the writer's thread ----------------------------------------------------------------


def drop_abandoned(store: Store) -> None:
    """Drop the pulls a killed process left staged (at open, no pull is in progress)."""
    with store.transaction() as conn:
        conn.execute(schema.DROP_ALL_STAGED_RECORDS)
        conn.execute(schema.DROP_ALL_STAGED)


def stage(store: Store, pull: int, collection: str, items: Sequence[Item]) -> None:
    rows = [_staging_row(item, collection) for item in items]  # a bad item stages none
    with store.transaction() as conn:
        for kind, key, url, gatherer, blob, ttl, update_time in rows:
            record = None if blob is None else conn.execute(schema.INSERT_RECORD, (blob,)).lastrowid
            conn.execute(schema.STAGE, (pull, kind, key, url, gatherer, record, ttl, update_time))


def discard(store: Store, pull: int) -> None:
    with store.transaction() as conn:
        conn.execute(schema.DROP_STAGED_RECORDS, (pull,))
        conn.execute(schema.DROP_STAGED, (pull,))


def apply_staged(
    store: Store,
    pull: int,
    collection: str,
    cursor: str | None,
    complete: bool,
    now: float,
    default_ttl: float,
) -> Applied:
    conn = store.conn
    with changing(store) as sequence:
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
                            "origin": store.member,
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
                        [(expires, sequence.next(), now, store.member, m) for m in matched],
                    )
                    refreshed.update(matched)
                else:
                    sql = schema.DELETE_BY_URL if key is None else schema.DELETE_BY_OID
                    matched = remove(store, sequence, now, sql, target)
                    outcome.update(dict.fromkeys(matched, False))
                ignored += not matched
        if complete:
            unseen = (collection, before, json.dumps(list(refreshed)))
            gone = remove(store, sequence, now, schema.DELETE_UNSEEN, unseen)
            outcome.update(dict.fromkeys(gone, False))
        conn.execute(schema.SAVE_COLLECTION, (collection, cursor, now))
        conn.execute(schema.DROP_STAGED, (pull,))  # the records are the objects' now
    return Applied(
        tuple(key for key, upserted in outcome.items() if upserted),
        tuple(key for key, upserted in outcome.items() if not upserted),
        len(refreshed),
        ignored,
    )


# -- the pull, as its caller sees it -------------------------------------------------------


class Pull:
    """One pull into a collection, staged until committed; see the module docstring.

    Calls run in the order made; ``add`` and ``commit`` raise RuntimeError once the pull
    has been committed or aborted (a commit that failed leaves it to be aborted).
    """

    def __init__(self, writer: Worker, collection: str, number: int) -> None:
        self.collection = collection
        self.number = number  # tells this pull's staged rows from concurrent pulls'
        self.staged = 0  # items added so far
        self._writer = writer
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
            await self._writer.call(stage, self.number, self.collection, chunk)
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
        applied = await self._writer.call(
            apply_staged, self.number, self.collection, cursor, complete, now, default_ttl
        )
        self._committed = True
        return applied

    async def abort(self) -> None:
        """Drop what was staged; nothing of it is applied. Idempotent; nothing to do after
        a commit, or once the registry is closed (its next open drops the staging)."""
        self._open = False
        if not self._committed and not self._writer.closed:
            await self._writer.call(discard, self.number)


class PullContext:
    """What :meth:`Registry.begin` returns: await it for the :class:`Pull`, or enter it
    with ``async with`` to have the pull aborted unless committed when the block ends.
    ``numbers`` gives each pull of the registry its own number."""

    __slots__ = ("_collection", "_numbers", "_pull", "_writer")

    def __init__(self, writer: Worker, collection: str, numbers: Iterator[int]) -> None:
        self._writer = writer
        self._collection = collection
        self._numbers = numbers
        self._pull: Pull | None = None

    def __repr__(self) -> str:
        return f"PullContext({self._collection!r}, {self._pull!r})"

    def __await__(self) -> Generator[Any, None, Pull]:
        return self._start().__await__()

    async def _start(self) -> Pull:
        if not self._collection:
            raise ValueError("a collection needs a name")
        await self._writer.sweep()
        return Pull(self._writer, self._collection, next(self._numbers))

    async def __aenter__(self) -> Pull:
        self._pull = await self._start()
        return self._pull

    async def __aexit__(self, *_: object) -> None:
        if self._pull is not None:
            await self._pull.abort()
