"""The admin listener (aiohttp): Prometheus metrics and the cache manager.

Apart from the proxy's own port, so that scrapes and operators never queue behind client
traffic or count in it:

- ``GET /metrics``: the Prometheus text format.
- ``GET /cachemgr``: JSON: info (version, uptime, configuration summary, hit ratios and
  request rates over the last 5 and 60 minutes), peers, store, requests in progress;
  ``GET /cachemgr.html``: the same as a page.
- Actions, which need ``Authorization: Bearer TOKEN`` (``admin.token``; none without one):
  ``POST /cachemgr/purge?url=URL``, ``POST /cachemgr/reload``,
  ``POST /cachemgr/peers/NAME/drop``.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from harvest_cache import __version__
from harvest_cache.config import Config
from harvest_cache.errors import RequestError
from harvest_cache.http.target import parse_absolute
from harvest_cache.metrics import registries
from harvest_cache.stats import CacheStats
from harvest_cache.store.tiered import TieredStore
from harvest_common.errors import ConfigError
from harvest_common.tasks import TaskSet

# Seconds between samples of the request counters, and the samples kept (an hour's).
_SAMPLE_EVERY = 10.0
_SAMPLES = 361
_WINDOWS = {"5m": 300.0, "60m": 3600.0}
_LARGEST = 10


def _filesystem(directory: Path) -> tuple[int, int] | None:
    """(size, free) in bytes of the filesystem holding ``directory``, if it can be read."""
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


class Managed(Protocol):
    """The running cache, as its admin listener sees it (CacheServer is one)."""

    @property
    def config(self) -> Config: ...

    @property
    def name(self) -> str: ...

    @property
    def address(self) -> tuple[str, int]: ...

    @property
    def tasks(self) -> TaskSet: ...

    @property
    def store(self) -> TieredStore: ...

    def stats(self) -> CacheStats: ...

    def largest_in_memory(self, n: int) -> list[tuple[int, str]]: ...

    def drop_peer(self, name: str) -> bool: ...

    async def reload_config(self) -> list[str]: ...


class AdminServer:
    """Start with ``await AdminServer.start(cache, host, port)``; ``address`` is where it
    listens. It samples the request counters itself, for the windowed ratios."""

    def __init__(self, cache: Managed) -> None:
        self._cache = cache
        self._registries = registries(cache.stats)
        self._collector = self._registries.collector
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None
        # (time.monotonic(), requests, hits) every _SAMPLE_EVERY seconds
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=_SAMPLES)
        self.address: tuple[str, int] = ("", 0)
        self.started = time.time()

    @classmethod
    async def start(cls, cache: Managed, host: str, port: int) -> AdminServer:
        self = cls(cache)
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/cachemgr", self._manager)
        app.router.add_get("/cachemgr.html", self._page)
        app.router.add_post("/cachemgr/purge", self._purge)
        app.router.add_post("/cachemgr/reload", self._reload)
        app.router.add_post("/cachemgr/peers/{name}/drop", self._drop_peer)
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
        self._sampler = cache.tasks.spawn(self._sample(), "admin samples")
        return self

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- metrics -------------------------------------------------------------------------------

    async def _metrics(self, request: web.Request) -> web.Response:
        cache = self._cache
        self._collector.disk_bytes = await cache.store.disk_usage()
        if cache.config.cache.disk_mb:
            self._collector.filesystem = await asyncio.to_thread(
                _filesystem, cache.config.cache.dir
            )
        body = generate_latest(self._registries.cache)
        body += await asyncio.to_thread(generate_latest, self._registries.process)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- the cache manager ---------------------------------------------------------------------

    def _totals(self) -> tuple[int, int]:
        """Requests answered and hits among them, so far."""
        counts = self._cache.stats().traffic.request_counts()
        hits = sum(n for (_, r, _), n in counts.items() if r in ("TCP_MEM_HIT", "TCP_HIT"))
        return sum(counts.values()), hits

    async def _sample(self) -> None:
        while True:
            self._samples.append((time.monotonic(), *self._totals()))
            await asyncio.sleep(_SAMPLE_EVERY)

    def _windows(self) -> dict[str, dict[str, float | None]]:
        """Hit ratio and request rate over each window (as far back as samples go)."""
        now, requests, hits = time.monotonic(), *self._totals()
        out: dict[str, dict[str, float | None]] = {}
        for name, span in _WINDOWS.items():
            past = [s for s in self._samples if now - s[0] <= span + _SAMPLE_EVERY]
            if not past:
                out[name] = {"hit_ratio": None, "requests_per_second": None}
                continue
            then, old_requests, old_hits = past[0]
            done = requests - old_requests
            seconds = max(now - then, 1e-9)
            out[name] = {
                "hit_ratio": (hits - old_hits) / done if done else None,
                "requests_per_second": done / seconds,
            }
        return out

    def report(self) -> dict[str, Any]:
        """Everything the cache manager shows."""
        cache, config = self._cache, self._cache.config
        stats = cache.stats()
        peers = [
            {
                "name": name,
                "config": peer.config,
                "state": peer.state,
                "rtt_ms": None if peer.rtt is None else round(peer.rtt * 1000, 3),
                "queries": peer.queries,
                "replies": peer.replies,
                "hits": peer.hits,
                "timeouts": peer.timeouts,
                "requests": peer.uses,
                "response_ms": None
                if peer.response_time is None
                else round(peer.response_time * 1000, 3),
                "digest_hits": peer.digest_hits,
                "digest_false_hits": peer.digest_false_hits,
            }
            for name, peer in (stats.peers or {}).items()
        ]
        largest = cache.largest_in_memory(_LARGEST)
        return {
            "info": {
                "version": __version__,
                "name": cache.name,
                "uptime_seconds": round(time.time() - self.started, 3),
                "listen": f"{cache.address[0]}:{cache.address[1]}",
                "icp_port": config.icp_port,
                "memory_mb": config.cache.memory_mb,
                "disk_mb": config.cache.disk_mb,
                "peers": len(config.hierarchy.peers),
                "windows": self._windows(),
            },
            "peers": peers,
            "array": {
                name: {"load_factor": round(member.load_factor, 4), "homes": member.homes}
                for name, member in (stats.array or {}).items()
            },
            "store": {
                "memory_objects": stats.store.memory_objects,
                "memory_bytes": stats.store.memory_bytes,
                "memory_capacity_bytes": stats.store.memory_capacity,
                "largest_in_memory": [{"url": u, "bytes": n} for n, u in largest],
            },
            "active": {
                "client_connections": stats.client_connections,
                "fetches": sorted(stats.fetching),
            },
        }

    async def _manager(self, request: web.Request) -> web.Response:
        return web.json_response(self.report())

    async def _page(self, request: web.Request) -> web.Response:
        report = self.report()
        sections = "".join(
            f"<h2>{html.escape(name)}</h2><pre>{html.escape(json.dumps(part, indent=2))}</pre>"
            for name, part in report.items()
        )
        title = f"harvest-cache {html.escape(report['info']['name'])}"
        page = f"<!doctype html><title>{title}</title><h1>{title}</h1>{sections}"
        return web.Response(text=page, content_type="text/html")

    # -- actions -------------------------------------------------------------------------------

    def _authorize(self, request: web.Request) -> None:
        token = self._cache.config.admin.token
        if not token:
            raise web.HTTPForbidden(text="admin actions are off: set admin.token\n")
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {token}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise web.HTTPUnauthorized(
                text="a valid token is needed\n", headers={"WWW-Authenticate": "Bearer"}
            )

    async def _purge(self, request: web.Request) -> web.Response:
        self._authorize(request)
        try:
            url = parse_absolute(request.query.get("url", "")).url
        except RequestError as e:
            raise web.HTTPBadRequest(text=f"{e.reason}\n") from None
        purged = await self._cache.store.purge(url)
        return web.json_response({"url": url, "purged": purged}, status=200 if purged else 404)

    async def _reload(self, request: web.Request) -> web.Response:
        self._authorize(request)
        try:
            fixed = await self._cache.reload_config()
        except ConfigError as e:
            return web.json_response({"reloaded": False, "problems": e.problems}, status=400)
        return web.json_response({"reloaded": True, "restart_needed": fixed})

    async def _drop_peer(self, request: web.Request) -> web.Response:
        self._authorize(request)
        name = request.match_info["name"]
        if not self._cache.drop_peer(name):
            raise web.HTTPNotFound(text=f"no peer named {name!r}\n")
        return web.json_response({"peer": name, "dropped": True})
