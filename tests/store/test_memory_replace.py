"""``MemoryTier.replace_head`` in place: size accounting, LRU order, and the bypass when the
new head no longer fits (revalidated objects are refreshed this way again and again)."""

from __future__ import annotations

from harvest_cache.http.stored import StoredHead
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import StoredObject
from harvest_cache.store.memory import FIELD_OVERHEAD, MemoryTier, entry_size, head_size


def head(url: str, body_length: int, *fields: tuple[str, str]) -> StoredHead:
    return StoredHead(url, 200, "OK", (("etag", '"1"'), *fields), 1.0, 2.0, body_length)


def obj(body: bytes, url: str = "http://x/", *fields: tuple[str, str]) -> StoredObject:
    return StoredObject(head(url, len(body), *fields), body, "memory")


def accounted(tier: MemoryTier, keys: list[str]) -> int:
    """What the tier's size must be: the sizes of the entries it holds."""
    total = 0
    for key in keys:
        found = tier.get(key)
        if found is not None:
            total += entry_size(found)
    return total


def held(tier: MemoryTier, key: str) -> StoredObject:
    found = tier.get(key)
    assert isinstance(found, StoredObject)
    return found


def test_size_follows_a_larger_and_a_smaller_head() -> None:
    tier = MemoryTier(capacity=100_000, max_object=10_000)
    tier.put("a", obj(b"a" * 100, "http://a/"))
    tier.put("b", obj(b"b" * 200, "http://b/"))
    before = tier.size
    bigger = head("http://a/", 100, ("x-long", "v" * 500))
    tier.replace_head("a", bigger)
    assert tier.size == before + FIELD_OVERHEAD + 500 + len("x-long")
    assert tier.size == accounted(tier, ["a", "b"])
    smaller = head("http://a/", 100)
    tier.replace_head("a", smaller)
    assert tier.size == before
    assert tier.size == accounted(tier, ["a", "b"])
    # Many replacements leave no drift.
    for i in range(200):
        tier.replace_head("a", head("http://a/", 100, ("n", "x" * (i % 17))))
    assert tier.size == accounted(tier, ["a", "b"])
    assert len(tier) == 2
    tier.delete("a")
    tier.delete("b")
    assert tier.size == 0


def test_replaced_object_keeps_its_body_and_tier() -> None:
    tier = MemoryTier(capacity=100_000, max_object=10_000)
    body = b"the body"
    tier.put("k", obj(body))
    new = StoredHead("http://x/", 200, "OK", (("etag", '"2"'),), 7.0, 8.0, 12345)
    tier.replace_head("k", new)
    found = held(tier, "k")
    assert found.body is body
    assert found.tier == "memory"
    assert found.head.headers == (("etag", '"2"'),)
    assert (found.head.request_time, found.head.response_time) == (7.0, 8.0)
    assert found.head.body_length == len(body)  # the body's, whatever the new head said
    assert tier.size == head_size(found.head) + len(body)


def test_replaced_object_is_a_new_object() -> None:
    """The refresh plans hold the memory tier's object by identity: a replacement must give
    a new one (and the same one on every lookup after)."""
    tier = MemoryTier(capacity=100_000, max_object=10_000)
    tier.put("k", obj(b"x"))
    first = held(tier, "k")
    tier.replace_head("k", head("http://x/", 1, ("date", "d2")))
    second = held(tier, "k")
    assert second is not first
    assert held(tier, "k") is second


def test_replaced_entry_becomes_the_most_recently_used() -> None:
    item = obj(b"x" * 1000)
    size = entry_size(item)
    tier = MemoryTier(capacity=3 * size, max_object=2000)
    for key in ("a", "b", "c"):
        assert tier.put(key, obj(b"x" * 1000))
    # "a" is the least recently used; its refresh (same size) makes it the most recent.
    tier.replace_head("a", head("http://x/", 1000))
    assert tier.size == 3 * size
    assert tier.put("d", obj(b"x" * 1000))
    assert tier.evictions == 1
    assert [key for key in "abcd" if tier._entries.get(key) is not None] == ["a", "c", "d"]
    assert list(tier._entries) == ["c", "a", "d"]


def test_growing_head_evicts_others_but_not_itself() -> None:
    item = obj(b"x" * 1000)
    size = entry_size(item)
    tier = MemoryTier(capacity=3 * size + 10, max_object=2000)
    for key in ("a", "b", "c"):
        assert tier.put(key, obj(b"x" * 1000))
    tier.replace_head("b", head("http://x/", 1000, ("x-grow", "g" * 50)))
    assert tier.size <= tier.capacity
    assert tier.evictions == 1
    assert list(tier._entries) == ["c", "b"]  # "a", the least recently used, went
    assert tier.size == accounted(tier, ["b", "c"])
    assert held(tier, "b").head.headers[-1] == ("x-grow", "g" * 50)


def test_head_too_large_for_the_tier_bypasses_and_drops_the_object() -> None:
    item = obj(b"x" * 100)
    tier = MemoryTier(capacity=entry_size(item) + FIELD_OVERHEAD + 20, max_object=1000)
    assert tier.put("other", obj(b""))  # (does not fit with "k": evicted by the put below)
    assert tier.put("k", item)
    assert tier.get("other") is None
    bypasses = tier.bypasses
    # A head exactly at the capacity still fits ...
    fits = head("http://x/", 100, ("p", "q" * 19))
    assert head_size(fits) + 100 == tier.capacity
    tier.replace_head("k", fits)
    assert held(tier, "k").head == fits
    assert tier.size == tier.capacity
    assert tier.bypasses == bypasses
    # ... one byte more does not: the object is dropped and the bypass counted.
    tier.replace_head("k", head("http://x/", 100, ("p", "q" * 20)))
    assert tier.get("k") is None
    assert tier.bypasses == bypasses + 1
    assert tier.size == 0
    assert len(tier) == 0


def test_markers_and_absent_keys_change_nothing() -> None:
    tier = MemoryTier(capacity=100_000, max_object=10_000)
    marker = VaryMarker("http://x/", ("accept",), "g1")
    tier.put("m", marker)
    tier.put("k", obj(b"body"))
    size, order = tier.size, list(tier._entries)
    tier.replace_head("m", head("http://x/", 4, ("x", "y" * 100)))
    tier.replace_head("absent", head("http://x/", 4))
    assert tier.get("absent") is None
    assert list(tier._entries) == order
    assert tier.size == size
    assert tier.get("m") is marker
    assert tier.bypasses == 0


def test_turned_off_tier_stays_empty() -> None:
    tier = MemoryTier(capacity=0, max_object=1000)
    tier.replace_head("k", head("http://x/", 1))
    assert len(tier) == 0
    assert tier.size == 0
