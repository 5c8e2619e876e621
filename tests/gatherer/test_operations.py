"""The gatherer's operations: the export service's /metrics after real gathering runs
(``harvest-gather run``, then ``serve``, as processes, over the loopback test site), each
scrape checked by ``promtool check metrics`` and shown to hold the runs' numbers; a run in
progress and a stopped one as the service sees them; what a run reports to the database and
how the totals outlive old runs; the families made from a report; the metrics the deploy
files use against a real scrape."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gatherer import schema
from gatherer.database import (
    RUNS_KEPT,
    DatabaseStats,
    GathererDatabase,
    GatherReport,
    Run,
    RunReport,
)
from gatherer.metrics import OUTCOMES, SILENT_AFTER, RunStats, ServiceMetrics, going
from gatherer.reporting import reporting
from harvest_common.software import software_version
from tests.gatherer.site import page
from tests.gatherer.test_cli import (
    COMMAND_SECONDS,
    HELD,
    HeldSite,
    answering,
    finished,
    harvest_gather,
    started,
    stops_cleanly,
    write_config,
)
from tests.gatherer.test_database import write_version_1
from tests.integration.test_metrics import samples_of
from tests.support import REPO, free_port, promtool_check

HTML = "text/html; charset=utf-8"
# What the run from "/" fetches and stores (robots.txt refuses /private/, /missing.html is 404).
STORED = ("/", "/a.html", "/b.html")
Key = tuple[str, frozenset[tuple[str, str]]]


@pytest.fixture
async def site() -> AsyncIterator[HeldSite]:
    s = HeldSite()
    s.documents["/robots.txt"] = ("text/plain", b"User-agent: *\nDisallow: /private/\n")
    links = ("/a.html", "/b.html", "/missing.html", "/private/p.html")
    s.documents["/"] = (HTML, page("Operations", "The front page.", links=links))
    s.documents["/a.html"] = (HTML, page("A", "Alpha."))
    s.documents["/b.html"] = (HTML, page("B", "Beta."))
    s.documents["/private/p.html"] = (HTML, page("Private", "Not for robots."))
    # The start of a run that stays in progress: its first link is held.
    s.documents["/start.html"] = (HTML, page("Start", "Held.", links=(HELD, "/a.html", "/b.html")))
    s.documents[HELD] = (HTML, page("Held", "Worth the wait."))
    await s.start()
    yield s
    s.release.set()
    await s.stop()


class Scrape:
    """One /metrics answer, checked and parsed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = list(text_string_to_metric_families(text))
        self.samples: dict[Key, float] = samples_of(self.families)

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def value(self, name: str, **labels: str) -> float:
        found = self.get(name, **labels)
        assert found is not None, f"no sample {name}{labels}"
        return found

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


async def scrape(session: aiohttp.ClientSession, base: str) -> Scrape:
    """GET /metrics: promtool finds nothing to say, the names and labels keep the rules."""
    async with session.get(f"{base}/metrics") as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        text = await response.text()
    await promtool_check(text)
    got = Scrape(text)
    for family in got.families:
        assert family.name.startswith(("harvest_gatherer_", "process_")), family.name
        for sample in family.samples:
            # Bounded labels: never a URL or an address.
            assert not any("http" in v or "127.0.0.1" in v for v in sample.labels.values())
    return got


async def scrape_until(
    session: aiohttp.ClientSession, base: str, holds: Callable[[Scrape], bool]
) -> Scrape:
    """Scrape every 100 ms until ``holds`` (bounded)."""
    async with asyncio.timeout(COMMAND_SECONDS):
        while True:
            got = await scrape(session, base)
            if holds(got):
                return got
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def serving(
    config: Path,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, aiohttp.ClientSession, str]]:
    """``harvest-gather serve`` on a free port, once it answers: its process, a session and
    its base URL."""
    base = f"http://127.0.0.1:{free_port()}"
    args = ("serve", "-c", str(config), "--listen", base.removeprefix("http://"))
    async with started(*args, cwd=config.parent) as process, aiohttp.ClientSession() as session:
        await answering(session, base)
        yield process, session, base


def deploy_metrics() -> set[str]:
    """The gatherer metrics the Grafana dashboard and the gatherer alert use."""
    deploy = REPO / "deploy"
    dashboard = json.loads((deploy / "grafana" / "harvest-gatherer.json").read_text())
    texts = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    texts += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    alerts = (deploy / "prometheus" / "alerts.yml").read_text()
    texts.append(alerts[alerts.index("- name: harvest-gatherer") :])
    return {name for text in texts for name in re.findall(r"\bharvest_gatherer_[a-z_]+", text)}


