"""broker.collector and broker.scheduler: pulls from a real gatherer export service (and, for
the failure cases, a scripted origin) into a real registry; the scheduler on a manual clock."""

from __future__ import annotations

import asyncio
import gzip
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import zstandard
from aiohttp import web

from broker.collector import BATCH, Collector, PullResult
from broker.config import BrokerSettings, CollectionConfig
from broker.errors import CollectError
from broker.oid import oid
from broker.registry import Pull, Registry, Stored
from broker.scheduler import Scheduler
from gatherer.database import GathererDatabase
from gatherer.service import serve
from harvest_cache.server.app import CacheServer
from harvest_common.soif import Decoder, Item, Record, encode, encode_delete, encode_update
from harvest_common.soif.transport import STEP, ZSTD_SLICE
from tests.support import Origin, stop_and_read_log
from tests.tls_support import HOST, https_cache, make_trust, tls_origin

NAME = "g1"
NOW = 1_800_000_000.0  # when the broker commits (epoch seconds)
TTL = 1000.0
RATE = 100.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def record(url: str, title: str | None = None) -> Record:
    return Record("FILE", url, (("Title", (title or url).encode()),))


def soif(records: Iterable[Record]) -> bytes:
    return b"".join(encode(r) for r in records)


def many(n: int, prefix: str = "http://s.example/") -> list[Record]:
    return [record(f"{prefix}{i}") for i in range(n)]


def compress(body: bytes, coding: str) -> bytes:
    if coding == "gzip":
        return gzip.compress(body)
    if coding == "zstd":
        return zstandard.ZstdCompressor().compress(body)
    return body


def settings(**values: Any) -> BrokerSettings:
    return BrokerSettings(**{"pull_timeout": 10.0, **values})


def collection(source: str, **values: Any) -> CollectionConfig:
    return CollectionConfig(**{"name": NAME, "source": source, **values})


def key(url: str, name: str = NAME) -> str:
    # The test records carry no Gatherer-* attributes: filed under their collection's name.
    return oid(name, url)


async def holdings(registry: Registry) -> dict[str, Stored]:
    """Every object in the registry, by URL."""
    stored = await registry.get_many(await registry.oids())
    return {s.url: s for s in stored.values()}


async def put(db: GathererDatabase, url: str, now: float, title: str | None = None) -> float:
    return await db.put(
        record(url, title),
        md5=None,
        etag=None,
        last_modified=None,
        now=now,
        time_to_live=TTL,
        refresh_rate=RATE,
    )


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[Registry]:
    async with await Registry.open(tmp_path / "registry.db") as opened:
        yield opened


@pytest.fixture
async def collector(registry: Registry) -> AsyncIterator[Collector]:
    async with Collector(settings(), registry) as opened:
        yield opened


@asynccontextmanager
async def gatherer_service(path: Path) -> AsyncIterator[tuple[GathererDatabase, str]]:
    async with (
        await GathererDatabase.open(path) as db,
        serve(db, "127.0.0.1", 0, "test-gatherer") as port,
    ):
        yield db, f"http://127.0.0.1:{port}"


@pytest.fixture
async def gatherer(tmp_path: Path) -> AsyncIterator[tuple[GathererDatabase, str]]:
    async with gatherer_service(tmp_path / "gatherer.db") as served:
        yield served


def answer(
    body: bytes,
    *,
    coding: str = "identity",
    until: str | None = "5.000000",
    complete: str | None = "true",
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> Handler:
    """A handler sending ``body`` compressed as ``coding``, with the export headers."""
    sent = dict(headers or {})
    if coding != "identity":
        sent["Content-Encoding"] = coding
    if until is not None:
        sent["X-Harvest-Until"] = until
    if complete is not None:
        sent["X-Harvest-Complete"] = complete
    wire = compress(body, coding)

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, body=wire, headers=sent)

    return handler


