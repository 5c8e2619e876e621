"""Peer selection (RFC 2187, Squid's order): direct rules, the ICP round, parent misses,
the fallback parents, timeouts and domain delegation, driven with explicit times."""

from __future__ import annotations

from typing import Any

import pytest

from harvest_cache.hierarchy.health import PeerHealth
from harvest_cache.hierarchy.icp import Opcode
from harvest_cache.hierarchy.peers import DirectRule, Peer
from harvest_cache.hierarchy.route import DIRECT, Facts, Hop, Policy, Route, Selection

NOW = 100.0
HOST = "www.example.com"
EVERYTHING = (DirectRule(),)


def peer(name: str, **kw: Any) -> Peer:
    return Peer(name, f"{name}.example", **kw)


def parent(name: str, **kw: Any) -> Peer:
    return peer(name, role="parent", **kw)


def sibling(name: str, **kw: Any) -> Peer:
    return peer(name, role="sibling", **kw)


def request(host: str = HOST, *, hierarchical: bool = True, loop: bool = False) -> Facts:
    return Facts("GET", f"http://{host}/a", host, hierarchical, loop)


def dead() -> PeerHealth:
    """Left ICP queries unanswered for longer than dead_after, as of NOW."""
    h = PeerHealth(dead_after=10.0)
    h.queried(NOW - 20.0)
    return h


def down() -> PeerHealth:
    """A TCP connection to it failed a moment before NOW."""
    h = PeerHealth(retry_after=30.0)
    h.connect_failed(NOW - 1.0)
    return h


def select(
    *peers: Peer,
    facts: Facts | None = None,
    health: dict[str, PeerHealth] | None = None,
    **policy: Any,
) -> Selection:
    given = health or {}
    records = {p.name: given.get(p.name) or PeerHealth() for p in peers}
    return Selection(facts or request(), Policy(tuple(peers), **policy), records, NOW)


def codes(route: Route | None) -> list[tuple[str | None, str]]:
    assert route is not None, "no route decided"
    return [(h.peer.name if h.peer else None, h.code) for h in route.hops]


def at(ms: float) -> float:
    """NOW plus ``ms`` milliseconds."""
    return NOW + ms / 1000


# -- direct at once ----------------------------------------------------------------------------


def test_a_loop_goes_direct_even_under_never_direct() -> None:
    s = select(parent("p1"), sibling("s1"), facts=request(loop=True), never_direct=EVERYTHING)
    assert s.route == Route((DIRECT,))
    assert s.queries == ()
    assert s.unanswered == ()


def test_always_direct_goes_direct_and_beats_never_direct() -> None:
    rules = (DirectRule(domains=(".example.com",)),)
    s = select(parent("p1"), always_direct=rules, never_direct=EVERYTHING)
    assert s.route == Route((DIRECT,))
    assert s.queries == ()


def test_always_direct_that_does_not_match_leaves_the_hierarchy_in_use() -> None:
    rules = (DirectRule(domains=(".example.org",)), DirectRule(methods=("POST",)))
    s = select(parent("p1"), always_direct=rules)
    assert s.route is None
    assert [p.name for p in s.queries] == ["p1"]


def test_no_peers_goes_direct() -> None:
    s = select()
    assert s.route == Route((DIRECT,))
    assert s.queries == ()


def test_no_peers_under_never_direct_is_no_route() -> None:
    s = select(never_direct=EVERYTHING)
    assert s.route is not None
    assert s.route.hops == ()
    assert s.route.failure == "NO_DIRECT_FAIL"


def test_only_siblings_under_never_direct_is_no_route() -> None:
    s = select(sibling("s1", no_query=True), never_direct=EVERYTHING)
    assert s.route is not None
    assert s.route.hops == ()


def test_a_never_direct_rule_that_does_not_match_allows_direct() -> None:
    s = select(parent("p1", no_query=True), never_direct=(DirectRule(methods=("POST",)),))
    assert codes(s.route) == [("p1", "SINGLE_PARENT"), (None, "HIER_DIRECT")]


def test_non_hierarchical_request_asks_no_peer_and_goes_direct() -> None:
    s = select(parent("p1"), parent("p2"), sibling("s1"), facts=request(hierarchical=False))
    assert s.queries == ()
    assert s.route == Route((DIRECT,))


