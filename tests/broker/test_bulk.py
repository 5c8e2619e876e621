"""broker.bulk: the SOIF bulk export (complete, incremental, filtered by a query, compressed),
and a second broker collecting a filtered view of the first through it."""

from __future__ import annotations

import gzip
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import zstandard

from broker.app import Broker
from broker.bulk import delete_marker, plan, render
from broker.oid import oid
from broker.query import parse
from broker.registry import Change
from harvest_common.soif import Delete, Item, Record, decode
from tests.broker.test_api import (
    IDENTITY,
    get_json,
    load,
    make,
    pulled,
    put,
    running,
    url_of,
)
from tests.broker.test_collector import gatherer_service

Export = tuple[dict[str, str], list[Item]]


async def bulk(
    session: aiohttp.ClientSession, broker: Broker, coding: str = "identity", **params: str
) -> Export:
    """The export's headers and decoded items."""
    async with session.get(
        f"{url_of(broker)}/bulk",
        params=params,
        headers={"Accept-Encoding": coding},
        auto_decompress=False,
    ) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "application/x-soif"
        body = await response.read()
        headers = dict(response.headers)
    if coding == "gzip":
        assert headers["Content-Encoding"] == "gzip"
        body = gzip.decompress(body)
    elif coding == "zstd":
        assert headers["Content-Encoding"] == "zstd"
        body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
    else:
        assert "Content-Encoding" not in headers
    return headers, decode(body)


def urls(items: list[Item]) -> list[str]:
    return [item.url for item in items if isinstance(item, Record)]


def deleted(items: list[Item]) -> list[Record]:
    return [item.record for item in items if isinstance(item, Delete)]


@pytest.fixture
async def session() -> Any:
    async with aiohttp.ClientSession() as opened:
        yield opened


@pytest.fixture
async def broker(tmp_path: Path) -> Any:
    async with running(tmp_path / "b") as started:
        yield started


