"""A summarizer worker process: ``python -m gatherer.essence.worker TARGET MEMORY_MB``.

This module owns the child side of the pool's protocol (gatherer.essence.pool is the other).
Both pipes carry frames: a 4-byte big-endian length, then a pickle.

- At start the worker imports TARGET (``module:function``) once, limits its own address space
  to MEMORY_MB MB above what the interpreter and the target's imports already use, and sends
  ``("ready",)``. A target that cannot be imported ends the worker with status 2 before that.
- Each job frame holds ``(document, options)``; the worker calls ``target(document, options)``
  and replies ``("ok", summary)``, or ``("error", class_name, message)`` when the target raised
  (for a SummarizeError, message is its reason), or ``("memory",)`` when it ran out of memory,
  after which the worker exits: its heap may be too fragmented to trust.
- End of input ends the worker.

After a job that left it ``_TRIM_GROWTH`` larger than it was after the last such job, the
worker hands the C heap's free pages back to the system: glibc keeps what a large document's
parse freed (the heap is fragmented, so its top is rarely free), and a worker would otherwise
stay the size of the largest document it has met.

The protocol pipes are private descriptors: fd 0 reads /dev/null and fd 1 writes to stderr, so a
summarizer that prints (from Python or C) or reads stdin cannot corrupt the frames.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import resource
import signal
import sys
from collections.abc import Callable
from typing import BinaryIO

from gatherer.errors import SummarizeError
from gatherer.essence.document import Document, Summary
from gatherer.essence.options import EssenceOptions

Target = Callable[[Document, EssenceOptions], Summary]

HEADER_BYTES = 4
READY = ("ready",)
CANNOT_LOAD = 2  # exit status: the target could not be imported

_MEMORY_REPLY = pickle.dumps(("memory",))  # made before any limit: sending it allocates nothing
_MESSAGE_CHARS = 500  # of an exception's text, kept for the pool's debug log
_TRIM_GROWTH = 16 * 1024 * 1024  # bytes of resident growth after which the heap is trimmed


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m gatherer.essence.worker MODULE:FUNCTION MEMORY_MB", file=sys.stderr)
        return CANNOT_LOAD
    spec, memory_mb = argv
    jobs, replies = _claim_stdio()
    # Ctrl-C reaches the whole process group; the pool, not the terminal, decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with jobs, replies:
        try:
            target = _load(spec)
        except Exception as error:  # importing arbitrary code can raise anything
            print(f"summarizer worker: cannot load {spec}: {error!r}", file=sys.stderr)
            return CANNOT_LOAD
        _limit_memory(int(memory_mb))
        _write_frame(replies, pickle.dumps(READY))
        _serve(target, jobs, replies)
    return 0


def _write_frame(stream: BinaryIO, payload: bytes) -> None:
    # One write: a header written apart would wake the pool's process once more.
    stream.write(len(payload).to_bytes(HEADER_BYTES, "big") + payload)
    stream.flush()


def _claim_stdio() -> tuple[BinaryIO, BinaryIO]:
    """Move the protocol pipes to private descriptors (not inherited by the target's own
    subprocesses) and point fd 0 at /dev/null and fd 1 at stderr."""
    # uvloop's spawn ignores close_fds: drop whatever else the pool's process let us inherit.
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    jobs = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return jobs, replies


def _load(spec: str) -> Target:
    module_name, _, function_name = spec.partition(":")
    target = getattr(importlib.import_module(module_name), function_name)
    if not callable(target):
        raise TypeError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return]


def _limit_memory(memory_mb: int) -> None:
    """Cap the address space at its current size (VmSize) plus ``memory_mb`` MB.

    Relative, not absolute: the interpreter and the summarizers' libraries already map a good
    deal of address space that is not memory in use, and that amount differs between machines,
    so an absolute cap would leave unknown room for the document. A job's frame and its
    unpickled document both count against the headroom. Linux only (reads /proc).
    """
    limit = _statm_bytes(0) + memory_mb * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class _Trimmer:
    """Trims the C heap (glibc's ``malloc_trim``) once the worker has grown ``_TRIM_GROWTH``
    since the last trim; does nothing where there is no ``malloc_trim`` (another C library)."""

    def __init__(self) -> None:
        self._malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
        self._floor = _statm_bytes(1)

    def after_job(self) -> None:
        if self._malloc_trim is None or _statm_bytes(1) - self._floor < _TRIM_GROWTH:
            return
        self._malloc_trim(0)
        # Memory still in use after the trim is the new floor: no trimming after every job
        # once the target has loaded something large for good (a language model, say).
        self._floor = _statm_bytes(1)


def _statm_bytes(field: int) -> int:
    """Field ``field`` of /proc/self/statm in bytes: 0 the address space, 1 the resident set."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[field]) * os.sysconf("SC_PAGE_SIZE")


def _serve(target: Target, jobs: BinaryIO, replies: BinaryIO) -> None:
    trimmer = _Trimmer()
    while True:
        try:
            reply = _answer(target, jobs)
        except MemoryError:
            # Replied after this block: until it ends, the traceback keeps alive whatever the
            # target had allocated.
            reply = _MEMORY_REPLY
        if reply is None:
            return
        _write_frame(replies, reply)
        if reply is _MEMORY_REPLY:
            return
        trimmer.after_job()  # after the reply: the pool is not kept waiting for it


def _answer(target: Target, jobs: BinaryIO) -> bytes | None:
    """Read one job and run it: the reply frame's payload, or None at end of input."""
    frame = _read_frame(jobs)
    if frame is None:
        return None
    document, options = pickle.loads(frame)
    del frame  # the document holds its own copy of the content
    try:
        summary = target(document, options)
        if not isinstance(summary, Summary):
            raise TypeError(f"the summarizer returned {type(summary).__name__}, not Summary")
        return pickle.dumps(("ok", summary), pickle.HIGHEST_PROTOCOL)
    except MemoryError:
        raise
    except SummarizeError as error:
        return pickle.dumps(("error", "SummarizeError", error.reason))
    except Exception as error:  # a summarizer's failure is reported, and the worker goes on
        message = str(error)[:_MESSAGE_CHARS]
        return pickle.dumps(("error", type(error).__name__, message))


def _read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES:
        return None
    size = int.from_bytes(head, "big")
    body = stream.read(size)
    return body if len(body) == size else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
