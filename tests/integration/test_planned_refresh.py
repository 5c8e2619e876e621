"""Planned revalidations end to end: the same stale object asked for again and again.

The first request stores the object, the second is revalidated on the miss fast path (which
leaves a plan of that refresh), and from the third on the same request from the same client
is answered by repeating the plan when the origin's 304 is the planned one but for its Date.
These tests drive a real cache (memory tier only) against origins on 127.0.0.1, and tell the
paths apart by ``cache.proxy.fast.planned`` (answered from a plan), ``answered`` and
``handed_over``; the origin's counts show that no request was sent twice.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from harvest_cache.store.interface import FileBody, StoredObject
from tests.integration.test_miss_fast_path import (
    ScriptedOrigin,
    fetch,
    gated,
    lean,
    memory_cache,
    params,
    results_for,
)
from tests.integration.test_planned_miss import carried, fast_fetches_left, riders_waiting
from tests.support import (
    MakeCache,
    Origin,
    RawResponse,
    http_date,
    no_collector,
    open_proxy,
    read_response,
    request_bytes,
    stop_and_read_log,
    wait_until,
)

BODY = b"the planned body"
ETAG = '"p1"'
FIELDS = [("User-Agent", "planner/1"), ("Accept", "*/*")]


# -- helpers -----------------------------------------------------------------------------------


def planned(cache: CacheServer) -> int:
    assert cache.proxy is not None
    return cache.proxy.fast.planned


def recognised(cache: CacheServer) -> int:
    assert cache.proxy is not None
    return cache.proxy.fast.recognised


def has_plan(cache: CacheServer, url: str) -> bool:
    assert cache.proxy is not None
    return cache.proxy.fast.plans.get(url.encode("latin-1")) is not None


class Revalidated:
    """An aiohttp handler: ``BODY`` with max-age=0 and an ETag; a matching If-None-Match
    gets a 304 with the same Cache-Control (so the object stays stale) and ``extra``."""

    def __init__(self, body: bytes = BODY, etag: str = ETAG) -> None:
        self.body = body
        self.etag = etag
        self.cc = "max-age=0"
        self.extra: dict[str, str] = {}
        self.conditional = 0  # requests with If-None-Match
        self.unconditional = 0
        self.gate: asyncio.Event | None = None  # held before the next 304, if set

    async def __call__(self, request: web.Request) -> web.Response:
        if "If-None-Match" in request.headers:
            self.conditional += 1
        else:
            self.unconditional += 1
        if request.headers.get("If-None-Match") == self.etag:
            if self.gate is not None:
                async with asyncio.timeout(5):
                    await self.gate.wait()
            headers = {"ETag": self.etag, "Cache-Control": self.cc, **self.extra}
            return web.Response(status=304, headers=headers)
        return web.Response(
            body=self.body,
            headers={"ETag": self.etag, "Cache-Control": self.cc, "Content-Type": "text/plain"},
        )


async def setup_with_answer(
    make_cache: MakeCache, origin: Origin, path: str = "/planned"
) -> tuple[CacheServer, str, Revalidated, RawResponse]:
    """A cache holding the object of ``path`` with a plan of its refresh: request 1 stored it
    (a miss on a cold pool), request 2 was revalidated on the miss fast path (its response is
    returned too)."""
    cache = await memory_cache(make_cache)
    state = Revalidated()
    origin.route(path, state)
    url = origin.url(path)
    first = await fetch(cache, url, headers=FIELDS)
    assert (first.status, first.body) == (200, BODY)
    assert params(first).get("fwd") == "uri-miss"
    assert lean(cache) == (0, 0)
    second = await fetch(cache, url, headers=FIELDS)
    assert (second.status, second.body) == (200, BODY)
    assert (params(second).get("fwd"), params(second).get("fwd-status")) == ("stale", "304")
    assert lean(cache) == (1, 0)
    assert planned(cache) == 0
    assert has_plan(cache, url)
    return cache, url, state, second


async def planned_setup(
    make_cache: MakeCache, origin: Origin
) -> tuple[CacheServer, str, Revalidated]:
    cache, url, state, _ = await setup_with_answer(make_cache, origin)
    return cache, url, state


def shape(resp: RawResponse) -> list[tuple[str, str]]:
    """The response's fields with the values that change from one answer to the next blanked:
    Date, Age, and the ttl in Cache-Status."""
    out = []
    for name, value in resp.fields:
        low = name.lower()
        if low in ("date", "age"):
            value = ""
        elif low == "cache-status":
            value = "; ".join(p for p in value.split("; ") if not p.startswith("ttl="))
        out.append((name, value))
    return out


# -- answered from the plan --------------------------------------------------------------------


async def test_repeated_revalidation_is_answered_from_the_plan(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state, general = await setup_with_answer(make_cache, origin)
    assert state.conditional == 1
    for n in range(1, 6):
        resp = await fetch(cache, url, headers=FIELDS)
        assert planned(cache) == n
        assert state.conditional == 1 + n  # the origin was asked each time
        assert state.unconditional == 1
        assert (resp.status, resp.body) == (200, BODY)
        assert shape(resp) == shape(general)
        assert [name for name, _ in resp.fields] == [name for name, _ in general.fields]
        assert resp.get("Content-Length") == str(len(BODY))
        assert resp.get("Via") == "1.1 test-cache"
        assert resp.get("ETag") == ETAG
        age = resp.get("Age")
        assert age is not None
        assert 0 <= int(age) <= 2
        status = params(resp)
        assert (status.get("fwd"), status.get("fwd-status")) == ("stale", "304")
        assert -3 <= int(str(status["ttl"])) <= 0
    answered, handed_over = lean(cache)
    assert (answered, handed_over) == (1 + 5, 0)
    assert origin.hits["/planned"] == 2 + 5


async def test_planned_revalidations_are_freed_without_the_collector(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state, _ = await setup_with_answer(make_cache, origin)
    with no_collector():
        for n in range(1, 6):
            resp = await fetch(cache, url, headers=FIELDS)
            assert (resp.status, resp.body) == (200, BODY)
            assert planned(cache) == n
        assert state.conditional == 1 + 5
        assert fast_fetches_left() == 0


async def test_planned_answers_on_one_keep_alive_connection(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    reader, writer = await open_proxy(cache.address[1])
    try:
        for n in range(1, 5):
            writer.write(request_bytes("GET", url, headers=FIELDS))
            resp = await read_response(reader)
            assert (resp.status, resp.body) == (200, BODY)
            assert not resp.has("Connection")
            assert planned(cache) == n
    finally:
        writer.close()
    assert state.conditional == 1 + 4


async def test_pipelined_requests_behind_a_planned_one_are_answered_in_order(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    origin.route("/other", Revalidated(b"other body", '"o1"'))
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(
            request_bytes("GET", url, headers=FIELDS)
            + request_bytes("GET", origin.url("/other"))
            + request_bytes("GET", url, headers=FIELDS)
        )
        bodies = [(await read_response(reader)).body for _ in range(3)]
    finally:
        writer.close()
    assert bodies == [BODY, b"other body", BODY]
    assert planned(cache) == 1
    assert state.unconditional == 1  # (the stored object was never refetched)


async def test_access_log_line_of_a_planned_answer(origin: Origin, make_cache: MakeCache) -> None:
    cache, url, _ = await planned_setup(make_cache, origin)
    resp = await fetch(cache, url, headers=FIELDS)
    assert planned(cache) == 1
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS"] + ["TCP_REFRESH_UNMODIFIED"] * 2
    line = [line for line in lines if line.url == url][-1]
    assert (line.result, line.status) == ("TCP_REFRESH_UNMODIFIED", 200)
    assert line.bytes == len(resp.head) + len(resp.body)
    assert (line.method, line.url, line.client, line.user) == ("GET", url, "127.0.0.1", "-")
    assert (line.hierarchy, line.peer) == ("HIER_DIRECT", "127.0.0.1")
    assert line.content_type == "text/plain"
    assert 0 <= line.elapsed_ms < 5000
    assert abs(line.time - time.time()) < 30


async def test_date_of_the_planned_answer_is_the_304s(make_cache: MakeCache) -> None:
    """The origin's Dates are scripted: the answer carries the new 304's Date, and its Age
    and ttl follow from it, as on the general path."""
    cache = await memory_cache(make_cache)
    now = time.time()
    dates = {1: http_date(now - 1), 2: http_date(now - 3), 3: http_date(now - 7)}
    dates[4] = http_date(now - 20)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        date = dates[n]
        if n == 1:
            writer.write(
                b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "d1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%b"
                % (date.encode(), len(BODY), BODY)
            )
        else:
            writer.write(
                b'HTTP/1.1 304 Not Modified\r\nDate: %b\r\nETag: "d1"\r\n'
                b"Cache-Control: max-age=0\r\n\r\n" % date.encode()
            )

    async with ScriptedOrigin(respond) as server:
        url = server.url("/dated")
        responses = [await fetch(cache, url, headers=FIELDS) for _ in range(4)]
        requests = server.requests
    assert [r.body for r in responses] == [BODY] * 4
    assert planned(cache) == 2  # requests 3 and 4
    assert recognised(cache) == 1  # request 4: its 304 was request 3's but for the Date
    assert [dict(fields).get("If-None-Match") for _, fields in requests] == [None] + ['"d1"'] * 3
    for n, (resp, apparent) in enumerate(zip(responses, [1, 3, 7, 20], strict=True), 1):
        assert resp.get("Date") == dates[n]
        if n == 1:
            continue
        age = resp.get("Age")
        assert age is not None
        assert apparent <= int(age) <= apparent + 2, (n, age)
        assert -apparent - 3 <= int(str(params(resp)["ttl"])) <= -apparent, n
    assert shape(responses[2]) == shape(responses[1])
    assert shape(responses[3]) == shape(responses[1])


async def test_planned_304s_recognised_unparsed_and_those_that_are_not(
    make_cache: MakeCache,
) -> None:
    """From the second planned 304 on, one that arrives whole in one read and is the first's
    but for its Date is recognised unparsed. Each answer carries its own 304's Date; a 304 in
    two pieces, with another field, with another reason or with bytes after it is parsed and
    handled as before; the origin connection is reused throughout."""
    cache = await memory_cache(make_cache)
    now = time.time()
    dates = {n: http_date(now - 40 + n) for n in range(1, 14)}
    plain = b'HTTP/1.1 304 Not Modified\r\nDate: %b\r\nETag: "r1"\r\nCache-Control: max-age=0\r\n'

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        date = dates[n].encode()
        if n == 1:
            writer.write(
                b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "r1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%b"
                % (date, len(BODY), BODY)
            )
        elif n == 6:  # in two pieces
            writer.write((plain % date)[:20])
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write((plain % date)[20:] + b"\r\n")
        elif n == 8:  # another reason phrase: parsed, still the planned 304
            writer.write(plain.replace(b"Not Modified", b"Unchanged") % date + b"\r\n")
        elif n >= 10:  # another field from now on: not the planned 304 at first
            stray = b"stray" if n == 13 else b""
            writer.write(plain % date + b"X-New: 1\r\n\r\n" + stray)
        else:
            writer.write(plain % date + b"\r\n")

    async with ScriptedOrigin(respond) as server:
        url = server.url("/recognised")
        responses = [await fetch(cache, url, headers=FIELDS) for _ in range(13)]
        accepted = server.server.accepted
    assert [(r.status, r.body) for r in responses] == [(200, BODY)] * 13
    assert [r.get("Date") for r in responses] == [dates[n] for n in range(1, 14)]
    assert accepted == 1
    # Request 2 made the plan; 3 learnt its 304; 4, 5, 7, 9 were recognised (6 came in two
    # pieces, 8 had another reason); 10 was handled in full and made a new plan, which 11
    # learnt and 12 used; 13, with stray bytes after it, was parsed (the origin confirmed the
    # object, then its connection was dropped).
    assert recognised(cache) == 5
    assert planned(cache) == 10  # requests 3-9 and 11-13
    assert responses[9].get("X-New") == "1"
    assert responses[11].get("X-New") == "1"
    assert shape(responses[4]) == shape(responses[2])
    assert shape(responses[11]) == shape(responses[9])


async def test_a_recognised_304_is_answered_like_a_parsed_one(make_cache: MakeCache) -> None:
    """Two caches, the same scripted exchanges: one recognises the fourth 304, the other is
    sent it in two pieces (parsed). The client gets the same bytes from both, but for Age."""
    answers = []
    date = http_date(time.time() - 5)
    for split in (False, True):
        cache = await memory_cache(make_cache)

        async def respond(n: int, writer: asyncio.StreamWriter, split: bool = split) -> None:
            if n == 1:
                writer.write(
                    b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "q"\r\nCache-Control: max-age=60, '
                    b"no-cache\r\nContent-Length: %d\r\n\r\n%b" % (date.encode(), len(BODY), BODY)
                )
                return
            reply = b'HTTP/1.1 304 Not Modified\r\nServer: s/1\r\nDate: %b\r\nETag: "q"\r\n\r\n'
            reply %= date.encode()
            if split and n == 4:
                writer.write(reply[:-3])
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(reply[-3:])
            else:
                writer.write(reply)

        async with ScriptedOrigin(respond) as server:
            url = server.url("/same")
            responses = [await fetch(cache, url, headers=FIELDS) for _ in range(4)]
        assert recognised(cache) == (0 if split else 1)
        answers.append(responses[3])
    recognised_answer, parsed_answer = answers
    assert recognised_answer.body == parsed_answer.body == BODY
    assert shape(recognised_answer) == shape(parsed_answer)
    assert recognised_answer.get("Date") == parsed_answer.get("Date")


# -- requests that are not planned -------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        [("User-Agent", "planner/2"), ("Accept", "*/*")],
        [*FIELDS, ("X-Extra", "1")],
        [("Accept", "*/*"), ("User-Agent", "planner/1")],
        [("user-agent", "planner/1"), ("Accept", "*/*")],
        FIELDS[:1],
    ],
    ids=["other-value", "extra-field", "other-order", "other-case", "fewer-fields"],
)
async def test_request_with_other_fields_is_not_planned(
    origin: Origin, make_cache: MakeCache, fields: list[tuple[str, str]]
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    resp = await fetch(cache, url, headers=fields)
    assert (resp.status, resp.body) == (200, BODY)
    assert params(resp).get("fwd-status") == "304"
    assert planned(cache) == 0
    assert lean(cache) == (2, 0)  # the miss fast path's general handling answered it
    assert state.conditional == 2
    # It left a plan for its own fields: the same request again is planned ...
    again = await fetch(cache, url, headers=fields)
    assert (again.status, again.body) == (200, BODY)
    assert planned(cache) == 1
    # ... and the first request's fields are not, any more (one plan per target).
    first = await fetch(cache, url, headers=FIELDS)
    assert first.body == BODY
    assert planned(cache) == 1
    assert state.conditional == 4
    assert state.unconditional == 1


async def test_request_with_another_target_spelling_is_not_planned(
    origin: Origin, make_cache: MakeCache
) -> None:
    """Plans are by the raw target: the same URL spelt otherwise (the scheme in capitals)
    takes the miss fast path's general handling, for the same stored object."""
    cache, url, state = await planned_setup(make_cache, origin)
    other = url.replace("http://", "HTTP://")
    resp = await fetch(cache, other, headers=FIELDS)
    assert (resp.status, resp.body) == (200, BODY)
    assert planned(cache) == 0
    assert state.unconditional == 1  # (the same stored object)


