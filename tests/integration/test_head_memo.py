"""Request heads answered again unparsed: a keep-alive client repeating the exact bytes of a
head that was a fast hit, or answered from a refresh plan, is answered from
``cache.proxy.heads`` (counted by its ``reused``).

Every test checks behaviour on real sockets: what the client receives, what the origin saw.
Reads that hold more or less than one head must never be remembered; if they were, a client
repeating them would get too few answers, which ``read_response``'s deadline turns into a
failure.
"""

from __future__ import annotations

import asyncio
import re

from aiohttp import web

from harvest_cache.server.app import CacheServer
from harvest_cache.server.head_memo import MAX_HEAD, HeadMemo
from tests.integration.test_miss_fast_path import params
from tests.integration.test_planned_miss import FIELDS as MISS_FIELDS
from tests.integration.test_planned_miss import planned_misses, serve
from tests.integration.test_planned_miss import planned_setup as miss_planned_setup
from tests.integration.test_planned_refresh import BODY as PLANNED_BODY
from tests.integration.test_planned_refresh import FIELDS, planned, planned_setup
from tests.support import (
    MakeCache,
    Origin,
    RawResponse,
    closed_by_peer,
    open_proxy,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
)

FRESH = {"Cache-Control": "max-age=600"}


def port(cache: CacheServer) -> int:
    return cache.address[1]


def heads(cache: CacheServer) -> HeadMemo:
    assert cache.proxy is not None
    return cache.proxy.heads


def reused(cache: CacheServer) -> int:
    return heads(cache).reused


def assert_nothing_remembered(cache: CacheServer) -> None:
    assert reused(cache) == 0
    assert len(heads(cache)) == 0
    assert heads(cache).field_blocks == 0


def comparable(resp: RawResponse) -> bytes:
    """The head with Age and the ttl left out, which change from second to second."""
    head = re.sub(rb"\r\nAge: \d+", b"", resp.head)
    return re.sub(rb"ttl=\d+", b"ttl=", head)


async def exchange(
    writer: asyncio.StreamWriter, reader: asyncio.StreamReader, data: bytes, answers: int = 1
) -> list[RawResponse]:
    writer.write(data)
    return [await read_response(reader) for _ in range(answers)]


