"""Summarizer supervision: worker processes that run summarizers, replaced when they fail.

The lesson of the Combine crawler: parsers die on malformed input, again and again. So every
document is summarized in a worker process (gatherer.essence.worker) under a time limit and a
memory limit. A worker that hangs is killed; one that crashes or runs out of memory is
replaced; the document fails with a SummarizeError whose ``reason`` is one of:

- ``timeout after 10.0 s``: the worker was killed (SIGKILL);
- ``crashed: signal 11``, ``crashed: exit 3``: the worker died; ``crashed: bad reply`` and
  ``crashed: reply too large``: its output was not a frame, so it was killed; ``crashed: its
  workers ended before starting it``: each worker it was sent to (four) failed on the job
  ahead of it;
- ``memory: limit 512 MB``: the summarizer hit the memory limit; the worker exits after saying so;
- ``error: ValueError``: the summarizer raised; the worker goes on. A SummarizeError raised by
  the summarizer keeps its own reason;
- ``pool: workers cannot start`` (see below), ``pool: closed``.

A worker holds two jobs at once: the one it runs and the next, already in its pipe, so that it
never waits for the pool's process between jobs. Its replies are read in turn; each job's time
limit runs from the moment it is the worker's (the reply before it read). When a worker fails,
its job fails as above and the job waiting behind it, which it never started, goes to a worker
again (first in line).

A replacement is started when a job next takes the slot, so a failure costs no idle process
and the next job never meets a dead worker. Workers are also replaced after
``max_jobs_per_worker`` jobs, which bounds leaks.

Starting can fail (the target does not import; no processes or memory left). Consecutive failed
starts are retried with doubling delays; after ``_START_ATTEMPTS`` of them, starts are
suspended for ``_RETRY_AFTER`` seconds: a slot that needs a worker is set aside, jobs go on
with the workers still running, and when none is left every waiting and new job fails at once
with ``pool: workers cannot start`` rather than hang. After the pause, one start is tried per
slot again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

from gatherer.errors import SummarizeError
from gatherer.essence.document import Document, Summary
from gatherer.essence.options import EssenceOptions
from gatherer.essence.worker import HEADER_BYTES, READY
from harvest_common.tasks import TaskSet

log = logging.getLogger(__name__)

_Kind = Literal["timeout", "crash", "memory", "error"]  # of failed jobs, counted in PoolStats

CANNOT_START = "pool: workers cannot start"
CLOSED = "pool: closed"
MAX_REPLY_BYTES = 256 * 1024 * 1024  # a length beyond this means the stream is not frames
LARGE_DOCUMENT_BYTES = 1024 * 1024  # documents this large are summarized one at a time

_START_TIMEOUT = 30.0  # seconds a worker has to import its target and say it is ready
_STOP_GRACE = 1.0  # seconds a worker has to exit once its input ends, before SIGKILL
_START_ATTEMPTS = 5  # consecutive failed starts, over the pool, before starts are suspended
_BACKOFF = 0.05  # seconds before the second attempt; doubled before each further one
_RETRY_AFTER = 30.0  # seconds starts stay suspended
_DEPTH = 2  # jobs a worker holds at once: the one it runs and the next, waiting in its pipe
_SENDS = 4  # times a job goes to a worker that ends before starting it, before it fails


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A snapshot of the pool. ``jobs`` counts jobs sent to a worker, whatever their outcome;
    ``timeouts``, ``crashes``, ``memory`` and ``errors`` count failed ones by kind;
    ``restarts`` counts workers started to replace one (after a failure or recycling)."""

    workers: int  # worker processes ready for a job or running one
    busy: int  # jobs sent to a worker and not answered yet (running, or next in its pipe)
    jobs: int
    timeouts: int
    crashes: int
    memory: int
    errors: int
    restarts: int
    failed_starts: int


@dataclass(slots=True, eq=False)
class _Job:
    """A job sent to a worker; its reader sets ``answer`` (a Summary, a SummarizeError, or
    _NotStarted)."""

    url: str
    answer: asyncio.Future[Summary]


class _NotStarted(Exception):
    """The worker ended before it started the job: the job may go to another."""


@dataclass(slots=True, eq=False)
class _Worker:
    process: asyncio.subprocess.Process
    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    ready: bool = False
    retired: bool = False  # takes no more jobs: stopped and replaced when its slot is next used
    jobs: int = 0
    pending: deque[_Job] = field(default_factory=deque)  # sent, not answered, in order
    reading: bool = False  # a reader answers the pending jobs

    @property
    def usable(self) -> bool:
        return self.ready and not self.retired and self.process.returncode is None

    @property
    def has_room(self) -> bool:
        return self.usable and len(self.pending) < _DEPTH

    def kill(self) -> None:
        self.retired = True
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


