"""Harvest and Squid 5.7 on the tricky rows of RFC 9111, side by side.

Each test runs one script of requests through Harvest and, at the same time, through a real
Squid (Debian's package, see conftest.py), each against routes of its own on one loopback
origin, and records what happened: statuses, bodies, what the origin was asked (how often,
conditionally or not), and the caches' own accounts (Harvest's Cache-Status, Squid's X-Cache
and access-log result codes).

The assertions on Harvest are what RFC 9111 (or RFC 9110, RFC 5861) requires or what Harvest
chose where the RFC leaves room. The assertions on Squid are what docs/squid-comparison.md
says Squid 5.7 does, row by row, so that the document cannot go stale silently: if Squid
changes (another Debian release), these fail and the document must be revised with them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from multidict import CIMultiDict

from tests.interop.conftest import Reply, Squid, send
from tests.support import MakeCache, Origin, RawServer, read_request_head, wait_until

Fields = list[tuple[str, str]]
DOCUMENTED_SQUID = "Squid Cache: Version 5.7"
CACHE_NAME = "test-cache"  # Harvest's server.name in tests.support.cache_config


def http_date(when: float) -> str:
    return email.utils.formatdate(when, usegmt=True)


# -- the origin --------------------------------------------------------------------------------


class Resource:
    """One origin resource. The n-th request it gets is answered ``status`` with body b"vN"
    and ``headers``. With ``etag`` set, a request whose If-None-Match is that tag gets a 304
    with ``headers`` (updated by ``not_modified``) instead. While ``fail`` is set, every
    request gets that status."""

    def __init__(
        self,
        headers: dict[str, str] | None = None,
        *,
        status: int = 200,
        etag: str | None = None,
        not_modified: dict[str, str] | None = None,
    ) -> None:
        self.headers = dict(headers or {})
        self.status = status
        self.etag = etag
        self.not_modified = dict(not_modified or {})
        self.fail: int | None = None
        self.seen: list[tuple[str, CIMultiDict[str]]] = []

    @property
    def calls(self) -> int:
        return len(self.seen)

    @property
    def conditional(self) -> int:
        """How many requests were conditional (If-None-Match or If-Modified-Since)."""
        return sum("If-None-Match" in h or "If-Modified-Since" in h for _, h in self.seen)

    def methods(self) -> list[str]:
        return [method for method, _ in self.seen]

    async def __call__(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.headers.copy()))
        await request.read()
        if self.fail is not None:
            return web.Response(status=self.fail, body=b"failure %d" % self.fail)
        headers = dict(self.headers)
        if self.etag is not None:
            headers["ETag"] = self.etag
            if request.headers.get("If-None-Match") == self.etag:
                headers.update(self.not_modified)
                return web.Response(status=304, headers=headers)
        return web.Response(status=self.status, body=b"v%d" % self.calls, headers=headers)


# -- the two proxies ---------------------------------------------------------------------------


@dataclasses.dataclass
class Side:
    """One proxy under test, with a path prefix of its own on the shared origin (the other
    proxy's requests can never reach its routes) and a record of its replies per URL."""

    name: str
    port: int
    origin: Origin
    prefix: str
    squid: Squid | None = None
    resources: dict[str, Resource] = dataclasses.field(default_factory=dict)
    replies: dict[str, list[Reply]] = dataclasses.field(default_factory=dict)

    def url(self, path: str) -> str:
        return self.origin.url(self.prefix + path)

    def serve(self, path: str, resource: Resource) -> Resource:
        self.resources[path] = resource
        self.origin.route(self.prefix + path, resource)
        return resource

    async def request(
        self,
        method: str,
        path: str,
        headers: Fields | None = None,
        body: bytes = b"",
        *,
        url: str | None = None,
        until_close: bool = False,
    ) -> Reply:
        target = url or self.url(path)
        reply = await send(self.port, method, target, headers, body, until_close=until_close)
        self.replies.setdefault(target, []).append(reply)
        return reply

    async def get(self, path: str, *headers: tuple[str, str]) -> Reply:
        return await self.request("GET", path, list(headers))

    def seen(self, path: str, *, url: str | None = None) -> list[tuple[int, bytes]]:
        """(status, body) of every reply for ``path`` (or ``url``), in order."""
        return [(r.status, r.body) for r in self.replies[url or self.url(path)]]

    def field(self, path: str, name: str) -> list[str | None]:
        return [r.get(name) for r in self.replies[self.url(path)]]

    def calls(self, path: str) -> int:
        return self.resources[path].calls

    def cache_status(self, path: str, *, url: str | None = None) -> list[str]:
        """Harvest's Cache-Status of each reply, without the cache's name and the ttl."""
        return [harvest_status(r) for r in self.replies[url or self.url(path)]]

    def x_cache(self, path: str, *, url: str | None = None) -> list[str]:
        """Squid's X-Cache of each reply: HIT or MISS."""
        return [(r.get("X-Cache") or "-").split()[0] for r in self.replies[url or self.url(path)]]

    async def logged(self, path: str, *, url: str | None = None) -> list[str]:
        """Squid's access-log result codes (TCP_MISS/200...) for ``path``, one per request
        sent; waits (at most 5 s) for Squid to have logged them all."""
        assert self.squid is not None, "only Squid's log is read here"
        target = url or self.url(path)
        sent = len(self.replies[target])
        codes: list[str] = []
        async with asyncio.timeout(5):
            while len(codes) < sent:
                await asyncio.sleep(0.02)
                rows = (line.split() for line in self.squid.access_lines())
                codes = [row[3] for row in rows if len(row) > 6 and row[6] == target]
        return codes


def harvest_status(reply: Reply) -> str:
    value = reply.get("Cache-Status")
    assert value is not None, reply
    name, *params = (part.strip() for part in value.split(",")[-1].split(";"))
    assert name == CACHE_NAME, value
    return " ".join(p for p in params if not p.startswith("ttl="))


def harvest_ttl(reply: Reply) -> int:
    value = reply.get("Cache-Status") or ""
    ttl = [p.strip()[4:] for p in value.split(";") if p.strip().startswith("ttl=")]
    assert len(ttl) == 1, value
    return int(ttl[0])


@dataclasses.dataclass
class Pair:
    """Harvest and Squid; with ``stock``, also the Squid with Debian's refresh_pattern lines."""

    harvest: Side
    squid: Side
    stock: Side | None = None

    async def run(self, script: Callable[[Side], Awaitable[None]]) -> tuple[Side, Side]:
        """Run ``script`` through every proxy at once (their sleeps overlap)."""
        sides = [side for side in (self.harvest, self.squid, self.stock) if side is not None]
        await asyncio.gather(*(script(side) for side in sides))
        return self.harvest, self.squid


@pytest.fixture
async def pair(origin: Origin, make_cache: MakeCache, squid: Squid) -> Pair:
    cache = await make_cache()
    run = uuid.uuid4().hex[:12]  # the module's Squid outlives this test's origin port
    return Pair(
        Side("harvest", cache.address[1], origin, f"/{run}/harvest"),
        Side("squid", squid.port, origin, f"/{run}/squid", squid=squid),
    )


@pytest.fixture
def trio(pair: Pair, stock_squid: Squid) -> Pair:
    run = pair.harvest.prefix.split("/")[1]
    pair.stock = Side("stock", stock_squid.port, pair.harvest.origin, f"/{run}/stock", stock_squid)
    return pair


def test_squid_is_the_version_the_comparison_documents(squid: Squid) -> None:
    assert squid.version == DOCUMENTED_SQUID, (
        f"docs/squid-comparison.md records {DOCUMENTED_SQUID}; this is {squid.version}:"
        " re-run these tests and revise the document (and DOCUMENTED_SQUID) for it"
    )


# -- 1. Cache-Control: no-cache in the response ------------------------------------------------


async def test_no_cache_response_is_revalidated_on_every_use(pair: Pair) -> None:
    """RFC 9111 5.2.2.4: a no-cache response must not be reused without successful
    validation. Both store it and send a conditional request on every reuse."""

    async def script(side: Side) -> None:
        side.serve("/nc", Resource({"Cache-Control": "no-cache"}, etag='"e1"'))
        for _ in range(3):
            await side.get("/nc")

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/nc") == [(200, b"v1")] * 3
        assert (side.calls("/nc"), side.resources["/nc"].conditional) == (3, 2)
    assert h.cache_status("/nc") == [
        "fwd=uri-miss fwd-status=200 stored",
        "fwd=stale fwd-status=304",
        "fwd=stale fwd-status=304",
    ]
    assert await s.logged("/nc") == ["TCP_MISS/200"] + ["TCP_REFRESH_UNMODIFIED/200"] * 2
    assert s.x_cache("/nc") == ["MISS", "HIT", "HIT"]
    # On the wire: Squid adds a max-age of its own (three days) to the requests it forwards
    # (the first one here); Harvest forwards none the client did not send.
    assert s.resources["/nc"].seen[0][1].get("Cache-Control") == "max-age=259200"
    assert h.resources["/nc"].seen[0][1].get("Cache-Control") is None


# -- 2. private --------------------------------------------------------------------------------


async def test_private_response_is_not_stored(pair: Pair) -> None:
    """RFC 9111 5.2.2.7, 3: a shared cache must not store a private response."""

    async def script(side: Side) -> None:
        side.serve("/p", Resource({"Cache-Control": "private, max-age=60"}))
        for _ in range(2):
            await side.get("/p")

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/p") == [(200, b"v1"), (200, b"v2")]
    assert h.cache_status("/p") == ["fwd=uri-miss fwd-status=200"] * 2
    assert await s.logged("/p") == ["TCP_MISS/200"] * 2


# -- 3. no-store in the request ----------------------------------------------------------------


async def test_request_no_store(pair: Pair) -> None:
    """RFC 9111 5.2.1.5: nothing of a no-store request or its response may be stored. The
    directive does not forbid answering it from what was stored before, and both do."""
    no_store = ("Cache-Control", "no-store")

    async def script(side: Side) -> None:
        side.serve("/first", Resource({"Cache-Control": "max-age=60"}))
        await side.get("/first", no_store)
        await side.get("/first")
        side.serve("/later", Resource({"Cache-Control": "max-age=60"}))
        await side.get("/later")
        await side.get("/later", no_store)

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/first") == [(200, b"v1"), (200, b"v2")]
        assert side.seen("/later") == [(200, b"v1"), (200, b"v1")]
        assert (side.calls("/first"), side.calls("/later")) == (2, 1)
    assert h.cache_status("/first") == [
        "fwd=uri-miss fwd-status=200",
        "fwd=uri-miss fwd-status=200 stored",
    ]
    assert await s.logged("/first") == ["TCP_MISS/200"] * 2
    assert await s.logged("/later") == ["TCP_MISS/200", "TCP_MEM_HIT/200"]


# -- 4. Authorization --------------------------------------------------------------------------

AUTH_CASES = {
    "/plain": ("max-age=60", 2),
    "/public": ("public, max-age=60", 1),
    "/s-maxage": ("s-maxage=60", 1),
    "/must-revalidate": ("max-age=60, must-revalidate", 1),
}


async def test_authorization_needs_public_s_maxage_or_must_revalidate(pair: Pair) -> None:
    """RFC 9111 3.5: a response to a request with Authorization is stored by a shared cache
    (and reused for such requests) only with public, s-maxage or must-revalidate."""
    auth = ("Authorization", "Basic dXNlcjpwYXNzd29yZA==")

    async def script(side: Side) -> None:
        for path, (cc, _) in AUTH_CASES.items():
            side.serve(path, Resource({"Cache-Control": cc}))
            for _ in range(2):
                await side.get(path, auth)

    h, s = await pair.run(script)
    for side in (h, s):
        for path, (_, calls) in AUTH_CASES.items():
            assert side.calls(path) == calls, (side.name, path)
            assert side.seen(path)[1] == (200, b"v%d" % calls), (side.name, path)
    assert await s.logged("/plain") == ["TCP_MISS/200"] * 2
    assert await s.logged("/public") == ["TCP_MISS/200", "TCP_MEM_HIT/200"]


# -- 5. s-maxage -------------------------------------------------------------------------------


async def test_s_maxage_beats_max_age_in_a_shared_cache(pair: Pair) -> None:
    """RFC 9111 5.2.2.10, 4.2.1: a shared cache takes s-maxage over max-age, either way."""

    async def script(side: Side) -> None:
        side.serve("/long", Resource({"Cache-Control": "max-age=0, s-maxage=60"}, etag='"a"'))
        side.serve("/short", Resource({"Cache-Control": "max-age=60, s-maxage=0"}, etag='"b"'))
        for path in ("/long", "/long", "/short", "/short"):
            await side.get(path)

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/long") == side.seen("/short") == [(200, b"v1")] * 2
        assert side.calls("/long") == 1
        assert (side.calls("/short"), side.resources["/short"].conditional) == (2, 1)
    assert h.cache_status("/long")[1] == "hit"
    assert h.cache_status("/short")[1] == "fwd=stale fwd-status=304"
    assert await s.logged("/long") == ["TCP_MISS/200", "TCP_MEM_HIT/200"]
    assert await s.logged("/short") == ["TCP_MISS/200", "TCP_REFRESH_UNMODIFIED/200"]


# -- 6. Expires --------------------------------------------------------------------------------


async def test_expires_in_the_past_zero_or_invalid_is_stale(pair: Pair) -> None:
    """RFC 9111 5.3, 4.2.1: Expires in the past, "0" or an invalid date means already
    expired. Without a validator both refetch; with Last-Modified both revalidate."""
    past = http_date(time.time() - 3600)
    modified = http_date(time.time() - 10 * 86400)
    cases = {"/past": past, "/zero": "0", "/invalid": "soon"}

    async def script(side: Side) -> None:
        for path, expires in cases.items():
            side.serve(path, Resource({"Expires": expires}))
            side.serve(path + "-lm", Resource({"Expires": expires, "Last-Modified": modified}))
            for _ in range(2):
                await side.get(path)
            for _ in range(2):
                await side.get(path + "-lm")

    h, s = await pair.run(script)
    for side in (h, s):
        for path in cases:
            assert side.seen(path) == [(200, b"v1"), (200, b"v2")], (side.name, path)
            assert side.seen(path + "-lm") == [(200, b"v1"), (200, b"v2")]
            assert side.resources[path + "-lm"].conditional == 1, (side.name, path)
    # Harvest does not store a response that is stale at once and has no validator
    # (policy.storable: "stale-no-validator"), so it asks again unconditionally. Squid stores
    # it and revalidates it with If-Modified-Since set to the stored Date (RFC 9110 13.1.3
    # mentions caches doing so when there is no Last-Modified).
    for path in cases:
        assert h.resources[path].conditional == 0
        assert h.cache_status(path) == ["fwd=uri-miss fwd-status=200"] * 2
        assert h.cache_status(path + "-lm")[1] == "fwd=stale fwd-status=200 stored"
        assert s.resources[path].conditional == 1
        stored_date = s.replies[s.url(path)][0].get("Date")
        assert s.resources[path].seen[1][1].get("If-Modified-Since") == stored_date
        assert await s.logged(path) == ["TCP_MISS/200", "TCP_REFRESH_MODIFIED/200"]
        assert (await s.logged(path + "-lm"))[1] == "TCP_REFRESH_MODIFIED/200"


# -- 7. heuristic freshness --------------------------------------------------------------------


async def test_heuristic_freshness_for_200_but_not_302(pair: Pair) -> None:
    """RFC 9111 4.2.2, RFC 9110 15.1: a 200 with Last-Modified and no explicit freshness may
    be given heuristic freshness; a 302 is not heuristically cacheable, so without explicit
    freshness it is not reused."""
    modified = http_date(time.time() - 10 * 86400)

    async def script(side: Side) -> None:
        side.serve("/ok", Resource({"Last-Modified": modified}))
        side.serve("/found", Resource({"Last-Modified": modified, "Location": "/x"}, status=302))
        for path in ("/ok", "/ok", "/found", "/found"):
            await side.get(path)

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/ok") == [(200, b"v1")] * 2
        assert side.seen("/found") == [(302, b"v1"), (302, b"v2")]
    # Harvest: 10% of the 10 days since Last-Modified, capped at cache.heuristic_max_seconds.
    assert h.cache_status("/ok")[1] == "hit"
    assert 86000 < harvest_ttl(h.replies[h.url("/ok")][1]) <= 86400
    assert h.cache_status("/found") == ["fwd=uri-miss fwd-status=302"] * 2
    assert await s.logged("/ok") == ["TCP_MISS/200", "TCP_MEM_HIT/200"]
    assert await s.logged("/found") == ["TCP_MISS/302"] * 2


# -- 8. error statuses with explicit freshness -------------------------------------------------

ERROR_STATUSES = (404, 410, 500)


async def test_error_statuses_with_max_age(pair: Pair) -> None:
    """RFC 9111 3: any final status with explicit freshness may be stored (404 and 410 are
    heuristically cacheable too, RFC 9110 15.1). Harvest stores and reuses all three; Squid
    5.7 reuses only the 410 (404 and 500 are negatively cached, negative_ttl, 0 by
    default)."""

    async def script(side: Side) -> None:
        for status in ERROR_STATUSES:
            side.serve(f"/{status}", Resource({"Cache-Control": "max-age=60"}, status=status))
            for _ in range(2):
                await side.get(f"/{status}")

    h, s = await pair.run(script)
    for status in ERROR_STATUSES:
        assert h.seen(f"/{status}") == [(status, b"v1")] * 2
        assert h.cache_status(f"/{status}")[1] == "hit"
    assert s.seen("/404") == [(404, b"v1"), (404, b"v2")]
    assert s.seen("/410") == [(410, b"v1")] * 2
    assert s.seen("/500") == [(500, b"v1"), (500, b"v2")]
    assert await s.logged("/410") == ["TCP_MISS/410", "TCP_MEM_HIT/410"]


# -- 9. Vary -----------------------------------------------------------------------------------


async def test_vary_selects_variants_and_vary_star_is_never_reused(pair: Pair) -> None:
    """RFC 9111 4.1: a stored response is reused only for requests whose selecting fields
    match; "Vary: *" always fails to match."""

    async def script(side: Side) -> None:
        counter = [0]

        async def negotiated(request: web.Request) -> web.Response:
            counter[0] += 1
            coding = request.headers.get("Accept-Encoding", "none")
            body = f"{coding}-{counter[0]}".encode()
            headers = {"Cache-Control": "max-age=60", "Vary": "Accept-Encoding"}
            return web.Response(body=body, headers=headers)

        side.origin.route(side.prefix + "/v", negotiated)
        side.serve("/star", Resource({"Cache-Control": "max-age=60", "Vary": "*"}))
        for coding in ("gzip", "br", "gzip", "br"):
            await side.get("/v", ("Accept-Encoding", coding))
        for _ in range(2):
            await side.get("/star")

    h, s = await pair.run(script)
    for side in (h, s):
        bodies = [b"gzip-1", b"br-2", b"gzip-1", b"br-2"]
        assert side.seen("/v") == [(200, body) for body in bodies]
        assert side.origin.hits[side.prefix + "/v"] == 2
        assert side.seen("/star") == [(200, b"v1"), (200, b"v2")]
    assert h.cache_status("/v")[2:] == ["hit", "hit"]
    # Harvest does not store a "Vary: *" response; Squid stores it and revalidates it on
    # every use, which comes to the same for the client.
    assert h.cache_status("/star") == ["fwd=uri-miss fwd-status=200"] * 2
    assert h.resources["/star"].conditional == 0
    assert (await s.logged("/v"))[2:] == ["TCP_MEM_HIT/200"] * 2
    assert await s.logged("/star") == ["TCP_MISS/200", "TCP_REFRESH_MODIFIED/200"]
    assert s.resources["/star"].conditional == 1


# -- 10. 304 updates the stored response, but never its Content-Length -------------------------


async def test_304_updates_the_stored_fields(pair: Pair) -> None:
    """RFC 9111 4.3.4, 3.2: the fields of a 304 replace the stored ones."""

    async def script(side: Side) -> None:
        side.serve(
            "/u",
            Resource(
                {"Cache-Control": "max-age=0", "X-Version": "1"},
                etag='"u"',
                not_modified={"Cache-Control": "max-age=60", "X-Version": "2"},
            ),
        )
        for _ in range(3):
            await side.get("/u")

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/u") == [(200, b"v1")] * 3
        assert side.field("/u", "X-Version") == ["1", "2", "2"]
        assert side.field("/u", "Cache-Control")[2] == "max-age=60"
        assert (side.calls("/u"), side.resources["/u"].conditional) == (2, 1)
    assert h.cache_status("/u")[1:] == ["fwd=stale fwd-status=304", "hit"]
    assert await s.logged("/u") == ["TCP_MISS/200", "TCP_REFRESH_UNMODIFIED/200", "TCP_MEM_HIT/200"]


async def test_304_does_not_change_the_stored_content_length(pair: Pair) -> None:
    """RFC 9111 3.2: Content-Length is not updated from a 304 (which may carry one, RFC 9110
    8.6). Harvest keeps 5. Squid 5.7 takes the 304's 999 and then sends the 5-byte body
    under it: a mis-framed response, which a keep-alive client waits on forever."""
    requests: dict[str, int] = {}

    async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(100):
            line, fields = await read_request_head(reader)
            path = line.split()[1]
            requests[path] = requests.get(path, 0) + 1
            head = f'Date: {http_date(time.time())}\r\nETag: "c"\r\n'
            if any(name.lower() == "if-none-match" for name, _ in fields):
                head = "HTTP/1.1 304 Not Modified\r\n" + head
                head += "Cache-Control: max-age=60\r\nContent-Length: 999\r\n\r\n"
                writer.write(head.encode())
            else:
                head = "HTTP/1.1 200 OK\r\n" + head
                head += "Cache-Control: max-age=0\r\nContent-Length: 5\r\n\r\n"
                writer.write(head.encode() + b"hello")
            await writer.drain()

    server = await RawServer(origin).start()
    try:

        async def script(side: Side) -> None:
            for _ in range(3):
                await side.request("GET", "", url=server.url(side.prefix), until_close=True)

        h, s = await pair.run(script)
    finally:
        await server.stop()
    for side in (h, s):
        assert side.seen("", url=server.url(side.prefix)) == [(200, b"hello")] * 3
        assert requests[side.prefix] == 2
    lengths = [r.get("Content-Length") for r in h.replies[server.url(h.prefix)]]
    assert lengths == ["5", "5", "5"]
    assert h.cache_status("", url=server.url(h.prefix))[1:] == ["fwd=stale fwd-status=304", "hit"]
    lengths = [r.get("Content-Length") for r in s.replies[server.url(s.prefix)]]
    assert lengths == ["5", "999", "999"]
    assert await s.logged("", url=server.url(s.prefix)) == [
        "TCP_MISS/200",
        "TCP_REFRESH_UNMODIFIED/200",
        "TCP_MEM_HIT/200",
    ]


# -- 11. invalidation by unsafe methods --------------------------------------------------------


async def test_post_and_put_location_invalidate(pair: Pair) -> None:
    """RFC 9111 4.4: a non-error response to an unsafe method invalidates the target URI,
    and the same-origin URI in its Location."""

    async def script(side: Side) -> None:
        side.serve("/g", Resource({"Cache-Control": "max-age=60"}))
        await side.get("/g")
        await side.get("/g")
        await side.request("POST", "/g", body=b"form")
        await side.get("/g")
        side.serve("/created", Resource({"Cache-Control": "max-age=60"}))
        side.serve("/collection", Resource({"Location": side.url("/created")}, status=201))
        await side.get("/created")
        await side.get("/created")
        await side.request("PUT", "/collection", body=b"item")
        await side.get("/created")

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/g") == [(200, b"v1"), (200, b"v1"), (200, b"v2"), (200, b"v3")]
        assert side.resources["/g"].methods() == ["GET", "POST", "GET"]
        assert side.seen("/created") == [(200, b"v1"), (200, b"v1"), (200, b"v2")]
        assert side.seen("/collection") == [(201, b"v1")]
    assert h.cache_status("/g")[3] == "fwd=uri-miss fwd-status=200 stored"
    assert await s.logged("/g") == ["TCP_MISS/200", "TCP_MEM_HIT/200"] + ["TCP_MISS/200"] * 2
    assert (await s.logged("/created"))[2] == "TCP_MISS/200"


# -- 12. the origin is down; 13. 5xx on revalidation ------------------------------------------
#
# Every stored response here arrives 10 s old (Age: 10) with max-age=0, so it is 10 s stale
# at once in every cache, whatever its clock's resolution. Besides the module's Squid, these
# run against a Squid with the refresh_pattern lines of Debian's stock configuration
# (``stock``), because that decides what Squid does when validation fails.

FAILURE_CASES = {
    "/plain": "max-age=0",
    "/stale-if-error": "max-age=0, stale-if-error=60",
    "/must-revalidate": "max-age=0, must-revalidate, stale-if-error=60",
}


def failing(cc: str) -> Resource:
    return Resource({"Cache-Control": cc, "Age": "10"}, etag='"d"')


async def test_origin_down(trio: Pair) -> None:
    """RFC 9111 5.2.2.2: a stale must-revalidate response is never served; when the origin
    cannot be reached the cache answers with an error (504 suggested). RFC 9111 4.2.4: a
    disconnected cache may serve a stale response; RFC 5861 4: stale-if-error allows it.

    Harvest: 502 for must-revalidate, the stale copy otherwise (within cache.max_stale).
    Squid 5.7 without refresh_pattern lines: 504 for all three, stale-if-error or not; with
    Debian's stock refresh_pattern lines: like Harvest, but 504 instead of 502."""
    down = Origin()
    await down.start()
    try:

        async def store(side: Side) -> None:
            for path, cc in FAILURE_CASES.items():
                down.route(side.prefix + path, failing(cc))
                await side.request("GET", path, url=down.url(side.prefix + path))

        await trio.run(store)
    finally:
        await down.stop()  # connections to its port are refused from now on

    async def script(side: Side) -> None:
        for path in FAILURE_CASES:
            await side.request("GET", path, url=down.url(side.prefix + path))

    h, s = await trio.run(script)
    stock = trio.stock
    assert stock is not None

    def url(side: Side, path: str) -> str:
        return down.url(side.prefix + path)

    def second(side: Side, path: str) -> tuple[int, bytes]:
        return side.seen(path, url=url(side, path))[1]

    for side in (h, s, stock):
        for path in FAILURE_CASES:
            assert side.seen(path, url=url(side, path))[0] == (200, b"v1")
    assert second(h, "/plain") == second(h, "/stale-if-error") == (200, b"v1")
    assert second(h, "/must-revalidate")[0] == 502
    assert h.cache_status("", url=url(h, "/plain"))[1] == "fwd=stale"
    assert h.cache_status("", url=url(h, "/must-revalidate"))[1] == (
        "fwd=miss detail=connect_refused"
    )
    for path in FAILURE_CASES:
        assert second(s, path)[0] == 504, path
        error = s.replies[url(s, path)][1].get("X-Squid-Error")
        assert error == "ERR_CONNECT_FAIL 111", error  # errno 111: connection refused
        codes = await s.logged(path, url=url(s, path))
        assert codes == ["TCP_MISS/200", "TCP_REFRESH_FAIL_ERR/504"], path
    assert second(stock, "/plain") == second(stock, "/stale-if-error") == (200, b"v1")
    assert second(stock, "/must-revalidate")[0] == 504
    assert (await stock.logged("", url=url(stock, "/plain")))[1] == "TCP_REFRESH_FAIL_OLD/200"
    codes = await stock.logged("", url=url(stock, "/must-revalidate"))
    assert codes[1] == "TCP_REFRESH_FAIL_ERR/504"


async def test_5xx_on_revalidation(trio: Pair) -> None:
    """RFC 5861 4: stale-if-error lets a cache serve the stale copy when validation gets a
    5xx; must-revalidate still forbids it. Without stale-if-error, RFC 9111 4.3.3 lets a
    cache either forward the 5xx or act as if the origin had not answered (and then serve
    stale as a disconnected cache may, 4.2.4).

    Harvest forwards the 503 unless stale-if-error covers the staleness. Squid 5.7 without
    refresh_pattern lines forwards the 503 in all three cases (stale-if-error ignored); with
    Debian's stock lines it serves the stale copy unless must-revalidate forbids it."""

    async def script(side: Side) -> None:
        for path, cc in FAILURE_CASES.items():
            side.serve(path, failing(cc))
            await side.get(path)
        for path in FAILURE_CASES:
            side.resources[path].fail = 503
            await side.get(path)

    h, s = await trio.run(script)
    stock = trio.stock
    assert stock is not None
    for side in (h, s, stock):
        assert all(side.calls(path) == 2 for path in FAILURE_CASES), side.name
        assert all(side.resources[path].conditional == 1 for path in FAILURE_CASES)
        assert side.seen("/must-revalidate")[1] == (503, b"failure 503")
    assert h.seen("/plain")[1] == (503, b"failure 503")
    assert h.seen("/stale-if-error")[1] == (200, b"v1")
    assert h.cache_status("/stale-if-error")[1] == "fwd=stale fwd-status=503"
    assert h.cache_status("/plain")[1] == "fwd=stale fwd-status=503"
    assert s.seen("/plain")[1] == s.seen("/stale-if-error")[1] == (503, b"failure 503")
    for path in FAILURE_CASES:
        assert (await s.logged(path))[1] == "TCP_REFRESH_FAIL_ERR/503"
    assert stock.seen("/plain")[1] == stock.seen("/stale-if-error")[1] == (200, b"v1")
    assert (await stock.logged("/plain"))[1] == "TCP_REFRESH_FAIL_OLD/200"
    assert (await stock.logged("/must-revalidate"))[1] == "TCP_REFRESH_FAIL_ERR/503"


async def test_stale_while_revalidate(pair: Pair) -> None:
    """RFC 5861 3: within the window a stale response may be served at once while it is
    revalidated in the background. Harvest does; Squid 5.7 ignores the directive and
    revalidates before answering."""

    async def script(side: Side) -> None:
        cc = "max-age=0, stale-while-revalidate=30"
        resource = side.serve("/swr", Resource({"Cache-Control": cc, "ETag": '"w"'}))
        await side.get("/swr")
        await side.get("/swr")
        await wait_until(lambda: resource.calls >= 2)
        await asyncio.sleep(1.0)  # the background revalidation stores its response
        await side.get("/swr")
        await wait_until(lambda: resource.calls >= 3)

    h, s = await pair.run(script)
    assert h.seen("/swr") == [(200, b"v1"), (200, b"v1"), (200, b"v2")]
    assert h.cache_status("/swr")[1:] == ["hit", "hit"]
    assert harvest_ttl(h.replies[h.url("/swr")][1]) <= 0
    assert s.seen("/swr") == [(200, b"v1"), (200, b"v2"), (200, b"v3")]
    assert h.calls("/swr") == s.calls("/swr") == 3
    assert (await s.logged("/swr"))[1:] == ["TCP_REFRESH_MODIFIED/200"] * 2


# -- 14. request directives --------------------------------------------------------------------


async def test_max_stale_min_fresh_and_only_if_cached(pair: Pair) -> None:
    """RFC 9111 5.2.1.2: max-stale lets a stale response be served; 5.2.1.3: min-fresh
    demands that much freshness left; 5.2.1.7: only-if-cached with nothing stored is 504."""

    async def script(side: Side) -> None:
        side.serve("/stale", Resource({"Cache-Control": "max-age=0"}, etag='"m"'))
        await side.get("/stale")
        await side.get("/stale", ("Cache-Control", "max-stale=60"))
        side.serve("/fresh", Resource({"Cache-Control": "max-age=60"}, etag='"f"'))
        await side.get("/fresh")
        await side.get("/fresh", ("Cache-Control", "min-fresh=10"))
        await side.get("/fresh", ("Cache-Control", "min-fresh=120"))
        side.serve("/never", Resource({"Cache-Control": "max-age=60"}))
        await side.get("/never", ("Cache-Control", "only-if-cached"))

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/stale") == [(200, b"v1")] * 2
        assert side.calls("/stale") == 1
        assert side.seen("/fresh") == [(200, b"v1")] * 3
        assert (side.calls("/fresh"), side.resources["/fresh"].conditional) == (2, 1)
        assert side.seen("/never")[0][0] == 504
        assert side.calls("/never") == 0
    assert h.cache_status("/stale")[1] == "hit"
    # (fresh, but min-fresh refused it: the request's semantics, RFC 9211 2.2)
    assert h.cache_status("/fresh")[1:] == ["hit", "fwd=request fwd-status=304"]
    assert h.cache_status("/never") == ["detail=only-if-cached"]
    assert (await s.logged("/stale"))[1] == "TCP_MEM_HIT/200"
    assert (await s.logged("/fresh"))[1:] == ["TCP_MEM_HIT/200", "TCP_REFRESH_UNMODIFIED/200"]
    assert await s.logged("/never") == ["TCP_MISS/504"]


# -- 15. Pragma --------------------------------------------------------------------------------


async def test_pragma_no_cache_counts_only_without_cache_control(pair: Pair) -> None:
    """RFC 9111 5.4: without Cache-Control in the request, Pragma: no-cache is no-cache;
    with Cache-Control, Pragma is ignored."""

    async def script(side: Side) -> None:
        side.serve("/pr", Resource({"Cache-Control": "max-age=60"}, etag='"p"'))
        await side.get("/pr")
        await side.get("/pr", ("Pragma", "no-cache"))
        await side.get("/pr", ("Pragma", "no-cache"), ("Cache-Control", "max-age=3600"))

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/pr") == [(200, b"v1"), (200, b"v2"), (200, b"v2")]
        assert (side.calls("/pr"), side.resources["/pr"].conditional) == (2, 0)
    assert h.cache_status("/pr")[1:] == ["fwd=request fwd-status=200 stored", "hit"]
    assert await s.logged("/pr") == ["TCP_MISS/200"] * 2 + ["TCP_MEM_HIT/200"]


# -- 16. unusual statuses ----------------------------------------------------------------------


async def test_unusual_statuses(pair: Pair) -> None:
    """RFC 9111 3: a final status with explicit freshness may be stored, understood or not
    (must-understand is how an origin asks for less); RFC 9110 15: a status outside 100..599
    is invalid, to be treated as a 5xx. Harvest stores 299 and 599 (policy.storable takes
    200..599 but 206 and 304) and passes 999 on unstored; Squid 5.7 stores neither 299 nor
    599 and answers 999 with its own 502."""
    statuses = (299, 599, 999)

    async def script(side: Side) -> None:
        for status in statuses:
            side.serve(f"/{status}", Resource({"Cache-Control": "max-age=60"}, status=status))
            for _ in range(2):
                await side.get(f"/{status}")

    h, s = await pair.run(script)
    assert h.seen("/299") == [(299, b"v1")] * 2
    assert h.seen("/599") == [(599, b"v1")] * 2
    assert h.seen("/999") == [(999, b"v1"), (999, b"v2")]
    assert h.cache_status("/999") == ["fwd=uri-miss fwd-status=999"] * 2
    assert s.seen("/299") == [(299, b"v1"), (299, b"v2")]
    assert s.seen("/599") == [(599, b"v1"), (599, b"v2")]
    assert [status for status, _ in s.seen("/999")] == [502, 502]
    for status in statuses:
        assert h.calls(f"/{status}") == (2 if status == 999 else 1)
        assert s.calls(f"/{status}") == 2
    assert await s.logged("/999") == ["TCP_MISS/502"] * 2


# -- 17. Age -----------------------------------------------------------------------------------


async def test_age_from_the_origin_counts(pair: Pair) -> None:
    """RFC 9111 4.2.3, 5.1: the Age the origin sends is part of the response's age, so the
    cached response's Age is at least that, and it goes stale that much earlier."""

    async def script(side: Side) -> None:
        side.serve("/a200", Resource({"Cache-Control": "max-age=200", "Age": "100"}))
        side.serve("/a102", Resource({"Cache-Control": "max-age=102", "Age": "100"}))
        for path in ("/a200", "/a200", "/a102", "/a102"):
            await side.get(path)
        await asyncio.sleep(2.1)  # 102 - 100 s of freshness left: now stale
        await side.get("/a102")

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/a200") == [(200, b"v1")] * 2
        age = side.field("/a200", "Age")[1]
        assert age is not None
        assert 100 <= int(age) <= 105, (side.name, age)
        assert side.seen("/a102") == [(200, b"v1"), (200, b"v1"), (200, b"v2")]
        assert side.calls("/a102") == 2
    assert h.cache_status("/a102")[1:] == ["hit", "fwd=stale fwd-status=200 stored"]
    assert (await s.logged("/a102"))[1] == "TCP_MEM_HIT/200"


# -- 18. HEAD ----------------------------------------------------------------------------------


async def test_head_from_a_stored_get_and_head_invalidating_it(pair: Pair) -> None:
    """RFC 9110 9.3.2: a HEAD may be answered from a stored GET response. RFC 9111 4.3.5: a
    200 to a HEAD the cache forwards, whose ETag differs from the stored GET response's,
    makes that stale. Both behave so; Squid turns the HEAD into a conditional one on the
    stored response's ETag, Harvest forwards it as the client sent it."""

    async def script(side: Side) -> None:
        side.serve("/h", Resource({"Cache-Control": "max-age=60"}, etag='"h1"'))
        await side.get("/h")
        await side.request("HEAD", "/h")
        changed = side.serve("/i", Resource({"Cache-Control": "max-age=60"}, etag='"i1"'))
        await side.get("/i")
        changed.etag = '"i2"'
        await side.request("HEAD", "/i", [("Cache-Control", "max-age=0")])
        await side.get("/i")

    h, s = await pair.run(script)
    for side in (h, s):
        assert side.seen("/h") == [(200, b"v1"), (200, b"")]
        assert side.resources["/h"].methods() == ["GET"]
        head = side.replies[side.url("/h")][1]
        assert (head.get("ETag"), head.get("Content-Length")) == ('"h1"', "2")
        assert side.seen("/i") == [(200, b"v1"), (200, b""), (200, b"v3")]
        assert side.resources["/i"].methods() == ["GET", "HEAD", "GET"]
        assert side.field("/i", "ETag") == ['"i1"', '"i2"', '"i2"']

    def if_none_match(side: Side) -> list[str | None]:
        return [fields.get("If-None-Match") for _, fields in side.resources["/i"].seen]

    assert if_none_match(s) == [None, '"i1"', None]
    assert if_none_match(h) == [None, None, None]
    assert h.cache_status("/h")[1] == "hit"
    assert h.cache_status("/i")[2] == "fwd=uri-miss fwd-status=200 stored"
    assert (await s.logged("/h"))[1] == "TCP_MEM_HIT/200"
    assert (await s.logged("/i"))[2] == "TCP_MISS/200"
