"""Disk hits answered on the fast path are the general path's answers.

Two caches with disk tiers, alike but for their way in (the second's ``try_answer`` answers
nothing, so every request is handled by ``Proxy.handle``). Each object is fetched through
both, written to disk, and dropped from the memory tiers; the next request finds it only on
disk. The fast cache reads it on the event loop (the page cache holds it) and answers it as a
prepared hit; the answers must match in status, fields (Date and Age aside), body and log
code, for fresh objects and for those that must be revalidated or vary.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from harvest_cache.server.connection import Answered, ClientConnection
from harvest_cache.server.request import Request
from harvest_cache.store.admission import Admission
from harvest_cache.store.segments import CACHESTAT
from tests.integration.test_prepared_equivalence import ask, comparable
from tests.store.test_store_tiered import payload
from tests.support import (
    MakeCache,
    Origin,
    open_proxy,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
    wait_until,
)

RESPONSES = {
    "fresh": {"Cache-Control": "max-age=600", "ETag": '"f"'},
    "heuristic": {"Last-Modified": "Sat, 01 Jan 2022 00:00:00 GMT"},
    "stale": {"Cache-Control": "max-age=0", "ETag": '"s"'},
    "no-cache": {"Cache-Control": "no-cache", "ETag": '"n"'},
    "varies": {"Cache-Control": "max-age=600", "Vary": "Accept-Language"},
}


async def caches(make_cache: MakeCache, tmp_path: Path) -> tuple[CacheServer, CacheServer]:
    made = []
    for name in ("fast", "general"):
        log = {"access_log": str(tmp_path / f"{name}.log")}
        made.append(await make_cache(cache={"dir": str(tmp_path / name)}, log=log))
    fast, general = made
    assert general.proxy is not None
    general.proxy.try_answer = lambda conn, head, parsed: Answered.NO  # type: ignore[method-assign]
    return fast, general


async def drop_from_memory(cache: CacheServer) -> None:
    """Leave every object on disk only."""
    await cache.store.flush()
    for key in list(cache.store.memory._entries):
        cache.store.memory.delete(key)


def route_kind(origin: Origin, path: str, kind: str, body: bytes) -> str:
    """Serve ``body`` at ``path`` with the fields of ``kind`` (a 304 to its ETag); the URL."""

    async def handler(request: web.Request) -> web.Response:
        etag = RESPONSES[kind].get("ETag")
        if etag is not None and request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=RESPONSES[kind])
        return web.Response(body=body, headers=RESPONSES[kind])

    origin.route(path, handler)
    return origin.url(path)


async def logged_alike(fast: CacheServer, general: CacheServer) -> list[tuple[str, int]]:
    """The two caches' access-log codes and statuses, which must be the same (once stopped)."""
    fast_log, general_log = await stop_and_read_log(fast), await stop_and_read_log(general)
    codes = [(line.result, line.status) for line in fast_log]
    assert codes == [(line.result, line.status) for line in general_log]
    return codes


@pytest.mark.parametrize("kind", list(RESPONSES))
async def test_a_disk_hit_on_the_fast_path_is_the_general_paths(
    origin: Origin, make_cache: MakeCache, tmp_path: Path, kind: str
) -> None:
    url = route_kind(origin, "/d", kind, b"x" * 5000)
    fast, general = await caches(make_cache, tmp_path)
    fields = (("Accept-Language", "en"),)
    connections = [await open_proxy(cache.address[1]) for cache in (fast, general)]
    try:
        for reader, writer in connections:
            await ask(reader, writer, "GET", url, fields)
        for cache in (fast, general):
            await drop_from_memory(cache)
        prepared = []
        for _ in range(2):  # from disk, then (promoted) from memory
            answers = [await ask(r, w, "GET", url, fields) for r, w in connections]
            assert comparable(answers[0]) == comparable(answers[1])
            assert answers[0].body == b"x" * 5000
            prepared.append(
                [cache.proxy.hot_entries if cache.proxy else -1 for cache in (fast, general)]
            )
    finally:
        for _, writer in connections:
            writer.close()
    codes = await logged_alike(fast, general)
    if kind in ("fresh", "heuristic"):
        assert codes == [("TCP_MISS", 200), ("TCP_HIT", 200), ("TCP_MEM_HIT", 200)]
        # The disk hit was answered on the fast path, and prepared (the general path
        # prepares only memory hits: the second answer).
        assert prepared == [[1, 0], [1, 1]]
    else:
        assert prepared == [[0, 0], [0, 0]]


