"""Whole gathering runs: the test site crawled through a running Harvest cache, the records
checked in the database and in the export stream, and a second run that re-gathers."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gatherer.config import GathererConfig, load
from gatherer.export import export
from gatherer.metrics import RunStats
from gatherer.runner import gather, open_database
from harvest_cache.server.app import CacheServer
from harvest_common.soif import Delete, Record, Refresh, decode
from tests.gatherer.site import Site, page, standard_site

MakeCache = Callable[..., Awaitable[CacheServer]]


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    s = standard_site()
    await s.start()
    yield s
    await s.stop()


async def write_config(
    tmp_path: Path,
    root: str,
    *,
    proxy: str | None = None,
    options: str = "",
    headers: str = "",
    leaves: tuple[str, ...] = (),
) -> GathererConfig:
    hosts = tmp_path / "hosts"
    # Another host (an address nothing listens on): Host=1 keeps the crawl off it.
    hosts.write_text("127.0.0.2 elsewhere.invalid\n")
    lines = [
        "Gatherer-Name: Test Gatherer",
        "Gatherer-Host: gatherer.test",
        "Access-Delay: 0",
        "Summarizer-Workers: 2",
        "Max-Document-Size: 1000000",
        "Fetch-Timeout: 5",
        # Nothing may leave loopback: names come from the hosts file, and a lookup of any
        # other name goes to a closed loopback port and fails.
        "DNS-Servers: 127.0.0.1:9",
        "DNS-Timeout: 0.5",
        f"Hosts-File: {hosts}",
    ]
    if proxy is not None:
        lines.append(f"HTTP-Proxy: {proxy}")
    lines += [line for line in headers.splitlines() if line]
    lines += ["<RootNodes>", f"{root} {options}".strip(), "</RootNodes>"]
    if leaves:
        lines += ["<LeafNodes>", *leaves, "</LeafNodes>"]
    path = tmp_path / "gatherer.cf"
    path.write_text("\n".join(lines) + "\n")
    return await asyncio.to_thread(load, path)


async def records(config: GathererConfig) -> dict[str, Record]:
    async with open_database(config) as db:
        return {url: stored.record for url in await db.urls() if (stored := await db.get(url))}


async def exported(config: GathererConfig, since: float | None) -> list[object]:
    async with open_database(config) as db:
        body = b"".join([chunk async for chunk in export(db, since)])
    return list(decode(body))


async def test_site_is_gathered_through_the_cache(
    tmp_path: Path, site: Site, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    config = await write_config(
        tmp_path, site.url("/"), proxy=f"127.0.0.1:{cache.address[1]}", options="URL=100"
    )
    stats = await gather(config)

    got = await records(config)
    expected = {
        site.url(p)
        for p in (
            "/",
            "/a.html",
            "/b.html",
            "/docs/",
            "/docs/c.html",
            "/docs/d.html",
            "/docs/deep/e.html",
            "/a2.html",
            "/bad.html",
            "/tool.bin",
            "/pkg.tar.gz",
            "/paper.pdf",
            "/slow.html",
        )
    }
    assert set(got) == expected
    # Every request reached the origin through the cache.
    assert site.hits
    assert all("test-cache" in hit.headers.get("Via", "") for hit in site.hits)
    assert site.paths().count("/robots.txt") == 1
    # robots.txt, the default URL filter and Host=1 kept these out without a fetch.
    assert "/private/secret.html" not in site.paths()
    assert "/logo.gif" not in site.paths()
    assert stats.robots_denied == 1
    assert stats.fetch_errors["status"] == 1  # /missing.html
    assert stats.fetch_errors["too_large"] == 1  # /huge.html: 20 MiB, Max-Document-Size 1 MB
    assert stats.admissions["host_max"] == 1  # elsewhere.invalid
    assert stats.stored == len(expected)


async def test_records_carry_harvest_attributes_and_summaries(
    tmp_path: Path, site: Site, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    config = await write_config(
        tmp_path, site.url("/"), proxy=f"127.0.0.1:{cache.address[1]}", options="URL=100"
    )
    await gather(config)
    got = await records(config)

    front = got[site.url("/")]
    assert front.text("Type") == "HTML"
    assert front.text("Title") == "Harvest test site"
    assert front.text("Description") == "The front page"
    assert front.text("Gatherer-Name") == "Test Gatherer"
    assert front.text("Gatherer-Host") == "gatherer.test"
    assert front.text("Gatherer-Port") == "8500"
    assert front.text("Time-to-Live") == "2592000"
    assert front.text("Refresh-Rate") == "604800"
    body = site.documents["/"][1]
    assert front.text("File-Size") == str(len(body))
    assert front.text("MD5") == hashlib.md5(body, usedforsecurity=False).hexdigest()
    assert float(front.text("Update-Time") or 0) > time.time() - 60
    assert front.text("Last-Modification-Time") == "1793613600"  # 2026-11-02 10:00 GMT
    references = (front.text("URL-References") or "").splitlines()
    assert site.url("/a.html") in references

    assert got[site.url("/paper.pdf")].text("Type") == "PDF"
    assert got[site.url("/paper.pdf")].text("Title") == "Hierarchical Object Caches"
    assert got[site.url("/paper.pdf")].text("Author") == "Chankhunthod"
    assert got[site.url("/tool.bin")].text("Type") == "Binary"
    assert "harvest_binary_marker_string" in (got[site.url("/tool.bin")].text("Strings") or "")
    assert got[site.url("/bad.html")].text("Title") == "Broken page"
    archive = got[site.url("/pkg.tar.gz")]
    assert archive.text("Type") == "GNUCompressed"
    members = {archive.text(f"Embed{n}-Member"): archive.text(f"Embed{n}-Type") for n in (1, 2, 3)}
    assert members.get("pkg/README") == "README"
    assert members.get("pkg/main.c") == "C"
    functions = [archive.text(f"Embed{n}-Functions") for n in (1, 2, 3)]
    assert "gather_all" in functions
    assert got[site.url("/a2.html")].text("Title") == "Moved page"


async def test_regathering_skips_unchanged_and_emits_changes(
    tmp_path: Path, site: Site, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    proxy = f"127.0.0.1:{cache.address[1]}"
    # Refresh-Rate 1 s: everything is due again on the second run.
    config = await write_config(
        tmp_path, site.url("/"), proxy=proxy, options="URL=100", headers="Refresh-Rate: 1"
    )
    await gather(config)
    async with open_database(config) as db:
        first = await db.stats()
    mark = first.last_update
    await asyncio.sleep(1.1)

    site.documents["/b.html"] = ("text/html", page("Page B, revised", "Now about registries."))
    del site.documents["/docs/d.html"]
    site.documents["/docs/"] = ("text/html", page("Documents", "Index.", links=("c.html",)))
    site.hits.clear()
    stats = await gather(config)

    # Unchanged pages were asked for conditionally and not summarized again.
    conditional = [h for h in site.hits if h.headers.get("If-None-Match")]
    assert len(conditional) >= 8
    assert stats.not_modified >= 8
    assert stats.summarized == 2  # /b.html and /docs/ changed
    got = await records(config)
    assert got[site.url("/b.html")].text("Title") == "Page B, revised"
    assert site.url("/docs/d.html") not in got

    items = await exported(config, mark)
    plain = {item.url for item in items if isinstance(item, Record)}
    deleted = {item.record.url for item in items if isinstance(item, Delete)}
    refreshed = {item.record.url for item in items if isinstance(item, Refresh)}
    assert plain == {site.url("/b.html"), site.url("/docs/")}
    assert deleted == {site.url("/docs/d.html")}
    assert site.url("/a.html") in refreshed


async def test_url_max_caps_the_urls_generated(tmp_path: Path, site: Site) -> None:
    config = await write_config(tmp_path, site.url("/"), options="URL=5")
    stats = await gather(config)
    # The root and its first four links, breadth-first; the redirect /old.html is followed
    # within its own job.
    fetched = set(site.paths()) - {"/robots.txt"}
    assert fetched == {"/", "/a.html", "/b.html", "/docs/", "/old.html", "/a2.html"}
    assert stats.admissions["url_max"] > 0


async def test_depth_one_gathers_the_root_and_its_links_only(tmp_path: Path, site: Site) -> None:
    config = await write_config(tmp_path, site.url("/"), options="Depth=1 URL=100")
    stats = await gather(config)
    got = await records(config)
    assert site.url("/docs/") in got
    assert site.url("/docs/c.html") not in got
    assert "/docs/c.html" not in site.paths()
    assert stats.admissions["depth"] > 0


async def test_politeness_delay_between_contacts(tmp_path: Path, site: Site) -> None:
    config = await write_config(tmp_path, site.url("/"), options="URL=6 Delay=0.3")
    await gather(config)
    # A visit is one job: robots.txt before it and a redirect's next hop within it are part
    # of the visit; Delay= separates visits.
    times = [hit.at for hit in site.hits if hit.path not in ("/robots.txt", "/a2.html")]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) >= 5
    assert min(gaps) >= 0.28


async def test_a_hanging_summarizer_is_killed_and_the_crawl_goes_on(
    tmp_path: Path, site: Site
) -> None:
    config = await write_config(
        tmp_path,
        site.url("/"),
        options="URL=100",
        headers="Summarizer-Timeout: 1",
    )
    stats = RunStats()
    await gather(config, stats, summarizer="tests.gatherer.hang_target:summarize")
    assert stats.summarize_errors["timeout"] == 1
    got = await records(config)
    assert site.url("/bad.html") not in got
    assert site.url("/docs/deep/e.html") in got
    assert (site.url("/bad.html"), "summarizing: timeout after 1.0 s") in stats.failures


async def test_a_rerun_with_refresh_checks_every_record_now(tmp_path: Path, site: Site) -> None:
    """``refresh``: every stored record is asked for again (conditionally), due or not."""
    config = await write_config(tmp_path, site.url("/"), options="URL=100")
    first = await gather(config)
    async with open_database(config) as db:
        stored = set(await db.due(float("inf"), 1000))
    site.hits.clear()
    again = await gather(config, refresh=True)
    assert again.fresh == 0
    assert len(stored) == first.stored
    assert {site.url(path) for path in site.paths()} >= stored
    assert again.fetched + again.not_modified >= len(stored)
    assert again.summarized == 0  # nothing changed


async def test_a_rerun_before_the_refresh_rate_contacts_no_server(
    tmp_path: Path, site: Site
) -> None:
    config = await write_config(tmp_path, site.url("/"), options="URL=100")
    first = await gather(config)
    site.hits.clear()
    again = await gather(config)
    # Every record is re-enumerated from its stored links without a request; only the URLs
    # that left no record (a 404, a redirect's first hop; the page too large, cut off again,
    # is not logged by the site) are asked again, after robots.txt.
    assert sorted(site.paths()) == ["/a2.html", "/missing.html", "/old.html", "/robots.txt"]
    assert again.fresh == first.stored - 1  # /a2.html came through /old.html again
    # /a2.html, reached through /old.html, is fetched again and found unchanged by its MD5.
    assert again.fetched == 1
    assert again.unchanged == 1
    assert again.summarized == 0