def test_non_hierarchical_request_under_never_direct_goes_to_parents_unasked() -> None:
    s = select(
        parent("p1"),
        sibling("s1"),
        parent("p2"),
        facts=request(hierarchical=False),
        never_direct=EVERYTHING,
    )
    assert s.queries == ()
    assert codes(s.route) == [("p1", "FIRST_UP_PARENT"), ("p2", "ANY_OLD_PARENT")]


# -- who is asked ------------------------------------------------------------------------------


def test_queries_go_to_every_queried_peer_not_down() -> None:
    peers = [
        parent("no_icp", icp_port=0),
        parent("no_query", no_query=True),
        parent("down"),
        parent("dead"),
        parent("p1"),
        sibling("s1"),
        sibling("s_no_icp", icp_port=0),
    ]
    s = select(*peers, health={"down": down(), "dead": dead()})
    assert s.route is None
    assert [p.name for p in s.queries] == ["dead", "p1", "s1"]
    assert [p.name for p in s.unanswered] == ["p1", "s1"]
    assert s.deadline > NOW


def test_a_peer_down_no_longer_is_asked_again() -> None:
    h = PeerHealth(retry_after=30.0)
    h.connect_failed(NOW - 30.0)
    s = select(parent("p1"), health={"p1": h})
    assert [p.name for p in s.queries] == ["p1"]


def test_all_queried_peers_dead_decides_at_once_but_still_asks_them() -> None:
    s = select(parent("p1"), sibling("s1"), health={"p1": dead(), "s1": dead()})
    assert [p.name for p in s.queries] == ["p1", "s1"]
    assert s.unanswered == ()
    # Dead parents are not offered while the origin may be reached.
    assert codes(s.route) == [(None, "HIER_DIRECT")]


def test_no_queried_peer_decides_at_once() -> None:
    s = select(parent("p1", no_query=True), parent("p2", icp_port=0))
    assert s.queries == ()
    assert codes(s.route) == [
        ("p1", "FIRST_UP_PARENT"),
        ("p2", "ANY_OLD_PARENT"),
        (None, "HIER_DIRECT"),
    ]


# -- ICP replies -------------------------------------------------------------------------------


@pytest.mark.parametrize("opcode", [Opcode.HIT, Opcode.HIT_OBJ])
def test_a_sibling_hit_wins_at_once(opcode: Opcode) -> None:
    p1, p2, s1 = parent("p1"), parent("p2"), sibling("s1")
    s = select(p1, p2, s1)
    route = s.reply(s1, opcode, None, at(3))
    assert route is s.route
    assert codes(route) == [
        ("s1", "SIBLING_HIT"),
        ("p1", "FIRST_UP_PARENT"),
        ("p2", "ANY_OLD_PARENT"),
        (None, "HIER_DIRECT"),
    ]
    assert route is not None
    assert route.hops[0].only_if_cached
    assert not route.hops[1].only_if_cached
    assert [p.name for p in s.unanswered] == ["p1", "p2"]


@pytest.mark.parametrize("opcode", [Opcode.HIT, Opcode.HIT_OBJ])
def test_a_parent_hit_wins_at_once_and_is_not_offered_twice(opcode: Opcode) -> None:
    p1, p2, s1 = parent("p1"), parent("p2"), sibling("s1")
    s = select(p1, p2, s1)
    route = s.reply(p2, opcode, 40, at(5))
    assert codes(route) == [
        ("p2", "PARENT_HIT"),
        ("p1", "FIRST_UP_PARENT"),
        (None, "HIER_DIRECT"),
    ]


def test_a_hit_after_a_parent_miss_keeps_the_miss_as_the_next_hop() -> None:
    p1, p2, s1 = parent("p1"), parent("p2"), sibling("s1")
    s = select(p1, p2, s1)
    assert s.reply(p2, Opcode.MISS, None, at(2)) is None
    assert codes(s.reply(s1, Opcode.HIT, None, at(4))) == [
        ("s1", "SIBLING_HIT"),
        ("p2", "FIRST_PARENT_MISS"),
        ("p1", "FIRST_UP_PARENT"),
        (None, "HIER_DIRECT"),
    ]


def test_a_sibling_miss_counts_for_nothing() -> None:
    s1 = sibling("s1")
    s = select(s1)
    assert codes(s.reply(s1, Opcode.MISS, 5, at(1))) == [(None, "HIER_DIRECT")]


def test_a_sibling_miss_is_never_a_hop_even_under_never_direct() -> None:
    s1, s2 = sibling("s1"), sibling("s2")
    s = select(s1, s2, never_direct=EVERYTHING)
    assert s.reply(s1, Opcode.MISS, 5, at(1)) is None
    route = s.reply(s2, Opcode.MISS, None, at(2))
    assert route is not None
    assert route.hops == ()


