"""A floor under the broker's relevance: on a small fixed corpus, what a person wants comes
first.

``python-docs.soif`` holds 34 records of the relevance benchmark's corpus (bench/relevance.py):
pages of Debian's python3.11-doc as the gatherer summarizes them, chosen around a few topics
with the pages that crowd them (index pages that link to every module, the neighbours of a
module's page). A real broker holds them, with a gatherer and itself registered at its HSR
with descriptions that share the queries' words. The queries and the pages a person expects
first are the benchmark's; their mean reciprocal rank must stay at the floor.
"""

from __future__ import annotations

import statistics
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from broker.app import Broker
from harvest_common.hsr_client import register, server_record
from harvest_common.soif import Record, decode
from tests.broker.test_api import get_json, load, running, url_of

CORPUS = Path(__file__).with_name("python-docs.soif")
SITE = "file:///usr/share/doc/python3.11/html/"
# Measured: 1.0 (the build before: 0.77, its typos unfound or second).
MRR_FLOOR = 0.9

QUERIES = {
    "asyncio": {"library/asyncio.html"},
    "asyncoi~1": {"library/asyncio.html"},
    "asyncoi~2": {"library/asyncio.html"},
    "json": {"library/json.html"},
    "regular expressions": {"library/re.html", "howto/regex.html"},
    "virtual environments": {"tutorial/venv.html", "library/venv.html"},
    "pahtlib~1": {"library/pathlib.html"},
    "sorting key functions": {"howto/sorting.html"},
    "deep copy": {"library/copy.html"},
    "priority queue": {"library/heapq.html"},
    "random numbers": {"library/random.html", "library/secrets.html"},
}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    records = [item for item in decode(CORPUS.read_bytes()) if isinstance(item, Record)]
    assert len(records) == 34
    async with running(tmp_path / "broker") as started, aiohttp.ClientSession() as session:
        await load(started, "python-docs", records)
        base = url_of(started)
        about = "The Python documentation: asyncio, json, regular expressions, random numbers"
        for kind, port in (("gatherer", 8500), ("broker", 8501)):
            record = server_record(
                kind, name=f"Python docs {kind}", host="docs.example", port=port, description=about
            )
            await register(base, record, session)
        # Approximate words are ranked once the index's word list is current (until then,
        # for seconds after a change, they match unranked).
        await started.index.refresh_vocabulary()
        yield started


async def search(session: aiohttp.ClientSession, broker: Broker, query: str) -> list[Any]:
    found = await get_json(
        session, f"{url_of(broker)}/api/search", params={"q": query, "limit": "100"}
    )
    results: list[Any] = found["results"]
    return results


def page(result: Any) -> str:
    url: str = result["url"]
    return url.removeprefix(SITE)


async def test_the_pages_a_person_expects_come_first(broker: Broker) -> None:
    ranks = {}
    async with aiohttp.ClientSession() as session:
        for query, expected in QUERIES.items():
            pages = [page(r) for r in await search(session, broker, query)]
            ranks[query] = next((i for i, p in enumerate(pages, 1) if p in expected), None)
    mrr = statistics.fmean(1 / rank if rank else 0.0 for rank in ranks.values())
    assert mrr >= MRR_FLOOR, ranks


async def test_links_and_server_records_do_not_answer_ordinary_searches(broker: Broker) -> None:
    async with aiohttp.ClientSession() as session:
        # The library's index and the subprocess page link to asyncio pages but say nothing
        # of asyncio: only named are links searched.
        linking = {"library/index.html", "library/subprocess.html"}
        found = await search(session, broker, "asyncio")
        assert {page(r) for r in found} >= {"library/asyncio.html", "library/asyncio-task.html"}
        assert not linking & {page(r) for r in found}
        assert all(s["attribute"] != "URL-References" for r in found for s in r["snippets"])
        named = await search(session, broker, "URL-References: asyncio")
        assert linking <= {page(r) for r in named}
        # The registered servers' descriptions hold "json", but a search for it is not an
        # HSR search; one that names Server-Type is.
        assert {r["template"] for r in await search(session, broker, "json")} == {"FILE"}
        servers = await search(session, broker, "Server-Type: (gatherer OR broker) json")
        assert sorted(r["template"] for r in servers) == ["BROKER", "GATHERER"]
