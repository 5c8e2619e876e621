"""When each collection is due for a pull: intervals, backoff after failures, triggers.

Pure: no clock, no randomness, no I/O. Every call that moves time takes ``now`` (epoch
seconds), and the backoff's jitter is the caller's, so the rules below are tested exactly.

- A collection is due as soon as it is added (every collection at start).
- A pull in progress (``started``) is not due again until it ends.
- Success: due ``interval`` after it ends.
- Failure: due after a backoff of 30 s doubling with each consecutive failure, capped at
  ``min(interval, 1 h)``, times the caller's jitter (0.5 to 1.5, so that collections failing
  together do not retry in lockstep).
- ``triggered``: due now; during a pull, due as soon as that pull ends (it may have missed
  whatever prompted the trigger).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

FIRST_BACKOFF = 30.0
MAX_BACKOFF = 3600.0
JITTER = (0.5, 1.5)


def backoff(failures: int, interval: float) -> float:
    """Seconds to wait after ``failures`` consecutive failures (before jitter)."""
    if failures < 1:
        raise ValueError(f"backoff is for one failure or more, got {failures}")
    cap = min(interval, MAX_BACKOFF)
    # The exponent is bounded so that a long outage cannot overflow the float.
    return min(FIRST_BACKOFF * 2.0 ** min(failures - 1, 64), cap)


@dataclass(slots=True)
class _Entry:
    interval: float
    due: float
    failures: int = 0  # consecutive
    running: bool = False
    retrigger: bool = False  # triggered during the running pull


class Schedule:
    """The due times of a set of collections, by name."""

    def __init__(self, intervals: Mapping[str, float] | None = None, *, now: float = 0.0) -> None:
        self._entries: dict[str, _Entry] = {}
        for name, interval in (intervals or {}).items():
            self.add(name, interval, now)

    def __repr__(self) -> str:
        return f"Schedule({len(self._entries)} collections, next {self.next_due()})"

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def add(self, name: str, interval: float, now: float) -> None:
        """Schedule a new collection, due at ``now``. For one already scheduled, only the
        interval changes, and its due time is brought forward to ``now + interval`` if later
        (a shorter interval takes effect at once; a running backoff is kept)."""
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval}")
        entry = self._entries.get(name)
        if entry is None:
            self._entries[name] = _Entry(interval, now)
        else:
            entry.interval = interval
            entry.due = min(entry.due, now + interval)

    def remove(self, name: str) -> None:
        """Forget ``name``; KeyError if it is not scheduled."""
        del self._entries[name]

    def due_at(self, name: str) -> float:
        """When ``name`` is next due (infinity while it is being pulled); KeyError if unknown."""
        entry = self._entries[name]
        return math.inf if entry.running else entry.due

    def failures(self, name: str) -> int:
        """Consecutive failures of ``name`` (0 after a success)."""
        return self._entries[name].failures

    def running(self, name: str) -> bool:
        return self._entries[name].running

    def next_due(self) -> tuple[str, float] | None:
        """The collection due first, and when (ties: by name); None if none is waiting
        (no collections, or every one is being pulled)."""
        waiting = [(e.due, name) for name, e in self._entries.items() if not e.running]
        if not waiting:
            return None
        due, name = min(waiting)
        return name, due

    def started(self, name: str) -> None:
        """A pull of ``name`` began: it is not due again until ``succeeded`` or ``failed``."""
        entry = self._entries[name]
        entry.running = True
        entry.retrigger = False

    def succeeded(self, name: str, now: float) -> None:
        """A pull of ``name`` succeeded at ``now``: due again one interval later."""
        entry = self._ended(name)
        entry.failures = 0
        entry.due = now if entry.retrigger else now + entry.interval
        entry.retrigger = False

    def failed(self, name: str, now: float, jitter: float) -> None:
        """A pull of ``name`` failed at ``now``: due after the backoff times ``jitter``
        (in [0.5, 1.5], drawn by the caller)."""
        low, high = JITTER
        if not low <= jitter <= high:
            raise ValueError(f"jitter must be in [{low}, {high}], got {jitter}")
        entry = self._ended(name)
        entry.failures += 1
        delay = backoff(entry.failures, entry.interval) * jitter
        entry.due = now if entry.retrigger else now + delay
        entry.retrigger = False

    def triggered(self, name: str, now: float) -> None:
        """Pull ``name`` now (or, if it is being pulled, again as soon as that ends)."""
        entry = self._entries[name]
        if entry.running:
            entry.retrigger = True
        else:
            entry.due = min(entry.due, now)

    def _ended(self, name: str) -> _Entry:
        entry = self._entries[name]
        entry.running = False
        return entry
