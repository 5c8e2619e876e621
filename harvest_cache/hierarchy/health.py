"""What a cache knows of each peer's health: ICP round-trip times, dead and down peers.

Pure: every change takes the time it happens at. A peer is *dead* once it has left ICP
queries unanswered for ``dead_after`` seconds (RFC 2187 and Squid's ``dead_peer_timeout``):
it is still queried, so that its first reply revives it, but no ICP round waits for it. A
peer is *down* after a TCP connection to it fails: no request goes to it for ``retry_after``
seconds (then one may try again), or until it answers ICP.
"""

from __future__ import annotations

from dataclasses import dataclass

# Weight of a new sample in the smoothed RTT (Squid uses 1/10 too).
_GAIN = 0.1


@dataclass(slots=True)
class PeerHealth:
    """One peer's record; counters are for metrics and the cache manager."""

    dead_after: float = 10.0
    retry_after: float = 30.0
    rtt: float | None = None  # smoothed ICP round trip, seconds
    unanswered_since: float | None = None  # first query since the last reply
    down_until: float = 0.0
    queries: int = 0
    replies: int = 0
    hits: int = 0
    timeouts: int = 0
    connect_failures: int = 0
    uses: int = 0  # requests sent to it (round-robin parents take turns by this)
    digest_hits: int = 0  # requests sent to it because its digest listed the URL
    digest_false_hits: int = 0  # of those, the ones it did not answer from its cache
    response_time: float | None = None  # smoothed seconds from a request to its answer's head

    def queried(self, now: float) -> None:
        self.queries += 1
        if self.unanswered_since is None:
            self.unanswered_since = now

    def replied(self, rtt: float, hit: bool) -> None:
        self.replies += 1
        self.hits += hit
        self.unanswered_since = None
        if self.down_until != float("inf"):
            self.down_until = 0.0  # it answers: worth trying over TCP again
        self.rtt = rtt if self.rtt is None else self.rtt + _GAIN * (rtt - self.rtt)

    def used(self) -> None:
        self.uses += 1

    def answered(self, seconds: float) -> None:
        """A request sent to it got its answer's head ``seconds`` after it was sent."""
        old = self.response_time
        self.response_time = seconds if old is None else old + _GAIN * (seconds - old)

    def digest_answered(self, hit: bool) -> None:
        self.digest_hits += 1
        self.digest_false_hits += not hit

    def timed_out(self) -> None:
        self.timeouts += 1

    def connect_failed(self, now: float) -> None:
        self.connect_failures += 1
        self.down_until = now + self.retry_after

    def drop(self) -> None:
        """Down for good (an operator's decision; a reload makes a new record)."""
        self.down_until = float("inf")

    def dead(self, now: float) -> bool:
        since = self.unanswered_since
        return since is not None and now - since >= self.dead_after

    def down(self, now: float) -> bool:
        return now < self.down_until

    def state(self, now: float) -> str:
        """``alive``, ``dead`` (ICP silent) or ``down`` (TCP refused)."""
        if self.down(now):
            return "down"
        return "dead" if self.dead(now) else "alive"
