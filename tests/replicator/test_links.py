"""Link measurements: EWMA smoothing of round-trip time and throughput, the cost formula, failed
links and their recovery, and the costs of all measured links."""

from __future__ import annotations

import pytest

from replicator.links import ALPHA, FAILED_COST, Link, Links


def _ewma(old: float, sample: float) -> float:
    return (1 - ALPHA) * old + ALPHA * sample


def test_a_new_link_is_unmeasured() -> None:
    link = Link()
    assert link.rtt is None
    assert link.throughput is None
    assert not link.failed
    assert link.measured_at is None
    assert link.cost(65536) is None
    assert repr(link) == "Link(rtt ?, ?)"


def test_the_first_rtt_is_taken_as_is_then_smoothed() -> None:
    link = Link()
    link.observe_rtt(0.010, now=5.0)
    assert link.rtt == pytest.approx(0.010)
    assert link.measured_at == 5.0
    link.observe_rtt(0.050, now=6.0)
    assert link.rtt == pytest.approx(_ewma(0.010, 0.050))
    assert link.rtt == pytest.approx(0.022)
    link.observe_rtt(0.050, now=7.0)
    assert link.rtt == pytest.approx(_ewma(0.022, 0.050))
    assert link.measured_at == 7.0


def test_a_negative_rtt_counts_as_zero() -> None:
    # A clock step backwards between the two readings.
    link = Link()
    link.observe_rtt(-0.5, now=1.0)
    assert link.rtt == 0.0


def test_throughput_is_bytes_over_the_time_less_one_round_trip() -> None:
    link = Link()
    link.observe_rtt(0.1, now=1.0)
    link.observe_transfer(1_000_000, 0.6, now=2.0)  # 0.5 s moving the bytes
    assert link.throughput == pytest.approx(2_000_000)
    assert link.measured_at == 2.0
    link.observe_transfer(1_000_000, 1.1, now=3.0)  # 1 s: 1 MB/s
    assert link.throughput == pytest.approx(_ewma(2_000_000, 1_000_000))


def test_throughput_without_an_rtt_uses_the_whole_time() -> None:
    link = Link()
    link.observe_transfer(500, 0.5, now=1.0)
    assert link.throughput == pytest.approx(1000)
    assert link.cost(1000) is None  # still no round-trip time


def test_a_transfer_no_longer_than_a_round_trip_means_high_throughput() -> None:
    link = Link()
    link.observe_rtt(0.2, now=1.0)
    link.observe_transfer(1000, 0.1, now=2.0)
    assert link.throughput is not None
    assert link.throughput == pytest.approx(1000 / 1e-4)


def test_cost_is_rtt_plus_typical_bytes_over_throughput() -> None:
    link = Link()
    link.observe_rtt(0.02, now=1.0)
    assert link.cost(65536) == pytest.approx(0.02)  # throughput not measured yet
    link.observe_transfer(1_000_000, 0.52, now=2.0)  # 2 MB/s
    assert link.cost(65536) == pytest.approx(0.02 + 65536 / 2_000_000)
    assert link.cost(0) == pytest.approx(0.02)
    assert link.cost(4_000_000) == pytest.approx(2.02)


def test_a_transfer_that_moved_nothing_does_not_divide_by_zero() -> None:
    link = Link()
    link.observe_rtt(0.01, now=1.0)
    link.observe_transfer(0, 0.5, now=2.0)
    assert link.throughput == 0.0
    assert link.cost(65536) == FAILED_COST
    link.observe_transfer(1_000_000, 0.51, now=3.0)  # smoothed back above zero
    cost = link.cost(65536)
    assert cost is not None
    assert cost < FAILED_COST


def test_a_failed_link_costs_failed_cost_until_a_probe_succeeds() -> None:
    link = Link()
    link.observe_rtt(0.01, now=1.0)
    link.observe_transfer(100_000, 0.11, now=2.0)
    before = link.cost(10_000)
    link.observe_failure(now=3.0)
    assert link.failed
    assert link.measured_at == 3.0
    assert link.cost(10_000) == FAILED_COST
    assert "failed" in repr(link)
    link.observe_rtt(0.01, now=4.0)
    assert not link.failed
    assert link.cost(10_000) == pytest.approx(before)
    assert "failed" not in repr(link)


def test_a_transfer_also_ends_a_failure() -> None:
    link = Link()
    link.observe_rtt(0.01, now=1.0)
    link.observe_failure(now=2.0)
    link.observe_transfer(10_000, 0.02, now=3.0)
    assert not link.failed
    assert link.cost(10_000) == pytest.approx(0.01 + 10_000 / (10_000 / 0.01))


def test_a_link_that_failed_before_any_measurement_costs_failed_cost() -> None:
    link = Link()
    link.observe_failure(now=1.0)
    assert link.cost(1) == FAILED_COST


def test_repr_shows_milliseconds_and_megabytes() -> None:
    link = Link()
    link.observe_rtt(0.0125, now=1.0)
    link.observe_transfer(3_000_000, 1.0125, now=2.0)
    assert repr(link) == "Link(rtt 12.5 ms, 3.00 MB/s)"


def test_links_by_member() -> None:
    links = Links()
    first = links.link("b")
    assert links.link("b") is first
    assert links.link("a") is not first
    assert set(links.snapshot()) == {"a", "b"}
    assert repr(links) == "Links(2 members)"
    links.forget("a")
    links.forget("never-known")
    assert set(links.snapshot()) == {"b"}


def test_costs_omit_unmeasured_links_and_are_sorted() -> None:
    links = Links()
    links.link("c").observe_rtt(0.03, now=1.0)
    links.link("unmeasured")
    links.link("a").observe_rtt(0.01, now=1.0)
    links.link("a").observe_transfer(1000, 0.02, now=2.0)  # 1000 bytes in 0.01 s
    links.link("dead").observe_failure(now=3.0)
    links.link("only-throughput").observe_transfer(1000, 0.5, now=3.0)
    costs = links.costs(500)
    assert list(costs) == ["a", "c", "dead"]
    assert costs["a"] == pytest.approx(0.01 + 500 / 100_000)
    assert costs["c"] == pytest.approx(0.03)
    assert costs["dead"] == FAILED_COST


def test_a_snapshot_is_a_copy() -> None:
    links = Links()
    links.link("a")
    snapshot = links.snapshot()
    snapshot.pop("a")
    assert "a" in links.snapshot()
