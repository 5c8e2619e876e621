"""Keeps the broker's content summary (broker/federation/summary.py) current: made from the
registry when ``keeping`` starts, and again ``summary_delay`` seconds after the collections
change, the changes meanwhile taken in by the same summary (so at most one summary is made
per delay, however many pulls land). A summary that differs from the last is published:
the keeper is the registration's ``LiveAttributes`` (harvest_common.hsr_client), which
renews at once with it.

The objects are read from the registry a page at a time (its reader serves searches in
between) and counted on a worker thread; a broker holding more than ``summary_sample``
objects reads a uniform sample of that many. The HSR's own registrations are not content.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.errors import BrokerError
from broker.federation.summary import EMPTY, ContentSummary, Counts
from broker.index.schema import Analyzer
from broker.registry import Registry
from broker.sync import attributes_text
from harvest_common.soif import Record
from harvest_common.tasks import running

log = logging.getLogger(__name__)

PAGE = 500  # objects read from the registry at a time


class Changes(Protocol):
    """The signal that the registry changed (broker.services.ChangeSignal)."""

    @property
    def closed(self) -> bool: ...

    def current(self) -> asyncio.Event: ...


@dataclass(frozen=True, slots=True)
class SummaryStats:
    """The summary last made: its objects, how many were read, its words, when it was made
    (epoch seconds) and in how many seconds; and the summaries made and failed."""

    documents: int
    sampled: int
    words: int
    made: float | None
    seconds: float
    refreshes: int
    failures: int


def _count(counts: Counts, page: Sequence[tuple[str, Record]]) -> None:
    for _, record in page:
        counts.add(attributes_text(record))


class SummaryKeeper:
    """The broker's content summary, kept current while ``keeping`` runs."""

    def __init__(
        self,
        registry: Registry,
        changes: Changes,
        *,
        delay: float,
        sample: int,
        excluded: str,
    ) -> None:
        self._registry = registry
        self._changes = changes
        self._delay = delay
        self._sample = sample
        self._excluded = excluded
        self.summary = EMPTY
        self.version = 0
        self._published = asyncio.Event()
        self._made: float | None = None
        self._seen = (0, 0)  # (objects, last change) the summary was made from
        self._seconds = 0.0
        self._refreshes = 0
        self._failures = 0

    def __repr__(self) -> str:
        return f"SummaryKeeper({self.summary!r}, version {self.version})"

    # -- LiveAttributes ---------------------------------------------------------------------

    def current(self) -> tuple[int, Sequence[tuple[str, str]]]:
        return self.version, self.summary.attributes()

    async def changed(self, version: int) -> None:
        while self.version <= version:
            await self._published.wait()

    # ---------------------------------------------------------------------------------------

    def stats(self) -> SummaryStats:
        return SummaryStats(
            documents=self.summary.documents,
            sampled=self.summary.sampled,
            words=sum(len(t.terms) for t in self.summary.lists),
            made=self._made,
            seconds=self._seconds,
            refreshes=self._refreshes,
            failures=self._failures,
        )

    async def refresh(self) -> ContentSummary:
        """Make the summary from the registry now, and publish it if it changed; unless no
        object outside the excluded collection changed since the last one was made (an HSR
        that registers itself is told of every registration it receives)."""
        registry = self._registry
        documents, seq = await registry.outside(self._excluded)
        if self._made is not None and (documents, seq) == self._seen:
            return self.summary
        started = time.perf_counter()
        share = min(1.0, self._sample / documents) if documents else 1.0
        counts = Counts(Analyzer().tokens)
        after = ""
        while True:
            page = await registry.sample(share, after=after, limit=PAGE, excluding=self._excluded)
            if not page:
                break
            await asyncio.to_thread(_count, counts, page)
            after = page[-1][0]
        summary = await asyncio.to_thread(counts.summary, documents)
        self._seen = (documents, seq)
        self._made = time.time()
        self._seconds = time.perf_counter() - started
        self._refreshes += 1
        if summary != self.summary:
            self.summary = summary
            self.version += 1
            published, self._published = self._published, asyncio.Event()
            published.set()
        return summary

    @contextlib.asynccontextmanager
    async def keeping(self) -> AsyncIterator[None]:
        """Make the summary now, then again after each change (see the module) while the
        block runs."""
        changed = self._changes.current()
        await self._refreshed()

        async def loop(changed: asyncio.Event) -> None:
            while True:
                await changed.wait()
                if self._changes.closed:
                    return
                await asyncio.sleep(self._delay)
                changed = self._changes.current()  # before reading: a later change is seen
                await self._refreshed()

        async with running(loop(changed), "content summary"):
            yield

    async def _refreshed(self) -> None:
        try:
            summary = await self.refresh()
        except BrokerError as error:
            # The last summary stands until the next change tries again.
            self._failures += 1
            log.error("the content summary could not be made: %s", error)
            return
        log.info("content summary: %r in %.2f s", summary, self._seconds)
