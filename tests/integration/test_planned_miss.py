"""Planned misses end to end: new URLs of one origin asked for by one client in one way.

The first miss to an origin takes the general path (the pool has no idle connection yet), the
next is answered on the miss fast path in full, which leaves a plan of that miss for the
client, the origin and the request's fields; from then on a miss for a new URL asked the same
way is sent upstream as planned, and answered from the plan when the response has the planned
shape (the same status and fields, but for the values of Date, Last-Modified, ETag and
Content-Length). These tests drive a real cache (memory tier only) against origins on
127.0.0.1, and tell the paths apart by ``cache.proxy.fast.planned_misses`` (answered from a
miss plan), ``answered`` and ``handed_over``; the origin's counts show that no request was
sent twice, and the stored objects (hits afterwards) that the varying values were filled in
from each response.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import re
import socket
import struct
import time

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from harvest_cache.server.fast_fetch import FastFetch
from tests.integration.test_miss_fast_path import (
    ScriptedOrigin,
    fetch,
    gated,
    lean,
    memory_cache,
    params,
    pattern,
    read_until_closed,
    results_for,
)
from tests.support import (
    MakeCache,
    Origin,
    RawResponse,
    http_date,
    no_collector,
    open_proxy,
    read_head,
    read_response,
    request_bytes,
    stop_and_read_log,
    wait_until,
)

FIELDS = [("User-Agent", "miss-planner/1"), ("Accept", "*/*")]
# The response fields whose values a planned answer takes from its own response.
VARYING = ("date", "last-modified", "etag", "content-length")


# -- helpers -----------------------------------------------------------------------------------


def planned_misses(cache: CacheServer) -> int:
    assert cache.proxy is not None
    return cache.proxy.fast.planned_misses


def carried(cache: CacheServer) -> int:
    assert cache.proxy is not None
    return cache.proxy.fast.carried


def riders_waiting(cache: CacheServer, url: str) -> int:
    """Clients waiting for the answer of the planned fetch of ``url`` in flight."""
    assert cache.proxy is not None
    holder = cache.proxy.fast.fetcher.holder(url)
    return len(getattr(holder, "_riders", None) or ())


def miss_plans(cache: CacheServer) -> int:
    """How many miss plans the cache holds."""
    assert cache.proxy is not None
    return len(cache.proxy.fast.miss_plans)


def fast_fetches_left() -> int:
    """Fast fetches still in memory: with none running, those only the collector would free
    (each a reference cycle)."""
    return sum(isinstance(o, FastFetch) for o in gc.get_objects())


def body_of(path: str) -> bytes:
    """The body ``Objects`` serves for ``path``: its own, of a length of its own."""
    return f"the object at {path};".encode() * (1 + sum(path.encode()) % 5)


class Objects:
    """An aiohttp handler for any path: each response has its own body, ETag, Last-Modified
    and Date (each response a Date of its own), all other fields the same. ``extra`` (fields
    added or replaced, in place), ``dropped``, ``status`` and ``sizes`` change one path's
    response; an event in ``gates`` holds the answer for its path until it is set."""

    def __init__(self) -> None:
        self.base = time.time()
        self.served = 0
        self.sent: dict[str, dict[str, str]] = {}  # the varying values sent last, by path
        self.extra: dict[str, dict[str, str]] = {}
        self.dropped: dict[str, set[str]] = {}
        self.status: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.gates: dict[str, asyncio.Event] = {}

    def body(self, path: str) -> bytes:
        size = self.sizes.get(path)
        return body_of(path) if size is None else pattern(size, path)

    async def __call__(self, request: web.Request) -> web.Response:
        path = request.path
        gate = self.gates.get(path)
        if gate is not None:
            async with asyncio.timeout(5):
                await gate.wait()
        n = self.served
        self.served += 1
        tag = hashlib.sha256(path.encode()).hexdigest()[:10]
        headers = {
            "Date": http_date(self.base - n),
            "Cache-Control": "max-age=3600",
            "Last-Modified": http_date(self.base - 86400 - 3600 * n),
            "Content-Type": "text/plain",
            "ETag": f'"{tag}-{n}"',
            "X-Static": "same for all",
            **self.extra.get(path, {}),
        }
        for name in self.dropped.get(path, set()):
            del headers[name]
        body = self.body(path)
        self.sent[path] = {
            **{k: v for k, v in headers.items() if k.lower() in VARYING},
            "Content-Length": str(len(body)),
        }
        return web.Response(status=self.status.get(path, 200), body=body, headers=headers)


def serve(origin: Origin, objects: Objects, *paths: str) -> None:
    for path in paths:
        origin.route(path, objects)


async def planned_setup(
    make_cache: MakeCache, origin: Origin, **sections: dict[str, object]
) -> tuple[CacheServer, Objects, RawResponse, RawResponse]:
    """A cache holding a miss plan for ``FIELDS`` to ``origin``: /m/0 was a miss on a cold
    pool (the general path), /m/1 a miss answered on the fast path in full, which made the
    plan (their responses are returned too, in that order)."""
    cache = await memory_cache(make_cache, **sections)
    objects = Objects()
    serve(origin, objects, "/m/0", "/m/1")
    first = await fetch(cache, origin.url("/m/0"), headers=FIELDS)
    assert (first.status, first.body) == (200, body_of("/m/0"))
    assert lean(cache) == (0, 0)
    second = await fetch(cache, origin.url("/m/1"), headers=FIELDS)
    assert (second.status, second.body) == (200, body_of("/m/1"))
    assert lean(cache) == (1, 0)
    assert planned_misses(cache) == 0
    assert miss_plans(cache) == 1
    return cache, objects, first, second


def check_answer(
    resp: RawResponse, objects: Objects, path: str, status: int = 200, *, joined: bool = False
) -> None:
    """``resp`` is the origin's last response for ``path``, forwarded as a stored miss (by
    the fetch, or to a client that ``joined`` it)."""
    assert (resp.status, resp.body) == (status, objects.body(path))
    for name, value in objects.sent[path].items():
        assert resp.get(name) == value, (path, name)
    assert resp.get("X-Static") == "same for all"
    assert resp.get("Via") == "1.1 test-cache"
    found = params(resp)
    assert (found.get("fwd"), found.get("fwd-status")) == ("uri-miss", str(status))
    assert found.get("stored") is (None if joined else True)
    assert found.get("collapsed") is (True if joined else None)
    assert "hit" not in found


def with_values(resp: RawResponse, values: dict[str, str]) -> bytes:
    """``resp``'s head with the values of the varying fields replaced by ``values``."""
    lowered = {name.lower(): value for name, value in values.items()}
    lines = resp.head[:-4].decode("latin-1").split("\r\n")
    out = [lines[0]]
    for line in lines[1:]:
        name, _, _ = line.partition(":")
        low = name.strip().lower()
        out.append(f"{name}: {lowered[low]}" if low in VARYING else line)
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


