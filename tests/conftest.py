"""Shared fixtures: a scripted loopback origin, running caches and a proxy client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
import uvloop

from harvest_cache.server.app import CacheServer
from tests.loopback import (
    ANY_NETWORK,
    check_namespace,
    outside_loopback,
    resolvers_on_loopback_only,
)
from tests.support import Origin, ProxyClient, cache_config


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run outside a network namespace holding only loopback (tests/loopback.py)."""
    check_namespace()


def pytest_report_header(config: pytest.Config) -> str:
    reason = outside_loopback()
    if reason is None:
        return "network: loopback only (a namespace of its own)"
    return f"network: NOT loopback only ({reason}; {ANY_NETWORK}=1)"


@pytest.fixture(scope="session", autouse=True)
def loopback_resolvers() -> Iterator[None]:
    """Every cache and gatherer the tests start in-process asks a resolver on loopback."""
    with resolvers_on_loopback_only():
        yield


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The cache runs on uvloop in production, so its tests do too."""
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    o = Origin()
    await o.start()
    yield o
    await o.stop()


@pytest.fixture
async def make_cache(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[CacheServer]]]:
    """Start caches from cache_config plus overrides; all are stopped at the end."""
    started: list[CacheServer] = []

    async def start(**sections: dict[str, object]) -> CacheServer:
        server = await CacheServer.start(cache_config(tmp_path, **sections))
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop(0.5)


@pytest.fixture
async def cache(make_cache: Callable[..., Awaitable[CacheServer]]) -> CacheServer:
    return await make_cache()


@pytest.fixture
async def client(cache: CacheServer) -> AsyncIterator[ProxyClient]:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield ProxyClient(session, cache)
