"""The access log: Squid's exact line format, batching, rotation, and a loop that never waits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.server.accesslog import (
    AccessLog,
    Hierarchy,
    Result,
    Rotation,
    format_line,
    line_head,
    line_rest,
    time_field,
)
from harvest_common.errors import ConfigError

BASE: dict[str, Any] = {
    "now": 1732950000.123,
    "elapsed_ms": 145,
    "client": "127.0.0.1",
    "result": Result.TCP_MISS,
    "status": 200,
    "size": 1234,
    "method": "GET",
    "url": "http://example.org/",
    "hierarchy": Hierarchy.HIER_DIRECT,
    "peer": "93.184.216.34",
    "content_type": "text/html",
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {},
            "1732950000.123    145 127.0.0.1 TCP_MISS/200 1234 GET http://example.org/ -"
            " HIER_DIRECT/93.184.216.34 text/html",
        ),
        (
            {"now": 1732950000.007, "elapsed_ms": 0, "result": Result.TCP_MEM_HIT},
            "1732950000.007      0 127.0.0.1 TCP_MEM_HIT/200 1234 GET http://example.org/ -"
            " HIER_DIRECT/93.184.216.34 text/html",
        ),
        (
            {"now": 1732950001.0, "elapsed_ms": 1234567, "aborted": True},
            "1732950001.000 1234567 127.0.0.1 TCP_MISS_ABORTED/200 1234 GET http://example.org/ -"
            " HIER_DIRECT/93.184.216.34 text/html",
        ),
        (
            {
                "result": Result.TCP_DENIED,
                "status": 403,
                "size": 3950,
                "hierarchy": Hierarchy.HIER_NONE,
                "peer": None,
                "content_type": "text/html; charset=utf-8",
            },
            "1732950000.123    145 127.0.0.1 TCP_DENIED/403 3950 GET http://example.org/ -"
            " HIER_NONE/- text/html",
        ),
        (
            {
                "result": Result.NONE,
                "status": 0,
                "size": 0,
                "hierarchy": Hierarchy.HIER_NONE,
                "peer": None,
                "content_type": None,
            },
            "1732950000.123    145 127.0.0.1 NONE/000 0 GET http://example.org/ - HIER_NONE/- -",
        ),
        (
            {
                "result": Result.TCP_TUNNEL,
                "method": "CONNECT",
                "url": "example.org:443",
                "user": "alice",
                "content_type": "",
                "client": "::1",
            },
            "1732950000.123    145 ::1 TCP_TUNNEL/200 1234 CONNECT example.org:443 alice"
            " HIER_DIRECT/93.184.216.34 -",
        ),
    ],
    ids=["miss", "mem-hit", "aborted-wide-elapsed", "denied", "no-response", "tunnel-user"],
)
def test_lines_follow_squids_native_format(changes: dict[str, Any], expected: str) -> None:
    assert format_line(**(BASE | changes)) == (expected + "\n").encode()


@settings(max_examples=500)
@given(
    now=st.floats(min_value=0, max_value=4e9),
    step=st.floats(min_value=0, max_value=0.002),
    elapsed=st.integers(0, 10**7),
    size=st.integers(0, 10**12),
    aborted=st.booleans(),
)
def test_the_time_field_made_once_a_millisecond_is_the_lines_time(
    now: float, step: float, elapsed: int, size: int, aborted: bool
) -> None:
    """Lines made one after another, a millisecond apart or in the same one, carry each its
    own time, rounded to the millisecond as Squid has it."""
    for when in (now, now + step, now + step, now):
        seconds, millis = divmod(round(when * 1000), 1000)
        expected = b"%d.%03d %6d 10.0.0.1 TCP_MISS%b/200 %d" % (
            seconds,
            millis,
            elapsed,
            b"_ABORTED" if aborted else b"",
            size,
        )
        assert line_head(when, elapsed, b"10.0.0.1", b"TCP_MISS", 200, size, aborted) == expected
        assert (
            time_field(when) + line_rest(elapsed, b"10.0.0.1", b"TCP_MISS", 200, size, aborted)
            == expected
        )


@pytest.mark.parametrize(
    ("changes", "url", "user", "mime"),
    [
        ({"url": "http://example.org/a b"}, "http://example.org/a%20b", "-", "text/html"),
        (
            {"url": "http://example.org/\r\nX: y\t\x7f\x00"},
            "http://example.org/%0D%0AX:%20y%09%7F%00",
            "-",
            "text/html",
        ),
        ({"url": "http://example.org/caf\u00e9"}, "http://example.org/caf%C3%A9", "-", "text/html"),
        (
            {"url": 'http://example.org/%41?q="<\'>"'},
            'http://example.org/%41?q="<\'>"',
            "-",
            "text/html",
        ),
        ({"user": "Jane Doe\n"}, "http://example.org/", "Jane%20Doe%0A", "text/html"),
        ({"content_type": "text/\x1bplain"}, "http://example.org/", "-", "text/%1Bplain"),
        ({"content_type": " ; charset=x"}, "http://example.org/", "-", "-"),
    ],
)
def test_fields_are_escaped_so_a_line_stays_one_line_of_ten_fields(
    changes: dict[str, Any], url: str, user: str, mime: str
) -> None:
    line = format_line(**(BASE | changes))
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    fields = line.decode("ascii").split()
    assert len(fields) == 10
    assert (fields[6], fields[7], fields[9]) == (url, user, mime)


# -- the file ---------------------------------------------------------------------------------

LINE = (
    b"1732950000.123    145 127.0.0.1 TCP_MISS/200 1234 GET http://example.org/ - HIER_NONE/- -\n"
)


async def read(path: Path) -> bytes:
    return await asyncio.to_thread(path.read_bytes)


async def eventually(check: Callable[[], bool], seconds: float = 2.0) -> bool:
    """Poll ``check`` off the loop until it holds or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):
            return True
        await asyncio.sleep(0.01)
    return False


