"""The cache's metrics: its Prometheus exposition, made from what the cache reports.

At scrape time ``CacheCollector`` asks for a ``CacheStats`` (the request counters, and what
the store, pools, DNS, ICP, peers and digests report) and yields metric families from it;
``registries`` adds the process's CPU, memory and open files. This module reads values only:
it knows no component.

Label values are bounded by construction: methods are the few the parser knows, results and
hierarchy codes Squid's, status classes 1xx-5xx, error kinds the upstream errors' own, peers
and tiers those configured. Never a URL or a client address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from harvest_cache.stats import CacheStats, IcpStats, PeerStats, StoreStats
from harvest_cache.traffic import KIND, LATENCY_BUCKETS, Traffic

_HTCP_DOCS = {
    "received": "HTCP datagrams received.",
    "malformed": "HTCP datagrams that could not be read (dropped).",
    "denied": "HTCP TSTs and CLRs from addresses not allowed.",
    "tst_answered": "HTCP TSTs answered.",
    "tst_hits": "HTCP TSTs answered with a hit.",
    "clr_received": "HTCP CLRs taken from peers allowed to send them.",
    "clr_purged": "Of those, the ones that made us forget something.",
    "queries_sent": "HTCP TSTs sent to peers.",
    "clr_sent": "HTCP CLRs sent to peers (after a PURGE here).",
    "replies": "Answers to our HTCP TSTs.",
    "unexpected_replies": "HTCP answers to no TST of ours.",
}


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
    """Yields the cache's metric families from ``stats()`` at scrape time.

    ``disk_bytes`` and ``filesystem`` are read by the admin server just before a scrape
    (off the event loop); collect itself does no I/O.
    """

    def __init__(self, stats: Callable[[], CacheStats]) -> None:
        self._stats = stats
        self.disk_bytes = 0
        self.filesystem: tuple[int, int] | None = None  # (size, free) of the disk tier's

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        yield from self._requests(stats.traffic)
        yield from self._store(stats)
        yield from self._upstream(stats)
        yield from self._hierarchy(stats)
        yield _gauge(
            "harvest_cache_client_connections",
            "Client connections open.",
            (),
            {(): stats.client_connections},
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

    def _store(self, stats: CacheStats) -> Iterator[Metric]:
        store: StoreStats = stats.store
        yield _gauge(
            "harvest_cache_store_objects",
            "Objects (and Vary markers) held, by tier.",
            ("tier",),
            {("memory",): store.memory_objects},
        )
        yield _gauge(
            "harvest_cache_store_bytes",
            "Bytes the store charges, by tier (memory: bodies and heads; disk: files and index).",
            ("tier",),
            {("memory",): store.memory_bytes, ("disk",): self.disk_bytes},
        )
        yield _gauge(
            "harvest_cache_store_capacity_bytes",
            "The configured size of each tier.",
            ("tier",),
            {("memory",): store.memory_capacity, ("disk",): store.disk_capacity},
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
            {("memory",): store.memory_evictions},
        )
        yield _counter(
            "harvest_cache_store_failures",
            "Disk tier reads and writes that failed (each read served as a miss).",
            ("operation",),
            {("read",): store.read_failures, ("write",): store.write_failures},
        )
        yield _counter(
            "harvest_cache_store_disk_skips",
            "Small objects kept in memory only: the disk tier's writer was too far behind.",
            (),
            {(): store.disk_skips},
        )
        yield _counter(
            "harvest_cache_store_disk_reads",
            "Objects read from the disk tier, by whether they were promoted into the memory"
            " tier (once it is full, on a second read among its recent ones).",
            ("promoted",),
            {("true",): store.promotions, ("false",): store.kept_on_disk},
        )
        partial = stats.partial
        yield _counter(
            "harvest_cache_partial_parts_stored",
            "206 responses kept as parts of partial content (RFC 9111 3.3).",
            (),
            {(): partial.parts_stored},
        )
        yield _counter(
            "harvest_cache_partial_completed",
            "Representations put together from their parts and stored whole (RFC 9111 3.4).",
            (),
            {(): partial.completed},
        )
        yield _counter(
            "harvest_cache_partial_lost",
            "Partial content dropped because a part it named had been evicted.",
            (),
            {(): partial.lost},
        )
        yield _gauge(
            "harvest_cache_page_copy_bytes",
            "Bytes of hot bodies also held in memory files, sent from there by the kernel.",
            (),
            {(): stats.page_copy_bytes},
        )
        yield _gauge(
            "harvest_cache_disk_heads",
            "Answers kept for objects read from the disk tier and left there (no body).",
            (),
            {(): stats.disk_heads},
        )
        yield _gauge(
            "harvest_cache_collapsed_waiters",
            "Clients reading fetches in progress (collapsed forwarding), fetching one included.",
            (),
            {(): stats.collapsed_waiters},
        )

    def _upstream(self, stats: CacheStats) -> Iterator[Metric]:
        dns = stats.dns
        yield _counter(
            "harvest_cache_dns_lookups",
            "Host name lookups, by outcome (hit: answered from the DNS cache).",
            ("outcome",),
            {("hit",): dns.hits, ("miss",): dns.misses, ("failure",): dns.failures},
        )
        pools = {"origin": stats.origin_pool, "peer": stats.peer_pool}
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
        tls = stats.tls
        yield _counter(
            "harvest_cache_upstream_tls_handshakes",
            "TLS connections made to origins and peers, by whether a session was resumed"
            " (failures are upstream errors of kind tls_verify and tls_handshake).",
            ("resumed",),
            {("yes",): tls.resumed, ("no",): tls.handshakes - tls.resumed},
        )
        yield _counter(
            "harvest_cache_access_log_dropped_lines",
            "Access log lines dropped while the disk could not keep up.",
            (),
            {(): stats.access_log_dropped},
        )

    def _hierarchy(self, stats: CacheStats) -> Iterator[Metric]:
        icp: IcpStats | None = stats.icp
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
        health: dict[str, PeerStats] | None = stats.peers
        if health is not None:
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
                "harvest_cache_peer_response_seconds",
                "Smoothed time from a request sent to each peer to its answer's head (peers never"
                " sent one are left out).",
                ("peer",),
                {(p,): h.response_time for p, h in health.items() if h.response_time is not None},
            )
            yield _gauge(
                "harvest_cache_peer_state",
                "1 for each peer's state: alive, dead (ICP silent) or down (TCP refused).",
                ("peer", "state"),
                {
                    (p, state): float(h.state == state)
                    for p, h in health.items()
                    for state in ("alive", "dead", "down")
                },
            )
            yield _counter(
                "harvest_cache_icp_unexpected_replies",
                "ICP replies from no peer asked, for no round of ours, or repeated.",
                (),
                {(): stats.unexpected_icp_replies},
            )
        bump = stats.bump
        if bump is not None:
            yield _counter(
                "harvest_cache_tunnels_bumped",
                "CONNECT tunnels intercepted (their requests are counted as any others).",
                (),
                {(): bump.bumped},
            )
            yield _counter(
                "harvest_cache_tunnels_spliced",
                "CONNECT tunnels relayed as bytes while interception is on, by reason: client"
                " (outside access.bump_allow), domain, network, not-tls, pinned.",
                ("reason",),
                {(reason,): n for reason, n in bump.spliced.items()},
            )
            yield _counter(
                "harvest_cache_bump_certificates_minted",
                "Server certificates the cache's CA made.",
                (),
                {(): bump.minted},
            )
            yield _counter(
                "harvest_cache_bump_handshake_failures",
                "Client TLS handshakes in intercepted tunnels that failed, by whether the client"
                " refused the certificate (its server is then spliced for bump.pin_seconds).",
                ("refused",),
                {("yes",): bump.refused, ("no",): bump.failed},
            )
            yield _gauge(
                "harvest_cache_bump_certificates",
                "Server certificates held in memory.",
                (),
                {(): bump.certificates},
            )
            yield _gauge(
                "harvest_cache_bump_pinned_servers",
                "Servers whose tunnels are spliced because a client refused the certificate.",
                (),
                {(): bump.pinned},
            )
        htcp = stats.htcp
        if htcp is not None:
            for name, value in htcp._asdict().items():
                yield _counter(f"harvest_cache_htcp_{name}", _HTCP_DOCS[name], (), {(): value})
        array = stats.array
        if array is not None:
            yield _gauge(
                "harvest_cache_carp_load_factor",
                "Each cache array member's configured share of the URLs (its weight over the"
                " array's).",
                ("member",),
                {(m,): s.load_factor for m, s in array.items()},
            )
            yield _counter(
                "harvest_cache_carp_homes",
                "Requests routed to each array member as their URL's home (this cache's own,"
                " when it is a member, included).",
                ("member",),
                {(m,): s.homes for m, s in array.items()},
            )
        digests = stats.digests
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


def registries(stats: Callable[[], CacheStats]) -> Registries:
    cache = CollectorRegistry(auto_describe=False)
    collector = CacheCollector(stats)
    cache.register(collector)
    process = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=process)
    return Registries(cache, process, collector)