def last_path(server: ScriptedOrigin) -> str:
    """The path of the request a ScriptedOrigin is answering."""
    return server.requests[-1][0].split()[1]


def scripted(path: str, n: int, *, length: int | None = None, body: bytes | None = None) -> bytes:
    """A raw response of one shape for the ScriptedOrigin tests: Date and ETag of request
    ``n``, the body naming ``path`` (``length`` announces another length than the body's)."""
    data = b"scripted " + path.encode() if body is None else body
    date = http_date(time.time() - n).encode()
    return (
        b"HTTP/1.1 200 OK\r\nDate: %b\r\nCache-Control: max-age=3600\r\n"
        b'ETag: "s%d"\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%b'
        % (date, n, len(data) if length is None else length, data)
    )


# -- answered from the plan --------------------------------------------------------------------


async def test_new_urls_are_answered_from_the_plan(origin: Origin, make_cache: MakeCache) -> None:
    cache, objects, general, learnt = await planned_setup(make_cache, origin)
    check_answer(general, objects, "/m/0")
    check_answer(learnt, objects, "/m/1")
    paths = [f"/m/{i}" for i in range(10)]
    serve(origin, objects, *paths)
    for n, path in enumerate(paths[2:], 1):
        resp = await fetch(cache, origin.url(path), headers=FIELDS)
        assert planned_misses(cache) == n  # one more for each
        check_answer(resp, objects, path)
    assert lean(cache) == (1 + 8, 0)  # every planned answer counts as answered
    assert all(origin.hits[path] == 1 for path in paths)
    assert miss_plans(cache) == 1
    # Each was stored with the values of its own response: hits now, the origin not asked.
    for path in paths:
        for _ in range(2):  # (the second from the hit fast path)
            hit = await fetch(cache, origin.url(path), headers=FIELDS)
            assert (hit.status, hit.body) == (200, objects.body(path))
            assert params(hit).get("hit") is True
            for name, value in objects.sent[path].items():
                assert hit.get(name) == value, (path, name)
            assert hit.get("X-Static") == "same for all"
    assert all(origin.hits[path] == 1 for path in paths)
    assert planned_misses(cache) == 8
    lines = await stop_and_read_log(cache)
    for path in paths:
        assert results_for(lines, origin.url(path)) == ["TCP_MISS"] + ["TCP_MEM_HIT"] * 2


async def test_fast_fetches_are_freed_without_the_collector(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A fast fetch, planned or worked out in full, is freed as soon as it ends: one the
    collector had to find would cost every miss its share of collections."""
    cache = await memory_cache(make_cache)
    objects = Objects()
    paths = [f"/m/{i}" for i in range(10)]
    serve(origin, objects, *paths)
    with no_collector():
        for path in paths:
            resp = await fetch(cache, origin.url(path), headers=FIELDS)
            check_answer(resp, objects, path)
        assert lean(cache) == (1 + 8, 0)  # one worked out in full, then from the plan
        assert planned_misses(cache) == 8
        assert fast_fetches_left() == 0


async def test_planned_answer_is_the_fast_path_answer_field_for_field(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The planned answer's head is the one the fast path made for the response that made
    the plan, byte for byte, with this response's Date, Last-Modified, ETag and length."""
    cache, objects, _, learnt = await planned_setup(make_cache, origin)
    serve(origin, objects, "/m/2", "/m/3")
    for n, path in enumerate(["/m/2", "/m/3"], 1):
        resp = await fetch(cache, origin.url(path), headers=FIELDS)
        assert planned_misses(cache) == n
        assert resp.body == objects.body(path)
        assert [name for name, _ in resp.fields] == [name for name, _ in learnt.fields]
        assert resp.head == with_values(learnt, objects.sent[path])
        assert resp.get("Content-Length") == str(len(objects.body(path)))
        assert resp.get("Content-Length") != learnt.get("Content-Length")
        assert resp.get("ETag") != learnt.get("ETag")
        assert resp.get("Date") != learnt.get("Date")


async def test_planned_answer_of_a_response_with_hop_by_hop_fields(
    make_cache: MakeCache,
) -> None:
    """Hop-by-hop fields (Connection: keep-alive, Keep-Alive), repeated fields, an origin Age,
    an upstream Cache-Status and field names in lower case: the planned answer is still the
    fast path's, byte for byte but for the varying values, and the stored object the same
    (its hits alike)."""
    cache = await memory_cache(make_cache)
    dates = {n: http_date(time.time() - 10 * n) for n in range(1, 5)}
    lms = {n: http_date(time.time() - 86400 - n) for n in range(1, 5)}

    def body(n: int) -> bytes:
        return b"rich %d" % n * n

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nconnection: keep-alive\r\nDate: %b\r\n"
            b"Cache-Control: public\r\nCache-Control: max-age=3600\r\nKeep-Alive: timeout=30\r\n"
            b"last-modified: %b\r\nAge: 3\r\nSet-Cookie: a=b\r\nSet-Cookie: c=d\r\n"
            b"Cache-Status: origin-cdn; fwd=miss\r\n"
            b'etag: W/"r%d"\r\nContent-Length: %d\r\nContent-Type: text/html\r\n\r\n%b'
            % (dates[n].encode(), lms[n].encode(), n, len(body(n)), body(n))
        )

    async with ScriptedOrigin(respond) as server:
        responses = [
            await fetch(cache, server.url(f"/rich/{n}"), headers=FIELDS) for n in range(1, 5)
        ]
        assert [r.body for r in responses] == [body(n) for n in range(1, 5)]
        assert lean(cache) == (3, 0)
        assert planned_misses(cache) == 2
        learnt = responses[1]
        for n in (3, 4):
            resp = responses[n - 1]
            values = {
                "Date": dates[n],
                "Last-Modified": lms[n],
                "ETag": f'W/"r{n}"',
                "Content-Length": str(len(body(n))),
            }
            assert resp.head == with_values(learnt, values)
        assert not learnt.has("Keep-Alive")
        assert not learnt.has("Connection")
        assert learnt.get("Set-Cookie") == "a=b, c=d"
        assert str(learnt.get("Cache-Status")).startswith("origin-cdn; fwd=miss, test-cache;")
        hits = [await fetch(cache, server.url(f"/rich/{n}"), headers=FIELDS) for n in (2, 3)]
        assert len(server.requests) == 4

    def comparable(resp: RawResponse) -> list[tuple[str, str]]:
        # (the ttl in Cache-Status follows from the Date, as the Age does)
        return [
            (n, v if n.lower() != "cache-status" else v.split("; ttl=")[0])
            for n, v in resp.fields
            if n.lower() not in (*VARYING, "age")
        ]

    assert all(params(hit).get("hit") is True for hit in hits)
    assert comparable(hits[1]) == comparable(hits[0])
    assert hits[1].get("ETag") == 'W/"r3"'
    assert hits[1].get("Last-Modified") == lms[3]
    assert hits[1].get("Date") == dates[3]


