"""The broker's status, statistics and metrics, made from what it reports (``BrokerStats``).

::

    GET  /api/status     name, version, objects, index, collections, content summary
    GET  /api/stats      counters (queries, exports, registrations)
    GET  /metrics        Prometheus text format
"""

from __future__ import annotations

import math
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from broker.collector import PullResult
from broker.config import CollectionConfig
from broker.federation import SummaryStats
from broker.metrics import FEDERATED_OUTCOMES, INTERFACES, QUERY_OUTCOMES, BrokerMetrics
from broker.scheduler import CollectionStatus
from broker.services import Services, Settings
from broker.stats import BrokerStats
from harvest_common import hsr_client


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def pull_json(result: PullResult) -> dict[str, Any]:
    return {
        "items": result.items,
        "bytes": result.bytes,
        "upserted": len(result.applied.upserted),
        "removed": len(result.applied.removed),
        "refreshed": result.applied.refreshed,
        "ignored": result.applied.ignored,
        "complete": result.complete,
        "since": result.since,
        "cursor": result.cursor,
        "seconds": result.seconds,
    }


def collection_json(
    name: str,
    config: CollectionConfig | None,
    status: CollectionStatus | None,
    objects: int,
    cursor: str | None,
    last_pull: float | None,
    default_ttl: float,
) -> dict[str, Any]:
    """One collection: its configuration (None: no longer scheduled, objects kept until they
    expire; the HSR's; or one held only through replication, never pulled here), what the
    registry holds and what the scheduler knows."""
    out: dict[str, Any] = {
        "name": name,
        "scheduled": status is not None,
        "objects": objects,
        "replicated": last_pull is None and objects > 0,
        "cursor": cursor,
        "last_pull": last_pull,
    }
    if config is not None:
        out.update(
            kind=config.kind,
            source=config.source,
            query=config.query,
            interval=config.interval,
            incremental=config.incremental,
            ttl=config.ttl,
            effective_ttl=config.ttl or default_ttl,
            via_proxy=config.via_proxy,
        )
    if status is not None:
        error = status.last_error
        out.update(
            running=status.running,
            next_due=_finite(status.next_due),
            pulls=status.pulls,
            failures=status.failures,
            consecutive_failures=status.consecutive_failures,
            last_success=status.last_success,
            last_error=None
            if error is None
            else {"kind": error.kind, "reason": error.reason, "at": status.last_error_at},
            last_result=None if status.last_result is None else pull_json(status.last_result),
        )
    return out


def collections_json(stats: BrokerStats, settings: Settings) -> list[dict[str, Any]]:
    """Every collection scheduled or held in the registry, by name."""
    statuses = stats.pulls
    states = stats.registry.collections
    configs = settings.collections
    out = []
    for name in sorted(set(statuses) | set(states)):
        state = states.get(name)
        out.append(
            collection_json(
                name,
                configs.get(name),
                statuses.get(name),
                state.count if state else 0,
                state.cursor if state else None,
                state.last_pull if state else None,
                settings.default_ttl,
            )
        )
    return out


def summary_json(summary: SummaryStats) -> dict[str, Any]:
    return {
        "documents": summary.documents,
        "sampled": summary.sampled,
        "words": summary.words,
        "made": summary.made,
        "seconds": summary.seconds,
        "refreshes": summary.refreshes,
        "failures": summary.failures,
    }


def index_json(stats: BrokerStats) -> dict[str, Any]:
    registry, index = stats.registry, stats.index
    progress = index.filling
    return {
        "documents": index.documents,
        "indexed_seq": registry.indexed_seq,
        "backlog": max(0, registry.last_seq - registry.indexed_seq),
        "ready": index.ready,
        "state": index.state,
        "filling": None if progress is None else {"added": progress[0], "of": progress[1]},
    }


def statistics_json(stats: BrokerStats, metrics: BrokerMetrics) -> dict[str, Any]:
    """The counters since the broker started, with what it reports now."""
    value = metrics.value
    seconds = 0.0
    answered = 0.0
    for interface in INTERFACES:
        answered += value("harvest_broker_query_seconds_count", {"interface": interface})
        seconds += value("harvest_broker_query_seconds_sum", {"interface": interface})
    exports = {
        f"{mode}_{outcome}": int(
            value("harvest_broker_bulk_exports_total", {"mode": mode, "outcome": outcome})
        )
        for mode in ("complete", "incremental")
        for outcome in ("ok", "cut")
    }
    registrations = {
        outcome: int(
            sum(
                value("harvest_broker_hsr_registrations_total", {"type": t, "outcome": outcome})
                for t in (*hsr_client.TYPES, "invalid")
            )
        )
        for outcome in ("new", "renewed", "invalid")
    }
    return {
        "uptime": time.time() - stats.started,
        "objects": stats.registry.objects,
        "index": index_json(stats),
        "queries": {
            interface: {
                outcome: int(
                    value(
                        "harvest_broker_queries_total",
                        {"interface": interface, "outcome": outcome},
                    )
                )
                for outcome in QUERY_OUTCOMES
            }
            for interface in INTERFACES
        },
        "query_seconds": {
            "count": int(answered),
            "sum": seconds,
            "mean": seconds / answered if answered else None,
        },
        "bulk": {
            "exports": exports,
            "records": int(value("harvest_broker_bulk_objects_total", {"kind": "record"})),
            "deletes": int(value("harvest_broker_bulk_objects_total", {"kind": "delete"})),
        },
        "hsr_registrations": registrations,
        "federated_brokers": {
            outcome: int(value("harvest_broker_federated_brokers_total", {"outcome": outcome}))
            for outcome in FEDERATED_OUTCOMES
        },
        "gc": {"runs": stats.gc.runs, "failures": stats.gc.failures, "last": stats.gc.last},
    }


class StatusApi:
    """The status, statistics and metrics handlers over one broker."""

    def __init__(self, services: Services, metrics: BrokerMetrics) -> None:
        self._services = services
        self._metrics = metrics

    async def status(self, request: web.Request) -> web.Response:
        services = self._services
        stats = await services.stats()
        registry = stats.registry
        return web.json_response(
            {
                "name": services.config.broker.name,
                "version": stats.version,
                "started": stats.started,
                "uptime": time.time() - stats.started,
                "objects": registry.objects,
                "last_seq": registry.last_seq,
                "oldest_seq": registry.oldest_seq,
                "default_ttl": services.settings.default_ttl,
                "index": index_json(stats),
                "collections": collections_json(stats, services.settings),
                "summary": None if stats.summary is None else summary_json(stats.summary),
            }
        )

    async def stats(self, request: web.Request) -> web.Response:
        stats = await self._services.stats()
        return web.json_response(statistics_json(stats, self._metrics))

    async def metrics(self, request: web.Request) -> web.Response:
        body = await self._metrics.exposition(await self._services.stats())
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
