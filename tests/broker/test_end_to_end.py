"""Harvest end to end: a gatherer crawls a loopback site through a running cache, a broker
collects its records incrementally and answers queries, follows a changed and a removed page,
a second broker collects a filtered view of the first, and expired objects vanish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.app import Broker
from broker.search import Page
from gatherer.config import GathererConfig
from gatherer.runner import gather, open_database
from gatherer.service import serve
from tests.broker.test_api import pulled, running
from tests.gatherer.site import Site, page, standard_site
from tests.gatherer.test_gather import MakeCache, write_config


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    s = standard_site()
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
async def gathered(tmp_path: Path, site: Site, make_cache: MakeCache) -> GathererConfig:
    """The test site gathered once through a harvest cache (Refresh-Rate 1 s: due again)."""
    cache = await make_cache()
    config = await write_config(
        tmp_path,
        site.url("/"),
        proxy=f"127.0.0.1:{cache.address[1]}",
        options="URL=100",
        headers="Refresh-Rate: 1",
    )
    await gather(config)
    return config


@pytest.fixture
async def gatherd(gathered: GathererConfig) -> AsyncIterator[str]:
    """The gatherer's export service; its base URL."""
    async with open_database(gathered) as db, serve(db, "127.0.0.1", 0, "test") as port:
        yield f"http://127.0.0.1:{port}"


# The pages titled "... page": Page A to Page E, and the moved, slow and broken pages.
PAGES = (
    "/a.html",
    "/b.html",
    "/docs/c.html",
    "/docs/d.html",
    "/docs/deep/e.html",
    "/a2.html",
    "/slow.html",
    "/bad.html",
)


def urls(page: Page) -> set[str]:
    return {result.url for result in page.results}


async def search(broker: Broker, query: str) -> Page:
    return await broker.searcher.search(query, limit=100)


async def test_broker_collects_from_a_gatherer_and_follows_its_changes(
    tmp_path: Path, site: Site, gathered: GathererConfig, gatherd: str
) -> None:
    collection = {"name": "site", "source": gatherd, "kind": "gatherer", "interval": 3600}
    async with running(tmp_path / "broker", [collection]) as broker:
        await pulled(broker, "site")
        assert await broker.registry.count() == 13  # every record the gatherer stored
        assert urls(await search(broker, "Title: page")) == {site.url(p) for p in PAGES}
        assert urls(await search(broker, '"alpha page"')) == {site.url("/a.html")}
        assert urls(await search(broker, "Type: PDF AND Author: chankhunthod")) == {
            site.url("/paper.pdf")
        }
        assert urls(await search(broker, "Embed1-Type: README OR Embed2-Type: README")) == {
            site.url("/pkg.tar.gz")
        }
        assert urls(await search(broker, "brokrs~1")) == {site.url("/b.html")}

        # The site changes: a page is rewritten and one removed; the gatherer runs again.
        await asyncio.sleep(1.1)
        site.documents["/b.html"] = ("text/html", page("Page B, revised", "Now on registries."))
        del site.documents["/docs/d.html"]
        site.documents["/docs/"] = ("text/html", page("Documents", "Index.", links=("c.html",)))
        await gather(gathered)

        broker.scheduler.trigger("site")
        await pulled(broker, "site", pulls=2)
        assert urls(await search(broker, "registries")) == {site.url("/b.html")}
        assert urls(await search(broker, "brokers")) == set()
        assert urls(await search(broker, "Title: delta")) == set()
        assert await broker.registry.count() == 12


async def test_a_second_broker_collects_a_filtered_view_of_the_first(
    tmp_path: Path, site: Site, gatherd: str
) -> None:
    first = {"name": "site", "source": gatherd, "kind": "gatherer", "interval": 3600}
    async with running(tmp_path / "first", [first]) as upstream:
        await pulled(upstream, "site")
        host, port = upstream.address
        view = {
            "name": "pages",
            "source": f"http://{host}:{port}",
            "kind": "broker",
            "interval": 3600,
            "query": "Type: HTML AND Title: page",
        }
        async with running(tmp_path / "second", [view]) as downstream:
            await pulled(downstream, "pages")
            oids = sorted(await downstream.registry.oids())
            got = {stored.url for stored in (await downstream.registry.get_many(oids)).values()}
            assert got == {site.url(p) for p in PAGES}
            assert urls(await search(downstream, "Title: page AND epsilon")) == {
                site.url("/docs/deep/e.html")
            }


async def test_expired_objects_vanish(tmp_path: Path, site: Site, make_cache: MakeCache) -> None:
    cache = await make_cache()
    # The gatherer's records say Time-to-Live: 2 s; the broker honours it.
    config = await write_config(
        tmp_path,
        site.url("/"),
        proxy=f"127.0.0.1:{cache.address[1]}",
        options="URL=3",
        headers="Time-To-Live: 2",
    )
    await gather(config)
    async with open_database(config) as db, serve(db, "127.0.0.1", 0, "test") as port:
        source = {"name": "site", "source": f"http://127.0.0.1:{port}", "interval": 3600}
        async with running(tmp_path / "broker", [source]) as broker:
            await pulled(broker, "site")
            assert len((await search(broker, "page OR harvest")).results) == 3
            await asyncio.sleep(2.2)
            await broker.collect_garbage()
            assert await broker.registry.count() == 0
            assert (await search(broker, "page OR harvest")).results == ()
