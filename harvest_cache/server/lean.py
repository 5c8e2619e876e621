"""The miss fast path: plain GET misses and revalidations handled in parser callbacks.

A plain GET (no field that calls for the full policy) that the memory tier cannot answer
fresh, for an origin with an idle pooled connection, costs no task and no await: the request
goes upstream from the client parser's callback, and the upstream parser's callbacks answer
the client. It takes the common shapes only: a 304 confirming the stored object, or a body of
known small length without Vary, stored in the memory tier alone. Anything else (a larger or
unframed body, Vary, a disk-tier write, a failure) is handed to the general path together
with the exchange and its flight, so the one fetch goes on there and nothing is sent twice.
Concurrent requests for the object join the flight as they would any other.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Iterable
from typing import Concatenate, ParamSpec, Protocol, TypeVar, cast

from harvest_cache.config import Config
from harvest_cache.errors import UpstreamError, UpstreamProtocolError, UpstreamReset
from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.cache_status import cache_status
from harvest_cache.http.forwarding import end_to_end, ensure_date, forwarded_head, via_entry
from harvest_cache.http.freshness import HeuristicRules, age_value
from harvest_cache.http.headers import Headers, stored_fields
from harvest_cache.http.policy import Fresh, StoreDecision, evaluate, storable
from harvest_cache.http.target import Target
from harvest_cache.http.validation import freshen, is_not_modified_for
from harvest_cache.metrics import Traffic
from harvest_cache.server.accesslog import AccessLog, Hierarchy
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.fetch import (
    Fetcher,
    Sent,
    content_length,
    head_to_store,
)
from harvest_cache.server.flight import Flight, FlightHead, FlightRetry, StartedFetch
from harvest_cache.server.miss_plan import MissPlans, plan_key, plan_miss
from harvest_cache.server.refresh import RefreshPlans, plan_refresh
from harvest_cache.server.reply import bodyless, framing, interim_relay
from harvest_cache.server.request import Request
from harvest_cache.server.transaction import Transaction, record
from harvest_cache.store.entry import StoredHead, VaryMarker
from harvest_cache.store.interface import ObjectStore, StoredObject
from harvest_cache.upstream.client import Exchange
from harvest_cache.upstream.connection import ResponseHead, UpstreamConnection
from harvest_cache.upstream.pool import Pool
from harvest_common.tasks import TaskSet

log = logging.getLogger("harvest_cache")
P = ParamSpec("P")

# Largest body this path takes: it is held whole until it is complete.
SMALL_BODY = 64 * 1024
# Requests on this path carry no Cache-Control or Pragma (those keep them off it).
_NO_DIRECTIVES = parse_cache_control(())
# Fields of the response that the cache sets itself for the client: on a fetched response,
# and on one served from the store (which gets its own Age). (Cache-Status is not among them:
# ours is added after the members of caches nearer the origin.)
_SET_ON_FETCHED = frozenset({"connection", "content-length"})
_SET_ON_STORED = _SET_ON_FETCHED | {"age"}


class LeanPath:
    """Starts lean fetches, and knows which are running (so shutdown can wait for them).

    ``answered`` counts requests answered here, ``handed_over`` those passed to the general
    path after they started here, ``planned`` the answered ones that repeated a refresh plan
    (``recognised`` of them with a 304 recognised unparsed) and ``planned_misses`` those that
    repeated a miss plan (``recognised_misses`` of them with a response recognised unparsed);
    for metrics, and for tests to see which path ran.
    """

    def __init__(
        self,
        config: Config,
        name: str,
        store: ObjectStore,
        pool: Pool,
        fetcher: Fetcher,
        access_log: AccessLog,
        traffic: Traffic,
        heuristics: HeuristicRules,
        tasks: TaskSet,
    ) -> None:
        self.config = config
        self.name = name
        self.store = store
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
        self._running: set[Step] = set()
        self._all_done: asyncio.Future[None] | None = None

    def start(self, req: Request, target: Target, conn: ClientConnection) -> bool:
        """Begin fetching for ``req`` here; False if it needs the general path."""
        key = target.url
        if self.fetcher.flying(key):
            return False
        found = self.store.get_memory(key)
        if found is None:
            if self.store.has_disk:
                return False  # it may be on disk: looking is I/O
        elif isinstance(found, VaryMarker) or not isinstance(found.body, bytes):
            return False
        else:
            heuristic = self.heuristics.for_url(key)
            reuse = evaluate(found.head, _NO_DIRECTIVES, time.time(), heuristic)
            if isinstance(reuse, Fresh):
                return False  # a hit the fast path has not learnt yet
            if reuse.stale_while_revalidate:
                return False  # served stale at once, and revalidated behind it
        upstream = self.pool.take_idle(target.host, target.port, conn.client_ip)
        if upstream is None:
            return False
        fetch = LeanFetch(self, req, target, conn, found, upstream)
        self.begun(fetch)
        fetch.send()
        return True

    def key_for(self, key: str) -> str | None:
        """The cache key for Cache-Status, if configured to name it."""
        return key if self._status_keys else None

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def begun(self, fetch: Step) -> None:
        self._running.add(fetch)

    def ended(self, fetch: Step) -> None:
        self._running.discard(fetch)
        if not self._running and self._all_done is not None and not self._all_done.done():
            self._all_done.set_result(None)

    async def drain(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for running fetches to answer their clients."""
        if self._running:
            self._all_done = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._all_done], timeout=grace)


