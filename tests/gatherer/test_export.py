"""The export stream and the gatherd service: what is sent, in what order, how compressed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from gatherer.database import GathererDatabase
from gatherer.export import export, merged
from gatherer.service import serve
from harvest_common.soif import Delete, Item, Record, Refresh, decode
from tests.common.test_soif_transport import decompress

TTL = 1000.0
RATE = 100.0
BIG = 20_000


def record(url: str, *attributes: tuple[str, bytes]) -> Record:
    return Record("FILE", url, attributes or (("Title", url.encode()),))


async def put(db: GathererDatabase, url: str, now: float, *attributes: tuple[str, bytes]) -> float:
    return await db.put(
        record(url, *attributes),
        md5=None,
        etag=None,
        last_modified=None,
        now=now,
        time_to_live=TTL,
        refresh_rate=RATE,
    )


async def refresh(db: GathererDatabase, url: str, now: float) -> float:
    update_time = await db.refresh(url, now=now, time_to_live=TTL, refresh_rate=RATE)
    assert update_time is not None
    return update_time


@dataclass
class Collected:
    items: list[Item]
    raw: bytes
    chunks: list[bytes]
    until: float
    complete: bool


async def collect(db: GathererDatabase, since: float | None, *, batch: int = 500) -> Collected:
    async with export(db, since, batch=batch) as stream:
        chunks = [chunk async for chunk in stream]
    raw = b"".join(chunks)
    return Collected(decode(raw), raw, chunks, stream.until, stream.complete)


def shape(items: list[Item]) -> list[tuple[str, str]]:
    """Each item as (kind, url): kind is FILE for a whole record, else its wrapper."""
    return [
        ("FILE", item.url) if isinstance(item, Record) else (item.keyword, item.record.url)
        for item in items
    ]


def update_time(item: Item) -> float:
    found = (item if isinstance(item, Record) else item.record).text("Update-Time")
    assert found is not None
    return float(found)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[GathererDatabase]:
    async with await GathererDatabase.open(tmp_path / "g.db") as database:
        yield database


@pytest.fixture(scope="module")
def big_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database of BIG records, filled once for the module (on a loop of its own)."""
    path = tmp_path_factory.mktemp("big") / "g.db"

    async def fill() -> None:
        async with await GathererDatabase.open(path) as db:
            for i in range(BIG):
                await put(db, f"http://big.example/{i}", 1000.0, ("Title", b"x" * (i % 300)))

    asyncio.run(fill())
    return path


@pytest.fixture
async def big_db(big_path: Path) -> AsyncIterator[GathererDatabase]:
    async with await GathererDatabase.open(big_path, max_exports=1) as database:
        yield database


# --- the stream ------------------------------------------------------------------------


async def test_a_full_export_is_every_current_record_in_update_order(
    db: GathererDatabase,
) -> None:
    await put(db, "http://a/", 100.0)
    await put(db, "http://b/", 100.0)
    await put(db, "http://c/", 100.0)
    await refresh(db, "http://a/", 200.0)
    await db.delete("http://b/", now=300.0)
    await db.put_manual("http://m/", record("http://m/"), now=400.0)

    got = await collect(db, None)

    assert shape(got.items) == [("FILE", "http://c/"), ("FILE", "http://a/"), ("FILE", "http://m/")]
    assert [update_time(item) for item in got.items] == [100.000002, 200.0, 400.0]
    assert got.until == 400.0
    assert got.complete
    assert got.items[1] == Record(
        "FILE",
        "http://a/",
        (
            ("Title", b"http://a/"),
            ("Update-Time", b"200.000000"),
            ("Time-to-Live", b"1000"),
            ("Refresh-Rate", b"100"),
        ),
    )


