"""Sending a request along its route: to the origin, or through a peer cache.

A request goes to a peer in absolute form (the peer is a proxy), to a sibling with
``Cache-Control: only-if-cached`` (siblings serve hits alone, so a 504 from one only means
"not here"). When a peer cannot be reached, or a sibling has no hit, the next hop of the
route is tried, as long as nothing of the request that cannot be sent again was sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harvest_cache.errors import NoRoute, UpstreamError
from harvest_cache.hierarchy.neighbours import Neighbours
from harvest_cache.hierarchy.peers import Peer
from harvest_cache.hierarchy.route import DIRECT, Facts, Hop, Route
from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.forwarding import HOP_BY_HOP, is_loop
from harvest_cache.http.headers import Headers
from harvest_cache.http.target import Target
from harvest_cache.server.request import Request
from harvest_cache.upstream.client import OWN_REQUEST, Exchange, OutgoingRequest, send
from harvest_cache.upstream.connection import ResponseHead
from harvest_cache.upstream.pool import Pool

_DIRECT_ONLY = Route((DIRECT,))
# A sibling's answer to only-if-cached when it does not hold the object (RFC 9111 5.2.1.7).
_NOT_HELD = 504


def end_to_end(headers: Headers) -> tuple[tuple[str, str], ...]:
    """A request's fields as an HTCP TST carries them: the end-to-end ones (RFC 2756 3.2)."""
    return tuple((n, v) for n, v in headers if n.lower() not in HOP_BY_HOP)


def hierarchical(req: Request) -> bool:
    """Whether a request may go to peers (RFC 2187 and Squid): a GET or HEAD that is not a
    reload and carries no credentials."""
    if req.method not in ("GET", "HEAD") or "Authorization" in req.headers:
        return False
    cc = parse_cache_control(req.headers.get_all("Cache-Control"))
    pragma = (req.headers.get("Pragma") or "").lower()
    return not (cc.no_cache or (not req.headers.get_all("Cache-Control") and "no-cache" in pragma))


class Router:
    """Routes with ``neighbours`` (None: every request goes direct) and sends along them."""

    def __init__(
        self, name: str, origins: Pool, peers: Pool, neighbours: Neighbours | None
    ) -> None:
        self._name = name
        self._origins = origins
        self._peers = peers
        self.neighbours = neighbours

    @property
    def direct_only(self) -> bool:
        return self.neighbours is None

    def _last_via(self, req: Request) -> str | None:
        """The name in the last Via entry (the cache that sent ``req``, if one did)."""
        vias = req.headers.get_list("Via")
        parts = vias[-1].split() if vias else []
        return parts[1] if len(parts) >= 2 else None

    def from_sibling(self, req: Request) -> bool:
        """Whether a cache configured as our sibling forwarded ``req``: its last Via entry
        bears that peer's name. Siblings get hits alone (Squid's ``miss_access``)."""
        if self.neighbours is None:
            return False
        return self._last_via(req) in self.neighbours.sibling_names

    async def route(self, req: Request, target: Target) -> Route:
        if self.neighbours is None:
            return _DIRECT_ONLY
        facts = Facts(
            req.method,
            target.url,
            target.host.lower(),
            hierarchical(req),
            is_loop(req.headers, self._name),
            # (a member of our array sent it here, its home: not sent on to another)
            self._last_via(req) in self.neighbours.array_names,
            end_to_end(req.headers) if self.neighbours.htcp_peers else (),
        )
        return await self.neighbours.route(facts)

    async def send(
        self,
        route: Route,
        build: Callable[[Hop], OutgoingRequest],
        read_timeout: float,
        *,
        retry: bool = True,
    ) -> tuple[Exchange, Hop, float]:
        """Send ``build(hop)`` along the first hop that answers; the exchange, its hop and
        when the request went. ``retry``: whether a request may be sent again (False when
        it streams a body)."""
        failure: UpstreamError | None = None
        for hop in route.hops:
            out = build(hop)
            peer = hop.peer
            if peer is not None:
                out.host, out.port, out.tls = peer.host, peer.http_port, peer.tls
            pool = self._origins if peer is None else self._peers
            request_time = time.time()
            try:
                exchange = await send(pool, out, read_timeout)
            except UpstreamError as e:
                if peer is None or not retry:
                    raise
                assert self.neighbours is not None
                if e.kind in ("connect_refused", "connect_timeout", "dns"):
                    self.neighbours.connect_failed(peer)
                failure = e
                continue
            not_held = hop.only_if_cached and exchange.head.status == _NOT_HELD
            if self.neighbours is not None and peer is not None and hop.by_digest:
                self.neighbours.digest_answered(peer, not not_held and _peer_hit(exchange.head))
            if not_held and retry:
                exchange.abort()
                failure = UpstreamError(f"sibling {peer.name if peer else ''} has no hit")
                continue
            if self.neighbours is not None:
                self.neighbours.used(hop)
                if peer is not None:
                    self.neighbours.answered(peer, time.time() - request_time)
            return exchange, hop, request_time
        # (A route with the origin on it never gets here: that hop answers or raises.)
        cause = f": {failure.cause}" if failure is not None else ""
        raise NoRoute(f"never_direct forbids going to the origin, and no parent answered{cause}")


async def fetch_internal(
    pool: Pool, name: str, peer: Peer, path: str, limit: int, read_timeout: float
) -> bytes:
    """GET one of a peer cache's own pages (its digest): the body of its 200, at most
    ``limit`` bytes; UpstreamError otherwise."""
    authority = f"{peer.host}:{peer.http_port}"
    head = (
        f"GET http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\nVia: 1.1 {name}\r\n\r\n"
    ).encode("latin-1")
    out = OutgoingRequest("GET", peer.host, peer.http_port, peer.tls, head, OWN_REQUEST)
    exchange = await send(pool, out, read_timeout)
    if exchange.head.status != 200:
        exchange.abort()
        raise UpstreamError(f"{authority}{path} answered {exchange.head.status}")
    body = bytearray()
    while chunk := await exchange.read():
        body += chunk
        if len(body) > limit:
            exchange.abort()
            raise UpstreamError(f"{authority}{path} is larger than {limit} bytes")
    exchange.release()
    return bytes(body)


def _peer_hit(head: ResponseHead) -> bool:
    """Whether a peer says it answered from its cache: its Cache-Status member (the last),
    or Squid's X-Cache."""
    members = head.headers.get_list("Cache-Status")
    if members:
        return "hit" in (p.strip() for p in members[-1].split(";")[1:])
    return (head.headers.get("X-Cache") or "").upper().startswith("HIT")


def request_target(target: Target, hop: Hop) -> str:
    """The request-target for ``hop``: origin form to the origin, absolute to a peer."""
    return target.path if hop.peer is None else target.url
