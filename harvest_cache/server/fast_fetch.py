"""The fast fetch: plain GETs fetched and answered from parser callbacks, repeating a plan
where one applies.

A plain GET (no field that calls for the full policy) that the memory tier cannot answer
fresh, for an origin with an idle pooled connection, costs no task and no await: the request
goes upstream from the client parser's callback, and the upstream parser's callbacks answer
the client. One listener, ``FastFetch``, takes every such exchange; its plan chooses its
callbacks:

- a revalidation plan (``prepared.revalidations``): the planned conditional request is sent,
  and a 304 that is the planned one is answered with the planned head (or recognised in the
  response's bytes, unparsed);
- a miss plan (``prepared.misses``): the planned request is sent, and a response of the
  planned shape is stored and answered from the plan;
- none: the exchange is worked out in full, for the common shapes only: a 304 confirming the
  stored object, or a body of known small length without Vary, stored through the memory
  view (a disk tier's copy is written behind); such an exchange leaves a plan behind for the
  next request asked the same way.

A miss comes here only if the disk tier certainly does not hold the object (its membership,
``MemoryView.on_disk``): looking there is I/O.

Whatever a plan did not foresee (another status, other fields, a failure, a client that
asked to close meanwhile) turns the same listener to working the exchange out in full, where
it stands. Anything the full work cannot take here (a larger or unframed body, Vary, a
body the disk tier must have at once, a failure) is handed to the general path together with
the exchange and its flight, so the one fetch goes on there and nothing is sent twice.
Concurrent requests for the object join the flight as they would any other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import TypeAlias, cast

from harvest_cache.config import Config
from harvest_cache.errors import UpstreamError, UpstreamProtocolError, UpstreamReset
from harvest_cache.http.cache_control import DEFAULT as NO_DIRECTIVES
from harvest_cache.http.cache_status import cache_status, ttl_parts, with_ttl
from harvest_cache.http.decision import (
    Asked,
    DontStore,
    Fetch,
    Freshen,
    Held,
    Revalidate,
    Store,
    lookup,
    respond,
)
from harvest_cache.http.forwarding import end_to_end, ensure_date, forwarded_head, via_entry
from harvest_cache.http.freshness import HeuristicRules, age_value
from harvest_cache.http.headers import Headers, RawFields, stored_fields
from harvest_cache.http.policy import StoreDecision, evaluate
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.target import Target
from harvest_cache.server.accesslog import AccessLog, Hierarchy, line_head
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.fetch import Fetcher, Sent, content_length, head_to_store
from harvest_cache.server.flight import Flight, FlightHead, FlightRetry, StartedFetch
from harvest_cache.server.guard import guarded
from harvest_cache.server.prepared.misses import MissPlan, MissPlans, plan_key, plan_miss
from harvest_cache.server.prepared.revalidations import RefreshPlan, RefreshPlans, plan_refresh
from harvest_cache.server.reply import bodyless, framing, interim_relay
from harvest_cache.server.request import Request
from harvest_cache.server.transaction import Transaction, record
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import MemoryView, StoredObject
from harvest_cache.traffic import Traffic
from harvest_cache.upstream.client import Exchange
from harvest_cache.upstream.connection import ResponseHead, UpstreamConnection
from harvest_cache.upstream.pool import Pool
from harvest_common.tasks import TaskSet

# Largest body this path takes: it is held whole until it is complete.
SMALL_BODY = 64 * 1024
# Requests on this path carry no Cache-Control or Pragma (those keep them off it).
# Fields of the response that the cache sets itself for the client: on a fetched response,
# and on one served from the store (which gets its own Age). (Cache-Status is not among them:
# ours is added after the members of caches nearer the origin.)
_SET_ON_FETCHED = frozenset({"connection", "content-length"})
_SET_ON_STORED = _SET_ON_FETCHED | {"age"}
_REVALIDATED = "TCP_REFRESH_UNMODIFIED"
_MISSED = "TCP_MISS"
_COLLAPSED = "TCP_CF_MISS"


class FastPath:
    """Starts fast fetches, keeps the plans they leave, and knows which fetches are running
    (so shutdown can wait for them).

    ``answered`` counts requests answered here, ``handed_over`` those passed to the general
    path after they started here, ``planned`` the answered ones that repeated a revalidation
    plan (``recognised`` of them with a 304 recognised unparsed), ``planned_misses`` those
    that repeated a miss plan (``recognised_misses`` of them with a response recognised
    unparsed) and ``carried`` those answered with the answer of another request's planned
    revalidation or miss, asked for the same way while it was in flight; for metrics, and
    for tests to see which path ran.
    """

    def __init__(
        self,
        config: Config,
        name: str,
        memory: MemoryView,
        pool: Pool,
        fetcher: Fetcher,
        access_log: AccessLog,
        traffic: Traffic,
        heuristics: HeuristicRules,
        tasks: TaskSet,
    ) -> None:
        self.config = config
        self.name = name
        self.memory = memory
        self.pool = pool
        self.fetcher = fetcher
        self.log = access_log
        self.traffic = traffic
        self.heuristics = heuristics
        self.tasks = tasks
        self.via = via_entry("1.1", name)
        self.plans = RefreshPlans()
        self.miss_plans = MissPlans()
        self._status_keys = config.server.cache_status_key
        self.answered = 0
        self.handed_over = 0
        self.planned = 0
        self.recognised = 0
        self.planned_misses = 0
        self.recognised_misses = 0
        self.carried = 0
        self._running: set[FastFetch] = set()
        self._all_done: asyncio.Future[None] | None = None

    # -- the ways in (each False when it does not apply: the request then goes on as usual)

    def revalidate(self, conn: ClientConnection, target: bytes, fields: RawFields) -> bool:
        """Begin answering a plain keep-alive HTTP/1.1 GET for ``target`` with ``fields`` by
        repeating its revalidation plan."""
        plan = self.plans.get(target)
        if plan is None:
            return False
        key = plan.target.url
        # (peeked: the refresh makes it the most recently used)
        held = self.memory.peek(key)
        if self.fetcher.flying(key):
            # A request asked as the planned one is answered with its answer; joining any
            # other fetch is the general path's work.
            holder = self.fetcher.holder(key)
            return isinstance(holder, FastFetch) and holder.carry(conn, plan, held, fields)
        if not plan.applies(held, conn.client_ip, fields, time.time()):
            return False
        origin = plan.target
        upstream = self.pool.take_idle(origin.host, origin.port, origin.tls, conn.client_ip)
        if upstream is None:
            return False
        fetch = FastFetch(self, conn, upstream, key, fields, plan)
        fetch.send()
        return True

    def fetch_planned(self, conn: ClientConnection, target: bytes, fields: RawFields) -> bool:
        """Begin a plain keep-alive HTTP/1.1 GET for ``target`` with ``fields`` by repeating
        the miss plan of its client, origin and fields."""
        found = plan_key(conn.client_ip, target, fields)
        if found is None:
            return False
        url = target.decode("latin-1")
        if self.fetcher.flying(url):
            # Asked as a planned fetch of it under way asked (by any client): its answer; any
            # other request joins the fetch on the general path.
            holder = self.fetcher.holder(url)
            return isinstance(holder, FastFetch) and holder.carry_miss(conn, fields)
        key, slash = found
        plan = self.miss_plans.get(key)
        if plan is None:
            return False
        rest = plan.rest_of(target, slash)
        if rest is None:
            return False
        memory = self.memory
        if memory.get(url) is not None or memory.on_disk(url):
            return False  # a stored object: the general way
        upstream = self.pool.take_idle(plan.host, plan.port, plan.tls, conn.client_ip)
        if upstream is None:
            return False
        fetch = FastFetch(self, conn, upstream, url, key[2], plan, rest=rest)
        fetch.send()
        return True

    def fetch(self, conn: ClientConnection, req: Request, target: Target) -> bool:
        """Begin fetching for the plain GET ``req`` here, worked out in full."""
        key = target.url
        if self.fetcher.flying(key):
            return False
        found = self.memory.get(key)
        if found is None:
            if self.memory.on_disk(key):
                return False  # it may be on disk: looking is I/O
            held = Held(None)
        elif isinstance(found, VaryMarker) or not isinstance(found.body, bytes):
            return False
        else:
            held = Held(found.head)
        asked = Asked("GET", req.headers, False, plain=True)
        decision = lookup(asked, held, time.time(), self.heuristics.for_url(key))
        if not isinstance(decision, Revalidate | Fetch):
            return False  # a hit (fresh, or served stale while revalidated behind it)
        upstream = self.pool.take_idle(target.host, target.port, target.tls, conn.client_ip)
        if upstream is None:
            return False
        fetch = FastFetch(self, conn, upstream, key, (), None)
        fetch.work_in_full(req, target, found)
        fetch.send()
        return True

    # -- bookkeeping ------------------------------------------------------------------------

    def key_for(self, key: str) -> str | None:
        """The cache key for Cache-Status, if configured to name it."""
        return key if self._status_keys else None

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def begun(self, fetch: FastFetch) -> None:
        self._running.add(fetch)

    def ended(self, fetch: FastFetch) -> None:
        self._running.discard(fetch)
        if not self._running and self._all_done is not None and not self._all_done.done():
            self._all_done.set_result(None)

    async def drain(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for running fetches to answer their clients."""
        if self._running:
            self._all_done = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._all_done], timeout=grace)