async def test_a_full_export_holds_every_object_and_says_it_is_complete(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    records = [make(f"http://f.example/{i}", f"full {i}") for i in range(1200)]  # > 2 batches
    await load(broker, "c1", records)
    headers, items = await bulk(session, broker)
    assert headers["X-Harvest-Complete"] == "true"
    assert headers["X-Harvest-Until"] == str(await broker.registry.last_seq()) == "1200"
    assert items == records  # whole records, in change order


@pytest.mark.parametrize("coding", ["zstd", "gzip", "identity"])
async def test_the_export_is_compressed_as_the_client_accepts(
    broker: Broker, session: aiohttp.ClientSession, coding: str
) -> None:
    records = [make(f"http://z.example/{i}", f"compressed {i}" * 20) for i in range(300)]
    await load(broker, "c1", records)
    accept = {"zstd": "gzip, zstd", "gzip": "gzip;q=0.5, br", "identity": "identity"}[coding]
    async with session.get(
        f"{url_of(broker)}/bulk", headers={"Accept-Encoding": accept}, auto_decompress=False
    ) as response:
        assert response.headers.get("Content-Encoding", "identity") == coding
        assert response.headers["Vary"] == "Accept-Encoding"
    _, items = await bulk(session, broker, coding)
    assert items == records


async def test_an_export_can_be_filtered_by_the_objects_urls(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    edu = make("http://www.cs.colorado.edu/harvest/", "home")
    com = make("http://www.example.com/colorado/", "elsewhere")
    await load(broker, "c1", [edu, com])
    _, items = await bulk(session, broker, query=r"URL: /\.edu\//")
    assert urls(items) == [edu.url]
    _, items = await bulk(session, broker, query="URL: colorado")
    assert urls(items) == [edu.url, com.url]
    _, items = await bulk(session, broker, query='URL: "cs.colorado.edu"')
    assert urls(items) == [edu.url]


async def test_an_incremental_export_holds_exactly_the_changes_since(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(broker, "c1", [make(f"http://i.example/{i}", f"first {i}") for i in range(5)])
    since = await broker.registry.last_seq()
    changed = make("http://i.example/1", "first 1, edited")
    added = make("http://i.example/new", "added later")
    await load(broker, "c1", [changed, added, Delete(make("http://i.example/3", "x"))])
    headers, items = await bulk(session, broker, since=str(since))
    assert headers["X-Harvest-Complete"] == "false"
    assert headers["X-Harvest-Until"] == str(await broker.registry.last_seq())
    assert [i for i in items if isinstance(i, Record)] == [changed, added]
    (marker,) = deleted(items)
    assert marker.url == "http://i.example/3"
    # The marker names the object's gatherer: it deletes exactly that object.
    assert marker.text("Gatherer-Name") == "g1"
    assert marker.text("Gatherer-Host") == "gatherer.example"
    assert marker.text("Gatherer-Port") == "8500"
    # Nothing since the last change: an empty, incremental stream.
    last = await broker.registry.last_seq()
    headers, items = await bulk(session, broker, since=str(last))
    assert (headers["X-Harvest-Complete"], items) == ("false", [])


async def test_a_filtered_incremental_export_deletes_what_stopped_matching(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(
        broker,
        "c1",
        [
            make("http://q.example/stays", "web cache"),
            make("http://q.example/leaves", "web cache"),
            make("http://q.example/never", "gardening"),
            make("http://q.example/local", "cache without gatherer", gatherer=False),
        ],
    )
    headers, items = await bulk(session, broker, query="Title: cache")
    assert headers["X-Harvest-Complete"] == "true"
    assert sorted(urls(items)) == [
        "http://q.example/leaves",
        "http://q.example/local",
        "http://q.example/stays",
    ]
    assert deleted(items) == []  # a complete export leaves out what does not match
    since = await broker.registry.last_seq()
    await load(
        broker,
        "c1",
        [
            make("http://q.example/leaves", "now about gardening"),  # edited: no longer matches
            make("http://q.example/stays", "web cache, edited"),
            make("http://q.example/never", "still gardening"),  # never matched: deleted anyway
            Delete(make("http://q.example/local", "x", gatherer=False)),
        ],
    )
    _, items = await bulk(session, broker, since=str(since), query="Title: cache")
    assert urls(items) == ["http://q.example/stays"]
    markers = {m.url: m for m in deleted(items)}
    assert set(markers) == {
        "http://q.example/leaves",
        "http://q.example/never",
        "http://q.example/local",
    }
    assert markers["http://q.example/leaves"].attributes == (
        ("Gatherer-Name", b"g1"),
        ("Gatherer-Host", b"gatherer.example"),
        ("Gatherer-Port", b"8500"),
    )
    # Filed under its collection's name: the marker deletes by URL in the client's collection.
    assert markers["http://q.example/local"].attributes == ()


async def test_a_since_the_registry_cannot_answer_gets_a_complete_export(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(broker, "c1", [make("http://a.example/1", "one")])
    headers, items = await bulk(session, broker, since="999")  # ahead of the registry
    assert headers["X-Harvest-Complete"] == "true"
    assert urls(items) == ["http://a.example/1"]


class _Horizon:
    def __init__(self, last: int, oldest: int) -> None:
        self.last, self.oldest = last, oldest

    async def last_seq(self) -> int:
        return self.last

    async def oldest_seq(self) -> int:
        return self.oldest


@pytest.mark.parametrize(
    ("since", "start", "complete"),
    [
        (None, 0, True),
        (5, 0, True),
        (10, 10, False),
        (15, 15, False),
        (20, 20, False),
        (21, 0, True),
    ],
)
async def test_the_plan_is_complete_unless_the_change_sequence_answers_exactly(
    since: int | None, start: int, complete: bool
) -> None:
    planned = await plan(_Horizon(last=20, oldest=10), since)  # type: ignore[arg-type]
    assert (planned.start, planned.until, planned.complete) == (start, 20, complete)


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"since": "abc"}, "since"),
        ({"since": "-1"}, "since"),
        ({"since": "1.5"}, "since"),
        ({"query": "Title: (cache"}, "unclosed"),
        ({"query": ""}, "empty query"),
    ],
)
async def test_a_bad_since_or_query_is_400(
    broker: Broker, session: aiohttp.ClientSession, params: dict[str, str], needle: str
) -> None:
    answer = await get_json(session, f"{url_of(broker)}/bulk", 400, params=params)
    assert needle in answer["error"]
    if "query" in params:
        assert "position" in answer


@pytest.mark.parametrize(
    ("gatherer", "attributes"),
    [
        (
            "g@h.example:8500",
            (("Gatherer-Name", b"g"), ("Gatherer-Host", b"h.example"), ("Gatherer-Port", b"8500")),
        ),
        (
            "a@b@::1:8500",
            (("Gatherer-Name", b"a@b"), ("Gatherer-Host", b"::1"), ("Gatherer-Port", b"8500")),
        ),
        ("g@:", (("Gatherer-Name", b"g"),)),
        ("collection-name", ()),
    ],
)
def test_a_delete_marker_names_the_gatherer_parsed_from_its_identity(
    gatherer: str, attributes: tuple[tuple[str, bytes], ...]
) -> None:
    marker = delete_marker("http://u.example/", gatherer)
    assert (marker.template, marker.url, marker.attributes) == (
        "FILE",
        "http://u.example/",
        attributes,
    )


def test_render_counts_records_and_deletes() -> None:
    upsert = Change(1, "a" * 32, "upsert", "c", make("http://r/1", "cache"), "http://r/1", IDENTITY)
    other = Change(2, "b" * 32, "upsert", "c", make("http://r/2", "other"), "http://r/2", IDENTITY)
    gone = Change(3, "c" * 32, "remove", "c", None, "http://r/3", IDENTITY)
    node = parse("cache")
    incremental = render([upsert, other, gone], node, complete=False)
    assert (incremental.records, incremental.deletes) == (1, 2)
    items = decode(incremental.soif)
    assert items[0] == upsert.record
    assert [m.url for m in deleted(items)] == ["http://r/2", "http://r/3"]
    assert incremental.soif.count(b"@DELETE") == 1  # the two deletes share one wrapper
    complete = render([upsert, other, gone], node, complete=True)
    assert (complete.records, complete.deletes) == (1, 0)
    assert decode(complete.soif) == [upsert.record]


async def test_a_second_broker_collects_a_filtered_view_of_the_first(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with gatherer_service(tmp_path / "g.db") as (db, source):
        for i in range(6):
            await put(db, make(f"http://v.example/cache/{i}", f"web cache {i}"))
        for i in range(4):
            await put(db, make(f"http://v.example/other/{i}", f"gardening {i}"))
        first = [{"name": "g1", "source": source}]
        async with running(tmp_path / "a", first) as a:
            await pulled(a, "g1")
            second = [
                {"name": "from-a", "source": url_of(a), "kind": "broker", "query": "Title: cache"}
            ]
            async with running(tmp_path / "b", second) as b:
                await pulled(b, "from-a")
                expected = {f"http://v.example/cache/{i}" for i in range(6)}
                assert await holdings(b) == {oid(IDENTITY, u) for u in expected}
                assert (await b.registry.cursor("from-a")) == str(await a.registry.last_seq())
                # Changes at the gatherer: one edited out of the view, one into it, one
                # deleted, one added; A pulls them, then B pulls A's changes (incremental).
                await put(db, make("http://v.example/cache/0", "now about gardening"))
                await put(db, make("http://v.example/other/0", "gardening and web cache"))
                await db.delete("http://v.example/cache/1", now=time.time())
                await put(db, make("http://v.example/cache/new", "new web cache"))
                a.scheduler.trigger("g1")
                await pulled(a, "g1", 2)
                b.scheduler.trigger("from-a")
                await pulled(b, "from-a", 2)
                result = b.scheduler.status()["from-a"].last_result
                assert result is not None
                assert (result.since, result.complete) == ("10", False)
                expected = expected - {"http://v.example/cache/0", "http://v.example/cache/1"}
                expected |= {"http://v.example/other/0", "http://v.example/cache/new"}
                assert await holdings(b) == {oid(IDENTITY, u) for u in expected}
                found = await get_json(
                    session, f"{url_of(b)}/api/search", params={"q": "cache", "limit": "50"}
                )
                assert {r["url"] for r in found["results"]} == expected


async def holdings(broker: Broker) -> set[str]:
    return await broker.registry.oids()
