"""The cache at the Harvest Server Registry: ``[hsr]`` in its configuration (checked as every
Harvest server's, with the region and networks a cache serves), what its record says, and the
real program registering at a real broker on loopback: by itself, and from the supervisor of
two workers (once); renewed before its time-to-live runs out."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from harvest_cache.config import from_mapping, load
from harvest_cache.registration import registered, serves
from harvest_common.errors import ConfigError
from harvest_common.soif import Record, decode
from tests.integration.test_workers import supervisor
from tests.replicator.test_cli import serving
from tests.support import free_port, program_config, spawn, write_config

POLL = 300  # polls of /api/hsr, 50 ms apart: 15 s at most
SERVES = {"region": "Colorado", "networks": ["128.138.0.0/16", "2001:db8::/32"]}


@contextlib.asynccontextmanager
async def hsr(tmp_path: Path) -> AsyncIterator[str]:
    """A broker serving as the HSR, as a process; its URL."""
    config = tmp_path / "hsr.toml"
    config.write_text(
        f'[broker]\nlisten = "127.0.0.1:0"\ndata_dir = "{tmp_path / "hsr"}"\nname = "HSR"\n'
    )
    async with serving("broker", config, tmp_path / "hsr.log") as (_, url):
        yield url


async def caches(
    session: aiohttp.ClientSession, url: str, *, seen: int = 1
) -> list[dict[str, Any]]:
    """The caches registered at the HSR each time their list changed (a renewal changes the
    Last-Seen), until ``seen`` versions were seen (bounded)."""
    versions: list[list[dict[str, Any]]] = []
    for _ in range(POLL):
        async with session.get(f"{url}/api/hsr", params={"type": "cache"}) as response:
            assert response.status == 200
            servers = (await response.json())["servers"]
        if servers and (not versions or servers != versions[-1]):
            versions.append(servers)
            if len(versions) >= seen:
                return [server for listed in versions for server in listed]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{len(versions)} versions of the caches seen, not {seen}")


async def record_of(session: aiohttp.ClientSession, url: str, oid: str) -> Record:
    async with session.get(f"{url}/api/objects/{oid}", params={"format": "soif"}) as response:
        (record,) = decode(await response.read())
    assert isinstance(record, Record)
    return record


def test_the_hsr_table_is_checked_as_every_servers(tmp_path: Path) -> None:
    path = tmp_path / "cache.toml"
    path.write_text(
        '[hsr]\nurl = "http://hsr.example:8501"\nrenew = 3600\nregion = "Colorado"\n'
        'networks = ["128.138.0.0/16"]\n'
    )
    settings = load(path).hsr
    assert (settings.url, settings.renew, settings.region) == (
        "http://hsr.example:8501",
        3600.0,
        "Colorado",
    )
    assert [str(n) for n in settings.networks] == ["128.138.0.0/16"]
    assert load(None).hsr.url is None  # none: not registered
    path.write_text('[hsr]\nurl = "nowhere"\nrenew = 5\nnetworks = ["campus"]\nzone = 1\n')
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert caught.value.problems == [
        f"{path}: hsr.url: expected an http:// or https:// URL, got 'nowhere'",
        f"{path}: hsr.renew: must be between 60 and 100000000.0, got 5",
        f"{path}: hsr.networks: 'campus' is not an IP address or CIDR network",
        f"{path}: unknown key hsr.zone",
    ]


def test_the_record_says_where_the_cache_answers_and_whom_it_serves() -> None:
    config = from_mapping(
        {
            "icp": {"port": 3130},
            "htcp": {"port": 4827},
            "hsr": {"url": "http://hsr.example:8501", **SERVES},
        }
    )
    assert serves(config, 3128, 3129) == (
        ("Ports", "http=3128 icp=3130 htcp=4827 admin=3129"),
        ("Region", "Colorado"),
        ("Networks", "128.138.0.0/16\n2001:db8::/32"),
    )
    # Nothing said of what is not in use or not configured.
    assert serves(from_mapping({}), 8080, None) == (("Ports", "http=8080"),)


async def test_the_program_registers_the_cache(tmp_path: Path) -> None:
    async with hsr(tmp_path) as url, aiohttp.ClientSession() as session:
        port, admin = free_port(), free_port()
        home = tmp_path / "cache"
        home.mkdir()
        sections = program_config(
            home, f"127.0.0.1:{port}", f"127.0.0.1:{admin}", "t0ken", hsr={"url": url, **SERVES}
        )
        path = home / "harvest.toml"
        write_config(path, sections)
        process = await asyncio.to_thread(spawn, path, home / "stderr.txt")
        try:
            (found,) = await caches(session, url)
            assert found["url"] == f"http://127.0.0.1:{port}/"
            assert (found["name"], found["host"], found["port"]) == (
                "program-cache",
                "127.0.0.1",
                port,
            )
            assert found["ports"] == f"http={port} admin={admin}"
            assert (found["region"], found["networks"]) == ("Colorado", SERVES["networks"])
            assert found["software_version"].startswith("harvest-cache ")
            record = await record_of(session, url, found["oid"])
            assert record.text("Time-to-Live") == str(2 * 86400)  # two renewal periods
            # Clients find a cache for their network by searching the registry.
            query = {"type": "cache", "q": "Region: colorado"}
            async with session.get(f"{url}/api/hsr", params=query) as response:
                assert [s["url"] for s in (await response.json())["servers"]] == [found["url"]]
            process.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(process.wait, 15) == 0
        finally:
            if process.poll() is None:
                process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(process.wait, 10)


async def test_the_supervisor_of_several_workers_registers_the_cache_once(tmp_path: Path) -> None:
    async with (
        hsr(tmp_path) as url,
        aiohttp.ClientSession() as session,
        supervisor(tmp_path / "cache", hsr={"url": url, "renew": 60}) as sup,
    ):
        (found,) = await caches(session, url)
        assert (found["name"], found["port"]) == ("workers-cache", sup.port)
        assert found["ports"] == f"http={sup.port} admin={sup.admin_port}"
        # The workers do not register as well (they would renew the same URL's record).
        await asyncio.sleep(1.0)
        async with session.get(f"{url}/api/stats") as response:
            registrations = (await response.json())["hsr_registrations"]
        assert registrations == {"new": 1, "renewed": 0, "invalid": 0}


async def test_the_registration_is_renewed_before_it_expires(tmp_path: Path) -> None:
    async with hsr(tmp_path) as url, aiohttp.ClientSession() as session:
        config = from_mapping({"hsr": {"url": url, **SERVES}})
        often = replace(config, hsr=replace(config.hsr, renew=0.2))
        async with registered(often, "renewed", ("127.0.0.1", 3128), 3129):
            renewals = await caches(session, url, seen=3)
        expiries = [r["expires"] for r in renewals]
        assert expiries == sorted(expiries)
        assert len(set(expiries)) == 3
        record = await record_of(session, url, renewals[-1]["oid"])
        assert record.text("Time-to-Live") == "0.400"  # two renewal periods
