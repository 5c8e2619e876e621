"""Fetching GET responses for the cache: one upstream exchange per flight, stored as it streams.

The first client's handler sends the request and waits for the head itself; a body still on
its way is taken by an owned task, so the object is completed and stored for the others even
if the client that started it goes away.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal, NamedTuple, Protocol, assert_never

from harvest_cache.config import Config
from harvest_cache.errors import UpstreamError, UpstreamProtocolError, UpstreamReset
from harvest_cache.hierarchy.route import DIRECT, Hop
from harvest_cache.http import forwarding
from harvest_cache.http.decision import DontStore, Freshen, Invalidate, Mismatch, Store, respond
from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import StoreDecision
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.target import Target
from harvest_cache.http.validation import (
    conditional_headers,
    freshen,
    is_not_modified_for,
    response_etag,
)
from harvest_cache.http.vary import vary_key
from harvest_cache.server.flight import Flight, FlightHead, FlightReader
from harvest_cache.server.request import Request
from harvest_cache.server.routing import Router, request_target
from harvest_cache.server.variants import VariantTags
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.fields import shared_fields
from harvest_cache.store.interface import ObjectStore, ObjectWriter, StoredObject
from harvest_cache.upstream.client import Exchange, OutgoingRequest
from harvest_cache.upstream.connection import Interim

log = logging.getLogger("harvest_cache")

# Unread bytes a flight holds for its slowest reader before the fetch waits.
_WINDOW = 8 << 20


# Stored variants of a URL as (variant key, ETag field value), from VariantTags.
Alternatives = tuple[tuple[str, str], ...]


class Deferred(Protocol):
    """A fetch that makes its flight only once a request joins it: most planned fetches have
    no joiner, and making, publishing to and retiring a flight for none cost a planned
    revalidation 3.7k instructions and a planned miss 7.8k (callgrind)."""

    def publish_to(self, flight: Flight) -> None:
        """Publish to ``flight`` from now on, beginning with what came so far."""


class _Mismatch(Exception):
    """A 304 whose validators do not select the stored response (RFC 9111 4.3.4)."""


def variant_key(url: str, marker: VaryMarker, selecting: str) -> str:
    return f"{url}\x00{marker.generation}\x00{selecting}"


def content_length(headers: Headers) -> int | None:
    value = headers.get("Content-Length")
    return int(value) if value is not None and value.strip().isdigit() else None


def upstream_headers(
    req: Request, target: Target, client_ip: str, name: str, config: Config
) -> Headers:
    """The request's fields as sent upstream (RFC 9110 7.6, RFC 9112 3.2.2)."""
    via = forwarding.via_entry(req.version, name)
    xff = config.access.x_forwarded_for
    headers = forwarding.request_fields(req.headers, target.authority, via, xff, client_ip)
    if req.method in ("OPTIONS", "TRACE"):
        hops = forwarding.max_forwards(headers)
        if hops is not None:
            headers.set("Max-Forwards", str(hops - 1))
    if req.chunked:
        headers.add("Transfer-Encoding", "chunked")
    return headers


def _fetch_fields(
    req: Request,
    target: Target,
    validators: tuple[tuple[str, str], ...],
    client_ip: str,
    name: str,
    config: Config,
) -> bytes:
    headers = upstream_headers(req, target, client_ip, name, config)
    if validators:
        headers.remove(*(field for field, _ in validators))
        for field, value in validators:
            headers.add(field, value)
    return headers.encode()


class FetchRequests:
    """The GET request heads one cache sends upstream, conditional when it revalidates.

    The fields made for recent requests are remembered: a client sends the same fields again
    and again (only the path changes), and composing them is most of the work."""

    def __init__(self, name: str, config: Config, bound: int = 1024) -> None:
        self._name = name
        self._config = config
        self._bound = bound
        self._fields: dict[tuple[object, ...], bytes] = {}

    def head(
        self,
        req: Request,
        target: Target,
        stored: StoredHead | None,
        client_ip: str,
        alternatives: Alternatives = (),
        hop: Hop = DIRECT,
    ) -> bytes:
        """``stored``: the response to validate; else ``alternatives``, stored variants whose
        entity tags the request lists (RFC 9111 4.3.1). ``hop``: where it goes (a peer gets
        the absolute form; a sibling is asked for a hit alone)."""
        if stored is not None:
            validators = conditional_headers(stored)
        elif alternatives:
            validators = (("If-None-Match", ", ".join(tag for _, tag in alternatives)),)
        else:
            validators = ()
        # Everything _fetch_fields reads (a fetch is a GET, so the method plays no part).
        key = (
            client_ip,
            target.authority,
            req.version,
            req.chunked,
            tuple(req.headers),
            validators,
        )
        fields = self._fields.get(key)
        if fields is None:
            fields = _fetch_fields(req, target, validators, client_ip, self._name, self._config)
            if len(self._fields) >= self._bound:
                del self._fields[next(iter(self._fields))]
            self._fields[key] = fields
        line = request_target(target, hop).encode("latin-1")
        if hop.only_if_cached:
            fields += b"Cache-Control: only-if-cached\r\n"
        return b"GET %b HTTP/1.1\r\n%b\r\n" % (line, fields)


