"""Caches chained into a hierarchy (RFC 2186, RFC 2187): parents, siblings, ICP on loopback.

Every cache here is ours, started in-process with its own store, access log, name (its Via
name, which siblings are configured under) and ICP port. The access logs, in Squid's native
format, say where each response came from (``PARENT_HIT/127.0.0.1``, ``HIER_DIRECT/...``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import cast

import pytest

from harvest_cache.hierarchy.icp import IcpMessage, Opcode, decode, encode, reply
from harvest_cache.server.app import CacheServer
from tests.support import (
    LogLine,
    MakeCache,
    Origin,
    RawServer,
    free_port,
    free_udp_port,
    open_proxy,
    proxy_client,
    read_request_head,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
    wait_until,
)

FRESH = {"Cache-Control": "max-age=600"}  # fresh long enough for ICP HITs (>= 30 s more)
LOOPBACK = "127.0.0.1"


async def start_cache(
    make_cache: MakeCache,
    tmp_path: Path,
    name: str,
    *,
    peers: list[dict[str, object]] | None = None,
    http_port: int = 0,
    icp_port: int | None = None,
    dns: dict[str, object] | None = None,
    upstream: dict[str, object] | None = None,
    **hierarchy: object,
) -> CacheServer:
    """A cache named ``name`` with a store, log and ICP socket of its own."""
    home = tmp_path / name
    icp = {"port": icp_port or free_udp_port(), "allow": ["127.0.0.0/8"]}
    return await make_cache(
        server={"name": name, "listen": f"{LOOPBACK}:{http_port}"},
        cache={"dir": str(home / "cache")},
        log={"access_log": str(home / "access.log")},
        icp=icp,
        # (No cache digests: these tests are of ICP; tests/integration/test_digests.py has
        # theirs. A digest fetched at start-up would also add lines to the peers' logs.)
        hierarchy={"peers": peers or [], "digests": False, **hierarchy},
        dns=dns or {},
        upstream=upstream or {},
    )


def peer(cache: CacheServer, role: str = "parent", **options: object) -> dict[str, object]:
    """A ``[[hierarchy.peers]]`` table for one of our running caches, named as it is."""
    return {
        "name": cache.name,
        "host": LOOPBACK,
        "http_port": cache.address[1],
        "icp_port": cache.config.icp_port,
        "role": role,
        **options,
    }


def lines_for(log: list[LogLine], url: str) -> list[LogLine]:
    return [line for line in log if line.url == url]


def codes(log: list[LogLine], url: str) -> list[str]:
    return [f"{line.hierarchy}/{line.peer}" for line in lines_for(log, url)]


async def get(cache: CacheServer, url: str, *, within: float = 5.0) -> tuple[int, bytes]:
    async with proxy_client(cache) as client, asyncio.timeout(within):
        resp, body = await client.get(url)
    return resp.status, body


# -- 1. child -> parent -> grandparent -> origin ----------------------------------------------


@pytest.fixture
async def chain(
    make_cache: MakeCache, tmp_path: Path
) -> tuple[CacheServer, CacheServer, CacheServer]:
    grandparent = await start_cache(make_cache, tmp_path, "grandparent")
    parent = await start_cache(make_cache, tmp_path, "parent", peers=[peer(grandparent)])
    child = await start_cache(make_cache, tmp_path, "child", peers=[peer(parent)])
    return child, parent, grandparent


async def test_a_miss_everywhere_climbs_the_chain_and_the_top_goes_direct(
    origin: Origin, chain: tuple[CacheServer, CacheServer, CacheServer]
) -> None:
    child, parent, grandparent = chain
    origin.route("/miss", static(b"m" * 100, FRESH))
    url = origin.url("/miss")
    assert await get(child, url) == (200, b"m" * 100)
    assert origin.hits["/miss"] == 1
    # Each asked its parent over ICP, got a MISS (no RTT reported) and fetched through it.
    assert parent.icp is not None
    assert parent.icp.answered.get("MISS") == 1
    assert grandparent.icp is not None
    assert grandparent.icp.answered.get("MISS") == 1
    child_log = await stop_and_read_log(child)
    parent_log = await stop_and_read_log(parent)
    top_log = await stop_and_read_log(grandparent)
    assert codes(child_log, url) == [f"FIRST_PARENT_MISS/{LOOPBACK}"]
    assert codes(parent_log, url) == [f"FIRST_PARENT_MISS/{LOOPBACK}"]
    assert codes(top_log, url) == [f"HIER_DIRECT/{LOOPBACK}"]
    for log in (child_log, parent_log, top_log):
        assert [(line.result, line.status) for line in lines_for(log, url)] == [("TCP_MISS", 200)]


async def test_an_object_the_parent_holds_is_a_parent_hit(
    origin: Origin, chain: tuple[CacheServer, CacheServer, CacheServer]
) -> None:
    child, parent, grandparent = chain
    origin.route("/obj", static(b"object", FRESH))
    url = origin.url("/obj")
    assert await get(parent, url) == (200, b"object")  # now held by parent and grandparent
    assert await get(child, url) == (200, b"object")
    assert origin.hits["/obj"] == 1
    assert child.neighbours is not None
    health = child.neighbours.health["parent"]
    assert (health.queries, health.replies, health.hits) == (1, 1, 1)
    child_log = await stop_and_read_log(child)
    parent_log = await stop_and_read_log(parent)
    top_log = await stop_and_read_log(grandparent)
    assert codes(child_log, url) == [f"PARENT_HIT/{LOOPBACK}"]
    # The parent served the child from its store; the grandparent saw one request only.
    assert [line.result for line in lines_for(parent_log, url)] == ["TCP_MISS", "TCP_MEM_HIT"]
    assert codes(parent_log, url) == [f"FIRST_PARENT_MISS/{LOOPBACK}", "HIER_NONE/-"]
    assert codes(top_log, url) == [f"HIER_DIRECT/{LOOPBACK}"]


# -- 2. siblings ------------------------------------------------------------------------------


@pytest.fixture
async def siblings(make_cache: MakeCache, tmp_path: Path) -> tuple[CacheServer, CacheServer]:
    """Siblings "sib-a" and "sib-b", each configured as the other's, ICP both ways."""
    ports = {n: (free_port(), free_udp_port()) for n in ("sib-a", "sib-b")}

    def sibling(name: str) -> dict[str, object]:
        http, icp = ports[name]
        return {
            "name": name,
            "host": LOOPBACK,
            "http_port": http,
            "icp_port": icp,
            "role": "sibling",
        }

    a = await start_cache(
        make_cache,
        tmp_path,
        "sib-a",
        peers=[sibling("sib-b")],
        http_port=ports["sib-a"][0],
        icp_port=ports["sib-a"][1],
    )
    b = await start_cache(
        make_cache,
        tmp_path,
        "sib-b",
        peers=[sibling("sib-a")],
        http_port=ports["sib-b"][0],
        icp_port=ports["sib-b"][1],
    )
    return a, b


