"""The cache answering ICP queries (RFC 2186) on a real UDP socket on loopback."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from harvest_cache.hierarchy.endpoint import IcpEndpoint
from harvest_cache.hierarchy.icp import IcpMessage, Opcode, decode, encode, query, reply
from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    Origin,
    ProxyClient,
    Querier,
    cache_config,
    free_udp_port,
    proxy_client,
    static,
    udp_querier,
    wait_until,
)


async def icp_cache(make_cache: MakeCache, **sections: dict[str, object]) -> CacheServer:
    port = free_udp_port()
    icp: dict[str, object] = {"port": port, "allow": ["127.0.0.0/8"]}
    icp.update(sections.pop("icp", {}))
    return await make_cache(icp=icp, **sections)


def endpoint_of(cache: CacheServer) -> IcpEndpoint:
    assert cache.icp is not None, "the cache has no ICP port"
    return cache.icp


@pytest.fixture
async def peer() -> AsyncIterator[Querier]:
    """A peer's ICP socket, closed after the test."""
    async with udp_querier() as querier:
        yield querier


def icp_port(cache: CacheServer) -> int:
    return cache.config.icp.port


async def store(client: ProxyClient, url: str) -> None:
    await client.get(url)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Cache-Control": "max-age=600"}, Opcode.HIT),
        ({"Cache-Control": "max-age=20"}, Opcode.MISS),  # fresh, but not for 30 s more
        ({"Cache-Control": "max-age=0", "ETag": '"s"'}, Opcode.MISS),  # stale
        ({"Cache-Control": "no-store"}, Opcode.MISS),  # never stored
    ],
)
async def test_rfc2186_hit_only_for_an_object_fresh_for_30_seconds_more(
    origin: Origin, make_cache: MakeCache, headers: dict[str, str], expected: Opcode, peer: Querier
) -> None:
    cache = await icp_cache(make_cache)
    origin.route("/o", static(b"o", headers))
    url = origin.url("/o")
    async with proxy_client(cache) as client:
        await store(client, url)
    answer = await peer.answer(icp_port(cache), query(4242, url))
    assert answer.opcode is expected
    assert (answer.request_number, answer.url) == (4242, url)  # both echoed


async def test_rfc2186_miss_for_what_is_not_stored(make_cache: MakeCache, peer: Querier) -> None:
    cache = await icp_cache(make_cache)
    answer = await peer.answer(icp_port(cache), query(1, "http://127.0.0.1:9/nothing"))
    assert answer.opcode is Opcode.MISS


async def test_rfc2186_hit_for_an_object_on_disk_only(
    origin: Origin, make_cache: MakeCache, peer: Querier
) -> None:
    """With no memory tier, the answer waits for the disk tier's lookup (off the loop)."""
    cache = await icp_cache(make_cache, cache={"memory_mb": 0})
    origin.route("/disk", static(b"d" * 5000, {"Cache-Control": "max-age=600"}))
    url = origin.url("/disk")
    async with proxy_client(cache) as client:
        await store(client, url)
        hit, _ = await client.get(url)
    assert "hit" in hit.headers["Cache-Status"]  # (stored on disk indeed)
    assert (await peer.answer(icp_port(cache), query(2, url))).opcode is Opcode.HIT


async def test_rfc2186_denied_to_a_cache_not_allowed(
    origin: Origin, make_cache: MakeCache, peer: Querier
) -> None:
    cache = await icp_cache(make_cache, icp={"allow": ["10.0.0.0/8"]})
    origin.route("/d", static(b"d", {"Cache-Control": "max-age=600"}))
    async with proxy_client(cache) as client:
        await store(client, origin.url("/d"))
    answer = await peer.answer(icp_port(cache), query(3, origin.url("/d")))
    assert answer.opcode is Opcode.DENIED


@pytest.mark.parametrize("url", ["ftp://example.com/f", "not a url", ""])
async def test_rfc2186_err_for_a_url_that_is_not_http(
    make_cache: MakeCache, url: str, peer: Querier
) -> None:
    cache = await icp_cache(make_cache)
    answer = await peer.answer(icp_port(cache), query(5, url))
    assert (answer.opcode, answer.url) == (Opcode.ERR, url)


