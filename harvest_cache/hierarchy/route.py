"""Where a request goes: to the origin, or through which peer (RFC 2187; Squid's peer
selection, which caches in a hierarchy expect of each other).

Pure: a :class:`Selection` is made for one request and told of ICP replies and of the time;
it ends in a :class:`Route`, the hops to try in order. The order:

1. A forwarding loop (our name in Via) or an ``always_direct`` rule: the origin, directly.
2. A peer whose cache digest says it holds the URL (the one with the least ICP RTT, if
   several): CD_PARENT_HIT, CD_SIBLING_HIT, with no ICP round.
3. ICP: every peer that serves the request's domain and is queried gets a query at once
   (a digest saying "not held" may be out of date: unlike Squid, that peer is asked too,
   so an object it took since its digest was built is still found). The first HIT wins at
   once (SIBLING_HIT, PARENT_HIT). A parent's MISS is remembered: the closest by its
   reported RTT to the origin (CLOSEST_PARENT_MISS) if any reported one, else the first to
   answer (FIRST_PARENT_MISS), each divided by the parent's weight. Sibling misses count
   for nothing: siblings serve hits alone. A peer that answers MISS_NOFETCH, DENIED or ERR
   is left out of this request's route.
4. The URL's home in the cache array (CARP: peers marked ``carp``), then the members its URLs
   go to when the home is not up; in front mode, down to this cache itself, which fetches
   the URLs whose home it is. Members take no other requests and are never asked over ICP.
   Then other parents: round-robin ones (ROUNDROBIN_PARENT), a lone parent (SINGLE_PARENT),
   the first one up (FIRST_UP_PARENT), the default one (DEFAULT_PARENT), then any other up.
5. The origin (HIER_DIRECT), unless a ``never_direct`` rule matches: then with no parent
   left the request fails (NO_DIRECT_FAIL).

Only hierarchical requests (GET or HEAD, no reload, no credentials) go to peers unless
``never_direct`` leaves no choice. A parent bound to domains takes the requests for them
alone: if one does, other peers are not asked. Codes get the TIMEOUT_ prefix when the ICP
wait ran out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harvest_cache.hierarchy.carp import Array
from harvest_cache.hierarchy.health import PeerHealth
from harvest_cache.hierarchy.icp import Opcode
from harvest_cache.hierarchy.peers import DirectRule, Peer

MIN_TIMEOUT = 0.005
MAX_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class Facts:
    """What routing needs of a request. ``hierarchical``: GET or HEAD without a reload
    (no-cache) or credentials; ``loop``: our name is in its Via."""

    method: str
    url: str
    host: str
    hierarchical: bool
    loop: bool = False
    from_array: bool = False  # sent by a member of our array: its home is here
    # The request's end-to-end fields (for HTCP queries; empty when no peer is asked so).
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Hop:
    """One way to fetch: ``peer`` None is the origin. ``code`` is the hierarchy code for the
    access log if the fetch goes this way."""

    peer: Peer | None
    code: str

    @property
    def by_digest(self) -> bool:
        """Chosen because the peer's cache digest listed the URL."""
        return "CD_" in self.code

    @property
    def only_if_cached(self) -> bool:
        """A sibling is asked for hits alone (Cache-Control: only-if-cached)."""
        return self.peer is not None and not self.peer.parent


@dataclass(frozen=True, slots=True)
class Route:
    """Hops in order of preference (the next is tried if one fails); empty: none allowed."""

    hops: tuple[Hop, ...]

    @property
    def failure(self) -> str:
        return "NO_DIRECT_FAIL"


DIRECT = Hop(None, "HIER_DIRECT")


@dataclass(frozen=True, slots=True)
class Policy:
    """The configured hierarchy: peers in order, the direct rules, the ICP timeout bounds."""

    peers: tuple[Peer, ...] = ()
    always_direct: tuple[DirectRule, ...] = ()
    never_direct: tuple[DirectRule, ...] = ()
    min_timeout: float = MIN_TIMEOUT
    max_timeout: float = MAX_TIMEOUT
    array: Array | None = None  # the carp parents (with this cache, if it is a member)
    array_self: str = ""  # this cache's member name in ``array`` (empty: not a member)


