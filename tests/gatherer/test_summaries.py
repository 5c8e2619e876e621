"""Summaries worth indexing, end to end: a site shaped like today's web gathered through a
running Harvest cache, each record checked field by field; copies stored once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gatherer.runner import gather
from tests.gatherer import modern_site
from tests.gatherer.modern_site import add_listed
from tests.gatherer.site import Site
from tests.gatherer.test_gather import MakeCache, records, write_config


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    s = modern_site.modern_site()
    await s.start()
    add_listed(s)
    yield s
    await s.stop()


def text(value: bytes | None) -> str:
    assert value is not None
    return value.decode()


async def test_a_modern_site_is_summarized_field_by_field(
    tmp_path: Path, site: Site, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    config = await write_config(
        tmp_path, site.url("/"), proxy=f"127.0.0.1:{cache.address[1]}", options="Sitemaps=yes"
    )
    stats = await gather(config)
    got = await records(config)

    # The printable copy names the article as its URL, and one mirror's manual is a copy of
    # the other's: each text is stored once.
    assert set(got) == {
        site.url(path)
        for path in (
            "/",
            "/articles/harvest-history.html",
            "/articles/caching.html",
            "/guide/microdata.html",
            "/bare.html",
            "/mirror-one/manual.html",
        )
    }
    assert stats.duplicates == 2
    assert "/articles/harvest-history.html" in site.paths()  # reached by its canonical URL
    # The guide is reached through robots.txt's sitemap index, the German page through the
    # feed; sitemaps and feeds are enumerated, not stored.
    assert {"/sitemap-index.xml", "/sitemap-guides.xml", "/feed.xml"} <= set(site.paths())

    # JSON-LD (the article's, not the organization's), <meta> and the page's language; the
    # headings and the abstract of the article alone, without banner, navigation, table of
    # contents, share buttons, sidebar and footer.
    history = got[site.url("/articles/harvest-history.html")]
    assert text(history.get("Title")) == "The history of Harvest | Mountain Computing Gazette"
    assert text(history.get("Description")) == (
        "How a 1994 research project shaped web caching and search."
    )
    assert text(history.get("Author")) == "Ada Byron\nCharles Babbage"
    assert text(history.get("Keywords")) == "Harvest\nweb caching\nresource discovery"
    assert text(history.get("Date-Published")) == "2026-03-01T08:30:00Z"
    assert text(history.get("Date-Modified")) == "2026-11-20"
    assert text(history.get("Language")) == "en-GB"
    assert text(history.get("Headings")) == "The history of Harvest\nOrigins\nLegacy"
    abstract = text(history.get("Abstract"))
    assert abstract.startswith(
        "The history of Harvest By Ada Byron and Charles Babbage Harvest began in 1994"
    )
    for frame in ("privacy", "Home", "On this page", "Share", "Related", "touch", "©"):
        assert frame not in abstract
    assert "\u00b6" not in abstract

    # OpenGraph and article properties; no element marks the content, so it is found as the
    # densest part of the page once the navigation bar, sidebar and footer are gone.
    caching = got[site.url("/articles/caching.html")]
    assert text(caching.get("Title")) == "How object caches work"
    assert text(caching.get("Description")) == "Freshness, validation and eviction explained."
    assert text(caching.get("Author")) == "Grace Hopper"  # not the profile URL
    assert text(caching.get("Keywords")) == "caching\nHTTP"
    assert text(caching.get("Date-Published")) == "2026-06-15T12:00:00Z"
    assert caching.get("Date-Modified") is None
    assert text(caching.get("Headings")) == "How object caches work\nFreshness\nValidation"
    assert text(caching.get("Abstract")).startswith(
        "How object caches work " + modern_site.CACHING_TEXT[:60]
    )
    for frame in ("privacy", "Categories", "Contact", "touch"):
        assert frame not in text(caching.get("Abstract"))

    # Microdata: a nested author's name, a time's datetime, a meta's content; the article body.
    guide = got[site.url("/guide/microdata.html")]
    assert text(guide.get("Title")) == "Writing a gatherer configuration"
    assert text(guide.get("Description")) == "A walk through gatherer.cf, root by root."
    assert text(guide.get("Author")) == "Alan Turing"
    assert text(guide.get("Keywords")) == "gatherer\nconfiguration"
    assert text(guide.get("Date-Published")) == "2025-12-24"
    assert text(guide.get("Headings")) == "Roots and limits"
    assert text(guide.get("Abstract")).startswith(modern_site.MICRODATA_TEXT[:80])

    # No metadata at all: the title from the first heading, the language detected, keywords
    # extracted from the text.
    bare = got[site.url("/bare.html")]
    assert text(bare.get("Title")) == "Sammler und Vermittler"
    assert text(bare.get("Language")) == "de"
    keywords = text(bare.get("Keywords")).split("\n")
    assert 3 <= len(keywords) <= 10
    assert {"Sammler", "Vermittler"} & set(keywords)
    assert not {"und", "die", "der"} & {k.lower() for k in keywords}  # German stopwords
    for absent in ("Author", "Description", "Date-Published", "Date-Modified"):
        assert bare.get(absent) is None
    assert text(bare.get("Abstract")).startswith("Sammler und Vermittler Die Bibliothek")

    manual = got[site.url("/mirror-one/manual.html")]
    assert "Mirror one" not in text(manual.get("Abstract"))


async def test_a_copy_is_stored_once_across_runs_and_takes_over_when_the_original_goes(
    tmp_path: Path, site: Site
) -> None:
    config = await write_config(tmp_path, site.url("/"))
    await gather(config)
    first, second = site.url("/mirror-one/manual.html"), site.url("/mirror-two/manual.html")
    assert first in await records(config)
    assert second not in await records(config)

    # A later run (everything re-checked) knows the stored copy's fingerprint from the
    # database: the second mirror stays out.
    stats = await gather(config, refresh=True)
    assert stats.duplicates == 2
    assert second not in await records(config)

    # The original is gone: its record is deleted, and the copy is stored in its place (in
    # that run if the deletion came first, else in the next).
    del site.documents["/mirror-one/manual.html"]
    await gather(config, refresh=True)
    assert first not in await records(config)
    await gather(config, refresh=True)
    got = await records(config)
    assert first not in got
    assert second in got


async def test_a_changed_copy_is_stored_again(tmp_path: Path, site: Site) -> None:
    config = await write_config(tmp_path, site.url("/"))
    await gather(config)
    other = " ".join(
        f"Paragraph {n} now tells how brokers rank results by field weights and how"
        f" transposed letters count as one edit in approximate matching."
        for n in range(1, 9)
    )
    site.documents["/mirror-two/manual.html"] = (
        modern_site.HTML,
        modern_site.copy_page("The other mirror", other).encode(),
    )
    await gather(config, refresh=True)
    got = await records(config)
    assert site.url("/mirror-one/manual.html") in got
    assert site.url("/mirror-two/manual.html") in got