def test_sibling_and_parent_misses() -> None:
    p1, s1 = parent("p1"), sibling("s1")
    s = select(s1, p1)
    assert s.reply(s1, Opcode.MISS, 1, at(1)) is None
    assert codes(s.reply(p1, Opcode.MISS, None, at(9))) == [
        ("p1", "FIRST_PARENT_MISS"),
        (None, "HIER_DIRECT"),
    ]


def test_the_route_waits_for_every_peer_waited_for() -> None:
    p1, p2, p3 = parent("p1"), parent("p2"), parent("p3")
    s = select(p1, p2, p3)
    assert s.reply(p2, Opcode.MISS, None, at(1)) is None
    assert s.route is None
    assert [p.name for p in s.unanswered] == ["p1", "p3"]
    assert s.reply(p3, Opcode.MISS, None, at(2)) is None
    assert [p.name for p in s.unanswered] == ["p1"]
    route = s.reply(p1, Opcode.MISS, None, at(3))
    assert route is not None
    assert s.route is route
    assert s.unanswered == ()
    assert codes(route) == [
        ("p2", "FIRST_PARENT_MISS"),
        ("p1", "FIRST_UP_PARENT"),
        ("p3", "ANY_OLD_PARENT"),
        (None, "HIER_DIRECT"),
    ]


@pytest.mark.parametrize("opcode", [Opcode.ERR, Opcode.DENIED, Opcode.MISS_NOFETCH])
def test_a_refusal_ends_the_wait_and_leaves_the_peer_out(opcode: Opcode) -> None:
    p1, p2 = parent("p1"), parent("p2")
    s = select(p1, p2)
    assert s.reply(p1, opcode, 10, at(1)) is None
    assert s.unanswered == (p2,)
    assert codes(s.reply(p2, Opcode.MISS, None, at(8))) == [
        ("p2", "FIRST_PARENT_MISS"),
        (None, "HIER_DIRECT"),
    ]


@pytest.mark.parametrize("opcode", [Opcode.ERR, Opcode.DENIED, Opcode.MISS_NOFETCH])
def test_a_refusal_alone_decides_once_nobody_else_is_waited_for(opcode: Opcode) -> None:
    p1 = parent("p1")
    s = select(p1, parent("p2", no_query=True))
    route = s.reply(p1, opcode, None, at(1))
    assert [name for name, _ in codes(route)] == ["p2", None]


@pytest.mark.parametrize("opcode", [Opcode.ERR, Opcode.DENIED, Opcode.MISS_NOFETCH])
def test_a_refusing_parent_is_tried_last_under_never_direct(opcode: Opcode) -> None:
    p1, p2, p3 = parent("p1"), parent("p2"), parent("p3", no_query=True)
    s = select(p1, p2, p3, never_direct=EVERYTHING)
    assert s.reply(p1, opcode, None, at(1)) is None
    route = codes(s.reply(p2, Opcode.MISS, None, at(2)))
    assert [name for name, _ in route] == ["p2", "p3", "p1"]
    assert route[0] == ("p2", "FIRST_PARENT_MISS")
    assert route[2] == ("p1", "ANY_OLD_PARENT")


@pytest.mark.parametrize(
    ("weight2", "chosen"),
    [(1, "p1"), (3, "p2")],  # p2's 20 ms / 3 beats p1's 10 ms
)
def test_first_parent_miss_is_the_earliest_divided_by_weight(weight2: int, chosen: str) -> None:
    p1, p2 = parent("p1"), parent("p2", weight=weight2)
    s = select(p1, p2)
    assert s.reply(p1, Opcode.MISS, None, at(10)) is None
    route = s.reply(p2, Opcode.MISS, None, at(20))
    assert codes(route)[0] == (chosen, "FIRST_PARENT_MISS")


def test_first_parent_miss_goes_by_elapsed_time_not_order_of_arrival() -> None:
    p1, p2 = parent("p1", weight=10), parent("p2")
    s = select(p1, p2)
    assert s.reply(p2, Opcode.MISS, None, at(5)) is None
    # p1 answers later but weighs 10: 40 ms / 10 = 4 ms beats p2's 5 ms.
    assert codes(s.reply(p1, Opcode.MISS, None, at(40)))[0] == ("p1", "FIRST_PARENT_MISS")