class Selection:
    """The routing of one request. Send ``queries`` (if any); pass each reply to ``reply``
    and, once ``deadline`` passes, call ``expire``: each returns the route once it is
    decided. ``route`` may be set at once (then the queries only probe dead peers)."""

    def __init__(
        self,
        facts: Facts,
        policy: Policy,
        health: Mapping[str, PeerHealth],
        now: float,
        digests: Mapping[str, bool] | None = None,
    ) -> None:
        """``digests``: for each peer whose cache digest is at hand, whether it says the
        peer holds the URL."""
        self._facts = facts
        self._policy = policy
        self._health = health
        self._started = now
        self._hit: Peer | None = None
        self._digest_hit: Peer | None = None
        # Parents that answered MISS: (rank, arrival, peer), by reported RTT or by arrival.
        self._closest: list[tuple[float, int, Peer]] = []
        self._first: list[tuple[float, int, Peer]] = []
        self._refused: set[str] = set()  # answered MISS_NOFETCH, DENIED or ERR: not for this
        self.route: Route | None = None
        self.array_home: str | None = None  # the URL's home in the cache array, if chosen
        self.queries: tuple[Peer, ...] = ()
        self.deadline = now
        self._waiting: set[str] = set()
        direct_only = facts.loop or _any(policy.always_direct, facts)
        self._direct = direct_only or not _any(policy.never_direct, facts)
        if direct_only:
            self.route = Route((DIRECT,))
            return
        self._candidates = _serving(policy.peers, facts.host)
        digests = digests or {}
        if facts.hierarchical:
            up = [p for p in self._candidates if not health[p.name].down(now)]
            held = [p for p in up if digests.get(p.name)]
            if held:
                self._digest_hit = min(held, key=lambda p: _rtt_rank(health[p.name]))
                self.route = self._decide(timed_out=False)
                return
            self.queries = tuple(p for p in up if p.queried)
        self._waiting = {p.name for p in self.queries if not health[p.name].dead(now)}
        if self.queries:
            self.deadline = now + _timeout(self.queries, health, policy)
        if not self._waiting:
            # Decided at once; queries to dead peers still go, to find out if they are back.
            self.route = self._decide(timed_out=False)

    def reply(self, peer: Peer, opcode: Opcode, src_rtt: int | None, now: float) -> Route | None:
        """A reply from ``peer`` (a queried one) with its RTT to the origin in ms, if given."""
        if peer not in self.queries:
            return self.route
        self._waiting.discard(peer.name)
        if self.route is not None:
            return self.route  # (a late reply: it only shows the peer is alive)
        if opcode in (Opcode.HIT, Opcode.HIT_OBJ):
            self._hit = peer
            self.route = self._decide(timed_out=False)
            return self.route
        if opcode in (Opcode.MISS_NOFETCH, Opcode.DENIED, Opcode.ERR):
            self._refused.add(peer.name)
        elif opcode is Opcode.MISS and peer.parent:
            arrival = len(self._closest) + len(self._first)
            if src_rtt:
                self._closest.append((src_rtt / 1000 / peer.weight, arrival, peer))
            elif not peer.closest_only:
                self._first.append(((now - self._started) / peer.weight, arrival, peer))
        if not self._waiting:
            self.route = self._decide(timed_out=False)
        return self.route

    def expire(self, now: float) -> Route:
        """The ICP wait is over: decide with the replies in."""
        if self.route is None:
            self.route = self._decide(timed_out=True)
        return self.route

    def unasked(self) -> Route:
        """Decide without the queries (they could not be sent): no wait ran out."""
        if self.route is None:
            self.route = self._decide(timed_out=False)
        return self.route

    @property
    def unanswered(self) -> tuple[Peer, ...]:
        """Queried peers that were waited for and have not answered."""
        return tuple(p for p in self.queries if p.name in self._waiting)

    def _decide(self, timed_out: bool) -> Route:
        hops: list[Hop] = []
        if self._digest_hit is not None:
            peer = self._digest_hit
            hops.append(Hop(peer, "CD_PARENT_HIT" if peer.parent else "CD_SIBLING_HIT"))
        if self._hit is not None:
            hit = self._hit
            hops.append(Hop(hit, "PARENT_HIT" if hit.parent else "SIBLING_HIT"))
        hops.extend(self._array_hops())
        if self._closest:  # an RTT to the origin says more than an order of arrival
            hops.append(Hop(min(self._closest)[2], "CLOSEST_PARENT_MISS"))
        elif self._first:
            hops.append(Hop(min(self._first)[2], "FIRST_PARENT_MISS"))
        if self._facts.hierarchical or not self._direct:
            hops.extend(self._parents(hops))
        if self._direct:
            hops.append(DIRECT)
        if timed_out:
            hops = [Hop(h.peer, f"TIMEOUT_{h.code}") for h in hops]
        return Route(tuple(hops))

    def _array_hops(self) -> list[Hop]:
        """The URL's home in the cache array, then where its URLs go when it is not up,
        down to this cache if it is a member (a URL whose home is here is fetched here)."""
        policy, facts = self._policy, self._facts
        array = policy.array
        if array is None or facts.from_array or not (facts.hierarchical or not self._direct):
            return []
        now = self._started
        by_name = {p.name: p for p in self._candidates if p.carp}

        def up(name: str) -> bool:
            if name == policy.array_self:
                return True
            peer = by_name.get(name)
            return peer is not None and not self._health[name].down(now)

        ranked = array.ranked(facts.url, up)
        if not ranked and not self._direct:
            # With nowhere else to go, members thought down are tried too.
            ranked = array.ranked(facts.url, lambda name: name in by_name)
        self.array_home = ranked[0].name if ranked else None
        hops = []
        for member in ranked:
            if member.name == policy.array_self:
                break
            hops.append(Hop(by_name[member.name], "CARP"))
        return hops

    def _parents(self, chosen: Sequence[Hop]) -> list[Hop]:
        """The parents to fall back on, in order, without those already ``chosen``."""
        now = self._started
        taken = {h.peer.name for h in chosen if h.peer is not None} | self._refused
        # (an array's members take the URLs the array gives them, and no others)
        parents = [p for p in self._candidates if p.parent and not p.carp]
        up = [p for p in parents if not self._health[p.name].down(now)]
        alive = [p for p in up if not self._health[p.name].dead(now)]
        out: list[Hop] = []

        def add(peer: Peer, code: str) -> None:
            if peer.name not in taken:
                taken.add(peer.name)
                out.append(Hop(peer, code))

        robin = [p for p in alive if p.round_robin]
        if robin:
            least_used = min(robin, key=lambda p: self._health[p.name].uses / p.weight)
            add(least_used, "ROUNDROBIN_PARENT")
        if len(parents) == 1 and alive:
            add(alive[0], "SINGLE_PARENT")
        for peer in alive:
            if not peer.default and not peer.round_robin and peer.name not in taken:
                add(peer, "FIRST_UP_PARENT")
                break
        for peer in alive:
            if peer.default:
                add(peer, "DEFAULT_PARENT")
        for peer in alive:
            add(peer, "ANY_OLD_PARENT")
        if not self._direct:
            # With nowhere else to go, even parents thought dead or down, or that would not
            # fetch, are tried.
            taken -= self._refused
            for peer in parents:
                add(peer, "ANY_OLD_PARENT")
        return out


def _rtt_rank(health: PeerHealth) -> float:
    return health.rtt if health.rtt is not None else float("inf")


def _any(rules: tuple[DirectRule, ...], facts: Facts) -> bool:
    return any(rule.matches(facts.method, facts.url, facts.host) for rule in rules)


def _serving(peers: tuple[Peer, ...], host: str) -> tuple[Peer, ...]:
    """The peers for ``host``: the parents bound to its domain alone, if there are any."""
    delegated = tuple(p for p in peers if p.parent and p.bound_to(host) and p.serves(host))
    if delegated:
        return delegated
    return tuple(p for p in peers if p.serves(host))


def _timeout(queried: tuple[Peer, ...], health: Mapping[str, PeerHealth], policy: Policy) -> float:
    """Twice the mean ICP RTT of the peers asked, within the configured bounds (the
    upper one while no RTT is known)."""
    rtts = [r for r in (health[p.name].rtt for p in queried) if r is not None]
    if not rtts:
        return policy.max_timeout
    return min(max(2 * sum(rtts) / len(rtts), policy.min_timeout), policy.max_timeout)