@dataclass(slots=True, eq=False)
class _Slot:
    """One place for a worker. Whoever holds the slot owns its worker: only they start, stop
    or replace it. After sending a job the holder passes the slot on if the worker has room for
    another, else lends it to the worker's reader, which passes it on once the worker has room
    or has answered all its jobs (so a worker is never stopped with jobs in hand)."""

    worker: _Worker | None = None
    starts: int = 0
    lent: bool = False


class _BadFrame(Exception):
    """A worker wrote something that is not a reply frame."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def default_workers() -> int:
    """One worker per CPU this process may run on: summarizing a page costs several times
    what the crawl's own process spends on it (fetching, the database), so the workers,
    not the crawl, are what keeps the cores busy."""
    return len(os.sched_getaffinity(0))


class SummarizerPool:
    """``workers`` processes (0: ``default_workers()``) running ``target``
    ("module:function", called as ``target(document, options)``), each job limited to
    ``timeout`` seconds and each worker to ``memory_mb`` MB more than its size at start. Use
    as ``async with``: entering starts the workers, leaving stops them all."""

    def __init__(
        self,
        *,
        workers: int,
        timeout: float,
        memory_mb: int,
        target: str = "gatherer.essence.pipeline:summarize",
        max_jobs_per_worker: int = 1000,
    ) -> None:
        if workers < 0 or timeout <= 0 or memory_mb <= 0 or max_jobs_per_worker < 1:
            raise ValueError("workers >= 0, timeout > 0, memory_mb > 0, max_jobs_per_worker >= 1")
        self._timeout = float(timeout)
        self._memory_mb = memory_mb
        self._target = target
        self._max_jobs = max_jobs_per_worker
        self._slots = [_Slot() for _ in range(workers or default_workers())]
        self._idle: deque[_Slot] = deque()
        self._waiters: deque[asyncio.Future[_Slot | None]] = deque()
        self._parked: list[_Slot] = []  # slots that need a worker while starts are suspended
        self._large = asyncio.Semaphore(1)  # held while a large document is summarized
        self._closed = True  # until entered, and again once left
        self._failed_starts = 0  # consecutive, over the pool
        self._retry_at = 0.0  # monotonic time until which starts are suspended
        self._readers = TaskSet()
        self._jobs = 0
        self._restarts = 0
        self._failed_starts_total = 0
        self._failures: Counter[_Kind] = Counter()

    @property
    def size(self) -> int:
        return len(self._slots)

    async def __aenter__(self) -> SummarizerPool:
        self._closed = False
        try:
            async with asyncio.TaskGroup() as group:
                for slot in self._slots:
                    group.create_task(self._open(slot))
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._close()

    def stats(self) -> PoolStats:
        return PoolStats(
            workers=sum(1 for s in self._slots if s.worker is not None and s.worker.usable),
            busy=sum(len(s.worker.pending) for s in self._slots if s.worker is not None),
            jobs=self._jobs,
            timeouts=self._failures["timeout"],
            crashes=self._failures["crash"],
            memory=self._failures["memory"],
            errors=self._failures["error"],
            restarts=self._restarts,
            failed_starts=self._failed_starts_total,
        )

    async def run(self, document: Document, options: EssenceOptions) -> Summary:
        """Summarize ``document`` in a worker, waiting (first come, first served) for a free
        one. Raises SummarizeError with one of the reasons in the module docstring.

        Documents of ``LARGE_DOCUMENT_BYTES`` or more take turns: summarizing takes memory in
        proportion to the document (an HTML page's parse, tens of times its size), and two
        at once would add up to the pool's peak."""
        if len(document.content) < LARGE_DOCUMENT_BYTES:
            return await self._run(document, options)
        async with self._large:
            return await self._run(document, options)

    async def _run(self, document: Document, options: EssenceOptions) -> Summary:
        url = document.url
        for send in range(_SENDS):
            slot, worker = await self._checkout(url, first=send > 0)
            # Made once a worker is at hand: a job waiting for one holds only its document.
            frame = pickle.dumps((document, options), pickle.HIGHEST_PROTOCOL)
            job = self._send(slot, worker, url, frame)
            del frame  # (the worker's pipe holds it now)
            try:
                try:
                    with contextlib.suppress(ConnectionError):  # (its reader finds it gone)
                        await worker.stdin.drain()
                finally:
                    self._pass_on(slot, worker)
                return await job.answer
            except _NotStarted:
                continue
            except asyncio.CancelledError:
                job.answer.cancel()  # its reply, if it comes, answers no one
                if worker.pending and worker.pending[0] is job:
                    worker.kill()  # it is running: stop it
                raise
        raise self._failure("crash", url, "crashed: its workers ended before starting it")

    # -- handing out slots -------------------------------------------------------------------------

    async def _checkout(self, url: str, *, first: bool = False) -> tuple[_Slot, _Worker]:
        """A slot and its worker, ready for a job; ``first``: ahead of the jobs waiting."""
        while True:
            self._unpark()
            if self._closed:
                raise SummarizeError(url, CLOSED)
            if len(self._parked) == len(self._slots):
                raise SummarizeError(url, CANNOT_START)
            slot = await self._acquire(first)
            if slot is None:
                continue  # woken to look again: the pool closed or lost its last worker
            try:
                worker = await self._ready(slot)
            except BaseException:
                self._release(slot)
                raise
            if worker is not None:
                return slot, worker
            if self._closed:
                self._release(slot)
            else:
                self._park(slot)

    async def _acquire(self, first: bool) -> _Slot | None:
        if self._idle and (first or not self._waiters):
            # The slot whose worker has the fewest jobs: one that needs a new worker can wait.
            slot = min(self._idle, key=_load)
            self._idle.remove(slot)
            return slot
        waiter: asyncio.Future[_Slot | None] = asyncio.get_running_loop().create_future()
        if first:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                if (handed := waiter.result()) is not None:
                    self._release(handed)  # handed over just as we were cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def _release(self, slot: _Slot) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(slot)
                return
        self._idle.append(slot)

    def _park(self, slot: _Slot) -> None:
        self._parked.append(slot)
        if len(self._parked) == len(self._slots):
            self._wake_all()

    def _unpark(self) -> None:
        if self._parked and time.monotonic() >= self._retry_at:
            parked, self._parked = self._parked, []
            for slot in parked:
                self._release(slot)

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- jobs and replies --------------------------------------------------------------------------

    def _send(self, slot: _Slot, worker: _Worker, url: str, frame: bytes) -> _Job:
        job = _Job(url, asyncio.get_running_loop().create_future())
        worker.pending.append(job)
        worker.jobs += 1
        self._jobs += 1
        if worker.jobs >= self._max_jobs:
            worker.retired = True  # replaced once it has answered its jobs
        # One write: a separate header would cost the worker a wakeup of its own.
        worker.stdin.writelines((len(frame).to_bytes(HEADER_BYTES, "big"), frame))
        if not worker.reading:
            worker.reading = True
            self._readers.spawn(self._read(slot, worker), f"summarizer replies {url}")
        return job

    def _pass_on(self, slot: _Slot, worker: _Worker) -> None:
        if worker.has_room:
            self._release(slot)
        else:
            slot.lent = True

    async def _read(self, slot: _Slot, worker: _Worker) -> None:
        """Answer the worker's jobs in turn, until none is left or the worker is done for;
        the jobs it never started then fail with _NotStarted."""
        try:
            while worker.pending:
                done_for = await self._answer(worker, worker.pending[0])
                worker.pending.popleft()
                if done_for:
                    break
                if slot.lent and worker.has_room:
                    slot.lent = False
                    self._release(slot)
        finally:
            for job in worker.pending:
                if not job.answer.done():
                    job.answer.set_exception(_NotStarted())
            worker.pending.clear()
            worker.reading = False
            if slot.lent:
                slot.lent = False
                self._release(slot)

    async def _answer(self, worker: _Worker, job: _Job) -> bool:
        """Read ``job``'s reply and answer it; True if the worker is done for (killed, dead,
        or exiting). A worker that fails to give a reply is killed."""
        try:
            async with asyncio.timeout(self._timeout):
                reply = await _receive(worker.stdout)
        except TimeoutError:
            worker.kill()
            self._fail(job, "timeout", f"timeout after {self._timeout} s")
            return True
        except (asyncio.IncompleteReadError, ConnectionError):
            status = await _stop(worker)
            if self._closed:
                if not job.answer.done():
                    job.answer.set_exception(SummarizeError(job.url, CLOSED))
            else:
                self._fail(job, "crash", _crash_reason(status))
            return True
        except _BadFrame as bad:
            worker.kill()
            self._fail(job, "crash", f"crashed: {bad.reason}")
            return True
        match reply:
            case ("ok", Summary() as summary):
                if not job.answer.done():
                    job.answer.set_result(summary)
            case ("error", "SummarizeError", str() as reason):
                self._fail(job, "error", reason)
            case ("error", str() as name, str() as message):
                log.debug("%s: summarizer raised %s: %s", job.url, name, message)
                self._fail(job, "error", f"error: {name}")
            case ("memory",):
                worker.retired = True  # it exits by itself
                self._fail(job, "memory", f"memory: limit {self._memory_mb} MB")
                return True
            case _:
                worker.kill()
                self._fail(job, "crash", "crashed: bad reply")
                return True
        return False

    def _fail(self, job: _Job, kind: _Kind, reason: str) -> None:
        if not job.answer.done():  # (a job given up by its caller counts no failure)
            job.answer.set_exception(self._failure(kind, job.url, reason))

    def _failure(self, kind: _Kind, url: str, reason: str) -> SummarizeError:
        self._failures[kind] += 1
        if kind != "error":
            log.warning("%s: summarizer worker replaced: %s", url, reason)
        return SummarizeError(url, reason)

    # -- starting and stopping workers -------------------------------------------------------------

    async def _open(self, slot: _Slot) -> None:
        if await self._ready(slot) is None:
            self._park(slot)
        else:
            self._release(slot)

    async def _ready(self, slot: _Slot) -> _Worker | None:
        """The slot's worker, started anew if it is gone or retired; None if the pool is
        closed or starts are suspended."""
        if slot.worker is not None and slot.worker.usable:
            return slot.worker
        while not self._closed:
            if 0 < self._failed_starts < _START_ATTEMPTS:
                await asyncio.sleep(_BACKOFF * 2 ** (self._failed_starts - 1))
            if self._failed_starts >= _START_ATTEMPTS and time.monotonic() < self._retry_at:
                return None
            if (worker := await self._start(slot)) is not None:
                return worker
        return None

    async def _start(self, slot: _Slot) -> _Worker | None:
        if slot.worker is not None:
            await _stop(slot.worker)
            slot.worker = None
        if self._closed:
            return None
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gatherer.essence.worker",
                self._target,
                str(self._memory_mb),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=_child_environment(),
            )
        except OSError as error:
            self._start_failed(f"cannot run: {error}")
            return None
        assert process.stdin is not None
        assert process.stdout is not None
        worker = _Worker(process, process.stdin, process.stdout)
        slot.worker = worker  # owned from here: the pool's close or the next start stops it
        if self._closed:
            await _stop(worker)
            return None
        try:
            async with asyncio.timeout(_START_TIMEOUT):
                hello = await _receive(worker.stdout)
            problem = "" if hello == READY else "bad greeting"
        except _BadFrame as bad:
            problem = bad.reason
        except asyncio.IncompleteReadError:
            problem = "exited"
        except TimeoutError:
            problem = f"not ready in {_START_TIMEOUT:.0f} s"
        if problem:
            worker.kill()
            status = await _stop(worker)
            slot.worker = None
            if not self._closed:
                self._start_failed(f"{problem} (status {status})")
            return None
        worker.ready = True
        self._failed_starts = 0
        self._retry_at = 0.0
        if slot.starts:
            self._restarts += 1
        slot.starts += 1
        return worker

    def _start_failed(self, why: str) -> None:
        self._failed_starts += 1
        self._failed_starts_total += 1
        log.warning("summarizer worker for %s did not start: %s", self._target, why)
        if self._failed_starts >= _START_ATTEMPTS:
            self._retry_at = time.monotonic() + _RETRY_AFTER
            log.error(
                "summarizer workers for %s cannot start; trying again in %.0f s",
                self._target,
                _RETRY_AFTER,
            )

    async def _close(self) -> None:
        self._closed = True
        self._wake_all()
        async with asyncio.TaskGroup() as group:
            for slot in self._slots:
                if slot.worker is not None:
                    group.create_task(_stop(slot.worker))
        # The workers are gone: their readers end at once, failing what was left.
        await self._readers.drain(_STOP_GRACE)


