"""harvest-cache and a real Squid 5.7 in a cache hierarchy (RFC 2186, RFC 2187), ICP both ways.

Each test puts Squid and harvest-cache on 127.0.0.1, each with an ICP port, one as the
other's parent or sibling, and reads both access logs (Squid's native format, which
harvest-cache writes too). The querier logs the hierarchy code and the peer it fetched from
(PARENT_HIT, SIBLING_HIT, FIRST_PARENT_MISS, CLOSEST_PARENT_MISS, HIER_DIRECT); the peer logs
the ICP query (Squid: UDP_HIT or UDP_MISS for ICP_QUERY) and how it served the HTTP request
that followed; the origin's counters show who fetched.

Squid's side follows PEERING-NOTES.md: its ICP socket on the wildcard address, icp_access
letting localhost in, netdb kept from short-cutting the peers (minimum_direct_*), no
persistent server connections (so each line carries its own hierarchy code), no cache
digests (so only ICP decides, and no digest fetch lands in harvest-cache's log).

Squid as our parent, as our sibling, us as Squid's parent, and each the other's sibling at
once (ICP queries and answers crossing on both sockets); harvest-cache as Squid's sibling
alone is tests/interop/test_squid_icp.py. The last test has Squid's ICP HIT followed by a
504 to our only-if-cached request, which sends us to the origin.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from harvest_cache.server.app import CacheServer
from tests.interop.conftest import HOST, running_squid, send
from tests.support import (
    LogLine,
    MakeCache,
    Origin,
    free_port,
    free_udp_port,
    static,
    stop_and_read_log,
    wait_until,
)

CHILD = "harvest-child"
FRESH = {"Cache-Control": "max-age=600"}
# Squid's answers, as its access log shows them, to an HTTP request it served from its cache.
SQUID_HITS = ("TCP_HIT/200", "TCP_MEM_HIT/200")
LOG_WAIT = 5.0  # seconds: how long a log line may take to appear


def squid_conf(icp_port: int, *peer_lines: str) -> str:
    """Squid with ICP on ``icp_port`` (wildcard address), answering localhost only."""
    return "".join(
        line + "\n"
        for line in (
            f"icp_port {icp_port}",
            "icp_access allow localhost",
            "icp_access deny all",
            "server_persistent_connections off",
            "minimum_direct_rtt 0",
            "minimum_direct_hops 0",
            "log_icp_queries on",
            *peer_lines,
        )
    )


def squid_http(lines: list[str], url: str) -> list[tuple[str, str]]:
    """(result/status, hierarchy/peer) of Squid's lines for HTTP requests for ``url``."""
    return [
        (f[3], f[8])
        for f in (line.split() for line in lines)
        if len(f) > 8 and f[6] == url and f[5] != "ICP_QUERY"
    ]


def squid_icp(lines: list[str], url: str) -> list[str]:
    """The results (``UDP_HIT/000``, ``UDP_MISS/000`` ...) of the ICP queries Squid answered
    for ``url``."""
    return [
        f[3]
        for f in (line.split() for line in lines)
        if len(f) > 8 and f[6] == url and f[5] == "ICP_QUERY"
    ]


def ours(lines: list[LogLine], url: str) -> list[tuple[str, str]]:
    """(result/status, hierarchy/peer) of harvest-cache's lines for ``url``."""
    return [(f"{x.result}/{x.status}", f"{x.hierarchy}/{x.peer}") for x in lines if x.url == url]


async def wait_for(predicate: Callable[[], bool]) -> None:
    await wait_until(predicate, within=LOG_WAIT)


def squid_peer(role: str, http_port: int, icp_port: int) -> dict[str, object]:
    """Squid as a ``[[hierarchy.peers]]`` table. Cache digests are left out: these tests
    are about ICP (and Squid serves its digest only under its own host name anyway)."""
    return {
        "name": "squid",
        "host": "127.0.0.1",
        "http_port": http_port,
        "icp_port": icp_port,
        "role": role,
        "no_digest": True,
    }


async def child_of_squid(make_cache: MakeCache, role: str, http_port: int, icp: int) -> CacheServer:
    """harvest-cache with Squid as its one peer, in ``role``."""
    return await make_cache(
        icp={"port": free_udp_port(), "allow": ["127.0.0.0/8"]},
        hierarchy={"peers": [squid_peer(role, http_port, icp)]},
        server={"name": CHILD},
    )


