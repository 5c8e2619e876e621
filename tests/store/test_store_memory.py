"""The memory hot tier: byte-bounded LRU, bypass of large objects, head replacement."""

from __future__ import annotations

import gc
import tracemalloc

from harvest_cache.http.stored import StoredHead
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.fields import shared_fields
from harvest_cache.store.interface import StoredObject
from harvest_cache.store.memory import ENTRY_OVERHEAD, FIELD_OVERHEAD, MemoryTier, entry_size


def obj(body: bytes, url: str = "http://x/") -> StoredObject:
    head = StoredHead(url, 200, "OK", (("a", "b"),), 1.0, 2.0, len(body))
    return StoredObject(head, body, "memory")


def test_size_accounts_head_and_body() -> None:
    tier = MemoryTier(capacity=10_000, max_object=5_000)
    item = obj(b"x" * 100)
    assert tier.put("k", item)
    expected = ENTRY_OVERHEAD + len("http://x/") + 2 + FIELD_OVERHEAD + 2 + 100
    assert tier.size == entry_size(item) == expected
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


def test_peeking_is_not_a_use() -> None:
    item_size = entry_size(obj(b"x" * 1000))
    tier = MemoryTier(capacity=3 * item_size, max_object=2000)
    held = {key: obj(b"x" * 1000) for key in ("a", "b", "c")}
    for key, item in held.items():
        assert tier.put(key, item)
    assert tier.peek("a") is held["a"]
    assert tier.peek("zz") is None
    assert tier.put("d", obj(b"x" * 1000))
    assert tier.peek("a") is None  # still the least recently used: evicted
    assert [tier.peek(k) is held[k] for k in ("b", "c")] == [True, True]


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


def _traced_entry_bytes(tier: MemoryTier, count: int, share: bool) -> tuple[float, float]:
    """Bytes of Python objects per entry (measured) and charged by the tier, for heads
    like those an origin sends with 1 KiB objects."""
    raw = [
        (b"Server", b"nginx/1.22.1"),
        (b"Date", b"Mon, 30 Nov 2026 09:27:34 GMT"),
        (b"Content-Type", b"text/plain"),
        (b"Content-Length", b"1024"),
        (b"Last-Modified", b"Mon, 30 Nov 2026 09:00:00 GMT"),
        (b"ETag", b'"6565e0a0-400"'),
        (b"Cache-Control", b"max-age=3600"),
        (b"Accept-Ranges", b"bytes"),
    ]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            url = f"http://127.0.0.1:8080/miss/run-1-{i}"
            lines = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in raw]
            fields = shared_fields(lines) if share else tuple(lines)
            head = StoredHead(url, 200, b"OK".decode(), fields, 1.0, 1.0, 1024)
            assert tier.put(url, StoredObject(head, bytes(bytearray(1024)), "memory"))
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return used / count, tier.size / count


def test_the_tier_charges_at_least_what_its_entries_really_take() -> None:
    # The tier's capacity bounds the process's memory only if every entry is charged its
    # real cost, object overhead included.
    real, charged = _traced_entry_bytes(MemoryTier(1 << 40, 1 << 20), 5000, share=False)
    assert real <= charged <= 1.25 * real


def test_shared_field_lines_make_entries_smaller() -> None:
    plain, _ = _traced_entry_bytes(MemoryTier(1 << 40, 1 << 20), 5000, share=False)
    shared, _ = _traced_entry_bytes(MemoryTier(1 << 40, 1 << 20), 5000, share=True)
    assert shared < plain - 600


def test_shared_fields_keep_order_and_values() -> None:
    lines = [("Content-Type", "text/html"), ("ETag", '"a"'), ("content-type", "text/plain")]
    first = shared_fields(lines)
    again = shared_fields([(n + "", v + "") for n, v in lines])
    assert first == again == tuple(lines)
    assert again[0] is first[0]  # a repeating line: one tuple for both
    assert again[1] is not first[1]  # a line that differs per object ...
    assert again[1][0] is first[1][0]  # ... shares its name alone
