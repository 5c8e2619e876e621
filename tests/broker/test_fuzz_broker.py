"""Property-based fuzzing of what the broker takes from clients (issue 25), as for the ICP
codec (tests/fuzz/): SOIF registrations and HSR records (mutated URLs, IPv6 literals, ports,
huge values, bytes that are not UTF-8), queries with regular expressions over hostile
values, and replica transfers. Through the real broker app every answer is a 2xx or 4xx
within a bound, never a 5xx; at the pure level parse and match either answer or raise the
typed QuerySyntaxError, each within its bound.

One broker serves all the examples of a test (the function-scoped fixtures are shared by
the examples on purpose, as in tests/fuzz/test_proxy_fuzz.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.app import Broker
from broker.errors import QuerySyntaxError
from broker.match import matches
from broker.oid import oid
from broker.query import parse
from broker.snippets import snippets
from harvest_common.replication import wire
from harvest_common.replication.version import Version
from tests.broker.test_api import TOKEN, load, make, running, url_of
from tests.fuzz.strategies import FUZZ, weighted

# An answer (or a pure parse and match) must come within this many seconds.
WITHIN = 5.0
QUICK = 1.0

E2E = settings(
    FUZZ,
    max_examples=150,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
PURE = settings(FUZZ, max_examples=400)
ADMIN = {"Authorization": f"Bearer {TOKEN}"}

# -- values ----------------------------------------------------------------------------------

_HOSTILE_TEXT = [
    "a" * 25 + "!",
    "a" * 3000 + "!",
    "x" * 500,
    "word " * 200 + "!",
    "RFC 2186 Internet Cache Protocol",
    "Café\nau lait",
    "東京 ﬁle",
    "\x00\x01\x7f",
    "\ufffd",
]
values = weighted(
    (3, st.text(max_size=40)),
    (3, st.sampled_from(_HOSTILE_TEXT)),
    (1, st.integers(0, 100_000).map(lambda n: "a" * n + "!")),
)

# -- queries ---------------------------------------------------------------------------------

_REGEX_PIECES = [
    "a",
    "a+",
    "(a+)+",
    "(a|a)*",
    "(a|aa)+",
    "(.*){20}",
    "$",
    "^",
    ".",
    "\\",
    "\\1",
    "\\Z",
    "\\d",
    "\\w+",
    "\\b",
    "[",
    "]",
    "[a-",
    "[^]",
    "(",
    ")",
    "(?",
    "(?=",
    "(?<=",
    "(?P<n>",
    "(?P=n)",
    "(?i)",
    "(?x)",
    "{",
    "}",
    "{,3}",
    "{2}",
    "{1001}",
    "*+",
    "++",
    "?",
    "|",
    "é",
    "\udcff",
    "\\/",
    "[[",
    "--",
]
_QUERY_PIECES = [
    "cache",
    "Title:",
    "Description:",
    "URL:",
    " ",
    "AND",
    "OR",
    "NOT",
    "(",
    ")",
    '"',
    "*",
    "~1",
    "~9",
    ">",
    ">=",
    "=",
    "2026-11-01",
    "1e999",
    ":",
    "File-Size",
    "/",
]


@st.composite
def regexes(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(st.sampled_from(_REGEX_PIECES), min_size=1, max_size=6))
    return "/" + "".join(pieces) + "/"


queries = weighted(
    (4, regexes()),
    (2, st.tuples(st.sampled_from(["", "Title: ", "Description: "]), regexes()).map("".join)),
    (3, st.lists(st.sampled_from(_QUERY_PIECES) | regexes(), max_size=8).map("".join)),
    (1, st.text(max_size=60)),
)

# -- SOIF and server records -----------------------------------------------------------------

_HOSTS = ["h.example", "[::1]", "[::1", "::1]", "[zz]", "[1.2.3.4]", "[v1.x]", "ex\uff03ample", ""]
_PORTS = ["", ":80", ":0", ":99999", ":\u00b2", ":-1", ":" + "9" * 30, ":8o"]
urls = weighted(
    (
        4,
        st.tuples(
            st.sampled_from(["http://", "https://", "ftp://", "http:/", ""]),
            st.sampled_from(_HOSTS),
            st.sampled_from(_PORTS),
            st.sampled_from(["/", "", "/a b", "/\x00", "/%zz"]),
        ).map("".join),
    ),
    (1, st.text(max_size=30)),
)
numbers = st.sampled_from(
    ["3128", "0", "65536", "\u00b2", "\u0663", " 80 ", "9" * 5000, "1e3", "nan", "-1", ""]
)
attribute_values = weighted(
    (3, values.map(lambda v: v.encode("utf-8", "surrogatepass"))),
    (2, numbers.map(str.encode)),
    (1, st.binary(max_size=40)),  # not UTF-8
    (1, st.sampled_from([b"\xff" * 70_000, b"a" * 65_000])),  # over the body's limit
)
attribute_names = st.sampled_from(
    [
        "Name",
        "Host",
        "Port",
        "Description",
        "Time-to-Live",
        "File-Size",
        "Last-Seen",
        "Gatherer-Name",
    ]
)


@st.composite
def server_records(draw: st.DrawFn) -> bytes:
    # Each part is mostly valid, so that many records are accepted and the hostile part of
    # one is what decides.
    template = draw(
        weighted(
            (3, st.sampled_from(["CACHE", "BROKER", "GATHERER", "REPLICATOR"])),
            (1, st.sampled_from(["FILE", "x", "cache"])),
        )
    )
    url = draw(
        weighted((3, st.sampled_from(["http://h.example:3128/", "https://[::1]/"])), (1, urls))
    )
    attributes = [
        (b"Name", draw(weighted((3, st.just(b"c")), (1, attribute_values)))),
        (b"Host", draw(weighted((3, st.just("h.example")), (1, st.sampled_from(_HOSTS)))).encode()),
        (b"Port", draw(weighted((3, st.just("3128")), (1, numbers))).encode()),
    ]
    attributes += draw(
        st.lists(st.tuples(attribute_names.map(str.encode), attribute_values), max_size=4)
    )
    lines = [b"@", template.encode(), b" { ", url.encode("utf-8", "surrogatepass"), b"\n"]
    for name, value in draw(st.permutations(attributes)):
        # Mostly the right byte count, sometimes not.
        size = draw(weighted((5, st.just(len(value))), (1, st.integers(0, len(value) + 3))))
        lines += [name, b"{", str(size).encode(), b"}:\t", value, b"\n"]
    lines.append(b"}\n")
    return b"".join(lines)


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """``base`` with a few bytes flipped, inserted, deleted, or cut off."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        match draw(st.sampled_from(["flip", "insert", "delete", "cut"])):
            case "flip" if at < len(data):
                data[at] ^= draw(st.integers(1, 255))
            case "insert":
                data[at:at] = draw(st.sampled_from([b"{", b"}", b"\n", b"@", b"\t", b":", b"\xff"]))
            case "delete":
                del data[at : at + draw(st.integers(1, 8))]
            case "cut":
                del data[at:]
    return bytes(data)


