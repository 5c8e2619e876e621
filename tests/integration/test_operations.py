"""Operating a running cache: PURGE, the admin actions, reloads (the admin action, SIGHUP,
``harvest-cache reload``) and the drain on SIGTERM.

In-process caches are started with ``make_cache``, or, where a reload must read a
configuration file again, with ``CacheServer.start(config, loader)`` directly. The SIGHUP,
SIGTERM and ``harvest-cache reload`` tests run the real program (``python -m harvest_cache``)
in a subprocess on loopback ports, and always end it by its PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import signal
import subprocess
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from harvest_cache import control
from harvest_cache.config import Config, from_mapping, load
from harvest_cache.server.app import CacheServer
from tests.support import (
    LogLine,
    MakeCache,
    Origin,
    RawResponse,
    closed_by_peer,
    free_port,
    free_udp_port,
    open_proxy,
    program_config,
    proxy_client,
    read_response,
    request_bytes,
    spawn,
    static,
    stop_and_read_log,
    wait_for_port,
    wait_until,
    write_config,
)

FRESH = {"Cache-Control": "max-age=600"}
LOOPBACK = "127.0.0.1"
TOKEN = "s3cret"
PARENT_MISSES = ([f"FIRST_PARENT_MISS/{LOOPBACK}"], [f"CLOSEST_PARENT_MISS/{LOOPBACK}"])


# -- helpers ------------------------------------------------------------------------------------


def base_sections(home: Path, **sections: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """A cache's configuration as TOML-ready sections: loopback, its own store and log
    under ``home``, no DNS; ``sections`` are merged in."""
    server = {"name": "ops-cache", **sections.pop("server", {})}
    listen = f"{LOOPBACK}:0"
    return program_config(home, listen, listen, TOKEN, server=server, **sections)


async def start_parent(make_cache: MakeCache, tmp_path: Path, name: str) -> CacheServer:
    """A cache named ``name`` with its own store and log that answers ICP from loopback."""
    home = tmp_path / name
    return await make_cache(
        server={"name": name, "listen": f"{LOOPBACK}:0"},
        cache={"dir": str(home / "cache")},
        log={"access_log": str(home / "access.log")},
        icp={"port": free_udp_port(), "allow": ["127.0.0.0/8"]},
        hierarchy={"digests": False},
    )


def peer(cache: CacheServer) -> dict[str, object]:
    """A ``[[hierarchy.peers]]`` table for one of our running caches (a parent)."""
    return {
        "name": cache.name,
        "host": LOOPBACK,
        "http_port": cache.address[1],
        "icp_port": cache.config.icp_port,
        "role": "parent",
    }


def codes(log: list[LogLine], url: str) -> list[str]:
    return [f"{line.hierarchy}/{line.peer}" for line in log if line.url == url]


async def exchange(
    port: int, method: str, url: str, headers: list[tuple[str, str]] | None = None
) -> RawResponse:
    """One request on a new connection to the proxy at ``port``."""
    reader, writer = await open_proxy(port)
    try:
        writer.write(request_bytes(method, url, headers=headers))
        await writer.drain()
        return await read_response(reader, method=method)
    finally:
        writer.close()


async def purge(cache: CacheServer, url: str) -> RawResponse:
    return await exchange(cache.address[1], "PURGE", url)


async def get(cache: CacheServer, url: str, **headers: str) -> tuple[int, bytes]:
    async with proxy_client(cache) as client, asyncio.timeout(5):
        resp, body = await client.get(url, headers=headers)
    return resp.status, body


@dataclass
class AdminAnswer:
    status: int
    text: str
    headers: Mapping[str, str]

    def json(self) -> Any:
        return json.loads(self.text)


async def admin(
    address: tuple[str, int], method: str, path: str, token: str | None = None
) -> AdminAnswer:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    url = f"http://{LOOPBACK}:{address[1]}{path}"
    async with (
        aiohttp.ClientSession() as session,
        asyncio.timeout(10),
        session.request(method, url, headers=headers) as resp,
    ):
        return AdminAnswer(resp.status, await resp.text(), dict(resp.headers))


def admin_of(cache: CacheServer) -> tuple[str, int]:
    assert cache.admin is not None
    return cache.admin.address


class FileLoader:
    """``load(path)`` for ``CacheServer.start``, with the file read by the test off the event
    loop (``reread``, after each change) rather than by the cache on it: ``reload_config``
    calls its loader on the loop, and a file read there is a blocking call (see
    test_reload_reads_its_file_off_the_event_loop). Otherwise exactly what ``load`` does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.text = ""

    async def reread(self) -> None:
        self.text = await asyncio.to_thread(self.path.read_text, encoding="utf-8")

    def __call__(self) -> Config:
        return from_mapping(tomllib.loads(self.text), str(self.path))

    async def write(self, sections: Mapping[str, Mapping[str, object]]) -> None:
        await asyncio.to_thread(write_config, self.path, sections)
        await self.reread()


