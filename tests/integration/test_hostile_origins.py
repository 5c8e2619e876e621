"""Hostile origins: a table of responses that break HTTP/1.1's framing on purpose, each sent
for a plain GET, a GET with ``Cache-Control: no-cache``, a Range request and a POST.

For every one the client gets the required answer, nothing of it leaks into the client's next
response on the same connection, and the store holds either nothing or exactly the response
the origin framed. Bytes after a complete response (an origin's attempt at response splitting)
are cut off with the upstream connection, which is never reused; the response before them is
served and stored as if they had not come.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    Origin,
    RawResponse,
    RawServer,
    open_proxy,
    read_request_head,
    read_response,
    request_bytes,
    static,
    wait_until,
)

FRESH = "Cache-Control: max-age=600\r\n"
INJECTED = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nCache-Control: max-age=600\r\n\r\nINJECTED"
GOOD = b"good answer"


@dataclass(frozen=True)
class Case:
    """What the origin writes for each request, then whether it closes the connection; and
    what the client must get: ``body`` (None: a 502 before anything is sent; "cut": the head
    and then a close before the body's end)."""

    wire: bytes
    close: bool
    status: int
    body: bytes | str | None
    # A complete response before surplus bytes: stored, and the upstream connection closed.
    surplus: bool = False


CASES: dict[str, Case] = {
    # Surplus bytes after a complete response (response splitting).
    "204-then-a-response": Case(
        f"HTTP/1.1 204 No Content\r\n{FRESH}\r\n".encode() + INJECTED, False, 204, b"", True
    ),
    "length-then-a-response": Case(
        f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n{FRESH}\r\nhello".encode() + INJECTED,
        False,
        200,
        b"hello",
        True,
    ),
    "chunked-then-a-response": Case(
        f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{FRESH}\r\n".encode()
        + b"5\r\nhello\r\n0\r\n\r\n"
        + INJECTED,
        False,
        200,
        b"hello",
        True,
    ),
    "body-longer-than-its-length": Case(
        f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n{FRESH}\r\nhello world".encode(),
        False,
        200,
        b"hello",
        True,
    ),
    "length-then-garbage": Case(
        f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n{FRESH}\r\nhello\r\nNOT HTTP\r\n\r\n".encode(),
        False,
        200,
        b"hello",
        True,
    ),
    # Framing the cache cannot trust: a clean 502, nothing stored.
    "length-and-chunked": Case(
        f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n{FRESH}\r\n"
        "5\r\nhello\r\n0\r\n\r\n".encode(),
        False,
        502,
        None,
    ),
    "two-lengths": Case(
        f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n{FRESH}\r\nhello!".encode(),
        False,
        502,
        None,
    ),
    "unknown-transfer-coding": Case(
        f"HTTP/1.1 200 OK\r\nTransfer-Encoding: abcxyz\r\n{FRESH}\r\nhello body here".encode(),
        True,
        502,
        None,
    ),
    "gzip-then-chunked": Case(
        f"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n{FRESH}\r\n"
        "5\r\nhello\r\n0\r\n\r\n".encode(),
        False,
        502,
        None,
    ),
    "bare-lf": Case(
        b"HTTP/1.1 200 OK\nContent-Length: 5\nCache-Control: max-age=600\n\nhello", False, 502, None
    ),
    "obs-fold": Case(
        f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Folded: one\r\n two\r\n{FRESH}\r\n".encode()
        + b"hello",
        False,
        502,
        None,
    ),
    "a-flood-of-interim-responses": Case(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" * 1000
        + f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n{FRESH}\r\nhello".encode(),
        False,
        502,
        None,
    ),
    # A body cut short: the client sees the cut (a close), nothing is stored.
    "body-shorter-than-its-length": Case(
        f"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n{FRESH}\r\nhello".encode(), True, 200, "cut"
    ),
    "closed-mid-chunk": Case(
        f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{FRESH}\r\n5\r\nhel".encode(),
        True,
        200,
        "cut",
    ),
}

# The ways in: the request a client sends (the origin ignores Range), and whether its answer
# is stored (a ranged miss is passed on, never stored).
PATHS: dict[str, tuple[str, list[tuple[str, str]], bytes, bool]] = {
    "plain": ("GET", [], b"", True),
    "no-cache": ("GET", [("Cache-Control", "no-cache")], b"", True),
    "range": ("GET", [("Range", "bytes=0-2")], b"", False),
    "post": ("POST", [], b"posted", False),
}


class HostileOrigin:
    """A raw origin answering every request for ``/case/NAME`` with that case's wire bytes."""

    def __init__(self) -> None:
        self.server = RawServer(self.handle)
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(100):
            line, fields = await read_request_head(reader)
            self.requests += 1
            length = next((int(v) for n, v in fields if n.lower() == "content-length"), 0)
            if length:
                await reader.readexactly(length)
            case = CASES[line.split()[1].rsplit("/", 1)[-1]]
            writer.write(case.wire)
            await writer.drain()
            if case.close:
                return

    def url(self, name: str) -> str:
        return self.server.url(f"/case/{name}")


@pytest.fixture
async def hostile() -> AsyncIterator[HostileOrigin]:
    origin = HostileOrigin()
    await origin.server.start()
    yield origin
    await origin.server.stop()


def surplus_closes(cache: CacheServer) -> int:
    return cache.traffic.upstream_surplus


async def stored(cache: CacheServer, url: str) -> bytes | None:
    """The body the cache holds for ``url``, None if it holds nothing (only-if-cached)."""
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", url, headers=[("Cache-Control", "only-if-cached")]))
        resp = await read_response(reader)
    finally:
        writer.close()
    return None if resp.status == 504 else resp.body


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", list(CASES))
async def test_a_hostile_response_is_answered_framed_or_refused_and_leaks_nowhere(
    make_cache: MakeCache, hostile: HostileOrigin, origin: Origin, name: str, path: str
) -> None:
    case = CASES[name]
    method, fields, body, stores = PATHS[path]
    origin.route("/good", static(GOOD))
    cache = await make_cache()
    url = hostile.url(name)
    before = surplus_closes(cache)
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes(method, url, headers=fields, body=body))
        if case.body == "cut":
            # The head went out before the cut: only a close can tell the client.
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert int(head.split(b" ", 2)[1]) == case.status
            rest = await asyncio.wait_for(reader.read(-1), 5)
            assert b"INJECTED" not in rest
        else:
            resp = await read_response(reader, method=method)
            assert b"INJECTED" not in resp.head + resp.body
            assert resp.status == case.status, resp
            if case.body is not None:
                assert resp.body == case.body, resp
            # The client's next request on the same connection gets its own answer only.
            writer.write(request_bytes("GET", origin.url("/good")))
            after = await read_response(reader)
            assert (after.status, after.body) == (200, GOOD), after
    finally:
        writer.close()
    held = await stored(cache, url)
    if case.surplus and stores:
        assert held == case.body, "the framed response is stored as the origin framed it"
    else:
        assert held is None, f"stored {held!r}"
    if case.surplus:
        assert surplus_closes(cache) > before
    # Nothing of a hostile response is left in the pool: the next request opens anew.
    asked = hostile.requests
    accepted = hostile.server.accepted
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("POST", url, body=b"again"))
        await asyncio.wait_for(reader.read(1), 5)
    finally:
        writer.close()
    assert hostile.requests == asked + 1
    if case.surplus or case.close or case.body is None:
        assert hostile.server.accepted == accepted + 1, "a surplus connection was reused"