# -- the export service's /metrics, after real runs ---------------------------------------------


async def test_metrics_show_the_runs_numbers_and_keep_rising_across_runs(
    tmp_path: Path, site: HeldSite
) -> None:
    config = write_config(tmp_path, site.url("/"), headers="Gather-Interval: 3600")
    before = time.time()
    done = await harvest_gather("run", "--quiet", str(config), cwd=tmp_path)
    assert done.status == 0, done.err
    ended = time.time()
    async with serving(config) as (service, session, base):
        first = await scrape(session, base)
        assert {
            name: first.value(f"harvest_gatherer_{name}_total")
            for name in (
                "fetched",
                "summarized",
                "stored",
                "robots_denied",
                "deleted",
                "duplicates",
                "fresh",
            )
        } == {
            "fetched": 3,
            "summarized": 3,
            "stored": 3,
            "robots_denied": 1,
            "deleted": 0,
            "duplicates": 0,
            "fresh": 0,
        }
        assert first.value("harvest_gatherer_fetched_bytes_total") == sum(
            len(site.documents[path][1]) for path in STORED
        )
        assert first.value("harvest_gatherer_errors_total", stage="fetch", kind="status") == 1
        assert first.value("harvest_gatherer_summarize_seconds_count") == 3
        assert 0 < first.value("harvest_gatherer_summarize_seconds_sum") < ended - before
        assert first.value("harvest_gatherer_runs_total", outcome="complete") == 1
        assert first.value("harvest_gatherer_runs_total", outcome="stopped") == 0
        assert first.value("harvest_gatherer_records") == 3
        assert first.value("harvest_gatherer_failing_records") == 0
        finish = first.value("harvest_gatherer_last_gather_timestamp_seconds")
        assert before < finish < ended
        assert 0 < first.value("harvest_gatherer_last_gather_duration_seconds") < ended - before
        made = first.value("harvest_gatherer_database_created_timestamp_seconds")
        assert before - 1 < made < finish
        assert first.value("harvest_gatherer_gather_interval_seconds") == 3600
        assert first.value("harvest_gatherer_gathering") == 0
        assert first.value("harvest_gatherer_frontier_urls") == 0
        version = await asyncio.to_thread(software_version)
        assert first.value("harvest_gatherer_info", version=version) == 1
        assert first.get("process_start_time_seconds") is not None
        # Everything the dashboard and the alert use is there.
        used = deploy_metrics()
        assert len(used) >= 15
        assert used <= first.names(), sorted(used - first.names())

        # A second run while the service runs: nothing is due, so nothing is fetched again
        # but the 404 and the page robots.txt refuses; the totals go on from the first.
        done = await harvest_gather("run", "--quiet", str(config), cwd=tmp_path)
        assert done.status == 0, done.err
        second = await scrape(session, base)
        await stops_cleanly(service, signal.SIGTERM)
    counters = {key for key in first.samples if key[0].endswith(("_total", "_count", "_sum"))}
    assert all(second.samples[key] >= first.samples[key] for key in counters)
    assert second.value("harvest_gatherer_fetched_total") == 3
    assert second.value("harvest_gatherer_fresh_total") == 3
    assert second.value("harvest_gatherer_robots_denied_total") == 2
    assert second.value("harvest_gatherer_errors_total", stage="fetch", kind="status") == 2
    assert second.value("harvest_gatherer_runs_total", outcome="complete") == 2
    assert second.value("harvest_gatherer_last_gather_timestamp_seconds") > finish
    assert second.value("harvest_gatherer_database_created_timestamp_seconds") == made


