"""A real Squid 5.7 reads harvest-cache's cache digest (Squid's own format and URL) and
routes requests by it: CD_PARENT_HIT, with no ICP query.

harvest-cache is Squid's parent without ICP (`no-query`), so only the digest can tell Squid
that the parent holds an object. Squid asks for a peer's digest when it first needs it,
at its first request; from then on it routes by it.
"""

from __future__ import annotations

from pathlib import Path

from harvest_cache.hierarchy.digest import key
from tests.interop.conftest import running_squid, send
from tests.support import MakeCache, Origin, static, stop_and_read_log, wait_until

DIGEST = "/squid-internal-periodic/store_digest"


def logged(lines: list[str], url: str) -> list[tuple[str, str]]:
    """(result/status, hierarchy/peer) of Squid's lines for ``url``."""
    return [(f[3], f[8]) for f in (line.split() for line in lines) if len(f) > 8 and f[6] == url]


def log_text(path: Path | None) -> str:
    assert path is not None
    return path.read_text() if path.exists() else ""


async def test_squid_routes_by_harvests_digest(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache(hierarchy={"digest_rebuild_period": 1.0})
    for path in ("/held", "/first", "/not-held"):
        origin.route(path, static(path.encode(), {"Cache-Control": "max-age=3600"}))
    held, first, other = origin.url("/held"), origin.url("/first"), origin.url("/not-held")
    assert (await send(cache.address[1], "GET", held)).body == b"/held"
    assert cache.digests is not None
    digests = cache.digests
    await wait_until(lambda: digests.own_entries == 1, within=5)
    conf = (
        f"cache_peer 127.0.0.1 parent {cache.address[1]} 0 no-query\n"
        "server_persistent_connections off\n"
        "minimum_direct_rtt 0\n"
        "minimum_direct_hops 0\n"
        "digest_generation off\n"
    )
    our_log = cache.config.log.access_log
    with running_squid(conf) as squid:
        # The first request makes Squid want the digest; it fetches it from us.
        assert (await send(squid.port, "GET", first)).status == 200
        await wait_until(lambda: DIGEST in log_text(our_log), within=10)
        hit = await send(squid.port, "GET", held)
        miss = await send(squid.port, "GET", other)
        await wait_until(lambda: len(logged(squid.access_lines(), other)) >= 1, within=5)
        lines = squid.access_lines()
    assert (hit.status, hit.body) == (200, b"/held")
    assert (miss.status, miss.body) == (200, b"/not-held")
    assert logged(lines, held) == [("TCP_MISS/200", "CD_PARENT_HIT/127.0.0.1")]
    # Not in the digest: Squid's next choice for a no-query parent.
    assert logged(lines, other) == [("TCP_MISS/200", "FIRSTUP_PARENT/127.0.0.1")]
    ours = [line for line in await stop_and_read_log(cache) if line.url.endswith(DIGEST)]
    assert [line.status for line in ours] == [200]
    assert origin.hits["/held"] == 1  # ours; Squid's request was a hit here


async def test_harvest_routes_by_squids_digest(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """The other way round: Squid builds its digest (rebuilt every second here), harvest-cache
    fetches it and sends a request for an object Squid holds there without asking
    (CD_PARENT_HIT). Squid keeps its digest under its own name (visible_hostname, here
    localhost), so the peer is named so, and makes one only with a disk cache (its capacity
    comes from it)."""
    origin.route("/in-squid", static(b"squid body", {"Cache-Control": "max-age=3600"}))
    url = origin.url("/in-squid")
    conf = (
        "cache_dir ufs $SQUID_DIR/disk 16 4 16\n"
        "digest_generation on\n"
        "digest_rebuild_period 1 second\n"
        "digest_rewrite_period 1 second\n"
    )
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    with running_squid(conf) as squid:
        assert (await send(squid.port, "GET", url)).body == b"squid body"
        cache = await make_cache(
            hierarchy={
                "digest_fetch_period": 1.0,
                "peers": [
                    {
                        "name": "squid",
                        "host": "localhost",
                        "http_port": squid.port,
                        "icp_port": 0,
                        "role": "parent",
                    }
                ],
            },
            log={"access_log": str(tmp_path / "harvest.log")},
            dns={"hosts_file": str(hosts)},
            cache={"dir": str(tmp_path / "harvest-cache")},
        )
        assert cache.digests is not None
        assert cache.neighbours is not None
        digests, peer = cache.digests, cache.neighbours.peers[0]

        def listed() -> bool:
            held = digests.held(peer)
            return held is not None and key(url) in held

        await wait_until(listed, within=15)
        assert (await send(cache.address[1], "GET", url)).body == b"squid body"

        def results() -> set[str]:
            return {result for result, _ in logged(squid.access_lines(), url)}

        # (Squid's log daemon writes the line a moment after the answer)
        await wait_until(lambda: len(results()) > 1, within=5)
        assert results() & {"TCP_MEM_HIT/200", "TCP_HIT/200"}, results()
    ours = [line for line in await stop_and_read_log(cache) if line.url == url]
    assert [(line.hierarchy, line.peer) for line in ours] == [("CD_PARENT_HIT", "127.0.0.1")]
    assert origin.hits["/in-squid"] == 1
