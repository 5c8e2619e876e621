"""The change sequence (broker/registry/changes.py): changes since a number, tombstones,
expiry, forgetting a collection, and the index's mark."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.registry import DAY, Change, Registry
from harvest_common.soif import Delete
from tests.broker.registry.support import NOW, G, everything, gid, pull, rec, summary, wrapper

# -- the change sequence, tombstones, expiry -----------------------------------------------


async def test_changes_since_reports_the_current_state_in_seq_order(registry: Registry) -> None:
    await pull(registry, "g", [rec("http://a/"), rec("http://b/"), rec("http://c/")])  # 1 2 3
    await pull(registry, "g", [Delete(wrapper("http://b/"))])  # 4
    await pull(registry, "g", [rec("http://a/", "again", update_time="1700000000.5")])  # 5
    await pull(registry, "g", [rec("http://d/")])  # 6

    changes = await everything(registry)

    assert [(c.seq, c.kind, c.url) for c in changes] == [
        (3, "upsert", "http://c/"),
        (4, "remove", "http://b/"),
        (5, "upsert", "http://a/"),
        (6, "upsert", "http://d/"),
    ]
    assert changes[2].record == rec("http://a/", "again", update_time="1700000000.5")
    assert (changes[2].collection, changes[2].gatherer) == ("g", G)
    # The object's Update-Time, as the registry holds it (an index needs nothing more).
    assert [c.update_time for c in changes] == [None, None, 1700000000.5, None]
    assert summary(await registry.changes_since(4, limit=10)) == [
        ("upsert", "http://a/"),
        ("upsert", "http://d/"),
    ]
    assert await registry.changes_since(6, limit=10) == []
    # Paging with the last seq seen gives the same, in pieces.
    paged: list[Change] = []
    while page := await registry.changes_since(paged[-1].seq if paged else 0, limit=3):
        assert len(page) <= 3
        paged += page
    assert paged == changes


async def test_an_object_brought_back_is_reported_as_an_upsert_only(registry: Registry) -> None:
    await pull(registry, "g", [rec("http://a/")])
    await pull(registry, "g", [Delete(wrapper("http://a/"))])
    await pull(registry, "g", [rec("http://a/", "back")])
    assert [(c.seq, c.kind) for c in await everything(registry)] == [(3, "upsert")]


async def test_expire_removes_what_is_due_leaving_tombstones(registry: Registry) -> None:
    await pull(
        registry,
        "g",
        [
            rec("http://short/", ttl="10"),
            rec("http://edge/", ttl="20"),
            rec("http://long/", ttl="99"),
        ],
    )

    assert await registry.expire(NOW + 5) == ()
    removed = await registry.expire(NOW + 20)  # "expires <= now" is due

    assert removed == (gid("http://edge/"), gid("http://short/"))  # in URL order
    assert await registry.oids() == {gid("http://long/")}
    assert summary(await registry.changes_since(3, limit=10)) == [
        ("remove", "http://edge/"),
        ("remove", "http://short/"),
    ]


async def test_old_tombstones_are_dropped_once_indexed_and_oldest_seq_moves_past_them(
    path: Path,
) -> None:
    async with await Registry.open(path, tombstone_retention=DAY) as registry:
        await pull(registry, "g", [rec(f"http://{name}/", ttl="1000000") for name in "abcd"])
        await pull(registry, "g", [Delete(wrapper("http://a/"))], now=NOW)  # seq 5
        await pull(registry, "g", [Delete(wrapper("http://b/"))], now=NOW + DAY)  # seq 6
        assert await registry.oldest_seq() == 0

        # Past the retention, but the index has yet to apply them: kept.
        await registry.expire(NOW + 3 * DAY)
        assert summary(await registry.changes_since(4, 10))[:2] == [
            ("remove", "http://a/"),
            ("remove", "http://b/"),
        ]
        await registry.mark_indexed(6)
        await registry.expire(NOW + DAY + 1)  # a's is over a day old, b's is not

        assert await registry.oldest_seq() == 5
        assert summary(await registry.changes_since(5, 10)) == [("remove", "http://b/")]
        await registry.expire(NOW + 3 * DAY)
        assert await registry.oldest_seq() == 6
        assert await registry.changes_since(5, 10) == []
        # The live objects stay answerable from the start.
        assert summary(await everything(registry)) == [
            ("upsert", "http://c/"),
            ("upsert", "http://d/"),
        ]
    async with await Registry.open(path) as registry:
        assert await registry.oldest_seq() == 6


async def test_indexed_seq_marks_what_the_index_has_yet_to_apply(registry: Registry) -> None:
    async def backlog(limit: int) -> list[Change]:
        return await registry.changes_since(await registry.indexed_seq(), limit)

    await pull(registry, "g", [rec("http://a/"), rec("http://b/")])
    await pull(registry, "g", [Delete(wrapper("http://a/"))])
    assert await registry.indexed_seq() == 0
    assert await backlog(10) == await everything(registry)

    await registry.mark_indexed(2)
    assert summary(await backlog(10)) == [("remove", "http://a/")]
    await registry.mark_indexed(3)
    assert await backlog(10) == []
    await registry.mark_indexed(0)  # before a rebuild
    assert len(await backlog(1)) == 1
    with pytest.raises(ValueError, match="outside"):
        await registry.mark_indexed(4)
    with pytest.raises(ValueError, match="outside"):
        await registry.mark_indexed(-1)


async def test_forget_removes_a_collection_and_its_objects(registry: Registry) -> None:
    await pull(registry, "a", [rec("http://1/"), rec("http://2/")], cursor="ca")
    await pull(registry, "b", [rec("http://3/")], cursor="cb")

    removed = await registry.forget("a", now=NOW)

    assert removed == (gid("http://1/"), gid("http://2/"))
    assert await registry.oids() == {gid("http://3/")}
    assert set(await registry.collections()) == {"b"}
    assert await registry.cursor("a") is None
    assert summary(await registry.changes_since(3, 10)) == [
        ("remove", "http://1/"),
        ("remove", "http://2/"),
    ]
    assert await registry.forget("unknown", now=NOW) == ()
