"""The planned miss: a new URL fetched by repeating a miss plan (see ``miss_plan``).

It runs from the client parser's callback, like the planned revalidation, before a Request is
made: the raw target and fields select a plan, the planned request goes out on a pooled
connection, and a response of the planned shape is stored and answered from the plan. Any
other response, a failure, or a client that asked to close meanwhile is passed at that point,
with the exchange and its flight, to the miss fast path's general handling.
"""

from __future__ import annotations

import time

from harvest_cache.errors import UpstreamError
from harvest_cache.http.forwarding import end_to_end
from harvest_cache.http.headers import Headers
from harvest_cache.http.target import Target
from harvest_cache.server.accesslog import Hierarchy, line_head
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.flight import FlightHead
from harvest_cache.server.lean import LeanFetch, LeanPath, abandon, guarded, write_answer
from harvest_cache.server.miss_plan import MissPlan, RawFields, plan_key
from harvest_cache.server.reply import interim_relay
from harvest_cache.server.request import Request
from harvest_cache.upstream.connection import ResponseHead, UpstreamConnection

_RESULT_NAME = "TCP_MISS"
_RESULT = _RESULT_NAME.encode()
_HIER = Hierarchy.HIER_DIRECT


def start_planned_miss(
    path: LeanPath, conn: ClientConnection, target: bytes, fields: list[tuple[bytes, bytes]]
) -> bool:
    """Begin a plain keep-alive HTTP/1.1 GET for ``target`` with ``fields`` from a miss plan;
    False if none applies (the request then goes on as usual)."""
    found = plan_key(conn.client_ip, target, tuple(fields))
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
    upstream = path.pool.take_idle(plan.host, plan.port)
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
        self._flight = path.fetcher.open_flight(url)
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
        abandon(self._path, self, self._upstream, self._flight, self._conn)

    @guarded
    def send(self) -> None:
        self._request_time = time.time()
        path = self._path
        relay = interim_relay(self._conn, "1.1", path.via)
        self._upstream.begin(False, path.config.upstream.read_timeout, self, relay)
        self._upstream.send_now(self._plan.request(self._rest))

    # -- Listener ----------------------------------------------------------------------------

    @guarded
    def on_head(self, head: ResponseHead) -> None:
        self._response_time = time.time()
        plan = self._plan
        length = plan.match(head.status, head.raw)
        if length is None or self._conn.must_close:
            self._unplanned().on_head(head)
            return
        self._head = head
        peer = self._upstream.peer_ip

        def flight_head() -> FlightHead:
            # (as the miss fast path publishes it: the fields as stored)
            fields = end_to_end((n.decode("latin-1"), v.decode("latin-1")) for n, v in head.raw)
            return FlightHead(head.status, head.reason, fields, True, peer, stored=True)

        self._flight.publish_head_lazily(flight_head)
        self._client_head = plan.client_head(head.raw, length)

    @guarded
    def on_body(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
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
        self._flight.finish()
        path.fetcher.retire(self._flight)
        path.pool.release(self._upstream)
        self._respond(body)

    @guarded
    def on_error(self, error: UpstreamError) -> None:
        self._unplanned().on_error(error)

    # -- steps -------------------------------------------------------------------------------

    def _unplanned(self) -> LeanFetch:
        """The general fast path's fetch, taking over this exchange where it stands."""
        path = self._path
        req = Request(
            method="GET",
            target=self._url,
            version="1.1",
            headers=Headers.from_raw(self._fields),
            keep_alive=True,
            started=self._started,
        )
        plan = self._plan
        fetch = LeanFetch(
            path,
            req,
            Target("http", plan.host, plan.port, self._rest.decode("latin-1")),
            self._conn,
            None,
            self._upstream,
            flight=self._flight,
            request_time=self._request_time,
            head=self._head,
        )
        path.begun(fetch)  # first, so that shutdown never sees no fetch running
        path.ended(self)
        if self._upstream.listening:
            self._upstream.relisten(fetch)
        return fetch

    def _respond(self, body: bytes) -> None:
        head, conn, path = self._client_head, self._conn, self._path
        sent = write_answer(conn, head, body)
        size = len(head) + len(body)
        seconds = time.monotonic() - self._started
        status = self._plan.status
        path.traffic.ended("GET", _RESULT_NAME, status, size, seconds, _HIER, not sent)
        if path.log.enabled:
            line = line_head(
                time.time(),
                round(seconds * 1000),
                conn.client_bytes,
                _RESULT,
                status,
                size,
                not sent,
            )
            path.log.write(line + self._plan.log_tail(self._url, self._upstream.peer_ip))
        path.answered += 1
        path.planned_misses += 1
        path.ended(self)
        conn.lean_done(True)
