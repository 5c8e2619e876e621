"""The disk tier's two tables: small objects (with their bodies) and Vary markers in Small,
larger objects' records in diskcache's rows. A key is in one or the other, whichever its
newest object needs; the cull takes the oldest rows of both; heads and the membership cover
both; objects stored by the layout before Small are still read."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import tracemalloc
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from harvest_cache.config import KIB, MIB
from harvest_cache.store.codec import ObjectRecord, encode
from harvest_cache.store.disk import DiskTier
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import FileBody, StoredObject
from tests.store.test_store_tiered import head_for, payload

T = TypeVar("T")


class Tier:
    """A disk tier in ``directory``, every call on one thread (its SQLite connection's)."""

    def __init__(self, directory: Path, size_limit: int) -> None:
        self.directory = directory
        self.size_limit = size_limit
        self.thread = ThreadPoolExecutor(1)
        self.tier: DiskTier | None = None

    async def __aenter__(self) -> Tier:
        self.tier = await self.run(DiskTier.open, self.directory, self.size_limit)
        return self

    def __call__(self, method: str, *args: object) -> asyncio.Future[object]:
        """The tier's ``method`` with ``args``, on the tier's thread."""
        return asyncio.ensure_future(self.run(getattr(self.tier, method), *args))

    def may_hold(self, key: str) -> bool:
        assert self.tier is not None
        return self.tier.may_hold(key)

    async def __aexit__(self, *_: object) -> None:
        assert self.tier is not None
        await self.run(self.tier.close_connection, threading.Barrier(1))
        await self.run(self.tier.release)
        self.thread.shutdown()

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.thread, fn, *args)


def rows(directory: Path, key: str) -> tuple[int, int]:
    """(rows of ``key`` in Small, its record rows in diskcache's table)."""
    with contextlib.closing(sqlite3.connect(directory / "objects" / "cache.db")) as db:
        small = db.execute("SELECT count(*) FROM Small WHERE key = ?", (key,)).fetchone()[0]
        large = db.execute("SELECT count(*) FROM Cache WHERE key = ?", ("h:" + key,)).fetchone()
        return small, large[0]


def body(found: object) -> bytes:
    assert isinstance(found, StoredObject)
    if isinstance(found.body, FileBody):
        with found.body.file as f:
            return f.read()
    return found.body


async def test_a_key_lives_in_the_table_its_newest_object_needs(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        small, large = payload(KIB, seed=1), payload(100 * KIB, seed=2)
        await tier("commit", "k", head_for("k", len(small)), small)
        assert rows(directory, "k") == (1, 0)
        await tier("commit", "k", head_for("k", len(large)), large)
        assert rows(directory, "k") == (0, 1)
        assert body(await tier("get", "k", 0)) == large
        await tier("commit_many", [("k", head_for("k", 10), payload(10, seed=3))])
        assert rows(directory, "k") == (1, 0)
        assert body(await tier("get", "k", MIB)) == payload(10, seed=3)
        assert list(directory.glob("objects/**/*.val")) == []  # the large body's file is gone
        await tier("put_marker", "k", VaryMarker("http://origin.test/k", ("accept",), "g"))
        assert rows(directory, "k") == (1, 0)
        assert isinstance(await tier("get", "k", MIB), VaryMarker)
        await tier("delete", "k")
        assert rows(directory, "k") == (0, 0)
        assert not tier.may_hold("k")


async def test_a_revalidated_head_is_kept_in_its_table(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        for key, size in (("small", KIB), ("large", 100 * KIB)):
            await tier("commit", key, head_for(key, size), payload(size))
            await tier("update_head", key, head_for(key, size, response_time=5e3))
            found = await tier("get", key, MIB)
            assert isinstance(found, StoredObject)
            assert found.head.response_time == 5e3
            assert body(found) == payload(size)
        assert rows(directory, "small") == (1, 0)
        assert rows(directory, "large") == (0, 1)


async def test_the_cull_takes_the_oldest_rows_of_both_tables(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 2 * MIB) as tier:
        keys = []
        for i in range(96):  # 8 MiB in all, a small and a large object in turn
            key, size = f"k{i}", (20 * KIB if i % 2 else 150 * KIB)
            keys.append(key)
            await tier("commit", key, head_for(key, size), payload(size, seed=i))
        volume = await tier("volume")
        assert isinstance(volume, int)
        assert volume <= 2 * MIB
        held = [await tier("get", key, MIB) is not None for key in keys]
        assert not any(held[:30])  # the oldest went, of both kinds
        assert all(held[-4:])
        assert [tier.may_hold(key) for key in keys[:30]] == [False] * 30
        heads = await tier("heads")
        assert isinstance(heads, list)
        assert {h.url for h in heads} == {
            head_for(key, 0).url for key, kept in zip(keys, held, strict=True) if kept
        }


async def test_membership_covers_both_tables_at_open(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        await tier("commit", "s", head_for("s", KIB), payload(KIB))
        await tier("commit", "l", head_for("l", 100 * KIB), payload(100 * KIB))
    async with Tier(directory, 256 * MIB) as tier:
        assert (tier.may_hold("s"), tier.may_hold("l"), tier.may_hold("x")) == (True, True, False)


async def test_an_object_stored_before_small_existed_is_read_and_replaced(tmp_path: Path) -> None:
    """The layout before Small: a record row naming a body row, both diskcache's."""
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB):
        pass  # (made, with its tables)
    old_body = payload(KIB, seed=9)
    record = ObjectRecord(head_for("old", KIB), "b:0123", zlib.crc32(old_body))
    with contextlib.closing(sqlite3.connect(directory / "objects" / "cache.db")) as db, db:
        for name, value in (("h:old", encode(record)), ("b:0123", old_body)):
            db.execute(
                "INSERT INTO Cache (key, raw, store_time, expire_time, access_time,"
                " access_count, tag, size, mode, filename, value)"
                " VALUES (?, 1, 0, NULL, 0, 0, NULL, 0, 1, NULL, ?)",
                (name, value),
            )
    async with Tier(directory, 256 * MIB) as tier:
        assert tier.may_hold("old")
        assert body(await tier("get", "old", MIB)) == old_body
        await tier("commit", "old", head_for("old", 10), payload(10))
        assert rows(directory, "old") == (1, 0)
        with contextlib.closing(sqlite3.connect(directory / "objects" / "cache.db")) as db:
            assert db.execute("SELECT count(*) FROM Cache WHERE key = 'b:0123'").fetchone() == (0,)


async def test_listing_the_heads_reads_no_body(tmp_path: Path) -> None:
    """A small object's body is its row's last column: the heads (a cache digest is made of
    them) are listed without reading any body into memory."""
    async with Tier(tmp_path / "cache", 256 * MIB) as tier:
        objects = [
            (f"k{i}", head_for(f"k{i}", 30 * KIB), payload(30 * KIB, seed=i)) for i in range(200)
        ]
        await tier("commit_many", objects)  # 6 MiB of bodies
        tracemalloc.start()
        try:
            heads = await tier("heads")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert isinstance(heads, list)
        assert len(heads) == 200
        assert peak < 1 * MIB, peak
