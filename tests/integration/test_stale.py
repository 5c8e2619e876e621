"""Stale responses end to end: served after a failed revalidation (RFC 5861 4, RFC 9111 4.2.4)
and while a background revalidation runs (RFC 5861 3).

A stored response whose revalidation fails is served stale (``TCP_REFRESH_FAIL_OLD``) when a
``stale-if-error`` window covers it, whatever the failure, or, without one, when the origin
could not be reached at all, the validation was due to plain staleness and the response is at
most ``[cache] max_stale`` seconds stale. must-revalidate, proxy-revalidate, s-maxage and
no-cache forbid it. Otherwise the client gets the failure (a 5xx forwarded as
``TCP_REFRESH_FAIL_ERR``, or the cache's own 502/504); either way a 5xx answer to a
revalidation never replaces or deletes the stored response. Within a
``stale-while-revalidate`` window the stale response is a hit and one background request
revalidates it.

These tests drive real caches (with the disk tier, and memory-only so that the miss fast path
takes part) against origins on 127.0.0.1; the origin's request counts show what went
upstream, and the access log what the cache made of each request.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web
from multidict import CIMultiDict

from harvest_cache.http.headers import stored_fields
from harvest_cache.server.app import CacheServer
from harvest_cache.store.interface import StoredObject
from tests.integration.test_miss_fast_path import (
    ScriptedOrigin,
    fetch,
    lean,
    memory_cache,
    params,
)
from tests.support import (
    LogLine,
    MakeCache,
    Origin,
    RawResponse,
    stop_and_read_log,
    wait_until,
)

BODY = b"the stored body"
ETAG = '"s1"'
HITS = ("TCP_HIT", "TCP_MEM_HIT")
BACKENDS = ["disk", "memory"]


# -- helpers -----------------------------------------------------------------------------------


class Validated:
    """An aiohttp handler for one object: ``body`` with ``cc`` and ``etag``. A request whose
    If-None-Match is ``etag`` gets a 304 carrying ``refreshed_cc`` (``cc`` if None). While
    ``fail`` is set, every request gets that status instead, with ``fail_headers``. Every
    request waits (at most 5 s) for ``gate``, if set."""

    def __init__(self, cc: str, body: bytes = BODY, etag: str = ETAG) -> None:
        self.cc = cc
        self.body = body
        self.etag = etag
        self.refreshed_cc: str | None = None
        self.fail: int | None = None
        self.fail_headers: dict[str, str] = {}
        self.gate: asyncio.Event | None = None
        self.seen: list[CIMultiDict[str]] = []
        self.answered = 0

    @property
    def conditional(self) -> int:
        return sum("If-None-Match" in h for h in self.seen)

    async def __call__(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.copy())
        if self.gate is not None:
            async with asyncio.timeout(5):
                await self.gate.wait()
        self.answered += 1
        if self.fail is not None:
            text = b"origin failure %d" % self.fail
            return web.Response(status=self.fail, body=text, headers=self.fail_headers)
        if request.headers.get("If-None-Match") == self.etag:
            cc = self.refreshed_cc or self.cc
            return web.Response(status=304, headers={"ETag": self.etag, "Cache-Control": cc})
        headers = {"ETag": self.etag, "Cache-Control": self.cc, "Content-Type": "text/plain"}
        return web.Response(body=self.body, headers=headers)


async def start_cache(
    make_cache: MakeCache, backend: str, **sections: dict[str, object]
) -> CacheServer:
    if backend == "memory":
        return await memory_cache(make_cache, **sections)
    return await make_cache(**sections)


async def stored_object(cache: CacheServer, origin: Origin, path: str, state: Validated) -> str:
    """Store ``path`` (a miss answered by ``state``); its URL."""
    origin.route(path, state)
    url = origin.url(path)
    first = await fetch(cache, url)
    assert (first.status, first.body) == (200, state.body)
    assert params(first).get("stored") is True
    return url


def ttl(resp: RawResponse) -> int:
    value = params(resp).get("ttl")
    assert isinstance(value, str), resp
    return int(value)


def age(resp: RawResponse) -> int:
    value = resp.get("Age")
    assert value is not None, resp
    return int(value)


def assert_served_stale(resp: RawResponse, body: bytes, fwd_status: str | None) -> None:
    """The stored response after a failed revalidation: fwd=stale, negative ttl."""
    assert (resp.status, resp.body) == (200, body), resp
    found = params(resp)
    assert found.get("fwd") == "stale", found
    assert found.get("fwd-status") == fwd_status, found
    assert "hit" not in found, found
    assert "stored" not in found, found
    assert ttl(resp) < 0
    assert age(resp) >= 0


def assert_stale_hit(resp: RawResponse, body: bytes) -> None:
    """A stale response served as a hit within stale-while-revalidate."""
    assert (resp.status, resp.body) == (200, body), resp
    found = params(resp)
    assert found.get("hit") is True, found
    assert "fwd" not in found, found
    assert ttl(resp) < 0
    assert age(resp) >= 0


def outcomes(lines: list[LogLine], url: str) -> list[tuple[str, int]]:
    return [(line.result, line.status) for line in lines if line.url == url]


def stored_etag(cache: CacheServer, url: str) -> str | None:
    """The ETag of the object the memory tier holds for ``url`` (None if none)."""
    found = cache.store.memory_view.get(url)
    if not isinstance(found, StoredObject):
        return None
    return stored_fields(found.head.headers).get("ETag")


def stored_cc(cache: CacheServer, url: str) -> str | None:
    found = cache.store.memory_view.get(url)
    if not isinstance(found, StoredObject):
        return None
    return stored_fields(found.head.headers).get("Cache-Control")


async def answered_after_gate(
    cache: CacheServer, url: str, state: Validated, headers: list[tuple[str, str]] | None = None
) -> RawResponse:
    """Send a request while the origin is gated: it must reach the origin and still be
    unanswered 0.2 s later; then open the gate and return its response."""
    gate = state.gate = asyncio.Event()
    before = len(state.seen)
    task = asyncio.create_task(fetch(cache, url, headers=headers))
    try:
        await wait_until(lambda: len(state.seen) > before, within=3)
        await asyncio.sleep(0.2)
        assert not task.done(), "answered before the origin was"
    finally:
        gate.set()
    return await task


# -- RFC 5861 4: stale-if-error with a 5xx answer ----------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rfc5861_4_stale_if_error_serves_stored_response_for_503(
    origin: Origin, make_cache: MakeCache, backend: str
) -> None:
    cache = await start_cache(make_cache, backend)
    state = Validated("max-age=1, stale-if-error=60")
    url = await stored_object(cache, origin, "/sie", state)
    await asyncio.sleep(1.1)
    state.fail = 503
    stale = await fetch(cache, url)
    assert_served_stale(stale, BODY, "503")
    # 1.1 s resident, plus up to 1 s of apparent age (the origin's Date is in whole seconds).
    assert 1 <= age(stale) <= 3
    assert stale.get("ETag") == ETAG
    assert stale.get("Content-Type") == "text/plain"
    assert state.seen[-1].get("If-None-Match") == ETAG
    assert origin.hits["/sie"] == 2
    # The stored response is still there: the next revalidation confirms it.
    state.fail = None
    again = await fetch(cache, url)
    assert (again.status, again.body) == (200, BODY)
    assert (params(again).get("fwd"), params(again).get("fwd-status")) == ("stale", "304")
    assert origin.hits["/sie"] == 3
    assert state.conditional == 2
    if backend == "memory":
        # The 5xx came to the miss fast path, which handed it over; it answered the 304.
        assert lean(cache) == (1, 1)
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [
        ("TCP_MISS", 200),
        ("TCP_REFRESH_FAIL_OLD", 200),
        ("TCP_REFRESH_UNMODIFIED", 200),
    ]


async def test_rfc5861_4_stale_if_error_serves_collapsed_clients_from_one_failure(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    state = Validated("max-age=0, stale-if-error=60")
    url = await stored_object(cache, origin, "/sie-collapsed", state)
    state.fail = 500
    gate = state.gate = asyncio.Event()
    tasks = [asyncio.create_task(fetch(cache, url)) for _ in range(3)]
    try:
        await wait_until(lambda: len(state.seen) == 2, within=3)
        await asyncio.sleep(0.2)  # the other two join the flight meanwhile
        assert not any(task.done() for task in tasks)
    finally:
        gate.set()
    for resp in await asyncio.gather(*tasks):
        assert_served_stale(resp, BODY, "500")
    assert origin.hits["/sie-collapsed"] == 2
    lines = await stop_and_read_log(cache)
    assert sorted(outcomes(lines, url)) == [
        ("TCP_MISS", 200),
        ("TCP_REFRESH_FAIL_OLD", 200),
        ("TCP_REFRESH_FAIL_OLD", 200),
        ("TCP_REFRESH_FAIL_OLD", 200),
    ]


# -- RFC 9111 4.3.3: a 5xx without stale-if-error is forwarded, the stored response kept -----


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("status", "fail_headers"),
    [(503, {"Cache-Control": "max-age=60"}), (500, {})],
    ids=["503-max-age", "500"],
)
async def test_s4_3_3_5xx_without_stale_if_error_is_forwarded_and_not_stored(
    origin: Origin,
    make_cache: MakeCache,
    backend: str,
    status: int,
    fail_headers: dict[str, str],
) -> None:
    cache = await start_cache(make_cache, backend)
    state = Validated("max-age=0")
    url = await stored_object(cache, origin, "/err", state)
    state.fail = status
    state.fail_headers = fail_headers
    failed = await fetch(cache, url)
    assert (failed.status, failed.body) == (status, b"origin failure %d" % status)
    found = params(failed)
    assert (found.get("fwd"), found.get("fwd-status")) == ("stale", str(status))
    assert "stored" not in found
    assert state.seen[-1].get("If-None-Match") == ETAG
    # Neither replaced (a 503 with max-age=60 would be a fresh hit now) nor deleted (the
    # next request would be unconditional): the origin confirms the old response.
    state.fail = None
    again = await fetch(cache, url)
    assert (again.status, again.body) == (200, BODY)
    assert (params(again).get("fwd"), params(again).get("fwd-status")) == ("stale", "304")
    assert state.conditional == 2
    assert origin.hits["/err"] == 3
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [
        ("TCP_MISS", 200),
        ("TCP_REFRESH_FAIL_ERR", status),
        ("TCP_REFRESH_UNMODIFIED", 200),
    ]


@pytest.mark.parametrize(
    "cc",
    [
        "max-age=0, must-revalidate, stale-if-error=60",
        "max-age=0, proxy-revalidate, stale-if-error=60",
        "s-maxage=0, stale-if-error=60",
        "no-cache, max-age=60, stale-if-error=60",
    ],
    ids=["must-revalidate", "proxy-revalidate", "s-maxage", "no-cache"],
)
async def test_s4_2_4_forbidding_directive_overrides_stale_if_error(
    origin: Origin, make_cache: MakeCache, cc: str
) -> None:
    cache = await make_cache()
    state = Validated(cc)
    url = await stored_object(cache, origin, "/forbid", state)
    state.fail = 503
    failed = await fetch(cache, url)
    assert (failed.status, failed.body) == (503, b"origin failure 503")
    state.fail = None
    again = await fetch(cache, url)
    assert (again.status, again.body) == (200, BODY)
    assert params(again).get("fwd-status") == "304"
    assert origin.hits["/forbid"] == 3
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [
        ("TCP_MISS", 200),
        ("TCP_REFRESH_FAIL_ERR", 503),
        ("TCP_REFRESH_UNMODIFIED", 200),
    ]


async def test_rfc5861_4_stale_if_error_window_ends(origin: Origin, make_cache: MakeCache) -> None:
    """``stale-if-error=1`` and more than 1 s stale: the 5xx is the answer."""
    cache = await make_cache()
    state = Validated("max-age=0, stale-if-error=1")
    url = await stored_object(cache, origin, "/window", state)
    await asyncio.sleep(1.3)
    state.fail = 503
    failed = await fetch(cache, url)
    assert (failed.status, failed.body) == (503, b"origin failure 503")
    assert params(failed).get("fwd-status") == "503"
    # A request's own stale-if-error covers it though.
    covered = await fetch(cache, url, headers=[("Cache-Control", "stale-if-error=600")])
    assert_served_stale(covered, BODY, "503")
    assert origin.hits["/window"] == 3
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [
        ("TCP_MISS", 200),
        ("TCP_REFRESH_FAIL_ERR", 503),
        ("TCP_REFRESH_FAIL_OLD", 200),
    ]


async def test_rfc5861_4_request_stale_if_error_gets_stale_for_5xx(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    state = Validated("max-age=0")
    url = await stored_object(cache, origin, "/req-sie", state)
    state.fail = 503
    stale = await fetch(cache, url, headers=[("Cache-Control", "stale-if-error=600")])
    assert_served_stale(stale, BODY, "503")
    # Without the request directive the same failure is forwarded.
    failed = await fetch(cache, url)
    assert failed.status == 503
    assert origin.hits["/req-sie"] == 3
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [
        ("TCP_MISS", 200),
        ("TCP_REFRESH_FAIL_OLD", 200),
        ("TCP_REFRESH_FAIL_ERR", 503),
    ]


# -- RFC 9111 4.2.4: an unreachable origin ------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "cc", "request_headers", "sections", "expected"),
    [
        ("disk", "max-age=0", [], {}, 200),
        ("memory", "max-age=0", [], {}, 200),
        ("disk", "max-age=0", [], {"cache": {"max_stale": 0}}, 502),
        ("memory", "max-age=0", [], {"cache": {"max_stale": 0}}, 502),
        ("disk", "max-age=0, must-revalidate", [], {}, 502),
        ("disk", "max-age=0, proxy-revalidate", [], {}, 502),
        ("disk", "s-maxage=0", [], {}, 502),
        ("disk", "no-cache, max-age=60", [], {}, 502),
        ("disk", "max-age=0", [("Cache-Control", "max-age=0")], {}, 502),
        ("disk", "max-age=0", [("Cache-Control", "no-cache")], {}, 502),
        ("disk", "max-age=0, stale-if-error=60", [], {"cache": {"max_stale": 0}}, 200),
        (
            "disk",
            "max-age=0",
            [("Cache-Control", "stale-if-error=600")],
            {"cache": {"max_stale": 0}},
            200,
        ),
        ("disk", "max-age=0, must-revalidate, stale-if-error=60", [], {}, 502),
    ],
    ids=[
        "plain-disk",
        "plain-memory",
        "max_stale-0-disk",
        "max_stale-0-memory",
        "must-revalidate",
        "proxy-revalidate",
        "s-maxage",
        "no-cache",
        "request-max-age-0",
        "request-no-cache",
        "stale-if-error-beats-max_stale",
        "request-stale-if-error",
        "must-revalidate-beats-stale-if-error",
    ],
)
async def test_s4_2_4_refused_connection(
    origin: Origin,
    make_cache: MakeCache,
    backend: str,
    cc: str,
    request_headers: list[tuple[str, str]],
    sections: dict[str, dict[str, object]],
    expected: int,
) -> None:
    """The origin is gone (its port refuses connections) when the stored response is
    revalidated."""
    cache = await start_cache(make_cache, backend, **sections)
    state = Validated(cc)
    url = await stored_object(cache, origin, "/gone", state)
    await origin.stop()
    resp = await fetch(cache, url, headers=request_headers)
    if expected == 200:
        assert_served_stale(resp, BODY, None)
        assert resp.get("ETag") == ETAG
    else:
        assert resp.status == expected, resp
        assert resp.body != BODY
        assert params(resp).get("detail") == "connect_refused", resp
    assert state.answered == 1
    lines = await stop_and_read_log(cache)
    results = outcomes(lines, url)
    assert results[0] == ("TCP_MISS", 200)
    assert len(results) == 2
    if expected == 200:
        assert results[1] == ("TCP_REFRESH_FAIL_OLD", 200)
    else:
        assert results[1][1] == expected
        assert results[1][0] != "TCP_REFRESH_FAIL_OLD"


OK_HEAD = (
    b"HTTP/1.1 200 OK\r\nCache-Control: max-age=0\r\nETag: " + ETAG.encode() + b"\r\n"
    b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(BODY)
)


async def test_s4_2_4_origin_closing_without_answer_gets_stale(make_cache: MakeCache) -> None:
    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            writer.write(OK_HEAD + BODY)
        else:
            writer.close()  # read the request, then hang up without a word

    async with ScriptedOrigin(respond) as scripted:
        cache = await make_cache()
        url = scripted.url("/hangup")
        first = await fetch(cache, url)
        assert (first.status, first.body) == (200, BODY)
        stale = await fetch(cache, url)
        assert_served_stale(stale, BODY, None)
        # The reused connection's failure is retried once on a new one.
        assert 2 <= len(scripted.requests) <= 3
        assert all(("If-None-Match", ETAG) in fields for _, fields in scripted.requests[1:])
        lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [("TCP_MISS", 200), ("TCP_REFRESH_FAIL_OLD", 200)]


@pytest.mark.parametrize(
    ("backend", "max_stale", "expected"),
    [("disk", 604800, 200), ("memory", 604800, 200), ("disk", 0, 504)],
)
async def test_s4_2_4_silent_origin_times_out(
    make_cache: MakeCache, backend: str, max_stale: int, expected: int
) -> None:
    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            writer.write(OK_HEAD + BODY)
        # Later requests are never answered (the connection stays open until the cache
        # gives up on it).

    async with ScriptedOrigin(respond) as scripted:
        cache = await start_cache(
            make_cache,
            backend,
            upstream={"read_timeout": 0.5},
            cache={"max_stale": max_stale},
        )
        url = scripted.url("/silent")
        first = await fetch(cache, url)
        assert (first.status, first.body) == (200, BODY)
        started = time.monotonic()
        resp = await fetch(cache, url)
        elapsed = time.monotonic() - started
        if expected == 200:
            assert_served_stale(resp, BODY, None)
        else:
            assert resp.status == 504
            assert params(resp).get("detail") == "read_timeout"
        assert 0.4 <= elapsed < 3
        assert len(scripted.requests) == 2
        lines = await stop_and_read_log(cache)
    results = outcomes(lines, url)
    assert results[0] == ("TCP_MISS", 200)
    if expected == 200:
        assert results[1:] == [("TCP_REFRESH_FAIL_OLD", 200)]
    else:
        assert [status for _, status in results[1:]] == [504]


# -- RFC 5861 3: stale-while-revalidate ---------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rfc5861_3_stale_while_revalidate_answers_at_once_and_refreshes_once(
    origin: Origin, make_cache: MakeCache, backend: str
) -> None:
    cache = await start_cache(make_cache, backend)
    state = Validated("max-age=0, stale-while-revalidate=30")
    state.refreshed_cc = "max-age=60"
    url = await stored_object(cache, origin, "/swr", state)
    gate = state.gate = asyncio.Event()
    try:
        # Answered at once, while the origin has not answered the revalidation.
        resp = await fetch(cache, url, within=2)
        assert_stale_hit(resp, BODY)
        assert resp.get("ETag") == ETAG
        await wait_until(lambda: len(state.seen) == 2, within=3)
        assert state.seen[1].get("If-None-Match") == ETAG
        # More requests in the window: answered at once too, with no more revalidations.
        more = await asyncio.gather(*(fetch(cache, url, within=2) for _ in range(4)))
        for each in more:
            assert_stale_hit(each, BODY)
        await asyncio.sleep(0.2)
        assert len(state.seen) == 2
        assert state.answered == 1
    finally:
        gate.set()
    # The 304 (max-age=60) refreshes the stored head: then a fresh hit, no request upstream.
    await wait_until(lambda: stored_cc(cache, url) == "max-age=60", within=3)
    fresh = await fetch(cache, url)
    assert (fresh.status, fresh.body) == (200, BODY)
    assert params(fresh).get("hit") is True
    assert ttl(fresh) > 50
    assert origin.hits["/swr"] == 2
    assert state.conditional == 1
    if backend == "memory":
        assert lean(cache) == (0, 0)  # the fast path leaves these to the general one
    lines = await stop_and_read_log(cache)
    results = outcomes(lines, url)
    assert results[0] == ("TCP_MISS", 200)
    assert len(results) == 7
    assert all(result in HITS and status == 200 for result, status in results[1:])


async def test_rfc5861_3_background_refresh_stores_new_response(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    state = Validated("max-age=0, stale-while-revalidate=30")
    url = await stored_object(cache, origin, "/swr-new", state)
    # The origin has a new version now.
    state.body, state.etag, state.cc = b"the new body", '"s2"', "max-age=60"
    stale = await fetch(cache, url)
    assert_stale_hit(stale, BODY)
    await wait_until(lambda: stored_etag(cache, url) == '"s2"', within=3)
    assert state.seen[1].get("If-None-Match") == ETAG
    for _ in range(2):
        new = await fetch(cache, url)
        assert (new.status, new.body) == (200, b"the new body")
        assert params(new).get("hit") is True
        assert new.get("ETag") == '"s2"'
    assert origin.hits["/swr-new"] == 2
    lines = await stop_and_read_log(cache)
    results = outcomes(lines, url)
    assert results[0] == ("TCP_MISS", 200)
    assert [result in HITS for result, _ in results[1:]] == [True] * 3


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rfc5861_3_outside_window_request_waits_for_revalidation(
    origin: Origin, make_cache: MakeCache, backend: str
) -> None:
    cache = await start_cache(make_cache, backend)
    state = Validated("max-age=0, stale-while-revalidate=1")
    url = await stored_object(cache, origin, "/swr-out", state)
    await asyncio.sleep(1.3)
    resp = await answered_after_gate(cache, url, state)
    assert (resp.status, resp.body) == (200, BODY)
    assert (params(resp).get("fwd"), params(resp).get("fwd-status")) == ("stale", "304")
    assert state.conditional == 1
    assert origin.hits["/swr-out"] == 2
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [("TCP_MISS", 200), ("TCP_REFRESH_UNMODIFIED", 200)]


@pytest.mark.parametrize(
    ("cc", "request_headers", "result"),
    [
        ("max-age=0, stale-while-revalidate=30, must-revalidate", [], "TCP_REFRESH_UNMODIFIED"),
        ("max-age=0, stale-while-revalidate=30, s-maxage=0", [], "TCP_REFRESH_UNMODIFIED"),
        (
            "max-age=0, stale-while-revalidate=30",
            [("Cache-Control", "max-age=0")],
            "TCP_REFRESH_UNMODIFIED",
        ),
        (
            "max-age=0, stale-while-revalidate=30",
            [("Cache-Control", "no-cache")],
            "TCP_CLIENT_REFRESH_MISS",
        ),
        (
            "max-age=0, stale-while-revalidate=30",
            [("Pragma", "no-cache")],
            "TCP_CLIENT_REFRESH_MISS",
        ),
    ],
    ids=["must-revalidate", "s-maxage", "request-max-age-0", "request-no-cache", "pragma"],
)
async def test_rfc5861_3_not_answered_stale_when_validation_is_required(
    origin: Origin,
    make_cache: MakeCache,
    cc: str,
    request_headers: list[tuple[str, str]],
    result: str,
) -> None:
    cache = await make_cache()
    state = Validated(cc)
    url = await stored_object(cache, origin, "/swr-no", state)
    resp = await answered_after_gate(cache, url, state, request_headers)
    assert (resp.status, resp.body) == (200, BODY)
    found = params(resp)
    assert "hit" not in found
    assert found.get("fwd") in ("stale", "request")
    assert origin.hits["/swr-no"] == 2
    lines = await stop_and_read_log(cache)
    assert outcomes(lines, url) == [("TCP_MISS", 200), (result, 200)]


async def test_rfc5861_3_shutdown_during_background_refresh_does_not_hang(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    state = Validated("max-age=0, stale-while-revalidate=30")
    url = await stored_object(cache, origin, "/swr-stop", state)
    gate = state.gate = asyncio.Event()
    try:
        resp = await fetch(cache, url, within=2)
        assert_stale_hit(resp, BODY)
        await wait_until(lambda: len(state.seen) == 2, within=3)
        started = time.monotonic()
        async with asyncio.timeout(10):
            await cache.stop(0.5)
        elapsed = time.monotonic() - started
        assert elapsed < 3, elapsed
        assert state.answered == 1  # the refresh was still waiting for the origin
    finally:
        gate.set()


class Versioned:
    """An aiohttp handler whose object changes: ``version(...)`` sets the current body, ETag
    and Cache-Control. It honours If-Match (412 when no match), If-None-Match (304) and a
    single ``Range: bytes=a-b`` (206), as origins do; every response carries ``cc``."""

    def __init__(self, body: bytes, etag: str, cc: str) -> None:
        self.body, self.etag, self.cc = body, etag, cc
        self.seen: list[CIMultiDict[str]] = []

    def version(self, body: bytes, etag: str, cc: str) -> None:
        self.body, self.etag, self.cc = body, etag, cc

    async def __call__(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.copy())
        headers = {"ETag": self.etag, "Cache-Control": self.cc}
        if_match = request.headers.get("If-Match")
        if if_match is not None and if_match != self.etag:
            return web.Response(status=412, headers=headers)
        if request.headers.get("If-None-Match") == self.etag:
            return web.Response(status=304, headers=headers)
        body = self.body
        rng = request.headers.get("Range", "")
        if rng.startswith("bytes=") and "," not in rng:
            first, last = (int(x) for x in rng[6:].split("-"))
            headers["Content-Range"] = f"bytes {first}-{last}/{len(body)}"
            return web.Response(status=206, body=body[first : last + 1], headers=headers)
        return web.Response(body=body, headers=headers)


async def test_rfc5861_3_ranged_request_in_window_refreshes_whole_object(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A Range request answered stale within the window starts the background revalidation
    too. That revalidates the stored response (RFC 5861 3), not the client's part of it: a
    new version from the origin is stored whole (as for any other request in the window),
    so the next request is a hit on it."""
    cache = await make_cache()
    state = Versioned(BODY, ETAG, "max-age=0, stale-while-revalidate=30")
    origin.route("/swr-range", state)
    url = origin.url("/swr-range")
    first = await fetch(cache, url)
    assert (first.status, first.body) == (200, BODY)
    state.version(b"the new body", '"s2"', "max-age=60")
    part = await fetch(cache, url, headers=[("Range", "bytes=0-2")])
    assert (part.status, part.body) == (206, BODY[:3])
    assert params(part).get("hit") is True
    await wait_until(lambda: len(state.seen) == 2, within=3)
    # The refresh is over once the stored object is no longer the old one.
    await wait_until(lambda: stored_etag(cache, url) != ETAG, within=3)
    new = await fetch(cache, url)
    assert (new.status, new.body) == (200, b"the new body")
    assert params(new).get("hit") is True, new
    assert len(state.seen) == 2
    assert state.seen[1].get("If-None-Match") == ETAG
    assert "Range" not in state.seen[1]


