"""FILE, FTP (a real pyftpdlib server) and Gopher (a small server; both from
tests.gatherer.servers) fetching, the Gopher menu parser, and the scheme dispatch."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gatherer.errors import FetchError
from gatherer.fetch import gopher_menu
from gatherer.fetch.dispatch import Fetchers
from gatherer.fetch.file import FileFetcher
from gatherer.fetch.ftp import FtpFetcher
from gatherer.fetch.gopher import GopherFetcher
from gatherer.fetch.gopher_menu import MenuItem
from gatherer.fetch.result import Fetched, Validators
from gatherer.fetch.settings import FetchSettings
from gatherer.fetch.slots import ConnectionSlots
from tests.gatherer.servers import Ftp, GopherServer, ftp_server
from tests.support import Origin, free_port, static


def settings(**overrides: Any) -> FetchSettings:
    values: dict[str, Any] = {"timeout": 5.0, "connect_timeout": 2.0, "max_bytes": 64 * 1024}
    values.update(overrides)
    return FetchSettings(**values)


def slots() -> ConnectionSlots:
    return ConnectionSlots(per_host=2, total=8)


def tree(root: Path) -> Path:
    """pub/{readme.txt, "two words.txt", docs/, .hidden, big.bin}"""
    (root / "docs").mkdir(parents=True)
    (root / "readme.txt").write_bytes(b"Read me first.\n")
    (root / "two words.txt").write_bytes(b"spaced")
    (root / ".hidden").write_bytes(b"not listed")
    (root / "docs" / "guide.txt").write_bytes(b"A guide.\n")
    (root / "big.bin").write_bytes(os.urandom(100 * 1024))
    return root


# -- FILE -------------------------------------------------------------------------------------


async def test_file_document_and_change_token(tmp_path: Path) -> None:
    root = tree(tmp_path / "pub")
    url = (root / "readme.txt").as_uri()
    fetcher = FileFetcher(settings())
    fetched = await fetcher.fetch(url)
    st = (root / "readme.txt").stat()
    assert fetched.content == b"Read me first.\n"
    assert fetched.content_type is None
    assert fetched.modified == st.st_mtime
    assert fetched.last_modified == f"{st.st_mtime_ns}:{st.st_size}"
    again = await fetcher.fetch(url, validators=Validators(last_modified=fetched.last_modified))
    assert again.not_modified
    assert (again.content, again.last_modified) == (b"", fetched.last_modified)
    (root / "readme.txt").write_bytes(b"Changed, and longer.\n")
    changed = await fetcher.fetch(url, validators=Validators(last_modified=fetched.last_modified))
    assert (changed.not_modified, changed.content) == (False, b"Changed, and longer.\n")


async def test_file_directory_listing(tmp_path: Path) -> None:
    root = tree(tmp_path / "pub")
    fetched = await FileFetcher(settings()).fetch(root.as_uri())  # (no trailing slash)
    base = root.as_uri() + "/"
    assert fetched.content_type == "text/directory"
    assert fetched.content == b"big.bin\ndocs/\nreadme.txt\ntwo words.txt\n"
    assert fetched.links == (
        base + "big.bin",
        base + "docs/",
        base + "readme.txt",
        base + "two%20words.txt",
    )
    # Any host names the gatherer's own machine; escapes are decoded.
    other = await FileFetcher(settings()).fetch(f"file://elsewhere{root}/two%20words.txt")
    assert other.content == b"spaced"


async def test_file_failures(tmp_path: Path) -> None:
    root = tree(tmp_path / "pub")
    fetcher = FileFetcher(settings())
    with pytest.raises(FetchError) as missing:
        await fetcher.fetch((root / "nope.txt").as_uri())
    assert (missing.value.kind, missing.value.status) == ("status", 404)
    with pytest.raises(FetchError) as through_file:
        await fetcher.fetch((root / "readme.txt").as_uri() + "/below")
    assert through_file.value.status == 404
    with pytest.raises(FetchError) as big:
        await fetcher.fetch((root / "big.bin").as_uri())
    assert big.value.kind == "too_large"
    with pytest.raises(FetchError) as relative:
        await fetcher.fetch("file:pub/readme.txt")
    assert relative.value.kind == "refused"
    os.mkfifo(root / "pipe")
    with pytest.raises(FetchError) as fifo:
        await fetcher.fetch((root / "pipe").as_uri())
    assert fifo.value.kind == "io"


async def test_file_unreadable_is_an_io_error(tmp_path: Path) -> None:
    # A symlink loop: unreadable even for root (which ignores permission bits).
    loop = tmp_path / "loop.txt"
    loop.symlink_to(loop)
    with pytest.raises(FetchError) as caught:
        await FileFetcher(settings()).fetch(loop.as_uri())
    assert caught.value.kind == "io"


async def test_file_symlink_is_followed(tmp_path: Path) -> None:
    root = tree(tmp_path / "pub")
    (tmp_path / "link.txt").symlink_to(root / "readme.txt")
    fetched = await FileFetcher(settings()).fetch((tmp_path / "link.txt").as_uri())
    assert fetched.content == b"Read me first.\n"


# -- FTP --------------------------------------------------------------------------------------


@pytest.fixture
def ftp(tmp_path: Path) -> Iterator[Ftp]:
    """Anonymous read-only on pub/, user alice on private/."""
    public = tree(tmp_path / "pub")
    private = tmp_path / "private"
    private.mkdir()
    (private / "diary.txt").write_bytes(b"Dear diary.\n")
    with ftp_server(public, users={"alice": ("secret", private)}) as server:
        yield server


async def test_ftp_directory_listing(ftp: Ftp) -> None:
    fetcher = FtpFetcher(settings(), slots())
    root = await fetcher.fetch(ftp.url("/"))
    assert root.content_type == "text/directory"
    assert root.content == b"big.bin\ndocs/\nreadme.txt\ntwo words.txt\n"
    assert root.links == (
        ftp.url("/big.bin"),
        ftp.url("/docs/"),
        ftp.url("/readme.txt"),
        ftp.url("/two%20words.txt"),
    )
    assert root.peer == "127.0.0.1"
    docs = await fetcher.fetch(ftp.url("/docs"))  # a directory though no "/" says so
    assert docs.links == (ftp.url("/docs/guide.txt"),)


async def test_ftp_file_and_change_token(ftp: Ftp) -> None:
    fetcher = FtpFetcher(settings(), slots())
    fetched = await fetcher.fetch(ftp.url("/two%20words.txt"))
    assert fetched.content == b"spaced"
    mtime = (ftp.public / "two words.txt").stat().st_mtime
    assert fetched.modified is not None
    assert abs(fetched.modified - int(mtime)) <= 1
    assert fetched.last_modified is not None
    assert fetched.last_modified.endswith(":6")  # "{modify}:{size}"
    again = await fetcher.fetch(
        ftp.url("/two%20words.txt"), validators=Validators(last_modified=fetched.last_modified)
    )
    assert again.not_modified
    assert again.content == b""


async def test_ftp_configured_login(ftp: Ftp) -> None:
    alice = settings(ftp_logins={"127.0.0.1": ("alice", "secret")})
    fetched = await FtpFetcher(alice, slots()).fetch(ftp.url("/diary.txt"))
    assert fetched.content == b"Dear diary.\n"
    # The URL's own login wins over the configured one.
    with pytest.raises(FetchError) as caught:
        await FtpFetcher(alice, slots()).fetch(f"ftp://alice:wrong@127.0.0.1:{ftp.port}/diary.txt")
    assert caught.value.kind == "refused"


async def test_ftp_failures(ftp: Ftp) -> None:
    fetcher = FtpFetcher(settings(), slots())
    with pytest.raises(FetchError) as missing:
        await fetcher.fetch(ftp.url("/nope.txt"))
    assert (missing.value.kind, missing.value.status) == ("status", 404)
    with pytest.raises(FetchError) as big:
        await fetcher.fetch(ftp.url("/big.bin"))
    assert big.value.kind == "too_large"
    with pytest.raises(FetchError) as refused:
        await fetcher.fetch(f"ftp://127.0.0.1:{free_port()}/")
    assert refused.value.kind == "connect"


# -- Gopher -----------------------------------------------------------------------------------

MENU = (
    b"iWelcome to the test hole\t\terror.host\t1\r\n"
    b"0About this server\t/about.txt\t127.0.0.1\t{port}\r\n"
    b"1Software\t/soft\t127.0.0.1\t{port}\r\n"
    b"9A binary\t/blob.bin\t127.0.0.1\t{port}\r\n"
    b"IA picture\t/pic.png\tgopher.example\t70\r\n"
    b"hThe web\tURL:http://127.0.0.1/web/\t127.0.0.1\t{port}\r\n"
    b"0Two words\t/two words.txt\t127.0.0.1\t{port}\t+\r\n"
    b"7Search\t/search\t127.0.0.1\t{port}\r\n"
    b"8Telnet\t\t127.0.0.1\t23\r\n"
    b"3An error line\t\terror.host\t1\r\n"
    b"0Broken line without enough fields\r\n"
    b".\r\n"
    b"0After the end\t/late\t127.0.0.1\t70\r\n"
)
STUFFED = b"First line\r\n..starts with a dot\r\n.\r\n"
BLOB = bytes(range(256)) + b"\r\n.\r\n" + bytes(range(256))


@pytest.fixture
async def gopher() -> AsyncIterator[GopherServer]:
    server = GopherServer()
    await server.start()
    server.documents = {
        b"": MENU.replace(b"{port}", str(server.port).encode()),
        b"/about.txt": STUFFED,
        b"/blob.bin": BLOB,
        b"/two words.txt": b"two\r\n.\r\n",
    }
    yield server
    await server.stop()


async def test_gopher_menu(gopher: GopherServer) -> None:
    fetched = await GopherFetcher(settings(), slots()).fetch(gopher.url(""))
    assert gopher.selectors == [b""]
    assert fetched.content_type == "text/x-gopher-menu"
    assert fetched.content.decode().splitlines() == [
        "Welcome to the test hole",
        "About this server",
        "Software",
        "A binary",
        "A picture",
        "The web",
        "Two words",
        "Search",
        "Telnet",
        "An error line",
    ]
    assert fetched.links == (
        gopher.url("/0/about.txt"),
        gopher.url("/1/soft"),
        gopher.url("/9/blob.bin"),
        "gopher://gopher.example/I/pic.png",
        "http://127.0.0.1/web/",
        gopher.url("/0/two%20words.txt"),
    )
    assert fetched.peer == "127.0.0.1"


async def test_gopher_text_binary_and_selectors(gopher: GopherServer) -> None:
    fetcher = GopherFetcher(settings(), slots())
    text = await fetcher.fetch(gopher.url("/0/about.txt"))
    assert (text.content, text.content_type) == (
        b"First line\r\n.starts with a dot\r\n",
        "text/plain",
    )
    blob = await fetcher.fetch(gopher.url("/9/blob.bin"))
    assert (blob.content, blob.content_type) == (BLOB, None)  # terminator-like bytes kept
    spaced = await fetcher.fetch(gopher.url("/0/two%20words.txt"))
    assert spaced.content == b"two\r\n"
    assert gopher.selectors == [b"/about.txt", b"/blob.bin", b"/two words.txt"]


async def test_gopher_failures(gopher: GopherServer) -> None:
    fetcher = GopherFetcher(settings(), slots())
    with pytest.raises(FetchError) as missing:
        await fetcher.fetch(gopher.url("/1/nothing-here"))
    assert (missing.value.kind, missing.value.status) == ("status", 404)
    gopher.documents[b"/huge"] = b"x" * (settings().max_bytes + 1)
    with pytest.raises(FetchError) as huge:
        await fetcher.fetch(gopher.url("/9/huge"))
    assert huge.value.kind == "too_large"
    with pytest.raises(FetchError) as refused:
        await fetcher.fetch(f"gopher://127.0.0.1:{free_port()}/")
    assert refused.value.kind == "connect"


async def test_gopher_silent_server_times_out() -> None:
    release = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                await release.wait()
        finally:
            writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(FetchError) as caught:
            await GopherFetcher(settings(timeout=0.3), slots()).fetch(f"gopher://127.0.0.1:{port}/")
    finally:
        release.set()
        server.close()
        await server.wait_closed()
    assert caught.value.kind == "timeout"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "0About\t/about.txt\thost.example\t70",
            MenuItem("0", "About", "/about.txt", "host.example", 70),
        ),
        ("1Menu\t\thost.example\t7070\t+", MenuItem("1", "Menu", "", "host.example", 7070)),
        ("iJust text", MenuItem("i", "Just text", "", "", 0)),
        ("iText\t\t(NULL)\tx", MenuItem("i", "Text", "", "(NULL)", 0)),
        ("3Gone\t\terror.host\t1", MenuItem("3", "Gone", "", "error.host", 1)),
        ("0No port\t/x\thost.example", None),
        ("0Bad port\t/x\thost.example\tseventy", None),
        ("0Huge port\t/x\thost.example\t70000", None),
        ("0Unicode digits\t/x\thost.example\t\u00b2", None),
        ("", None),
    ],
)
def test_menu_line(line: str, expected: MenuItem | None) -> None:
    assert gopher_menu.parse(line + "\r\n") == (() if expected is None else (expected,))


@pytest.mark.parametrize(
    ("item", "url"),
    [
        (MenuItem("0", "d", "/a b?c#d", "h.example", 70), "gopher://h.example/0/a%20b%3Fc%23d"),
        (MenuItem("1", "d", "", "h.example", 7070), "gopher://h.example:7070/1"),
        (MenuItem("9", "d", "/f", "::1", 70), "gopher://[::1]/9/f"),
        (MenuItem("h", "d", "URL:https://w.example/", "h.example", 70), "https://w.example/"),
        (MenuItem("0", "d", "/f", "bad host", 70), None),
        (MenuItem("0", "d", "/f", "h.example", 0), None),
        (MenuItem("i", "d", "/f", "h.example", 70), None),
        (MenuItem("7", "d", "/f", "h.example", 70), None),
        (MenuItem("8", "d", "", "h.example", 23), None),
    ],
)
def test_menu_item_url(item: MenuItem, url: str | None) -> None:
    assert item.url == url


def test_menu_ends_at_dot_line_and_text_unstuffing() -> None:
    items = gopher_menu.parse("0A\t/a\th\t70\n.\n0B\t/b\th\t70\n")
    assert [item.display for item in items] == ["A"]
    assert gopher_menu.text_body(b"a\n..b\n...\n.\nafter\n") == b"a\n.b\n..\n"
    assert gopher_menu.text_body(b"no terminator") == b"no terminator"


# -- dispatch ---------------------------------------------------------------------------------


async def test_fetchers_dispatch_by_scheme(
    tmp_path: Path, origin: Origin, gopher: GopherServer, ftp: Ftp
) -> None:
    origin.route("/page", static(b"web page", {"Content-Type": "text/plain"}))
    root = tree(tmp_path / "local")
    async with Fetchers(settings()) as fetchers:
        fetched: list[Fetched] = [
            await fetchers.fetch(origin.url("/page")),
            await fetchers.fetch((root / "readme.txt").as_uri()),
            await fetchers.fetch(ftp.url("/readme.txt")),
            await fetchers.fetch(gopher.url("/0/about.txt")),
        ]
        with pytest.raises(FetchError) as mailto:
            await fetchers.fetch("mailto:someone@example.org")
        with pytest.raises(FetchError) as robots:
            await fetchers.get_robots(ftp.url("/"))
        assert await fetchers.get_robots(origin.url("/page")) == (404, b"")
    assert [f.content for f in fetched] == [
        b"web page",
        b"Read me first.\n",
        b"Read me first.\n",
        b"First line\r\n.starts with a dot\r\n",
    ]
    assert mailto.value.kind == "refused"
    assert robots.value.kind == "refused"


async def test_connection_slots_cap_per_host() -> None:
    limits = ConnectionSlots(per_host=2, total=3)
    inside: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}
    total_most = 0

    async def visit(host: str) -> None:
        nonlocal total_most
        async with limits.hold(host):
            inside[host] += 1
            most[host] = max(most[host], inside[host])
            total_most = max(total_most, sum(inside.values()))
            await asyncio.sleep(0.01)
            inside[host] -= 1

    async with asyncio.timeout(5):
        await asyncio.gather(*(visit(host) for host in "aaaaabbbbb"))
    assert most == {"a": 2, "b": 2}
    assert total_most == 3
