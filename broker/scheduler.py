"""Runs the collections' pulls on schedule: the small async driver around broker.schedule.

One task, owned by the ``async with`` block, sleeps until the next collection is due (or until
woken: a trigger, a pull ending, an admin change), starts every due pull as slots allow (one
pull per collection at a time, at most ``concurrency`` at once), and records each outcome in
the Schedule. After a successful pull ``on_applied`` is called (the broker brings its index up
to date there); failures are logged with the CollectError's kind and reason and retried after
the schedule's backoff. Time comes from a ``Clock`` so that tests can drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from broker.collector import Puller, PullResult
from broker.config import CollectionConfig
from broker.errors import CollectError
from broker.schedule import JITTER, Schedule

log = logging.getLogger(__name__)

CONCURRENCY = 4

OnApplied = Callable[[PullResult], Awaitable[None]]


class Clock(Protocol):
    """Where the scheduler reads the time and waits."""

    def now(self) -> float:
        """Epoch seconds."""

    async def wait(self, event: asyncio.Event, delay: float | None) -> None:
        """Return when ``event`` is set or ``delay`` seconds have passed (None: no limit);
        returning early is allowed (the scheduler checks the time again)."""


class SystemClock:
    """The wall clock, and the event loop's timers."""

    def now(self) -> float:
        return time.time()

    async def wait(self, event: asyncio.Event, delay: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await event.wait()


def default_jitter() -> float:
    return random.uniform(*JITTER)


@dataclass(frozen=True, slots=True)
class CollectionStatus:
    """What the scheduler knows of one collection (times in epoch seconds)."""

    name: str
    next_due: float | None  # None while a pull is running
    running: bool
    pulls: int  # finished pulls, successful or not
    failures: int  # failed pulls, in all
    consecutive_failures: int
    last_success: float | None
    last_error: CollectError | None  # the latest failure (kept after a later success)
    last_error_at: float | None
    last_result: PullResult | None


@dataclass(slots=True)
class _Stats:
    pulls: int = 0
    failures: int = 0
    last_success: float | None = None
    last_error: CollectError | None = None
    last_error_at: float | None = None
    last_result: PullResult | None = None


class Scheduler:
    """Pulls ``collections`` through ``collector`` on their intervals while entered."""

    def __init__(
        self,
        collector: Puller,
        collections: Iterable[CollectionConfig],
        on_applied: OnApplied,
        *,
        clock: Clock | None = None,
        jitter: Callable[[], float] = default_jitter,
        concurrency: int = CONCURRENCY,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self._collector = collector
        self._on_applied = on_applied
        self._clock: Clock = clock or SystemClock()
        self._jitter = jitter
        self._concurrency = concurrency
        self._collections: dict[str, CollectionConfig] = {}
        self._stats: dict[str, _Stats] = {}
        self._schedule = Schedule()
        # Running pulls: collection name -> pull number. A collection removed and added again
        # during a pull gets a new number, and the old pull's end no longer touches its state.
        self._running: dict[str, int] = {}
        self._numbers = itertools.count(1)
        self._full: set[str] = set()  # triggered with full=True: the next pull is a full one
        self._wake = asyncio.Event()
        # Index updates one at a time: each brings the index up to the registry's state.
        self._applying = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        for collection in collections:
            self.add(collection)

    def __repr__(self) -> str:
        return f"Scheduler({len(self._collections)} collections, {len(self._running)} running)"

    async def __aenter__(self) -> Scheduler:
        if self._task is not None:
            raise RuntimeError("the scheduler is already running")
        self._task = asyncio.create_task(self._run(), name="broker scheduler")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()  # pulls in progress are cancelled too: the registry keeps none of them
        await asyncio.wait([task])
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error

    def add(self, collection: CollectionConfig) -> None:
        """Schedule a new collection (due at once), or take a changed configuration of one
        already scheduled (see Schedule.add for its due time)."""
        name = collection.name
        self._collections[name] = collection
        self._stats.setdefault(name, _Stats())
        self._schedule.add(name, collection.interval, self._clock.now())
        self._wake.set()

    def remove(self, name: str) -> None:
        """Stop pulling ``name`` (a pull in progress finishes); KeyError if unknown."""
        del self._collections[name]
        self._schedule.remove(name)
        del self._stats[name]
        self._full.discard(name)
        self._wake.set()

    def trigger(self, name: str, *, full: bool = False) -> None:
        """Pull ``name`` now (``full``: everything, not just the changes); KeyError if
        unknown. During a pull of it, it is pulled again as soon as that one ends."""
        if name not in self._collections:
            raise KeyError(name)
        if full:
            self._full.add(name)
        self._schedule.triggered(name, self._clock.now())
        self._wake.set()

    def status(self) -> dict[str, CollectionStatus]:
        """Every scheduled collection's state, by name."""
        out = {}
        for name in sorted(self._collections):
            stats = self._stats[name]
            running = name in self._running
            out[name] = CollectionStatus(
                name=name,
                next_due=None if running else self._schedule.due_at(name),
                running=running,
                pulls=stats.pulls,
                failures=stats.failures,
                consecutive_failures=self._schedule.failures(name),
                last_success=stats.last_success,
                last_error=stats.last_error,
                last_error_at=stats.last_error_at,
                last_result=stats.last_result,
            )
        return out

    async def _run(self) -> None:
        try:
            async with asyncio.TaskGroup() as pulls:
                while True:
                    self._wake.clear()
                    now = self._clock.now()
                    while len(self._running) < self._concurrency:
                        due = self._schedule.next_due()
                        if due is None or due[1] > now:
                            break
                        name = due[0]
                        self._schedule.started(name)
                        number = self._running[name] = next(self._numbers)
                        pulls.create_task(self._pull(name, number), name=f"pull {name}")
                    due = self._schedule.next_due()
                    if due is None or len(self._running) >= self._concurrency:
                        delay = None  # until a pull ends or something changes
                    else:
                        delay = max(0.0, due[1] - now)
                    await self._clock.wait(self._wake, delay)
        except Exception:
            log.exception("the scheduler stopped")
            raise

    def _current(self, name: str, number: int) -> bool:
        """Whether pull ``number`` is still the one that counts for ``name``."""
        return self._running.get(name) == number

    async def _pull(self, name: str, number: int) -> None:
        try:
            collection = self._collections[name]
            full = name in self._full
            self._full.discard(name)
            try:
                result = await self._collector.pull(collection, now=self._clock.now(), full=full)
            except CollectError as error:
                self._failed(name, number, error)
            except Exception as error:
                # A bug, not a failure of the source: logged with its traceback, and counted
                # as a failure so that one collection cannot stop the others.
                log.exception("%s: pull crashed", name)
                reason = f"{type(error).__name__}: {error}"
                self._failed(name, number, CollectError(name, "internal", reason))
            else:
                await self._succeeded(name, number, result)
        finally:
            if self._current(name, number):
                del self._running[name]
            self._wake.set()

    async def _succeeded(self, name: str, number: int, result: PullResult) -> None:
        log.info("%s: %r", name, result)
        # Called even for a collection removed meanwhile: what it applied is in the registry.
        async with self._applying:
            try:
                await self._on_applied(result)
            except Exception:
                # The registry holds what was applied; the index catches up on the next call.
                log.exception("%s: on_applied failed after a pull", name)
        # Counted once applied and no longer running: a pull counted while still running
        # would be counted twice by whoever waits for "the running one, then one more".
        if self._current(name, number) and name in self._collections:
            stats = self._stats[name]
            stats.pulls += 1
            stats.last_success = self._clock.now()
            stats.last_result = result
            self._schedule.succeeded(name, self._clock.now())

    def _failed(self, name: str, number: int, error: CollectError) -> None:
        if not (self._current(name, number) and name in self._collections):
            log.warning("%s: pull failed (%s): %s", name, error.kind, error.reason)
            return
        stats = self._stats[name]
        now = self._clock.now()
        stats.pulls += 1
        stats.failures += 1
        stats.last_error = error
        stats.last_error_at = now
        self._schedule.failed(name, now, self._jitter())
        log.warning(
            "%s: pull failed (%s): %s; next try in %.0f s",
            name,
            error.kind,
            error.reason,
            self._schedule.due_at(name) - now,
        )