async def test_planned_answer_matches_the_general_path_answer(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The same response through the general path (/m/0), the fast path (/m/1) and a plan:
    the same fields but for the varying ones, the same Cache-Status."""
    cache, objects, general, learnt = await planned_setup(make_cache, origin)
    serve(origin, objects, "/m/2")
    resp = await fetch(cache, origin.url("/m/2"), headers=FIELDS)
    assert planned_misses(cache) == 1

    def comparable(resp: RawResponse) -> list[tuple[str, str]]:
        return sorted(
            (name.lower(), value)
            for name, value in resp.fields
            if name.lower() not in (*VARYING, "age", "cache-status")
        )

    assert comparable(resp) == comparable(learnt) == comparable(general)
    assert params(resp) == params(learnt) == params(general)


async def test_access_log_line_of_a_planned_miss(origin: Origin, make_cache: MakeCache) -> None:
    cache, objects, _, learnt = await planned_setup(make_cache, origin)
    serve(origin, objects, "/m/2")
    url = origin.url("/m/2")
    resp = await fetch(cache, url, headers=FIELDS)
    assert planned_misses(cache) == 1
    lines = await stop_and_read_log(cache)
    assert results_for(lines, url) == ["TCP_MISS"]
    line = next(line for line in lines if line.url == url)
    assert (line.result, line.status) == ("TCP_MISS", 200)
    assert line.bytes == len(resp.head) + len(resp.body)
    assert (line.method, line.url, line.client, line.user) == ("GET", url, "127.0.0.1", "-")
    assert (line.hierarchy, line.peer) == ("HIER_DIRECT", "127.0.0.1")
    assert line.content_type == "text/plain"
    assert 0 <= line.elapsed_ms < 5000
    assert abs(line.time - time.time()) < 30
    # As the fast path's line for the miss that made the plan.
    made = next(line for line in lines if line.url == origin.url("/m/1"))
    assert made.bytes == len(learnt.head) + len(learnt.body)
    assert (made.result, made.status, made.hierarchy, made.content_type) == (
        line.result,
        line.status,
        line.hierarchy,
        line.content_type,
    )


async def test_client_leaving_early_does_not_stop_a_planned_fetch(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The client resets its connection before the origin answers: the object is still
    fetched from the plan, stored and logged."""
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/left"
    serve(origin, objects, path)
    gate = objects.gates[path] = asyncio.Event()
    open_before = len(cache.connections)
    _, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url(path), headers=FIELDS))
        await wait_until(lambda: origin.hits[path] == 1)
        # (a reset, not a half-close: the cache would answer a half-closed client, and close)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        writer.close()
    await wait_until(lambda: len(cache.connections) == open_before)
    gate.set()
    await wait_until(lambda: planned_misses(cache) == 1)
    hit = await fetch(cache, origin.url(path), headers=FIELDS)
    assert (hit.body, params(hit).get("hit")) == (objects.body(path), True)
    assert hit.get("ETag") == objects.sent[path]["ETag"]
    assert origin.hits[path] == 1
    assert lean(cache) == (2, 0)
    lines = await stop_and_read_log(cache)
    assert results_for(lines, origin.url(path)) == ["TCP_MISS", "TCP_MEM_HIT"]


async def test_interim_response_before_a_planned_answer_is_relayed(
    make_cache: MakeCache,
) -> None:
    """A 103 before the planned response goes to the client first, as the fast path relays
    it; the final answer is still from the plan."""
    cache = await memory_cache(make_cache)
    hints = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        path = last_path(server)
        writer.write((hints if "hinted" in path else b"") + scripted(path, n))

    async with ScriptedOrigin(respond) as server:
        for i in range(2):
            assert (await fetch(cache, server.url(f"/s/{i}"), headers=FIELDS)).status == 200
        heads = []
        for n, fields in enumerate([[*FIELDS, ("X-A", "1")], FIELDS]):
            reader, writer = await open_proxy(cache.address[1])
            try:
                writer.write(request_bytes("GET", server.url(f"/s/hinted{n}"), headers=fields))
                async with asyncio.timeout(5):
                    status, head, _ = await read_head(reader)
                assert status == 103
                heads.append(head)
                resp = await read_response(reader)
            finally:
                writer.close()
            assert (resp.status, resp.body) == (200, b"scripted /s/hinted%d" % n)
            assert planned_misses(cache) == n  # (the first asked another way: in full)
    assert heads[1] == heads[0]
    assert b"Link: </style.css>; rel=preload\r\n" in heads[0]


# -- responses that are not the planned one ----------------------------------------------------


@pytest.mark.parametrize("change", ["no-store", "changed-value", "added-field", "dropped-etag"])
async def test_response_of_another_shape_is_worked_out_in_full(
    origin: Origin, make_cache: MakeCache, change: str
) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/other"
    if change == "no-store":
        objects.extra[path] = {"Cache-Control": "no-store"}
    elif change == "changed-value":
        objects.extra[path] = {"X-Static": "not the same"}
    elif change == "added-field":
        objects.extra[path] = {"X-Extra": "new"}
    else:
        objects.dropped[path] = {"ETag"}
    serve(origin, objects, path, "/m/2")
    url = origin.url(path)
    resp = await fetch(cache, url, headers=FIELDS)
    assert (resp.status, resp.body) == (200, objects.body(path))
    assert planned_misses(cache) == 0
    assert lean(cache) == (2, 0)  # the fast path's general handling answered it, same exchange
    assert origin.hits[path] == 1
    found = params(resp)
    assert found.get("fwd") == "uri-miss"
    again = await fetch(cache, url, headers=FIELDS)
    assert again.body == objects.body(path)
    if change == "no-store":
        assert resp.get("Cache-Control") == "no-store"
        assert "stored" not in found
        assert "hit" not in params(again)
        assert origin.hits[path] == 2  # not stored: asked again (and not from the plan)
        assert planned_misses(cache) == 0
        assert lean(cache) == (3, 0)
    else:
        assert found.get("stored") is True
        assert params(again).get("hit") is True
        assert origin.hits[path] == 1
        if change == "changed-value":
            assert (resp.get("X-Static"), again.get("X-Static")) == ("not the same",) * 2
        elif change == "added-field":
            assert (resp.get("X-Extra"), again.get("X-Extra")) == ("new", "new")
        else:
            assert not resp.has("ETag")
            assert not again.has("ETag")
    # The plan stands: the next new URL asked the same way is answered from it.
    check_answer(await fetch(cache, origin.url("/m/2"), headers=FIELDS), objects, "/m/2")
    assert planned_misses(cache) == 1


