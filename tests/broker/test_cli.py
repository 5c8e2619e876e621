"""broker.cli: ``harvest-broker`` run as a subprocess (``python -m broker``): serve until
SIGTERM, query, collect (through the running broker and offline), register, the
configuration reference, and configuration errors."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from broker.app import Broker
from broker.cli import _terminal
from broker.config import from_mapping
from broker.hsr import COLLECTION
from broker.index import TantivyIndex
from broker.oid import oid
from gatherer.database import GathererDatabase
from tests.broker.test_api import TOKEN, get_json, make, put, running, url_of
from tests.broker.test_collector import gatherer_service, refused_port
from tests.support import REPO, run_module

BOLD, PLAIN = "\x1b[1m", "\x1b[0m"


async def cli(*args: str, within: float = 60.0) -> tuple[int, str, str]:
    """Run ``harvest-broker ARGS`` as a process; its exit status, stdout and stderr."""
    return await run_module("broker", *args, within=within)


def write_config(path: Path, data: Path, source: str, **broker: str) -> Path:
    settings = "".join(f'{key} = "{value}"\n' for key, value in broker.items())
    path.write_text(
        f"""[broker]
listen = "127.0.0.1:0"
data_dir = "{data}"
admin_token = "{TOKEN}"
name = "CLI Broker"
{settings}
[[collections]]
name = "g1"
source = "{source}"
"""
    )
    return path


@asynccontextmanager
async def serving(config: Path, log: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``harvest-broker serve CONFIG`` as a subprocess, and the URL it listens on."""
    with log.open("wb") as errors:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "broker",
            "serve",
            str(config),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        found = re.search(r"listening on (http://\S+)/", line)
        if not found:
            problem = await asyncio.to_thread(log.read_text)
            raise AssertionError(f"no address in {line!r}; log: {problem}")
        yield process, found.group(1)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def fill(db: GathererDatabase) -> None:
    await put(db, make("http://cli.example/cache", "Harvest cache design", Author="Wessels"))
    await put(db, make("http://cli.example/proxy", "A caching proxy", Keywords="cache"))
    await put(db, make("http://cli.example/garden", "Gardening"))


async def test_serve_query_collect_register_and_stop_on_sigterm(tmp_path: Path) -> None:
    async with gatherer_service(tmp_path / "g.db") as (db, source):
        await fill(db)
        config = write_config(tmp_path / "broker.toml", tmp_path / "data", source)
        async with serving(config, tmp_path / "serve.log") as (process, url):
            # collect: a pull through the admin API, waited for, index caught up.
            status, out, err = await cli("collect", "-c", str(config), "--url", url, "--full")
            assert status == 0, err
            assert re.match(r"g1: 3 items, 3 upserted, 0 removed", out), out

            status, out, err = await cli("query", "--url", url, "--color", "always", "Title: cache")
            assert status == 0, err
            assert "1-1 of 1 for Title:cache" in out
            assert f"{BOLD}Harvest cache design{PLAIN}" in out
            assert "http://cli.example/cache" in out
            assert f"Title: Harvest {BOLD}cache{PLAIN} design" in out

            status, out, err = await cli("query", "--url", url, "--json", "cache")
            assert status == 0, err
            answer = json.loads(out)
            assert answer["total"] == 2
            assert {r["url"] for r in answer["results"]} == {
                "http://cli.example/cache",
                "http://cli.example/proxy",
            }

            status, out, err = await cli("query", "--url", url, "Title: (cache")
            assert status == 2
            assert out == ""
            assert "unclosed '('" in err
            assert "  Title: (cache\n         ^\n" in err

            status, out, err = await cli(
                "register",
                "--hsr",
                url,
                "--type",
                "cache",
                "--name",
                "campus",
                "--host",
                "cache.colorado.example",
                "--port",
                "3128",
                "--description",
                "The University of Colorado campus cache",
                "--admin",
                "ops@colorado.example",
                "--ttl",
                "3600",
            )
            assert status == 0, err
            assert out.startswith("registered cache http://cache.colorado.example:3128/ until ")
            status, out, err = await cli(
                "query", "--url", url, "--json", "Server-Type: cache AND Description: colorado"
            )
            assert [r["url"] for r in json.loads(out)["results"]] == [
                "http://cache.colorado.example:3128/"
            ]

            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 30) == 0
    assert "stopping" in (tmp_path / "serve.log").read_text()


async def test_collect_offline_pulls_into_the_data_directory(tmp_path: Path) -> None:
    async with gatherer_service(tmp_path / "g.db") as (db, source):
        await fill(db)
        data = tmp_path / "data"
        config = write_config(tmp_path / "broker.toml", data, source)
        status, out, err = await cli("collect", "--offline", "-c", str(config))
        assert status == 0, err
        assert out.startswith("g1: 3 items, 3 upserted, 0 removed, 0 refreshed (complete")
        status, _, err = await cli("collect", "--offline", "-c", str(config), "nothing")
        assert status == 2
        assert "no collection 'nothing'" in err
        async with running(data) as broker:
            assert await broker.registry.count() == 3
            found = await broker.searcher.search("cache", limit=10)
            assert found.total == 2  # the index was brought up to date too
            # While a broker has the data directory, an offline collect leaves it alone.
            status, _, err = await cli("collect", "--offline", "-c", str(config))
            assert status == 1
            assert "is the broker running?" in err
            assert await broker.registry.count() == 3
        # An offline collect into a data directory whose index is gone fills a new one.
        shutil.rmtree(data / "index")
        status, _, err = await cli("collect", "--offline", "-c", str(config))
        assert status == 0, err
        async with await TantivyIndex.open(data / "index") as index:
            assert not index.unfilled
            assert await index.count() == 3  # every object, not only the (no) new changes


