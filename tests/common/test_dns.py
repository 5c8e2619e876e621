"""The resolver against a real scripted DNS server on 127.0.0.1 (UDP, ephemeral port)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from harvest_common.config import Address
from harvest_common.dns import (
    NO_ADDRESS,
    NO_SUCH_DOMAIN,
    RESOLVER_ERROR,
    TIMEOUT,
    DNSConfig,
    Records,
    Resolver,
    ip_literal,
    merge,
    parse_hosts,
)
from harvest_common.errors import DNSFailure
from tests.dns_server import ScriptedDNS, Zone, scripted_dns

ZONE: Zone = {
    "both.test": {"A": (60, ["192.0.2.1", "192.0.2.2"]), "AAAA": (60, ["2001:db8::1"])},
    "v6only.test": {"AAAA": (60, ["2001:db8::6"])},
    "empty.test": {},
    "short.test": {"A": (1, ["192.0.2.10"])},
    "long.test": {"A": (3600, ["192.0.2.11"])},
    "zero.test": {"A": (0, ["192.0.2.12"])},
}


@pytest.fixture
async def server() -> AsyncIterator[ScriptedDNS]:
    async with scripted_dns({name: dict(types) for name, types in ZONE.items()}) as protocol:
        yield protocol


@pytest.fixture
def hosts_file(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_text(
        "# Harvest test hosts\n"
        "127.0.0.1   localhost\n"
        "::1         localhost ip6-localhost  # trailing comment\n"
        "10.0.0.7    Pinned.Test pinned-alias\n"
        "not-an-ip   ignored.test\n"
        "10.0.0.8\n"
    )
    return path


MakeResolver = Callable[..., asyncio.Task[Resolver]]


@pytest.fixture
async def make_resolver(server: ScriptedDNS, hosts_file: Path) -> AsyncIterator[MakeResolver]:
    """Opens resolvers pointed at the scripted server; every one is closed at teardown."""
    assert server.transport is not None
    port = server.transport.get_extra_info("sockname")[1]
    opened: list[Resolver] = []

    async def open_one(**overrides: object) -> Resolver:
        settings: dict[str, object] = {
            "nameservers": (Address("127.0.0.1", port),),
            "hosts_file": hosts_file,
            "min_ttl": 0,
            "max_ttl": 3600,
            "negative_ttl": 30,
            "timeout": 2.0,
        }
        settings.update(overrides)
        resolver = await Resolver.open(DNSConfig(**settings))  # type: ignore[arg-type]
        opened.append(resolver)
        return resolver

    def start(**overrides: object) -> asyncio.Task[Resolver]:
        return asyncio.ensure_future(open_one(**overrides))

    yield start
    for resolver in opened:
        await resolver.close()


# -- pure parts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("[2001:DB8:0::1]", "2001:db8::1"),
        ("2001:db8::1", "2001:db8::1"),
        ("example.org", None),
        ("1.2.3.4.example", None),
        ("999.1.1.1", None),
        ("[not-an-ip]", None),
        ("", None),
    ],
)
def test_ip_literals_are_recognised_and_normalised(host: str, expected: str | None) -> None:
    assert ip_literal(host) == expected


def test_hosts_file_lists_ipv4_before_ipv6_and_ignores_junk() -> None:
    hosts = parse_hosts(
        "::1 LocalHost\n127.0.0.1 localhost.\n127.0.0.1 localhost\n# 10.0.0.1 gone\nbad line\n"
    )
    assert hosts == {"localhost": ("127.0.0.1", "::1")}


@pytest.mark.parametrize(
    ("v4", "v6", "expected"),
    [
        (
            Records(("192.0.2.1",), 60),
            Records(("2001:db8::1",), 30),
            Records(("192.0.2.1", "2001:db8::1"), 30),
        ),
        (Records(("192.0.2.1",), 60), TIMEOUT, Records(("192.0.2.1",), 60)),
        (Records((), 0), Records(("2001:db8::1",), 5), Records(("2001:db8::1",), 5)),
        (Records((), 0), Records((), 0), NO_ADDRESS),
        (NO_SUCH_DOMAIN, TIMEOUT, NO_SUCH_DOMAIN),
        (Records((), 0), TIMEOUT, TIMEOUT),
        (RESOLVER_ERROR, TIMEOUT, TIMEOUT),
        (RESOLVER_ERROR, Records((), 0), RESOLVER_ERROR),
    ],
)
def test_merge_prefers_any_address_then_the_most_telling_cause(
    v4: Records | str, v6: Records | str, expected: Records | str
) -> None:
    assert merge(v4, v6) == expected


# -- against the scripted server --------------------------------------------------------------


async def test_answers_list_ipv4_first_then_ipv6(make_resolver: MakeResolver) -> None:
    resolver = await make_resolver()
    answer = await resolver.resolve("both.test")
    # Servers shuffle the records of one type; the families stay in order.
    assert sorted(answer[:2]) == ["192.0.2.1", "192.0.2.2"]
    assert answer[2:] == ["2001:db8::1"]
    assert await resolver.resolve("v6only.test") == ["2001:db8::6"]


async def test_answers_are_cached_case_insensitively(
    make_resolver: MakeResolver, server: ScriptedDNS
) -> None:
    resolver = await make_resolver()
    first = await resolver.resolve("both.test")
    assert await resolver.resolve("BOTH.test.") == first
    assert server.queries == {("both.test", "A"): 1, ("both.test", "AAAA"): 1}
    assert (resolver.hits, resolver.misses, resolver.failures) == (1, 1, 0)


async def test_concurrent_lookups_of_one_name_share_one_query_per_type(
    make_resolver: MakeResolver, server: ScriptedDNS
) -> None:
    resolver = await make_resolver()
    answers = await asyncio.gather(*(resolver.resolve("both.test") for _ in range(10)))
    assert all(a == answers[0] for a in answers)
    assert server.queries == {("both.test", "A"): 1, ("both.test", "AAAA"): 1}
    assert resolver.misses == 10


async def test_a_waiter_cancelled_does_not_cancel_the_shared_query(
    make_resolver: MakeResolver, server: ScriptedDNS
) -> None:
    resolver = await make_resolver()
    impatient = asyncio.ensure_future(resolver.resolve("both.test"))
    patient = asyncio.ensure_future(resolver.resolve("both.test"))
    await asyncio.sleep(0)
    impatient.cancel()
    assert len(await patient) == 3
    assert impatient.cancelled()
    assert server.count("both.test") == 2


async def test_ttl_below_min_ttl_is_raised(
    make_resolver: MakeResolver, server: ScriptedDNS
) -> None:
    resolver = await make_resolver(min_ttl=60)
    await resolver.resolve("zero.test")
    await resolver.resolve("zero.test")
    assert server.count("zero.test") == 2  # one A and one AAAA query: the second was a hit


async def test_ttl_zero_is_not_cached(make_resolver: MakeResolver, server: ScriptedDNS) -> None:
    resolver = await make_resolver(min_ttl=0)
    await resolver.resolve("zero.test")
    await resolver.resolve("zero.test")
    assert server.count("zero.test") == 4


async def test_answers_and_failures_expire_after_their_clamped_ttls(
    make_resolver: MakeResolver, server: ScriptedDNS
) -> None:
    resolver = await make_resolver(min_ttl=0, max_ttl=1, negative_ttl=1)
    # short.test's TTL is 1; long.test's 3600 is clamped to max_ttl=1.
    for _ in range(2):
        await resolver.resolve("short.test")
        await resolver.resolve("long.test")
        with pytest.raises(DNSFailure):
            await resolver.resolve("missing.test")
    counts = [server.count(n) for n in ("short.test", "long.test", "missing.test")]
    assert counts == [2, 2, 2]
    await asyncio.sleep(1.2)
    await resolver.resolve("short.test")
    await resolver.resolve("long.test")
    with pytest.raises(DNSFailure):
        await resolver.resolve("missing.test")
    counts = [server.count(n) for n in ("short.test", "long.test", "missing.test")]
    assert counts == [4, 4, 4]


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("missing.test", NO_SUCH_DOMAIN),
        ("empty.test", NO_ADDRESS),
        ("broken.test", RESOLVER_ERROR),
        ("bad..name", "invalid name"),
    ],
)
async def test_failures_are_cached_and_raised_again_without_a_query(
    make_resolver: MakeResolver, server: ScriptedDNS, name: str, cause: str
) -> None:
    server.servfail.add("broken.test")
    resolver = await make_resolver()
    for _ in range(3):
        with pytest.raises(DNSFailure) as failure:
            await resolver.resolve(name)
        assert failure.value.cause == cause
        assert failure.value.status == 502
    assert server.count(name) <= 2  # at most one A and one AAAA query, whatever the failure
    assert (resolver.hits, resolver.misses, resolver.failures) == (2, 1, 3)


async def test_a_silent_server_times_out_within_the_configured_timeout(
    make_resolver: MakeResolver, server: ScriptedDNS
) -> None:
    server.silent.add("silent.test")
    resolver = await make_resolver(timeout=0.3)
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        for _ in range(200):
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    start = time.monotonic()
    with pytest.raises(DNSFailure) as failure:
        await resolver.resolve("silent.test")
    elapsed = time.monotonic() - start
    ticker.cancel()
    assert failure.value.cause == TIMEOUT
    assert 0.25 <= elapsed < 0.8
    # The loop kept running while the query waited (a blocking wait would stall it for the
    # whole 0.3 s timeout).
    assert len(gaps) > 20
    assert max(gaps) < 0.2


async def test_close_cancels_lookups_in_flight(
    make_resolver: MakeResolver, server: ScriptedDNS
) -> None:
    server.silent.add("silent.test")
    resolver = await make_resolver(timeout=5.0)
    waiting = asyncio.ensure_future(resolver.resolve("silent.test"))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await resolver.close()
    assert time.monotonic() - start < 0.5
    with pytest.raises(asyncio.CancelledError):
        await waiting


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "[2001:db8::1]"])
async def test_ip_literals_answer_without_a_lookup(
    make_resolver: MakeResolver, server: ScriptedDNS, host: str
) -> None:
    resolver = await make_resolver()
    assert await resolver.resolve(host) == [ip_literal(host)]
    assert not server.queries
    assert (resolver.hits, resolver.misses) == (0, 0)


async def test_hosts_file_names_answer_without_dns(
    make_resolver: MakeResolver, server: ScriptedDNS
) -> None:
    resolver = await make_resolver()
    assert await resolver.resolve("localhost") == ["127.0.0.1", "::1"]
    assert await resolver.resolve("pinned.TEST") == ["10.0.0.7"]
    assert await resolver.resolve("pinned-alias") == ["10.0.0.7"]
    assert await resolver.resolve("ip6-localhost") == ["::1"]
    assert not server.queries
    assert resolver.hits == 4


async def test_a_missing_hosts_file_leaves_dns_in_charge(
    make_resolver: MakeResolver,
    server: ScriptedDNS,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    resolver = await make_resolver(hosts_file=tmp_path / "absent")
    assert "cannot read hosts file" in caplog.text
    with pytest.raises(DNSFailure):
        await resolver.resolve("localhost")
    assert server.count("localhost") == 2


def _unblock(path: Path) -> None:
    """Open the pipe's writing end without blocking, so a reader stuck in open() sees EOF."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader waiting: nothing to unblock
        return
    os.close(fd)


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A named pipe: opening it blocks until the other end opens, like a stalled disk."""
    path = tmp_path / "hosts.fifo"
    os.mkfifo(path)
    # Should the resolver block the loop, this unblocks it so the test fails instead of hanging.
    rescue = threading.Timer(3.0, _unblock, (path,))
    rescue.start()
    yield path
    rescue.cancel()
    _unblock(path)


async def test_hosts_file_is_read_off_the_loop(make_resolver: MakeResolver, fifo: Path) -> None:
    opening = make_resolver(hosts_file=fifo)
    for _ in range(10):
        await asyncio.sleep(0.01)  # these sleeps end only while the loop runs
    assert not opening.done()
    await asyncio.to_thread(fifo.write_text, "10.9.9.9 fifo.test\n")
    resolver = await opening
    assert await resolver.resolve("fifo.test") == ["10.9.9.9"]
