"""Owned tasks: a TaskSet's and a block's own task."""

from __future__ import annotations

import asyncio

import pytest

from harvest_common.tasks import TaskSet, running


async def test_a_blocks_task_runs_while_the_block_runs_and_is_cancelled_at_its_end() -> None:
    ticks = 0
    cancelled = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        try:
            while True:
                ticks += 1
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with running(tick(), "ticking"):
        names = {t.get_name() for t in asyncio.all_tasks()}
        assert "ticking" in names
        for _ in range(5):
            await asyncio.sleep(0)
        assert ticks >= 3
    assert cancelled.is_set()  # (awaited: it has ended by the block's end)
    seen = ticks
    await asyncio.sleep(0)
    assert ticks == seen
    assert "ticking" not in {t.get_name() for t in asyncio.all_tasks()}


async def test_a_blocks_task_that_failed_raises_at_the_blocks_end() -> None:
    async def fail() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        async with running(fail(), "failing"):
            await asyncio.sleep(0.01)


async def test_a_task_set_drains_what_ends_in_time_and_cancels_the_rest() -> None:
    tasks = TaskSet()
    quick = tasks.spawn(asyncio.sleep(0.01), "quick")
    slow = tasks.spawn(asyncio.sleep(30), "slow")
    assert len(tasks) == 2
    await tasks.drain(0.5)
    assert quick.done()
    assert not quick.cancelled()
    assert slow.cancelled()
    assert len(tasks) == 0
