"""Collapsed forwarding: concurrent requests for one uncached object share one upstream fetch.

The origin holds its first response back until every client has reached the cache (a gate
the test opens), then streams the body in parts, so the clients are all waiting on one flight
while it streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.support import Origin, our_cache_status, proxy_client, wait_until

PARTS = [bytes([65 + i]) * 16384 for i in range(5)]
BODY = b"".join(PARTS)
T = TypeVar("T")


class SlowOrigin:
    """A route whose first request waits for ``gate``; every response streams ``PARTS`` with
    small pauses, and waits for ``before_last`` (bounded) before the last part."""

    def __init__(self, headers: dict[str, str], pause: float = 0.02) -> None:
        self.headers = headers
        self.pause = pause
        self.gate = asyncio.Event()
        self.before_last = asyncio.Event()
        self.before_last_was_set: list[bool] = []
        self.calls = 0

    async def handler(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        async with asyncio.timeout(5):
            await self.gate.wait()
        resp = web.StreamResponse(headers=self.headers)
        resp.content_length = len(BODY)
        await resp.prepare(request)
        for i, part in enumerate(PARTS):
            if i == len(PARTS) - 1:
                try:
                    async with asyncio.timeout(3):
                        await self.before_last.wait()
                except TimeoutError:
                    pass
                self.before_last_was_set.append(self.before_last.is_set())
            await resp.write(part)
            await asyncio.sleep(self.pause)
        await resp.write_eof()
        return resp


def ok_body(
    session: aiohttp.ClientSession, url: str, proxy: str, headers: dict[str, str]
) -> Callable[[], Coroutine[Any, Any, bytes]]:
    """A client that GETs ``url`` with ``headers``, expects 200 and returns the body."""

    async def fetch() -> bytes:
        async with session.get(url, proxy=proxy, headers=headers) as resp:
            assert resp.status == 200
            return await resp.read()

    return fetch


async def start_together(
    origin: Origin,
    cache: CacheServer,
    path: str,
    gate: asyncio.Event,
    clients: Sequence[Callable[[], Coroutine[Any, Any, T]]],
) -> list[asyncio.Task[T]]:
    """Start the first client, wait until its request reached the origin, start the rest,
    wait until they are all connected to the cache, then open the origin's gate."""
    open_before = len(cache.connections)
    hits_before = origin.hits[path]
    tasks = [asyncio.create_task(clients[0]())]
    await wait_until(lambda: origin.hits[path] > hits_before)
    tasks += [asyncio.create_task(c()) for c in clients[1:]]
    await wait_until(lambda: len(cache.connections) >= open_before + len(clients))
    await asyncio.sleep(0.2)  # their requests are parsed and looked up in the store
    gate.set()
    return tasks


async def test_twenty_concurrent_misses_make_one_origin_fetch(
    origin: Origin, cache: CacheServer
) -> None:
    n = 20
    slow = SlowOrigin({"Cache-Control": "max-age=60"})
    origin.route("/slow", slow.handler)
    url = origin.url("/slow")
    proxy = f"http://127.0.0.1:{cache.address[1]}"
    saw_first = 0
    statuses: list[str] = []

    async with aiohttp.ClientSession(auto_decompress=False) as session:

        async def fetch() -> bytes:
            nonlocal saw_first
            async with session.get(url, proxy=proxy) as resp:
                assert resp.status == 200
                statuses.append(resp.headers["Cache-Status"])
                first = await resp.content.readexactly(len(PARTS[0]))
                saw_first += 1
                if saw_first == n:
                    slow.before_last.set()
                return first + await resp.content.read()

        async with asyncio.timeout(20):
            tasks = await start_together(origin, cache, "/slow", slow.gate, [fetch] * n)
            bodies = await asyncio.gather(*tasks)

    assert origin.hits["/slow"] == 1
    assert all(body == BODY for body in bodies)
    # Every client had the first part before the origin sent the last one.
    assert slow.before_last_was_set == [True]
    assert len(statuses) == n
    members = [s.split(", ")[-1] for s in statuses]
    assert all("fwd=uri-miss" in m and "fwd-status=200" in m for m in members), members
    assert sum("stored" in m for m in members) == 1, members
    # RFC 9211 2.8: the other nineteen joined the first one's forward request.
    assert sum("collapsed" in m for m in members) == n - 1, members
    # The clients have the whole body before the fetch has stored it and ended; a request
    # until then joins the fetch (collapsed) rather than hitting.
    await wait_until(lambda: cache.proxy is not None and not cache.proxy.fetching())
    async with proxy_client(cache) as client:
        resp, body = await client.get(url)
    assert body == BODY
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/slow"] == 1


