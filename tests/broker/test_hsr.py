"""broker.hsr: server records registered at a broker acting as the Harvest Server Registry,
renewed, expired, searched and replicated; the registration client and renewal loop
(harvest_common.hsr_client)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from broker.app import Broker
from broker.hsr import COLLECTION, DEFAULT_TTL, RegistrationError, validate
from broker.oid import oid
from harvest_common.errors import HsrClientError
from harvest_common.hsr_client import register, registering, server_record
from harvest_common.soif import Delete, Record, decode, encode
from tests.broker.test_api import TOKEN, get_json, running, url_of
from tests.broker.test_bulk import bulk
from tests.broker.test_collector import refused_port, until


@pytest.fixture
async def session() -> Any:
    async with aiohttp.ClientSession() as opened:
        yield opened


@pytest.fixture
async def hsr(tmp_path: Path) -> Any:
    async with running(tmp_path / "hsr", admin_token=TOKEN, name="HSR") as started:
        yield started


def cache(
    name: str, port: int, description: str, host: str = "cache.example", **more: Any
) -> Record:
    return server_record("cache", name=name, host=host, port=port, description=description, **more)


async def post(
    session: aiohttp.ClientSession, broker: Broker, body: bytes, status: int
) -> dict[str, Any]:
    async with session.post(
        f"{url_of(broker)}/api/hsr/register",
        data=body,
        headers={"Content-Type": "application/x-soif"},
    ) as response:
        assert response.status == status, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer


async def search(session: aiohttp.ClientSession, broker: Broker, query: str) -> list[str]:
    found = await get_json(session, f"{url_of(broker)}/api/search", params={"q": query})
    return sorted(r["url"] for r in found["results"])


async def test_a_registration_is_stored_stamped_and_searchable(
    hsr: Broker, session: aiohttp.ClientSession
) -> None:
    before = time.time()
    answer = await post(
        session,
        hsr,
        encode(cache("boulder", 3128, "The University of Colorado's campus cache")),
        201,
    )
    assert answer["renewed"] is False
    assert (answer["url"], answer["type"]) == ("http://cache.example:3128/", "cache")
    assert answer["oid"] == oid(COLLECTION, "http://cache.example:3128/")
    assert before + DEFAULT_TTL <= answer["expires"] <= time.time() + DEFAULT_TTL
    stored = await hsr.registry.get(answer["oid"])
    assert stored is not None
    assert stored.collection == COLLECTION
    record = stored.record
    assert record.template == "CACHE"
    assert record.text("Server-Type") == "cache"
    assert before - 1 <= float(record.text("Last-Seen") or 0) <= time.time()
    assert record.text("Time-to-Live") == str(int(DEFAULT_TTL))
    await post(session, hsr, encode(cache("denver", 8080, "A cache in Colorado's capital")), 201)
    await post(
        session, hsr, encode(cache("paris", 3128, "A cache in France", "paris.example")), 201
    )
    broker = server_record(
        "broker", name="physics", host="b.example", port=8501, description="Colorado physics"
    )
    await post(session, hsr, encode(broker), 201)
    assert await search(session, hsr, "Server-Type: cache AND Description: colorado") == [
        "http://cache.example:3128/",
        "http://cache.example:8080/",
    ]
    assert await search(session, hsr, "Server-Type: broker AND Description: physics") == [
        "http://b.example:8501/"
    ]
    listed = await get_json(session, f"{url_of(hsr)}/api/hsr")
    assert listed["total"] == 4
    assert [s["type"] for s in listed["servers"]] == ["broker", "cache", "cache", "cache"]
    boulder = next(s for s in listed["servers"] if s["name"] == "boulder")
    assert boulder["port"] == 3128
    assert boulder["host"] == "cache.example"
    assert boulder["description"] == "The University of Colorado's campus cache"
    only = await get_json(
        session, f"{url_of(hsr)}/api/hsr", params={"type": "cache", "q": "colorado"}
    )
    assert sorted(s["name"] for s in only["servers"]) == ["boulder", "denver"]
    await get_json(session, f"{url_of(hsr)}/api/hsr", 400, params={"type": "squid"})
    bad = await get_json(session, f"{url_of(hsr)}/api/hsr", 400, params={"q": "a AND"})
    assert bad["position"] == 2  # within q, not within the query it was wrapped in


async def test_a_renewal_extends_the_registration_and_is_a_new_change(
    hsr: Broker, session: aiohttp.ClientSession
) -> None:
    first = await post(session, hsr, encode(cache("c", 3128, "x", ttl=100)), 201)
    seq = await hsr.registry.last_seq()
    renewed = await post(session, hsr, encode(cache("c", 3128, "x, renewed", ttl=5000)), 200)
    assert renewed["renewed"] is True
    assert renewed["oid"] == first["oid"]
    assert renewed["expires"] >= first["expires"] + 4800
    assert await hsr.registry.count(COLLECTION) == 1
    # Registrations go through the change sequence: replicas get them from the bulk export.
    headers, items = await bulk(session, hsr, since=str(seq))
    assert [i.text("Description") for i in items if isinstance(i, Record)] == ["x, renewed"]
    assert headers["X-Harvest-Complete"] == "false"


async def test_an_expired_registration_is_no_longer_listed_and_gc_removes_it(
    hsr: Broker, session: aiohttp.ClientSession
) -> None:
    await post(session, hsr, encode(cache("brief", 3128, "short-lived", ttl=1)), 201)
    await post(session, hsr, encode(cache("lasting", 3129, "long-lived")), 201)
    await asyncio.sleep(1.1)
    listed = await get_json(session, f"{url_of(hsr)}/api/hsr")
    assert [s["name"] for s in listed["servers"]] == ["lasting"]
    seq = await hsr.registry.last_seq()
    async with session.post(
        f"{url_of(hsr)}/api/admin/gc", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as response:
        assert (await response.json())["removed"] == 1
    assert await search(session, hsr, "Server-Type: cache") == ["http://cache.example:3129/"]
    _, items = await bulk(session, hsr, since=str(seq))
    assert [i.record.url for i in items if isinstance(i, Delete)] == ["http://cache.example:3128/"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (encode(Record("FILE", "http://x.example/", (("Name", b"n"),))), "template"),
        (encode(Record("CACHE", "http://x.example/", (("Host", b"h"), ("Port", b"1")))), "Name"),
        (encode(Record("CACHE", "http://x.example/", (("Name", b"n"), ("Port", b"1")))), "Host"),
        (
            encode(Record("CACHE", "http://x.example/", (("Name", b"n"), ("Host", b"h")))),
            "Port",
        ),
        (
            encode(
                Record("CACHE", "http://x/", (("Name", b"n"), ("Host", b"h"), ("Port", b"99999")))
            ),
            "Port",
        ),
        (
            encode(
                Record("CACHE", "http://x/", (("Name", b"n"), ("Host", b"h b"), ("Port", b"80")))
            ),
            "Host",
        ),
        (
            encode(Record("CACHE", "ftp://x/", (("Name", b"n"), ("Host", b"h"), ("Port", b"21")))),
            "URL",
        ),
        (encode(server_record("cache", name="n", host="h", port=1, ttl=1e12)), "Time-to-Live"),
        (
            encode(
                server_record("cache", name="n", host="h", port=1).replace("Time-to-Live", "-5")
            ),
            "Time-to-Live",
        ),
        (b"this is not SOIF", "not SOIF"),
        (b"", "exactly one"),
        (encode(cache("a", 1, "x")) + encode(cache("b", 2, "y")), "exactly one"),
        (encode(cache("a", 1, "x" * 70_000)), "at most"),
    ],
)
async def test_a_bad_registration_is_refused_with_400(
    hsr: Broker, session: aiohttp.ClientSession, body: bytes, reason: str
) -> None:
    answer = await post(session, hsr, body, 400)
    assert reason in answer["error"]
    assert await hsr.registry.count() == 0


def test_validate_drops_gatherer_attributes_and_restamps() -> None:
    record = server_record("gatherer", name="g", host="h.example", port=8500).replace(
        "Gatherer-Name", "g"
    )
    record = record.replace("Server-Type", "broker").replace("Last-Seen", "0")
    stored = validate(record, now=1_900_000_000.0)
    assert stored.get("Gatherer-Name") is None
    assert stored.text("Server-Type") == "gatherer"
    assert stored.text("Last-Seen") == "1900000000"
    assert stored.text("Update-Time") == "1900000000"
    with pytest.raises(RegistrationError, match="template"):
        validate(Record("SQUID", "http://x/", record.attributes), now=0.0)


async def test_the_client_registers_and_reports_refusals_and_outages(
    hsr: Broker, session: aiohttp.ClientSession
) -> None:
    answer = await register(url_of(hsr), cache("client", 3128, "via the client"), session)
    assert answer["renewed"] is False
    again = await register(url_of(hsr) + "/", cache("client", 3128, "again"), session)
    assert again["renewed"] is True
    bad = Record("CACHE", "http://x.example/", (("Name", b"no host"),))
    with pytest.raises(HsrClientError) as refused:
        await register(url_of(hsr), bad, session)
    assert refused.value.kind == "refused"
    assert "Host" in refused.value.reason
    with pytest.raises(HsrClientError) as down:
        await register(f"http://127.0.0.1:{refused_port()}", bad, session)
    assert down.value.kind == "unavailable"


async def test_the_renewal_loop_keeps_a_server_registered(
    hsr: Broker, session: aiohttp.ClientSession
) -> None:
    record = server_record("replicator", name="mirror", host="m.example", port=8600, ttl=60)
    key = oid(COLLECTION, record.url)
    seen: list[float] = []

    async def renewals() -> int:
        stored = await hsr.registry.get(key)
        if stored is not None and stored.expires not in seen:
            seen.append(stored.expires)
        return len(seen)

    async with registering(url_of(hsr), lambda: record, renew=0.2):
        for _ in range(200):  # 10 s at most
            if await renewals() >= 3:
                break
            await asyncio.sleep(0.05)
    assert len(seen) >= 3
    assert seen == sorted(seen)  # each renewal pushed the expiry further
    listed = await get_json(session, f"{url_of(hsr)}/api/hsr", params={"type": "replicator"})
    assert [s["name"] for s in listed["servers"]] == ["mirror"]


async def test_the_renewal_loop_survives_an_unreachable_hsr() -> None:
    record = server_record("cache", name="c", host="h", port=1)
    attempts = 0

    def make() -> Record:
        nonlocal attempts
        attempts += 1
        return record

    async with registering(f"http://127.0.0.1:{refused_port()}", make, renew=60, retry=0.05):
        await until(lambda: attempts >= 3, within=10)


async def test_registrations_are_counted_in_the_metrics(
    hsr: Broker, session: aiohttp.ClientSession
) -> None:
    await post(session, hsr, encode(cache("m", 3128, "x")), 201)
    await post(session, hsr, encode(cache("m", 3128, "x")), 200)
    await post(session, hsr, b"junk", 400)
    stats = await get_json(session, f"{url_of(hsr)}/api/stats")
    assert stats["hsr_registrations"] == {"new": 1, "renewed": 1, "invalid": 1}
    decoded = decode(encode(cache("m", 3128, "x")))
    assert len(decoded) == 1
