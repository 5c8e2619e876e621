"""The registry's SQLite connections and the threads they are used on.

A ``Store`` is one connection (WAL) with the registry's settings; the functions of the other
modules that take one run on its thread. A ``Worker`` owns that thread: every call is queued
to it and awaited, and the calls run one at a time in the order made. The registry has two:
one that writes and one that reads (a pull's commit, seconds for 100k objects, must not hold
up queries, and WAL lets them read the last committed state).

Work on many records is cut into small transactions (staging, and freeing the records that
replaced or removed objects leave behind, which the registry does before every pull, expiry,
forget and replica apply), so a query queued behind it waits milliseconds; a commit is one
transaction and holds the thread for its whole length. sqlite3 errors become
:class:`~broker.errors.StorageError`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import broker.registry.schema as schema
from broker.errors import StorageError
from harvest_common import sqlite

# Records staged, or freed, per transaction: work on many records is cut into these, so that
# a call queued behind it (a query's get_many) waits for one chunk (a quarter megabyte of
# records, 2 ms), not for the whole batch (256 made that wait 15 ms, for no faster staging).
CHUNK = 64

P = ParamSpec("P")
T = TypeVar("T")


class Store:
    """One connection of the registry's: ``conn``, and the settings the writes follow
    (``retention`` of tombstones, in seconds; ``member``, the origin of changes made here)."""

    __slots__ = ("conn", "member", "retention")

    def __init__(self, conn: sqlite3.Connection, retention: float, member: str) -> None:
        self.conn = conn
        self.retention = retention
        self.member = member

    @classmethod
    def connect(cls, path: Path, retention: float, member: str) -> Store:
        return cls(schema.connect(path), retention, member)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            if self.conn.in_transaction:  # SQLite may have rolled back already (disk full)
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def meta(self, key: str) -> int:
        return int(self.conn.execute(schema.GET_META, (key,)).fetchone()[0])

    def sweep(self, limit: int) -> int:
        """Free up to ``limit`` records of the garbage; returns how many."""
        with self.transaction() as conn:
            freed = conn.execute(schema.TAKE_GARBAGE, (limit,)).fetchall()
            conn.executemany(schema.FREE_RECORD, freed)
        return len(freed)


async def _result(future: Future[T], context: str) -> T:
    return await sqlite.awaited(future, context, StorageError)


class Worker:
    """A Store on a thread of its own."""

    __slots__ = ("_closing", "_executor", "_path", "_store", "closed")

    def __init__(self, path: Path, executor: ThreadPoolExecutor, store: Store) -> None:
        self._path = path
        self._executor = executor
        self._store = store
        self._closing: Future[None] | None = None
        self.closed = False

    @classmethod
    async def open(
        cls, path: Path, thread: str, connect: Callable[P, Store], *args: P.args, **kwargs: P.kwargs
    ) -> Worker:
        """A new thread named ``thread``, and the Store ``connect`` makes on it."""
        executor = ThreadPoolExecutor(1, thread_name_prefix=thread)
        opening = executor.submit(connect, *args, **kwargs)
        try:
            store = await _result(opening, f"cannot open registry {path}")
        except BaseException:
            # Cancelled mid-open: the connection is closed once made, on its own thread.
            executor.submit(sqlite.close_made, opening)
            executor.shutdown(wait=False)
            raise
        return cls(path, executor, store)

    async def call(
        self, fn: Callable[Concatenate[Store, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``fn(store, *args, **kwargs)`` on the thread, after the calls made before it."""
        if self.closed:
            raise StorageError(f"registry {self._path} is closed")
        future = self._executor.submit(fn, self._store, *args, **kwargs)
        return await _result(future, f"registry {self._path}")

    async def sweep(self) -> None:
        """Free the records the last writes dropped, a chunk per transaction (other calls
        run between the chunks)."""
        while await self.call(Store.sweep, CHUNK):
            pass

    def close(self) -> None:
        """Close the connection once the calls already made have run, and let the thread end
        (``wait_closed`` awaits it). Submitted at once, so it runs after the queued work even
        if the caller is then cancelled."""
        self.closed = True
        self._closing = self._executor.submit(self._store.close)
        self._executor.shutdown(wait=False)

    async def wait_closed(self) -> None:
        assert self._closing is not None, "close first"
        await _result(self._closing, f"registry {self._path}")
