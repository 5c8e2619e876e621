"""The bulk export: the registry's objects as a SOIF stream, for another broker's collector
(``kind = "broker"``) and for replicas.

::

    GET /bulk                      every object (complete)
    GET /bulk?since=SEQ            the changes after change number SEQ (incremental)
    GET /bulk?...&query=Q          only the objects matching the query Q

    -> 200 application/x-soif, Content-Encoding: zstd | gzip | (none) as Accept-Encoding allows
       X-Harvest-Until: the registry's last change number when the export began
       X-Harvest-Complete: true | false

A complete export (no ``since``, or one the registry can no longer answer exactly: older than
its oldest retained change, or newer than its last) holds every object (that matches), as
bare ``@FILE`` records; the client replaces what it holds from this source. An incremental
export walks the change sequence after ``since`` in order: an upserted object that matches (or
every one, without a query) comes whole; one that does not match comes as a ``@DELETE``
marker, because it may have matched before; a removed object comes as a ``@DELETE`` marker.
A marker carries the object's URL and, when its gatherer is known (``name@host:port``), the
Gatherer-Name, -Host and -Port attributes that identify it; an object filed under its
collection's name (its record has no Gatherer-* attributes) gets a marker with the URL only,
which deletes by URL within the client's collection.

Memory is bounded: the changes are read ``BATCH`` at a time (the registry pages by change
number), matched and encoded on a worker thread, compressed chunk by chunk. The walk goes on
past ``X-Harvest-Until`` to the end of the sequence, so an object changed during the export
is still sent (it moved to a higher number); the client may receive it again next time, which
is harmless. If the export fails midway the body is cut short (no final chunk), so the client
applies nothing of it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from aiohttp import web

from broker.errors import BrokerError
from broker.match import matches
from broker.metrics import BrokerMetrics
from broker.oid import GATHERER_ATTRIBUTES
from broker.query.ast import Node
from broker.query.parser import parse
from broker.registry import Change, Registry
from broker.sync import attributes_text
from harvest_common.soif import Record, encode, encode_delete
from harvest_common.soif.transport import SOIF_TYPE, choose_encoding, compressed

log = logging.getLogger(__name__)

UNTIL = "X-Harvest-Until"
COMPLETE = "X-Harvest-Complete"
# Changes read, matched and encoded at a time: a few hundred KiB of records.
BATCH = 500
_SEQ = re.compile(r"[0-9]{1,18}")
_GATHERER_KEYS = frozenset(a.lower() for a in GATHERER_ATTRIBUTES)


class BulkRequestError(BrokerError):
    """A bad ``since``: the reason is the client's to read (400)."""


@dataclass(frozen=True, slots=True)
class BulkRequest:
    """What was asked: changes after ``since`` (None: everything), matching ``node``."""

    since: int | None
    query: str | None
    node: Node | None


def bulk_request(params: Mapping[str, str]) -> BulkRequest:
    """The request in ``params``; BulkRequestError for a bad since, QuerySyntaxError for a
    query that does not parse."""
    since = params.get("since")
    if since is not None and not _SEQ.fullmatch(since):
        raise BulkRequestError(f"since must be a change number (digits), got {since[:40]!r}")
    query = params.get("query")
    node = None if query is None else parse(query)
    return BulkRequest(None if since is None else int(since), query, node)


def delete_marker(url: str, gatherer: str) -> Record:
    """The ``@FILE`` inside a ``@DELETE`` for the object ``url`` of ``gatherer``: its
    Gatherer-* attributes parsed back from ``name@host:port``, or none when the object was
    filed under a collection's name (which holds no ``@``)."""
    name, at, rest = gatherer.rpartition("@")
    if not at:
        return Record("FILE", url)
    host, colon, port = rest.rpartition(":")
    if not colon:
        host, port = rest, ""
    values = (name, host, port)
    attributes = tuple(
        (attribute, value.encode())
        for attribute, value in zip(GATHERER_ATTRIBUTES, values, strict=True)
        if value
    )
    return Record("FILE", url, attributes)


