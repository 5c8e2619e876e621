"""The logical update topology: which members exchange updates directly.

Owns the computation flood-d's group master ran: from measured link costs, pick the edges that
updates are flooded along so that the graph is k-vertex-connected (with k = 2 no single member's
failure splits the group), every degree is within bounds (no member floods too many peers, none
too few), and total link cost plus weighted diameter (the slowest propagation path) is low.
Pure: no clock, no I/O; randomness only from ``random.Random(params.seed)`` and members are
handled in sorted order, so equal inputs give an equal topology on every member.

Design:

- Construction keeps two candidates and starts from the better: a greedy one (a cheap ring along
  a 2-opt tour, or a degree-capped minimum spanning tree when k = 1, then the cheapest edges that
  fill minimum degrees and break every separator of fewer than k members) and a Harary graph laid
  over the same tour, which is d-connected with every degree d (one d + 1 when d and n are odd)
  for d = the effective minimum degree >= k, so the degree bounds are met whenever they can be,
  even where the greedy gets stuck.
- Simulated annealing over edge additions, removals, rewirings and degree-preserving swaps then
  minimises ``total_cost + diameter_weight * diameter``. Connectivity and degree bounds are hard:
  a move never breaks them. Checking a move is cheap because adding edges cannot lower
  connectivity, and a k-connected graph minus edge uv is k-connected exactly when k vertex-disjoint
  u-v paths remain (a smaller separator would have to split u from v), so each removed edge costs
  one bounded max-flow, not a full connectivity computation. The diameter is computed with an
  early exit once it exceeds what the acceptance threshold (drawn before the work) allows.
- When the bounds cannot all hold, connectivity wins, then the minimum degree, then the maximum:
  with min and max degree equal and odd on an odd number of members, one member gets one link
  more; with max_degree 1 on three or more, the members still form a (cheap) tree. The reported
  ``connectivity`` is measured on the result, never assumed.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from replicator.errors import TopologyError

__all__ = [
    "Topology",
    "TopologyParams",
    "changed_enough",
    "compute",
    "link_cost",
    "vertex_connectivity",
]

_Adjacency = list[set[int]]
_Pair = tuple[int, int]

# Annealing temperature: starts at this fraction of the starting objective per edge (about what
# one move changes, diameter term included: with a heavy diameter weight the search must cross
# plateaus, e.g. a ring needs two chords before its diameter shrinks) and cools geometrically to
# _FINAL_COOLING of that, so the last steps are plain descent.
_START_TEMPERATURE = 0.3
_FINAL_COOLING = 1e-3


@dataclass(frozen=True, slots=True)
class TopologyParams:
    """What ``compute`` aims for; invalid combinations raise TopologyError at construction."""

    k: int = 2  # required vertex connectivity (capped at n - 1 for small groups)
    min_degree: int = 2  # lower bound on degree (at least k in effect; capped at n - 1)
    max_degree: int = 4  # upper bound on degree
    diameter_weight: float = 1.0  # weight of the weighted diameter in the objective
    iterations: int = 2000  # annealing steps (bounded work)
    seed: int = 0
    missing_cost: float = 10.0  # cost of a link nobody measured

    def __post_init__(self) -> None:
        if self.k < 1:
            raise TopologyError(f"k must be at least 1, got {self.k}")
        if self.max_degree < 1:
            raise TopologyError(f"max_degree must be at least 1, got {self.max_degree}")
        if self.max_degree < self.k:
            raise TopologyError(
                f"max_degree {self.max_degree} is below k {self.k}: "
                "a k-connected graph needs degree k"
            )
        if self.min_degree < 0 or self.min_degree > self.max_degree:
            raise TopologyError(
                f"min_degree must be within 0..max_degree ({self.max_degree}), "
                f"got {self.min_degree}"
            )
        if self.iterations < 0:
            raise TopologyError(f"iterations must not be negative, got {self.iterations}")
        _check_cost("diameter_weight", self.diameter_weight)
        _check_cost("missing_cost", self.missing_cost)


@dataclass(frozen=True, slots=True, repr=False)
class Topology:
    """An undirected update topology over ``members`` with its measured qualities."""

    members: tuple[str, ...]  # sorted
    edges: frozenset[tuple[str, str]]  # each as (a, b) with a < b
    costs: Mapping[tuple[str, str], float] = field(hash=False)  # keyed like edges
    total_cost: float
    diameter: float  # weighted: cost of the costliest shortest path
    hops: int  # unweighted diameter: flooding rounds to reach every member
    connectivity: int  # vertex connectivity of this graph, measured

    def __repr__(self) -> str:
        return (
            f"Topology({len(self.members)} members, {len(self.edges)} edges, "
            f"total_cost={self.total_cost:.6g}, diameter={self.diameter:.6g}, "
            f"hops={self.hops}, connectivity={self.connectivity})"
        )

    def neighbours(self, member: str) -> tuple[str, ...]:
        """The members ``member`` floods updates to, sorted."""
        if member not in self.members:
            raise TopologyError(f"{member!r} is not a member of this topology")
        found = {b if a == member else a for a, b in self.edges if member in (a, b)}
        return tuple(sorted(found))

    def to_json(self) -> dict[str, object]:
        """A JSON-ready form, edges sorted; ``from_json`` reads it back to an equal Topology."""
        return {
            "members": list(self.members),
            "edges": [{"a": a, "b": b, "cost": self.costs[a, b]} for a, b in sorted(self.edges)],
            "total_cost": self.total_cost,
            "diameter": self.diameter,
            "hops": self.hops,
            "connectivity": self.connectivity,
        }

    @classmethod
    def from_json(cls, data: object) -> Topology:
        """The topology another member sent. Totals, diameter, hops and connectivity are
        recomputed from the edges rather than trusted."""
        if not isinstance(data, Mapping):
            raise TopologyError("a topology must be a JSON object")
        members = data.get("members")
        edges = data.get("edges")
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise TopologyError("topology members must be a list of strings")
        if not isinstance(edges, list):
            raise TopologyError("topology edges must be a list")
        ordered = tuple(sorted(set(members)))
        index = {m: i for i, m in enumerate(ordered)}
        weighted: dict[_Pair, float] = {}
        for edge in edges:
            if not isinstance(edge, Mapping):
                raise TopologyError(f"a topology edge must be an object, got {edge!r}")
            a, b, cost = edge.get("a"), edge.get("b"), edge.get("cost")
            if not (isinstance(a, str) and a in index and isinstance(b, str) and b in index):
                raise TopologyError(f"edge {edge!r} is not between two members")
            if a == b:
                raise TopologyError(f"edge {edge!r} is a loop")
            if isinstance(cost, bool) or not isinstance(cost, int | float):
                raise TopologyError(f"edge {edge!r} has no numeric cost")
            _check_cost(f"cost of edge {a}-{b}", float(cost))
            i, j = sorted((index[a], index[b]))
            weighted[i, j] = float(cost)
        topology = _finish(ordered, weighted)
        if topology.diameter == math.inf:
            raise TopologyError("topology does not connect all of its members")
        return topology


def link_cost(costs: Mapping[tuple[str, str], float], a: str, b: str, missing: float) -> float:
    """The symmetric cost of link a-b: the larger direction if both were measured (updates go
    both ways, so the slower one matters), else the one measured, else ``missing``."""
    there = costs.get((a, b))
    back = costs.get((b, a))
    for value in (there, back):
        if value is not None:
            _check_cost(f"cost of {a}->{b}", value)
    if there is None:
        return missing if back is None else back
    if back is None:
        return there
    return max(there, back)


def compute(
    members: Iterable[str],
    costs: Mapping[tuple[str, str], float],
    params: TopologyParams | None = None,
) -> Topology:
    """The update topology over ``members`` from directed link ``costs`` (measured from a to
    b; pairs involving other names are ignored, unmeasured pairs cost ``missing_cost``)."""
    params = params if params is not None else TopologyParams()
    for pair, value in costs.items():
        _check_cost(f"cost of {pair}", value)
    ordered = tuple(sorted(set(members)))
    n = len(ordered)
    cost = [
        [
            0.0 if i == j else link_cost(costs, ordered[i], ordered[j], params.missing_cost)
            for j in range(n)
        ]
        for i in range(n)
    ]
    k = min(params.k, n - 1)
    lo = min(max(params.min_degree, params.k), n - 1)
    if lo == n - 1:  # only the complete graph has that many edges per member
        adjacency = [set(range(n)) - {i} for i in range(n)]
    else:
        adjacency = _construct(cost, k, lo, params.max_degree, params.diameter_weight)
        search = _Search(cost, adjacency, k, lo, params.max_degree, params.diameter_weight)
        adjacency = search.anneal(params.iterations, random.Random(params.seed))
    weighted = {(i, j): cost[i][j] for i in range(n) for j in adjacency[i] if i < j}
    return _finish(ordered, weighted)


def recosted(
    topology: Topology, costs: Mapping[tuple[str, str], float], params: TopologyParams | None = None
) -> Topology:
    """``topology``'s edges with the costs ``costs`` gives them now (for judging whether a new
    computation is worth switching to)."""
    missing = (params or TopologyParams()).missing_cost
    index = {m: i for i, m in enumerate(topology.members)}
    weighted = {(index[a], index[b]): link_cost(costs, a, b, missing) for a, b in topology.edges}
    return _finish(topology.members, weighted)


def objective(topology: Topology, params: TopologyParams | None = None) -> float:
    """What ``compute`` minimises: total cost plus the weighted diameter."""
    return topology.total_cost + (params or TopologyParams()).diameter_weight * topology.diameter


def vertex_connectivity(members: Sequence[str], edges: Iterable[tuple[str, str]]) -> int:
    """The fewest members whose removal disconnects the rest (n - 1 for a complete graph,
    0 for a disconnected one or fewer than two members), by max-flow with vertex splitting."""
    ordered = sorted(set(members))
    index = {m: i for i, m in enumerate(ordered)}
    adjacency: _Adjacency = [set() for _ in ordered]
    for a, b in edges:
        if a not in index or b not in index:
            raise TopologyError(f"edge {a}-{b} is not between two members")
        if a != b:
            adjacency[index[a]].add(index[b])
            adjacency[index[b]].add(index[a])
    return _connectivity(adjacency)


def changed_enough(
    old: Mapping[tuple[str, str], float],
    new: Mapping[tuple[str, str], float],
    threshold: float = 0.25,
    floor: float = 0.0,
) -> bool:
    """Whether the topology should be recomputed: a link appeared or disappeared, or some link's
    cost moved by more than ``threshold`` relative to its old cost and more than ``floor``
    (measurement noise on links of a few milliseconds is not a change)."""
    _check_cost("threshold", threshold)
    _check_cost("floor", floor)
    if old.keys() != new.keys():
        return True
    for pair, before in old.items():
        after = new[pair]
        _check_cost(f"old cost of {pair}", before)
        _check_cost(f"new cost of {pair}", after)
        if abs(after - before) > max(threshold * before, floor):
            return True
    return False


def _check_cost(what: str, value: float) -> None:
    # Infinite costs are refused too: they would turn objective differences into NaN. A peer
    # that cannot be reached is better left unmeasured (it then costs missing_cost).
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise TopologyError(f"{what} must be a finite number >= 0, got {value!r}")


def _finish(members: tuple[str, ...], weighted: Mapping[_Pair, float]) -> Topology:
    n = len(members)
    adjacency: _Adjacency = [set() for _ in range(n)]
    cost = [[0.0] * n for _ in range(n)]
    for (i, j), c in weighted.items():
        adjacency[i].add(j)
        adjacency[j].add(i)
        cost[i][j] = cost[j][i] = c
    named = {(members[i], members[j]): c for (i, j), c in sorted(weighted.items())}
    eccentricities = [max(_dijkstra(adjacency, cost, s, math.inf)) for s in range(n)]
    return Topology(
        members=members,
        edges=frozenset(named),
        costs=MappingProxyType(named),
        total_cost=math.fsum(named.values()),
        diameter=max(eccentricities, default=0.0),
        hops=_hop_diameter(adjacency),
        connectivity=_connectivity(adjacency),
    )


# Connectivity ------------------------------------------------------------------------------


def _disjoint_paths(adjacency: _Adjacency, s: int, t: int, limit: int) -> tuple[int, set[int]]:
    """Up to ``limit`` vertex-disjoint s-t paths (s, t not adjacent) and, when fewer exist, a
    minimum separator. Unit-capacity max-flow where member v is split into in-node 2v and
    out-node 2v+1 joined by an arc of capacity 1; links are arcs of unbounded capacity, so
    a minimum cut consists of members only."""
    n = len(adjacency)
    through = [False] * n  # v's in->out arc carries a path
    carried: set[_Pair] = set()  # (x, y): the arc out(x) -> in(y) carries a path
    source, sink = 2 * s + 1, 2 * t
    paths = 0
    while paths < limit:
        parent = [-1] * (2 * n)
        parent[source] = source
        queue = [source]
        for node in queue:  # grows while it is read: breadth-first
            v = node >> 1
            if node & 1:
                steps = [2 * y for y in adjacency[v]]
                if through[v]:
                    steps.append(2 * v)
            else:
                steps = [2 * x + 1 for x in adjacency[v] if (x, v) in carried]
                if not through[v] and v != t:
                    steps.append(node + 1)
            for step in steps:
                if parent[step] < 0:
                    parent[step] = node
                    queue.append(step)
            if parent[sink] >= 0:
                break
        if parent[sink] < 0:
            separator = {v for v in range(n) if parent[2 * v] >= 0 and parent[2 * v + 1] < 0}
            return paths, separator
        node = sink
        while node != source:
            prev = parent[node]
            a, b = prev >> 1, node >> 1
            if a == b:
                through[a] = not prev & 1  # forward along in->out, or cancelled
            elif prev & 1:
                carried.add((a, b))
            else:
                carried.discard((b, a))
            node = prev
        paths += 1
    return paths, set()


def _separator(adjacency: _Adjacency, k: int) -> set[int] | None:
    """Fewer than k members whose removal disconnects the graph, or None if it is k-connected
    (n > k assumed). A separator S of fewer than k members misses one of members 0..k-1; the
    first member outside S is cut by S from a later one, so only those pairs need a flow."""
    n = len(adjacency)
    for i in range(k):
        for j in range(i + 1, n):
            if j not in adjacency[i]:
                paths, separator = _disjoint_paths(adjacency, i, j, k)
                if paths < k:
                    return separator
    return None


def _connectivity(adjacency: _Adjacency) -> int:
    """Exact vertex connectivity (Even's algorithm: as in ``_separator``, pairs whose first
    member is among the first kappa + 1 suffice)."""
    n = len(adjacency)
    best = max(n - 1, 0)
    i = 0
    while i <= best and i < n:
        for j in range(i + 1, n):
            if j not in adjacency[i]:
                best = min(best, _disjoint_paths(adjacency, i, j, best)[0])
        i += 1
    return best


# Distances ---------------------------------------------------------------------------------


def _dijkstra(
    adjacency: _Adjacency, cost: list[list[float]], source: int, bound: float
) -> list[float]:
    """Distances from ``source``; stops early (returning what it has, with the farthest
    distance found above ``bound``) once a member is farther than ``bound``."""
    dist = [math.inf] * len(adjacency)
    dist[source] = 0.0
    heap = [(0.0, source)]
    done = [False] * len(adjacency)
    while heap:
        d, u = heapq.heappop(heap)
        if done[u]:
            continue
        if d > bound:
            return [d]
        done[u] = True
        for v in adjacency[u]:
            nd = d + cost[u][v]
            if nd < dist[v]:
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    return dist


def _hop_diameter(adjacency: _Adjacency) -> int:
    worst = 0
    for source in range(len(adjacency)):
        depth = {source: 0}
        queue = [source]
        for u in queue:
            for v in adjacency[u]:
                if v not in depth:
                    depth[v] = depth[u] + 1
                    queue.append(v)
        worst = max(worst, max(depth.values()))
    return worst


# Construction ------------------------------------------------------------------------------


def _tour(cost: list[list[float]]) -> list[int]:
    """A cheap cyclic order of the members: the best nearest-neighbour tour over all starts,
    improved by 2-opt."""
    n = len(cost)
    best: list[int] = []
    best_length = math.inf
    for start in range(n):
        tour = [start]
        left = set(range(n)) - {start}
        while left:
            last = cost[tour[-1]]
            nxt = min(left, key=lambda v: (last[v], v))
            tour.append(nxt)
            left.remove(nxt)
        length = math.fsum(cost[tour[i - 1]][tour[i]] for i in range(n))
        if length < best_length:
            best, best_length = tour, length
    improved = True
    while improved:
        improved = False
        for i in range(n - 2):
            for j in range(i + 2, n if i > 0 else n - 1):
                a, b, c, d = best[i], best[i + 1], best[j], best[(j + 1) % n]
                before = cost[a][b] + cost[c][d]
                # A relative margin: rounding must not make 2-opt undo and redo one move forever.
                if cost[a][c] + cost[b][d] < before - 1e-12 * before:
                    best[i + 1 : j + 1] = reversed(best[i + 1 : j + 1])
                    improved = True
    return best


def _link(adjacency: _Adjacency, a: int, b: int) -> None:
    adjacency[a].add(b)
    adjacency[b].add(a)


def _harary(tour: list[int], degree: int, cost: list[list[float]]) -> _Adjacency:
    """Harary's minimum-edge graph H(degree, n) over the tour: degree-connected, every member
    of degree ``degree`` but one of degree + 1 when degree and n are odd. For degree 1, the
    tour without its costliest link (a path)."""
    n = len(tour)
    adjacency: _Adjacency = [set() for _ in range(n)]
    if degree == 1:
        cut = max(range(n), key=lambda i: (cost[tour[i]][tour[(i + 1) % n]], -i))
        for i in range(n):
            if i != cut:
                _link(adjacency, tour[i], tour[(i + 1) % n])
        return adjacency
    for offset in range(1, degree // 2 + 1):
        for i in range(n):
            _link(adjacency, tour[i], tour[(i + offset) % n])
    if degree % 2:
        # Chords across the circle; for odd n the last one lands on tour[0] a second time.
        half = (n + 1) // 2
        for i in range(half):
            _link(adjacency, tour[i], tour[(i + half) % n])
    return adjacency


def _greedy(cost: list[list[float]], tour: list[int], k: int, lo: int, hi: int) -> _Adjacency:
    """A cheap base (a ring along the tour for k >= 2, a degree-capped minimum spanning tree
    for k = 1), then the cheapest links that bring members to ``lo``, then, while a separator
    of fewer than k members exists, the cheapest link across it; over ``hi`` only if no link
    within it crosses the separator (connectivity wins)."""
    n = len(cost)
    pairs = sorted((cost[i][j], i, j) for i in range(n) for j in range(i + 1, n))
    adjacency: _Adjacency = [set() for _ in range(n)]
    if k >= 2:
        for i in range(n):
            _link(adjacency, tour[i], tour[(i + 1) % n])
    else:
        root = list(range(n))

        def find(v: int) -> int:
            while root[v] != v:
                root[v] = root[root[v]]
                v = root[v]
            return v

        for _, i, j in pairs:
            if len(adjacency[i]) < hi and len(adjacency[j]) < hi and find(i) != find(j):
                root[find(i)] = find(j)
                _link(adjacency, i, j)
    for _, i, j in pairs:
        short = len(adjacency[i]) < lo or len(adjacency[j]) < lo
        if short and len(adjacency[i]) < hi and len(adjacency[j]) < hi and j not in adjacency[i]:
            _link(adjacency, i, j)
    while (separator := _separator(adjacency, k)) is not None:
        part = _parts(adjacency, separator)
        _, _, i, j = min(
            (int(len(adjacency[i]) >= hi) + int(len(adjacency[j]) >= hi), c, i, j)
            for c, i, j in pairs
            if part[i] >= 0 and part[j] >= 0 and part[i] != part[j]
        )
        _link(adjacency, i, j)
    return adjacency


def _parts(adjacency: _Adjacency, removed: set[int]) -> list[int]:
    """The connected component of each member once ``removed`` is taken out (-1 for those)."""
    part = [-1] * len(adjacency)
    label = 0
    for start in range(len(adjacency)):
        if start in removed or part[start] >= 0:
            continue
        part[start] = label
        queue = [start]
        for u in queue:
            for v in adjacency[u]:
                if v not in removed and part[v] < 0:
                    part[v] = label
                    queue.append(v)
        label += 1
    return part


def _construct(cost: list[list[float]], k: int, lo: int, hi: int, weight: float) -> _Adjacency:
    """The better start of the greedy graph and the Harary graph over the same tour (both are
    k-connected): less missing degree, then less excess degree, then lower objective."""
    tour = _tour(cost)
    starts = [_greedy(cost, tour, k, lo, hi), _harary(tour, lo, cost)]

    def rank(adjacency: _Adjacency) -> tuple[int, int, float]:
        n = len(adjacency)
        total = math.fsum(cost[i][j] for i in range(n) for j in adjacency[i] if i < j)
        diameter = max(max(_dijkstra(adjacency, cost, s, math.inf)) for s in range(n))
        under, over = _misfit(adjacency, lo, hi)
        return under, over, total + weight * diameter

    return min(starts, key=rank)


def _misfit(adjacency: _Adjacency, lo: int, hi: int) -> tuple[int, int]:
    """Total degree missing below ``lo`` and in excess of ``hi``."""
    degrees = [len(a) for a in adjacency]
    return sum(max(0, lo - d) for d in degrees), sum(max(0, d - hi) for d in degrees)


# Local search ------------------------------------------------------------------------------


class _Search:
    """Simulated annealing over the edge set; k-connectivity and degree bounds are invariants
    (a degree already out of bounds may only move towards them)."""

    def __init__(
        self,
        cost: list[list[float]],
        adjacency: _Adjacency,
        k: int,
        lo: int,
        hi: int,
        weight: float,
    ) -> None:
        n = len(cost)
        self.cost = cost
        self.adjacency = adjacency
        self.k, self.lo, self.hi, self.weight = k, lo, hi, weight
        self.edges = [(i, j) for i in range(n) for j in sorted(adjacency[i]) if i < j]
        self.where = {edge: at for at, edge in enumerate(self.edges)}
        # Each member's possible partners, cheapest first: proposals favour cheap links.
        self.near = [
            sorted((v for v in range(n) if v != u), key=lambda v: (cost[u][v], v)) for u in range(n)
        ]
        self.total = math.fsum(cost[i][j] for i, j in self.edges)
        self.under, self.over = _misfit(adjacency, lo, hi)
        # Sources by decreasing eccentricity: the likeliest to exceed a bound are tried first.
        self.order = list(range(n))
        diameter = self._diameter(math.inf) if weight > 0 else 0.0
        assert diameter is not None  # no bound, so never abandoned
        self.diameter: float = diameter

    def objective(self) -> float:
        return self.total + self.weight * self.diameter

    def anneal(self, iterations: int, rng: random.Random) -> _Adjacency:
        """Prunes greedily, then anneals; returns the best graph seen."""
        for edge in sorted(self.edges, key=lambda e: (-self.cost[e[0]][e[1]], e)):
            self._try((edge,), (), 0.0)
        best = (self.under, self.over, self.objective())
        best_edges = list(self.edges)
        scale = self.objective() / len(self.edges)
        for step in range(iterations):
            temperature = _START_TEMPERATURE * scale * _FINAL_COOLING ** (step / iterations)
            move = self._propose(rng)
            if move is None:
                continue
            threshold = -temperature * math.log(1.0 - rng.random())
            if self._try(*move, threshold) and (self.under, self.over, self.objective()) < best:
                best = (self.under, self.over, self.objective())
                best_edges = list(self.edges)
        adjacency: _Adjacency = [set() for _ in self.adjacency]
        for i, j in best_edges:
            _link(adjacency, i, j)
        return adjacency

    def _partner(self, u: int, rng: random.Random) -> int | None:
        """A non-neighbour of u, cheap ones far more likely."""
        near = self.near[u]
        v = near[int(len(near) * rng.random() ** 2)]
        return None if v in self.adjacency[u] else v

    def _propose(self, rng: random.Random) -> tuple[tuple[_Pair, ...], tuple[_Pair, ...]] | None:
        edges = self.edges
        roll = rng.random()
        if roll < 0.2:  # drop a link
            return (edges[rng.randrange(len(edges))],), ()
        if roll < 0.4:  # add a link
            u = rng.randrange(len(self.adjacency))
            v = self._partner(u, rng)
            return None if v is None else ((), (_pair(u, v),))
        if roll < 0.8:  # move one end of a link to a cheaper partner
            u, v = edges[rng.randrange(len(edges))]
            if rng.random() < 0.5:
                u, v = v, u
            w = self._partner(u, rng)
            return None if w is None or w == v else ((_pair(u, v),), (_pair(u, w),))
        # Swap partners between two links (a-b, c-d become a-c, b-d): keeps every degree, the
        # only move left when all members sit at both bounds.
        a, b = edges[rng.randrange(len(edges))]
        c, d = edges[rng.randrange(len(edges))]
        if rng.random() < 0.5:
            c, d = d, c
        if len({a, b, c, d}) < 4 or c in self.adjacency[a] or d in self.adjacency[b]:
            return None
        return (_pair(a, b), _pair(c, d)), (_pair(a, c), _pair(b, d))

    def _try(self, removed: tuple[_Pair, ...], added: tuple[_Pair, ...], threshold: float) -> bool:
        """Applies the move if it keeps the invariants and raises the objective by at most
        ``threshold``."""
        adjacency, cost = self.adjacency, self.cost
        change: dict[int, int] = {}
        for u, v in removed:
            change[u] = change.get(u, 0) - 1
            change[v] = change.get(v, 0) - 1
        for u, v in added:
            change[u] = change.get(u, 0) + 1
            change[v] = change.get(v, 0) + 1
        under = over = 0
        for v, delta in change.items():
            old = len(adjacency[v])
            new = old + delta
            if (new > self.hi and new > old) or (new < self.lo and new < old):
                return False
            under += max(0, self.lo - new) - max(0, self.lo - old)
            over += max(0, new - self.hi) - max(0, old - self.hi)
        delta_cost = math.fsum(cost[u][v] for u, v in added) - math.fsum(
            cost[u][v] for u, v in removed
        )
        # Removals alone cannot shorten any path; with additions the diameter can at most fall
        # to zero. Either bound may reject the move before any graph work.
        floor = delta_cost - (self.weight * self.diameter if added else 0.0)
        if floor > threshold:
            return False
        for u, v in removed:
            adjacency[u].discard(v)
            adjacency[v].discard(u)
        for u, v in added:
            _link(adjacency, u, v)
        diameter: float | None = 0.0
        keeps = all(_disjoint_paths(adjacency, u, v, self.k)[0] >= self.k for u, v in removed)
        if keeps and self.weight > 0:
            diameter = self._diameter(self.diameter + (threshold - delta_cost) / self.weight)
        if not keeps or diameter is None:
            for u, v in added:
                adjacency[u].discard(v)
                adjacency[v].discard(u)
            for u, v in removed:
                _link(adjacency, u, v)
            return False
        for edge in removed:
            at = self.where.pop(edge)
            last = self.edges.pop()
            if last != edge:
                self.edges[at] = last
                self.where[last] = at
        for edge in added:
            self.where[edge] = len(self.edges)
            self.edges.append(edge)
        self.total += delta_cost
        self.under += under
        self.over += over
        self.diameter = diameter
        return True

    def _diameter(self, bound: float) -> float | None:
        """The weighted diameter of the current graph, or None once it is known to exceed
        ``bound``. Records the eccentricity order for the next call."""
        eccentricity: dict[int, float] = {}
        for source in self.order:
            dist = _dijkstra(self.adjacency, self.cost, source, bound)
            farthest = max(dist)
            if farthest > bound:
                return None
            eccentricity[source] = farthest
        self.order.sort(key=lambda s: (-eccentricity[s], s))
        return max(eccentricity.values(), default=0.0)


def _pair(a: int, b: int) -> _Pair:
    return (a, b) if a < b else (b, a)
