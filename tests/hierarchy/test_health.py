"""A peer's health: smoothed ICP RTT, dead after unanswered queries, down after a failed
connection, and the counters; every change at an explicit time."""

from __future__ import annotations

import pytest

from harvest_cache.hierarchy.health import PeerHealth


def test_a_new_peer_is_alive_with_nothing_known() -> None:
    h = PeerHealth()
    assert h.rtt is None
    assert not h.dead(1e9)
    assert not h.down(0.0)
    assert h.state(0.0) == "alive"
    assert (h.queries, h.replies, h.hits, h.timeouts, h.connect_failures, h.uses) == (
        0,
        0,
        0,
        0,
        0,
        0,
    )


def test_dead_once_queries_go_unanswered_for_dead_after() -> None:
    h = PeerHealth(dead_after=10.0)
    h.queried(100.0)
    h.queried(105.0)  # a later query does not restart the clock
    assert h.queries == 2
    assert h.unanswered_since == 100.0
    assert not h.dead(109.99)
    assert h.state(109.99) == "alive"
    assert h.dead(110.0)
    assert h.state(110.0) == "dead"
    assert h.dead(500.0)


def test_dead_after_is_configurable() -> None:
    h = PeerHealth(dead_after=2.5)
    h.queried(0.0)
    assert not h.dead(2.4)
    assert h.dead(2.5)


def test_a_reply_revives_a_dead_peer_and_restarts_the_clock() -> None:
    h = PeerHealth(dead_after=10.0)
    h.queried(0.0)
    assert h.dead(20.0)
    h.replied(0.05, hit=False)
    assert h.unanswered_since is None
    assert not h.dead(20.0)
    assert h.state(20.0) == "alive"
    assert not h.dead(1000.0)  # nothing asked since: nothing unanswered
    h.queried(30.0)
    assert not h.dead(39.0)
    assert h.dead(40.0)


def test_rtt_first_sample_then_smoothed_by_a_tenth() -> None:
    h = PeerHealth()
    h.replied(0.100, hit=False)
    assert h.rtt == pytest.approx(0.100)
    h.replied(0.200, hit=False)
    assert h.rtt == pytest.approx(0.110)
    h.replied(0.010, hit=True)
    assert h.rtt == pytest.approx(0.110 + 0.1 * (0.010 - 0.110))


def test_replies_and_hits_are_counted() -> None:
    h = PeerHealth()
    h.replied(0.01, hit=True)
    h.replied(0.01, hit=False)
    h.replied(0.01, hit=True)
    assert (h.replies, h.hits) == (3, 2)


def test_down_for_retry_after_a_failed_connection() -> None:
    h = PeerHealth(retry_after=30.0)
    h.connect_failed(100.0)
    assert h.connect_failures == 1
    assert h.down(100.0)
    assert h.down(129.99)
    assert h.state(129.99) == "down"
    assert not h.down(130.0)
    assert h.state(130.0) == "alive"


def test_another_failure_extends_the_wait() -> None:
    h = PeerHealth(retry_after=30.0)
    h.connect_failed(0.0)
    h.connect_failed(20.0)
    assert h.connect_failures == 2
    assert h.down(49.0)
    assert not h.down(50.0)


def test_an_icp_reply_ends_down_at_once() -> None:
    h = PeerHealth(retry_after=30.0)
    h.connect_failed(0.0)
    assert h.down(1.0)
    h.replied(0.02, hit=False)
    assert not h.down(1.0)
    assert h.state(1.0) == "alive"


def test_down_is_reported_before_dead() -> None:
    h = PeerHealth(dead_after=10.0, retry_after=30.0)
    h.queried(0.0)
    h.connect_failed(5.0)
    assert h.dead(20.0)
    assert h.down(20.0)
    assert h.state(20.0) == "down"
    assert h.state(35.0) == "dead"


def test_a_failed_connection_does_not_touch_icp_state() -> None:
    h = PeerHealth()
    h.replied(0.05, hit=False)
    h.connect_failed(0.0)
    assert h.rtt == pytest.approx(0.05)
    assert h.unanswered_since is None
    assert not h.dead(100.0)


def test_uses_and_timeouts_are_counted() -> None:
    h = PeerHealth()
    h.used()
    h.used()
    h.timed_out()
    assert (h.uses, h.timeouts) == (2, 1)
    # Neither says anything of the peer's state.
    assert h.state(0.0) == "alive"
    assert h.unanswered_since is None