async def test_a_repeated_head_is_answered_unparsed_and_alike(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/m", static(b"memo body", FRESH))
    head = request_bytes("GET", origin.url("/m"))
    reader, writer = await open_proxy(port(cache))
    try:
        # A miss; a memory hit on the fast path, parsed and remembered (and prepared); the
        # same twice again, unparsed.
        miss, _, fast, again = [(await exchange(writer, reader, head))[0] for _ in range(4)]
    finally:
        writer.close()
    assert reused(cache) == 2
    assert miss.body == fast.body == again.body == b"memo body"
    assert comparable(again) == comparable(fast)
    assert "hit" in (again.get("Cache-Status") or "")
    assert again.get("Age") is not None
    assert origin.hits["/m"] == 1

    # Another connection sending the same bytes is answered from the same memo.
    reader, writer = await open_proxy(port(cache))
    try:
        (other,) = await exchange(writer, reader, head)
    finally:
        writer.close()
    assert other.body == b"memo body"
    assert reused(cache) == 3


async def test_heads_answered_unparsed_are_logged_and_counted(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await make_cache()
    origin.route("/log", static(b"x" * 300, FRESH))
    get, head = request_bytes("GET", origin.url("/log")), request_bytes("HEAD", origin.url("/log"))
    reader, writer = await open_proxy(port(cache))
    try:
        for data, method in [(get, "GET")] * 4 + [(head, "HEAD")] * 3:
            writer.write(data)
            resp = await read_response(reader, method=method)
            assert resp.status == 200
            assert resp.body == (b"x" * 300 if method == "GET" else b"")
            assert resp.get("Content-Length") == "300"
    finally:
        writer.close()
    assert reused(cache) == 2 + 2  # the third and fourth GET, the second and third HEAD
    assert sum(cache.traffic.fast_hits.values()) == 2 + 3
    lines = await stop_and_read_log(cache)
    assert [(line.method, line.result, line.bytes > 300) for line in lines] == [
        ("GET", "TCP_MISS", True)
    ] + [("GET", "TCP_MEM_HIT", True)] * 3 + [("HEAD", "TCP_MEM_HIT", False)] * 3


async def test_an_object_no_longer_held_is_fetched_again(
    origin: Origin, cache: CacheServer
) -> None:
    version = {"n": 1}

    async def changing(request: web.Request) -> web.Response:
        if request.method == "POST":
            version["n"] += 1
            return web.Response(text="posted", headers={"Cache-Control": "no-store"})
        return web.Response(text=f"version {version['n']}", headers=FRESH)

    origin.route("/c", changing)
    get = request_bytes("GET", origin.url("/c"))
    reader, writer = await open_proxy(port(cache))
    try:
        bodies = [(await exchange(writer, reader, get))[0].body for _ in range(4)]
        assert reused(cache) == 2
        # An unsafe method invalidates the stored response: the same bytes now miss.
        (posted,) = await exchange(writer, reader, request_bytes("POST", origin.url("/c")))
        (after,) = await exchange(writer, reader, get)
    finally:
        writer.close()
    assert bodies == [b"version 1"] * 4
    assert posted.body == b"posted"
    assert after.body == b"version 2"
    assert reused(cache) == 2
    assert origin.hits["/c"] == 3  # GET, POST, GET


async def test_reads_holding_two_heads_are_not_remembered(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/a", static(b"first", FRESH))
    origin.route("/b", static(b"second", FRESH))
    a, b = request_bytes("GET", origin.url("/a")), request_bytes("GET", origin.url("/b"))
    revalidate = request_bytes("GET", origin.url("/b"), headers=[("Cache-Control", "no-cache")])
    reader, writer = await open_proxy(port(cache))
    try:
        for data in (a, b) * 3:  # stored, hot, remembered
            await exchange(writer, reader, data)
        before = reused(cache)
        for _ in range(3):
            answers = await exchange(writer, reader, a + b, answers=2)
            assert [r.body for r in answers] == [b"first", b"second"]
            answers = await exchange(writer, reader, a + a, answers=2)
            assert [r.body for r in answers] == [b"first", b"first"]
            # A hot head, then a request for the full handling (queued behind it).
            answers = await exchange(writer, reader, a + revalidate, answers=2)
            assert [r.body for r in answers] == [b"first", b"second"]
    finally:
        writer.close()
    assert reused(cache) == before
    # a and b, each remembered when it came alone (b answered by a's fields, then kept).
    assert len(heads(cache)) == 2
    assert heads(cache).field_blocks == 1


async def test_a_head_split_over_reads_or_followed_by_more_is_not_remembered(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/s", static(b"split", FRESH))
    origin.route("/t", static(b"tail", FRESH))
    s, t = request_bytes("GET", origin.url("/s")), request_bytes("GET", origin.url("/t"))
    reader, writer = await open_proxy(port(cache))
    try:
        await exchange(writer, reader, s)
        await exchange(writer, reader, t)
        for _ in range(3):
            # A hot head, then the start of the next one: read by the parser, both answered.
            writer.write(s + t[:10])
            await writer.drain()
            await asyncio.sleep(0.05)
            answers = await exchange(writer, reader, t[10:], answers=2)
            assert [r.body for r in answers] == [b"split", b"tail"]
            # A hot head in two pieces.
            writer.write(s[:7])
            await writer.drain()
            await asyncio.sleep(0.05)
            (resp,) = await exchange(writer, reader, s[7:])
            assert resp.body == b"split"
    finally:
        writer.close()
    assert_nothing_remembered(cache)


async def test_an_http10_head_answered_unparsed_still_closes(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/old", static(b"old client", FRESH))
    head = request_bytes("GET", origin.url("/old"), version="1.0")
    for _ in range(4):
        reader, writer = await open_proxy(port(cache))
        try:
            (resp,) = await exchange(writer, reader, head)
            assert resp.body == b"old client"
            assert resp.get("Connection") == "close"
            assert await closed_by_peer(reader)
        finally:
            writer.close()
    assert reused(cache) == 2

    keep = request_bytes(
        "GET", origin.url("/old"), version="1.0", headers=[("Connection", "keep-alive")]
    )
    reader, writer = await open_proxy(port(cache))
    try:
        for _ in range(3):
            (resp,) = await exchange(writer, reader, keep)
            assert resp.get("Connection") == "keep-alive"
            assert resp.body == b"old client"
    finally:
        writer.close()
    assert reused(cache) == 2 + 2


async def test_long_heads_and_slow_requests_are_always_parsed(
    origin: Origin, cache: CacheServer
) -> None:
    origin.route("/long", static(b"long", FRESH))
    long = request_bytes("GET", origin.url("/long"), headers=[("X-Pad", "p" * MAX_HEAD)])
    conditional = request_bytes(
        "GET", origin.url("/long"), headers=[("Cache-Control", "max-age=600")]
    )
    reader, writer = await open_proxy(port(cache))
    try:
        for data in [long] * 4 + [conditional] * 3:
            (resp,) = await exchange(writer, reader, data)
            assert resp.body == b"long"
    finally:
        writer.close()
    assert_nothing_remembered(cache)
    assert origin.hits["/long"] == 1


async def test_an_upgrade_request_is_not_remembered(origin: Origin, cache: CacheServer) -> None:
    origin.route("/up", static(b"no upgrade", FRESH))
    plain = request_bytes("GET", origin.url("/up"))
    upgrade = request_bytes(
        "GET", origin.url("/up"), headers=[("Connection", "upgrade"), ("Upgrade", "h2c")]
    )
    reader, writer = await open_proxy(port(cache))
    try:
        for _ in range(3):
            await exchange(writer, reader, plain)
        for _ in range(3):
            (resp,) = await exchange(writer, reader, upgrade)
            assert resp.status == 200
            assert resp.body == b"no upgrade"
        (resp,) = await exchange(writer, reader, plain)
        assert resp.body == b"no upgrade"
    finally:
        writer.close()
    assert len(heads(cache)) == 1  # the plain head only
    assert reused(cache) == 2  # the third plain GET and the last


# -- heads answered from a refresh plan ---------------------------------------------------------


async def test_a_repeated_planned_head_is_answered_unparsed(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    head = request_bytes("GET", url, headers=FIELDS)
    conditional, planned_before = state.conditional, planned(cache)
    reader, writer = await open_proxy(port(cache))
    try:
        answers = [(await exchange(writer, reader, head))[0] for _ in range(4)]
    finally:
        writer.close()
    assert reused(cache) == 3  # the first was parsed, answered from the plan and remembered
    assert planned(cache) == planned_before + 4
    assert state.conditional == conditional + 4  # each one revalidated at the origin
    for resp in answers:
        assert (resp.status, resp.body) == (200, PLANNED_BODY)
        assert (params(resp).get("fwd"), params(resp).get("fwd-status")) == ("stale", "304")
    assert len({comparable(resp) for resp in answers}) == 1


async def test_a_remembered_planned_head_whose_object_changed_is_answered_in_full(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, state = await planned_setup(make_cache, origin)
    head = request_bytes("GET", url, headers=FIELDS)
    reader, writer = await open_proxy(port(cache))
    try:
        for _ in range(2):
            (resp,) = await exchange(writer, reader, head)
            assert resp.body == PLANNED_BODY
        assert reused(cache) == 1
        # The origin changes the object: its 200 is not the planned 304.
        state.body, state.etag = b"a new body", '"p2"'
        for _ in range(3):
            (resp,) = await exchange(writer, reader, head)
            assert (resp.status, resp.body) == (200, b"a new body")
    finally:
        writer.close()
    assert state.unconditional == 1
    # The memo still finds the head and the plan decides: the first request after the change
    # is sent from the old plan and its 200 handled in full; the next finds no plan that
    # applies (parsed, revalidated in full, planned again); the last is planned.
    assert reused(cache) == 3


async def test_a_planned_head_followed_by_another_is_not_remembered(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, url, _ = await planned_setup(make_cache, origin)
    origin.route("/other", static(b"other", FRESH))
    head = request_bytes("GET", url, headers=FIELDS)
    other = request_bytes("GET", origin.url("/other"))
    reader, writer = await open_proxy(port(cache))
    try:
        for _ in range(3):
            answers = await exchange(writer, reader, head + other, answers=2)
            assert [r.body for r in answers] == [PLANNED_BODY, b"other"]
    finally:
        writer.close()
    assert_nothing_remembered(cache)


# -- heads answered from a miss plan ------------------------------------------------------------


async def test_planned_misses_are_answered_unparsed_by_their_fields(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A miss names a new URL: its head is not remembered (each would only push others
    out), but the fields after its request line are, and the next miss asked with the
    same fields is answered without parsing, alike."""
    cache, objects, _, _ = await miss_planned_setup(make_cache, origin)
    paths = [f"/m/{i}" for i in range(2, 12)]
    serve(origin, objects, *paths)
    before = planned_misses(cache)
    reader, writer = await open_proxy(port(cache))
    try:
        for path in paths:
            head = request_bytes("GET", origin.url(path), headers=MISS_FIELDS)
            (resp,) = await exchange(writer, reader, head)
            assert resp.status == 200
            assert resp.body == objects.body(path)
            assert resp.get("Content-Length") == str(len(objects.body(path)))
        # Other fields: parsed, and answered in full.
        other = request_bytes("GET", origin.url("/m/12"), headers=[*MISS_FIELDS, ("X-B", "1")])
        serve(origin, objects, "/m/12")
        (resp,) = await exchange(writer, reader, other)
        assert resp.body == objects.body("/m/12")
    finally:
        writer.close()
    assert planned_misses(cache) - before == len(paths)
    assert len(heads(cache)) == 0
    assert heads(cache).field_blocks == 1
    assert reused(cache) == len(paths) - 1  # all but the first
    assert all(origin.hits[path] == 1 for path in paths)


async def test_a_long_target_with_known_fields_is_still_refused(
    origin: Origin, make_cache: MakeCache
) -> None:
    """Known fields do not skip the request line's limit: a target over it gets 414, though
    a miss plan would have answered it."""
    cache, objects, _, _ = await miss_planned_setup(
        make_cache, origin, server={"max_request_line": 300}
    )
    fits, over = "/m/" + "p" * (300 - len(origin.url("/m/"))), "/m/" + "q" * 300
    serve(origin, objects, "/m/2", fits, over)
    reader, writer = await open_proxy(port(cache))
    try:
        for path in ("/m/2", fits):  # the fields are learnt; the next miss takes them
            (resp,) = await exchange(
                writer, reader, request_bytes("GET", origin.url(path), headers=MISS_FIELDS)
            )
            assert resp.body == objects.body(path)
        assert (heads(cache).field_blocks, reused(cache)) == (1, 1)
        (resp,) = await exchange(
            writer, reader, request_bytes("GET", origin.url(over), headers=MISS_FIELDS)
        )
        assert resp.status == 414
    finally:
        writer.close()
    assert over not in origin.hits
