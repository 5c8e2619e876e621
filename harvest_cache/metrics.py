"""The cache's metrics: counters the request paths feed, and their Prometheus exposition.

Requests feed ``Traffic``: a few dict and int increments each, nothing from
prometheus_client on the request path. At scrape time ``CacheCollector`` reads those and the
components' own counters (store, pools, DNS, ICP, peers, digests) and yields metric
families; ``registry`` adds the process's CPU, memory and open files.

Label values are bounded by construction: methods are the few the parser knows, results and
hierarchy codes Squid's, status classes 1xx-5xx, error kinds the upstream errors' own, peers
and tiers those configured. Never a URL or a client address.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

if TYPE_CHECKING:
    from harvest_cache.server.app import CacheServer

# Seconds; from a memory hit (well under a millisecond) to a slow origin.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

# Which latency histogram a result goes to (others, such as errors and tunnels, to none).
KIND = {
    "TCP_MEM_HIT": "hit",
    "TCP_HIT": "hit",
    "TCP_NEGATIVE_HIT": "hit",
    "TCP_OFFLINE_HIT": "hit",
    "TCP_MISS": "miss",
    "TCP_CF_MISS": "miss",
    "TCP_CLIENT_REFRESH_MISS": "miss",
    "TCP_SWAPFAIL_MISS": "miss",
    "TCP_REFRESH_UNMODIFIED": "revalidation",
    "TCP_REFRESH_MODIFIED": "revalidation",
    "TCP_REFRESH_FAIL_OLD": "revalidation",
    "TCP_REFRESH_FAIL_ERR": "revalidation",
}


class Histogram:
    """Counts per bucket of LATENCY_BUCKETS (the last: above them all), and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def add_fastest(self, n: int) -> None:
        """``n`` observations of (practically) no time: the hit fast path answers from the
        parser callback itself."""
        self.counts[0] += n


