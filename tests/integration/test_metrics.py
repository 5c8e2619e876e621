"""The admin listener's Prometheus metrics, scraped before and after real workloads.

Every scrape goes to ``cache.admin.address`` over HTTP, is checked by ``promtool check
metrics`` (exit status 0, nothing said) and for label hygiene (no URL or client address as a
label value, only ``harvest_cache_`` and ``process_`` names, counters ending in ``_total``),
then parsed with prometheus_client's own parser. The tests assert that the counters move
exactly as the workload says: misses, hits (the hit fast path's included), revalidations
(the planned ones included), upstream failures, DNS lookups, store gauges, client
connections, tunnels and the ICP hierarchy. Scrapes run under the integration suite's
check for blocking calls (tests/integration/conftest.py), like the workloads.
"""

from __future__ import annotations

import asyncio
import math
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from harvest_cache import __version__
from harvest_cache.hierarchy.icp import Opcode, decode, encode, query
from harvest_cache.server.app import CacheServer
from tests.integration.test_disk_hits import fetched_into_a_small_cache
from tests.support import (
    MakeCache,
    Origin,
    Querier,
    RawServer,
    free_port,
    free_udp_port,
    open_proxy,
    promtool_check,
    proxy_client,
    read_head,
    read_request_head,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
    udp_querier,
)

FRESH = {"Cache-Control": "max-age=600"}
MEMORY_ONLY = {"disk_mb": 0}  # small misses may then be stored on the miss fast path
# Never label values: a URL or an address (every client and origin here is on loopback).
FORBIDDEN_IN_LABELS = ("http://", "127.0.0.1")
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

Key = tuple[str, frozenset[tuple[str, str]]]


# -- scraping ----------------------------------------------------------------------------------


def samples_of(families: list[Metric]) -> dict[Key, float]:
    """{(sample name, frozenset(labels.items())): value} for every sample."""
    out: dict[Key, float] = {}
    for family in families:
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, f"sample given twice: {key}"
            out[key] = sample.value
    return out


@dataclass
class Scrape:
    text: str
    families: dict[str, Metric]
    samples: dict[Key, float]

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; 0 if absent (a labelled counter not yet incremented)."""
        found = self.get(name, **labels)
        return 0.0 if found is None else found

    def matching(self, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
        """Samples named ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return {
            got: value
            for (sample, got), value in self.samples.items()
            if sample == name and want <= got
        }

    def total(self, name: str, **labels: str) -> float:
        return sum(self.matching(name, **labels).values())


