"""Brokers working together through a real HSR on loopback: each registers its content summary
and keeps it current, the HSR ranks them for a query, and a federated search asks them at
once (through a real cache when one is set), reporting the late and the missing ones."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from broker.app import Broker
from broker.config import Config, from_mapping
from broker.federation import SummaryKeeper
from broker.hsr import COLLECTION
from harvest_common.hsr_client import register, server_record
from harvest_common.soif import Record
from tests.broker.test_api import TOKEN, get_json, load, make
from tests.broker.test_collector import refused_port
from tests.replicator.relay import Relay
from tests.support import MakeCache, run_module, stop_and_read_log

POLL = 200  # polls 50 ms apart: 10 s at most
DEADLINE = 1.0


def config(data: Path, name: str, registry: str | None, **federation: Any) -> Config:
    raw: dict[str, Any] = {
        "broker": {
            "listen": "127.0.0.1:0",
            "data_dir": str(data),
            "name": name,
            "admin_token": TOKEN,
            **federation.pop("broker", {}),
        },
        "federation": {"summary_delay": 0.05, "deadline": DEADLINE, **federation},
    }
    if registry is not None:
        raw["hsr"] = {"url": registry, "renew": 60}
    return from_mapping(raw)


@contextlib.asynccontextmanager
async def started(
    data: Path, name: str, registry: str | None, records: Iterable[Record] = (), **federation: Any
) -> AsyncIterator[Broker]:
    """A broker on loopback holding ``records`` (collection ``c``), registered at the HSR
    ``registry`` (None: at none); ``federation``: its settings (``broker``: those)."""
    async with await Broker.start(config(data, name, registry, **federation)) as broker:
        if records:
            await load(broker, "c", records)
        yield broker


async def routed(
    session: aiohttp.ClientSession, hsr: str, query: str, names: set[str], brokers: int = 0
) -> list[dict[str, Any]]:
    """The HSR's route for ``query`` once every broker in ``names`` has evidence in it (and
    it ranks at least ``brokers``)."""
    ranked: list[dict[str, Any]] = []
    for _ in range(POLL):
        route = await get_json(session, f"{hsr}/api/hsr/route", params={"q": query})
        ranked = route["brokers"]
        if names <= {b["name"] for b in ranked if b["evidence"]} and len(ranked) >= brokers:
            return ranked
        await asyncio.sleep(0.05)
    raise AssertionError(f"{names} not routed for {query!r}: {ranked}")


def pages(site: str, count: int, title: str, keywords: str) -> list[Record]:
    return [make(f"http://{site}/{n}", f"{title} {n}", Keywords=keywords) for n in range(count)]


CACHES = pages("caches.example", 30, "Squid: a caching proxy, part", "web caching squid")
PHYSICS = pages("physics.example", 40, "Quantum field theory, lecture", "particles physics")
MUSIC = pages("music.example", 20, "Jazz standards, volume", "saxophone jazz")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


@pytest.fixture
async def hsr(tmp_path: Path) -> AsyncIterator[Broker]:
    async with started(tmp_path / "hsr", "HSR", None) as registry:
        yield registry


# -- the HSR as a directory of brokers ------------------------------------------------------


async def test_the_route_ranks_first_the_broker_whose_content_the_query_is_about(
    tmp_path: Path, hsr: Broker, session: aiohttp.ClientSession
) -> None:
    async with (
        started(tmp_path / "c", "Caches", hsr.url, CACHES),
        started(tmp_path / "p", "Physics", hsr.url, PHYSICS),
        started(tmp_path / "m", "Music", hsr.url, MUSIC),
    ):
        for query, first in (
            ("caching AND proxy", "Caches"),
            ("Title: quantum", "Physics"),
            ("Keywords: saxophone OR jazz", "Music"),
        ):
            ranked = await routed(session, hsr.url, query, {first}, brokers=3)
            assert ranked[0]["name"] == first
            assert [b["evidence"] for b in ranked] == [True, False, False], ranked
            assert {b["name"] for b in ranked} == {"Caches", "Physics", "Music"}
        best = ranked[0]
        assert best["documents"] == 20
        assert best["estimate"] == 20
        assert (
            best["reason"] == "about 20 of 20 objects match: Keywords: saxophone in 20; jazz in 20"
        )
        assert ranked[1]["reason"].startswith("none of ")
        limited = await get_json(
            session, f"{hsr.url}/api/hsr/route", params={"q": "jazz", "limit": "1"}
        )
        assert (limited["total"], [b["name"] for b in limited["brokers"]]) == (3, ["Music"])
        bad = await get_json(session, f"{hsr.url}/api/hsr/route", 400, params={"q": "a AND"})
        assert bad["position"] == 2
        await get_json(session, f"{hsr.url}/api/hsr/route", 400, params={"q": "x", "limit": "0"})
    # The HSR's registrations are not content: its own summary would hold none, and is not
    # made again for a new one.
    keeper = SummaryKeeper(hsr.registry, hsr.changed, delay=1, sample=100, excluded=COLLECTION)
    assert (await keeper.refresh()).documents == 0
    assert await hsr.registry.count(COLLECTION) == 3
    await register(hsr.url, server_record("cache", name="c", host="c.example", port=1), session)
    await keeper.refresh()
    assert keeper.stats().refreshes == 1
    await load(hsr, "own", MUSIC[:2])
    assert (await keeper.refresh()).documents == 2
    assert keeper.stats().refreshes == 2


async def test_the_summary_follows_the_collections_and_renews_the_registration_at_once(
    tmp_path: Path, hsr: Broker, session: aiohttp.ClientSession
) -> None:
    async with started(tmp_path / "b", "Growing", hsr.url, summary_delay=0.5) as broker:
        assert broker.summaries is not None
        first = (await get_json(session, f"{broker.url}/api/status"))["summary"]
        assert (first["documents"], first["refreshes"]) == (0, 1)
        # Three pulls land within the delay: one summary takes them all in.
        for part in (CACHES[:10], CACHES[10:20], MUSIC):
            await load(broker, "c", part)
        # Renewed at once, not after the renewal period (60 s).
        started_at = time.monotonic()
        (growing,) = await routed(session, hsr.url, "jazz", {"Growing"})
        assert time.monotonic() - started_at < 10
        assert growing["documents"] == 40
        await asyncio.sleep(1.0)  # longer than the delay: a second summary would be made
        status = (await get_json(session, f"{broker.url}/api/status"))["summary"]
        assert (status["documents"], status["sampled"], status["refreshes"]) == (40, 40, 2)
        # Objects that leave take their words with them.
        await broker.registry.forget("c", now=time.time())
        await broker.catch_up()
        for _ in range(POLL):
            route = await get_json(session, f"{hsr.url}/api/hsr/route", params={"q": "jazz"})
            if not route["brokers"][0]["documents"]:
                break
            await asyncio.sleep(0.05)
        assert route["brokers"][0]["evidence"] is False


# -- federated search -------------------------------------------------------------------------


async def test_a_federated_search_reports_the_late_and_the_missing_broker(
    tmp_path: Path, hsr: Broker, session: aiohttp.ClientSession
) -> None:
    relay = Relay(delay=3 * DEADLINE)
    await relay.start()
    try:
        async with (
            started(tmp_path / "a", "Answering", hsr.url, CACHES) as answering,
            started(tmp_path / "s", "Slow", None, PHYSICS + CACHES[:3]) as slow,
        ):
            down = await Broker.start(config(tmp_path / "d", "Down", hsr.url))
            try:
                await load(down, "c", CACHES)
                await routed(session, hsr.url, "caching", {"Answering", "Down"})
            finally:
                await down.stop()  # its registration stays until its TTL
            # The slow broker is behind a link with a delay of three deadlines; it is
            # registered there, with its summary.
            relay.target_port = slow.address[1]
            keeper = SummaryKeeper(slow.registry, slow.changed, delay=1, sample=100, excluded="")
            await keeper.refresh()
            record = server_record(
                "broker",
                name="Slow",
                host="127.0.0.1",
                port=relay.port,
                attributes=keeper.current()[1],
            )
            await register(hsr.url, record, session)

            began = time.monotonic()
            answer = await get_json(
                session,
                f"{answering.url}/api/search",
                params={"q": "caching", "federated": "1", "limit": "5"},
            )
            took = time.monotonic() - began
            # The late broker held up no one: the answer came at the deadline.
            assert took < DEADLINE + 1.0, took
            outcomes = {b["name"]: (b["outcome"], b["error"]) for b in answer["brokers"]}
            assert outcomes["Answering"] == ("answered", None)
            assert outcomes["Slow"] == ("late", f"no answer within {DEADLINE:g} s")
            assert outcomes["Down"][0] == "failed"
            assert "cannot connect" in outcomes["Down"][1]
            assert answer["federated"] is True
            assert answer["total"] == 30
            assert answer["more"] is True
            results = answer["results"]
            assert len(results) == 5
            assert {r["broker"]["name"] for r in results} == {"Answering"}
            assert all(r["url"].startswith("http://caches.example/") for r in results)
            assert all("<mark>caching</mark>" in r["snippets"][0]["html"] for r in results)

            page = await fetch_text(
                session, f"{answering.url}/", {"q": "caching", "federated": "1"}
            )
            assert "from 1 of 3 brokers" in page
            assert "<strong>late</strong>" in page
            assert "<strong>failed</strong>" in page
            assert 'class="broker"' in page
            assert f'href="{answering.url}/api/objects/' in page

            status, out, err = await run_module(
                "broker", "query", "--url", answering.url, "--federated", "--limit", "2", "caching"
            )
            assert status == 0, err
            assert out.count("   at Answering") == 2
            assert f"Slow (http://127.0.0.1:{relay.port}/): late, no answer within" in out
            assert f"Down ({down.url}/): failed, cannot connect" in out
            stats = await get_json(session, f"{answering.url}/api/stats")
            assert stats["federated_brokers"] == {"answered": 3, "late": 3, "failed": 3}
    finally:
        await relay.close()


async def test_a_federated_search_goes_through_the_cache_and_shows_a_url_once(
    tmp_path: Path, hsr: Broker, session: aiohttp.ClientSession, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    proxy = f"http://127.0.0.1:{cache.address[1]}"
    shared = make("http://shared.example/", "A caching guide shared by both")
    async with (
        started(tmp_path / "a", "A", hsr.url, [*CACHES[:5], shared], broker={"proxy": proxy}) as a,
        started(tmp_path / "b", "B", hsr.url, [*CACHES[5:8], shared]) as b,
    ):
        await routed(session, hsr.url, "caching", {"A", "B"})
        answer = await get_json(
            session, f"{a.url}/api/search", params={"q": "caching", "federated": "1"}
        )
        assert [x["outcome"] for x in answer["brokers"]] == ["answered", "answered"]
        urls = [r["url"] for r in answer["results"]]
        assert len(urls) == len(set(urls)) == 9  # 6 + 4, the shared one once
        (once,) = [r for r in answer["results"] if r["url"] == "http://shared.example/"]
        assert {once["broker"]["name"], *(x["name"] for x in once["also"])} == {"A", "B"}
        assert all(0.0 <= r["score"] <= 1.0 for r in answer["results"])
        lines = await stop_and_read_log(cache)
        asked = {(line.method, line.url.split("?")[0]) for line in lines}
        assert asked == {
            ("GET", f"{hsr.url}/api/hsr/route"),
            ("GET", f"{a.url}/api/search"),
            ("GET", f"{b.url}/api/search"),
        }


async def test_a_federated_search_needs_the_hsr_and_a_query_that_parses(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    nowhere = f"http://127.0.0.1:{refused_port()}"
    async with started(tmp_path / "a", "Alone", None, CACHES[:2], hsr=nowhere) as alone:
        params = {"q": "caching", "federated": "1"}
        failed = await get_json(session, f"{alone.url}/api/search", 502, params=params)
        assert failed["error"].startswith(f"cannot route the query: {nowhere}/api/hsr/route: ")
        async with session.get(f"{alone.url}/", params=params) as response:
            assert response.status == 502
            assert "cannot route the query" in await response.text()
        # The query is checked before anyone is asked.
        bad = await get_json(
            session, f"{alone.url}/api/search", 400, params={"q": "a AND", "federated": "1"}
        )
        assert bad["position"] == 2
        await get_json(
            session,
            f"{alone.url}/api/search",
            400,
            params={"q": "x", "federated": "1", "offset": "995", "limit": "10"},
        )
        # Without an HSR of its own, a broker routes by itself: it knows no broker.
        plain = await Broker.start(config(tmp_path / "p", "Plain", None))
        async with plain:
            answer = await get_json(session, f"{plain.url}/api/search", params=params)
            assert (answer["brokers"], answer["results"], answer["total"]) == ([], [], 0)
            page = await fetch_text(session, f"{plain.url}/", params)
            assert "The registry knows no broker to ask." in page


async def fetch_text(session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> str:
    async with session.get(url, params=params) as response:
        assert response.status == 200, await response.text()
        return await response.text()