class Scripted:
    """A raw origin answering its requests, in order, with ``answers`` (the wire bytes, then
    bytes it sends ``later`` seconds after, on the idle connection)."""

    def __init__(self, *answers: bytes, later: bytes = b"") -> None:
        self.answers = list(answers)
        self.later = later
        self.methods: list[str] = []
        self.server = RawServer(self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while self.answers:
            line, _ = await read_request_head(reader)
            self.methods.append(line.split()[0])
            writer.write(self.answers.pop(0))
            await writer.drain()
            if self.later:
                await asyncio.sleep(0.1)
                writer.write(self.later)
                await writer.drain()
        await reader.read()  # (until the cache closes)


@contextlib.asynccontextmanager
async def scripted(*answers: bytes, later: bytes = b"") -> AsyncIterator[Scripted]:
    origin = Scripted(*answers, later=later)
    await origin.server.start()
    try:
        yield origin
    finally:
        await origin.server.stop()


async def exchange(
    cache: CacheServer, *requests: tuple[str, str, list[tuple[str, str]]]
) -> list[RawResponse]:
    """The responses to ``requests`` (method, url, fields), sent one after another on one
    client connection."""
    reader, writer = await open_proxy(cache.address[1])
    answers = []
    try:
        for method, url, fields in requests:
            writer.write(request_bytes(method, url, headers=fields))
            answers.append(await read_response(reader, method=method))
    finally:
        writer.close()
    return answers


async def test_a_body_after_a_head_response_is_cut_off_with_the_connection(
    make_cache: MakeCache,
) -> None:
    cache = await make_cache()
    head = f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n{FRESH}\r\n".encode()
    async with scripted(head + b"hello" + INJECTED, head + b"hello") as origin:
        url = origin.server.url("/head")
        first, second = await exchange(cache, ("HEAD", url, []), ("GET", url, []))
        assert (first.status, first.body) == (200, b"")
        assert (second.status, second.body) == (200, b"hello")
        assert origin.server.accepted == 2, "the HEAD's connection was reused"
    assert cache.traffic.upstream_surplus == 1


async def test_a_response_after_a_304_is_cut_off_and_the_stored_object_kept(
    make_cache: MakeCache,
) -> None:
    cache = await make_cache()
    stale = 'Cache-Control: max-age=0\r\nETag: "v1"\r\n'
    first = f"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n{stale}\r\nhello".encode()
    not_modified = f'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n{FRESH}\r\n'.encode()
    async with scripted(first, not_modified + INJECTED, first) as origin:
        url = origin.server.url("/revalidated")
        answers = await exchange(cache, ("GET", url, []), ("GET", url, []), ("GET", url, []))
        assert [(a.status, a.body) for a in answers] == [(200, b"hello")] * 3
        assert all(b"INJECTED" not in a.head for a in answers)
        # The 304 freshened the stored object: the third answer came from the store.
        assert origin.methods == ["GET", "GET"]
        assert origin.server.accepted == 1
    assert cache.traffic.upstream_surplus == 1


async def test_bytes_on_an_idle_upstream_connection_close_it_unparsed(
    make_cache: MakeCache,
) -> None:
    cache = await make_cache()
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nCache-Control: no-store\r\n\r\nhello"
    async with scripted(answer, answer, later=INJECTED) as origin:
        first = await exchange(cache, ("GET", origin.server.url("/a"), []))
        await wait_until(lambda: cache.traffic.upstream_surplus == 1, within=3)
        second = await exchange(cache, ("GET", origin.server.url("/b"), []))
        assert [(a.status, a.body) for a in first + second] == [(200, b"hello")] * 2
        assert origin.server.accepted == 2, "a connection that spoke out of turn was reused"
