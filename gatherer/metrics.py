"""What a gathering run counts, and the export service's Prometheus metrics made from it.

The crawl controller feeds a run's ``RunStats``; the progress display and the end-of-run
summary read it, and the run reports its ``counts`` to the gatherer database every
``REPORT_SECONDS`` and at its end (gatherer/reporting.py). The export service is another
process: at each scrape it reads what the runs reported (a ``GatherReport``) and ``families``
makes the metric families from it. This module reads values only: it knows no component.

Counters are totals over every run the database has seen (the run in progress included, as
of its last report), so they only rise, across restarts of either process. Label values are
bounded: error kinds are FetchError's fixed set and the summarizer's failure kinds, outcomes
are three. Never a URL or a host.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from gatherer.database import GatherReport, Run

# The run keeps the latest failures with their reasons for its summary; older ones are counted.
RECENT_FAILURES = 1000
# Seconds between a run's reports to the database while it runs.
REPORT_SECONDS = 5.0
# A run not heard from for this long is taken as gone (killed, or its machine down).
SILENT_AFTER = 60.0
# How a run ended: all of it done, stopped by a signal, or failed (an error ended it).
OUTCOMES = ("complete", "stopped", "failed")
RUNS = "runs"  # the counter a run's outcome is counted under, kind = the outcome


@dataclass(slots=True)
class RunStats:
    """Counters of one run. ``started`` and ``elapsed`` are monotonic seconds.

    fetched: documents whose bytes arrived; not_modified: the source said unchanged (304 or
    same file time); unchanged: same MD5 as stored; fresh: not due for refresh, not fetched;
    summarized / stored / deleted: records made, written, removed; duplicates: documents not
    stored because they are another's copy (a canonical URL elsewhere, or a near-duplicate of a
    stored text); robots_denied: URLs
    robots.txt refused; fetch_errors / summarize_errors: failures by kind; admissions: the
    frontier's answers to offered links by reason; bytes: content bytes fetched;
    summarize_seconds: time documents spent with the summarizer pool (a wait for a free
    worker included); listings: sitemaps and feeds enumerated (read, or unchanged and taken
    as stored); listed_changed: records fetched before they were due because a listing dated
    them after their last check; listing_errors: sitemaps and feeds unreadable, wholly or in
    part, by kind.
    """

    started: float = 0.0
    elapsed: float = 0.0
    fetched: int = 0
    not_modified: int = 0
    unchanged: int = 0
    fresh: int = 0
    summarized: int = 0
    stored: int = 0
    deleted: int = 0
    duplicates: int = 0
    robots_denied: int = 0
    bytes: int = 0
    summarize_seconds: float = 0.0
    queued: int = 0
    active: int = 0
    hosts: int = 0
    listings: int = 0
    listed_changed: int = 0
    fetch_errors: Counter[str] = field(default_factory=Counter)
    summarize_errors: Counter[str] = field(default_factory=Counter)
    admissions: Counter[str] = field(default_factory=Counter)
    listing_errors: Counter[str] = field(default_factory=Counter)
    failures: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=RECENT_FAILURES))

    @property
    def errors(self) -> int:
        return (
            sum(self.fetch_errors.values())
            + sum(self.summarize_errors.values())
            + sum(self.listing_errors.values())
        )

    @property
    def visited(self) -> int:
        """URLs whose outcome is known this run (fetched or answered without a body)."""
        return (
            self.fetched
            + self.not_modified
            + self.fresh
            + self.robots_denied
            + sum(self.fetch_errors.values())
        )

    def rate(self) -> float:
        """Documents fetched or confirmed unchanged per second so far."""
        done = self.fetched + self.not_modified
        return done / self.elapsed if self.elapsed > 0 else 0.0

    def lines(self) -> list[str]:
        """A plain-text summary, one fact per line."""
        out = [
            f"elapsed {self.elapsed:.2f} s, {self.rate():.1f} documents/s",
            f"fetched {self.fetched} ({self.bytes} bytes), not modified {self.not_modified},"
            f" unchanged {self.unchanged}, fresh {self.fresh}",
            f"summarized {self.summarized}, stored {self.stored}, deleted {self.deleted},"
            f" duplicates {self.duplicates}, robots denied {self.robots_denied},"
            f" hosts {self.hosts}",
        ]
        if self.listings or self.listed_changed:
            out.append(
                f"sitemaps and feeds {self.listings}, fetched early by their dates"
                f" {self.listed_changed}"
            )
        if self.fetch_errors:
            out.append("fetch errors: " + _counts(self.fetch_errors))
        if self.summarize_errors:
            out.append("summarize errors: " + _counts(self.summarize_errors))
        if self.listing_errors:
            out.append("sitemap and feed errors: " + _counts(self.listing_errors))
        if self.admissions:
            out.append("links: " + _counts(self.admissions))
        return out


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counter.items()))


# The run's plain counters: (RunStats field, metric name without harvest_gatherer_ and _total,
# help).
_COUNTERS = (
    ("fetched", "fetched", "Documents whose content was fetched."),
    ("bytes", "fetched_bytes", "Content bytes fetched."),
    (
        "not_modified",
        "not_modified",
        "Documents the source said were unchanged (304, or the same file time): not fetched.",
    ),
    ("unchanged", "unchanged", "Documents fetched again with the content (MD5) stored."),
    (
        "fresh",
        "fresh",
        "Records not due for refresh, re-enumerated from the database without a fetch.",
    ),
    ("robots_denied", "robots_denied", "URLs robots.txt refused."),
    ("summarized", "summarized", "Documents summarized."),
    ("stored", "stored", "Records written to the database."),
    (
        "deleted",
        "deleted",
        "Records removed: their documents gone (404, 410) or no longer selected, or expired.",
    ),
    (
        "duplicates",
        "duplicates",
        "Documents not stored: copies of another (a canonical URL elsewhere, a near-duplicate).",
    ),
    (
        "listings",
        "listings",
        "Sitemaps and feeds enumerated: read, or unchanged and taken as stored.",
    ),
    (
        "listed_changed",
        "listed_changed",
        "Records fetched before they were due: a sitemap or feed dated them after their last"
        " check.",
    ),
)
# Counters by kind: (RunStats field, the ``stage`` label of harvest_gatherer_errors_total).
_ERRORS = (
    ("fetch_errors", "fetch"),
    ("summarize_errors", "summarize"),
    ("listing_errors", "listing"),
)


def counts(stats: RunStats) -> dict[tuple[str, str], float]:
    """The run's counts as the database keeps them: (counter, kind) -> value, kind "" for
    the plain counters."""
    out = {(name, ""): float(getattr(stats, name)) for name, _, _ in _COUNTERS}
    out["summarize_seconds", ""] = stats.summarize_seconds
    for name, _ in _ERRORS:
        counter: Counter[str] = getattr(stats, name)
        out.update({(name, kind): float(n) for kind, n in counter.items()})
    return out


def going(run: Run | None, now: float) -> bool:
    """Whether ``run`` (the latest) is still going at ``now``: not ended, heard from lately."""
    return run is not None and run.outcome is None and now - run.reported <= SILENT_AFTER


def families(report: GatherReport, *, now: float, interval: float, version: str) -> list[Metric]:
    """The export service's metric families from what the runs reported; ``interval`` is the
    configured Gather-Interval, ``version`` the software's."""
    totals = report.totals

    def total(name: str, kind: str = "") -> float:
        return totals.get((name, kind), 0.0)

    out: list[Metric] = [
        CounterMetricFamily(f"harvest_gatherer_{metric}", doc, value=total(name))
        for name, metric, doc in _COUNTERS
    ]
    errors = CounterMetricFamily(
        "harvest_gatherer_errors",
        "Documents that failed, by stage (fetch, summarize, listing: a sitemap or feed) and kind.",
        labels=["stage", "kind"],
    )
    for name, stage in _ERRORS:
        for (counter, kind), value in sorted(totals.items()):
            if counter == name:
                errors.add_metric([stage, kind], value)
    summarize_jobs = total("summarized") + sum(
        value for (counter, _), value in totals.items() if counter == "summarize_errors"
    )
    runs = CounterMetricFamily(
        "harvest_gatherer_runs",
        "Gathering runs ended, by outcome: complete, stopped (by a signal), failed. A killed"
        " run is not counted.",
        labels=["outcome"],
    )
    for outcome in OUTCOMES:
        runs.add_metric([outcome], total(RUNS, outcome))
    out += [
        errors,
        SummaryMetricFamily(
            "harvest_gatherer_summarize_seconds",
            "Seconds documents spent with the summarizers (a wait for a free worker included).",
            count_value=round(summarize_jobs),
            sum_value=total("summarize_seconds"),
        ),
        runs,
    ]
    out += _gauges(report, now=now, interval=interval, version=version)
    return out