class Step(Protocol):
    """A fetch on this path, as its guard and its path see it."""

    @property
    def key(self) -> str: ...

    def abandon(self) -> None: ...


S = TypeVar("S", bound=Step)


def guarded(step: Callable[Concatenate[S, P], None]) -> Callable[Concatenate[S, P], None]:
    """Run a step called from a parser or the loop; a bug in it must cost one request (its
    connections closed), never leave a client waiting for ever."""

    # Steps of no argument or one (most, and those run on every request) get a wrapper that
    # passes it as it is: packing arguments costs more than the guard itself.
    arity = _plain_arity(step)
    plain: Callable[..., None] = step
    if arity == 0:

        def run_bare(fetch: S) -> None:
            try:
                plain(fetch)
            except Exception:
                _failed(fetch)

        return cast(Callable[Concatenate[S, P], None], run_bare)
    if arity == 1:

        def run_one(fetch: S, arg: object) -> None:
            try:
                plain(fetch, arg)
            except Exception:
                _failed(fetch)

        return cast(Callable[Concatenate[S, P], None], run_one)

    def run(fetch: S, /, *args: P.args, **kwargs: P.kwargs) -> None:
        try:
            step(fetch, *args, **kwargs)
        except Exception:
            _failed(fetch)

    return run


def _plain_arity(step: Callable[..., None]) -> int | None:
    """How many arguments ``step`` takes after the fetch, if it takes only plain positional
    ones (no defaults, no keywords, no packing); else None."""
    code = getattr(step, "__code__", None)
    if code is None or getattr(step, "__defaults__", None) or code.co_kwonlyargcount:
        return None
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    return int(code.co_argcount) - 1


def _failed(fetch: Step) -> None:
    log.exception("miss fast path failed for %s", fetch.key)
    fetch.abandon()


def abandon(
    path: LeanPath,
    fetch: Step,
    upstream: UpstreamConnection,
    flight: Flight,
    conn: ClientConnection,
) -> None:
    """Give up a fetch after a bug: both connections closed, the flight failed."""
    upstream.detach()
    upstream.close()
    flight.fail(UpstreamProtocolError("internal error"))
    path.fetcher.retire(flight)
    path.ended(fetch)
    conn.close()
    conn.lean_done(False)


def write_answer(conn: ClientConnection, head: bytes, body: bytes) -> bool:
    """Send a whole response; False if the client has gone."""
    if conn.closed:
        return False
    conn.hold_response(head, body)
    return True


