"""The summarizer pool with real worker processes: round trips, every kind of failure, worker
replacement and recycling, fairness, start failures, and a clean stop."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gatherer.errors import SummarizeError
from gatherer.essence import pool as pool_module
from gatherer.essence.document import Document, Summary
from gatherer.essence.options import EssenceOptions
from gatherer.essence.pool import CANNOT_START, CLOSED, SummarizerPool
from tests.gatherer.pool_targets import REFUSE_IMPORT

ACT = "tests.gatherer.pool_targets:act"
OPTIONS = EssenceOptions()

MakePool = Callable[..., AbstractAsyncContextManager[SummarizerPool]]


@pytest.fixture
def make_pool() -> MakePool:
    @asynccontextmanager
    async def make(**overrides: Any) -> AsyncIterator[SummarizerPool]:
        settings: dict[str, Any] = {"workers": 1, "timeout": 10.0, "memory_mb": 256, "target": ACT}
        settings.update(overrides)
        async with SummarizerPool(**settings) as pool:
            yield pool

    return make


def doc(action: str = "echo", content: bytes = b"", url: str = "") -> Document:
    return Document(url or f"http://example.org/{action}", content, name=action)


def attribute(summary: Summary, name: str) -> bytes:
    return dict(summary.attributes)[name]


def pid_of(summary: Summary) -> int:
    return int(attribute(summary, "Pid"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def children() -> set[int]:
    """PIDs of this process's children, zombies included."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except OSError:
                continue  # gone meanwhile
            if int(fields[1]) == os.getpid():
                found.add(int(name))
    return found


async def failure(pool: SummarizerPool, document: Document) -> SummarizeError:
    with pytest.raises(SummarizeError) as caught:
        await pool.run(document, OPTIONS)
    assert caught.value.url == document.url
    return caught.value


async def both_pids(pool: SummarizerPool) -> set[int]:
    """The PIDs of a two-worker pool: two jobs long enough to overlap."""
    summaries = await asyncio.gather(*(pool.run(doc("sleep", b"0.1"), OPTIONS) for _ in range(2)))
    pids = {pid_of(s) for s in summaries}
    assert len(pids) == 2
    return pids


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(200):  # 10 s at most
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached in 10 s")


async def test_round_trip_of_a_real_document(make_pool: MakePool) -> None:
    document = Document(
        "http://example.org/dir/page.html",
        b"<html><title>Harvest</title></html>",
        content_type="text/html",
        charset="utf-8",
        name="page.html",
    )
    async with make_pool(workers=1, target="tests.gatherer.pool_targets:echo") as pool:
        summary = await pool.run(document, EssenceOptions(abstract_bytes=77))
        stats = pool.stats()
    assert summary.type == "text/html"
    assert attribute(summary, "URL") == b"http://example.org/dir/page.html"
    assert attribute(summary, "Content") == document.content
    assert attribute(summary, "Abstract-Bytes") == b"77"
    assert summary.links == ("http://example.org/dir/page.html#next",)
    assert pid_of(summary) != os.getpid()
    assert (stats.workers, stats.busy, stats.jobs, stats.restarts) == (1, 0, 1, 0)
    assert (stats.timeouts, stats.crashes, stats.memory, stats.errors) == (0, 0, 0, 0)


async def test_summarizer_errors_leave_the_worker_serving(make_pool: MakePool) -> None:
    async with make_pool() as pool:
        first = pid_of(await pool.run(doc(), OPTIONS))
        assert (await failure(pool, doc("fail"))).reason == "error: ValueError"
        refused = await failure(pool, doc("refuse"))
        assert refused.reason == "unsupported: no summarizer for it"
        assert (await failure(pool, doc("wrong-type"))).reason == "error: TypeError"
        assert pid_of(await pool.run(doc(), OPTIONS)) == first
        stats = pool.stats()
    assert (stats.errors, stats.jobs, stats.restarts, stats.crashes) == (3, 5, 0, 0)