async def test_other_status_with_the_same_fields_is_not_from_the_plan(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/missing"
    objects.status[path] = 404
    serve(origin, objects, path)
    resp = await fetch(cache, origin.url(path), headers=FIELDS)
    check_answer(resp, objects, path, status=404)
    assert planned_misses(cache) == 0
    assert lean(cache) == (2, 0)
    # (a 404 with max-age is stored like any response)
    again = await fetch(cache, origin.url(path), headers=FIELDS)
    assert (again.status, again.body) == (404, objects.body(path))
    assert params(again).get("hit") is True
    assert origin.hits[path] == 1


async def test_response_with_another_reason_phrase_keeps_it(make_cache: MakeCache) -> None:
    """The fast path forwards (and stores) the origin's reason phrase; a response of the
    planned shape but for its reason phrase must be answered with its own as well, not with
    that of the response that made the plan."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        path = last_path(server)
        raw = scripted(path, n)
        if "fine" in path:
            raw = raw.replace(b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 Fine\r\n", 1)
        writer.write(raw)

    async with ScriptedOrigin(respond) as server:
        for i in range(2):
            assert (await fetch(cache, server.url(f"/s/{i}"), headers=FIELDS)).status == 200
        assert miss_plans(cache) == 1
        # Asked another way (no plan applies), the fast path works it out in full ...
        unplanned = await fetch(cache, server.url("/s/fine-1"), headers=[*FIELDS, ("X-A", "1")])
        assert planned_misses(cache) == 0
        assert unplanned.head.startswith(b"HTTP/1.1 200 Fine\r\n")
        # ... and the same response to a request a plan applies to must say the same
        # (whether answered from the plan or handed to the general handling).
        planned = await fetch(cache, server.url("/s/fine-2"), headers=FIELDS)
        assert planned.body == b"scripted /s/fine-2"
        assert planned.head.split(b"\r\n")[0] == b"HTTP/1.1 200 Fine"
        hit = await fetch(cache, server.url("/s/fine-2"), headers=FIELDS)
        assert params(hit).get("hit") is True
        assert hit.head.split(b"\r\n")[0] == b"HTTP/1.1 200 Fine"


async def test_response_with_a_malformed_etag_is_decided_as_in_full(
    make_cache: MakeCache,
) -> None:
    """max-age=0 with an ETag (and no Last-Modified) is stored: it can be revalidated. With an
    ETag that cannot be parsed the fast path does not store it (no validator: every use
    would fetch it whole, RFC 9111 4.3.1). Whether it is stored turns on the ETag's value, so
    such misses are never planned, and the malformed one is not stored."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        path = last_path(server)
        etag = b"not-an-etag" if "bad" in path else b'"v%d"' % n
        date = http_date(time.time()).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nDate: %b\r\nCache-Control: max-age=0\r\nETag: %b\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (date, etag, len(path), path.encode())
        )

    async with ScriptedOrigin(respond) as server:
        for i in range(2):
            first = await fetch(cache, server.url(f"/v/{i}"), headers=FIELDS)
            assert params(first).get("stored") is True
        assert miss_plans(cache) == 0
        unplanned = await fetch(cache, server.url("/v/bad-1"), headers=[*FIELDS, ("X-A", "1")])
        assert planned_misses(cache) == 0
        assert unplanned.body == b"/v/bad-1"
        assert "stored" not in params(unplanned)
        planned = await fetch(cache, server.url("/v/bad-2"), headers=FIELDS)
        assert planned_misses(cache) == 0
        assert planned.body == b"/v/bad-2"
        assert "stored" not in params(planned), planned.get("Cache-Status")
        again = await fetch(cache, server.url("/v/bad-2"), headers=FIELDS)
        assert params(again).get("fwd") == "uri-miss"  # (nothing stored to revalidate)


@pytest.mark.parametrize(
    ("size", "from_plan"),
    [(0, True), (64 * 1024, True), (64 * 1024 + 1, False), (300 * 1024, False)],
    ids=["empty", "64KiB", "64KiB+1", "300KiB"],
)
async def test_body_size_limit_of_a_planned_answer(
    origin: Origin, make_cache: MakeCache, size: int, from_plan: bool
) -> None:
    """Bodies up to 64 KiB in the planned shape are answered from the plan; a larger one is
    handed to the general path with the same exchange, the client gets all of it and it is
    stored (under the memory tier's limit)."""
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/big"
    objects.sizes[path] = size
    serve(origin, objects, path)
    resp = await fetch(cache, origin.url(path), headers=FIELDS)
    assert resp.status == 200
    assert len(resp.body) == size
    assert hashlib.sha256(resp.body).digest() == hashlib.sha256(objects.body(path)).digest()
    assert resp.get("Content-Length") == str(size)
    assert resp.get("ETag") == objects.sent[path]["ETag"]
    assert params(resp).get("stored") is True
    if from_plan:
        assert planned_misses(cache) == 1
        assert lean(cache) == (2, 0)
    else:
        assert planned_misses(cache) == 0
        assert lean(cache) == (1, 1)
    again = await fetch(cache, origin.url(path), headers=FIELDS)
    assert again.body == objects.body(path)
    assert params(again).get("hit") is True
    assert origin.hits[path] == 1


async def test_body_over_the_memory_tier_limit_is_answered_not_stored(
    origin: Origin, make_cache: MakeCache
) -> None:
    """Under 64 KiB but over memory_max_object_kb: not from the plan (it would store it), the
    fast path's general handling answers without storing it."""
    cache, objects, _, _ = await planned_setup(
        make_cache, origin, cache={"memory_max_object_kb": 16}
    )
    path = "/m/32k"
    objects.sizes[path] = 32 * 1024
    serve(origin, objects, path)
    resp = await fetch(cache, origin.url(path), headers=FIELDS)
    assert (resp.status, resp.body) == (200, objects.body(path))
    assert "stored" not in params(resp)
    assert planned_misses(cache) == 0
    assert lean(cache) == (2, 0)
    again = await fetch(cache, origin.url(path), headers=FIELDS)
    assert again.body == objects.body(path)
    assert origin.hits[path] == 2
    assert planned_misses(cache) == 0


