"""The registry's replica side (broker/registry/replica.py): versions of local changes and
removals, applying another member's entries (newer only, all or nothing), replica change
lists, convergence of two registries, the upgrade of a version 1 registry file."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from broker.errors import ReplicaError
from broker.registry import Registry, ReplicaApplied
from harvest_common.replication.version import STEP, Version
from harvest_common.replication.wire import Entry
from harvest_common.soif import Delete, Refresh, encode
from tests.broker.registry.support import (
    DEFAULT_TTL,
    NOW,
    G,
    gid,
    pull,
    rec,
    table_counts,
    version_of,
    wrapper,
)

A_URL, B_URL, C_URL = "http://a.example/", "http://b.example/", "http://c.example/"


@pytest.fixture
async def reg_a(tmp_path: Path) -> AsyncIterator[Registry]:
    async with await Registry.open(tmp_path / "a.db", member="A") as opened:
        yield opened


@pytest.fixture
async def reg_b(tmp_path: Path) -> AsyncIterator[Registry]:
    async with await Registry.open(tmp_path / "b.db", member="B") as opened:
        yield opened


async def state(registry: Registry, collection: str = "g") -> list[tuple[str, Version]]:
    return sorted(await registry.collection_versions(collection))


async def all_entries(registry: Registry, collection: str = "g") -> list[Entry]:
    keys = [key for key, _ in await registry.collection_versions(collection)]
    return sorted(await registry.replica_entries(keys), key=lambda entry: entry.oid)


def entry(
    url: str,
    version: Version,
    *,
    collection: str = "g",
    record: bytes | None = None,
    expires: float = NOW + DEFAULT_TTL,
    gatherer: str = G,
    key: str | None = None,
) -> Entry:
    """An entry for the object of ``url`` (by G): a tombstone if ``version`` is deleted,
    else the encoded ``rec(url)`` unless ``record`` is given."""
    if version.deleted:
        body, expires = None, 0.0
    else:
        body = encode(rec(url)) if record is None else record
    return Entry(key or gid(url, gatherer), collection, url, gatherer, expires, version, body)


# -- versions of local changes -------------------------------------------------------------


async def test_local_changes_are_versioned_with_the_member_id(reg_a: Registry) -> None:
    await pull(reg_a, "g", [rec(A_URL), rec(B_URL)], now=NOW)
    assert await reg_a.replica_versions([gid(A_URL), gid(B_URL), "unknown"]) == {
        gid(A_URL): Version(NOW, "A"),
        gid(B_URL): Version(NOW, "A"),
    }
    await pull(reg_a, "g", [Refresh(wrapper(A_URL, ttl="60"))], now=NOW + 10)
    assert await version_of(reg_a, gid(A_URL)) == Version(NOW + 10, "A")
    await pull(reg_a, "g", [Delete(wrapper(B_URL))], now=NOW + 20)
    assert await version_of(reg_a, gid(B_URL)) == Version(NOW + 20, "A", True)
    assert await state(reg_a) == sorted(
        [(gid(A_URL), Version(NOW + 10, "A")), (gid(B_URL), Version(NOW + 20, "A", True))]
    )


async def test_the_default_member_is_local(tmp_path: Path) -> None:
    async with await Registry.open(tmp_path / "r.db") as registry:
        await pull(registry, "g", [rec(A_URL)])
        assert await version_of(registry, gid(A_URL)) == Version(NOW, "local")


async def test_a_later_change_is_stamped_above_the_last_even_when_the_clock_went_back(
    reg_a: Registry,
) -> None:
    await pull(reg_a, "g", [rec(A_URL)], now=NOW)
    await pull(reg_a, "g", [rec(A_URL, "T2")], now=NOW - 100)  # upsert
    first = Version(NOW + STEP, "A")
    assert await version_of(reg_a, gid(A_URL)) == first
    await pull(reg_a, "g", [Refresh(wrapper(A_URL))], now=NOW - 200)  # refresh
    second = await version_of(reg_a, gid(A_URL))
    assert second == Version(first.stamp + STEP, "A")
    assert second > first
    # A change made later than the held stamp takes its own time.
    await pull(reg_a, "g", [rec(A_URL, "T3")], now=NOW + 50)
    assert await version_of(reg_a, gid(A_URL)) == Version(NOW + 50, "A")


async def test_a_change_of_a_replicated_object_is_stamped_above_the_replica_version(
    reg_a: Registry,
) -> None:
    ahead = Version(NOW + 1_000, "Z")  # another member's clock is ahead
    await reg_a.apply_replica("g", [entry(A_URL, ahead)], now=NOW)
    await pull(reg_a, "g", [rec(A_URL, "mine")], now=NOW)
    mine = await version_of(reg_a, gid(A_URL))
    assert mine == Version(ahead.stamp + STEP, "A")
    assert mine > ahead


async def test_a_delete_leaves_a_tombstone_versioned_above_the_object(reg_a: Registry) -> None:
    await pull(reg_a, "g", [rec(A_URL), rec(B_URL)], now=NOW)
    await pull(reg_a, "g", [Delete(wrapper(A_URL))], now=NOW - 30)  # clock went back
    tombstone = await version_of(reg_a, gid(A_URL))
    assert tombstone == Version(NOW + STEP, "A", True)
    assert tombstone > Version(NOW, "A")
    assert await reg_a.get(gid(A_URL)) is None
    # A complete pull's removals and a forgotten collection are versioned the same way.
    await pull(reg_a, "g", [], complete=True, now=NOW + 5)
    assert await version_of(reg_a, gid(B_URL)) == Version(NOW + 5, "A", True)
    # Brought back after its removal, an object is stamped above its tombstone.
    await pull(reg_a, "g", [rec(A_URL)], now=NOW - 60)
    assert await version_of(reg_a, gid(A_URL)) == Version(tombstone.stamp + STEP, "A")
    await reg_a.forget("g", now=NOW - 90)
    assert await version_of(reg_a, gid(A_URL)) == Version(tombstone.stamp + STEP + STEP, "A", True)


async def test_an_expiry_tombstone_is_the_same_on_every_replica(
    reg_a: Registry, reg_b: Registry
) -> None:
    await pull(reg_a, "g", [rec(A_URL, ttl="100"), rec(B_URL)], now=NOW)
    applied = await reg_b.apply_replica("g", await all_entries(reg_a), now=NOW + 1)
    assert len(applied.upserted) == 2
    assert await state(reg_b) == await state(reg_a)

    # Each expires it on its own, at different times and as different members.
    assert await reg_a.expire(NOW + 100) == (gid(A_URL),)
    assert await reg_b.expire(NOW + 250) == (gid(A_URL),)

    expected = Version(NOW + 100, "A", True)  # its expiry, by its origin
    assert await version_of(reg_a, gid(A_URL)) == expected
    assert await version_of(reg_b, gid(A_URL)) == expected
    assert await state(reg_a) == await state(reg_b)
    # Nothing to send either way.
    skipped = await reg_b.apply_replica("g", await all_entries(reg_a), now=NOW + 300)
    assert (skipped.upserted, skipped.removed, skipped.skipped) == ((), (), 2)


async def test_an_expiry_tombstone_is_above_an_object_stamped_after_its_expiry(
    reg_a: Registry, reg_b: Registry
) -> None:
    # Stamped (by a member whose clock is ahead) after the time it expires.
    late = entry(A_URL, Version(NOW + 500, "Z"), expires=NOW + 100)
    await reg_a.apply_replica("g", [late], now=NOW)
    await reg_b.apply_replica("g", [late], now=NOW)
    await reg_a.expire(NOW + 100)
    await reg_b.expire(NOW + 400)
    expected = Version(NOW + 500 + STEP, "Z", True)
    assert await version_of(reg_a, gid(A_URL)) == expected
    assert await version_of(reg_b, gid(A_URL)) == expected


# -- applying another member's entries ------------------------------------------------------


async def test_apply_takes_newer_entries_and_skips_equal_and_older(reg_a: Registry) -> None:
    await pull(reg_a, "g", [rec(A_URL, "old"), rec(B_URL, "old"), rec(C_URL, "old")], now=NOW)
    seq = await reg_a.last_seq()
    newer = entry(A_URL, Version(NOW + 1, "B"), record=encode(rec(A_URL, "new")))
    equal = entry(B_URL, Version(NOW, "A"), record=encode(rec(B_URL, "other")))
    older = entry(C_URL, Version(NOW - 1, "Z"), record=encode(rec(C_URL, "older")))
    tie_lower_origin = entry(C_URL, Version(NOW, "0"), record=encode(rec(C_URL, "tie")))
    fresh = entry("http://new.example/", Version(NOW - 500, "B"))

    applied = await reg_a.apply_replica(
        "g", [newer, equal, older, tie_lower_origin, fresh], now=NOW
    )

    assert applied == ReplicaApplied((gid(A_URL), gid("http://new.example/")), (), 3, seq + 2)
    got = await reg_a.get(gid(A_URL))
    assert got is not None
    assert (got.record, got.seq) == (rec(A_URL, "new"), seq + 1)
    assert await version_of(reg_a, gid(A_URL)) == Version(NOW + 1, "B")
    for url in (B_URL, C_URL):
        kept = await reg_a.get(gid(url))
        assert kept is not None
        assert kept.record == rec(url, "old")
        assert await version_of(reg_a, gid(url)) == Version(NOW, "A")
    assert await version_of(reg_a, gid("http://new.example/")) == Version(NOW - 500, "B")
    # Applied entries are changes like any other: the index sees them.
    changes = await reg_a.changes_since(seq, 10)
    assert [(c.kind, c.url) for c in changes] == [
        ("upsert", A_URL),
        ("upsert", "http://new.example/"),
    ]
    # The same batch again: all not newer.
    again = await reg_a.apply_replica("g", [newer, equal, older, fresh], now=NOW)
    assert (again.upserted, again.removed, again.skipped) == ((), (), 4)
    assert again.last_seq == await reg_a.last_seq() == seq + 2


async def test_apply_keeps_the_newest_of_one_objects_entries_in_a_batch(reg_a: Registry) -> None:
    v1 = entry(A_URL, Version(NOW + 1, "B"), record=encode(rec(A_URL, "one")))
    v3 = entry(A_URL, Version(NOW + 3, "B"), record=encode(rec(A_URL, "three")))
    v2 = entry(A_URL, Version(NOW + 2, "B", True))
    applied = await reg_a.apply_replica("g", [v1, v3, v2], now=NOW)
    assert (applied.upserted, applied.removed, applied.skipped) == ((gid(A_URL),), (), 2)
    got = await reg_a.get(gid(A_URL))
    assert got is not None
    assert got.record == rec(A_URL, "three")


async def test_apply_takes_tombstones(reg_a: Registry, path_counts: Path) -> None:
    await pull(reg_a, "g", [rec(A_URL), rec(B_URL)], now=NOW)
    seq = await reg_a.last_seq()
    gone = entry(A_URL, Version(NOW + 1, "B", True))
    unknown = entry(C_URL, Version(NOW + 1, "B", True))  # never held: remembered as removed
    stale = entry(B_URL, Version(NOW - 1, "B", True))  # older than the object: skipped

    applied = await reg_a.apply_replica("g", [gone, unknown, stale], now=NOW + 2)

    assert applied == ReplicaApplied((), (gid(A_URL), gid(C_URL)), 1, seq + 2)
    assert await reg_a.get(gid(A_URL)) is None
    assert await reg_a.get(gid(B_URL)) is not None
    assert await version_of(reg_a, gid(A_URL)) == Version(NOW + 1, "B", True)
    assert await version_of(reg_a, gid(C_URL)) == Version(NOW + 1, "B", True)
    changes = await reg_a.changes_since(seq, 10)
    assert [(c.kind, c.oid) for c in changes] == [("remove", gid(A_URL)), ("remove", gid(C_URL))]
    # The tombstone travels as it is held.
    assert await reg_a.replica_entries([gid(A_URL)]) == [gone]
    counts = table_counts(path_counts)
    assert (counts["objects"], counts["tombstones"]) == (1, 2)
    # A live entry newer than the tombstone brings the object back.
    back = entry(A_URL, Version(NOW + 2, "C"))
    assert (await reg_a.apply_replica("g", [back], now=NOW + 2)).upserted == (gid(A_URL),)
    assert await version_of(reg_a, gid(A_URL)) == Version(NOW + 2, "C")
    assert table_counts(path_counts)["tombstones"] == 1


@pytest.fixture
def path_counts(tmp_path: Path) -> Path:
    """reg_a's file, for table_counts."""
    return tmp_path / "a.db"


