"""The running broker as its HTTP layer sees it (``Services``: broker.app.Broker is it), and
the two values the layer shares with it: the settings administrators change, and the signal
that the registry changed.

The HTTP layer (broker/api/, broker/web.py, broker/hsr.py, broker/replica_api.py) is handed
a ``Services`` and imports no driver: the broker builds its web application from itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from broker.config import CollectionConfig, Config
from broker.facets import FacetName, Facets
from broker.federation import FederatedPage
from broker.registry import Registry
from broker.scheduler import Scheduler
from broker.search import Page
from broker.stats import BrokerStats
from broker.sync import Reconciled


@dataclass(slots=True)
class Settings:
    """What administrators may change while the broker runs."""

    default_ttl: float
    collections: dict[str, CollectionConfig] = field(default_factory=dict)


class ChangeSignal:
    """Wakes those waiting for the registry to change (replicators' long polls). Take
    ``current()`` before reading the registry, then wait on it: a change in between is not
    missed."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.closed = False

    def current(self) -> asyncio.Event:
        return self._event

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def close(self) -> None:
        """Wake every waiter for good: the broker is stopping (a long poll must not hold its
        web server open until the poll's end)."""
        self.closed = True
        self.notify()


class Services(Protocol):
    """What the HTTP layer uses of a running broker."""

    @property
    def config(self) -> Config: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def changed(self) -> ChangeSignal: ...

    @property
    def scheduler(self) -> Scheduler | None:
        """None while the broker starts: the web server is up before the scheduler."""

    async def search(
        self, text: str, *, limit: int, offset: int = 0, case_sensitive: bool = False
    ) -> Page:
        """A page of results once the index is ready; IndexNotReady before."""

    async def facets(
        self,
        text: str,
        *,
        chosen: Mapping[FacetName, str],
        case_sensitive: bool = False,
        now: float,
    ) -> Facets:
        """The facets of ``text`` narrowed by ``chosen`` (broker/facets.py) once the index is
        ready; IndexNotReady before."""

    async def federated_search(
        self, text: str, *, limit: int, offset: int = 0, case_sensitive: bool = False
    ) -> FederatedPage:
        """The merged page from the brokers the HSR picks (QuerySyntaxError, or
        FederationError when the HSR cannot route it)."""

    async def stats(self) -> BrokerStats:
        """What the broker reports now."""

    async def catch_up(self) -> int:
        """Bring the index up to the registry; how many changes were applied."""

    def catch_up_soon(self) -> None:
        """Bring the index up to the registry in the background."""

    async def collect_garbage(self) -> Reconciled:
        """Remove expired objects and make the index match the registry."""

    async def rebuild_index(self) -> int:
        """Fill the index again from the registry; how many objects it holds."""
