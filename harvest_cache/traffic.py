"""The request counters: what the request paths feed, a few dict and int increments each
(nothing from prometheus_client on the request path). ``metrics`` reads them at scrape time.

Label values are bounded by construction: methods are the few the parser knows, results and
hierarchy codes Squid's, status classes 1xx-5xx, error kinds the upstream errors' own.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

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
