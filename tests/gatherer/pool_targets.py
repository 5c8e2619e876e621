"""Summarizer targets for the pool's tests; they run inside worker processes.

``act`` does what the document's ``name`` says, so one pool can meet every kind of failure in
turn. Each summary records the worker's PID, so a test can tell whether a worker was replaced.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import BinaryIO

from gatherer.errors import SummarizeError
from gatherer.essence.document import Document, Summary
from gatherer.essence.options import EssenceOptions

# Set in the environment to make importing this module fail in workers started afterwards.
REFUSE_IMPORT = "POOL_TARGETS_REFUSE_IMPORT"
if os.environ.get(REFUSE_IMPORT):
    raise ImportError(f"{REFUSE_IMPORT} is set")


def echo(document: Document, options: EssenceOptions) -> Summary:
    return Summary(
        type=document.content_type or "Echo",
        attributes=(
            ("URL", document.url.encode()),
            ("Content", document.content),
            ("Abstract-Bytes", str(options.abstract_bytes).encode()),
            ("Pid", str(os.getpid()).encode()),
        ),
        links=(document.url + "#next",),
    )


def _fail(document: Document, options: EssenceOptions) -> Summary:
    raise ValueError("this document is malformed")


def _refuse(document: Document, options: EssenceOptions) -> Summary:
    raise SummarizeError(document.url, "unsupported: no summarizer for it")


def _hang(document: Document, options: EssenceOptions) -> Summary:
    time.sleep(3600)
    return echo(document, options)


def _sleep(document: Document, options: EssenceOptions) -> Summary:
    time.sleep(float(document.content))
    return echo(document, options)


def _timed(document: Document, options: EssenceOptions) -> Summary:
    """Busy for half a second, saying when (the monotonic clock is the same in every process)."""
    started = time.monotonic()
    time.sleep(0.5)
    times = (("Started", repr(started).encode()), ("Ended", repr(time.monotonic()).encode()))
    return Summary(type="Timed", attributes=(*times, ("Pid", str(os.getpid()).encode())))


# Kept for the worker's life: small C-heap blocks between large freed ones, which glibc's free
# then cannot give back from the top of the heap.
_PINS: list[bytes] = []


def _fragment(document: Document, options: EssenceOptions) -> Summary:
    """Leaves 40 MB of the C heap free but fragmented, as a large document's parse does."""
    large = []
    for _ in range(400):
        large.append(bytes(100 * 1024))  # below glibc's mmap threshold: on the heap
        _PINS.append(bytes(1000))
    del large
    return echo(document, options)


def _exit(document: Document, options: EssenceOptions) -> Summary:
    os._exit(3)


def _segfault(document: Document, options: EssenceOptions) -> Summary:
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(10)  # the signal is delivered before this ends
    return echo(document, options)


def _hog(document: Document, options: EssenceOptions) -> Summary:
    chunks = [b"x" * (1024 * 1024) for _ in range(2048)]  # 2 GB, a MiB at a time
    return echo(document, options) if chunks else Summary(type="Empty")


def _noisy(document: Document, options: EssenceOptions) -> Summary:
    print("a summarizer that prints")
    sys.stdout.flush()
    os.write(1, b"\x00\x00\x00\x05straight to fd 1\n")  # looks like a frame header
    return echo(document, options)


def _replies() -> BinaryIO:
    """The worker's reply stream, taken from the frame of its serving loop."""
    frame = sys._getframe()
    while frame.f_code.co_name != "_serve":
        assert frame.f_back is not None, "not called from gatherer.essence.worker"
        frame = frame.f_back
    stream: BinaryIO = frame.f_locals["replies"]
    return stream


def _write_reply(raw: bytes) -> None:
    stream = _replies()
    stream.write(raw)
    stream.flush()


def _huge_frame(document: Document, options: EssenceOptions) -> Summary:
    _write_reply(b"\xff\xff\xff\xff")  # a 4 GB reply announced
    time.sleep(10)
    return echo(document, options)


def _garbage_frame(document: Document, options: EssenceOptions) -> Summary:
    _write_reply(b"\x00\x00\x00\x05nopic")  # a frame, but not a pickle
    time.sleep(10)
    return echo(document, options)


def _descriptors(document: Document, options: EssenceOptions) -> Summary:
    fds = " ".join(sorted(os.listdir("/proc/self/fd"), key=int))
    return Summary(type="Descriptors", attributes=(("Fds", fds.encode()),))


def _wrong_type(document: Document, options: EssenceOptions) -> Summary:
    return "not a summary"  # type: ignore[return-value]


_ACTIONS: dict[str, Callable[[Document, EssenceOptions], Summary]] = {
    "echo": echo,
    "fail": _fail,
    "refuse": _refuse,
    "hang": _hang,
    "sleep": _sleep,
    "timed": _timed,
    "fragment": _fragment,
    "exit": _exit,
    "segfault": _segfault,
    "hog": _hog,
    "noisy": _noisy,
    "wrong-type": _wrong_type,
    "descriptors": _descriptors,
    "huge-frame": _huge_frame,
    "garbage-frame": _garbage_frame,
}


def act(document: Document, options: EssenceOptions) -> Summary:
    return _ACTIONS[document.name or "echo"](document, options)