async def test_a_live_entry_already_expired_is_applied_as_its_expiry_tombstone(
    reg_a: Registry,
) -> None:
    await pull(reg_a, "g", [rec(A_URL)], now=NOW - 10)
    expired = entry(A_URL, Version(NOW, "B"), expires=NOW + 5)
    unheld = entry(B_URL, Version(NOW, "B"), expires=NOW + 5)

    applied = await reg_a.apply_replica("g", [expired, unheld], now=NOW + 5)  # "<= now" is due

    assert set(applied.removed) == {gid(A_URL), gid(B_URL)}
    assert applied.upserted == ()
    assert await reg_a.get(gid(A_URL)) is None
    assert await reg_a.get(gid(B_URL)) is None
    assert await version_of(reg_a, gid(A_URL)) == Version(NOW + 5, "B", True)
    assert await version_of(reg_a, gid(B_URL)) == Version(NOW + 5, "B", True)
    # Not yet expired: applied as it is.
    live = entry(C_URL, Version(NOW, "B"), expires=NOW + 6)
    assert (await reg_a.apply_replica("g", [live], now=NOW + 5)).upserted == (gid(C_URL),)


GOOD_RECORD = encode(rec(A_URL))


@pytest.mark.parametrize(
    "bad",
    [
        entry(C_URL, Version(NOW + 9, "B"), record=b"not SOIF at all"),
        entry(C_URL, Version(NOW + 9, "B"), record=b""),
        entry(C_URL, Version(NOW + 9, "B"), record=b"@FILE { http://c.example/\nTitle{9}:\tcut"),
        entry(C_URL, Version(NOW + 9, "B"), record=encode(rec(C_URL)) + encode(rec(C_URL))),
        entry(C_URL, Version(NOW + 9, "B"), record=encode(rec("http://elsewhere.example/"))),
        entry(C_URL, Version(NOW + 9, "B"), record=b"@DELETE {\n" + encode(rec(C_URL)) + b"}\n"),
        entry(C_URL, Version(NOW + 9, "B"), collection="other"),
        entry(C_URL, Version(NOW + 9, "B", True), collection="other"),
        entry(C_URL, Version(NOW + 9, "B"), key=gid(B_URL)),  # an oid not of its URL
        entry(C_URL, Version(NOW + 9, "B", True), key=gid(B_URL)),
    ],
    ids=[
        "not-soif",
        "empty",
        "cut-short",
        "two-objects",
        "other-url",
        "wrapper",
        "other-collection",
        "tombstone-of-other-collection",
        "oid-not-of-url",
        "tombstone-oid-not-of-url",
    ],
)
async def test_a_bad_entry_applies_nothing_of_its_batch(
    reg_a: Registry, path_counts: Path, bad: Entry
) -> None:
    await pull(reg_a, "g", [rec(A_URL), rec(B_URL)], now=NOW)
    before = (await reg_a.last_seq(), await state(reg_a), await all_entries(reg_a))
    counts = table_counts(path_counts)
    good = [
        entry(A_URL, Version(NOW + 9, "B"), record=encode(rec(A_URL, "newer"))),
        entry(B_URL, Version(NOW + 9, "B", True)),
        entry("http://d.example/", Version(NOW + 9, "B")),
    ]
    for batch in ([*good, bad], [bad, *good]):
        with pytest.raises(ReplicaError):
            await reg_a.apply_replica("g", batch, now=NOW)
        assert (await reg_a.last_seq(), await state(reg_a), await all_entries(reg_a)) == before
        assert table_counts(path_counts) == counts
    # The good ones alone apply.
    applied = await reg_a.apply_replica("g", good, now=NOW)
    assert (len(applied.upserted), len(applied.removed)) == (2, 1)


