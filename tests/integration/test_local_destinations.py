"""The proxy is no way into its own host for clients beyond loopback (like Squid's packaged
``http_access deny to_localhost``): requests and tunnels to loopback addresses, ``localhost``
names, the unspecified address and the host's own addresses get 403 (logged TCP_DENIED),
on every path (hits, planned answers, misses, forwarding), and so do names that resolve
there, judged when connecting. Clients on loopback may, and ``access.local_destinations``
lets everyone.

The LAN client is a test address added to ``lo`` inside the suite's network namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from harvest_cache.server.app import CacheServer
from tests.dns_server import ScriptedDNS, scripted_dns
from tests.loopback import address_on_loopback
from tests.support import (
    MakeCache,
    Origin,
    RawResponse,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
)

LAN = "198.51.100.7"
LOOPBACK = "127.0.0.1"
ALLOW = {"allow": ["127.0.0.0/8", "198.51.100.0/24"]}
FRESH = {"Cache-Control": "max-age=600"}


@pytest.fixture(scope="module")
def lan() -> Iterator[str]:
    with address_on_loopback(LAN) as address:
        yield address


async def ask(cache: CacheServer, source: str, data: bytes, method: str = "GET") -> RawResponse:
    """One request from ``source`` on a new connection, and its response."""
    reader, writer = await asyncio.open_connection(
        LOOPBACK, cache.address[1], local_addr=(source, 0)
    )
    try:
        writer.write(data)
        return await read_response(reader, method=method)
    finally:
        writer.close()


async def get(cache: CacheServer, source: str, url: str) -> RawResponse:
    return await ask(cache, source, request_bytes("GET", url))


@pytest.fixture
async def cache(make_cache: MakeCache, lan: str) -> CacheServer:
    return await make_cache(access=ALLOW)


async def test_a_lan_client_cannot_reach_the_caches_admin_listener(
    cache: CacheServer, lan: str
) -> None:
    assert cache.admin is not None
    metrics = f"http://{LOOPBACK}:{cache.admin.address[1]}/metrics"
    refused = await get(cache, lan, metrics)
    assert refused.status == 403, refused
    assert "is this host" in refused.text
    assert b"harvest_cache_" not in refused.body
    allowed = await get(cache, LOOPBACK, metrics)
    assert allowed.status == 200
    assert b"harvest_cache_" in allowed.body
    log = await stop_and_read_log(cache)
    assert [(line.client, line.result, line.status) for line in log] == [
        (lan, "TCP_DENIED", 403),
        (LOOPBACK, "TCP_MISS", 200),
    ]


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.9.9.9",
        "[::1]",
        "localhost",
        "a.localhost.",
        "0.0.0.0",
        "[::ffff:127.0.0.1]",
        LAN,
    ],
)
async def test_every_name_and_address_of_this_host_is_refused(
    origin: Origin, cache: CacheServer, lan: str, host: str
) -> None:
    origin.route("/inside", static(b"inside", FRESH))
    url = f"http://{host}:{origin.port}/inside"
    assert (await get(cache, lan, url)).status == 403
    assert (await ask(cache, lan, request_bytes("POST", url, body=b"x"))).status == 403
    assert origin.hits["/inside"] == 0


async def test_a_name_that_resolves_to_loopback_is_refused_when_connecting(
    origin: Origin, make_cache: MakeCache, lan: str
) -> None:
    origin.route("/named", static(b"named", {"Cache-Control": "no-store"}))
    zone = {"inside.harvest.test": {"A": (300, [LOOPBACK])}}
    dns: ScriptedDNS
    async with scripted_dns(zone, delay=0.0) as dns:
        nameservers = [f"{LOOPBACK}:{dns.port}"]
        cache = await make_cache(access=ALLOW, dns={"nameservers": nameservers})
        url = f"http://inside.harvest.test:{origin.port}/named"
        assert (await get(cache, lan, url)).status == 403
        assert (await get(cache, LOOPBACK, url)).body == b"named"
        # Its connection is idle in the pool now: still not for the LAN client.
        refused = await get(cache, lan, url)
        assert refused.status == 403
        assert "is this host" in refused.text
        assert origin.hits["/named"] == 1
    log = await stop_and_read_log(cache)
    assert [(line.result, line.status) for line in log] == [
        ("TCP_DENIED", 403),
        ("TCP_MISS", 200),
        ("TCP_DENIED", 403),
    ]


async def test_what_loopback_clients_fetched_from_this_host_is_not_served_to_others(
    origin: Origin, cache: CacheServer, lan: str
) -> None:
    """The fast paths (prepared hits, planned revalidations) defer to the refusal."""
    origin.route("/hot", static(b"hot", FRESH))
    origin.route("/stale", static(b"stale", {"Cache-Control": "max-age=0", "ETag": '"s"'}))
    for path in ("/hot", "/stale"):
        url = origin.url(path)
        for _ in range(4):  # a miss, then hits (or revalidations) enough to be prepared
            assert (await get(cache, LOOPBACK, url)).status == 200
        refused = await get(cache, lan, url)
        assert refused.status == 403, (path, refused)
        assert (await get(cache, LOOPBACK, url)).status == 200


async def test_a_tunnel_to_this_host_is_refused(make_cache: MakeCache, lan: str) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, LOOPBACK, 0)
    port = server.sockets[0].getsockname()[1]
    cache = await make_cache(access={**ALLOW, "connect_ports": [port]})
    try:
        connect = f"CONNECT {LOOPBACK}:{port} HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\n\r\n"
        assert (await ask(cache, lan, connect.encode(), "CONNECT")).status == 403
        reader, writer = await asyncio.open_connection(LOOPBACK, cache.address[1])
        try:
            writer.write(connect.encode())
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.read(4), 5) == b"ping"
        finally:
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_the_setting_lets_every_client_reach_this_host(
    origin: Origin, make_cache: MakeCache, lan: str
) -> None:
    origin.route("/inside", static(b"inside", FRESH))
    cache = await make_cache(access={**ALLOW, "local_destinations": True})
    assert (await get(cache, lan, origin.url("/inside"))).body == b"inside"
