"""The registry's connections and threads (broker/registry/store.py, database.py): freeing
the garbage in chunks, reopening, calls off the event loop, storage errors, closing."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from broker.errors import StorageError
from broker.registry import Registry
from harvest_common.soif import Delete
from tests.broker.registry.support import (
    NOW,
    STAMP_H,
    gid,
    pull,
    rec,
    state_of,
    stored,
    table_counts,
    wrapper,
)


async def test_dropped_records_are_freed_in_chunks_before_the_next_write_or_at_open(
    path: Path,
) -> None:
    async with await Registry.open(path) as registry:
        await pull(registry, "g", [rec(f"http://{i}/") for i in range(300)])
        await pull(registry, "h", [rec("http://h/", stamp=STAMP_H)])
        assert len(await registry.forget("g", now=NOW)) == 300
        assert table_counts(path)["garbage"] == 300
        await registry.begin("h")  # several chunks
        assert [table_counts(path)[table] for table in ("garbage", "records")] == [0, 1]

        await registry.forget("h", now=NOW)
        assert table_counts(path)["garbage"] == 1
    async with await Registry.open(path):
        assert [table_counts(path)[table] for table in ("garbage", "records")] == [0, 0]


async def test_everything_survives_reopening(path: Path) -> None:
    async with await Registry.open(path) as registry:
        await pull(registry, "g", [rec("http://a/"), rec("http://b/")])
        await pull(registry, "g", [Delete(wrapper("http://b/"))], cursor="c9")
        await registry.mark_indexed(2)
        before = await state_of(registry)

    async with await Registry.open(path) as registry:
        assert await state_of(registry) == before
        assert await registry.indexed_seq() == 2
        assert await registry.cursor("g") == "c9"
        await pull(registry, "g", [rec("http://c/")])
        assert (await stored(registry, gid("http://c/"))).seq == 4  # the sequence goes on


# -- concurrency and errors ----------------------------------------------------------------


async def test_many_calls_in_flight_run_off_the_event_loop(registry: Registry) -> None:
    await pull(registry, "g", [rec(f"http://{i}/") for i in range(200)])
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    many = [rec(f"http://{i}/", "x" * 4000, stamp=STAMP_H) for i in range(2000)]
    big = asyncio.create_task(pull(registry, "h", many))
    reads = [asyncio.create_task(registry.get(gid(f"http://{i}/"))) for i in range(200)]
    await asyncio.gather(big, *reads)
    ticking.cancel()

    found = [read.result() for read in reads]
    assert [None if s is None else s.url for s in found] == [f"http://{i}/" for i in range(200)]
    assert len(big.result().upserted) == 2000
    assert ticks > 100  # the loop kept running while the thread worked


async def test_a_negative_tombstone_retention_is_refused(path: Path) -> None:
    with pytest.raises(ValueError, match="retention"):
        await Registry.open(path, tombstone_retention=-1)


async def test_a_directory_as_the_database_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        await Registry.open(tmp_path)


async def test_an_unknown_schema_version_is_a_storage_error(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(StorageError, match="version 99"):
        await Registry.open(path)


async def test_close_is_idempotent_and_later_calls_fail(path: Path) -> None:
    registry = await Registry.open(path)
    staged = await registry.begin("g")
    await registry.close()
    await registry.close()

    assert registry.closed
    with pytest.raises(StorageError, match="closed"):
        await registry.count()
    with pytest.raises(StorageError, match="closed"):
        await registry.begin("g")
    await staged.abort()  # nothing to do: the next open drops the staging
