"""Cache digests between real caches on loopback: ours served in Squid's format and place,
a peer's digest hit routing a request without ICP, and a false hit costing nothing visible."""

from __future__ import annotations

from pathlib import Path

from harvest_cache.hierarchy.digest import decode, key
from harvest_cache.hierarchy.digests import DIGEST_PATH
from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    Origin,
    proxy_client,
    raw_exchange,
    static,
    stop_and_read_log,
    wait_until,
)

FAST = {"digest_rebuild_period": 1.0, "digest_fetch_period": 1.0}


def own_files(tmp_path: Path, name: str) -> dict[str, dict[str, object]]:
    """A store and access log of its own for one of several caches in a test."""
    return {
        "cache": {"dir": str(tmp_path / name / "cache")},
        "log": {"access_log": str(tmp_path / name / "access.log")},
    }


async def get(cache: CacheServer, url: str) -> tuple[int, bytes]:
    async with proxy_client(cache) as client:
        response, body = await client.get(url)
        return response.status, body


def peer_of(upstream: CacheServer, role: str, name: str) -> dict[str, object]:
    return {
        "name": name,
        "host": "127.0.0.1",
        "http_port": upstream.address[1],
        "icp_port": 0,  # digests alone: no ICP
        "role": role,
    }


async def test_our_digest_is_served_where_squid_serves_its_own(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache(hierarchy=FAST)
    origin.route("/long", static(b"l", {"Cache-Control": "max-age=3600"}))
    origin.route("/brief", static(b"b", {"Cache-Control": "max-age=0, must-revalidate"}))
    assert (await get(cache, origin.url("/long")))[0] == 200
    assert (await get(cache, origin.url("/brief")))[0] == 200
    assert cache.digests is not None
    digests = cache.digests
    await wait_until(lambda: digests.own_entries == 1, within=5)
    port = cache.address[1]
    for target in (f"http://127.0.0.1:{port}{DIGEST_PATH}", DIGEST_PATH):
        raw = await raw_exchange(
            port, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"Content-Type: application/cache-digest" in head
        digest = decode(body)
        assert key(origin.url("/long")) in digest
        assert key(origin.url("/brief")) not in digest
        assert digest.count == 1


async def child_seeing(
    make_cache: MakeCache, tmp_path: Path, url: str, role: str
) -> tuple[CacheServer, CacheServer]:
    """A peer cache ("up") holding ``url``, and a child whose copy of its digest lists it."""
    up = await make_cache(hierarchy=FAST, server={"name": "up"}, **own_files(tmp_path, "up"))
    assert (await get(up, url))[0] == 200
    assert up.digests is not None
    up_digests = up.digests
    await wait_until(lambda: up_digests.own_entries == 1, within=5)
    child = await make_cache(
        hierarchy={**FAST, "peers": [peer_of(up, role, "up")]},
        server={"name": "child"},
        **own_files(tmp_path, "child"),
    )
    assert child.digests is not None
    assert child.neighbours is not None
    digests, peer = child.digests, child.neighbours.peers[0]

    def listed() -> bool:
        held = digests.held(peer)
        return held is not None and key(url) in held

    await wait_until(listed, within=5)
    return up, child


async def test_a_parents_digest_hit_goes_there_without_icp(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    origin.route("/obj", static(b"o" * 50, {"Cache-Control": "max-age=3600"}))
    url = origin.url("/obj")
    _, child = await child_seeing(make_cache, tmp_path, url, "parent")
    assert (await get(child, url)) == (200, b"o" * 50)
    assert origin.hits["/obj"] == 1  # the parent's own fetch only
    assert child.neighbours is not None
    health = child.neighbours.health["up"]
    lines = [line for line in await stop_and_read_log(child) if line.url == url]
    assert [(line.hierarchy, line.peer) for line in lines] == [("CD_PARENT_HIT", "127.0.0.1")]
    assert (health.digest_hits, health.digest_false_hits) == (1, 0)


async def test_a_false_digest_hit_at_a_sibling_falls_back_unnoticed(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    origin.route("/gone", static(b"g" * 20, {"Cache-Control": "max-age=3600"}))
    url = origin.url("/gone")
    sibling, child = await child_seeing(make_cache, tmp_path, url, "sibling")
    await sibling.store.delete(url)  # gone since its digest was built
    assert (await get(child, url)) == (200, b"g" * 20)
    assert origin.hits["/gone"] == 2  # the sibling's fetch, then the child's own
    assert child.neighbours is not None
    assert child.neighbours.health["up"].digest_false_hits == 1
    lines = [line for line in await stop_and_read_log(child) if line.url == url]
    assert [(line.hierarchy, line.peer) for line in lines] == [("HIER_DIRECT", "127.0.0.1")]
    # The sibling was asked for a hit only, and fetched nothing for us.
    sibling_lines = [line for line in await stop_and_read_log(sibling) if line.url == url]
    assert [line.status for line in sibling_lines] == [200, 504]
