"""The /api/replica endpoints (broker/replica_api.py) between two real brokers on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from broker.app import Broker
from harvest_common.errors import WireError
from harvest_common.hsr_client import server_record
from harvest_common.replication import wire
from harvest_common.replication.merkle import (
    BUCKET_BITS_DEFAULT,
    MerkleTree,
    bucket_of,
    differing_buckets,
)
from harvest_common.replication.version import Version
from harvest_common.replication.wire import ChangeList
from harvest_common.soif import Delete, encode
from tests.broker.registry.support import gid, version_of
from tests.broker.test_api import IDENTITY, TOKEN, load, make, running, url_of

# -- HTTP between two brokers -----------------------------------------------------------------

AUTH = {"Authorization": f"Bearer {TOKEN}"}
PATHS = ("changes", "wanted", "entries", "apply", "leaves", "buckets")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


@pytest.fixture
async def brokers(tmp_path: Path) -> AsyncIterator[tuple[Broker, Broker]]:
    async with (
        running(tmp_path / "a", admin_token=TOKEN, member="broker-a") as a,
        running(tmp_path / "b", admin_token=TOKEN, member="broker-b") as b,
    ):
        yield a, b


def base(broker: Broker, collection: str = "c1") -> str:
    return f"{url_of(broker)}/api/replica/{collection}"


async def get_changes(session: aiohttp.ClientSession, broker: Broker, **params: str) -> ChangeList:
    async with session.get(f"{base(broker)}/changes", params=params, headers=AUTH) as response:
        assert response.status == 200, await response.text()
        return ChangeList.from_json(await response.json())


async def post_json(session: aiohttp.ClientSession, url: str, body: Any, status: int = 200) -> Any:
    async with session.post(url, json=body, headers=AUTH) as response:
        assert response.status == status, await response.text()
        assert response.content_type == "application/json"
        return await response.json()


async def fetch_entries(
    session: aiohttp.ClientSession, broker: Broker, oids: Sequence[str]
) -> bytes:
    async with session.post(
        f"{base(broker)}/entries", json={"oids": list(oids)}, headers=AUTH
    ) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "application/x-harvest-replica"
        return await response.read()


async def post_apply(
    session: aiohttp.ClientSession, broker: Broker, body: bytes, status: int = 200
) -> Any:
    async with session.post(f"{base(broker)}/apply", data=body, headers=AUTH) as response:
        assert response.status == status, await response.text()
        assert response.content_type == "application/json"
        return await response.json()


async def replicate(
    session: aiohttp.ClientSession, source: Broker, target: Broker, after: int = 0
) -> tuple[dict[str, int], list[str], int]:
    """One round of what a replicator does: changes of ``source`` after ``after`` (paged),
    the ones ``target`` wants, their entries from ``source``, applied to ``target``.
    Returns the apply's counts, the oids wanted and the seq seen up to."""
    offered: list[list[Any]] = []
    for _ in range(100):
        listed = await get_changes(session, source, after=str(after), limit="2")
        offered += [[c.oid, c.version.to_json()] for c in listed.changes]
        after = listed.upto
        if listed.complete:
            break
    else:
        raise AssertionError("the change list never completed")
    wanted = (await post_json(session, f"{base(target)}/wanted", {"changes": offered}))["wanted"]
    packed = await fetch_entries(session, source, wanted)
    applied = await post_apply(session, target, packed)
    return applied, wanted, after


async def leaves(session: aiohttp.ClientSession, broker: Broker) -> tuple[MerkleTree, int]:
    async with session.get(f"{base(broker)}/leaves", headers=AUTH) as response:
        assert response.status == 200, await response.text()
        bits = int(response.headers["X-Harvest-Bucket-Bits"])
        seq = int(response.headers["X-Harvest-Seq"])
        body = await response.read()
    assert bits == BUCKET_BITS_DEFAULT
    assert len(body) == 32 << bits
    hashes = [body[i : i + 32] for i in range(0, len(body), 32)]
    return MerkleTree.from_leaves(hashes, bits), seq