async def test_collect_reports_a_wrong_token_and_an_unreachable_broker(tmp_path: Path) -> None:
    async with running(tmp_path / "b", admin_token=TOKEN) as broker:
        status, _, err = await cli("collect", "--url", url_of(broker), "--token", "wrong", "x")
        assert status == 2
        assert "token" in err
    status, _, err = await cli("collect", "--url", f"http://127.0.0.1:{refused_port()}")
    assert status == 1
    assert "cannot reach the broker" in err


async def test_query_and_register_fail_cleanly(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{refused_port()}"
    status, _, err = await cli("query", "--url", down, "cache")
    assert status == 1
    assert "cannot query" in err
    args = ["--type", "cache", "--name", "n", "--host", "h.example", "--port", "3128"]
    status, _, err = await cli("register", "--hsr", down, *args)
    assert status == 1
    async with running(tmp_path / "b") as broker:
        status, _, err = await cli(
            "register", "--hsr", url_of(broker), *args, "--url", "ftp://h.example/"
        )
        assert status == 2
        assert "URL must be http" in err
    status, _, err = await cli("register", "--hsr", down, *args[:-2], "--port", "70000")
    assert status == 2  # argparse


def test_the_configuration_reference_is_in_sync_with_the_docs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "broker", "config-reference"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    )
    documented = (REPO / "docs" / "broker-configuration.md").read_bytes()
    assert done.stdout == documented, (
        "docs/broker-configuration.md is stale: "
        "run `harvest-broker config-reference > docs/broker-configuration.md`"
    )


async def test_a_bad_configuration_exits_2_listing_every_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(
        """[broker]
listen = "nowhere"
colour = "red"

[[collections]]
name = "x"

[[collections]]
name = "y"
source = "http://a.example"
kind = "squid"
"""
    )
    status, out, err = await cli("serve", str(config))
    assert status == 2
    assert out == ""
    problems = err.strip().splitlines()
    assert len(problems) == 4, err
    assert any("listen" in p for p in problems)
    assert any("colour" in p for p in problems)
    assert any("collections[0].source: required" in p for p in problems)
    assert any("collections[1].kind" in p for p in problems)
    reserved = tmp_path / "hsr.toml"
    reserved.write_text('[[collections]]\nname = "hsr"\nsource = "http://a.example"\n')
    status, _, err = await cli("serve", str(reserved))
    assert status == 2
    assert "server registry" in err
    status, _, err = await cli("serve", str(tmp_path / "missing.toml"))
    assert status == 2


async def test_a_broker_keeps_itself_registered_at_its_hsr_with_its_summary(
    tmp_path: Path,
) -> None:
    async with running(tmp_path / "hsr", name="HSR") as registry:
        config = from_mapping(
            {
                "broker": {
                    "listen": "127.0.0.1:0",
                    "data_dir": str(tmp_path / "b"),
                    "name": "Physics Broker",
                },
                "hsr": {
                    "url": url_of(registry),
                    "description": "Physics preprints",
                    "administrator": "ops@physics.example",
                    "renew": 60,
                },
            }
        )
        async with await Broker.start(config) as broker:
            key = oid(COLLECTION, f"{url_of(broker)}/")
            query = {"q": "Server-Type: broker AND Description: physics"}
            async with aiohttp.ClientSession() as session:
                for _ in range(200):  # 10 s at most
                    found = await get_json(session, f"{url_of(registry)}/api/search", params=query)
                    if found["total"]:
                        break
                    await asyncio.sleep(0.05)
            stored = await registry.registry.get(key)
            assert stored is not None
            assert stored.record.template == "BROKER"
            assert stored.record.text("Name") == "Physics Broker"
            assert stored.record.text("Time-to-Live") == "120"
            assert (stored.record.text("Software-Version") or "").startswith("harvest-broker ")
            assert stored.record.text("Content-Documents") == "0"
            assert (stored.record.text("Content-Summary") or "").startswith("* 0")
            assert [r["url"] for r in found["results"]] == [f"{url_of(broker)}/"]


@pytest.mark.parametrize(
    ("html", "bold", "shown"),
    [
        ("a <mark>b</mark> c", True, f"a {BOLD}b{PLAIN} c"),
        ("a <mark>b</mark> c", False, "a b c"),
        ("&lt;mark&gt; &amp; <mark>x</mark>", False, "<mark> & x"),
        ("evil \x1b]0;title\x07 text", False, "evil ]0;title text"),
    ],
)
def test_snippets_are_shown_in_a_terminal_safely(html: str, bold: bool, shown: str) -> None:
    assert _terminal(html, bold) == shown