@pytest.mark.parametrize("sent", [b"", b"HTTP/1.1 200 O"], ids=["nothing", "part-of-a-head"])
async def test_origin_closing_the_reused_connection_is_retried(
    make_cache: MakeCache, sent: bytes
) -> None:
    """The origin hangs up on a planned request without a whole head: it is asked again on a
    new connection (by the general path) and answered; the plan goes on working there."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 4:
            writer.write(sent)
            await writer.drain()
            writer.close()
            return
        path = last_path(server)
        writer.write(scripted(path, n))

    async with ScriptedOrigin(respond) as server:
        for i in range(3):
            resp = await fetch(cache, server.url(f"/s/{i}"), headers=FIELDS)
            assert resp.body == b"scripted /s/%d" % i
        assert planned_misses(cache) == 1
        assert server.server.accepted == 1
        resp = await fetch(cache, server.url("/s/3"), headers=FIELDS)
        assert (resp.status, resp.body) == (200, b"scripted /s/3")
        assert resp.get("ETag") == '"s5"'
        assert planned_misses(cache) == 1
        assert lean(cache) == (2, 1)  # request 4 was handed to the general path
        assert server.server.accepted == 2
        resp = await fetch(cache, server.url("/s/4"), headers=FIELDS)
        assert resp.body == b"scripted /s/4"
        assert planned_misses(cache) == 2
        assert server.paths() == ["/s/0", "/s/1", "/s/2", "/s/3", "/s/3", "/s/4"]
        hit = await fetch(cache, server.url("/s/3"), headers=FIELDS)
        assert (hit.body, params(hit).get("hit")) == (b"scripted /s/3", True)


async def test_origin_resetting_mid_body_closes_the_client_and_stores_nothing(
    make_cache: MakeCache,
) -> None:
    """The planned head is read, then the origin closes 10 bytes into a body of 1000: the
    client gets that head and those bytes and then a close, and nothing is stored."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        path = last_path(server)
        if n == 3:
            writer.write(scripted(path, n, length=1000, body=b"0123456789"))
            await writer.drain()
            writer.close()
            return
        writer.write(scripted(path, n))

    async with ScriptedOrigin(respond) as server:
        for i in range(2):
            assert (await fetch(cache, server.url(f"/s/{i}"), headers=FIELDS)).status == 200
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(request_bytes("GET", server.url("/cut"), headers=FIELDS))
            async with asyncio.timeout(5):
                status, _, fields = await read_head(reader)
            rest, closed = await read_until_closed(reader)
        finally:
            writer.close()
        assert status == 200
        assert ("Content-Length", "1000") in fields
        assert rest == b"0123456789"
        assert closed, "a truncated body must end with a closed connection"
        assert planned_misses(cache) == 0
        assert lean(cache) == (1, 1)  # (handed over with the flight, which failed)
        # Nothing was stored: the next request goes to the origin again.
        resp = await fetch(cache, server.url("/cut"), headers=FIELDS)
        assert (resp.status, resp.body) == (200, b"scripted /cut")
        assert server.paths() == ["/s/0", "/s/1", "/cut", "/cut"]
        assert server.server.accepted == 2


async def test_silent_origin_gives_504_after_the_read_timeout(make_cache: MakeCache) -> None:
    """The planned request's read timeout applies: a silent origin gives a 504 (well before
    the client's own bound of 3 s), and the silent connection is not used again."""
    cache = await memory_cache(make_cache, upstream={"read_timeout": 0.3})
    done = asyncio.Event()

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        if n == 3:
            async with asyncio.timeout(10):
                await done.wait()
            writer.close()
            return
        writer.write(scripted(last_path(server), n))

    async with ScriptedOrigin(respond) as server:
        try:
            for i in range(2):
                assert (await fetch(cache, server.url(f"/s/{i}"), headers=FIELDS)).status == 200
            assert miss_plans(cache) == 1
            resp = await fetch(cache, server.url("/silent"), headers=FIELDS, within=3.0)
        finally:
            done.set()
        assert resp.status == 504
        assert params(resp).get("detail") == "read_timeout"
        assert planned_misses(cache) == 0
        assert lean(cache) == (1, 1)
        after = await fetch(cache, server.url("/after"), headers=FIELDS)
        assert (after.status, after.body) == (200, b"scripted /after")
        assert server.server.accepted == 2


async def test_client_closing_meanwhile_gets_the_answer_and_a_close(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/closing"
    serve(origin, objects, path)
    gate = objects.gates[path] = asyncio.Event()
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url(path), headers=FIELDS))
        await wait_until(lambda: origin.hits[path] == 1)
        writer.write_eof()
        await wait_until(lambda: any(c.must_close for c in cache.connections))
        gate.set()
        resp = await read_response(reader)
        rest, closed = await read_until_closed(reader)
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, objects.body(path))
    assert resp.get("Connection") == "close"
    assert (rest, closed) == (b"", True)
    assert planned_misses(cache) == 0
    assert lean(cache) == (2, 0)
    assert origin.hits[path] == 1


# -- requests that are not planned -------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        [("User-Agent", "miss-planner/2"), ("Accept", "*/*")],
        [*FIELDS, ("X-Extra", "1")],
        [("Accept", "*/*"), ("User-Agent", "miss-planner/1")],
        [("user-agent", "miss-planner/1"), ("Accept", "*/*")],
        FIELDS[:1],
    ],
    ids=["other-value", "extra-field", "other-order", "other-case", "fewer-fields"],
)
async def test_request_with_other_fields_is_not_planned(
    origin: Origin, make_cache: MakeCache, fields: list[tuple[str, str]]
) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    serve(origin, objects, "/m/a", "/m/b", "/m/c")
    resp = await fetch(cache, origin.url("/m/a"), headers=fields)
    check_answer(resp, objects, "/m/a")
    assert planned_misses(cache) == 0
    assert lean(cache) == (2, 0)
    # It left a plan for its own fields; the first plan stands too.
    assert miss_plans(cache) == 2
    check_answer(await fetch(cache, origin.url("/m/b"), headers=fields), objects, "/m/b")
    assert planned_misses(cache) == 1
    check_answer(await fetch(cache, origin.url("/m/c"), headers=FIELDS), objects, "/m/c")
    assert planned_misses(cache) == 2
    assert all(origin.hits[p] == 1 for p in ("/m/a", "/m/b", "/m/c"))


@pytest.mark.parametrize(
    "spelling",
    ["scheme-in-capitals", "host-with-trailing-dot", "fragment"],
)
async def test_target_not_in_its_canonical_spelling_is_not_planned(
    origin: Origin, make_cache: MakeCache, spelling: str
) -> None:
    """The same origin, the same fields, but a target the parser does not keep as spelt:
    never from the plan (nor planned itself), answered and stored under its canonical URL."""
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    host = f"127.0.0.1:{origin.port}"
    fields = [("Host", host), *FIELDS]
    for n in range(2):
        path = f"/m/odd{n}"
        serve(origin, objects, path)
        if spelling == "scheme-in-capitals":
            target = f"HTTP://{host}{path}"
        elif spelling == "host-with-trailing-dot":
            target = f"http://127.0.0.1.:{origin.port}{path}"
        else:
            target = f"http://{host}{path}#part"
        resp = await fetch(cache, target, headers=fields)
        check_answer(resp, objects, path)
        assert planned_misses(cache) == 0
        assert lean(cache) == (2 + n, 0)
        assert origin.requests[-1].path_qs == path
        # Stored under the canonical URL: a hit for the plain spelling.
        hit = await fetch(cache, origin.url(path), headers=fields)
        assert (hit.body, params(hit).get("hit")) == (objects.body(path), True)
        assert origin.hits[path] == 1
    assert miss_plans(cache) == 1
    # The canonical spelling with these fields (Host first, as request_bytes puts it) is.
    serve(origin, objects, "/m/plain")
    check_answer(await fetch(cache, origin.url("/m/plain"), headers=fields), objects, "/m/plain")
    assert planned_misses(cache) == 1


