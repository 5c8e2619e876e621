"""One gathering run, assembled: database, fetchers, summarizer pool, archive and resolver
opened from the configuration, manual records synchronized, roots expanded, the crawl run,
expired records removed, the run reported to the database throughout. The CLI and the
tests start gathering through ``gather``."""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path

from gatherer.archive import WarcArchive
from gatherer.config import GathererConfig
from gatherer.crawl import Crawl, Settings
from gatherer.database import GathererDatabase
from gatherer.essence.pool import SummarizerPool
from gatherer.fetch.dispatch import Fetchers, FetchSettings
from gatherer.manual_sync import sync_manual
from gatherer.metrics import RunStats
from gatherer.records import Identity, Lifetimes
from gatherer.reporting import reporting
from gatherer.roots import expand
from harvest_common.dns import DNSConfig, Resolver

DATABASE_NAME = "gatherer.db"
SUMMARIZER = "gatherer.essence.pipeline:summarize"
# Due records re-checked per run beyond what the crawl reaches (bounds one run's extra work).
RECHECK_LIMIT = 100_000


def database_path(config: GathererConfig) -> Path:
    return config.data_directory / DATABASE_NAME


@asynccontextmanager
async def open_database(config: GathererConfig) -> AsyncIterator[GathererDatabase]:
    await asyncio.to_thread(config.data_directory.mkdir, parents=True, exist_ok=True)
    db = await GathererDatabase.open(database_path(config))
    try:
        yield db
    finally:
        await db.close()


def identity(config: GathererConfig) -> Identity:
    # gethostname, not getfqdn: no DNS lookup at start-up; set Gatherer-Host to override.
    return Identity(config.name, config.host or socket.gethostname(), config.port, config.version)


def settings(config: GathererConfig) -> Settings:
    return Settings(
        identity=identity(config),
        lifetimes=Lifetimes(config.time_to_live, config.refresh_rate),
        essence=config.essence_options(),
        user_agent=config.user_agent,
        connections_per_host=config.connections_per_host,
        max_connections=config.max_connections,
    )


def fetch_settings(config: GathererConfig) -> FetchSettings:
    return FetchSettings(
        user_agent=config.user_agent,
        proxy=config.http_proxy,
        https_via_proxy=config.https_via_proxy,
        timeout=config.fetch_timeout,
        connect_timeout=min(10.0, config.fetch_timeout),
        max_bytes=config.max_document_bytes,
        max_redirects=config.max_redirects,
        ftp_logins={host: (user, password) for host, user, password in config.ftp_logins},
        connections_per_host=config.connections_per_host,
        max_connections=config.max_connections,
    )


async def gather(
    config: GathererConfig,
    stats: RunStats | None = None,
    *,
    summarizer: str = SUMMARIZER,
    refresh: bool = False,
) -> RunStats:
    """Run one gathering pass over the configuration's roots and leaves; ``summarizer`` is the
    "module:function" the worker processes run on each document. With ``refresh`` every
    stored record is checked again now, not only those due (so that a changed
    ``Refresh-Rate`` or a changed site is taken up at once)."""
    stats = stats if stats is not None else RunStats()
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config))
        await stack.enter_async_context(reporting(db, stats))
        fetchers = await stack.enter_async_context(Fetchers(fetch_settings(config)))
        pool = await stack.enter_async_context(
            SummarizerPool(
                workers=config.summarizer_workers,
                timeout=config.summarizer_timeout,
                memory_mb=config.summarizer_memory_mb,
                target=summarizer,
            )
        )
        archive = None
        if config.archive_directory is not None:
            archive = await stack.enter_async_context(
                WarcArchive(
                    config.archive_directory,
                    rotate_bytes=config.archive_rotate_bytes,
                    software=config.version,
                )
            )
        resolver = await Resolver.open(
            DNSConfig(
                nameservers=config.dns_servers,
                hosts_file=config.hosts_file,
                timeout=config.dns_timeout,
            )
        )
        stack.push_async_callback(resolver.close)
        await sync_manual(config, db)
        roots = await expand(config)
        recheck = await db.due(math.inf if refresh else time.time(), RECHECK_LIMIT)
        crawl = Crawl(
            replace(settings(config), refresh_all=refresh),
            db=db,
            fetchers=fetchers,
            pool=pool,
            resolver=resolver,
            archive=archive,
            stats=stats,
        )
        await crawl.run(roots, recheck=recheck)
        stats.deleted += len(await db.expire(time.time()))
    return stats
