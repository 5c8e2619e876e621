"""Disk hits begun on the fast path: a plain GET for an object that only the disk tier holds
(the cache was restarted, so its memory tier is empty) is read on the store's threads and,
fresh, answered there as the general path answers a disk hit; anything else is handed to the
general path. These tests drive real caches on one disk directory against origins on
127.0.0.1, and tell the paths apart by ``cache.proxy.fast.disk_hits`` counts."""

from __future__ import annotations

import asyncio

from aiohttp import web

from harvest_cache.server.app import CacheServer
from harvest_cache.server.disk_hits import DiskHits
from harvest_cache.store.interface import StoredObject
from tests.integration.test_miss_fast_path import fetch, params, pattern, results_for, warm
from tests.support import MakeCache, Origin, RawResponse, counting, static, stop_and_read_log

FRESH = {"Cache-Control": "max-age=600", "Content-Type": "text/plain", "X-Kept": "yes"}


def disk_hits(cache: CacheServer) -> DiskHits:
    assert cache.proxy is not None
    return cache.proxy.fast.disk_hits


async def restarted(make_cache: MakeCache, cache: CacheServer, origin: Origin) -> CacheServer:
    """``cache`` stopped (what it wrote behind is then on disk) and a new one started on its
    directory, with an idle connection to ``origin`` (the fast path needs one)."""
    await cache.stop(0.5)
    again = await make_cache()
    await warm(again, origin)
    return again


def fields_but_times(resp: RawResponse) -> list[tuple[str, str]]:
    return [
        (name, value)
        for name, value in resp.fields
        if name.lower() not in ("date", "age", "cache-status")
    ]


async def test_a_fresh_object_on_disk_is_answered_on_the_fast_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    origin.route("/d", static(b"from the disk", FRESH))
    url = origin.url("/d")
    assert (await fetch(cache, url)).body == b"from the disk"
    cache = await restarted(make_cache, cache, origin)
    hit = await fetch(cache, url)
    assert (hit.status, hit.body) == (200, b"from the disk")
    assert params(hit).get("hit") is True
    assert isinstance(params(hit).get("ttl"), str)
    assert hit.get("Age") is not None
    assert (disk_hits(cache).answered, disk_hits(cache).handed_over) == (1, 0)
    found = cache.store.memory_view.peek(url)
    assert isinstance(found, StoredObject)  # promoted to the memory tier
    # The general path's answer from the memory copy has the same fields (a request field
    # that calls for the full policy keeps it off the fast paths).
    general = await fetch(cache, url, headers=[("Cache-Control", "max-stale=0")])
    assert general.body == b"from the disk"
    assert fields_but_times(hit) == fields_but_times(general)
    assert origin.hits["/d"] == 1
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url)[-2:] == ["TCP_HIT", "TCP_MEM_HIT"]


async def test_a_stale_object_on_disk_is_revalidated_by_the_general_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    origin.route("/stale", counting({"Cache-Control": "max-age=0", "ETag": '"s"'}))
    url = origin.url("/stale")
    assert (await fetch(cache, url)).body == b"v1"
    cache = await restarted(make_cache, cache, origin)
    again = await fetch(cache, url)
    assert again.status == 200
    assert (disk_hits(cache).answered, disk_hits(cache).handed_over) == (0, 1)
    assert origin.hits["/stale"] == 2  # (the handler sends no 304: asked again, v2)
    assert again.body == b"v2"


async def test_a_body_too_big_for_the_memory_tier_is_streamed_by_the_general_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    body = pattern(700 * 1024, "large")  # over the memory tier's largest object (512 KiB)
    cache = await make_cache()
    origin.route("/large", static(body, FRESH))
    url = origin.url("/large")
    assert (await fetch(cache, url)).body == body
    cache = await restarted(make_cache, cache, origin)
    hit = await fetch(cache, url)
    assert (hit.body, params(hit).get("hit")) == (body, True)
    assert (disk_hits(cache).answered, disk_hits(cache).handed_over) == (0, 1)
    assert origin.hits["/large"] == 1


async def test_a_varying_object_on_disk_is_served_by_the_general_path(
    origin: Origin, make_cache: MakeCache
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            body=b"lang " + request.headers.get("Accept-Language", "-").encode(),
            headers={**FRESH, "Vary": "Accept-Language"},
        )

    cache = await make_cache()
    origin.route("/vary", handler)
    url = origin.url("/vary")
    assert (await fetch(cache, url)).body == b"lang -"
    cache = await restarted(make_cache, cache, origin)
    hit = await fetch(cache, url)
    assert (hit.body, params(hit).get("hit")) == (b"lang -", True)
    assert (disk_hits(cache).answered, disk_hits(cache).handed_over) == (0, 1)
    assert origin.hits["/vary"] == 1


async def test_clients_reading_one_object_from_disk_at_once_all_get_it(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    origin.route("/many", static(b"read by many", FRESH))
    url = origin.url("/many")
    assert (await fetch(cache, url)).body == b"read by many"
    cache = await restarted(make_cache, cache, origin)
    async with asyncio.timeout(10):
        answers = await asyncio.gather(*(fetch(cache, url) for _ in range(8)))
    assert all((a.status, a.body) == (200, b"read by many") for a in answers)
    assert all(params(a).get("hit") is True for a in answers)
    assert origin.hits["/many"] == 1