@pytest.mark.parametrize("cache_control", ["private", "no-store", "private, max-age=60"])
async def test_waiters_for_an_uncachable_response_each_get_their_own(
    origin: Origin, cache: CacheServer, cache_control: str
) -> None:
    n = 5
    gate = asyncio.Event()

    async def echo(request: web.Request) -> web.Response:
        async with asyncio.timeout(5):
            await gate.wait()
        await asyncio.sleep(0.01)
        client_id = request.headers.get("X-Client-Id", "none")
        return web.Response(
            text=f"for {client_id}",
            headers={"Cache-Control": cache_control, "X-Client-Id": client_id},
        )

    origin.route("/mine", echo)
    url = origin.url("/mine")
    proxy = f"http://127.0.0.1:{cache.address[1]}"

    async with aiohttp.ClientSession(auto_decompress=False) as session:

        def client(i: int) -> Callable[[], Coroutine[Any, Any, tuple[int, str, bytes]]]:
            async def fetch() -> tuple[int, str, bytes]:
                headers = {"X-Client-Id": f"c{i}"}
                async with session.get(url, proxy=proxy, headers=headers) as resp:
                    return resp.status, resp.headers.get("X-Client-Id", ""), await resp.read()

            return fetch

        async with asyncio.timeout(20):
            tasks = await start_together(
                origin, cache, "/mine", gate, [client(i) for i in range(n)]
            )
            results = await asyncio.gather(*tasks)

    for i, (status, echoed, body) in enumerate(results):
        assert (status, echoed, body) == (200, f"c{i}", f"for c{i}".encode())
    assert 1 <= origin.hits["/mine"] <= n
    assert sorted(r.headers["X-Client-Id"] for r in origin.requests) == [f"c{i}" for i in range(n)]


async def test_waiter_with_other_vary_value_is_not_given_the_other_variant(
    origin: Origin, cache: CacheServer
) -> None:
    gate = asyncio.Event()

    async def by_language(request: web.Request) -> web.Response:
        async with asyncio.timeout(5):
            await gate.wait()
        lang = request.headers.get("Accept-Language", "none")
        return web.Response(
            text=f"body in {lang}",
            headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"},
        )

    origin.route("/lang", by_language)
    url = origin.url("/lang")
    proxy = f"http://127.0.0.1:{cache.address[1]}"
    languages = ["en", "fr", "en", "de"]

    async with aiohttp.ClientSession(auto_decompress=False) as session:
        clients = [ok_body(session, url, proxy, {"Accept-Language": lang}) for lang in languages]
        async with asyncio.timeout(20):
            tasks = await start_together(origin, cache, "/lang", gate, clients)
            bodies = await asyncio.gather(*tasks)

    assert bodies == [f"body in {lang}".encode() for lang in languages]
    # The second "en" shared the first one's fetch; "fr" and "de" each fetched their own.
    assert origin.hits["/lang"] == 3
    async with proxy_client(cache) as c:
        resp, body = await c.get(url, headers={"Accept-Language": "en"})
    assert body == b"body in en"
    assert our_cache_status(resp).get("hit") is True


async def test_client_leaving_mid_body_does_not_break_the_others(
    origin: Origin, cache: CacheServer
) -> None:
    n = 5
    leavers = {0, 2}  # client 0 started the fetch
    slow = SlowOrigin({"Cache-Control": "max-age=60"})
    origin.route("/leave", slow.handler)
    url = origin.url("/leave")
    proxy = f"http://127.0.0.1:{cache.address[1]}"
    left = 0

    async with aiohttp.ClientSession(auto_decompress=False) as session:

        def client(i: int) -> Callable[[], Coroutine[Any, Any, bytes]]:
            async def fetch() -> bytes:
                nonlocal left
                async with session.get(url, proxy=proxy) as resp:
                    first = await resp.content.readexactly(len(PARTS[0]))
                    if i in leavers:
                        resp.close()  # drops the connection mid-body
                        left += 1
                        if left == len(leavers):
                            slow.before_last.set()
                        return first
                    return first + await resp.content.read()

            return fetch

        async with asyncio.timeout(20):
            tasks = await start_together(
                origin, cache, "/leave", slow.gate, [client(i) for i in range(n)]
            )
            bodies = await asyncio.gather(*tasks)

    for i, body in enumerate(bodies):
        assert body == (PARTS[0] if i in leavers else BODY)
    assert slow.before_last_was_set == [True]
    assert origin.hits["/leave"] == 1
    # The object was completed and stored for later clients. The store happens as the last
    # bytes go out, so a request right after them may come first: ask only the cache (no
    # origin contact) until it has it, for at most 2 s.
    async with proxy_client(cache) as c:
        for _ in range(100):
            resp, body = await c.get(url, headers={"Cache-Control": "only-if-cached"})
            if resp.status == 200:
                break
            await asyncio.sleep(0.02)
    assert body == BODY
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/leave"] == 1