def test_closest_parent_miss_beats_an_earlier_miss_without_rtt() -> None:
    p1, p2 = parent("p1"), parent("p2")
    s = select(p1, p2)
    assert s.reply(p1, Opcode.MISS, None, at(1)) is None
    assert codes(s.reply(p2, Opcode.MISS, 80, at(30))) == [
        ("p2", "CLOSEST_PARENT_MISS"),
        ("p1", "FIRST_UP_PARENT"),
        (None, "HIER_DIRECT"),
    ]


def test_closest_parent_miss_is_the_smallest_reported_rtt_even_if_later() -> None:
    p1, p2, p3 = parent("p1"), parent("p2"), parent("p3")
    s = select(p1, p2, p3)
    assert s.reply(p1, Opcode.MISS, 100, at(1)) is None
    assert s.reply(p2, Opcode.MISS, 60, at(2)) is None
    route = s.reply(p3, Opcode.MISS, 20, at(50))
    assert codes(route)[0] == ("p3", "CLOSEST_PARENT_MISS")


@pytest.mark.parametrize(("weight2", "chosen"), [(1, "p1"), (3, "p2")])
def test_closest_parent_miss_divides_rtt_by_weight(weight2: int, chosen: str) -> None:
    p1, p2 = parent("p1"), parent("p2", weight=weight2)
    s = select(p1, p2)
    assert s.reply(p1, Opcode.MISS, 50, at(1)) is None
    # 120 ms / 3 = 40 ms beats 50 ms; 120 ms / 1 does not.
    assert codes(s.reply(p2, Opcode.MISS, 120, at(2)))[0] == (chosen, "CLOSEST_PARENT_MISS")


def test_closest_only_parent_without_rtt_is_not_chosen() -> None:
    p1, p2 = parent("p1", closest_only=True), parent("p2")
    s = select(p1, p2)
    assert s.reply(p1, Opcode.MISS, None, at(1)) is None
    assert codes(s.reply(p2, Opcode.MISS, None, at(30)))[0] == ("p2", "FIRST_PARENT_MISS")


def test_closest_only_parent_alone_without_rtt_gives_no_parent_miss() -> None:
    p1 = parent("p1", closest_only=True)
    s = select(p1, sibling("s1", no_query=True))
    route = s.reply(p1, Opcode.MISS, None, at(1))
    assert all(not code.endswith("PARENT_MISS") for _, code in codes(route))


def test_closest_only_parent_with_rtt_is_chosen() -> None:
    p1, p2 = parent("p1", closest_only=True), parent("p2")
    s = select(p1, p2)
    assert s.reply(p2, Opcode.MISS, None, at(1)) is None
    assert codes(s.reply(p1, Opcode.MISS, 30, at(9)))[0] == ("p1", "CLOSEST_PARENT_MISS")


def test_replies_from_peers_not_asked_are_ignored() -> None:
    p1, unasked, stranger = parent("p1"), parent("unasked", no_query=True), sibling("x")
    s = select(p1, unasked)
    assert s.reply(unasked, Opcode.HIT, None, at(1)) is None
    assert s.reply(stranger, Opcode.HIT, None, at(1)) is None
    assert s.reply(Peer("p1", "elsewhere.example"), Opcode.HIT, None, at(1)) is None
    assert s.route is None
    assert [p.name for p in s.unanswered] == ["p1"]
    assert codes(s.reply(p1, Opcode.MISS, None, at(3))) == [
        ("p1", "FIRST_PARENT_MISS"),
        ("unasked", "FIRST_UP_PARENT"),  # the first parent up that is not chosen already
        (None, "HIER_DIRECT"),
    ]


def test_replies_from_down_peers_are_ignored() -> None:
    p1, p2 = parent("p1"), parent("p2")
    s = select(p1, p2, health={"p1": down()})
    assert s.reply(p1, Opcode.HIT, None, at(1)) is None
    assert codes(s.reply(p2, Opcode.MISS, None, at(2)))[0] == ("p2", "FIRST_PARENT_MISS")


def test_late_replies_do_not_change_the_route() -> None:
    p1, p2, s1 = parent("p1"), parent("p2"), sibling("s1")
    s = select(p1, p2, s1)
    route = s.reply(s1, Opcode.HIT, None, at(1))
    assert s.reply(p1, Opcode.HIT, None, at(2)) is route
    assert s.reply(p2, Opcode.MISS, 1, at(3)) is route
    assert s.route is route
    assert s.expire(at(2000)) is route
    assert codes(route)[0] == ("s1", "SIBLING_HIT")


