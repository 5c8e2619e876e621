"""The collector kept off the cache's heap: frozen periodically, swept in full now and then."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from harvest_cache import heap
from tests.support import wait_until


class Node:
    """A cycle's member."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def restore_collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_tune_collects_the_young_less_often_and_freezes() -> None:
    gc.unfreeze()
    heap.tune()
    assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
    assert gc.get_freeze_count() > 0


async def test_cycle_frozen_alive_is_collected_at_the_next_sweep() -> None:
    gc.unfreeze()
    now = [0.0]
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    keeper = asyncio.create_task(heap.keep(0.005, 60.0, lambda: now[0]))
    try:
        await wait_until(lambda: gc.get_freeze_count() > 0)
        del first, second  # garbage now, but frozen: no collection finds it
        gc.collect()
        assert gone() is not None
        now[0] = 60.0  # a sweep is due
        await wait_until(lambda: gone() is None)
        assert gc.get_freeze_count() > 0  # and the heap is frozen again after it
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)


async def test_objects_are_frozen_only_after_a_freeze() -> None:
    gc.unfreeze()
    keeper = asyncio.create_task(heap.keep(0.05, 60.0))
    try:
        first, second = Node(), Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        del first, second
        gc.collect()  # before the first freeze: an ordinary collection finds the cycle
        assert gone() is None
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