@pytest.mark.parametrize("kind", list(RESPONSES))
async def test_a_memory_hit_on_the_fast_path_is_the_general_paths(
    origin: Origin, make_cache: MakeCache, tmp_path: Path, kind: str
) -> None:
    """A memory-tier object with no prepared hit (more objects than prepared hits, or made
    before one was) is answered on the fast path too, and prepared there, as the general
    path would; what needs more goes its own way."""

    url = route_kind(origin, "/m", kind, b"m" * 3000)
    fast, general = await caches(make_cache, tmp_path)
    assert fast.proxy is not None
    handled = []
    handle = fast.proxy.handle

    async def counted(req: Request, conn: ClientConnection) -> None:
        handled.append(req.target)
        await handle(req, conn)

    fast.proxy.handle = counted  # type: ignore[method-assign]
    fields = (("Accept-Language", "en"),)
    connections = [await open_proxy(cache.address[1]) for cache in (fast, general)]
    try:
        for reader, writer in connections:
            await ask(reader, writer, "GET", url, fields)
        assert handled == [url]
        for cache in (fast, general):
            assert cache.proxy is not None
            cache.proxy.retire()  # (forgets the prepared hits: none was made by a miss)
        answers = [await ask(r, w, "GET", url, fields) for r, w in connections]
        assert comparable(answers[0]) == comparable(answers[1])
        assert answers[0].body == b"m" * 3000
        prepared = fast.proxy.hot_entries
    finally:
        for _, writer in connections:
            writer.close()
    codes = await logged_alike(fast, general)
    if kind in ("fresh", "heuristic"):
        assert codes == [("TCP_MISS", 200), ("TCP_MEM_HIT", 200)]
        assert (handled, prepared) == ([url], 1)  # the hit was the fast path's
    else:
        assert prepared == 0  # (validated, on a plan or in full; a variant in full)


async def fetched_into_a_small_cache(
    origin: Origin, make_cache: MakeCache, tmp_path: Path, bodies: dict[str, bytes]
) -> CacheServer:
    """A cache with a 1 MiB memory tier (and its access log) that has fetched each of
    ``bodies`` (path: body, fresh for 600 s) once, and written them all to disk."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=bodies[request.path], headers={"Cache-Control": "max-age=600"})

    for path in bodies:
        origin.route(path, handler)
    log = {"access_log": str(tmp_path / "access.log")}
    cache = await make_cache(cache={"dir": str(tmp_path / "c"), "memory_mb": 1}, log=log)
    reader, writer = await open_proxy(cache.address[1])
    try:
        for path in bodies:
            assert (await ask(reader, writer, "GET", origin.url(path), ())).status == 200
    finally:
        writer.close()
    await cache.store.flush()
    return cache


async def test_with_the_memory_tier_full_a_disk_hit_is_promoted_on_its_second_read(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """Objects read from disk into a full memory tier: the first read is answered on the
    fast path and left on disk (nothing prepared is kept), the second promotes it."""
    bodies = {f"/o{i}": bytes([i]) * (16 * 1024) for i in range(128)}  # 2 MiB: twice memory
    cache = await fetched_into_a_small_cache(origin, make_cache, tmp_path, bodies)
    assert cache.proxy is not None
    reader, writer = await open_proxy(cache.address[1])
    try:
        path = next(p for p in bodies if cache.store.memory.peek(origin.url(p)) is None)
        kept = cache.proxy.hot_entries
        for read in range(3):
            answer = await ask(reader, writer, "GET", origin.url(path), ())
            assert (answer.status, answer.body) == (200, bodies[path])
            promoted = cache.store.memory.peek(origin.url(path)) is not None
            assert promoted == (read > 0)
            assert cache.proxy.hot_entries == kept + (read > 0)
    finally:
        writer.close()
    assert (cache.store.promotions, cache.store.kept_on_disk) == (1, 1)
    results = [line.result for line in await stop_and_read_log(cache)]
    assert results[-3:] == ["TCP_HIT", "TCP_HIT", "TCP_MEM_HIT"]
    assert sum(origin.hits.values()) == len(bodies)


async def read_slowly(
    cache: CacheServer, origin: Origin, paths: list[str], bodies: dict[str, bytes]
) -> None:
    """Ask for every one of ``paths`` at once on a connection with a small receive window,
    read the answers only once all were asked for, and check each body."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(cache.address)
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
    try:
        writer.write(b"".join(request_bytes("GET", origin.url(p)) for p in paths))
        await asyncio.sleep(0.2)  # (the cache answers into a full socket meanwhile)
        for path in paths:
            answer = await read_response(reader)
            assert (answer.status, answer.body) == (200, bodies[path]), path
    finally:
        writer.close()


