"""The disk tier's two layouts: small objects and Vary markers as entries in segment files
(rows of Logged say where), larger objects' records and files in diskcache's rows. A key is in
one or the other, whichever its newest object needs; the cull takes the oldest of both;
heads and the membership cover both; objects stored by the former layouts are still read.
Entries are read on the event loop when the page cache holds them, and every read checks
the entry's key and CRC."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import tracemalloc
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

import harvest_cache.store.disk as disk_module
from harvest_cache.config import KIB, MIB
from harvest_cache.store.codec import ObjectRecord, encode
from harvest_cache.store.disk import DiskError, DiskTier
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import FileBody, StoredObject
from harvest_cache.store.segments import CACHESTAT, Location, Segments, pack, unpack
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


def db(directory: Path) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(directory / "objects" / "cache.db"))


def rows(directory: Path, key: str) -> tuple[int, int]:
    """(rows of ``key`` in Logged, its record rows in diskcache's table)."""
    with db(directory) as con:
        small = con.execute("SELECT count(*) FROM Logged WHERE key = ?", (key,)).fetchone()[0]
        large = con.execute("SELECT count(*) FROM Cache WHERE key = ?", ("h:" + key,)).fetchone()
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


async def test_an_object_of_the_first_layout_is_read_and_replaced(tmp_path: Path) -> None:
    """The first layout: a record row naming a body row, both diskcache's."""
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
    """A small object's row holds a copy of its record: the heads (a cache digest is made of
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


def segment_files(directory: Path) -> list[Path]:
    return sorted((directory / "segments").iterdir())


async def test_an_entry_in_the_page_cache_is_read_without_a_thread(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        assert tier.tier is not None
        await tier("commit", "s", head_for("s", KIB), payload(KIB))
        await tier("commit", "l", head_for("l", 100 * KIB), payload(100 * KIB))
        marker = VaryMarker("http://origin.test/m", ("accept",), "g")
        await tier("put_marker", "m", marker)
        # (on the loop's own thread: nothing it does may wait on the device)
        found = tier.tier.read_nowait("s")
        assert isinstance(found, StoredObject)
        assert (found.head, found.body, found.tier) == (head_for("s", KIB), payload(KIB), "disk")
        assert tier.tier.read_nowait("m") == marker
        assert tier.tier.read_nowait("l") is None  # large: read in a thread
        assert tier.tier.read_nowait("absent") is None


async def test_a_batch_written_in_many_calls_is_read_back_entry_by_entry(tmp_path: Path) -> None:
    """A batch over 1 MiB and over 1,024 buffers goes to several writev calls (about 1 MiB
    each); every entry lands where its row says, whatever call it was split across."""
    sizes = [1 + (i * 7919) % (24 * KIB) for i in range(700)]  # 8.4 MiB, 1,400 buffers
    objects = [(f"b{i}", head_for(f"b{i}", n), payload(n, seed=i)) for i, n in enumerate(sizes)]
    async with Tier(tmp_path / "cache", 256 * MIB) as tier:
        assert tier.tier is not None
        await tier("commit_many", objects)
        for key, head, expected in objects:
            found = tier.tier.read_nowait(key)
            assert isinstance(found, StoredObject), key
            assert (found.head, found.body) == (head, expected)
    assert sum(sizes) > 8 * MIB


async def test_a_damaged_entry_is_never_served(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        assert tier.tier is not None
        await tier("commit_many", [("k", head_for("k", 4 * KIB), payload(4 * KIB))])
        (path,) = segment_files(directory)
        data = bytearray(path.read_bytes())
        data[-100] ^= 0x01  # a bit of the body
        path.write_bytes(bytes(data))
        assert tier.tier.read_nowait("k") is None
        with pytest.raises(DiskError, match="damaged"):
            await tier("get", "k", MIB)
        assert not tier.may_hold("k")  # removed
        assert await tier("get", "k", MIB) is None


async def test_an_entry_to_send_is_left_in_the_page_cache_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``send_nowait`` reads an entry whole but hands its body over where it lies (for
    sendfile): in a segment this process wrote, unchecked (it wrote those bytes); in one it
    found at open, checked on its first read, which refuses a damaged entry."""
    directory = tmp_path / "cache"
    objects = [(k, head_for(k, 4 * KIB), payload(4 * KIB, seed=n)) for n, k in enumerate("abc")]
    async with Tier(directory, 256 * MIB) as tier:
        assert tier.tier is not None
        await tier("commit_many", objects)
        for key, head, expected in objects:
            hit = tier.tier.send_nowait(key)
            assert hit is not None
            assert (hit.head, hit.length, bytes(hit.view)) == (head, len(expected), expected)
            assert os.pread(hit.fd, hit.length, hit.offset) == expected
        await tier("put_marker", "m", VaryMarker("http://origin.test/m", ("accept",), "g"))
        assert tier.tier.send_nowait("m") is None  # a marker: not an answer
        assert tier.tier.send_nowait("absent") is None
        assert not tier.tier._checked  # (all written here)
    (path,) = segment_files(directory)
    data = bytearray(path.read_bytes())
    data[data.index(payload(4 * KIB, seed=1)) + 10] ^= 0x01  # a bit of "b"'s body
    path.write_bytes(bytes(data))
    async with Tier(directory, 256 * MIB) as tier:
        assert tier.tier is not None
        first = tier.tier.send_nowait("a")
        assert first is not None
        assert bytes(first.view) == objects[0][2]
        assert tier.tier.send_nowait("b") is None  # damaged: never sent
        assert len(tier.tier._checked) == 1  # "a", read and checked once
        again = tier.tier.send_nowait("a")
        assert again is not None
        assert bytes(again.view) == objects[0][2]
        assert len(tier.tier._checked) == 1
        with pytest.raises(DiskError, match="damaged"):
            await tier("get", "b", MIB)
        monkeypatch.setattr(disk_module, "CHECKED_MAX", 1)
        assert tier.tier.send_nowait("c") is not None
        assert len(tier.tier._checked) == 1  # ("a" forgotten, to be checked again)


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # (dirty pages stay)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


async def test_an_entry_sent_before_is_sent_again_unread_while_it_is_the_keys_and_cached(
    tmp_path: Path,
) -> None:
    """``resend_nowait`` gives the descriptor to send a body from again, without a read,
    while the key's entry is the one sent before, its head not rewritten, and the page cache
    holds the body (cachestat); never for a newer object or head, or pages gone."""
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        disk = tier.tier
        assert disk is not None
        await tier("commit_many", [("a", head_for("a", 8 * KIB), payload(8 * KIB))])
        hit = disk.send_nowait("a")
        assert hit is not None
        if not CACHESTAT:  # (a kernel that cannot tell: every hit is read again)
            assert disk.resend_nowait("a", hit) is None
            return
        assert disk.resend_nowait("a", hit) == hit.fd
        assert disk.resend_nowait("b", hit) is None  # (not the key's)
        (path,) = segment_files(directory)
        drop_from_page_cache(path)
        assert not disk._segments.cached(hit.fd, hit.offset, hit.length)
        assert disk.resend_nowait("a", hit) is None
        assert os.pread(hit.fd, hit.length, hit.offset) == payload(8 * KIB)  # cached again
        assert disk.resend_nowait("a", hit) == hit.fd
        newer = head_for("a", 8 * KIB)._replace(response_time=hit.head.response_time + 60)
        await tier("update_head", "a", newer)
        assert disk.resend_nowait("a", hit) is None  # the entry's record is not the head
        await tier("commit_many", [("a", head_for("a", 9 * KIB), payload(9 * KIB, seed=3))])
        assert disk.resend_nowait("a", hit) is None  # another object
        second = disk.send_nowait("a")
        assert second is not None
        assert bytes(second.view) == payload(9 * KIB, seed=3)
        assert disk.resend_nowait("a", second) == second.fd


async def test_an_entry_is_read_only_for_its_own_key(tmp_path: Path) -> None:
    """Two keys with one hash share a place in the membership: the entry's key tells."""
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        assert tier.tier is not None
        await tier("commit", "a", head_for("a", KIB), payload(KIB, seed=1))
        await tier("commit", "b", head_for("b", KIB), payload(KIB, seed=2))
        logged = tier.tier._logged
        logged[hash("a")] = logged[hash("b")]  # as if "a" and "b" collided
        assert tier.tier.read_nowait("a") is None
        assert body(await tier("get", "a", MIB)) == payload(KIB, seed=1)


async def test_the_cull_drops_whole_segments_oldest_first(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 4 * MIB) as tier:  # segments of 1 MiB
        keys = [f"k{i}" for i in range(400)]  # 8 MiB of 20 KiB bodies
        for start in range(0, len(keys), 20):
            batch = [
                (k, head_for(k, 20 * KIB), payload(20 * KIB)) for k in keys[start : start + 20]
            ]
            await tier("commit_many", batch)
        volume = await tier("volume")
        assert isinstance(volume, int)
        assert volume <= 4 * MIB
        held = [tier.may_hold(key) for key in keys]
        assert not any(held[:150])
        assert all(held[-40:])
        first_held = held.index(True)
        assert all(held[first_held:])  # FIFO: nothing newer than a culled one was culled
        assert 2 <= len(segment_files(directory)) <= 5
        found = [await tier("get", key, MIB) is not None for key in keys]
        assert found == held
    with db(directory) as con:
        segments = {row[0] for row in con.execute("SELECT number FROM Segment")}
        used = {row[0] for row in con.execute("SELECT DISTINCT segment FROM Logged")}
    assert used <= segments
    assert {int(p.name) for p in segment_files(directory)} == segments


async def test_entries_remembered_as_checked_go_with_their_segment(tmp_path: Path) -> None:
    directory = tmp_path / "cache"

    async def fill(tier: Tier, prefix: str, count: int) -> list[str]:
        keys = [f"{prefix}{i}" for i in range(count)]
        for start in range(0, count, 20):
            batch = [
                (k, head_for(k, 20 * KIB), payload(20 * KIB)) for k in keys[start : start + 20]
            ]
            await tier("commit_many", batch)
        return keys

    async with Tier(directory, 4 * MIB) as tier:  # segments of 1 MiB
        old = await fill(tier, "old", 100)  # 2 MiB
    async with Tier(directory, 4 * MIB) as tier:
        assert tier.tier is not None
        assert tier.tier.send_nowait(old[0]) is not None  # an earlier process's: checked
        assert len(tier.tier._checked) == 1
        await fill(tier, "new", 300)  # 6 MiB: the old segments are culled
        assert not tier.may_hold(old[0])
        assert not tier.tier._checked


async def test_a_dropped_segments_rows_are_deleted_a_few_at_a_time_and_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropping a segment deletes its row in Segment at once and its objects' rows later,
    ``TRIM_ROWS`` with each batch: until then no query returns them, and a reopened tier
    goes on deleting them."""
    monkeypatch.setattr(disk_module, "TRIM_ROWS", 7)
    directory = tmp_path / "cache"

    def rows_of_dropped() -> int:
        with db(directory) as con:
            return int(
                con.execute(
                    "SELECT count(*) FROM Logged WHERE segment NOT IN (SELECT number FROM Segment)"
                ).fetchone()[0]
            )

    async def batch(first: int, n: int = 20) -> list[str]:
        keys = [f"k{i}" for i in range(first, first + n)]
        await tier("commit_many", [(k, head_for(k, 20 * KIB), payload(20 * KIB)) for k in keys])
        return keys

    async with Tier(directory, 4 * MIB) as tier:  # segments of 1 MiB, ~50 objects each
        assert tier.tier is not None
        keys = []
        for first in range(0, 300, 20):
            keys += await batch(first)
        dangling = rows_of_dropped()
        assert dangling > 7  # (more than one batch deletes)
        gone = [k for k in keys if not tier.may_hold(k)]
        assert gone
        for key in gone:
            assert await tier("get", key, MIB) is None
        listed = {h.url for h in await tier("heads")}
        assert listed == {head_for(k, 0).url for k in keys if tier.may_hold(k)}
        before = rows_of_dropped()
        await batch(1000)  # (this batch drops another segment too, and deletes 7 rows)
        assert rows_of_dropped() <= before + 60 - 7
    async with Tier(directory, 4 * MIB) as tier:
        assert tier.tier is not None
        assert tier.tier._dangling  # found again at open
        assert not any(tier.may_hold(k) for k in gone)
        left = rows_of_dropped()
        for n in range(2000, 2000 + left // 7 + 30):  # (objects stored one by one: ``commit``)
            await tier("commit", f"k{n}", head_for(f"k{n}", 20 * KIB), payload(20 * KIB))
        assert rows_of_dropped() == 0
        assert not tier.tier._dangling


async def test_segments_and_their_rows_are_matched_at_open(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        await tier("commit", "kept", head_for("kept", KIB), payload(KIB))
    async with Tier(directory, 256 * MIB) as tier:  # a second process's segment
        await tier("commit", "lost", head_for("lost", KIB), payload(KIB))
    _, second = segment_files(directory)
    second.unlink()  # rows without a file
    orphan = directory / "segments" / "99999999"
    orphan.write_bytes(b"a file no row names")
    async with Tier(directory, 256 * MIB) as tier:
        assert not orphan.exists()
        assert tier.may_hold("kept")
        assert not tier.may_hold("lost")
        assert await tier("get", "lost", MIB) is None
        assert body(await tier("get", "kept", MIB)) == payload(KIB)
        await tier("commit", "new", head_for("new", KIB), payload(KIB, seed=5))
        assert body(await tier("get", "new", MIB)) == payload(KIB, seed=5)
    assert rows(directory, "lost") == (0, 0)


async def test_small_objects_of_the_former_layout_are_moved_into_segments(
    tmp_path: Path,
) -> None:
    """The layout before segments kept small objects' bodies in a Small table's rows."""
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB):
        pass
    marker = VaryMarker("http://origin.test/v", ("accept",), "g")
    with db(directory) as con, con:
        con.execute(
            "CREATE TABLE Small (key TEXT PRIMARY KEY, stored REAL NOT NULL,"
            " record BLOB NOT NULL, body BLOB)"
        )
        for i in range(300):
            body_i = payload(100, seed=i)
            record = ObjectRecord(head_for(f"o{i}", 100), "", zlib.crc32(body_i))
            con.execute(
                "INSERT INTO Small VALUES (?, ?, ?, ?)", (f"o{i}", i, encode(record), body_i)
            )
        con.execute("INSERT INTO Small VALUES ('v', 0, ?, NULL)", (encode(marker),))
    async with Tier(directory, 256 * MIB) as tier:
        assert all(tier.may_hold(f"o{i}") for i in range(300))
        assert body(await tier("get", "o7", MIB)) == payload(100, seed=7)
        assert await tier("get", "v", MIB) == marker
    with db(directory) as con:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master")}
    assert "Small" not in tables


def test_a_failed_append_finishes_its_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes of unknown length may be left: nothing is ever appended after them."""
    segments = Segments(tmp_path)
    segments.start(1)
    (first,) = segments.append([pack("a", b"r", b"body")])
    calls = []

    def short_then_fail(fd: int, buffers: list[memoryview]) -> int:
        calls.append(len(buffers))
        if len(calls) == 1:
            return os.write(fd, bytes(buffers[0])[:3])  # a short write, then the rest...
        raise OSError(28, "No space left on device")  # ...fails

    monkeypatch.setattr(os, "writev", short_then_fail)
    with pytest.raises(OSError, match="No space"):
        segments.append([pack("b", b"r", b"body")])
    monkeypatch.undo()
    assert calls == [2, 2]  # (the rest of the head, then the body)
    assert segments.active is None
    assert unpack(segments.read(first), "a") == (b"r", b"body")
    segments.start(2)
    (again,) = segments.append([pack("b", b"r", b"body")])
    assert (again.segment, again.offset) == (2, 0)
    segments.close()


def test_an_append_of_more_buffers_than_one_writev_takes(tmp_path: Path) -> None:
    segments = Segments(tmp_path)
    segments.start(1)
    entries = [pack(f"k{i}", b"record", b"body %d" % i) for i in range(1500)]  # 3,000 buffers
    placed = segments.append(entries)
    assert [unpack(segments.read(where), f"k{i}") for i, where in enumerate(placed)] == [
        (b"record", b"body %d" % i) for i in range(1500)
    ]
    assert placed[-1].offset + placed[-1].length == segments.path(1).stat().st_size
    segments.close()


def open_segment_fds(directory: Path) -> set[str]:
    """The segment files this process holds open, deleted ones included."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(directory / "segments")):
                out.add(target)
    return out


async def test_segments_culled_by_another_process_are_let_go_of(tmp_path: Path) -> None:
    """Processes sharing a tier: one reads the other's segment, the other culls it; the
    reader lets go of its descriptor when it next starts a segment, so the space is freed."""
    directory = tmp_path / "cache"
    async with Tier(directory, 4 * MIB) as reader, Tier(directory, 4 * MIB) as writer:
        await writer("commit", "first", head_for("first", 20 * KIB), payload(20 * KIB))
        (first,) = segment_files(directory)
        assert body(await reader("get", "first", MIB)) == payload(20 * KIB)
        for start in range(0, 400, 20):  # 8 MiB: the first segment is culled
            batch = [
                (f"k{i}", head_for(f"k{i}", 20 * KIB), payload(20 * KIB))
                for i in range(start, start + 20)
            ]
            await writer("commit_many", batch)
        assert await reader("get", "first", MIB) is None
        assert f"{first} (deleted)" in open_segment_fds(directory)  # the reader's
        # The reader's first segment, and a second once that is full: let go of at the
        # first, closed at the second.
        for i in range(60):
            await reader("commit_many", [(f"r{i}", head_for(f"r{i}", 20 * KIB), payload(20 * KIB))])
        assert f"{first} (deleted)" not in open_segment_fds(directory)


async def test_a_revalidated_head_is_rewritten_in_its_row_alone(tmp_path: Path) -> None:
    """A revalidation rewrites a small object's record, not its entry (the body is not
    written again): reads take the row's record, in a thread, until the key is stored
    anew; and so after a restart."""
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        assert tier.tier is not None
        await tier("commit_many", [("k", head_for("k", 16 * KIB), payload(16 * KIB))])
        (segment,) = segment_files(directory)
        size = segment.stat().st_size
        for n in range(50):
            await tier("update_head", "k", head_for("k", 16 * KIB, response_time=5e3 + n))
        assert segment.stat().st_size == size  # nothing appended
        assert tier.tier.read_nowait("k") is None  # (the entry's record is the old one)
        found = await tier("get", "k", MIB)
        assert isinstance(found, StoredObject)
        assert (found.head.response_time, found.body) == (5049.0, payload(16 * KIB))
    async with Tier(directory, 256 * MIB) as tier:
        assert tier.tier is not None
        assert tier.tier.read_nowait("k") is None
        found = await tier("get", "k", MIB)
        assert isinstance(found, StoredObject)
        assert found.head.response_time == 5049.0
        await tier("commit_many", [("k", head_for("k", 10), payload(10))])
        found = tier.tier.read_nowait("k")  # stored anew: its entry is the newest again
        assert isinstance(found, StoredObject)
        assert found.body == payload(10)


async def test_the_first_segment_layouts_rows_are_given_their_new_column(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    async with Tier(directory, 256 * MIB) as tier:
        await tier("commit", "k", head_for("k", KIB), payload(KIB))
    with db(directory) as con, con:
        con.execute("ALTER TABLE Logged DROP COLUMN rewritten")
    async with Tier(directory, 256 * MIB) as tier:
        assert body(await tier("get", "k", MIB)) == payload(KIB)
        await tier("update_head", "k", head_for("k", KIB, response_time=7e3))
        found = await tier("get", "k", MIB)
        assert isinstance(found, StoredObject)
        assert found.head.response_time == 7e3


def test_a_location_is_kept_in_the_membership_as_one_int() -> None:
    for where in (
        Location(0, 0, 0),
        Location(7, 70 * MIB, 17_000),
        Location(10**6, 2**36 - 1, 2**24 - 1),
    ):
        assert disk_module._unpacked(disk_module._packed(where)) == where
    with pytest.raises(DiskError):
        disk_module._packed(Location(1, 0, 2**24))
    with pytest.raises(DiskError):
        disk_module._packed(Location(1, 2**36, 10))
