"""The export service (Harvest's ``gatherd``): brokers collect the gatherer's records over HTTP.

::

    GET /                      JSON status: name, record counts, last update time
    GET /records               every current record, as a SOIF stream
    GET /records?since=T       the changes after T (epoch seconds, exclusive): changed
                               records whole, @REFRESH and @DELETE wrappers for the rest
    GET /metrics               Prometheus text format: what the gathering runs reported
                               (gatherer/metrics.py), read from the database at each scrape

The stream is ``application/x-soif``, chunked, compressed as the client's Accept-Encoding
allows (zstd if listed, else gzip, else identity). ``X-Harvest-Until`` is the snapshot's
newest update time: the client's next ``since``, even when nothing was sent.
``X-Harvest-Complete: true`` says the stream holds every record and no deletions (no
``since``, or one older than the deletions still remembered): the client replaces what it
holds from this gatherer. The body is cut short (no final chunk) if the export fails midway.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing, asynccontextmanager

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gatherer.config import GATHER_INTERVAL
from gatherer.database import GathererDatabase, after_us, time_text, to_us
from gatherer.errors import DatabaseError
from gatherer.export import export
from gatherer.metrics import ServiceMetrics
from harvest_common.software import software_version
from harvest_common.soif.transport import SOIF_TYPE, choose_encoding, compressed

log = logging.getLogger(__name__)


_DATABASE = web.AppKey("database", GathererDatabase)
_NAME = web.AppKey("name", str)
_METRICS = web.AppKey("metrics", ServiceMetrics)

# Epoch seconds: digits with an optional fraction (no sign, exponent, blanks or "nan").
_SINCE = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,9})?")
# How long a stopping server lets exports in progress run on before cutting them.
_SHUTDOWN_TIMEOUT = 5.0


def _since(request: web.Request) -> float | None:
    text = request.query.get("since")
    if text is None:
        return None
    if not _SINCE.fullmatch(text):
        raise web.HTTPBadRequest(
            text=f"since must be epoch seconds, e.g. since=1764503554.123456; got {text!r}\n"
        )
    return float(text)


async def _status(request: web.Request) -> web.Response:
    try:
        stats = await request.app[_DATABASE].stats()
    except DatabaseError as error:
        raise web.HTTPServiceUnavailable(text=f"{error}\n") from error
    return web.json_response(
        {
            "name": request.app[_NAME],
            "records": stats.records,
            "manual": stats.manual,
            "tombstones": stats.tombstones,
            "failing": stats.failing,
            "last_update": time_text(to_us(stats.last_update)),
        }
    )


async def _metrics(request: web.Request) -> web.Response:
    try:
        report = await request.app[_DATABASE].gather_report()
    except DatabaseError as error:
        raise web.HTTPServiceUnavailable(text=f"{error}\n") from error
    body = await request.app[_METRICS].exposition(report, time.time())
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _records(request: web.Request) -> web.StreamResponse:
    since = _since(request)
    encoding = choose_encoding(request.headers.get("Accept-Encoding"))
    async with AsyncExitStack() as stack:
        try:
            stream = await stack.enter_async_context(export(request.app[_DATABASE], since))
        except DatabaseError as error:
            raise web.HTTPServiceUnavailable(text=f"{error}\n") from error
        response = web.StreamResponse(
            headers={
                "Content-Type": SOIF_TYPE,
                "Vary": "Accept-Encoding",
                "X-Harvest-Until": time_text(to_us(stream.until)),
                "X-Harvest-Complete": "true" if stream.complete else "false",
            }
        )
        if since is not None:
            response.headers["X-Harvest-Since"] = time_text(after_us(since))
        if encoding != "identity":
            response.headers["Content-Encoding"] = encoding
        await response.prepare(request)  # no length: HTTP/1.1 chunks it
        try:
            async with aclosing(compressed(stream, encoding)) as chunks:
                async for chunk in chunks:
                    await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:
            # A broker that hangs up midway resumes later from the last Update-Time it got.
            log.info("%s left during an export", request.remote)
    return response


def make_app(db: GathererDatabase, *, name: str, metrics: ServiceMetrics) -> web.Application:
    """The service's application; ``name`` is the gatherer's, shown in the status."""
    app = web.Application()
    app[_DATABASE] = db
    app[_NAME] = name
    app[_METRICS] = metrics
    app.router.add_get("/", _status)
    app.router.add_get("/records", _records, allow_head=False)
    app.router.add_get("/metrics", _metrics)
    return app


@asynccontextmanager
async def serve(
    db: GathererDatabase,
    host: str,
    port: int,
    name: str,
    *,
    interval: float = GATHER_INTERVAL,
) -> AsyncIterator[int]:
    """Serve ``db`` on ``host:port`` (0 picks a free port) for the ``async with`` block;
    yields the bound port. ``interval`` is the configured Gather-Interval, for /metrics."""
    version = await asyncio.to_thread(software_version)
    metrics = ServiceMetrics(interval=interval, version=version)
    runner = web.AppRunner(
        make_app(db, name=name, metrics=metrics),
        handle_signals=False,
        shutdown_timeout=_SHUTDOWN_TIMEOUT,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        log.info("serving %s on %s", name, site.name)
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