async def test_an_object_a_sibling_holds_is_a_sibling_hit(
    origin: Origin, siblings: tuple[CacheServer, CacheServer]
) -> None:
    a, b = siblings
    origin.route("/held", static(b"held by b", FRESH))
    url = origin.url("/held")
    assert await get(b, url) == (200, b"held by b")
    assert await get(a, url) == (200, b"held by b")
    assert origin.hits["/held"] == 1
    a_log = await stop_and_read_log(a)
    b_log = await stop_and_read_log(b)
    assert codes(a_log, url) == [f"SIBLING_HIT/{LOOPBACK}"]
    # B's own fetch went direct (A's MISS counts for nothing); then it served A a hit.
    assert codes(b_log, url) == [f"HIER_DIRECT/{LOOPBACK}", "HIER_NONE/-"]
    assert [line.result for line in lines_for(b_log, url)] == ["TCP_MISS", "TCP_MEM_HIT"]


async def test_what_no_sibling_holds_is_fetched_direct_and_the_sibling_fetches_nothing(
    origin: Origin, siblings: tuple[CacheServer, CacheServer]
) -> None:
    a, b = siblings
    origin.route("/nobody", static(b"fresh from the origin", FRESH))
    url = origin.url("/nobody")
    assert await get(a, url) == (200, b"fresh from the origin")
    assert origin.hits["/nobody"] == 1
    assert b.icp is not None
    assert b.icp.answered.get("MISS") == 1
    a_log = await stop_and_read_log(a)
    b_log = await stop_and_read_log(b)
    # Sibling MISS: no ICP timeout, no parent; straight to the origin.
    assert codes(a_log, url) == [f"HIER_DIRECT/{LOOPBACK}"]
    assert lines_for(b_log, url) == []  # asked over ICP only, never over HTTP