async def test_no_path_means_no_log(tmp_path: Path) -> None:
    access_log = await AccessLog.open(None)
    assert not access_log.enabled
    access_log.write(LINE)
    access_log.reopen()
    await access_log.close()
    assert await asyncio.to_thread(lambda: list(tmp_path.iterdir())) == []


async def test_parent_directories_are_created_and_lines_wait_for_their_batch(
    tmp_path: Path,
) -> None:
    path = tmp_path / "var" / "log" / "access.log"
    access_log = await AccessLog.open(path, flush_interval=60)
    for _ in range(3):
        access_log.write(LINE)
    await asyncio.sleep(0.05)
    assert await read(path) == b""  # a small batch waits for the interval or close
    await access_log.close()
    assert await read(path) == LINE * 3


async def test_a_batch_is_written_after_the_flush_interval(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    access_log = await AccessLog.open(path, flush_interval=0.05)
    access_log.write(LINE)
    assert await eventually(lambda: path.read_bytes() == LINE)
    await access_log.close()


async def test_a_full_batch_is_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    access_log = await AccessLog.open(path, flush_interval=60, batch_bytes=1024)
    count = 1024 // len(LINE) + 1
    for _ in range(count):
        access_log.write(LINE)
    assert await eventually(lambda: path.read_bytes() == LINE * count)
    await access_log.close()


async def test_close_writes_every_line_in_order(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    access_log = await AccessLog.open(path)
    lines = [b"%d %s" % (i, LINE) for i in range(100_000)]
    for i, line in enumerate(lines):
        access_log.write(line)
        if i % 5000 == 0:
            await asyncio.sleep(0)  # let the writer take batches while lines keep coming
    await access_log.close()
    assert await read(path) == b"".join(lines)
    access_log.write(LINE)  # after close: ignored, and nothing raises
    assert access_log.dropped == 0


async def test_close_right_after_a_batch_is_handed_over_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    for round_ in range(50):  # the hand-over races the writer thread: try it many times
        access_log = await AccessLog.open(path, batch_bytes=len(LINE))
        access_log.write(LINE)
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the writer has woken and handed the batch to its thread
        access_log.write(LINE)
        await access_log.close()
        assert await read(path) == LINE * 2 * (round_ + 1)


@pytest.mark.parametrize("flushed_before_rename", [True, False])
async def test_reopen_sends_later_lines_to_a_new_file_at_the_path(
    tmp_path: Path, flushed_before_rename: bool
) -> None:
    path, rotated = tmp_path / "access.log", tmp_path / "access.log.0"
    access_log = await AccessLog.open(path, flush_interval=0.01 if flushed_before_rename else 60)
    old, new = [b"old %d\n" % i for i in range(3)], [b"new %d\n" % i for i in range(2)]
    for line in old:
        access_log.write(line)
    if flushed_before_rename:
        assert await eventually(lambda: path.read_bytes() == b"".join(old))
    await asyncio.to_thread(path.rename, rotated)
    access_log.reopen()
    for line in new:
        access_log.write(line)
    await access_log.close()
    assert await read(rotated) == b"".join(old)
    assert await read(path) == b"".join(new)


async def test_reopen_creates_the_new_file_without_waiting_for_a_line(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    access_log = await AccessLog.open(path, flush_interval=60)
    await asyncio.to_thread(path.rename, tmp_path / "access.log.0")
    access_log.reopen()
    assert await eventually(path.exists)
    await access_log.close()


async def test_an_unusable_path_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    await asyncio.to_thread(blocker.write_text, "")
    with pytest.raises(ConfigError, match=r"log\.access_log: cannot open"):
        await AccessLog.open(blocker / "access.log")


# -- a stalled disk, played by a named pipe whose reader holds back -----------------------------


class HeldReader(threading.Thread):
    """Reads the pipe to its end, but only once ``release`` is set (or after 5 s)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.release = threading.Event()
        self.data = b""

    def run(self) -> None:
        with self.path.open("rb") as pipe:
            self.release.wait(timeout=5)
            self.data = pipe.read()


@pytest.fixture
def stalled(tmp_path: Path) -> Iterator[HeldReader]:
    path = tmp_path / "access.log"
    os.mkfifo(path)
    reader = HeldReader(path)
    reader.start()
    yield reader
    reader.release.set()
    # A reader still waiting for a writer to open the pipe gets an empty read instead.
    with contextlib.suppress(OSError):  # no reader waiting
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    reader.join(timeout=5)


async def write_a_lot(access_log: AccessLog, count: int) -> float:
    """Write ``count`` lines, yielding now and then; returns the seconds it took the loop."""
    start = time.monotonic()
    for i in range(count):
        access_log.write(LINE)
        if i % 1000 == 0:
            await asyncio.sleep(0.001)
    for _ in range(20):
        await asyncio.sleep(0.005)  # the writer thread is stuck on the full pipe by now
    return time.monotonic() - start


async def test_a_stalled_disk_never_blocks_the_loop(stalled: HeldReader) -> None:
    access_log = await AccessLog.open(stalled.path, flush_interval=0.01, batch_bytes=4096)
    count = 4 * 1024 * 1024 // len(LINE)  # far beyond a pipe's buffer
    elapsed = await write_a_lot(access_log, count)
    assert elapsed < 2.0  # the reader holds back for 5 s: a blocked loop would wait that long
    assert not stalled.release.is_set()
    stalled.release.set()
    await access_log.close()
    await asyncio.to_thread(stalled.join, 5)
    assert stalled.data == LINE * count


async def test_lines_beyond_the_pending_limit_are_dropped_and_counted(
    stalled: HeldReader,
) -> None:
    access_log = await AccessLog.open(
        stalled.path, flush_interval=0.01, batch_bytes=4096, max_pending_bytes=64 * 1024
    )
    count = 4 * 1024 * 1024 // len(LINE)
    await write_a_lot(access_log, count)
    assert access_log.dropped > 0
    stalled.release.set()
    await access_log.close()
    await asyncio.to_thread(stalled.join, 5)
    assert stalled.data == LINE * (count - access_log.dropped)


async def test_the_log_rotates_by_size_keeping_the_newest_files(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    rotation = Rotation(max_bytes=3 * len(LINE), keep=2)
    access_log = await AccessLog.open(path, flush_interval=60, batch_bytes=1, rotation=rotation)
    for _ in range(10):  # each line is its own batch (batch_bytes=1)
        access_log.write(LINE)
        await asyncio.sleep(0.01)
    await access_log.close()

    def files() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(tmp_path.iterdir())}

    held = await asyncio.to_thread(files)
    assert set(held) == {"access.log", "access.log.1", "access.log.2"}  # no .3: keep=2
    assert held["access.log.1"] == LINE * 3
    assert held["access.log.2"] == LINE * 3
    assert held["access.log"] == LINE  # 10 lines: 3 + 3 (kept) + 3 (dropped) + 1


async def test_rotation_counts_what_the_file_held_before(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    await asyncio.to_thread(path.write_bytes, LINE * 2)
    rotation = Rotation(max_bytes=3 * len(LINE), keep=1)
    access_log = await AccessLog.open(path, flush_interval=60, batch_bytes=1, rotation=rotation)
    access_log.write(LINE)
    await asyncio.sleep(0.05)
    await access_log.close()
    assert await read(tmp_path / "access.log.1") == LINE * 3
    assert await read(path) == b""
