"""HTCP between harvest caches (RFC 2756): a TST carries the request head, so a sibling holding
one variant of a Vary'd object answers hit for a request that selects it and miss for one that
does not; a PURGE here clears the copy at a peer that takes our CLRs; a peer not allowed to
ask is told so, and that counts as a miss."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    Origin,
    free_udp_port,
    open_proxy,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
)

LOOPBACK = ["127.0.0.0/8"]


async def by_language(request: web.Request) -> web.Response:
    language = request.headers.get("Accept-Language", "none")
    headers = {"Cache-Control": "max-age=600", "Vary": "Accept-Language"}
    return web.Response(body=f"in {language}".encode(), headers=headers)


async def get(
    cache: CacheServer, url: str, fields: list[tuple[str, str]] | None = None, method: str = "GET"
) -> tuple[int, bytes]:
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes(method, url, headers=fields))
        answer = await read_response(reader, method=method)
    finally:
        writer.close()
    return answer.status, answer.body


async def pair(
    make_cache: MakeCache, tmp_path_name: str, *, allow: list[str]
) -> tuple[CacheServer, CacheServer]:
    """A sibling answering HTCP (``allow``: who may ask), and a cache asking it."""
    sibling_port = free_udp_port()
    sibling = await make_cache(
        server={"name": "sibling"},
        cache={"dir": f"{tmp_path_name}/sibling"},
        log={"access_log": f"{tmp_path_name}/sibling.log"},
        htcp={"port": sibling_port, "allow": allow, "clr_allow": allow},
    )
    peer = {
        "name": "sibling",
        "host": "127.0.0.1",
        "http_port": sibling.address[1],
        "icp_port": sibling_port,
        "role": "sibling",
        "htcp": True,
    }
    child = await make_cache(
        server={"name": "child"},
        cache={"dir": f"{tmp_path_name}/child"},
        htcp={"port": free_udp_port()},
        hierarchy={"peers": [peer], "digests": False},
    )
    return sibling, child


async def test_a_tst_tells_the_variant_the_request_selects(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    origin.route("/v", by_language)
    sibling, child = await pair(make_cache, str(tmp_path), allow=LOOPBACK)
    english = [("Accept-Language", "en")]
    assert await get(sibling, origin.url("/v"), english) == (200, b"in en")  # held there
    assert origin.hits["/v"] == 1
    # English: the sibling holds it; French: it does not (ICP could not tell them apart).
    assert await get(child, origin.url("/v"), english) == (200, b"in en")
    assert origin.hits["/v"] == 1
    assert await get(child, origin.url("/v"), [("Accept-Language", "fr")]) == (200, b"in fr")
    assert origin.hits["/v"] == 2
    counts = sibling.stats().htcp
    assert counts is not None
    assert (counts.tst_answered, counts.tst_hits) == (2, 1)
    asked = child.stats().htcp
    assert asked is not None
    assert (asked.queries_sent, asked.replies) == (2, 2)
    lines = await stop_and_read_log(child)
    assert [line.hierarchy for line in lines] == ["SIBLING_HIT", "HIER_DIRECT"]


async def test_a_purge_here_clears_the_peers_copy(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    origin.route("/p", static(b"v1", {"Cache-Control": "max-age=600"}))
    sibling, child = await pair(make_cache, str(tmp_path), allow=LOOPBACK)
    assert await get(sibling, origin.url("/p")) == (200, b"v1")
    assert await get(child, origin.url("/p")) == (200, b"v1")  # (a sibling hit, kept here)
    assert origin.hits["/p"] == 1
    assert (await get(child, origin.url("/p"), method="PURGE"))[0] == 200
    counts = sibling.stats().htcp
    for _ in range(100):  # (bounded: the CLR is a datagram, taken in its own task)
        counts = sibling.stats().htcp
        assert counts is not None
        if counts.clr_purged:
            break
        await asyncio.sleep(0.01)
    assert counts is not None
    assert (counts.clr_received, counts.clr_purged) == (1, 1)
    # Gone at the sibling too: asked there, it is fetched again.
    assert await get(sibling, origin.url("/p")) == (200, b"v1")
    assert origin.hits["/p"] == 2


async def test_a_peer_not_allowed_to_ask_is_told_so(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    origin.route("/d", static(b"d", {"Cache-Control": "max-age=600"}))
    sibling, child = await pair(make_cache, str(tmp_path), allow=[])
    assert await get(sibling, origin.url("/d")) == (200, b"d")
    assert await get(child, origin.url("/d")) == (200, b"d")  # (fetched: no hit to be had)
    assert origin.hits["/d"] == 2
    counts, asked = sibling.stats().htcp, child.stats().htcp
    assert counts is not None
    assert asked is not None
    assert (counts.denied, counts.tst_answered) == (1, 0)
    assert asked.replies == 1  # (the refusal came back, at once: no wait for a timeout)


async def test_datagrams_that_are_not_htcp_are_counted_and_dropped(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    origin.route("/m", static(b"m", {"Cache-Control": "max-age=600"}))
    sibling, child = await pair(make_cache, str(tmp_path), allow=LOOPBACK)
    assert sibling.htcp is not None
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=sibling.htcp.address
    )
    try:
        for junk in (b"\x00", b"\xff" * 40, b"\x00\x10\x00\x00" + b"\x00" * 12):
            transport.sendto(junk)
        for _ in range(100):  # (bounded: datagrams on loopback)
            counts = sibling.stats().htcp
            assert counts is not None
            if counts.received >= 3:
                break
            await asyncio.sleep(0.01)
    finally:
        transport.close()
    counts = sibling.stats().htcp
    assert counts is not None
    assert (counts.received, counts.malformed) == (3, 3)
    # And it still answers.
    assert await get(sibling, origin.url("/m")) == (200, b"m")
    assert await get(child, origin.url("/m")) == (200, b"m")
    assert origin.hits["/m"] == 1
