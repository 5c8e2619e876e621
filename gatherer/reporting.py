"""A gathering run reports itself to the gatherer database: when it started, its counts and
frontier every ``REPORT_SECONDS`` while it runs, and how it ended. The export service, a
process of its own, shows what the runs reported in its /metrics (gatherer/metrics.py).

Each report holds the run's whole counts so far, replacing the one before: a report lost to
a failure or a stop changes no total, and none is counted twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from gatherer.database import GathererDatabase, RunReport
from gatherer.errors import DatabaseError
from gatherer.metrics import REPORT_SECONDS, RUNS, RunStats, counts
from harvest_common.tasks import running

log = logging.getLogger(__name__)


def run_report(stats: RunStats, *, at: float, seconds: float, outcome: str | None) -> RunReport:
    """What a run reports at ``at``, ``seconds`` after it started; with its ``outcome`` at
    its end (counted once, under ``runs``)."""
    figures = counts(stats)
    if outcome is not None:
        figures[RUNS, outcome] = 1.0
    return RunReport(at, seconds, figures, stats.queued, stats.active, stats.hosts, outcome)


@asynccontextmanager
async def reporting(
    db: GathererDatabase,
    stats: RunStats,
    *,
    every: float = REPORT_SECONDS,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> AsyncIterator[None]:
    """Report the run the block holds, fed into ``stats``: its start at once, its figures
    every ``every`` seconds, and its end as ``complete``, ``stopped`` (cancelled: a stop
    signal) or ``failed``."""
    started = monotonic()
    run = await db.start_run(clock())

    def report(outcome: str | None = None) -> RunReport:
        return run_report(stats, at=clock(), seconds=monotonic() - started, outcome=outcome)

    async def periodically() -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await db.report_run(run, report())
            except DatabaseError as error:  # the run goes on; the next report may pass
                log.warning("could not report the run's progress: %s", error)

    outcome = "failed"
    try:
        async with running(periodically(), "run reports"):
            yield
        outcome = "complete"
    except asyncio.CancelledError:
        outcome = "stopped"
        raise
    finally:
        await db.report_run(run, report(outcome))