async def test_replica_changes_list_one_collections_objects_and_tombstones_in_seq_order(
    reg_a: Registry,
) -> None:
    await pull(reg_a, "g", [rec(A_URL), rec(B_URL)], now=NOW)  # seq 1, 2
    await pull(reg_a, "h", [rec(C_URL, stamp=())], now=NOW)  # seq 3, another collection
    await pull(reg_a, "g", [Delete(wrapper(A_URL))], now=NOW + 1)  # seq 4
    await pull(reg_a, "h", [Delete(wrapper(C_URL))], now=NOW + 1)  # seq 5
    await pull(reg_a, "g", [rec("http://d.example/")], now=NOW + 2)  # seq 6
    await pull(reg_a, "g", [Refresh(wrapper(B_URL))], now=NOW + 3)  # seq 7

    listed = await reg_a.replica_changes("g", 0, 100)
    assert listed == [
        (4, gid(A_URL), Version(NOW + 1, "A", True)),
        (6, gid("http://d.example/"), Version(NOW + 2, "A")),
        (7, gid(B_URL), Version(NOW + 3, "A")),
    ]
    assert await reg_a.replica_changes("h", 0, 100) == [
        (5, gid(C_URL, "h"), Version(NOW + 1, "A", True))
    ]
    # Paged by seq and limit.
    assert await reg_a.replica_changes("g", 4, 100) == listed[1:]
    assert await reg_a.replica_changes("g", 0, 2) == listed[:2]
    assert await reg_a.replica_changes("g", 6, 1) == listed[2:]
    assert await reg_a.replica_changes("g", 7, 100) == []
    assert await reg_a.replica_changes("g", 0, 0) == []
    assert await reg_a.replica_changes("unknown", 0, 100) == []
    with pytest.raises(ValueError, match="limit"):
        await reg_a.replica_changes("g", 0, -1)