def _answer_planned(
    path: FastPath,
    conn: ClientConnection,
    started: float,
    result: str,
    status: int,
    answer: tuple[bytes, bytes],
    log_tail: bytes,
) -> None:
    """Send ``conn`` a planned answer, count it and log it (with ``log_tail`` if logging)."""
    head, body = answer
    sent = write_answer(conn, head, body)
    size = len(head) + len(body)
    seconds = time.monotonic() - started
    path.traffic.ended("GET", result, status, size, seconds, Hierarchy.HIER_DIRECT, not sent)
    if path.log.enabled:
        elapsed = round(seconds * 1000)
        line = line_head(
            time.time(), elapsed, conn.client_bytes, result.encode(), status, size, not sent
        )
        path.log.write(line + log_tail)
    path.answered += 1


def write_answer(conn: ClientConnection, head: bytes, body: bytes) -> bool:
    """Send a whole response; False if the client has gone."""
    if conn.closed:
        return False
    conn.hold_response(head, body)
    return True


Plan = RefreshPlan | MissPlan
# A way of working an exchange: its steps on the response's head, a body chunk, the end and a
# failure.
Steps: TypeAlias = """tuple[
    Callable[[FastFetch, ResponseHead], None],
    Callable[[FastFetch, bytes], None],
    Callable[[FastFetch], None],
    Callable[[FastFetch, UpstreamError], None],
]"""


