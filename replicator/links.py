"""What this member knows of its links to the others: smoothed round-trip time and throughput,
and the cost the topology minimises. Pure: the driver times the probes and passes ``now``.

A member probes each other member with a small request (round-trip time) and a larger
transfer (throughput: its bytes over its time less one round trip). Each is smoothed with an
exponentially weighted moving average, as TCP smooths its RTT (RFC 6298 uses 1/8; probes are
rarer than segments, so a new sample weighs ``ALPHA``). A link's cost is the time to move a
typical update across it: ``rtt + typical_bytes / throughput``, in seconds. A link whose
probes fail costs ``FAILED_COST`` until one succeeds again, so the topology routes round it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ALPHA: Final = 0.3
FAILED_COST: Final = 1000.0
# A transfer that took no longer than its round trip says only that throughput is high.
_MIN_TRANSFER_SECONDS: Final = 1e-4


@dataclass(slots=True)
class Link:
    """One link's smoothed measurements (None until measured)."""

    rtt: float | None = None
    throughput: float | None = None  # bytes per second
    failed: bool = False
    measured_at: float | None = None

    def __repr__(self) -> str:
        rtt = "?" if self.rtt is None else f"{self.rtt * 1000:.1f} ms"
        rate = "?" if self.throughput is None else f"{self.throughput / 1e6:.2f} MB/s"
        return f"Link(rtt {rtt}, {rate}{', failed' if self.failed else ''})"

    def observe_rtt(self, seconds: float, now: float) -> None:
        self.rtt = _smoothed(self.rtt, max(seconds, 0.0))
        self.failed = False
        self.measured_at = now

    def observe_transfer(self, nbytes: int, seconds: float, now: float) -> None:
        """A transfer of ``nbytes`` that took ``seconds`` from request to last byte."""
        moving = max(seconds - (self.rtt or 0.0), _MIN_TRANSFER_SECONDS)
        self.throughput = _smoothed(self.throughput, nbytes / moving)
        self.failed = False
        self.measured_at = now

    def observe_failure(self, now: float) -> None:
        self.failed = True
        self.measured_at = now

    def cost(self, typical_bytes: int) -> float | None:
        """Seconds to move ``typical_bytes`` across the link; None while unmeasured."""
        if self.failed:
            return FAILED_COST
        if self.rtt is None:
            return None
        if self.throughput is None:
            return self.rtt
        if self.throughput <= 0:  # transfers moved nothing: the link cannot carry updates
            return FAILED_COST
        return self.rtt + typical_bytes / self.throughput


def _smoothed(old: float | None, sample: float) -> float:
    return sample if old is None else (1 - ALPHA) * old + ALPHA * sample


class Links:
    """This member's links, by the id of the member at the other end."""

    def __init__(self) -> None:
        self._links: dict[str, Link] = {}

    def __repr__(self) -> str:
        return f"Links({len(self._links)} members)"

    def link(self, member: str) -> Link:
        return self._links.setdefault(member, Link())

    def forget(self, member: str) -> None:
        self._links.pop(member, None)

    def costs(self, typical_bytes: int) -> dict[str, float]:
        """The cost of every measured link, by member."""
        found = {member: link.cost(typical_bytes) for member, link in self._links.items()}
        return {member: cost for member, cost in sorted(found.items()) if cost is not None}

    def snapshot(self) -> dict[str, Link]:
        return dict(self._links)