@contextlib.asynccontextmanager
async def probed_by_squid(port: int) -> AsyncIterator[None]:
    """A stand-in listening on 127.0.0.1:``port`` while a Squid starts that has a cache_peer
    there: Squid connects to each peer's HTTP port at startup and, when refused, holds the
    peer dead (no ICP queries) until a later probe, which peer selection makes at most once
    a second. The stand-in takes the probe and is gone before the block's end, which waits
    for it; the real cache can then listen on ``port``."""
    probed = asyncio.Event()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        probed.set()
        writer.close()

    stand_in = await asyncio.start_server(accept, HOST, port)
    try:
        yield
        await asyncio.wait_for(probed.wait(), LOG_WAIT)
    finally:
        stand_in.close()
        await stand_in.wait_closed()


async def test_squid_as_our_parent_serves_its_hit_and_fetches_our_misses(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/p-first", static(b"first miss", FRESH))
    origin.route("/p-held", static(b"held by squid", FRESH))
    origin.route("/p-new", static(b"new to both", FRESH))
    first, held, new = origin.url("/p-first"), origin.url("/p-held"), origin.url("/p-new")
    icp = free_udp_port()
    with running_squid(squid_conf(icp)) as squid:
        cache = await child_of_squid(make_cache, "parent", squid.port, icp)
        # Squid knows nothing of the origin yet: its ICP MISS carries no RTT to it.
        unknown = await send(cache.address[1], "GET", first)
        warm = await send(squid.port, "GET", held)  # Squid holds it now
        hit = await send(cache.address[1], "GET", held)
        # Squid has fetched from the origin's host: its netdb knows the RTT (1 ms), which its
        # MISS now reports (SRC_RTT), and harvest-cache ranks parents by it. (Squid as the
        # querier would use SRC_RTT only with query_icmp on; harvest-cache always asks.)
        known = await send(cache.address[1], "GET", new)
        await wait_for(lambda: len(squid_http(squid.access_lines(), new)) >= 1)
        theirs = squid.access_lines()
    mine = await stop_and_read_log(cache)

    assert (unknown.status, unknown.body) == (200, b"first miss")
    assert (warm.status, warm.body) == (200, b"held by squid")
    assert (hit.status, hit.body) == (200, b"held by squid")
    assert (known.status, known.body) == (200, b"new to both")
    # Our side: Squid answered ICP MISS, HIT, MISS; every request went through it.
    assert ours(mine, first) == [("TCP_MISS/200", "FIRST_PARENT_MISS/127.0.0.1")]
    assert ours(mine, held) == [("TCP_MISS/200", "PARENT_HIT/127.0.0.1")]
    assert ours(mine, new) == [("TCP_MISS/200", "CLOSEST_PARENT_MISS/127.0.0.1")]
    # Squid's side: the queries, then the misses fetched directly and the hit from memory.
    assert squid_icp(theirs, first) == ["UDP_MISS/000"]
    assert squid_icp(theirs, held) == ["UDP_HIT/000"]
    assert squid_icp(theirs, new) == ["UDP_MISS/000"]
    assert squid_http(theirs, first) == [("TCP_MISS/200", "HIER_DIRECT/127.0.0.1")]
    http_held = squid_http(theirs, held)
    assert len(http_held) == 2  # the warm-up fetch, then harvest-cache's
    assert http_held[0] == ("TCP_MISS/200", "HIER_DIRECT/127.0.0.1")
    assert http_held[1][0] in SQUID_HITS
    assert http_held[1][1] == "HIER_NONE/-"
    assert squid_http(theirs, new) == [("TCP_MISS/200", "HIER_DIRECT/127.0.0.1")]
    # Each object was fetched once, by Squid.
    assert (origin.hits["/p-first"], origin.hits["/p-held"], origin.hits["/p-new"]) == (1, 1, 1)


async def test_squid_as_our_sibling_serves_its_hit_and_we_fetch_our_miss(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/s-held", static(b"held by squid", FRESH))
    origin.route("/s-new", static(b"new to both", FRESH))
    held, new = origin.url("/s-held"), origin.url("/s-new")
    icp = free_udp_port()
    with running_squid(squid_conf(icp)) as squid:
        warm = await send(squid.port, "GET", held)
        assert (warm.status, warm.body) == (200, b"held by squid")
        cache = await child_of_squid(make_cache, "sibling", squid.port, icp)
        hit = await send(cache.address[1], "GET", held)
        again = await send(cache.address[1], "GET", held)  # kept: asked of nobody
        miss = await send(cache.address[1], "GET", new)
        await wait_for(lambda: len(squid_icp(squid.access_lines(), new)) >= 1)
        theirs = squid.access_lines()
    mine = await stop_and_read_log(cache)

    assert (hit.status, hit.body) == (200, b"held by squid")
    assert (again.status, again.body) == (200, b"held by squid")
    assert (miss.status, miss.body) == (200, b"new to both")
    assert ours(mine, held) == [
        ("TCP_MISS/200", "SIBLING_HIT/127.0.0.1"),
        ("TCP_MEM_HIT/200", "HIER_NONE/-"),
    ]
    assert ours(mine, new) == [("TCP_MISS/200", "HIER_DIRECT/127.0.0.1")]
    assert squid_icp(theirs, held) == ["UDP_HIT/000"]
    assert squid_icp(theirs, new) == ["UDP_MISS/000"]
    http_held = squid_http(theirs, held)
    assert len(http_held) == 2  # the warm-up fetch, then harvest-cache's (with only-if-cached)
    assert http_held[1][0] in SQUID_HITS
    assert http_held[1][1] == "HIER_NONE/-"
    # A sibling's MISS sends us straight to the origin: Squid never sees the request.
    assert squid_http(theirs, new) == []
    assert origin.hits["/s-held"] == 1
    assert origin.hits["/s-new"] == 1  # ours


async def test_we_as_squids_parent_serve_our_hit_and_fetch_its_miss(
    origin: Origin, make_cache: MakeCache
) -> None:
    origin.route("/q-held", static(b"held by harvest", FRESH))
    origin.route("/q-new", static(b"new to both", FRESH))
    held, new = origin.url("/q-held"), origin.url("/q-new")
    cache = await make_cache(
        icp={"port": free_udp_port(), "allow": ["127.0.0.0/8"]}, server={"name": "harvest-parent"}
    )
    warm = await send(cache.address[1], "GET", held)  # harvest-cache holds it now
    assert (warm.status, warm.body) == (200, b"held by harvest")
    peer = f"cache_peer 127.0.0.1 parent {cache.address[1]} {cache.config.icp_port} no-digest"
    with running_squid(squid_conf(free_udp_port(), peer)) as squid:
        hit = await send(squid.port, "GET", held)
        miss = await send(squid.port, "GET", new)
        await wait_for(lambda: len(squid_http(squid.access_lines(), new)) >= 1)
        theirs = squid.access_lines()
    mine = await stop_and_read_log(cache)

    assert (hit.status, hit.body) == (200, b"held by harvest")
    assert (miss.status, miss.body) == (200, b"new to both")
    # Squid's side: it asked us over ICP and fetched both through us.
    assert squid_http(theirs, held) == [("TCP_MISS/200", "PARENT_HIT/127.0.0.1")]
    assert squid_http(theirs, new) == [("TCP_MISS/200", "FIRST_PARENT_MISS/127.0.0.1")]
    # Our side: the warm-up, then the hit served to Squid; the miss fetched from the origin.
    assert [r for r, _ in ours(mine, held)] == ["TCP_MISS/200", "TCP_MEM_HIT/200"]
    assert ours(mine, held)[1][1] == "HIER_NONE/-"
    assert ours(mine, new) == [("TCP_MISS/200", "HIER_DIRECT/127.0.0.1")]
    assert cache.icp is not None
    assert cache.icp.answered == {"HIT": 1, "MISS": 1}
    assert origin.hits["/q-held"] == 1  # our warm-up fetch alone
    assert origin.hits["/q-new"] == 1  # ours, for Squid


async def test_squid_and_we_as_each_others_siblings_trade_hits_over_icp(
    origin: Origin, make_cache: MakeCache
) -> None:
    """ICP both ways at once: each cache queries the other from the socket it answers on."""
    for path in ("/m-squids", "/m-ours", "/m-new"):
        origin.route(path, static(path.encode(), FRESH))
    squids, ourn, new = origin.url("/m-squids"), origin.url("/m-ours"), origin.url("/m-new")
    our_http, our_icp, squid_icp_port = free_port(), free_udp_port(), free_udp_port()
    peer = f"cache_peer 127.0.0.1 sibling {our_http} {our_icp} no-digest"
    # Each needs the other's ports to start: Squid starts first, its probe of our HTTP port
    # answered by a stand-in (see probed_by_squid), then harvest-cache takes that port.
    with contextlib.ExitStack() as stack:
        async with probed_by_squid(our_http):
            squid = stack.enter_context(running_squid(squid_conf(squid_icp_port, peer)))
        cache = await make_cache(
            server={"listen": f"{HOST}:{our_http}", "name": CHILD},
            icp={"port": our_icp, "allow": ["127.0.0.0/8"]},
            hierarchy={"peers": [squid_peer("sibling", squid.port, squid_icp_port)]},
        )
        replies = [
            await send(squid.port, "GET", squids),  # each asks the other (MISS), goes direct
            await send(our_http, "GET", ourn),
            await send(our_http, "GET", squids),  # each takes the other's hit
            await send(squid.port, "GET", ourn),
            await send(squid.port, "GET", new),  # Squid fetches it, then we take its hit
            await send(our_http, "GET", new),
        ]
        await wait_for(lambda: len(squid_icp(squid.access_lines(), new)) >= 1)
        theirs = squid.access_lines()
    mine = await stop_and_read_log(cache)

    bodies = [b"/m-squids", b"/m-ours", b"/m-squids", b"/m-ours", b"/m-new", b"/m-new"]
    assert [(r.status, r.body) for r in replies] == [(200, b) for b in bodies]
    # Squid's HTTP lines: its own misses direct, our objects as SIBLING_HIT; ours served to us.
    assert squid_http(theirs, squids)[0] == ("TCP_MISS/200", "HIER_DIRECT/127.0.0.1")
    assert squid_http(theirs, ourn) == [("TCP_MISS/200", "SIBLING_HIT/127.0.0.1")]
    assert squid_http(theirs, new)[0] == ("TCP_MISS/200", "HIER_DIRECT/127.0.0.1")
    for url in (squids, new):
        served = squid_http(theirs, url)
        assert len(served) == 2
        assert served[1][0] in SQUID_HITS
        assert served[1][1] == "HIER_NONE/-"
    # The ICP queries Squid answered (ours): MISS for what it lacked, HIT for what it held.
    assert squid_icp(theirs, ourn) == ["UDP_MISS/000"]
    assert squid_icp(theirs, squids) == ["UDP_HIT/000"]
    assert squid_icp(theirs, new) == ["UDP_HIT/000"]
    # Our lines: the mirror image.
    assert ours(mine, ourn) == [
        ("TCP_MISS/200", "HIER_DIRECT/127.0.0.1"),
        ("TCP_MEM_HIT/200", "HIER_NONE/-"),
    ]
    assert ours(mine, squids) == [("TCP_MISS/200", "SIBLING_HIT/127.0.0.1")]
    assert ours(mine, new) == [("TCP_MISS/200", "SIBLING_HIT/127.0.0.1")]
    assert cache.icp is not None
    assert cache.icp.answered == {"MISS": 2, "HIT": 1}  # Squid's: squids and new MISS, ourn HIT
    assert [origin.hits[p] for p in ("/m-squids", "/m-ours", "/m-new")] == [1, 1, 1]


async def test_a_sibling_hit_squid_cannot_serve_sends_us_to_the_origin(
    origin: Origin, make_cache: MakeCache
) -> None:
    """Squid answers ICP by URL: for a response that varies it says HIT whichever variant it
    holds, then answers our only-if-cached request for another variant 504. A sibling's
    504 only means "not here": we take the next hop, the origin."""
    origin.route("/s-vary", static(b"varies", {**FRESH, "Vary": "Accept-Encoding"}))
    url = origin.url("/s-vary")
    icp = free_udp_port()
    with running_squid(squid_conf(icp)) as squid:
        warm = await send(squid.port, "GET", url, headers=[("Accept-Encoding", "gzip")])
        cache = await child_of_squid(make_cache, "sibling", squid.port, icp)
        got = await send(cache.address[1], "GET", url, headers=[("Accept-Encoding", "br")])
        await wait_for(lambda: len(squid_http(squid.access_lines(), url)) >= 2)
        theirs = squid.access_lines()
    mine = await stop_and_read_log(cache)

    assert (warm.status, warm.body) == (200, b"varies")
    assert (got.status, got.body) == (200, b"varies")
    assert squid_icp(theirs, url) == ["UDP_HIT/000"]
    assert squid_http(theirs, url) == [
        ("TCP_MISS/200", "HIER_DIRECT/127.0.0.1"),  # the warm-up, gzip
        ("TCP_MISS/504", "HIER_NONE/-"),  # ours, br, only-if-cached: not fetched
    ]
    assert ours(mine, url) == [("TCP_MISS/200", "HIER_DIRECT/127.0.0.1")]
    assert origin.hits["/s-vary"] == 2  # Squid's warm-up, then ours