async def test_a_hung_summarizer_is_killed_after_the_timeout(make_pool: MakePool) -> None:
    async with make_pool(timeout=0.5) as pool:
        before = pid_of(await pool.run(doc(), OPTIONS))
        started = time.monotonic()
        error = await failure(pool, doc("hang"))
        elapsed = time.monotonic() - started
        after = pid_of(await pool.run(doc(), OPTIONS))
        stats = pool.stats()
    assert error.reason == "timeout after 0.5 s"
    assert 0.45 <= elapsed < 3.0
    assert after != before
    assert not alive(before)
    assert (stats.timeouts, stats.restarts, stats.jobs) == (1, 1, 3)


@pytest.mark.parametrize(
    ("action", "reason"), [("exit", "crashed: exit 3"), ("segfault", "crashed: signal 11")]
)
async def test_a_crashed_worker_is_replaced(make_pool: MakePool, action: str, reason: str) -> None:
    async with make_pool() as pool:
        before = pid_of(await pool.run(doc(), OPTIONS))
        assert (await failure(pool, doc(action))).reason == reason
        after = pid_of(await pool.run(doc(), OPTIONS))
        stats = pool.stats()
    assert after != before
    assert not alive(before)
    assert (stats.crashes, stats.restarts) == (1, 1)


@pytest.mark.parametrize(
    ("action", "reason"),
    [("huge-frame", "crashed: reply too large"), ("garbage-frame", "crashed: bad reply")],
)
async def test_a_worker_that_garbles_its_reply_is_killed(
    make_pool: MakePool, action: str, reason: str
) -> None:
    async with make_pool() as pool:
        before = pid_of(await pool.run(doc(), OPTIONS))
        assert (await failure(pool, doc(action))).reason == reason
        after = pid_of(await pool.run(doc(), OPTIONS))
    assert after != before
    assert not alive(before)


async def test_running_out_of_memory_is_reported_and_the_worker_replaced(
    make_pool: MakePool,
) -> None:
    async with make_pool(memory_mb=200) as pool:
        before = pid_of(await pool.run(doc(), OPTIONS))
        started = time.monotonic()
        error = await failure(pool, doc("hog"))
        elapsed = time.monotonic() - started
        after = pid_of(await pool.run(doc(), OPTIONS))
        stats = pool.stats()
    assert error.reason == "memory: limit 200 MB"
    assert elapsed < 5.0  # it stopped at the limit instead of swapping its way to 2 GB
    assert after != before
    assert not alive(before)
    assert (stats.memory, stats.restarts) == (1, 1)


async def test_printing_does_not_corrupt_the_replies(
    make_pool: MakePool, capfd: pytest.CaptureFixture[str]
) -> None:
    async with make_pool() as pool:
        noisy = await pool.run(doc("noisy", b"payload"), OPTIONS)
        quiet = await pool.run(doc(), OPTIONS)
    assert attribute(noisy, "Content") == b"payload"
    assert pid_of(quiet) == pid_of(noisy)  # the worker was not taken for broken
    err = capfd.readouterr().err
    assert "a summarizer that prints" in err
    assert "straight to fd 1" in err


async def test_workers_inherit_only_their_own_descriptors(make_pool: MakePool) -> None:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)  # as a descriptor the gatherer itself inherited would be
    try:
        async with make_pool() as pool:
            summary = await pool.run(doc("descriptors"), OPTIONS)
    finally:
        os.close(read_end)
        os.close(write_end)
    fds = {int(fd) for fd in attribute(summary, "Fds").split()}
    assert {0, 1, 2} <= fds
    assert write_end not in fds
    assert len(fds) <= 6  # stdio, the two protocol pipes, the listing's own descriptor


