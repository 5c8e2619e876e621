"""The admin API under ``/api/admin`` (Authorization: Bearer <broker.admin_token>; the routes
are listed in broker/api/routes.py): collections added, removed and pulled, the default TTL,
garbage collection, index rebuilds and the full statistics. ``authorize`` guards the replica
routes too (broker/replica_api.py).

Admin changes last until the broker restarts (the configuration file is not rewritten).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from broker import hsr
from broker.api.params import BadRequest, flag, json_error
from broker.api.status import collection_json, collections_json, pull_json, statistics_json
from broker.config import INDEX_DIR, REGISTRY_FILE, CollectionConfig, from_mapping
from broker.metrics import BrokerMetrics
from broker.scheduler import Scheduler
from broker.services import Services
from harvest_common.config import number

_TTL = number(1, 1e9)  # the configuration's check of broker.default_ttl
# A pull asked to be waited for is given the collector's timeout and this much more.
WAIT_GRACE = 30.0
WAIT_POLL = 0.05


def _directory_bytes(path: Path) -> int:
    """Bytes in the files under ``path`` (blocking: run on a worker thread)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class AdminApi:
    """The admin handlers over one broker."""

    def __init__(self, services: Services, metrics: BrokerMetrics) -> None:
        self._services = services
        self._metrics = metrics

    def authorize(self, request: web.Request) -> None:
        token = self._services.config.broker.admin_token
        if token is None:
            raise web.HTTPForbidden(
                text=json.dumps({"error": "admin disabled"}), content_type="application/json"
            )
        given = request.headers.get("Authorization", "")
        scheme, _, credentials = given.partition(" ")
        # Header bytes that are not UTF-8 arrive as surrogate escapes: compared as the bytes
        # they were (a wrong token), not encoded strictly (an error).
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            credentials.strip().encode("utf-8", "surrogateescape"), token.encode()
        ):
            raise web.HTTPUnauthorized(
                text=json.dumps({"error": "a valid admin token is required"}),
                content_type="application/json",
                headers={"WWW-Authenticate": 'Bearer realm="harvest-broker"'},
            )

    def _live_scheduler(self) -> Scheduler:
        scheduler = self._services.scheduler
        if scheduler is None:
            raise web.HTTPServiceUnavailable(
                text=json.dumps({"error": "the broker is starting"}),
                content_type="application/json",
            )
        return scheduler

    def _effective(self, collection: CollectionConfig) -> CollectionConfig:
        """The collection as scheduled: without a TTL of its own, it takes the default TTL
        an administrator set (the collector falls back to the configured one)."""
        settings = self._services.settings
        if (
            collection.ttl is None
            and settings.default_ttl != self._services.config.broker.default_ttl
        ):
            return dataclasses.replace(collection, ttl=settings.default_ttl)
        return collection

    @staticmethod
    def _unknown(name: str) -> web.HTTPNotFound:
        return web.HTTPNotFound(
            text=json.dumps({"error": f"no collection {name!r} is scheduled"}),
            content_type="application/json",
        )

    async def add_collection(self, request: web.Request) -> web.Response:
        self.authorize(request)
        scheduler = self._live_scheduler()
        try:
            table = await request.json()
        except ValueError as error:
            raise BadRequest(f"the body must be JSON: {error}") from error
        if not isinstance(table, dict):
            raise BadRequest("the body must be a JSON object (a [[collections]] table)")
        collection = from_mapping({"collections": [table]}, "request").collections[0]
        if collection.name == hsr.COLLECTION:
            return json_error(409, f"the name {hsr.COLLECTION!r} is the server registry's")
        if collection.name in scheduler.status():
            return json_error(409, f"collection {collection.name!r} exists")
        self._services.settings.collections[collection.name] = collection
        scheduler.add(self._effective(collection))
        return web.json_response(
            collection_json(
                collection.name,
                collection,
                scheduler.status()[collection.name],
                0,
                None,
                None,
                self._services.settings.default_ttl,
            ),
            status=201,
        )

    async def remove_collection(self, request: web.Request) -> web.Response:
        self.authorize(request)
        scheduler = self._live_scheduler()
        name = request.match_info["name"]
        keep = flag(request.query, "keep")
        # A pull in progress would apply its objects after they were forgotten: let it end.
        limit = self._services.config.broker.pull_timeout + WAIT_GRACE

        def idle() -> bool:
            status = scheduler.status().get(name)
            return status is None or not status.running

        if not await _poll(idle, limit):
            return json_error(504, f"the pull of {name!r} did not end within {limit:g} s")
        if name not in scheduler.status():
            raise self._unknown(name)
        scheduler.remove(name)
        self._services.settings.collections.pop(name, None)
        removed: tuple[str, ...] = ()
        if not keep:
            removed = await self._services.registry.forget(name, now=time.time())
            await self._services.catch_up()
        return web.json_response({"removed": name, "objects_removed": len(removed)})

    async def pull(self, request: web.Request) -> web.Response:
        self.authorize(request)
        scheduler = self._live_scheduler()
        name = request.match_info["name"]
        full = flag(request.query, "full")
        wait = flag(request.query, "wait")
        before = scheduler.status().get(name)
        if before is None:
            raise self._unknown(name)
        scheduler.trigger(name, full=full)
        if not wait:
            return web.json_response(
                {"collection": name, "full": full, "triggered": True}, status=202
            )
        # A pull running now started before the trigger: the one asked for comes after it.
        target = before.pulls + (2 if before.running else 1)
        limit = self._services.config.broker.pull_timeout + WAIT_GRACE

        def done() -> bool:
            status = scheduler.status().get(name)
            return status is None or status.pulls >= target

        if not await _poll(done, limit):
            return json_error(504, f"the pull of {name!r} did not end within {limit:g} s")
        now = scheduler.status().get(name)
        if now is None:
            return json_error(409, f"collection {name!r} was removed meanwhile")
        await self._services.catch_up()  # the answer implies the index has what was pulled
        if now.failures > before.failures and now.last_error is not None:
            error = now.last_error
            return json_error(
                502,
                f"the pull of {name!r} failed: {error.kind}: {error.reason}",
                collection=name,
                kind=error.kind,
                reason=error.reason,
            )
        result = now.last_result
        return web.json_response(
            {
                "collection": name,
                "full": full,
                "result": None if result is None else pull_json(result),
            }
        )

    async def default_ttl(self, request: web.Request) -> web.Response:
        self.authorize(request)
        scheduler = self._live_scheduler()
        try:
            body = await request.json()
        except ValueError as error:
            raise BadRequest(f"the body must be JSON: {error}") from error
        if not isinstance(body, dict) or "seconds" not in body:
            raise BadRequest('the body must be {"seconds": N}')
        try:
            seconds = _TTL(body["seconds"])
        except (TypeError, ValueError) as error:
            raise BadRequest(f"seconds: {error}") from error
        settings = self._services.settings
        settings.default_ttl = seconds
        applies = []
        for collection in settings.collections.values():
            if collection.ttl is None:
                scheduler.add(dataclasses.replace(collection, ttl=seconds))
                applies.append(collection.name)
        return web.json_response({"default_ttl": seconds, "collections": sorted(applies)})

    async def gc(self, request: web.Request) -> web.Response:
        self.authorize(request)
        before = await self._services.registry.count()
        reconciled = await self._services.collect_garbage()
        after = await self._services.registry.count()
        return web.json_response(
            {
                "objects": after,
                "removed": max(0, before - after),
                "index_added": reconciled.added,
                "index_removed": reconciled.removed,
            }
        )

    async def rebuild(self, request: web.Request) -> web.Response:
        self.authorize(request)
        started = time.perf_counter()
        indexed = await self._services.rebuild_index()
        return web.json_response({"indexed": indexed, "seconds": time.perf_counter() - started})

    async def admin_stats(self, request: web.Request) -> web.Response:
        self.authorize(request)
        services = self._services
        settings = services.config.broker
        directory = settings.data_dir
        reported = await services.stats()
        stats = statistics_json(reported, self._metrics)
        stats["collections"] = collections_json(reported, services.settings)
        stats["settings"] = {
            "default_ttl": services.settings.default_ttl,
            "configured_default_ttl": settings.default_ttl,
            "gc_period": settings.gc_period,
            "max_results": settings.max_results,
        }
        stats["disk"] = {
            "registry_bytes": await asyncio.to_thread(_directory_bytes, directory / REGISTRY_FILE),
            "index_bytes": await asyncio.to_thread(_directory_bytes, directory / INDEX_DIR),
        }
        return web.json_response(stats)


async def _poll(condition: Callable[[], bool], limit: float) -> bool:
    """Whether ``condition`` became true within ``limit`` seconds. Polled: the scheduler
    notifies no one of a pull's end, and an admin request waiting for one is rare."""
    deadline = asyncio.get_running_loop().time() + limit
    while not condition():
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(WAIT_POLL)
    return True
