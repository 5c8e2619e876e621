"""Promotion from the disk tier into a full memory tier: on a second read among the recent
ones, two generations of a quarter of the tier each (store.admission)."""

from __future__ import annotations

import random

from harvest_cache.store.admission import GENERATION_SHARE, MIN_GENERATION, Admission


def test_everything_is_promoted_while_the_memory_tier_has_room() -> None:
    admission = Admission()
    assert all(admission.admits(f"k{i}", fits=True, held=10) for i in range(5000))
    assert len(admission) == 0  # (nothing remembered: nothing to decide)


def test_a_full_tier_takes_a_key_on_its_second_read() -> None:
    admission = Admission()
    assert not admission.admits("a", fits=False, held=100)
    assert not admission.admits("b", fits=False, held=100)
    assert admission.admits("a", fits=False, held=100)
    assert admission.admits("a", fits=False, held=100)
    assert admission.admits("b", fits=False, held=100)


def test_reads_are_remembered_for_two_generations_of_a_quarter_of_the_tier() -> None:
    held = 16 * MIN_GENERATION
    generation = int(held * GENERATION_SHARE)
    assert generation == 4 * MIN_GENERATION
    admission = Admission()
    assert not admission.admits("first", fits=False, held=held)
    for i in range(generation - 1):  # the first generation fills up
        assert not admission.admits(f"k{i}", fits=False, held=held)
    for i in range(generation):  # a second one: "first" is in the older generation
        assert not admission.admits(f"m{i}", fits=False, held=held)
    assert admission.admits("first", fits=False, held=held)
    for i in range(generation):  # a third: the first generation is forgotten
        assert not admission.admits(f"n{i}", fits=False, held=held)
    assert len(admission) == 2 * generation
    assert not admission.admits("k1", fits=False, held=held)


def test_a_small_tier_still_remembers_a_minimum_of_reads() -> None:
    admission = Admission()
    for i in range(MIN_GENERATION):
        admission.admits(f"k{i}", fits=False, held=3)
    assert admission.admits("k0", fits=False, held=3)
    assert len(admission) == MIN_GENERATION


def test_uniform_reads_over_four_tiers_are_mostly_kept_on_disk_and_a_hot_key_is_not() -> None:
    held, keys = 4096, 4 * 4096
    rng = random.Random(7)
    admission = Admission()
    promoted = sum(
        admission.admits(f"k{rng.randrange(keys)}", fits=False, held=held) for _ in range(50_000)
    )
    # A key read again within 1,024 to 2,048 reads of 16,384 keys: 6-12% of reads.
    assert 0.05 < promoted / 50_000 < 0.13
    admission.admits("hot", fits=False, held=held)
    assert admission.admits("hot", fits=False, held=held)
