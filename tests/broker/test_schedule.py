"""broker.schedule: due times, backoff, jitter, triggers, admin changes (pure: no clock)."""

from __future__ import annotations

import math

import pytest

from broker.schedule import FIRST_BACKOFF, MAX_BACKOFF, Schedule, backoff

T0 = 1_000_000.0


def test_every_collection_is_due_at_start_first_by_name_on_ties() -> None:
    schedule = Schedule({"b": 60.0, "a": 120.0}, now=T0)
    assert schedule.due_at("a") == schedule.due_at("b") == T0
    assert schedule.next_due() == ("a", T0)
    assert schedule.names() == ["a", "b"]
    assert len(schedule) == 2
    assert "a" in schedule
    assert "c" not in schedule


def test_an_empty_schedule_has_nothing_due() -> None:
    assert Schedule().next_due() is None


def test_success_makes_it_due_one_interval_later() -> None:
    schedule = Schedule({"a": 60.0, "b": 600.0}, now=T0)
    schedule.started("a")
    schedule.succeeded("a", T0 + 5)
    assert schedule.due_at("a") == T0 + 65
    assert schedule.next_due() == ("b", T0)
    schedule.started("b")
    schedule.succeeded("b", T0 + 6)
    assert schedule.next_due() == ("a", T0 + 65)


def test_a_running_pull_is_not_due_until_it_ends() -> None:
    schedule = Schedule({"a": 60.0}, now=T0)
    schedule.started("a")
    assert schedule.running("a")
    assert schedule.due_at("a") == math.inf
    assert schedule.next_due() is None
    schedule.succeeded("a", T0 + 1)
    assert not schedule.running("a")
    assert schedule.next_due() == ("a", T0 + 61)


def test_backoff_doubles_from_30_seconds_up_to_the_interval_or_an_hour() -> None:
    assert [backoff(n, 86400.0) for n in range(1, 10)] == [
        30.0,
        60.0,
        120.0,
        240.0,
        480.0,
        960.0,
        1920.0,
        3600.0,
        3600.0,
    ]
    assert backoff(1000, 86400.0) == MAX_BACKOFF  # no overflow however long the outage
    assert [backoff(n, 100.0) for n in range(1, 5)] == [30.0, 60.0, 100.0, 100.0]
    assert backoff(1, 10.0) == 10.0  # an interval under 30 s caps even the first retry
    with pytest.raises(ValueError, match="one failure or more"):
        backoff(0, 60.0)


def test_failures_back_off_and_a_success_resets_them() -> None:
    schedule = Schedule({"a": 7200.0}, now=T0)
    now = T0
    for expected in (30.0, 60.0, 120.0, 240.0):
        schedule.started("a")
        schedule.failed("a", now, jitter=1.0)
        assert schedule.due_at("a") == now + expected
        now += expected
    assert schedule.failures("a") == 4
    schedule.started("a")
    schedule.succeeded("a", now)
    assert schedule.failures("a") == 0
    assert schedule.due_at("a") == now + 7200
    schedule.failed("a", now, jitter=1.0)
    assert schedule.due_at("a") == now + FIRST_BACKOFF  # starts over from 30 s


def test_backoff_is_capped_by_the_interval() -> None:
    schedule = Schedule({"a": 45.0}, now=T0)
    for _ in range(5):
        schedule.failed("a", T0, jitter=1.0)
    assert schedule.due_at("a") == T0 + 45.0


@pytest.mark.parametrize(("jitter", "delay"), [(0.5, 15.0), (1.0, 30.0), (1.5, 45.0)])
def test_jitter_scales_the_backoff(jitter: float, delay: float) -> None:
    schedule = Schedule({"a": 3600.0}, now=T0)
    schedule.failed("a", T0, jitter=jitter)
    assert schedule.due_at("a") == pytest.approx(T0 + delay)


@pytest.mark.parametrize("jitter", [0.49, 1.51, -1.0, math.nan])
def test_jitter_outside_half_to_one_and_a_half_is_refused(jitter: float) -> None:
    schedule = Schedule({"a": 3600.0}, now=T0)
    with pytest.raises(ValueError, match="jitter"):
        schedule.failed("a", T0, jitter=jitter)
    assert schedule.failures("a") == 0


def test_a_trigger_makes_it_due_now() -> None:
    schedule = Schedule({"a": 3600.0, "b": 3600.0}, now=T0)
    for name in ("a", "b"):
        schedule.started(name)
        schedule.succeeded(name, T0)
    schedule.triggered("b", T0 + 10)
    assert schedule.next_due() == ("b", T0 + 10)
    schedule.triggered("b", T0 + 20)  # a second trigger does not push it back
    assert schedule.due_at("b") == T0 + 10


def test_a_trigger_cuts_a_backoff_short() -> None:
    schedule = Schedule({"a": 3600.0}, now=T0)
    schedule.failed("a", T0, jitter=1.0)
    schedule.triggered("a", T0 + 1)
    assert schedule.due_at("a") == T0 + 1
    assert schedule.failures("a") == 1  # the next failure still backs off further


def test_a_trigger_during_a_pull_makes_it_due_again_when_it_ends() -> None:
    schedule = Schedule({"a": 3600.0, "b": 3600.0}, now=T0)
    schedule.started("a")
    schedule.triggered("a", T0 + 1)
    assert schedule.due_at("a") == math.inf
    schedule.succeeded("a", T0 + 2)
    assert schedule.due_at("a") == T0 + 2
    schedule.started("a")
    schedule.succeeded("a", T0 + 3)  # the re-trigger is used up
    assert schedule.due_at("a") == T0 + 3603
    schedule.started("b")
    schedule.triggered("b", T0 + 4)
    schedule.failed("b", T0 + 5, jitter=1.0)
    assert schedule.due_at("b") == T0 + 5


def test_collections_are_added_and_removed() -> None:
    schedule = Schedule({"a": 60.0}, now=T0)
    schedule.started("a")
    schedule.succeeded("a", T0)
    schedule.add("new", 600.0, T0 + 30)
    assert schedule.next_due() == ("new", T0 + 30)  # a new collection is due at once
    schedule.remove("new")
    assert "new" not in schedule
    assert schedule.next_due() == ("a", T0 + 60)
    with pytest.raises(KeyError):
        schedule.remove("new")
    with pytest.raises(KeyError):
        schedule.due_at("new")
    with pytest.raises(KeyError):
        schedule.triggered("new", T0)


def test_changing_an_interval_brings_the_due_time_forward_only() -> None:
    schedule = Schedule({"a": 3600.0}, now=T0)
    schedule.started("a")
    schedule.succeeded("a", T0)
    schedule.add("a", 60.0, T0 + 10)  # shorter: due one new interval from now
    assert schedule.due_at("a") == T0 + 70
    schedule.add("a", 7200.0, T0 + 20)  # longer: the current due time stands
    assert schedule.due_at("a") == T0 + 70
    schedule.succeeded("a", T0 + 70)
    assert schedule.due_at("a") == T0 + 7270


def test_an_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval"):
        Schedule({"a": 0.0})
