"""End to end: raw, malformed and hostile request heads sent to a running cache over loopback.

For every generated request the cache must answer with a well-formed status line or close the
connection, within a bounded time; it must stay up (a normal request is served next); it must
log nothing at ERROR level; and a stored object must stay intact (served from the cache, body
unchanged).

Hypothesis drives an ``async def`` test: pytest-asyncio (1.x, asyncio_mode=auto) recognises
``@given`` on a coroutine function and runs each example on the test's event loop (uvloop,
from tests/conftest.py), so one cache and one origin serve all the examples of a test. The
function-scoped fixtures are therefore shared by the examples, on purpose: the health check
that warns about that is suppressed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harvest_cache.server.app import CacheServer
from tests.fuzz.origin import STORED_BODY, FuzzOrigin
from tests.fuzz.strategies import (
    FUZZ,
    http_dates,
    numerals,
    soup,
    weighted,
)

pytestmark = pytest.mark.usefixtures("no_blocking_calls")

MakeCache = Callable[..., Awaitable[CacheServer]]

# Answers and closes must come within this many seconds (the cache's own timeouts are 0.5 s).
WITHIN = 5.0

E2E = settings(
    FUZZ,
    max_examples=400,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


@dataclass(frozen=True)
class Setup:
    cache: CacheServer
    origin: FuzzOrigin
    stored_hits: int

    @property
    def port(self) -> int:
        return self.cache.address[1]


@pytest.fixture
async def fuzz_setup(make_cache: MakeCache, fuzz_origin: FuzzOrigin) -> Setup:
    cache = await make_cache(
        server={"idle_timeout": 0.5, "header_timeout": 0.5},
        upstream={"connect_timeout": 1.0, "read_timeout": 2.0},
    )
    for _ in range(3):  # stored by the first; the others are hits
        status, body = await get_stored(cache.address[1], fuzz_origin)
        assert (status, body) == (200, STORED_BODY)
    return Setup(cache, fuzz_origin, fuzz_origin.hits["/stored"])


# -- talking to the cache ------------------------------------------------------------------------


async def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` and half-close; everything the cache sends until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    out = bytearray()
    try:
        with contextlib.suppress(OSError):  # the cache may refuse before reading it all
            writer.write(data)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        try:
            async with asyncio.timeout(WITHIN):
                while chunk := await reader.read(65536):
                    out += chunk
        except ConnectionResetError:
            pass
        except TimeoutError:
            raise AssertionError(
                f"no close within {WITHIN}s; received {bytes(out[:200])!r}"
            ) from None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return bytes(out)


async def get_stored(port: int, origin: FuzzOrigin) -> tuple[int, bytes]:
    request = (
        f"GET {origin.url('/stored')} HTTP/1.1\r\nHost: {origin.authority()}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    raw = await exchange(port, request)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = re.search(rb"(?im)^content-length: *([0-9]+)\r?$", head)
    assert length is not None, head
    assert len(body) == int(length[1]), head
    return status, body


_STATUS_LINE = re.compile(rb"HTTP/1\.[01] [1-5][0-9][0-9] [^\r\n]*\r\n")


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged at ERROR or above, by any logger (harvest_cache's own, and asyncio's
    for an exception that escaped a protocol callback)."""
    return [
        f"{r.name}: {r.getMessage()}" + (f" {r.exc_info[1]!r}" if r.exc_info else "")
        for r in caplog.records
        if r.levelno >= logging.ERROR
    ]


async def check_request(fuzz_setup: Setup, data: bytes, caplog: pytest.LogCaptureFixture) -> bytes:
    """Send one raw request and check every property; the cache's answer."""
    caplog.clear()
    answer = await exchange(fuzz_setup.port, data)
    if answer:
        assert _STATUS_LINE.match(answer), answer[:200]
    # Still up, and the stored object intact and still a hit.
    assert await get_stored(fuzz_setup.port, fuzz_setup.origin) == (200, STORED_BODY)
    assert fuzz_setup.origin.hits["/stored"] == fuzz_setup.stored_hits
    assert errors(caplog) == []
    return answer