async def test_a_request_from_a_sibling_gets_hits_only(
    origin: Origin, siblings: tuple[CacheServer, CacheServer]
) -> None:
    """A request whose last Via entry names a configured sibling is never fetched, even
    without only-if-cached (Squid's miss_access): 504 unless held."""
    _, b = siblings
    origin.route("/uncached", static(b"u", FRESH))
    origin.route("/cached", static(b"c", FRESH))
    cached, uncached = origin.url("/cached"), origin.url("/uncached")
    assert await get(b, cached) == (200, b"c")
    reader, writer = await open_proxy(b.address[1])
    try:
        for url in (uncached, cached):
            writer.write(request_bytes("GET", url, headers=[("Via", "1.1 sib-a")]))
        await writer.drain()
        miss = await read_response(reader)
        hit = await read_response(reader)
    finally:
        writer.close()
    assert miss.status == 504, miss
    assert (hit.status, hit.body) == (200, b"c")
    assert origin.hits["/uncached"] == 0
    assert origin.hits["/cached"] == 1
    b_log = await stop_and_read_log(b)
    assert [(line.result, line.status) for line in lines_for(b_log, uncached)] == [
        ("TCP_MISS", 504)
    ]


async def test_a_request_from_an_unknown_cache_is_fetched_as_usual(
    origin: Origin, siblings: tuple[CacheServer, CacheServer]
) -> None:
    """Only a configured sibling's Via restricts a request to hits."""
    _, b = siblings
    origin.route("/other", static(b"o", FRESH))
    url = origin.url("/other")
    reader, writer = await open_proxy(b.address[1])
    try:
        writer.write(request_bytes("GET", url, headers=[("Via", "1.1 stranger, 1.0 sib-a-not")]))
        await writer.drain()
        resp = await read_response(reader)
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, b"o")
    assert origin.hits["/other"] == 1


# -- 3. domain delegation ---------------------------------------------------------------------


