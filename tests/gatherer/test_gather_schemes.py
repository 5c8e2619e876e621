"""Whole gathering runs over the access methods besides HTTP: a FILE tree on disk (types,
hidden files, Depth=, unchanged files not re-summarized), an FTP server (anonymous and with a
configured login), HTTP pages crossing into FTP only under Access=HTTP|FTP, and a Gopher hole
whose menu points at the web (never followed from Gopher)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gatherer.runner import gather
from harvest_common.soif import Record
from tests.gatherer.servers import Ftp, GopherServer, ftp_server
from tests.gatherer.site import Site, page, tar_gz
from tests.gatherer.test_gather import records, write_config

HTML = "text/html; charset=utf-8"
MAN_PAGE = ".TH FOO 1\n.SH NAME\nfoo \\- does things\n.SH DESCRIPTION\nFoo does things well.\n"


def member_types(record: Record) -> dict[str | None, str | None]:
    """An unnested archive's ``Embed<n>-Member`` -> ``Embed<n>-Type``."""
    found: dict[str | None, str | None] = {}
    number = 1
    while (member := record.text(f"Embed{number}-Member")) is not None:
        found[member] = record.text(f"Embed{number}-Type")
        number += 1
    return found


# -- FILE -------------------------------------------------------------------------------------


def file_tree(root: Path) -> Path:
    """A directory of every kind of document FILE gathering meets, a hidden file, and a
    subdirectory two levels deep."""
    (root / "sub" / "inner").mkdir(parents=True)
    (root / "index.html").write_bytes(page("Local index", "A page on disk.", links=("notes.txt",)))
    (root / "notes.txt").write_text("Notes on caching\nObject caches keep copies near readers.\n")
    (root / "README").write_text("Tree readme\nThis tree is gathered through file URLs.\n")
    (root / "hello.c").write_text("#include <stdio.h>\nint greet(int n) { return n; }\n")
    (root / "tool.py").write_text(
        '"""A small tool."""\n\n\ndef helper():\n    return 1\n\n\nclass Widget:\n    pass\n'
    )
    (root / "foo.1").write_text(MAN_PAGE)
    (root / "pkg.tar.gz").write_bytes(
        tar_gz(
            {
                "pkg/README": b"Package readme\nThis package gathers documents.\n",
                "pkg/main.c": b"#include <stdio.h>\nint gather_all(int n) { return n; }\n",
            }
        )
    )
    (root / ".secret").write_text("A hidden file: never listed, never gathered.\n")
    (root / "sub" / "deep.txt").write_text("Deep text\nOne level down.\n")
    (root / "sub" / "inner" / "deeper.txt").write_text("Deeper text\nTwo levels down.\n")
    return root


async def test_file_tree_is_gathered_by_type(tmp_path: Path) -> None:
    tree = file_tree(tmp_path / "tree")
    base = tree.as_uri() + "/"
    config = await write_config(tmp_path, base, options="URL=100")
    stats = await gather(config)
    got = await records(config)

    expected = {
        base + name
        for name in (
            "",
            "index.html",
            "notes.txt",
            "README",
            "hello.c",
            "tool.py",
            "foo.1",
            "pkg.tar.gz",
            "sub/",
            "sub/deep.txt",
            "sub/inner/",
            "sub/inner/deeper.txt",
        )
    }
    assert set(got) == expected
    assert not any(".secret" in url for url in got)
    assert stats.fetch_errors == {}

    assert got[base + "index.html"].text("Type") == "HTML"
    assert got[base + "index.html"].text("Title") == "Local index"
    assert got[base + "notes.txt"].text("Type") == "Text"
    assert got[base + "notes.txt"].text("Title") == "Notes on caching"
    readme = got[base + "README"]
    assert readme.text("Type") == "README"
    # README files always carry their whole text.
    assert readme.text("Full-Text") == "Tree readme\nThis tree is gathered through file URLs.\n"
    assert got[base + "hello.c"].text("Type") == "C"
    assert got[base + "hello.c"].text("Functions") == "greet"
    python = got[base + "tool.py"]
    assert (python.text("Type"), python.text("Functions"), python.text("Classes")) == (
        "Python",
        "helper",
        "Widget",
    )
    man = got[base + "foo.1"]
    assert (man.text("Type"), man.text("Title"), man.text("Description")) == (
        "ManPage",
        "FOO(1)",
        "foo - does things",
    )
    tarball = got[base + "pkg.tar.gz"]
    assert tarball.text("Type") == "GNUCompressed"
    assert member_types(tarball) == {"pkg/README": "README", "pkg/main.c": "C"}
    assert tarball.text("Embed2-Functions") == "gather_all"
    # A directory is a listing whose references are its (visible) entries.
    listing = got[base]
    assert (listing.text("URL-References") or "").splitlines() == [
        base + name
        for name in (
            "README",
            "foo.1",
            "hello.c",
            "index.html",
            "notes.txt",
            "pkg.tar.gz",
            "sub/",
            "tool.py",
        )
    ]
    # Every record says when the file last changed.
    mtime = int((tree / "notes.txt").stat().st_mtime)
    assert got[base + "notes.txt"].text("Last-Modification-Time") == str(mtime)