async def test_a_run_in_progress_shows_its_frontier_and_a_stopped_one_is_no_gather(
    tmp_path: Path, site: HeldSite
) -> None:
    config = write_config(tmp_path, site.url("/start.html"))
    async with serving(config) as (service, session, base):
        idle = await scrape(session, base)
        assert idle.value("harvest_gatherer_gathering") == 0
        assert idle.get("harvest_gatherer_last_gather_timestamp_seconds") is None
        async with started("run", "--quiet", str(config), cwd=tmp_path) as run:
            async with asyncio.timeout(COMMAND_SECONDS):
                await site.arrived.wait()
            # The held page is fetched; the two other links wait behind it (one connection
            # per host), until the run's next report says so.
            during = await scrape_until(
                session, base, lambda s: s.value("harvest_gatherer_frontier_urls") > 0
            )
            assert during.value("harvest_gatherer_gathering") == 1
            assert during.value("harvest_gatherer_frontier_urls") == 2
            assert during.value("harvest_gatherer_fetches_in_progress") == 1
            assert during.value("harvest_gatherer_frontier_hosts") == 1
            assert during.value("harvest_gatherer_fetched_total") == 1  # /start.html
            run.send_signal(signal.SIGTERM)
            assert (await finished(run, COMMAND_SECONDS)).status == 128 + signal.SIGTERM
        stopped = await scrape(session, base)
        await stops_cleanly(service, signal.SIGTERM)
    assert stopped.value("harvest_gatherer_gathering") == 0
    assert stopped.value("harvest_gatherer_frontier_urls") == 0
    assert stopped.value("harvest_gatherer_runs_total", outcome="stopped") == 1
    assert stopped.value("harvest_gatherer_runs_total", outcome="complete") == 0
    assert stopped.value("harvest_gatherer_fetched_total") == 1
    # A stopped run is no gather: the alert still counts from the database's making.
    assert stopped.get("harvest_gatherer_last_gather_timestamp_seconds") is None


# -- what runs report to the database -----------------------------------------------------------


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[GathererDatabase]:
    async with await GathererDatabase.open(tmp_path / "gatherer.db") as database:
        yield database