def delta(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


def check_hygiene(text: str, families: list[Metric]) -> None:
    """Bounded label values and the naming conventions, on one exposition."""
    for family in families:
        assert family.name.startswith(("harvest_cache_", "process_")), family.name
        for sample in family.samples:
            for label, value in sample.labels.items():
                for forbidden in FORBIDDEN_IN_LABELS:
                    assert forbidden not in value, f"{sample.name}{{{label}={value!r}}}"
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample.name
    for line in text.splitlines():
        if line.startswith("# TYPE ") and line.endswith(" counter"):
            assert line.split()[2].endswith("_total"), line


async def scrape(cache: CacheServer) -> Scrape:
    """GET /metrics from the admin listener, checked by promtool and for hygiene, parsed."""
    assert cache.admin is not None
    host, port = cache.admin.address
    assert host == "127.0.0.1"
    async with (
        aiohttp.ClientSession() as session,
        asyncio.timeout(5),
        session.get(f"http://{host}:{port}/metrics") as response,
    ):
        assert response.status == 200
        # The text format: 0.0.4, or 1.0.0 as newer prometheus_client versions name it.
        assert response.content_type == "text/plain"
        assert response.headers["Content-Type"].split(";")[1].strip() in (
            "version=0.0.4",
            "version=1.0.0",
        )
        text = await response.text()
    await promtool_check(text)
    families = list(text_string_to_metric_families(text))
    check_hygiene(text, families)
    return Scrape(text, {f.name: f for f in families}, samples_of(families))


async def scrape_until(
    cache: CacheServer, holds: Callable[[Scrape], bool], *, within: float = 5.0
) -> Scrape:
    """Scrape every 50 ms until ``holds``; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            got = await scrape(cache)
            if holds(got):
                return got
            await asyncio.sleep(0.05)


def check_histogram(s: Scrape, name: str, **labels: str) -> None:
    """Buckets cumulative (never falling, ``le`` rising), +Inf == _count."""
    buckets = sorted(
        (float(dict(got)["le"]), value)
        for got, value in s.matching(f"{name}_bucket", **labels).items()
    )
    assert buckets, f"no buckets for {name}{labels}"
    assert buckets[-1][0] == math.inf
    counts = [value for _, value in buckets]
    assert counts == sorted(counts), f"{name}{labels} buckets not monotonic: {buckets}"
    assert counts[-1] == s.value(f"{name}_count", **labels)
    assert s.get(f"{name}_sum", **labels) is not None


LATENCY = "harvest_cache_request_duration_seconds"
REQUESTS = "harvest_cache_requests_total"


# -- workloads ---------------------------------------------------------------------------------


async def get_raw(
    cache: CacheServer, url: str, *, headers: list[tuple[str, str]] | None = None
) -> tuple[int, bytes]:
    """One GET on a new raw connection (closed afterwards)."""
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", url, headers=headers))
        response = await read_response(reader)
    finally:
        writer.close()
    return response.status, response.body


# -- 1. misses then hits -----------------------------------------------------------------------


@pytest.mark.parametrize("store", [{}, MEMORY_ONLY], ids=["memory+disk", "memory-only"])
async def test_misses_then_hits_count_each_request_once(
    origin: Origin, make_cache: MakeCache, store: dict[str, object]
) -> None:
    cache = await make_cache(cache=store)
    n = 5
    bodies = {f"/obj{i}": bytes([65 + i]) * (100 + 37 * i) for i in range(n)}
    for path, body in bodies.items():
        origin.route(path, static(body, FRESH))
    body_bytes = sum(len(b) for b in bodies.values())
    miss_labels = {"method": "GET", "result": "TCP_MISS", "code": "2xx"}
    hit_labels = {"method": "GET", "result": "TCP_MEM_HIT", "code": "2xx"}

    before = await scrape(cache)
    async with proxy_client(cache) as client:
        for path, body in bodies.items():
            response, got = await client.get(origin.url(path))
            assert (response.status, got) == (200, body)
    after_misses = await scrape(cache)
    assert delta(before, after_misses, REQUESTS, **miss_labels) == n
    assert delta(before, after_misses, REQUESTS, **hit_labels) == 0
    assert delta(before, after_misses, "harvest_cache_misses_total") == n
    assert delta(before, after_misses, "harvest_cache_hits_total", tier="memory") == 0
    assert delta(before, after_misses, f"{LATENCY}_count", kind="miss") == n
    assert delta(before, after_misses, f"{LATENCY}_count", kind="hit") == 0
    assert delta(before, after_misses, "harvest_cache_upstream_received_bytes_total") >= body_bytes
    assert delta(before, after_misses, "harvest_cache_client_sent_bytes_total") >= body_bytes
    assert all(origin.hits[path] == 1 for path in bodies)
    if store == MEMORY_ONLY:
        assert cache.proxy is not None
        assert cache.proxy.fast.answered >= 1  # the miss fast path's misses are among them

    # Two rounds of hits: the first on the general path (which teaches the hit fast path),
    # the second on the hit fast path, answered from the parser callback.
    async with proxy_client(cache) as client:
        for _ in range(2):
            for path, body in bodies.items():
                response, got = await client.get(origin.url(path))
                assert (response.status, got) == (200, body)
    assert cache.proxy is not None
    assert cache.proxy.hot_entries == n
    assert sum(cache.traffic.fast_hits.values()) == n  # the second round took the fast path
    after = await scrape(cache)
    assert all(origin.hits[path] == 1 for path in bodies)
    assert delta(after_misses, after, REQUESTS, **hit_labels) == 2 * n
    assert delta(after_misses, after, REQUESTS, **miss_labels) == 0
    assert delta(after_misses, after, "harvest_cache_hits_total", tier="memory") == 2 * n
    assert delta(after_misses, after, "harvest_cache_hits_total", tier="disk") == 0
    assert delta(after_misses, after, "harvest_cache_misses_total") == 0
    assert delta(after_misses, after, f"{LATENCY}_count", kind="hit") == 2 * n
    assert delta(after_misses, after, f"{LATENCY}_count", kind="miss") == 0
    assert delta(after_misses, after, "harvest_cache_upstream_received_bytes_total") == 0
    assert delta(after_misses, after, "harvest_cache_client_sent_bytes_total") >= 2 * body_bytes
    for s in (before, after_misses, after):
        for kind in ("hit", "miss", "revalidation"):
            check_histogram(s, LATENCY, kind=kind)
    # Every request counted once over all: n misses and 2n hits.
    assert after.total(REQUESTS) - before.total(REQUESTS) == 3 * n


async def test_the_hit_fast_path_alone_is_counted(origin: Origin, make_cache: MakeCache) -> None:
    """Hits answered only by the fast path (from the parser callback) move every count."""
    cache = await make_cache()
    origin.route("/hot", static(b"h" * 300, FRESH))
    url = origin.url("/hot")
    assert await get_raw(cache, url) == (200, b"h" * 300)  # miss
    assert await get_raw(cache, url) == (200, b"h" * 300)  # general-path hit: now hot
    assert cache.proxy is not None
    assert cache.proxy.hot_entries == 1
    before = await scrape(cache)
    for _ in range(7):
        assert await get_raw(cache, url) == (200, b"h" * 300)
    after = await scrape(cache)
    assert sum(cache.traffic.fast_hits.values()) == 7
    hit = {"method": "GET", "result": "TCP_MEM_HIT", "code": "2xx"}
    assert delta(before, after, REQUESTS, **hit) == 7
    assert after.total(REQUESTS) - before.total(REQUESTS) == 7
    assert delta(before, after, "harvest_cache_hits_total", tier="memory") == 7
    assert delta(before, after, f"{LATENCY}_count", kind="hit") == 7
    assert delta(before, after, f"{LATENCY}_bucket", kind="hit", le="+Inf") == 7
    assert delta(before, after, "harvest_cache_client_sent_bytes_total") >= 7 * 300
    check_histogram(after, LATENCY, kind="hit")


# -- 2. revalidations --------------------------------------------------------------------------


class Revalidated:
    """max-age=0 and an ETag; a matching If-None-Match gets a 304."""

    ETAG = '"m1"'

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.not_modified = 0

    async def __call__(self, request: web.Request) -> web.Response:
        headers = {"Cache-Control": "max-age=0", "ETag": self.ETAG}
        if request.headers.get("If-None-Match") == self.ETAG:
            self.not_modified += 1
            return web.Response(status=304, headers=headers)
        return web.Response(body=self.body, headers=headers)


@pytest.mark.parametrize("store", [{}, MEMORY_ONLY], ids=["memory+disk", "memory-only"])
async def test_revalidations_are_counted_as_such(
    origin: Origin, make_cache: MakeCache, store: dict[str, object]
) -> None:
    cache = await make_cache(cache=store)
    handler = Revalidated(b"r" * 200)
    origin.route("/stale", handler)
    url = origin.url("/stale")
    assert await get_raw(cache, url) == (200, b"r" * 200)  # stored, stale at once
    k = 6
    before = await scrape(cache)
    # One keep-alive connection, the same request each time: the general path, the miss fast
    # path and (memory only) the planned revalidation each get their turn.
    reader, writer = await open_proxy(cache.address[1])
    try:
        for _ in range(k):
            writer.write(request_bytes("GET", url, headers=[("User-Agent", "metrics/1")]))
            response = await read_response(reader)
            assert (response.status, response.body) == (200, b"r" * 200)
    finally:
        writer.close()
    after = await scrape(cache)
    assert handler.not_modified == k
    unmodified = {"method": "GET", "result": "TCP_REFRESH_UNMODIFIED", "code": "2xx"}
    assert delta(before, after, REQUESTS, **unmodified) == k
    assert after.total(REQUESTS) - before.total(REQUESTS) == k
    assert delta(before, after, f"{LATENCY}_count", kind="revalidation") == k
    assert delta(before, after, f"{LATENCY}_count", kind="miss") == 0
    assert delta(before, after, f"{LATENCY}_count", kind="hit") == 0
    assert delta(before, after, "harvest_cache_misses_total") == 0
    assert delta(before, after, "harvest_cache_hits_total", tier="memory") == 0
    check_histogram(after, LATENCY, kind="revalidation")
    assert cache.proxy is not None
    if store == MEMORY_ONLY:
        assert cache.proxy.fast.planned >= 1  # planned revalidations are among them


# -- 3. upstream errors ------------------------------------------------------------------------


async def test_a_refused_connection_counts_an_upstream_error_and_a_5xx(
    make_cache: MakeCache,
) -> None:
    cache = await make_cache()
    url = f"http://127.0.0.1:{free_port()}/refused"
    before = await scrape(cache)
    status, _ = await get_raw(cache, url)
    assert status == 502
    after = await scrape(cache)
    assert delta(before, after, "harvest_cache_upstream_errors_total", kind="connect_refused") == 1
    assert (
        after.total("harvest_cache_upstream_errors_total")
        - before.total("harvest_cache_upstream_errors_total")
        == 1
    )
    assert (
        after.total(REQUESTS, method="GET", code="5xx")
        - before.total(REQUESTS, method="GET", code="5xx")
        == 1
    )
    assert after.total(REQUESTS) - before.total(REQUESTS) == 1
    assert delta(before, after, "harvest_cache_upstream_connections_opened_total", to="origin") == 0


async def test_upstream_connections_opened_and_reused(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    for i in range(3):
        origin.route(f"/u{i}", static(b"u", {"Cache-Control": "no-store"}))
    before = await scrape(cache)
    for i in range(3):
        assert await get_raw(cache, origin.url(f"/u{i}")) == (200, b"u")
    after = await scrape(cache)
    opened = delta(before, after, "harvest_cache_upstream_connections_opened_total", to="origin")
    reused = delta(before, after, "harvest_cache_upstream_connections_reused_total", to="origin")
    assert opened >= 1
    assert opened + reused == 3  # one connection per request sent: new or kept alive
    assert delta(before, after, "harvest_cache_upstream_connections_opened_total", to="peer") == 0


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An origin that reads a request, waits a little and resets the connection."""
    await read_request_head(reader)
    await asyncio.sleep(0.3)
    writer.transport.abort()


async def test_a_collapsed_fetch_that_fails_fails_each_client(make_cache: MakeCache) -> None:
    server = await RawServer(hang_up).start()
    try:
        cache = await make_cache()
        before = await scrape(cache)
        got = await asyncio.gather(*(get_raw(cache, server.url("/x")) for _ in range(4)))
        after = await scrape(cache)
    finally:
        await server.stop()
    assert server.accepted == 1  # one fetch, which the four clients shared
    assert [status for status, _ in got] == [502] * 4
    assert after.total(REQUESTS, code="5xx") - before.total(REQUESTS, code="5xx") == 4
    assert delta(before, after, "harvest_cache_upstream_errors_total", kind="reset") >= 1


async def test_a_collapsed_fetch_that_fails_is_one_upstream_error(make_cache: MakeCache) -> None:
    server = await RawServer(hang_up).start()
    try:
        cache = await make_cache()
        before = await scrape(cache)
        await asyncio.gather(*(get_raw(cache, server.url("/x")) for _ in range(4)))
        after = await scrape(cache)
    finally:
        await server.stop()
    assert server.accepted == 1
    assert delta(before, after, "harvest_cache_upstream_errors_total", kind="reset") == 1


async def test_request_body_bytes_from_clients(origin: Origin, make_cache: MakeCache) -> None:
    origin.route("/post", static(b"p", {"Cache-Control": "no-store"}))
    cache = await make_cache()
    before = await scrape(cache)
    async with proxy_client(cache) as client:
        response, _ = await client.request("POST", origin.url("/post"), data=b"x" * 1234)
    assert response.status == 200
    after = await scrape(cache)
    assert delta(before, after, "harvest_cache_client_received_bytes_total") == 1234
    assert delta(before, after, REQUESTS, method="POST", result="TCP_MISS", code="2xx") == 1
    assert delta(before, after, "harvest_cache_misses_total") == 1


async def test_a_client_leaving_mid_body_is_an_abort(origin: Origin, make_cache: MakeCache) -> None:
    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "no-store"})
        response.content_length = 16 << 20
        await response.prepare(request)
        for _ in range(256):
            await response.write(b"b" * 65536)
            await asyncio.sleep(0.001)
        return response

    origin.route("/big", big)
    cache = await make_cache()
    aborts = "harvest_cache_client_aborts_total"
    before = await scrape(cache)
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/big")))
        async with asyncio.timeout(5):
            status, _, _ = await read_head(reader)
            assert status == 200
            await reader.readexactly(100_000)
    finally:
        writer.transport.abort()  # gone with most of the body unread
    after = await scrape_until(cache, lambda s: s.value(aborts) > before.value(aborts))
    assert delta(before, after, aborts) == 1
    # Counted under its result, not a result of its own (the access log says _ABORTED).
    assert delta(before, after, REQUESTS, method="GET", result="TCP_MISS", code="2xx") == 1
    assert delta(before, after, "harvest_cache_client_sent_bytes_total") < 16 << 20
    lines = await stop_and_read_log(cache)
    assert [line.result for line in lines] == ["TCP_MISS_ABORTED"]