# -- 304s and answers that are not the planned one ---------------------------------------------


@pytest.mark.parametrize("change", ["added-field", "changed-value"])
async def test_304_with_other_fields_is_not_answered_from_the_plan(
    origin: Origin, make_cache: MakeCache, change: str
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    if change == "added-field":
        state.extra = {"X-New": "new"}
    else:
        state.extra = {"Server": "origin/2"}
    resp = await fetch(cache, url, headers=FIELDS)
    assert (resp.status, resp.body) == (200, BODY)
    assert planned(cache) == 0
    assert lean(cache) == (2, 0)  # taken over by the general handling, same exchange
    assert state.conditional == 2  # (not asked twice)
    name, value = next(iter(state.extra.items()))
    assert resp.get(name) == value
    # The stored object has the new fields, and the next same 304 is the planned one.
    again = await fetch(cache, url, headers=FIELDS)
    assert again.get(name) == value
    assert again.body == BODY
    assert planned(cache) == 1
    assert state.conditional == 3
    assert shape(again) == shape(resp)


async def test_304_that_makes_the_object_fresh_is_not_planned_and_then_hits(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    state.cc = "max-age=60"
    resp = await fetch(cache, url, headers=FIELDS)
    assert (resp.status, resp.body) == (200, BODY)
    assert resp.get("Cache-Control") == "max-age=60"
    assert planned(cache) == 0
    assert 58 <= int(str(params(resp)["ttl"])) <= 60
    hit = await fetch(cache, url, headers=FIELDS)
    assert (hit.body, params(hit).get("hit")) == (BODY, True)
    assert hit.get("Cache-Control") == "max-age=60"
    assert state.conditional == 2
    assert origin.hits["/planned"] == 3


async def test_200_instead_of_304_replaces_the_object(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    state.body, state.etag = b"the new version", '"p2"'
    resp = await fetch(cache, url, headers=FIELDS)
    assert (resp.status, resp.body) == (200, b"the new version")
    assert resp.get("ETag") == '"p2"'
    status = params(resp)
    assert (status.get("fwd"), status.get("fwd-status")) == ("stale", "200")
    assert planned(cache) == 0
    assert origin.hits["/planned"] == 3  # one request each
    # Later requests get the new version: revalidated with its ETag, then planned again.
    for n in range(3):
        later = await fetch(cache, url, headers=FIELDS)
        assert (later.status, later.body) == (200, b"the new version")
        assert origin.requests[-1].headers.get("If-None-Match") == '"p2"'
        assert planned(cache) == n
    assert origin.hits["/planned"] == 6
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == [
        "TCP_MISS",
        "TCP_REFRESH_UNMODIFIED",
        "TCP_REFRESH_MODIFIED",
        "TCP_REFRESH_UNMODIFIED",
        "TCP_REFRESH_UNMODIFIED",
        "TCP_REFRESH_UNMODIFIED",
    ]


@pytest.mark.parametrize("sent", [b"", b"HTTP/1.1 304 Not"], ids=["nothing", "part-of-a-head"])
async def test_origin_closing_the_reused_connection_is_retried(
    make_cache: MakeCache, sent: bytes
) -> None:
    """The origin hangs up on the planned request (without a whole head): the general path
    asks again on a new connection, and the client gets the stored body."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        date = http_date(time.time()).encode()
        if n == 1:
            writer.write(
                b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "c1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Length: %d\r\n\r\n%b" % (date, len(BODY), BODY)
            )
        elif n == 4:
            writer.write(sent)
            await writer.drain()
            writer.close()
        else:
            writer.write(
                b'HTTP/1.1 304 Not Modified\r\nDate: %b\r\nETag: "c1"\r\n'
                b"Cache-Control: max-age=0\r\n\r\n" % date
            )

    async with ScriptedOrigin(respond) as server:
        url = server.url("/closing")
        for _ in range(3):
            assert (await fetch(cache, url, headers=FIELDS)).body == BODY
        assert planned(cache) == 1
        assert server.server.accepted == 1
        resp = await fetch(cache, url, headers=FIELDS)
        assert (resp.status, resp.body) == (200, BODY)
        assert params(resp).get("fwd-status") == "304"
        assert planned(cache) == 1
        assert lean(cache) == (2, 1)  # request 4 was handed to the general path
        assert server.server.accepted == 2
        conditional = [dict(fields).get("If-None-Match") for _, fields in server.requests]
        assert conditional == [None, '"c1"', '"c1"', '"c1"', '"c1"']
        # And the plan goes on working on the new connection.
        assert (await fetch(cache, url, headers=FIELDS)).body == BODY
        assert len(server.requests) == 6


async def test_client_closing_meanwhile_gets_the_answer_and_a_close(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    state.gate = asyncio.Event()
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", url, headers=FIELDS))
        await wait_until(lambda: state.conditional == 2)
        writer.write_eof()
        await wait_until(lambda: any(c.must_close for c in cache.connections))
        state.gate.set()
        resp = await read_response(reader)
        async with asyncio.timeout(5):
            rest = await reader.read()
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, BODY)
    assert resp.get("Connection") == "close"
    assert rest == b""
    assert planned(cache) == 0
    assert lean(cache) == (2, 0)
    assert state.conditional == 2


# -- collapsed forwarding ----------------------------------------------------------------------


async def test_clients_join_a_planned_revalidation(origin: Origin, make_cache: MakeCache) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    state.gate = asyncio.Event()
    async with asyncio.timeout(10):
        first = asyncio.create_task(fetch(cache, url, headers=FIELDS))
        await wait_until(lambda: state.conditional == 2)
        open_before = len(cache.connections)
        others = [asyncio.create_task(fetch(cache, url, headers=FIELDS)) for _ in range(3)]
        await wait_until(lambda: len(cache.connections) >= open_before + len(others))
        await asyncio.sleep(0.2)
        state.gate.set()
        responses = await asyncio.gather(first, *others)
    assert all((r.status, r.body) == (200, BODY) for r in responses)
    assert all(params(r).get("fwd-status") == "304" for r in responses)
    assert all(shape(r) == shape(responses[0]) for r in responses)
    assert state.conditional == 2  # one conditional request for all four
    assert planned(cache) == 1
    assert carried(cache) == 3  # answered with the planned answer, not the general path
    assert lean(cache) == (5, 0)
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS"] + ["TCP_REFRESH_UNMODIFIED"] * 5


async def test_clients_riding_a_planned_revalidation_that_gets_a_200_join_its_fetch(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The plan does not hold (the object changed): the waiting clients go to the general
    path, which gives them the new object from the same fetch."""
    cache, url, _ = await planned_setup(make_cache, origin)
    gate = asyncio.Event()
    before = origin.hits["/planned"]
    headers = {"ETag": '"p2"', "Cache-Control": "max-age=60"}
    origin.route("/planned", gated(b"the new body", headers, gate))
    async with asyncio.timeout(10):
        first = asyncio.create_task(fetch(cache, url, headers=FIELDS))
        await wait_until(lambda: origin.hits["/planned"] == before + 1)
        others = [asyncio.create_task(fetch(cache, url, headers=FIELDS)) for _ in range(3)]
        await wait_until(lambda: riders_waiting(cache, url) == len(others))
        gate.set()
        responses = await asyncio.gather(first, *others)
    assert [(r.status, r.body) for r in responses] == [(200, b"the new body")] * 4
    assert origin.hits["/planned"] == before + 1  # one request for all four
    assert carried(cache) == 0
    lines = await stop_and_read_log(cache)
    # (each rider joined the fetch, or came after it had stored the new object)
    results = results_for(lines, url)[-4:]
    assert "TCP_REFRESH_MODIFIED" in results
    assert set(results) <= {"TCP_REFRESH_MODIFIED", "TCP_MEM_HIT"}


async def test_silent_origin_gives_504_within_the_read_timeout(make_cache: MakeCache) -> None:
    """The planned request goes out on the connection of the planned exchange just before it
    (whose timer may still be pending): a silent origin still gives a 504 in time."""
    # (max_stale 0: no stale answer stands in for the error)
    cache = await memory_cache(make_cache, upstream={"read_timeout": 0.3}, cache={"max_stale": 0})
    done = asyncio.Event()

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        date = http_date(time.time()).encode()
        if n == 1:
            writer.write(
                b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "t1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Length: %d\r\n\r\n%b" % (date, len(BODY), BODY)
            )
        elif n == 4:
            async with asyncio.timeout(10):
                await done.wait()
            writer.close()
        else:
            writer.write(
                b'HTTP/1.1 304 Not Modified\r\nDate: %b\r\nETag: "t1"\r\n'
                b"Cache-Control: max-age=0\r\n\r\n" % date
            )

    async with ScriptedOrigin(respond) as server:
        url = server.url("/silent")
        try:
            for _ in range(3):
                assert (await fetch(cache, url, headers=FIELDS)).body == BODY
            assert planned(cache) == 1
            started = time.monotonic()
            resp = await fetch(cache, url, headers=FIELDS)
            elapsed = time.monotonic() - started
        finally:
            done.set()
        assert resp.status == 504
        assert params(resp).get("detail") == "read_timeout"
        assert 0.3 - 0.05 <= elapsed < 0.6 + 0.5
        assert lean(cache) == (2, 1)
        # The silent connection was closed: the next request opens a new one, and is answered.
        after = await fetch(cache, url, headers=FIELDS)
        assert (after.status, after.body) == (200, BODY)
        assert server.server.accepted == 2


async def test_stray_bytes_after_the_planned_304(make_cache: MakeCache) -> None:
    """The origin confirms the object and then sends bytes that cannot be parsed: the client
    gets the stored body, the connection is not reused, and the object (still stale) is
    revalidated again next time."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        date = http_date(time.time()).encode()
        if n == 1:
            writer.write(
                b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "s1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Length: %d\r\n\r\n%b" % (date, len(BODY), BODY)
            )
            return
        writer.write(
            b'HTTP/1.1 304 Not Modified\r\nDate: %b\r\nETag: "s1"\r\n'
            b"Cache-Control: max-age=0\r\n\r\n%b" % (date, b"stray" if n == 3 else b"")
        )

    async with ScriptedOrigin(respond) as server:
        url = server.url("/stray")
        responses = [await fetch(cache, url, headers=FIELDS) for _ in range(4)]
        assert [(r.status, r.body) for r in responses] == [(200, BODY)] * 4
        assert planned(cache) == 1  # request 3 (request 4 was not: a new connection)
        conditional = [dict(fields).get("If-None-Match") for _, fields in server.requests]
        assert conditional == [None, '"s1"', '"s1"', '"s1"']
        assert server.server.accepted == 2


# -- the planned request -----------------------------------------------------------------------


async def test_planned_request_carries_the_stored_validators(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The 304 of request 2 moves the stored Last-Modified (its ETag still matches): the next
    conditional requests must carry the new one, as the general path would send them (RFC
    9111 4.3.1: the Last-Modified of the stored response)."""
    cache = await memory_cache(make_cache)
    old, new = http_date(time.time() - 3600), http_date(time.time() - 60)

    async def handler(request: web.Request) -> web.Response:
        headers = {"ETag": ETAG, "Cache-Control": "max-age=0"}
        if request.headers.get("If-None-Match") == ETAG:
            return web.Response(status=304, headers={**headers, "Last-Modified": new})
        return web.Response(body=BODY, headers={**headers, "Last-Modified": old})

    origin.route("/lm", handler)
    url = origin.url("/lm")
    responses = [await fetch(cache, url, headers=FIELDS) for _ in range(4)]
    assert [r.body for r in responses] == [BODY] * 4
    assert [r.get("Last-Modified") for r in responses] == [old, new, new, new]
    assert planned(cache) == 2  # requests 3 and 4
    sent = [r.headers.get("If-Modified-Since") for r in origin.requests]
    assert sent[:2] == [None, old]
    assert sent[2:] == [new, new]


# -- shutdown ----------------------------------------------------------------------------------


async def test_shutdown_lets_an_unplanned_answer_finish(make_cache: MakeCache) -> None:
    """The cache stops while a planned request is out; the origin answers 200 (not the planned
    304), its body taking a while: the miss fast path takes the exchange over and the client
    must still get the whole body within the grace period."""
    cache = await memory_cache(make_cache)
    gate = asyncio.Event()
    done = asyncio.Event()
    new_body = b"0123456789"

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        date = http_date(time.time()).encode()
        if n == 1:
            writer.write(
                b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "s1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Length: %d\r\n\r\n%b" % (date, len(BODY), BODY)
            )
        elif n == 2:
            writer.write(
                b'HTTP/1.1 304 Not Modified\r\nDate: %b\r\nETag: "s1"\r\n'
                b"Cache-Control: max-age=0\r\n\r\n" % date
            )
        else:
            async with asyncio.timeout(5):
                await gate.wait()
            writer.write(
                b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "s2"\r\nCache-Control: max-age=0\r\n'
                b"Content-Length: %d\r\n\r\n%b" % (date, len(new_body), new_body[:5])
            )
            await writer.drain()
            await asyncio.sleep(0.3)
            if not writer.is_closing():
                writer.write(new_body[5:])
                await writer.drain()
            async with asyncio.timeout(5):
                await done.wait()

    async with ScriptedOrigin(respond) as server:
        url = server.url("/stopping")
        for _ in range(2):
            assert (await fetch(cache, url, headers=FIELDS)).body == BODY
        assert has_plan(cache, url)
        async with asyncio.timeout(10):
            reader, writer = await open_proxy(cache.address[1])
            try:
                writer.write(request_bytes("GET", url, headers=FIELDS))
                await wait_until(lambda: len(server.requests) == 3)
                stopping = asyncio.create_task(cache.stop(3.0))
                await asyncio.sleep(0.1)  # (the cache is waiting for its fetches now)
                gate.set()
                try:
                    resp = await read_response(reader)
                finally:
                    done.set()
                    await stopping
            finally:
                writer.close()
    assert (resp.status, resp.body) == (200, new_body)
    assert lean(cache) == (2, 0)


# -- with a disk tier --------------------------------------------------------------------------


async def test_planned_refresh_reaches_the_disk_tier(make_cache: MakeCache) -> None:
    """With a disk tier the refreshed head is written there too: a cache started afresh on
    the same directory finds the last planned 304's Date."""
    cache = await make_cache()
    now = time.time()
    dates = [http_date(now - 50 + n) for n in range(6)]

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        date = dates[n].encode()
        if n == 1:
            writer.write(
                b'HTTP/1.1 200 OK\r\nDate: %b\r\nETag: "k1"\r\nCache-Control: max-age=0\r\n'
                b"Content-Length: %d\r\n\r\n%b" % (date, len(BODY), BODY)
            )
        else:
            writer.write(
                b'HTTP/1.1 304 Not Modified\r\nDate: %b\r\nETag: "k1"\r\n'
                b"Cache-Control: max-age=0\r\n\r\n" % date
            )

    async with ScriptedOrigin(respond) as server:
        url = server.url("/disk")
        responses = [await fetch(cache, url, headers=FIELDS) for _ in range(5)]
    assert [r.body for r in responses] == [BODY] * 5
    assert [r.get("Date") for r in responses] == dates[1:6]
    assert planned(cache) == 3
    await cache.stop(1.0)
    again = await make_cache()
    found = await again.store.get(url)
    assert isinstance(found, StoredObject)
    assert ("Date", dates[5]) in found.head.headers
    body = found.body
    if isinstance(body, FileBody):
        body.file.close()