def test_late_replies_still_show_the_peer_answered() -> None:
    p1, p2, s1 = parent("p1"), parent("p2"), sibling("s1")
    s = select(p1, p2, s1)
    s.reply(s1, Opcode.HIT, None, at(1))
    assert [p.name for p in s.unanswered] == ["p1", "p2"]
    s.reply(p2, Opcode.MISS, None, at(2))
    assert [p.name for p in s.unanswered] == ["p1"]


# -- dead peers --------------------------------------------------------------------------------


def test_dead_peers_are_asked_but_not_waited_for() -> None:
    p_dead, p1 = parent("p_dead"), parent("p1")
    s = select(p_dead, p1, health={"p_dead": dead()})
    assert [p.name for p in s.queries] == ["p_dead", "p1"]
    assert [p.name for p in s.unanswered] == ["p1"]
    assert codes(s.reply(p1, Opcode.MISS, None, at(1))) == [
        ("p1", "FIRST_PARENT_MISS"),
        (None, "HIER_DIRECT"),
    ]


def test_a_dead_peers_answer_before_the_decision_counts() -> None:
    p_dead, p1 = parent("p_dead"), parent("p1")
    s = select(p_dead, p1, health={"p_dead": dead()})
    assert s.reply(p_dead, Opcode.MISS, None, at(1)) is None
    assert codes(s.reply(p1, Opcode.MISS, None, at(2)))[0] == ("p_dead", "FIRST_PARENT_MISS")


def test_a_dead_siblings_hit_still_wins() -> None:
    s_dead, p1 = sibling("s_dead"), parent("p1")
    s = select(s_dead, p1, health={"s_dead": dead()})
    assert codes(s.reply(s_dead, Opcode.HIT, None, at(1)))[0] == ("s_dead", "SIBLING_HIT")


# -- the wait ----------------------------------------------------------------------------------


def test_expire_prefixes_every_code_with_timeout() -> None:
    p1, p2, s1 = parent("p1"), parent("p2"), sibling("s1")
    s = select(p1, p2, s1)
    assert s.reply(p2, Opcode.MISS, None, at(1)) is None
    route = s.expire(s.deadline)
    assert s.route is route
    assert codes(route) == [
        ("p2", "TIMEOUT_FIRST_PARENT_MISS"),
        ("p1", "TIMEOUT_FIRST_UP_PARENT"),
        (None, "TIMEOUT_HIER_DIRECT"),
    ]
    assert [p.name for p in s.unanswered] == ["p1", "s1"]
    assert s.expire(s.deadline + 1) is route


def test_expire_with_no_reply_falls_back_on_parents() -> None:
    p1, p2 = parent("p1"), parent("p2")
    s = select(p1, p2)
    assert codes(s.expire(s.deadline)) == [
        ("p1", "TIMEOUT_FIRST_UP_PARENT"),
        ("p2", "TIMEOUT_ANY_OLD_PARENT"),
        (None, "TIMEOUT_HIER_DIRECT"),
    ]
    assert [p.name for p in s.unanswered] == ["p1", "p2"]


def test_expire_under_never_direct_with_a_closest_miss() -> None:
    p1, p2 = parent("p1"), parent("p2")
    s = select(p1, p2, never_direct=EVERYTHING)
    assert s.reply(p2, Opcode.MISS, 7, at(1)) is None
    assert codes(s.expire(s.deadline)) == [
        ("p2", "TIMEOUT_CLOSEST_PARENT_MISS"),
        ("p1", "TIMEOUT_FIRST_UP_PARENT"),
    ]


def test_a_reply_after_expiry_changes_nothing() -> None:
    p1 = parent("p1")
    s = select(p1)
    route = s.expire(s.deadline)
    assert s.reply(p1, Opcode.HIT, None, s.deadline + 0.001) is route
    assert codes(route) == [("p1", "TIMEOUT_SINGLE_PARENT"), (None, "TIMEOUT_HIER_DIRECT")]


def rtt(seconds: float | None) -> PeerHealth:
    h = PeerHealth()
    if seconds is not None:
        h.replied(seconds, hit=False)
    return h