async def _receive(reader: asyncio.StreamReader) -> object:
    """One frame's unpickled value; IncompleteReadError at end of stream."""
    size = int.from_bytes(await reader.readexactly(HEADER_BYTES), "big")
    if size > MAX_REPLY_BYTES:
        raise _BadFrame("reply too large")
    body = await reader.readexactly(size)
    try:
        return pickle.loads(body)
    except Exception as error:  # unpickling garbage can raise almost anything
        raise _BadFrame("bad reply") from error


async def _stop(worker: _Worker) -> int:
    """End the worker (input closed, then SIGKILL after a grace) and return its exit status."""
    worker.retired = True
    worker.stdin.close()
    try:
        async with asyncio.timeout(_STOP_GRACE):
            return await worker.process.wait()
    except TimeoutError:
        worker.kill()
        return await worker.process.wait()


def _load(slot: _Slot) -> int:
    """Jobs the slot's worker holds; a slot that needs a new worker counts as full."""
    worker = slot.worker
    return len(worker.pending) if worker is not None and worker.usable else _DEPTH


def _crash_reason(status: int) -> str:
    return f"crashed: signal {-status}" if status < 0 else f"crashed: exit {status}"


def _child_environment() -> dict[str, str]:
    # The worker imports its target from our sys.path, whatever the way we were started; the
    # child shares our working directory, so relative entries mean the same there.
    path = os.pathsep.join(entry or os.curdir for entry in sys.path)
    return {**os.environ, "PYTHONPATH": path}