async def test_many_concurrent_jobs_all_complete_with_their_own_results(
    make_pool: MakePool,
) -> None:
    documents = [doc("sleep", b"0.01", url=f"http://example.org/{i}") for i in range(50)]
    async with make_pool(workers=2) as pool:
        summaries = await asyncio.gather(*(pool.run(d, OPTIONS) for d in documents))
        stats = pool.stats()
    assert [attribute(s, "URL") for s in summaries] == [d.url.encode() for d in documents]
    assert len({pid_of(s) for s in summaries}) == 2
    assert (stats.jobs, stats.busy, stats.workers, stats.restarts) == (50, 0, 2, 0)


async def test_waiting_jobs_are_served_first_come_first_served(make_pool: MakePool) -> None:
    finished: list[int] = []

    async def one(pool: SummarizerPool, index: int) -> None:
        await pool.run(doc("sleep", b"0.01"), OPTIONS)
        finished.append(index)

    async with make_pool(workers=1) as pool, asyncio.TaskGroup() as group:
        for index in range(10):
            group.create_task(one(pool, index))
    assert finished == list(range(10))


async def test_a_worker_is_sent_its_next_job_while_it_runs_one(make_pool: MakePool) -> None:
    async with make_pool(workers=1, timeout=30.0) as pool:
        jobs = [
            asyncio.create_task(pool.run(doc("sleep", b"0.3", f"http://example.org/{n}"), OPTIONS))
            for n in range(3)
        ]
        await until(lambda: pool.stats().busy == 2)  # one running, one in its pipe; not three
        summaries = await asyncio.gather(*jobs)
        stats = pool.stats()
    assert len({pid_of(s) for s in summaries}) == 1
    assert (stats.jobs, stats.busy, stats.restarts) == (3, 0, 0)


async def test_a_job_behind_one_that_kills_its_worker_goes_to_the_next(
    make_pool: MakePool,
) -> None:
    async with make_pool(workers=1, timeout=0.5) as pool:
        before = pid_of(await pool.run(doc(), OPTIONS))
        hung, behind = await asyncio.gather(
            pool.run(doc("hang"), OPTIONS), pool.run(doc(), OPTIONS), return_exceptions=True
        )
        stats = pool.stats()
    assert isinstance(hung, SummarizeError)
    assert hung.reason == "timeout after 0.5 s"
    assert isinstance(behind, Summary)
    assert pid_of(behind) != before  # never started by the killed worker: sent to its successor
    assert (stats.jobs, stats.timeouts, stats.crashes, stats.restarts) == (4, 1, 0, 1)


async def test_a_job_time_limit_runs_from_its_turn_not_from_its_sending(
    make_pool: MakePool,
) -> None:
    async with make_pool(workers=1, timeout=1.0) as pool:
        started = time.monotonic()
        summaries = await asyncio.gather(
            *(pool.run(doc("sleep", b"0.6", f"http://example.org/{n}"), OPTIONS) for n in range(2))
        )
    assert time.monotonic() - started >= 1.2  # the second waited 0.6 s behind the first
    assert len({pid_of(s) for s in summaries}) == 1


