"""Gatherer features through whole gathering runs over the test web site: RootNode and
LeafNode programs, Enumeration= programs and failing ones, URL and host filter files, manual
records merged into the export, the WARC archive, Members-As-Records, the stoplist, robots
meta tags, resuming an incremental export, and Time-To-Live expiry."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from gatherer.config import GathererConfig
from gatherer.export import export
from gatherer.runner import gather, open_database
from harvest_common.soif import Delete, Record, Refresh
from tests.gatherer.site import Site, page, standard_site, tar_gz
from tests.gatherer.test_gather import exported, records, write_config

HTML = "text/html; charset=utf-8"


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    s = standard_site()
    # The slow and huge pages test fetching limits, not these features: here they only cost time.
    s.slow.clear()
    s.huge.clear()
    await s.start()
    yield s
    await s.stop()


async def configure(
    tmp_path: Path, roots: Sequence[str], *, headers: str = "", leaves: Sequence[str] = ()
) -> GathererConfig:
    """write_config with several RootNode lines (URLs with options, or ``|program`` lines)."""
    # write_config writes its root argument as is between the <RootNodes> tags.
    return await write_config(tmp_path, "\n".join(roots), headers=headers, leaves=tuple(leaves))


def script(path: Path, body: str) -> str:
    """An executable shell script at ``path``; what a configuration in its directory calls
    it by (programs run in Top-Directory, the configuration's directory here)."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return f"./{path.name}"


def record_of(item: object) -> Record:
    """The record an export item carries, bare or in a @REFRESH or @DELETE wrapper."""
    if isinstance(item, Refresh | Delete):
        return item.record
    assert isinstance(item, Record)
    return item


def update_time(item: object) -> float:
    return float(record_of(item).text("Update-Time") or "nan")


def urls_of(items: Sequence[object], kind: type[Record | Refresh | Delete]) -> set[str]:
    """The URLs of the export items of one kind: bare records, refreshes or deletions."""
    return {record_of(item).url for item in items if type(item) is kind}


# -- programs ---------------------------------------------------------------------------------


async def test_root_and_leaf_programs(tmp_path: Path, site: Site) -> None:
    roots = script(
        tmp_path / "roots.sh", f"echo {site.url('/a.html')}\necho\necho {site.url('/docs/')}\n"
    )
    site.documents["/leaf.html"] = (HTML, page("Leaf", "Fetched alone.", links=("/below.html",)))
    site.documents["/below.html"] = (HTML, page("Below", "Only a leaf links here."))
    leaves = script(tmp_path / "leaves.sh", f"echo {site.url('/leaf.html')}\n")
    # The options after the program apply to every URL it prints.
    config = await configure(tmp_path, [f"|{roots} Depth=1 URL=100"], leaves=[f"|{leaves}"])
    stats = await gather(config)
    got = await records(config)
    assert set(got) == {
        site.url(path)
        for path in ("/a.html", "/docs/", "/docs/c.html", "/", "/docs/d.html", "/leaf.html")
    }
    assert stats.admissions["root_accepted"] == 3
    # Depth=1 stopped both roots one link out, and the leaf's link was not followed.
    assert stats.admissions["depth"] > 0
    assert "/docs/deep/e.html" not in site.paths()
    assert "/below.html" not in site.paths()
    assert got[site.url("/leaf.html")].text("Title") == "Leaf"


async def test_enumeration_program_replaces_its_root(tmp_path: Path, site: Site) -> None:
    # The program gets the root URL on its input and answers with a root of its own.
    enumerate_ = script(
        tmp_path / "enumerate.sh",
        'read url\necho "$url" > input.txt\n'
        'echo "${url}docs/ 100 /dev/null 1 /dev/null HTTP 0 1 /bin/false"\n',
    )
    config = await write_config(tmp_path, site.url("/"), options=f"Enumeration={enumerate_}")
    await gather(config)
    assert (tmp_path / "input.txt").read_text() == site.url("/") + "\n"
    got = await records(config)
    # The printed line's own limits hold: Depth 1 from /docs/.
    assert set(got) == {site.url(p) for p in ("/docs/", "/docs/c.html", "/docs/d.html")}
    assert got[site.url("/docs/")].text("Title") == "Documents"
    assert "/" not in site.paths()


async def test_failing_programs_leave_the_other_roots_gathered(
    tmp_path: Path, site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    fails = script(tmp_path / "fails.sh", "exit 3\n")
    bad_lines = script(
        tmp_path / "bad-lines.sh",
        f"echo not-a-url\necho mailto:webmaster@example.org\necho ftp:///no-host\n"
        f"echo {site.url('/docs/d.html')}\n",
    )
    bad_enumeration = script(tmp_path / "bad-enumeration.sh", "echo only three fields\n")
    caplog.set_level(logging.WARNING, logger="gatherer.roots")
    config = await configure(
        tmp_path,
        [
            f"|{fails}",
            "|./no-such-program",
            f"|{bad_lines}",
            f"{site.url('/a.html')} Enumeration={bad_enumeration}",
            site.url("/docs/deep/e.html"),
        ],
    )
    stats = await gather(config)
    assert set(await records(config)) == {site.url("/docs/d.html"), site.url("/docs/deep/e.html")}
    assert stats.admissions["root_accepted"] == 2
    # (the enumeration program's root is replaced by its output, here nothing usable)
    assert "/a.html" not in site.paths()
    warnings = caplog.text
    assert "fails.sh exited with status 3" in warnings
    assert "cannot run ./no-such-program" in warnings
    assert "not-a-url" in warnings
    assert "no-host" in warnings
    assert "expected 9 fields" in warnings


# -- filters ----------------------------------------------------------------------------------


async def test_url_filter_file(tmp_path: Path, site: Site) -> None:
    (tmp_path / "url-filter").write_text("# no documents\nDeny /docs/\nAllow .\n")
    config = await write_config(tmp_path, site.url("/"), options="URL=100,url-filter")
    stats = await gather(config)
    got = await records(config)
    assert site.url("/a.html") in got
    assert not any("/docs/" in url for url in got)
    assert not any(path.startswith("/docs/") for path in site.paths())
    assert stats.admissions["url_filter"] == 2  # /docs/ from the front page, c.html from A


async def test_host_filter_file(tmp_path: Path, site: Site) -> None:
    other = Site()
    other.documents["/other.html"] = (HTML, page("Other server", "Same address, other port."))
    await other.start()
    try:
        site.documents["/"] = (
            HTML,
            page("Front", "Two servers.", links=("/a.html", other.url("/other.html"))),
        )
        # Host= counts addresses, so Host=1 lets the other port in: the filter keeps it out.
        allowed = tmp_path / "allowed"
        allowed.mkdir()
        config = await write_config(allowed, site.url("/"), options="Depth=1")
        await gather(config)
        assert other.url("/other.html") in await records(config)

        filtered = tmp_path / "filtered"
        filtered.mkdir()
        (filtered / "host-filter").write_text(f"Allow ^127\\.0\\.0\\.1:{site.port}$\nDeny .\n")
        other.hits.clear()
        config = await write_config(filtered, site.url("/"), options="Depth=1 Host=1,host-filter")
        stats = await gather(config)
        assert set(await records(config)) == {site.url("/"), site.url("/a.html")}
        assert other.hits == []
        assert stats.admissions["host_filter"] == 1
    finally:
        await other.stop()


# -- manual records ---------------------------------------------------------------------------

ELSEWHERE = "http://archive.example.org/papers/tsfs.ps"


def manual_templates(site: Site) -> str:
    return (
        "# Hand-written descriptions\n"
        "Template-Type: DOCUMENT\n"
        f"URI: {site.url('/a.html')}\n"
        "Title: Hand-written title\n"
        "Keywords: caching, hand-picked\n"
        "\n"
        "Template-Type: DOCUMENT\n"
        f"URI: {ELSEWHERE}\n"
        "Title: Type Structured File Systems\n"
        "Author-Name: Mike Schwartz\n"
    )


async def test_manual_records_are_merged_into_the_export(tmp_path: Path, site: Site) -> None:
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "site.iafa").write_text(manual_templates(site))
    config = await write_config(
        tmp_path,
        site.url("/"),
        options="URL=100",
        headers="Manual-Directory: manual\nRefresh-Rate: 0.2",
    )
    await gather(config)

    items = await exported(config, None)
    by_url = {item.url: item for item in items if isinstance(item, Record)}
    merged = by_url[site.url("/a.html")]
    assert merged.text("Title") == "Hand-written title"
    assert merged.text("Keywords") == "caching, hand-picked"
    # Everything else is the generated record's.
    assert merged.text("Type") == "HTML"
    assert merged.text("Headings") == "Page A"
    assert site.url("/docs/c.html") in (merged.text("URL-References") or "")
    alone = by_url[ELSEWHERE]
    assert alone.template == "DOCUMENT"
    assert alone.text("Title") == "Type Structured File Systems"
    assert alone.text("Author") == "Mike Schwartz"  # the IAFA name, as SOIF names it
    assert alone.text("Update-Time") is not None
    # The gathered record itself stays as generated: the manual one is kept apart.
    assert (await records(config))[site.url("/a.html")].text("Title") == "Page A"

    async with open_database(config) as db:
        first = (await db.stats()).last_update

    # Re-gathered and re-summarized, the page keeps its hand-written values.
    site.documents["/a.html"] = (HTML, page("Page A, revised", "Alpha, again.", links=("/",)))
    await asyncio.sleep(0.3)
    stats = await gather(config)
    assert stats.summarized == 1
    by_url = {item.url: item for item in await exported(config, None) if isinstance(item, Record)}
    assert by_url[site.url("/a.html")].text("Title") == "Hand-written title"
    assert by_url[site.url("/a.html")].text("Headings") == "Page A, revised"
    # The unchanged template is not sent again: only the re-summarized page changed.
    assert urls_of(await exported(config, first), Record) == {site.url("/a.html")}
    async with open_database(config) as db:
        mark = (await db.stats()).last_update

    # Without the template file, the generated values come back and the manual-only record
    # is deleted.
    (manual / "site.iafa").unlink()
    await asyncio.sleep(0.3)
    await gather(config)
    everything = await exported(config, None)
    by_url = {item.url: item for item in everything if isinstance(item, Record)}
    assert ELSEWHERE not in by_url
    # (exactly the generated record: no manual attribute is left over)
    assert by_url[site.url("/a.html")] == (await records(config))[site.url("/a.html")]
    assert by_url[site.url("/a.html")].text("Title") == "Page A, revised"
    since = await exported(config, mark)
    assert urls_of(since, Delete) == {ELSEWHERE}
    assert site.url("/a.html") in urls_of(since, Record)


# -- the WARC archive -------------------------------------------------------------------------


async def test_archive_holds_every_fetched_response(tmp_path: Path, site: Site) -> None:
    config = await write_config(
        tmp_path, site.url("/"), options="URL=100", headers="Archive-Directory: warc"
    )
    stats = await gather(config)
    files = sorted((tmp_path / "warc").glob("*.warc.gz"))
    assert files

    def read() -> tuple[dict[str, bytes], list[str]]:
        responses: dict[str, bytes] = {}
        requests: list[str] = []
        for path in files:
            with path.open("rb") as stream:
                for record in ArchiveIterator(stream):
                    uri = record.rec_headers.get_header("WARC-Target-URI")
                    if record.rec_type == "response":
                        responses[uri] = record.content_stream().read()
                    elif record.rec_type == "request":
                        requests.append(uri)
        return responses, requests

    responses, requests = await asyncio.to_thread(read)
    # Every document that came back 200 (a redirect archived as its final exchange).
    fetched = {site.url(h.path) for h in site.hits if h.status == 200 and h.path != "/robots.txt"}
    assert set(responses) == fetched
    assert len(responses) == stats.fetched
    assert sorted(requests) == sorted(responses)
    assert responses[site.url("/")] == site.documents["/"][1]
    assert responses[site.url("/paper.pdf")] == site.documents["/paper.pdf"][1]

    warcio = Path(sys.executable).parent / "warcio"
    check = await asyncio.create_subprocess_exec(
        str(warcio),
        "check",
        *map(str, files),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(30):
        output, _ = await check.communicate()
    assert check.returncode == 0, output.decode()


# -- Members-As-Records -----------------------------------------------------------------------


async def test_members_as_records(tmp_path: Path, site: Site) -> None:
    tarball = site.url("/pkg.tar.gz")
    config = await write_config(
        tmp_path,
        tarball,
        headers="Members-As-Records: yes\nTime-To-Live: 1\nRefresh-Rate: 0.2",
    )
    await gather(config)
    got = await records(config)
    assert set(got) == {tarball, tarball + "#pkg/README", tarball + "#pkg/main.c"}
    container = got[tarball]
    assert container.text("Type") == "GNUCompressed"
    assert container.text("Members") == "pkg/README\npkg/main.c"
    assert container.text("Embed1-Member") is None
    readme = got[tarball + "#pkg/README"]
    assert (readme.text("Type"), readme.text("Title")) == ("README", "Package readme")
    source = got[tarball + "#pkg/main.c"]
    assert (source.text("Type"), source.text("Functions")) == ("C", "gather_all")
    assert source.text("MD5") == container.text("MD5")  # the archive's, shared by its members

    # Past the Time-To-Live, an unchanged archive keeps its members: they live with it.
    await asyncio.sleep(1.1)
    stats = await gather(config)
    assert stats.not_modified == 1
    assert stats.deleted == 0
    assert set(await records(config)) == {tarball, tarball + "#pkg/README", tarball + "#pkg/main.c"}

    # A member gone from a new version of the archive leaves the index.
    site.documents["/pkg.tar.gz"] = (
        "application/gzip",
        tar_gz({"pkg/main.c": b"int gather_more(int n) { return n + 1; }\n"}),
    )
    await asyncio.sleep(0.3)
    stats = await gather(config)
    assert stats.deleted == 1
    got = await records(config)
    assert set(got) == {tarball, tarball + "#pkg/main.c"}
    assert got[tarball + "#pkg/main.c"].text("Functions") == "gather_more"


# -- stoplist and robots meta -----------------------------------------------------------------


async def test_stoplisted_html_is_enumerated_but_not_stored(tmp_path: Path, site: Site) -> None:
    (tmp_path / "stoplist").write_text("# pages lead on, but are not indexed\nHTML\n")
    config = await write_config(
        tmp_path, site.url("/"), options="URL=100", headers="Stoplist: stoplist"
    )
    await gather(config)
    got = await records(config)
    assert set(got) == {site.url(p) for p in ("/paper.pdf", "/tool.bin", "/pkg.tar.gz")}
    assert got[site.url("/paper.pdf")].text("Title") == "Hierarchical Object Caches"
    # The crawl went on through the pages down to the deepest one.
    assert "/docs/deep/e.html" in site.paths()


async def test_robots_meta_noindex_and_nofollow(tmp_path: Path, site: Site) -> None:
    site.documents["/"] = (
        HTML,
        page("Front", "Robots meta tags.", links=("/noindex.html", "/nofollow.html")),
    )
    site.documents["/noindex.html"] = (
        HTML,
        page(
            "Not for the index",
            "But follow me.",
            links=("/via-noindex.html",),
            head='<meta name="robots" content="noindex">',
        ),
    )
    site.documents["/nofollow.html"] = (
        HTML,
        page(
            "Indexed, not followed",
            "Do not follow.",
            links=("/via-nofollow.html",),
            head='<meta name="robots" content="nofollow">',
        ),
    )
    site.documents["/via-noindex.html"] = (HTML, page("Via noindex", "Reached."))
    site.documents["/via-nofollow.html"] = (HTML, page("Via nofollow", "Never reached."))
    config = await write_config(
        tmp_path, site.url("/"), options="URL=100", headers="Refresh-Rate: 0.2"
    )
    await gather(config)
    got = await records(config)
    assert set(got) == {site.url(p) for p in ("/", "/nofollow.html", "/via-noindex.html")}
    assert "/via-nofollow.html" not in site.paths()
    assert got[site.url("/nofollow.html")].text("URL-References") is None
    assert got[site.url("/nofollow.html")].text("Title") == "Indexed, not followed"

    # A page that turns noindex leaves the index.
    site.documents["/via-noindex.html"] = (
        HTML,
        page("Via noindex", "Now private.", head='<meta name="robots" content="noindex,follow">'),
    )
    await asyncio.sleep(0.3)
    stats = await gather(config)
    assert stats.deleted == 1
    assert site.url("/via-noindex.html") not in await records(config)


# -- the export over several runs -------------------------------------------------------------


async def test_incremental_export_resumes_from_the_last_update_time(
    tmp_path: Path, site: Site
) -> None:
    config = await write_config(
        tmp_path, site.url("/"), options="URL=100", headers="Refresh-Rate: 0.2"
    )
    await gather(config)
    everything = await exported(config, None)
    assert all(type(item) is Record for item in everything)
    assert urls_of(everything, Record) == set(await records(config))
    mark = max(map(update_time, everything))
    async with open_database(config) as db, export(db, None) as stream:
        assert stream.until == mark
        assert stream.complete

    site.documents["/b.html"] = (HTML, page("Page B, revised", "Now about registries."))
    await asyncio.sleep(0.3)
    await gather(config)

    changes = await exported(config, mark)
    assert urls_of(changes, Record) == {site.url("/b.html")}
    changed = next(item for item in changes if isinstance(item, Record))
    assert changed.text("Title") == "Page B, revised"
    # Everything else was gathered again, unchanged: a refresh each, nothing deleted.
    assert urls_of(changes, Refresh) == set(await records(config)) - {site.url("/b.html")}
    assert urls_of(changes, Delete) == set()
    assert all(update_time(item) > mark for item in changes)

    resume = max(map(update_time, changes))
    async with open_database(config) as db, export(db, mark) as stream:
        assert stream.until == resume
        assert not stream.complete
    assert await exported(config, resume) == []


# Long enough that a loaded machine gathers twice within it.
TTL_SECONDS = 4.0


async def test_time_to_live_removes_records_not_refreshed(tmp_path: Path, site: Site) -> None:
    # A page on a second server that goes away: it cannot be gathered again, so its record
    # is only kept until its Time-To-Live runs out, while the pages still served are
    # refreshed.
    other = Site()
    other.documents["/going.html"] = (HTML, page("Going away", "Soon unreachable."))
    await other.start()
    site.documents["/"] = (
        HTML,
        page("Front", "Links out.", links=("/a.html", other.url("/going.html"))),
    )
    config = await write_config(
        tmp_path,
        site.url("/"),
        options="Depth=1",
        headers=f"Time-To-Live: {TTL_SECONDS:g}\nRefresh-Rate: 0.2",
    )
    going = other.url("/going.html")
    try:
        await gather(config)
        assert going in await records(config)
    finally:
        await other.stop()
    everything = await exported(config, None)
    mark = max(map(update_time, everything))

    # Unreachable before its time is up (robots.txt cannot be had, so the page is not
    # asked for), the record is kept.
    await asyncio.sleep(0.3)
    stats = await gather(config)
    assert stats.robots_denied == 1
    assert stats.deleted == 0
    assert going in await records(config)

    # (past the Time-To-Live of the record, however long the gathering took)
    await asyncio.sleep(max(0.0, mark + TTL_SECONDS + 0.2 - time.time()))
    stats = await gather(config)
    assert stats.deleted == 1
    assert set(await records(config)) == {site.url("/"), site.url("/a.html")}
    changes = await exported(config, mark)
    assert urls_of(changes, Delete) == {going}
    assert urls_of(changes, Refresh) == {site.url("/"), site.url("/a.html")}