class FastFetch:
    """One exchange on the fast path; the upstream connection calls it as the response
    parses (it is that exchange's ``Listener``).

    Its callbacks (``on_head``, ``on_body``, ``on_end``, ``on_error``) run its plan's steps:
    those of a revalidation plan, of a miss plan, or those that work the exchange out in full
    (``work_in_full``), to which a planned exchange turns when the plan does not hold. The
    steps are kept as the class's plain functions: bound methods kept on the instance would
    make every fetch a reference cycle, left for the garbage collector to free.
    """

    __slots__ = (
        "_answer",
        "_chunks",
        "_conn",
        "_fields",
        "_flight",
        "_head",
        "_on_body",
        "_on_end",
        "_on_error",
        "_on_head",
        "_path",
        "_plan",
        "_req",
        "_request_time",
        "_response_time",
        "_rest",
        "_riders",
        "_started",
        "_stored",
        "_target",
        "_to_store",
        "_tx",
        "_upstream",
        "_url",
    )

    _on_head: Callable[[FastFetch, ResponseHead], None]
    _on_body: Callable[[FastFetch, bytes], None]
    _on_end: Callable[[FastFetch], None]
    _on_error: Callable[[FastFetch, UpstreamError], None]

    def __init__(
        self,
        path: FastPath,
        conn: ClientConnection,
        upstream: UpstreamConnection,
        url: str,
        fields: RawFields,
        plan: Plan | None,
        *,
        rest: bytes = b"",
    ) -> None:
        """A fetch of ``url`` asked with raw ``fields``; ``plan``: the plan it repeats (the
        request's path and query ``rest``, for a miss plan), or None (``work_in_full`` then
        gives it its request)."""
        self._path = path
        self._conn = conn
        self._upstream = upstream
        self._url = url
        self._fields = fields
        self._plan = plan
        self._rest = rest
        self._started = time.monotonic()
        self._request_time = 0.0
        self._response_time = 0.0
        self._head: ResponseHead | None = None
        self._chunks: list[bytes] = []
        self._answer: tuple[bytes, bytes] | None = None  # head and body for the client
        self._flight: Flight | None = None  # planned: made only if a request joins (hold)
        # Clients asking for the object as planned meanwhile, each with its start (``carry``)
        self._riders: list[tuple[ClientConnection, float]] | None = None
        # Set when the exchange is worked out in full:
        self._req: Request | None = None
        self._target: Target | None = None
        self._stored: StoredObject | None = None
        self._to_store: tuple[Headers, StoreDecision] | None = None
        self._tx: Transaction | None = None
        if isinstance(plan, RefreshPlan):
            self._stored = plan.obj
            self._follow(_REVALIDATION_STEPS)
        elif isinstance(plan, MissPlan):
            self._follow(_MISS_STEPS)
        if plan is not None:
            path.fetcher.hold(url, self)
        path.begun(self)  # (first, so that shutdown never sees no fetch running)

    # -- Listener: the current steps ---------------------------------------------------------

    def on_head(self, head: ResponseHead) -> None:
        self._on_head(self, head)

    def on_body(self, chunk: bytes) -> None:
        self._on_body(self, chunk)

    def on_end(self) -> None:
        self._on_end(self)

    def on_error(self, error: UpstreamError) -> None:
        self._on_error(self, error)

    def _follow(self, steps: Steps) -> None:
        self._on_head, self._on_body, self._on_end, self._on_error = steps

    @property
    def key(self) -> str:
        return self._url

    def publish_to(self, flight: Flight) -> None:
        """A request joined the planned fetch: publish to ``flight`` from now on, beginning
        with what came so far (a planned 304 ends the fetch before anyone may join)."""
        self._flight = flight
        head = self._head
        if head is not None and self._tx is None:
            flight.publish_head_lazily(partial(self._flight_head, head))
        for chunk in self._chunks:
            flight.publish_nowait(chunk)

    def carry(
        self, conn: ClientConnection, plan: RefreshPlan, held: object, fields: RawFields
    ) -> bool:
        """Answer ``conn``'s request, of ``fields``, with this fetch's answer, if this is the
        revalidation ``plan`` still under way for the ``held`` object and the request is
        asked as planned; as the general path would give it the refreshed object once this
        fetch's 304 arrives, without a fetch of its own. (The plan's client address is not
        compared: it shapes only the request sent upstream.)"""
        if self._plan is not plan or self._answer is not None:
            return False
        if held is not plan.obj or fields != plan.shape:
            return False
        self._carry(conn)
        return True

    def carry_miss(self, conn: ClientConnection, fields: RawFields) -> bool:
        """Answer ``conn``'s request, of ``fields``, with this fetch's answer, as a request
        that joined it, if this is a miss plan still under way and the request is asked as
        this fetch's was. (The plan's client is not compared: it shapes only the request sent
        upstream.)"""
        plan = self._plan
        if not isinstance(plan, MissPlan) or not plan.collapsed_field or fields != self._fields:
            return False
        self._carry(conn)
        return True

    def _carry(self, conn: ClientConnection) -> None:
        riders = self._riders
        if riders is None:
            riders = self._riders = []
        riders.append((conn, time.monotonic()))

    def _release_riders(self) -> None:
        """Send the riders to the general path (the plan did not hold, or a rider must close
        its connection), where they join this fetch's flight or find the stored object."""
        riders, self._riders = self._riders, None
        if riders is None:
            return
        for conn, started in riders:
            req = self._request(started)
            self._path.handed_over += 1
            conn.lean_handoff(req)

    def _request(self, started: float) -> Request:
        """The planned request (a keep-alive HTTP/1.1 GET of this fetch's URL and fields) as
        the general path takes it, begun at ``started``."""
        return Request(
            method="GET",
            target=self._url,
            version="1.1",
            headers=Headers.from_raw(self._fields),
            keep_alive=True,
            started=started,
        )

    def _joined_flight(self) -> Flight:
        """The exchange's flight, made now if no request has joined it."""
        flight = self._flight
        if flight is None:
            flight = self._flight = self._path.fetcher.flight_of(self._url, self)
        return flight

    def abandon(self) -> None:
        """Give up the fetch after a bug: both connections closed, the flight failed."""
        upstream, flight, path = self._upstream, self._joined_flight(), self._path
        upstream.detach()
        upstream.close()
        flight.fail(UpstreamProtocolError("internal error"))
        path.fetcher.retire(flight)
        path.ended(self)
        riders, self._riders = self._riders or [], None
        for conn, _ in [(self._conn, 0.0), *riders]:
            conn.close()
            conn.lean_done(False)

    @guarded
    def send(self) -> None:
        """Send the request: the plan's, or the one the full work composes."""
        path, conn, plan = self._path, self._conn, self._plan
        if isinstance(plan, RefreshPlan):
            request = plan.request
            recognise = self._recognise_304 if plan.reply_shape is not None else None
            version = "1.1"
        elif isinstance(plan, MissPlan):
            request = plan.request(self._rest)
            recognise = self._recognise_miss if plan.shape is not None else None
            version = "1.1"
        else:
            req, target, stored = self._req, self._target, self._stored
            assert req is not None
            assert target is not None
            request = path.fetcher.requests.head(
                req, target, stored.head if stored is not None else None, conn.client_ip
            )
            recognise = None
            version = req.version
        self._request_time = time.time()
        relay = interim_relay(conn, version, path.via)
        upstream = self._upstream
        upstream.begin(False, path.config.upstream.read_timeout, self, relay, recognise)
        upstream.send_now(request)

    # -- a revalidation plan -----------------------------------------------------------------

    def _recognise_304(self, data: bytes) -> ResponseHead | None:
        """The planned 304 recognised in the first bytes of the response, unparsed."""
        plan = cast(RefreshPlan, self._plan)
        shape = plan.reply_shape
        found = plan.recognised(data)
        if found is None or shape is None or self._conn.must_close:
            return None
        date, fields = found
        self._refresh(date, shape.reason)
        if self._answer is None:
            return None  # (the step failed: the exchange was abandoned)
        self._path.recognised += 1
        return ResponseHead(304, shape.reason, shape.version, fields)

    @guarded
    def _revalidation_head(self, head: ResponseHead) -> None:
        plan = cast(RefreshPlan, self._plan)
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
        plan, path = cast(RefreshPlan, self._plan), self._path
        key, stored = plan.target.url, plan.obj
        fresh, received_age = plan.refreshed(stored.head, date, self._request_time, response_time)
        write = path.memory.refresh_head(key, fresh)
        if write is not None:
            path.tasks.spawn(write, f"store head {key}")
        held = path.memory.peek(key)  # (refresh_head made it the most recently used)
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

    def _no_body(self, chunk: bytes) -> None:
        """Never called: a 304 has no body, and any other answer is worked out in full."""

    @guarded
    def _revalidation_end(self) -> None:
        self._path.pool.release(self._upstream)
        self._respond_planned()

    @guarded
    def _revalidation_error(self, error: UpstreamError) -> None:
        if self._answer is None:
            self._unplanned().on_error(error)
            return
        # The origin confirmed the object before failing (stray bytes after its 304).
        self._upstream.finish()
        self._upstream.close()
        self._respond_planned()

    # -- a miss plan -------------------------------------------------------------------------

    def _recognise_miss(self, data: bytes) -> ResponseHead | None:
        """The planned response recognised whole in the first bytes from the origin, unparsed
        (the upstream connection then ends the exchange)."""
        plan = cast(MissPlan, self._plan)
        shape = plan.shape
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

    def _flight_head(self, head: ResponseHead) -> FlightHead:
        # (as the full work publishes it: the fields as stored)
        fields = end_to_end((n.decode("latin-1"), v.decode("latin-1")) for n, v in head.raw)
        return FlightHead(
            head.status, head.reason, fields, True, self._upstream.peer_ip, stored=True
        )

    @guarded
    def _planned_head(self, head: ResponseHead) -> None:
        self._response_time = time.time()
        plan = cast(MissPlan, self._plan)
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
        plan = cast(MissPlan, self._plan)
        self._answer = (plan.client_head(head.raw, length), b"")
        flight = self._flight
        if flight is not None:
            flight.publish_head_lazily(partial(self._flight_head, head))
        if body:
            self._chunks.append(body)
            if flight is not None:
                flight.publish_nowait(body)
        self._head = head

    @guarded
    def _planned_body(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        if self._flight is not None:
            self._flight.publish_nowait(chunk)

    @guarded
    def _planned_end(self) -> None:
        head, answer = self._head, self._answer
        assert head is not None
        assert answer is not None
        plan = cast(MissPlan, self._plan)
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        path, url = self._path, self._url
        stored = plan.stored_head(url, head.raw, self._request_time, self._response_time, len(body))
        path.memory.put(url, stored, body)
        flight = self._flight
        if flight is not None:
            flight.finish()
        path.fetcher.let_go(url, flight or self)
        path.pool.release(self._upstream)
        self._answer = (answer[0], body)
        self._respond_planned()

    @guarded
    def _unplanned_error(self, error: UpstreamError) -> None:
        self._unplanned().on_error(error)

    def _respond_planned(self) -> None:
        """Send a planned answer (to the riders too), count it and log it."""
        answer, plan = self._answer, self._plan
        assert answer is not None
        path, peer = self._path, self._upstream.peer_ip
        if isinstance(plan, RefreshPlan):
            path.planned += 1
            result, status = _REVALIDATED, plan.status
        else:
            assert isinstance(plan, MissPlan)
            path.planned_misses += 1
            result, status = _MISSED, plan.status
        tail = b""
        if path.log.enabled:
            tail = (
                plan.tail_for(peer)
                if isinstance(plan, RefreshPlan)
                else plan.log_tail(self._url, peer)
            )
        conn = self._conn
        _answer_planned(path, conn, self._started, result, status, answer, tail)
        path.ended(self)
        conn.lean_done(True)
        riders, self._riders = self._riders, None
        if riders is None:
            return
        if isinstance(plan, MissPlan):
            answer, result = (plan.collapsed_head(answer[0]), answer[1]), _COLLAPSED
        closing = []
        for rider, started in riders:
            if rider.must_close:
                closing.append((rider, started))  # (the planned answer keeps it open)
                continue
            _answer_planned(path, rider, started, result, status, answer, tail)
            path.carried += 1
            rider.lean_done(True)
        if closing:
            self._riders = closing
            self._release_riders()

    # -- worked out in full ------------------------------------------------------------------

    def work_in_full(self, req: Request, target: Target, stored: StoredObject | None) -> FastFetch:
        """Work the exchange out in full for ``req`` (``stored``: the object it revalidates,
        if any), from its start: its flight is opened now."""
        self._plan = None
        self._req, self._target, self._stored = req, target, stored
        self._flight = self._path.fetcher.open_flight(target.url)
        tx = self._tx = Transaction(req.started, self._conn.client_ip, "GET", target.url)
        tx.hierarchy = Hierarchy.HIER_DIRECT
        tx.peer = self._upstream.peer_ip
        self._follow(_FULL_STEPS)
        return self

    def _unplanned(self) -> FastFetch:
        """The exchange the plan did not foresee, worked out in full where it stands."""
        plan = self._plan
        req = self._request(self._started)
        if isinstance(plan, RefreshPlan):
            target, stored = plan.target, plan.obj
        else:
            assert isinstance(plan, MissPlan)
            scheme = "https" if plan.tls else "http"
            target = Target(scheme, plan.host, plan.port, self._rest.decode("latin-1"))
            stored = None
        flight = self._joined_flight()
        self._release_riders()  # (to join the flight)
        self._plan = None
        self._req, self._target, self._stored = req, target, stored
        self._chunks = []
        self._answer = None
        tx = self._tx = Transaction(req.started, self._conn.client_ip, "GET", target.url)
        tx.hierarchy = Hierarchy.HIER_DIRECT
        tx.peer = self._upstream.peer_ip
        self._flight = flight
        self._follow(_FULL_STEPS)
        return self

    @guarded
    def _head_in_full(self, head: ResponseHead) -> None:
        self._response_time = now = time.time()
        self._head = head
        stored, req, tx = self._stored, self._req, self._tx
        assert req is not None
        assert tx is not None
        flight = self._flight
        assert flight is not None
        stored_head = stored.head if stored is not None else None
        # (decoded as filtered: the response's own Headers are never made here)
        headers = end_to_end((n.decode("latin-1"), v.decode("latin-1")) for n, v in head.raw)
        ensure_date(headers, now)
        times = (self._request_time, now)
        length = content_length(headers)
        if stored is not None and head.status == 304:
            response = respond(req.headers, stored_head, 304, headers, times)
            if isinstance(response, Freshen):
                self._refreshed(stored, head, headers, response.head)
            else:
                self._move(head)  # (another response's 304: asked again, unconditionally)
            return
        # What this path can take: a small body of known length, no Vary.
        if bodyless("GET", head.status) or length is None or length > SMALL_BODY:
            self._move(head)
            return
        if "Vary" in headers:
            self._move(head)
            return
        path = self._path
        response = respond(req.headers, stored_head, head.status, headers, times)
        decision: StoreDecision | None
        match response:
            case Store(decision=decision) if length <= path.memory.put_limit:
                keep = True
            case Store(decision=decision) if not path.memory.has_disk:
                keep = False  # (too big for the memory tier, and there is no other)
            case DontStore() if stored is None:
                decision, keep = None, False
            case _:
                # A failed validation (stale may be served instead), a stored response to
                # invalidate, or a body the disk tier must have now: the store needs I/O.
                self._move(head)
                return
        peer = self._upstream.peer_ip
        flight.publish_head(
            FlightHead(head.status, head.reason, headers, decision is not None, peer, stored=keep)
        )
        if keep:
            assert decision is not None
            self._to_store = (headers, decision)
        fwd = "uri-miss" if stored is None else "stale"
        value = cache_status(
            path.name,
            hit=False,
            fwd=fwd,
            fwd_status=head.status,
            stored=keep,
            key=path.key_for(self._url),
        )
        tx.result = "TCP_MISS" if stored is None else "TCP_REFRESH_MODIFIED"
        tx.content_type = headers.get("Content-Type") or "-"
        client_head = self._client_head(
            head.status, head.reason, headers, [], value, length, _SET_ON_FETCHED
        )
        self._answer = (client_head, b"")
        if keep and stored is None:
            assert decision is not None
            self._plan_miss(head, headers, decision, value, client_head, length)

    @guarded
    def _body_in_full(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        flight = self._flight
        assert flight is not None
        flight.publish_nowait(chunk)

    @guarded
    def _end_in_full(self) -> None:
        answer, tx, flight = self._answer, self._tx, self._flight
        assert answer is not None
        assert tx is not None
        assert flight is not None
        if tx.result != _REVALIDATED:
            chunks = self._chunks
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if self._to_store is not None:
                self._store_now(body, *self._to_store)
            answer = (answer[0], body)
            flight.finish()
        self._path.fetcher.retire(flight)
        self._path.pool.release(self._upstream)
        self._respond(*answer)

    @guarded
    def _error_in_full(self, error: UpstreamError) -> None:
        tx, flight = self._tx, self._flight
        assert tx is not None
        assert flight is not None
        self._upstream.finish()
        self._upstream.close()
        if tx.result == _REVALIDATED and self._answer is not None:
            # The origin confirmed the object before failing (stray bytes after its 304).
            self._path.fetcher.retire(flight)
            self._respond(*self._answer)
            return
        if self._head is None and isinstance(error, UpstreamReset):
            # Most likely the origin closed the idle connection as it was reused: the
            # general path tries again on a new one (and so does every client that joined).
            error = FlightRetry(str(error))
        flight.fail(error)
        self._path.fetcher.retire(flight)
        self._hand_over()

    def _store_now(self, body: bytes, headers: Headers, decision: StoreDecision) -> None:
        head = self._head
        assert head is not None
        url = self._url
        times = (self._request_time, self._response_time)
        stored = head_to_store(
            url, head.status, head.reason, headers, decision, times, "", len(body)
        )
        self._path.memory.put(url, stored, body)

    def _refreshed(
        self, stored: StoredObject, head: ResponseHead, headers: Headers, fresh: StoredHead
    ) -> None:
        """A 304 confirmed the stored object: answer from it under the ``fresh`` head."""
        path, key, tx, flight = self._path, self._url, self._tx, self._flight
        assert tx is not None
        assert flight is not None
        write = path.memory.refresh_head(key, fresh)
        if write is not None:
            path.tasks.spawn(write, f"store head {key}")
        flight.publish_head(
            FlightHead(
                304, head.reason, headers, True, self._upstream.peer_ip, fresh.vary_key, fresh
            )
        )
        flight.finish()
        now = time.time()
        reuse = evaluate(fresh, NO_DIRECTIVES, now, path.heuristics.for_url(key))
        value = cache_status(
            path.name, hit=False, fwd="stale", fwd_status=304, ttl=reuse.ttl, key=path.key_for(key)
        )
        assert isinstance(stored.body, bytes)
        age = [("Age", age_value(reuse.age))]
        body = stored.body
        client_head = self._client_head(
            fresh.status, fresh.reason, fresh.headers, age, value, len(body), _SET_ON_STORED
        )
        self._answer = (client_head, body)
        tx.result = _REVALIDATED
        tx.content_type = stored_fields(fresh.headers).get("Content-Type") or "-"
        self._learn(head, fresh, reuse.age - max(0.0, now - self._response_time))

    def _learn(self, head: ResponseHead, fresh: StoredHead, received_age: float) -> None:
        """Keep a plan of this refresh for the next same request (``prepared.revalidations``)."""
        path, target, req = self._path, self._target, self._req
        assert target is not None
        assert req is not None
        obj = path.memory.get(target.url)
        raw_target = req.target.encode("latin-1")
        plan = None
        if isinstance(obj, StoredObject) and req.version == "1.1" and req.keep_alive:
            plan = plan_refresh(
                target=target,
                raw_target=raw_target,
                obj=obj,
                shape=tuple((n.encode("latin-1"), v.encode("latin-1")) for n, v in req.headers),
                client_ip=self._conn.client_ip,
                peer=self._upstream.peer_ip,
                # What the general path would send next, from the refreshed head's validators.
                request=path.fetcher.requests.head(req, target, fresh, self._conn.client_ip),
                reply=head.raw,
                fresh=fresh,
                received_age=received_age,
                via=path.via,
                replaced=_SET_ON_STORED,
            )
        path.plans.keep(raw_target, plan)

    def _plan_miss(
        self,
        head: ResponseHead,
        headers: Headers,
        decision: StoreDecision,
        cache_status_value: str,
        client_head: bytes,
        length: int,
    ) -> None:
        """Keep a plan of this miss for the next one asked the same way
        (``prepared.misses``)."""
        path, target, req, conn, tx = self._path, self._target, self._req, self._conn, self._tx
        assert target is not None
        assert req is not None
        assert tx is not None
        if req.version != "1.1" or not req.keep_alive or conn.must_close:
            return
        raw_target = req.target.encode("latin-1")
        shape = tuple((n.encode("latin-1"), v.encode("latin-1")) for n, v in req.headers)
        found = plan_key(conn.client_ip, raw_target, shape)
        if found is None or path.key_for(target.url) is not None:
            return
        key = found[0]
        if not path.miss_plans.wanted(key):
            return
        times = (self._request_time, self._response_time)
        status, reason = head.status, head.reason
        plan = plan_miss(
            target=target,
            raw_target=raw_target,
            request=path.fetcher.requests.head(req, target, None, conn.client_ip),
            status=status,
            reason=reason,
            reply=head.raw,
            stored=head_to_store(target.url, status, reason, headers, decision, times, "", length),
            client_head=client_head,
            cache_status=cache_status_value,
            collapsed_status=cache_status(
                path.name, hit=False, fwd="uri-miss", fwd_status=status, collapsed=True
            ),
            via=path.via,
            replaced=_SET_ON_FETCHED,
            content_type=tx.content_type,
            queries=path.config.cache.cache_query_urls,
            max_length=min(SMALL_BODY, path.memory.put_limit),
        )
        path.miss_plans.keep(key, plan)

    def _move(self, head: ResponseHead) -> None:
        """Hand the exchange, its flight and the client to the general path."""
        req, target, flight, stored = self._req, self._target, self._flight, self._stored
        assert req is not None
        assert target is not None
        assert flight is not None
        self._upstream.detach()
        path = self._path
        sent = Sent(
            Exchange(path.pool, self._upstream, head), self._request_time, self._response_time
        )
        client_ip = self._conn.client_ip
        path.fetcher.adopt(
            flight, req, target, stored.head if stored is not None else None, client_ip, sent
        )
        self._hand_over()

    def _hand_over(self) -> None:
        # The client reads the flight from its start; if others have read past that (it
        # failed mid-body), the general path fetches afresh.
        req, flight = self._req, self._flight
        assert req is not None
        assert flight is not None
        reader = flight.join()
        if reader is not None:
            req.started_fetch = StartedFetch(flight, reader, self._stored is not None)
        self._path.handed_over += 1
        self._path.ended(self)
        self._conn.lean_handoff(req)

    def _client_head(
        self,
        status: int,
        reason: str,
        fields: Iterable[tuple[str, str]],
        extra: list[tuple[str, str]],
        cache_status_value: str,
        length: int,
        replaced: frozenset[str],
    ) -> bytes:
        """The response head for the client: ``fields`` with ``extra``, Via, Cache-Status
        and this client's framing (``replaced``: the names of those, lowercased)."""
        req, conn, tx = self._req, self._conn, self._tx
        assert req is not None
        assert tx is not None
        close = not req.keep_alive or conn.must_close
        framed, _, conn.must_close = framing(length, req.version, close, False)
        extra.append(("Cache-Status", cache_status_value))
        extra.extend(framed)
        tx.status = status
        return forwarded_head(status, reason, fields, self._path.via, extra, replaced)

    def _respond(self, head: bytes, body: bytes) -> None:
        req, conn, tx = self._req, self._conn, self._tx
        assert req is not None
        assert tx is not None
        tx.aborted = not write_answer(conn, head, body)
        tx.bytes_sent = len(head) + len(body)
        record(self._path.log, self._path.traffic, tx)
        self._path.answered += 1
        self._path.ended(self)
        conn.lean_done(req.keep_alive)


_REVALIDATION_STEPS: Steps = (
    FastFetch._revalidation_head,
    FastFetch._no_body,
    FastFetch._revalidation_end,
    FastFetch._revalidation_error,
)
_MISS_STEPS: Steps = (
    FastFetch._planned_head,
    FastFetch._planned_body,
    FastFetch._planned_end,
    FastFetch._unplanned_error,
)
_FULL_STEPS: Steps = (
    FastFetch._head_in_full,
    FastFetch._body_in_full,
    FastFetch._end_in_full,
    FastFetch._error_in_full,
)
