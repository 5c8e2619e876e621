"""Range requests answered from a complete stored object (RFC 9110 14), from either tier.

The origin serves a 64 KiB body once; every ranged request after that is answered from the
store: from memory bytes, or from the disk tier's file when the object is too big for the
memory tier (the test sets that limit to 16 KiB).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import pytest
from aiohttp import web

from harvest_cache.server.app import CacheServer
from tests.support import MakeCache, Origin, ProxyClient, proxy_client, stop_and_read_log

BODY = b"".join(hashlib.sha256(b"%d" % i).digest() for i in range(2048))  # 64 KiB
ETAG = '"range-test-1"'
LAST_MODIFIED = "Sat, 01 Jan 2000 00:00:00 GMT"


class Stored(NamedTuple):
    cache: CacheServer
    url: str
    tier: str


@pytest.fixture(params=["memory", "disk"])
async def stored(request: pytest.FixtureRequest, origin: Origin, make_cache: MakeCache) -> Stored:
    """BODY, fetched once through a cache that keeps it in the given tier."""

    async def handler(req: web.Request) -> web.Response:
        headers = {
            "Cache-Control": "max-age=3600",
            "ETag": ETAG,
            "Last-Modified": LAST_MODIFIED,
            "Content-Type": "application/octet-stream",
        }
        return web.Response(body=BODY, headers=headers)

    origin.route("/obj", handler)
    limit = 1024 if request.param == "memory" else 16
    cache = await make_cache(cache={"memory_max_object_kb": limit})
    url = origin.url("/obj")
    async with proxy_client(cache) as client:
        resp, body = await client.get(url)
        assert body == BODY
        resp, body = await client.get(url)
        assert "hit" in resp.headers["Cache-Status"], "the object was not stored"
    return Stored(cache, url, request.param)


async def ranged(
    stored: Stored, headers: dict[str, str], method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    async with proxy_client(stored.cache) as client:
        resp, body = await client.request(method, stored.url, headers=headers)
        return resp.status, dict(resp.headers), body


async def test_s14_1_2_single_range_is_a_206_from_the_store(stored: Stored, origin: Origin) -> None:
    status, headers, body = await ranged(stored, {"Range": "bytes=100-1099"})
    assert status == 206
    assert headers["Content-Range"] == f"bytes 100-1099/{len(BODY)}"
    assert headers["Content-Length"] == "1000"
    assert body == BODY[100:1100]
    assert "hit" in headers["Cache-Status"]
    assert origin.hits["/obj"] == 1


@pytest.mark.parametrize(
    ("value", "first", "last"),
    [
        ("bytes=-500", len(BODY) - 500, len(BODY) - 1),  # suffix
        ("bytes=65000-", 65000, len(BODY) - 1),  # open end
        ("bytes=0-999999", 0, len(BODY) - 1),  # last-pos past the end is clipped
        ("Bytes=7-7", 7, 7),  # the unit is case-insensitive
    ],
)
async def test_s14_1_2_range_forms_are_resolved_against_the_length(
    stored: Stored, value: str, first: int, last: int
) -> None:
    status, headers, body = await ranged(stored, {"Range": value})
    assert status == 206
    assert headers["Content-Range"] == f"bytes {first}-{last}/{len(BODY)}"
    assert body == BODY[first : last + 1]


async def test_s14_6_several_ranges_are_a_multipart_byteranges_body(stored: Stored) -> None:
    wanted = [(0, 99), (5000, 5099), (len(BODY) - 10, len(BODY) - 1)]
    spec = ",".join(f"{a}-{b}" for a, b in wanted)
    status, headers, body = await ranged(stored, {"Range": f"bytes={spec}"})
    assert status == 206
    assert "Content-Range" not in headers
    media, _, param = headers["Content-Type"].partition(";")
    assert media == "multipart/byteranges"
    boundary = param.strip().removeprefix("boundary=")
    assert boundary
    assert int(headers["Content-Length"]) == len(body)
    parts = body.split(b"--" + boundary.encode())
    assert parts[0] in (b"", b"\r\n")
    assert parts[-1].startswith(b"--")  # the closing delimiter
    got = []
    for part in parts[1:-1]:
        head, _, data = part.partition(b"\r\n\r\n")
        fields = dict(line.split(": ", 1) for line in head.decode().split("\r\n") if ": " in line)
        assert fields["Content-Type"] == "application/octet-stream"
        first, last = map(int, fields["Content-Range"].split()[1].split("/")[0].split("-"))
        assert data.removesuffix(b"\r\n") == BODY[first : last + 1]
        got.append((first, last))
    assert got == wanted


async def test_s14_1_2_unsatisfiable_range_is_416_with_the_length(stored: Stored) -> None:
    status, headers, body = await ranged(stored, {"Range": "bytes=70000-"})
    assert status == 416
    assert headers["Content-Range"] == f"bytes */{len(BODY)}"
    assert body == b""


@pytest.mark.parametrize(
    ("if_range", "partial"),
    [
        (ETAG, True),
        ('"some-other-tag"', False),
        (f"W/{ETAG}", False),  # a weak tag never matches (strong comparison)
        (LAST_MODIFIED, True),
        ("Sun, 02 Jan 2000 00:00:00 GMT", False),
    ],
)
async def test_s13_1_5_if_range_decides_between_206_and_200(
    stored: Stored, if_range: str, partial: bool
) -> None:
    headers = {"Range": "bytes=10-19", "If-Range": if_range}
    status, _, body = await ranged(stored, headers)
    if partial:
        assert (status, body) == (206, BODY[10:20])
    else:
        assert (status, body) == (200, BODY)


async def test_s15_3_7_a_206_answering_if_range_leaves_out_representation_fields(
    stored: Stored,
) -> None:
    """The client has them from the response it validated; the fields a 206 must carry
    whenever a 200 would (Date, Cache-Control, ETag...) are still there."""
    _, plain_fields, _ = await ranged(stored, {"Range": "bytes=10-19"})
    status, fields, body = await ranged(stored, {"Range": "bytes=10-19", "If-Range": ETAG})
    plain = {name.lower(): value for name, value in plain_fields.items()}
    headers = {name.lower(): value for name, value in fields.items()}
    assert (status, body) == (206, BODY[10:20])
    assert "content-type" in plain  # (without If-Range, all the stored fields)
    assert "last-modified" in plain
    assert "content-type" not in headers
    assert "last-modified" not in headers
    assert headers["etag"] == ETAG
    assert "date" in headers
    assert "cache-control" in headers
    assert headers["content-range"] == f"bytes 10-19/{len(BODY)}"


@pytest.mark.parametrize("value", ["bytes=5-2", "items=0-10", "bytes=abc", "bytes="])
async def test_s14_2_invalid_range_is_ignored(stored: Stored, value: str) -> None:
    status, headers, body = await ranged(stored, {"Range": value})
    assert (status, body) == (200, BODY)
    assert "Content-Range" not in headers


async def test_s14_2_head_ignores_range(stored: Stored) -> None:
    status, headers, body = await ranged(stored, {"Range": "bytes=0-9"}, "HEAD")
    assert status == 200
    assert headers["Content-Length"] == str(len(BODY))
    assert body == b""


async def test_partial_answers_are_logged_as_hits_with_their_status(stored: Stored) -> None:
    await ranged(stored, {"Range": "bytes=0-9"})
    await ranged(stored, {"Range": "bytes=90000-"})
    lines = await stop_and_read_log(stored.cache)
    tail = [(line.result, line.status) for line in lines[-2:]]
    hit = "TCP_MEM_HIT" if stored.tier == "memory" else "TCP_HIT"
    assert tail == [(hit, 206), (hit, 416)]


async def test_stale_object_with_range_goes_to_the_origin(
    origin: Origin, client: ProxyClient
) -> None:
    async def handler(req: web.Request) -> web.Response:
        if req.headers.get("Range") == "bytes=0-3":
            return web.Response(
                status=206,
                body=BODY[:4],
                headers={"Content-Range": f"bytes 0-3/{len(BODY)}", "Cache-Control": "max-age=0"},
            )
        return web.Response(body=BODY, headers={"Cache-Control": "max-age=0", "ETag": ETAG})

    origin.route("/stale", handler)
    await client.get(origin.url("/stale"))
    resp, body = await client.get(origin.url("/stale"), headers={"Range": "bytes=0-3"})
    assert (resp.status, body) == (206, BODY[:4])
    assert origin.hits["/stale"] == 2