async def test_query_urls_are_planned(origin: Origin, make_cache: MakeCache) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    serve(origin, objects, "/m/q")
    for n, query in enumerate(["?a=1", "?a=2&b=%20x"], 1):
        url = origin.url("/m/q" + query)
        resp = await fetch(cache, url, headers=FIELDS)
        assert (resp.status, resp.body) == (200, objects.body("/m/q"))
        assert resp.get("ETag") == objects.sent["/m/q"]["ETag"]
        assert planned_misses(cache) == n
        assert origin.requests[-1].path_qs == "/m/q" + query
        hit = await fetch(cache, url, headers=FIELDS)
        assert params(hit).get("hit") is True
    assert origin.hits["/m/q"] == 2


async def test_query_urls_are_not_planned_when_not_cached(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, objects, _, _ = await planned_setup(
        make_cache, origin, cache={"cache_query_urls": False}
    )
    serve(origin, objects, "/m/q", "/m/plain")
    url = origin.url("/m/q?a=1")
    for n in range(1, 3):
        resp = await fetch(cache, url, headers=FIELDS)
        assert (resp.status, resp.body) == (200, objects.body("/m/q"))
        assert params(resp).get("fwd") == "bypass"
        assert "stored" not in params(resp)
        assert planned_misses(cache) == 0
        assert origin.hits["/m/q"] == n  # never stored
    # URLs without a query are still planned.
    check_answer(await fetch(cache, origin.url("/m/plain"), headers=FIELDS), objects, "/m/plain")
    assert planned_misses(cache) == 1


@pytest.mark.parametrize("client", ["connection-close", "http-1.0"])
async def test_client_that_will_not_keep_the_connection_is_not_planned(
    origin: Origin, make_cache: MakeCache, client: str
) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/once"
    serve(origin, objects, path)
    version = "1.0" if client == "http-1.0" else "1.1"
    fields = FIELDS if client == "http-1.0" else [*FIELDS, ("Connection", "close")]
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url(path), version=version, headers=fields))
        resp = await read_response(reader)
        rest, closed = await read_until_closed(reader)
    finally:
        writer.close()
    assert (resp.status, resp.body) == (200, objects.body(path))
    assert resp.get("Content-Length") == str(len(objects.body(path)))
    assert resp.get("Connection") == "close"
    assert (rest, closed) == (b"", True)
    assert planned_misses(cache) == 0
    assert lean(cache) == (2, 0)  # (the fast path's general handling)
    assert miss_plans(cache) == 1  # (and it made no plan of its own)
    hit = await fetch(cache, origin.url(path), headers=FIELDS)
    assert params(hit).get("hit") is True


# -- misses that leave no plan -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "moved"),
    [
        (b"Expires: Thu, 01 Jan 2037 00:00:00 GMT\r\n", False),
        (b"Via: 1.1 origin-side\r\n", False),
        (b"Connection: X-Private\r\nX-Private: secret\r\n", False),
        (b"Date: Mon, 02 Jan 2006 15:04:05 GMT\r\n", False),
        (b"Vary: Accept\r\n", True),
    ],
    ids=["expires", "via", "connection-names-a-field", "two-dates", "vary"],
)
async def test_responses_that_are_never_planned(
    make_cache: MakeCache, extra: bytes, moved: bool
) -> None:
    """Misses answered with such responses leave no plan: every one is worked out in full
    (on the fast path, or the general path for Vary), and stored as ever."""
    cache = await memory_cache(make_cache)

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        path = last_path(server)
        writer.write(scripted(path, n).replace(b"\r\n", b"\r\n" + extra, 1))

    async with ScriptedOrigin(respond) as server:
        for i in range(5):
            resp = await fetch(cache, server.url(f"/n/{i}"), headers=FIELDS)
            assert (resp.status, resp.body) == (200, b"scripted /n/%d" % i)
            assert params(resp).get("stored") is True
            assert not resp.has("X-Private")
        assert planned_misses(cache) == 0
        assert miss_plans(cache) == 0
        assert lean(cache) == ((0, 4) if moved else (4, 0))
        hit = await fetch(cache, server.url("/n/4"), headers=FIELDS)
        assert (hit.body, params(hit).get("hit")) == (b"scripted /n/4", True)
        assert len(server.requests) == 5