async def test_disk_hits_sent_to_a_client_that_reads_slowly_keep_their_bodies(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """Bodies left on disk are sent from their segments, and what the socket does not take
    at once is copied from the tier's read buffer (which the next read reuses): 300
    pipelined disk hits to a client with a small receive window, read only once all were
    asked for, each come back whole and its own."""
    bodies = {f"/s{i}": payload(16 * 1024, seed=i) for i in range(300)}  # 4.7 MiB: 5 x memory
    cache = await fetched_into_a_small_cache(origin, make_cache, tmp_path, bodies)
    on_disk = [p for p in bodies if cache.store.memory.peek(origin.url(p)) is None]
    assert len(on_disk) > 200
    await read_slowly(cache, origin, on_disk, bodies)
    results = [line.result for line in await stop_and_read_log(cache)]
    assert results[-len(on_disk) :].count("TCP_HIT") == len(on_disk)
    assert cache.store.kept_on_disk > 200  # (not promoted: sent from disk)


async def test_prepared_hits_of_objects_the_memory_tier_dropped_are_forgotten(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """No request looks them up, yet within a second or two they are gone (and with them
    the bodies they held)."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 4000, headers={"Cache-Control": "max-age=600"})

    origin.route("/p", handler)
    cache = await make_cache(cache={"dir": str(tmp_path / "c")})
    assert cache.proxy is not None
    reader, writer = await open_proxy(cache.address[1])
    try:
        for _ in range(3):  # a miss, a hit that prepares the entry, a prepared hit
            assert (await ask(reader, writer, "GET", origin.url("/p"), ())).status == 200
    finally:
        writer.close()
    assert cache.proxy.hot_entries == 1
    await drop_from_memory(cache)
    proxy = cache.proxy
    await wait_until(lambda: proxy.hot_entries == 0, within=5)


def count_reads(cache: CacheServer) -> list[int]:
    """Count the disk tier's reads on the event loop (one item a read)."""
    disk = cache.store._disk
    assert disk is not None
    segments = disk._segments
    read_nowait, reads = segments.read_nowait, []

    def counted(where: Any) -> Any:
        reads.append(1)
        return read_nowait(where)

    segments.read_nowait = counted  # type: ignore[method-assign]
    return reads


def forget_reads(cache: CacheServer) -> None:
    """Have the promotion decision forget the disk reads so far (as it does, two generations
    of reads later): the next read of each object is its first again."""
    cache.store._admission = Admission()


async def test_an_object_left_on_disk_is_answered_again_without_reading_it(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """Read from disk and left there, its answer is kept (no body): the next request for
    it, while the disk tier has that very entry and the page cache its body, is answered
    from the kept head and the segment's pages, with no read, no decoding, no evaluation.
    Once the object changes, the new one is read and answered; its length as well."""
    bodies = {f"/k{i}": payload(16 * 1024, seed=i) for i in range(128)}  # twice memory
    origin.route("/filler", static(b"f" * 64 * 1024, {"Cache-Control": "max-age=600"}))
    cache = await fetched_into_a_small_cache(origin, make_cache, tmp_path, bodies)
    path = next(p for p in bodies if cache.store.memory.peek(origin.url(p)) is None)
    url = origin.url(path)
    reads = count_reads(cache)
    reader, writer = await open_proxy(cache.address[1])
    try:
        answers = []
        for _ in range(3):
            forget_reads(cache)  # (else its second read would promote it)
            answers.append(await ask(reader, writer, "GET", url, ()))
        assert [(a.status, a.body) for a in answers] == [(200, bodies[path])] * 3
        # The first; the others were sent unread (read, on a kernel that cannot tell what
        # the page cache holds).
        assert len(reads) == (1 if CACHESTAT else 3)
        assert [a.get("Content-Length") for a in answers] == [str(16 * 1024)] * 3
        assert cache.store.memory.peek(url) is None
        # The origin's object changes (and grows); a reload (on a connection of its own, as
        # the general path answers it) stores it, and it is left on disk alone: the kept
        # answer is not the tier's entry any more.
        bodies[path] = payload(20 * 1024, seed=99)
        other = await open_proxy(cache.address[1])
        try:
            reload = await ask(*other, "GET", url, (("Cache-Control", "no-cache"),))
            assert reload.body == bodies[path]
            await cache.store.flush()
            cache.store.memory.delete(url)
            filler = await ask(*other, "GET", origin.url("/filler"), ())
            assert filler.status == 200  # (the memory tier full again: no promotion for room)
        finally:
            other[1].close()
        before = len(reads)
        for _ in range(2):
            forget_reads(cache)
            again = await ask(reader, writer, "GET", url, ())
            assert (again.status, again.body) == (200, bodies[path])
            assert again.get("Content-Length") == str(20 * 1024)
        assert len(reads) == before + (1 if CACHESTAT else 2)  # the new entry once
    finally:
        writer.close()
    lines = [(line.result, line.url) for line in await stop_and_read_log(cache)]
    assert [result for result, logged in lines if logged == url][-6:] == [
        *["TCP_HIT"] * 3,
        "TCP_CLIENT_REFRESH_MISS",
        *["TCP_HIT"] * 2,
    ]
    assert origin.hits[path] == 2


async def test_objects_left_on_disk_sent_again_to_a_slow_client_keep_their_bodies(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """Bodies sent again from their segments unread: what the socket does not take at once
    is read from the page cache and queued. 300 pipelined hits on kept answers to a client
    with a small receive window, read only once all were asked for, come back whole."""
    bodies = {f"/r{i}": payload(16 * 1024, seed=i) for i in range(300)}
    cache = await fetched_into_a_small_cache(origin, make_cache, tmp_path, bodies)
    on_disk = [p for p in bodies if cache.store.memory.peek(origin.url(p)) is None]
    assert len(on_disk) > 200
    reader, writer = await open_proxy(cache.address[1])
    try:
        for path in on_disk:  # each read once, and its answer kept
            assert (await ask(reader, writer, "GET", origin.url(path), ())).status == 200
    finally:
        writer.close()
    forget_reads(cache)
    reads = count_reads(cache)
    await read_slowly(cache, origin, on_disk, bodies)
    # The first answers went out from the segments unread; once the socket was full, the
    # rest were read to be queued.
    assert 0 < len(reads) < len(on_disk) if CACHESTAT else len(reads) == len(on_disk)
    results = [line.result for line in await stop_and_read_log(cache)]
    assert results[-len(on_disk) :].count("TCP_HIT") == len(on_disk)
