"""Prepared answers are the general path's answers: random responses, asked for again and
again by random plain requests, through a cache whose fast paths answer (prepared hits,
revalidation and miss plans, fetches worked out in full) and through one that takes the
general path for everything. Every answer must have the same status, the same fields in the
same order for each name (Date aside, Age within a second), the same body, and the same
access-log code.

The second cache is the first's equal but for its way in: its ``try_answer`` answers
nothing, so every request is parsed whole and handled by ``Proxy.handle``.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvest_cache.server.app import CacheServer
from harvest_cache.server.connection import Answered
from tests.support import (
    Handler,
    MakeCache,
    Origin,
    RawResponse,
    open_proxy,
    read_response,
    request_bytes,
    stop_and_read_log,
)

EXAMPLES = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# What varies in a response (each example a new URL, so nothing carries over).
CACHE_CONTROLS = [
    "max-age=600",
    "max-age=0",
    "no-cache",
    "s-maxage=600, max-age=0",
    "max-age=600, must-revalidate",
    "public, max-age=0",
    "max-age=1",
    None,
]
# Plain requests: no field that calls for the full policy.
REQUEST_FIELDS = [
    (),
    (("Accept", "*/*"),),
    (("User-Agent", "equivalence/1"), ("Accept", "text/html")),
    (("Accept-Language", "en"), ("Accept-Encoding", "identity")),
]


@dataclass(frozen=True)
class Scripted:
    """One origin resource: its response fields and body; a matching If-None-Match gets a
    304 (with ``extra_304`` fields)."""

    cache_control: str | None
    etag: str | None
    last_modified: bool
    content_type: str
    body: bytes
    extra_304: tuple[tuple[str, str], ...]


responses = st.builds(
    Scripted,
    cache_control=st.sampled_from(CACHE_CONTROLS),
    etag=st.sampled_from([None, '"v1"', 'W/"w1"']),
    last_modified=st.booleans(),
    content_type=st.sampled_from(["text/plain", "text/html; charset=utf-8"]),
    body=st.binary(min_size=0, max_size=3000),
    extra_304=st.sampled_from([(), (("X-Refreshed", "yes"),)]),
)
LAST_MODIFIED = "Sat, 01 Jan 2022 00:00:00 GMT"


def handler(scripted: Scripted) -> Handler:
    async def answer(request: web.Request) -> web.Response:
        fields: list[tuple[str, str]] = [("Content-Type", scripted.content_type)]
        if scripted.cache_control is not None:
            fields.append(("Cache-Control", scripted.cache_control))
        if scripted.etag is not None:
            fields.append(("ETag", scripted.etag))
        if scripted.last_modified:
            fields.append(("Last-Modified", LAST_MODIFIED))
        asked = request.headers.get("If-None-Match")
        if asked is not None and scripted.etag is not None and scripted.etag in asked:
            kept = [(n, v) for n, v in fields if n != "Content-Type"]
            return web.Response(status=304, headers=[*kept, *scripted.extra_304])
        return web.Response(body=scripted.body, headers=fields)

    return answer


async def pair(make_cache: MakeCache, tmp_path: Path, log: bool) -> tuple[CacheServer, CacheServer]:
    """Two caches alike but for their stores and logs; the second takes no fast path. (In
    memory only: the miss fast path, and so the miss plans, are for memory-only caches.)"""
    made = []
    for name in ("fast", "general"):
        access_log = str(tmp_path / f"{name}.log") if log else "none"
        made.append(
            await make_cache(
                cache={"dir": str(tmp_path / name), "disk_mb": 0}, log={"access_log": access_log}
            )
        )
    fast, general = made
    assert general.proxy is not None
    general.proxy.try_answer = lambda conn, head, parsed: Answered.NO  # type: ignore[method-assign]
    return fast, general


@pytest.fixture
async def caches(make_cache: MakeCache, tmp_path: Path) -> tuple[CacheServer, CacheServer]:
    return await pair(make_cache, tmp_path, log=False)


_TTL = re.compile(r"; ttl=-?\d+")
_NUMBERS = itertools.count()


def comparable(resp: RawResponse) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, fields and body, as they mean: fields in order within each name (the order
    of different names means nothing, RFC 9110 5.3), Date and Age left out, Cache-Status
    without its ttl."""
    fields = [
        (n, _TTL.sub("", v) if n == "Cache-Status" else v)
        for n, v in resp.fields
        if n not in ("Date", "Age")
    ]
    return resp.status, sorted(fields, key=lambda field: field[0].lower()), resp.body


def age(resp: RawResponse) -> int | None:
    value = resp.get("Age")
    return int(value) if value is not None else None


async def ask(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    method: str,
    url: str,
    fields: tuple[tuple[str, str], ...],
) -> RawResponse:
    writer.write(request_bytes(method, url, headers=list(fields)))
    return await read_response(reader, method=method)


@EXAMPLES
@given(
    scripted=responses,
    fields=st.sampled_from(REQUEST_FIELDS),
    methods=st.lists(st.sampled_from(["GET", "GET", "GET", "HEAD"]), min_size=3, max_size=5),
    paths=st.integers(1, 3),
)
async def test_prepared_answers_are_the_general_paths(
    origin: Origin,
    caches: tuple[CacheServer, CacheServer],
    scripted: Scripted,
    fields: tuple[tuple[str, str], ...],
    methods: list[str],
    paths: int,
) -> None:
    number = next(_NUMBERS)
    # ``paths`` URLs of one origin asked the same way (miss plans), each asked ``methods``.
    urls = []
    for n in range(paths):
        path = f"/eq/{number}/{n}"
        origin.route(path, handler(scripted))
        urls.append(origin.url(path))
    connections = [await open_proxy(cache.address[1]) for cache in caches]
    try:
        for url in urls:
            for method in methods:
                fast, general = [await ask(r, w, method, url, fields) for r, w in connections]
                assert comparable(fast) == comparable(general), (method, url, scripted)
                ages = age(fast), age(general)
                assert ages[0] == ages[1] or (
                    None not in ages and abs(ages[0] - ages[1]) <= 1  # type: ignore[operator]
                ), ages
    finally:
        for _, writer in connections:
            writer.close()


async def test_and_the_access_log_codes_are_the_same(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    """The log codes of one sequence of each kind (hits, revalidations, misses), line by
    line."""
    fast, general = await pair(make_cache, tmp_path, log=True)
    kinds = {
        "hit": Scripted("max-age=600", '"h"', False, "text/plain", b"hit", ()),
        "reval": Scripted("max-age=0", '"r"', True, "text/plain", b"reval", ()),
        "miss": Scripted("max-age=600", None, True, "text/plain", b"miss", ()),
    }
    urls = []
    for kind, scripted in kinds.items():
        for n in range(3):
            origin.route(f"/log/{kind}/{n}", handler(scripted))
            urls.append(origin.url(f"/log/{kind}/{n}"))
    connections = [await open_proxy(cache.address[1]) for cache in (fast, general)]
    try:
        for url in urls:
            for _ in range(3):
                for reader, writer in connections:
                    await ask(reader, writer, "GET", url, (("Accept", "*/*"),))
    finally:
        for _, writer in connections:
            writer.close()
    fast_log, general_log = await stop_and_read_log(fast), await stop_and_read_log(general)
    assert [(line.url, line.result, line.status) for line in fast_log] == [
        (line.url, line.result, line.status) for line in general_log
    ]
    # (the fast cache did take its fast paths)
    assert fast.proxy is not None
    assert fast.proxy.fast.planned >= 1
    assert fast.proxy.fast.planned_misses >= 1
    assert fast.proxy.hot_entries >= 1
