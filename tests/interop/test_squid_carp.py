"""CARP side by side with Squid 5.7: for 10,000 URLs and the same array (names, weights), the
parent Squid sends each URL to is the one hierarchy.carp picks, with every member up and with
one of them down."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harvest_cache.hierarchy.carp import Array
from tests.interop.conftest import running_squid
from tests.support import (
    MakeCache,
    Origin,
    free_port,
    open_proxy,
    read_response,
    request_bytes,
    static,
)

MEMBERS = (("alpha", 1), ("beta", 2), ("gamma", 1), ("delta", 3))
# Squid as a child that neither stores nor serves hits: every request goes to the array.
NOT_CACHED = "never_direct allow all\nstore_miss deny all\nsend_hit deny all\n"
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


async def ask_all(port: int, urls: list[str]) -> Counter[int]:
    """Every URL through the proxy at ``port``, CLIENTS keep-alive connections at a time;
    the statuses answered."""
    statuses: Counter[int] = Counter()
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)

    async def client() -> None:
        reader, writer = await open_proxy(port)
        try:
            while not queue.empty():
                url = queue.get_nowait()
                writer.write(request_bytes("GET", url))
                statuses[(await read_response(reader)).status] += 1
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return statuses


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
    with running_squid(lines + NOT_CACHED) as squid:
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


async def test_squid_as_the_child_of_a_harvest_array(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """Squid with three harvest caches as `carp` parents: every URL fetched from the origin
    once, by its home; a member stopped, its URLs alone go to the others."""
    paths = [f"/arr/{i}" for i in range(300)]
    for path in paths:
        origin.route(path, static(f"object {path}".encode(), {"Cache-Control": "max-age=600"}))
    names = ("m1", "m2", "m3")
    ports = {name: free_port() for name in names}
    members = [
        {"name": n, "host": "127.0.0.1", "http_port": ports[n], "icp_port": 0, "carp": True}
        for n in names
    ]
    caches = {
        n: await make_cache(
            server={"name": n, "listen": f"127.0.0.1:{ports[n]}"},
            cache={"dir": str(tmp_path / n)},
            hierarchy={"peers": members, "array_name": n, "digests": False},
        )
        for n in names
    }
    lines = "".join(
        f"cache_peer 127.0.0.1 parent {ports[n]} 0 carp no-query no-digest name={n}"
        f" connect-fail-limit=1\n"
        for n in names
    )
    array = Array([(n, 1, ()) for n in names])
    home = {p: array.choose(origin.url(p)).name for p in paths}  # type: ignore[union-attr]
    with running_squid(lines + NOT_CACHED) as squid:
        await ask_all(squid.port, [origin.url(p) for p in paths])
        hits = {p: origin.hits[p] for p in paths if origin.hits[p] != 1}
        assert not hits, hits
        fetched_by = {r.path: r.headers["Via"].rsplit(" ", 1)[-1] for r in origin.requests}
        assert fetched_by == home
        await caches["m2"].stop(0.5)
        statuses = await ask_all(squid.port, [origin.url(p) for p in paths])
        assert statuses == {200: len(paths)}

    moved = {p for p in paths if home[p] == "m2"}
    assert moved
    wrong = {p: origin.hits[p] for p in paths if origin.hits[p] != (2 if p in moved else 1)}
    assert not wrong, (len(moved), wrong)
    again = origin.requests[len(paths) :]
    assert {r.headers["Via"].rsplit(" ", 1)[-1] for r in again} <= {"m1", "m3"}