class LeanFetch:
    """One fetch on the fast path; the upstream connection calls it as the response parses."""

    __slots__ = (
        "_answer",
        "_chunks",
        "_conn",
        "_flight",
        "_head",
        "_path",
        "_plan",
        "_req",
        "_request_time",
        "_response_time",
        "_stored",
        "_target",
        "_to_store",
        "_tx",
        "_upstream",
    )

    def __init__(
        self,
        path: LeanPath,
        req: Request,
        target: Target,
        conn: ClientConnection,
        stored: StoredObject | None,
        upstream: UpstreamConnection,
        *,
        flight: Flight | None = None,
        request_time: float = 0.0,
        head: ResponseHead | None = None,
    ) -> None:
        """``flight``, ``request_time`` (when the request went) and ``head`` (if read) are
        given when the fetch takes over an exchange already under way."""
        self._path = path
        self._req = req
        self._target = target
        self._conn = conn
        self._stored = stored
        self._upstream = upstream
        self._flight = flight or path.fetcher.open_flight(target.url)
        self._head = head
        self._chunks: list[bytes] = []
        self._to_store: tuple[Headers, StoreDecision] | None = None
        self._answer: tuple[bytes, bytes] | None = None  # head and body for the client
        self._tx = Transaction(req.started, conn.client_ip, "GET", target.url)
        self._tx.hierarchy = Hierarchy.HIER_DIRECT
        self._tx.peer = upstream.peer_ip
        self._request_time = request_time
        self._response_time = 0.0

    @property
    def key(self) -> str:
        return self._target.url

    @guarded
    def send(self) -> None:
        path, stored = self._path, self._stored
        head = path.fetcher.requests.head(
            self._req,
            self._target,
            stored.head if stored is not None else None,
            self._conn.client_ip,
        )
        self._request_time = time.time()
        relay = interim_relay(self._conn, self._req.version, path.via)
        self._upstream.begin(False, path.config.upstream.read_timeout, self, relay)
        self._upstream.send_now(head)

    # -- Listener ----------------------------------------------------------------------------

    @guarded
    def on_head(self, head: ResponseHead) -> None:
        self._response_time = now = time.time()
        self._head = head
        stored = self._stored
        # (decoded as filtered: the response's own Headers are never made here)
        headers = end_to_end((n.decode("latin-1"), v.decode("latin-1")) for n, v in head.raw)
        ensure_date(headers, now)
        if stored is not None and head.status == 304 and is_not_modified_for(stored.head, headers):
            self._refreshed(stored, head, headers)
            return
        length = content_length(headers)
        if bodyless("GET", head.status) or length is None or length > SMALL_BODY:
            self._move(head)
            return
        if "Vary" in headers or (stored is not None and head.status >= 500):
            self._move(head)  # (a failed validation: stale may be served instead)
            return
        decision = storable(
            "GET",
            self._req.headers,
            _NO_DIRECTIVES,
            head.status,
            headers,
            parse_cache_control(headers.get_all("Cache-Control")),
        )
        if (decision.ok and self._path.store.has_disk) or (stored is not None and not decision.ok):
            self._move(head)  # the store needs I/O
            return
        name = self._path.name
        keep = decision.ok and length <= self._path.store.max_object
        peer = self._upstream.peer_ip
        self._flight.publish_head(
            FlightHead(head.status, head.reason, headers, decision.ok, peer, stored=keep)
        )
        if keep:
            self._to_store = (headers, decision)
        fwd = "uri-miss" if stored is None else "stale"
        value = cache_status(
            name,
            hit=False,
            fwd=fwd,
            fwd_status=head.status,
            stored=keep,
            key=self._path.key_for(self._target.url),
        )
        self._tx.result = "TCP_MISS" if stored is None else "TCP_REFRESH_MODIFIED"
        self._tx.content_type = headers.get("Content-Type") or "-"
        client_head = self._client_head(
            head.status, head.reason, headers, [], value, length, _SET_ON_FETCHED
        )
        self._answer = (client_head, b"")
        if keep and stored is None:
            self._plan_miss(head, headers, decision, value, client_head, length)

    @guarded
    def on_body(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._flight.publish_nowait(chunk)

    @guarded
    def on_end(self) -> None:
        answer = self._answer
        assert answer is not None
        if self._tx.result != "TCP_REFRESH_UNMODIFIED":
            chunks = self._chunks
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if self._to_store is not None:
                self._store(body, *self._to_store)
            answer = (answer[0], body)
            self._flight.finish()
        self._path.fetcher.retire(self._flight)
        self._path.pool.release(self._upstream)
        self._respond(*answer)

    @guarded
    def on_error(self, error: UpstreamError) -> None:
        self._upstream.finish()
        self._upstream.close()
        if self._tx.result == "TCP_REFRESH_UNMODIFIED" and self._answer is not None:
            # The origin confirmed the object before failing (stray bytes after its 304).
            self._path.fetcher.retire(self._flight)
            self._respond(*self._answer)
            return
        if self._head is None and isinstance(error, UpstreamReset):
            # Most likely the origin closed the idle connection as it was reused: the
            # general path tries again on a new one (and so does every client that joined).
            error = FlightRetry(str(error))
        self._flight.fail(error)
        self._path.fetcher.retire(self._flight)
        self._hand_over()

    # -- steps -------------------------------------------------------------------------------

    def abandon(self) -> None:
        abandon(self._path, self, self._upstream, self._flight, self._conn)

    def _store(self, body: bytes, headers: Headers, decision: StoreDecision) -> None:
        head = self._head
        assert head is not None
        url = self._target.url
        times = (self._request_time, self._response_time)
        stored = head_to_store(
            url, head.status, head.reason, headers, decision, times, "", len(body)
        )
        self._path.store.put_now(url, stored, body)

    def _refreshed(self, stored: StoredObject, head: ResponseHead, headers: Headers) -> None:
        """A 304 confirmed the stored object: answer from it under the refreshed head."""
        path, key = self._path, self._target.url
        fresh = freshen(stored.head, headers, self._request_time, self._response_time)
        write = path.store.refresh_head(key, fresh)
        if write is not None:
            path.tasks.spawn(write, f"store head {key}")
        self._flight.publish_head(
            FlightHead(
                304, head.reason, headers, True, self._upstream.peer_ip, fresh.vary_key, fresh
            )
        )
        self._flight.finish()
        now = time.time()
        reuse = evaluate(fresh, _NO_DIRECTIVES, now, path.heuristics.for_url(key))
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
        self._tx.result = "TCP_REFRESH_UNMODIFIED"
        self._tx.content_type = stored_fields(fresh.headers).get("Content-Type") or "-"
        self._learn(head, fresh, reuse.age - max(0.0, now - self._response_time))

    def _learn(self, head: ResponseHead, fresh: StoredHead, received_age: float) -> None:
        """Keep a plan of this refresh for the next same request (see ``refresh``)."""
        path, target, req = self._path, self._target, self._req
        obj = path.store.get_memory(target.url)
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
        """Keep a plan of this miss for the next one asked the same way (see ``miss_plan``)."""
        path, target, req, conn = self._path, self._target, self._req, self._conn
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
            via=path.via,
            replaced=_SET_ON_FETCHED,
            content_type=self._tx.content_type,
            queries=path.config.cache.cache_query_urls,
            max_length=min(SMALL_BODY, path.store.max_object),
        )
        path.miss_plans.keep(key, plan)

    def _move(self, head: ResponseHead) -> None:
        """Hand the exchange, its flight and the client to the general path."""
        self._upstream.detach()
        sent = Sent(
            Exchange(self._path.pool, self._upstream, head),
            self._request_time,
            self._response_time,
        )
        stored = self._stored.head if self._stored is not None else None
        path = self._path
        path.fetcher.adopt(
            self._flight, self._req, self._target, stored, self._conn.client_ip, sent
        )
        self._hand_over()

    def _hand_over(self) -> None:
        # The client reads the flight from its start; if others have read past that (it
        # failed mid-body), the general path fetches afresh.
        reader = self._flight.join()
        if reader is not None:
            started = StartedFetch(self._flight, reader, self._stored is not None)
            self._req.started_fetch = started
        self._path.handed_over += 1
        self._path.ended(self)
        self._conn.lean_handoff(self._req)

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
        req, conn = self._req, self._conn
        close = not req.keep_alive or conn.must_close
        framed, _, conn.must_close = framing(length, req.version, close, False)
        extra.append(("Cache-Status", cache_status_value))
        extra.extend(framed)
        self._tx.status = status
        return forwarded_head(status, reason, fields, self._path.via, extra, replaced)

    def _respond(self, head: bytes, body: bytes) -> None:
        conn, tx = self._conn, self._tx
        tx.aborted = not write_answer(conn, head, body)
        tx.bytes_sent = len(head) + len(body)
        record(self._path.log, self._path.traffic, tx)
        self._path.answered += 1
        self._path.ended(self)
        conn.lean_done(self._req.keep_alive)