@pytest.mark.parametrize(
    ("rtts", "policy", "wait"),
    [
        ((None, None), {}, 2.0),
        ((None,), {"max_timeout": 0.5}, 0.5),
        ((0.010, 0.030), {}, 0.040),
        ((0.100, None), {}, 0.200),
        ((0.001, 0.001), {}, 0.005),
        ((0.001,), {"min_timeout": 0.05}, 0.05),
        ((3.0, 1.0), {}, 2.0),
        ((0.2,), {"max_timeout": 0.3}, 0.3),
    ],
)
def test_the_wait_is_twice_the_mean_rtt_within_bounds(
    rtts: tuple[float | None, ...], policy: dict[str, Any], wait: float
) -> None:
    peers = [parent(f"p{i}") for i in range(len(rtts))]
    health = {p.name: rtt(r) for p, r in zip(peers, rtts, strict=True)}
    s = select(*peers, health=health, **policy)
    assert s.route is None
    assert s.deadline == pytest.approx(NOW + wait)


def test_the_wait_counts_only_the_peers_asked() -> None:
    p1, p2 = parent("p1"), parent("p2", no_query=True)
    s = select(p1, p2, health={"p1": rtt(0.02), "p2": rtt(0.5)})
    assert s.deadline == pytest.approx(NOW + 0.04)


# -- fallback parents --------------------------------------------------------------------------


def test_round_robin_parent_is_the_least_used() -> None:
    r1 = parent("r1", round_robin=True, no_query=True)
    r2 = parent("r2", round_robin=True, no_query=True)
    p3 = parent("p3", no_query=True)
    s = select(r1, r2, p3, health={"r1": PeerHealth(uses=3), "r2": PeerHealth(uses=1)})
    assert codes(s.route) == [
        ("r2", "ROUNDROBIN_PARENT"),
        ("p3", "FIRST_UP_PARENT"),
        ("r1", "ANY_OLD_PARENT"),
        (None, "HIER_DIRECT"),
    ]


@pytest.mark.parametrize(
    ("uses1", "uses2", "chosen"),
    [(4, 2, "r1"), (5, 1, "r2"), (8, 2, "r1"), (9, 2, "r2"), (0, 0, "r1")],
)
def test_round_robin_divides_uses_by_weight(uses1: int, uses2: int, chosen: str) -> None:
    # r1 weighs 4: 8 uses count as 2, like r2's 2 (a tie goes to the first).
    r1 = parent("r1", round_robin=True, no_query=True, weight=4)
    r2 = parent("r2", round_robin=True, no_query=True)
    s = select(r1, r2, health={"r1": PeerHealth(uses=uses1), "r2": PeerHealth(uses=uses2)})
    assert codes(s.route)[0] == (chosen, "ROUNDROBIN_PARENT")


def test_round_robin_skips_dead_and_down_parents() -> None:
    r1 = parent("r1", round_robin=True)  # queried, dead: not waited for
    r2 = parent("r2", round_robin=True, no_query=True)
    r3 = parent("r3", round_robin=True, no_query=True)
    s = select(
        r1,
        r2,
        r3,
        health={"r1": dead(), "r2": down(), "r3": PeerHealth(uses=50)},
    )
    assert codes(s.route) == [("r3", "ROUNDROBIN_PARENT"), (None, "HIER_DIRECT")]


def test_single_parent() -> None:
    s = select(sibling("s1", no_query=True), parent("p1", no_query=True))
    assert codes(s.route) == [("p1", "SINGLE_PARENT"), (None, "HIER_DIRECT")]


def test_single_parent_down_is_skipped_unless_never_direct() -> None:
    p1 = parent("p1", no_query=True)
    assert codes(select(p1, health={"p1": down()}).route) == [(None, "HIER_DIRECT")]
    s = select(p1, health={"p1": down()}, never_direct=EVERYTHING)
    assert codes(s.route) == [("p1", "ANY_OLD_PARENT")]


def test_first_up_parent_skips_down_and_dead_ones() -> None:
    p_down = parent("p_down", no_query=True)
    p_dead = parent("p_dead")
    p1, p2 = parent("p1", no_query=True), parent("p2", no_query=True)
    s = select(p_down, p_dead, p1, p2, health={"p_down": down(), "p_dead": dead()})
    assert codes(s.route) == [
        ("p1", "FIRST_UP_PARENT"),
        ("p2", "ANY_OLD_PARENT"),
        (None, "HIER_DIRECT"),
    ]


