"""Copies of hot bodies in memory files, for the kernel to send without copying them again.

Writing a body from Python memory copies it into the socket's buffers on every hit;
``sendfile`` from a memory file (memfd) only takes references to the file's pages. Measured
with bench/run.py on loopback, 256 KiB hits at the client's own limit took 65-78% of the
proxy's core instead of 95-99%, with the median latency down by a third. 16 KiB hits showed
no gain (the copy costs about what the extra system call does), hence the 64 KiB floor.
4 MiB bodies reached the loopback client slower from pages than copied (2.2-2.6 GiB/s against
3.6-4.1; it then reads memory no CPU cache holds, probably), hence the 1 MiB ceiling.

A copy costs its bytes again and holds a file open, so copies are bounded in bytes and in
number (``MAX_FILES``, a small share of any limit on open files, so that clients can still
connect); each is freed (its file closed) when the last reference to it goes, which is when
the hit fast path forgets its entry.
"""

from __future__ import annotations

import os

MIN_BYTES = 64 << 10
MAX_BYTES = 1 << 20
MAX_FILES = 128


class PageCopy:
    """One body's bytes in a memory file (``fd``), freed with the object."""

    __slots__ = ("_owner", "fd", "size")

    def __init__(self, fd: int, size: int, owner: BodyPages) -> None:
        self.fd = fd
        self.size = size
        self._owner = owner

    def __del__(self) -> None:
        os.close(self.fd)
        self._owner.held -= self.size
        self._owner.files -= 1


class BodyPages:
    """Makes page copies of bodies while their bytes stay within ``budget`` and their
    number within ``max_files``."""

    def __init__(self, budget: int, max_files: int = MAX_FILES) -> None:
        self.budget = budget
        self.max_files = max_files
        self.held = 0  # bytes in live copies
        self.files = 0  # live copies

    def copy(self, body: bytes) -> PageCopy | None:
        """A copy of ``body``, or None: outside the sizes worth it, or over the budget, or
        no memory file to be had (too many open files, or no memfd on this system)."""
        size = len(body)
        if not MIN_BYTES <= size <= MAX_BYTES or self.held + size > self.budget:
            return None
        if self.files >= self.max_files:
            return None
        try:
            fd = os.memfd_create("harvest-body")
        except (OSError, AttributeError):
            return None
        try:
            view = memoryview(body)
            written = 0
            while written < size:
                written += os.write(fd, view[written:])
        except OSError:
            os.close(fd)
            return None
        self.held += size
        self.files += 1
        return PageCopy(fd, size, self)