async def test_rfc2186_a_vary_url_is_a_miss(
    origin: Origin, make_cache: MakeCache, peer: Querier
) -> None:
    async def varied(request: web.Request) -> web.Response:
        return web.Response(body=b"v", headers={"Cache-Control": "max-age=600", "Vary": "Accept"})

    cache = await icp_cache(make_cache)
    origin.route("/vary", varied)
    async with proxy_client(cache) as client:
        await store(client, origin.url("/vary"))
    answer = await peer.answer(icp_port(cache), query(6, origin.url("/vary")))
    assert answer.opcode is Opcode.MISS


async def test_rfc2186_3_no_rtt_is_claimed_for_a_host_never_reached(
    make_cache: MakeCache, peer: Querier
) -> None:
    """No connection was ever made to the host: the reply leaves SRC_RTT clear, as allowed."""
    cache = await icp_cache(make_cache)
    answer = await peer.answer(icp_port(cache), query(7, "http://127.0.0.1:9/", src_rtt=True))
    assert (answer.options, answer.src_rtt) == (0, None)


async def test_rfc2186_3_the_measured_rtt_to_the_host_is_given_when_asked(
    origin: Origin, make_cache: MakeCache, peer: Querier
) -> None:
    cache = await icp_cache(make_cache)
    origin.route("/a", static(b"a", {"Cache-Control": "no-store"}))
    async with proxy_client(cache) as client:
        response, _ = await client.get(origin.url("/a"))
    assert response.status == 200
    asked = await peer.answer(icp_port(cache), query(8, origin.url("/b"), src_rtt=True))
    assert asked.opcode is Opcode.MISS
    assert asked.src_rtt is not None
    hops, ms = asked.src_rtt
    assert hops == 0  # (no hop count is measured)
    assert 1 <= ms < 1000  # a loopback connect: at least the 1 ms floor, far under a second
    plain = await peer.answer(icp_port(cache), query(9, origin.url("/b")))
    assert (plain.options, plain.src_rtt) == (0, None)  # only given when asked for


async def test_a_cache_configured_to_take_no_misses_answers_miss_nofetch(
    make_cache: MakeCache, peer: Querier
) -> None:
    cache = await icp_cache(make_cache, icp={"fetch_misses": False})
    answer = await peer.answer(icp_port(cache), query(10, "http://127.0.0.1:9/nothing"))
    assert answer.opcode is Opcode.MISS_NOFETCH


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x01",
        bytes(20),  # ICP_OP_INVALID
        encode(query(8, "http://x/"))[:-1],  # length field wrong
        b"\x01\x03" + encode(query(8, "http://x/"))[2:],  # version 3 (crashes Squid 5.7)
        b"\x18\x02\x00\x1e" + bytes(16) + b"http://x/\x00",  # opcode 24: undefined
        encode(IcpMessage(Opcode.HIT, 8, "http://x/")),  # a reply we never asked for
        b"\xff" * 2000,
    ],
)
async def test_rfc2186_garbage_gets_no_answer_and_stalls_nothing(
    make_cache: MakeCache, garbage: bytes, peer: Querier
) -> None:
    cache = await icp_cache(make_cache)
    assert cache.icp is not None
    port = icp_port(cache)
    assert await peer.ask(port, garbage, within=0.3) is None
    assert cache.icp.dropped == 1
    # Still answering.
    assert (await peer.answer(port, query(9, "http://127.0.0.1:9/"))).opcode is Opcode.MISS


async def test_rfc2186_many_queries_each_answered_with_its_number(
    make_cache: MakeCache, peer: Querier
) -> None:
    cache = await icp_cache(make_cache)
    port = icp_port(cache)
    assert peer.transport is not None
    for n in range(1, 51):
        peer.transport.sendto(encode(query(n, f"http://127.0.0.1:9/{n}")), ("127.0.0.1", port))
    numbers: set[int] = set()
    deadline = time.monotonic() + 5
    while len(numbers) < 50 and time.monotonic() < deadline:
        async with asyncio.timeout(5):
            data, _ = await peer.replies.get()
        message = decode(data)
        assert message.url == f"http://127.0.0.1:9/{message.request_number}"
        numbers.add(message.request_number)
    assert numbers == set(range(1, 51))


