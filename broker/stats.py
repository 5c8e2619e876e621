"""What the running broker reports, as plain values made when asked (a scrape, the status and
statistics routes): ``metrics`` and the API read these, never the components themselves.

The registry reports its own (``RegistryStats``, broker/registry/database.py) and the
scheduler its collections' (``CollectionStatus``, broker/scheduler.py); ``Broker.stats``
gathers them with the index's state and the garbage collections into a ``BrokerStats``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker.federation import SummaryStats
from broker.registry import RegistryStats
from broker.scheduler import CollectionStatus


@dataclass(frozen=True, slots=True)
class IndexStats:
    """The index: the objects it holds, whether searches are answered (and if not why, in
    words), and while a new one is filled, (objects added, of how many)."""

    documents: int
    ready: bool
    state: str
    filling: tuple[int, int] | None


@dataclass(frozen=True, slots=True)
class GcStats:
    """Garbage collections run (periodic and asked for), failed, and when the last ended."""

    runs: int
    failures: int
    last: float | None


@dataclass(frozen=True, slots=True)
class BrokerStats:
    """Everything the broker reports at one moment. ``pulls``: the scheduled collections by
    name (none while the broker starts: the web server is up before the scheduler);
    ``summary``: the content summary it registers (None: it registers at no HSR)."""

    started: float  # epoch seconds
    version: str
    registry: RegistryStats
    index: IndexStats
    pulls: Mapping[str, CollectionStatus]
    gc: GcStats
    summary: SummaryStats | None = None
