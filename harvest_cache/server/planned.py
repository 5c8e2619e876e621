"""The planned revalidation: a request answered by repeating a refresh plan (see ``refresh``).

It runs from the client parser's callback like the hit fast path, before a Request is even
made: the raw target and fields are matched against a plan, the planned conditional request
goes out on a pooled connection, and a 304 that is the planned one is answered with the
planned head. Anything unplanned (another status, other fields, a failure, a client that asked
to close meanwhile) is passed at that point, with the exchange and its flight, to the miss fast
path's general handling, which also leaves a new plan behind.
"""

from __future__ import annotations

import time

from harvest_cache.errors import UpstreamError
from harvest_cache.http.cache_status import ttl_parts, with_ttl
from harvest_cache.http.freshness import age_value
from harvest_cache.http.headers import Headers, RawFields
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.flight import Flight, FlightHead
from harvest_cache.server.lean import LeanFetch, LeanPath, abandon, guarded
from harvest_cache.server.planning import answer_planned, send_planned, unplanned
from harvest_cache.server.refresh import RefreshPlan
from harvest_cache.store.interface import StoredObject
from harvest_cache.upstream.connection import ResponseHead, UpstreamConnection

_RESULT = "TCP_REFRESH_UNMODIFIED"


def start_planned(path: LeanPath, conn: ClientConnection, target: bytes, fields: RawFields) -> bool:
    """Begin answering a plain keep-alive HTTP/1.1 GET for ``target`` with ``fields`` from a
    plan; False if none applies (the request then goes on as usual)."""
    plan = path.plans.get(target)
    if plan is None:
        return False
    key = plan.target.url
    if path.fetcher.flying(key):
        return False  # joining that fetch is the general path's work
    # (peeked: the refresh makes it the most recently used)
    held = path.store.peek_memory(key)
    if not plan.applies(held, conn.client_ip, fields, time.time()):
        return False
    upstream = path.pool.take_idle(plan.target.host, plan.target.port, conn.client_ip)
    if upstream is None:
        return False
    fetch = PlannedRefresh(path, plan, conn, upstream, fields)
    path.begun(fetch)
    fetch.send()
    return True


class PlannedRefresh:
    """One planned exchange; the upstream connection calls it as the response parses."""

    __slots__ = (
        "_answer",
        "_conn",
        "_fields",
        "_flight",
        "_path",
        "_plan",
        "_request_time",
        "_started",
        "_upstream",
    )

    def __init__(
        self,
        path: LeanPath,
        plan: RefreshPlan,
        conn: ClientConnection,
        upstream: UpstreamConnection,
        fields: RawFields,
    ) -> None:
        self._path = path
        self._plan = plan
        self._conn = conn
        self._upstream = upstream
        self._fields = fields
        self._flight: Flight | None = None  # made only if a request joins (Fetcher.hold)
        path.fetcher.hold(plan.target.url, self)
        self._started = time.monotonic()
        self._request_time = 0.0
        self._answer: tuple[bytes, bytes] | None = None

    @property
    def key(self) -> str:
        return self._plan.target.url

    def abandon(self) -> None:
        abandon(self._path, self, self._upstream, self._joined_flight(), self._conn)

    def publish_to(self, flight: Flight) -> None:
        self._flight = flight  # (nothing is published before the 304, which ends the fetch)

    def _joined_flight(self) -> Flight:
        """The exchange's flight, made now if no request has joined it."""
        flight = self._flight
        return self._path.fetcher.flight_of(self.key, self) if flight is None else flight

    @guarded
    def send(self) -> None:
        plan = self._plan
        recognise = self.recognise if plan.reply_shape is not None else None
        conn, upstream = self._conn, self._upstream
        self._request_time = send_planned(self._path, self, conn, upstream, plan.request, recognise)

    def recognise(self, data: bytes) -> ResponseHead | None:
        """The planned 304 recognised in the first bytes of the response, unparsed."""
        plan, shape = self._plan, self._plan.reply_shape
        found = plan.recognised(data)
        if found is None or shape is None or self._conn.must_close:
            return None
        date, fields = found
        self._refresh(date, shape.reason)
        if self._answer is None:
            return None  # (the step failed: the exchange was abandoned)
        self._path.recognised += 1
        return ResponseHead(304, shape.reason, shape.version, fields)

    # -- Listener ----------------------------------------------------------------------------

    @guarded
    def on_head(self, head: ResponseHead) -> None:
        plan = self._plan
        date = plan.date_of(head.raw) if head.status == 304 else None
        if date is None or self._conn.must_close:
            self._unplanned().on_head(head)
            return
        if not plan.reply_learnt and head.keep_alive:
            plan.learn_reply(head.version, head.reason, date)
        self._refresh(date, head.reason)

    @guarded
    def _refresh(self, date: str, reason: str) -> None:
        """The planned 304 with ``date`` arrived: refresh the stored head, end the flight and
        make the answer."""
        response_time = time.time()
        plan, path = self._plan, self._path
        key, stored = plan.target.url, plan.obj
        fresh, received_age = plan.refreshed(stored.head, date, self._request_time, response_time)
        write = path.store.refresh_head(key, fresh)
        if write is not None:
            path.tasks.spawn(write, f"store head {key}")
        held = path.store.peek_memory(key)  # (refresh_head made it the most recently used)
        if isinstance(held, StoredObject):
            plan.obj = held
        else:
            path.plans.keep(plan.raw_target, None)  # the memory tier did not keep it
        flight = self._flight
        if flight is not None:
            # Readers that joined take the refreshed head from the store, as after any 304;
            # they read the 304's own fields only for Vary, which a planned 304 has not.
            peer = self._upstream.peer_ip
            flight.publish_head_lazily(
                lambda: FlightHead(304, reason, Headers(), True, peer, "", fresh)
            )
            flight.finish()
        path.fetcher.let_go(key, flight or self)
        age = received_age + max(0.0, time.time() - response_time)
        parts = plan.status_parts
        if parts is None:
            key_param = path.key_for(key)
            parts = ttl_parts(path.name, fwd="stale", fwd_status=304, key=key_param)
            plan.status_parts = parts
        value = with_ttl(parts, plan.lifetime - age)
        body = stored.body
        assert isinstance(body, bytes)
        self._answer = (plan.client_head(date, age_value(age), value, len(body)), body)

    def on_body(self, chunk: bytes) -> None:
        """Never called: a 304 has no body, and any other answer went to ``_unplanned``."""

    @guarded
    def on_end(self) -> None:
        self._path.pool.release(self._upstream)
        self._respond()

    @guarded
    def on_error(self, error: UpstreamError) -> None:
        if self._answer is None:
            self._unplanned().on_error(error)
            return
        # The origin confirmed the object before failing (stray bytes after its 304).
        self._upstream.finish()
        self._upstream.close()
        self._respond()

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
            target=plan.target,
            raw_target=plan.raw_target.decode("latin-1"),
            fields=self._fields,
            started=self._started,
            stored=plan.obj,
            request_time=self._request_time,
        )

    def _respond(self) -> None:
        answer = self._answer
        assert answer is not None
        plan, peer = self._plan, self._upstream.peer_ip
        self._path.planned += 1
        answer_planned(
            self._path,
            self,
            self._conn,
            answer,
            self._started,
            _RESULT,
            plan.status,
            lambda: plan.tail_for(peer),
        )
