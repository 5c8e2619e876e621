"""A cache array (CARP) of three harvest caches, each also a front its clients may use, and a
child in front of them: every URL is fetched from the origin once, by its home; a member
stopped has its URLs go to the others while the rest stay put; restarted, they come back."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from aiohttp import web

from harvest_cache.hierarchy.carp import Array
from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    Origin,
    cache_config,
    free_port,
    open_proxy,
    read_response,
    request_bytes,
)

NAMES = ("m1", "m2", "m3")
PATHS = [f"/u/{i}" for i in range(60)]


async def body(request: web.Request) -> web.Response:
    headers = {"Cache-Control": "max-age=600"}
    return web.Response(body=f"object {request.path}".encode(), headers=headers)


async def get_all(cache: CacheServer, origin: Origin, paths: list[str]) -> None:
    reader, writer = await open_proxy(cache.address[1])
    try:
        for path in paths:
            writer.write(request_bytes("GET", origin.url(path)))
            answer = await read_response(reader)
            assert (answer.status, answer.body) == (200, f"object {path}".encode()), path
    finally:
        writer.close()


async def test_an_array_of_three_with_a_child(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    for path in PATHS:
        origin.route(path, body)
    ports = {name: free_port() for name in NAMES}
    # (proxy_only: a member keeps nothing another member sends it, so each object is held
    # once in the array, by its home)
    members = [
        {
            "name": name,
            "host": "127.0.0.1",
            "http_port": ports[name],
            "icp_port": 0,
            "carp": True,
            "proxy_only": True,
        }
        for name in NAMES
    ]
    # (a member back is tried again soon; an array needs no digests)
    fast = {"peer_retry": 0.5, "digests": False}

    def member_config(name: str) -> dict[str, dict[str, object]]:
        return {
            "server": {"name": name, "listen": f"127.0.0.1:{ports[name]}"},
            "cache": {"dir": str(tmp_path / name)},
            "hierarchy": {"peers": members, "array_name": name, **fast},
        }

    caches = {name: await make_cache(**member_config(name)) for name in NAMES}
    child = await make_cache(
        server={"name": "child"},
        cache={"dir": str(tmp_path / "child"), "memory_mb": 0, "disk_mb": 0},
        hierarchy={"peers": members, "never_direct": [{}], **fast},
    )
    array = Array([(name, 1, ()) for name in NAMES])
    home = {path: array.choose(origin.url(path)).name for path in PATHS}  # type: ignore[union-attr]
    assert set(Counter(home.values())) == set(NAMES)

    # Through the child, twice, then through each member as a front: one origin fetch each.
    await get_all(child, origin, PATHS)
    await get_all(child, origin, PATHS)
    # The child's numbers: each member's configured share, and the requests homed there.
    shares = child.stats().array
    assert shares is not None
    assert {n: round(s.load_factor, 3) for n, s in shares.items()} == dict.fromkeys(NAMES, 0.333)
    assert {n: s.homes for n, s in shares.items()} == {
        n: 2 * sum(1 for p in PATHS if home[p] == n) for n in NAMES
    }
    peers = child.stats().peers
    assert peers is not None
    assert all(peers[n].uses > 0 and peers[n].response_time is not None for n in NAMES)
    for cache in caches.values():
        await get_all(cache, origin, PATHS[:20])
    assert all(origin.hits[path] == 1 for path in PATHS), {p: origin.hits[p] for p in PATHS}
    # Each URL went to the origin from its home alone.
    fetched_by = {
        request.path: request.headers.get("Via", "").rsplit(" ", 1)[-1]
        for request in origin.requests
    }
    assert fetched_by == home

    # m2 stopped: its URLs go to the others (once each, from the origin); the rest stay put.
    await caches["m2"].stop(0.5)
    await get_all(child, origin, PATHS)
    moved = [path for path in PATHS if home[path] == "m2"]
    hits = {p: origin.hits[p] for p in PATHS}
    assert all(hits[path] == (2 if path in moved else 1) for path in PATHS), (moved, hits)

    # m2 back (its store kept on disk): its URLs come back to it, hits there.
    caches["m2"] = await CacheServer.start(cache_config(tmp_path, **member_config("m2")))
    try:
        await asyncio.sleep(0.6)  # (the child leaves a member that failed alone for peer_retry)
        await get_all(child, origin, PATHS)
        assert all(origin.hits[path] == (2 if path in moved else 1) for path in PATHS)
        # ... answered by m2, from the store it kept.
        answered = sum(caches["m2"].stats().traffic.request_counts().values())
        assert answered == len(moved)
        assert caches["m2"].stats().traffic.hierarchy.get("HIER_DIRECT", 0) == 0
    finally:
        await caches["m2"].stop(0.5)
