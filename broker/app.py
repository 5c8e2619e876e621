"""A running broker: the registry and index opened from the configuration, collections pulled
on their schedules into the registry and from there into the index, garbage collected
periodically, and the HTTP API and search page served. With ``[hsr] url`` set it keeps a
summary of its content current and stays registered at the HSR with it; it answers federated
searches by asking the brokers the HSR picks.

Everything long-lived is owned by one exit stack; ``stop`` (or leaving ``async with``) ends the
registration, the summary, federated searches, the scheduler, the collector, the web server,
the index and the registry, in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from broker.api import make_app
from broker.collector import Collector, PullResult
from broker.config import INDEX_DIR, REGISTRY_FILE, Config
from broker.errors import BrokerError, IndexNotReady
from broker.facets import FacetCounter, FacetName, Facets
from broker.federation import FederatedPage, Federation, SummaryKeeper
from broker.hsr import COLLECTION as HSR_COLLECTION
from broker.index.tantivy_engine import TantivyIndex
from broker.registry import Registry
from broker.scheduler import Scheduler
from broker.search import Page, Searcher
from broker.services import ChangeSignal, Settings
from broker.stats import BrokerStats, GcStats, IndexStats
from broker.sync import IndexSync, Reconciled
from harvest_common import hsr_client
from harvest_common.lifecycle import Owned
from harvest_common.software import software_version
from harvest_common.tasks import TaskSet, running
from harvest_common.web_site import listening

log = logging.getLogger(__name__)

PROG = "harvest-broker"  # how its registration names the software
# Where a broker listening on every address is reached from its own host.
_LOOPBACK = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}

# A background index catch-up waits until no change came for CATCH_UP_DELAY seconds, or
# CATCH_UP_MAX seconds at most.
CATCH_UP_DELAY = 0.5
CATCH_UP_MAX = 5.0


class Broker(Owned):
    """Start with ``await Broker.start(config)``; ``address`` is where it listens. Its web
    application sees it as ``Services`` (broker/services.py)."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.settings = Settings(config.broker.default_ttl, {c.name: c for c in config.collections})
        self.started = time.time()
        self.registry: Registry
        self.index: TantivyIndex
        self.sync: IndexSync
        self.searcher: Searcher
        self.facet_counter: FacetCounter
        self.scheduler: Scheduler | None = None  # made after the web server is up
        self.summaries: SummaryKeeper | None = None  # kept when registered at an HSR
        self.federation = Federation(config.federation, config.broker, self._hsr_url)
        self.address: tuple[str, int] = ("", 0)
        self._changes = asyncio.Lock()  # one writer of the index at a time
        # Set once the index holds the registry's objects (at once, unless it is new).
        self.index_ready = asyncio.Event()
        self._index_failure: str | None = None
        self.changed = ChangeSignal()
        self._background = TaskSet()
        self._catching_up: asyncio.Task[Any] | None = None
        self._catch_up_again = False
        # Garbage collections run (periodic and asked for), failed, and when the last ended.
        self.gc_runs = 0
        self.gc_failures = 0
        self.gc_last: float | None = None

    @property
    def member(self) -> str:
        """This broker's id among replicas: configured, or its host name and listen port."""
        settings = self.config.broker
        return settings.member or f"{socket.gethostname()}:{settings.listen.port}"

    @property
    def url(self) -> str:
        """Where this broker answers, from its own host."""
        host, port = self.address
        host = _LOOPBACK.get(host, host)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def _hsr_url(self) -> str:
        """The HSR that routes federated searches: configured, or this broker."""
        return self.config.federation.hsr or self.config.hsr.url or self.url

    @classmethod
    async def start(cls, config: Config) -> Broker:
        return await cls(config)._opened()

    async def stop(self) -> None:
        self.changed.close()
        await super().stop()

    async def _open(self) -> None:
        directory = self.config.broker.data_dir
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
        stack = self._stack
        self.registry = await stack.enter_async_context(
            await Registry.open(directory / REGISTRY_FILE, member=self.member)
        )
        self.index = await stack.enter_async_context(await TantivyIndex.open(directory / INDEX_DIR))
        self.sync = IndexSync(self.registry, self.index)
        self.searcher = Searcher(self.registry, self.index)
        self.facet_counter = FacetCounter(
            self.registry, self.index, changed=self.changed.current, excluding=HSR_COLLECTION
        )
        await stack.enter_async_context(self.federation)
        if not self.index.unfilled or not await self.registry.count():
            # Before answering: the backlog a crash may have left (a new index of an empty
            # registry has nothing to fill).
            await self.sync.after_opening()
            self.index_ready.set()
        listen = self.config.broker.listen
        self.address = await stack.enter_async_context(
            listening(make_app(self), listen.host, listen.port)
        )
        stack.push_async_callback(self._background.cancel)
        if not self.index_ready.is_set():
            # A new index (there was none, or one of another layout) is filled while the
            # broker serves what comes from the registry (objects, bulk exports, replicas);
            # searches are refused until then (IndexNotReady), not answered from a part.
            self._background.spawn(self._fill_index(), "index fill")
        collector = await stack.enter_async_context(Collector(self.config.broker, self.registry))
        self.scheduler = await stack.enter_async_context(
            Scheduler(collector, self.config.collections, self._pulled)
        )
        await stack.enter_async_context(self._collecting_garbage())
        if self.config.hsr.url is not None:
            await self._register(stack)
        log.info("broker %s listening on %s:%d", self.config.broker.name, *self.address)

    async def _register(self, stack: contextlib.AsyncExitStack) -> None:
        """Keep the content summary current, and the broker registered at its HSR with it."""
        federation = self.config.federation
        self.summaries = SummaryKeeper(
            self.registry,
            self.changed,
            delay=federation.summary_delay,
            sample=federation.summary_sample,
            excluded=HSR_COLLECTION,
        )
        await stack.enter_async_context(self.summaries.keeping())
        version = f"{PROG} {await asyncio.to_thread(software_version)}"
        await stack.enter_async_context(
            hsr_client.registered(
                self.config.hsr,
                "broker",
                self.config.broker.name,
                self.address,
                version,
                live=self.summaries,
            )
        )

    async def _pulled(self, result: PullResult) -> None:
        await self.catch_up()

    async def _fill_index(self) -> None:
        try:
            async with self._changes:
                await self.sync.after_opening()
        except BrokerError as error:
            self._index_failure = str(error)
            log.error("filling the new index failed (POST /api/admin/rebuild retries): %s", error)
            return
        self.index_ready.set()

    async def search(
        self, text: str, *, limit: int, offset: int = 0, case_sensitive: bool = False
    ) -> Page:
        """``Searcher.search`` once the index is ready; IndexNotReady before."""
        if not self.index_ready.is_set():
            raise IndexNotReady(self.index_state())
        return await self.searcher.search(
            text, limit=limit, offset=offset, case_sensitive=case_sensitive
        )

    async def facets(
        self,
        text: str,
        *,
        chosen: Mapping[FacetName, str],
        case_sensitive: bool = False,
        now: float,
    ) -> Facets:
        """``FacetCounter.count`` once the index is ready; IndexNotReady before."""
        if not self.index_ready.is_set():
            raise IndexNotReady(self.index_state())
        return await self.facet_counter.count(
            text, chosen=chosen, case_sensitive=case_sensitive, now=now
        )

    async def federated_search(
        self, text: str, *, limit: int, offset: int = 0, case_sensitive: bool = False
    ) -> FederatedPage:
        """``Federation.search``: the merged page from the brokers the HSR picks."""
        return await self.federation.search(
            text, limit=limit, offset=offset, case_sensitive=case_sensitive
        )

    def index_state(self) -> str:
        """Whether searches are answered, and if not why, in words."""
        if self.index_ready.is_set():
            return "ready"
        if self._index_failure is not None:
            return (
                f"the index could not be filled from the registry ({self._index_failure}); "
                "an administrator can retry with POST /api/admin/rebuild"
            )
        filling = "the index is being filled from the registry"
        if self.sync.filling is None:  # the registry's objects are being listed
            return filling
        added, total = self.sync.filling
        return f"{filling}: {added:,} of {total:,} objects"

    async def stats(self) -> BrokerStats:
        """What the broker reports now (for the status routes and metrics)."""
        statuses = self.scheduler.status() if self.scheduler is not None else {}
        return BrokerStats(
            started=self.started,
            version=software_version(),
            registry=await self.registry.stats(),
            index=IndexStats(
                documents=await self.index.count(),
                ready=self.index_ready.is_set(),
                state=self.index_state(),
                filling=self.sync.filling,
            ),
            pulls=statuses,
            gc=GcStats(self.gc_runs, self.gc_failures, self.gc_last),
            summary=None if self.summaries is None else self.summaries.stats(),
        )

    async def catch_up(self) -> int:
        """Bring the index up to the registry: after a pull, or a change made outside the
        scheduler (an HSR registration). Returns how many changes were applied."""
        async with self._changes:
            try:
                return await self.sync.catch_up()
            finally:
                self.changed.notify()

    def catch_up_soon(self) -> None:
        """Bring the index up to the registry in the background, once for any number of
        calls made meanwhile: a replica applies batch after batch without waiting for the
        index to commit each."""
        if self._catching_up is not None and not self._catching_up.done():
            self._catch_up_again = True
            return
        self._catching_up = self._background.spawn(self._catch_up_while_asked(), "index catch-up")

    async def _catch_up_while_asked(self) -> None:
        while True:
            # Batches that keep arriving are indexed together once they pause (or after
            # CATCH_UP_MAX): one index commit for many, each a segment flush, and a replica's
            # repair does not share the CPU with the index while it runs.
            waited = 0.0
            self._catch_up_again = True
            while self._catch_up_again and waited < CATCH_UP_MAX:
                self._catch_up_again = False
                await asyncio.sleep(CATCH_UP_DELAY)
                waited += CATCH_UP_DELAY
            self._catch_up_again = False
            try:
                await self.catch_up()
            except BrokerError as error:
                log.error("index catch-up failed (the next change retries): %s", error)
            if not self._catch_up_again:
                return

    async def collect_garbage(self) -> Reconciled:
        """Remove expired objects and make the index match the registry."""
        try:
            async with self._changes:
                expired = await self.registry.expire(time.time())
                self.changed.notify()
                reconciled = await self.sync.reconcile()
        except BrokerError:
            self.gc_failures += 1
            raise
        finally:
            self.gc_runs += 1
            self.gc_last = time.time()
        if expired or reconciled.added or reconciled.removed:
            log.info(
                "garbage collection: %d expired, index %d added %d removed",
                len(expired),
                reconciled.added,
                reconciled.removed,
            )
        return reconciled

    async def rebuild_index(self) -> int:
        """Fill the index again from the registry (and make it searchable if filling a new
        one had failed)."""
        async with self._changes:
            indexed = await self.sync.rebuild()
        self._index_failure = None
        self.index_ready.set()
        return indexed

    @contextlib.asynccontextmanager
    async def _collecting_garbage(self) -> AsyncIterator[None]:
        async def loop() -> None:
            while True:
                await asyncio.sleep(self.config.broker.gc_period)
                try:
                    await self.collect_garbage()
                except BrokerError as error:
                    # One failure (a busy disk) must not end garbage collection for good.
                    log.error("garbage collection failed: %s", error)

        async with running(loop(), "broker garbage collection"):
            yield