@contextlib.asynccontextmanager
async def cache_from_file(
    path: Path, loader: Callable[[], Config] | None = None
) -> AsyncIterator[CacheServer]:
    """A cache started from the file at ``path``, with ``loader`` to read it again
    (``load(path)`` if not given)."""
    config = await asyncio.to_thread(load, path)
    server = await CacheServer.start(config, loader or (lambda: load(path)))
    try:
        yield server
    finally:
        await server.stop(0.5)


# -- 1. PURGE -----------------------------------------------------------------------------------


async def test_purge_from_loopback_drops_the_object_then_404(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    origin.route("/p", static(b"purge me", FRESH))
    url = origin.url("/p")
    for _ in range(3):  # stored, then hits (the last one on the hit fast path)
        assert await get(cache, url) == (200, b"purge me")
    assert origin.hits["/p"] == 1

    purged = await purge(cache, url)
    assert (purged.status, purged.body) == (200, b"purged\n"), purged

    assert await get(cache, url) == (200, b"purge me")
    assert origin.hits["/p"] == 2  # a miss: fetched again
    assert await get(cache, url) == (200, b"purge me")
    assert origin.hits["/p"] == 2  # and stored again

    assert (await purge(cache, url)).status == 200
    again = await purge(cache, url)
    assert again.status == 404, again
    assert again.body == b"not in the cache\n"
    never = await purge(cache, origin.url("/never-stored"))
    assert never.status == 404


async def test_purge_is_refused_from_a_network_not_allowed(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache(access={"purge": []})
    origin.route("/kept", static(b"kept", FRESH))
    url = origin.url("/kept")
    assert await get(cache, url) == (200, b"kept")
    denied = await purge(cache, url)
    assert denied.status == 403, denied
    assert await get(cache, url) == (200, b"kept")
    assert origin.hits["/kept"] == 1  # still held
    log = await stop_and_read_log(cache)
    assert [(line.method, line.result, line.status) for line in log if line.url == url] == [
        ("GET", "TCP_MISS", 200),
        ("PURGE", "TCP_DENIED", 403),
        ("GET", "TCP_MEM_HIT", 200),
    ]


async def test_purge_of_a_vary_url_drops_every_variant(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()

    async def by_language(request: web.Request) -> web.Response:
        language = request.headers.get("Accept-Language", "none")
        return web.Response(
            body=f"in {language}".encode(),
            headers={**FRESH, "Vary": "Accept-Language"},
        )

    origin.route("/v", by_language)
    url = origin.url("/v")
    for _ in range(2):
        for language in ("en", "fr"):
            assert await get(cache, url, **{"Accept-Language": language}) == (
                200,
                f"in {language}".encode(),
            )
    assert origin.hits["/v"] == 2  # one fetch per variant, then hits

    assert (await purge(cache, url)).status == 200
    for language in ("en", "fr"):
        assert await get(cache, url, **{"Accept-Language": language}) == (
            200,
            f"in {language}".encode(),
        )
    assert origin.hits["/v"] == 4  # each variant fetched again
    assert (await purge(cache, url)).status == 200  # (stored again: a marker to purge)


async def test_purge_command_purges_and_says_no_for_what_is_not_held(
    origin: Origin, make_cache: MakeCache, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = await make_cache()
    origin.route("/cmd", static(b"by command", FRESH))
    url = origin.url("/cmd")
    assert await get(cache, url) == (200, b"by command")
    listen = f"{LOOPBACK}:{cache.address[1]}"

    assert await asyncio.to_thread(control.main, ["purge", url, "--listen", listen]) == 0
    assert "200" in capsys.readouterr().out
    assert await get(cache, url) == (200, b"by command")
    assert origin.hits["/cmd"] == 2

    assert await asyncio.to_thread(control.main, ["purge", url, "--listen", listen]) == 0
    assert await asyncio.to_thread(control.main, ["purge", url, "--listen", listen]) == 1
    assert "404" in capsys.readouterr().out
    # Nobody listening: exit 1 too, with the reason.
    closed = f"{LOOPBACK}:{free_port()}"
    assert await asyncio.to_thread(control.main, ["purge", url, "--listen", closed]) == 1
    assert "cannot reach the cache" in capsys.readouterr().err


# -- 2. admin actions ---------------------------------------------------------------------------


async def test_admin_actions_are_off_without_a_token(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache()  # admin listener, no token
    origin.route("/a", static(b"a", FRESH))
    url = origin.url("/a")
    assert await get(cache, url) == (200, b"a")
    for path in (f"/cachemgr/purge?url={url}", "/cachemgr/reload", "/cachemgr/peers/x/drop"):
        for token in (None, "", "anything"):
            answer = await admin(admin_of(cache), "POST", path, token)
            assert answer.status == 403, (path, token, answer)
    assert await get(cache, url) == (200, b"a")
    assert origin.hits["/a"] == 1  # not purged
    # Reading stays open to all.
    assert (await admin(admin_of(cache), "GET", "/cachemgr")).status == 200


async def test_admin_purge_needs_the_right_token(origin: Origin, make_cache: MakeCache) -> None:
    cache = await make_cache(admin={"listen": f"{LOOPBACK}:0", "token": TOKEN})
    origin.route("/a", static(b"admin purge", FRESH))
    url = origin.url("/a")
    assert await get(cache, url) == (200, b"admin purge")
    path = f"/cachemgr/purge?url={url}"

    for token in (None, "wrong", TOKEN + "x", TOKEN[:-1]):
        answer = await admin(admin_of(cache), "POST", path, token)
        assert answer.status == 401, (token, answer)
        assert answer.headers.get("WWW-Authenticate") == "Bearer"
    assert await get(cache, url) == (200, b"admin purge")
    assert origin.hits["/a"] == 1  # nothing purged yet

    done = await admin(admin_of(cache), "POST", path, TOKEN)
    assert done.status == 200, done
    assert done.json() == {"url": url, "purged": True}
    gone = await admin(admin_of(cache), "POST", path, TOKEN)
    assert gone.status == 404, gone
    assert gone.json() == {"url": url, "purged": False}
    assert await get(cache, url) == (200, b"admin purge")
    assert origin.hits["/a"] == 2

    bad = await admin(admin_of(cache), "POST", "/cachemgr/purge?url=not-a-url", TOKEN)
    assert bad.status == 400, bad


async def test_admin_drops_a_peer_and_the_cache_goes_direct(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent = await start_parent(make_cache, tmp_path, "parent")
    home = tmp_path / "child"
    child = await make_cache(
        server={"name": "child", "listen": f"{LOOPBACK}:0"},
        cache={"dir": str(home / "cache")},
        log={"access_log": str(home / "access.log")},
        icp={"port": free_udp_port(), "allow": ["127.0.0.0/8"]},
        hierarchy={"peers": [peer(parent)], "digests": False},
        admin={"listen": f"{LOOPBACK}:0", "token": TOKEN},
    )
    origin.route("/before", static(b"before", FRESH))
    origin.route("/after", static(b"after", FRESH))
    before, after = origin.url("/before"), origin.url("/after")
    assert await get(child, before) == (200, b"before")

    unknown = await admin(admin_of(child), "POST", "/cachemgr/peers/nobody/drop", TOKEN)
    assert unknown.status == 404, unknown
    wrong = await admin(admin_of(child), "POST", "/cachemgr/peers/parent/drop", "wrong")
    assert wrong.status == 401, wrong
    report = (await admin(admin_of(child), "GET", "/cachemgr")).json()
    assert [(p["name"], p["state"]) for p in report["peers"]] == [("parent", "alive")]

    dropped = await admin(admin_of(child), "POST", "/cachemgr/peers/parent/drop", TOKEN)
    assert dropped.status == 200, dropped
    assert dropped.json() == {"peer": "parent", "dropped": True}
    report = (await admin(admin_of(child), "GET", "/cachemgr")).json()
    assert [(p["name"], p["state"]) for p in report["peers"]] == [("parent", "down")]
    page = await admin(admin_of(child), "GET", "/cachemgr.html")
    assert page.status == 200
    assert '"state": "down"' in html.unescape(page.text)

    assert parent.icp is not None
    queries = dict(parent.icp.answered)
    assert await get(child, after) == (200, b"after")
    assert dict(parent.icp.answered) == queries  # the dropped parent is not even asked
    assert await get(child, after) == (200, b"after")  # (a hit)
    child_log = await stop_and_read_log(child)
    parent_log = await stop_and_read_log(parent)
    assert codes(child_log, before) == [f"FIRST_PARENT_MISS/{LOOPBACK}"]
    assert codes(child_log, after) == [f"HIER_DIRECT/{LOOPBACK}", "HIER_NONE/-"]
    assert [line.url for line in parent_log] == [before]


# -- 3. reload in-process -----------------------------------------------------------------------


async def test_admin_reload_applies_a_new_file_refuses_a_broken_one_and_keeps_fixed_settings(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent = await start_parent(make_cache, tmp_path, "parent")
    home = tmp_path / "child"
    path = tmp_path / "child.toml"
    icp = {"port": free_udp_port(), "allow": ["127.0.0.0/8"]}
    sections = base_sections(home, server={"name": "child"}, icp=icp)
    loader = FileLoader(path)
    await loader.write(sections)
    for name in ("direct", "via-parent", "held", "kept"):
        origin.route(f"/{name}", static(name.encode(), FRESH))
    url = origin.url

    async with cache_from_file(path, loader) as child:
        capacity = child.store.memory.capacity
        assert await get(child, url("/direct")) == (200, b"direct")
        assert await get(parent, url("/held")) == (200, b"held")

        # A parent, and a setting that needs a restart.
        changed = base_sections(
            home,
            server={"name": "child"},
            icp=icp,
            cache={"memory_mb": 32},
            hierarchy={"peers": [peer(parent)]},
        )
        await loader.write(changed)
        answer = await admin(admin_of(child), "POST", "/cachemgr/reload", TOKEN)
        assert answer.status == 200, answer
        assert answer.json() == {"reloaded": True, "restart_needed": ["cache.memory_mb"]}
        assert child.config.cache.memory_mb == 64  # kept until the next start
        assert child.store.memory.capacity == capacity
        assert [p.name for p in child.config.hierarchy.peers] == ["parent"]
        report = (await admin(admin_of(child), "GET", "/cachemgr")).json()
        assert report["info"]["peers"] == 1
        assert report["info"]["memory_mb"] == 64
        assert await get(child, url("/via-parent")) == (200, b"via-parent")
        assert await get(child, url("/held")) == (200, b"held")

        # A broken file: refused with the reasons, and the running configuration kept.
        running = child.config
        broken = base_sections(
            home,
            server={"name": "child", "max_connections": "lots"},
            icp=icp,
            hierarchy={"peers": [peer(parent)]},
        )
        await loader.write(broken)
        refused = await admin(admin_of(child), "POST", "/cachemgr/reload", TOKEN)
        assert refused.status == 400, refused
        body = refused.json()
        assert body["reloaded"] is False
        assert len(body["problems"]) == 1
        assert "server.max_connections" in body["problems"][0]
        assert str(path) in body["problems"][0]
        assert child.config is running
        assert await get(child, url("/kept")) == (200, b"kept")  # still via the parent

        # Access rules apply to new connections and the next request of open ones.
        reader, writer = await open_proxy(child.address[1])
        try:
            writer.write(request_bytes("GET", url("/direct")))
            await writer.drain()
            first = await read_response(reader)
            assert (first.status, first.body) == (200, b"direct")
            closed = base_sections(
                home,
                server={"name": "child"},
                icp=icp,
                access={"allow": ["10.0.0.0/8"]},
                hierarchy={"peers": [peer(parent)]},
            )
            await loader.write(closed)
            answer = await admin(admin_of(child), "POST", "/cachemgr/reload", TOKEN)
            assert answer.status == 200, answer
            assert answer.json() == {"reloaded": True, "restart_needed": []}
            writer.write(request_bytes("GET", url("/direct")))
            await writer.drain()
            second = await read_response(reader)
            assert second.status == 403, second
        finally:
            writer.close()
        assert (await exchange(child.address[1], "GET", url("/direct"))).status == 403
        child_log = await stop_and_read_log(child)

    assert codes(child_log, url("/direct"))[0] == f"HIER_DIRECT/{LOOPBACK}"
    # (The parent has fetched from this origin: it reports its RTT, CLOSEST_PARENT_MISS.)
    assert codes(child_log, url("/via-parent")) in PARENT_MISSES
    assert codes(child_log, url("/held")) == [f"PARENT_HIT/{LOOPBACK}"]
    assert codes(child_log, url("/kept")) in PARENT_MISSES
    denied = [line for line in child_log if line.result == "TCP_DENIED"]
    assert [(line.url, line.status) for line in denied] == [(url("/direct"), 403)] * 2
    assert origin.hits["/held"] == 1


async def test_reload_reads_its_file_off_the_event_loop(tmp_path: Path) -> None:
    """The loader as the program makes it (cli.main: ``lambda: load(path, overrides)``)."""
    path = tmp_path / "cache.toml"
    await asyncio.to_thread(write_config, path, base_sections(tmp_path / "c"))
    async with cache_from_file(path) as cache:
        sections = base_sections(tmp_path / "c", server={"name": "renamed"})
        await asyncio.to_thread(write_config, path, sections)
        answer = await admin(admin_of(cache), "POST", "/cachemgr/reload", TOKEN)
        assert answer.status == 200, answer
        assert cache.name == "renamed"


async def test_a_dropped_peer_is_used_again_after_a_reload(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """Dropping lasts until the configuration is reloaded (a reload makes new records)."""
    parent = await start_parent(make_cache, tmp_path, "parent")
    home = tmp_path / "child"
    icp = {"port": free_udp_port(), "allow": ["127.0.0.0/8"]}
    sections = base_sections(home, icp=icp, hierarchy={"peers": [peer(parent)]})
    loader = FileLoader(tmp_path / "child.toml")
    await loader.write(sections)
    for name in ("one", "two", "three"):
        origin.route(f"/{name}", static(name.encode(), FRESH))
    async with cache_from_file(loader.path, loader) as child:
        assert await get(child, origin.url("/one")) == (200, b"one")
        dropped = await admin(admin_of(child), "POST", "/cachemgr/peers/parent/drop", TOKEN)
        assert dropped.status == 200, dropped
        assert await get(child, origin.url("/two")) == (200, b"two")
        reloaded = await admin(admin_of(child), "POST", "/cachemgr/reload", TOKEN)
        assert reloaded.status == 200, reloaded
        report = (await admin(admin_of(child), "GET", "/cachemgr")).json()
        assert [(p["name"], p["state"]) for p in report["peers"]] == [("parent", "alive")]
        assert await get(child, origin.url("/three")) == (200, b"three")
        log = await stop_and_read_log(child)
    assert codes(log, origin.url("/one")) in PARENT_MISSES
    assert codes(log, origin.url("/two")) == [f"HIER_DIRECT/{LOOPBACK}"]
    assert codes(log, origin.url("/three")) in PARENT_MISSES


async def test_reload_without_a_loader_is_refused(make_cache: MakeCache) -> None:
    cache = await make_cache(admin={"listen": f"{LOOPBACK}:0", "token": TOKEN})
    answer = await admin(admin_of(cache), "POST", "/cachemgr/reload", TOKEN)
    assert answer.status == 400, answer
    assert answer.json()["reloaded"] is False
    assert answer.json()["problems"]


# -- 4. reload under load -----------------------------------------------------------------------


async def test_reloads_under_load_fail_no_request(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent_a = await start_parent(make_cache, tmp_path, "parent-a")
    parent_b = await start_parent(make_cache, tmp_path, "parent-b")
    home = tmp_path / "child"
    path = tmp_path / "child.toml"
    icp = {"port": free_udp_port(), "allow": ["127.0.0.0/8"]}

    def config_with(*parents: CacheServer) -> dict[str, dict[str, object]]:
        return base_sections(
            home,
            server={"name": "child"},
            icp=icp,
            hierarchy={"peers": [peer(p) for p in parents]},
        )

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=f"body {request.query_string}".encode(), headers=FRESH)

    origin.route("/load", echo)
    loader = FileLoader(path)
    await loader.write(config_with())
    done = asyncio.Event()
    answers: list[tuple[str, int, bytes, bytes]] = []  # (client, status, body, expected)
    failures: list[str] = []

    async def client(name: str, session: aiohttp.ClientSession, proxy: str) -> None:
        n = 0
        while not done.is_set():
            n += 1
            # Every other request a hit (one of 5 URLs), the others new URLs: misses.
            query = f"hot={n % 5}" if n % 2 else f"{name}={n}"
            try:
                async with asyncio.timeout(5):
                    async with session.get(origin.url(f"/load?{query}"), proxy=proxy) as resp:
                        body = await resp.read()
            except (TimeoutError, aiohttp.ClientError) as e:
                failures.append(f"{name} request {n}: {e!r}")
                continue
            answers.append((name, resp.status, body, f"body {query}".encode()))

    async def raw_client() -> None:
        """Keep-alive on a raw socket; a new connection only when the cache closes one."""
        n = 0
        reader, writer = await open_proxy(child.address[1])
        try:
            while not done.is_set():
                n += 1
                query = f"hot={n % 5}" if n % 2 else f"raw={n}"
                writer.write(request_bytes("GET", origin.url(f"/load?{query}")))
                await writer.drain()
                try:
                    resp = await read_response(reader)
                except (TimeoutError, OSError, asyncio.IncompleteReadError) as e:
                    failures.append(f"raw request {n}: {e!r}")
                    break
                answers.append(("raw", resp.status, resp.body, f"body {query}".encode()))
                if (resp.get("Connection") or "").lower() == "close":
                    writer.close()
                    reader, writer = await open_proxy(child.address[1])
        finally:
            writer.close()

    reloads: list[AdminAnswer] = []
    async with cache_from_file(path, loader) as child:
        proxy = f"http://{LOOPBACK}:{child.address[1]}"
        async with (
            aiohttp.ClientSession() as keep_alive,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as fresh,
        ):
            clients = [
                asyncio.create_task(client("keepalive", keep_alive, proxy)),
                asyncio.create_task(client("fresh", fresh, proxy)),
                asyncio.create_task(raw_client()),
            ]
            started = time.monotonic()
            for at, parents in ((0.4, (parent_a,)), (0.9, (parent_b,))):
                await asyncio.sleep(max(0.0, started + at - time.monotonic()))
                await loader.write(config_with(*parents))
                reloads.append(await admin(admin_of(child), "POST", "/cachemgr/reload", TOKEN))
            await asyncio.sleep(max(0.0, started + 1.5 - time.monotonic()))
            done.set()
            async with asyncio.timeout(10):
                await asyncio.gather(*clients)
        assert [p.name for p in child.config.hierarchy.peers] == ["parent-b"]
        child_log = await stop_and_read_log(child)

    assert [(r.status, r.json()) for r in reloads] == [
        (200, {"reloaded": True, "restart_needed": []})
    ] * 2
    assert failures == []
    wrong = [a for a in answers if (a[1], a[2]) != (200, a[3])]
    assert wrong == []
    for name in ("keepalive", "fresh", "raw"):
        assert sum(1 for a in answers if a[0] == name) >= 20, name
    assert len(child_log) == len(answers)
    hierarchies = {line.hierarchy for line in child_log}
    assert "HIER_DIRECT" in hierarchies, hierarchies
    assert hierarchies & {"FIRST_PARENT_MISS", "CLOSEST_PARENT_MISS"}, hierarchies
    # Both parents were used, each while it was configured.
    assert await stop_and_read_log(parent_a)
    assert await stop_and_read_log(parent_b)


# -- 5, 6, 7. the real program in a subprocess --------------------------------------------------


@dataclass
class Program:
    proc: subprocess.Popen[bytes]
    config: Path
    port: int
    admin_port: int
    stderr: Path

    def errors(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")


def program_sections(
    tmp_path: Path, port: int, admin_port: int, **sections: Mapping[str, object]
) -> dict[str, dict[str, object]]:
    return base_sections(
        tmp_path / "program",
        **{
            **sections,
            "server": {"listen": f"{LOOPBACK}:{port}", **sections.get("server", {})},
            "admin": {
                "listen": f"{LOOPBACK}:{admin_port}",
                "token": TOKEN,
                **sections.get("admin", {}),
            },
        },
    )


@contextlib.asynccontextmanager
async def program(tmp_path: Path, **sections: Mapping[str, object]) -> AsyncIterator[Program]:
    """``python -m harvest_cache --config FILE``, ready to serve; killed at the end."""
    port, admin_port = free_port(), free_port()
    path = tmp_path / "harvest.toml"
    raw = program_sections(tmp_path, port, admin_port, **sections)
    await asyncio.to_thread(write_config, path, raw)
    stderr = tmp_path / "stderr.txt"
    proc = await asyncio.to_thread(spawn, path, stderr)
    running = Program(proc, path, port, admin_port, stderr)
    try:
        try:
            await wait_for_port(port, within=15)
            await wait_for_port(admin_port, within=15)
        except TimeoutError:
            raise AssertionError(f"the cache did not start: {running.errors()}") from None
        yield running
    finally:
        if proc.poll() is None:
            proc.kill()  # (by its PID: Popen.kill signals proc.pid only)
        await asyncio.to_thread(proc.wait, 10)


async def via_program(prog: Program, url: str, *, within: float = 5.0) -> tuple[int, bytes, str]:
    async with aiohttp.ClientSession() as session, asyncio.timeout(within):
        proxy = f"http://{LOOPBACK}:{prog.port}"
        async with session.get(url, proxy=proxy) as resp:
            return resp.status, await resp.read(), resp.headers.get("Via", "")


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float = 5.0) -> None:
    """Await ``check()`` every 50 ms until it returns true; TimeoutError after ``within``."""
    async with asyncio.timeout(within):
        while not await check():  # noqa: ASYNC110 - polling a check, no event to wait on
            await asyncio.sleep(0.05)


async def test_sighup_reloads_the_file_and_a_broken_one_is_refused(
    origin: Origin, tmp_path: Path
) -> None:
    origin.route("/x", static(b"x"))  # (not cacheable: every request goes to the origin)
    url = origin.url("/x")
    async with program(tmp_path, server={"name": "before-hup"}) as prog:
        status, body, via = await via_program(prog, url)
        assert (status, body) == (200, b"x")
        assert via.endswith("before-hup"), via

        sections = program_sections(
            tmp_path, prog.port, prog.admin_port, server={"name": "after-hup"}
        )
        await asyncio.to_thread(write_config, prog.config, sections)
        prog.proc.send_signal(signal.SIGHUP)

        async def renamed() -> bool:
            return (await via_program(prog, url))[2].endswith("after-hup")

        await eventually(renamed)
        await wait_until(lambda: "configuration reloaded" in prog.errors())

        broken = program_sections(
            tmp_path,
            prog.port,
            prog.admin_port,
            server={"name": "broken", "max_connections": "lots"},
        )
        await asyncio.to_thread(write_config, prog.config, broken)
        prog.proc.send_signal(signal.SIGHUP)
        await wait_until(lambda: "reload refused" in prog.errors())
        assert prog.proc.poll() is None
        status, body, via = await via_program(prog, url)
        assert (status, body) == (200, b"x")
        assert via.endswith("after-hup"), via  # the old configuration still serves
        refusal = [line for line in prog.errors().splitlines() if "reload refused" in line]
        assert len(refusal) == 1, refusal
        assert "server.max_connections" in refusal[0]
        assert "the configuration in use is kept" in refusal[0]
        assert prog.proc.poll() is None


async def test_sigterm_drains_the_request_in_flight_and_exits_0(
    origin: Origin, tmp_path: Path
) -> None:
    body = bytes(range(256)) * 1000

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.Response(body=body)

    origin.route("/slow", slow)
    origin.route("/quick", static(b"quick"))
    async with program(tmp_path) as prog:
        # An idle keep-alive connection: closed by the drain, not waited on.
        idle_reader, idle_writer = await open_proxy(prog.port)
        idle_writer.write(request_bytes("GET", origin.url("/quick")))
        await idle_writer.drain()
        quick = await read_response(idle_reader)
        assert (quick.status, quick.body) == (200, b"quick")
        assert quick.get("Connection") is None  # (kept alive)
        reader, writer = await open_proxy(prog.port)
        try:
            writer.write(request_bytes("GET", origin.url("/slow")))
            await writer.drain()
            await wait_until(lambda: origin.hits["/slow"] == 1, within=5)
            sent = time.monotonic()
            prog.proc.send_signal(signal.SIGTERM)
            answer = asyncio.create_task(read_response(reader, within=5))

            async def refused() -> bool:
                try:
                    _, w = await asyncio.open_connection(LOOPBACK, prog.port)
                except OSError:
                    return True
                w.close()
                return False

            await eventually(refused, within=3)
            in_flight = not answer.done()
            idle_closed = await closed_by_peer(idle_reader, within=3)
            resp = await answer
        finally:
            writer.close()
            idle_writer.close()
        assert idle_closed
        assert in_flight  # new connections refused while the request was still running
        assert resp.status == 200, resp
        assert resp.body == body
        code = await asyncio.to_thread(prog.proc.wait, 5)
        assert code == 0, prog.errors()
        assert time.monotonic() - sent < 5
        assert "stopping: finishing requests in progress" in prog.errors()


async def test_reload_command_makes_the_program_read_its_file_again(
    origin: Origin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    origin.route("/x", static(b"x"))
    url = origin.url("/x")
    async with program(tmp_path, server={"name": "first"}) as prog:
        assert (await via_program(prog, url))[2].endswith("first")
        sections = program_sections(tmp_path, prog.port, prog.admin_port, server={"name": "second"})
        await asyncio.to_thread(write_config, prog.config, sections)
        code = await asyncio.to_thread(control.main, ["reload", "--config", str(prog.config)])
        assert code == 0, capsys.readouterr()
        out = capsys.readouterr().out
        assert out.startswith("200 "), out
        assert json.loads(out[4:]) == {"reloaded": True, "restart_needed": []}
        status, body, via = await via_program(prog, url)
        assert (status, body) == (200, b"x")
        assert via.endswith("second"), via

        # A file the command cannot read itself: exit 2, the cache not asked.
        broken = program_sections(
            tmp_path, prog.port, prog.admin_port, server={"name": "third", "bogus": 1}
        )
        await asyncio.to_thread(write_config, prog.config, broken)
        code = await asyncio.to_thread(control.main, ["reload", "--config", str(prog.config)])
        assert code == 2
        assert "unknown key server.bogus" in capsys.readouterr().err
        assert (await via_program(prog, url))[2].endswith("second")

        # The wrong token: the cache says no, exit 1.
        wrong = program_sections(
            tmp_path, prog.port, prog.admin_port, server={"name": "third"}, admin={"token": "no"}
        )
        await asyncio.to_thread(write_config, prog.config, wrong)
        code = await asyncio.to_thread(control.main, ["reload", "--config", str(prog.config)])
        assert code == 1
        assert capsys.readouterr().out.startswith("401 ")
        assert (await via_program(prog, url))[2].endswith("second")
        assert prog.proc.poll() is None