async def test_a_parent_bound_to_a_domain_gets_its_requests_alone(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    # (Test caches resolve no names: this one needs localhost for its fetches.)
    local_only = await start_cache(
        make_cache, tmp_path, "p-localhost", dns={"hosts_file": str(hosts)}
    )
    other = await start_cache(make_cache, tmp_path, "p-other")
    child = await start_cache(
        make_cache,
        tmp_path,
        "child",
        peers=[peer(local_only, domains=["localhost"]), peer(other)],
    )
    origin.route("/x", static(b"x", FRESH))
    origin.route("/y", static(b"y", FRESH))
    x = f"http://localhost:{origin.port}/x"
    y = origin.url("/y")
    assert await get(child, x) == (200, b"x")
    assert await get(child, y) == (200, b"y")
    assert (origin.hits["/x"], origin.hits["/y"]) == (1, 1)
    assert child.neighbours is not None
    # Only the bound parent was asked about localhost; only the other about 127.0.0.1.
    assert child.neighbours.health["p-localhost"].queries == 1
    assert child.neighbours.health["p-other"].queries == 1
    child_log = await stop_and_read_log(child)
    local_log = await stop_and_read_log(local_only)
    other_log = await stop_and_read_log(other)
    assert [line.url for line in local_log] == [x]
    assert [line.url for line in other_log] == [y]
    assert codes(child_log, x) == [f"FIRST_PARENT_MISS/{LOOPBACK}"]
    assert codes(child_log, y) == [f"FIRST_PARENT_MISS/{LOOPBACK}"]


# -- 4. a parent going away -------------------------------------------------------------------


async def test_a_parent_that_went_away_is_bypassed_quickly(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent = await start_cache(make_cache, tmp_path, "parent")
    child = await start_cache(
        make_cache, tmp_path, "child", peers=[peer(parent)], icp_timeout_max=0.5
    )
    for path in ("/before", "/after", "/later"):
        origin.route(path, static(path.encode(), FRESH))
    assert await get(child, origin.url("/before")) == (200, b"/before")
    await parent.stop(0.5)
    started = time.monotonic()
    assert await get(child, origin.url("/after"), within=3.0) == (200, b"/after")
    assert time.monotonic() - started < 0.5 + 2.0  # ICP wait + the connect timeout at most
    assert child.neighbours is not None
    health = child.neighbours.health["parent"]
    assert health.connect_failures == 1
    assert health.down(asyncio.get_running_loop().time())
    # Down now: neither queried nor tried; straight to the origin.
    queries = health.queries
    assert await get(child, origin.url("/later"), within=3.0) == (200, b"/later")
    assert health.queries == queries
    assert health.connect_failures == 1
    child_log = await stop_and_read_log(child)
    assert codes(child_log, origin.url("/before")) == [f"FIRST_PARENT_MISS/{LOOPBACK}"]
    [after] = lines_for(child_log, origin.url("/after"))
    assert (after.status, after.hierarchy) == (200, "TIMEOUT_HIER_DIRECT")
    assert codes(child_log, origin.url("/later")) == [f"HIER_DIRECT/{LOOPBACK}"]


# -- 5. peers that answer garbage -------------------------------------------------------------


class FakePeer(asyncio.DatagramProtocol):
    """A peer's ICP socket that answers each query with ``answer(query_bytes)``, sent from
    ``reply_from`` (another socket) if set, else from its own."""

    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self.answer = answer
        self.transport: asyncio.DatagramTransport | None = None
        self.reply_from: asyncio.DatagramTransport | None = None
        self.queries = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.queries += 1
        out = self.reply_from or self.transport
        assert out is not None
        out.sendto(self.answer(data), addr)

    @property
    def port(self) -> int:
        assert self.transport is not None
        port: int = self.transport.get_extra_info("sockname")[1]
        return port


def random_bytes(data: bytes) -> bytes:
    return random.Random(len(data)).randbytes(64)


def hit_for_another_number(data: bytes) -> bytes:
    asked = decode(data)
    wrong = IcpMessage(asked.opcode, asked.request_number + 1000, asked.url)
    return encode(reply(wrong, Opcode.HIT))


def hit(data: bytes) -> bytes:
    return encode(reply(decode(data), Opcode.HIT))


@pytest.fixture
async def fake_peers() -> AsyncIterator[dict[str, FakePeer]]:
    loop = asyncio.get_running_loop()
    peers: dict[str, FakePeer] = {}
    transports: list[asyncio.DatagramTransport] = []
    try:
        for name, answer in (
            ("garbage", random_bytes),
            ("wrong-number", hit_for_another_number),
            ("wrong-port", hit),
        ):
            transport, protocol = await loop.create_datagram_endpoint(
                lambda a=answer: FakePeer(a), local_addr=(LOOPBACK, 0)
            )
            transports.append(cast(asyncio.DatagramTransport, transport))
            peers[name] = protocol
        other, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=(LOOPBACK, 0)
        )
        transports.append(cast(asyncio.DatagramTransport, other))
        peers["wrong-port"].reply_from = cast(asyncio.DatagramTransport, other)
        yield peers
    finally:
        for transport in transports:
            transport.close()


@pytest.mark.parametrize("role", ["sibling", "parent"])
async def test_peers_answering_garbage_are_ignored_and_the_cache_goes_direct(
    origin: Origin,
    make_cache: MakeCache,
    tmp_path: Path,
    fake_peers: dict[str, FakePeer],
    role: str,
) -> None:
    """Random bytes, a HIT for a query never sent, a HIT from a port never asked: none of
    them counts. (Their HTTP ports refuse: a parent is then tried and found down.)"""
    child = await start_cache(
        make_cache,
        tmp_path,
        "child",
        peers=[
            {
                "name": name,
                "host": LOOPBACK,
                "http_port": free_port(),
                "icp_port": fake.port,
                "role": role,
            }
            for name, fake in fake_peers.items()
        ],
        icp_timeout_max=0.3,
    )
    assert child.icp is not None
    assert child.neighbours is not None
    origin.route("/g", static(b"g", FRESH))
    url = origin.url("/g")
    started = time.monotonic()
    assert await get(child, url, within=3.0) == (200, b"g")
    assert time.monotonic() - started < 1.0  # the 0.3 s ICP wait, then refused at once
    assert all(fake.queries == 1 for fake in fake_peers.values())
    await wait_until(lambda: child.icp is not None and child.icp.dropped == 3, within=2.0)
    assert child.neighbours.unexpected_replies == 2  # (the random bytes do not even decode)
    for name in fake_peers:
        health = child.neighbours.health[name]
        assert (health.replies, health.hits, health.timeouts) == (0, 0, 1), name
    expected_failures = 1 if role == "parent" else 0  # a sibling without a hit is not tried
    assert [child.neighbours.health[n].connect_failures for n in fake_peers] == [
        expected_failures
    ] * 3
    # Still serving: a hit from its own store, and another miss, direct again.
    assert await get(child, url, within=3.0) == (200, b"g")
    origin.route("/h", static(b"h", FRESH))
    assert await get(child, origin.url("/h"), within=3.0) == (200, b"h")
    assert origin.hits["/g"] == 1
    log = await stop_and_read_log(child)
    assert codes(log, url) == [f"TIMEOUT_HIER_DIRECT/{LOOPBACK}", "HIER_NONE/-"]
    [h] = lines_for(log, origin.url("/h"))
    assert h.status == 200
    assert h.hierarchy.endswith("HIER_DIRECT")


# -- 6. always_direct and never_direct --------------------------------------------------------


async def test_never_direct_with_no_parent_for_the_domain_fails_with_504(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent = await start_cache(make_cache, tmp_path, "parent")
    child = await start_cache(
        make_cache,
        tmp_path,
        "child",
        peers=[peer(parent, domains=[".example.org"])],
        never_direct=[{}],
    )
    origin.route("/nd", static(b"nd", FRESH))
    url = origin.url("/nd")
    status, _ = await get(child, url)
    assert status == 504
    assert origin.hits["/nd"] == 0
    child_log = await stop_and_read_log(child)
    parent_log = await stop_and_read_log(parent)
    assert [(line.status, line.hierarchy) for line in lines_for(child_log, url)] == [
        (504, "NO_DIRECT_FAIL")
    ]
    assert parent_log == []


async def test_never_direct_with_the_parent_unreachable_fails_with_504(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    child = await start_cache(
        make_cache,
        tmp_path,
        "child",
        peers=[{"name": "gone", "host": LOOPBACK, "http_port": free_port(), "icp_port": 0}],
        never_direct=[{"url_regex": "^http://"}],
    )
    origin.route("/nd", static(b"nd", FRESH))
    url = origin.url("/nd")
    status, _ = await get(child, url)
    assert origin.hits["/nd"] == 0
    log = await stop_and_read_log(child)
    assert [(line.status, line.hierarchy) for line in lines_for(log, url)] == [
        (504, "NO_DIRECT_FAIL")
    ]
    assert status == 504


async def test_always_direct_bypasses_a_parent(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent = await start_cache(make_cache, tmp_path, "parent")
    child = await start_cache(
        make_cache,
        tmp_path,
        "child",
        peers=[peer(parent)],
        always_direct=[{"url_regex": r"/direct/"}],
    )
    origin.route("/direct/a", static(b"a", FRESH))
    origin.route("/via/b", static(b"b", FRESH))
    direct, via = origin.url("/direct/a"), origin.url("/via/b")
    assert await get(child, direct) == (200, b"a")
    assert parent.icp is not None
    assert parent.icp.answered == {}
    assert await get(child, via) == (200, b"b")
    assert parent.icp.answered == {"MISS": 1}
    child_log = await stop_and_read_log(child)
    parent_log = await stop_and_read_log(parent)
    assert codes(child_log, direct) == [f"HIER_DIRECT/{LOOPBACK}"]
    assert codes(child_log, via) == [f"FIRST_PARENT_MISS/{LOOPBACK}"]
    assert [line.url for line in parent_log] == [via]


# -- 7. proxy_only ----------------------------------------------------------------------------


async def test_nothing_a_proxy_only_parent_sends_is_stored(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent = await start_cache(make_cache, tmp_path, "parent")
    child = await start_cache(make_cache, tmp_path, "child", peers=[peer(parent, proxy_only=True)])
    origin.route("/po", static(b"kept by the parent", FRESH))
    url = origin.url("/po")
    for _ in range(2):
        assert await get(child, url) == (200, b"kept by the parent")
    assert origin.hits["/po"] == 1
    assert child.store.memory_view.get(url) is None
    assert parent.store.memory_view.get(url) is not None
    child_log = await stop_and_read_log(child)
    parent_log = await stop_and_read_log(parent)
    assert codes(child_log, url) == [f"FIRST_PARENT_MISS/{LOOPBACK}", f"PARENT_HIT/{LOOPBACK}"]
    assert [line.result for line in lines_for(child_log, url)] == ["TCP_MISS", "TCP_MISS"]
    assert [line.result for line in lines_for(parent_log, url)] == ["TCP_MISS", "TCP_MEM_HIT"]


# -- more: a sibling's HIT that turns out stale, and parents in a loop ---------------------


async def test_a_sibling_hit_it_no_longer_holds_falls_through_to_the_next_hop(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """ICP said HIT, but over HTTP the sibling answers only-if-cached with 504: not held
    after all. The request goes on, direct, without the client noticing."""
    heads: list[tuple[str, list[tuple[str, str]]]] = []

    async def not_held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await read_request_head(reader))
        writer.write(b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the cache closes it

    http = await RawServer(not_held).start()
    loop = asyncio.get_running_loop()
    transport, fake = await loop.create_datagram_endpoint(
        lambda: FakePeer(hit), local_addr=(LOOPBACK, 0)
    )
    try:
        child = await start_cache(
            make_cache,
            tmp_path,
            "child",
            peers=[
                {
                    "name": "liar",
                    "host": LOOPBACK,
                    "http_port": http.port,
                    "icp_port": fake.port,
                    "role": "sibling",
                }
            ],
        )
        origin.route("/s", static(b"from the origin", FRESH))
        url = origin.url("/s")
        assert await get(child, url) == (200, b"from the origin")
    finally:
        transport.close()
        await http.stop()
    assert origin.hits["/s"] == 1
    [(line, fields)] = heads
    assert line == f"GET {url} HTTP/1.1"  # absolute form, to a proxy
    cache_control = ", ".join(v for n, v in fields if n.lower() == "cache-control")
    assert "only-if-cached" in cache_control
    assert any(n.lower() == "via" and "child" in v for n, v in fields)
    assert child.neighbours is not None
    assert child.neighbours.health["liar"].connect_failures == 0  # it did answer
    log = await stop_and_read_log(child)
    assert codes(log, url) == [f"HIER_DIRECT/{LOOPBACK}"]


async def test_parents_of_each_other_do_not_hang_a_request(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """A misconfiguration: A and B each other's parent. A forwards the miss to B, B to A,
    who finds its name in Via: that request must go straight to the origin (docs: a loop
    goes direct), not wait on A's own fetch, which waits on B."""
    ports = {n: (free_port(), free_udp_port()) for n in ("loop-a", "loop-b")}

    async def start(name: str, other: str) -> CacheServer:
        http, icp = ports[other]
        return await start_cache(
            make_cache,
            tmp_path,
            name,
            peers=[{"name": other, "host": LOOPBACK, "http_port": http, "icp_port": icp}],
            http_port=ports[name][0],
            icp_port=ports[name][1],
            upstream={"read_timeout": 3.0},  # how long the stall lasts if it happens
        )

    a = await start("loop-a", "loop-b")
    b = await start("loop-b", "loop-a")
    origin.route("/loop", static(b"round and round", FRESH))
    url = origin.url("/loop")
    started = time.monotonic()
    assert await get(a, url, within=8.0) == (200, b"round and round")
    elapsed = time.monotonic() - started
    a_log = await stop_and_read_log(a)
    b_log = await stop_and_read_log(b)
    assert origin.hits["/loop"] == 1, (a_log, b_log)
    assert elapsed < 1.5, (a_log, b_log)
    # A sent the miss to B, B sent it back to A, whose second request went direct.
    assert sorted(codes(a_log, url)) == [
        f"FIRST_PARENT_MISS/{LOOPBACK}",
        f"HIER_DIRECT/{LOOPBACK}",
    ]
    assert codes(b_log, url) == [f"FIRST_PARENT_MISS/{LOOPBACK}"]
