"""What a gathering run counts: fed by the crawl controller's outcomes, read by the progress
display, the end-of-run summary and the export service's /metrics."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

# The run keeps the latest failures with their reasons for its summary; older ones are counted.
RECENT_FAILURES = 1000


@dataclass(slots=True)
class RunStats:
    """Counters of one run. ``started`` and ``elapsed`` are monotonic seconds.

    fetched: documents whose bytes arrived; not_modified: the source said unchanged (304 or
    same file time); unchanged: same MD5 as stored; fresh: not due for refresh, not fetched;
    summarized / stored / deleted: records made, written, removed; duplicates: documents not
    stored because they are another's copy (a canonical URL elsewhere, or a near-duplicate of a
    stored text); robots_denied: URLs
    robots.txt refused; fetch_errors / summarize_errors: failures by kind; admissions: the
    frontier's answers to offered links by reason; bytes: content bytes fetched.
    """

    started: float = 0.0
    elapsed: float = 0.0
    fetched: int = 0
    not_modified: int = 0
    unchanged: int = 0
    fresh: int = 0
    summarized: int = 0
    stored: int = 0
    deleted: int = 0
    duplicates: int = 0
    robots_denied: int = 0
    bytes: int = 0
    queued: int = 0
    active: int = 0
    hosts: int = 0
    fetch_errors: Counter[str] = field(default_factory=Counter)
    summarize_errors: Counter[str] = field(default_factory=Counter)
    admissions: Counter[str] = field(default_factory=Counter)
    failures: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=RECENT_FAILURES))

    @property
    def errors(self) -> int:
        return sum(self.fetch_errors.values()) + sum(self.summarize_errors.values())

    @property
    def visited(self) -> int:
        """URLs whose outcome is known this run (fetched or answered without a body)."""
        return (
            self.fetched
            + self.not_modified
            + self.fresh
            + self.robots_denied
            + sum(self.fetch_errors.values())
        )

    def rate(self) -> float:
        """Documents fetched or confirmed unchanged per second so far."""
        done = self.fetched + self.not_modified
        return done / self.elapsed if self.elapsed > 0 else 0.0

    def lines(self) -> list[str]:
        """A plain-text summary, one fact per line."""
        out = [
            f"elapsed {self.elapsed:.2f} s, {self.rate():.1f} documents/s",
            f"fetched {self.fetched} ({self.bytes} bytes), not modified {self.not_modified},"
            f" unchanged {self.unchanged}, fresh {self.fresh}",
            f"summarized {self.summarized}, stored {self.stored}, deleted {self.deleted},"
            f" duplicates {self.duplicates}, robots denied {self.robots_denied},"
            f" hosts {self.hosts}",
        ]
        if self.fetch_errors:
            out.append("fetch errors: " + _counts(self.fetch_errors))
        if self.summarize_errors:
            out.append("summarize errors: " + _counts(self.summarize_errors))
        if self.admissions:
            out.append("links: " + _counts(self.admissions))
        return out


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counter.items()))
