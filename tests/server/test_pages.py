"""Page copies of hot bodies: what they hold, when they are made, and that they are freed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from harvest_cache.http.stored import StoredHead
from harvest_cache.server.pages import MAX_BYTES, MIN_BYTES, BodyPages
from harvest_cache.server.prepared.hits import HotIndex
from harvest_cache.store.interface import StoredObject
from harvest_cache.store.memory import MemoryTier
from harvest_cache.store.tiered import TieredStore

URL = "http://origin.test/big"
NOW = 1_764_535_000.0


def file_of(fd: int) -> tuple[int, int] | None:
    """The (device, inode) that ``fd`` refers to, None if it is closed. Another thread (an
    earlier test's) may get the same number for another file once it is closed."""
    try:
        stat = os.fstat(fd)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def test_a_copy_holds_the_body_and_is_freed_with_its_last_reference() -> None:
    pages = BodyPages(4 * MAX_BYTES)
    body = os.urandom(100_000)
    copy = pages.copy(body)
    assert copy is not None
    fd = copy.fd
    held = file_of(fd)
    assert held is not None
    assert (copy.size, pages.held) == (len(body), len(body))
    assert os.pread(fd, len(body) + 1, 0) == body
    del copy
    assert pages.held == 0
    assert file_of(fd) != held


@pytest.mark.parametrize(
    ("size", "copied"),
    [(MIN_BYTES - 1, False), (MIN_BYTES, True), (MAX_BYTES, True), (MAX_BYTES + 1, False)],
)
def test_only_bodies_of_the_sizes_worth_it_are_copied(size: int, copied: bool) -> None:
    pages = BodyPages(4 * MAX_BYTES)
    copy = pages.copy(b"x" * size)
    assert (copy is not None) is copied
    assert pages.held == (size if copied else 0)


def test_copies_stay_within_the_budget_and_a_freed_one_makes_room() -> None:
    pages = BodyPages(2 * MIN_BYTES)
    first, second = pages.copy(b"a" * MIN_BYTES), pages.copy(b"b" * MIN_BYTES)
    assert first is not None
    assert second is not None
    assert pages.copy(b"c" * MIN_BYTES) is None
    assert pages.held == 2 * MIN_BYTES
    del first
    third = pages.copy(b"c" * MIN_BYTES)
    assert third is not None
    assert os.pread(third.fd, 4, 0) == b"cccc"
    assert pages.held == 2 * MIN_BYTES


def test_copies_stay_within_their_number_of_files() -> None:
    pages = BodyPages(4 * MAX_BYTES, max_files=2)
    copies = [pages.copy(b"x" * MIN_BYTES) for _ in range(3)]
    assert [c is not None for c in copies] == [True, True, False]
    assert (pages.files, pages.held) == (2, 2 * MIN_BYTES)
    copies.clear()
    assert (pages.files, pages.held) == (0, 0)
    assert pages.copy(b"y" * MIN_BYTES) is not None


def test_without_a_memory_file_there_is_no_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str, flags: int = 0) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "memfd_create", refuse)
    pages = BodyPages(4 * MAX_BYTES)
    assert pages.copy(b"x" * MIN_BYTES) is None
    assert pages.held == 0


@pytest.fixture
def memory() -> MemoryTier:
    return MemoryTier(16 << 20, 4 << 20)


@pytest.fixture
def store(memory: MemoryTier) -> Iterator[TieredStore]:
    executor = ThreadPoolExecutor(1)
    yield TieredStore(memory, None, executor, 1 << 16)
    executor.shutdown()


def stored(body: bytes) -> StoredObject:
    fields = (("Content-Type", "application/octet-stream"), ("Cache-Control", "max-age=60"))
    head = StoredHead(URL, 200, "OK", fields, NOW, NOW, len(body))
    return StoredObject(head, body, "memory")


def test_hot_entries_carry_copies_that_go_with_them(memory: MemoryTier, store: TieredStore) -> None:
    pages = BodyPages(4 * MAX_BYTES)
    hot = HotIndex(store.memory_view, "test-cache", pages=pages)
    first = stored(os.urandom(200_000))
    assert memory.put(URL, first)
    hot.add(URL.encode(), URL, first, 0.0, 60.0, NOW)
    entry = hot.lookup(URL.encode(), NOW)
    assert entry is not None
    assert entry.pages is not None
    first_fd = entry.pages.fd
    first_file = file_of(first_fd)
    assert first_file is not None
    assert os.pread(first_fd, 200_001, 0) == first.body
    del entry

    # Replaced: the new entry has its own copy, the old one is gone.
    second = stored(os.urandom(150_000))
    assert memory.put(URL, second)
    hot.add(URL.encode(), URL, second, 0.0, 60.0, NOW)
    assert pages.held == 150_000
    assert file_of(first_fd) != first_file

    # The memory tier lets the object go: the next lookup retires the entry and its copy.
    memory.delete(URL)
    assert hot.lookup(URL.encode(), NOW) is None
    assert pages.held == 0


def test_small_bodies_get_no_copy(memory: MemoryTier, store: TieredStore) -> None:
    pages = BodyPages(4 * MAX_BYTES)
    hot = HotIndex(store.memory_view, "test-cache", pages=pages)
    obj = stored(b"small body")
    assert memory.put(URL, obj)
    hot.add(URL.encode(), URL, obj, 0.0, 60.0, NOW)
    entry = hot.lookup(URL.encode(), NOW)
    assert entry is not None
    assert entry.pages is None
    assert pages.held == 0
