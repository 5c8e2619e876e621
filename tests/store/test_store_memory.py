"""The memory hot tier: byte-bounded LRU, bypass of large objects, head replacement."""

from __future__ import annotations

from harvest_cache.store.entry import StoredHead, VaryMarker
from harvest_cache.store.interface import StoredObject
from harvest_cache.store.memory import ENTRY_OVERHEAD, MemoryTier, entry_size


def obj(body: bytes, url: str = "http://x/") -> StoredObject:
    head = StoredHead(url, 200, "OK", (("a", "b"),), 1.0, 2.0, len(body))
    return StoredObject(head, body, "memory")


def test_size_accounts_head_and_body() -> None:
    tier = MemoryTier(capacity=10_000, max_object=5_000)
    item = obj(b"x" * 100)
    assert tier.put("k", item)
    assert tier.size == entry_size(item) == ENTRY_OVERHEAD + len("http://x/") + 2 + 2 + 100
    tier.delete("k")
    assert tier.size == 0
    assert len(tier) == 0


def test_least_recently_used_is_evicted_to_stay_within_capacity() -> None:
    item_size = entry_size(obj(b"x" * 1000))
    tier = MemoryTier(capacity=3 * item_size, max_object=2000)
    for key in ("a", "b", "c"):
        assert tier.put(key, obj(b"x" * 1000))
    assert tier.get("a") is not None  # "a" is now the most recently used
    assert tier.put("d", obj(b"x" * 1000))
    assert tier.get("b") is None
    assert [tier.get(k) is not None for k in ("a", "c", "d")] == [True, True, True]
    assert tier.size <= tier.capacity
    assert tier.evictions == 1


def test_many_puts_never_exceed_capacity() -> None:
    tier = MemoryTier(capacity=50_000, max_object=4_000)
    for i in range(500):
        tier.put(f"k{i}", obj(b"y" * (i * 37 % 4000)))
        assert tier.size <= tier.capacity
    held = [tier.get(f"k{i}") for i in range(500)]
    assert tier.size == sum(entry_size(found) for found in held if found is not None)
    assert tier.evictions > 0


def test_objects_over_the_object_limit_bypass_and_drop_the_old_version() -> None:
    tier = MemoryTier(capacity=1_000_000, max_object=1000)
    assert tier.put("k", obj(b"small"))
    assert not tier.put("k", obj(b"z" * 1001))
    assert tier.get("k") is None
    assert tier.size == 0
    assert tier.bypasses == 1


def test_entry_larger_than_the_whole_tier_is_refused() -> None:
    tier = MemoryTier(capacity=ENTRY_OVERHEAD + 50, max_object=1000)
    assert not tier.put("k", obj(b"z" * 500))
    assert len(tier) == 0


def test_capacity_zero_admits_nothing() -> None:
    tier = MemoryTier(capacity=0, max_object=1000)
    assert not tier.admits(0)
    assert not tier.put("k", obj(b""))
    assert not tier.put("m", VaryMarker("http://x/", ("accept",), "g"))
    assert tier.get("k") is None


def test_markers_are_held() -> None:
    tier = MemoryTier(capacity=10_000, max_object=100)
    marker = VaryMarker("http://x/", ("accept",), "g1")
    assert tier.put("k", marker)
    assert tier.get("k") is marker


def test_replace_head_keeps_body_and_its_length() -> None:
    tier = MemoryTier(capacity=10_000, max_object=1000)
    tier.put("k", obj(b"body"))
    new_head = StoredHead("http://x/", 200, "OK", (("etag", '"v2"'),), 5.0, 6.0, 999)
    tier.replace_head("k", new_head)
    found = tier.get("k")
    assert isinstance(found, StoredObject)
    assert found.head.headers == (("etag", '"v2"'),)
    assert found.head.response_time == 6.0
    assert found.head.body_length == 4
    assert found.body == b"body"
    assert tier.size == entry_size(found)


def test_replace_head_leaves_markers_and_absent_keys_alone() -> None:
    tier = MemoryTier(capacity=10_000, max_object=1000)
    marker = VaryMarker("http://x/", ("accept",), "g1")
    tier.put("m", marker)
    head = obj(b"").head
    tier.replace_head("m", head)
    tier.replace_head("absent", head)
    assert tier.get("m") is marker
    assert tier.get("absent") is None