async def test_replica_entries_are_the_whole_state_of_objects_and_tombstones(
    reg_a: Registry,
) -> None:
    await pull(reg_a, "g", [rec(A_URL, update_time="1700000000"), rec(B_URL)], now=NOW)
    await pull(reg_a, "g", [Delete(wrapper(B_URL))], now=NOW + 1)
    found = await reg_a.replica_entries([gid(A_URL), gid(B_URL), "unknown"])
    assert sorted(found, key=lambda e: e.url) == [
        Entry(
            gid(A_URL),
            "g",
            A_URL,
            G,
            NOW + DEFAULT_TTL,
            Version(NOW, "A"),
            encode(rec(A_URL, update_time="1700000000")),
        ),
        Entry(gid(B_URL), "g", B_URL, G, 0.0, Version(NOW + 1, "A", True), None),
    ]
    assert await reg_a.replica_entries([]) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_two_registries_converge_whatever_order_they_apply_in(
    reg_a: Registry, reg_b: Registry, seed: int
) -> None:
    urls = [f"http://s.example/{i}" for i in range(8)]
    # A common start: A's objects, copied to B.
    await pull(reg_a, "g", [rec(url) for url in urls], now=NOW)
    await reg_b.apply_replica("g", await all_entries(reg_a), now=NOW)
    assert await state(reg_a) == await state(reg_b)

    # Concurrent changes, some of the same objects, some at the same time.
    await pull(reg_a, "g", [rec(urls[0], "a0"), rec(urls[1], "a1")], now=NOW + 10)
    await pull(reg_a, "g", [Delete(wrapper(urls[2])), Delete(wrapper(urls[3]))], now=NOW + 10)
    await pull(reg_a, "g", [rec("http://s.example/only-a")], now=NOW + 11)
    await pull(reg_b, "g", [rec(urls[0], "b0"), rec(urls[2], "b2")], now=NOW + 10)  # ties
    await pull(reg_b, "g", [Delete(wrapper(urls[1]))], now=NOW + 20)
    await pull(reg_b, "g", [Refresh(wrapper(urls[3], ttl="9999"))], now=NOW + 5)
    await pull(reg_b, "g", [rec(urls[4], "b4"), rec("http://s.example/only-b")], now=NOW + 3)
    await pull(reg_b, "g", [Delete(wrapper(urls[5]))], now=NOW + 1)
    assert await state(reg_a) != await state(reg_b)

    from_a, from_b = await all_entries(reg_a), await all_entries(reg_b)
    shuffle = random.Random(seed)
    shuffle.shuffle(from_a)
    shuffle.shuffle(from_b)
    # A's entries reach B one at a time; B's reach A in two batches, in reverse.
    for one in from_a:
        await reg_b.apply_replica("g", [one], now=NOW + 30)
    half = len(from_b) // 2
    await reg_a.apply_replica("g", from_b[half:][::-1], now=NOW + 30)
    await reg_a.apply_replica("g", from_b[:half][::-1], now=NOW + 30)

    final_a, final_b = await state(reg_a), await state(reg_b)
    assert final_a == final_b
    # And the same objects: the entries (records included) are equal.
    assert await all_entries(reg_a) == await all_entries(reg_b)
    versions = dict(final_a)
    # Ties on the stamp went to the greater origin; the later change won otherwise.
    assert versions[gid(urls[0])] == Version(NOW + 10, "B")
    assert versions[gid(urls[1])] == Version(NOW + 20, "B", True)
    assert versions[gid(urls[2])] == Version(NOW + 10, "B")
    assert versions[gid(urls[3])] == Version(NOW + 10, "A", True)
    assert versions[gid(urls[4])] == Version(NOW + 3, "B")
    assert versions[gid(urls[5])] == Version(NOW + 1, "B", True)
    assert len(final_a) == len(urls) + 2
    # Applying either side's entries again changes nothing.
    for registry, other in ((reg_a, reg_b), (reg_b, reg_a)):
        again = await registry.apply_replica("g", await all_entries(other), now=NOW + 30)
        assert (again.upserted, again.removed) == ((), ())


