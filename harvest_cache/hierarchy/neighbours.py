"""The driver of peer selection: ICP queries out, replies in, one route per request.

It owns each peer's health and the queries in flight. Queries leave from the cache's ICP
socket (the one that answers other caches), so peers reply to the port they know us by;
replies are matched to their round by request number, and taken only from the address of
the peer they were sent to: a reply from anywhere else is ignored.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from typing import Protocol

from harvest_cache.config import HierarchyConfig
from harvest_cache.hierarchy.carp import Array
from harvest_cache.hierarchy.digests import Digests
from harvest_cache.hierarchy.health import PeerHealth
from harvest_cache.hierarchy.htcp import Message as HtcpMessage
from harvest_cache.hierarchy.htcp import Op, Specifier
from harvest_cache.hierarchy.icp import IcpMessage, Opcode, encode, query
from harvest_cache.hierarchy.peers import Peer
from harvest_cache.hierarchy.route import Facts, Hop, Policy, Route, Selection
from harvest_cache.stats import ArrayMemberStats, PeerStats
from harvest_cache.upstream.pool import Resolver
from harvest_common.errors import DNSFailure

log = logging.getLogger("harvest_cache")

Address = tuple[str, int]


class Sender(Protocol):
    """Where queries go out: the ICP endpoint."""

    def send(self, data: bytes, addr: Address) -> None: ...


class HtcpSender(Protocol):
    """Where HTCP queries and CLRs go out: the HTCP endpoint."""

    def query(self, trans_id: int, specifier: Specifier, to: Address) -> None: ...

    def clear(self, specifier: Specifier, to: Address) -> None: ...


@dataclass(slots=True)
class _Round:
    selection: Selection
    sent_at: float
    addresses: dict[Address, Peer]
    done: asyncio.Future[Route]
    timer: asyncio.TimerHandle | None = None
    replied: set[str] = field(default_factory=set)


class Neighbours:
    """Routes requests through the configured peers. ``start`` resolves their addresses;
    ``route`` chooses; ``reply`` takes the ICP replies the endpoint receives."""

    def __init__(self, config: HierarchyConfig) -> None:
        self.peers = config.peers
        self.sibling_names = frozenset(p.name for p in config.peers if not p.parent)
        self.htcp_peers = tuple(p for p in config.peers if p.htcp)
        members = [p for p in config.peers if p.carp]
        self.array_names = frozenset(p.name for p in members if p.name != config.array_name)
        array = Array([(p.name, p.weight, p.carp_key) for p in members]) if members else None
        self.array = array
        self.array_homes: dict[str, int] = {}  # requests routed to each member as their home
        self.policy = Policy(
            config.peers,
            config.always_direct,
            config.never_direct,
            config.icp_timeout_min,
            config.icp_timeout_max,
            array,
            config.array_name,
        )
        self.health = {
            p.name: PeerHealth(config.dead_peer_timeout, config.peer_retry) for p in config.peers
        }
        self._sender: Sender | None = None
        self._htcp: HtcpSender | None = None
        self.digests: Digests | None = None
        self._query_addresses: dict[str, Address] = {}
        self._rounds: dict[int, _Round] = {}
        self._numbers = itertools.count(1)
        self._loop = asyncio.get_running_loop()
        self.unexpected_replies = 0

    async def start(
        self,
        resolver: Resolver,
        sender: Sender | None,
        digests: Digests | None,
        htcp: HtcpSender | None = None,
    ) -> None:
        """Resolve the queried peers' ICP (or HTCP) addresses (a reply must come from one of
        them), and those of the peers our CLRs go to."""
        self._sender = sender
        self._htcp = htcp
        self.digests = digests
        for peer in self.peers:
            if not (peer.queried or peer.htcp):
                continue
            try:
                ip = (await resolver.resolve(peer.host))[0]
            except (DNSFailure, IndexError):
                log.warning("peer %s: cannot resolve %s; not queried", peer.name, peer.host)
                self.health[peer.name].connect_failed(self._loop.time())
                continue
            self._query_addresses[peer.name] = (ip, peer.icp_port)

    async def route(self, facts: Facts) -> Route:
        """The hops for a request, after an ICP round if one is called for."""
        now = self._loop.time()
        held = self.digests.lookup(facts.url) if self.digests is not None else None
        selection = Selection(facts, self.policy, self.health, now, held)
        addresses = {
            self._query_addresses[p.name]: p
            for p in selection.queries
            if p.name in self._query_addresses
        }
        if (self._sender is not None or self._htcp is not None) and addresses:
            done = self._query(selection, facts, addresses, now)
            route = await done if selection.route is None else selection.route
        else:
            # Decided already (the queries, if any, only probe dead peers), or none to ask.
            route = selection.route if selection.route is not None else selection.unasked()
        home = selection.array_home
        if home is not None:
            self.array_homes[home] = self.array_homes.get(home, 0) + 1
        return route

    def _query(
        self, selection: Selection, facts: Facts, addresses: dict[Address, Peer], now: float
    ) -> asyncio.Future[Route]:
        """Send the round's queries (ICP, or HTCP TST with the request head to peers marked
        so); the future is set when the route is decided."""
        number = next(self._numbers) & 0xFFFF_FFFF or next(self._numbers)
        datagram = encode(query(number, facts.url, src_rtt=True))
        specifier = Specifier(facts.method, facts.url, "HTTP/1.1", facts.headers)
        for addr, peer in addresses.items():
            if not peer.htcp:
                if self._sender is not None:
                    self._sender.send(datagram, addr)
            elif self._htcp is not None:
                self._htcp.query(number, specifier, addr)
            self.health[peer.name].queried(now)
        done: asyncio.Future[Route] = self._loop.create_future()
        entry = _Round(selection, now, addresses, done)
        self._rounds[number] = entry
        # The round outlives its decision until the deadline, so that late replies still
        # count as signs of life.
        entry.timer = self._loop.call_at(selection.deadline, self._expire, number)
        return done

    def reply(self, message: IcpMessage, addr: Address) -> bool:
        """Take a reply to one of our queries; False if it is none (not from the peer asked,
        or for no round of ours), for the endpoint to count as dropped."""
        src_rtt = message.src_rtt
        rtt = src_rtt[1] if src_rtt else None
        return self._take(message.request_number, message.opcode, rtt, addr)

    def _take(self, number: int, opcode: Opcode, src_rtt: int | None, addr: Address) -> bool:
        entry = self._rounds.get(number)
        peer = entry.addresses.get(addr) if entry is not None else None
        if entry is None or peer is None or peer.name in entry.replied:
            self.unexpected_replies += 1  # (a duplicate must not count as a second answer)
            return False
        entry.replied.add(peer.name)
        now = self._loop.time()
        hit = opcode in (Opcode.HIT, Opcode.HIT_OBJ)
        self.health[peer.name].replied(now - entry.sent_at, hit)
        route = entry.selection.reply(peer, opcode, src_rtt, now)
        if route is not None and not entry.done.done():
            entry.done.set_result(route)
        return True

    def htcp_reply(self, message: HtcpMessage, addr: Address) -> bool:
        """Take an HTCP answer to one of our TSTs (a hit, a miss, or MO=1: the peer would
        not answer, taken as a miss); False if it is none, for the endpoint to count."""
        if message.op is not Op.TST:
            return False
        opcode = Opcode.HIT if message.hit else Opcode.MISS
        return self._take(message.trans_id, opcode, None, addr)

    def clear_peers(self, url: str) -> None:
        """Tell the peers marked ``htcp`` to forget ``url`` (a CLR each, no answer asked)."""
        if self._htcp is None:
            return
        specifier = Specifier("GET", url, "HTTP/1.1", ())
        for peer in self.htcp_peers:
            addr = self._query_addresses.get(peer.name)
            if addr is not None:
                self._htcp.clear(specifier, addr)

    def _expire(self, number: int) -> None:
        entry = self._rounds.pop(number, None)
        if entry is None:
            return
        for peer in entry.selection.unanswered:
            self.health[peer.name].timed_out()
        if not entry.done.done():
            entry.done.set_result(entry.selection.expire(self._loop.time()))

    def answered(self, peer: Peer, seconds: float) -> None:
        """A request sent to ``peer`` had its answer's head ``seconds`` later."""
        self.health[peer.name].answered(seconds)

    def used(self, hop: Hop) -> None:
        if hop.peer is not None:
            self.health[hop.peer.name].used()

    def digest_answered(self, peer: Peer, hit: bool) -> None:
        """A request sent to ``peer`` on its digest's word was answered: from its cache
        (``hit``), or not (a false hit of the digest)."""
        self.health[peer.name].digest_answered(hit)

    def stats(self) -> dict[str, PeerStats]:
        """Each peer's numbers and state now, in configuration order."""
        now = self._loop.time()
        out = {}
        for peer in self.peers:
            h = self.health[peer.name]
            out[peer.name] = PeerStats(
                str(peer),
                h.state(now),
                h.rtt,
                h.queries,
                h.replies,
                h.hits,
                h.timeouts,
                h.uses,
                h.connect_failures,
                h.digest_hits,
                h.digest_false_hits,
                h.response_time,
            )
        return out

    def array_stats(self) -> dict[str, ArrayMemberStats] | None:
        """Each array member's configured share and the requests it was home for."""
        if self.array is None:
            return None
        total = sum(m.weight for m in self.array.members)
        return {
            m.name: ArrayMemberStats(m.weight / total, self.array_homes.get(m.name, 0))
            for m in self.array.members
        }

    def drop(self, name: str) -> None:
        """Send nothing more to the peer ``name`` until the configuration is reloaded."""
        self.health[name].drop()

    def connect_failed(self, peer: Peer) -> None:
        self.health[peer.name].connect_failed(self._loop.time())

    def close(self) -> None:
        for entry in self._rounds.values():
            if entry.timer is not None:
                entry.timer.cancel()
            if not entry.done.done():
                entry.done.set_result(entry.selection.expire(self._loop.time()))
        self._rounds.clear()
