"""Agreeing on one topology: cost rows, the coordinator, when it recomputes, which agreed
topology every member keeps and whom a member floods to (the JSON forms: test_messages.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from replicator.coordination import NOISE, Coordination
from replicator.messages import Agreed, CostRow
from replicator.topology import Topology, TopologyParams, compute

PARAMS = TopologyParams(iterations=200)
THRESHOLD = 0.25


def _row(member: str, version: int, costs: dict[str, float]) -> CostRow:
    return CostRow(member, version, f"http://{member}.example/", costs)


def _mesh(members: Iterable[str], cost: float = 0.05) -> dict[str, dict[str, float]]:
    names = list(members)
    return {m: {p: cost for p in names if p != m} for m in names}


def _coordination(me: str, members: Iterable[str], cost: float = 0.05) -> Coordination:
    coordination = Coordination(me, PARAMS, THRESHOLD)
    for member, costs in _mesh(members, cost).items():
        assert coordination.offer_row(_row(member, 1, costs))
    return coordination


def _topology(members: Iterable[str], cost: float = 1.0) -> Topology:
    names = list(members)
    costs = {(a, b): cost for a in names for b in names if a != b}
    return compute(names, costs, PARAMS)


def _agreed(epoch: int, coordinator: str, members: Iterable[str] = "abcd") -> Agreed:
    return Agreed(epoch, coordinator, _topology(members))


# Cost rows ---------------------------------------------------------------------------------


def test_a_newer_row_replaces_an_older_one() -> None:
    coordination = Coordination("a", PARAMS, THRESHOLD)
    assert coordination.offer_row(_row("b", 2, {"a": 0.1}))
    assert not coordination.offer_row(_row("b", 2, {"a": 0.9}))  # same version: kept
    assert not coordination.offer_row(_row("b", 1, {"a": 0.9}))  # older: kept
    assert coordination.rows["b"].costs == {"a": 0.1}
    assert coordination.offer_row(_row("b", 3, {"a": 0.3}))
    assert coordination.rows["b"].costs == {"a": 0.3}
    assert coordination.offer_row(_row("c", 1, {}))  # versions are per member
    assert set(coordination.rows) == {"b", "c"}


def test_costs_are_among_usable_members_only() -> None:
    coordination = Coordination("a", PARAMS, THRESHOLD)
    coordination.offer_row(_row("a", 1, {"b": 0.1, "c": 0.2, "a": 0.0, "x": 0.5}))
    coordination.offer_row(_row("b", 1, {"a": 0.15, "c": 0.3}))
    coordination.offer_row(_row("x", 1, {"a": 0.7}))
    assert coordination.costs({"a", "b", "c"}) == {
        ("a", "b"): 0.1,
        ("a", "c"): 0.2,
        ("b", "a"): 0.15,
        ("b", "c"): 0.3,
    }
    assert coordination.costs({"a", "b"}) == {("a", "b"): 0.1, ("b", "a"): 0.15}
    assert coordination.costs(set()) == {}


def test_public_urls_by_member() -> None:
    coordination = _coordination("a", "ab")
    assert coordination.public_urls() == {"a": "http://a.example/", "b": "http://b.example/"}


def test_the_coordinator_is_the_smallest_usable_id() -> None:
    assert Coordination.coordinator({"m2", "m10", "m3"}) == "m10"  # string order
    assert Coordination.coordinator(["b", "a", "c"]) == "a"
    assert Coordination.coordinator(set()) is None


# Deciding ----------------------------------------------------------------------------------


def test_only_the_coordinator_decides() -> None:
    members = "abcd"
    for me in "bcd":
        coordination = _coordination(me, members)
        assert coordination.decide(set(members)) is None
        assert coordination.agreed is None
    # Once the smaller ids are gone, c coordinates.
    coordination = _coordination("c", members)
    made = coordination.decide({"c", "d"})
    assert made is not None
    assert made.coordinator == "c"


def test_the_coordinator_computes_the_first_topology() -> None:
    coordination = _coordination("a", "abcd")
    made = coordination.decide(set("abcd"))
    assert made is not None
    assert made.epoch == 1
    assert made.coordinator == "a"
    assert made.topology.members == ("a", "b", "c", "d")
    assert coordination.agreed == made
    assert made.topology == compute("abcd", coordination.costs(set("abcd")), PARAMS)


def test_nothing_changed_means_no_recomputation() -> None:
    coordination = _coordination("a", "abcd")
    first = coordination.decide(set("abcd"))
    assert first is not None
    assert coordination.decide(set("abcd")) is None
    assert coordination.decide(list("dcba")) is None
    assert coordination.agreed == first


def test_noise_is_not_a_change() -> None:
    # A 1 ms link measured at 4 ms is four times dearer, but within the noise floor.
    coordination = _coordination("a", "abcd", cost=0.001)
    assert coordination.decide(set("abcd")) is not None
    jitter = 0.001 + NOISE * 0.8
    assert coordination.offer_row(_row("b", 2, {**_mesh("abcd", 0.001)["b"], "c": jitter}))
    assert coordination.decide(set("abcd")) is None
    assert coordination.agreed is not None
    assert coordination.agreed.epoch == 1


def test_a_small_relative_change_is_not_a_change() -> None:
    coordination = _coordination("a", "abcd", cost=1.0)
    assert coordination.decide(set("abcd")) is not None
    coordination.offer_row(_row("b", 2, {**_mesh("abcd", 1.0)["b"], "c": 1.2}))
    assert coordination.decide(set("abcd")) is None


def test_a_large_cost_change_recomputes_with_the_next_epoch() -> None:
    coordination = _coordination("a", "abcd", cost=0.05)
    first = coordination.decide(set("abcd"))
    assert first is not None
    coordination.offer_row(_row("b", 2, {**_mesh("abcd", 0.05)["b"], "c": 2.0}))
    second = coordination.decide(set("abcd"))
    assert second is not None
    assert second.epoch == 2
    assert second.coordinator == "a"
    assert ("b", "c") not in second.topology.edges  # the dear link is avoided
    assert coordination.decide(set("abcd")) is None  # the new costs are the new basis


def test_a_member_joining_or_leaving_recomputes() -> None:
    coordination = _coordination("a", "abcde")
    first = coordination.decide(set("abcd"))
    assert first is not None
    joined = coordination.decide(set("abcde"))
    assert joined is not None
    assert joined.epoch == 2
    assert joined.topology.members == tuple("abcde")
    left = coordination.decide(set("abce"))
    assert left is not None
    assert left.epoch == 3
    assert left.topology.members == tuple("abce")
    epochs = [first.epoch, joined.epoch, left.epoch]
    assert epochs == sorted(set(epochs))


def test_a_link_measured_for_the_first_time_is_published_even_with_the_same_edges() -> None:
    coordination = Coordination("a", PARAMS, THRESHOLD)
    coordination.offer_row(_row("a", 1, {"b": 0.05}))
    coordination.offer_row(_row("b", 1, {"a": 0.05}))
    coordination.offer_row(_row("c", 1, {}))
    first = coordination.decide(set("abc"))
    assert first is not None
    coordination.offer_row(_row("c", 2, {"a": 0.05}))
    made = coordination.decide(set("abc"))
    assert made is not None
    assert made.epoch == 2
    assert made.topology.edges == first.topology.edges  # the triangle, now with its costs
    assert made.topology.total_cost < first.topology.total_cost


def test_a_recomputed_topology_replaces_the_agreed_one_only_when_clearly_better() -> None:
    members = "abcdef"
    near = {(x, y): 0.01 for x in members for y in members if x != y}
    coordination = Coordination("a", PARAMS, THRESHOLD)
    for n, member in enumerate(members):
        costs = {peer: near[member, peer] for peer in members if peer != member}
        coordination.offer_row(_row(member, n + 1, costs))
    first = coordination.decide(set(members))
    assert first is not None
    # Every link of the agreed topology becomes dear: a different one is far better.
    dear = set(first.topology.edges)
    for n, member in enumerate(members):
        costs = {
            peer: 1.0 if tuple(sorted((member, peer))) in dear else 0.01
            for peer in members
            if peer != member
        }
        coordination.offer_row(_row(member, 100 + n, costs))
    second = coordination.decide(set(members))
    assert second is not None
    assert second.epoch == first.epoch + 1
    assert not set(second.topology.edges) <= dear
    # Costs jitter by 30% (above the threshold) around the same values: the agreed stays.
    for n, member in enumerate(members):
        costs = {
            peer: (1.3 if tuple(sorted((member, peer))) in dear else 0.013)
            for peer in members
            if peer != member
        }
        coordination.offer_row(_row(member, 200 + n, costs))
    assert coordination.decide(set(members)) is None
    assert coordination.agreed == second


def test_a_coordinator_keeps_a_topology_it_adopted_while_it_fits() -> None:
    coordination = _coordination("a", "abcd")
    mine = coordination.decide(set("abcd"))
    assert mine is not None
    adopted = Agreed(7, "b", mine.topology)
    assert coordination.adopt(adopted)
    # Same members, same costs: computing again gives nothing better, so nothing is sent.
    assert coordination.decide(set("abcd")) is None
    assert coordination.agreed == adopted
    # A member joining is a change every member must see.
    joined = coordination.decide(set("abcde"))
    assert joined is not None
    assert joined.epoch == 8


# Adopting ----------------------------------------------------------------------------------


def test_adopt_keeps_the_highest_epoch() -> None:
    coordination = Coordination("z", PARAMS, THRESHOLD)
    assert coordination.adopt(_agreed(2, "b"))
    assert not coordination.adopt(_agreed(1, "b"))
    assert not coordination.adopt(_agreed(1, "zz"))  # a lower epoch loses whoever made it
    assert not coordination.adopt(_agreed(2, "b"))  # the same again
    assert coordination.agreed is not None
    assert coordination.agreed.rank == (2, "b")
    assert coordination.adopt(_agreed(3, "a"))
    assert coordination.agreed.rank == (3, "a")


def test_with_equal_epochs_the_larger_coordinator_id_wins() -> None:
    one = Coordination("z", PARAMS, THRESHOLD)
    assert one.adopt(_agreed(4, "a"))
    assert one.adopt(_agreed(4, "b"))
    assert not one.adopt(_agreed(4, "a"))
    other = Coordination("z", PARAMS, THRESHOLD)
    assert other.adopt(_agreed(4, "b"))
    assert not other.adopt(_agreed(4, "a"))
    assert one.agreed == other.agreed
    assert one.agreed is not None
    assert one.agreed.coordinator == "b"


def test_equal_ranks_with_different_topologies_settle_on_one() -> None:
    # A coordinator that restarted may number a different topology like an earlier one.
    first = Agreed(3, "a", _topology("abcd", 1.0))
    second = Agreed(3, "a", _topology("abcde", 1.0))
    assert first.rank == second.rank
    assert first != second
    one = Coordination("z", PARAMS, THRESHOLD)
    other = Coordination("z", PARAMS, THRESHOLD)
    for agreed in (first, second):
        one.adopt(agreed)
    for agreed in (second, first):
        other.adopt(agreed)
    assert one.agreed is not None
    assert one.agreed == other.agreed
    assert not one.adopt(one.agreed)  # the one held again changes nothing


def test_every_order_of_the_same_messages_ends_with_the_same_topology() -> None:
    messages = [
        _agreed(1, "a"),
        _agreed(2, "a", "abc"),
        _agreed(2, "c", "bcd"),
        _agreed(3, "b", "abcde"),
        _agreed(3, "a", "ab"),
        Agreed(3, "b", _topology("abcde", 2.0)),
    ]
    results = set()
    for order in itertools.permutations(messages):
        coordination = Coordination("m", PARAMS, THRESHOLD)
        for agreed in order:
            coordination.adopt(agreed)
        assert coordination.agreed is not None
        results.add(coordination.agreed)
    assert len(results) == 1
    (winner,) = results
    assert winner.rank == (3, "b")


def test_adopting_fills_a_member_without_a_topology() -> None:
    coordination = Coordination("c", PARAMS, THRESHOLD)
    offered = _agreed(1, "a")
    assert coordination.adopt(offered)
    assert coordination.agreed is offered


# Neighbours --------------------------------------------------------------------------------


def test_without_a_topology_a_member_floods_to_every_usable_member() -> None:
    coordination = Coordination("b", PARAMS, THRESHOLD)
    assert coordination.neighbours({"d", "a", "b", "c"}) == ("a", "c", "d")
    assert coordination.neighbours({"b"}) == ()


def test_neighbours_come_from_the_agreed_topology() -> None:
    coordination = _coordination("a", "abcdef")
    made = coordination.decide(set("abcdef"))
    assert made is not None
    expected = made.topology.neighbours("a")
    assert 2 <= len(expected) < 5  # not everyone: the topology is used
    assert coordination.neighbours(set("abcdef")) == expected
    gone = expected[0]
    assert coordination.neighbours(set("abcdef") - {gone}) == expected[1:]


def test_a_member_outside_the_agreed_topology_floods_to_everyone() -> None:
    coordination = Coordination("e", PARAMS, THRESHOLD)
    coordination.adopt(_agreed(1, "a", "abcd"))
    assert coordination.neighbours(set("abcde")) == ("a", "b", "c", "d")


def test_a_restarted_coordinator_numbers_above_the_epoch_a_member_kept() -> None:
    params = TopologyParams(iterations=10)
    members = ("a", "b", "c")
    before = Coordination("a", params, 0.25)
    kept = before.decide(members)
    assert kept is not None
    member = Coordination("b", params, 0.25)
    for n in range(6):  # the coordinator's earlier life: a member joins and leaves each time
        made = before.decide((*members, f"x{n}")) or kept
        member.adopt(made)
    held = member.agreed
    assert held is not None
    assert held.epoch >= 2
    restarted = Coordination("a", params, 0.25)
    first = restarted.decide(members)
    assert first is not None
    assert first.epoch == 1
    assert not member.adopt(first)
    restarted.refused(held.epoch)
    again = restarted.decide(members)
    assert again is not None
    assert again.epoch == held.epoch + 1
    assert member.adopt(again)