# -- 4. store gauges and client connections ----------------------------------------------------


async def test_store_gauges_follow_what_is_stored(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache(cache={"memory_mb": 3, "disk_mb": 7})
    first = await scrape(cache)
    assert first.value("harvest_cache_store_capacity_bytes", tier="memory") == 3 * 2**20
    assert first.value("harvest_cache_store_capacity_bytes", tier="disk") == 7 * 2**20
    assert first.value("harvest_cache_store_objects", tier="memory") == 0
    assert first.value("harvest_cache_store_bytes", tier="memory") == 0
    sizes = [1000, 2000, 3000]
    for i, size in enumerate(sizes):
        origin.route(f"/s{i}", static(b"s" * size, FRESH))
        assert await get_raw(cache, origin.url(f"/s{i}")) == (200, b"s" * size)
    after = await scrape(cache)
    assert delta(first, after, "harvest_cache_store_objects", tier="memory") == len(sizes)
    assert delta(first, after, "harvest_cache_store_bytes", tier="memory") >= sum(sizes)
    assert after.value("harvest_cache_store_bytes", tier="memory") <= 3 * 2**20
    assert after.value("harvest_cache_store_capacity_bytes", tier="memory") == 3 * 2**20
    assert after.value("harvest_cache_store_evictions_total", tier="memory") == 0
    assert after.get("harvest_cache_store_bytes", tier="disk") is not None
    for op in ("read", "write"):
        assert after.value("harvest_cache_store_failures_total", operation=op) == 0
    # The filesystem holding the disk tier, read off the loop at scrape time.
    fs_size = after.get("harvest_cache_store_filesystem_size_bytes")
    fs_free = after.get("harvest_cache_store_filesystem_free_bytes")
    assert fs_size is not None
    assert fs_free is not None
    assert 0 <= fs_free <= fs_size
    assert fs_size > 0
    # The disk tier's usage is read at scrape time: stored objects show within a few scrapes.
    await scrape_until(
        cache, lambda s: s.value("harvest_cache_store_bytes", tier="disk") >= sum(sizes)
    )


async def test_page_copy_bytes_follow_the_hot_bodies_copied(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    assert (await scrape(cache)).value("harvest_cache_page_copy_bytes") == 0
    body = b"p" * (200 << 10)
    origin.route("/paged", static(body, FRESH))
    for _ in range(3):  # stored, a memory hit (the hot entry and its copy), a fast hit
        assert await get_raw(cache, origin.url("/paged")) == (200, body)
    assert (await scrape(cache)).value("harvest_cache_page_copy_bytes") == len(body)


async def test_disk_heads_count_the_answers_kept_for_objects_left_on_disk(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    bodies = {f"/d{i}": bytes([i]) * (16 << 10) for i in range(128)}  # twice the memory tier
    cache = await fetched_into_a_small_cache(origin, make_cache, tmp_path, bodies)
    assert (await scrape(cache)).value("harvest_cache_disk_heads") == 0
    on_disk = [p for p in bodies if cache.store.memory.peek(origin.url(p)) is None][:3]
    for path in on_disk:  # each read from disk once, left there, its answer kept
        assert await get_raw(cache, origin.url(path)) == (200, bodies[path])
    assert (await scrape(cache)).value("harvest_cache_disk_heads") == len(on_disk)


async def test_client_connections_gauge_follows_an_open_keep_alive_connection(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    origin.route("/k", static(b"k", FRESH))
    gauge = "harvest_cache_client_connections"
    idle = (await scrape(cache)).value(gauge)
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url("/k")))
        response = await read_response(reader)
        assert response.status == 200
        assert response.get("Connection") != "close"
        held = await scrape(cache)
        assert held.value(gauge) >= 1
        assert held.value(gauge) == idle + 1
    finally:
        writer.close()
        await writer.wait_closed()
    await scrape_until(cache, lambda s: s.value(gauge) == idle)


# -- 5. DNS ------------------------------------------------------------------------------------


async def test_dns_lookups_by_outcome(make_cache: MakeCache) -> None:
    cache = await make_cache(dns={"timeout": 0.5})  # (nameservers 127.0.0.1:9: nothing answers)
    dns = "harvest_cache_dns_lookups_total"
    before = await scrape(cache)
    for outcome in ("hit", "miss", "failure"):
        found = before.get(dns, outcome=outcome)
        assert found is not None, outcome
        assert found >= 0, outcome
    status, _ = await get_raw(cache, "http://nowhere.harvest.test/page")
    assert status in (502, 503, 504)
    after = await scrape(cache)
    assert delta(before, after, dns, outcome="failure") == 1
    assert delta(before, after, dns, outcome="miss") == 1  # it waited for the query
    assert delta(before, after, dns, outcome="hit") == 0
    assert delta(before, after, "harvest_cache_upstream_errors_total", kind="dns") == 1
    assert after.total(REQUESTS, code="5xx") - before.total(REQUESTS, code="5xx") == 1
    # The failure is remembered: the next lookup is answered from the DNS cache.
    status, _ = await get_raw(cache, "http://nowhere.harvest.test/other")
    assert status in (502, 503, 504)
    again = await scrape(cache)
    assert delta(after, again, dns, outcome="failure") == 1
    assert delta(after, again, dns, outcome="hit") == 1
    assert delta(after, again, dns, outcome="miss") == 0


async def test_ip_literals_are_no_dns_lookups(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache()
    origin.route("/ip", static(b"i", FRESH))
    before = await scrape(cache)
    assert await get_raw(cache, origin.url("/ip")) == (200, b"i")
    after = await scrape(cache)
    for outcome in ("hit", "miss", "failure"):
        assert delta(before, after, "harvest_cache_dns_lookups_total", outcome=outcome) == 0


# -- CONNECT tunnels ---------------------------------------------------------------------------


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


@pytest.fixture
async def echo_server() -> AsyncIterator[RawServer]:
    server = await RawServer(echo).start()
    yield server
    await server.stop()


async def test_a_tunnel_is_open_while_it_lasts_and_its_bytes_counted(
    make_cache: MakeCache, echo_server: RawServer
) -> None:
    cache = await make_cache(access={"connect_ports": ["1024-65535"]})
    before = await scrape(cache)
    assert before.value("harvest_cache_tunnels_open") == 0
    port = echo_server.port
    reader, writer = await open_proxy(cache.address[1])
    payload = b"x" * 10_000
    try:
        writer.write(
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        )
        async with asyncio.timeout(5):
            status, _, _ = await read_head(reader)
            assert status == 200
            writer.write(payload)
            assert await reader.readexactly(len(payload)) == payload
        during = await scrape(cache)
        assert during.value("harvest_cache_tunnels_open") == 1
    finally:
        writer.close()
        await writer.wait_closed()
    tunnel = {"method": "CONNECT", "result": "TCP_TUNNEL", "code": "2xx"}
    after = await scrape_until(cache, lambda s: s.value(REQUESTS, **tunnel) > 0)
    assert after.value("harvest_cache_tunnels_open") == 0
    assert delta(before, after, REQUESTS, **tunnel) == 1
    assert delta(before, after, "harvest_cache_tunnel_bytes_total") >= 2 * len(payload)
    assert delta(before, after, f"{LATENCY}_count", kind="miss") == 0  # tunnels time no kind


# -- 6. ICP and the hierarchy ------------------------------------------------------------------


@pytest.fixture
async def querier() -> AsyncIterator[Querier]:
    async with udp_querier() as peer:
        yield peer


async def test_icp_replies_sent_by_opcode(
    origin: Origin, make_cache: MakeCache, querier: Querier
) -> None:
    icp_port = free_udp_port()
    cache = await make_cache(icp={"port": icp_port, "allow": ["127.0.0.0/8"]})
    origin.route("/held", static(b"held", FRESH))
    assert await get_raw(cache, origin.url("/held")) == (200, b"held")
    sent = "harvest_cache_icp_replies_sent_total"
    before = await scrape(cache)
    assert querier.transport is not None
    for number, url, expected in (
        (1, "http://127.0.0.1:9/nothing", Opcode.MISS),
        (2, origin.url("/held"), Opcode.HIT),
        (3, "ftp://example.com/f", Opcode.ERR),
    ):
        querier.transport.sendto(encode(query(number, url)), ("127.0.0.1", icp_port))
        async with asyncio.timeout(2):
            answer = decode((await querier.replies.get())[0])
        assert (answer.request_number, answer.opcode) == (number, expected)
    querier.transport.sendto(b"\x01", ("127.0.0.1", icp_port))  # garbage: dropped
    assert cache.icp is not None
    icp = cache.icp
    after = await scrape_until(cache, lambda s: s.value("harvest_cache_icp_dropped_total") > 0)
    assert icp.dropped == 1
    assert delta(before, after, sent, opcode="MISS") == 1
    assert delta(before, after, sent, opcode="HIT") == 1
    assert delta(before, after, sent, opcode="ERR") == 1
    assert after.total(sent) - before.total(sent) == 3
    assert delta(before, after, "harvest_cache_icp_dropped_total") == 1
    # ICP answers are no HTTP requests.
    assert after.total(REQUESTS) == before.total(REQUESTS)


async def start_named(
    make_cache: MakeCache,
    tmp_path: Path,
    name: str,
    peers: list[dict[str, object]] | None = None,
) -> CacheServer:
    """A cache named ``name`` with its own store, access log and ICP port."""
    home = tmp_path / name
    return await make_cache(
        server={"name": name},
        cache={"dir": str(home / "cache")},
        log={"access_log": str(home / "access.log")},
        icp={"port": free_udp_port(), "allow": ["127.0.0.0/8"]},
        hierarchy={"peers": peers or [], "digests": False},
    )


def as_parent(cache: CacheServer) -> dict[str, object]:
    return {
        "name": cache.name,
        "host": "127.0.0.1",
        "http_port": cache.address[1],
        "icp_port": cache.config.icp_port,
        "role": "parent",
    }


async def test_a_child_counts_its_icp_round_and_the_parent_its_answer(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent = await start_named(make_cache, tmp_path, "parent")
    child = await start_named(make_cache, tmp_path, "child", peers=[as_parent(parent)])
    origin.route("/climb", static(b"c" * 64, FRESH))
    origin.route("/climb2", static(b"d" * 64, FRESH))
    child_before, parent_before = await scrape(child), await scrape(parent)
    # Every per-peer counter is there (at zero) before any traffic; no RTT yet.
    for name in (
        "harvest_cache_icp_queries_sent_total",
        "harvest_cache_icp_replies_received_total",
        "harvest_cache_icp_timeouts_total",
        "harvest_cache_peer_requests_total",
        "harvest_cache_peer_connect_failures_total",
    ):
        assert child_before.get(name, peer="parent") == 0, name
    assert child_before.get("harvest_cache_peer_rtt_seconds", peer="parent") is None
    states = child_before.matching("harvest_cache_peer_state", peer="parent")
    assert len(states) == 3
    assert sum(states.values()) == 1  # one state at a time

    async with proxy_client(child) as client:
        response, body = await client.get(origin.url("/climb"))
    assert (response.status, body) == (200, b"c" * 64)
    assert origin.hits["/climb"] == 1

    child_after, parent_after = await scrape(child), await scrape(parent)
    per_peer = {"peer": "parent"}
    assert delta(child_before, child_after, "harvest_cache_icp_queries_sent_total", **per_peer) == 1
    assert (
        delta(child_before, child_after, "harvest_cache_icp_replies_received_total", **per_peer)
        == 1
    )
    assert delta(child_before, child_after, "harvest_cache_icp_timeouts_total", **per_peer) == 0
    assert delta(child_before, child_after, "harvest_cache_peer_requests_total", **per_peer) == 1
    rtt = child_after.get("harvest_cache_peer_rtt_seconds", **per_peer)
    assert rtt is not None
    assert 0 <= rtt < 1
    assert child_after.value("harvest_cache_peer_state", state="alive", **per_peer) == 1
    assert child_after.value("harvest_cache_peer_state", state="dead", **per_peer) == 0
    assert child_after.value("harvest_cache_peer_state", state="down", **per_peer) == 0
    hierarchy = "harvest_cache_hierarchy_total"
    assert delta(child_before, child_after, hierarchy, code="FIRST_PARENT_MISS") == 1
    assert child_after.total(hierarchy) - child_before.total(hierarchy) == 1
    assert delta(child_before, child_after, "harvest_cache_icp_unexpected_replies_total") == 0
    assert (
        delta(
            child_before, child_after, "harvest_cache_upstream_connections_opened_total", to="peer"
        )
        == 1
    )
    miss = {"method": "GET", "result": "TCP_MISS", "code": "2xx"}
    assert delta(child_before, child_after, REQUESTS, **miss) == 1
    # The parent: one ICP MISS sent, one request fetched direct.
    sent = "harvest_cache_icp_replies_sent_total"
    assert delta(parent_before, parent_after, sent, opcode="MISS") == 1
    assert parent_after.total(sent) - parent_before.total(sent) == 1
    assert delta(parent_before, parent_after, hierarchy, code="HIER_DIRECT") == 1
    assert delta(parent_before, parent_after, REQUESTS, **miss) == 1

    # A second miss: one more round. (The parent now knows its RTT to the origin and says so:
    # CLOSEST_PARENT_MISS rather than FIRST_PARENT_MISS; the access log has the same.)
    async with proxy_client(child) as client:
        response, _ = await client.get(origin.url("/climb2"))
    assert response.status == 200
    child_again = await scrape(child)
    assert delta(child_after, child_again, "harvest_cache_icp_queries_sent_total", **per_peer) == 1
    assert child_again.total(hierarchy) - child_after.total(hierarchy) == 1
    assert (
        sum(
            delta(child_after, child_again, hierarchy, code=code)
            for code in ("FIRST_PARENT_MISS", "CLOSEST_PARENT_MISS")
        )
        == 1
    )
    # The counts by hierarchy code are the access log's, line for line.
    log = Counter(line.hierarchy for line in await stop_and_read_log(child))
    assert {dict(labels)["code"]: n for labels, n in child_again.matching(hierarchy).items()} == {
        code: float(n) for code, n in log.items() if code != "HIER_NONE"
    }


async def test_a_silent_parent_times_out_then_is_down(
    origin: Origin, make_cache: MakeCache, querier: Querier
) -> None:
    """A parent whose ICP socket never answers and whose HTTP port refuses."""
    assert querier.transport is not None
    silent = querier.transport.get_extra_info("sockname")[1]
    origin.route("/d", static(b"d", FRESH))
    gone = {
        "name": "gone",
        "host": "127.0.0.1",
        "http_port": free_port(),
        "icp_port": silent,
        "role": "parent",
    }
    cache = await make_cache(
        icp={"port": free_udp_port(), "allow": ["127.0.0.0/8"]},
        hierarchy={"peers": [gone], "digests": False, "icp_timeout_max": 0.2},
    )
    before = await scrape(cache)
    assert before.value("harvest_cache_peer_state", peer="gone", state="alive") == 1
    assert await get_raw(cache, origin.url("/d")) == (200, b"d")
    after = await scrape(cache)
    per_peer = {"peer": "gone"}
    assert delta(before, after, "harvest_cache_icp_queries_sent_total", **per_peer) == 1
    assert delta(before, after, "harvest_cache_icp_timeouts_total", **per_peer) == 1
    assert delta(before, after, "harvest_cache_icp_replies_received_total", **per_peer) == 0
    assert delta(before, after, "harvest_cache_peer_connect_failures_total", **per_peer) == 1
    assert delta(before, after, "harvest_cache_peer_requests_total", **per_peer) == 0
    assert after.get("harvest_cache_peer_rtt_seconds", **per_peer) is None
    assert after.value("harvest_cache_peer_state", state="down", **per_peer) == 1
    assert after.total("harvest_cache_peer_state", **per_peer) == 1
    # The client never knew: no upstream error, one miss fetched direct after the timeout.
    assert after.total("harvest_cache_upstream_errors_total") == 0
    hierarchy = "harvest_cache_hierarchy_total"
    assert after.total(hierarchy) - before.total(hierarchy) == 1
    lines = await stop_and_read_log(cache)
    assert [line.hierarchy for line in lines] == ["TIMEOUT_HIER_DIRECT"]
    assert delta(before, after, hierarchy, code="TIMEOUT_HIER_DIRECT") == 1


# -- 7. label hygiene over a mixed workload ----------------------------------------------------


async def test_labels_stay_bounded_over_a_mixed_workload(
    origin: Origin, make_cache: MakeCache, echo_server: RawServer, querier: Querier
) -> None:
    """URLs, client and origin addresses pass through every path; none becomes a label, and
    the number of series does not grow with the number of URLs."""
    icp_port = free_udp_port()
    cache = await make_cache(
        icp={"port": icp_port, "allow": ["127.0.0.0/8"]},
        access={"connect_ports": ["1024-65535"]},
        dns={"timeout": 0.5},
    )
    for i in range(4):
        origin.route(f"/m{i}", static(b"m" * i, FRESH))
    origin.route("/nostore", static(b"n", {"Cache-Control": "no-store"}))
    origin.route("/gone", static(b"", status=404))

    async def workload(tag: str) -> None:
        async with proxy_client(cache) as client:
            for i in range(4):
                await client.get(origin.url(f"/m{i}?{tag}"))
                await client.get(origin.url(f"/m{i}?{tag}"))
            await client.get(origin.url(f"/nostore?{tag}"))
            await client.get(origin.url(f"/gone?{tag}"))
            await client.request("POST", origin.url(f"/nostore?{tag}"), data=b"body")
            await client.request("HEAD", origin.url(f"/m0?{tag}"))
        await get_raw(cache, f"http://127.0.0.1:{free_port()}/{tag}")  # refused
        await get_raw(cache, f"http://{tag}.nowhere.harvest.test/")  # DNS failure
        reader, writer = await open_proxy(cache.address[1])
        try:
            port = echo_server.port
            writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            async with asyncio.timeout(5):
                status, _, _ = await read_head(reader)
            assert status == 200
        finally:
            writer.close()
        assert querier.transport is not None
        querier.transport.sendto(encode(query(1, origin.url(f"/q?{tag}"))), ("127.0.0.1", icp_port))
        async with asyncio.timeout(2):
            await querier.replies.get()

    await workload("a")
    first = await scrape_until(
        cache, lambda s: s.value(REQUESTS, method="CONNECT", result="TCP_TUNNEL", code="2xx") == 1
    )
    await workload("b")
    second = await scrape_until(
        cache, lambda s: s.value(REQUESTS, method="CONNECT", result="TCP_TUNNEL", code="2xx") == 2
    )
    # (Each scrape was checked for hygiene; the series are the same set after twice the URLs.)
    assert set(first.samples) == set(second.samples)
    methods = {dict(labels)["method"] for labels in second.matching(REQUESTS)}
    assert methods == {"GET", "HEAD", "POST", "CONNECT"}
    assert {dict(labels)["code"] for labels in second.matching(REQUESTS)} <= {
        "1xx",
        "2xx",
        "3xx",
        "4xx",
        "5xx",
        "none",
    }
    assert any(name.startswith("process_") for name in second.families)


async def test_unknown_methods_are_no_label_values(origin: Origin, make_cache: MakeCache) -> None:
    """Methods the parser does not know are all one label value, however many there are."""
    origin.route("/m", static(b"m", {"Cache-Control": "no-store"}))
    cache = await make_cache()
    before = await scrape(cache)
    for method in ("FOO1", "XYZZY-2", "get", "BREW"):
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(request_bytes(method, origin.url("/m")))
            assert (await read_response(reader)).status == 400
        finally:
            writer.close()
    after = await scrape(cache)
    methods = {dict(labels)["method"] for labels in after.matching(REQUESTS)}
    assert methods.isdisjoint({"FOO1", "XYZZY-2", "get", "BREW"})
    assert after.total(REQUESTS, code="4xx") - before.total(REQUESTS, code="4xx") == 4
    assert len(after.matching(REQUESTS)) == 1


# -- 8. the cache manager ----------------------------------------------------------------------


async def test_cachemgr_answers_json_with_version_and_name(make_cache: MakeCache) -> None:
    cache = await make_cache(server={"name": "mgr-cache"})
    assert cache.admin is not None
    host, port = cache.admin.address
    async with (
        aiohttp.ClientSession() as session,
        asyncio.timeout(5),
        session.get(f"http://{host}:{port}/cachemgr") as response,
    ):
        assert response.status == 200
        assert response.content_type == "application/json"
        report = await response.json()
    assert isinstance(report, dict)
    info = report.get("info", report)  # (its own section, or the top level)
    assert info["version"] == __version__
    assert info["name"] == "mgr-cache"
    assert isinstance(info["uptime_seconds"], int | float)
    assert info["uptime_seconds"] >= 0


async def test_scrapes_are_no_client_traffic(origin: Origin, make_cache: MakeCache) -> None:
    """The admin listener is apart: scraping counts no request and no client connection."""
    cache = await make_cache()
    first = await scrape(cache)
    for _ in range(3):
        await scrape(cache)
    last = await scrape(cache)
    assert last.total(REQUESTS) == first.total(REQUESTS) == 0
    assert last.value("harvest_cache_client_connections") == 0
    assert last.value("harvest_cache_client_sent_bytes_total") == 0


async def test_no_admin_listener_when_none(make_cache: MakeCache) -> None:
    cache = await make_cache(admin={"listen": "none"})
    assert cache.admin is None
