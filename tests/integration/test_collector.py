"""Requests on a keep-alive connection leave nothing for the garbage collector: whatever an
exchange makes is freed by reference counting when it ends. An object in a reference cycle
waits for a collection, and a collection's cost grows with every object still alive: on the
request path it is CPU taken from every request."""

from __future__ import annotations

import gc
from collections import Counter

import pytest
from aiohttp import web

from tests.support import (
    MakeCache,
    Origin,
    no_collector,
    open_proxy,
    read_response,
    request_bytes,
)

FIELDS = [("User-Agent", "collector-test/1"), ("Accept", "*/*")]
ETAG = '"v1"'


async def object_handler(request: web.Request) -> web.Response:
    """1 KiB objects; those under /reval/ must be revalidated on every use (304 by ETag)."""
    cc = "max-age=0" if request.path.startswith("/reval/") else "max-age=3600"
    if request.headers.get("If-None-Match") == ETAG:
        return web.Response(status=304, headers={"ETag": ETAG, "Cache-Control": cc})
    headers = {"Cache-Control": cc, "ETag": ETAG, "Content-Type": "text/plain"}
    return web.Response(body=b"x" * 1024, headers=headers)


def garbage_of(collected: list[object]) -> str:
    return ", ".join(
        f"{n} {kind}" for kind, n in Counter(type(o).__qualname__ for o in collected).most_common(6)
    )


@pytest.mark.parametrize("disk_mb", [0, 8])
@pytest.mark.parametrize("kind", ["miss", "hit", "reval"])
async def test_keep_alive_requests_leave_nothing_to_collect(
    origin: Origin, make_cache: MakeCache, disk_mb: int, kind: str
) -> None:
    paths = [f"/{kind}/{i}" if kind == "miss" else f"/{kind}/one" for i in range(30)]
    for path in set(paths):
        origin.route(path, object_handler)
    cache = await make_cache(cache={"disk_mb": disk_mb})
    reader, writer = await open_proxy(cache.address[1])
    try:

        async def get(path: str) -> None:
            writer.write(request_bytes("GET", origin.url(path), headers=FIELDS))
            resp = await read_response(reader)
            assert (resp.status, len(resp.body)) == (200, 1024)

        for path in paths[:5]:  # (pools, plans and memos made: they are kept, not garbage)
            await get(path)
        with no_collector():
            for path in paths[5:]:
                await get(path)
            found = gc.collect()
            assert found == 0, garbage_of(gc.garbage)
    finally:
        writer.close()
    # Each miss asked once, the hit once in all, the revalidated object on every request.
    assert origin.hits[paths[-1]] == {"miss": 1, "hit": 1, "reval": len(paths)}[kind]
