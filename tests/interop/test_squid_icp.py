"""A real Squid 5.7 asks harvest-cache over ICP (RFC 2186) and fetches its hit.

Squid is configured with harvest-cache as a sibling (PEERING-NOTES: Squid's ICP socket on
the wildcard address, netdb out of the way, no persistent server connections so that its
access log names the hierarchy code of each request). When harvest-cache holds a fresh
object, Squid's query gets a HIT from harvest-cache's ICP port, Squid fetches the object from
it with only-if-cached, and logs SIBLING_HIT; the origin is asked once, by harvest-cache.
For an object harvest-cache does not hold, the MISS sends Squid to the origin (a sibling
never serves misses).
"""

from __future__ import annotations

from harvest_cache.server.app import CacheServer
from tests.interop.conftest import running_squid, send
from tests.support import MakeCache, Origin, free_udp_port, static, wait_until


def sibling_conf(cache: CacheServer) -> str:
    return (
        f"icp_port {free_udp_port()}\n"
        f"cache_peer 127.0.0.1 sibling {cache.address[1]} {cache.config.icp.port}\n"
        "server_persistent_connections off\n"
        "minimum_direct_rtt 0\n"
        "minimum_direct_hops 0\n"
        # (with Squid's dynamic timeout, worked out from recent round trips, a query timed
        # out once while the machine was busy: a fixed one waits for the reply that comes)
        "icp_query_timeout 2000\n"
    )


def logged(lines: list[str], url: str) -> list[tuple[str, str]]:
    """(result/status, hierarchy/peer) of Squid's lines for ``url``."""
    return [(f[3], f[8]) for f in (line.split() for line in lines) if len(f) > 8 and f[6] == url]


async def test_squid_takes_a_sibling_hit_from_harvest_over_icp(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache(icp={"port": free_udp_port(), "allow": ["127.0.0.0/8"]})
    origin.route("/shared", static(b"shared body", {"Cache-Control": "max-age=600"}))
    origin.route("/only-origin", static(b"origin body", {"Cache-Control": "max-age=600"}))
    shared, fresh = origin.url("/shared"), origin.url("/only-origin")
    assert (await send(cache.address[1], "GET", shared)).body == b"shared body"
    with running_squid(sibling_conf(cache)) as squid:
        hit = await send(squid.port, "GET", shared)
        miss = await send(squid.port, "GET", fresh)
        await wait_until(lambda: len(logged(squid.access_lines(), fresh)) >= 1, within=5)
        lines = squid.access_lines()
    assert (hit.status, hit.body) == (200, b"shared body")
    assert (miss.status, miss.body) == (200, b"origin body")
    assert logged(lines, shared) == [("TCP_MISS/200", "SIBLING_HIT/127.0.0.1")]
    assert logged(lines, fresh)[0][1].startswith("HIER_DIRECT/")
    assert origin.hits["/shared"] == 1  # only harvest-cache's own fetch
    assert origin.hits["/only-origin"] == 1  # Squid's, straight to the origin
    assert cache.icp is not None
    assert cache.icp.answered == {"HIT": 1, "MISS": 1}
