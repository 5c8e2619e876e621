"""The disk tier's writer thread: small objects written behind the request, in the order asked
and in batches; a full queue skips the disk instead of slowing the request; failures counted;
nothing queued is lost on close or served older than the memory tier had it."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harvest_cache.config import KIB, CacheConfig
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.disk import DiskError, DiskTier
from harvest_cache.store.interface import StoredObject
from harvest_cache.store.tiered import TieredStore, open_store
from harvest_cache.store.writer import MAX_BATCH, DiskWriter
from tests.store.test_store_tiered import body_of, config, head_for, payload, put

GATE_SECONDS = 10  # (a held writer lets go by itself if a test fails before releasing it)


@pytest.fixture
async def disk(cfg: CacheConfig) -> AsyncIterator[DiskTier]:
    """A disk tier of its own (opened and closed on one thread: its SQLite connection)."""
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1) as thread:
        tier = await loop.run_in_executor(thread, DiskTier.open, cfg.dir, 64 * 1024 * KIB)
        yield tier
        await loop.run_in_executor(thread, tier.close_connection, threading.Barrier(1))
        await loop.run_in_executor(thread, tier.release)


class Held:
    """The writer thread kept busy until ``release``: what is queued meanwhile stays queued."""

    def __init__(self, writer: DiskWriter) -> None:
        self._gate = threading.Event()
        self._started = threading.Event()
        self._call = asyncio.ensure_future(writer.call(self._hold))

    def _hold(self) -> None:
        self._started.set()
        self._gate.wait(GATE_SECONDS)

    async def __aenter__(self) -> Held:
        assert await asyncio.to_thread(self._started.wait, GATE_SECONDS)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._gate.set()
        await self._call


def writer_of(store: TieredStore) -> DiskWriter:
    assert store.disk_writer is not None
    return store.disk_writer


async def on_disk(cfg: CacheConfig, key: str) -> bytes | None:
    """``key``'s body as a fresh process opening the directory finds it (None: not there)."""
    store = await open_store(cfg)
    try:
        found = await store.get(key)
        if found is None:
            return None
        assert isinstance(found, StoredObject)
        assert found.tier == "disk"
        return await body_of(found)
    finally:
        await store.close()


async def test_a_small_object_is_committed_behind_the_request(
    store: TieredStore, cfg: CacheConfig
) -> None:
    writer = writer_of(store)
    async with Held(writer):
        await put(store, "k", payload(KIB))  # returns though the writer is busy
        assert writer.holds("k")
        assert writer.pending == KIB
        assert await body_of(store.memory_view.get("k")) == payload(KIB)
    await store.flush()
    assert not writer.holds("k")
    assert writer.pending == 0
    await store.close()
    assert await on_disk(cfg, "k") == payload(KIB)


async def test_a_deletion_is_never_overtaken_by_an_older_write(
    store: TieredStore, cfg: CacheConfig
) -> None:
    async with Held(writer_of(store)):
        await put(store, "k", payload(KIB))
        deleting = asyncio.ensure_future(store.delete("k"))
        await asyncio.sleep(0.01)
        assert not deleting.done()  # a deletion waits for the disk: it is queued behind the write
    await deleting
    await store.close()
    assert await on_disk(cfg, "k") is None


async def test_an_object_evicted_from_memory_before_its_disk_copy_is_not_served_older(
    store: TieredStore,
) -> None:
    await put(store, "k", payload(KIB, seed=1))
    await store.flush()  # version 1 is on disk
    async with Held(writer_of(store)):
        await put(store, "k", payload(2 * KIB, seed=2))
        store.memory.delete("k")  # (as memory pressure would)
        reading = asyncio.ensure_future(store.get("k"))
        await asyncio.sleep(0.01)
        assert not reading.done()  # it waits for version 2 to reach the disk
    assert await body_of(await reading) == payload(2 * KIB, seed=2)


async def test_a_full_queue_skips_the_disk_counts_and_logs_it(
    disk: DiskTier, cfg: CacheConfig, caplog: pytest.LogCaptureFixture
) -> None:
    writer = DiskWriter(disk, max_pending=10 * KIB)
    with caplog.at_level(logging.WARNING, "harvest_cache.store.writer"):
        async with Held(writer):
            for key, stored in (("a", True), ("b", True), ("c", False), ("d", False)):
                assert writer.write_behind(key, head_for(key, 4 * KIB), payload(4 * KIB)) is stored
            assert writer.skipped == 2
            assert writer.pending == 8 * KIB
    await writer.close()
    skips = [r for r in caplog.records if "not being stored on disk" in r.getMessage()]
    assert len(skips) == 1  # (at most one line per 10 s, however many are skipped)
    assert [await on_disk(cfg, key) is not None for key in "abcd"] == [True, True, False, False]


async def test_objects_queued_together_are_committed_in_batches_and_all_survive(
    store: TieredStore, cfg: CacheConfig
) -> None:
    count = MAX_BATCH + 100
    async with Held(writer_of(store)):
        for i in range(count):
            await put(store, f"k{i}", payload(100, seed=i % 200))
        assert writer_of(store).pending == 100 * count
    await store.close()  # commits what is queued before closing
    reopened = await open_store(cfg)
    try:
        for i in (0, MAX_BATCH - 1, MAX_BATCH, count - 1):
            found = await reopened.get(f"k{i}")
            assert isinstance(found, StoredObject)
            assert found.tier == "disk"
            assert await body_of(found) == payload(100, seed=i % 200)
    finally:
        await reopened.close()


async def test_a_failed_batch_is_counted_and_the_writer_goes_on(
    disk: DiskTier, cfg: CacheConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit_many = disk.commit_many

    def full_once(objects: list[tuple[str, StoredHead, bytes]]) -> int:
        monkeypatch.setattr(disk, "commit_many", commit_many)
        raise DiskError("database or disk is full")  # (what SQLite reports on a full disk)

    monkeypatch.setattr(disk, "commit_many", full_once)
    writer = DiskWriter(disk, max_pending=10 * KIB)
    assert writer.write_behind("lost", head_for("lost", KIB), payload(KIB))
    await writer.call(lambda: None)
    assert writer.failures == 1
    assert writer.pending == 0
    assert not writer.holds("lost")
    assert writer.write_behind("kept", head_for("kept", KIB), payload(KIB))
    await writer.close()
    assert await on_disk(cfg, "lost") is None
    assert await on_disk(cfg, "kept") == payload(KIB)


async def test_memory_only_stores_have_no_writer(tmp_path: Path) -> None:
    store = await open_store(config(tmp_path, disk_mb=0))
    try:
        assert store.disk_writer is None
        await store.flush()  # nothing to wait for
        assert store.disk_skips == 0
    finally:
        await store.close()


async def test_a_bug_in_a_change_nobody_awaits_leaves_the_writer_running(
    disk: DiskTier, cfg: CacheConfig, caplog: pytest.LogCaptureFixture
) -> None:
    writer = DiskWriter(disk, max_pending=10 * KIB)

    def broken() -> None:
        raise ValueError("a bug")

    with caplog.at_level(logging.ERROR, "harvest_cache.store.writer"):
        writer.later(broken)
        assert writer.write_behind("after", head_for("after", KIB), payload(KIB))
        async with asyncio.timeout(10):
            await writer.call(lambda: None)  # still served
    assert writer.failures == 1
    assert any("a bug" in (r.exc_text or "") for r in caplog.records)
    await writer.close()
    assert await on_disk(cfg, "after") == payload(KIB)
