"""The disk tier's membership (which keys it may hold, known without I/O) and what the memory
view does with it: every change and every cull kept in it, read again at open; a miss for a
key it does not hold reads nothing; small objects put at once are written behind, bodies the
tier keeps in files are refused; a skipped object takes its older disk copy with it; heads
refreshed are written behind; a store shared with other processes writes nothing behind."""

from __future__ import annotations

import pytest

from harvest_cache.config import KIB, MIB, CacheConfig
from harvest_cache.store.disk import DiskTier
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import StoredObject
from harvest_cache.store.tiered import TieredStore, open_store
from tests.store.test_store_segments import Tier
from tests.store.test_store_tiered import body_of, head_for, payload, put
from tests.store.test_store_writer import Held, on_disk, writer_of


async def test_every_change_is_kept_in_the_membership_and_read_again_at_open(
    cfg: CacheConfig,
) -> None:
    async with Tier(cfg.dir, 64 * MIB) as tier:
        await tier("commit", "a", head_for("a", KIB), payload(KIB))
        await tier("commit", "big", head_for("big", 100 * KIB), payload(100 * KIB))
        await tier("commit_many", [("b", head_for("b", 10), payload(10))])
        await tier("put_marker", "m", VaryMarker("http://origin.test/m", ("accept",), "g"))
        assert [tier.may_hold(k) for k in ("a", "big", "b", "m", "x")] == [True] * 4 + [False]
        await tier("delete", "a")
        assert not tier.may_hold("a")
    async with Tier(cfg.dir, 64 * MIB) as again:
        held = [again.may_hold(k) for k in ("a", "big", "b", "m", "x")]
        assert held == [False, True, True, True, False]


async def test_keys_culled_to_keep_the_bound_leave_the_membership(cfg: CacheConfig) -> None:
    keys = [f"k{i}" for i in range(64)]
    async with Tier(cfg.dir, 2 * MIB) as tier:
        for key in keys:  # 64 bodies of 64 KiB in files: four times the bound
            await tier("commit", key, head_for(key, 64 * KIB), payload(64 * KIB))
        found = [await tier("get", key, MIB) is not None for key in keys]
        held = [tier.may_hold(key) for key in keys]
    assert sum(found) < 40  # (culled: the oldest first)
    assert not any(found[:10])
    # No key the tier holds is missing from the membership; those culled are gone from it.
    assert all(h for f, h in zip(found, held, strict=True) if f)
    assert sum(held) <= sum(found) + 1  # (at most one head whose body went first)
    assert not any(held[:10])


async def test_a_miss_for_a_key_the_tier_does_not_hold_reads_nothing(
    store: TieredStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    read, read_nowait = DiskTier.get, DiskTier.read_nowait

    def counted(tier: DiskTier, key: str, limit: int) -> object:
        reads.append(key)
        return read(tier, key, limit)

    def counted_nowait(tier: DiskTier, key: str) -> object:
        reads.append(key)
        return read_nowait(tier, key)

    monkeypatch.setattr(DiskTier, "get", counted)
    monkeypatch.setattr(DiskTier, "read_nowait", counted_nowait)
    assert await store.get("absent") is None
    assert reads == []
    await put(store, "there", payload(KIB))
    await store.flush()
    store.memory.delete("there")
    assert not store.memory_view.on_disk("absent")
    assert store.memory_view.on_disk("there")
    assert await body_of(await store.get("there")) == payload(KIB)
    assert reads == ["there"]


async def test_a_put_with_a_disk_tier_is_written_behind(
    store: TieredStore, cfg: CacheConfig
) -> None:
    view = store.memory_view
    async with Held(writer_of(store)):
        assert view.put("k", head_for("k", KIB), payload(KIB))
        assert view.on_disk("k")  # (queued for it: a memory miss meanwhile looks there)
        assert await body_of(view.get("k")) == payload(KIB)
    await store.close()
    assert await on_disk(cfg, "k") == payload(KIB)


async def test_a_put_refuses_a_body_the_tier_keeps_in_a_file(store: TieredStore) -> None:
    view = store.memory_view
    assert view.put_limit == 32 * KIB - 1  # (diskcache's smallest body kept in a file)
    big = payload(32 * KIB)
    assert not view.put("k", head_for("k", len(big)), big)
    assert view.get("k") is None
    assert not view.on_disk("k")


async def test_an_object_not_written_behind_takes_its_older_disk_copy_with_it(
    store: TieredStore, cfg: CacheConfig
) -> None:
    await put(store, "k", payload(KIB, seed=1))
    await store.flush()  # version 1 is on disk
    writer = writer_of(store)
    async with Held(writer):
        writer.max_pending = 0  # (the queue is full: nothing more is written behind)
        assert store.memory_view.put("k", head_for("k", 2 * KIB), payload(2 * KIB, seed=2))
        assert store.disk_skips == 1
    await store.flush()
    assert await body_of(store.memory_view.get("k")) == payload(2 * KIB, seed=2)
    await store.close()
    assert await on_disk(cfg, "k") is None  # not version 1


async def test_a_refreshed_head_is_written_behind(store: TieredStore, cfg: CacheConfig) -> None:
    await put(store, "k", payload(KIB))
    await store.flush()
    fresh = head_for("k", KIB, response_time=5000.0)
    async with Held(writer_of(store)):
        assert store.memory_view.refresh_head("k", fresh) is None  # nothing to await
    await store.close()
    reopened = await open_store(cfg)
    try:
        found = await reopened.get("k")
        assert isinstance(found, StoredObject)
        assert (found.tier, found.head.response_time) == ("disk", 5000.0)
    finally:
        await reopened.close()


class Others:
    def changed(self, key: str) -> None:
        pass

    async def deleted(self, key: str) -> None:
        pass


async def test_a_store_shared_with_other_processes_writes_nothing_behind(
    store: TieredStore,
) -> None:
    store.sharers = Others()
    view = store.memory_view
    assert view.put_limit == -1
    assert not view.put("k", head_for("k", 10), payload(10))
    assert view.get("k") is None
    assert view.on_disk("never-stored")  # (the others' changes are not in the membership)
    write = view.refresh_head("k", head_for("k", 10))
    assert write is not None  # (written through, then told)
    await write