# -- the upgrade of a version 1 registry ------------------------------------------------------

# The version 1 schema, as broker/registry/schema.py created it before replicas.
V1_TABLES = (
    """CREATE TABLE records (
        id   INTEGER PRIMARY KEY,
        soif BLOB NOT NULL
    )""",
    """CREATE TABLE objects (
        oid         TEXT PRIMARY KEY,
        collection  TEXT NOT NULL,
        url         TEXT NOT NULL,
        gatherer    TEXT NOT NULL,
        record      INTEGER NOT NULL,
        expires     REAL NOT NULL,
        update_time REAL,
        seq         INTEGER NOT NULL UNIQUE
    ) WITHOUT ROWID""",
    "CREATE INDEX objects_url ON objects (url)",
    "CREATE INDEX objects_collection_url ON objects (collection, url)",
    "CREATE INDEX objects_expires ON objects (expires)",
    """CREATE TABLE staging (
        pos         INTEGER PRIMARY KEY,
        pull        INTEGER NOT NULL,
        kind        TEXT NOT NULL CHECK (kind IN ('upsert', 'refresh', 'delete')),
        oid         TEXT,
        url         TEXT NOT NULL,
        gatherer    TEXT,
        record      INTEGER,
        ttl         REAL,
        update_time REAL
    )""",
    "CREATE INDEX staging_pull ON staging (pull)",
    """CREATE TABLE tombstones (
        oid        TEXT PRIMARY KEY,
        url        TEXT NOT NULL,
        gatherer   TEXT NOT NULL,
        collection TEXT NOT NULL,
        seq        INTEGER NOT NULL UNIQUE,
        removed_at REAL NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX tombstones_removed_at ON tombstones (removed_at)",
    """CREATE TABLE collections (
        name      TEXT PRIMARY KEY,
        cursor    TEXT,
        last_pull REAL NOT NULL
    )""",
    """CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    )""",
    "INSERT INTO meta VALUES ('seq', 0), ('horizon', 0), ('indexed_seq', 0)",
    "CREATE TABLE garbage (record INTEGER PRIMARY KEY)",
    """CREATE TRIGGER objects_drop_record AFTER DELETE ON objects BEGIN
        INSERT INTO garbage VALUES (old.record);
    END""",
    """CREATE TRIGGER objects_replace_record AFTER UPDATE OF record ON objects
    WHEN old.record != new.record BEGIN
        INSERT INTO garbage VALUES (old.record);
    END""",
    """CREATE TRIGGER objects_unbury AFTER INSERT ON objects BEGIN
        DELETE FROM tombstones WHERE oid = new.oid;
    END""",
)


def make_v1_registry(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        for statement in V1_TABLES:
            conn.execute(statement)
        conn.execute("INSERT INTO records (id, soif) VALUES (1, ?)", (encode(rec(A_URL)),))
        conn.execute(
            "INSERT INTO objects VALUES (?, 'g', ?, ?, 1, ?, 1700000000.0, 1)",
            (gid(A_URL), A_URL, G, NOW + DEFAULT_TTL),
        )
        conn.execute(
            "INSERT INTO tombstones VALUES (?, ?, ?, 'g', 2, ?)", (gid(B_URL), B_URL, G, NOW)
        )
        conn.execute("INSERT INTO collections VALUES ('g', 'cursor-1', ?)", (NOW,))
        conn.execute("UPDATE meta SET value = 2 WHERE key = 'seq'")
        conn.execute("PRAGMA user_version = 1")
        conn.commit()


async def test_a_version_1_registry_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    make_v1_registry(path)
    async with await Registry.open(path, member="A") as registry:
        got = await registry.get(gid(A_URL))
        assert got is not None
        assert (got.record, got.seq, got.update_time) == (rec(A_URL), 1, 1700000000.0)
        assert await registry.cursor("g") == "cursor-1"
        assert await registry.last_seq() == 2
        # Versioned at stamp 0 by nobody: any change beats them.
        assert await state(registry) == sorted(
            [(gid(A_URL), Version(0.0, "")), (gid(B_URL), Version(0.0, "", True))]
        )
        assert await registry.replica_changes("g", 0, 10) == [
            (1, gid(A_URL), Version(0.0, "")),
            (2, gid(B_URL), Version(0.0, "", True)),
        ]
        # Its object's record counts as changed at its seq (an upsert, not a refresh).
        assert [(c.kind, c.oid) for c in await registry.changes_since(0, 10)] == [
            ("upsert", gid(A_URL)),
            ("remove", gid(B_URL)),
        ]
        # Local changes and replicas work on it.
        await pull(registry, "g", [Refresh(wrapper(A_URL))], now=NOW)
        assert await version_of(registry, gid(A_URL)) == Version(NOW, "A")
        applied = await registry.apply_replica("g", [entry(B_URL, Version(1.0, "B"))], now=NOW)
        assert applied.upserted == (gid(B_URL),)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert {"objects_collection_seq", "tombstones_collection_seq"} <= names
    # Opened again: already at version 2, the objects are still there.
    async with await Registry.open(path, member="A") as registry:
        assert await registry.count() == 2