async def test_every_client_leaving_still_stores_the_object(
    origin: Origin, cache: CacheServer
) -> None:
    slow = SlowOrigin({"Cache-Control": "max-age=60"})
    slow.gate.set()
    origin.route("/gone", slow.handler)
    url = origin.url("/gone")
    proxy = f"http://127.0.0.1:{cache.address[1]}"
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.get(url, proxy=proxy) as resp,
    ):
        await resp.content.readexactly(len(PARTS[0]))
        resp.close()
    slow.before_last.set()
    async with proxy_client(cache) as c:
        await wait_until(lambda: slow.before_last_was_set == [True])
        await asyncio.sleep(0.2)  # the fetch sends the last part and commits
        resp, body = await c.get(url)
    assert body == BODY
    assert our_cache_status(resp).get("hit") is True
    assert origin.hits["/gone"] == 1


async def test_origin_reset_mid_body_fails_every_waiter_and_stores_nothing(
    origin: Origin, cache: CacheServer
) -> None:
    n = 5
    gate = asyncio.Event()
    calls = 0

    async def breaks_once(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        async with asyncio.timeout(5):
            await gate.wait()
        resp = web.StreamResponse(headers={"Cache-Control": "max-age=60"})
        resp.content_length = len(BODY)
        await resp.prepare(request)
        await resp.write(PARTS[0])
        if calls == 1:
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.abort()  # the origin dies mid-body
            return resp
        for part in PARTS[1:]:
            await resp.write(part)
        await resp.write_eof()
        return resp

    origin.route("/broken", breaks_once)
    url = origin.url("/broken")
    proxy = f"http://127.0.0.1:{cache.address[1]}"

    async with aiohttp.ClientSession(auto_decompress=False) as session:

        async def fetch() -> bytes | Exception:
            try:
                async with session.get(url, proxy=proxy) as resp:
                    return await resp.read()
            except aiohttp.ClientError as e:
                return e

        async with asyncio.timeout(20):
            tasks = await start_together(origin, cache, "/broken", gate, [fetch] * n)
            results = await asyncio.gather(*tasks)

    # No client takes the truncated body for a whole one.
    assert all(isinstance(r, aiohttp.ClientPayloadError) for r in results), results
    assert origin.hits["/broken"] == 1
    async with proxy_client(cache) as c:
        resp, body = await c.get(url)
    assert body == BODY
    assert "hit" not in our_cache_status(resp)
    assert origin.hits["/broken"] == 2


async def test_concurrent_revalidations_make_one_conditional_request(
    origin: Origin, cache: CacheServer
) -> None:
    n = 5
    gate = asyncio.Event()

    async def validated(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"r1"':
            async with asyncio.timeout(5):
                await gate.wait()
            return web.Response(status=304, headers={"ETag": '"r1"', "Cache-Control": "max-age=60"})
        return web.Response(
            body=b"validated body", headers={"ETag": '"r1"', "Cache-Control": "max-age=0"}
        )

    origin.route("/reval", validated)
    url = origin.url("/reval")
    proxy = f"http://127.0.0.1:{cache.address[1]}"
    async with proxy_client(cache) as c:
        _, body = await c.get(url)
        assert body == b"validated body"
    await wait_until(lambda: not cache.connections)  # the cache saw that client go

    async with aiohttp.ClientSession(auto_decompress=False) as session:

        async def fetch() -> tuple[int, bytes]:
            async with session.get(url, proxy=proxy) as resp:
                return resp.status, await resp.read()

        async with asyncio.timeout(20):
            tasks = await start_together(origin, cache, "/reval", gate, [fetch] * n)
            results = await asyncio.gather(*tasks)

    assert results == [(200, b"validated body")] * n
    assert origin.hits["/reval"] == 2
    assert origin.requests[1].headers.get("If-None-Match") == '"r1"'


async def test_waiter_is_not_given_a_response_to_another_clients_credentials(
    origin: Origin, cache: CacheServer
) -> None:
    gate = asyncio.Event()

    async def whoami(request: web.Request) -> web.Response:
        async with asyncio.timeout(5):
            await gate.wait()
        who = request.headers.get("Authorization", "anonymous")
        # Storable for a shared cache only without Authorization (RFC 9111 3.5).
        return web.Response(text=f"for {who}", headers={"Cache-Control": "max-age=60"})

    origin.route("/whoami", whoami)
    url = origin.url("/whoami")
    proxy = f"http://127.0.0.1:{cache.address[1]}"
    identities = ["Basic YWxpY2U6YQ==", "Basic Ym9iOmI=", None]

    async with aiohttp.ClientSession(auto_decompress=False) as session:
        clients = [
            ok_body(session, url, proxy, {"Authorization": who} if who else {})
            for who in identities
        ]
        async with asyncio.timeout(20):
            tasks = await start_together(origin, cache, "/whoami", gate, clients)
            bodies = await asyncio.gather(*tasks)

    assert bodies == [f"for {who or 'anonymous'}".encode() for who in identities]
    assert origin.hits["/whoami"] == 3
