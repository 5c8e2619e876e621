"""The broker's Prometheus metrics: what its request paths count, and what the broker reports
at scrape time.

Every metric lives in the broker's own ``CollectorRegistry`` (several brokers can run in one
process, as the tests do). Request paths feed counters and the query latency histogram; the
gauges and the pull counters are made from the ``BrokerStats`` (broker/stats.py) that
``/metrics`` hands to ``exposition``, so the collector and scheduler need no hooks. This
module reads values only: it knows no component.

Label values are bounded by construction: interfaces, outcomes, modes and server types are
fixed sets; routes are the application's registered ones; a collection label is a scheduled
collection's name or ``hsr`` (objects of collections no longer configured are counted under
``other``). Never a URL, a query or a client address.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.errors import QuerySyntaxError
from broker.stats import BrokerStats

# Seconds: from a cached term lookup (a fraction of a millisecond) to a regular expression
# checked over thousands of candidates.
QUERY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

INTERFACES = ("api", "page", "hsr")
QUERY_OUTCOMES = ("ok", "syntax_error", "error")
FEDERATED_OUTCOMES = ("answered", "late", "failed")
OTHER = "other"  # the collection label of objects whose collection is no longer scheduled
HSR_COLLECTION = "hsr"


class _Scraped(Collector):
    """Yields the families made from the latest BrokerStats (none before the first scrape)."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        s = self._metrics.reported
        if s is None:
            return
        registry = s.registry
        yield GaugeMetricFamily(
            "harvest_broker_objects", "Objects in the registry.", value=registry.objects
        )
        objects = GaugeMetricFamily(
            "harvest_broker_collection_objects",
            "Objects in the registry by collection.",
            labels=["collection"],
        )
        by_collection: dict[str, int] = {}
        for name, state in registry.collections.items():
            label = name if name in s.pulls or name == HSR_COLLECTION else OTHER
            by_collection[label] = by_collection.get(label, 0) + state.count
        for name, count in sorted(by_collection.items()):
            objects.add_metric([name], count)
        yield objects
        yield GaugeMetricFamily(
            "harvest_broker_index_documents", "Objects in the index.", value=s.index.documents
        )
        yield GaugeMetricFamily(
            "harvest_broker_index_ready",
            "1 when searches are answered; 0 while a new index is filled from the registry "
            "(or after filling it failed).",
            value=int(s.index.ready),
        )
        yield GaugeMetricFamily(
            "harvest_broker_change_sequence",
            "The registry's last change number.",
            value=registry.last_seq,
        )
        yield GaugeMetricFamily(
            "harvest_broker_index_backlog",
            "Change numbers the index has not applied yet (0 when it is up to date).",
            value=max(0, registry.last_seq - registry.indexed_seq),
        )
        pulls = CounterMetricFamily(
            "harvest_broker_pulls",
            "Finished pulls by collection and outcome (since the collection was scheduled).",
            labels=["collection", "outcome"],
        )
        last_success = GaugeMetricFamily(
            "harvest_broker_collection_last_success_timestamp_seconds",
            "When each collection's last successful pull ended (epoch seconds).",
            labels=["collection"],
        )
        failing = GaugeMetricFamily(
            "harvest_broker_collection_consecutive_failures",
            "Failed pulls of each collection since its last success.",
            labels=["collection"],
        )
        running = GaugeMetricFamily(
            "harvest_broker_collection_pulling",
            "1 while a pull of the collection runs.",
            labels=["collection"],
        )
        for name, status in sorted(s.pulls.items()):
            pulls.add_metric([name, "success"], status.pulls - status.failures)
            pulls.add_metric([name, "failure"], status.failures)
            if status.last_success is not None:
                last_success.add_metric([name], status.last_success)
            failing.add_metric([name], status.consecutive_failures)
            running.add_metric([name], 1 if status.running else 0)
        yield from (pulls, last_success, failing, running)
        gc = CounterMetricFamily(
            "harvest_broker_gc_runs", "Garbage collections by outcome.", labels=["outcome"]
        )
        gc.add_metric(["ok"], s.gc.runs - s.gc.failures)
        gc.add_metric(["error"], s.gc.failures)
        yield gc
        if s.gc.last is not None:
            yield GaugeMetricFamily(
                "harvest_broker_gc_last_timestamp_seconds",
                "When the last garbage collection ended (epoch seconds).",
                value=s.gc.last,
            )
        info = GaugeMetricFamily(
            "harvest_broker_info", "The broker's software version.", labels=["version"]
        )
        info.add_metric([s.version], 1)
        yield info
        yield GaugeMetricFamily(
            "harvest_broker_start_time_seconds",
            "When the broker started (epoch seconds).",
            value=s.started,
        )


