"""Pulls into the registry (broker/registry/pulls.py): staged items and their commit, aborts,
exceptions and a pull killed mid-stream."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

from broker.errors import StorageError
from broker.registry import Applied, Registry
from harvest_common.soif import Delete, Refresh, Update
from tests.broker.registry.support import (
    DEFAULT_TTL,
    NOW,
    STAMP_G,
    STAMP_H,
    G,
    H,
    everything,
    gid,
    pull,
    rec,
    state_of,
    stored,
    summary,
    table_counts,
    wrapper,
)

# -- commit semantics ----------------------------------------------------------------------


async def test_commit_upserts_records_and_saves_the_cursor(registry: Registry) -> None:
    a, b = rec("http://a.example/", update_time="1700000000.5"), rec("http://b.example/")

    applied = await pull(registry, "g", [a, b], cursor="until-1")

    assert applied == Applied((gid(a.url), gid(b.url)), (), 0, 0)
    got = await stored(registry, gid(a.url))
    assert (got.collection, got.url, got.gatherer, got.record) == ("g", a.url, G, a)
    assert got.update_time == 1700000000.5
    assert (await stored(registry, gid(b.url))).update_time is None
    assert [got.seq, (await stored(registry, gid(b.url))).seq] == [1, 2]
    assert await registry.last_seq() == 2
    assert await registry.cursor("g") == "until-1"
    state = (await registry.collections())["g"]
    assert (state.count, state.cursor, state.last_pull) == (2, "until-1", NOW)
    assert await registry.count() == await registry.count("g") == 2
    assert await registry.count("other") == 0
    assert await registry.oids() == {gid(a.url), gid(b.url)}


async def test_expiry_is_the_records_time_to_live_when_valid_else_the_default(
    registry: Registry,
) -> None:
    ttls = {"http://a/": "100", "http://b/": None, "http://c/": "soon", "http://d/": "-5"}
    ttls |= {"http://e/": "0", "http://f/": "nan", "http://g/": "2.5"}
    await pull(registry, "g", [rec(url, ttl=ttl) for url, ttl in ttls.items()])

    expires = {url: (await stored(registry, gid(url))).expires - NOW for url in ttls}
    assert expires == {
        "http://a/": 100.0,
        "http://b/": DEFAULT_TTL,
        "http://c/": DEFAULT_TTL,
        "http://d/": DEFAULT_TTL,
        "http://e/": DEFAULT_TTL,
        "http://f/": DEFAULT_TTL,
        "http://g/": 2.5,
    }


async def test_records_without_gatherer_attributes_are_filed_under_the_collection(
    registry: Registry,
) -> None:
    bare = rec("http://a.example/", stamp=())
    applied = await pull(registry, "broker-x", [bare])

    assert applied.upserted == (gid(bare.url, "broker-x"),)
    assert (await stored(registry, gid(bare.url, "broker-x"))).gatherer == "broker-x"


async def test_an_update_wrapper_upserts_like_a_bare_record(registry: Registry) -> None:
    await pull(registry, "g", [Update(rec("http://a.example/", "new"))])
    assert (await stored(registry, gid("http://a.example/"))).record.text("Title") == "new"


async def test_an_upsert_replaces_the_stored_record_and_takes_a_new_seq(
    registry: Registry, path: Path
) -> None:
    await pull(registry, "g", [rec("http://a/", "old"), rec("http://b/")])
    await pull(registry, "g", [rec("http://a/", "new", ttl="9")], now=NOW + 10)

    got = await stored(registry, gid("http://a/"))
    assert (got.record.text("Title"), got.seq, got.expires) == ("new", 3, NOW + 19)
    # The replaced record goes to the garbage, freed before the next write.
    assert [table_counts(path)[table] for table in ("records", "garbage")] == [3, 1]
    await registry.expire(NOW)
    assert [table_counts(path)[table] for table in ("records", "garbage")] == [2, 0]


async def test_refresh_extends_the_expiry_of_the_collections_objects_with_that_url(
    registry: Registry,
) -> None:
    # Two gatherers' objects share a URL in one collection.
    await pull(registry, "g", [rec("http://a/"), rec("http://a/", stamp=STAMP_H)])
    await pull(registry, "other", [rec("http://a/", stamp=(("Gatherer-Name", b"O"),))])
    before = await registry.last_seq()

    applied = await pull(registry, "g", [Refresh(wrapper("http://a/", ttl="60"))], now=NOW + 100)

    assert applied == Applied((), (), 2, 0)
    for key in (gid("http://a/"), gid("http://a/", H)):
        got = await stored(registry, key)
        assert got.expires == NOW + 160
        assert got.record == rec(
            "http://a/", stamp=STAMP_H if key == gid("http://a/", H) else STAMP_G
        )
    # Not this collection's: untouched. Each refresh is a change, of the expiry only.
    assert (await stored(registry, gid("http://a/", "O@:"))).expires == NOW + DEFAULT_TTL
    assert await registry.last_seq() == before + 2
    changes = await registry.changes_since(before, 10)
    assert sorted((c.kind, c.oid) for c in changes) == sorted(
        [("refresh", gid("http://a/")), ("refresh", gid("http://a/", H))]
    )
    assert all(c.record is not None and c.record.url == "http://a/" for c in changes)


async def test_a_refresh_carrying_gatherer_attributes_touches_that_object_only(
    registry: Registry,
) -> None:
    await pull(registry, "g", [rec("http://a/"), rec("http://a/", stamp=STAMP_H)])

    applied = await pull(
        registry, "g", [Refresh(wrapper("http://a/", stamp=STAMP_H))], now=NOW + 100
    )

    assert applied.refreshed == 1
    assert (await stored(registry, gid("http://a/", H))).expires == NOW + 100 + DEFAULT_TTL
    assert (await stored(registry, gid("http://a/"))).expires == NOW + DEFAULT_TTL


async def test_delete_removes_the_matching_objects_and_leaves_tombstones(
    registry: Registry,
) -> None:
    await pull(registry, "g", [rec("http://a/"), rec("http://a/", stamp=STAMP_H), rec("http://b/")])
    await pull(registry, "g", [rec("http://b/", stamp=STAMP_H)])

    by_url = await pull(registry, "g", [Delete(wrapper("http://a/"))], cursor="c2")
    by_oid = await pull(registry, "g", [Delete(wrapper("http://b/", stamp=STAMP_H))])

    # One URL's objects are removed (and numbered) in oid order.
    assert by_url == Applied((), tuple(sorted([gid("http://a/"), gid("http://a/", H)])), 0, 0)
    assert by_oid.removed == (gid("http://b/", H),)
    assert await registry.oids() == {gid("http://b/")}
    tail = (await everything(registry))[-3:]
    assert [(c.kind, c.oid, c.url, c.collection, c.record) for c in tail] == [
        *(("remove", key, "http://a/", "g", None) for key in by_url.removed),
        ("remove", gid("http://b/", H), "http://b/", "g", None),
    ]
    assert tail[2].gatherer == H


async def test_refreshes_and_deletes_of_unknown_objects_are_ignored_and_counted(
    registry: Registry,
) -> None:
    await pull(registry, "g", [rec("http://a/")])
    await pull(registry, "h", [rec("http://h/")])

    applied = await pull(
        registry,
        "g",
        [
            Refresh(wrapper("http://missing/")),
            Delete(wrapper("http://missing/")),
            Delete(wrapper("http://a/", stamp=STAMP_H)),  # another gatherer's: not held
            Delete(wrapper("http://h/")),  # another collection's
            Refresh(wrapper("http://a/")),
        ],
    )

    assert applied == Applied((), (), 1, 4)
    assert await registry.count() == 2


async def test_items_apply_in_stream_order_within_a_pull(registry: Registry) -> None:
    await pull(registry, "g", [rec("http://old/")])

    applied = await pull(
        registry,
        "g",
        [
            rec("http://a/", "first"),
            Delete(wrapper("http://a/")),  # then gone
            Delete(wrapper("http://b/")),  # nothing yet: ignored
            rec("http://b/"),  # then added
            rec("http://c/", "first"),
            rec("http://c/", "second"),  # the later one wins
            Delete(wrapper("http://old/")),
            rec("http://old/", "back"),
        ],
    )

    assert await registry.oids() == {gid("http://b/"), gid("http://c/"), gid("http://old/")}
    assert (await stored(registry, gid("http://c/"))).record.text("Title") == "second"
    assert set(applied.upserted) == {gid("http://b/"), gid("http://c/"), gid("http://old/")}
    assert applied.removed == (gid("http://a/"),)
    assert applied.ignored == 1


async def test_a_complete_pull_replaces_what_the_collection_held(registry: Registry) -> None:
    await pull(registry, "g", [rec(f"http://{name}/") for name in "abcd"])
    await pull(registry, "other", [rec("http://x/", stamp=STAMP_H)])

    applied = await pull(
        registry,
        "g",
        [rec("http://a/", "changed"), Refresh(wrapper("http://b/")), rec("http://e/")],
        complete=True,
        cursor="full",
    )

    assert applied == Applied(
        (gid("http://a/"), gid("http://e/")), (gid("http://c/"), gid("http://d/")), 1, 0
    )
    assert await registry.oids() == {
        gid("http://a/"),
        gid("http://b/"),
        gid("http://e/"),
        gid("http://x/", H),
    }
    assert await registry.cursor("g") == "full"
    assert summary((await everything(registry))[-2:]) == [
        ("remove", "http://c/"),
        ("remove", "http://d/"),
    ]


async def test_an_empty_complete_pull_empties_the_collection(registry: Registry) -> None:
    await pull(registry, "g", [rec("http://a/"), rec("http://b/")])
    applied = await pull(registry, "g", [], complete=True, cursor=None)
    assert len(applied.removed) == 2
    assert await registry.count("g") == 0
    assert (await registry.collections())["g"].cursor is None


async def test_the_latest_collection_to_bring_an_object_takes_it_over(registry: Registry) -> None:
    await pull(registry, "a", [rec("http://x/", "from a"), rec("http://y/")])
    await pull(registry, "b", [rec("http://x/", "from b")])

    got = await stored(registry, gid("http://x/"))
    assert (got.collection, got.record.text("Title")) == ("b", "from b")
    assert {name: state.count for name, state in (await registry.collections()).items()} == {
        "a": 1,
        "b": 1,
    }
    # The former collection no longer reaches it: not by delete, nor by a complete pull.
    assert (await pull(registry, "a", [Delete(wrapper("http://x/"))])).ignored == 1
    assert (await pull(registry, "a", [], complete=True)).removed == (gid("http://y/"),)
    assert await registry.oids() == {gid("http://x/")}
    # Bringing it again takes it back.
    await pull(registry, "a", [rec("http://x/", "a again")])
    assert (await stored(registry, gid("http://x/"))).collection == "a"


async def test_concurrent_pulls_into_two_collections_stay_apart(registry: Registry) -> None:
    async def one(collection: str, stamp: tuple[tuple[str, bytes], ...]) -> Applied:
        async with registry.begin(collection) as staged:
            for start in range(0, 300, 30):
                await staged.add(
                    [rec(f"http://{i}/", stamp=stamp) for i in range(start, start + 30)]
                )
                await asyncio.sleep(0)
            return await staged.commit(cursor=collection, complete=True, now=NOW, default_ttl=1)

    a, b = await asyncio.gather(one("a", STAMP_G), one("b", STAMP_H))

    assert len(a.upserted) == len(b.upserted) == 300
    assert await registry.count("a") == await registry.count("b") == 300


# -- abort, exceptions, crashes ------------------------------------------------------------


async def test_abort_applies_nothing_and_drops_the_staging(registry: Registry, path: Path) -> None:
    await pull(registry, "g", [rec("http://a/"), rec("http://b/")], cursor="kept")
    before = await state_of(registry)

    staged = await registry.begin("g")
    await staged.add(
        [rec("http://c/"), Delete(wrapper("http://a/")), Refresh(wrapper("http://b/"))]
    )
    assert table_counts(path)["staging"] == 3
    await staged.abort()
    await staged.abort()  # idempotent

    assert await state_of(registry) == before
    counts = table_counts(path)
    assert (counts["staging"], counts["garbage"], counts["records"]) == (0, 1, 3)
    with pytest.raises(RuntimeError):
        await staged.add([rec("http://d/")])
    with pytest.raises(RuntimeError):
        await staged.commit(cursor="x", complete=False, now=NOW, default_ttl=1)


async def test_an_exception_inside_the_pull_block_applies_nothing(
    registry: Registry, path: Path
) -> None:
    await pull(registry, "g", [rec("http://a/")], cursor="kept")
    before = await state_of(registry)

    class StreamBroke(Exception):
        pass

    async def broken() -> None:
        async with registry.begin("g") as staged:
            await staged.add([rec("http://b/"), Delete(wrapper("http://a/"))])
            raise StreamBroke

    with pytest.raises(StreamBroke):
        await broken()

    assert await state_of(registry) == before
    assert table_counts(path)["staging"] == 0


async def test_a_commit_failing_midway_applies_nothing_not_even_the_cursor(
    registry: Registry, path: Path
) -> None:
    await pull(registry, "g", [rec("http://a/"), rec("http://b/")], cursor="kept")
    before = await state_of(registry)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON objects WHEN new.url = 'http://boom/'"
            " BEGIN SELECT RAISE(ABORT, 'boom'); END"
        )

    items = [rec("http://c/"), Delete(wrapper("http://a/")), rec("http://boom/")]
    with pytest.raises(StorageError, match="boom"):
        await pull(registry, "g", items, cursor="new", complete=True)

    assert await state_of(registry) == before
    assert await registry.cursor("g") == "kept"
    assert table_counts(path)["staging"] == 0  # the failed pull was aborted


async def test_leaving_the_pull_block_without_committing_aborts(
    registry: Registry, path: Path
) -> None:
    async with registry.begin("g") as staged:
        await staged.add([rec("http://a/")])
    assert await registry.count() == 0
    assert await registry.collections() == {}
    assert table_counts(path)["garbage"] == 1
    await registry.begin("g")  # frees the garbage first
    assert table_counts(path)["records"] == 0


async def test_a_pull_commits_once(registry: Registry) -> None:
    staged = await registry.begin("g")
    await staged.add([rec("http://a/")])
    await staged.commit(cursor="c", complete=False, now=NOW, default_ttl=1)
    await staged.abort()  # nothing to do after a commit

    assert await registry.count() == 1
    with pytest.raises(RuntimeError):
        await staged.commit(cursor="c", complete=True, now=NOW, default_ttl=1)
    with pytest.raises(RuntimeError):
        await staged.add([rec("http://b/")])


async def test_bad_arguments_are_refused(registry: Registry) -> None:
    staged = await registry.begin("g")
    with pytest.raises(TypeError):
        await staged.add(["not an item"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="default_ttl"):
        await staged.commit(cursor=None, complete=False, now=NOW, default_ttl=0)
    await staged.abort()
    with pytest.raises(ValueError, match="name"):
        await registry.begin("")
    with pytest.raises(ValueError, match="limit"):
        await registry.changes_since(0, limit=0)


CRASHING_PULL = """
import asyncio, sys
from pathlib import Path
from broker.registry import Registry
from harvest_common.soif import Record, Delete

async def main():
    registry = await Registry.open(Path(sys.argv[1]))
    pull = await registry.begin("g")
    title = (("Title", b"x" * 1000),)
    await pull.add([Record("FILE", f"http://new/{i}", title) for i in range(600)])
    await pull.add([Delete(Record("FILE", "http://a/"))])
    print("staged", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_pull_killed_mid_stream_applies_nothing_and_is_dropped_at_open(
    path: Path,
) -> None:
    async with await Registry.open(path) as registry:
        await pull(registry, "g", [rec("http://a/")], cursor="kept")
        before = await state_of(registry)

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CRASHING_PULL, str(path), stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    assert await asyncio.wait_for(process.stdout.readline(), 30) == b"staged\n"
    process.send_signal(signal.SIGKILL)
    assert await process.wait() == -signal.SIGKILL
    assert table_counts(path)["staging"] == 601  # left behind by the killed process

    async with await Registry.open(path) as registry:
        assert await state_of(registry) == before
        assert await registry.cursor("g") == "kept"
    counts = table_counts(path)
    assert (counts["staging"], counts["garbage"], counts["records"]) == (0, 0, 1)
