"""The update topology: constraints, quality, determinism, connectivity and the JSON form.

Connectivity, distances and hop counts are checked against brute force written here, not
against the module's own max-flow and Dijkstra."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_common.errors import ReplicatorError
from replicator.errors import TopologyError
from replicator.topology import (
    Topology,
    TopologyParams,
    changed_enough,
    compute,
    link_cost,
    objective,
    recosted,
    vertex_connectivity,
)

# Brute force -------------------------------------------------------------------------------


def _adjacency(members: Iterable[str], edges: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    adjacency: dict[str, set[str]] = {m: set() for m in members}
    for a, b in edges:
        adjacency[a].add(b)
        adjacency[b].add(a)
    return adjacency


def _connected_without(adjacency: dict[str, set[str]], removed: set[str]) -> bool:
    left = [m for m in adjacency if m not in removed]
    if len(left) <= 1:
        return True
    seen = {left[0]}
    stack = [left[0]]
    while stack:
        for v in adjacency[stack.pop()]:
            if v not in removed and v not in seen:
                seen.add(v)
                stack.append(v)
    return len(seen) == len(left)


def _is_k_connected(adjacency: dict[str, set[str]], k: int) -> bool:
    """More than k members, and no set of fewer than k members disconnects the rest."""
    if len(adjacency) <= k:
        return False
    return all(
        _connected_without(adjacency, set(cut))
        for size in range(k)
        for cut in itertools.combinations(sorted(adjacency), size)
    )


def _brute_connectivity(adjacency: dict[str, set[str]]) -> int:
    n = len(adjacency)
    for size in range(max(n - 1, 0)):
        for cut in itertools.combinations(sorted(adjacency), size):
            if not _connected_without(adjacency, set(cut)):
                return size
    return max(n - 1, 0)


def _floyd_diameter(topology: Topology) -> float:
    dist = {(a, b): 0.0 if a == b else math.inf for a in topology.members for b in topology.members}
    for (a, b), cost in topology.costs.items():
        dist[a, b] = dist[b, a] = cost
    for via in topology.members:
        for a in topology.members:
            for b in topology.members:
                dist[a, b] = min(dist[a, b], dist[a, via] + dist[via, b])
    return max(dist.values(), default=0.0)


def _hop_diameter(adjacency: dict[str, set[str]]) -> int:
    worst = 0
    for source in adjacency:
        seen = {source}
        frontier = [source]
        level = 0
        while frontier:
            frontier = [v for u in frontier for v in adjacency[u] if v not in seen]
            seen.update(frontier)
            level += bool(frontier)
        worst = max(worst, level)
    return worst


def _degrees(topology: Topology) -> dict[str, int]:
    return {m: len(topology.neighbours(m)) for m in topology.members}


def _uniform(members: Iterable[str], cost: float = 1.0) -> dict[tuple[str, str], float]:
    names = list(members)
    return {(a, b): cost for a in names for b in names if a != b}


def _names(n: int) -> list[str]:
    return [f"m{i:02d}" for i in range(n)]


# Small cases -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "params", "edges", "connectivity"),
    [
        (0, TopologyParams(), 0, 0),
        (1, TopologyParams(), 0, 0),
        (2, TopologyParams(), 1, 1),
        (3, TopologyParams(), 3, 2),  # n <= k + 1: complete
        (4, TopologyParams(k=3, max_degree=3), 6, 3),  # K4
        (5, TopologyParams(k=4, max_degree=4), 10, 4),  # K5
        (5, TopologyParams(k=2, min_degree=4, max_degree=4), 10, 4),  # min degree forces K5
        (6, TopologyParams(), 6, 2),  # uniform costs: a ring is cheapest
        (6, TopologyParams(k=1, min_degree=1, diameter_weight=0.0), 5, 1),  # a spanning tree
        (6, TopologyParams(k=3, max_degree=3), 9, 3),  # 3-regular
    ],
)
def test_small_groups_get_the_expected_shape(
    n: int, params: TopologyParams, edges: int, connectivity: int
) -> None:
    members = _names(n)
    topology = compute(members, _uniform(members), params)
    assert topology.members == tuple(members)
    assert len(topology.edges) == edges
    assert topology.connectivity == connectivity
    assert topology.total_cost == pytest.approx(float(edges))


def test_empty_topology_has_zero_qualities() -> None:
    topology = compute([], {})
    assert (topology.members, topology.edges, dict(topology.costs)) == ((), frozenset(), {})
    assert (topology.total_cost, topology.diameter, topology.hops) == (0.0, 0.0, 0)


def test_two_members_are_linked_at_their_symmetric_cost() -> None:
    topology = compute(["b", "a"], {("a", "b"): 0.5, ("b", "a"): 0.75})
    assert dict(topology.costs) == {("a", "b"): 0.75}
    assert topology.neighbours("a") == ("b",)
    assert (topology.diameter, topology.hops) == (0.75, 1)


def test_k1_without_diameter_weight_is_a_minimum_spanning_tree() -> None:
    rng = random.Random(7)
    members = _names(12)
    costs = {(a, b): rng.uniform(0.1, 5.0) for a in members for b in members if a != b}
    params = TopologyParams(k=1, min_degree=1, max_degree=11, diameter_weight=0.0)
    topology = compute(members, costs, params)
    # Prim's algorithm on the symmetric costs, independently.
    symmetric = {(a, b): max(costs[a, b], costs[b, a]) for a, b in costs}
    inside, weight = {members[0]}, 0.0
    while len(inside) < len(members):
        cost, b = min((symmetric[a, b], b) for a in inside for b in members if b not in inside)
        inside.add(b)
        weight += cost
    assert len(topology.edges) == len(members) - 1
    assert topology.connectivity == 1
    assert topology.total_cost == pytest.approx(weight)


# Properties --------------------------------------------------------------------------------


@st.composite
def _scenarios(draw: st.DrawFn) -> tuple[list[str], dict[tuple[str, str], float], TopologyParams]:
    n = draw(st.integers(3, 20))
    names = draw(
        st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=n, max_size=n, unique=True)
    )
    rng = draw(st.randoms(use_true_random=False))
    costs: dict[tuple[str, str], float] = {}
    for a in names:
        for b in names:
            roll = rng.random()
            if a != b and roll > 0.15:  # some links unmeasured
                # Ties are common on purpose: tie-breaking must not depend on input order.
                costs[a, b] = 1.0 if roll < 0.4 else round(rng.uniform(0.01, 20.0), 3)
    k = draw(st.integers(1, 3))
    min_degree = draw(st.integers(0, 4))
    params = TopologyParams(
        k=k,
        min_degree=min_degree,
        max_degree=max(k, min_degree) + draw(st.integers(0, 2)),
        diameter_weight=draw(st.sampled_from([0.0, 1.0, 5.0])),
        iterations=draw(st.sampled_from([0, 40, 300])),
        seed=draw(st.integers(0, 3)),
    )
    return names, costs, params


@settings(max_examples=60, deadline=None)
@given(_scenarios(), st.randoms(use_true_random=False))
def test_topology_meets_its_constraints(
    scenario: tuple[list[str], dict[tuple[str, str], float], TopologyParams],
    shuffler: random.Random,
) -> None:
    names, costs, params = scenario
    topology = compute(names, costs, params)
    n = len(names)
    k = min(params.k, n - 1)
    lo = min(max(params.min_degree, params.k), n - 1)
    hi = params.max_degree
    adjacency = _adjacency(topology.members, topology.edges)

    assert topology.members == tuple(sorted(names))
    assert all(a < b and a in adjacency and b in adjacency for a, b in topology.edges)
    assert _is_k_connected(adjacency, k)
    assert topology.connectivity >= k
    if n <= 8:
        assert topology.connectivity == _brute_connectivity(adjacency)

    degrees = sorted(len(near) for near in adjacency.values())
    assert degrees[0] >= lo
    if not (lo == hi and n * lo % 2 == 1) and not (hi == 1 and n >= 3):
        assert degrees[-1] <= hi
    elif hi > 1:  # infeasible bounds: exactly one member one link over
        assert degrees[-1] == hi + 1
        assert degrees[-2] <= hi

    assert set(topology.costs) == set(topology.edges)
    for a, b in topology.edges:
        assert topology.costs[a, b] == link_cost(costs, a, b, params.missing_cost)
    assert topology.total_cost == pytest.approx(math.fsum(topology.costs.values()))
    assert topology.diameter == pytest.approx(_floyd_diameter(topology))
    assert topology.hops == _hop_diameter(adjacency)

    shuffled = list(names)
    shuffler.shuffle(shuffled)
    assert compute(shuffled, dict(reversed(list(costs.items()))), params) == topology


@settings(max_examples=15, deadline=None)
@given(_scenarios())
def test_annealing_never_ends_worse_than_its_start(
    scenario: tuple[list[str], dict[tuple[str, str], float], TopologyParams],
) -> None:
    names, costs, params = scenario
    weight = params.diameter_weight

    def objective(iterations: int) -> float:
        topology = compute(
            names,
            costs,
            TopologyParams(
                k=params.k,
                min_degree=params.min_degree,
                max_degree=params.max_degree,
                diameter_weight=weight,
                iterations=iterations,
                seed=params.seed,
            ),
        )
        return topology.total_cost + weight * topology.diameter

    assert objective(400) <= objective(0) + 1e-9


# Quality -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("both_directions", [True, False])
def test_a_slow_link_is_avoided(k: int, both_directions: bool) -> None:
    members = _names(8)
    rng = random.Random(k)
    costs = {(a, b): rng.uniform(1.0, 1.5) for a in members for b in members if a != b}
    costs["m00", "m03"] = 150.0  # one direction measured slow is enough: the slower counts
    if both_directions:
        costs["m03", "m00"] = 150.0
    topology = compute(members, costs, TopologyParams(k=k, min_degree=k, max_degree=k + 1))
    assert ("m00", "m03") not in topology.edges
    assert topology.connectivity >= k
    assert topology.total_cost < 100


@pytest.mark.parametrize("k", [1, 2, 3])
def test_two_regions_are_joined_by_k_links(k: int) -> None:
    rng = random.Random(k)
    east = [f"east{i}" for i in range(6)]
    west = [f"west{i}" for i in range(7)]
    costs = {
        (a, b): rng.uniform(1.0, 1.2) * (1.0 if a[:4] == b[:4] else 50.0)
        for a in east + west
        for b in east + west
        if a != b
    }
    topology = compute(east + west, costs, TopologyParams(k=k, min_degree=k, max_degree=k + 2))
    crossing = [(a, b) for a, b in topology.edges if a[:4] != b[:4]]
    assert topology.connectivity >= k
    assert len(crossing) == k


@pytest.mark.parametrize(("n", "k"), [(5, 3), (7, 3), (9, 5), (11, 3)])
def test_odd_degree_on_odd_groups_puts_one_member_one_link_over(n: int, k: int) -> None:
    # Every member at degree k would make an odd degree sum: one member must have k + 1.
    rng = random.Random(n)
    members = _names(n)
    costs = {(a, b): rng.uniform(0.5, 2.0) for a in members for b in members if a != b}
    topology = compute(members, costs, TopologyParams(k=k, min_degree=k, max_degree=k))
    assert sorted(_degrees(topology).values()) == [k] * (n - 1) + [k + 1]
    assert topology.connectivity == k


def test_max_degree_one_still_connects_the_group() -> None:
    # Four members, at most one link each: a connected graph needs members with two.
    members = _names(4)
    topology = compute(members, _uniform(members), TopologyParams(k=1, min_degree=1, max_degree=1))
    assert topology.connectivity == 1
    assert len(topology.edges) == 3


def test_diameter_weight_trades_cost_for_a_shorter_diameter() -> None:
    # Sixteen members on a circle, every hop with a fixed cost (a round trip) on top of the
    # distance: a ring around it is cheapest, but eight hops from one side to the other.
    members = _names(16)
    place = {
        m: (math.cos(i * math.pi / 8), math.sin(i * math.pi / 8)) for i, m in enumerate(members)
    }
    costs = {
        (a, b): 1.0 + 0.1 * math.dist(place[a], place[b])
        for a in members
        for b in members
        if a != b
    }
    cheap = compute(members, costs, TopologyParams(diameter_weight=0.0))
    fast = compute(members, costs, TopologyParams(diameter_weight=10.0))
    assert len(cheap.edges) == 16
    assert fast.diameter < cheap.diameter
    assert fast.total_cost > cheap.total_cost


def test_equal_inputs_give_equal_hashable_topologies() -> None:
    rng = random.Random(3)
    members = _names(15)
    costs = {(a, b): rng.uniform(0.1, 3.0) for a in members for b in members if a != b}
    params = TopologyParams(diameter_weight=5.0)
    first = compute(members, costs, params)
    assert compute(members, dict(costs), params) == first
    assert hash(first) == hash(compute(members, costs, params))


def test_twenty_members_get_a_two_connected_topology_within_the_degree_bounds() -> None:
    rng = random.Random(1)
    members = _names(20)
    costs = {(a, b): rng.uniform(0.01, 2.0) for a in members for b in members if a != b}
    topology = compute(members, costs)
    assert topology.connectivity >= 2
    assert all(2 <= len(topology.neighbours(m)) <= 4 for m in members)


# Connectivity on known graphs --------------------------------------------------------------


def _cycle(n: int) -> list[tuple[str, str]]:
    names = _names(n)
    return [(names[i], names[(i + 1) % n]) for i in range(n)]


def _complete(n: int) -> list[tuple[str, str]]:
    return list(itertools.combinations(_names(n), 2))


_PETERSEN = [(f"o{i}", f"o{(i + 1) % 5}") for i in range(5)]
_PETERSEN += [(f"i{i}", f"i{(i + 2) % 5}") for i in range(5)]
_PETERSEN += [(f"o{i}", f"i{i}") for i in range(5)]


@pytest.mark.parametrize(
    ("members", "edges", "expected"),
    [
        ([], [], 0),
        (_names(1), [], 0),
        (_names(2), [], 0),
        (_names(2), _complete(2), 1),
        (_names(7), _cycle(7), 2),
        (_names(3), _cycle(3), 2),
        (_names(6), _complete(6), 5),
        (_names(5), [(f"m{i:02d}", f"m{i + 1:02d}") for i in range(4)], 1),  # path
        (_names(5), [("m00", f"m{i:02d}") for i in range(1, 5)], 1),  # star
        (_names(6), _cycle(3), 0),  # three isolated members
        (_names(8), _cycle(4) + [(f"m{i:02d}", f"m{i + 1:02d}") for i in range(4, 7)], 0),
        (_names(7), [*_complete(4), ("m03", "m04"), ("m04", "m05"), ("m05", "m06")], 1),
        ([f"{s}{i}" for s in "oi" for i in range(5)], _PETERSEN, 3),
        (list("abcdef"), [(a, b) for a in "abc" for b in "def"], 3),  # K(3,3)
        (_names(4), [*_cycle(4), ("m00", "m00")], 2),  # a loop changes nothing
    ],
)
def test_vertex_connectivity_of_known_graphs(
    members: list[str], edges: list[tuple[str, str]], expected: int
) -> None:
    assert vertex_connectivity(members, edges) == expected
    assert _brute_connectivity(_adjacency(members, edges)) == expected


def test_vertex_connectivity_refuses_edges_to_strangers() -> None:
    with pytest.raises(TopologyError, match="not between two members"):
        vertex_connectivity(["a", "b"], [("a", "z")])


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.randoms(use_true_random=False))
def test_vertex_connectivity_matches_brute_force(n: int, rng: random.Random) -> None:
    members = _names(n)
    density = rng.random()
    edges = [pair for pair in itertools.combinations(members, 2) if rng.random() < density]
    assert vertex_connectivity(members, edges) == _brute_connectivity(_adjacency(members, edges))


# Link costs and recomputation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("costs", "expected"),
    [
        ({("a", "b"): 1.0, ("b", "a"): 3.0}, 3.0),
        ({("a", "b"): 2.0}, 2.0),
        ({("b", "a"): 2.5}, 2.5),
        ({}, 9.0),
        ({("a", "c"): 1.0}, 9.0),
    ],
)
def test_link_cost_is_symmetric_and_pessimistic(
    costs: dict[tuple[str, str], float], expected: float
) -> None:
    assert link_cost(costs, "a", "b", 9.0) == expected
    assert link_cost(costs, "b", "a", 9.0) == expected


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_costs_are_refused(bad: float) -> None:
    with pytest.raises(TopologyError):
        link_cost({("a", "b"): bad}, "a", "b", 1.0)
    with pytest.raises(TopologyError):
        compute(["a", "b", "c"], {("a", "b"): bad})


_OLD = {("a", "b"): 1.0, ("b", "a"): 2.0}


@pytest.mark.parametrize(
    ("new", "threshold", "expected"),
    [
        (dict(_OLD), 0.25, False),
        ({("a", "b"): 1.2, ("b", "a"): 2.0}, 0.25, False),
        ({("a", "b"): 1.25, ("b", "a"): 2.0}, 0.25, False),  # exactly the threshold
        ({("a", "b"): 1.3, ("b", "a"): 2.0}, 0.25, True),
        ({("a", "b"): 1.0, ("b", "a"): 1.4}, 0.25, True),  # a drop counts as much as a rise
        ({("a", "b"): 1.3, ("b", "a"): 2.0}, 0.5, False),
        ({("a", "b"): 1.001, ("b", "a"): 2.0}, 0.0, True),
        ({("a", "b"): 1.0}, 0.25, True),  # a link disappeared
        ({**_OLD, ("a", "c"): 1.0}, 0.25, True),  # a link appeared
    ],
)
def test_changed_enough(
    new: dict[tuple[str, str], float], threshold: float, expected: bool
) -> None:
    assert changed_enough(_OLD, new, threshold) is expected


@pytest.mark.parametrize("threshold", [-0.1, math.nan])
def test_changed_enough_refuses_a_bad_threshold(threshold: float) -> None:
    with pytest.raises(TopologyError):
        changed_enough(_OLD, _OLD, threshold)


# Parameters --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"k": 0},
        {"max_degree": 0, "k": 1, "min_degree": 0},
        {"min_degree": 5, "max_degree": 4},
        {"min_degree": -1},
        {"k": 5, "max_degree": 4},
        {"iterations": -1},
        {"diameter_weight": math.nan},
        {"diameter_weight": -1.0},
        {"missing_cost": -0.5},
        {"missing_cost": math.inf},
    ],
)
def test_invalid_params_raise(overrides: dict[str, float]) -> None:
    with pytest.raises(TopologyError) as raised:
        TopologyParams(**overrides)  # type: ignore[arg-type]
    assert isinstance(raised.value, ReplicatorError)


def test_unmeasured_links_cost_missing_cost() -> None:
    members = _names(5)
    topology = compute(members, {}, TopologyParams(missing_cost=3.5))
    assert set(topology.costs.values()) == {3.5}
    assert topology.total_cost == pytest.approx(3.5 * len(topology.edges))


# The value ---------------------------------------------------------------------------------


def _sample() -> Topology:
    rng = random.Random(11)
    members = _names(9)
    costs = {(a, b): rng.uniform(0.05, 4.0) for a in members for b in members if a != b}
    return compute(members, costs)


def test_to_json_round_trips() -> None:
    topology = _sample()
    data = topology.to_json()
    decoded = json.loads(json.dumps(data))
    assert decoded == data
    edges = data["edges"]
    assert isinstance(edges, list)
    assert len(edges) == len(topology.edges)
    assert all(set(edge) == {"a", "b", "cost"} for edge in edges)
    assert Topology.from_json(decoded) == topology


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "JSON object"),
        ({"members": "ab", "edges": []}, "list of strings"),
        ({"members": ["a", "b"], "edges": {}}, "edges must be a list"),
        ({"members": ["a", "b"], "edges": ["a-b"]}, "must be an object"),
        ({"members": ["a", "b"], "edges": [{"a": "a", "b": "z", "cost": 1}]}, "between two"),
        ({"members": ["a", "b"], "edges": [{"a": "a", "b": "a", "cost": 1}]}, "loop"),
        ({"members": ["a", "b"], "edges": [{"a": "a", "b": "b", "cost": True}]}, "numeric"),
        ({"members": ["a", "b"], "edges": [{"a": "a", "b": "b", "cost": -1}]}, "finite"),
        ({"members": ["a", "b", "c"], "edges": [{"a": "a", "b": "b", "cost": 1}]}, "connect"),
    ],
)
def test_from_json_refuses_malformed_topologies(data: object, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        Topology.from_json(data)


def test_from_json_recomputes_rather_than_trusts() -> None:
    data = _sample().to_json()
    data["connectivity"] = 7
    data["total_cost"] = 0.0
    again = Topology.from_json(data)
    assert again == _sample()


def test_neighbours_are_sorted_and_symmetric() -> None:
    topology = _sample()
    for member in topology.members:
        near = topology.neighbours(member)
        assert list(near) == sorted(near)
        assert all(member in topology.neighbours(other) for other in near)
    assert sum(_degrees(topology).values()) == 2 * len(topology.edges)
    with pytest.raises(TopologyError, match="not a member"):
        topology.neighbours("stranger")


def test_repr_names_the_qualities() -> None:
    text = repr(_sample())
    assert text.startswith("Topology(9 members, ")
    assert "connectivity=2" in text
    assert "hops=" in text


# The noise floor of changed_enough -----------------------------------------------------------

_FAST = {("a", "b"): 0.001, ("b", "a"): 0.002}


@pytest.mark.parametrize(
    ("new", "floor", "expected"),
    [
        ({("a", "b"): 0.004, ("b", "a"): 0.002}, 0.0, True),  # four times dearer
        ({("a", "b"): 0.004, ("b", "a"): 0.002}, 0.005, False),  # ... but within the noise
        ({("a", "b"): 0.006, ("b", "a"): 0.002}, 0.005, False),  # exactly the floor
        ({("a", "b"): 0.0061, ("b", "a"): 0.002}, 0.005, True),  # above it
        ({("a", "b"): 0.001, ("b", "a"): 0.0}, 0.005, False),  # a drop within the noise
        ({("a", "b"): 0.001}, 10.0, True),  # a link disappeared: no floor hides that
    ],
)
def test_changed_enough_ignores_changes_within_the_floor(
    new: dict[tuple[str, str], float], floor: float, expected: bool
) -> None:
    assert changed_enough(_FAST, new, 0.25, floor) is expected


def test_the_floor_does_not_hide_relative_changes_of_dear_links() -> None:
    # Where threshold * cost is above the floor, the threshold decides as before.
    assert changed_enough(_OLD, {("a", "b"): 1.2, ("b", "a"): 2.0}, 0.25, 0.005) is False
    assert changed_enough(_OLD, {("a", "b"): 1.3, ("b", "a"): 2.0}, 0.25, 0.005) is True
    assert changed_enough(_OLD, {("a", "b"): 1.3, ("b", "a"): 2.0}, 0.25, 0.5) is False


@pytest.mark.parametrize("floor", [-0.001, math.nan, math.inf])
def test_changed_enough_refuses_a_bad_floor(floor: float) -> None:
    with pytest.raises(TopologyError, match="floor"):
        changed_enough(_OLD, _OLD, 0.25, floor)


def test_recosted_keeps_the_edges_and_prices_them_anew() -> None:
    members = ["a", "b", "c", "d"]
    cheap = {(x, y): 1.0 for x in members for y in members if x != y}
    topology = compute(members, cheap, TopologyParams(k=2, iterations=50))
    dear = {pair: 3.0 for pair in cheap}
    again = recosted(topology, dear)
    assert again.edges == topology.edges
    assert again.total_cost == pytest.approx(3 * topology.total_cost)
    assert again.diameter == pytest.approx(3 * topology.diameter)
    params = TopologyParams(diameter_weight=2.0)
    assert objective(again, params) == pytest.approx(again.total_cost + 2.0 * again.diameter)
