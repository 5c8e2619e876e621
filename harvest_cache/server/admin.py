"""The admin listener (aiohttp): Prometheus metrics and the cache manager.

Apart from the proxy's own port, so that scrapes and operators never queue behind client
traffic or count in it. ``GET /metrics`` is the Prometheus text format; the cache manager is
``GET /cachemgr`` (JSON) and ``GET /cachemgr.html``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from harvest_cache import __version__
from harvest_cache.metrics import registry

if TYPE_CHECKING:
    from harvest_cache.server.app import CacheServer


class AdminServer:
    """Start with ``await AdminServer.start(cache)``; ``address`` is where it listens."""

    def __init__(self, cache: CacheServer) -> None:
        self._cache = cache
        self._registry, self._collector = registry(cache)
        self._runner: web.AppRunner | None = None
        self.address: tuple[str, int] = ("", 0)
        self.started = time.time()

    @classmethod
    async def start(cls, cache: CacheServer, host: str, port: int) -> AdminServer:
        self = cls(cache)
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/cachemgr", self._manager)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        self.address = (bound[0], bound[1])
        return self

    async def _metrics(self, request: web.Request) -> web.Response:
        self._collector.disk_bytes = await self._cache.store.disk_usage()
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _manager(self, request: web.Request) -> web.Response:
        cache = self._cache
        return web.json_response(
            {
                "version": __version__,
                "name": cache.name,
                "uptime_seconds": round(time.time() - self.started, 3),
            }
        )

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