async def search_urls(session: aiohttp.ClientSession, broker: Broker, query: str) -> list[str]:
    async with session.get(f"{url_of(broker)}/api/search", params={"q": query}) as response:
        assert response.status == 200, await response.text()
        return sorted(result["url"] for result in (await response.json())["results"])


async def searched(
    session: aiohttp.ClientSession, broker: Broker, query: str, urls: list[str]
) -> None:
    """Wait (bounded) until ``query`` finds exactly ``urls`` at ``broker``."""
    deadline = time.monotonic() + 10
    while (found := await search_urls(session, broker, query)) != urls:
        assert time.monotonic() < deadline, f"{query!r} found {found}, not {urls}"
        await asyncio.sleep(0.02)


def oid_of(url: str) -> str:
    return gid(url, IDENTITY)


ITEMS = [
    make("http://x.example/1", "replicated zebra one"),
    make("http://x.example/2", "replicated zebra two"),
    make("http://x.example/3", "replicated yak three"),
]


async def test_a_collection_is_copied_between_two_brokers_and_searchable(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, b = brokers
    await load(a, "c1", ITEMS)
    await load(a, "c2", [make("http://x.example/other", "replicated zebra elsewhere")])
    assert await search_urls(session, b, "zebra") == []

    applied, wanted, seen = await replicate(session, a, b)

    assert sorted(wanted) == sorted(oid_of(item.url) for item in ITEMS)  # c1's only
    assert (applied["upserted"], applied["removed"], applied["skipped"]) == (3, 0, 0)
    assert seen == await a.registry.last_seq()
    # The index follows the registry in the background.
    await searched(session, b, "zebra", ["http://x.example/1", "http://x.example/2"])
    await searched(session, b, "yak", ["http://x.example/3"])
    assert await b.registry.collection_versions("c1") != []
    assert sorted(await b.registry.collection_versions("c1")) == sorted(
        await a.registry.collection_versions("c1")
    )
    stored = await b.registry.get(oid_of("http://x.example/1"))
    assert stored is not None
    assert stored.record == ITEMS[0]
    assert (await version_of(b.registry, oid_of("http://x.example/1"))).origin == "broker-a"

    # A second round finds nothing wanted; a removal on A then travels as a tombstone.
    again, wanted_again, _ = await replicate(session, a, b)
    assert wanted_again == []
    assert again["upserted"] == again["removed"] == 0
    await load(a, "c1", [Delete(make("http://x.example/2", ""))])
    removed, wanted, _ = await replicate(session, a, b, after=seen)
    assert wanted == [oid_of("http://x.example/2")]
    assert (removed["upserted"], removed["removed"]) == (0, 1)
    await searched(session, b, "zebra", ["http://x.example/1"])


async def test_a_mirrors_status_lists_the_collections_it_holds_by_replication(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, b = brokers
    await load(a, "c1", ITEMS)
    await replicate(session, a, b)
    # B also holds what it was sent directly: a registration, as the HSR it may be.
    registration = server_record("cache", name="c", host="cache.example", port=3128)
    async with session.post(f"{url_of(b)}/api/hsr/register", data=encode(registration)) as r:
        assert r.status == 201
    async with session.get(f"{url_of(b)}/api/status") as response:
        status = await response.json()
    listed = {c["name"]: c for c in status["collections"]}
    assert set(listed) == {"c1", "hsr"}
    c1 = listed["c1"]
    assert (c1["objects"], c1["replicated"], c1["scheduled"]) == (3, True, False)
    assert (c1["cursor"], c1["last_pull"]) == (None, None)
    assert (listed["hsr"]["objects"], listed["hsr"]["replicated"]) == (1, False)
    assert status["objects"] == sum(c["objects"] for c in listed.values())
    # The origin lists its own collection as pulled there.
    async with session.get(f"{url_of(a)}/api/status") as response:
        (own,) = (await response.json())["collections"]
    assert (own["name"], own["objects"], own["replicated"]) == ("c1", 3, False)


async def test_the_long_poll_returns_as_soon_as_there_is_a_change(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, _ = brokers
    await load(a, "c1", ITEMS[:1])
    last = await a.registry.last_seq()
    started = time.monotonic()
    polling = asyncio.create_task(get_changes(session, a, after=str(last), wait="5"))
    await asyncio.sleep(0.3)
    assert not polling.done()  # held: nothing changed yet
    await load(a, "c2", ITEMS[1:2])  # another collection's change: keeps waiting
    await asyncio.sleep(0.2)
    assert not polling.done()
    changed = time.monotonic()
    await load(a, "c1", ITEMS[2:])
    listed = await asyncio.wait_for(polling, timeout=10)
    answered = time.monotonic()
    assert answered - started < 3.0  # well before its 5 s
    assert answered - changed < 2.0
    assert [c.oid for c in listed.changes] == [oid_of(ITEMS[2].url)]
    assert listed.after == last
    assert listed.complete


async def test_the_long_poll_ends_empty_after_its_wait(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, _ = brokers
    await load(a, "c1", ITEMS)
    last = await a.registry.last_seq()
    started = time.monotonic()
    listed = await get_changes(session, a, after=str(last), wait="0.3")
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 3.0
    assert listed.changes == ()
    assert (listed.after, listed.last_seq, listed.upto) == (last, last, last)
    # With changes there is no waiting at all.
    started = time.monotonic()
    listed = await get_changes(session, a, after="0", wait="5")
    assert time.monotonic() - started < 3.0
    assert len(listed.changes) == 3


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {TOKEN}"])
async def test_the_replica_endpoints_need_the_admin_token(
    brokers: tuple[Broker, Broker],
    session: aiohttp.ClientSession,
    path: str,
    authorization: str | None,
) -> None:
    a, _ = brokers
    await load(a, "c1", ITEMS)
    headers = {} if authorization is None else {"Authorization": authorization}
    method = "GET" if path in ("changes", "leaves", "buckets") else "POST"
    body = wire.pack([]) if path == "apply" else json.dumps({"oids": [], "changes": []})
    seq = await a.registry.last_seq()
    async with session.request(method, f"{base(a)}/{path}", data=body, headers=headers) as response:
        assert response.status == 401
        assert "token" in (await response.json())["error"]
    assert await a.registry.last_seq() == seq


async def test_a_corrupted_transfer_is_refused_and_applies_nothing(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, b = brokers
    await load(a, "c1", ITEMS)
    await load(b, "c1", [make("http://x.example/b-own", "own")])
    packed = await fetch_entries(session, a, [oid_of(item.url) for item in ITEMS])
    assert len(wire.unpack(packed)) == 3
    seq, count = await b.registry.last_seq(), await b.registry.count()
    for at in (len(packed) // 2, len(packed) - 1):
        corrupted = bytearray(packed)
        corrupted[at] ^= 0xFF
        with pytest.raises(WireError):
            wire.unpack(bytes(corrupted))
        answer = await post_apply(session, b, bytes(corrupted), status=400)
        assert "transfer refused" in answer["error"]
    for cut in (packed[: len(packed) // 2], packed + b"junk", b""):
        answer = await post_apply(session, b, cut, status=400)
        assert "error" in answer
    assert (await b.registry.last_seq(), await b.registry.count()) == (seq, count)
    assert await search_urls(session, b, "zebra") == []
    # Intact, the same transfer applies.
    assert (await post_apply(session, b, packed))["upserted"] == 3


async def test_a_transfer_with_a_bad_record_is_refused_and_applies_nothing(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, b = brokers
    await load(a, "c1", ITEMS)
    good = wire.unpack(await fetch_entries(session, a, [oid_of(item.url) for item in ITEMS]))
    bad = replace(good[0], record=b"not SOIF")
    seq = await b.registry.last_seq()
    answer = await post_apply(session, b, wire.pack([*good[1:], bad]), status=400)
    assert "not SOIF" in answer["error"]
    # Entries of another collection than the one in the path: refused too.
    answer = await post_apply(
        session, b, wire.pack([replace(e, collection="c2") for e in good]), status=400
    )
    assert "collection" in answer["error"]
    assert await b.registry.last_seq() == seq
    assert await b.registry.count() == 0


async def test_leaves_are_equal_for_equal_collections_and_differ_in_a_changed_bucket(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, b = brokers
    await load(a, "c1", ITEMS)
    await replicate(session, a, b)
    tree_a, seq_a = await leaves(session, a)
    tree_b, seq_b = await leaves(session, b)
    assert seq_a == await a.registry.last_seq()
    assert seq_b == await b.registry.last_seq()
    assert tree_a.root() == tree_b.root()
    assert differing_buckets(tree_a, tree_b) == []

    # One object changes on A: the trees differ in its bucket only.
    changed = oid_of(ITEMS[1].url)
    await load(a, "c1", [make(ITEMS[1].url, "replicated zebra two, edited")])
    tree_a2, seq_a2 = await leaves(session, a)
    assert seq_a2 > seq_a
    assert differing_buckets(tree_a2, tree_b) == [bucket_of(changed)]
    assert differing_buckets(tree_b, tree_a2) == [bucket_of(changed)]

    # A removal differs too, in its own bucket; after replication they agree again.
    removed = oid_of(ITEMS[2].url)
    await load(a, "c1", [Delete(make(ITEMS[2].url, ""))])
    tree_a3, _ = await leaves(session, a)
    assert differing_buckets(tree_a3, tree_b) == sorted({bucket_of(changed), bucket_of(removed)})
    await replicate(session, a, b)
    tree_a4, _ = await leaves(session, a)
    tree_b4, _ = await leaves(session, b)
    assert tree_a4.root() == tree_b4.root() == tree_a3.root()
    assert tree_a4.root() != tree_a.root()


async def test_buckets_lists_the_entries_of_the_buckets_asked(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, _ = brokers
    await load(a, "c1", ITEMS)
    await load(a, "c1", [Delete(make(ITEMS[2].url, ""))])
    held = dict(await a.registry.collection_versions("c1"))
    assert len(held) == 3
    assert held[oid_of(ITEMS[2].url)].deleted
    for key, version in held.items():
        async with session.get(
            f"{base(a)}/buckets", params={"b": str(bucket_of(key))}, headers=AUTH
        ) as response:
            assert response.status == 200
            listed = (await response.json())["entries"]
        assert [key, version.to_json()] in listed
        assert all(bucket_of(other) == bucket_of(key) for other, _ in listed)
    every = ",".join(str(bucket_of(key)) for key in held)
    async with session.get(f"{base(a)}/buckets", params={"b": every}, headers=AUTH) as response:
        listed = (await response.json())["entries"]
    assert sorted((key, Version.from_json(v)) for key, v in listed) == sorted(held.items())
    unused = next(n for n in range(1 << BUCKET_BITS_DEFAULT) if n not in map(bucket_of, held))
    for query in ({"b": str(unused)}, {"b": ""}, {}):
        async with session.get(f"{base(a)}/buckets", params=query, headers=AUTH) as response:
            assert response.status == 200
            assert await response.json() == {"entries": []}


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("changes", {"after": "-1"}),
        ("changes", {"after": "abc"}),
        ("changes", {"after": "1.5"}),
        ("changes", {"after": "²"}),  # a digit to str.isdigit, not to int()
        ("changes", {"after": "1" * 5_000}),  # more digits than int() converts
        ("changes", {"after": str(2**62 + 1)}),
        ("changes", {"limit": "10001"}),
        ("changes", {"limit": "-1"}),
        ("changes", {"limit": ""}),
        ("changes", {"wait": "nan"}),
        ("changes", {"wait": "inf"}),
        ("changes", {"wait": "61"}),
        ("changes", {"wait": "-0.5"}),
        ("changes", {"wait": "soon"}),
        ("buckets", {"b": "x"}),
        ("buckets", {"b": "4096"}),
        ("buckets", {"b": "-1"}),
        ("buckets", {"b": "1,,2,zz"}),
        ("buckets", {"b": "9" * 5_000}),
    ],
)
async def test_malformed_query_parameters_are_400_with_a_json_error(
    brokers: tuple[Broker, Broker],
    session: aiohttp.ClientSession,
    path: str,
    query: dict[str, str],
) -> None:
    a, _ = brokers
    async with session.get(f"{base(a)}/{path}", params=query, headers=AUTH) as response:
        assert response.status == 400, await response.text()
        assert response.content_type == "application/json"
        assert isinstance((await response.json())["error"], str)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("wanted", b"not json"),
        ("wanted", b"\xff\xfe"),
        ("wanted", b"[]"),
        ("wanted", b"{}"),
        ("wanted", b'{"changes": {}}'),
        ("wanted", b'{"changes": [["o"]]}'),
        ("wanted", b'{"changes": [[5, [1.0, "m", false]]]}'),
        ("wanted", b'{"changes": [["o", [1.0, "m"]]]}'),
        ("wanted", b'{"changes": [["o", [true, "m", false]]]}'),
        ("wanted", b'{"changes": [["o", [NaN, "m", false]]]}'),
        ("wanted", b'{"changes": [["o", [1' + b"0" * 400 + b', "m", false]]]}'),
        ("wanted", b'{"changes": ' + b"[" * 100_000 + b"}"),  # deeper than the parser goes
        ("wanted", b'{"changes": [["o", [' + b"1" * 5_000 + b', "m", false]]]}'),
        ("wanted", json.dumps({"changes": [["o", [1.0, "m", False]]] * 10_001}).encode()),
        ("entries", b"{}"),
        ("entries", b'{"oids": "o"}'),
        ("entries", b'{"oids": [1]}'),
        ("entries", b'{"oids": [null]}'),
        ("entries", json.dumps({"oids": ["o"] * 10_001}).encode()),
    ],
)
async def test_malformed_bodies_are_400_with_a_json_error(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession, path: str, body: bytes
) -> None:
    a, _ = brokers
    async with session.post(f"{base(a)}/{path}", data=body, headers=AUTH) as response:
        assert response.status == 400, await response.text()
        assert response.content_type == "application/json"
        assert isinstance((await response.json())["error"], str)


async def test_wanted_asks_for_what_is_newer_than_what_is_held(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, _ = brokers
    await load(a, "c1", ITEMS[:2])
    first, second = oid_of(ITEMS[0].url), oid_of(ITEMS[1].url)
    held = await version_of(a.registry, first)
    offered = [
        [first, held.to_json()],  # the same: not wanted
        [second, Version(held.stamp - 1, "zz").to_json()],  # older: not wanted
        [second, Version(held.stamp - 2, "zz").to_json()],
        ["f" * 32, Version(1.0, "x").to_json()],  # unknown: wanted
        [first, Version(held.stamp, held.origin, True).to_json()],  # its removal: wanted
    ]
    answer = await post_json(session, f"{base(a)}/wanted", {"changes": offered})
    assert sorted(answer["wanted"]) == sorted([first, "f" * 32])
    assert await post_json(session, f"{base(a)}/wanted", {"changes": []}) == {"wanted": []}


async def test_entries_are_those_of_the_collection_asked(
    brokers: tuple[Broker, Broker], session: aiohttp.ClientSession
) -> None:
    a, b = brokers
    await load(a, "c1", ITEMS)
    await replicate(session, a, b)
    # Collection c2 brings the same object: it takes it over on A.
    await load(a, "c2", [make(ITEMS[0].url, "taken over")])
    moved, kept = oid_of(ITEMS[0].url), oid_of(ITEMS[1].url)
    packed = await fetch_entries(session, a, [moved, kept])
    assert [entry.oid for entry in wire.unpack(packed)] == [kept]
    # So what B asks of c1 still applies to its c1 (here: nothing newer).
    applied = await post_apply(session, b, packed)
    assert (applied["upserted"], applied["skipped"]) == (0, 1)
    async with session.post(
        f"{base(a, 'c2')}/entries", json={"oids": [moved, kept]}, headers=AUTH
    ) as response:
        assert [entry.oid for entry in wire.unpack(await response.read())] == [moved]