# -- what the fuzzer sends -----------------------------------------------------------------------

_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "CONNECT"]
methods = weighted(
    (6, st.sampled_from(_METHODS)),
    (1, st.sampled_from(["get", "PURGE", "G ET", "", "GET\x00", "M-SEARCH", "X" * 40])),
    (1, st.binary(min_size=1, max_size=8).map(lambda b: b.decode("latin-1"))),
)

_PATHS = ["/f/a", "/f/b", "/f/nc", "/f/a?q=1", "/f/"]
# Targets are templates: {o} becomes the origin's host:port when the request is rendered.
targets = weighted(
    (8, st.sampled_from([f"http://{{o}}{p}" for p in _PATHS])),
    (
        2,
        soup("/", "?", "%", "%00", "..", "#", "a", "\u00e9", max_size=6).map(
            lambda p: "http://{o}/f/" + p
        ),
    ),
    (
        2,
        st.sampled_from(
            [
                "HTTP://{o}/f/a",
                "http://{o}",
                "http://{o}?x",
                "/f/a",
                "*",
                "{o}",
                "127.0.0.1:443",
                "http://127.0.0.1:1/f/a",
                "http://127.0.0.1:0/",
                "http://127.0.0.1:99999/",
                "http://[::1]:1/",
                "https://{o}/f/a",
                "ftp://{o}/",
                "http://u:p@{o}/f/a",
                "http:///f/a",
                "http://{o}/f/a#frag",
                "http://{o}/" + "a" * 9000,
            ]
        ),
    ),
    (1, st.binary(max_size=12).map(lambda b: b.decode("latin-1"))),
)
versions = weighted(
    (8, st.just("HTTP/1.1")),
    (
        2,
        st.sampled_from(
            ["HTTP/1.0", "HTTP/2.0", "HTTP/0.9", "HTTP/1.x", "http/1.1", "", "HTTP/01.1"]
        ),
    ),
)

_FIELD_NAMES = [
    "Host",
    "Content-Length",
    "Transfer-Encoding",
    "Connection",
    "Proxy-Connection",
    "Keep-Alive",
    "TE",
    "Upgrade",
    "Expect",
    "Cache-Control",
    "Pragma",
    "Range",
    "If-Range",
    "If-None-Match",
    "If-Modified-Since",
    "If-Match",
    "If-Unmodified-Since",
    "Max-Forwards",
    "Via",
    "X-Forwarded-For",
    "Accept-Encoding",
    "Authorization",
    "Cookie",
    "Date",
]
_VALUES = {
    "content-length": ["0", "5", "-1", "5, 5", "5, 6", "00", "1" * 30, " 3", "0x10", "\xb2"],
    "transfer-encoding": [
        "chunked",
        "Chunked",
        "gzip, chunked",
        "chunked, chunked",
        "chunked, gzip",
        "identity",
        " chunked",
        "chunked\x0b",
    ],
    "connection": ["close", "keep-alive", "Upgrade", "x-a, close", "te, host"],
    "expect": ["100-continue", "100-Continue", "200-ok"],
    "cache-control": [
        "no-cache",
        "max-age=0",
        "only-if-cached",
        "max-stale",
        "min-fresh=99999999999",
        "no-store",
        'no-cache="x"',
        "max-age=\xb9",
    ],
    "range": [
        "bytes=0-9",
        "bytes=0-1,5-6,10-",
        "bytes=-5",
        "bytes=9-0",
        "bytes=" + "9" * 5000 + "-",
        "bytes=" + ",".join(["0-0"] * 1200),
        "items=0-1",
        "bytes=0-0,2-2,4-4,6-6,8-8,10-10",
    ],
    "if-none-match": ['"f1"', 'W/"f1"', "*", '"s1", "f1"', '"', "W/"],
    "if-range": ['"f1"', 'W/"f1"', "Sun, 06 Nov 1994 08:49:37 GMT", "garbage"],
    "max-forwards": ["0", "1", "-1", "00", "9" * 30, "x"],
}