async def test_an_incremental_export_sends_changes_refreshes_and_deletions(
    db: GathererDatabase,
) -> None:
    for url in ("http://old/", "http://same1/", "http://same2/", "http://gone/", "http://edit/"):
        await put(db, url, 100.0)
    since = (await db.stats()).last_update

    await put(db, "http://new/", 200.0)
    await refresh(db, "http://same1/", 210.0)
    await refresh(db, "http://same2/", 220.0)
    await db.delete("http://gone/", now=230.0)
    await put(db, "http://edit/", 240.0, ("Title", b"edited"))

    got = await collect(db, since)

    assert shape(got.items) == [
        ("FILE", "http://new/"),
        ("REFRESH", "http://same1/"),
        ("REFRESH", "http://same2/"),
        ("DELETE", "http://gone/"),
        ("FILE", "http://edit/"),
    ]
    assert got.raw.count(b"@REFRESH {") == 1  # consecutive refreshes share a wrapper
    assert got.raw.count(b"@DELETE {") == 1
    same1 = got.items[1]
    assert isinstance(same1, Refresh)
    assert same1.record.attributes == (("Update-Time", b"210.000000"), ("Time-to-Live", b"1000"))
    gone = got.items[3]
    assert isinstance(gone, Delete)
    assert gone.record.attributes == (("Update-Time", b"230.000000"),)
    edit = got.items[4]
    assert isinstance(edit, Record)
    assert edit.get("Title") == b"edited"
    assert (got.until, got.complete) == (240.0, False)


async def test_resuming_from_the_last_update_time_gets_exactly_the_later_changes(
    db: GathererDatabase,
) -> None:
    for i in range(10):
        await put(db, f"http://a/{i}", 100.0)
    first = await collect(db, None)
    resume = max(update_time(item) for item in first.items)
    assert resume == first.until

    await refresh(db, "http://a/3", 200.0)
    await db.delete("http://a/5", now=200.0)
    await put(db, "http://a/7", 200.0, ("Title", b"new"))
    await put(db, "http://b/", 200.0)

    second = await collect(db, resume)
    assert shape(second.items) == [
        ("REFRESH", "http://a/3"),
        ("DELETE", "http://a/5"),
        ("FILE", "http://a/7"),
        ("FILE", "http://b/"),
    ]
    third = await collect(db, max(update_time(item) for item in second.items))
    assert third.items == []
    assert third.until == second.until  # nothing new: resume from the same point


async def test_an_empty_database_exports_nothing_until_zero(db: GathererDatabase) -> None:
    got = await collect(db, None)
    assert (got.items, got.chunks, got.until) == ([], [], 0.0)


async def test_wrappers_and_chunks_hold_at_most_one_batch(db: GathererDatabase) -> None:
    for i in range(25):
        await put(db, f"http://a/{i}", 100.0)
    for i in range(25):
        await refresh(db, f"http://a/{i}", 200.0)

    got = await collect(db, 150.0, batch=10)

    assert len(got.chunks) == 3
    assert [len(decode(chunk)) for chunk in got.chunks] == [10, 10, 5]
    assert got.raw.count(b"@REFRESH {") == 3
    assert shape(got.items) == [("REFRESH", f"http://a/{i}") for i in range(25)]


async def test_since_is_taken_to_the_microsecond_without_missing_a_change(
    db: GathererDatabase,
) -> None:
    await put(db, "http://a/", 100.000001)
    await put(db, "http://b/", 100.000002)

    assert shape((await collect(db, float("100.000001"))).items) == [("FILE", "http://b/")]
    # Between two microseconds: rounded down, so the change at 100.000001 is still sent.
    assert len((await collect(db, 100.0000007)).items) == 2
    assert len((await collect(db, 100.0000012)).items) == 1


async def test_a_since_older_than_the_kept_tombstones_gets_a_complete_export(
    tmp_path: Path,
) -> None:
    day = 86_400.0
    async with await GathererDatabase.open(tmp_path / "g.db", tombstone_retention=day) as db:
        for url in ("http://a/", "http://b/"):
            await db.put(
                record(url),
                md5=None,
                etag=None,
                last_modified=None,
                now=0.0,
                time_to_live=10 * day,
                refresh_rate=day,
            )
        await db.delete("http://b/", now=10.0)
        before = await collect(db, 5.0)
        assert (shape(before.items), before.complete) == ([("DELETE", "http://b/")], False)

        assert await db.expire(10.0 + day + 1) == []  # drops b's tombstone

        late = await collect(db, 5.0)  # would miss b's deletion: everything instead
        assert (shape(late.items), late.complete) == ([("FILE", "http://a/")], True)
        current = await collect(db, 10.0)  # saw the deletion: still incremental
        assert (current.items, current.complete) == ([], False)