@dataclass(slots=True)
class Traffic:
    """Counters for one cache. ``requests``: (method, result, status class) -> count."""

    requests: dict[tuple[str, str, int], int] = field(default_factory=dict)
    # Hits answered by the fast path, by (method, status): folded into ``requests`` at scrape.
    fast_hits: dict[tuple[bytes, int], int] = field(default_factory=dict)
    hierarchy: dict[str, int] = field(default_factory=dict)
    latency: dict[str, Histogram] = field(
        default_factory=lambda: {k: Histogram() for k in ("hit", "miss", "revalidation")}
    )
    bytes_to_clients: int = 0
    bytes_from_clients: int = 0
    bytes_from_upstream: int = 0
    upstream_errors: dict[str, int] = field(default_factory=dict)
    tunnels_open: int = 0
    tunnel_bytes: int = 0
    aborted: int = 0
    # Upstream connections closed for bytes after a complete response (or with none asked).
    upstream_surplus: int = 0

    def ended(
        self,
        method: str,
        result: str,
        status: int,
        size: int,
        seconds: float,
        hierarchy: str,
        aborted: bool,
    ) -> None:
        """A request is answered (or given up): count it."""
        key = (method, result, status // 100)
        self.requests[key] = self.requests.get(key, 0) + 1
        self.bytes_to_clients += size
        if hierarchy != "HIER_NONE":
            self.hierarchy[hierarchy] = self.hierarchy.get(hierarchy, 0) + 1
        kind = KIND.get(result)
        if kind is not None:
            self.latency[kind].observe(seconds)
        if aborted:
            self.aborted += 1

    def upstream_failed(self, kind: str) -> None:
        self.upstream_errors[kind] = self.upstream_errors.get(kind, 0) + 1

    def request_counts(self) -> dict[tuple[str, str, int], int]:
        """``requests`` with the fast path's hits folded in (all TCP_MEM_HIT)."""
        out = dict(self.requests)
        for (method, status), n in self.fast_hits.items():
            key = (method.decode("ascii"), "TCP_MEM_HIT", status // 100)
            out[key] = out.get(key, 0) + n
        return out

    def latencies(self) -> dict[str, Histogram]:
        """The histograms, the fast path's hits counted in the fastest bucket."""
        fast = sum(self.fast_hits.values())
        if not fast:
            return self.latency
        out = dict(self.latency)
        hit = Histogram()
        hit.counts = list(self.latency["hit"].counts)
        hit.total = self.latency["hit"].total
        hit.add_fastest(fast)
        out["hit"] = hit
        return out


def _counter(
    name: str, doc: str, labels: Iterable[str], values: dict[tuple[str, ...], float]
) -> Metric:
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def _gauge(
    name: str, doc: str, labels: Iterable[str], values: dict[tuple[str, ...], float]
) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


class CacheCollector:
    """Yields the cache's metric families from its components' counters at scrape time.

    ``disk_bytes`` and ``filesystem`` are read by the admin server just before a scrape
    (off the event loop); collect itself does no I/O.
    """

    def __init__(self, server: CacheServer) -> None:
        self._server = server
        self.disk_bytes = 0
        self.filesystem: tuple[int, int] | None = None  # (size, free) of the disk tier's

    def collect(self) -> Iterator[Metric]:
        server = self._server
        yield from self._requests(server.traffic)
        yield from self._store(server)
        yield from self._upstream(server)
        yield from self._hierarchy(server)
        yield _gauge(
            "harvest_cache_client_connections",
            "Client connections open.",
            (),
            {(): len(server.connections)},
        )

    def _requests(self, traffic: Traffic) -> Iterator[Metric]:
        counts = traffic.request_counts()
        yield _counter(
            "harvest_cache_requests",
            "Requests answered, by method, Squid result code and status class.",
            ("method", "result", "code"),
            {(m, r, f"{c}xx" if c else "none"): n for (m, r, c), n in counts.items()},
        )
        tiers = {"TCP_MEM_HIT": "memory", "TCP_HIT": "disk"}
        hits: dict[tuple[str, ...], float] = {("memory",): 0, ("disk",): 0}
        misses = 0
        for (_, result, _), n in counts.items():
            if result in tiers:
                hits[(tiers[result],)] += n
            elif KIND.get(result) == "miss":
                misses += n
        yield _counter(
            "harvest_cache_hits", "Requests answered from the store, by tier.", ("tier",), hits
        )
        yield _counter(
            "harvest_cache_misses", "Requests no stored response could answer.", (), {(): misses}
        )
        yield _counter(
            "harvest_cache_hierarchy",
            "Requests forwarded, by Squid hierarchy code (where the response came from).",
            ("code",),
            {(code,): n for code, n in traffic.hierarchy.items()},
        )
        latency = HistogramMetricFamily(
            "harvest_cache_request_duration_seconds",
            "Time from a request's head to the end of its response, by kind.",
            labels=["kind"],
        )
        for kind, histogram in sorted(traffic.latencies().items()):
            running, buckets = 0, []
            for bound, count in zip(
                (*LATENCY_BUCKETS, float("inf")), histogram.counts, strict=True
            ):
                running += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
            latency.add_metric([kind], buckets, histogram.total)
        yield latency
        for name, doc, value in (
            (
                "harvest_cache_client_sent_bytes",
                "Bytes sent to clients (heads and bodies).",
                traffic.bytes_to_clients,
            ),
            (
                "harvest_cache_client_received_bytes",
                "Request body bytes received from clients.",
                traffic.bytes_from_clients,
            ),
            (
                "harvest_cache_upstream_received_bytes",
                "Bytes received from origins and peers.",
                traffic.bytes_from_upstream,
            ),
            (
                "harvest_cache_tunnel_bytes",
                "Bytes relayed through CONNECT tunnels, both ways.",
                traffic.tunnel_bytes,
            ),
            (
                "harvest_cache_client_aborts",
                "Requests whose client left before the response ended.",
                traffic.aborted,
            ),
            (
                "harvest_cache_upstream_surplus_closes",
                "Upstream connections closed because bytes came after a complete response or"
                " with no request outstanding (never parsed as a response, never reused).",
                traffic.upstream_surplus,
            ),
        ):
            yield _counter(name, doc, (), {(): value})
        yield _gauge(
            "harvest_cache_tunnels_open", "CONNECT tunnels open.", (), {(): traffic.tunnels_open}
        )
        yield _counter(
            "harvest_cache_upstream_errors",
            "Failures of the next hop, by kind (one per failed fetch, however many clients"
            " shared it).",
            ("kind",),
            {(kind,): n for kind, n in traffic.upstream_errors.items()},
        )

    def _store(self, server: CacheServer) -> Iterator[Metric]:
        store = server.store
        memory = store.memory
        yield _gauge(
            "harvest_cache_store_objects",
            "Objects (and Vary markers) held, by tier.",
            ("tier",),
            {("memory",): len(memory)},
        )
        yield _gauge(
            "harvest_cache_store_bytes",
            "Bytes the store charges, by tier (memory: bodies and heads; disk: files and index).",
            ("tier",),
            {("memory",): memory.size, ("disk",): self.disk_bytes},
        )
        yield _gauge(
            "harvest_cache_store_capacity_bytes",
            "The configured size of each tier.",
            ("tier",),
            {("memory",): memory.capacity, ("disk",): server.config.cache.disk_mb * 1024 * 1024},
        )
        if self.filesystem is not None:
            size, free = self.filesystem
            yield _gauge(
                "harvest_cache_store_filesystem_size_bytes",
                "Size of the filesystem holding the disk tier.",
                (),
                {(): size},
            )
            yield _gauge(
                "harvest_cache_store_filesystem_free_bytes",
                "Bytes free (for unprivileged users) on the filesystem holding the disk tier.",
                (),
                {(): free},
            )
        yield _counter(
            "harvest_cache_store_evictions",
            "Objects evicted to keep the memory tier within its size.",
            ("tier",),
            {("memory",): memory.evictions},
        )
        yield _counter(
            "harvest_cache_store_failures",
            "Disk tier reads and writes that failed (each read served as a miss).",
            ("operation",),
            {("read",): store.read_failures, ("write",): store.write_failures},
        )
        proxy = server.proxy
        yield _gauge(
            "harvest_cache_page_copy_bytes",
            "Bytes of hot bodies also held in memory files, sent from there by the kernel.",
            (),
            {(): proxy.page_bytes if proxy is not None else 0},
        )
        waiting = sum(f.readers for f in proxy.flights()) if proxy is not None else 0
        yield _gauge(
            "harvest_cache_collapsed_waiters",
            "Clients reading fetches in progress (collapsed forwarding), fetching one included.",
            (),
            {(): waiting},
        )

    def _upstream(self, server: CacheServer) -> Iterator[Metric]:
        resolver = server.resolver
        yield _counter(
            "harvest_cache_dns_lookups",
            "Host name lookups, by outcome (hit: answered from the DNS cache).",
            ("outcome",),
            {("hit",): resolver.hits, ("miss",): resolver.misses, ("failure",): resolver.failures},
        )
        pools = {"origin": server.pool, "peer": server.peer_pool}
        yield _counter(
            "harvest_cache_upstream_connections_opened",
            "Connections opened to origins and peers.",
            ("to",),
            {(k,): p.opened for k, p in pools.items()},
        )
        yield _counter(
            "harvest_cache_upstream_connections_reused",
            "Requests sent on an idle kept-alive connection.",
            ("to",),
            {(k,): p.reused for k, p in pools.items()},
        )
        yield _counter(
            "harvest_cache_access_log_dropped_lines",
            "Access log lines dropped while the disk could not keep up.",
            (),
            {(): server.access_log.dropped},
        )

    def _hierarchy(self, server: CacheServer) -> Iterator[Metric]:
        icp = server.icp
        if icp is not None:
            yield _counter(
                "harvest_cache_icp_replies_sent",
                "Answers to other caches' ICP queries, by opcode.",
                ("opcode",),
                {(op,): n for op, n in icp.answered.items()},
            )
            yield _counter(
                "harvest_cache_icp_dropped",
                "ICP datagrams dropped: malformed, or replies to no query of ours.",
                (),
                {(): icp.dropped},
            )
            yield _gauge(
                "harvest_cache_icp_own_sockets",
                "Caches whose ICP queries are answered on a socket of their own (busy queriers).",
                (),
                {(): icp.own_sockets},
            )
            yield _counter(
                "harvest_cache_icp_unsent",
                "ICP datagrams the socket refused to send (its buffer full): lost, as on the way.",
                (),
                {(): icp.unsent},
            )
        neighbours = server.neighbours
        if neighbours is not None:
            now = asyncio.get_running_loop().time()
            health = neighbours.health
            per_peer = {
                "harvest_cache_icp_queries_sent": ("ICP queries sent to each peer.", "queries"),
                "harvest_cache_icp_replies_received": ("ICP replies from each peer.", "replies"),
                "harvest_cache_icp_timeouts": ("ICP rounds a peer left unanswered.", "timeouts"),
                "harvest_cache_peer_requests": ("Requests sent to each peer.", "uses"),
                "harvest_cache_peer_connect_failures": (
                    "Failed connections to each peer.",
                    "connect_failures",
                ),
                "harvest_cache_peer_digest_hits": (
                    "Requests sent to a peer on its digest's word.",
                    "digest_hits",
                ),
                "harvest_cache_peer_digest_false_hits": (
                    "Of those, the ones it did not answer from its cache.",
                    "digest_false_hits",
                ),
            }
            for name, (doc, attr) in per_peer.items():
                yield _counter(
                    name, doc, ("peer",), {(p,): getattr(h, attr) for p, h in health.items()}
                )
            yield _gauge(
                "harvest_cache_peer_rtt_seconds",
                "Smoothed ICP round-trip time to each peer (peers never heard from are left out).",
                ("peer",),
                {(p,): h.rtt for p, h in health.items() if h.rtt is not None},
            )
            yield _gauge(
                "harvest_cache_peer_state",
                "1 for each peer's state: alive, dead (ICP silent) or down (TCP refused).",
                ("peer", "state"),
                {
                    (p, state): float(h.state(now) == state)
                    for p, h in health.items()
                    for state in ("alive", "dead", "down")
                },
            )
            yield _counter(
                "harvest_cache_icp_unexpected_replies",
                "ICP replies from no peer asked, for no round of ours, or repeated.",
                (),
                {(): neighbours.unexpected_replies},
            )
        digests = server.digests
        if digests is not None:
            yield _gauge(
                "harvest_cache_digest_entries",
                "Objects listed in the cache digest this cache publishes.",
                (),
                {(): digests.own_entries},
            )
            yield _counter(
                "harvest_cache_digest_fetch_failures",
                "Peers' digests that could not be fetched or read.",
                (),
                {(): digests.fetch_failures},
            )


@dataclass(frozen=True, slots=True)
class Registries:
    """The cache's metrics (read on the event loop, where their counters change) and the
    process's CPU, memory and open files (read from /proc: in a thread)."""

    cache: CollectorRegistry
    process: CollectorRegistry
    collector: CacheCollector


def registries(server: CacheServer) -> Registries:
    cache = CollectorRegistry(auto_describe=False)
    collector = CacheCollector(server)
    cache.register(collector)
    process = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=process)
    return Registries(cache, process, collector)
