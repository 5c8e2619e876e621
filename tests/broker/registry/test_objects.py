"""Reads of the registry's objects (broker/registry/objects.py), and a damaged record."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from broker.errors import StorageError
from broker.registry import Registry
from tests.broker.registry.support import STAMP_H, G, H, gid, pull, rec

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


async def test_a_damaged_record_is_a_storage_error(registry: Registry, path: Path) -> None:
    await pull(registry, "g", [rec("http://a/")])
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE records SET soif = x'4040'")
    with pytest.raises(StorageError, match="not SOIF"):
        await registry.get(gid("http://a/"))
