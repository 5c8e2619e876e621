"""The cache's ICP socket (RFC 2186), on one UDP port: it answers other caches' queries and
carries ours, whose replies it hands to ``on_reply`` (the peer selection's driver).

Replies leave from the port the query came to, with its request number and URL echoed, as
Squid requires; a query asking for SRC_RTT gets the measured time to connect to the URL's
host, when there is one (RFC 2186 3; Squid ranks parents' misses by it). A datagram that is
not a well-formed ICP v2 message is dropped without a word (and counted): a peer must never
be able to stall or crash us with garbage. An object held in memory is answered at once; one
that may be on disk is looked up in the store's thread pool, and past ``MAX_PENDING`` such
lookups a query is answered MISS at once rather than queued.

The socket is read by the endpoint itself, from the loop's reader callback: all that is
queued (up to ``_BATCH``) is taken in one call, and the common query (no options, from a cache
that may ask, answered from the memory tier or the memo of earlier answers) is answered in
that loop with no call of its own. Through the loop's datagram transport each datagram paid
for two more calls, an address conversion each way and a context copy: about 6% of the rate
(see bench/README.md, ICP). A cache that keeps asking gets a socket of its own on the same
port, connected to it: the kernel hands it that cache's datagrams, and replies sent on it need
neither a route look-up nor an address conversion. A reply the socket cannot take now (its
buffer is full) is dropped and counted, as a datagram lost on the way would be: the querier's
timeout covers it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harvest_cache.errors import IcpError, RequestError
from harvest_cache.hierarchy.icp import (
    FLAG_SRC_RTT,
    MAX_MESSAGE,
    IcpMessage,
    Opcode,
    decode,
    encode,
    plain_query_url,
    plain_reply,
    reply,
)
from harvest_cache.hierarchy.responder import answer_opcode, hit_until
from harvest_cache.http.freshness import HeuristicRules
from harvest_cache.http.target import Target, canonical_url, parse_absolute
from harvest_cache.stats import IcpStats
from harvest_cache.store.interface import Found, ObjectStore, StoredObject
from harvest_common.tasks import TaskSet

log = logging.getLogger("harvest_cache")

MAX_PENDING = 256
Address = tuple[str, int]
_KNOWN = 65536  # URLs (and addresses) whose answers are remembered; all forgotten when full
_BATCH = 64  # datagrams taken at most each time the socket is readable (others wait their turn)
_CONNECT_AFTER = 256  # datagrams from a cache that may ask before it gets a socket of its own
_CONNECTED = 32  # sockets of their own, at most
_RECEIVE = MAX_MESSAGE + 1  # (a longer datagram is cut to this, and then fails its length check)
_HIT, _MISS, _MISS_NOFETCH = Opcode.HIT, Opcode.MISS, Opcode.MISS_NOFETCH


@dataclass(frozen=True, slots=True)
class _Known:
    """An answer given for ``url``: valid while the memory tier holds exactly ``found``
    (and, for a HIT, until ``until``)."""

    url: str
    found: Found | None
    hit: bool
    until: float


_NOTHING = _Known("", None, False, float("inf"))  # the answer for a URL nothing is held under


class IcpEndpoint:
    """``allowed(ip)``: may that cache query us; ``fetching()``: do we take misses now;
    ``on_reply(message, addr)``: take a reply to one of our queries (False: not ours).

    Counters for metrics and tests: ``answered`` by opcode name, ``dropped`` datagrams,
    ``unsent`` datagrams the socket refused.

    A cache that keeps asking (``_CONNECT_AFTER`` datagrams) gets a socket of its own,
    bound to the same port with SO_REUSEPORT and connected to it; at most ``_CONNECTED``
    caches do. Its datagrams, queries and replies alike, are then taken there, the same way."""

    def __init__(
        self,
        store: ObjectStore,
        heuristics: HeuristicRules,
        allowed: Callable[[str], bool],
        fetching: Callable[[], bool],
        tasks: TaskSet,
        on_reply: Callable[[IcpMessage, Address], bool] | None = None,
        origin_rtt: Callable[[str], float | None] = lambda host: None,
    ) -> None:
        self._store = store
        self._peek = store.memory_view.peek
        self._on_disk = store.memory_view.on_disk
        self._on_reply = on_reply
        self._origin_rtt = origin_rtt
        self._heuristics = heuristics
        self._allowed = allowed
        self._fetching = fetching
        self._tasks = tasks
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending = 0
        self._answers: dict[int, int] = {op: 0 for op in Opcode}  # by number: cheaper to count
        self.dropped = 0
        self.unsent = 0
        # Answers by the URL as queries spell it, and who may ask (both rebuilt on a reload).
        self._known: dict[bytes, _Known] = {}
        self._allowed_ips: dict[str, bool] = {}
        # Sockets of their own for the caches that keep asking (connected to them), and how
        # many datagrams the others have sent (those that may ask).
        self._own: dict[Address, socket.socket] = {}
        self._asked: dict[Address, int] = {}

    async def open(self, host: str, port: int, *, reuse_port: bool = False) -> None:
        """Bind the socket to ``host``:``port`` (0: any free port) and start answering.
        ``reuse_port``: the port is shared with other processes (workers)."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        if not reuse_port:
            # The socket takes SO_REUSEPORT (for the sockets of its own it gives busy
            # queriers), which would let it share a port held by another program quietly:
            # so first make sure the port is free.
            with socket.socket(family, kind, proto) as probe:
                probe.bind(address)
                address = probe.getsockname()  # (port 0: the one the kernel chose)
        sock = _bound(family, kind, proto, address)
        try:
            loop.add_reader(sock.fileno(), self._readable, None)
        except BaseException:
            sock.close()
            raise
        self._sock, self._loop = sock, loop

    @property
    def address(self) -> Address:
        """The address the socket is bound to."""
        if self._sock is None:
            raise RuntimeError("the ICP endpoint is not open")
        host, port = self._sock.getsockname()[:2]
        return host, port

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    @property
    def own_sockets(self) -> int:
        """Queriers answered on a socket of their own."""
        return len(self._own)

    @property
    def answered(self) -> dict[str, int]:
        """Replies sent, by opcode name."""
        return {Opcode(op).name: n for op, n in self._answers.items() if n}

    def stats(self) -> IcpStats:
        return IcpStats(self.answered, self.dropped, self.own_sockets, self.unsent)

    def _readable(self, own: Address | None) -> None:
        """Take what is queued on the shared socket (``own`` None) or on the socket of
        querier ``own``."""
        sock = self._sock if own is None else self._own.get(own)
        if sock is None:
            return
        recvfrom, sendto, recv, send = sock.recvfrom, sock.sendto, sock.recv, sock.send
        may_ask, known_get, peek = self._allowed_ips.get, self._known.get, self._peek
        now = time.time()
        miss = _MISS if self._fetching() else _MISS_NOFETCH
        hits = misses = 0  # (answered here; counted once the batch is done)
        counting = own is None and len(self._own) < _CONNECTED
        for _ in range(_BATCH):
            try:
                if own is None:
                    data, addr = recvfrom(_RECEIVE)
                else:
                    # (Connected: no address to convert, each way.)
                    data, addr = recv(_RECEIVE), own
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if sock.fileno() < 0:
                    break  # (closed by what a datagram of this batch led to)
                # (An ICMP error for an earlier reply, on systems that report them: the
                # querier went away. Nothing to do.)
                log.debug("ICP socket error: %s", exc)
                continue
            if counting and may_ask(addr[0]):
                self._count(addr)
            # The common case, taken straight from the bytes: a query with no options, from
            # a cache that may ask, whose URL's answer the memory tier (or the memo) gives.
            spelt = plain_query_url(data)
            if spelt is None or not may_ask(addr[0]):
                self._take(data, addr)
                continue
            known = known_get(spelt)
            # (A query is not a use of the object, so the memory tier is only peeked at: the
            # fetch that follows a HIT is one.)
            if (
                known is None
                or peek(known.url) is not known.found
                or (known.hit and now >= known.until)
            ):
                known = self._learn(spelt, now)
                if known is None:
                    self._take(data, addr)
                    continue
            if known.hit:
                opcode = _HIT
                hits += 1
            else:
                opcode = miss
                misses += 1
            answer = plain_reply(data, opcode)
            try:
                if own is None:
                    sendto(answer, addr)
                else:
                    send(answer)
            except OSError:
                self.unsent += 1
        self._answers[_HIT] += hits
        self._answers[miss] += misses

    def _count(self, addr: Address) -> None:
        """One more datagram from ``addr``, a cache that may ask, on the shared socket:
        past ``_CONNECT_AFTER`` it gets a socket of its own. A connected socket takes that
        cache's datagrams first (the kernel prefers the exact match), and sending on it needs
        no route look-up or address conversion: 5% less CPU a query for a bare echo, and 16%
        more queries answered a second here (bench/README.md, ICP)."""
        asked = self._asked.get(addr, 0) + 1
        if asked < _CONNECT_AFTER:
            if len(self._asked) >= _KNOWN:
                self._asked.clear()
            self._asked[addr] = asked
            return
        self._asked.pop(addr, None)
        shared = self._sock
        if shared is None or self._loop is None or addr in self._own:
            return
        try:
            own = _bound(shared.family, shared.type, shared.proto, shared.getsockname())
        except OSError as exc:
            log.debug("no ICP socket of its own for %s: %s", addr, exc)
            return
        try:
            own.connect(addr)
            self._loop.add_reader(own.fileno(), self._readable, addr)
        except OSError as exc:
            own.close()
            log.debug("no ICP socket of its own for %s: %s", addr, exc)
            return
        self._own[addr] = own

    def _learn(self, spelt: bytes, now: float) -> _Known | None:
        """The answer for the URL spelt so, from the memory tier (remembered if anything is
        held under it); None if only the full path can tell (a URL that must be parsed, or
        one that may be on disk)."""
        url = canonical_url(spelt)  # (None if there is a NUL or any control byte)
        if url is None:
            if spelt.find(b"\x00") >= 0:
                return None  # a NUL inside the URL: malformed
            try:
                url = parse_absolute(spelt.decode("latin-1")).url
            except RequestError:
                return None
        found = self._peek(url)
        if found is None:
            # (Not remembered: one-off misses would crowd out the rest; and where the disk
            # tier may hold it, looking is I/O, for the full path.)
            return None if self._on_disk(url) else _NOTHING
        obj = found if isinstance(found, StoredObject) else None
        hit, until = hit_until(obj, now, self._heuristics.for_url(url))
        known = _Known(url, found, hit is not None, until)
        if len(self._known) >= _KNOWN:
            self._known.clear()
        self._known[spelt] = known
        return known

    def _take(self, data: bytes, addr: Address) -> None:
        """Any datagram, the whole way: decoded, then answered, handed on or dropped."""
        try:
            message = decode(data)
        except IcpError:
            self.dropped += 1
            return
        if message.opcode is not Opcode.QUERY:
            if self._on_reply is None or not self._on_reply(message, addr):
                self.dropped += 1  # a reply to no query of ours, or from elsewhere
            return
        if not self._may_ask(addr[0]):
            self._send(message, addr, Opcode.DENIED)
            return
        try:
            target = parse_absolute(message.url)
        except RequestError:
            self._send(message, addr, Opcode.ERR)
            return
        found = self._peek(target.url)
        if found is None and self._pending < MAX_PENDING and self._on_disk(target.url):
            self._pending += 1
            self._tasks.spawn(self._answer_from_disk(message, addr, target), f"icp {target.url}")
            return
        self._answer(message, addr, target, found)

    def _may_ask(self, ip: str) -> bool:
        allowed = self._allowed_ips.get(ip)
        if allowed is None:
            if len(self._allowed_ips) >= _KNOWN:
                self._allowed_ips.clear()
            allowed = self._allowed_ips[ip] = self._allowed(ip)
        return allowed

    async def _answer_from_disk(self, message: IcpMessage, addr: Address, target: Target) -> None:
        try:
            found = await self._store.get(target.url)
            if isinstance(found, StoredObject) and not isinstance(found.body, bytes):
                found.body.file.close()  # only the head is needed
            self._answer(message, addr, target, found)
        finally:
            self._pending -= 1

    def _answer(self, message: IcpMessage, addr: Address, target: Target, found: object) -> None:
        opcode = answer_opcode(
            found if isinstance(found, StoredObject) else None,
            fetching=self._fetching(),
            now=time.time(),
            heuristic=self._heuristics.for_url(target.url),
        )
        rtt = None
        if message.options & FLAG_SRC_RTT and opcode in (Opcode.HIT, Opcode.MISS):
            seconds = self._origin_rtt(target.host)
            if seconds is not None:  # (0 would read as "not measured": 1 ms at least)
                rtt = (0, max(1, round(seconds * 1000)))
        self._send(message, addr, opcode, rtt)

    def _send(
        self,
        message: IcpMessage,
        addr: Address,
        opcode: Opcode,
        rtt: tuple[int, int] | None = None,
    ) -> None:
        self._answers[opcode] += 1
        self.send(encode(reply(message, opcode, rtt=rtt)), addr)

    def retarget(
        self,
        heuristics: HeuristicRules,
        on_reply: Callable[[IcpMessage, Address], bool] | None,
    ) -> None:
        """Use these freshness rules and this taker of replies from now on (a reload)."""
        self._heuristics = heuristics
        self._on_reply = on_reply
        self._known.clear()  # (the rules they were judged by changed)
        self._allowed_ips.clear()

    def send(self, data: bytes, addr: Address) -> None:
        """Send a datagram (an answer, or one of our queries) from the ICP port."""
        if self._sock is None:
            return
        try:
            self._sock.sendto(data, addr)
        except OSError:
            self.unsent += 1

    def close(self) -> None:
        socks = [self._sock, *self._own.values()]
        self._sock = None
        self._own.clear()
        for sock in socks:
            if sock is not None:
                if self._loop is not None and not self._loop.is_closed():
                    self._loop.remove_reader(sock.fileno())
                sock.close()


def _bound(family: int, kind: int, proto: int, address: tuple[Any, ...]) -> socket.socket:
    """A non-blocking UDP socket bound to ``address`` with SO_REUSEPORT."""
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setblocking(False)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock
