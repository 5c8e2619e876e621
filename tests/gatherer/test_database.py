"""The gatherer database: stored records, the update-time clock, tombstones, manual records,
stored listings."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gatherer import schema
from gatherer.database import DAY, GathererDatabase, Stored, StoredListing
from gatherer.errors import DatabaseError
from harvest_common.soif import Record, encode

TTL = 1000.0
RATE = 100.0


def record(url: str, title: str = "T", **more: bytes) -> Record:
    return Record("FILE", url, (("Title", title.encode()), *more.items()))


async def put(db: GathererDatabase, url: str, now: float, title: str = "T") -> float:
    return await db.put(
        record(url, title),
        md5=f"md5-{title}",
        etag='"e1"',
        last_modified="Mon, 02 Nov 2026 10:00:00 GMT",
        now=now,
        time_to_live=TTL,
        refresh_rate=RATE,
    )


def alter(path: Path, *statements: str) -> None:
    """Change the database file behind the gatherer's back, as damage or an old version would."""
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


async def stored(db: GathererDatabase, url: str) -> Stored:
    found = await db.get(url)
    assert found is not None
    return found


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[GathererDatabase]:
    async with await GathererDatabase.open(tmp_path / "gatherer.db") as database:
        yield database


async def test_put_then_get_keeps_record_validators_and_times(db: GathererDatabase) -> None:
    update_time = await put(db, "http://a.example/", now=1000.5)

    got = await stored(db, "http://a.example/")
    assert update_time == 1000.5
    assert (got.md5, got.etag, got.last_modified) == (
        "md5-T",
        '"e1"',
        "Mon, 02 Nov 2026 10:00:00 GMT",
    )
    assert got.content_time == got.update_time == 1000.5
    assert (got.expires, got.refresh_at) == (1000.5 + TTL, 1000.5 + RATE)
    assert (got.failures, got.last_error) == (0, None)
    # The database stamps the attributes it owns; the rest is the record as given.
    assert got.record.url == "http://a.example/"
    assert got.record.get("Title") == b"T"
    assert got.record.text("Update-Time") == "1000.500000"
    assert got.record.text("Time-to-Live") == "1000"
    assert got.record.text("Refresh-Rate") == "100"
    assert await db.get("http://missing.example/") is None


async def test_update_times_are_unique_and_increasing_even_for_equal_or_earlier_nows(
    db: GathererDatabase,
) -> None:
    times = [await put(db, f"http://a.example/{i}", now=500.0) for i in range(5)]
    times.append(await put(db, "http://a.example/late", now=400.0))  # the clock went back
    refreshed = await db.refresh("http://a.example/0", now=500.0, time_to_live=1, refresh_rate=1)
    assert refreshed is not None
    times.append(refreshed)
    times.append(await put(db, "http://a.example/next", now=600.0))

    assert times == [
        500.0,
        500.000001,
        500.000002,
        500.000003,
        500.000004,
        500.000005,
        500.000006,
        600.0,
    ]
    got = await stored(db, "http://a.example/late")
    assert got.record.text("Update-Time") == "500.000005"


async def test_the_clock_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    async with await GathererDatabase.open(path) as db:
        first = await put(db, "http://a.example/", now=2000.0)
    async with await GathererDatabase.open(path) as db:
        second = await put(db, "http://b.example/", now=1500.0)
        assert (await stored(db, "http://a.example/")).update_time == first
    assert second == 2000.000001


async def test_refresh_extends_lifetimes_and_update_time_but_not_content_time(
    db: GathererDatabase,
) -> None:
    await put(db, "http://a.example/", now=100.0)
    await db.fail("http://a.example/", "timeout", now=150.0)

    refreshed = await db.refresh("http://a.example/", now=200.0, time_to_live=50, refresh_rate=20)

    got = await stored(db, "http://a.example/")
    assert refreshed == got.update_time == 200.0
    assert got.content_time == 100.0
    assert (got.expires, got.refresh_at, got.time_to_live) == (250.0, 220.0, 50.0)
    assert (got.failures, got.failed_at, got.last_error) == (0, None, None)
    assert got.record.text("Update-Time") == "200.000000"
    assert got.record.text("Time-to-Live") == "50"
    assert got.record.get("Title") == b"T"
    assert await db.refresh("http://missing/", now=300.0, time_to_live=1, refresh_rate=1) is None


async def test_fail_counts_and_keeps_the_record(db: GathererDatabase) -> None:
    await put(db, "http://a.example/", now=100.0)

    assert await db.fail("http://a.example/", "connect: refused", now=110.0) == 1
    assert await db.fail("http://a.example/", "timeout", now=120.0, retry_at=130.0) == 2

    got = await stored(db, "http://a.example/")
    assert (got.failures, got.failed_at, got.last_error) == (2, 120.0, "timeout")
    assert got.refresh_at == 130.0
    assert got.update_time == 100.0  # nothing exported changed
    assert await db.fail("http://missing/", "x", now=120.0) is None
    assert (await db.stats()).failing == 1


async def test_delete_leaves_a_tombstone_that_a_new_put_clears(db: GathererDatabase) -> None:
    await put(db, "http://a.example/", now=100.0)
    await put(db, "http://b.example/", now=100.0)

    assert await db.delete("http://a.example/", now=200.0)
    assert not await db.delete("http://a.example/", now=201.0)
    assert await db.get("http://a.example/") is None
    stats = await db.stats()
    assert (stats.records, stats.tombstones, stats.last_update) == (1, 1, 200.0)

    await put(db, "http://a.example/", now=300.0)
    stats = await db.stats()
    assert (stats.records, stats.tombstones) == (2, 0)


async def test_expire_removes_records_past_their_lifetime_and_old_tombstones(
    tmp_path: Path,
) -> None:
    async with await GathererDatabase.open(tmp_path / "g.db", tombstone_retention=DAY) as db:
        await put(db, "http://old.example/", now=0.0)  # expires at TTL
        await put(db, "http://new.example/", now=500.0)  # expires at 500 + TTL

        assert await db.expire(TTL - 1) == []
        assert await db.expire(TTL) == ["http://old.example/"]
        assert await db.urls() == {"http://new.example/"}
        assert (await db.stats()).tombstones == 1

        # A day later the tombstone goes; the record of new.example expired meanwhile.
        assert await db.expire(TTL + DAY + 1) == ["http://new.example/"]
        stats = await db.stats()
        assert (stats.records, stats.tombstones) == (0, 1)


async def test_due_lists_the_longest_waiting_first_up_to_the_limit(db: GathererDatabase) -> None:
    for now, url in ((30.0, "http://c/"), (10.0, "http://a/"), (20.0, "http://b/")):
        await put(db, url, now=now)  # refresh_at = now + RATE

    assert await db.due(10.0 + RATE - 1, 10) == []
    assert await db.due(30.0 + RATE, 10) == ["http://a/", "http://b/", "http://c/"]
    assert await db.due(30.0 + RATE, 2) == ["http://a/", "http://b/"]
    await db.refresh("http://a/", now=100.0, time_to_live=TTL, refresh_rate=RATE)
    assert await db.due(30.0 + RATE, 10) == ["http://b/", "http://c/"]


async def test_urls_and_count(db: GathererDatabase) -> None:
    for i in range(3):
        await put(db, f"http://a.example/{i}", now=1.0)
    await db.put_manual("http://m.example/", record("http://m.example/"), now=2.0)

    assert await db.count() == 3
    assert await db.urls() == {f"http://a.example/{i}" for i in range(3)}
    assert await db.manual_urls() == {"http://m.example/"}


async def test_manual_records_are_kept_apart_from_gathering(db: GathererDatabase) -> None:
    manual = record("http://a.example/", "Hand-written", Keywords=b"k")
    await put(db, "http://a.example/", now=100.0)
    assert await db.put_manual("http://a.example/", manual, now=200.0) == 200.0

    # Re-gathering replaces the generated record only.
    await put(db, "http://a.example/", now=300.0, title="Regathered")
    await db.delete("http://a.example/", now=400.0)
    assert await db.manual_urls() == {"http://a.example/"}
    assert await db.get("http://a.example/") is None
    assert (await db.stats()).tombstones == 0  # the manual record is still exported

    assert await db.delete_manual("http://a.example/", now=500.0)
    assert not await db.delete_manual("http://a.example/", now=501.0)
    stats = await db.stats()
    assert (stats.manual, stats.tombstones) == (0, 1)


async def test_manual_changes_without_a_time_take_the_next_tick(db: GathererDatabase) -> None:
    await put(db, "http://a.example/", now=100.0)
    assert await db.put_manual("http://m.example/", record("http://m.example/")) == 100.000001
    assert await db.delete_manual("http://m.example/")
    assert (await db.stats()).last_update == 100.000002


async def test_a_manual_record_for_another_url_is_refused(db: GathererDatabase) -> None:
    with pytest.raises(ValueError, match=r"not 'http://b\.example/'"):
        await db.put_manual("http://b.example/", record("http://a.example/"), now=1.0)


async def test_a_put_changing_the_generated_record_moves_its_manual_merge_time(
    db: GathererDatabase,
) -> None:
    await put(db, "http://a.example/", now=100.0)
    await db.put_manual("http://a.example/", record("http://a.example/", "M"), now=200.0)

    got = await stored(db, "http://a.example/")
    # The exported (merged) form changed, so the generated record's times moved with it.
    assert got.update_time == got.content_time == 200.0
    assert got.record.text("Update-Time") == "200.000000"
    assert got.record.get("Title") == b"T"  # the stored generated record is not merged


async def test_opening_a_directory_is_a_database_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="cannot open gatherer database"):
        await GathererDatabase.open(tmp_path)


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    await (await GathererDatabase.open(path)).close()
    alter(path, "PRAGMA user_version = 99")
    with pytest.raises(DatabaseError, match="schema version 99"):
        await GathererDatabase.open(path)


async def test_listings_are_stored_apart_touched_and_expired(tmp_path: Path) -> None:
    async with await GathererDatabase.open(tmp_path / "g.db") as db:
        url = "http://a.example/sitemap.xml"
        assert await db.get_listing(url) is None
        first = StoredListing(b"entries", "md5-1", '"e1"', "Mon, 02 Nov 2026 10:00:00 GMT", 10.0)
        await db.put_listing(url, first, time_to_live=TTL)
        assert await db.get_listing(url) == first
        # Never a record: not counted, not exported, not due.
        assert (await db.stats()).records == 0
        assert await db.urls() == set()
        assert await db.due(1e12, 10) == []
        await db.touch_listing(url, now=500.0, time_to_live=TTL)
        touched = await db.get_listing(url)
        assert touched is not None
        assert (touched.entries, touched.etag, touched.checked) == (b"entries", '"e1"', 500.0)
        second = StoredListing(b"other", None, None, None, 600.0)
        await db.put_listing(url, second, time_to_live=TTL)
        assert await db.get_listing(url) == second
        assert await db.expire(600.0 + TTL - 1) == []
        assert await db.get_listing(url) == second
        await db.expire(600.0 + TTL)
        assert await db.get_listing(url) is None


async def test_a_damaged_stored_record_is_a_database_error(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    async with await GathererDatabase.open(path) as db:
        await put(db, "http://a.example/", now=1.0)
        alter(path, "UPDATE records SET soif = x'00ff'")
        with pytest.raises(DatabaseError, match=r"stored record for http://a\.example/"):
            await db.get("http://a.example/")


async def test_a_closed_database_refuses_work(tmp_path: Path) -> None:
    db = await GathererDatabase.open(tmp_path / "g.db")
    await db.close()
    await db.close()  # idempotent
    assert "closed" in repr(db)
    with pytest.raises(DatabaseError, match="is closed"):
        await db.count()
    with pytest.raises(DatabaseError, match="is closed"):
        async with db.snapshot(None):
            pass


async def test_sqlite_errors_become_database_errors(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    async with await GathererDatabase.open(path) as db:
        await put(db, "http://a.example/", now=1.0)
        conn = sqlite3.connect(path)
        conn.execute("DROP TABLE tombstones")
        conn.commit()
        conn.close()
        with pytest.raises(DatabaseError) as caught:
            await db.delete("http://a.example/", now=2.0)
        assert isinstance(caught.value.__cause__, sqlite3.Error)
        assert await db.urls() == {"http://a.example/"}  # the delete was rolled back


async def test_fingerprints_are_kept_as_unsigned_64_bit_values(db: GathererDatabase) -> None:
    high = (1 << 64) - 5  # above SQLite's signed range: stored as a negative integer
    for url, value in (("http://a.example/", high), ("http://b.example/", 7)):
        await db.put(
            record(url),
            md5=None,
            etag=None,
            last_modified=None,
            now=1.0,
            time_to_live=TTL,
            refresh_rate=RATE,
            fingerprint=value,
        )
    await put(db, "http://c.example/", now=2.0)  # no fingerprint

    assert sorted(await db.fingerprints()) == [
        ("http://a.example/", high),
        ("http://b.example/", 7),
    ]


def write_version_1(path: Path) -> None:
    """A database file as version 1 wrote it: the records without fingerprints, no runs, no
    listings."""
    conn = sqlite3.connect(path)
    conn.executescript(schema._TABLES)
    conn.execute("ALTER TABLE records DROP COLUMN fingerprint")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


async def test_a_version_1_database_is_upgraded_with_its_records(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    write_version_1(path)
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO records (url, soif, content_us, update_us, time_to_live, expires,"
        " refresh_at) VALUES (?, ?, 1, 1, 10, 10, 10)",
        ("http://a.example/", encode(record("http://a.example/"))),
    )
    conn.commit()
    conn.close()

    async with await GathererDatabase.open(path) as db:
        assert (await stored(db, "http://a.example/")).record.get("Title") == b"T"
        assert await db.fingerprints() == []
        await db.put(
            record("http://b.example/"),
            md5=None,
            etag=None,
            last_modified=None,
            now=1001.0,
            time_to_live=TTL,
            refresh_rate=RATE,
            fingerprint=42,
        )
        assert await db.fingerprints() == [("http://b.example/", 42)]
        listing = StoredListing(b"x", None, None, None, 2.0)
        await db.put_listing("http://a.example/feed", listing, time_to_live=TTL)
        assert await db.get_listing("http://a.example/feed") == listing
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (schema.VERSION,)
    conn.close()