async def until(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if await check():
                return
            await asyncio.sleep(0.01)


async def test_a_run_reports_as_it_goes_and_how_it_ended(db: GathererDatabase) -> None:
    stats = RunStats()
    async with reporting(db, stats, every=0.02):
        stats.fetched, stats.bytes, stats.queued, stats.active, stats.hosts = 2, 100, 5, 1, 1
        stats.fetch_errors["timeout"] += 1

        async def reported() -> bool:
            return (await db.gather_report()).totals.get(("fetched", "")) == 2

        await until(reported)
        report = await db.gather_report()
        assert report.latest is not None
        assert (report.latest.queued, report.latest.active, report.latest.hosts) == (5, 1, 1)
        assert report.latest.outcome is None
        assert report.last_complete is None
        assert report.totals[("fetch_errors", "timeout")] == 1
        stats.stored = 2
    report = await db.gather_report()
    assert report.latest == report.last_complete
    assert report.latest is not None
    assert report.latest.outcome == "complete"
    assert report.latest.ended is not None
    assert report.latest.ended >= report.latest.started
    assert report.totals[("stored", "")] == 2  # the last figures, reported at the end

    with pytest.raises(RuntimeError):
        async with reporting(db, RunStats()):
            raise RuntimeError("a run that fails")
    entered = asyncio.Event()

    async def stopped_run() -> None:
        async with reporting(db, RunStats(fetched=1)):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(stopped_run())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    totals = (await db.gather_report()).totals
    assert {kind: totals[("runs", kind)] for kind in ("complete", "failed", "stopped")} == {
        "complete": 1,
        "failed": 1,
        "stopped": 1,
    }
    assert totals[("fetched", "")] == 3  # the stopped run's fetch counts too
    report = await db.gather_report()
    assert report.latest is not None
    assert report.latest.outcome == "stopped"
    assert report.last_complete is not None
    assert report.last_complete.outcome == "complete"


async def test_totals_never_fall_when_old_runs_are_forgotten(db: GathererDatabase) -> None:
    # The first run is the only complete one; many failed runs follow it.
    runs = RUNS_KEPT + 5
    for n in range(runs):
        run = await db.start_run(1000.0 + n)
        outcome = "complete" if n == 0 else "failed"
        counts = {("fetched", ""): 2.0, ("fetch_errors", "dns"): 1.0, ("runs", outcome): 1.0}
        await db.report_run(run, RunReport(1000.5 + n, 0.5, counts, outcome=outcome))
    report = await db.gather_report()
    assert report.totals == {
        ("fetched", ""): 2.0 * runs,
        ("fetch_errors", "dns"): runs,
        ("runs", "complete"): 1,
        ("runs", "failed"): runs - 1,
    }
    # The last complete run is kept however old; the rest are the newest.
    assert report.last_complete is not None
    assert report.last_complete.started == 1000.0
    assert report.latest is not None
    assert report.latest.started == 1000.0 + runs - 1
    kept = await asyncio.to_thread(_rows, db.path, "SELECT count(*) FROM runs")
    assert kept == RUNS_KEPT + 1


def _rows(path: Path, query: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(query).fetchone()[0])
    finally:
        conn.close()


async def test_a_version_1_database_is_brought_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "gatherer.db"

    def make_version_1() -> None:
        write_version_1(path)
        conn = sqlite3.connect(path)
        conn.execute("UPDATE meta SET value = 5000000 WHERE key = 'clock'")
        conn.commit()
        conn.close()

    await asyncio.to_thread(make_version_1)
    before = time.time()
    async with await GathererDatabase.open(path) as db:
        report = await db.gather_report()
    assert report.database.last_update == 5.0  # what it held is kept
    assert before - 1 < report.created <= time.time()
    assert (report.totals, report.latest, report.last_complete) == ({}, None, None)
    assert await asyncio.to_thread(_rows, path, "PRAGMA user_version") == schema.VERSION


# -- the families made from a report ------------------------------------------------------------

NOW = 1_900_000_000.0
DATABASE = DatabaseStats(records=7, manual=1, tombstones=2, failing=1, last_update=NOW - 50)


def run(*, reported: float, outcome: str | None = None, queued: int = 4) -> Run:
    ended = None if outcome is None else reported
    return Run(NOW - 600, reported, ended, outcome, 600.0, queued, 2, 3)


async def shown(report: GatherReport) -> Scrape:
    text = await ServiceMetrics(interval=7200, version="9.9").exposition(report, NOW)
    await promtool_check(text.decode())
    return Scrape(text.decode())


@pytest.mark.parametrize(
    ("latest", "expected"),
    [
        (None, False),
        (run(reported=NOW - 10), True),
        (run(reported=NOW - SILENT_AFTER), True),
        (run(reported=NOW - SILENT_AFTER - 1), False),  # killed: not heard from
        (run(reported=NOW - 10, outcome="complete"), False),
        (run(reported=NOW - 10, outcome="stopped"), False),
    ],
    ids=["none", "reporting", "at-the-bound", "silent", "complete", "stopped"],
)
async def test_a_run_is_going_while_it_reports_and_has_not_ended(
    latest: Run | None, expected: bool
) -> None:
    assert going(latest, NOW) is expected
    got = await shown(GatherReport(DATABASE, NOW - 86400, {}, latest, None))
    assert got.value("harvest_gatherer_gathering") == expected
    assert got.value("harvest_gatherer_frontier_urls") == (4 if expected else 0)
    assert got.value("harvest_gatherer_fetches_in_progress") == (2 if expected else 0)
    assert got.value("harvest_gatherer_frontier_hosts") == (3 if expected else 0)


async def test_the_families_hold_the_totals_the_database_and_the_last_gather() -> None:
    totals = {
        ("fetched", ""): 10.0,
        ("summarized", ""): 6.0,
        ("summarize_seconds", ""): 1.5,
        ("summarize_errors", "timeout"): 2.0,
        ("summarize_errors", "crashed"): 1.0,
        ("fetch_errors", "dns"): 4.0,
        ("runs", "complete"): 3.0,
    }
    last = run(reported=NOW - 3600, outcome="complete")
    got = await shown(GatherReport(DATABASE, NOW - 86400, totals, last, last))
    assert got.value("harvest_gatherer_fetched_total") == 10
    assert got.value("harvest_gatherer_stored_total") == 0  # never counted: still there
    assert got.value("harvest_gatherer_errors_total", stage="fetch", kind="dns") == 4
    assert got.value("harvest_gatherer_errors_total", stage="summarize", kind="timeout") == 2
    assert got.value("harvest_gatherer_errors_total", stage="summarize", kind="crashed") == 1
    # Every document sent to the summarizers, whether it came back summarized or failed.
    assert got.value("harvest_gatherer_summarize_seconds_count") == 9
    assert got.value("harvest_gatherer_summarize_seconds_sum") == 1.5
    assert {o: got.value("harvest_gatherer_runs_total", outcome=o) for o in OUTCOMES} == {
        "complete": 3,
        "stopped": 0,
        "failed": 0,
    }
    assert got.value("harvest_gatherer_last_gather_timestamp_seconds") == NOW - 3600
    assert got.value("harvest_gatherer_last_gather_duration_seconds") == 600
    assert got.value("harvest_gatherer_gather_interval_seconds") == 7200
    assert got.value("harvest_gatherer_database_created_timestamp_seconds") == NOW - 86400
    assert {
        name: got.value(f"harvest_gatherer_{name}")
        for name in ("records", "manual_records", "tombstones", "failing_records")
    } == {"records": 7, "manual_records": 1, "tombstones": 2, "failing_records": 1}
    assert got.value("harvest_gatherer_last_update_timestamp_seconds") == NOW - 50
    assert got.value("harvest_gatherer_info", version="9.9") == 1