def _spellings(name: str) -> st.SearchStrategy[str]:
    return st.sampled_from([name, name.lower(), name.upper()])


def _plausible_value(name: str) -> st.SearchStrategy[str]:
    options: list[tuple[int, st.SearchStrategy[str]]] = [(1, soup(max_size=6))]
    if name.lower() in _VALUES:
        options.append((4, st.sampled_from(_VALUES[name.lower()])))
    if name.lower() in ("if-modified-since", "if-unmodified-since", "if-range", "date"):
        options.append((3, http_dates))
    if name.lower() in ("content-length", "max-forwards"):
        options.append((2, numerals))
    return weighted(*options)


_name_and_value = st.sampled_from(_FIELD_NAMES).flatmap(
    lambda n: st.tuples(_spellings(n), _plausible_value(n))
)
# What a cache answers from storage by itself: conditionals, ranges, request directives.
_cache_name_and_value = st.sampled_from(
    ["Range", "If-Range", "If-None-Match", "If-Modified-Since", "Cache-Control", "Max-Forwards"]
).flatmap(lambda n: st.tuples(_spellings(n), _plausible_value(n)))
_raw_bytes = st.binary(max_size=12).map(lambda b: b.decode("latin-1"))
fields = st.lists(
    weighted(
        (8, _name_and_value.map(lambda nv: (nv[0], ": ", nv[1]))),
        # Broken framing of a field line: odd separators, bytes the parser must refuse
        # (CR, LF, NUL, obs-fold), names that are not tokens, a value over the head limit.
        (
            2,
            st.tuples(
                weighted((3, st.sampled_from(_FIELD_NAMES)), (1, _raw_bytes)),
                st.sampled_from([":", " : ", ":\t", ": ", "", "\x00:"]),
                weighted(
                    (3, _raw_bytes),
                    (1, st.sampled_from(["a\r\n b", "a\rb", "a\nb", "a\x00b", "\x7f", "\xff"])),
                    (1, st.just("x" * 70_000)),
                ),
            ),
        ),
    ),
    max_size=8,
)
bodies = weighted(
    (4, st.just(b"")),
    (1, st.binary(max_size=20)),
    (1, st.sampled_from([b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\n", b"0\r\n\r\n", b"5\r\nhel"])),
)


@dataclass(frozen=True)
class RawRequest:
    method: str
    target: str
    version: str
    host: bool
    fields: list[tuple[str, str, str]]
    eol: str
    body: bytes
    pipelined: bool

    def render(self, origin: FuzzOrigin) -> bytes:
        authority = origin.authority()
        line = " ".join(
            p for p in (self.method, self.target.replace("{o}", authority), self.version) if p
        )
        lines = [line]
        if self.host:
            lines.append(f"Host: {authority}")
        lines += [f"{n}{sep}{v}" for n, sep, v in self.fields]
        head = (self.eol.join(lines) + self.eol + self.eol).encode("latin-1")
        data = head + self.body
        if self.pipelined:
            data += f"GET {origin.url('/f/a')} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode()
        return data


_VISIBLE = re.compile(r"[^\t\x20-\x7e\x80-\xff]")


def _clean(value: str) -> str:
    """Only the characters a field value may hold (RFC 9110 5.5), so the parser accepts it."""
    return _VISIBLE.sub("", value)


# Well-formed requests get past the parser to the cache's own logic: hits and misses with odd
# conditionals, ranges, directives, framing fields and Connection options.
well_formed = st.builds(
    RawRequest,
    method=weighted((4, st.just("GET")), (1, st.sampled_from(_METHODS[1:-1]))),
    target=weighted(
        (6, st.sampled_from([f"http://{{o}}{p}" for p in _PATHS])),
        (1, soup("/", "?", "%41", "..", "a", "=", max_size=5).map(lambda p: "http://{o}/f/" + p)),
    ).filter(lambda t: not _VISIBLE.search(t) and " " not in t and "#" not in t and t.isascii()),
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]),
    host=st.just(True),
    fields=st.lists(
        weighted((2, _cache_name_and_value), (1, _name_and_value)).map(
            lambda nv: (nv[0], ": ", _clean(nv[1]))
        ),
        max_size=6,
    ),
    eol=st.just("\r\n"),
    body=st.just(b""),
    pipelined=weighted((5, st.just(False)), (1, st.just(True))),
)
# Anything: broken request lines, field lines and framing, for the parser and the limits.
anything = st.builds(
    RawRequest,
    method=methods,
    target=targets,
    version=versions,
    host=st.booleans(),
    fields=fields,
    eol=weighted((6, st.just("\r\n")), (1, st.just("\n"))),
    body=bodies,
    pipelined=weighted((5, st.just(False)), (1, st.just(True))),
)
requests = weighted((3, well_formed), (2, anything))


@E2E
@given(raw=requests)
async def test_no_request_crashes_the_proxy_or_corrupts_the_store(
    raw: RawRequest, fuzz_setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    data = raw.render(fuzz_setup.origin)
    answer = await check_request(fuzz_setup, data, caplog)
    # (Shown by --hypothesis-show-statistics: what the cache answered.)
    event("answer " + (answer[9:12].decode("latin-1") if answer else "none, closed"))


async def test_the_harness_sees_a_normal_request_answered(
    fuzz_setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    # A sanity check of the oracle: a plain GET gets a 200 through the same checks.
    data = f"GET {fuzz_setup.origin.url('/f/a')} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    answer = await check_request(fuzz_setup, data, caplog)
    assert answer.startswith(b"HTTP/1.1 200 ")


# -- regressions: requests that once crashed the cache's handling of the connection ------------
# Each once raised ValueError with no answer to the client: the first four killed the
# connection's handler task (Max-Forwards, CONNECT's port, If-Modified-Since in year 0000); in
# the last, a stored Last-Modified in year 0000 made every later GET of the URL fail inside
# the parser callback. Each must now get an answer, with nothing logged at ERROR.


def _request(method: str, target: str, *fields: str) -> Callable[[FuzzOrigin], bytes]:
    def render(origin: FuzzOrigin) -> bytes:
        lines = [f"{method} {target.replace('{o}', origin.authority())} HTTP/1.1", "Host: x"]
        return ("\r\n".join([*lines, *fields]) + "\r\n\r\n").encode("latin-1")

    return render


REGRESSIONS = [
    pytest.param(
        _request("OPTIONS", "http://{o}/f/a", "Max-Forwards: \xb2"),
        id="isdigit-int-options-max-forwards-superscript",
    ),
    pytest.param(
        _request("TRACE", "http://{o}/f/a", "Max-Forwards: " + "9" * 4301),
        id="isdigit-int-trace-max-forwards-4301-digits",
    ),
    pytest.param(
        _request("CONNECT", "example.com:" + "4" * 4301),
        id="isdigit-int-connect-port-4301-digits",
    ),
    pytest.param(
        _request("GET", "http://{o}/f/b", "If-Modified-Since: Sun, 01 Jan 0000 00:00:00 GMT"),
        id="dates-year-0-if-modified-since",
    ),
    pytest.param(
        _request("GET", "http://{o}/y0/a"),
        id="dates-year-0-origin-last-modified",
    ),
]


@pytest.mark.parametrize("render", REGRESSIONS)
async def test_regression(
    render: Callable[[FuzzOrigin], bytes], fuzz_setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    data = render(fuzz_setup.origin)
    if data.startswith(b"GET "):
        # Stored first, so that the request is evaluated against the stored response.
        target = data.split(b" ")[1].decode()
        await check_request(fuzz_setup, _request("GET", target)(fuzz_setup.origin), caplog)
    answer = await check_request(fuzz_setup, data, caplog)
    assert answer, "the connection was closed without an answer"