def _marker_of(record: Record) -> Record:
    """A delete marker copied from the record itself (its URL and Gatherer-* attributes)."""
    attributes = tuple(
        (name, value) for name, value in record.attributes if name.lower() in _GATHERER_KEYS
    )
    return Record("FILE", record.url, attributes)


@dataclass(frozen=True, slots=True)
class Rendered:
    """One batch as SOIF, and what it holds."""

    soif: bytes
    records: int
    deletes: int


def render(changes: Sequence[Change], node: Node | None, complete: bool) -> Rendered:
    """One batch of changes as SOIF (pure; CPU work, run on a worker thread). ``complete``:
    removals and objects that do not match are left out rather than sent as deletes."""
    parts: list[bytes] = []
    markers: list[Record] = []  # a run of deletes, sent in one wrapper
    records = deletes = 0
    for change in changes:
        record = change.record
        if record is not None and (node is None or matches(node, attributes_text(record))):
            if markers:
                parts.append(encode_delete(markers))
                markers = []
            parts.append(encode(record))
            records += 1
        elif not complete:
            if record is not None:
                markers.append(_marker_of(record))  # an upsert that (no longer) matches
            else:
                markers.append(delete_marker(change.url, change.gatherer))
            deletes += 1
    if markers:
        parts.append(encode_delete(markers))
    return Rendered(b"".join(parts), records, deletes)


@dataclass(frozen=True, slots=True)
class Plan:
    """Where an export starts and what its headers say."""

    start: int  # change number to read after
    until: int  # X-Harvest-Until
    complete: bool  # X-Harvest-Complete


async def plan(registry: Registry, since: int | None) -> Plan:
    """Complete unless ``since`` is one the change sequence answers exactly."""
    last = await registry.last_seq()
    oldest = await registry.oldest_seq()
    if since is None or since < oldest or since > last:
        return Plan(0, last, True)
    return Plan(since, last, False)


class BulkExport:
    """The ``GET /bulk`` handler over one registry."""

    def __init__(self, registry: Registry, metrics: BrokerMetrics) -> None:
        self._registry = registry
        self._metrics = metrics

    async def handle(self, request: web.Request) -> web.StreamResponse:
        asked = bulk_request(request.query)  # errors become 400 at the app's boundary
        where = await plan(self._registry, asked.since)
        encoding = choose_encoding(request.headers.get("Accept-Encoding"))
        response = web.StreamResponse(
            headers={
                "Content-Type": SOIF_TYPE,
                "Vary": "Accept-Encoding",
                "Cache-Control": "no-store",
                UNTIL: str(where.until),
                COMPLETE: "true" if where.complete else "false",
            }
        )
        if encoding != "identity":
            response.headers["Content-Encoding"] = encoding
        mode = "complete" if where.complete else "incremental"
        await response.prepare(request)  # no length: HTTP/1.1 chunks it
        outcome = "cut"
        try:
            async with aclosing(compressed(self._chunks(where, asked.node), encoding)) as chunks:
                async for chunk in chunks:
                    await response.write(chunk)
            await response.write_eof()
            outcome = "ok"
        except ConnectionResetError:
            # The client resumes from its cursor next time; nothing of this export applies.
            log.info("%s left during a bulk export", request.remote)
        except BrokerError as error:
            # Headers are sent: the only way to say "failed" is to cut the body short.
            log.error("bulk export cut short: %s", error)
            raise ExportCut(str(error)) from error
        finally:
            self._metrics.bulk_exports.labels(mode, outcome).inc()
        return response

    async def _chunks(self, where: Plan, node: Node | None) -> AsyncGenerator[bytes, None]:
        cursor = where.start
        while changes := await self._registry.changes_since(cursor, BATCH):
            cursor = changes[-1].seq
            batch = await asyncio.to_thread(render, changes, node, where.complete)
            self._metrics.bulk_objects.labels("record").inc(batch.records)
            self._metrics.bulk_objects.labels("delete").inc(batch.deletes)
            if batch.soif:
                yield batch.soif


class ExportCut(Exception):
    """A bulk export failed after its headers were sent; aiohttp closes the connection
    without the final chunk. Deliberately not a BrokerError: no error response can follow."""
