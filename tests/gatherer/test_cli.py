"""``harvest-gather`` as a user runs it: the installed command (and ``python -m gatherer``) in a
subprocess, gathering from the loopback test site, then showing, exporting and serving what it
stored; bad command lines and configurations; stopping by signal. Also the progress table."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import zstandard
from aiohttp import web
from rich.console import Console

from gatherer.cli import progress_table
from gatherer.config import load
from gatherer.errors import ConfigError
from gatherer.metrics import RunStats
from gatherer.runner import open_database
from harvest_common.soif import Record, decode, encode
from tests.gatherer.site import Site, page
from tests.support import free_port

COMMAND = Path(sys.executable).with_name("harvest-gather")
# Generous bounds for one command (interpreter start, summarizer workers, a small crawl).
COMMAND_SECONDS = 30.0
# How long a stopping process may take once signalled.
STOP_SECONDS = 5.0
HELD = "/held.html"
PAGES = {"/": "Home page", "/a.html": "Page A", "/b.html": "Page B", "/docs/c.html": "Page C"}


@dataclass
class Done:
    status: int
    stdout: bytes
    stderr: bytes

    @property
    def err(self) -> str:
        return self.stderr.decode()


@dataclass
class HeldSite(Site):
    """The test site, with one page (``HELD``) that answers only once released: a fetch a
    test can interrupt, deterministically, once ``arrived`` is set."""

    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def _answer(self, request: web.Request, path: str) -> tuple[int, web.StreamResponse]:
        if path == HELD:
            self.arrived.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(COMMAND_SECONDS):
                    await self.release.wait()
        return await super()._answer(request, path)


@pytest.fixture
async def site() -> AsyncIterator[HeldSite]:
    s = HeldSite()
    html = "text/html; charset=utf-8"
    s.documents["/robots.txt"] = ("text/plain", b"User-agent: *\nDisallow: /private/\n")
    s.documents["/"] = (
        html,
        page(PAGES["/"], "The front page.", links=("/a.html", "/b.html", "/missing.html")),
    )
    s.documents["/a.html"] = (html, page(PAGES["/a.html"], "Alpha.", links=("/docs/c.html",)))
    s.documents["/b.html"] = (html, page(PAGES["/b.html"], "Beta."))
    s.documents["/docs/c.html"] = (html, page(PAGES["/docs/c.html"], "Gamma."))
    s.documents[HELD] = (html, page("Held page", "Worth the wait."))
    await s.start()
    yield s
    s.release.set()  # lets a held request end, so the site stops at once
    await s.stop()


def write_config(tmp_path: Path, root: str, *, headers: str = "") -> Path:
    """A configuration keeping all traffic on loopback, its data under ``tmp_path``."""
    hosts = tmp_path / "hosts"
    hosts.write_text("")
    lines = [
        "Gatherer-Name: CLI Gatherer",
        "Gatherer-Host: gatherer.test",
        "Access-Delay: 0",
        "Summarizer-Workers: 1",
        "Fetch-Timeout: 10",
        "DNS-Servers: 127.0.0.1:9",
        "DNS-Timeout: 0.5",
        f"Hosts-File: {hosts}",
        f"Data-Directory: {tmp_path / 'data'}",
        *headers.splitlines(),
        "<RootNodes>",
        f"{root} URL=20",
        "</RootNodes>",
    ]
    path = tmp_path / "gatherer.cf"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextlib.asynccontextmanager
async def started(
    *args: str, cwd: Path, module: bool = False
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The command running (``python -m gatherer`` if ``module``) with pipes for its output and
    no terminal; killed by its PID if still running at the end."""
    program = [sys.executable, "-m", "gatherer"] if module else [str(COMMAND)]
    process = await asyncio.create_subprocess_exec(
        *program,
        *args,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()


async def finished(process: asyncio.subprocess.Process, within: float) -> Done:
    async with asyncio.timeout(within):
        out, err = await process.communicate()
    assert process.returncode is not None
    return Done(process.returncode, out, err)


async def harvest_gather(*args: str, cwd: Path, module: bool = False) -> Done:
    async with started(*args, cwd=cwd, module=module) as process:
        return await finished(process, COMMAND_SECONDS)


@pytest.fixture
async def gathered(tmp_path: Path, site: HeldSite) -> Path:
    """The site gathered by ``harvest-gather run`` (no --quiet, output to pipes: no live
    display); the configuration's path."""
    config = write_config(tmp_path, site.url("/"))
    done = await harvest_gather("run", str(config), cwd=tmp_path)
    assert done.status == 0, done.err
    # No live display without a terminal: no cursor movement or colour on stderr.
    assert "\x1b[" not in done.err
    assert b"stored 4" in done.stdout
    return config


async def stored(config: Path) -> dict[str, Record]:
    async with open_database(await asyncio.to_thread(load, config)) as db:
        return {url: got.record for url in await db.urls() if (got := await db.get(url))}


# -- run ---------------------------------------------------------------------------------------


async def test_run_quiet_gathers_and_prints_the_summary(tmp_path: Path, site: HeldSite) -> None:
    config = write_config(tmp_path, site.url("/"))
    done = await harvest_gather("run", str(config), "--quiet", cwd=tmp_path)
    assert done.status == 0, done.err
    summary = done.stdout.decode()
    assert re.search(r"^fetched 4 \(\d+ bytes\)", summary, re.MULTILINE), summary
    assert re.search(r"^summarized 4, stored 4, deleted 0", summary, re.MULTILINE), summary
    assert "fetch errors: status 1" in summary  # /missing.html
    assert (tmp_path / "data" / "gatherer.db").is_file()
    records = await stored(config)
    assert {url: record.text("Title") for url, record in records.items()} == {
        site.url(path): title for path, title in PAGES.items()
    }


async def test_run_without_a_terminal_works_without_quiet(gathered: Path, site: HeldSite) -> None:
    # The fixture ran it: exit 0, a summary, no escape sequences; the records are there.
    assert set(await stored(gathered)) == {site.url(path) for path in PAGES}


async def test_run_refresh_checks_every_record_again(gathered: Path) -> None:
    again = await harvest_gather("run", str(gathered), "--quiet", cwd=gathered.parent)
    assert again.status == 0, again.err
    assert re.search(r", fresh 4$", again.stdout.decode(), re.MULTILINE)  # none due yet
    refreshed = await harvest_gather(
        "run", str(gathered), "--quiet", "--refresh", cwd=gathered.parent
    )
    assert refreshed.status == 0, refreshed.err
    assert re.search(r", fresh 0$", refreshed.stdout.decode(), re.MULTILINE)


async def test_run_reports_every_configuration_problem(tmp_path: Path) -> None:
    config = tmp_path / "broken.cf"
    config.write_text(
        "Gatherer-Name: Broken\n"
        "Access-Delay: soon\n"
        "Favourite-Colour: blue\n"
        "<RootNodes>\n"
        "http://127.0.0.1:9/ Depth=deep\n"
        "</RootNodes>\n"
    )
    with pytest.raises(ConfigError) as caught:
        await asyncio.to_thread(load, config)
    problems = caught.value.problems
    assert len(problems) >= 3
    done = await harvest_gather("run", str(config), "--quiet", cwd=tmp_path, module=True)
    assert done.status == 2
    assert done.stdout == b""
    lines = done.err.splitlines()
    assert lines == [f"harvest-gather: {problem}" for problem in problems]
    for number in (2, 3, 5):  # each problem names its file and line
        assert any(line.startswith(f"harvest-gather: {config}:{number}: ") for line in lines)
    assert "Traceback" not in done.err


async def test_check_config_names_what_a_good_file_gathers(tmp_path: Path) -> None:
    config = tmp_path / "good.cf"
    config.write_text(
        "Gatherer-Name: Docs\n"
        "Top-Directory: top\n"
        "<RootNodes>\n"
        "http://127.0.0.1:9/ Depth=2\n"
        "http://127.0.0.1:9/other/\n"
        "</RootNodes>\n"
        "<LeafNodes>\n"
        "http://127.0.0.1:9/leaf.html\n"
        "</LeafNodes>\n"
    )
    data = (await asyncio.to_thread(load, config)).data_directory
    done = await harvest_gather("check-config", str(config), cwd=tmp_path)
    assert (done.status, done.err) == (0, "")
    wanted = f"{config}: gatherer Docs, 2 root node(s), 1 leaf node(s), records in {data}\n"
    assert done.stdout.decode() == wanted
    assert not (tmp_path / "top").exists()  # (checked, nothing made)


async def test_check_config_reports_every_problem(tmp_path: Path) -> None:
    config = tmp_path / "broken.cf"
    config.write_text("Gatherer-Name: Broken\nAccess-Delay: soon\nFavourite-Colour: blue\n")
    with pytest.raises(ConfigError) as caught:
        await asyncio.to_thread(load, config)
    done = await harvest_gather("check-config", str(config), cwd=tmp_path)
    assert (done.status, done.stdout) == (2, b"")
    assert done.err.splitlines() == [f"harvest-gather: {p}" for p in caught.value.problems]
    missing = await harvest_gather("check-config", str(tmp_path / "nowhere.cf"), cwd=tmp_path)
    assert missing.status == 2
    assert "cannot read configuration" in missing.err


async def test_run_with_a_missing_configuration(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.cf"
    done = await harvest_gather("run", str(missing), cwd=tmp_path)
    assert done.status == 2
    assert (
        done.err
        == f"harvest-gather: {missing}: cannot read configuration: No such file or directory\n"
    )


async def test_run_without_arguments_prints_the_usage(tmp_path: Path) -> None:
    done = await harvest_gather("run", cwd=tmp_path)
    assert done.status == 2
    assert done.err.startswith("usage: harvest-gather run")
    assert "required: config" in done.err


async def test_sigterm_stops_a_run_cleanly(tmp_path: Path, site: HeldSite) -> None:
    site.documents["/"] = ("text/html", page("Home page", "Front.", links=(HELD,)))
    config = write_config(tmp_path, site.url("/"))
    async with started("run", str(config), "--quiet", cwd=tmp_path) as process:
        async with asyncio.timeout(COMMAND_SECONDS):
            await site.arrived.wait()
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        done = await finished(process, STOP_SECONDS)
    assert time.monotonic() - signalled < STOP_SECONDS
    assert done.status == 128 + signal.SIGTERM, done.err
    assert "harvest-gather: run stopped by SIGTERM, incomplete" in done.err
    assert "Traceback" not in done.err
    assert b"stored 1" in done.stdout  # the summary so far
    # The database was closed: SQLite removes the WAL file when its last connection closes.
    data = tmp_path / "data"
    assert not (data / "gatherer.db-wal").exists()
    assert set(await stored(config)) == {site.url("/")}


# -- show --------------------------------------------------------------------------------------


async def test_show_prints_the_stored_record(gathered: Path, site: HeldSite) -> None:
    url = site.url("/a.html")
    done = await harvest_gather("show", "-c", str(gathered), url, cwd=gathered.parent)
    assert done.status == 0, done.err
    (record,) = decode(done.stdout)
    assert isinstance(record, Record)
    assert record.url == url
    assert record.text("Title") == "Page A"
    assert done.stdout == encode((await stored(gathered))[url])


async def test_show_an_unknown_url(gathered: Path, site: HeldSite) -> None:
    url = site.url("/never.html")
    done = await harvest_gather("show", "-c", str(gathered), url, cwd=gathered.parent)
    assert done.status == 1
    assert done.stdout == b""
    assert done.err == f"harvest-gather: no record for {url}\n"


# -- export ------------------------------------------------------------------------------------


async def test_export_writes_every_record_to_stdout(gathered: Path, site: HeldSite) -> None:
    # No -c: gatherer.cf in the working directory.
    done = await harvest_gather("export", cwd=gathered.parent)
    assert done.status == 0, done.err
    items = list(decode(done.stdout))
    assert all(isinstance(item, Record) for item in items)
    assert {item.url for item in items if isinstance(item, Record)} == {
        site.url(path) for path in PAGES
    }


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
async def test_export_compressed_to_a_file(gathered: Path, site: HeldSite, coding: str) -> None:
    output = gathered.parent / f"records.soif.{coding}"
    done = await harvest_gather(
        "export", "-c", str(gathered), "--compress", coding, "-o", str(output), cwd=gathered.parent
    )
    assert done.status == 0, done.err
    assert done.stdout == b""
    raw = output.read_bytes()
    if coding == "gzip":
        body = gzip.decompress(raw)
    else:
        body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
    titles = {item.url: item.text("Title") for item in decode(body) if isinstance(item, Record)}
    assert titles == {site.url(path): title for path, title in PAGES.items()}


async def test_export_since_gives_only_later_changes(gathered: Path) -> None:
    records = await stored(gathered)
    times = sorted((float(r.text("Update-Time") or 0), url) for url, r in records.items())
    since, _ = times[1]
    done = await harvest_gather(
        "export", "-c", str(gathered), "--since", repr(since), cwd=gathered.parent
    )
    assert done.status == 0, done.err
    urls = [item.url for item in decode(done.stdout) if isinstance(item, Record)]
    assert urls == [url for _, url in times[2:]]


@pytest.mark.parametrize("since", ["yesterday", "nan", "-5"])
async def test_export_rejects_a_bad_since(tmp_path: Path, since: str) -> None:
    done = await harvest_gather("export", "--since", since, cwd=tmp_path)
    assert done.status == 2
    assert f"argument --since: expected epoch seconds, e.g. 1764503554.123456; got {since!r}" in (
        done.err
    )


# -- serve -------------------------------------------------------------------------------------


async def answering(session: aiohttp.ClientSession, base: str) -> dict[str, object]:
    """The status page, once the service answers (polled, bounded)."""
    async with asyncio.timeout(COMMAND_SECONDS):
        while True:
            try:
                async with session.get(f"{base}/") as response:
                    status: dict[str, object] = await response.json()
                    return status
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)


async def stops_cleanly(process: asyncio.subprocess.Process, signum: signal.Signals) -> Done:
    signalled = time.monotonic()
    process.send_signal(signum)
    done = await finished(process, STOP_SECONDS)
    assert time.monotonic() - signalled < STOP_SECONDS
    assert done.status == 0, done.err
    assert "Traceback" not in done.err
    return done


async def test_serve_on_listen_and_stop_on_sigterm(gathered: Path, site: HeldSite) -> None:
    port = free_port()
    args = ("serve", "-c", str(gathered), "--listen", f"127.0.0.1:{port}")
    base = f"http://127.0.0.1:{port}"
    async with (
        started(*args, cwd=gathered.parent) as process,
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        status = await answering(session, base)
        assert status["name"] == "CLI Gatherer"
        assert status["records"] == len(PAGES)
        async with session.get(f"{base}/records", params={"since": "0"}) as response:
            assert response.status == 200
            assert response.headers["Content-Encoding"] == "gzip"
            body = gzip.decompress(await response.read())
        done = await stops_cleanly(process, signal.SIGTERM)
    assert {item.url for item in decode(body) if isinstance(item, Record)} == {
        site.url(path) for path in PAGES
    }
    assert done.stdout.decode() == f"serving CLI Gatherer records on {base}/records\n"


async def test_serve_defaults_to_the_gatherer_port_and_stops_on_sigint(
    tmp_path: Path, site: HeldSite
) -> None:
    port = free_port()
    config = write_config(tmp_path, site.url("/"), headers=f"Gatherer-Port: {port}")
    async with (
        started("serve", "-c", str(config), cwd=tmp_path) as process,
        aiohttp.ClientSession() as session,
    ):
        status = await answering(session, f"http://127.0.0.1:{port}")
        assert status["records"] == 0  # nothing gathered yet: an empty database
        await stops_cleanly(process, signal.SIGINT)


@pytest.mark.parametrize("listen", ["8500", "127.0.0.1:", ":8500", "127.0.0.1:99999"])
async def test_serve_rejects_a_malformed_listen(tmp_path: Path, listen: str) -> None:
    done = await harvest_gather("serve", "--listen", listen, cwd=tmp_path)
    assert done.status == 2
    assert f"argument --listen: expected HOST:PORT (port 0-65535); got {listen!r}" in done.err


async def test_serve_on_a_port_in_use(tmp_path: Path, site: HeldSite) -> None:
    config = write_config(tmp_path, site.url("/"))
    done = await harvest_gather(
        "serve", "-c", str(config), "--listen", f"127.0.0.1:{site.port}", cwd=tmp_path
    )
    assert done.status == 1
    assert done.err.startswith("harvest-gather: ")
    assert "Traceback" not in done.err


# -- the rest ----------------------------------------------------------------------------------


async def test_python_m_gatherer_help(tmp_path: Path) -> None:
    done = await harvest_gather("--help", cwd=tmp_path, module=True)
    assert done.status == 0
    usage = done.stdout.decode()
    assert usage.startswith("usage: harvest-gather")
    for command in ("run", "export", "serve", "show"):
        assert command in usage


def test_progress_table_shows_the_figures() -> None:
    stats = RunStats(
        elapsed=8.0,
        fetched=30,
        not_modified=10,
        unchanged=3,
        fresh=2,
        stored=27,
        bytes=4_500_000,
        queued=17,
        active=4,
        hosts=6,
    )
    stats.fetch_errors["timeout"] = 2
    stats.summarize_errors["crash"] = 1
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(progress_table(stats))
    text = console.export_text()
    rows = {re.sub(r"\s+", " ", line.strip("│┃ ")) for line in text.splitlines() if "│" in line}
    assert "Harvest gatherer" in text
    for row in (
        "pages/s │ 5.0",  # (30 fetched + 10 not modified) / 8 s
        "fetched │ 30 (4.5 MB)",
        "unchanged │ 15",  # 10 not modified + 3 same MD5 + 2 fresh
        "stored │ 27",
        "queue │ 17 queued, 4 fetching",
        "hosts │ 6",
        "errors │ 3",
        "elapsed │ 8.0 s",
    ):
        assert row in rows, text
