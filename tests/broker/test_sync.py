"""IndexSync: the registry's changes applied to a real index, committed in large steps, with
the registry's mark moved only after each commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from broker.errors import EngineError
from broker.index import TantivyIndex
from broker.index.interface import IndexedObject, Results
from broker.query.ast import Node, Word
from broker.registry import Registry
from broker.sync import IndexSync
from tests.broker.registry.support import pull, rec

RECORDS = 2_500


class Watched:
    """A real index, with its commits counted and the n-th ``add`` made to fail (a crash
    mid-update as the sync sees it: nothing after it is applied) or to wait for ``resume``."""

    def __init__(self, index: TantivyIndex, fail_at_add: int = 0, pause_at_add: int = 0) -> None:
        self.index = index
        self.commits = 0
        self.adds = 0
        self._fail_at_add = fail_at_add
        self._pause_at_add = pause_at_add
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()

    @property
    def unfilled(self) -> bool:
        return self.index.unfilled

    async def filled(self) -> None:
        await self.index.filled()

    async def add(self, objects: Sequence[IndexedObject]) -> None:
        self.adds += 1
        if self.adds == self._fail_at_add:
            raise EngineError("the engine stopped")
        if self.adds == self._pause_at_add:
            self.paused.set()
            await self.resume.wait()
        await self.index.add(objects)

    async def remove(self, oids: Sequence[str]) -> None:
        await self.index.remove(oids)

    async def commit(self) -> None:
        self.commits += 1
        await self.index.commit()

    async def search(self, query: Node, *, limit: int, offset: int = 0) -> Results:
        return await self.index.search(query, limit=limit, offset=offset)

    async def oids(self) -> set[str]:
        return await self.index.oids()

    async def count(self) -> int:
        return await self.index.count()

    async def clear(self) -> None:
        await self.index.clear()

    async def rollback(self) -> None:
        await self.index.rollback()

    async def close(self) -> None:
        await self.index.close()


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[Registry]:
    async with await Registry.open(tmp_path / "registry.db") as registry:
        records = [rec(f"http://h.example/{i}", f"page {i}") for i in range(RECORDS)]
        await pull(registry, "g", records)
        yield registry


@pytest.fixture
async def index(tmp_path: Path) -> AsyncIterator[TantivyIndex]:
    async with await TantivyIndex.open(tmp_path / "index") as index:
        yield index


async def test_a_backlog_is_committed_every_so_many_changes_and_at_its_end(
    registry: Registry, index: TantivyIndex
) -> None:
    watched = Watched(index)
    applied = await IndexSync(registry, watched, commit_every=2_000).catch_up()
    assert applied == RECORDS
    assert watched.adds == 3  # (read 1,000 at a time)
    assert watched.commits == 2  # after 2,000 changes, then at the end
    assert await registry.indexed_seq() == RECORDS
    assert await index.count() == RECORDS
    assert (await index.search(Word("page"), limit=1)).total == RECORDS
    # Nothing left: no work, no commit.
    assert await IndexSync(registry, watched, commit_every=2_000).catch_up() == 0
    assert watched.commits == 2


async def test_what_a_failure_interrupts_is_applied_again_and_nothing_is_lost(
    registry: Registry, index: TantivyIndex
) -> None:
    failing = Watched(index, fail_at_add=3)
    with pytest.raises(EngineError):
        await IndexSync(registry, failing, commit_every=2_000).catch_up()
    # The mark stands where the index last committed; the rest is still to apply.
    assert await registry.indexed_seq() == 2_000
    assert await index.count() == 2_000
    assert await IndexSync(registry, index, commit_every=2_000).catch_up() == RECORDS - 2_000
    assert await registry.indexed_seq() == RECORDS
    assert await index.count() == RECORDS
    assert await index.oids() == await registry.oids()


async def test_a_new_index_gets_every_object_after_opening(
    registry: Registry, tmp_path: Path
) -> None:
    # The registry's mark says that everything was indexed, but the index is a new one.
    await registry.mark_indexed(await registry.last_seq())
    async with await TantivyIndex.open(tmp_path / "new") as opened:
        index = Watched(opened)
        assert index.unfilled
        await IndexSync(registry, index).after_opening()
        assert await index.count() == RECORDS
    async with await TantivyIndex.open(tmp_path / "new") as opened:
        index = Watched(opened)
        assert not index.unfilled
        await IndexSync(registry, index).after_opening()
        assert index.adds == 0  # an index that was there only catches up (nothing to do)
        assert await index.count() == RECORDS


async def test_a_fill_cut_short_is_done_again_at_the_next_opening(
    registry: Registry, tmp_path: Path
) -> None:
    # The registry's mark says that everything was indexed (by an index now gone).
    await registry.mark_indexed(await registry.last_seq())
    async with await TantivyIndex.open(tmp_path / "new") as opened:
        assert opened.unfilled  # and the process ends before filling it
    async with await TantivyIndex.open(tmp_path / "new") as opened:
        failing = Watched(opened, fail_at_add=2)
        assert failing.unfilled
        with pytest.raises(EngineError):
            await IndexSync(registry, failing).after_opening()
        assert await opened.count() == 0  # a fill commits at its end
    async with await TantivyIndex.open(tmp_path / "new") as opened:
        assert opened.unfilled
        await IndexSync(registry, opened).after_opening()
        assert await opened.count() == RECORDS
        assert await opened.oids() == await registry.oids()
    async with await TantivyIndex.open(tmp_path / "new") as opened:
        assert not opened.unfilled


async def test_searches_see_the_old_objects_until_a_rebuild_commits(
    registry: Registry, index: TantivyIndex
) -> None:
    await IndexSync(registry, index).catch_up()
    await pull(registry, "g", [rec("http://h.example/new", "fresh page")])
    paused = Watched(index, pause_at_add=2)
    rebuilding = asyncio.create_task(IndexSync(registry, paused).rebuild())
    await asyncio.wait_for(paused.paused.wait(), timeout=10)
    # Halfway: the index still answers with every object of its last commit.
    assert (await index.search(Word("page"), limit=1)).total == RECORDS
    assert (await index.search(Word("fresh"), limit=1)).total == 0
    paused.resume.set()
    assert await asyncio.wait_for(rebuilding, timeout=30) == RECORDS + 1
    assert paused.commits == 1
    assert (await index.search(Word("page"), limit=1)).total == RECORDS + 1
    assert await index.oids() == await registry.oids()


async def test_a_failed_rebuild_leaves_the_index_as_it_was(
    registry: Registry, index: TantivyIndex
) -> None:
    await IndexSync(registry, index).catch_up()
    failing = Watched(index, fail_at_add=2)
    with pytest.raises(EngineError):
        await IndexSync(registry, failing).rebuild()
    assert failing.commits == 0
    # What the rebuild staged is gone: the next commit (a catch-up's) keeps every object.
    await pull(registry, "g", [rec("http://h.example/new", "fresh page")])
    assert await IndexSync(registry, index).catch_up() == 1
    assert await index.count() == RECORDS + 1
    assert await index.oids() == await registry.oids()