def test_merged_replaces_same_named_attributes_in_place_and_appends_the_rest() -> None:
    generated = Record("FILE", "http://a/", (("Title", b"gen"), ("Type", b"HTML"), ("Size", b"1")))
    manual = Record("FILE", "http://a/", (("type", b"Manual"), ("Keywords", b"k")))

    assert merged(generated, manual).attributes == (
        ("Title", b"gen"),
        ("type", b"Manual"),
        ("Size", b"1"),
        ("Keywords", b"k"),
    )


async def test_manual_records_merge_over_generated_ones_on_export(db: GathererDatabase) -> None:
    await put(db, "http://a/", 100.0, ("Title", b"gen"), ("Type", b"HTML"))
    await db.put_manual(
        "http://a/",
        Record("FILE", "http://a/", (("title", b"Manual"), ("Update-Time", b"1"), ("K", b"k"))),
        now=200.0,
    )
    await db.put_manual("http://alone/", record("http://alone/", ("Title", b"only")), now=300.0)

    got = await collect(db, None)

    assert got.items == [
        Record(
            "FILE",
            "http://a/",
            (
                ("title", b"Manual"),
                ("Type", b"HTML"),
                ("Update-Time", b"200.000000"),  # the database's, never the manual one
                ("Time-to-Live", b"1000"),
                ("Refresh-Rate", b"100"),
                ("K", b"k"),
            ),
        ),
        Record("FILE", "http://alone/", (("Title", b"only"), ("Update-Time", b"300.000000"))),
    ]


async def test_manual_changes_reach_incremental_exports(db: GathererDatabase) -> None:
    await put(db, "http://a/", 100.0, ("Title", b"gen-a"))
    await put(db, "http://b/", 100.0, ("Title", b"gen-b"))
    await db.put_manual("http://a/", record("http://a/", ("Title", b"man-a")), now=110.0)
    await db.put_manual("http://b/", record("http://b/", ("Title", b"man-b")), now=110.0)
    await db.put_manual("http://m/", record("http://m/"), now=110.0)
    since = 150.0

    await refresh(db, "http://a/", 200.0)  # merged, unchanged: a refresh
    await db.delete_manual("http://b/", now=210.0)  # the generated record alone now
    await db.delete_manual("http://m/", now=220.0)  # nothing left: a deletion
    await db.put_manual("http://n/", record("http://n/"), now=230.0)
    await db.delete("http://n/", now=240.0)  # no generated record: nothing happens
    await db.put_manual("http://a/", record("http://a/", ("Title", b"man-a2")), now=250.0)
    await db.delete("http://a/", now=260.0)  # the manual record alone now

    got = await collect(db, since)

    assert shape(got.items) == [
        ("FILE", "http://b/"),
        ("DELETE", "http://m/"),
        ("FILE", "http://n/"),
        ("FILE", "http://a/"),
    ]
    b, _, _, a = got.items
    assert isinstance(b, Record)
    assert isinstance(a, Record)
    assert (b.get("Title"), b.text("Update-Time")) == (b"gen-b", "210.000000")
    assert a.attributes == (("Title", b"man-a2"), ("Update-Time", b"260.000000"))


async def test_a_snapshot_ignores_writes_made_during_the_export_and_does_not_stall_them(
    db: GathererDatabase,
) -> None:
    for i in range(100):
        await put(db, f"http://a/{i}", 100.0)
    async with export(db, None, batch=10) as stream:
        chunks = aiter(stream)
        first = await anext(chunks)
        started = time.monotonic()
        for i in range(50):
            await put(db, f"http://new/{i}", 200.0)
        await db.delete("http://a/99", now=300.0)
        await refresh(db, "http://a/0", 300.0)
        writing = time.monotonic() - started
        rest = [chunk async for chunk in chunks]

    items = decode(first + b"".join(rest))
    assert shape(items) == [("FILE", f"http://a/{i}") for i in range(100)]
    assert stream.until == 100.000099
    assert writing < 5.0  # in WAL mode the open read does not hold the writer up
    assert len(await db.urls()) == 149