async def test_cancelling_a_job_waiting_in_a_pipe_leaves_the_running_one_alone(
    make_pool: MakePool,
) -> None:
    async with make_pool(workers=1, timeout=30.0) as pool:
        running = asyncio.create_task(pool.run(doc("sleep", b"0.5"), OPTIONS))
        waiting = asyncio.create_task(pool.run(doc(), OPTIONS))
        await until(lambda: pool.stats().busy == 2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        first = pid_of(await running)
        assert pid_of(await pool.run(doc(), OPTIONS)) == first
        stats = pool.stats()
    assert (stats.crashes, stats.restarts, stats.busy) == (0, 0, 0)


async def test_workers_are_recycled_after_max_jobs(make_pool: MakePool) -> None:
    async with make_pool(max_jobs_per_worker=3) as pool:
        pids = [pid_of(await pool.run(doc(), OPTIONS)) for _ in range(7)]
        stats = pool.stats()
    first, second, third = pids[0], pids[3], pids[6]
    assert pids == [first] * 3 + [second] * 3 + [third]
    assert len({first, second, third}) == 3
    assert not alive(first)
    assert not alive(second)
    assert (stats.restarts, stats.crashes) == (2, 0)


async def test_leaving_the_pool_stops_every_worker(make_pool: MakePool) -> None:
    before = children()
    async with make_pool(workers=2, timeout=30.0) as pool:
        pids = await both_pids(pool)
        assert children() - before == pids
        hung = asyncio.create_task(pool.run(doc("hang"), OPTIONS))
        await until(lambda: pool.stats().busy == 1)
        started = time.monotonic()
    stopping = time.monotonic() - started
    with pytest.raises(SummarizeError) as caught:
        await hung
    assert caught.value.reason == CLOSED
    assert stopping < pool_module._STOP_GRACE + 2.0  # the hung worker was killed after the grace
    assert children() == before
    assert not any(alive(pid) for pid in pids)
    with pytest.raises(SummarizeError) as late:
        await pool.run(doc(), OPTIONS)
    assert late.value.reason == CLOSED


async def test_cancelling_a_job_replaces_its_worker(make_pool: MakePool) -> None:
    async with make_pool(timeout=30.0) as pool:
        before = pid_of(await pool.run(doc(), OPTIONS))
        hung = asyncio.create_task(pool.run(doc("hang"), OPTIONS))
        await until(lambda: pool.stats().busy == 1)
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        after = pid_of(await pool.run(doc(), OPTIONS))
    assert after != before
    assert not alive(before)


async def test_jobs_queued_behind_failing_ones_all_get_their_answer(make_pool: MakePool) -> None:
    actions = ["segfault", "echo", "exit", "echo", "hang", "echo", "fail", "echo", "exit", "echo"]
    async with make_pool(workers=1, timeout=0.5) as pool:
        outcomes = await asyncio.wait_for(
            asyncio.gather(
                *(
                    pool.run(doc(a, url=f"http://example.org/{i}"), OPTIONS)
                    for i, a in enumerate(actions)
                ),
                return_exceptions=True,
            ),
            timeout=20,
        )
        stats = pool.stats()
    expected = {
        "segfault": "crashed: signal 11",
        "exit": "crashed: exit 3",
        "hang": "timeout after 0.5 s",
        "fail": "error: ValueError",
    }
    for index, (action, outcome) in enumerate(zip(actions, outcomes, strict=True)):
        if action == "echo":
            assert isinstance(outcome, Summary)
            assert attribute(outcome, "URL") == f"http://example.org/{index}".encode()
        else:
            assert isinstance(outcome, SummarizeError)
            assert outcome.reason == expected[action]
    assert (stats.crashes, stats.timeouts, stats.errors, stats.restarts) == (3, 1, 1, 4)


async def test_a_target_that_cannot_be_imported_fails_jobs_quickly(make_pool: MakePool) -> None:
    started = time.monotonic()
    async with make_pool(workers=2, target="tests.gatherer.no_such_module:act") as pool:
        errors = await asyncio.gather(
            *(pool.run(doc(), OPTIONS) for _ in range(3)), return_exceptions=True
        )
        elapsed = time.monotonic() - started
        later = time.monotonic()
        late = await failure(pool, doc())
        late_elapsed = time.monotonic() - later
        stats = pool.stats()
    assert all(isinstance(e, SummarizeError) and e.reason == CANNOT_START for e in errors)
    assert late.reason == CANNOT_START
    assert elapsed < 5.0
    # A pool that tried to start a worker for it would spawn one or more processes first.
    assert late_elapsed < 1.0
    # Two slots may both try once more while the last delay runs out.
    assert pool_module._START_ATTEMPTS <= stats.failed_starts <= pool_module._START_ATTEMPTS + 1
    assert (stats.workers, stats.jobs) == (0, 0)


async def test_starts_are_tried_again_after_the_pause(
    make_pool: MakePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_module, "_RETRY_AFTER", 0.5)
    monkeypatch.setenv(REFUSE_IMPORT, "1")
    async with make_pool(workers=1) as pool:
        assert (await failure(pool, doc())).reason == CANNOT_START
        monkeypatch.delenv(REFUSE_IMPORT)
        assert (await failure(pool, doc())).reason == CANNOT_START  # still paused
        await asyncio.sleep(0.6)
        summary = await pool.run(doc(), OPTIONS)
        stats = pool.stats()
    assert attribute(summary, "URL") == b"http://example.org/echo"
    assert (stats.workers, stats.failed_starts) == (1, pool_module._START_ATTEMPTS)


async def test_jobs_go_on_with_the_workers_left_when_a_slot_cannot_restart(
    make_pool: MakePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_pool(workers=2) as pool:
        pids = await both_pids(pool)
        monkeypatch.setenv(REFUSE_IMPORT, "1")  # replacements cannot start from here on
        crashed = await failure(pool, doc("segfault"))
        summaries = await asyncio.gather(*(pool.run(doc(), OPTIONS) for _ in range(6)))
        stats = pool.stats()
    assert crashed.reason == "crashed: signal 11"
    survivors = {pid_of(s) for s in summaries}
    assert len(survivors) == 1
    assert survivors < pids
    assert (stats.workers, stats.failed_starts) == (1, pool_module._START_ATTEMPTS)


async def test_a_pool_not_entered_takes_no_jobs() -> None:
    pool = SummarizerPool(workers=1, timeout=1.0, memory_mb=64, target=ACT)
    assert (await failure(pool, doc())).reason == CLOSED
    assert pool.stats().workers == 0


def test_zero_workers_means_one_per_cpu_the_gatherer_may_use() -> None:
    cpus = os.sched_getaffinity(0)
    assert SummarizerPool(workers=0, timeout=1.0, memory_mb=64).size == len(cpus)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        assert SummarizerPool(workers=0, timeout=1.0, memory_mb=64).size == 1
    finally:
        os.sched_setaffinity(0, cpus)


async def resident_mb(pid: int) -> float:
    statm = await asyncio.to_thread(Path(f"/proc/{pid}/statm").read_text)
    return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def test_a_worker_gives_back_the_heap_a_job_left_free(make_pool: MakePool) -> None:
    async with make_pool() as pool:
        pid = pid_of(await pool.run(doc(), OPTIONS))
        before = await resident_mb(pid)
        await pool.run(doc("fragment"), OPTIONS)
        # Replied once the worker is done with the job above, trimming included.
        assert pid_of(await pool.run(doc(), OPTIONS)) == pid
        assert await resident_mb(pid) < before + 8  # not the 40 MB the job freed


def overlap(summaries: list[Summary]) -> bool:
    (start_a, end_a), (start_b, end_b) = (
        (float(attribute(s, "Started")), float(attribute(s, "Ended"))) for s in summaries
    )
    return start_a < end_b and start_b < end_a


async def test_large_documents_take_turns_other_documents_do_not(make_pool: MakePool) -> None:
    large = b"x" * pool_module.LARGE_DOCUMENT_BYTES
    async with make_pool(workers=2) as pool:
        small = [doc("timed", url=f"http://example.org/small{n}") for n in range(2)]
        both = await asyncio.gather(*(pool.run(document, OPTIONS) for document in small))
        assert overlap(both)
        assert len({pid_of(summary) for summary in both}) == 2
        big = [doc("timed", large, f"http://example.org/large{n}") for n in range(2)]
        both = await asyncio.gather(*(pool.run(document, OPTIONS) for document in big))
        assert not overlap(both)


@pytest.mark.parametrize(
    "bad",
    [{"workers": -1}, {"timeout": 0}, {"memory_mb": 0}, {"max_jobs_per_worker": 0}],
)
def test_nonsense_settings_are_refused(bad: dict[str, int]) -> None:
    settings: dict[str, Any] = {"workers": 1, "timeout": 1.0, "memory_mb": 64, **bad}
    with pytest.raises(ValueError, match="workers >= 0"):
        SummarizerPool(**settings)
