"""Helpers for tests: a scripted origin, cache configs, a proxy client and raw sockets."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from harvest_cache.config import Config, from_mapping
from harvest_cache.server.app import CacheServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Origin:
    """An aiohttp origin on 127.0.0.1 whose routes each test scripts; it counts requests."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.hits: Counter[str] = Counter()
        self.requests: list[web.Request] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    def route(self, path: str, handler: Handler) -> None:
        self.handlers[path] = handler

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.hits[request.path] += 1
        self.requests.append(request)
        handler = self.handlers.get(request.path)
        if handler is None:
            return web.Response(status=404, text="no such test route")
        return await handler(request)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def cache_config(tmp_path: Path, **sections: dict[str, object]) -> Config:
    """A cache config for tests: ephemeral port, store and log under tmp_path, no DNS."""
    raw: dict[str, dict[str, object]] = {
        "server": {"listen": "127.0.0.1:0", "name": "test-cache"},
        "cache": {"dir": str(tmp_path / "cache"), "memory_mb": 64, "disk_mb": 256},
        "log": {"access_log": str(tmp_path / "access.log")},
        "dns": {"hosts_file": "none", "nameservers": ["127.0.0.1:9"]},
        "upstream": {"connect_timeout": 2.0, "read_timeout": 5.0},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return from_mapping(raw)


class ProxyClient:
    """aiohttp through the cache as its proxy."""

    def __init__(self, session: aiohttp.ClientSession, cache: CacheServer) -> None:
        self.session = session
        self.proxy = f"http://127.0.0.1:{cache.address[1]}"

    async def get(self, url: str, **kw: object) -> tuple[aiohttp.ClientResponse, bytes]:
        return await self.request("GET", url, **kw)

    async def request(
        self, method: str, url: str, **kw: object
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        async with self.session.request(method, url, proxy=self.proxy, **kw) as resp:  # type: ignore[arg-type]
            body = await resp.read()
        return resp, body


async def raw_exchange(port: int, data: bytes, *, within: float = 5.0) -> bytes:
    """Send ``data`` on a new connection and read until the proxy closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(within):
            return await reader.read(-1)
    finally:
        writer.close()