async def test_no_plans_when_cache_status_names_the_key(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache = await memory_cache(make_cache, server={"cache_status_key": True})
    objects = Objects()
    paths = [f"/k/{i}" for i in range(5)]
    serve(origin, objects, *paths)
    for path in paths:
        resp = await fetch(cache, origin.url(path), headers=FIELDS)
        assert (resp.status, resp.body) == (200, objects.body(path))
        assert params(resp).get("key") == f'"{origin.url(path)}"'
    assert planned_misses(cache) == 0
    assert miss_plans(cache) == 0
    assert lean(cache) == (4, 0)


async def test_plans_with_a_disk_tier_for_keys_it_does_not_hold(
    origin: Origin, make_cache: MakeCache
) -> None:
    """With a disk tier, misses for keys it does not hold (its membership says so without
    I/O) are planned and answered as without one, their disk copies written behind; after a
    restart the same keys are on disk, so they take the general path and are disk hits."""
    cache = await make_cache()
    objects = Objects()
    paths = [f"/d/{i}" for i in range(5)]
    serve(origin, objects, *paths)
    for path in paths:
        check_answer(await fetch(cache, origin.url(path), headers=FIELDS), objects, path)
    assert planned_misses(cache) == 3  # (/d/0 on a cold pool, /d/1 made the plan)
    assert lean(cache) == (4, 0)
    await cache.stop(0.5)
    again = await make_cache()
    for path in paths:
        hit = await fetch(again, origin.url(path), headers=FIELDS)
        assert params(hit).get("hit") is True
        assert hit.get("ETag") == objects.sent[path]["ETag"]
    assert lean(again) == (0, 0)
    assert all(origin.hits[path] == 1 for path in paths)


# -- collapsed forwarding ----------------------------------------------------------------------


async def planned_miss_under_way(
    cache: CacheServer, origin: Origin, objects: Objects, path: str
) -> tuple[str, asyncio.Event, asyncio.Task[RawResponse]]:
    """A planned miss of ``path`` sent to the origin, which holds its answer until the gate
    is set: the URL, the gate and the first client's request."""
    serve(origin, objects, path)
    url = origin.url(path)
    gate = objects.gates[path] = asyncio.Event()
    first = asyncio.create_task(fetch(cache, url, headers=FIELDS))
    await wait_until(lambda: origin.hits[path] == 1)
    return url, gate, first


def check_collapsed(
    responses: list[RawResponse], objects: Objects, path: str, origin: Origin
) -> None:
    """The first of ``responses`` is the planned miss's, the others those of clients that
    joined it; the origin was asked once."""
    check_answer(responses[0], objects, path)
    for resp in responses[1:]:
        check_answer(resp, objects, path, joined=True)
    assert origin.hits[path] == 1


async def test_clients_join_a_planned_miss(origin: Origin, make_cache: MakeCache) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/joined"
    async with asyncio.timeout(10):
        url, gate, first = await planned_miss_under_way(cache, origin, objects, path)
        open_before = len(cache.connections)
        others = [asyncio.create_task(fetch(cache, url, headers=FIELDS)) for _ in range(4)]
        await wait_until(lambda: len(cache.connections) >= open_before + len(others))
        await asyncio.sleep(0.2)  # their requests are parsed and have joined the flight
        assert origin.hits[path] == 1
        gate.set()
        responses = await asyncio.gather(first, *others)
    check_collapsed(responses, objects, path, origin)
    assert planned_misses(cache) == 1
    assert carried(cache) == 4  # answered from the planned answer, not the general path
    assert lean(cache) == (6, 0)
    hit = await fetch(cache, url, headers=FIELDS)
    assert (hit.body, params(hit).get("hit")) == (objects.body(path), True)
    assert origin.hits[path] == 1
    lines = await stop_and_read_log(cache)
    # (the planned answer is logged as it is sent, before the joined clients are answered)
    assert results_for(lines, url) == ["TCP_MISS"] + ["TCP_CF_MISS"] * 4 + ["TCP_MEM_HIT"]


async def fetch_from(cache: CacheServer, url: str, ip: str) -> RawResponse:
    """``fetch`` from another loopback address (another client, as the cache sees it)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", cache.address[1], local_addr=(ip, 0), limit=1 << 20
    )
    try:
        writer.write(request_bytes("GET", url, headers=FIELDS))
        return await read_response(reader)
    finally:
        writer.close()


async def test_clients_at_other_addresses_ride_a_planned_miss(
    origin: Origin, make_cache: MakeCache
) -> None:
    """A plan is made per client, but any client asking the same way gets its answer."""
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/crowd"
    async with asyncio.timeout(10):
        url, gate, first = await planned_miss_under_way(cache, origin, objects, path)
        others = [asyncio.create_task(fetch_from(cache, url, f"127.0.0.{n}")) for n in (2, 3)]
        await wait_until(lambda: riders_waiting(cache, url) == len(others))
        gate.set()
        responses = await asyncio.gather(first, *others)
    check_collapsed(responses, objects, path, origin)
    assert carried(cache) == 2


async def test_clients_riding_a_planned_miss_answered_otherwise_join_its_fetch(
    origin: Origin, make_cache: MakeCache
) -> None:
    """The response is not the planned one: the waiting clients go to the general path,
    which gives them its answer from the same fetch."""
    cache, _, _, _ = await planned_setup(make_cache, origin)
    gate = asyncio.Event()
    headers = {"Cache-Control": "max-age=60", "X-Other": "not planned"}
    origin.route("/m/other", gated(b"not as planned", headers, gate))
    url = origin.url("/m/other")
    async with asyncio.timeout(10):
        first = asyncio.create_task(fetch(cache, url, headers=FIELDS))
        await wait_until(lambda: origin.hits["/m/other"] == 1)
        others = [asyncio.create_task(fetch(cache, url, headers=FIELDS)) for _ in range(3)]
        await wait_until(lambda: riders_waiting(cache, url) == len(others))
        gate.set()
        responses = await asyncio.gather(first, *others)
    assert [(r.status, r.body) for r in responses] == [(200, b"not as planned")] * 4
    assert origin.hits["/m/other"] == 1  # one request for all four
    assert carried(cache) == 0
    assert all(r.get("X-Other") == "not planned" for r in responses)


async def test_client_joins_a_planned_miss_whose_body_is_under_way(
    make_cache: MakeCache,
) -> None:
    """A client that comes after the planned head was read (the flight's head is made only
    when a reader asks for it) gets the same head and the whole body. (One client: a flight
    takes joiners while its first chunk is held, until a reader has read it.)"""
    cache = await memory_cache(make_cache)
    rest = asyncio.Event()
    data = bytes(range(256)) * 8

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        path = last_path(server)
        if path != "/s/joined":
            writer.write(scripted(path, n))
            return
        raw = scripted(path, n, body=data)
        cut = len(raw) - len(data) + 100
        writer.write(raw[:cut])
        await writer.drain()
        async with asyncio.timeout(5):
            await rest.wait()
        writer.write(raw[cut:])

    async with ScriptedOrigin(respond) as server:
        for i in range(2):
            assert (await fetch(cache, server.url(f"/s/{i}"), headers=FIELDS)).status == 200
        url = server.url("/s/joined")
        async with asyncio.timeout(10):
            first = asyncio.create_task(fetch(cache, url, headers=FIELDS))
            await wait_until(lambda: len(server.requests) == 3)
            await asyncio.sleep(0.2)  # the head and the first bytes are in
            open_before = len(cache.connections)
            joined = asyncio.create_task(fetch(cache, url, headers=FIELDS))
            await wait_until(lambda: len(cache.connections) > open_before)
            await asyncio.sleep(0.2)  # its request is parsed and has joined the flight
            rest.set()
            responses = await asyncio.gather(first, joined)
        assert len(server.requests) == 3
    assert all((r.status, r.body) == (200, data) for r in responses)
    assert all(r.get("ETag") == '"s3"' for r in responses)
    assert all(r.get("Content-Type") == "text/plain" for r in responses)
    assert "collapsed" not in params(responses[0])
    assert params(responses[1]).get("collapsed") is True
    assert planned_misses(cache) == 1
    assert carried(cache) == 1
    assert lean(cache) == (3, 0)


# -- one client connection ---------------------------------------------------------------------


async def test_planned_misses_on_one_keep_alive_connection(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    paths = [f"/m/k{i}" for i in range(5)]
    serve(origin, objects, *paths)
    reader, writer = await open_proxy(cache.address[1])
    try:
        for n, path in enumerate(paths, 1):
            writer.write(request_bytes("GET", origin.url(path), headers=FIELDS))
            resp = await read_response(reader)
            check_answer(resp, objects, path)
            assert not resp.has("Connection")
            assert planned_misses(cache) == n
    finally:
        writer.close()
    assert all(origin.hits[path] == 1 for path in paths)


async def test_pipelined_requests_behind_a_planned_miss_are_answered_in_order(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    paths = [f"/m/p{i}" for i in range(5)]
    serve(origin, objects, *paths)
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(
            b"".join(request_bytes("GET", origin.url(path), headers=FIELDS) for path in paths)
        )
        responses = [await read_response(reader) for _ in paths]
    finally:
        writer.close()
    assert [r.body for r in responses] == [objects.body(path) for path in paths]
    for resp, path in zip(responses, paths, strict=True):
        check_answer(resp, objects, path)
    assert planned_misses(cache) == 1  # (the others came while it was busy: queued)
    assert all(origin.hits[path] == 1 for path in paths)


async def test_requests_sent_while_a_planned_miss_is_out_are_answered_after_it(
    origin: Origin, make_cache: MakeCache
) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    paths = [f"/m/w{i}" for i in range(3)]
    serve(origin, objects, *paths)
    gate = objects.gates[paths[0]] = asyncio.Event()
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", origin.url(paths[0]), headers=FIELDS))
        await wait_until(lambda: origin.hits[paths[0]] == 1)
        writer.write(
            b"".join(request_bytes("GET", origin.url(path), headers=FIELDS) for path in paths[1:])
        )
        await asyncio.sleep(0.2)  # (parsed, and queued behind the planned miss)
        assert origin.hits[paths[1]] == 0
        gate.set()
        responses = [await read_response(reader) for _ in paths]
    finally:
        writer.close()
    for resp, path in zip(responses, paths, strict=True):
        check_answer(resp, objects, path)
    assert planned_misses(cache) == 1
    assert all(origin.hits[path] == 1 for path in paths)


# -- shutdown ----------------------------------------------------------------------------------


async def test_shutdown_lets_a_planned_miss_finish(origin: Origin, make_cache: MakeCache) -> None:
    cache, objects, _, _ = await planned_setup(make_cache, origin)
    path = "/m/stopping"
    serve(origin, objects, path)
    gate = objects.gates[path] = asyncio.Event()
    async with asyncio.timeout(10):
        reader, writer = await open_proxy(cache.address[1])
        try:
            writer.write(request_bytes("GET", origin.url(path), headers=FIELDS))
            await wait_until(lambda: origin.hits[path] == 1)
            stopping = asyncio.create_task(cache.stop(3.0))
            await asyncio.sleep(0.1)  # (the cache is waiting for its fetches now)
            gate.set()
            try:
                resp = await read_response(reader)
                rest, closed = await read_until_closed(reader)
            finally:
                await stopping
        finally:
            writer.close()
    check_answer(resp, objects, path)
    assert (rest, closed) == (b"", True)
    assert planned_misses(cache) == 1


# -- planned responses recognised by their bytes -----------------------------------------------


def recognised_misses(cache: CacheServer) -> int:
    assert cache.proxy is not None
    return cache.proxy.fast.recognised_misses


def shaped(n: int, now: float, reason: bytes = b"OK") -> tuple[bytes, bytes]:
    """The head and body of response ``n``: every value of its own (Date, Last-Modified,
    ETag, Content-Length), all else the same."""
    body = b"object %d;" % n * (1 + n % 3)
    date, modified = http_date(now - 50 + n).encode(), http_date(now - 3600 * n).encode()
    head = (
        b"HTTP/1.1 200 %b\r\nServer: scripted/1\r\nDate: %b\r\nContent-Type: text/plain\r\n"
        b'Content-Length: %d\r\nLast-Modified: %b\r\nETag: "e%d"\r\nCache-Control: max-age=600'
        b"\r\n\r\n" % (reason, date, len(body), modified, n)
    )
    return head, body


async def test_planned_responses_recognised_unparsed_and_those_that_are_not(
    make_cache: MakeCache,
) -> None:
    """From the second planned response on, one that arrives whole in one read and is the
    first's but for its Date, Last-Modified, ETag and Content-Length (and body) is recognised
    unparsed. One in two pieces or with another reason phrase is parsed and handled as before.
    Every answer is the origin's response, stored; the origin connection is kept throughout."""
    cache = await memory_cache(make_cache)
    now = time.time()

    async def respond(n: int, writer: asyncio.StreamWriter) -> None:
        head, body = shaped(n, now, b"Fine" if n == 8 else b"OK")
        if n == 6:  # the head, then the body
            writer.write(head)
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(body)
        else:
            writer.write(head + body)

    async with ScriptedOrigin(respond) as server:
        urls = [server.url(f"/r/{n}") for n in range(1, 9)]
        answers = [await fetch(cache, url, headers=FIELDS) for url in urls]
        hits = [await fetch(cache, url, headers=FIELDS) for url in urls]
        assert server.server.accepted == 1
        assert len(server.requests) == 8
    # 1 took the general path, 2 the fast path in full (it made the plan); 3 was planned and
    # parsed (its shape learnt); 4, 5 and 7 were recognised, 6 (in two pieces) parsed; 8
    # (another reason phrase) was handed to the fast path's general handling.
    assert planned_misses(cache) == 5
    assert recognised_misses(cache) == 3
    for n, (resp, hit) in enumerate(zip(answers, hits, strict=True), 1):
        head, body = shaped(n, now)
        origin_fields = dict(
            line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if ": " in line
        )
        assert (resp.status, resp.body) == (200, body), n
        for name in ("Date", "Last-Modified", "ETag", "Content-Length", "Server"):
            assert resp.get(name) == origin_fields[name], (n, name)
            assert hit.get(name) == origin_fields[name], (n, name)
        assert (hit.body, params(hit).get("hit")) == (body, True)
    assert answers[7].head.startswith(b"HTTP/1.1 200 Fine\r\n")


def without_clock(head: bytes) -> bytes:
    """A head without its Age and Cache-Status ttl, which move with the second it is sent."""
    return re.sub(rb"ttl=-?\d+", b"ttl=", re.sub(rb"\r\nAge: \d+", b"", head))


async def test_a_recognised_response_is_answered_like_a_parsed_one(make_cache: MakeCache) -> None:
    """Two caches, the same scripted exchanges: one recognises the fourth response, the other
    is sent it in two pieces (parsed). The client gets the same bytes from both, and each
    stores the same object."""
    answers, hits = [], []
    now = time.time()
    for split in (False, True):
        cache = await memory_cache(make_cache)

        async def respond(n: int, writer: asyncio.StreamWriter, split: bool = split) -> None:
            head, body = shaped(n, now)
            if split and n == 4:
                writer.write(head + body[:3])
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(body[3:])
            else:
                writer.write(head + body)

        async with ScriptedOrigin(respond) as server:
            urls = [server.url(f"/same/{n}") for n in range(1, 5)]
            responses = [await fetch(cache, url, headers=FIELDS) for url in urls]
            hits.append(await fetch(cache, urls[3], headers=FIELDS))
        assert recognised_misses(cache) == (0 if split else 1)
        answers.append(responses[3])
    assert without_clock(answers[0].head) == without_clock(answers[1].head)
    assert answers[0].body == answers[1].body == shaped(4, now)[1]
    assert without_clock(hits[0].head) == without_clock(hits[1].head)
    assert hits[0].body == hits[1].body
