"""The proxy driver: routes each request, asks the pure policy what to do, and does the I/O.

GET requests that miss (or find a stale object) go through a flight, so concurrent requests
for one object share one upstream fetch; everything else is forwarded inline. Every decision
comes from harvest_cache.http; this module only awaits, streams and records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from secrets import token_hex
from typing import assert_never

from harvest_cache.config import CacheConfig, Config
from harvest_cache.errors import NoRoute, RequestError, UpstreamError
from harvest_cache.hierarchy.digests import CONTENT_TYPE, DIGEST_PATH, Digests
from harvest_cache.hierarchy.htcp import Detail, Specifier
from harvest_cache.hierarchy.responder import HIT_MIN_TTL, fresh_for
from harvest_cache.hierarchy.route import Hop
from harvest_cache.http import conditional, forwarding, partial
from harvest_cache.http.cache_control import DEFAULT as NO_DIRECTIVES
from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.cache_status import cache_status
from harvest_cache.http.dates import format_http_date
from harvest_cache.http.decision import (
    Asked,
    Fetch,
    Forward,
    FromCache,
    GiveUp,
    Held,
    Refetch,
    Refuse,
    Relay,
    Revalidate,
    ServeRefreshed,
    ServeStale,
    TryStale,
    after_forward,
    bypass,
    hit_result,
    lookup,
    relay,
    serve_stale,
)
from harvest_cache.http.freshness import (
    Heuristic,
    HeuristicRules,
)
from harvest_cache.http.headers import Headers
from harvest_cache.http.partial import FromParts
from harvest_cache.http.policy import (
    Fresh,
    StoreDecision,
    evaluate,
    request_directives,
    storable,
)
from harvest_cache.http.ranges import IgnoreRange, SinglePart, Unsatisfiable, answer_range
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.target import Target, parse_absolute, parse_authority
from harvest_cache.http.vary import vary_key
from harvest_cache.server.accesslog import AccessLog, Hierarchy
from harvest_cache.server.acl import Access
from harvest_cache.server.bumping import Bumper
from harvest_cache.server.connection import Answered, ClientConnection
from harvest_cache.server.fast_fetch import FastPath
from harvest_cache.server.fetch import (
    Alternatives,
    Fetcher,
    content_length,
    upstream_headers,
    variant_key,
)
from harvest_cache.server.flight import Flight, FlightHead, FlightReader, FlightRetry, StartedFetch
from harvest_cache.server.head_memo import HeadMemo, ParsedHead
from harvest_cache.server.pages import BodyPages
from harvest_cache.server.partials import (
    HeldParts,
    PartialStore,
    PartsAsked,
    PartWriter,
    close_bodies,
)
from harvest_cache.server.prepared.hits import DiskEntry, HotEntry, HotIndex
from harvest_cache.server.reply import ClientGone, Reply, from_store, interim_relay
from harvest_cache.server.request import Request
from harvest_cache.server.routing import Router, request_target
from harvest_cache.server.transaction import Transaction, record
from harvest_cache.server.tunnel import open_tunnel
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.interface import DiskHit, FileBody, ObjectStore, StoredObject
from harvest_cache.traffic import Traffic
from harvest_cache.upstream.client import Exchange, OutgoingRequest
from harvest_cache.upstream.pool import Pool
from harvest_common.tasks import TaskSet

log = logging.getLogger("harvest_cache")
# The stored fields a TST answer tells (RFC 2756 3.3: response and entity headers).
_HTCP_RESPONSE = frozenset({"date", "cache-control", "etag", "vary"})
_HTCP_ENTITY = frozenset({"expires", "last-modified", "content-type", "content-length"})

# Bodies smaller than this are joined to their head for a single send.
_COALESCE = 64 * 1024

# Cache-Status details for the answers the cache gives itself.
_DETAILS = {
    400: "bad-request",
    403: "denied",
    408: "request-timeout",
    413: "body-too-large",
    414: "uri-too-long",
    431: "head-too-large",
    501: "not-implemented",
    504: "only-if-cached",
    505: "version-not-supported",
}

_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    413: "Content Too Large",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}


def heuristic_rules(cache: CacheConfig) -> HeuristicRules:
    """The heuristic freshness rules of ``[cache]``: refresh patterns, then the default."""
    rules = [
        (p.regex, Heuristic(p.percent, p.max_seconds, p.min_seconds))
        for p in cache.refresh_patterns
    ]
    return HeuristicRules(rules, Heuristic(cache.heuristic_percent, cache.heuristic_max_seconds))


class Proxy:
    def __init__(
        self,
        config: Config,
        name: str,
        store: ObjectStore,
        pool: Pool,
        access_log: AccessLog,
        tasks: TaskSet,
        router: Router,
        heuristics: HeuristicRules,
        traffic: Traffic,
        partials: PartialStore,
        digests: Digests | None = None,
        own: tuple[frozenset[str], int] = (frozenset(), 0),
    ) -> None:
        """``digests``: the cache digests, ours served at DIGEST_PATH to requests for one of
        the ``own`` host names and port (or in origin form)."""
        self._config = config
        self.name = name
        self._store = store
        self._memory = store.memory_view
        self._pool = pool
        self._log = access_log
        self.access = Access(config.access)
        self.heuristics = heuristics
        self._traffic = traffic
        self._tasks = tasks
        self._router = router
        self._digests = digests
        self._own_hosts, self._own_port = own
        self._fetcher = Fetcher(config, name, store, router, tasks.spawn)
        self.partials = partials
        self._refreshing: set[str] = set()  # keys revalidated in the background
        # Intercepts CONNECT tunnels when bump.enabled (the server's, set after it is made).
        self.bumper: Bumper | None = None
        # Told of each URL purged or invalidated here (the server's: HTCP CLRs to the peers
        # marked htcp).
        self.on_purged: Callable[[str], None] | None = None
        # Page copies of hot bodies may take an eighth as much again as the memory tier.
        self._pages = BodyPages(config.cache.memory_mb * (1 << 20) // 8)
        # Prepared hits' bodies are the memory tier's while they are valid, so a bound of the
        # tier's size keeps prepared hits for all it holds; entries whose objects it dropped
        # are forgotten within a second (``sweep``), and keep little alive meanwhile.
        self._hot = HotIndex(
            store.memory_view,
            name,
            config.server.cache_status_key,
            self._pages,
            config.cache.memory_mb * (1 << 20),
        )
        self.heads = HeadMemo(config.server.max_request_line)
        self.fast = FastPath(
            config,
            name,
            store.memory_view,
            pool,
            self._fetcher,
            access_log,
            traffic,
            self.heuristics,
            tasks,
        )

    @property
    def busy(self) -> bool:
        """Whether fast-path fetches it started are still running (a retired proxy's)."""
        return self.fast.busy

    def flights(self) -> list[Flight]:
        """The fetches in progress that requests have joined or may join (for metrics)."""
        return self._fetcher.flights()

    def fetching(self) -> list[str]:
        """The keys of every fetch in progress."""
        return self._fetcher.fetching()

    @property
    def hot_entries(self) -> int:
        """Objects the hit fast path can answer now (a gauge for operators and tests)."""
        return len(self._hot)

    @property
    def disk_heads(self) -> int:
        """Answers kept for objects left on disk (a gauge)."""
        return self._hot.disk_entries

    @property
    def page_bytes(self) -> int:
        """Bytes of hot bodies copied into memory files for sendfile (a gauge)."""
        return self._pages.held

    # -- entry points ----------------------------------------------------------------------

    def try_answer(self, conn: ClientConnection, head: ParsedHead, parsed: bool) -> Answered:
        """Answer a plain GET or HEAD (no field that calls for the full policy) at once from
        a prepared hit (a GET also from the memory or disk tier, for origins that need no
        routing), or start answering it on the fast path: from a revalidation plan or a miss plan
        (keep-alive HTTP/1.1 GETs), else, for a ``parsed`` head, worked out in full there
        (plain GETs for origins that need no routing). ``NO`` when none applies: the request
        then goes the general way (``handle``)."""
        method, target, version, keep_alive, fields = head
        client_ip = conn.client_ip
        if not self._admits(client_ip, target):
            return Answered.NO
        # A prepared hit, answered here (on every hit: no frame of its own).
        now = time.time()
        entry = self._hot.lookup(target, now)
        if entry is not None:
            head_only = method == b"HEAD"
            answer = self._hot.head(entry, now, not keep_alive, version == "1.0")
            size = len(answer)
            if head_only:
                conn.write(answer)
            else:
                _write_entry(conn, answer, entry)
                size += len(entry.body)
            status = entry.obj.head.status
            traffic = self._traffic
            counts = traffic.fast_hits
            counts[method, status] = counts.get((method, status), 0) + 1
            traffic.bytes_to_clients += size
            if self._log.enabled:
                self._log.write(self._hot.log_line(entry, now, conn.client_bytes, size, head_only))
            return Answered.HIT
        if method != b"GET":
            return Answered.NO
        fast = self.fast
        if version == "1.1" and keep_alive:
            if fast.revalidate(conn, target, fields):
                return Answered.AGAIN
            # (miss plans come from the fast path alone: misses the hierarchy routes have none)
            if fast.fetch_planned(conn, target, fields):
                return Answered.ONCE
        if not self._router.direct_only:
            return Answered.NO  # (each miss is routed through the hierarchy first)
        raw = target.decode("latin-1")
        try:
            origin = parse_absolute(raw)
        except RequestError:
            return Answered.NO
        if not self._config.cache.cache_query_urls and "?" in origin.path:
            return Answered.NO
        if not self.access.port_allowed(origin.port) or self._refuses_host(client_ip, origin.host):
            return Answered.NO
        if self._stored_hit(conn, target, origin.url, keep_alive, version, now):
            return Answered.HIT
        if not parsed:
            return Answered.NO
        req = Request("GET", raw, version, Headers.from_raw(fields), keep_alive, time.monotonic())
        return Answered.FETCH if fast.fetch(conn, req, origin) else Answered.NO

    def _stored_hit(
        self,
        conn: ClientConnection,
        target: bytes,
        key: str,
        keep_alive: bool,
        version: str,
        now: float,
    ) -> bool:
        """Answer a plain GET for a fresh object the memory tier holds, or the disk tier
        and the page cache (read without waiting), and prepare its next hits (unless it
        was read from disk and left there: its body is then sent from disk); False if it is
        not one: the general path then takes the request."""
        memory, hot = self._memory, self._hot
        found: StoredObject | DiskHit | VaryMarker | None = memory.get(key)
        from_disk = False
        if found is None:
            if not memory.on_disk(key):
                return False
            again = hot.lookup_disk(target, now) if conn.sends_files() else None
            if again is None:
                found = memory.read_disk(key)
            else:
                resent = memory.resend_disk(key, again.hit)
                if isinstance(resent, int):
                    self._send_again(conn, again, resent, keep_alive, version, now)
                    return True
                if resent is None:
                    hot.forget_disk(target)
                    found = memory.read_disk(key)
                else:
                    found = resent  # (promoted; the entry serves again once it is evicted)
            from_disk = True
        if found is None or isinstance(found, VaryMarker):
            return False  # (a Vary marker, or not to be had without waiting)
        heuristic = self.heuristics.for_url(key)
        # (a head read from disk is new: memoising its facts would only evict others')
        reuse = evaluate(found.head, NO_DIRECTIVES, now, heuristic, once=isinstance(found, DiskHit))
        if not isinstance(reuse, Fresh):
            return False
        if isinstance(found, DiskHit):
            bodiless = StoredObject(found.head, b"", "disk")
            entry = hot.prepare(key, bodiless, reuse.age, reuse.ttl, now, found.length)
            if entry is not None:
                hot.keep_disk(target, entry, found)
        else:
            # (an object just read from disk is likely read once: no page copy for it yet)
            entry = hot.add(target, key, found, reuse.age, reuse.ttl, now, copy_pages=not from_disk)
        if entry is None:
            return False
        answer = hot.head(entry, now, not keep_alive, version == "1.0")
        if isinstance(found, DiskHit):
            conn.write_sent(answer, found.view, found.fd, found.offset)
            size = len(answer) + found.length
        else:
            _write_entry(conn, answer, entry)
            size = len(answer) + len(entry.body)
        result, code = ("TCP_HIT", b"TCP_HIT") if from_disk else ("TCP_MEM_HIT", b"TCP_MEM_HIT")
        self._traffic.ended("GET", result, found.head.status, size, 0.0, "HIER_NONE", False)
        if self._log.enabled:
            self._log.write(hot.log_line(entry, now, conn.client_bytes, size, False, code))
        return True

    def _send_again(
        self,
        conn: ClientConnection,
        entry: DiskEntry,
        fd: int,
        keep_alive: bool,
        version: str,
        now: float,
    ) -> None:
        """Answer a plain GET from the prepared hit of an object left on disk, its body sent
        from ``fd`` unread."""
        hot, hit = self._hot, entry.hit
        answer = hot.disk_head(entry, now, not keep_alive, version == "1.0")
        conn.send_file(answer, fd, hit.offset, hit.length)
        size = len(answer) + hit.length
        self._traffic.ended("GET", "TCP_HIT", hit.head.status, size, 0.0, "HIER_NONE", False)
        if self._log.enabled:
            self._log.write(hot.disk_log_line(entry, now, conn.client_bytes, size))

    def _admits(self, client_ip: str, target: bytes) -> bool:
        """Whether a fast path may answer the client at ``client_ip`` for ``target`` (others
        go the general way, which answers a refusal)."""
        access = self.access
        if not access.client_allowed(client_ip):
            return False
        return access.reaches_local(client_ip) or not access.local_target(target)

    def _refuses_host(self, client_ip: str, host: str) -> bool:
        """Whether the client at ``client_ip`` may not reach ``host``: this host, when the
        client is not on loopback (a name's addresses are judged again when connecting)."""
        access = self.access
        return not access.reaches_local(client_ip) and access.local_host(host)

    def sweep(self) -> None:
        """Forget prepared hits whose objects the memory tier dropped (run every second)."""
        self._hot.sweep()

    def retire(self) -> None:
        """A reload replaced this proxy: its prepared hits, and the page copies they hold,
        are no longer wanted (requests it still answers take the full path)."""
        self._pages.budget = 0
        self._hot.clear()

    async def drain(self, grace: float) -> None:
        """Let requests on the miss fast path finish, for up to ``grace`` seconds."""
        await self.fast.drain(grace)

    async def handle(self, req: Request, conn: ClientConnection) -> None:
        tx = Transaction(req.started, conn.client_ip, req.method, req.target)
        reply = Reply(conn, req)
        try:
            if req.error is not None:
                raise req.error
            if not self.access.client_allowed(conn.client_ip):
                tx.result = "TCP_DENIED"
                raise RequestError(403, "access denied: this proxy does not serve your network")
            if req.method == "CONNECT":
                await self._connect(req, conn, tx)
                return
            if self._digests is not None and self._for_own_digest(req):
                await self._serve_digest(self._digests, tx, reply)
                return
            target = parse_absolute(req.target)
            tx.url = target.url
            if not self.access.port_allowed(target.port):
                tx.result = "TCP_DENIED"
                raise RequestError(403, f"port {target.port} is not allowed")
            if self._refuses_host(conn.client_ip, target.host):
                tx.result = "TCP_DENIED"
                raise RequestError(403, f"{target.host} is this host: not reachable from yours")
            if self._router.direct_only and forwarding.is_loop(req.headers, self.name):
                # (Among peers, the route goes direct instead: that ends the loop.)
                raise RequestError(403, "forwarding loop detected (our name is in Via)")
            if await self._answer_max_forwards(req, conn, tx, reply):
                return
            if req.method == "PURGE":
                await self._purge(req, target, conn, tx, reply)
                return
            if self._router.from_sibling(req):
                req.headers.add("Cache-Control", "only-if-cached")  # hits alone for siblings
            if req.method in ("GET", "HEAD"):
                await self._cached(req, target, conn, tx, reply)
            else:
                await self._forward(req, target, conn, tx, reply, "TCP_MISS")
        except RequestError as e:
            status = cache_status(self.name, hit=False, detail=_DETAILS.get(e.status, "refused"))
            await self._fail(conn, req, tx, reply, e.status, e.reason, status, close=e.close)
        except UpstreamError as e:
            if e.denied:
                tx.result = "TCP_DENIED"
            elif not e.counted:
                e.counted = True
                self._traffic.upstream_failed(e.kind)
            noroute = isinstance(e, NoRoute)
            tx.hierarchy = Hierarchy.NO_DIRECT_FAIL if noroute else Hierarchy.HIER_DIRECT
            status = cache_status(self.name, hit=False, fwd="miss", detail=e.kind)
            await self._fail(conn, req, tx, reply, e.status, e.cause, status, close=False)
        except ClientGone:
            tx.aborted = True
            conn.close()
        finally:
            # Routes that bypass the Reply (tunnels) record their own numbers.
            tx.status = tx.status or reply.status
            tx.bytes_sent = tx.bytes_sent or reply.bytes_sent
            if reply.content_type != "-":
                tx.content_type = reply.content_type
            if req.body is not None:
                self._traffic.bytes_from_clients += req.body.received
            record(self._log, self._traffic, tx)

    async def _fail(
        self,
        conn: ClientConnection,
        req: Request,
        tx: Transaction,
        reply: Reply,
        status: int,
        cause: str,
        cache_status_value: str,
        *,
        close: bool,
    ) -> None:
        if reply.started:
            # Part of a response is out: only a close tells the client it is incomplete.
            tx.aborted = True
            conn.close()
            return
        if req.body is not None and not req.body.ended:
            close = True
        if close:
            conn.must_close = True
        reason = _REASONS.get(status, "Error")
        text = f"Harvest cache {self.name}: {status} {reason}\n{cause}\n"
        headers = Headers([("Cache-Status", cache_status_value)])
        forwarding.add_via(headers, "1.1", self.name)
        tx.status = status
        try:
            await reply.send_text(status, reason, text, headers)
        except ClientGone:
            tx.aborted = True

    # -- Max-Forwards (RFC 9110 7.6.2) ---------------------------------------------------------

    async def _answer_max_forwards(
        self, req: Request, conn: ClientConnection, tx: Transaction, reply: Reply
    ) -> bool:
        if req.method not in ("OPTIONS", "TRACE"):
            return False
        if forwarding.max_forwards(req.headers) != 0:
            return False
        headers = Headers()
        forwarding.add_via(headers, "1.1", self.name)
        if req.method == "OPTIONS":
            headers.add("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE")
            await reply.send_text(200, "OK", "", headers)
        else:
            echo = Headers(
                (n, v)
                for n, v in req.headers
                if n.lower() not in ("authorization", "cookie", "proxy-authorization")
            )
            text = f"TRACE {req.target} HTTP/{req.version}\r\n" + echo.encode().decode("latin-1")
            headers.add("Content-Type", "message/http")
            await reply.send_text(200, "OK", text, headers)
        tx.result = "TCP_MISS"
        return True

    # -- PURGE -----------------------------------------------------------------------------------

    async def _purge(
        self, req: Request, target: Target, conn: ClientConnection, tx: Transaction, reply: Reply
    ) -> None:
        """Drop what the cache holds for the URL (Squid's PURGE): 200 if it held something,
        404 if not. A Vary marker goes with every variant under it."""
        if not self.access.purge_allowed(conn.client_ip):
            tx.result = "TCP_DENIED"
            raise RequestError(403, "PURGE is not allowed from your address", close=False)
        tx.result = "TCP_MISS"
        purged = await self._purge_url(target.url)
        if self.on_purged is not None:
            self.on_purged(target.url)  # (the peers forget it too)
        if purged:
            await reply.send_text(200, "OK", "purged\n", Headers())
        else:
            await reply.send_text(404, "Not Found", "not in the cache\n", Headers())

    async def _purge_url(self, url: str) -> bool:
        """Drop every object and part held for ``url``; whether there was any."""
        held_parts = await self.partials.drop(url)
        return await self._store.purge(url) or held_parts

    # -- HTCP (RFC 2756): other caches' TST and CLR ----------------------------------------------

    async def htcp_test(self, spec: Specifier) -> tuple[bool, Detail]:
        """Whether we hold, fresh for ``HIT_MIN_TTL`` more, the response ``spec``'s request
        would get (the variant its fields select; for a request with credentials, only one
        the origin let be shared), and what to tell of it."""
        try:
            target = parse_absolute(spec.uri)
        except RequestError:
            return False, Detail()
        headers = Headers(list(spec.headers))
        url = target.url
        found = await self._lookup(url)
        if isinstance(found, VaryMarker):
            found = await self._lookup(variant_key(url, found, vary_key(found.names, headers)))
        now = time.time()
        if not isinstance(found, StoredObject):
            return False, Detail((("Age", "0"),))
        head = found.head
        stored = Headers(list(head.headers))
        cc = parse_cache_control(stored.get_all("Cache-Control"))
        shared = cc.public or cc.s_maxage is not None or cc.must_revalidate
        heuristic = self.heuristics.for_url(url)
        hit = fresh_for(head, HIT_MIN_TTL, now, heuristic) and (
            "Authorization" not in headers or shared
        )
        reuse = evaluate(head, NO_DIRECTIVES, now, heuristic)
        age = ("Age", str(int(reuse.age)))
        response = (age, *((n, v) for n, v in head.headers if n.lower() in _HTCP_RESPONSE))
        entity = tuple((n, v) for n, v in head.headers if n.lower() in _HTCP_ENTITY)
        return hit, Detail(response, entity)

    async def htcp_clear(self, spec: Specifier) -> int:
        """Forget ``spec``'s URL (its every variant and part): the CLR RESPONSE, 0 if
        something was held, 2 if not."""
        try:
            target = parse_absolute(spec.uri)
        except RequestError:
            return 2
        return 0 if await self._purge_url(target.url) else 2

    # -- our cache digest ----------------------------------------------------------------------

    def _for_own_digest(self, req: Request) -> bool:
        if req.method not in ("GET", "HEAD") or not req.target.endswith(DIGEST_PATH):
            return False
        if req.target == DIGEST_PATH:
            return True
        try:
            target = parse_absolute(req.target)
        except RequestError:
            return False
        own = target.port == self._own_port and target.host.lower() in self._own_hosts
        return own and target.path == DIGEST_PATH

    async def _serve_digest(self, digests: Digests, tx: Transaction, reply: Reply) -> None:
        tx.result = "TCP_MISS"  # (Squid logs its own digest so too)
        body = digests.own
        if body is None:
            raise RequestError(503, "the cache digest is being built", close=False)
        headers = Headers([("Content-Type", CONTENT_TYPE)])
        headers.add("Date", format_http_date(time.time()))
        headers.add("Last-Modified", format_http_date(digests.own_built))
        headers.add("Cache-Control", f"max-age={int(self._config.hierarchy.digest_rebuild_period)}")
        reply.start(200, "OK", headers, len(body))
        await reply.write(body)
        await reply.end()

    # -- CONNECT -------------------------------------------------------------------------------

    async def _connect(self, req: Request, conn: ClientConnection, tx: Transaction) -> None:
        host, port = parse_authority(req.target)
        if not self.access.connect_allowed(port):
            tx.result = "TCP_DENIED"
            raise RequestError(403, f"CONNECT to port {port} is not allowed")
        if self._refuses_host(conn.client_ip, host):
            tx.result = "TCP_DENIED"
            raise RequestError(403, f"{host} is this host: not reachable from yours")
        tx.result = "TCP_TUNNEL"
        tx.hierarchy = Hierarchy.HIER_DIRECT
        traffic = self._traffic
        traffic.tunnels_open += 1
        try:
            if self.bumper is None:
                stats = await open_tunnel(host, port, conn, self._pool)
            else:
                spliced = await self.bumper.tunnel(host, port, conn)
                if spliced is None:  # bumped: its requests are logged as they come
                    tx.result, tx.hierarchy, tx.status = "NONE", Hierarchy.HIER_NONE, 200
                    return
                stats = spliced
        finally:
            traffic.tunnels_open -= 1
        traffic.tunnel_bytes += stats.to_client + stats.to_server
        tx.status = 200
        tx.peer = stats.peer
        tx.bytes_sent = stats.to_client
        conn.must_close = True

    # -- GET and HEAD through the cache --------------------------------------------------------

    async def _lookup(self, key: str) -> StoredObject | VaryMarker | None:
        found = self._memory.get(key)
        return found if found is not None else await self._store.get(key)

    async def _cached(
        self,
        req: Request,
        target: Target,
        conn: ClientConnection,
        tx: Transaction,
        reply: Reply,
        retried: bool = False,
    ) -> None:
        if req.started_fetch is not None:
            # (begun by the miss fast path: a plain GET, revalidating what it found or not)
            started, req.started_fetch = req.started_fetch, None
            fwd = "stale" if started.revalidating else "uri-miss"
            await self._serve_flight(req, target, started, False, fwd, tx, reply, conn, retried)
            return
        bypassed = bypass(target.path, self._config.cache.cache_query_urls)
        if bypassed is not None:
            await self._forward(req, target, conn, tx, reply, bypassed.result, fwd=bypassed.fwd)
            return
        url = target.url
        key = url
        found = await self._lookup(url)
        marker: VaryMarker | None = None
        if isinstance(found, VaryMarker):
            marker = found
            key = variant_key(url, marker, vary_key(marker.names, req.headers))
            found = await self._lookup(key)
            if isinstance(found, VaryMarker):
                found = None
        varies = marker is not None
        held = Held(None, varies=varies) if found is None else Held(found.head, found.tier, varies)
        # A request that came round through our peers must not join our own fetch of the
        # URL: that fetch waits on the very peer that sent it back.
        looped = not self._router.direct_only and forwarding.is_loop(req.headers, self.name)
        asked = Asked(req.method, req.headers, req.body is not None, looped, _plain(req))
        decision = lookup(asked, held, time.time(), self.heuristics.for_url(url))
        match decision:
            case FromCache(age=age, ttl=ttl, result=result, prepare=prepare):
                assert found is not None
                tx.result = result
                if prepare:
                    now = time.time()
                    self._hot.add(req.target.encode("latin-1"), key, found, age, ttl, now)
                await self._serve_stored(req, found, age, ttl, reply, "hit", key=key)
            case ServeStale(age=age, ttl=ttl, result=result):
                assert found is not None
                self._refresh_behind(req, target, key, found, conn.client_ip)
                tx.result = result
                await self._serve_stored(req, found, age, ttl, reply, "hit", key=key)
            case Refuse(status=status, reason=reason, result=result):
                _close_body(found)
                tx.result = result
                raise RequestError(status, reason, close=False)
            case Forward(result=result, fwd=why, describe=describe):
                _close_body(found)
                if found is None and not varies and not looped and _ranged_get(req):
                    await self._from_parts(req, target, key, conn, tx, reply, result)
                    return
                described = (key, found.head) if describe and found is not None else None
                await self._forward(req, target, conn, tx, reply, result, described, why)
            case Revalidate(fwd=fwd) | Fetch(fwd=fwd):
                stored = found if isinstance(decision, Revalidate) else None
                if found is not None and stored is None:
                    _close_body(found)
                alternatives: Alternatives = ()
                if isinstance(decision, Fetch) and decision.alternatives and marker is not None:
                    # The origin may say that one of the variants stored already would do.
                    tags = self._fetcher.variant_tags
                    alternatives = tags.candidates(url, marker.generation)
                relay_to = interim_relay(conn, req.version, self.fast.via)
                try:
                    flight, reader, joined = await self._fetcher.join_or_start(
                        req, target, key, stored, conn.client_ip, relay_to, alternatives
                    )
                finally:
                    _close_body(stored)
                started = StartedFetch(flight, reader, stored is not None)
                await self._serve_flight(
                    req, target, started, joined, fwd, tx, reply, conn, retried
                )
            case _:
                assert_never(decision)

    async def _serve_flight(
        self,
        req: Request,
        target: Target,
        started: StartedFetch,
        joined: bool,
        fwd: str,
        tx: Transaction,
        reply: Reply,
        conn: ClientConnection,
        retried: bool,
    ) -> None:
        """Answer from a flight this request started or joined; ``fwd`` is why it went
        forward (for Cache-Status)."""
        flight, reader, revalidating = started
        key = flight.key
        try:
            failure: UpstreamError | None = None
            head: FlightHead | None = None
            try:
                head = await flight.head
            except UpstreamError as error:
                if isinstance(error, FlightRetry) and not retried:
                    reader.close()
                    await self._cached(req, target, conn, tx, reply, retried=True)
                    return
                failure = error
            # (a refusal, or a certificate refused: no stale answer)
            tried = failure is not None and not failure.stale_allowed
            while True:
                relayed = relay(
                    head,
                    req.headers,
                    revalidating=revalidating,
                    joined=joined,
                    fwd=fwd,
                    tried_stale=tried,
                    now=time.time(),
                )
                if not isinstance(relayed, TryStale):
                    break
                if await self._serve_stale(req, key, tx, reply, relayed.fwd_status):
                    return
                tried = True
            match relayed:
                case GiveUp():
                    assert failure is not None
                    raise failure
                case Refetch():
                    reader.close()
                    await self._forward(req, target, conn, tx, reply, "TCP_MISS")
                case ServeRefreshed(result=result):
                    assert head is not None
                    reader.close()
                    tx.hierarchy = head.hop
                    tx.peer = head.peer_ip
                    tx.result = result
                    key = head.refreshed_key or key
                    found = await self._lookup(key)
                    if not isinstance(found, StoredObject):
                        # Evicted between the 304 and now: fetch it whole.
                        await self._forward(req, target, conn, tx, reply, "TCP_SWAPFAIL_MISS")
                        return
                    heuristic = self.heuristics.for_url(target.url)
                    reuse = evaluate(found.head, NO_DIRECTIVES, time.time(), heuristic)
                    await self._serve_stored(
                        req, found, reuse.age, reuse.ttl, reply, fwd, 304, key=key
                    )
                case Relay(result=result):
                    assert head is not None
                    tx.hierarchy = head.hop
                    tx.peer = head.peer_ip
                    tx.result = result
                    await self._relay(head, reader, joined, fwd, key, reply)
                case _:
                    assert_never(relayed)
        finally:
            reader.close()

    async def _relay(
        self,
        head: FlightHead,
        reader: FlightReader,
        joined: bool,
        fwd: str,
        key: str,
        reply: Reply,
    ) -> None:
        """Send the fetched response on as it streams."""
        headers = head.headers.copy()
        forwarding.add_via(headers, "1.1", self.name)
        headers.add(  # after any member of caches nearer the origin (RFC 9211 2)
            "Cache-Status",
            cache_status(
                self.name,
                hit=False,
                fwd=fwd,
                fwd_status=head.status,
                stored=head.stored and not joined,
                collapsed=joined,
                key=self.fast.key_for(key),
            ),
        )
        whole = reader.read_whole(_COALESCE)
        reply.start(head.status, head.reason, headers, content_length(head.headers), whole or b"")
        if whole is None:
            while chunk := await reader.read():
                await reply.write(chunk)
        await reply.end()

    def _refresh_behind(
        self, req: Request, target: Target, key: str, stale: StoredObject, client_ip: str
    ) -> None:
        """Revalidate ``stale`` in the background, once: not again while a refresh or any
        other fetch of it runs (RFC 5861 3)."""
        if key in self._refreshing or self._fetcher.flying(key):
            return
        self._refreshing.add(key)
        self._tasks.spawn(self._refresh(req, target, key, stale, client_ip), f"refresh {key}")

    async def _refresh(
        self, req: Request, target: Target, key: str, stale: StoredObject, client_ip: str
    ) -> None:
        # The object's own revalidation, whatever this client asked: without its Range and
        # preconditions, whose answers (206, 412...) are for it alone.
        headers = req.headers.copy()
        headers.remove("Range", *conditional.CONDITIONAL_FIELDS)
        own = Request("GET", req.target, req.version, headers, True, req.started)
        try:
            # Only the head of ``stale`` is read (for its validators); the fetch stores what
            # comes back, as it would for a client.
            _, reader, _ = await self._fetcher.join_or_start(own, target, key, stale, client_ip)
            reader.close()
        except UpstreamError as e:
            log.info("background revalidation of %s failed: %s", key, e)
        finally:
            self._refreshing.discard(key)

    async def _serve_stale(
        self, req: Request, key: str, tx: Transaction, reply: Reply, fwd_status: int | None
    ) -> bool:
        """Serve the stored response for ``key`` after its validation failed (the origin
        answered ``fwd_status`` >= 500, or could not be reached: None), if ``serve_stale``
        allows; False if not, and the failure is the answer."""
        found = await self._lookup(key)
        if not isinstance(found, StoredObject):
            return False
        heuristic = self.heuristics.for_url(found.head.url)
        reuse = evaluate(found.head, request_directives(req.headers), time.time(), heuristic)
        if not serve_stale(reuse, fwd_status, self._config.cache.max_stale):
            _close_body(found)
            return False
        tx.result = "TCP_REFRESH_FAIL_OLD"
        await self._serve_stored(
            req, found, reuse.age, reuse.ttl, reply, "stale", fwd_status, key=key
        )
        return True

    async def _serve_stored(
        self,
        req: Request,
        obj: StoredObject,
        age: float,
        ttl: float,
        reply: Reply,
        detail: str,
        fwd_status: int | None = None,
        *,
        key: str,
    ) -> None:
        head = obj.head
        stored_headers = Headers(head.headers)
        pieces: list[bytes | FileBody] = [obj.body]
        if conditional.has_conditionals(req.headers) and conditional.not_modified(
            req.headers, stored_headers
        ):
            headers = conditional.not_modified_headers(stored_headers)
            status, reason, length = 304, "Not Modified", None
            pieces = []
        else:
            headers = stored_headers
            status, reason, length = head.status, head.reason, head.body_length
            if req.method == "GET" and status == 200 and "Range" in req.headers:
                ranged = _ranged(req.headers, stored_headers, obj.body, head.body_length)
                if ranged is not None:
                    status, reason, headers, length, pieces = ranged
        self._stored_fields(headers, key, detail, age, ttl, fwd_status)
        try:
            await _send_pieces(req, reply, status, reason, headers, length, pieces)
        finally:
            _close_body(obj)

    def _stored_fields(
        self,
        headers: Headers,
        key: str,
        detail: str,
        age: float,
        ttl: float,
        fwd_status: int | None,
    ) -> None:
        """Add what a stored response is sent with: Age, Via, our Cache-Status (``detail``:
        ``hit``, or why it went forward before it was served)."""
        named = self.fast.key_for(key)
        if detail == "hit":
            value = cache_status(self.name, hit=True, ttl=ttl, key=named)
        else:
            value = cache_status(
                self.name, hit=False, fwd=detail, fwd_status=fwd_status, ttl=ttl, key=named
            )
        from_store(headers, age, value, self.name)

    # -- partial content (RFC 9111 3.3-3.4) ------------------------------------------------------

    async def _from_parts(
        self,
        req: Request,
        target: Target,
        key: str,
        conn: ClientConnection,
        tx: Transaction,
        reply: Reply,
        result: str,
    ) -> None:
        """A GET with Range, no whole object held: answered from the parts held if they
        cover it (after the origin confirms them, if their index is stale), else forwarded
        as asked, and the 206 it brings kept as a part."""
        held = await self.partials.find(key)
        planned = None if held is None else self._plan_parts(req, held)
        if held is not None and planned is not None and not planned.validate:
            if await self._serve_parts(req, key, held, planned, tx, reply, "TCP_HIT", "hit"):
                return
            held = planned = None
        fwd = "uri-miss" if held is None else "stale" if planned is not None else "partial"
        validate = held if planned is not None else None
        parts = PartsAsked(key, validate)
        await self._forward(req, target, conn, tx, reply, result, fwd=fwd, parts=parts)

    def _plan_parts(
        self, req: Request, held: HeldParts, validated: bool = False
    ) -> FromParts | None:
        heuristic = self.heuristics.for_url(held.head.url)
        return partial.plan(
            req.headers,
            held.head,
            held.index,
            time.time(),
            heuristic,
            boundary=token_hex(12),
            validated=validated,
        )

    async def _serve_parts(
        self,
        req: Request,
        key: str,
        held: HeldParts,
        planned: FromParts,
        tx: Transaction,
        reply: Reply,
        result: str,
        detail: str,
        fwd_status: int | None = None,
    ) -> bool:
        """Send the 206 ``planned``; False, with nothing sent and the index dropped, if a
        part it needs is gone."""
        bodies: list[list[bytes | FileBody]] = []
        disk = False
        try:
            for pieces in planned.pieces:
                got = await self.partials.read(key, pieces)
                if got is None:
                    await self.partials.drop(key)
                    return False
                bodies.append(got.bodies)
                disk = disk or got.disk
            # (a hit: from memory only if every byte was)
            tx.result = hit_result("disk" if disk else "memory") if detail == "hit" else result
            answer = planned.answer
            headers = answer.response_headers(
                Headers(held.head.headers), if_range="If-Range" in req.headers
            )
            out: list[bytes | FileBody] = []
            if isinstance(answer, SinglePart):
                out = bodies[0]
            else:
                for part, part_bodies in zip(answer.parts, bodies, strict=True):
                    out += (part.head, *part_bodies)
                out.append(answer.closing)
            self._stored_fields(headers, key, detail, planned.age, planned.ttl, fwd_status)
            await _send_pieces(
                req, reply, 206, "Partial Content", headers, answer.content_length, out
            )
        finally:
            for read in bodies:
                close_bodies(read)
        return True

    async def _validated_parts(
        self,
        req: Request,
        target: Target,
        conn: ClientConnection,
        tx: Transaction,
        reply: Reply,
        parts: PartsAsked,
        not_modified: Headers,
        times: tuple[float, float],
    ) -> None:
        """The origin confirmed the parts held (a 304): freshen their index and answer from
        them; if that is no longer possible, forward the request as asked."""
        assert parts.validate is not None
        held = await self.partials.freshen(parts.key, parts.validate, not_modified, times)
        planned = self._plan_parts(req, held, validated=True)
        if planned is not None:
            result = "TCP_REFRESH_UNMODIFIED"
            if await self._serve_parts(
                req, parts.key, held, planned, tx, reply, result, "stale", 304
            ):
                return
        await self._forward(
            req, target, conn, tx, reply, "TCP_SWAPFAIL_MISS", parts=PartsAsked(parts.key, None)
        )

    def _open_part(
        self, parts: PartsAsked, req: Request, status: int, headers: Headers
    ) -> tuple[PartWriter, StoreDecision] | None:
        """A writer for the part a response carries, if it is one to keep."""
        got = partial.received(status, headers)
        if got is None:
            return None
        cc = parse_cache_control(headers.get_all("Cache-Control"))
        decision = storable(
            "GET", req.headers, request_directives(req.headers), status, headers, cc, part=True
        )
        if not decision.ok:
            return None
        pending = self.partials.open_part(parts.key, got)
        return None if pending is None else (pending, decision)

    # -- everything else: forwarded as it comes --------------------------------------------------

    async def _forward(
        self,
        req: Request,
        target: Target,
        conn: ClientConnection,
        tx: Transaction,
        reply: Reply,
        result: str,
        described: tuple[str, StoredHead] | None = None,
        fwd: str | None = None,
        parts: PartsAsked | None = None,
    ) -> None:
        """Pass ``req`` on and its response back. ``described``: the stored GET response (and
        its key) that a HEAD request could have been answered with, which the response then
        freshens or invalidates (RFC 9111 4.3.5). ``fwd``: why it went forward, for
        Cache-Status (by default ``method``, or ``uri-miss`` for GET and HEAD). ``parts``: a
        range request whose 206 is kept as a part, sent to validate the parts held if it
        names an index to validate."""
        tx.result = result
        sent_continue = False
        expect = (req.headers.get("Expect") or "").lower()
        # (An HTTP/1.0 request's expectation is ignored, and it gets no 1xx: RFC 9110 10.1.1.)
        if req.body is not None and req.version == "1.1" and "100-continue" in expect:
            conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            sent_continue = True
        headers = upstream_headers(req, target, conn.client_ip, self.name, self._config)
        validate = parts.validate if parts is not None else None
        if validate is not None:
            headers.add("If-None-Match", validate.index.etag)
        relay = interim_relay(conn, req.version, self.fast.via, sent_continue=sent_continue)

        def build(hop: Hop) -> OutgoingRequest:
            fields = headers
            if hop.only_if_cached:
                fields = headers.copy()
                fields.add("Cache-Control", "only-if-cached")
            return OutgoingRequest(
                req.method,
                target.host,
                target.port,
                target.tls,
                forwarding.request_head(req.method, request_target(target, hop), fields),
                conn.client_ip,
                body=aiter(req.body) if req.body is not None else None,
                chunked=req.chunked,
                interim=relay,
            )

        route = await self._router.route(req, target)
        timeout = self._config.upstream.read_timeout
        exchange, hop, request_time = await self._router.send(
            route, build, timeout, retry=req.body is None
        )
        tx.hierarchy = hop.code
        tx.peer = exchange.peer_ip
        try:
            head = exchange.head
            response_time = time.time()
            times = (request_time, response_time)
            response_headers = forwarding.end_to_end(head.headers)
            forwarding.ensure_date(response_headers, response_time)
            changes = after_forward(
                req.method,
                target.url,
                head.status,
                response_headers,
                described[1] if described is not None else None,
                times,
            )
            for url in changes.invalidated:
                await self._store.delete(url)
                await self.partials.drop(url)
                if self.on_purged is not None:
                    self.on_purged(url)  # (as Squid's CLR on invalidation)
            if described is not None:
                if changes.freshened is not None:
                    await self._store.update_head(described[0], changes.freshened)
                elif changes.drop_described:
                    await self._store.delete(described[0])
            # (a 304 to the validation of parts held: answered from them once it is let go)
            confirmed = validate is not None and head.status == 304
            if not confirmed:
                await self._relay_forwarded(
                    req, target, tx, reply, exchange, response_headers, times, fwd, parts
                )
        except BaseException:
            exchange.abort()
            raise
        exchange.release()
        if confirmed:
            assert parts is not None
            await self._validated_parts(
                req, target, conn, tx, reply, parts, response_headers, times
            )

    async def _relay_forwarded(
        self,
        req: Request,
        target: Target,
        tx: Transaction,
        reply: Reply,
        exchange: Exchange,
        response_headers: Headers,
        times: tuple[float, float],
        fwd: str | None,
        parts: PartsAsked | None,
    ) -> None:
        """Relay a forwarded request's response (``response_headers``: its end-to-end
        fields), keeping it as a part of partial content if ``parts`` asks and it is one."""
        head = exchange.head
        validate = parts.validate if parts is not None else None
        kept: tuple[PartWriter, StoreDecision] | None = None
        try:
            if validate is not None:
                tx.result = "TCP_REFRESH_MODIFIED"
            if parts is not None:
                kept = self._open_part(parts, req, head.status, response_headers)
            stored_fields = response_headers.copy() if kept is not None else response_headers
            forwarding.add_via(response_headers, "1.1", self.name)
            cacheable = req.method in ("GET", "HEAD")
            if fwd is None:
                fwd = "uri-miss" if cacheable else "method"
            named = self.fast.key_for(target.url) if cacheable else None
            value = cache_status(
                self.name,
                hit=False,
                fwd=fwd,
                fwd_status=head.status,
                stored=kept is not None,
                key=named,
            )
            response_headers.add("Cache-Status", value)
            reply.start(head.status, head.reason, response_headers, content_length(head.headers))
            held_back = b""
            while chunk := await exchange.read():
                if kept is not None:
                    # Each chunk goes out after the next one came: the last waits until the
                    # part is kept, so a client with the whole answer finds the part held.
                    await kept[0].writer.write(chunk)
                    chunk, held_back = held_back, chunk
                await reply.write(chunk)
            if kept is not None:
                assert parts is not None
                pending, decision = kept
                whole = await self.partials.keep(
                    parts.key, target.url, pending, stored_fields, decision, times
                )
                if whole:
                    assembly = self.partials.assemble(parts.key)
                    self._tasks.spawn(assembly, f"assemble {parts.key}")
                await reply.write(held_back)
            await reply.end()
        except BaseException:
            if kept is not None:
                await kept[0].writer.abort()
            raise


def _write_entry(conn: ClientConnection, answer: bytes, entry: HotEntry) -> None:
    """A prepared hit's head and body: the body from its page copy if it has one."""
    if entry.pages is None:
        conn.write_response(answer, entry.body)
    else:
        conn.write_sent(answer, entry.body, entry.pages.fd, 0)


def _plain(req: Request) -> bool:
    """Whether the fast path would have taken this request (so it may take the next one)."""
    return req.method == "GET" and req.body is None and not req.slow


def _ranged_get(req: Request) -> bool:
    """A GET with Range and no body: one partial content may answer."""
    return req.method == "GET" and req.body is None and "Range" in req.headers


async def _send_pieces(
    req: Request,
    reply: Reply,
    status: int,
    reason: str,
    headers: Headers,
    length: int | None,
    pieces: list[bytes | FileBody],
) -> None:
    """Send a stored response's head and body pieces (bytes, or ranges of files on disk)."""
    if req.method == "HEAD" or not pieces:
        reply.start(status, reason, headers, length)
    elif len(pieces) == 1 and isinstance(pieces[0], bytes) and len(pieces[0]) < _COALESCE:
        reply.start(status, reason, headers, length, pieces[0])
    else:
        reply.start(status, reason, headers, length)
        for piece in pieces:
            if isinstance(piece, bytes):
                await reply.write(piece)
            else:
                await reply.send_file(piece)
    await reply.end()


def _ranged(
    request: Headers, stored: Headers, body: bytes | FileBody, length: int
) -> tuple[int, str, Headers, int, list[bytes | FileBody]] | None:
    """A Range request's answer from a complete stored 200 (RFC 9110 14): status, reason,
    fields, length and the pieces of its body; None to send the whole response."""
    answer = answer_range(
        request.get("Range"), request.get("If-Range"), stored, length, boundary=token_hex(12)
    )
    if isinstance(answer, IgnoreRange):
        return None
    if isinstance(answer, Unsatisfiable):
        return 416, "Range Not Satisfiable", Headers(answer.headers), 0, []
    headers = answer.response_headers(stored, if_range="If-Range" in request)
    if isinstance(answer, SinglePart):
        piece = _cut(body, answer.range.first, answer.range.last)
        return (
            206,
            "Partial Content",
            headers,
            answer.content_length,
            [piece],
        )
    pieces: list[bytes | FileBody] = []
    for part in answer.parts:
        pieces += (part.head, _cut(body, part.first, part.last))
    pieces.append(answer.closing)
    return 206, "Partial Content", headers, answer.content_length, pieces


def _cut(body: bytes | FileBody, first: int, last: int) -> bytes | FileBody:
    if isinstance(body, bytes):
        return body[first : last + 1]
    return FileBody(body.file, body.offset + first, last - first + 1)


def _close_body(obj: object) -> None:
    if isinstance(obj, StoredObject) and not isinstance(obj.body, bytes):
        obj.body.file.close()


__all__ = ["Proxy"]
