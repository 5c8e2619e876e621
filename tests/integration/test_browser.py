"""A real browser through the cache: headless Chromium with the cache as its HTTP proxy,
as a user configures it, browsing a site on loopback by name and by address.

The cache resolves the site's name with a DNS server of the test's on loopback, which counts
every question: Chromium's own background traffic (network time, component updates, model
manifests) would go through the proxy and make the cache look up outside names, so the test
also shows that the browser tests' switches (tests/browser.py) keep it home.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harvest_cache.bump import authority
from tests import browser
from tests.browser import tab
from tests.dns_server import ScriptedDNS, scripted_dns
from tests.support import MakeCache, Origin, static, stop_and_read_log
from tests.tls_support import Trust, https_cache, tls_origin

SITE = "site.harvest.test"
SPLICED = "spliced.harvest.test"
PAGE = b"""<!doctype html><html lang="en"><head><title>Harvest through a proxy</title>
<link rel="stylesheet" href="/style.css"></head>
<body><h1>Object caches</h1><img id="logo" src="/logo.svg" alt="logo"></body></html>"""
STYLE = b"h1 { color: rgb(1, 2, 3); }"
LOGO = b'<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10"></svg>'
# Fresh for a shared cache, stale at once for the browser's own: every visit asks the proxy,
# which answers the browser's revalidation from its store.
SHARED = "s-maxage=600, max-age=0"
QUIET_SECONDS = 3.0  # Chromium's background requests come in its first second


@pytest.fixture
async def dns() -> AsyncIterator[ScriptedDNS]:
    async with scripted_dns({SITE: {"A": (300, ["127.0.0.1"])}}, delay=0.0) as server:
        yield server


@contextlib.asynccontextmanager
async def chromium_via(
    scratch: Path, proxy: str, trusted: tuple[Path, ...] = ()
) -> AsyncIterator[int]:
    """browser.chromium, started and ended off the event loop (it waits for the browser)."""
    with contextlib.ExitStack() as stack:
        started = browser.chromium(scratch, proxy, trusted)
        port = await asyncio.to_thread(stack.enter_context, started)
        try:
            yield port
        finally:
            await asyncio.to_thread(stack.close)


async def test_chromium_browses_through_the_cache_and_nothing_else_goes_through_it(
    origin: Origin, make_cache: MakeCache, dns: ScriptedDNS, tmp_path: Path
) -> None:
    origin.route("/", static(PAGE, {"Content-Type": "text/html", "Cache-Control": SHARED}))
    origin.route("/style.css", static(STYLE, {"Content-Type": "text/css", "Cache-Control": SHARED}))
    origin.route(
        "/logo.svg", static(LOGO, {"Content-Type": "image/svg+xml", "Cache-Control": SHARED})
    )
    cache = await make_cache(dns={"nameservers": [f"127.0.0.1:{dns.port}"]})
    by_name = f"http://{SITE}:{origin.port}/"
    by_address = f"http://127.0.0.1:{origin.port}/"

    async with chromium_via(tmp_path / "chromium", f"127.0.0.1:{cache.address[1]}") as devtools:
        for url in (by_name, by_address, by_name):
            async with tab(devtools) as page:
                await page.goto(url)
                await page.wait_until("document.getElementById('logo').complete")
                assert await page.evaluate("document.title") == "Harvest through a proxy"
                color = "getComputedStyle(document.querySelector('h1')).color"
                assert await page.evaluate(color) == "rgb(1, 2, 3)"
                assert await page.evaluate("document.getElementById('logo').naturalWidth") == 20
        await asyncio.sleep(QUIET_SECONDS)

    log = await stop_and_read_log(cache)
    ours = (by_name, by_address)
    assert [line.url for line in log if not line.url.startswith(ours)] == []
    pages = [line for line in log if line.url in ours]
    assert [line.url for line in pages] == [by_name, by_address, by_name]
    # The third visit's revalidation was answered from the store: each page, style sheet and
    # image reached the origin once for each of the two names of the site.
    assert pages[-1].hierarchy == "HIER_NONE", pages[-1]
    assert origin.hits["/"] == 2
    assert origin.hits["/style.css"] == 2
    assert origin.hits["/logo.svg"] == 2
    # The cache looked up the site's name and nothing else.
    assert {name for name, _ in dns.queries} == {SITE}


async def test_chromium_through_an_intercepting_cache(
    make_cache: MakeCache, trust: Trust, tmp_path: Path
) -> None:
    """HTTPS as a browser sends it (CONNECT, then TLS) with bumping on and the cache's CA in
    the browser's store: the page, its style sheet and image load, and a second visit is
    answered from the cache; a spliced host still works with its own certificate; a browser
    without the cache's CA fails once, and the next visit is spliced."""
    names = f"127.0.0.1 {SITE} {SPLICED}\n"
    hosts = tmp_path / "browser-hosts"
    hosts.write_text(names)
    site = trust.context(trust.ca.issue_cert(SITE, SPLICED))
    ca_dir = tmp_path / "ca"
    await asyncio.to_thread(
        authority.create, ca_dir, "browser", datetime.datetime.now(datetime.UTC)
    )
    async with tls_origin(site) as origin:
        origin.route("/", static(PAGE, {"Content-Type": "text/html", "Cache-Control": SHARED}))
        origin.route(
            "/style.css", static(STYLE, {"Content-Type": "text/css", "Cache-Control": SHARED})
        )
        origin.route(
            "/logo.svg", static(LOGO, {"Content-Type": "image/svg+xml", "Cache-Control": SHARED})
        )
        cache = await https_cache(
            make_cache,
            trust,
            dns={"hosts_file": str(hosts)},
            access={"connect_ports": ["1-65535"]},
            bump={"enabled": True, "ca_dir": str(ca_dir), "splice_domains": [SPLICED]},
        )
        proxy = f"127.0.0.1:{cache.address[1]}"
        bumped_url = f"https://{SITE}:{origin.port}/"
        spliced_url = f"https://{SPLICED}:{origin.port}/"
        trusted = (ca_dir / "ca.pem", trust.ca_file)
        async with chromium_via(tmp_path / "chromium", proxy, trusted) as devtools:
            for url in (bumped_url, bumped_url, spliced_url):
                async with tab(devtools) as page:
                    await page.goto(url)
                    await page.wait_until("document.getElementById('logo').complete")
                    color = "getComputedStyle(document.querySelector('h1')).color"
                    assert await page.evaluate(color) == "rgb(1, 2, 3)"
                    assert await page.evaluate("document.getElementById('logo').naturalWidth") == 20
        # Each object from the origin once through the cache, and once more spliced.
        assert (origin.hits["/"], origin.hits["/style.css"], origin.hits["/logo.svg"]) == (2, 2, 2)
        assert cache.bumper is not None
        # (a browser may open more than one tunnel to a host)
        assert cache.bumper.spliced.get("domain", 0) >= 1

        # A browser without the cache's CA (as an app pinning its server's certificate).
        async with chromium_via(tmp_path / "pinning", proxy, (trust.ca_file,)) as devtools:
            async with tab(devtools) as page:
                # (it may retry at once on a new connection, then spliced: the page may show)
                await page.send("Page.navigate", url=bumped_url)
                await page.wait_until("document.readyState === 'complete'")
            for _ in range(100):  # (bounded: the refusal is seen as the handshake ends)
                if cache.bumper.refused:
                    break
                await asyncio.sleep(0.05)
            assert cache.bumper.refused >= 1
            async with tab(devtools) as page:
                await page.goto(bumped_url)
                assert await page.evaluate("document.title") == "Harvest through a proxy"
        assert cache.bumper.spliced.get("pinned", 0) >= 1
        log = await stop_and_read_log(cache)
    # (the browser asks for /favicon.ico too: a 404 of the origin's)
    gets = [(r.result, r.url) for r in log if r.method == "GET" and "favicon" not in r.url]
    first = [
        ("TCP_MISS", bumped_url),
        ("TCP_MISS", f"{bumped_url}style.css"),
        ("TCP_MISS", f"{bumped_url}logo.svg"),
    ]
    assert sorted(gets[:3]) == sorted(first)  # (the style sheet and image in either order)
    # The second visit: every revalidation answered from the store.
    assert {result for result, _ in gets[3:6]} <= {
        "TCP_REFRESH_UNMODIFIED",
        "TCP_IMS_HIT",
        "TCP_HIT",
        "TCP_MEM_HIT",
    }
