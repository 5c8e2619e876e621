"""Values a client chooses, where the broker reads them as URLs or numbers (issue 25): a bad
IPv6 literal, a port that is not a port, digits that are not ASCII or too many for int().
Each is a 400 with the reason where the client sent it, and harmless where it is only
stored: never a 500, never an index that stops catching up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from broker.app import Broker
from harvest_common.hsr_client import server_record
from harvest_common.soif import Record, encode
from tests.broker.test_api import TOKEN, get_json, load, make, running, url_of

SOIF = {"Content-Type": "application/x-soif"}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(tmp_path / "b") as started:
        yield started


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


def registration(url: str, port: str = "3128", **more: str) -> bytes:
    base = server_record("cache", name="c", host="h.example", port=3128, url=url)
    attributes = [(n, v) for n, v in base.attributes if n != "Port"]
    attributes.append(("Port", port.encode()))
    attributes += [(n.replace("_", "-"), v.encode()) for n, v in more.items()]
    return encode(Record(base.template, url, tuple(attributes)))


async def register(
    session: aiohttp.ClientSession, broker: Broker, body: bytes
) -> tuple[int, dict[str, Any]]:
    async with session.post(
        f"{url_of(broker)}/api/hsr/register", data=body, headers=SOIF
    ) as response:
        return response.status, await response.json()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://[::1/", "Invalid IPv6 URL"),
        ("http://::1]/", "Invalid IPv6 URL"),
        ("http://[zz]/", "does not appear to be an IPv4 or IPv6 address"),
        ("http://[1.2.3.4]/", "An IPv4 address cannot be in brackets"),
        ("http://ex\uff03ample/", "invalid characters under NFKC normalization"),
        ("http://h.example:99999/", "Port out of range"),
        ("http://h.example:\u00b2/", "Port could not be cast to integer"),
    ],
)
async def test_a_registration_whose_url_is_not_a_url_is_refused_with_400(
    broker: Broker, session: aiohttp.ClientSession, url: str, reason: str
) -> None:
    status, answer = await register(session, broker, registration(url))
    assert status == 400, answer
    assert answer["error"].startswith("URL is not a valid URL")
    assert reason in answer["error"]


async def test_a_registration_at_port_0_is_refused_with_400(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    status, answer = await register(session, broker, registration("http://h.example:0/"))
    assert (status, answer["error"][:30]) == (400, "URL's port must be from 1 to 6")


@pytest.mark.parametrize("port", ["\u00b2", "\u0663", "9" * 5000, "0" * 4 + "80"])
async def test_a_port_that_is_not_ascii_digits_or_too_long_is_refused_with_400(
    broker: Broker, session: aiohttp.ClientSession, port: str
) -> None:
    status, answer = await register(session, broker, registration("http://h.example/", port))
    assert status == 400, answer
    assert answer["error"].startswith("Port must be a number from 1 to 65535")


@pytest.mark.parametrize("size", ["\u00b2", "9" * 5000, str(2**70)])
async def test_a_file_size_that_is_no_number_is_stored_and_indexed_without_it(
    broker: Broker, session: aiohttp.ClientSession, size: str
) -> None:
    status, answer = await register(
        session, broker, registration("http://odd.example/", File_Size=size)
    )
    assert status == 201, answer
    # The index caught up: the next registration is found too.
    status, answer = await register(session, broker, registration("http://next.example/"))
    assert status == 201, answer
    found = await get_json(
        session, f"{url_of(broker)}/api/search", params={"q": "Server-Type: cache Name: c"}
    )
    assert {r["url"] for r in found["results"]} == {"http://odd.example/", "http://next.example/"}


async def test_the_registry_lists_a_server_record_with_an_odd_port_from_any_collection(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    # A record of a pulled collection that looks like a server record: the HSR lists it,
    # as it lists any, with no port.
    pulled = make(
        "http://pulled.example/",
        "pulled",
        Host="pulled.example",
        Port="\u00b2",
        Server_Type="cache",
    )
    await load(broker, "c1", [Record("CACHE", pulled.url, pulled.attributes)])
    listed = await get_json(session, f"{url_of(broker)}/api/hsr")
    assert [(s["url"], s["port"]) for s in listed["servers"]] == [("http://pulled.example/", None)]


@pytest.mark.parametrize("number", ["\u00b2", "\u0663", "9" * 20])
async def test_the_search_page_reads_odd_numbers_as_their_default(
    broker: Broker, session: aiohttp.ClientSession, number: str
) -> None:
    for name in ("n", "start"):
        params = {"q": "cache", name: number}
        async with session.get(f"{url_of(broker)}/", params=params) as response:
            assert response.status == 200, (name, await response.text())


@pytest.mark.parametrize("source", ["http://[::1", "http://[zz]/", "http://g.example:99999"])
async def test_a_collection_whose_source_is_not_a_url_is_refused_with_400(
    tmp_path: Path, session: aiohttp.ClientSession, source: str
) -> None:
    async with running(tmp_path / "admin", admin_token=TOKEN) as broker:
        table = {"name": "odd", "kind": "gatherer", "source": source}
        async with session.post(
            f"{url_of(broker)}/api/admin/collections",
            json=table,
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as response:
            assert response.status == 400
            assert "not a valid URL" in (await response.json())["error"]
        assert "odd" not in broker.scheduler.status()
