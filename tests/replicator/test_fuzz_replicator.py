"""Property-based fuzzing of replication messages (issue 25), as for the ICP codec
(tests/fuzz/): every decoder of what another member sends (transfers, change lists,
membership messages, cost rows, topologies, Merkle asks and answers) returns a value or
raises a ReplicatorError, quickly; and a real member's signed routes answer mutated bodies,
correctly signed, and mutated signature headers with a 2xx or 4xx, never a 5xx or a hang.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yarl
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harvest_common.errors import ReplicatorError
from harvest_common.replication import wire
from harvest_common.replication.merkle import MerkleTree, decode_ask, encode_ask
from harvest_common.replication.version import Version
from replicator import auth, messages
from replicator.messages import Agreed, CostRow
from tests.fuzz.strategies import FUZZ, weighted
from tests.replicator.test_server import GROUP, SECRET, Member, start_member

WITHIN = 5.0
QUICK = 1.0
E2E = settings(
    FUZZ,
    max_examples=200,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
PURE = settings(FUZZ, max_examples=300)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**70, -1, 0, 10**400])
    | st.floats()
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def _mutations(value: dict[str, Any]) -> st.SearchStrategy[Any]:
    """``value`` with one key dropped, or one value replaced by anything."""
    keys = sorted(value)
    dropped = st.sampled_from(keys).map(lambda k: {n: v for n, v in value.items() if n != k})
    replaced = st.tuples(st.sampled_from(keys), json_values).map(lambda kv: {**value, kv[0]: kv[1]})
    return weighted((1, st.just(value)), (2, dropped), (4, replaced), (1, json_values))


VERSION = Version(7, "m1", False)
CHANGES = wire.ChangeList(GROUP, 0, 3, (wire.Change(3, "0" * 32, VERSION),)).to_json()
JOIN = messages.Join("m2", "127.0.0.1:9", 0).to_json()
PING = messages.Ping(1, "m2", (), "127.0.0.1:9").to_json()
COSTS = CostRow("m2", 1, "http://m2.example/", {"m1": 0.01}).to_json()
TOPOLOGY: dict[str, Any] = {"epoch": 1, "coordinator": "m1", "topology": {}}

DECODERS: dict[str, tuple[Callable[[Any], object], dict[str, Any]]] = {
    "change list": (wire.ChangeList.from_json, CHANGES),
    "join": (messages.from_json, JOIN),
    "ping": (messages.from_json, PING),
    "cost row": (CostRow.from_json, COSTS),
    "topology": (Agreed.from_json, TOPOLOGY),
}


@st.composite
def messages(draw: st.DrawFn) -> tuple[str, Any]:
    name = draw(st.sampled_from(sorted(DECODERS)))
    return name, draw(_mutations(DECODERS[name][1]))


def _quickly(decode: Callable[[], object]) -> None:
    started = time.perf_counter()
    try:
        decode()
    except ReplicatorError as error:
        event(type(error).__name__)
    else:
        event("decoded")
    assert time.perf_counter() - started < QUICK


@PURE
@given(message=messages())
def test_every_message_decoder_answers_or_raises_a_replicator_error(
    message: tuple[str, Any],
) -> None:
    name, value = message
    _quickly(lambda: DECODERS[name][0](value))


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(out)))
        match draw(st.sampled_from(["flip", "insert", "delete", "cut"])):
            case "flip" if at < len(out):
                out[at] ^= draw(st.integers(1, 255))
            case "insert":
                out[at:at] = draw(st.sampled_from([b"\n", b"{", b"}", b'"size":-2', b"\xff"]))
            case "delete":
                del out[at : at + draw(st.integers(1, 8))]
            case "cut":
                del out[at:]
    return bytes(out)


_ENTRIES = [
    wire.Entry("a" * 32, GROUP, "http://a.example/", "g@h:1", 1e10, VERSION, b"@X { u\n}\n"),
    wire.Entry("b" * 32, GROUP, "http://b.example/", "g@h:1", 0.0, Version(8, "m1", True), None),
]
RAW = wire.encode(_ENTRIES)


PACKED = wire.pack(_ENTRIES)


@PURE
@given(
    raw=weighted((3, mutated(RAW)), (1, st.binary(max_size=200))),
    packed=weighted((3, mutated(PACKED)), (1, st.binary(max_size=200))),
)
def test_transfers_decode_whole_or_raise_a_wire_error(raw: bytes, packed: bytes) -> None:
    _quickly(lambda: wire.decode(raw))
    _quickly(lambda: wire.unpack(packed))


TREE = MerkleTree.from_leaves([bytes(32)] * 16, 4)
ASK = encode_ask([(0, 0), (1, 1)], 4)


@PURE
@given(
    data=weighted((2, mutated(ASK)), (2, mutated(TREE.to_wire([(0, 0)]))), (1, st.binary())),
    bits=st.sampled_from([4, 0, 1, 31, 64]),
)
def test_merkle_asks_and_answers_decode_or_raise_a_merkle_error(data: bytes, bits: int) -> None:
    _quickly(lambda: decode_ask(data, bits))
    _quickly(lambda: MerkleTree.from_wire(data, bits))


# -- a real member ----------------------------------------------------------------------------


@pytest.fixture
async def member(tmp_path: Path) -> AsyncIterator[Member]:
    async for started in start_member(tmp_path):
        yield started


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


ROUTES = [
    ("POST", f"/replication/{GROUP}/membership"),
    ("POST", f"/replication/{GROUP}/notify"),
    ("GET", f"/replication/{GROUP}/changes"),
    ("POST", f"/replication/{GROUP}/entries"),
    ("POST", f"/replication/{GROUP}/tree"),
    ("GET", f"/replication/{GROUP}/buckets"),
    ("POST", f"/replication/{GROUP}/costs"),
    ("POST", f"/replication/{GROUP}/topology"),
    ("GET", "/replication/probe"),
    ("POST", "/replication/other-group/notify"),
]
# As sent: percent-encoded, as the signature covers them.
QUERIES = ["", "?after=0&limit=10", "?after=%C2%B2", "?after=-1", "?limit=" + "9" * 18]
QUERIES += ["?b=0,1", "?b=-1", "?b=99999999", "?b=%C2%B2", "?size=%C2%B2", "?size=99999999999"]

bodies = weighted(
    (3, messages().map(lambda m: json.dumps(m[1]).encode())),
    (1, st.sampled_from([ASK, b"[" * 5000, b"\xff\xfe", b"", b'{"oids": ["x"]}'])),
    (1, st.binary(max_size=64)),
)


@E2E
@given(route=st.sampled_from(ROUTES), query=st.sampled_from(QUERIES), body=bodies)
async def test_signed_requests_with_mutated_bodies_are_answered_2xx_or_4xx(
    member: Member,
    session: aiohttp.ClientSession,
    route: tuple[str, str],
    query: str,
    body: bytes,
) -> None:
    method, path = route
    path_qs = path + query
    headers = auth.sign_request(
        SECRET.encode(), "m2", method, path_qs, body, time.time(), secrets.token_hex(16)
    )
    url = yarl.URL(f"http://{member.address}{path_qs}", encoded=True)  # sent as signed
    async with (
        asyncio.timeout(WITHIN),
        session.request(method, url, data=body, headers=headers) as response,
    ):
        await response.read()
        status = response.status
    event(f"status {status}")
    assert status < 500, (route, query, body[:100])


_NO_BREAKS = st.characters(exclude_characters="\r\n\x00")
header_values = weighted(
    (2, st.text(_NO_BREAKS, max_size=70)),
    (1, st.sampled_from(["nan", "inf", "1e400", "-0", "0" * 32, "f" * 64, "\udcff"])),
    (1, st.binary(max_size=40).map(lambda b: b.decode("latin-1", "surrogateescape"))),
)


@E2E
@given(
    replaced=st.dictionaries(
        st.sampled_from([auth.MEMBER, auth.TIME, auth.NONCE, auth.SIGNATURE]),
        header_values,
        min_size=1,
    ),
    dropped=st.sets(st.sampled_from([auth.MEMBER, auth.TIME, auth.NONCE, auth.SIGNATURE])),
)
async def test_mutated_signature_headers_are_refused_with_401(
    member: Member,
    session: aiohttp.ClientSession,
    replaced: dict[str, str],
    dropped: set[str],
) -> None:
    path = f"/replication/{GROUP}/notify"
    body = json.dumps(CHANGES).encode()
    signed = auth.sign_request(
        SECRET.encode(), "m2", "POST", path, body, time.time(), secrets.token_hex(16)
    )
    headers = {k: v for k, v in {**signed, **replaced}.items() if k not in dropped}
    if {k: v.strip(" \t") for k, v in headers.items()} == signed:
        return  # nothing changed after all, once the HTTP parser strips blanks
    raw = {
        k: v.encode("utf-8", "surrogateescape").replace(b"\r", b"").replace(b"\n", b"")
        for k, v in headers.items()
    }
    status = await raw_post(member, path, raw, body)
    event(f"status {status}")
    # Refused: as unsigned (401), or by the HTTP parser for a byte no header may hold (400).
    assert status in (400, 401), headers


async def raw_post(member: Member, path: str, headers: dict[str, bytes], body: bytes) -> int:
    """POST with header values sent byte for byte (an HTTP client would refuse some)."""
    host, port = member.address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        head = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
        lines = [line.encode() for line in head]
        lines += [name.encode() + b": " + value for name, value in headers.items()]
        writer.write(b"\r\n".join([*lines, b"Connection: close", b"", b""]) + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), WITHIN)
    finally:
        writer.close()
        await writer.wait_closed()
    return int(status_line.split()[1])
