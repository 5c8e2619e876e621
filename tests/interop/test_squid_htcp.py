"""HTCP with Squid 5.7 both ways (RFC 2756): TST hits and misses (a Vary'd object judged by
the request head the TST carries: ours carry the client's fields, Squid's none) and CLR from
each to the other on PURGE."""

from __future__ import annotations

import asyncio

from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.interop.conftest import running_squid, send
from tests.interop.test_squid_hierarchy import FRESH, squid_http
from tests.support import (
    MakeCache,
    Origin,
    free_udp_port,
    static,
    stop_and_read_log,
    wait_until,
)

LOOPBACK = ["127.0.0.0/8"]


def squid_htcp(htcp_port: int, *peer_lines: str) -> str:
    return "".join(
        line + "\n"
        for line in (
            f"htcp_port {htcp_port}",
            "htcp_access allow localhost",
            "htcp_access deny all",
            "htcp_clr_access allow localhost",
            "htcp_clr_access deny all",
            "acl purge method PURGE",  # (defining it lets PURGE in: http_access allows localhost)
            "server_persistent_connections off",
            "minimum_direct_rtt 0",
            "minimum_direct_hops 0",
            *peer_lines,
        )
    )


async def by_language(request: web.Request) -> web.Response:
    language = request.headers.get("Accept-Language", "none")
    headers = {**FRESH, "Vary": "Accept-Language"}
    return web.Response(body=f"in {language}".encode(), headers=headers)


async def test_harvest_asks_squid_over_htcp_and_clears_its_copy(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/h-held", static(b"held by squid", FRESH))
    origin.route("/h-vary", by_language)
    squid_htcp_port = free_udp_port()
    with running_squid(squid_htcp(squid_htcp_port)) as squid:
        held, vary = origin.url("/h-held"), origin.url("/h-vary")
        assert (await send(squid.port, "GET", held)).status == 200
        english = [("Accept-Language", "en")]
        assert (await send(squid.port, "GET", vary, english)).body == b"in en"
        peer = {
            "name": "squid",
            "host": "127.0.0.1",
            "http_port": squid.port,
            "icp_port": squid_htcp_port,
            "role": "sibling",
            "htcp": True,
            "no_digest": True,
        }
        cache: CacheServer = await make_cache(
            server={"name": "harvest"},
            htcp={"port": free_udp_port()},
            hierarchy={"peers": [peer], "digests": False},
        )
        ours = cache.address[1]
        assert (await send(ours, "GET", held)).body == b"held by squid"
        assert (await send(ours, "GET", vary, english)).body == b"in en"
        assert (await send(ours, "GET", vary, [("Accept-Language", "fr")])).body == b"in fr"
        assert (origin.hits["/h-held"], origin.hits["/h-vary"]) == (1, 2)
        # A PURGE here sends Squid a CLR: it forgets its copy too.
        assert (await send(ours, "PURGE", held)).status == 200
        await asyncio.sleep(0.3)  # (a datagram: no answer is asked)
        assert (await send(squid.port, "GET", held)).status == 200
        assert origin.hits["/h-held"] == 2
        lines = await stop_and_read_log(cache)
    hierarchy = [(line.method, line.hierarchy) for line in lines if line.method != "PURGE"]
    assert hierarchy == [("GET", "SIBLING_HIT"), ("GET", "SIBLING_HIT"), ("GET", "HIER_DIRECT")]


async def test_squid_asks_harvest_over_htcp_and_clears_its_copy(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/s-held", static(b"held by harvest", FRESH))
    origin.route("/s-vary", by_language)
    harvest_htcp = free_udp_port()
    cache: CacheServer = await make_cache(
        server={"name": "harvest"},
        htcp={"port": harvest_htcp, "allow": LOOPBACK, "clr_allow": LOOPBACK},
    )
    held, vary = origin.url("/s-held"), origin.url("/s-vary")
    ours = cache.address[1]
    assert (await send(ours, "GET", held)).status == 200
    english = [("Accept-Language", "en")]
    assert (await send(ours, "GET", vary, english)).body == b"in en"
    peer = f"cache_peer 127.0.0.1 sibling {ours} {harvest_htcp} htcp no-digest name=harvest"
    with running_squid(squid_htcp(free_udp_port(), peer)) as squid:
        assert (await send(squid.port, "GET", held)).body == b"held by harvest"
        assert (await send(squid.port, "GET", vary, english)).body == b"in en"
        assert (await send(squid.port, "GET", vary, [("Accept-Language", "fr")])).body == b"in fr"
        # Squid 5.7's TSTs carry no request fields (and "1/1" for a version): the variant
        # they select is the one for a request without Accept-Language, not held here.
        assert (origin.hits["/s-held"], origin.hits["/s-vary"]) == (1, 3)
        # (Squid writes its log in its own time, a line possibly in parts: wait for them all.)
        await wait_until(
            lambda: (
                len(squid_http(squid.access_lines(), vary)) >= 2
                and len(squid_http(squid.access_lines(), held)) >= 1
            ),
            within=5.0,
        )
        assert [h for _, h in squid_http(squid.access_lines(), held)] == ["SIBLING_HIT/127.0.0.1"]
        assert [h for _, h in squid_http(squid.access_lines(), vary)] == [
            "HIER_DIRECT/127.0.0.1",
            "HIER_DIRECT/127.0.0.1",
        ]
        counts = cache.stats().htcp
        assert counts is not None
        assert (counts.tst_answered, counts.tst_hits) == (3, 1)
        # A PURGE at Squid sends us a CLR: we forget our copy too.
        assert (await send(squid.port, "PURGE", held)).status in (200, 404)
        counts = cache.stats().htcp
        for _ in range(100):  # (bounded: the CLR is a datagram)
            counts = cache.stats().htcp
            assert counts is not None
            if counts.clr_purged:
                break
            await asyncio.sleep(0.02)
        assert counts is not None
        assert counts.clr_purged >= 1
    assert (await send(ours, "GET", held)).status == 200
    assert origin.hits["/s-held"] == 2
