"""The broker's HTTP application: the JSON API, the bulk export, the admin API, the HSR, the
search page and the metrics, with one error boundary.

::

    GET  /api/search?q=&limit=&offset=&case=0|1    a page of results (JSON)
    GET  /api/objects/{oid}[?format=soif|json]      one object
    GET  /api/status                                name, version, objects, index, collections
    GET  /api/stats                                 counters (queries, exports, registrations)
    GET  /metrics                                   Prometheus text format
    GET  /bulk[?since=SEQ][&query=Q]                SOIF stream (broker.bulk)
    POST /api/hsr/register, GET /api/hsr            the server registry (broker.hsr)
    GET  /, /help                                   the search page (broker.web)

    admin (Authorization: Bearer <broker.admin_token>):
    POST   /api/admin/collections                   add a collection (a [[collections]] table)
    DELETE /api/admin/collections/{name}[?keep=1]   stop pulling it (after a pull in
                                                    progress); forget its objects
    POST   /api/admin/collections/{name}/pull[?full=1][&wait=1]
    PUT    /api/admin/default-ttl                   {"seconds": N}
    POST   /api/admin/gc                            expire, reconcile the index
    POST   /api/admin/rebuild                       rebuild the index from the registry
    GET    /api/admin/stats
    /api/replica/{collection}/...                   what the replicator reads and applies
                                                    (broker.replica_api)

Admin changes last until the broker restarts (the configuration file is not rewritten).

The error boundary (``_errors``) maps the typed errors once: QuerySyntaxError → 400 ``{error,
position, query}``; a bad parameter, record or collection → 400; StorageError and
EngineError → 503; under ``/api`` and ``/bulk`` every error is JSON ``{"error": ...}``, on the
search page an HTML page.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from broker import bulk, hsr, replica_api
from broker import web as page
from broker.app import INDEX_DIR, REGISTRY_FILE
from broker.collector import PullResult
from broker.config import CollectionConfig, from_mapping
from broker.errors import (
    ConfigError,
    EngineError,
    IndexNotReady,
    QuerySyntaxError,
    ReplicaError,
    StorageError,
)
from broker.metrics import INTERFACES, QUERY_OUTCOMES, BrokerMetrics
from broker.scheduler import CollectionStatus, Scheduler
from broker.search import Page
from harvest_common import hsr_client
from harvest_common.config import number
from harvest_common.software import software_version
from harvest_common.soif import encode

if TYPE_CHECKING:
    from broker.app import Broker

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SOIF_TYPE = "application/x-soif"
DEFAULT_LIMIT = 10
MAX_OFFSET = 100_000  # deeper pages cost the index more than any client needs
RETRY_FILLING = 10  # seconds a search refused while a new index fills is told to wait
_OID = re.compile(r"[0-9a-f]{32}")
_INTEGER = re.compile(r"[0-9]{1,9}")
_TTL = number(1, 1e9)  # the configuration's check of broker.default_ttl
# A pull asked to be waited for is given the collector's timeout and this much more.
WAIT_GRACE = 30.0
WAIT_POLL = 0.05


class BadRequest(web.HTTPBadRequest):
    """A 400 with a JSON body ``{"error": reason}``."""

    def __init__(self, reason: str, **extra: Any) -> None:
        super().__init__(
            text=json.dumps({"error": reason, **extra}), content_type="application/json"
        )


def _json_error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def _integer(params: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not _INTEGER.fullmatch(text) or not lo <= int(text) <= hi:
        raise BadRequest(f"{name} must be a whole number from {lo} to {hi}, got {text[:40]!r}")
    return int(text)


def _flag(params: Mapping[str, str], name: str) -> bool:
    text = params.get(name, "0")
    if text not in ("0", "1"):
        raise BadRequest(f"{name} must be 0 or 1, got {text[:40]!r}")
    return text == "1"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def page_json(page_: Page) -> dict[str, Any]:
    """A page of results as the search API returns it."""
    return {
        "query": page_.query,
        "total": page_.total,
        "exact": page_.exact,
        "offset": page_.offset,
        "limit": page_.limit,
        "results": [
            {
                "oid": r.oid,
                "url": r.url,
                "title": r.title,
                "gatherer": r.gatherer,
                "template": r.template,
                "score": r.score,
                "update_time": r.update_time,
                "snippets": [
                    {"attribute": attribute, "html": page.marked_html(text)}
                    for attribute, text in r.snippets
                ],
            }
            for r in page_.results
        ],
    }


def pull_json(result: PullResult) -> dict[str, Any]:
    return {
        "items": result.items,
        "bytes": result.bytes,
        "upserted": len(result.applied.upserted),
        "removed": len(result.applied.removed),
        "refreshed": result.applied.refreshed,
        "ignored": result.applied.ignored,
        "complete": result.complete,
        "since": result.since,
        "cursor": result.cursor,
        "seconds": result.seconds,
    }


def collection_json(
    name: str,
    config: CollectionConfig | None,
    status: CollectionStatus | None,
    objects: int,
    cursor: str | None,
    last_pull: float | None,
    default_ttl: float,
) -> dict[str, Any]:
    """One collection: its configuration (None: no longer scheduled, objects kept until they
    expire; or the HSR's), what the registry holds and what the scheduler knows."""
    out: dict[str, Any] = {
        "name": name,
        "scheduled": status is not None,
        "objects": objects,
        "cursor": cursor,
        "last_pull": last_pull,
    }
    if config is not None:
        out.update(
            kind=config.kind,
            source=config.source,
            query=config.query,
            interval=config.interval,
            incremental=config.incremental,
            ttl=config.ttl,
            effective_ttl=config.ttl or default_ttl,
            via_proxy=config.via_proxy,
        )
    if status is not None:
        error = status.last_error
        out.update(
            running=status.running,
            next_due=_finite(status.next_due),
            pulls=status.pulls,
            failures=status.failures,
            consecutive_failures=status.consecutive_failures,
            last_success=status.last_success,
            last_error=None
            if error is None
            else {"kind": error.kind, "reason": error.reason, "at": status.last_error_at},
            last_result=None if status.last_result is None else pull_json(status.last_result),
        )
    return out


def _directory_bytes(path: Path) -> int:
    """Bytes in the files under ``path`` (blocking: run on a worker thread)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Api:
    """The JSON and admin handlers over one broker."""

    def __init__(self, broker: Broker, metrics: BrokerMetrics) -> None:
        self._broker = broker
        self._metrics = metrics

    @property
    def _scheduler(self) -> Scheduler | None:
        # None while the broker starts: the web server is up before the scheduler.
        return getattr(self._broker, "scheduler", None)

    def _statuses(self) -> dict[str, CollectionStatus]:
        scheduler = self._scheduler
        return scheduler.status() if scheduler is not None else {}

    async def startup(self, app: web.Application) -> None:
        await asyncio.to_thread(software_version)  # reads package metadata once

    # -- queries and objects ----------------------------------------------------------------

    async def search(self, request: web.Request) -> web.Response:
        params = request.query
        max_results = self._broker.config.broker.max_results
        limit = min(_integer(params, "limit", DEFAULT_LIMIT, 1, 10**9), max_results)
        offset = _integer(params, "offset", 0, 0, MAX_OFFSET)
        case = _flag(params, "case")
        with self._metrics.query("api"):
            found = await self._broker.search(
                params.get("q", ""), limit=limit, offset=offset, case_sensitive=case
            )
        return web.json_response(page_json(found))

    async def object(self, request: web.Request) -> web.Response:
        key = request.match_info["oid"]
        shape = request.query.get("format", "soif")
        if shape not in ("soif", "json"):
            raise BadRequest(f"format must be soif or json, got {shape[:40]!r}")
        stored = await self._broker.registry.get(key) if _OID.fullmatch(key) else None
        if stored is None:
            raise web.HTTPNotFound(
                text=json.dumps({"error": f"no object {key[:64]!r}"}),
                content_type="application/json",
            )
        if shape == "soif":
            return web.Response(body=encode(stored.record), headers={"Content-Type": SOIF_TYPE})
        record = stored.record
        return web.json_response(
            {
                "oid": stored.oid,
                "url": stored.url,
                "template": record.template,
                "gatherer": stored.gatherer,
                "collection": stored.collection,
                "update_time": stored.update_time,
                "expires": stored.expires,
                "seq": stored.seq,
                "attributes": {
                    name: value.decode("utf-8", "replace") for name, value in record.attributes
                },
            }
        )

    # -- status and statistics --------------------------------------------------------------

    async def _collections(self) -> list[dict[str, Any]]:
        statuses = self._statuses()
        states = await self._broker.registry.collections()
        configs = self._broker.settings.collections
        out = []
        for name in sorted(set(statuses) | set(states)):
            state = states.get(name)
            out.append(
                collection_json(
                    name,
                    configs.get(name),
                    statuses.get(name),
                    state.count if state else 0,
                    state.cursor if state else None,
                    state.last_pull if state else None,
                    self._broker.settings.default_ttl,
                )
            )
        return out

    async def _index(self) -> dict[str, Any]:
        registry = self._broker.registry
        last, indexed = await registry.last_seq(), await registry.indexed_seq()
        progress = self._broker.sync.filling
        return {
            "documents": await self._broker.index.count(),
            "indexed_seq": indexed,
            "backlog": max(0, last - indexed),
            "ready": self._broker.index_ready.is_set(),
            "state": self._broker.index_state(),
            "filling": None if progress is None else {"added": progress[0], "of": progress[1]},
        }

    async def status(self, request: web.Request) -> web.Response:
        broker = self._broker
        registry = broker.registry
        return web.json_response(
            {
                "name": broker.config.broker.name,
                "version": software_version(),
                "started": broker.started,
                "uptime": time.time() - broker.started,
                "objects": await registry.count(),
                "last_seq": await registry.last_seq(),
                "oldest_seq": await registry.oldest_seq(),
                "default_ttl": broker.settings.default_ttl,
                "index": await self._index(),
                "collections": await self._collections(),
            }
        )

    async def _stats(self) -> dict[str, Any]:
        broker = self._broker
        value = self._metrics.value
        seconds = 0.0
        answered = 0.0
        for interface in INTERFACES:
            answered += value("harvest_broker_query_seconds_count", {"interface": interface})
            seconds += value("harvest_broker_query_seconds_sum", {"interface": interface})
        exports = {
            f"{mode}_{outcome}": int(
                value("harvest_broker_bulk_exports_total", {"mode": mode, "outcome": outcome})
            )
            for mode in ("complete", "incremental")
            for outcome in ("ok", "cut")
        }
        registrations = {
            outcome: int(
                sum(
                    value("harvest_broker_hsr_registrations_total", {"type": t, "outcome": outcome})
                    for t in (*hsr_client.TYPES, "invalid")
                )
            )
            for outcome in ("new", "renewed", "invalid")
        }
        return {
            "uptime": time.time() - broker.started,
            "objects": await broker.registry.count(),
            "index": await self._index(),
            "queries": {
                interface: {
                    outcome: int(
                        value(
                            "harvest_broker_queries_total",
                            {"interface": interface, "outcome": outcome},
                        )
                    )
                    for outcome in QUERY_OUTCOMES
                }
                for interface in INTERFACES
            },
            "query_seconds": {
                "count": int(answered),
                "sum": seconds,
                "mean": seconds / answered if answered else None,
            },
            "bulk": {
                "exports": exports,
                "records": int(value("harvest_broker_bulk_objects_total", {"kind": "record"})),
                "deletes": int(value("harvest_broker_bulk_objects_total", {"kind": "delete"})),
            },
            "hsr_registrations": registrations,
            "gc": {"runs": broker.gc_runs, "failures": broker.gc_failures, "last": broker.gc_last},
        }

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(await self._stats())

    async def metrics(self, request: web.Request) -> web.Response:
        body = await self._metrics.exposition(self._broker)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- admin ------------------------------------------------------------------------------

    def authorize(self, request: web.Request) -> None:
        token = self._broker.config.broker.admin_token
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
        scheduler = self._scheduler
        if scheduler is None:
            raise web.HTTPServiceUnavailable(
                text=json.dumps({"error": "the broker is starting"}),
                content_type="application/json",
            )
        return scheduler

    def _effective(self, collection: CollectionConfig) -> CollectionConfig:
        """The collection as scheduled: without a TTL of its own, it takes the default TTL
        an administrator set (the collector falls back to the configured one)."""
        settings = self._broker.settings
        if (
            collection.ttl is None
            and settings.default_ttl != self._broker.config.broker.default_ttl
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
            return _json_error(409, f"the name {hsr.COLLECTION!r} is the server registry's")
        if collection.name in scheduler.status():
            return _json_error(409, f"collection {collection.name!r} exists")
        self._broker.settings.collections[collection.name] = collection
        scheduler.add(self._effective(collection))
        return web.json_response(
            collection_json(
                collection.name,
                collection,
                scheduler.status()[collection.name],
                0,
                None,
                None,
                self._broker.settings.default_ttl,
            ),
            status=201,
        )

    async def remove_collection(self, request: web.Request) -> web.Response:
        self.authorize(request)
        scheduler = self._live_scheduler()
        name = request.match_info["name"]
        keep = _flag(request.query, "keep")
        # A pull in progress would apply its objects after they were forgotten: let it end.
        limit = self._broker.config.broker.pull_timeout + WAIT_GRACE

        def idle() -> bool:
            status = scheduler.status().get(name)
            return status is None or not status.running

        if not await _poll(idle, limit):
            return _json_error(504, f"the pull of {name!r} did not end within {limit:g} s")
        if name not in scheduler.status():
            raise self._unknown(name)
        scheduler.remove(name)
        self._broker.settings.collections.pop(name, None)
        removed: tuple[str, ...] = ()
        if not keep:
            removed = await self._broker.registry.forget(name, now=time.time())
            await self._broker.catch_up()
        return web.json_response({"removed": name, "objects_removed": len(removed)})

    async def pull(self, request: web.Request) -> web.Response:
        self.authorize(request)
        scheduler = self._live_scheduler()
        name = request.match_info["name"]
        full = _flag(request.query, "full")
        wait = _flag(request.query, "wait")
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
        limit = self._broker.config.broker.pull_timeout + WAIT_GRACE

        def done() -> bool:
            status = scheduler.status().get(name)
            return status is None or status.pulls >= target

        if not await _poll(done, limit):
            return _json_error(504, f"the pull of {name!r} did not end within {limit:g} s")
        now = scheduler.status().get(name)
        if now is None:
            return _json_error(409, f"collection {name!r} was removed meanwhile")
        await self._broker.catch_up()  # the answer implies the index has what was pulled
        if now.failures > before.failures and now.last_error is not None:
            error = now.last_error
            return _json_error(
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
        settings = self._broker.settings
        settings.default_ttl = seconds
        applies = []
        for collection in settings.collections.values():
            if collection.ttl is None:
                scheduler.add(dataclasses.replace(collection, ttl=seconds))
                applies.append(collection.name)
        return web.json_response({"default_ttl": seconds, "collections": sorted(applies)})

    async def gc(self, request: web.Request) -> web.Response:
        self.authorize(request)
        before = await self._broker.registry.count()
        reconciled = await self._broker.collect_garbage()
        after = await self._broker.registry.count()
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
        indexed = await self._broker.rebuild_index()
        return web.json_response({"indexed": indexed, "seconds": time.perf_counter() - started})

    async def admin_stats(self, request: web.Request) -> web.Response:
        self.authorize(request)
        broker = self._broker
        directory = broker.config.broker.data_dir
        stats = await self._stats()
        stats["collections"] = await self._collections()
        stats["settings"] = {
            "default_ttl": broker.settings.default_ttl,
            "configured_default_ttl": broker.config.broker.default_ttl,
            "gc_period": broker.config.broker.gc_period,
            "max_results": broker.config.broker.max_results,
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


def _route(request: web.Request) -> str:
    """The matched route's pattern (bounded: the registered routes), for metrics."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _is_api(request: web.Request) -> bool:
    return request.path.startswith(("/api/", "/bulk", "/metrics"))


def make_app(broker: Broker) -> web.Application:
    """The broker's web application (the API, bulk export, admin, HSR, search page)."""
    metrics = BrokerMetrics()
    api = Api(broker, metrics)
    exporter = bulk.BulkExport(broker.registry, metrics)

    @web.middleware
    async def _counted(request: web.Request, handler: Handler) -> web.StreamResponse:
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        finally:
            metrics.http_requests.labels(_route(request), f"{status // 100}xx").inc()

    @web.middleware
    async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except QuerySyntaxError as error:
            return _problem(request, 400, error.reason, position=error.position, query=error.query)
        except (bulk.BulkRequestError, hsr.RegistrationError, ReplicaError) as error:
            return _problem(request, 400, str(error))
        except ConfigError as error:
            return _problem(request, 400, "; ".join(error.problems), problems=error.problems)
        except IndexNotReady as error:
            response = _problem(request, 503, f"the broker cannot answer now: {error}")
            response.headers["Retry-After"] = str(RETRY_FILLING)
            return response
        except (StorageError, EngineError) as error:
            return _problem(request, 503, f"the broker cannot answer now: {error}")
        except web.HTTPException as error:
            if error.status < 400 or error.content_type == "application/json":
                raise
            return _problem(request, error.status, error.reason)

    def _problem(request: web.Request, status: int, reason: str, **extra: Any) -> web.Response:
        if _is_api(request):
            return _json_error(status, reason, **extra)
        return search_page.error_page(status, f"{status}", reason)

    app = web.Application(middlewares=[_counted, _errors])
    app.on_startup.append(api.startup)
    search_page = page.add_routes(app, broker, metrics)
    hsr.add_routes(app, broker, metrics)
    replica_api.add_routes(app, broker, api.authorize)
    router = app.router
    router.add_get("/api/search", api.search)
    router.add_get("/api/objects/{oid}", api.object)
    router.add_get("/api/status", api.status)
    router.add_get("/api/stats", api.stats)
    router.add_get("/metrics", api.metrics)
    router.add_get("/bulk", exporter.handle, allow_head=False)
    router.add_post("/api/admin/collections", api.add_collection)
    router.add_delete("/api/admin/collections/{name}", api.remove_collection)
    router.add_post("/api/admin/collections/{name}/pull", api.pull)
    router.add_put("/api/admin/default-ttl", api.default_ttl)
    router.add_post("/api/admin/gc", api.gc)
    router.add_post("/api/admin/rebuild", api.rebuild)
    router.add_get("/api/admin/stats", api.admin_stats)
    return app
