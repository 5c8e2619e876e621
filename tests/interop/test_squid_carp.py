"""CARP side by side with Squid 5.7: for 10,000 URLs and the same array (names, weights), the
parent Squid sends each URL to is the one hierarchy.carp picks, with every member up and with
one of them down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from harvest_cache.hierarchy.carp import Array
from tests.interop.conftest import running_squid
from tests.support import Origin, open_proxy, read_response, request_bytes

MEMBERS = (("alpha", 1), ("beta", 2), ("gamma", 1), ("delta", 3))
URLS = 10_000
CLIENTS = 32


@pytest.fixture
async def parents() -> AsyncIterator[dict[str, Origin]]:
    """One scripted parent per member: each counts the URLs it is asked for (all 404s)."""
    started: dict[str, Origin] = {}
    for name, _ in MEMBERS:
        started[name] = Origin()
        await started[name].start()
    yield started
    for origin in started.values():
        await origin.stop()


async def ask_all(port: int, urls: list[str]) -> None:
    """Every URL through the proxy at ``port``, CLIENTS keep-alive connections at a time."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)

    async def client() -> None:
        reader, writer = await open_proxy(port)
        try:
            while not queue.empty():
                url = queue.get_nowait()
                writer.write(request_bytes("GET", url))
                await read_response(reader)
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(CLIENTS)))


def homes(parents: dict[str, Origin]) -> dict[str, str]:
    """Which parent each path went to."""
    return {
        path: name
        for name, origin in parents.items()
        for path in origin.hits
        if path.startswith("/carp/")
    }


@pytest.mark.parametrize("down", [None, "beta"])
async def test_squid_and_harvest_pick_the_same_parent(
    parents: dict[str, Origin], down: str | None
) -> None:
    if down is not None:
        await parents[down].stop()
    lines = "".join(
        f"cache_peer 127.0.0.1 parent {parents[name].port} 0 carp no-query no-digest name={name}"
        f" weight={weight} connect-fail-limit=1\n"
        for name, weight in MEMBERS
    )
    paths = [f"/carp/{i}" for i in range(URLS)]
    # (Squid would count a refused parent as failing only after trying it: ask once first)
    with running_squid(lines + "never_direct allow all\ncache deny all\n") as squid:
        if down is not None:
            await ask_all(squid.port, [f"http://127.0.0.1:9/warm/{i}" for i in range(50)])
            for origin in parents.values():
                origin.hits.clear()
        await ask_all(squid.port, [f"http://127.0.0.1:9{path}" for path in paths])
    went = homes(parents)
    assert len(went) == URLS
    array = Array([(name, weight, ()) for name, weight in MEMBERS])
    ours = {
        path: array.choose(f"http://127.0.0.1:9{path}", lambda n: n != down).name  # type: ignore[union-attr]
        for path in paths
    }
    disagree = [p for p in paths if ours[p] != went[p]]
    assert disagree == [], f"{len(disagree)} of {URLS} differ, e.g. {disagree[:5]}"
    # Every member up takes a share; the one down none.
    shares = {name: sum(1 for v in went.values() if v == name) for name, _ in MEMBERS}
    assert all((n > 0) == (name != down) for name, n in shares.items()), shares
