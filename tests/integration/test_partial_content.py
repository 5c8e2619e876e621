"""Partial content stored, served, combined and revalidated (RFC 9111 3.3-3.4, 4.3).

The origin serves one 64 KiB representation in single ranges only, as a large download's
server would, with a strong entity tag. Nothing whole is ever fetched: what the cache holds
comes from 206s. The ``tier`` parameter keeps parts in the memory tier, or (with a 1 KiB
memory object limit and a disk tier) sends them to disk.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from multidict import CIMultiDict

from harvest_cache.http.partial import MAX_PARTS, index_key
from harvest_cache.server.app import CacheServer
from harvest_cache.server.partials import PartialStore
from tests.integration.test_metrics import scrape
from tests.support import (
    MakeCache,
    Origin,
    cache_status_members,
    proxy_client,
    stop_and_read_log,
    wait_until,
)

BODY = b"".join(hashlib.sha256(b"%d" % i).digest() for i in range(2048))  # 64 KiB
_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


@dataclass
class RangedOrigin:
    """A path served in single ranges, counting requests and keeping their fields."""

    body: bytes = BODY
    etag: str = '"v1"'
    cache_control: str = "max-age=3600"
    requests: list[dict[str, str]] = field(default_factory=list)

    async def handle(self, req: web.Request) -> web.Response:
        self.requests.append(dict(req.headers))
        headers = {
            "ETag": self.etag,
            "Cache-Control": self.cache_control,
            "Content-Type": "application/octet-stream",
            "X-Answer": str(len(self.requests)),  # which answer this is
        }
        if self.etag in req.headers.get("If-None-Match", ""):
            return web.Response(status=304, headers=headers)
        match = _RANGE.fullmatch(req.headers.get("Range", ""))
        if match is None:
            return web.Response(body=self.body, headers=headers)
        first, last = int(match[1]), min(int(match[2]), len(self.body) - 1)
        headers["Content-Range"] = f"bytes {first}-{last}/{len(self.body)}"
        return web.Response(status=206, body=self.body[first : last + 1], headers=headers)


@dataclass
class Setup:
    cache: CacheServer
    origin: RangedOrigin
    url: str
    tier: str


@pytest.fixture(params=["memory", "disk"])
async def setup(request: pytest.FixtureRequest, origin: Origin, make_cache: MakeCache) -> Setup:
    ranged = RangedOrigin()
    origin.route("/iso", ranged.handle)
    if request.param == "memory":
        cache = await make_cache(cache={"disk_mb": 0})
    else:
        cache = await make_cache(cache={"memory_max_object_kb": 1})
    return Setup(cache, ranged, origin.url("/iso"), request.param)


def our_cache_status(value: str) -> dict[str, str | bool]:
    name, params = cache_status_members(value)[-1]
    assert name == "test-cache", value
    return params


def partials(setup: Setup) -> PartialStore:
    assert setup.cache.proxy is not None
    return setup.cache.proxy.partials


async def get(
    setup: Setup, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, CIMultiDict[str], bytes]:
    async with proxy_client(setup.cache) as client:
        resp, body = await client.request(method, setup.url, headers=headers or {})
        return resp.status, CIMultiDict(resp.headers), body


async def ranged(setup: Setup, first: int, last: int) -> tuple[int, CIMultiDict[str], bytes]:
    return await get(setup, {"Range": f"bytes={first}-{last}"})


async def test_a_range_within_a_kept_part_is_answered_from_the_cache(setup: Setup) -> None:
    status, headers, body = await ranged(setup, 1000, 9999)
    assert (status, body) == (206, BODY[1000:10000])
    assert our_cache_status(headers["Cache-Status"])["stored"] is True
    status, headers, body = await ranged(setup, 2000, 2999)
    assert (status, body) == (206, BODY[2000:3000])
    assert headers["Content-Range"] == f"bytes 2000-2999/{len(BODY)}"
    assert headers["Content-Length"] == "1000"
    assert headers["ETag"] == '"v1"'
    assert "hit" in our_cache_status(headers["Cache-Status"])
    assert len(setup.origin.requests) == 1
    # Partial content is no whole object: a cache digest does not offer the URL to peers.
    assert setup.url not in {head.url for head in await setup.cache.store.heads()}
    lines = await stop_and_read_log(setup.cache)
    hit = "TCP_MEM_HIT" if setup.tier == "memory" else "TCP_HIT"
    assert [(line.result, line.status) for line in lines] == [("TCP_MISS", 206), (hit, 206)]


async def test_a_range_beyond_the_parts_goes_to_the_origin_and_is_kept(setup: Setup) -> None:
    await ranged(setup, 0, 999)
    status, headers, body = await ranged(setup, 500, 1499)  # half held: asked as it is
    assert (status, body) == (206, BODY[500:1500])
    member = our_cache_status(headers["Cache-Status"])
    assert member["fwd"] == "partial"
    assert member["stored"] is True
    assert setup.origin.requests[-1]["Range"] == "bytes=500-1499"
    status, _, body = await ranged(setup, 0, 1499)  # the two parts together
    assert (status, body) == (206, BODY[:1500])
    assert len(setup.origin.requests) == 2


async def test_s3_4_combined_parts_carry_the_newest_parts_fields(setup: Setup) -> None:
    await ranged(setup, 0, 99)
    await ranged(setup, 50, 149)
    status, headers, body = await ranged(setup, 0, 149)
    assert (status, body) == (206, BODY[:150])
    assert headers["X-Answer"] == "2"
    assert len(setup.origin.requests) == 2


async def test_several_ranges_are_answered_from_several_parts(setup: Setup) -> None:
    await ranged(setup, 0, 99)
    await ranged(setup, 5000, 5999)
    status, headers, body = await get(setup, {"Range": "bytes=10-19,5500-5509"})
    assert status == 206
    assert headers["Content-Type"].startswith("multipart/byteranges")
    assert BODY[10:20] in body
    assert BODY[5500:5510] in body
    assert f"bytes 5500-5509/{len(BODY)}".encode() in body
    assert len(setup.origin.requests) == 2


async def test_parts_that_cover_the_representation_become_the_whole_object(
    setup: Setup,
) -> None:
    half = len(BODY) // 2
    await ranged(setup, 0, half + 99)  # overlapping parts combine too
    await ranged(setup, half, len(BODY) - 1)
    await wait_until(lambda: partials(setup).completed == 1)  # (put together in the background)
    status, headers, body = await get(setup)
    assert (status, body) == (200, BODY)
    assert "hit" in our_cache_status(headers["Cache-Status"])
    assert headers["ETag"] == '"v1"'
    assert "Content-Range" not in headers
    assert len(setup.origin.requests) == 2
    assert partials(setup).completed == 1
    scraped = await scrape(setup.cache)
    assert scraped.value("harvest_cache_partial_completed_total") == 1
    assert scraped.value("harvest_cache_partial_parts_stored_total") == 2
    # The index and its parts are gone: only the whole object is left.
    assert await setup.cache.store.get(index_key(setup.url)) is None


async def test_a_part_of_another_representation_replaces_the_parts_held(setup: Setup) -> None:
    await ranged(setup, 0, 999)
    setup.origin.body = bytes(reversed(BODY))
    setup.origin.etag = '"v2"'
    status, _, body = await ranged(setup, 2000, 2999)
    assert body == setup.origin.body[2000:3000]
    # Parts of v1 and v2 are never combined: 0-999 is asked for again, and is v2's now.
    status, headers, body = await ranged(setup, 0, 2999)
    assert (status, body) == (206, setup.origin.body[:3000])
    assert headers["ETag"] == '"v2"'
    assert len(setup.origin.requests) == 3
    status, _, body = await ranged(setup, 2500, 2599)
    assert body == setup.origin.body[2500:2600]
    assert len(setup.origin.requests) == 3


async def test_stale_parts_are_revalidated_with_their_entity_tag(setup: Setup) -> None:
    setup.origin.cache_control = "max-age=0"
    await ranged(setup, 0, 4095)
    status, headers, body = await ranged(setup, 100, 199)
    assert (status, body) == (206, BODY[100:200])
    sent = setup.origin.requests[-1]
    assert sent["If-None-Match"] == '"v1"'
    assert sent["Range"] == "bytes=100-199"
    member = our_cache_status(headers["Cache-Status"])
    assert (member["fwd"], member["fwd-status"]) == ("stale", "304")
    # The origin changed it: its 206 is relayed, and replaces the parts held.
    setup.origin.body, setup.origin.etag = bytes(reversed(BODY)), '"v2"'
    status, headers, body = await ranged(setup, 100, 199)
    assert (status, body) == (206, setup.origin.body[100:200])
    assert headers["ETag"] == '"v2"'
    lines = await stop_and_read_log(setup.cache)
    results = [line.result for line in lines]
    assert results == ["TCP_MISS", "TCP_REFRESH_UNMODIFIED", "TCP_REFRESH_MODIFIED"]


async def test_a_weak_entity_tag_keeps_nothing(setup: Setup) -> None:
    setup.origin.etag = 'W/"weak"'
    await ranged(setup, 0, 99)
    status, headers, body = await ranged(setup, 0, 99)
    assert (status, body) == (206, BODY[:100])
    assert "stored" not in our_cache_status(headers["Cache-Status"])
    assert len(setup.origin.requests) == 2


async def test_an_unsafe_method_and_purge_drop_the_parts(setup: Setup) -> None:
    await ranged(setup, 0, 99)
    await get(setup, method="POST")
    await ranged(setup, 0, 99)
    assert len(setup.origin.requests) == 3  # 206, POST, the range again
    status, _, _ = await get(setup, method="PURGE")
    assert status == 200
    await ranged(setup, 0, 99)
    assert len(setup.origin.requests) == 4


async def test_an_evicted_part_drops_its_index(setup: Setup) -> None:
    await ranged(setup, 0, 99)
    held = await partials(setup).find(setup.url)
    assert held is not None
    (span,) = held.index.spans
    await setup.cache.store.delete(f"{setup.url}\x00part\x00{span.token}")
    status, _, body = await ranged(setup, 0, 99)
    assert (status, body) == (206, BODY[:100])
    assert len(setup.origin.requests) == 2
    assert partials(setup).lost == 1
    await ranged(setup, 0, 99)  # kept again, from the second fetch
    assert len(setup.origin.requests) == 2


async def test_parts_beyond_the_bound_are_not_kept(setup: Setup) -> None:
    for i in range(MAX_PARTS + 1):
        await ranged(setup, i * 100, i * 100 + 9)
    held = await partials(setup).find(setup.url)
    assert held is not None
    assert len(held.index.tokens) == MAX_PARTS
    await ranged(setup, MAX_PARTS * 100, MAX_PARTS * 100 + 9)
    assert len(setup.origin.requests) == MAX_PARTS + 2
    await ranged(setup, 0, 9)
    assert len(setup.origin.requests) == MAX_PARTS + 2