async def test_a_datagram_the_socket_cannot_send_is_counted_and_answering_goes_on(
    make_cache: MakeCache, peer: Querier
) -> None:
    cache = await icp_cache(make_cache)
    endpoint = endpoint_of(cache)
    # A peer's IPv6 address, from a socket bound to an IPv4 one: the send fails at once.
    endpoint.send(encode(query(1, "http://127.0.0.1:9/")), ("::1", 3130))
    assert endpoint.unsent == 1
    answer = await peer.answer(icp_port(cache), query(2, "http://127.0.0.1:9/"))
    assert (answer.request_number, answer.opcode) == (2, Opcode.MISS)
    assert endpoint.unsent == 1


async def test_a_cache_that_keeps_asking_is_answered_on_a_socket_of_its_own(
    make_cache: MakeCache, peer: Querier
) -> None:
    cache = await icp_cache(make_cache)
    endpoint = endpoint_of(cache)
    assert peer.transport is not None
    port = icp_port(cache)
    numbers: set[int] = set()

    async def ask_all(first: int, last: int) -> None:
        """Queries ``first``..``last``, 32 at a time (no socket buffer overflows)."""
        assert peer.transport is not None
        for start in range(first, last + 1, 32):
            batch = range(start, min(start + 32, last + 1))
            for n in batch:
                url = f"http://127.0.0.1:9/{n}"
                peer.transport.sendto(encode(query(n, url)), ("127.0.0.1", port))
            for _ in batch:
                async with asyncio.timeout(5):
                    data, source = await peer.replies.get()
                assert source[1] == port  # from the ICP port, whichever socket took the query
                message = decode(data)
                assert message.opcode is Opcode.MISS
                assert message.url == f"http://127.0.0.1:9/{message.request_number}"
                numbers.add(message.request_number)

    await ask_all(1, 250)
    assert endpoint.own_sockets == 0
    await ask_all(251, 320)
    assert numbers == set(range(1, 321))
    assert endpoint.own_sockets == 1
    answered = sum(endpoint.answered.values())
    # Everything else it sends goes the whole way there too: a reply to no query of ours
    # and garbage are dropped, a query with options is answered.
    dropped = endpoint.dropped
    stray = encode(reply(query(7, "http://127.0.0.1:9/"), Opcode.MISS))
    peer.transport.sendto(stray, ("127.0.0.1", port))
    peer.transport.sendto(b"\x01\x02\x00", ("127.0.0.1", port))
    await wait_until(lambda: endpoint.dropped == dropped + 2)
    got = await peer.answer(port, query(400, "http://127.0.0.1:9/x", src_rtt=True))
    assert (got.request_number, got.opcode) == (400, Opcode.MISS)
    assert sum(endpoint.answered.values()) == answered + 1
    # Another cache is still answered on the shared socket.
    async with udp_querier() as other:
        got = await other.answer(port, query(1, "http://127.0.0.1:9/y"))
        assert got.opcode is Opcode.MISS
    assert endpoint.own_sockets == 1


async def test_an_icp_port_held_by_another_program_is_refused(make_cache: MakeCache) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        with pytest.raises(OSError, match="in use") as refused:
            await make_cache(icp={"port": port, "allow": ["127.0.0.0/8"]})
        assert refused.value.errno == errno.EADDRINUSE


async def test_stopping_closes_every_icp_socket(tmp_path: Path, peer: Querier) -> None:
    port = free_udp_port()
    cache = await CacheServer.start(
        cache_config(tmp_path, icp={"port": port, "allow": ["127.0.0.0/8"]})
    )
    try:
        endpoint = endpoint_of(cache)
        assert peer.transport is not None

        async def answered(count: int) -> None:
            await wait_until(lambda: sum(endpoint.answered.values()) >= count)

        for n in range(1, 301):
            peer.transport.sendto(encode(query(n, "http://127.0.0.1:9/")), ("127.0.0.1", port))
            if n % 32 == 0:
                await answered(n)
        await wait_until(lambda: endpoint.own_sockets == 1)
    finally:
        await cache.stop(0.5)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as again:
        again.bind(("127.0.0.1", port))  # (no socket of the cache's is left on the port)


