"""The Bearer token of the admin and replica routes against hostile Authorization headers
(issue 25): every route that needs the token, found in the broker's own router, refuses a
header whose bytes are not UTF-8 with 401, as any other wrong token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.api import make_app
from broker.app import Broker
from tests.broker.test_api import TOKEN, running

# The routes under these prefixes take the admin token (broker/api/admin.py,
# broker/replica_api.py).
GUARDED = ("/api/admin/", "/api/replica/")
HOSTILE = [
    b"Bearer \xff\xfe",
    b"Bearer " + TOKEN.encode() + b"\xff",
    b"bearer \xc3\x28",  # a broken two-byte sequence
    b"Bearer \xed\xa0\x80",  # a surrogate, encoded
    b"\xff\xfe " + TOKEN.encode(),  # a scheme that is not UTF-8
    "Bearer é".encode(),  # UTF-8, but not the token
]


def guarded_routes(broker: Broker) -> list[tuple[str, str]]:
    """(method, path) of every route that needs the admin token, placeholders filled."""
    found = []
    for route in make_app(broker).router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter", "")
        if path.startswith(GUARDED):
            found.append((route.method, path.replace("{name}", "c1").replace("{collection}", "c1")))
    return sorted(found)


async def raw_status(broker: Broker, method: str, path: str, authorization: bytes) -> int:
    """The status of a request sent byte for byte (an HTTP client would refuse the header)."""
    host, port = broker.address
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n"
            "Connection: close\r\n".encode()
            + b"Authorization: "
            + authorization
            + b"\r\n\r\n"
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    return int(status_line.split()[1])


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(tmp_path / "b", admin_token=TOKEN) as started:
        yield started


async def test_every_guarded_route_is_found(broker: Broker) -> None:
    routes = guarded_routes(broker)
    # 7 admin and 6 replica routes; GET ones answer HEAD too.
    assert len([r for r in routes if r[0] != "HEAD"]) == 13, routes
    assert ("GET", "/api/admin/stats") in routes
    assert ("POST", "/api/replica/c1/apply") in routes


@pytest.mark.parametrize("authorization", HOSTILE)
async def test_an_authorization_header_that_is_not_utf8_is_refused_with_401(
    broker: Broker, authorization: bytes
) -> None:
    statuses = {
        (method, path): await raw_status(broker, method, path, authorization)
        for method, path in guarded_routes(broker)
    }
    assert set(statuses.values()) == {401}, statuses
    # The right token still opens them.
    assert await raw_status(broker, "GET", "/api/admin/stats", f"Bearer {TOKEN}".encode()) == 200