def head_to_store(
    url: str,
    status: int,
    reason: str,
    headers: Headers,
    decision: StoreDecision,
    times: tuple[float, float],
    selecting: str,
    body_length: int = 0,
) -> StoredHead:
    """The head a storable response is kept under (its body length, if not yet known, set
    at commit)."""
    if decision.omit_fields:
        kept = headers.copy()
        kept.remove(*decision.omit_fields)
        headers = kept
    request_time, response_time = times
    return StoredHead(
        url,
        status,
        sys.intern(reason),
        shared_fields(headers),
        request_time,
        response_time,
        body_length,
        selecting,
    )


class Sent(NamedTuple):
    """A request already sent, with its response head in: the exchange, its times and the
    hop it went to."""

    exchange: Exchange
    request_time: float
    response_time: float
    hop: Hop = DIRECT


class Fetcher:
    def __init__(
        self,
        config: Config,
        name: str,
        store: ObjectStore,
        router: Router,
        spawn: Callable[..., asyncio.Task[Any]],
    ) -> None:
        self._config = config
        self._name = name
        self._store = store
        self._router = router
        self._spawn = spawn
        self._flights: dict[str, Flight | Deferred] = {}
        # Whether a key is being fetched: the dict's own test (every fast-path request asks).
        self.flying: Callable[[str], bool] = self._flights.__contains__
        self.requests = FetchRequests(name, config)
        self.variant_tags = VariantTags()

    async def join_or_start(
        self,
        req: Request,
        target: Target,
        key: str,
        stored: StoredObject | None,
        client_ip: str,
        interim: Interim | None = None,
        alternatives: Alternatives = (),
    ) -> tuple[Flight, FlightReader, bool]:
        """A reader of the flight for ``key``: an existing one's (joined=True) or a new one's
        (whose 1xx responses go to ``interim``). With nothing ``stored`` for ``key``, the
        fetch may ask whether one of ``alternatives`` (other stored variants) would do.

        A new flight's fetch runs in the calling client's handler up to the response head:
        a handler is never cancelled when its client leaves, so the fetch goes on regardless,
        and a miss costs no task of its own. The body is taken inline when it has already
        arrived whole (so the caller finds it all in the flight), else by an owned task that
        streams it while the caller reads.
        """
        held = self._flights.get(key)
        flight = held if held is None or isinstance(held, Flight) else self.flight_of(key, held)
        if flight is not None:
            reader = flight.join()
            if reader is not None:
                return flight, reader, True
        flight = self.open_flight(key)
        first = flight.join()
        assert first is not None
        head = stored.head if stored is not None else None
        fetch = self._fetch_head(
            flight, req, target, head, client_ip, interim=interim, alternatives=alternatives
        )
        await self._run(flight, target, fetch)
        return flight, first, False

    def flights(self) -> list[Flight]:
        """The fetches in progress that requests have joined or may join."""
        return [f for f in self._flights.values() if isinstance(f, Flight)]

    def fetching(self) -> list[str]:
        """The keys of every fetch in progress."""
        return list(self._flights)

    def holder(self, key: str) -> Flight | Deferred | None:
        """What is fetching ``key``: its flight, or a fetch whose flight is not made yet."""
        return self._flights.get(key)

    def open_flight(self, key: str) -> Flight:
        """A new flight for ``key``, which later requests for it join."""
        flight = Flight(key, _WINDOW)
        self._flights[key] = flight
        return flight

    def hold(self, key: str, fetch: Deferred) -> None:
        """``fetch`` is fetching ``key``; its flight is made when a request joins it."""
        self._flights[key] = fetch

    def flight_of(self, key: str, fetch: Deferred) -> Flight:
        """A flight for ``fetch`` (holding ``key``), which it publishes to from now on."""
        flight = Flight(key, _WINDOW)
        fetch.publish_to(flight)
        if self._flights.get(key) is fetch:
            self._flights[key] = flight
        return flight

    def retire(self, flight: Flight) -> None:
        self.let_go(flight.key, flight)

    def let_go(self, key: str, holder: Flight | Deferred) -> None:
        """The fetch of ``key`` by ``holder`` (its flight, or a deferred fetch) is over."""
        if self._flights.get(key) is holder:
            del self._flights[key]

    def adopt(
        self,
        flight: Flight,
        req: Request,
        target: Target,
        stored: StoredHead | None,
        client_ip: str,
        sent: Sent,
    ) -> None:
        """Take over a fetch whose response head is in: an owned task goes on from there."""
        step = self._fetch_head(flight, req, target, stored, client_ip, sent)
        self._spawn(self._run(flight, target, step), f"fetch {target.url}")

    async def _run(self, flight: Flight, target: Target, step: Coroutine[Any, Any, None]) -> None:
        """Run one step of a fetch; a failure fails the flight, and the flight is retired
        once it is over."""
        try:
            await step
        except UpstreamError as e:
            flight.fail(e)
        except asyncio.CancelledError:
            flight.fail(UpstreamReset("the cache is shutting down"))
            raise
        except Exception as e:
            log.exception("fetch of %s failed", target.url)
            flight.fail(UpstreamProtocolError(f"internal error: {type(e).__name__}"))
        finally:
            if flight.over:
                self.retire(flight)

    async def _fetch_head(
        self,
        flight: Flight,
        req: Request,
        target: Target,
        stored: StoredHead | None,
        client_ip: str,
        sent: Sent | None = None,
        interim: Interim | None = None,
        alternatives: Alternatives = (),
    ) -> None:
        try:
            body = await self._fetch(
                flight, req, target, stored, client_ip, sent, interim, alternatives
            )
        except _Mismatch:
            # The 304 was for some other response: ask again, unconditionally.
            body = await self._fetch(flight, req, target, None, client_ip, None, interim)
        if body is None:
            return
        step, whole = body
        if whole:
            await step
        else:
            self._spawn(self._run(flight, target, step), f"fetch {target.url}")

    async def _fetch(
        self,
        flight: Flight,
        req: Request,
        target: Target,
        stored: StoredHead | None,
        client_ip: str,
        sent: Sent | None = None,
        interim: Interim | None = None,
        alternatives: Alternatives = (),
    ) -> tuple[Coroutine[Any, Any, None], bool] | None:
        """Send the request (unless ``sent``) and publish the response head; returns the
        step that takes the body, and whether the body has already arrived whole (None:
        nothing more to do)."""
        if sent is None:
            route = await self._router.route(req, target)

            def build(hop: Hop) -> OutgoingRequest:
                head = self.requests.head(req, target, stored, client_ip, alternatives, hop)
                return OutgoingRequest(
                    "GET", target.host, target.port, target.tls, head, client_ip, interim=interim
                )

            timeout = self._config.upstream.read_timeout
            exchange, hop, request_time = await self._router.send(route, build, timeout)
            sent = Sent(exchange, request_time, time.time(), hop)
        exchange = sent.exchange
        try:
            storing = await self._receive_head(flight, req, target, stored, sent, alternatives)
        except _Mismatch:
            exchange.release()
            raise
        except BaseException:
            exchange.abort()
            raise
        if storing is False:
            exchange.release()
            return None
        return self._receive_body(flight, exchange, storing), exchange.complete

    async def _receive_head(
        self,
        flight: Flight,
        req: Request,
        target: Target,
        stored: StoredHead | None,
        sent: Sent,
        alternatives: Alternatives = (),
    ) -> tuple[ObjectWriter, StoredHead] | Literal[False] | None:
        """Publish the head; returns the body's writer and the head to store it under (None:
        not stored), or False when the exchange is over (a 304)."""
        exchange, request_time, response_time, hop = sent
        head = exchange.head
        headers = forwarding.end_to_end(head.headers)
        forwarding.ensure_date(headers, response_time)
        times = (request_time, response_time)
        peer = exchange.peer_ip
        if stored is None and alternatives and head.status == 304:
            chosen = await self._chosen_variant(alternatives, headers)
            if chosen is None:
                raise _Mismatch
            variant, old = chosen
            fresh = freshen(old, headers, request_time, response_time)
            await self._store.update_head(variant, fresh)
            await exchange.read()
            flight.publish_head(
                FlightHead(
                    304,
                    head.reason,
                    headers,
                    True,
                    peer,
                    fresh.vary_key,
                    fresh,
                    variant,
                    hop=hop.code,
                )
            )
            flight.finish()
            return False
        proxy_only = hop.peer is not None and hop.peer.proxy_only
        response = respond(req.headers, stored, head.status, headers, times, proxy_only=proxy_only)
        storing: tuple[ObjectWriter, StoredHead] | None = None
        selecting = ""
        key = target.url
        match response:
            case Mismatch():
                raise _Mismatch
            case Freshen(head=fresh):
                await self._store.update_head(flight.key, fresh)
                await exchange.read()  # a 304 has no body; this just completes the exchange
                flight.publish_head(
                    FlightHead(
                        304, head.reason, headers, True, peer, fresh.vary_key, fresh, hop=hop.code
                    )
                )
                flight.finish()
                return False
            case Store(decision=decision, vary=names):
                if names:
                    marker = await self._marker(target.url, names)
                    selecting = vary_key(names, req.headers)
                    key = variant_key(target.url, marker, selecting)
                    etag = response_etag(headers)  # (only a valid one goes into If-None-Match)
                    tag = str(etag) if etag is not None else None
                    self.variant_tags.record(target.url, marker.generation, key, tag)
                writer = self._store.open_writer(key, content_length(headers))
                if writer is not None:
                    to_store = head_to_store(
                        target.url, head.status, head.reason, headers, decision, times, selecting
                    )
                    storing = (writer, to_store)
            case Invalidate():
                await self._store.delete(flight.key)
            case DontStore():
                pass
            case _:
                assert_never(response)
        flight.publish_head(
            FlightHead(
                head.status,
                head.reason,
                headers,
                isinstance(response, Store),
                peer,
                selecting,
                stored=storing is not None,
                hop=hop.code,
            )
        )
        return storing

    async def _receive_body(
        self,
        flight: Flight,
        exchange: Exchange,
        storing: tuple[ObjectWriter, StoredHead] | None,
    ) -> None:
        """Take the body into the flight (and, with ``storing``, the store), then end the
        exchange."""
        writer, head = storing if storing is not None else (None, None)
        size = 0
        # When other processes must drop their copies first (``ObjectWriter.confirms``), the
        # last chunk reaches the clients only after the commit.
        holding = writer is not None and writer.confirms
        held = b""
        try:
            while chunk := await exchange.read():
                size += len(chunk)
                if writer is not None:
                    await writer.write(chunk)
                elif flight.readers == 0:
                    # Nobody reads it and it is not stored: stop taking the origin's bytes.
                    raise UpstreamReset("every client left")
                if holding:
                    chunk, held = held, chunk
                    if not chunk:
                        continue
                await flight.publish(chunk)
            if writer is not None:
                assert head is not None
                await writer.commit(head.with_body_length(size))
            if held:
                await flight.publish(held)
        except BaseException:
            exchange.abort()
            if writer is not None:
                await asyncio.shield(writer.abort())
            raise
        exchange.release()
        flight.finish()

    async def _chosen_variant(
        self, alternatives: Alternatives, not_modified: Headers
    ) -> tuple[str, StoredHead] | None:
        """The stored variant a 304 names by its entity tag (RFC 9111 4.3.4), if any is still
        stored; a 304 without one names none of several."""
        if response_etag(not_modified) is None:
            return None
        for variant, _ in alternatives:
            found = self._store.memory_view.get(variant) or await self._store.get(variant)
            if not isinstance(found, StoredObject):
                continue
            if not isinstance(found.body, bytes):
                found.body.file.close()  # only the head is needed
            if is_not_modified_for(found.head, not_modified):
                return variant, found.head
        return None

    async def _marker(self, url: str, names: tuple[str, ...]) -> VaryMarker:
        """The URL's Vary marker, replaced when the response varies on other fields."""
        found = self._store.memory_view.get(url) or await self._store.get(url)
        if isinstance(found, VaryMarker) and found.names == names:
            return found
        if isinstance(found, StoredObject) and not isinstance(found.body, bytes):
            found.body.file.close()
        marker = VaryMarker(url, names, secrets.token_hex(4))
        await self._store.put_marker(url, marker)
        return marker