class BrokerMetrics:
    """The broker's metrics, in its own CollectorRegistry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reported: BrokerStats | None = None  # what the last scrape was handed
        self.queries = Counter(
            "harvest_broker_queries",
            "Queries answered, by interface (api, page, hsr) and outcome.",
            ["interface", "outcome"],
            registry=self.registry,
        )
        self.query_seconds = Histogram(
            "harvest_broker_query_seconds",
            "Seconds to answer a query (parse, index, checks, snippets), by interface.",
            ["interface"],
            buckets=QUERY_BUCKETS,
            registry=self.registry,
        )
        self.http_requests = Counter(
            "harvest_broker_http_requests",
            "HTTP requests by route and status class (2xx ... 5xx).",
            ["route", "status"],
            registry=self.registry,
        )
        self.bulk_exports = Counter(
            "harvest_broker_bulk_exports",
            "Bulk exports by mode (complete, incremental) and outcome (ok, cut: ended early).",
            ["mode", "outcome"],
            registry=self.registry,
        )
        self.bulk_objects = Counter(
            "harvest_broker_bulk_objects",
            "Objects sent by bulk exports: whole records, or @DELETE markers.",
            ["kind"],
            registry=self.registry,
        )
        self.hsr_registrations = Counter(
            "harvest_broker_hsr_registrations",
            "HSR registrations by server type and outcome (new, renewed, invalid).",
            ["type", "outcome"],
            registry=self.registry,
        )
        self.federated_brokers = Counter(
            "harvest_broker_federated_brokers",
            "Brokers asked by federated searches, by outcome (answered, late: not within the"
            " deadline, failed).",
            ["outcome"],
            registry=self.registry,
        )
        self.registry.register(_Scraped(self))
        # CPU, memory, open files: read from /proc, so collected on a worker thread (and not
        # described at registration, which would read /proc on the event loop).
        self.process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.process)
        for interface in INTERFACES:  # every series exists from the start, at zero
            for outcome in QUERY_OUTCOMES:
                self.queries.labels(interface, outcome)
            self.query_seconds.labels(interface)
        for federated in FEDERATED_OUTCOMES:
            self.federated_brokers.labels(federated)

    @contextmanager
    def query(self, interface: str) -> Iterator[None]:
        """Count and time the query answered inside the block, by how it ended."""
        started = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        except QuerySyntaxError:
            outcome = "syntax_error"
            raise
        finally:
            self.queries.labels(interface, outcome).inc()
            self.query_seconds.labels(interface).observe(time.perf_counter() - started)

    def federated(self, outcomes: Iterable[str]) -> None:
        """Count what came of asking each broker of a federated search."""
        for outcome in outcomes:
            self.federated_brokers.labels(outcome).inc()

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 if it has none yet): for the JSON statistics."""
        found = self.registry.get_sample_value(name, labels or {})
        return 0.0 if found is None or math.isnan(found) else found

    async def exposition(self, stats: BrokerStats) -> bytes:
        """The Prometheus text exposition, with what the broker reports now."""
        self.reported = stats
        body = generate_latest(self.registry)
        return body + await asyncio.to_thread(generate_latest, self.process)