registrations = weighted((3, server_records()), (2, mutated(server_records())), (1, st.binary()))


# -- fixtures and talking to the broker --------------------------------------------------------


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(tmp_path / "b", admin_token=TOKEN) as started:
        await load(
            started,
            "c1",
            [
                make(f"http://v.example/{i}", value, Description=value)
                for i, value in enumerate(_HOSTILE_TEXT)
            ],
        )
        yield started


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


async def status_of(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    **kwargs: Any,
) -> int:
    """The status of one request, which must come within WITHIN seconds."""
    async with asyncio.timeout(WITHIN), session.request(method, url, **kwargs) as response:
        await response.read()
        return response.status


# -- the pure level ----------------------------------------------------------------------------


@PURE
@given(query=queries, value=values, case_sensitive=st.booleans())
def test_parse_and_match_answer_or_raise_the_syntax_error_quickly(
    query: str, value: str, case_sensitive: bool
) -> None:
    started = time.perf_counter()
    try:
        node = parse(query, case_sensitive=case_sensitive)
    except QuerySyntaxError as error:
        refused: QuerySyntaxError | None = error
    else:
        refused = None
        attributes = [("Title", value), ("Description", value), ("URL", "http://v.example/")]
        assert isinstance(matches(node, attributes), bool)
        assert {name for name, _ in snippets(node, attributes)} <= {"Title", "Description", "URL"}
    if refused is not None:
        assert 0 <= refused.position <= len(query)
    assert time.perf_counter() - started < QUICK, query