async def test_exports_beyond_the_limit_wait_and_open_ones_read_interleaved(
    tmp_path: Path,
) -> None:
    async with await GathererDatabase.open(tmp_path / "g.db", max_exports=2) as db:
        for i in range(30):
            await put(db, f"http://a/{i}", 100.0)
        for i in range(10):
            await refresh(db, f"http://a/{i}", 200.0)
        got: dict[str, list[bytes]] = {"all": [], "since": []}
        async with export(db, None, batch=7) as every, export(db, 150.0, batch=7) as changes:
            third = asyncio.create_task(collect(db, None))
            done, _ = await asyncio.wait([third], timeout=0.3)
            assert not done  # two snapshots are open: the third export waits
            streams = {"all": aiter(every), "since": aiter(changes)}
            for _ in range(6):  # 5 chunks of the whole, 2 of the changes
                for name, chunks in streams.items():
                    if (chunk := await anext(chunks, None)) is not None:
                        got[name].append(chunk)
        whole = await asyncio.wait_for(third, 10)

    assert [len(chunks) for chunks in got.values()] == [5, 2]
    every_items = decode(b"".join(got["all"]))
    assert every_items == whole.items
    refreshed_last = [*range(10, 30), *range(10)]
    assert shape(every_items) == [("FILE", f"http://a/{i}") for i in refreshed_last]
    assert shape(decode(b"".join(got["since"]))) == [
        ("REFRESH", f"http://a/{i}") for i in range(10)
    ]


async def test_iterating_without_async_with_takes_and_releases_a_snapshot(
    tmp_path: Path,
) -> None:
    async with await GathererDatabase.open(tmp_path / "g.db", max_exports=1) as db:
        for i in range(20):
            await put(db, f"http://a/{i}", 100.0)
        stream = export(db, None, batch=5)
        with pytest.raises(RuntimeError, match="snapshot"):
            _ = stream.until

        whole = [chunk async for chunk in stream]
        assert len(decode(b"".join(whole))) == 20

        # Abandoned midway, the iteration's closing releases the snapshot.
        async with contextlib.aclosing(aiter(export(db, None, batch=5))) as chunks:
            assert len(decode(await anext(chunks))) == 5
        again = await asyncio.wait_for(collect(db, 99.0), 5)  # not waiting for a snapshot
        assert len(again.items) == 20


async def test_a_batch_must_hold_something(db: GathererDatabase) -> None:
    with pytest.raises(ValueError, match="batch"):
        export(db, None, batch=0)


