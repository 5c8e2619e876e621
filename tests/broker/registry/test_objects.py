"""Reads of the registry's objects (broker/registry/objects.py), and a damaged record."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from broker.errors import StorageError
from broker.registry import Registry
from tests.broker.registry.support import NOW, STAMP_H, G, H, gid, pull, rec

# -- reads ---------------------------------------------------------------------------------


async def test_get_many_and_by_url(registry: Registry) -> None:
    await pull(registry, "b", [rec("http://a/", stamp=STAMP_H)])
    await pull(registry, "a", [rec("http://a/"), rec("http://z/")])

    many = await registry.get_many([gid("http://a/"), gid("http://a/", H), "0" * 32])
    assert set(many) == {gid("http://a/"), gid("http://a/", H)}
    assert many[gid("http://a/", H)].record == rec("http://a/", stamp=STAMP_H)
    assert await registry.get_many([]) == {}
    assert len(await registry.get_many(await registry.oids())) == 3
    assert [(s.collection, s.gatherer) for s in await registry.by_url("http://a/")] == [
        ("a", G),
        ("b", H),
    ]
    assert await registry.by_url("http://none/") == []
    assert await registry.get("0" * 32) is None


async def test_a_sample_is_the_objects_whose_ids_fall_lowest_read_a_page_at_a_time(
    registry: Registry,
) -> None:
    await pull(registry, "a", [rec(f"http://a/{n}") for n in range(400)])
    await pull(registry, "hsr", [rec(f"http://hsr/{n}") for n in range(50)])
    everyone = sorted(gid(f"http://a/{n}") for n in range(400))

    def read(page: list[tuple[str, object]]) -> list[str]:
        return [key for key, _ in page]

    assert read(await registry.sample(1.0, limit=1000, excluding="hsr")) == everyone
    quarter = read(await registry.sample(0.25, limit=1000, excluding="hsr"))
    # Ids are hashes: the lowest quarter of their range holds about a quarter of them.
    assert quarter == [key for key in everyone if key < "4"]
    assert 70 <= len(quarter) <= 130
    first = read(await registry.sample(0.25, limit=30, excluding="hsr"))
    rest = read(await registry.sample(0.25, after=first[-1], limit=1000, excluding="hsr"))
    assert first + rest == quarter
    (key, record), *_ = await registry.sample(0.25, limit=1, excluding="hsr")
    assert record == rec(next(f"http://a/{n}" for n in range(400) if gid(f"http://a/{n}") == key))
    assert await registry.sample(0.0, limit=10, excluding="hsr") == []


async def test_what_is_held_outside_a_collection_and_its_last_change(registry: Registry) -> None:
    assert await registry.outside("hsr") == (0, 0)
    await pull(registry, "a", [rec("http://a/1"), rec("http://a/2")])
    held = await registry.outside("hsr")
    assert held == (2, 2)
    await pull(registry, "hsr", [rec("http://hsr/")])
    assert await registry.outside("hsr") == held  # a change of that collection is not counted
    assert await registry.outside("a") == (1, 3)
    await registry.forget("a", now=NOW)  # removals are changes too
    assert await registry.outside("hsr") == (0, 5)


async def test_a_damaged_record_is_a_storage_error(registry: Registry, path: Path) -> None:
    await pull(registry, "g", [rec("http://a/")])
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE records SET soif = x'4040'")
    with pytest.raises(StorageError, match="not SOIF"):
        await registry.get(gid("http://a/"))