def _gauges(report: GatherReport, *, now: float, interval: float, version: str) -> list[Metric]:
    db = report.database
    latest = report.latest if going(report.latest, now) else None
    out: list[Metric] = [
        GaugeMetricFamily("harvest_gatherer_records", "Records in the database.", db.records),
        GaugeMetricFamily(
            "harvest_gatherer_manual_records", "Hand-written records in the database.", db.manual
        ),
        GaugeMetricFamily(
            "harvest_gatherer_failing_records",
            "Records whose document failed at its last gathering.",
            db.failing,
        ),
        GaugeMetricFamily(
            "harvest_gatherer_tombstones",
            "Deleted records remembered for incremental exports.",
            db.tombstones,
        ),
        GaugeMetricFamily(
            "harvest_gatherer_last_update_timestamp_seconds",
            "The newest Update-Time in the database (epoch seconds; 0 when empty).",
            db.last_update,
        ),
        GaugeMetricFamily(
            "harvest_gatherer_database_created_timestamp_seconds",
            "When the gatherer database was made (epoch seconds).",
            report.created,
        ),
        GaugeMetricFamily(
            "harvest_gatherer_gather_interval_seconds",
            "How often the gatherer is meant to gather (Gather-Interval).",
            interval,
        ),
        GaugeMetricFamily(
            "harvest_gatherer_gathering", "1 while a gathering run is going.", int(bool(latest))
        ),
        GaugeMetricFamily(
            "harvest_gatherer_frontier_urls",
            "URLs waiting in the frontier of the run going (0 when none is).",
            latest.queued if latest else 0,
        ),
        GaugeMetricFamily(
            "harvest_gatherer_frontier_hosts",
            "Hosts the run going has queued URLs of (0 when none is).",
            latest.hosts if latest else 0,
        ),
        GaugeMetricFamily(
            "harvest_gatherer_fetches_in_progress",
            "Fetches of the run going in progress now (0 when none is).",
            latest.active if latest else 0,
        ),
    ]
    last = report.last_complete
    if last is not None and last.ended is not None:
        out += [
            GaugeMetricFamily(
                "harvest_gatherer_last_gather_timestamp_seconds",
                "When the last complete gathering run ended (epoch seconds).",
                last.ended,
            ),
            GaugeMetricFamily(
                "harvest_gatherer_last_gather_duration_seconds",
                "How long the last complete gathering run took.",
                last.seconds,
            ),
        ]
    info = GaugeMetricFamily(
        "harvest_gatherer_info", "The gatherer's software version.", labels=["version"]
    )
    info.add_metric([version], 1)
    out.append(info)
    return out


class _Scraped(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


class ServiceMetrics:
    """The export service's /metrics: what the runs reported (handed to each scrape), and
    the service process's CPU, memory and open files."""

    def __init__(self, *, interval: float, version: str) -> None:
        self._interval = interval
        self._version = version
        # Read from /proc: collected on a worker thread (and not described at registration,
        # which would read /proc on the event loop).
        self._process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._process)

    async def exposition(self, report: GatherReport, now: float) -> bytes:
        """The Prometheus text exposition of ``report`` as of ``now``."""
        shown = families(report, now=now, interval=self._interval, version=self._version)
        body = generate_latest(_Scraped(shown))
        return body + await asyncio.to_thread(generate_latest, self._process)