def cut(body: bytes, coding: str = "identity") -> Handler:
    """A handler that sends the first half of ``body`` compressed as ``coding`` (chunked)
    and hangs up."""
    wire = compress(body, coding)
    headers = {"X-Harvest-Until": "9.000000", "X-Harvest-Complete": "true"}
    if coding != "identity":
        headers["Content-Encoding"] = coding

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        await response.write(wire[: len(wire) // 2])
        assert request.transport is not None
        request.transport.close()
        return response

    return handler


def stall(body: bytes, release: asyncio.Event) -> Handler:
    """A handler that sends ``body`` (chunked), then stalls until ``release`` is set."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"X-Harvest-Until": "9.000000", "X-Harvest-Complete": "true"}
        )
        await response.prepare(request)
        await response.write(body)
        await release.wait()
        return response

    return handler


def refused_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


# --- pulls from a gatherer -------------------------------------------------------------


async def test_a_full_pull_applies_every_record(
    gatherer: tuple[GathererDatabase, str], collector: Collector, registry: Registry
) -> None:
    db, base = gatherer
    for i, url in enumerate(("http://a/", "http://b/", "http://c/")):
        await put(db, url, 100.0 + i)
    result = await collector.pull(collection(base), now=NOW)
    assert result.collection == NAME
    assert result.items == 3
    assert result.complete
    assert result.since is None
    assert result.cursor == "102.000000"
    assert result.bytes > 0
    assert set(result.applied.upserted) == {key(u) for u in ("http://a/", "http://b/", "http://c/")}
    assert result.applied.removed == ()
    held = await holdings(registry)
    assert sorted(held) == ["http://a/", "http://b/", "http://c/"]
    assert held["http://b/"].record.text("Title") == "http://b/"
    assert held["http://b/"].expires == NOW + TTL  # the record's Time-to-Live
    assert await registry.cursor(NAME) == "102.000000"


async def test_an_incremental_pull_applies_exactly_the_changes(
    gatherer: tuple[GathererDatabase, str], collector: Collector, registry: Registry
) -> None:
    db, base = gatherer
    for url in ("http://a/", "http://b/", "http://c/"):
        await put(db, url, 100.0)
    first = await collector.pull(collection(base), now=NOW)
    await put(db, "http://d/", 200.0)
    await put(db, "http://a/", 201.0, title="changed")
    assert await db.refresh("http://b/", now=202.0, time_to_live=5000.0, refresh_rate=RATE)
    assert await db.delete("http://c/", now=203.0)

    second = await collector.pull(collection(base), now=NOW + 10)
    assert second.since == first.cursor
    assert not second.complete
    assert second.items == 4
    assert set(second.applied.upserted) == {key("http://a/"), key("http://d/")}
    assert second.applied.removed == (key("http://c/"),)
    assert second.applied.refreshed == 1
    held = await holdings(registry)
    assert sorted(held) == ["http://a/", "http://b/", "http://d/"]
    assert held["http://a/"].record.text("Title") == "changed"
    assert held["http://b/"].expires == NOW + 10 + 5000.0  # the refresh's Time-to-Live
    assert await registry.cursor(NAME) == second.cursor == "203.000000"

    third = await collector.pull(collection(base), now=NOW + 20)  # nothing changed
    assert (third.items, third.applied.upserted, third.applied.removed) == (0, (), ())
    assert third.since == third.cursor == "203.000000"


@pytest.mark.parametrize("how", ["full", "not incremental"])
async def test_a_complete_pull_removes_the_objects_no_longer_present(
    gatherer: tuple[GathererDatabase, str], collector: Collector, registry: Registry, how: str
) -> None:
    db, base = gatherer
    for url in ("http://a/", "http://b/", "http://c/"):
        await put(db, url, 100.0)
    await collector.pull(collection(base), now=NOW)
    # Forgotten by the gatherer without a trace: only a complete pull can tell.
    async with await GathererDatabase.open(db.path, tombstone_retention=0) as dropping:
        await dropping.delete("http://c/", now=300.0)
        await dropping.expire(now=300.0)
    if how == "full":
        result = await collector.pull(collection(base), now=NOW + 1, full=True)
    else:
        result = await collector.pull(collection(base, incremental=False), now=NOW + 1)
    assert result.since is None
    assert result.complete
    assert result.applied.removed == (key("http://c/"),)
    assert sorted(await holdings(registry)) == ["http://a/", "http://b/"]


async def test_a_large_pull_is_staged_in_batches(
    tmp_path: Path, collector: Collector, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[int] = []
    add = Pull.add

    async def counting_add(self: Pull, items: list[Item]) -> None:
        batches.append(len(items))
        await add(self, items)

    monkeypatch.setattr(Pull, "add", counting_add)
    async with gatherer_service(tmp_path / "big.db") as (db, base):
        for i in range(1234):
            await put(db, f"http://big.example/{i}", 100.0)
        result = await collector.pull(collection(base), now=NOW)
    assert result.items == sum(batches) == 1234
    assert batches == [BATCH, BATCH, 1234 - 2 * BATCH]
    assert len(result.applied.upserted) == await registry.count(NAME) == 1234


# --- the wire: codings, headers, sources, proxy -----------------------------------------


@pytest.mark.parametrize("coding", ["identity", "gzip", "x-gzip", "zstd"])
async def test_bodies_are_decompressed_as_labelled(
    origin: Origin, collector: Collector, registry: Registry, coding: str
) -> None:
    records = many(1500)
    body = soif(records)
    if coding == "x-gzip":
        wire = gzip.compress(body)
        handler = answer(wire, headers={"Content-Encoding": "x-gzip"})
    else:
        wire, handler = compress(body, coding), answer(body, coding=coding)
    origin.route("/records", handler)
    result = await collector.pull(collection(origin.url("")), now=NOW)
    assert result.items == 1500
    assert result.bytes == len(wire)
    assert await registry.count(NAME) == 1500
    assert (await holdings(registry))["http://s.example/7"].record == records[7]
    request = origin.requests[-1]
    assert request.headers["Accept-Encoding"] == "zstd, gzip"
    assert request.headers["User-Agent"] == BrokerSettings().user_agent
    assert request.query_string == ""


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
async def test_a_highly_compressed_body_is_decoded_a_bounded_step_at_a_time(
    origin: Origin,
    collector: Collector,
    registry: Registry,
    monkeypatch: pytest.MonkeyPatch,
    coding: str,
) -> None:
    fed: list[int] = []
    feed = Decoder.feed

    def counting_feed(self: Decoder, data: bytes) -> list[Item]:
        fed.append(len(data))
        return feed(self, data)

    monkeypatch.setattr(Decoder, "feed", counting_feed)
    big = Record("FILE", "http://big/", (("Body", b"x" * (8 * STEP)),))
    records = [*many(3000), big, *many(3, "http://after/")]
    origin.route("/records", answer(soif(records), coding=coding))
    result = await collector.pull(collection(origin.url("")), now=NOW)
    assert result.items == len(records)
    assert result.bytes < 200_000  # the body is a few MB: it came compressed
    assert sum(fed) == len(soif(records))
    # gzip's steps stop at STEP; zstd's at STEP plus what one input slice can expand to (a
    # 128 KiB block per 4 bytes at most).
    bound = STEP if coding == "gzip" else STEP + ZSTD_SLICE // 4 * 128 * 1024
    assert max(fed) <= bound
    assert len(fed) >= len(soif(records)) // bound
    assert (await holdings(registry))["http://big/"].record == big


async def test_a_broker_source_is_asked_for_its_bulk_export_with_the_query(
    origin: Origin, collector: Collector, registry: Registry
) -> None:
    source = collection(origin.url("/broker"), kind="broker", query='Title: "s.example"')
    origin.route("/broker/bulk", answer(encode_update(many(3)), until="seq:42", coding="zstd"))
    first = await collector.pull(source, now=NOW)
    assert dict(origin.requests[-1].query) == {"query": 'Title: "s.example"'}
    assert first.cursor == "seq:42"
    assert len(first.applied.upserted) == 3
    origin.route(
        "/broker/bulk",
        answer(encode_delete([record("http://s.example/1")]), until="seq:43", complete="false"),
    )
    second = await collector.pull(source, now=NOW)
    assert dict(origin.requests[-1].query) == {"since": "seq:42", "query": 'Title: "s.example"'}
    assert second.applied.removed == (key("http://s.example/1"),)
    await collector.pull(collection(origin.url("/broker"), kind="broker"), now=NOW, full=True)
    assert dict(origin.requests[-1].query) == {}


async def test_a_pull_through_the_proxy_reaches_the_source_with_a_via_header(
    origin: Origin,
    registry: Registry,
    make_cache: Callable[..., Awaitable[CacheServer]],
) -> None:
    cache = await make_cache()
    origin.route("/records", answer(soif(many(50)), coding="zstd"))
    proxied = settings(proxy=f"http://127.0.0.1:{cache.address[1]}")
    async with Collector(proxied, registry) as collector:
        for _ in range(2):
            result = await collector.pull(collection(origin.url(""), via_proxy=True), now=NOW)
            assert result.items == 50
    # Both pulls reached the source: a stored answer could be stale.
    assert origin.hits["/records"] == 2
    assert "test-cache" in origin.requests[-1].headers["Via"]
    assert await registry.count(NAME) == 50


async def test_a_pull_from_an_https_source_goes_through_the_cache_in_absolute_form(
    registry: Registry, make_cache: Callable[..., Awaitable[CacheServer]], tmp_path: Path
) -> None:
    """The cache fetches the source over TLS (verifying it) and logs its https:// URL."""
    trust = make_trust(tmp_path)
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as source:
        source.route("/records", answer(soif(many(20)), coding="zstd"))
        cache = await https_cache(make_cache, trust)
        proxied = settings(proxy=f"http://127.0.0.1:{cache.address[1]}")
        base = source.url("", HOST)
        async with Collector(proxied, registry) as collector:
            result = await collector.pull(collection(base, via_proxy=True), now=NOW)
        assert result.items == 20
        assert source.hits["/records"] == 1
        lines = await stop_and_read_log(cache)
    assert [(line.method, line.url.split("?")[0]) for line in lines] == [("GET", f"{base}/records")]


async def test_via_proxy_without_a_proxy_configured_fails(
    origin: Origin, collector: Collector
) -> None:
    origin.route("/records", answer(soif(many(1))))
    with pytest.raises(CollectError) as caught:
        await collector.pull(collection(origin.url(""), via_proxy=True), now=NOW)
    assert caught.value.kind == "connect"
    assert origin.hits["/records"] == 0


# --- failures apply nothing ---------------------------------------------------------------


# Over two batches: some of it is staged before the failure (in half of it, too).
GOOD = soif(many(3 * BATCH, "http://bad.example/"))


@pytest.mark.parametrize(
    ("handler", "kind"),
    [
        pytest.param(answer(b"oops", status=500), "status", id="500"),
        pytest.param(answer(GOOD + b"@FILE { http://x/\n}\nnot SOIF\n"), "protocol", id="soif"),
        pytest.param(answer(GOOD + b"@FILE { http://x/\nTit"), "protocol", id="ends-in-object"),
        pytest.param(cut(GOOD), "protocol", id="cut-identity"),
        pytest.param(cut(GOOD, "gzip"), "protocol", id="cut-gzip"),
        pytest.param(
            answer(compress(GOOD, "zstd")[:-40], headers={"Content-Encoding": "zstd"}),
            "protocol",
            id="zstd-ends-early",
        ),
        pytest.param(
            answer(compress(GOOD, "gzip") + b"junk", headers={"Content-Encoding": "gzip"}),
            "protocol",
            id="gzip-trailing-bytes",
        ),
        pytest.param(
            answer(compress(GOOD, "zstd") + b"junk", headers={"Content-Encoding": "zstd"}),
            "protocol",
            id="zstd-trailing-bytes",
        ),
        pytest.param(
            answer(b"\x1f\x8b\x08\x00garbage" * 100, headers={"Content-Encoding": "gzip"}),
            "protocol",
            id="corrupt-gzip",
        ),
        pytest.param(answer(GOOD, coding="br"), "protocol", id="unknown-coding"),
        pytest.param(answer(GOOD, until=None), "protocol", id="no-until"),
        pytest.param(answer(GOOD, until="yesterday"), "protocol", id="bad-until"),
        pytest.param(answer(GOOD, complete=None), "protocol", id="no-complete"),
        pytest.param(answer(GOOD, complete="maybe"), "protocol", id="bad-complete"),
    ],
)
async def test_a_failed_pull_applies_nothing_and_keeps_the_cursor(
    origin: Origin, collector: Collector, registry: Registry, handler: Handler, kind: str
) -> None:
    origin.route("/records", answer(soif(many(3)), until="5.000000"))
    await collector.pull(collection(origin.url("")), now=NOW)
    before = await holdings(registry)

    origin.route("/records", handler)
    with pytest.raises(CollectError) as caught:
        await collector.pull(collection(origin.url("")), now=NOW + 1)
    assert (caught.value.collection, caught.value.kind) == (NAME, kind)
    assert origin.requests[-1].query["since"] == "5.000000"
    assert await holdings(registry) == before
    assert await registry.cursor(NAME) == "5.000000"


async def test_a_stream_cut_after_batches_were_staged_applies_none_of_them(
    origin: Origin, collector: Collector, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    staged: list[int] = []
    add = Pull.add

    async def counting_add(self: Pull, items: list[Item]) -> None:
        staged.append(len(items))
        await add(self, items)

    monkeypatch.setattr(Pull, "add", counting_add)
    origin.route("/records", cut(GOOD))
    with pytest.raises(CollectError) as caught:
        await collector.pull(collection(origin.url("")), now=NOW)
    assert caught.value.kind == "protocol"
    assert sum(staged) >= BATCH
    assert await registry.count() == 0
    assert await registry.cursor(NAME) is None


async def test_an_error_status_is_reported_with_the_start_of_its_body(
    origin: Origin, collector: Collector
) -> None:
    origin.route("/records", answer(b"since must be\nepoch seconds " + b"x" * 1000, status=400))
    with pytest.raises(CollectError) as caught:
        await collector.pull(collection(origin.url("")), now=NOW)
    assert caught.value.kind == "status"
    assert "400 Bad Request: since must be epoch seconds xxx" in caught.value.reason
    assert len(caught.value.reason) < 400


async def test_a_refused_connection_applies_nothing(
    collector: Collector, registry: Registry
) -> None:
    with pytest.raises(CollectError) as caught:
        await collector.pull(collection(f"http://127.0.0.1:{refused_port()}"), now=NOW)
    assert caught.value.kind == "connect"
    assert await registry.cursor(NAME) is None
    assert await registry.count() == 0


async def test_a_pull_that_takes_too_long_times_out_and_applies_nothing(
    origin: Origin, registry: Registry
) -> None:
    release = asyncio.Event()
    origin.route("/records", stall(GOOD, release))
    try:
        async with Collector(settings(pull_timeout=0.5), registry) as collector:
            started = time.monotonic()
            with pytest.raises(CollectError) as caught:
                await collector.pull(collection(origin.url("")), now=NOW)
            assert time.monotonic() - started < 5
    finally:
        release.set()
    assert caught.value.kind == "timeout"
    assert await registry.count() == 0
    assert await registry.cursor(NAME) is None


async def test_a_registry_failure_is_a_storage_error(tmp_path: Path, origin: Origin) -> None:
    origin.route("/records", answer(soif(many(3))))
    registry = await Registry.open(tmp_path / "closed.db")
    await registry.close()
    async with Collector(settings(), registry) as collector:
        with pytest.raises(CollectError) as caught:
            await collector.pull(collection(origin.url("")), now=NOW)
    assert caught.value.kind == "storage"


# --- the scheduler ----------------------------------------------------------------------


class ManualClock:
    """Time that moves only when the test says so; waits end on ``advance`` (the scheduler
    then checks the time again)."""

    def __init__(self, now: float) -> None:
        self.t = now
        self._waiting: set[asyncio.Event] = set()

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds
        for event in self._waiting:
            event.set()

    async def wait(self, event: asyncio.Event, delay: float | None) -> None:
        if delay is not None and delay <= 0:
            return
        self._waiting.add(event)
        try:
            await event.wait()
        finally:
            self._waiting.discard(event)


class Applied:
    """An on_applied callback that keeps what it is given."""

    def __init__(self) -> None:
        self.results: list[PullResult] = []

    async def __call__(self, result: PullResult) -> None:
        self.results.append(result)

    def names(self) -> list[str]:
        return [r.collection for r in self.results]


async def quiet() -> None:
    """Long enough for a pull that should not happen to show up."""
    await asyncio.sleep(0.1)


async def test_the_scheduler_pulls_each_collection_on_its_interval(
    tmp_path: Path, collector: Collector, registry: Registry
) -> None:
    clock = ManualClock(NOW)
    applied = Applied()
    async with AsyncExitStack() as stack:
        db1, base1 = await stack.enter_async_context(gatherer_service(tmp_path / "1.db"))
        db2, base2 = await stack.enter_async_context(gatherer_service(tmp_path / "2.db"))
        await put(db1, "http://one/", 100.0)
        await put(db2, "http://two/", 100.0)
        collections = [
            CollectionConfig(name="one", source=base1, interval=60.0),
            CollectionConfig(name="two", source=base2, interval=300.0),
        ]
        scheduler = Scheduler(collector, collections, applied, clock=clock)
        async with scheduler:
            # Both are due at start.
            await until(lambda: len(applied.results) == 2)
            assert sorted(applied.names()) == ["one", "two"]
            status = scheduler.status()
            assert status["one"].next_due == NOW + 60
            assert status["two"].next_due == NOW + 300
            assert status["one"].last_success == NOW
            assert status["one"].pulls == 1
            assert status["one"].last_error is None

            await put(db1, "http://one/new", 200.0)
            clock.advance(59)
            await quiet()
            assert len(applied.results) == 2
            clock.advance(1)
            await until(lambda: len(applied.results) == 3)
            assert applied.results[-1].collection == "one"
            assert applied.results[-1].applied.upserted == (key("http://one/new", "one"),)

            clock.advance(240)  # NOW + 300: both due
            await until(lambda: len(applied.results) == 5)
            assert sorted(applied.names()[3:]) == ["one", "two"]
            status = scheduler.status()
            assert (status["one"].pulls, status["two"].pulls) == (3, 2)
            assert status["one"].next_due == NOW + 360
            assert status["two"].next_due == NOW + 600
    assert await registry.count("one") == 2
    assert await registry.count("two") == 1


async def test_the_scheduler_backs_off_after_failures_and_recovers(
    origin: Origin, collector: Collector
) -> None:
    clock = ManualClock(NOW)
    applied = Applied()
    origin.route("/records", answer(b"down", status=503))
    source = collection(origin.url(""), interval=3600.0)
    scheduler = Scheduler(collector, [source], applied, clock=clock, jitter=lambda: 1.0)
    async with scheduler:
        await until(lambda: scheduler.status()[NAME].failures == 1)
        status = scheduler.status()[NAME]
        assert status.last_error is not None
        assert status.last_error.kind == "status"
        assert status.last_error_at == NOW
        assert status.next_due == NOW + 30
        assert status.last_success is None

        clock.advance(29)
        await quiet()
        assert origin.hits["/records"] == 1
        clock.advance(1)
        await until(lambda: scheduler.status()[NAME].failures == 2)
        assert scheduler.status()[NAME].next_due == NOW + 30 + 60
        assert scheduler.status()[NAME].consecutive_failures == 2

        origin.route("/records", answer(soif(many(2))))
        clock.advance(60)
        await until(lambda: len(applied.results) == 1)
        await until(lambda: not scheduler.status()[NAME].running)
        status = scheduler.status()[NAME]
        assert (status.pulls, status.failures, status.consecutive_failures) == (3, 2, 0)
        assert status.last_success == NOW + 90
        assert status.next_due == NOW + 90 + 3600
        assert status.last_result is not None
        assert status.last_result.items == 2
    assert origin.hits["/records"] == 3


async def test_a_trigger_pulls_at_once(origin: Origin, collector: Collector) -> None:
    clock = ManualClock(NOW)
    applied = Applied()
    origin.route("/records", answer(soif(many(2)), complete="false"))
    scheduler = Scheduler(collector, [collection(origin.url(""))], applied, clock=clock)
    async with scheduler:
        await until(lambda: len(applied.results) == 1)
        with pytest.raises(KeyError):
            scheduler.trigger("nope")
        scheduler.trigger(NAME)
        await until(lambda: len(applied.results) == 2)
        assert origin.requests[-1].query["since"] == "5.000000"
        scheduler.trigger(NAME, full=True)
        await until(lambda: len(applied.results) == 3)
        assert "since" not in origin.requests[-1].query
    assert origin.hits["/records"] == 3


async def test_a_trigger_during_a_pull_pulls_again_after_it(
    origin: Origin, collector: Collector
) -> None:
    clock = ManualClock(NOW)
    applied = Applied()
    release = asyncio.Event()
    origin.route("/records", stall(soif(many(2)), release))
    scheduler = Scheduler(collector, [collection(origin.url(""))], applied, clock=clock)
    async with scheduler:
        await until(lambda: origin.hits["/records"] == 1)
        assert scheduler.status()[NAME].running
        assert scheduler.status()[NAME].next_due is None
        scheduler.trigger(NAME)
        await quiet()
        assert origin.hits["/records"] == 1  # one pull per collection at a time
        origin.route("/records", answer(soif(many(2))))
        release.set()
        await until(lambda: len(applied.results) == 2)
    assert origin.hits["/records"] == 2


async def test_pulls_run_concurrently_up_to_the_limit(origin: Origin, collector: Collector) -> None:
    clock = ManualClock(NOW)
    applied = Applied()
    release = asyncio.Event()
    for i in range(3):
        origin.route(f"/{i}/records", stall(soif(many(1, f"http://{i}/")), release))
    collections = [CollectionConfig(name=f"c{i}", source=origin.url(f"/{i}")) for i in range(3)]
    try:
        async with Scheduler(collector, collections, applied, clock=clock, concurrency=2):
            await until(lambda: sum(origin.hits.values()) == 2)
            await quiet()
            assert sum(origin.hits.values()) == 2
            release.set()
            await until(lambda: len(applied.results) == 3)
    finally:
        release.set()


async def test_collections_are_added_and_removed_while_running(
    origin: Origin, collector: Collector
) -> None:
    clock = ManualClock(NOW)
    applied = Applied()
    origin.route("/a/records", answer(soif(many(1, "http://a/"))))
    origin.route("/b/records", answer(soif(many(1, "http://b/"))))
    a = CollectionConfig(name="a", source=origin.url("/a"), interval=60.0)
    scheduler = Scheduler(collector, [a], applied, clock=clock)
    async with scheduler:
        await until(lambda: len(applied.results) == 1)
        scheduler.add(CollectionConfig(name="b", source=origin.url("/b"), interval=60.0))
        await until(lambda: len(applied.results) == 2)
        assert sorted(scheduler.status()) == ["a", "b"]
        scheduler.remove("a")
        assert sorted(scheduler.status()) == ["b"]
        with pytest.raises(KeyError):
            scheduler.remove("a")
        clock.advance(60)
        await until(lambda: len(applied.results) == 3)
        await quiet()
    assert applied.names() == ["a", "b", "b"]


async def test_a_failing_on_applied_does_not_stop_the_scheduler(
    origin: Origin, collector: Collector
) -> None:
    clock = ManualClock(NOW)
    calls = 0

    async def failing(result: PullResult) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("index down")

    origin.route("/records", answer(soif(many(1))))
    scheduler = Scheduler(
        collector, [collection(origin.url(""), interval=60.0)], failing, clock=clock
    )
    async with scheduler:
        await until(lambda: calls == 1)
        clock.advance(60)
        await until(lambda: calls == 2)
        assert scheduler.status()[NAME].failures == 0


async def test_a_pull_is_counted_when_it_ends_after_its_objects_are_applied(
    origin: Origin, collector: Collector
) -> None:
    clock = ManualClock(NOW)
    applying = asyncio.Event()
    release = asyncio.Event()

    async def slow(result: PullResult) -> None:
        applying.set()
        await release.wait()

    origin.route("/records", answer(soif(many(1))))
    scheduler = Scheduler(collector, [collection(origin.url(""), interval=60.0)], slow, clock=clock)
    async with scheduler:
        await asyncio.wait_for(applying.wait(), 5)
        status = scheduler.status()[NAME]
        # Still running while its objects are applied: not counted yet, so a caller waiting
        # for "the running pull, then one more" counts right.
        assert (status.running, status.pulls, status.last_success) == (True, 0, None)
        release.set()
        await until(lambda: not scheduler.status()[NAME].running)
        status = scheduler.status()[NAME]
        assert (status.pulls, status.last_success, status.next_due) == (1, NOW, NOW + 60)


async def test_the_scheduler_runs_on_the_system_clock(origin: Origin, collector: Collector) -> None:
    applied = Applied()
    origin.route("/records", answer(soif(many(1))))
    # Built directly: the configuration's parser would refuse an interval this short.
    fast = collection(origin.url(""), interval=0.2)
    async with Scheduler(collector, [fast], applied):
        await until(lambda: len(applied.results) >= 3, within=5)
    assert applied.results[0].since is None
    assert applied.results[1].since == "5.000000"


async def test_a_collection_removed_and_added_during_its_pull_starts_afresh(
    origin: Origin, collector: Collector
) -> None:
    clock = ManualClock(NOW)
    applied = Applied()
    release = asyncio.Event()
    origin.route("/records", stall(soif(many(2)), release))
    source = collection(origin.url(""), interval=60.0)
    scheduler = Scheduler(collector, [source], applied, clock=clock)
    try:
        async with scheduler:
            await until(lambda: origin.hits["/records"] == 1)
            scheduler.remove(NAME)
            scheduler.add(source)
            assert scheduler.status()[NAME].pulls == 0
            release.set()  # the old pull ends; the new one, waiting for it, runs
            await until(lambda: len(applied.results) == 2)
            await until(lambda: not scheduler.status()[NAME].running)
            status = scheduler.status()[NAME]
            assert status.pulls == 1  # the old pull's end is not counted for the new one
            assert status.next_due == NOW + 60
    finally:
        release.set()


async def test_a_crashing_pull_is_a_failure_and_the_others_go_on(
    origin: Origin, collector: Collector
) -> None:
    clock = ManualClock(NOW)
    applied = Applied()
    origin.route("/records", answer(soif(many(1))))

    class Crashing:
        async def pull(
            self, collection: CollectionConfig, *, now: float, full: bool = False
        ) -> PullResult:
            if collection.name == "bad":
                raise RuntimeError("a bug")
            return await collector.pull(collection, now=now, full=full)

    collections = [CollectionConfig(name="bad", source=origin.url("")), collection(origin.url(""))]
    scheduler = Scheduler(Crashing(), collections, applied, clock=clock, jitter=lambda: 1.5)
    async with scheduler:
        await until(lambda: scheduler.status()["bad"].failures == 1 and len(applied.results) == 1)
        bad = scheduler.status()["bad"]
        assert bad.last_error is not None
        assert bad.last_error.kind == "internal"
        assert bad.next_due == NOW + 45
