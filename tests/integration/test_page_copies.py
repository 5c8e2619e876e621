"""Hot bodies sent from page copies (sendfile) reach clients whole and in order, however much
the client's socket takes at once; bodies outside the copied sizes are written as before."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

from harvest_cache.server.app import CacheServer
from harvest_cache.server.pages import MAX_BYTES, MIN_BYTES
from tests.support import (
    MakeCache,
    Origin,
    ProxyClient,
    open_proxy,
    proxy_client,
    read_response,
    request_bytes,
    static,
)

FRESH = {"Cache-Control": "max-age=600"}
SIZES = {"/paged": 256 << 10, "/smallest": MIN_BYTES, "/written": MAX_BYTES + 1, "/tiny": 900}


def page_bytes(cache: CacheServer) -> int:
    assert cache.proxy is not None
    return cache.proxy.page_bytes


async def warm(origin: Origin, client: ProxyClient) -> dict[str, bytes]:
    """Every object stored, then hit once from memory, which makes its hot entry."""
    bodies = {path: os.urandom(size) for path, size in SIZES.items()}
    for path, body in bodies.items():
        origin.route(path, static(body, FRESH))
        for _ in range(2):
            resp, got = await client.get(origin.url(path))
            assert (resp.status, got) == (200, body)
    return bodies


async def small_window(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client connection that takes little at a time: its socket's receive buffer and its
    reader's buffer are small, so the cache's sends stop part way and responses queue."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=32 << 10)


async def test_pipelined_hits_arrive_whole_and_in_order(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache(cache={"memory_max_object_kb": 2048})
    async with proxy_client(cache) as client:
        bodies = await warm(origin, client)
    assert page_bytes(cache) == SIZES["/paged"] + SIZES["/smallest"]
    reader, writer = await small_window(cache.address[1])
    batch = (*["/paged"] * 8, "/written", "/smallest", "/tiny")
    # Each batch is sent before the one before it is read: its first response finds the
    # socket full or part of another still queued; a batch read whole empties both.
    unread: list[str] = []
    for round_ in range(6):
        writer.write(b"".join(request_bytes("GET", origin.url(p)) for p in batch))
        await writer.drain()
        await asyncio.sleep(0.05)
        if round_ % 2:
            for path in unread:
                resp = await read_response(reader, within=10.0)
                assert (resp.status, resp.get("Content-Length")) == (200, str(SIZES[path]))
                assert resp.body == bodies[path], path
            unread.clear()
        unread.extend(batch)
        await asyncio.sleep(0.05)
    for path in unread:
        resp = await read_response(reader, within=10.0)
        assert resp.body == bodies[path], path
    writer.close()
    assert all(origin.hits[path] == 1 for path in SIZES)


async def test_a_client_reset_mid_body_harms_no_one_else(
    origin: Origin, cache: CacheServer, client: ProxyClient
) -> None:
    bodies = await warm(origin, client)
    reader, writer = await open_proxy(cache.address[1])
    writer.write(request_bytes("GET", origin.url("/paged")) * 12)
    await writer.drain()
    await reader.readexactly(70_000)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()  # a reset, with responses still coming
    for _ in range(3):
        resp, got = await client.get(origin.url("/paged"))
        assert (resp.status, got) == (200, bodies["/paged"])
    assert page_bytes(cache) == SIZES["/paged"] + SIZES["/smallest"]


async def test_copies_stay_within_an_eighth_of_the_memory_tier(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache(cache={"memory_mb": 4, "memory_max_object_kb": 1024})
    bodies = [os.urandom(200_000) for _ in range(5)]
    for i, body in enumerate(bodies):
        origin.route(f"/o{i}", static(body, FRESH))
    async with proxy_client(cache) as client:
        for i, body in enumerate(bodies):
            for _ in range(3):
                _, got = await client.get(origin.url(f"/o{i}"))
                assert got == body
    # 4 MiB / 8 = 512 KiB: two copies of 200,000 bytes fit, a third does not.
    assert page_bytes(cache) == 2 * 200_000


async def test_a_reload_frees_the_retired_proxys_copies(
    origin: Origin, cache: CacheServer, client: ProxyClient
) -> None:
    bodies = await warm(origin, client)
    retired = cache.proxy
    assert retired is not None
    assert retired.page_bytes == SIZES["/paged"] + SIZES["/smallest"]
    await cache.reload(cache.config)
    assert retired.page_bytes == 0
    assert retired.hot_entries == 0
    for _ in range(3):  # the new proxy makes its own entry and copy
        resp, got = await client.get(origin.url("/paged"))
        assert (resp.status, got) == (200, bodies["/paged"])
    assert page_bytes(cache) == SIZES["/paged"]
