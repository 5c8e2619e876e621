"""The tiered store over a real diskcache directory: round trips, promotion, updates, deletes,
markers, refusals, persistence, eviction, damage handling and never blocking the loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import shutil
import sqlite3
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from harvest_cache.config import KIB, MIB, CacheConfig
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.disk import DiskError
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import FileBody, Found, StoredObject
from harvest_cache.store.tiered import SPILL_BATCH, TieredStore, open_store

CHUNK = 64 * KIB


def config(tmp_path: Path, **overrides: Any) -> CacheConfig:
    settings: dict[str, Any] = {
        "dir": tmp_path / "cache",
        "memory_mb": 4,
        "memory_max_object_kb": 64,
        "disk_mb": 256,
        "max_object_mb": 64,
    }
    return CacheConfig(**(settings | overrides))


def head_for(key: str, length: int, **fields: Any) -> StoredHead:
    head = StoredHead(
        url=f"http://origin.test/{key}",
        status=200,
        reason="OK",
        headers=(("content-type", "application/octet-stream"), ("x-key", key)),
        request_time=1000.0,
        response_time=1001.0,
        body_length=length,
    )
    return head._replace(**fields)


def payload(n: int, seed: int = 0) -> bytes:
    """n bytes whose content depends on the position and the seed (so mix-ups show)."""
    block = bytes((i * 7 + seed) % 251 for i in range(251 * 16))
    return (block * (n // len(block) + 1))[:n]


async def put(store: TieredStore, key: str, body: bytes, chunk: int = CHUNK) -> None:
    writer = store.open_writer(key, len(body))
    assert writer is not None
    for i in range(0, len(body), chunk):
        await writer.write(body[i : i + chunk])
    await writer.commit(head_for(key, len(body)))


def read_file_body(body: FileBody) -> bytes:
    """Read a FileBody in 1 MiB chunks, as a driver would, and close it."""
    parts = []
    with body.file as f:
        f.seek(body.offset)
        left = body.length
        while left:
            chunk = f.read(min(MIB, left))
            assert chunk, "file body ended early"
            parts.append(chunk)
            left -= len(chunk)
    return b"".join(parts)


async def body_of(found: Found | None) -> bytes:
    assert isinstance(found, StoredObject)
    if isinstance(found.body, bytes):
        return found.body
    return await asyncio.to_thread(read_file_body, found.body)


def body_files(cfg: CacheConfig) -> dict[Path, int]:
    """Each body file in the disk tier with its inode."""
    return {p: p.stat().st_ino for p in (cfg.dir / "objects").rglob("*.val")}


def spools(cfg: CacheConfig) -> list[Path]:
    """Spool files left anywhere under tmp/ (each process spools in a directory of its own)."""
    return [p for p in (cfg.dir / "tmp").rglob("*") if p.is_file()]


# -- round trips -----------------------------------------------------------------------------


async def test_small_object_is_written_through_and_promoted_after_reopen(
    cfg: CacheConfig,
) -> None:
    body = payload(40 * KIB)
    store = await open_store(cfg)
    await put(store, "small", body)
    found = store.memory_view.get("small")
    assert isinstance(found, StoredObject)
    assert (found.tier, found.body, found.head) == ("memory", body, head_for("small", len(body)))
    await store.close()

    store = await open_store(cfg)
    assert store.memory_view.get("small") is None
    found = await store.get("small")
    assert isinstance(found, StoredObject)
    assert (found.tier, found.body, found.head) == ("disk", body, head_for("small", len(body)))
    promoted = store.memory_view.get("small")
    assert isinstance(promoted, StoredObject)
    assert (promoted.tier, promoted.body) == ("memory", body)
    await store.close()


async def test_a_full_memory_tier_takes_an_object_read_from_disk_on_its_second_read(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path, memory_mb=1)
    store = await open_store(cfg)
    bodies = {f"o{i}": payload(16 * KIB, seed=i) for i in range(128)}  # 2 MiB: twice memory
    for key, body in bodies.items():
        await put(store, key, body)
    await store.flush()
    first = next(k for k in bodies if store.memory_view.peek(k) is None)
    found = await store.get(first)
    assert isinstance(found, StoredObject)
    assert (found.tier, found.body) == ("disk", bodies[first])
    assert store.memory_view.peek(first) is None  # (read once: left on disk)
    assert (store.promotions, store.kept_on_disk) == (0, 1)
    found = await store.get(first)
    assert isinstance(found, StoredObject)
    assert found.body == bodies[first]
    promoted = store.memory_view.peek(first)
    assert isinstance(promoted, StoredObject)
    assert promoted.tier == "memory"
    assert (store.promotions, store.kept_on_disk) == (1, 1)
    assert store.memory.size <= store.memory.capacity
    await store.close()


async def test_20_mib_body_round_trips_through_a_file_body(
    store: TieredStore, cfg: CacheConfig
) -> None:
    body = os.urandom(20 * MIB)
    await put(store, "big", body)
    assert store.memory_view.get("big") is None
    found = await store.get("big")
    assert isinstance(found, StoredObject)
    assert found.tier == "disk"
    assert found.head == head_for("big", len(body))
    assert isinstance(found.body, FileBody)
    assert (found.body.offset, found.body.length) == (0, len(body))
    assert await body_of(found) == body
    assert store.memory_view.get("big") is None  # too big to promote
    assert len(body_files(cfg)) == 1
    assert spools(cfg) == []


async def test_body_between_memory_limit_and_spill_batch_is_stored_on_disk(
    store: TieredStore,
) -> None:
    body = payload(SPILL_BATCH // 2)  # over the 64 KiB memory limit, never spilled
    await put(store, "mid", body, chunk=4 * KIB)
    assert store.memory_view.get("mid") is None
    assert await body_of(await store.get("mid")) == body


async def test_empty_and_tiny_bodies(store: TieredStore, cfg: CacheConfig) -> None:
    await put(store, "empty", b"")
    await put(store, "tiny", b"abc")
    await store.close()
    store = await open_store(cfg)
    assert await body_of(await store.get("empty")) == b""
    assert await body_of(await store.get("tiny")) == b"abc"
    await store.close()


async def test_new_version_replaces_old_in_both_tiers(store: TieredStore, cfg: CacheConfig) -> None:
    await put(store, "k", payload(1000, seed=1))
    await put(store, "k", payload(3 * MIB, seed=2))
    assert store.memory_view.get("k") is None  # the small old version left memory
    assert await body_of(await store.get("k")) == payload(3 * MIB, seed=2)
    await put(store, "k", payload(2000, seed=3))
    assert await body_of(store.memory_view.get("k")) == payload(2000, seed=3)
    await store.flush()  # (the small version is written behind)
    assert body_files(cfg) == {}  # the big version's file was removed


# -- heads, deletes, markers -----------------------------------------------------------------


async def test_update_head_rewrites_only_the_head(store: TieredStore, cfg: CacheConfig) -> None:
    body = payload(20 * MIB)
    await put(store, "big", body)
    await put(store, "small", b"tiny body")
    files = body_files(cfg)
    new_head = head_for("big", 0, headers=(("etag", '"v2"'),), response_time=2000.0)
    await store.update_head("big", new_head)
    await store.update_head("small", new_head._replace(url="http://origin.test/small"))
    assert body_files(cfg) == files  # same file, same inode: the body was not rewritten

    await store.close()
    store = await open_store(cfg)
    for key, length in (("big", len(body)), ("small", 9)):
        found = await store.get(key)
        assert isinstance(found, StoredObject)
        assert found.head.headers == (("etag", '"v2"'),)
        assert found.head.response_time == 2000.0
        assert found.head.body_length == length  # the stored body's length is kept
        assert len(await body_of(found)) == length
    await store.close()


async def test_update_head_of_absent_key_or_marker_does_nothing(store: TieredStore) -> None:
    marker = VaryMarker("http://origin.test/v", ("accept",), "g1")
    await store.put_marker("m", marker)
    await store.update_head("m", head_for("m", 0))
    await store.update_head("absent", head_for("absent", 0))
    assert await store.get("absent") is None
    assert store.memory_view.get("m") == marker
    store.memory.delete("m")
    assert await store.get("m") == marker


async def test_delete_removes_from_both_tiers(store: TieredStore, cfg: CacheConfig) -> None:
    await put(store, "small", b"x" * 100)
    await put(store, "big", payload(2 * MIB))
    await store.delete("small")
    await store.delete("big")
    await store.delete("never-stored")
    assert store.memory_view.get("small") is None
    assert await store.get("small") is None
    assert await store.get("big") is None
    assert body_files(cfg) == {}
    await store.close()
    store = await open_store(cfg)
    assert await store.get("small") is None
    await store.close()


async def test_marker_is_stored_in_both_tiers_and_replaces_an_object(
    store: TieredStore, cfg: CacheConfig
) -> None:
    await put(store, "k", payload(2 * MIB))
    marker = VaryMarker("http://origin.test/k", ("accept-encoding", "accept"), "gen-2")
    await store.put_marker("k", marker)
    assert store.memory_view.get("k") == marker
    assert body_files(cfg) == {}
    await store.close()
    store = await open_store(cfg)
    assert await store.get("k") == marker
    assert store.memory_view.get("k") == marker  # promoted
    await store.close()


# -- writers: abort, refusals ----------------------------------------------------------------


async def test_abort_leaves_nothing_and_keeps_the_old_version(
    store: TieredStore, cfg: CacheConfig
) -> None:
    old = payload(2 * MIB, seed=1)
    await put(store, "k", old)
    files = body_files(cfg)
    writer = store.open_writer("k", None)
    assert writer is not None
    for _ in range(5 * SPILL_BATCH // CHUNK):
        await writer.write(b"n" * CHUNK)
    assert len(spools(cfg)) == 1  # it spilled
    await writer.abort()
    await writer.abort()  # harmless twice
    assert spools(cfg) == []
    assert body_files(cfg) == files
    assert await body_of(await store.get("k")) == old
    with pytest.raises(RuntimeError):
        await writer.write(b"more")


async def test_object_over_the_limit_is_refused_up_front(store: TieredStore) -> None:
    assert store.open_writer("k", 64 * MIB + 1) is None
    assert store.open_writer("k", 64 * MIB) is not None


async def test_body_growing_past_the_limit_is_abandoned(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_object_mb=2)
    store = await open_store(cfg)
    writer = store.open_writer("k", None)
    assert writer is not None
    for _ in range(2 * MIB // CHUNK + 1):
        await writer.write(b"z" * CHUNK)
    assert writer.abandoned
    assert spools(cfg) == []
    await writer.commit(head_for("k", writer.size))
    assert await store.get("k") is None
    assert store.write_failures == 0  # refusing is not a failure
    await store.close()


async def test_commit_with_a_wrong_length_is_not_stored(store: TieredStore) -> None:
    writer = store.open_writer("k", None)
    assert writer is not None
    await writer.write(b"half a body")
    await writer.commit(head_for("k", 1000))  # the origin promised more than it sent
    assert await store.get("k") is None


async def test_with_both_tiers_off_nothing_is_stored(tmp_path: Path) -> None:
    store = await open_store(config(tmp_path, memory_mb=0, disk_mb=0))
    assert store.open_writer("k", 0) is None
    assert store.open_writer("k", None) is None
    await store.close()


async def test_memory_only_store_touches_no_disk(tmp_path: Path) -> None:
    cfg = config(tmp_path, disk_mb=0)
    store = await open_store(cfg)
    await put(store, "k", b"hello")
    assert await body_of(await store.get("k")) == b"hello"
    assert store.open_writer("big", 64 * KIB + 1) is None  # beyond the memory object limit
    await store.close()
    assert not cfg.dir.exists()


async def test_disk_only_store(tmp_path: Path) -> None:
    cfg = config(tmp_path, memory_mb=0)
    store = await open_store(cfg)
    for key, n in (("tiny", 10), ("small", 40 * KIB), ("big", 3 * MIB)):
        await put(store, key, payload(n))
        assert store.memory_view.get(key) is None
        found = await store.get(key)
        assert isinstance(found, StoredObject)
        assert found.tier == "disk"
        assert await body_of(found) == payload(n)
        assert store.memory_view.get(key) is None
    await store.close()


# -- persistence and eviction ----------------------------------------------------------------


async def test_reopened_store_serves_what_was_committed(cfg: CacheConfig) -> None:
    store = await open_store(cfg)
    sizes = {"a": 0, "b": 100, "c": 40 * KIB, "d": 700 * KIB, "e": 5 * MIB}
    for key, n in sizes.items():
        await put(store, key, payload(n, seed=n % 97))
    marker = VaryMarker("http://origin.test/v", ("accept",), "g")
    await store.put_marker("v", marker)
    await store.close()

    store = await open_store(cfg)
    for key, n in sizes.items():
        found = await store.get(key)
        assert isinstance(found, StoredObject)
        assert found.head == head_for(key, n)
        assert await body_of(found) == payload(n, seed=n % 97)
    assert await store.get("v") == marker
    await store.close()


async def test_open_removes_leftover_spools(cfg: CacheConfig) -> None:
    store = await open_store(cfg)
    await store.close()
    (cfg.dir / "tmp" / "dead-writer.part").write_bytes(b"partial")  # an older layout's
    dead = cfg.dir / "tmp" / "999999999"  # a process that is gone
    dead.mkdir()
    (dead / "writer.part").write_bytes(b"partial")
    alive = cfg.dir / "tmp" / "1"  # init: a live process, perhaps another worker
    alive.mkdir()
    (alive / "writer.part").write_bytes(b"in progress")
    store = await open_store(cfg)
    assert spools(cfg) == [alive / "writer.part"]
    await store.close()


async def test_eviction_keeps_the_disk_tier_within_its_bound(tmp_path: Path) -> None:
    cfg = config(tmp_path, disk_mb=2, memory_mb=0)
    store = await open_store(cfg)
    for i in range(40):
        await put(store, f"k{i}", payload(100 * KIB, seed=i))
        assert await store.disk_usage() <= 2 * MIB
        assert sum(p.stat().st_size for p in body_files(cfg)) <= 2 * MIB
    assert store.disk_evictions > 0
    assert await store.get("k0") is None  # oldest stored, first out
    assert await body_of(await store.get("k39")) == payload(100 * KIB, seed=39)
    await store.close()


# -- damage and races ------------------------------------------------------------------------


async def test_truncated_body_file_is_a_counted_miss_and_removed(tmp_path: Path) -> None:
    cfg = config(tmp_path, memory_mb=0)
    store = await open_store(cfg)
    await put(store, "k", payload(200 * KIB))
    (path,) = body_files(cfg)
    with path.open("r+b") as f:
        f.truncate(100 * KIB)
    assert await store.get("k") is None
    assert store.read_failures == 1
    assert await store.get("k") is None  # it was removed, so the second look is a plain miss
    assert store.read_failures == 1
    assert body_files(cfg) == {}
    await store.close()


async def test_flipped_byte_in_a_small_body_fails_its_checksum(cfg: CacheConfig) -> None:
    store = await open_store(cfg)
    await put(store, "k", payload(40 * KIB))
    await store.close()
    (path,) = body_files(cfg)
    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF
    path.write_bytes(bytes(data))
    store = await open_store(cfg)
    assert await store.get("k") is None
    assert store.read_failures == 1
    assert store.memory_view.get("k") is None
    await store.close()


def _damage_record(directory: Path, key: str) -> None:
    """Damage the record of ``key``, a small object (in its segment entry)."""
    with contextlib.closing(sqlite3.connect(directory / "objects" / "cache.db")) as db:
        segment, offset = db.execute(
            "SELECT segment, offset FROM Logged WHERE key = ?", (key,)
        ).fetchone()
    path = directory / "segments" / f"{segment:08d}"
    data = bytearray(path.read_bytes())
    data[offset + 20 + len(key) + 3] ^= 0xFF  # (past the header and key: in the record)
    path.write_bytes(bytes(data))


async def test_damaged_record_is_a_counted_miss(cfg: CacheConfig) -> None:
    store = await open_store(cfg)
    await put(store, "k", b"body")
    await store.close()
    await asyncio.to_thread(_damage_record, cfg.dir, "k")
    store = await open_store(cfg)
    assert await store.get("k") is None
    assert store.read_failures == 1
    await put(store, "k", b"new body")  # the key is usable again
    store.memory.delete("k")
    assert await body_of(await store.get("k")) == b"new body"
    await store.close()


async def test_failing_disk_writes_are_counted_and_leave_the_store_working(
    store: TieredStore, cfg: CacheConfig
) -> None:
    await asyncio.to_thread(shutil.rmtree, cfg.dir / "tmp")  # spools can no longer be created
    writer = store.open_writer("big", None)
    assert writer is not None
    for _ in range(2 * SPILL_BATCH // CHUNK):
        await writer.write(b"b" * CHUNK)
    assert writer.abandoned
    await writer.commit(head_for("big", writer.size))
    await put(store, "small", payload(40 * KIB))  # spooled on its way to disk: fails too
    assert store.write_failures == 2
    assert await store.get("big") is None
    assert await body_of(store.memory_view.get("small")) == payload(40 * KIB)  # memory has it
    await put(store, "tiny", b"inline in SQLite")
    store.memory.delete("tiny")
    assert await body_of(await store.get("tiny")) == b"inline in SQLite"


async def test_unusable_directory_is_a_disk_error(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the directory should be")
    with pytest.raises(DiskError):
        await open_store(config(tmp_path))


async def test_read_overlapping_a_delete_does_not_promote_stale_data(cfg: CacheConfig) -> None:
    store = await open_store(cfg)
    await put(store, "k", b"old")
    await store.close()
    store = await open_store(cfg)
    for _ in range(20):
        read = asyncio.create_task(store.get("k"))
        await asyncio.sleep(0)  # the read is now waiting on the disk tier
        await store.delete("k")
        await read
        assert store.memory_view.get("k") is None
        await put(store, "k", b"old")
        store.memory.delete("k")
    await store.close()


async def test_read_overlapping_another_process_change_does_not_promote_it(
    cfg: CacheConfig,
) -> None:
    """``dropped``: another worker changed the key; what a read in flight found is older."""
    store = await open_store(cfg)
    await put(store, "k", b"old")
    store.memory.delete("k")
    for _ in range(20):
        read = asyncio.create_task(store.get("k"))
        await asyncio.sleep(0)  # the read is now waiting on the disk tier
        store.dropped("k")
        assert await body_of(await read) == b"old"  # (the reader itself still gets it)
        assert store.memory_view.get("k") is None
    await store.close()


async def test_cancelled_read_closes_the_file_it_opened(store: TieredStore) -> None:
    await put(store, "big", payload(2 * MIB))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(10):
            read = asyncio.create_task(store.get("big"))
            await asyncio.sleep(0)
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await read
        await store.close()  # waits for the reads still running in the executor
        gc.collect()
    assert [w for w in seen if issubclass(w.category, ResourceWarning)] == []


async def test_writer_after_close_is_refused_and_open_writers_are_aborted(
    store: TieredStore, cfg: CacheConfig
) -> None:
    writer = store.open_writer("k", None)
    assert writer is not None
    for _ in range(2 * SPILL_BATCH // CHUNK):
        await writer.write(b"w" * CHUNK)
    await store.close()
    assert spools(cfg) == []
    assert store.open_writer("other", 10) is None


# -- the event loop is never blocked ---------------------------------------------------------

# File and database events (PEP 578 audit events) on the watched thread, for paths under the
# watched directory (asyncio's debug mode itself reads source files for its tracebacks).
_FILE_EVENTS = frozenset(
    {
        "open",
        "os.rename",
        "os.remove",
        "os.mkdir",
        "os.rmdir",
        "os.listdir",
        "os.scandir",
        "os.truncate",
        "sqlite3.connect",
    }
)


class _LoopWatch:
    thread: int | None = None
    root = ""
    events: list[str] = []  # noqa: RUF012 - one process-wide watch
    installed = False

    @classmethod
    def hook(cls, event: str, args: tuple[object, ...]) -> None:
        if event in _FILE_EVENTS and threading.get_ident() == cls.thread:
            path = os.fsdecode(args[0]) if isinstance(args[0], str | bytes | os.PathLike) else ""
            if path.startswith(cls.root):
                cls.events.append(f"{event} {path}")


async def test_store_does_no_file_or_database_io_on_the_event_loop(
    cfg: CacheConfig, caplog: pytest.LogCaptureFixture
) -> None:
    if not _LoopWatch.installed:  # audit hooks cannot be removed; this one idles when unset
        sys.addaudithook(_LoopWatch.hook)
        _LoopWatch.installed = True
    loop = asyncio.get_running_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.1
    caplog.set_level(logging.WARNING, logger="asyncio")
    big = os.urandom(20 * MIB)
    _LoopWatch.root, _LoopWatch.events = str(cfg.dir), []
    _LoopWatch.thread = threading.get_ident()
    try:
        store = await open_store(cfg)
        await put(store, "big", big)
        await put(store, "small", payload(40 * KIB))
        await store.put_marker("m", VaryMarker("http://origin.test/m", ("accept",), "g"))
        await store.update_head("big", head_for("big", len(big), status=203))
        await store.close()
        store = await open_store(cfg)
        found = await store.get("big")
        assert isinstance(found, StoredObject)
        assert await body_of(found) == big
        assert await body_of(await store.get("small")) == payload(40 * KIB)
        await store.delete("big")
        await store.disk_usage()
        await store.close()
    finally:
        _LoopWatch.thread = None
        loop.set_debug(False)
    assert _LoopWatch.events == []
    assert [r.getMessage() for r in caplog.records if "took" in r.getMessage()] == []


# -- other processes sharing the store ------------------------------------------------------------


class Others:
    """The other workers, as the store tells them of changes: ``deleted`` (a drop that must
    be confirmed) waits until the test lets it go."""

    def __init__(self) -> None:
        self.changed_keys: list[str] = []
        self.deleted_keys: list[str] = []
        self.confirm = asyncio.Event()

    def changed(self, key: str) -> None:
        self.changed_keys.append(key)

    async def deleted(self, key: str) -> None:
        self.deleted_keys.append(key)
        await self.confirm.wait()


async def test_with_sharers_a_replacement_commits_once_the_others_dropped_their_copies(
    store: TieredStore,
) -> None:
    others = Others()
    store.sharers = others
    # A first store: nobody can hold a copy yet, so they are only told.
    await asyncio.wait_for(put(store, "k", b"old"), 2)
    assert (others.changed_keys, others.deleted_keys) == (["k"], [])
    writer = store.open_writer("k", 3)
    assert writer is not None
    assert writer.confirms  # (held here: likely held by the others too)
    await writer.write(b"new")
    committing = asyncio.ensure_future(writer.commit(head_for("k", 3)))
    for _ in range(50):  # (the disk write runs in the store's thread)
        if others.deleted_keys:
            break
        await asyncio.sleep(0.01)
    assert others.deleted_keys == ["k"]
    await asyncio.sleep(0.05)
    assert not committing.done()  # waiting for the others
    others.confirm.set()
    await asyncio.wait_for(committing, 2)
    found = await store.get("k")
    assert isinstance(found, StoredObject)
    assert found.body == b"new"
    assert others.changed_keys == ["k"]


async def test_a_replacement_found_only_on_disk_is_confirmed_too(store: TieredStore) -> None:
    await put(store, "k", b"old")
    store.memory.delete("k")  # (this process's copy gone; the others may still hold theirs)
    others = Others()
    others.confirm.set()
    store.sharers = others
    writer = store.open_writer("k", 3)
    assert writer is not None
    assert not writer.confirms  # (nothing told this process to expect a replacement)
    await writer.write(b"new")
    await asyncio.wait_for(writer.commit(head_for("k", 3)), 2)
    assert (others.changed_keys, others.deleted_keys) == ([], ["k"])


async def test_without_a_disk_tier_nothing_is_confirmed(tmp_path: Path) -> None:
    store = await open_store(config(tmp_path, disk_mb=0))
    try:
        others = Others()
        store.sharers = others
        writer = store.open_writer("k", 3)
        assert writer is not None
        assert not writer.confirms  # (the others cannot read it: they keep their own)
        await writer.write(b"new")
        await asyncio.wait_for(writer.commit(head_for("k", 3)), 2)
        assert others.deleted_keys == others.changed_keys == []
    finally:
        await store.close()
