"""The planned miss: a new URL fetched by repeating a miss plan (see ``miss_plan``).

It runs from the client parser's callback, like the planned revalidation, before a Request is
made: the raw target and fields select a plan, the planned request goes out on a pooled
connection, and a response of the planned shape is stored and answered from the plan. Any
other response, a failure, or a client that asked to close meanwhile is passed at that point,
with the exchange and its flight, to the miss fast path's general handling.
"""

from __future__ import annotations

import time
from functools import partial

from harvest_cache.errors import UpstreamError
from harvest_cache.http.forwarding import end_to_end
from harvest_cache.http.headers import RawFields
from harvest_cache.http.target import Target
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.flight import Flight, FlightHead
from harvest_cache.server.lean import LeanFetch, LeanPath, abandon, guarded
from harvest_cache.server.miss_plan import MissPlan, plan_key
from harvest_cache.server.planning import answer_planned, send_planned, unplanned
from harvest_cache.upstream.connection import ResponseHead, UpstreamConnection

_RESULT = "TCP_MISS"


def start_planned_miss(
    path: LeanPath, conn: ClientConnection, target: bytes, fields: RawFields
) -> bool:
    """Begin a plain keep-alive HTTP/1.1 GET for ``target`` with ``fields`` from a miss plan;
    False if none applies (the request then goes on as usual)."""
    found = plan_key(conn.client_ip, target, fields)
    if found is None:
        return False
    key, slash = found
    plan = path.miss_plans.get(key)
    if plan is None:
        return False
    rest = plan.rest_of(target, slash)
    if rest is None:
        return False
    url = target.decode("latin-1")
    if path.fetcher.flying(url) or path.store.get_memory(url) is not None:
        return False  # joining a fetch, or a stored object: the general ways
    upstream = path.pool.take_idle(plan.host, plan.port, conn.client_ip)
    if upstream is None:
        return False
    fetch = PlannedMiss(path, plan, conn, upstream, url, rest, key[2])
    path.begun(fetch)
    fetch.send()
    return True


class PlannedMiss:
    """One planned exchange; the upstream connection calls it as the response parses."""

    __slots__ = (
        "_chunks",
        "_client_head",
        "_conn",
        "_fields",
        "_flight",
        "_head",
        "_path",
        "_plan",
        "_request_time",
        "_response_time",
        "_rest",
        "_started",
        "_upstream",
        "_url",
    )

    def __init__(
        self,
        path: LeanPath,
        plan: MissPlan,
        conn: ClientConnection,
        upstream: UpstreamConnection,
        url: str,
        rest: bytes,
        fields: RawFields,
    ) -> None:
        self._path = path
        self._plan = plan
        self._conn = conn
        self._upstream = upstream
        self._url = url
        self._rest = rest
        self._fields = fields
        self._flight: Flight | None = None  # made only if a request joins (Fetcher.hold)
        path.fetcher.hold(url, self)
        self._started = time.monotonic()
        self._request_time = 0.0
        self._response_time = 0.0
        self._head: ResponseHead | None = None
        self._client_head = b""
        self._chunks: list[bytes] = []

    @property
    def key(self) -> str:
        return self._url

    def abandon(self) -> None:
        abandon(self._path, self, self._upstream, self._joined_flight(), self._conn)

    def publish_to(self, flight: Flight) -> None:
        self._flight = flight
        if self._head is not None:
            flight.publish_head_lazily(partial(self._flight_head, self._head))
        for chunk in self._chunks:
            flight.publish_nowait(chunk)

    def _joined_flight(self) -> Flight:
        """The exchange's flight, made now if no request has joined it."""
        flight = self._flight
        return self._path.fetcher.flight_of(self._url, self) if flight is None else flight

    def _flight_head(self, head: ResponseHead) -> FlightHead:
        # (as the miss fast path publishes it: the fields as stored)
        fields = end_to_end((n.decode("latin-1"), v.decode("latin-1")) for n, v in head.raw)
        return FlightHead(
            head.status, head.reason, fields, True, self._upstream.peer_ip, stored=True
        )

    @guarded
    def send(self) -> None:
        plan = self._plan
        recognise = self.recognise if plan.shape is not None else None
        conn, upstream = self._conn, self._upstream
        request = plan.request(self._rest)
        self._request_time = send_planned(self._path, self, conn, upstream, request, recognise)

    def recognise(self, data: bytes) -> ResponseHead | None:
        """The planned response recognised whole in the first bytes from the origin, unparsed
        (the upstream connection then ends the exchange)."""
        plan, shape = self._plan, self._plan.shape
        found = plan.recognised(data)
        if found is None or shape is None or self._conn.must_close:
            return None
        raw, length, start = found
        self._response_time = time.time()
        head = ResponseHead(plan.status, plan.reason, shape.version, raw)
        self._take(head, length, data[start:])
        if self._head is None:
            return None  # (the step failed: the exchange was abandoned)
        self._path.recognised_misses += 1
        return head

    # -- Listener ----------------------------------------------------------------------------

    @guarded
    def on_head(self, head: ResponseHead) -> None:
        self._response_time = time.time()
        plan = self._plan
        length = plan.match(head.status, head.reason, head.raw)
        if length is None or self._conn.must_close:
            self._unplanned().on_head(head)
            return
        if not plan.shape_learnt and head.keep_alive:
            plan.learn_shape(head.version, head.raw)
        self._take(head, length)

    @guarded
    def _take(self, head: ResponseHead, length: int, body: bytes = b"") -> None:
        """The planned response's head (and, if recognised whole, its ``body``) arrived."""
        self._client_head = self._plan.client_head(head.raw, length)
        flight = self._flight
        if flight is not None:
            flight.publish_head_lazily(partial(self._flight_head, head))
        if body:
            self._chunks.append(body)
            if flight is not None:
                flight.publish_nowait(body)
        self._head = head

    @guarded
    def on_body(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        if self._flight is not None:
            self._flight.publish_nowait(chunk)

    @guarded
    def on_end(self) -> None:
        head = self._head
        assert head is not None
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        path, url = self._path, self._url
        stored = self._plan.stored_head(
            url, head.raw, self._request_time, self._response_time, len(body)
        )
        path.store.put_now(url, stored, body)
        flight = self._flight
        if flight is not None:
            flight.finish()
        path.fetcher.let_go(url, flight or self)
        path.pool.release(self._upstream)
        self._respond(body)

    @guarded
    def on_error(self, error: UpstreamError) -> None:
        self._unplanned().on_error(error)

    # -- steps -------------------------------------------------------------------------------

    def _unplanned(self) -> LeanFetch:
        """The general fast path's fetch, taking over this exchange where it stands."""
        plan = self._plan
        return unplanned(
            self._path,
            self,
            self._conn,
            self._upstream,
            self._joined_flight(),
            target=Target("http", plan.host, plan.port, self._rest.decode("latin-1")),
            raw_target=self._url,
            fields=self._fields,
            started=self._started,
            stored=None,
            request_time=self._request_time,
            head=self._head,
        )

    def _respond(self, body: bytes) -> None:
        plan, url, peer = self._plan, self._url, self._upstream.peer_ip
        answer = (self._client_head, body)
        self._path.planned_misses += 1
        answer_planned(
            self._path,
            self,
            self._conn,
            answer,
            self._started,
            _RESULT,
            plan.status,
            lambda: plan.log_tail(url, peer),  # (made only if the log is on)
        )