# -- through the real app ------------------------------------------------------------------------


@E2E
@given(query=queries, case=st.sampled_from(["0", "1"]))
async def test_random_queries_are_answered_200_or_400_within_the_bound(
    broker: Broker, session: aiohttp.ClientSession, query: str, case: str
) -> None:
    base = url_of(broker)
    params = {"q": query, "case": case}
    status = await status_of(session, "GET", f"{base}/api/search", params=params)
    event(f"status {status}")
    assert status in (200, 400)
    assert await status_of(session, "GET", f"{base}/", params=params) in (200, 400)
    assert await status_of(session, "GET", f"{base}/api/hsr", params={"q": query}) in (200, 400)
    assert await status_of(session, "GET", f"{base}/bulk", params={"query": query}) in (200, 400)


@E2E
@given(body=registrations)
async def test_mutated_registrations_are_answered_2xx_or_4xx(
    broker: Broker, session: aiohttp.ClientSession, body: bytes
) -> None:
    url = f"{url_of(broker)}/api/hsr/register"
    status = await status_of(
        session, "POST", url, data=body, headers={"Content-Type": "application/x-soif"}
    )
    event(f"status {status}")
    assert status in (200, 201, 400), body[:200]
    if status in (200, 201):  # what was stored is listed and searchable
        assert await status_of(session, "GET", f"{url_of(broker)}/api/hsr") == 200


def _entry(url: str, record: bytes | None, version: Version) -> wire.Entry:
    return wire.Entry(oid("g@h:1", url), "c1", url, "g@h:1", 1e10, version, record)


@st.composite
def transfers(draw: st.DrawFn) -> bytes:
    """Packed transfers of SOIF records, some mutated, and packed bytes mutated after."""
    entries = []
    for _ in range(draw(st.integers(0, 3))):
        url = draw(
            weighted((3, st.sampled_from(["http://a.example/", "http://[::1]/x"])), (1, urls))
        )
        soif = b"@FILE { " + url.encode("utf-8", "surrogatepass") + b"\nTitle{1}:\tt\n}\n"
        record = draw(
            weighted((2, st.just(soif)), (2, mutated(st.just(soif))), (1, server_records()))
        )
        version = Version(draw(st.integers(1, 10**6)), "m9", False)
        entries.append(_entry(url, record, version))
    packed = wire.pack(entries)
    return draw(weighted((3, st.just(packed)), (1, mutated(st.just(packed)))))


@E2E
@given(body=transfers())
async def test_mutated_replica_transfers_are_answered_2xx_or_4xx(
    broker: Broker, session: aiohttp.ClientSession, body: bytes
) -> None:
    url = f"{url_of(broker)}/api/replica/c1/apply"
    headers = {**ADMIN, "Content-Type": "application/x-harvest-replica"}
    status = await status_of(session, "POST", url, data=body, headers=headers)
    event(f"status {status}")
    assert status in (200, 400)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@E2E
@given(
    route=st.sampled_from(["wanted", "entries"]),
    body=weighted(
        (2, json_values.map(lambda v: {"changes": v, "oids": v})),
        (1, json_values),
        (1, st.sampled_from([b"[" * 100_000, b"1" * 5000, b"\xff", b""])),
    ),
    query=st.sampled_from(
        ["after=", "after=\u00b2", "after=-1", "limit=99999", "wait=nan", "b=-1"]
    ),
)
async def test_mutated_replica_requests_are_answered_2xx_or_4xx(
    broker: Broker,
    session: aiohttp.ClientSession,
    route: str,
    body: object,
    query: str,
) -> None:
    base = f"{url_of(broker)}/api/replica/c1"
    data = body if isinstance(body, bytes) else None
    payload = None if isinstance(body, bytes) else body
    status = await status_of(
        session, "POST", f"{base}/{route}", data=data, json=payload, headers=ADMIN
    )
    assert status in (200, 400, 413)
    for read in ("changes", "buckets", "leaves"):
        assert await status_of(session, "GET", f"{base}/{read}?{query}", headers=ADMIN) in (
            200,
            400,
        )