def test_default_parent_comes_after_the_first_up() -> None:
    d1 = parent("d1", default=True, no_query=True)
    p1, p2 = parent("p1", no_query=True), parent("p2", no_query=True)
    s = select(d1, p1, p2)
    assert codes(s.route) == [
        ("p1", "FIRST_UP_PARENT"),
        ("d1", "DEFAULT_PARENT"),
        ("p2", "ANY_OLD_PARENT"),
        (None, "HIER_DIRECT"),
    ]


def test_every_default_parent_up_is_offered_in_order() -> None:
    d1 = parent("d1", default=True, no_query=True)
    d2 = parent("d2", default=True, no_query=True)
    d3 = parent("d3", default=True, no_query=True)
    s = select(d1, d2, d3, health={"d2": down()})
    assert codes(s.route) == [
        ("d1", "DEFAULT_PARENT"),
        ("d3", "DEFAULT_PARENT"),
        (None, "HIER_DIRECT"),
    ]


def test_a_dead_default_parent_is_skipped_when_direct_is_allowed() -> None:
    d1 = parent("d1", default=True)  # queried, dead: not waited for
    p1 = parent("p1", no_query=True)
    s = select(d1, p1, health={"d1": dead()})
    assert codes(s.route) == [("p1", "FIRST_UP_PARENT"), (None, "HIER_DIRECT")]


def test_round_robin_single_first_up_default_and_any_old_in_that_order() -> None:
    r1 = parent("r1", round_robin=True, no_query=True)
    d1 = parent("d1", default=True, no_query=True)
    p1, p2 = parent("p1", no_query=True), parent("p2", no_query=True)
    s = select(d1, p1, r1, p2)
    assert codes(s.route) == [
        ("r1", "ROUNDROBIN_PARENT"),
        ("p1", "FIRST_UP_PARENT"),
        ("d1", "DEFAULT_PARENT"),
        ("p2", "ANY_OLD_PARENT"),
        (None, "HIER_DIRECT"),
    ]


def test_never_direct_tries_dead_and_down_parents_last() -> None:
    p_down = parent("p_down", no_query=True)
    p_dead = parent("p_dead")
    p1 = parent("p1", no_query=True)
    health = {"p_down": down(), "p_dead": dead()}
    allowed = select(p_down, p_dead, p1, health=health)
    assert codes(allowed.route) == [("p1", "FIRST_UP_PARENT"), (None, "HIER_DIRECT")]
    forced = select(p_down, p_dead, p1, health=health, never_direct=EVERYTHING)
    assert codes(forced.route) == [
        ("p1", "FIRST_UP_PARENT"),
        ("p_down", "ANY_OLD_PARENT"),
        ("p_dead", "ANY_OLD_PARENT"),
    ]


def test_never_direct_with_only_dead_or_down_parents_still_tries_them() -> None:
    p_down, p_dead = parent("p_down", no_query=True), parent("p_dead")
    s = select(p_down, p_dead, health={"p_down": down(), "p_dead": dead()}, never_direct=EVERYTHING)
    assert codes(s.route) == [("p_down", "ANY_OLD_PARENT"), ("p_dead", "ANY_OLD_PARENT")]


def test_never_direct_after_a_parent_miss_offers_no_origin() -> None:
    p1, p2 = parent("p1"), parent("p2")
    s = select(p1, p2, never_direct=EVERYTHING)
    assert s.reply(p1, Opcode.MISS, None, at(1)) is None
    assert codes(s.reply(p2, Opcode.MISS, None, at(2))) == [
        ("p1", "FIRST_PARENT_MISS"),
        ("p2", "FIRST_UP_PARENT"),
    ]


# -- domains -----------------------------------------------------------------------------------


def delegation() -> tuple[Peer, Peer, Peer]:
    return parent("general"), parent("edu", domains=(".edu",)), sibling("side")


@pytest.mark.parametrize("host", ["edu", "www.mit.edu"])
def test_a_parent_bound_to_a_domain_takes_its_requests_alone(host: str) -> None:
    general, edu, side = delegation()
    s = select(general, edu, side, facts=request(host))
    assert s.queries == (edu,)
    assert codes(s.reply(edu, Opcode.MISS, None, at(1))) == [
        ("edu", "FIRST_PARENT_MISS"),
        (None, "HIER_DIRECT"),
    ]


def test_a_bound_parent_down_leaves_no_other_peer_for_its_domain() -> None:
    general, edu, side = delegation()
    s = select(
        general,
        edu,
        side,
        facts=request("mit.edu"),
        health={"edu": down()},
        never_direct=EVERYTHING,
    )
    assert s.queries == ()
    assert codes(s.route) == [("edu", "ANY_OLD_PARENT")]


