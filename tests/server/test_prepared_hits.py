"""The hit fast path's prepared entries: the access-log lines they keep ready."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from harvest_cache.http.stored import StoredHead
from harvest_cache.server.accesslog import line_head, line_tail
from harvest_cache.server.prepared.hits import BYTES_PER_ENTRY, MIN_ENTRIES, HotEntry, HotIndex
from harvest_cache.store.interface import StoredObject
from harvest_cache.store.memory import MemoryTier
from harvest_cache.store.tiered import TieredStore

URL = "http://origin.test/page"
NOW = 1_764_535_000.25


@pytest.fixture
def memory() -> MemoryTier:
    return MemoryTier(1 << 20, 1 << 16)


@pytest.fixture
def hot(memory: MemoryTier) -> Iterator[HotIndex]:
    executor = ThreadPoolExecutor(1)
    yield HotIndex(TieredStore(memory, None, executor, 1 << 16).memory_view, "test-cache")
    executor.shutdown()


def entry_in(hot: HotIndex, memory: MemoryTier, status: int = 200) -> HotEntry:
    fields = (("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "max-age=60"))
    obj = StoredObject(StoredHead(URL, status, "OK", fields, NOW, NOW, 4), b"body", "memory")
    assert memory.put(URL, obj)
    hot.add(URL.encode(), URL, obj, 0.0, 60.0, NOW)
    entry = hot.lookup(URL.encode(), NOW)
    assert entry is not None
    return entry


def expected(now: float, client: bytes, status: int, size: int, method: str) -> bytes:
    head = line_head(now, 0, client, b"TCP_MEM_HIT", status, size, False)
    return head + line_tail(method, URL, content_type="text/plain")


@pytest.mark.parametrize("status", [200, 404])
def test_a_hits_line_is_the_general_format(hot: HotIndex, memory: MemoryTier, status: int) -> None:
    entry = entry_in(hot, memory, status)
    cases = [
        (NOW, b"127.0.0.1", 250, False),
        (NOW + 0.001, b"127.0.0.1", 250, False),  # the same but for the time
        (NOW + 1.5, b"127.0.0.1", 251, False),  # one more digit of Age or ttl
        (NOW + 1.5, b"10.1.2.3", 251, False),
        (NOW + 2, b"10.1.2.3", 247, True),
        (NOW + 2, b"10.1.2.3", 251, False),  # as before: from the kept lines
    ]
    for now, client, size, head_only in cases:
        line = hot.log_line(entry, now, client, size, head_only)
        assert line == expected(now, client, status, size, "HEAD" if head_only else "GET")


def test_lines_kept_per_entry_are_bounded(hot: HotIndex, memory: MemoryTier) -> None:
    entry = entry_in(hot, memory)
    for n in range(100):
        client = b"10.0.0.%d" % n
        assert hot.log_line(entry, NOW, client, 250, False) == expected(
            NOW, client, 200, 250, "GET"
        )
        assert len(entry.log_rests) <= 16


def test_a_hits_head_follows_age_ttl_and_connection(hot: HotIndex, memory: MemoryTier) -> None:
    """The head is remade whenever Age, the ttl or the ending changes, and only reused when
    none did (many hits come to a second)."""
    entry = entry_in(hot, memory)
    cases = [
        (NOW, False, False),
        (NOW + 0.5, False, False),
        (NOW + 0.5, True, False),
        (NOW + 0.6, False, True),
        (NOW + 0.7, False, False),
        (NOW + 1.0, False, False),
        (NOW + 1.9, False, False),
        (NOW + 59.9, True, True),
    ]
    for now, close, http10 in cases:
        age, ttl = int(now - NOW), int(NOW + 60 - now)
        if close:
            ending = b"Connection: close\r\n\r\n"
        else:
            ending = b"Connection: keep-alive\r\n\r\n" if http10 else b"\r\n"
        wanted = b"%bAge: %d\r\nCache-Status: test-cache; hit; ttl=%d\r\n%b" % (
            entry.prefix,
            age,
            ttl,
            ending,
        )
        assert hot.head(entry, now, close, http10) == wanted, (now, close, http10)


def test_the_bodies_of_entries_are_bounded_in_bytes(memory: MemoryTier) -> None:
    """Entries whose objects the memory tier dropped would keep their bodies alive: their
    bodies add up to ``max_bytes`` at most, the oldest forgotten first."""
    executor = ThreadPoolExecutor(1)
    view = TieredStore(memory, None, executor, 1 << 16).memory_view
    hot = HotIndex(view, "test-cache", max_bytes=10_000)
    fields = (("Cache-Control", "max-age=60"),)
    try:
        for n in range(10):
            url = f"{URL}/{n}"
            obj = StoredObject(
                StoredHead(url, 200, "OK", fields, NOW, NOW, 3000), b"x" * 3000, "memory"
            )
            assert memory.put(url, obj)
            hot.add(url.encode(), url, obj, 0.0, 60.0, NOW)
            memory.delete(url)  # (dropped by the tier: the entry is not looked up again)
            assert hot.bytes <= 10_000
        assert (len(hot), hot.bytes) == (3, 9000)  # the three made last
        big = StoredObject(
            StoredHead(URL, 200, "OK", fields, NOW, NOW, 20_000), b"y" * 20_000, "memory"
        )
        assert memory.put(URL, big)
        hot.add(URL.encode(), URL, big, 0.0, 60.0, NOW)
        assert hot.lookup(URL.encode(), NOW) is None  # bigger than the bound: not kept
        hot.clear()
        assert (len(hot), hot.bytes) == (0, 0)
    finally:
        executor.shutdown()


def test_entries_are_bounded_in_number_by_the_memory_tiers_size(memory: MemoryTier) -> None:
    """One entry for each ``BYTES_PER_ENTRY`` of the bound on bodies (at least
    ``MIN_ENTRIES``), unless told; the oldest made is forgotten first."""
    executor = ThreadPoolExecutor(1)
    view = TieredStore(memory, None, executor, 1 << 16).memory_view
    try:
        assert HotIndex(view, "c", max_bytes=512 << 20).max_entries == 32_768
        assert HotIndex(view, "c", max_bytes=1 << 20).max_entries == MIN_ENTRIES
        assert BYTES_PER_ENTRY * 32_768 == 512 << 20
        hot = HotIndex(view, "test-cache", max_entries=3)
        fields = (("Cache-Control", "max-age=60"),)
        for n in range(5):
            url = f"{URL}/{n}"
            obj = StoredObject(StoredHead(url, 200, "OK", fields, NOW, NOW, 1), b"x", "memory")
            assert memory.put(url, obj)
            assert hot.add(url.encode(), url, obj, 0.0, 60.0, NOW) is not None
        kept = [n for n in range(5) if hot.lookup(f"{URL}/{n}".encode(), NOW) is not None]
        assert kept == [2, 3, 4]
    finally:
        executor.shutdown()


def test_a_head_requests_line_is_made_on_the_first(hot: HotIndex, memory: MemoryTier) -> None:
    entry = entry_in(hot, memory)
    assert entry.head_tail == b""
    line = hot.log_line(entry, NOW, b"127.0.0.1", 120, True)
    assert line == expected(NOW, b"127.0.0.1", 200, 120, "HEAD")
    assert entry.head_tail == line_tail("HEAD", URL, content_type="text/plain")


def test_a_sweep_forgets_entries_whose_objects_the_memory_tier_dropped(
    hot: HotIndex, memory: MemoryTier
) -> None:
    fields = (("Cache-Control", "max-age=60"),)
    objects = {}
    for n in range(10):
        url = f"{URL}/{n}"
        objects[url] = StoredObject(
            StoredHead(url, 200, "OK", fields, NOW, NOW, 4), b"body", "memory"
        )
        assert memory.put(url, objects[url])
        assert hot.add(url.encode(), url, objects[url], 0.0, 60.0, NOW) is not None
    for n in range(0, 10, 2):  # dropped, or replaced by a new object
        memory.delete(f"{URL}/{n}")
    replaced = f"{URL}/1"
    assert memory.put(replaced, objects[replaced]._replace(body=b"new!"))
    order = list(memory._entries)
    assert hot.sweep() == 6
    assert (len(hot), hot.bytes) == (4, 16)
    assert list(memory._entries) == order  # (peeked at, not used)
    assert all(hot.lookup(f"{URL}/{n}".encode(), NOW) is not None for n in (3, 5, 7, 9))
    assert hot.sweep() == 0