async def test_s4_3_2_client_precondition_goes_to_the_origin_and_leaves_the_store(
    origin: Origin, make_cache: MakeCache
) -> None:
    """If-Match is a precondition on the resource's current state, which only the origin
    knows: the request is forwarded as it came (not answered stale, no background
    revalidation), and the origin's 412 answers that client alone."""
    cache = await make_cache()
    state = Versioned(BODY, ETAG, "max-age=0, stale-while-revalidate=30")
    origin.route("/swr-if-match", state)
    url = origin.url("/swr-if-match")
    first = await fetch(cache, url)
    assert (first.status, first.body) == (200, BODY)
    state.cc = "max-age=60"  # what the origin says from now on
    refused = await fetch(cache, url, headers=[("If-Match", '"other"')])
    assert refused.status == 412
    assert len(state.seen) == 2
    assert state.seen[1].get("If-Match") == '"other"'
    assert "If-None-Match" not in state.seen[1]  # the cache's validation is not mixed in
    assert stored_cc(cache, url) == "max-age=0, stale-while-revalidate=30"  # untouched
    plain = await fetch(cache, url)
    assert (plain.status, plain.body) == (200, BODY), plain
    assert params(plain).get("hit") is True  # stale within the window: served at once
    await wait_until(lambda: stored_cc(cache, url) == "max-age=60", within=3)
    assert "If-Match" not in state.seen[2]


