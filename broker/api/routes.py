"""The broker's HTTP application: the JSON API, the bulk export, the admin API, the HSR, the
search page and the metrics, with one error boundary, built from the running broker's
``Services`` (broker/services.py).

::

    GET  /api/search?q=&limit=&offset=&case=0|1    a page of results (broker.api.queries);
                    [&federated=1]                  of the brokers the HSR picks;
                    [&facets=1]                     with the query's facets (broker.facets)
    GET  /api/objects/{oid}[?format=soif|json]      one object
    GET  /api/status                                name, version, objects, index, collections
    GET  /api/stats                                 counters (queries, exports, registrations)
    GET  /metrics                                   Prometheus text format (broker.api.status)
    GET  /bulk[?since=SEQ][&query=Q]                SOIF stream (broker.bulk)
    POST /api/hsr/register, GET /api/hsr            the server registry (broker.hsr)
    GET  /api/hsr/route?q=[&limit=]                 the brokers ranked for a query
    GET  /, /help, /static/...                      the search page (broker.web)

    admin (Authorization: Bearer <broker.admin_token>; broker.api.admin):
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

The error boundary (``_errors``) maps the typed errors once: QuerySyntaxError → 400 ``{error,
position, query}``; a bad parameter, record or collection → 400; StorageError and
EngineError → 503; FederationError (the HSR could not route a federated search) → 502;
under ``/api`` and ``/bulk`` every error is JSON ``{"error": ...}``, on the search page an
HTML page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from broker import bulk, hsr, replica_api
from broker import web as page
from broker.api.admin import AdminApi
from broker.api.params import json_error
from broker.api.queries import QueryApi
from broker.api.status import StatusApi
from broker.errors import (
    ConfigError,
    EngineError,
    FederationError,
    IndexNotReady,
    QuerySyntaxError,
    ReplicaError,
    StorageError,
)
from broker.metrics import BrokerMetrics
from broker.services import Services
from harvest_common.software import software_version

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

RETRY_FILLING = 10  # seconds a search refused while a new index fills is told to wait


def _route(request: web.Request) -> str:
    """The matched route's pattern (bounded: the registered routes), for metrics."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _is_api(request: web.Request) -> bool:
    return request.path.startswith(("/api/", "/bulk", "/metrics"))


async def _read_version(app: web.Application) -> None:
    await asyncio.to_thread(software_version)  # reads package metadata once


def make_app(services: Services) -> web.Application:
    """The broker's web application (the API, bulk export, admin, HSR, search page)."""
    metrics = BrokerMetrics()
    queries = QueryApi(services, metrics)
    status = StatusApi(services, metrics)
    admin = AdminApi(services, metrics)
    exporter = bulk.BulkExport(services.registry, metrics)

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
        except FederationError as error:
            return _problem(request, 502, str(error))
        except web.HTTPException as error:
            if error.status < 400 or error.content_type == "application/json":
                raise
            return _problem(request, error.status, error.reason)

    def _problem(request: web.Request, status: int, reason: str, **extra: Any) -> web.Response:
        if _is_api(request):
            return json_error(status, reason, **extra)
        return search_page.error_page(status, f"{status}", reason)

    app = web.Application(middlewares=[_counted, _errors])
    app.on_startup.append(_read_version)
    search_page = page.add_routes(app, services, metrics)
    hsr.add_routes(app, services, metrics)
    replica_api.add_routes(app, services, admin.authorize)
    router = app.router
    router.add_get("/api/search", queries.search)
    router.add_get("/api/objects/{oid}", queries.object)
    router.add_get("/api/status", status.status)
    router.add_get("/api/stats", status.stats)
    router.add_get("/metrics", status.metrics)
    router.add_get("/bulk", exporter.handle, allow_head=False)
    router.add_post("/api/admin/collections", admin.add_collection)
    router.add_delete("/api/admin/collections/{name}", admin.remove_collection)
    router.add_post("/api/admin/collections/{name}/pull", admin.pull)
    router.add_put("/api/admin/default-ttl", admin.default_ttl)
    router.add_post("/api/admin/gc", admin.gc)
    router.add_post("/api/admin/rebuild", admin.rebuild)
    router.add_get("/api/admin/stats", admin.admin_stats)
    return app