async def test_icp_is_off_unless_a_port_is_configured(make_cache: MakeCache, peer: Querier) -> None:
    cache = await make_cache()
    assert cache.icp is None


async def test_repeated_queries_follow_what_the_memory_tier_holds(
    origin: Origin, make_cache: MakeCache, peer: Querier
) -> None:
    """Answers are remembered per URL for speed: they must still change when the object
    does (stored, purged, stored again) and when a HIT would no longer be fresh enough."""
    cache = await icp_cache(make_cache, cache={"disk_mb": 0})
    origin.route("/m", static(b"m", {"Cache-Control": "max-age=600"}))
    origin.route("/short", static(b"s", {"Cache-Control": "max-age=32"}))
    url, short = origin.url("/m"), origin.url("/short")
    port = icp_port(cache)
    assert (await peer.answer(port, query(1, url))).opcode is Opcode.MISS
    assert (await peer.answer(port, query(2, url))).opcode is Opcode.MISS
    async with proxy_client(cache) as client:
        await store(client, url)
    for n in (3, 4):
        answer = await peer.answer(port, query(n, url))
        assert (answer.opcode, answer.request_number, answer.url) == (Opcode.HIT, n, url)
    assert await cache.store.purge(url)
    assert (await peer.answer(port, query(5, url))).opcode is Opcode.MISS
    async with proxy_client(cache) as client:
        await store(client, url)
    assert (await peer.answer(port, query(6, url))).opcode is Opcode.HIT
    # Fresh for 32 s: a HIT for about two seconds, then a MISS (less than 30 s left). Stored
    # just before it is asked for, so that a busy machine does not eat the window.
    async with proxy_client(cache) as client:
        await store(client, short)
    assert (await peer.answer(port, query(7, short))).opcode is Opcode.HIT
    await asyncio.sleep(2.2)
    assert (await peer.answer(port, query(8, short))).opcode is Opcode.MISS


async def test_queries_do_not_keep_an_object_in_the_memory_tier(
    origin: Origin, make_cache: MakeCache, peer: Querier
) -> None:
    """An ICP query asks whether an object is held; it is not a use of it (the fetch that
    follows a HIT is): the object asked about most is still the first evicted."""
    cache = await icp_cache(make_cache, cache={"disk_mb": 0, "memory_mb": 1})
    body = b"z" * (300 * 1024)  # three fit in the 1 MiB tier, not four
    for name in ("a", "b", "c", "d"):
        origin.route(f"/{name}", static(body, {"Cache-Control": "max-age=600"}))
    port = icp_port(cache)
    async with proxy_client(cache) as client:
        for name in ("a", "b", "c"):
            await store(client, origin.url(f"/{name}"))
        for n in range(5):
            assert (await peer.answer(port, query(n, origin.url("/a")))).opcode is Opcode.HIT
        await store(client, origin.url("/d"))
    # (the response may reach the client just before its object is in the tier)
    await wait_until(lambda: cache.store.memory_view.peek(origin.url("/d")) is not None)
    answers = [(await peer.answer(port, query(9, origin.url(f"/{x}")))).opcode for x in "abcd"]
    assert answers == [Opcode.MISS, Opcode.HIT, Opcode.HIT, Opcode.HIT]


async def test_a_reload_that_narrows_icp_allow_takes_effect_for_remembered_answers(
    origin: Origin, make_cache: MakeCache, peer: Querier
) -> None:
    cache = await icp_cache(make_cache, cache={"disk_mb": 0})
    origin.route("/r", static(b"r", {"Cache-Control": "max-age=600"}))
    url = origin.url("/r")
    async with proxy_client(cache) as client:
        await store(client, url)
    port = icp_port(cache)
    assert (await peer.answer(port, query(1, url))).opcode is Opcode.HIT
    narrowed = replace(cache.config, icp=replace(cache.config.icp, allow=()))
    await cache.reload(narrowed)
    assert (await peer.answer(port, query(2, url))).opcode is Opcode.DENIED