# -- Vary --------------------------------------------------------------------------------------


async def test_rfc5861_4_stale_if_error_serves_the_matching_variant(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    fail: list[int] = []
    seen: list[CIMultiDict[str]] = []

    async def varied(request: web.Request) -> web.Response:
        seen.append(request.headers.copy())
        if fail:
            return web.Response(status=fail[0], body=b"origin failure")
        accept = request.headers.get("Accept", "none")
        headers = {
            "Cache-Control": "max-age=0, stale-if-error=60",
            "Vary": "Accept",
            "ETag": f'"{accept}"',
        }
        return web.Response(body=f"variant {accept}".encode(), headers=headers)

    origin.route("/varied", varied)
    url = origin.url("/varied")
    for accept in ("text/a", "text/b"):
        resp = await fetch(cache, url, headers=[("Accept", accept)])
        assert (resp.status, resp.body) == (200, f"variant {accept}".encode())
        assert params(resp).get("stored") is True
    fail.append(503)
    for accept in ("text/b", "text/a"):
        stale = await fetch(cache, url, headers=[("Accept", accept)])
        assert_served_stale(stale, f"variant {accept}".encode(), "503")
        assert stale.get("ETag") == f'"{accept}"'
        assert seen[-1].get("If-None-Match") == f'"{accept}"'
    # No variant for this one: nothing stale to serve.
    other = await fetch(cache, url, headers=[("Accept", "text/c")])
    assert (other.status, other.body) == (503, b"origin failure")
    assert len(seen) == 5
    lines = await stop_and_read_log(cache)
    results = outcomes(lines, url)
    assert results[:4] == [
        ("TCP_MISS", 200),
        ("TCP_MISS", 200),
        ("TCP_REFRESH_FAIL_OLD", 200),
        ("TCP_REFRESH_FAIL_OLD", 200),
    ]
    assert results[4][1] == 503
