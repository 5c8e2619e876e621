"""The Harvest Server Registry (HSR): one SOIF record per gatherer, broker, cache and
replicator, held by a broker so that it can be searched and replicated like any collection.

**Server records.** Template ``GATHERER``, ``BROKER``, ``CACHE`` or ``REPLICATOR``; the URL
is where the server answers (``http://host:port/``; the record's identity: registering the
same URL again renews it). Attributes:

=================  ==========================================================================
Name               the server's name (required)
Host, Port         where it runs (required; Port 1-65535); Ports: more, free text
Description        what it holds or serves (its contents), free text
Administrator      who runs it (an address)
Software-Version   what it runs
Server-Type        the template in lower case, set by the registry (``Server-Type: broker``)
Last-Seen          when it last registered (epoch seconds), set by the registry
Update-Time        the same, the broker's usual attribute
Time-to-Live       seconds the registration lasts without a renewal (default 2 days)
=================  ==========================================================================

**Registration.** ``POST /api/hsr/register`` with one record as the body. It is validated
(``validate``), stamped, and written into the local collection ``hsr`` through the registry's
staged pull, then the index catches up: registrations get change numbers like pulled objects,
so the bulk export replicates them, and expire (removed by garbage collection) when not
renewed within their Time-to-Live. ``GET /api/hsr`` lists the unexpired ones. Any broker
accepts registrations (any broker can be an HSR); the body is bounded and checked.

**Routing.** A broker's registration carries its content summary (``Content-Summary``,
broker/federation/summary.py), renewed as its collections change. ``GET /api/hsr/route?q=``
ranks the registered brokers for a query from those (broker/federation/route.py), each with
the reason: where a federated search sends the query.

**Clients** (harvest_common/hsr_client.py, shared by every server). ``register`` posts one
record; ``registered`` keeps a running server's own record renewed (``[hsr]``
configuration: brokers, gatherers, replicators, caches); ``harvest-broker register`` lets
other programs register from cron or a systemd timer.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from broker.errors import BrokerError, QuerySyntaxError
from broker.federation import Candidate, ContentSummary, Ranked, SummaryFormatError, from_record
from broker.federation import rank as ranked_brokers
from broker.index.schema import Analyzer
from broker.metrics import BrokerMetrics
from broker.oid import GATHERER_ATTRIBUTES, oid
from broker.query import Node, describe, parse
from broker.registry import Stored
from broker.services import Services
from harvest_common.errors import SoifError
from harvest_common.hsr_client import TYPES, seconds_text
from harvest_common.soif import Record, decode

log = logging.getLogger(__name__)

COLLECTION = "hsr"
TEMPLATES = frozenset(t.upper() for t in TYPES)
REQUIRED = ("Name", "Host", "Port")
DAY = 86_400.0
DEFAULT_TTL = 2 * DAY
MAX_TTL = 365 * DAY
MAX_BODY = 64 * 1024  # one server record; far more than its attributes need
MAX_LIST = 1000  # registrations one GET /api/hsr returns (and a route ranks) at most
DEFAULT_ROUTE = 10  # brokers a route lists unless asked for more
# Attributes the registry sets itself (whatever the server sent), and those it drops: a
# registration is filed under the ``hsr`` collection by its URL, never by a gatherer's name.
STAMPED = ("Server-Type", "Last-Seen", "Update-Time", "Time-to-Live")
_DROPPED = frozenset(a.lower() for a in GATHERER_ATTRIBUTES)
_STAMPED_KEYS = frozenset(a.lower() for a in STAMPED)
_HOST = re.compile(r"[A-Za-z0-9._:\[\]-]{1,255}")


class RegistrationError(BrokerError):
    """A registration the HSR refuses (bad record): ``reason`` says why (400)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def validate(record: Record, now: float) -> Record:
    """The record to store for a registration received at ``now``: checked (template,
    required attributes, URL, port, TTL) and stamped (Server-Type, Last-Seen, Update-Time,
    Time-to-Live). Raises RegistrationError with the reason."""
    if record.template not in TEMPLATES:
        allowed = ", ".join(sorted(TEMPLATES))
        raise RegistrationError(f"template must be one of {allowed}, got {record.template!r}")
    try:
        parts = urlsplit(record.url)
        url_port = parts.port  # ValueError too: a port that is no number, or over 65535
    except ValueError as error:  # an IPv6 literal that is not one, a bad port...
        raise RegistrationError(f"URL is not a valid URL ({error}): {record.url[:200]!r}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RegistrationError(f"URL must be http:// or https://, got {record.url[:200]!r}")
    if url_port == 0:
        raise RegistrationError(f"URL's port must be from 1 to 65535, got {record.url[:200]!r}")
    for attribute in REQUIRED:
        value = (record.text(attribute) or "").strip()
        if not value:
            raise RegistrationError(f"attribute {attribute} is required")
    host = (record.text("Host") or "").strip()
    if not _HOST.fullmatch(host):
        raise RegistrationError(f"Host must be a host name or address, got {host[:80]!r}")
    port = (record.text("Port") or "").strip()
    if _port(port) is None:
        raise RegistrationError(f"Port must be a number from 1 to 65535, got {port[:20]!r}")
    ttl = DEFAULT_TTL
    if (given := record.text("Time-to-Live")) is not None:
        try:
            ttl = float(given.strip())
        except ValueError:
            ttl = math.nan
        if not (math.isfinite(ttl) and 0 < ttl <= MAX_TTL):
            raise RegistrationError(
                f"Time-to-Live must be seconds from 1 to {MAX_TTL:.0f}, got {given[:40]!r}"
            )
    kept = tuple(
        (name, value)
        for name, value in record.attributes
        if name.lower() not in _DROPPED and name.lower() not in _STAMPED_KEYS
    )
    stamps = (
        ("Server-Type", record.template.lower()),
        ("Last-Seen", seconds_text(now)),
        ("Update-Time", seconds_text(now)),
        ("Time-to-Live", seconds_text(ttl)),
    )
    return Record(record.template, record.url, kept + tuple((n, v.encode()) for n, v in stamps))


def parse_body(body: bytes) -> Record:
    """The one server record in a request body; RegistrationError otherwise."""
    try:
        items = decode(body)
    except SoifError as error:
        raise RegistrationError(f"the body is not SOIF: {error}") from error
    if len(items) != 1 or not isinstance(items[0], Record):
        raise RegistrationError("the body must hold exactly one SOIF record")
    return items[0]


@dataclass(frozen=True, slots=True)
class Registration:
    """A registration as the HSR holds it."""

    oid: str
    url: str
    type: str
    expires: float
    renewed: bool  # the server was registered already

    def json(self) -> dict[str, Any]:
        return {
            "oid": self.oid,
            "url": self.url,
            "type": self.type,
            "expires": self.expires,
            "renewed": self.renewed,
        }


async def accept(services: Services, record: Record, now: float) -> Registration:
    """Validate ``record`` and store it in the ``hsr`` collection (a new registration, or a
    renewal of the same URL's), then bring the index up to date."""
    stored = validate(record, now)
    key = oid(COLLECTION, stored.url)
    before = await services.registry.get(key)
    async with services.registry.begin(COLLECTION) as pull:
        await pull.add([stored])
        await pull.commit(cursor=None, complete=False, now=now, default_ttl=DEFAULT_TTL)
    await services.catch_up()
    after = await services.registry.get(key)
    expires = after.expires if after is not None else now + DEFAULT_TTL
    return Registration(key, stored.url, record.template.lower(), expires, before is not None)


def server_json(stored: Stored) -> dict[str, Any]:
    """A registration for GET /api/hsr."""
    record = stored.record

    def text(name: str) -> str | None:
        return record.text(name)

    port = text("Port")
    last_seen = text("Last-Seen")
    return {
        "oid": stored.oid,
        "url": stored.url,
        "type": record.template.lower(),
        "name": text("Name"),
        "host": text("Host"),
        "port": None if port is None else _port(port.strip()),
        "description": text("Description"),
        "administrator": text("Administrator"),
        "software_version": text("Software-Version"),
        "ports": text("Ports"),
        "region": text("Region"),
        "networks": (text("Networks") or "").split(),
        "last_seen": float(last_seen) if last_seen and _is_number(last_seen) else None,
        "expires": stored.expires,
        "collection": stored.collection,
    }


def route_json(node: Node, ranked: Sequence[Ranked], limit: int) -> dict[str, Any]:
    """A route for GET /api/hsr/route: the brokers, best first."""
    return {
        "query": describe(node),
        "total": len(ranked),
        "brokers": [
            {
                "url": r.url,
                "name": r.name,
                "estimate": r.estimate,
                "documents": r.documents,
                "evidence": r.evidence,
                "reason": r.reason,
            }
            for r in ranked[:limit]
        ],
    }


def _limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_ROUTE
    if not (text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= MAX_LIST):
        raise RegistrationError(f"limit must be a whole number from 1 to {MAX_LIST}")
    return int(text)


def _ranked(node: Node, candidates: Sequence[Candidate]) -> list[Ranked]:
    """The ranking (on a worker thread: a thousand summaries to read)."""
    return ranked_brokers(node, candidates, Analyzer().tokens)


def _port(text: str) -> int | None:
    # ASCII digits only: "²" is a digit to isdigit, not to int.
    if text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535:
        return int(text)
    return None


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


class HsrService:
    """The HSR's handlers over one broker."""

    def __init__(self, services: Services, metrics: BrokerMetrics) -> None:
        self._services = services
        self._metrics = metrics
        # Brokers' summaries as read, by oid, with the seq of the registration they came from.
        self._summaries: dict[str, tuple[int, ContentSummary | None]] = {}

    async def register(self, request: web.Request) -> web.Response:
        try:
            body = await _body(request, MAX_BODY)
            registration = await accept(self._services, parse_body(body), time.time())
        except RegistrationError:
            self._metrics.hsr_registrations.labels("invalid", "invalid").inc()
            raise
        outcome = "renewed" if registration.renewed else "new"
        self._metrics.hsr_registrations.labels(registration.type, outcome).inc()
        return web.json_response(registration.json(), status=200 if registration.renewed else 201)

    async def list(self, request: web.Request) -> web.Response:
        """Unexpired registrations, optionally of one ``type`` and matching query ``q``."""
        kind = request.query.get("type")
        if kind is not None and kind not in TYPES:
            raise RegistrationError(f"type must be one of {', '.join(TYPES)}, got {kind!r}")
        with self._metrics.query("hsr"):
            registered = await self._registered(kind, request.query.get("q"))
        servers = [server_json(s) for s in registered]
        servers.sort(key=lambda s: (s["type"], s["name"] or "", s["url"]))
        return web.json_response({"total": len(servers), "servers": servers})

    async def route(self, request: web.Request) -> web.Response:
        """The registered brokers ranked for query ``q``, at most ``limit``."""
        limit = _limit(request.query.get("limit"))
        with self._metrics.query("hsr"):
            node = parse(request.query.get("q", ""))
            brokers = await self._registered("broker", None)
            candidates = [
                Candidate(s.url, s.record.text("Name") or s.url, self._summary(s)) for s in brokers
            ]
            self._summaries = {s.oid: self._summaries[s.oid] for s in brokers}
            ranked = await asyncio.to_thread(_ranked, node, candidates)
        return web.json_response(route_json(node, ranked, limit))

    def _summary(self, stored: Stored) -> ContentSummary | None:
        held = self._summaries.get(stored.oid)
        if held is not None and held[0] == stored.seq:
            return held[1]
        try:
            summary = from_record(stored.record)
        except SummaryFormatError as error:
            log.warning("the summary of %s cannot be read: %s", stored.url, error)
            summary = None
        self._summaries[stored.oid] = (stored.seq, summary)
        return summary

    async def _registered(self, kind: str | None, query: str | None) -> Sequence[Stored]:
        """Unexpired registrations of ``kind`` (every kind: None) matching ``query``."""
        text = f"Server-Type: ({kind or ' OR '.join(TYPES)})"
        if extra := (query or "").strip():
            text = f"{text} AND ({extra})"
        now = time.time()
        try:
            page = await self._services.search(text, limit=MAX_LIST)
        except QuerySyntaxError as error:
            # Positions refer to the q parameter, not to the query it was wrapped in.
            offset = len(text) - len(extra) - 1
            raise QuerySyntaxError(extra, max(0, error.position - offset), error.reason) from None
        stored = await self._services.registry.get_many(r.oid for r in page.results)
        return [
            s
            for r in page.results
            if (s := stored.get(r.oid)) is not None
            and s.record.template in TEMPLATES
            and s.expires > now
        ]


async def _body(request: web.Request, limit: int) -> bytes:
    """The request body, read until its end or until it is over ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise RegistrationError(f"a server record may have at most {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


def add_routes(app: web.Application, services: Services, metrics: BrokerMetrics) -> None:
    service = HsrService(services, metrics)
    app.router.add_post("/api/hsr/register", service.register)
    app.router.add_get("/api/hsr", service.list)
    app.router.add_get("/api/hsr/route", service.route)