async def test_file_depth_limits_subdirectories(tmp_path: Path) -> None:
    tree = file_tree(tmp_path / "tree")
    base = tree.as_uri() + "/"
    config = await write_config(tmp_path, base, options="URL=100 Depth=1")
    stats = await gather(config)
    got = await records(config)
    # Depth=1: the root listing and its entries; the subdirectory is listed, its entries not.
    assert base + "sub/" in got
    assert base + "notes.txt" in got
    assert base + "sub/deep.txt" not in got
    assert base + "sub/inner/" not in got
    assert stats.admissions["depth"] == 2  # sub/deep.txt and sub/inner/


async def test_file_regathering_reads_only_changed_files(tmp_path: Path) -> None:
    tree = file_tree(tmp_path / "tree")
    base = tree.as_uri() + "/"
    # Refresh-Rate 0.2 s: everything is due again on the second run.
    config = await write_config(tmp_path, base, options="URL=100", headers="Refresh-Rate: 0.2")
    first = await gather(config)
    assert first.summarized == len(await records(config)) == 12
    await asyncio.sleep(0.3)

    again = await gather(config)
    # Files answer "not modified" by their mtime:size token without being read; the three
    # directories are listed anew and found unchanged by their MD5.
    assert again.summarized == 0
    assert again.not_modified == 9
    assert (again.fetched, again.unchanged) == (3, 3)
    await asyncio.sleep(0.3)

    # A touched file is read again but found unchanged; a rewritten one is re-summarized.
    os.utime(tree / "hello.c", ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    (tree / "notes.txt").write_text("Notes on brokers\nBrokers index what gatherers gather.\n")
    third = await gather(config)
    assert third.summarized == 1
    assert (third.fetched, third.unchanged, third.not_modified) == (5, 4, 7)
    got = await records(config)
    assert got[base + "notes.txt"].text("Title") == "Notes on brokers"
    assert got[base + "hello.c"].text("Functions") == "greet"
    await asyncio.sleep(0.3)

    # The touched file's new token was kept: it is "not modified" again, not read again.
    fourth = await gather(config)
    assert (fourth.summarized, fourth.fetched, fourth.not_modified) == (0, 3, 9)


# -- FTP --------------------------------------------------------------------------------------


@pytest.fixture
def ftp(tmp_path: Path) -> Iterator[Ftp]:
    """Anonymous read-only on a tree with pub/ (text, README, C, a tarball, a hidden file and
    a subdirectory); user alice (password secret) on a home of her own."""
    public = tmp_path / "ftproot"
    pub = public / "pub"
    (pub / "docs").mkdir(parents=True)
    (pub / "README").write_bytes(b"Archive readme\nAnonymous FTP for the Harvest tests.\n")
    (pub / "notes.txt").write_bytes(b"FTP notes\nFiles fetched over FTP are summarized too.\n")
    (pub / "docs" / "hello.c").write_bytes(b"int ftp_hello(void) { return 0; }\n")
    (pub / "pkg.tar.gz").write_bytes(tar_gz({"pkg/main.c": b"int packed(void) { return 1; }\n"}))
    (pub / ".message").write_bytes(b"Welcome banner, hidden.\n")
    (public / "outside.txt").write_bytes(b"Above the root URL's directory.\n")
    home = tmp_path / "alice"
    home.mkdir()
    (home / "diary.txt").write_bytes(b"Dear diary\nOnly alice may read this.\n")
    with ftp_server(public, users={"alice": ("secret", home)}) as server:
        yield server


async def test_ftp_tree_is_gathered_anonymously(tmp_path: Path, ftp: Ftp) -> None:
    config = await write_config(tmp_path, ftp.url("/pub/"), options="URL=100")
    stats = await gather(config)
    got = await records(config)
    assert set(got) == {
        ftp.url(path)
        for path in ("/pub/", "/pub/README", "/pub/notes.txt", "/pub/docs/", "/pub/docs/hello.c")
    } | {ftp.url("/pub/pkg.tar.gz")}
    assert stats.fetch_errors == {}
    assert got[ftp.url("/pub/README")].text("Type") == "README"
    assert got[ftp.url("/pub/README")].text("Title") == "Archive readme"
    assert got[ftp.url("/pub/notes.txt")].text("Title") == "FTP notes"
    assert got[ftp.url("/pub/docs/hello.c")].text("Functions") == "ftp_hello"
    tarball = got[ftp.url("/pub/pkg.tar.gz")]
    assert member_types(tarball) == {"pkg/main.c": "C"}
    assert tarball.text("Embed1-Functions") == "packed"
    # Sizes and times come from the server's MLST facts.
    size = (ftp.public / "pub" / "notes.txt").stat().st_size
    assert got[ftp.url("/pub/notes.txt")].text("File-Size") == str(size)
    mtime = int((ftp.public / "pub" / "notes.txt").stat().st_mtime)
    modified = got[ftp.url("/pub/notes.txt")].text("Last-Modification-Time")
    assert modified is not None
    assert abs(int(modified) - mtime) <= 1


async def test_ftp_configured_login_is_used(tmp_path: Path, ftp: Ftp) -> None:
    config = await write_config(
        tmp_path, ftp.url("/"), options="URL=100", headers="FTP-Login: 127.0.0.1 alice secret"
    )
    stats = await gather(config)
    got = await records(config)
    # alice's home, not the anonymous tree, is what "/" is.
    assert set(got) == {ftp.url("/"), ftp.url("/diary.txt")}
    assert got[ftp.url("/diary.txt")].text("Title") == "Dear diary"
    assert stats.fetch_errors == {}


async def test_ftp_wrong_login_gathers_nothing(tmp_path: Path, ftp: Ftp) -> None:
    config = await write_config(
        tmp_path, ftp.url("/"), options="URL=100", headers="FTP-Login: 127.0.0.1 alice wrong"
    )
    stats = await gather(config)
    assert await records(config) == {}
    assert stats.fetch_errors == {"refused": 1}


# -- HTTP into FTP --------------------------------------------------------------------------


@pytest.fixture
async def site(ftp: Ftp) -> AsyncIterator[Site]:
    """A page linking into the FTP server, and an HTTP page beside it."""
    s = Site()
    s.documents["/"] = (
        HTML,
        page(
            "Software page",
            "Our software is on the FTP server.",
            links=(ftp.url("/pub/notes.txt"), ftp.url("/pub/docs/"), "/about.html"),
        ),
    )
    s.documents["/about.html"] = (HTML, page("About", "About this site."))
    await s.start()
    yield s
    await s.stop()


async def test_http_crosses_into_ftp_only_when_access_allows(
    tmp_path: Path, site: Site, ftp: Ftp
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    config = await write_config(plain, site.url("/"), options="URL=100")
    stats = await gather(config)
    assert set(await records(config)) == {site.url("/"), site.url("/about.html")}
    assert stats.admissions["scheme"] == 2  # the two ftp:// links, under Access=HTTP

    crossing = tmp_path / "crossing"
    crossing.mkdir()
    config = await write_config(crossing, site.url("/"), options="URL=100 Access=HTTP|FTP")
    stats = await gather(config)
    got = await records(config)
    assert set(got) == {
        site.url("/"),
        site.url("/about.html"),
        ftp.url("/pub/notes.txt"),
        ftp.url("/pub/docs/"),
        ftp.url("/pub/docs/hello.c"),  # enumerated on from the FTP directory
    }
    assert stats.admissions["scheme"] == 0
    assert got[ftp.url("/pub/notes.txt")].text("Title") == "FTP notes"
    assert got[ftp.url("/pub/docs/hello.c")].text("Functions") == "ftp_hello"


# -- Gopher -----------------------------------------------------------------------------------


@pytest.fixture
async def web() -> AsyncIterator[Site]:
    """A web page the Gopher menu points at: it must never be asked for."""
    s = Site()
    s.documents["/web.html"] = (HTML, page("Web page", "Reached from Gopher?"))
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
async def gopher(web: Site) -> AsyncIterator[GopherServer]:
    server = GopherServer()
    await server.start()
    port = str(server.port).encode()
    server.documents = {
        b"": b"".join(
            (
                b"iWelcome to the test hole\t\terror.host\t1\r\n",
                b"0About this hole\t/about.txt\t127.0.0.1\t" + port + b"\r\n",
                b"1Software\t/soft\t127.0.0.1\t" + port + b"\r\n",
                b"hThe web\tURL:"
                + web.url("/web.html").encode()
                + b"\t127.0.0.1\t"
                + port
                + b"\r\n",
                b".\r\n",
            )
        ),
        b"/about.txt": b"About this hole\r\nGopher documents are gathered as text.\r\n.\r\n",
        b"/soft": b"".join(
            (
                b"iSoftware menu\t\terror.host\t1\r\n",
                b"0Changes\t/soft/changes.txt\t127.0.0.1\t" + port + b"\r\n",
                b".\r\n",
            )
        ),
        b"/soft/changes.txt": b"Changes\r\nVersion 2 gathers Gopher holes.\r\n.\r\n",
    }
    yield server
    await server.stop()


async def test_gopher_hole_is_gathered_without_leaving_gopher(
    tmp_path: Path, gopher: GopherServer, web: Site
) -> None:
    # Access=HTTP|GOPHER: even with HTTP allowed, links out of Gopher menus are not followed.
    config = await write_config(tmp_path, gopher.url("/1"), options="URL=100 Access=HTTP|Gopher")
    stats = await gather(config)
    got = await records(config)
    assert set(got) == {
        gopher.url("/1"),
        gopher.url("/0/about.txt"),
        gopher.url("/1/soft"),
        gopher.url("/0/soft/changes.txt"),
    }
    assert web.hits == []
    assert stats.admissions["gopher_cross_method"] == 1
    assert gopher.selectors.count(b"") == 1  # the root menu, once

    menu = got[gopher.url("/1")]
    # A menu's text is its display strings; its references are its fetchable items.
    assert menu.text("Title") == "Welcome to the test hole"
    assert (menu.text("URL-References") or "").splitlines() == [
        gopher.url("/0/about.txt"),
        gopher.url("/1/soft"),
        web.url("/web.html"),
    ]
    about = got[gopher.url("/0/about.txt")]
    assert (about.text("Type"), about.text("Title")) == ("Text", "About this hole")
    assert got[gopher.url("/1/soft")].text("Title") == "Software menu"
    assert got[gopher.url("/0/soft/changes.txt")].text("Title") == "Changes"