def test_a_bound_parent_is_not_used_for_other_domains() -> None:
    general, edu, side = delegation()
    for host in ("example.com", "xedu", "edu.example.com"):
        s = select(general, edu, side, facts=request(host), never_direct=EVERYTHING)
        assert s.queries == (general, side)
        assert s.reply(side, Opcode.MISS, None, at(1)) is None
        assert codes(s.reply(general, Opcode.MISS, None, at(2))) == [
            ("general", "FIRST_PARENT_MISS")
        ]


def test_a_bound_parent_is_not_a_fallback_for_other_domains() -> None:
    general, edu = parent("general", no_query=True), parent("edu", domains=(".edu",))
    s = select(general, edu, facts=request("example.com"), never_direct=EVERYTHING)
    assert codes(s.route) == [("general", "SINGLE_PARENT")]


def test_a_sibling_bound_to_a_domain_is_asked_only_for_it() -> None:
    p1, side = parent("p1"), sibling("side", domains=(".org",))
    s = select(p1, side, facts=request("example.org"))
    assert s.queries == (p1, side)
    s = select(p1, side, facts=request("example.com"))
    assert s.queries == (p1,)


def test_a_bound_sibling_does_not_take_requests_alone() -> None:
    p1, side = parent("p1"), sibling("side", domains=(".org",))
    s = select(p1, side, facts=request("www.example.org"))
    assert s.reply(side, Opcode.MISS, None, at(1)) is None
    assert codes(s.reply(p1, Opcode.MISS, None, at(2)))[0] == ("p1", "FIRST_PARENT_MISS")


def test_hops() -> None:
    p1, s1 = parent("p1"), sibling("s1")
    assert Hop(None, "HIER_DIRECT") == DIRECT
    assert not DIRECT.only_if_cached
    assert not Hop(p1, "FIRST_UP_PARENT").only_if_cached
    assert Hop(s1, "SIBLING_HIT").only_if_cached
    assert Route(()).failure == "NO_DIRECT_FAIL"


# -- cache digests -----------------------------------------------------------------------------


def with_digests(*peers: Peer, digests: dict[str, bool], **kw: Any) -> Selection:
    health: dict[str, PeerHealth] = kw.pop("health", {})
    records = {p.name: health.get(p.name) or PeerHealth() for p in peers}
    return Selection(request(), Policy(tuple(peers), **kw), records, NOW, digests)


def test_a_digest_hit_routes_at_once_without_queries() -> None:
    p1, s1 = parent("p1"), sibling("s1")
    s = with_digests(p1, s1, digests={"s1": True, "p1": False})
    assert s.queries == ()
    assert codes(s.route) == [
        ("s1", "CD_SIBLING_HIT"),
        ("p1", "SINGLE_PARENT"),
        (None, "HIER_DIRECT"),
    ]
    assert s.route is not None
    assert s.route.hops[0].by_digest
    assert s.route.hops[0].only_if_cached  # a sibling is still asked for a hit alone


def test_of_several_digest_hits_the_nearest_peer_wins() -> None:
    far, near = PeerHealth(), PeerHealth()
    far.replied(0.050, hit=False)
    near.replied(0.002, hit=False)
    p1, p2 = parent("p1"), parent("p2")
    s = with_digests(p1, p2, digests={"p1": True, "p2": True}, health={"p1": far, "p2": near})
    assert codes(s.route)[0] == ("p2", "CD_PARENT_HIT")


def test_a_digest_that_says_not_held_still_leaves_icp_to_find_it() -> None:
    p1 = parent("p1")
    s = with_digests(p1, digests={"p1": False})
    assert s.route is None
    assert s.queries == (p1,)
    assert codes(s.reply(p1, Opcode.HIT, None, at(1)))[0] == ("p1", "PARENT_HIT")


def test_a_down_peers_digest_is_not_followed() -> None:
    p1 = parent("p1")
    s = with_digests(p1, digests={"p1": True}, health={"p1": down()})
    assert codes(s.route) == [(None, "HIER_DIRECT")]


def test_a_digest_hit_is_not_used_for_non_hierarchical_requests() -> None:
    p1 = parent("p1")
    records = {"p1": PeerHealth()}
    s = Selection(request(hierarchical=False), Policy((p1,)), records, NOW, {"p1": True})
    assert codes(s.route) == [(None, "HIER_DIRECT")]
