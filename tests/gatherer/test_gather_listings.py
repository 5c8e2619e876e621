"""Sitemaps and feeds through whole gathering runs over a local site: robots.txt's Sitemap:
line leading through a sitemap index to two sitemaps (one gzipped) and their pages, through
the cache; RSS and Atom feeds as roots; re-gathers guided by lastmod and entry dates;
malformed, hostile and mistaken listings counted and survived; a feed as a LeafNode."""

from __future__ import annotations

import asyncio
import email.utils
import gzip
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gatherer.metrics import counts
from gatherer.runner import gather
from tests.gatherer.site import Site, feed, page, sitemap
from tests.gatherer.test_gather import MakeCache, records, write_config
from tests.gatherer.test_gather_features import configure

HTML = "text/html; charset=utf-8"
XML = "application/xml"
DAY = 86_400.0


def w3c(seconds: float) -> str:
    """A W3C Datetime with microseconds, as a sitemap's lastmod or an Atom date."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def rfc822(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    """A front page linking one page; four more pages that only sitemaps list; robots.txt
    names a sitemap index of two sitemaps, the second gzipped."""
    s = Site()
    await s.start()
    docs = s.documents
    docs["/"] = (HTML, page("Front", "Links to A only.", links=("/a.html",)))
    docs["/a.html"] = (HTML, page("A", "Linked from the front page.", links=("/",)))
    for n in range(1, 5):
        docs[f"/p{n}.html"] = (HTML, page(f"Listed {n}", "Only a sitemap lists me."))
    docs["/robots.txt"] = (
        "text/plain",
        f"User-agent: *\nDisallow: /private/\nSitemap: {s.url('/sitemap_index.xml')}\n".encode(),
    )
    old = w3c(time.time() - 10 * DAY)
    docs["/sitemap_index.xml"] = (
        XML,
        sitemap([(s.url("/maps/pages.xml"), old), (s.url("/maps/more.xml.gz"), old)], index=True),
    )
    docs["/maps/pages.xml"] = (
        XML,
        sitemap(
            [
                (s.url("/p1.html"), old),
                (s.url("/p2.html"), old),
                (s.url("/a.html"), None),  # linked too: gathered once
                (s.url("/private/hidden.html"), None),  # robots.txt says no
                (s.url("/photo.jpg"), None),  # the default URL filter says no
                ("http://elsewhere.invalid/", None),  # Host=1 says no
            ]
        ),
    )
    docs["/maps/more.xml.gz"] = (
        "application/x-gzip",
        gzip.compress(sitemap([(s.url("/p3.html"), old), (s.url("/p4.html"), None)])),
    )
    docs["/private/hidden.html"] = (HTML, page("Hidden", "Robots keep me out."))
    yield s
    await s.stop()


PAGES = ("/", "/a.html", "/p1.html", "/p2.html", "/p3.html", "/p4.html")
SITEMAPS = ("/sitemap_index.xml", "/maps/pages.xml", "/maps/more.xml.gz")


async def test_robots_sitemap_index_leads_to_the_listed_pages_through_the_cache(
    tmp_path: Path, site: Site, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    config = await write_config(
        tmp_path,
        site.url("/"),
        proxy=f"127.0.0.1:{cache.address[1]}",
        # Depth=1: an index and its sitemaps stand at the root's depth, their pages one
        # step down.
        options="Sitemaps=yes Depth=1 URL=100",
    )
    stats = await gather(config)
    # Sitemaps are enumerated, not records.
    assert set(await records(config)) == {site.url(path) for path in PAGES}
    for path in SITEMAPS:
        assert site.paths().count(path) == 1
    assert stats.listings == 3
    assert not stats.listing_errors
    # Each was fetched through the cache, like every other request.
    assert all("test-cache" in hit.headers.get("Via", "") for hit in site.hits)
    # The same scope rules as links: robots.txt, the URL filter, Host=, one visit per URL.
    assert "/private/hidden.html" not in site.paths()
    assert stats.robots_denied == 1
    assert stats.admissions["url_filter"] == 1
    assert stats.admissions["host_max"] == 1
    assert site.paths().count("/a.html") == 1
    assert stats.admissions["duplicate"] >= 1


async def test_a_long_sitemap_is_offered_until_url_max_is_used_up(
    tmp_path: Path, site: Site
) -> None:
    listed = [(site.url(f"/n/{n}.html"), None) for n in range(3000)]
    site.documents["/big.xml.gz"] = ("application/gzip", gzip.compress(sitemap(listed)))
    for n in range(10):
        site.documents[f"/n/{n}.html"] = (HTML, page(f"N{n}", "Listed early."))
    config = await write_config(tmp_path, site.url("/big.xml.gz"), options="URL=10")
    stats = await gather(config)
    # The sitemap itself counts toward URL=: nine of its pages, in the sitemap's order.
    assert set(await records(config)) == {site.url(f"/n/{n}.html") for n in range(9)}
    assert stats.admissions["accepted"] == 9
    assert stats.admissions["url_max"] == 3000 - 9


async def test_without_sitemaps_yes_robots_sitemaps_are_not_used(
    tmp_path: Path, site: Site
) -> None:
    config = await write_config(tmp_path, site.url("/"), options="Depth=1")
    stats = await gather(config)
    assert set(await records(config)) == {site.url("/"), site.url("/a.html")}
    assert not set(SITEMAPS) & set(site.paths())
    assert stats.listings == 0


async def test_lastmod_guides_regathering(tmp_path: Path, site: Site) -> None:
    config = await write_config(tmp_path, site.url("/"), options="Sitemaps=yes URL=100")
    first = await gather(config)
    assert first.stored == len(PAGES)

    # p2 changes, and the sitemap that lists it says so, as does the index for that sitemap;
    # the gzipped sitemap is dated as before. No record is due (Refresh-Rate is a week).
    site.documents["/p2.html"] = (HTML, page("Listed 2, revised", "Changed since."))
    changed = w3c(time.time())
    pages = site.documents["/maps/pages.xml"][1]
    old = pages.split(b"<lastmod>")[1].split(b"</lastmod>")[0].decode()
    site.documents["/maps/pages.xml"] = (
        XML,
        sitemap([(site.url("/p1.html"), old), (site.url("/p2.html"), changed)]),
    )
    site.documents["/sitemap_index.xml"] = (
        XML,
        sitemap(
            [(site.url("/maps/pages.xml"), changed), (site.url("/maps/more.xml.gz"), old)],
            index=True,
        ),
    )
    site.hits.clear()
    second = await gather(config)
    # Only what changed: the index (asked conditionally), the sitemap it dates after its last
    # check, and the page that sitemap dates after its record's last check.
    assert sorted(site.paths()) == [
        "/maps/pages.xml",
        "/p2.html",
        "/robots.txt",
        "/sitemap_index.xml",
    ]
    assert site.hits[site.paths().index("/sitemap_index.xml")].headers.get("If-None-Match")
    assert second.listed_changed == 1
    assert second.summarized == 1
    assert second.listings == 3  # the gzipped sitemap as stored
    assert (await records(config))[site.url("/p2.html")].text("Title") == "Listed 2, revised"

    # Nothing changed since: the index is unchanged (304), and nothing it dates is fetched.
    site.hits.clear()
    third = await gather(config)
    assert sorted(site.paths()) == ["/robots.txt", "/sitemap_index.xml"]
    assert [hit.status for hit in site.hits if hit.path == "/sitemap_index.xml"] == [304]
    assert third.listed_changed == 0
    assert third.fetched == 0


async def test_rss_and_atom_feeds_as_roots(tmp_path: Path) -> None:
    site = Site()
    await site.start()
    try:
        docs = site.documents
        old = time.time() - 10 * DAY
        for name in ("n1", "n2", "b1", "b2"):
            docs[f"/{name}.html"] = (HTML, page(name, "An article.", links=("/deeper.html",)))
        docs["/deeper.html"] = (HTML, page("Deeper", "Two steps from a feed."))
        # Told by content, not name: RSS at a path without an extension, served as text/xml.
        docs["/news"] = (
            "text/xml",
            feed("News", [(site.url("/n1.html"), rfc822(old)), (site.url("/n2.html"), None)]),
        )
        docs["/blog.atom"] = (
            "application/atom+xml",
            feed("Blog", [(site.url("/b1.html"), w3c(old)), ("/b2.html", w3c(old))], atom=True),
        )
        config = await configure(
            tmp_path, [f"{site.url('/news')} Depth=1", f"{site.url('/blog.atom')} Depth=1"]
        )
        first = await gather(config)
        articles = {site.url(f"/{name}.html") for name in ("n1", "n2", "b1", "b2")}
        assert set(await records(config)) == articles
        assert first.listings == 2
        assert "/deeper.html" not in site.paths()  # Depth=1: the articles' links are too far

        # One article changes and its feed dates it so (RSS dates have whole seconds).
        await asyncio.sleep(1.1)
        docs["/n1.html"] = (HTML, page("n1, corrected", "A better article."))
        docs["/news"] = (
            "text/xml",
            feed(
                "News", [(site.url("/n1.html"), rfc822(time.time())), (site.url("/n2.html"), None)]
            ),
        )
        site.hits.clear()
        second = await gather(config)
        assert sorted(site.paths()) == ["/blog.atom", "/n1.html", "/news", "/robots.txt"]
        assert [hit.status for hit in site.hits if hit.path == "/blog.atom"] == [304]
        assert second.listed_changed == 1
        assert (await records(config))[site.url("/n1.html")].text("Title") == "n1, corrected"
    finally:
        await site.stop()


async def test_broken_hostile_and_mistaken_sitemaps_are_counted_not_fatal(
    tmp_path: Path, site: Site
) -> None:
    good = sitemap([(site.url("/p1.html"), None), (site.url("/p2.html"), None)])
    entity_bomb = (
        b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><urlset><url><loc>&b;</loc></url></urlset>'
    )
    # 60 MB of white space inside a urlset: a few dozen kB gzipped, more than the 50 MB read.
    bomb = gzip.compress(sitemap([(site.url("/p3.html"), None)])[:-10] + b" " * 60_000_000, 9)
    docs = site.documents
    docs["/broken.xml"] = (XML, good[: good.index(b"/p2.html")])  # cut after p1's entry
    docs["/page.html"] = (HTML, page("Not a sitemap", "robots.txt is wrong about me."))
    docs["/bomb.xml.gz"] = ("application/x-gzip", bomb)
    docs["/entities.xml"] = (XML, entity_bomb)
    docs["/corrupt.xml.gz"] = ("application/x-gzip", b"\x1f\x8b\x08\x00 not gzip at all")
    named = ("/broken.xml", "/page.html", "/bomb.xml.gz", "/entities.xml", "/corrupt.xml.gz")
    docs["/robots.txt"] = (
        "text/plain",
        "".join(f"Sitemap: {site.url(path)}\n" for path in named).encode(),
    )
    config = await write_config(tmp_path, site.url("/"), options="Sitemaps=yes Depth=1")
    stats = await gather(config)
    # The entries before the break, and before the size limit, are gathered.
    got = set(await records(config))
    assert got == {site.url(path) for path in ("/", "/a.html", "/p1.html", "/p3.html")}
    assert stats.listing_errors == {"malformed": 2, "not_listing": 2, "too_large": 1}
    assert stats.errors == 5
    failures = dict(stats.failures)
    assert failures[site.url("/page.html")].startswith("listing: not_listing: named as a sitemap")
    assert "DOCTYPE" in failures[site.url("/entities.xml")]
    # A page named as a sitemap is not summarized either: it was not reached as a page.
    assert site.url("/page.html") not in got
    assert stats.listings == 2  # the broken one and the bomb, for their good parts
    # What the run reports for /metrics (harvest_gatherer_errors_total{stage="listing"}).
    reported = counts(stats)
    assert reported["listing_errors", "malformed"] == 2
    assert reported["listings", ""] == 2


async def test_a_feed_as_a_leaf_is_summarized_not_enumerated(tmp_path: Path, site: Site) -> None:
    site.documents["/feed.xml"] = (
        "application/rss+xml",
        feed("Leafy", [(site.url("/p1.html"), None)]),
    )
    config = await write_config(
        tmp_path, site.url("/a.html"), options="Depth=1", leaves=(site.url("/feed.xml"),)
    )
    stats = await gather(config)
    got = await records(config)
    assert site.url("/feed.xml") in got
    assert "/p1.html" not in site.paths()
    assert stats.listings == 0