async def test_a_large_export_streams_in_bounded_batches(big_db: GathererDatabase) -> None:
    largest_record = 0
    count = 0
    chunks = 0
    async with export(big_db, None, batch=500) as stream:
        async for chunk in stream:
            items = decode(chunk)
            assert len(items) <= 500
            largest_record = max(largest_record, max(len(c) for c in chunk.split(b"@FILE")))
            assert len(chunk) <= 500 * largest_record
            count += len(items)
            chunks += 1
    assert (count, chunks) == (BIG, BIG // 500)


# --- the service ------------------------------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    # No automatic Accept-Encoding or decompression: each test says what it sends.
    async with aiohttp.ClientSession(
        auto_decompress=False, skip_auto_headers=("Accept-Encoding",)
    ) as session:
        yield session


@contextlib.asynccontextmanager
async def service(db: GathererDatabase) -> AsyncIterator[str]:
    async with serve(db, "127.0.0.1", 0, "test-gatherer") as port:
        yield f"http://127.0.0.1:{port}"


async def test_the_status_page(db: GathererDatabase, client: aiohttp.ClientSession) -> None:
    await put(db, "http://a/", 100.0)
    await put(db, "http://b/", 100.0)
    await db.delete("http://b/", now=200.25)
    async with service(db) as base, client.get(f"{base}/") as response:
        assert response.status == 200
        assert await response.json() == {
            "name": "test-gatherer",
            "records": 1,
            "manual": 0,
            "tombstones": 1,
            "failing": 0,
            "last_update": "200.250000",
        }


@pytest.mark.parametrize(
    ("accept", "encoding"),
    [(None, "gzip"), ("gzip, zstd;q=0.5", "zstd"), ("identity", "identity")],
)
async def test_records_are_streamed_compressed_as_asked(
    db: GathererDatabase, client: aiohttp.ClientSession, accept: str | None, encoding: str
) -> None:
    for i in range(50):
        await put(db, f"http://a/{i}", 100.0)
    headers = {} if accept is None else {"Accept-Encoding": accept}
    async with service(db) as base, client.get(f"{base}/records", headers=headers) as response:
        body = await response.read()
        assert response.status == 200
        assert response.headers.get("Content-Encoding") == (
            None if encoding == "identity" else encoding
        )
        assert response.headers["Content-Type"] == "application/x-soif"
        assert response.headers["Vary"] == "Accept-Encoding"
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert response.headers["X-Harvest-Until"] == "100.000049"
        assert response.headers["X-Harvest-Complete"] == "true"
        assert "X-Harvest-Since" not in response.headers
    items = decode(decompress(body, encoding))
    assert shape(items) == [("FILE", f"http://a/{i}") for i in range(50)]


async def test_records_since_a_time_over_http(
    db: GathererDatabase, client: aiohttp.ClientSession
) -> None:
    for i in range(5):
        await put(db, f"http://a/{i}", 100.0)
    async with service(db) as base:
        async with client.get(f"{base}/records") as response:
            until = response.headers["X-Harvest-Until"]
            await response.read()
        await refresh(db, "http://a/1", 200.0)
        await db.delete("http://a/2", now=210.0)
        params = {"since": until}
        async with client.get(f"{base}/records", params=params) as response:
            body = decompress(await response.read(), "gzip")
            assert response.headers["X-Harvest-Since"] == "100.000004"
            assert response.headers["X-Harvest-Until"] == "210.000000"
            assert response.headers["X-Harvest-Complete"] == "false"
        assert shape(decode(body)) == [("REFRESH", "http://a/1"), ("DELETE", "http://a/2")]
        params = {"since": "210.000000"}
        async with client.get(f"{base}/records", params=params) as response:
            assert decompress(await response.read(), "gzip") == b""
            assert response.headers["X-Harvest-Until"] == "210.000000"


@pytest.mark.parametrize("since", ["abc", "-1", "1e9", "nan", " 5", "1.", ""])
async def test_a_bad_since_is_a_400(
    db: GathererDatabase, client: aiohttp.ClientSession, since: str
) -> None:
    async with (
        service(db) as base,
        client.get(f"{base}/records", params={"since": since}) as response,
    ):
        assert response.status == 400
        assert "since must be epoch seconds" in await response.text()


async def test_a_closed_database_is_a_503(tmp_path: Path, client: aiohttp.ClientSession) -> None:
    db = await GathererDatabase.open(tmp_path / "g.db")
    async with service(db) as base:
        await db.close()
        for path in ("/", "/records"):
            async with client.get(f"{base}{path}") as response:
                assert response.status == 503
                assert "closed" in await response.text()


async def test_a_client_leaving_midway_releases_its_snapshot(
    big_db: GathererDatabase, client: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {"Accept-Encoding": "identity"}
    async with service(big_db) as base:  # big_db allows one export at a time
        async with client.get(f"{base}/records", headers=headers) as response:
            assert len(await response.content.read(10_000)) > 0
            response.close()  # hang up with most of the stream unsent
        again = f"{base}/records?since=999"
        async with asyncio.timeout(10), client.get(again, headers=headers) as response:
            assert response.status == 200
            assert len(decode(await response.read())) == BIG
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # hanging up is normal
