"""Fuzzing ICP v2 (RFC 2186): the pure codec, then a running cache's ICP socket over loopback.

The codec: any bytes decode to a message or raise IcpError, nothing else; what decodes
encodes back to the same bytes; every valid message survives encode then decode; damaged
datagrams (truncated, a byte flipped, a wrong length field or version) are refused with
IcpError alone.

The endpoint: a real cache is sent a seeded batch of datagrams (garbage, damaged and
oversized datagrams, valid queries for random URLs, replies nobody asked for) over real UDP
sockets on 127.0.0.1. Each datagram must be accounted for (answered, or counted as dropped);
no more replies come back than queries went out, each decodable, echoing the number and URL
of a query sent and no larger than it; nothing is logged at ERROR; nothing stays pending;
and a valid query is still answered correctly within 2 s afterwards. The batches are drawn
from a seeded ``random.Random`` rather than by Hypothesis, so that one cache serves them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import random
import re
import socket
import struct
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.errors import IcpError, MalformedIcp, RequestError, UnknownIcpOpcode
from harvest_cache.hierarchy.endpoint import IcpEndpoint
from harvest_cache.hierarchy.icp import (
    FLAG_HIT_OBJ,
    FLAG_SRC_RTT,
    HEADER,
    MAX_MESSAGE,
    REPLIES,
    VERSION,
    IcpMessage,
    Opcode,
    decode,
    encode,
    query,
)
from harvest_cache.http.target import parse_absolute
from harvest_cache.server.app import CacheServer
from tests.fuzz.origin import STORED_BODY, FuzzOrigin
from tests.fuzz.strategies import FUZZ, soup, weighted

MakeCache = Callable[..., Awaitable[CacheServer]]
Address = tuple[str, int]
LOOPBACK = "127.0.0.1"
U32 = 2**32 - 1
MAX_UDP = 65_507  # the largest UDP payload over IPv4

# -- the codec: strategies -----------------------------------------------------------------------

_u32 = weighted(
    (3, st.integers(0, U32)),
    (1, st.sampled_from([0, 1, 0x7FFF_FFFF, 0x8000_0000, U32])),
)
_options = st.one_of(
    st.sampled_from([0, FLAG_HIT_OBJ, FLAG_SRC_RTT, FLAG_HIT_OBJ | FLAG_SRC_RTT]), _u32
)
_ipv4 = weighted((3, st.ip_addresses(v=4).map(str)), (1, st.just("0.0.0.0")))
_urls = st.one_of(
    st.text(st.characters(codec="latin-1", exclude_characters="\x00"), max_size=60),
    soup(
        "http://",
        "HTTP://",
        "ftp://",
        "127.0.0.1",
        "[::1]",
        "example.com",
        ":80",
        ":0",
        ":99999",
        "/",
        "?",
        "#",
        "%00",
        "\u00e9",
        "\u00ff",
        "\x7f",
        max_size=10,
    ),
)
"""URLs as ICP carries them: Latin-1 without NUL (any such string), and URL-like soup."""


@st.composite
def messages(draw: st.DrawFn, opcodes: st.SearchStrategy[Opcode] | None = None) -> IcpMessage:
    """A valid message, in the form decode gives: a requester for queries alone, an object
    for HIT_OBJ alone."""
    opcode = draw(opcodes if opcodes is not None else st.sampled_from(Opcode))
    return IcpMessage(
        opcode,
        draw(_u32),
        draw(_urls),
        draw(_options),
        draw(_u32),
        draw(_ipv4),
        draw(_ipv4) if opcode is Opcode.QUERY else "0.0.0.0",
        draw(st.binary(max_size=300)) if opcode is Opcode.HIT_OBJ else None,
    )


valid_datagrams = messages().map(encode)


def frame(
    opcode: int,
    payload: bytes,
    *,
    version: int = VERSION,
    number: int = 0,
    options: int = 0,
    data: int = 0,
    sender: int = 0,
    length: int | None = None,
) -> bytes:
    """A header (its length field right unless ``length`` is given) and ``payload``."""
    total = HEADER.size + len(payload) if length is None else length
    head = HEADER.pack(opcode, version, total & 0xFFFF, number, options, data, sender)
    return head + payload


_opcode_bytes = weighted(
    (3, st.sampled_from(Opcode).map(int)),
    (1, st.integers(0, 255)),
)
_url_bytes = _urls.map(lambda u: u.encode("latin-1"))
_tails = st.sampled_from([b"", b"\x00", b"\x00\x00", b"\x00\x00\x00", b"\x00\x00\x03abc", b"\xff"])
_payloads = st.one_of(
    st.binary(max_size=40),
    # requester? + URL + NUL? + size field? + object?: each part present or not, right or not
    st.builds(
        lambda req, url, tail: req + url + tail,
        st.sampled_from([b"", b"\x7f\x00\x00\x01", b"\x00\x00"]),
        _url_bytes,
        _tails,
    ),
)
_framed = st.builds(
    frame,
    _opcode_bytes,
    _payloads,
    version=weighted((5, st.just(VERSION)), (1, st.integers(0, 255))),
    number=_u32,
    options=_options,
    data=_u32,
    sender=_u32,
)


def _big(size: int, fill: int, opcode: int) -> bytes:
    """A datagram of ``size`` bytes, framed as a query with its length field right (as far
    as 16 bits go), its URL NUL-terminated."""
    body = b"\x7f\x00\x00\x01" + bytes([fill or 0x61]) * (size - HEADER.size - 5) + b"\x00"
    return frame(opcode, body)


_big_datagrams = st.builds(
    _big,
    st.sampled_from(
        [MAX_MESSAGE - 1, MAX_MESSAGE, MAX_MESSAGE + 1, 65_535, MAX_UDP, 65_536, 70_000]
    ),
    st.integers(0, 255),
    _opcode_bytes,
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    """(how, a valid datagram damaged that way)."""
    original = draw(valid_datagrams)
    data = bytearray(original)
    how = draw(
        st.sampled_from(
            ["truncate", "flip", "length", "version", "opcode", "append", "insert", "delete"]
        )
    )
    at = draw(st.integers(0, len(data) - 1))
    if how == "truncate":
        del data[at:]
    elif how == "flip":
        data[at] ^= draw(st.integers(1, 255))
    elif how == "length":
        wrong = draw(st.integers(0, 0xFFFF).filter(lambda n: n != len(original)))
        data[2:4] = struct.pack("!H", wrong)
    elif how == "version":
        data[1] = draw(st.integers(0, 255).filter(lambda v: v != VERSION))
    elif how == "opcode":
        defined = {int(op) for op in Opcode}
        data[0] = draw(st.integers(0, 255).filter(lambda v: v not in defined))
    elif how == "append":
        data += draw(st.binary(min_size=1, max_size=8))
    elif how == "insert":
        data[at:at] = draw(st.binary(min_size=1, max_size=8))
    else:
        del data[at : at + draw(st.integers(1, 8))]
    return how, bytes(data)


any_datagrams = weighted(
    (3, st.binary(max_size=64)),
    (5, _framed),
    (3, mutated().map(lambda m: m[1])),
    (2, valid_datagrams),
    (1, _big_datagrams),
)


# -- the codec: properties -----------------------------------------------------------------------


def canonical(message: IcpMessage) -> IcpMessage:
    """What decode(encode(message)) gives for a message encode accepts: a requester for
    queries alone, an object (empty rather than None) for HIT_OBJ alone."""
    requester = message.requester if message.opcode is Opcode.QUERY else "0.0.0.0"
    if message.opcode is Opcode.HIT_OBJ:
        hit_object: bytes | None = message.hit_object or b""
    else:
        hit_object = None
    return replace(
        message,
        sender=str(ipaddress.IPv4Address(message.sender)),
        requester=str(ipaddress.IPv4Address(requester)),
        hit_object=hit_object,
    )


def _exact_hit_obj(data: bytes, message: IcpMessage) -> bool:
    """Whether a HIT_OBJ datagram holds URL, NUL, size and exactly that many bytes."""
    rest = data[HEADER.size + len(message.url) + 1 :]
    return len(rest) >= 2 and len(rest) == 2 + struct.unpack_from("!H", rest)[0]


def check_decodes_or_refuses(data: bytes) -> IcpMessage | None:
    """decode(data) is a well-formed message or raises IcpError; a message encodes back to
    the same bytes (a HIT_OBJ only when its object is exactly there)."""
    try:
        message = decode(data)
    except IcpError:
        return None
    assert isinstance(message, IcpMessage)
    assert isinstance(message.opcode, Opcode)
    assert data[1] == VERSION
    assert struct.unpack_from("!H", data, 2)[0] == len(data)
    assert len(data) <= MAX_MESSAGE
    for number in (message.request_number, message.options, message.option_data):
        assert 0 <= number <= U32
    assert "\x00" not in message.url
    message.url.encode("latin-1")
    ipaddress.IPv4Address(message.sender)
    ipaddress.IPv4Address(message.requester)
    if message.opcode is not Opcode.QUERY:
        assert message.requester == "0.0.0.0"
    if message.opcode is not Opcode.HIT_OBJ:
        assert message.hit_object is None
    try:
        again = encode(message)
    except ValueError:
        # Only a HIT_OBJ without its size field, at the very limit, grows past MAX_MESSAGE
        # when encoded (with a size field of 0).
        assert message.opcode is Opcode.HIT_OBJ
        assert message.hit_object is None
        assert len(data) + 2 > MAX_MESSAGE
        return message
    if message.opcode is not Opcode.HIT_OBJ or _exact_hit_obj(data, message):
        assert again == data
    assert decode(again) == canonical(message)
    return message


@settings(FUZZ, max_examples=300)
@given(messages())
def test_decode_inverts_encode(message: IcpMessage) -> None:
    data = encode(message)
    assert data[0] == message.opcode
    assert data[1] == VERSION
    assert struct.unpack_from("!H", data, 2)[0] == len(data) <= MAX_MESSAGE
    assert decode(data) == message


@settings(FUZZ, max_examples=500)
@given(any_datagrams)
def test_any_datagram_decodes_or_raises_icp_error(data: bytes) -> None:
    check_decodes_or_refuses(data)


@settings(FUZZ, max_examples=500)
@given(mutated())
def test_a_damaged_datagram_raises_icp_error_or_round_trips(
    damage: tuple[str, bytes],
) -> None:
    how, data = damage
    message = check_decodes_or_refuses(data)
    if how in ("truncate", "length", "version", "append", "insert", "delete"):
        # The length field no longer matches (or the version is wrong): always refused.
        assert message is None
        with pytest.raises(MalformedIcp):
            decode(data)
    elif how == "opcode":
        with pytest.raises(UnknownIcpOpcode):
            decode(data)


@pytest.mark.parametrize("opcode", list(Opcode))
def test_the_largest_message_round_trips_and_one_byte_more_is_refused(opcode: Opcode) -> None:
    overhead = HEADER.size + 1 + (4 if opcode is Opcode.QUERY else 0)
    overhead += 2 if opcode is Opcode.HIT_OBJ else 0
    url = "http://127.0.0.1/" + "\u00e9" * (MAX_MESSAGE - overhead - 17)
    hit_object = b"" if opcode is Opcode.HIT_OBJ else None
    message = IcpMessage(opcode, 7, url, hit_object=hit_object)
    data = encode(message)
    assert len(data) == MAX_MESSAGE
    assert decode(data) == message
    with pytest.raises(ValueError, match="at most"):
        encode(replace(message, url=url + "x"))
    with pytest.raises(MalformedIcp):
        decode(data + b"\x00")


_any_text = st.text(max_size=20)


@settings(FUZZ, max_examples=400)
@given(
    st.sampled_from(Opcode),
    st.one_of(_urls, _any_text),
    st.one_of(_ipv4, _any_text),
    st.one_of(_ipv4, _any_text),
    st.one_of(st.none(), st.binary(max_size=20), st.just(bytes(0x10000))),
)
def test_encode_refuses_what_decode_would_with_value_error(
    opcode: Opcode, url: str, sender: str, requester: str, hit_object: bytes | None
) -> None:
    message = IcpMessage(opcode, 1, url, 0, 0, sender, requester, hit_object)

    def ipv4(text: str) -> bool:
        try:
            ipaddress.IPv4Address(text)
        except ValueError:
            return False
        return True

    bad = (
        "\x00" in url
        or any(ord(c) > 0xFF for c in url)
        or not ipv4(sender)
        or (opcode is Opcode.QUERY and not ipv4(requester))
        or (opcode is Opcode.HIT_OBJ and len(hit_object or b"") > 0xFFFF)
    )
    try:
        data = encode(message)
    except ValueError:
        assert bad
        return
    assert not bad
    assert decode(data) == canonical(message)


@settings(FUZZ, max_examples=50)
@given(
    st.sampled_from(["request_number", "options", "option_data"]),
    st.one_of(st.integers(max_value=-1), st.integers(min_value=U32 + 1)),
)
def test_encode_refuses_numbers_out_of_range_with_value_error(field: str, value: int) -> None:
    message = IcpMessage(
        Opcode.QUERY,
        value if field == "request_number" else 1,
        "http://127.0.0.1/",
        value if field == "options" else 0,
        value if field == "option_data" else 0,
    )
    with pytest.raises(ValueError, match=r"."):  # (any message: the type is the point)
        encode(message)


# -- the endpoint: seeded batches of datagrams ---------------------------------------------------

_URL_PIECES = [
    "http://",
    "HTTP://",
    "https://",
    "ftp://",
    "http:",
    "//",
    "127.0.0.1",
    "[::1]",
    "[::1",
    "[fe80::1%25eth0]",
    "example.com",
    "a..b",
    "u:p@",
    "@",
    ":",
    ":80",
    ":0",
    ":65536",
    ":99999",
    ":\u00b9",
    "/",
    "?",
    "#",
    "%",
    "%00",
    "..",
    " ",
    "\t",
    "\r\n",
    "\\",
    "\u00e9",
    "\u00ff",
    "\x7f",
    "\x01",
]


def random_url(rng: random.Random, stored_url: str) -> str:
    roll = rng.random()
    if roll < 0.1:
        return rng.choice([stored_url, stored_url.replace("http", "HTTP", 1), stored_url + "?"])
    if roll < 0.4:
        path = "".join(rng.choice("abc/?%.-_~") for _ in range(rng.randint(0, 30)))
        return f"http://127.0.0.1:{rng.randint(1, 65535)}/{path}"
    if roll < 0.8:
        return "".join(rng.choice(_URL_PIECES) for _ in range(rng.randint(0, 10)))
    if roll < 0.95:
        return "".join(chr(rng.randint(1, 255)) for _ in range(rng.randint(0, 60)))
    return "http://127.0.0.1:9/" + "x" * rng.randint(100, 4000)


def random_message(rng: random.Random, stored_url: str, opcode: Opcode | None = None) -> IcpMessage:
    if opcode is None:
        opcode = Opcode.QUERY if rng.random() < 0.5 else rng.choice(list(Opcode))
    options = rng.choice(
        [0, FLAG_SRC_RTT, FLAG_HIT_OBJ, FLAG_SRC_RTT | FLAG_HIT_OBJ, rng.getrandbits(32)]
    )
    return IcpMessage(
        opcode,
        rng.getrandbits(32),
        random_url(rng, stored_url),
        options,
        rng.choice([0, rng.getrandbits(32)]),
        str(ipaddress.IPv4Address(rng.getrandbits(32))),
        str(ipaddress.IPv4Address(rng.getrandbits(32))) if opcode is Opcode.QUERY else "0.0.0.0",
        rng.randbytes(rng.randint(0, 100)) if opcode is Opcode.HIT_OBJ else None,
    )


def _valid(rng: random.Random, stored_url: str) -> bytes:
    return encode(random_message(rng, stored_url))


def _garbage(rng: random.Random, stored_url: str) -> bytes:
    return rng.randbytes(rng.choice([rng.randint(1, 40), rng.randint(1, 2000)]))


def _header_garbage(rng: random.Random, stored_url: str) -> bytes:
    """A right header (version 2, length) on a random payload, with any opcode."""
    opcode = rng.choice([*map(int, Opcode), rng.randint(0, 255)])
    return frame(opcode, rng.randbytes(rng.randint(0, 40)), number=rng.getrandbits(32))


def _mutation(rng: random.Random, stored_url: str) -> bytes:
    data = bytearray(_valid(rng, stored_url))
    at = rng.randrange(len(data))
    how = rng.choice(["truncate", "flip", "length", "version", "opcode", "append", "delete"])
    if how == "truncate":
        del data[at:]
    elif how == "flip":
        data[at] ^= rng.randint(1, 255)
    elif how == "length":
        data[2:4] = struct.pack("!H", rng.choice([0, len(data) - 1, len(data) + 1, 0xFFFF]))
    elif how == "version":
        data[1] = rng.choice([0, 1, 3, 255])
    elif how == "opcode":
        data[0] = rng.choice([0, 5, 9, 12, 20, 24, 255])
    elif how == "append":
        data += rng.randbytes(rng.randint(1, 8))
    else:
        del data[at : at + rng.randint(1, 8)]
    return bytes(data)


_KINDS: dict[str, tuple[int, Callable[[random.Random, str], bytes]]] = {
    "valid": (5, _valid),
    "garbage": (2, _garbage),
    "header-garbage": (2, _header_garbage),
    "mutation": (4, _mutation),
}


def fixed_datagrams(stored_url: str) -> list[bytes]:
    """The edges, in every batch."""
    q = encode(query(3, "http://x/"))
    longest = "http://127.0.0.1:9/" + "y" * (MAX_MESSAGE - HEADER.size - 5 - 19)
    return [
        b"",  # (uvloop does not even deliver an empty datagram)
        b"\x01",
        bytes(20),  # opcode 0
        q[:-1],
        b"\x01\x03" + q[2:],  # version 3
        frame(24, b"http://x/\x00"),  # an undefined opcode
        frame(Opcode.QUERY, b"\x7f\x00"),  # no room for the requester
        frame(Opcode.QUERY, b"\x7f\x00\x00\x01http://x/"),  # no NUL
        q + b"\x00",  # a byte after the URL's NUL (and the length field wrong)
        frame(Opcode.QUERY, b"\x7f\x00\x00\x01http://x/\x00tail"),  # bytes after the NUL
        frame(Opcode.HIT_OBJ, b"http://x/\x00\xff\xffshort"),  # object shorter than said
        frame(Opcode.HIT_OBJ, b"http://x/\x00"),  # no size field
        encode(IcpMessage(Opcode.HIT, 8, "http://x/")),  # a reply nobody asked for
        encode(IcpMessage(Opcode.SECHO, 9, "http://x/")),
        encode(IcpMessage(Opcode.DECHO, 10, "http://x/")),
        encode(IcpMessage(Opcode.HIT_OBJ, 11, "http://x/", hit_object=b"o" * 1000)),
        encode(query(12, longest)),  # exactly MAX_MESSAGE, valid
        _big(MAX_MESSAGE + 1, 0x61, Opcode.QUERY),
        _big(MAX_UDP, 0x62, Opcode.QUERY),
        b"\xff" * MAX_UDP,
        _big(MAX_UDP, 0, Opcode.HIT),
    ]


@dataclass(frozen=True)
class Datagram:
    kind: str
    data: bytes
    message: IcpMessage | None  # as decoded (None: IcpError)

    @property
    def is_query(self) -> bool:
        return self.message is not None and self.message.opcode is Opcode.QUERY


def make_batch(rng: random.Random, n: int, stored_url: str) -> list[Datagram]:
    """``n`` random datagrams and the fixed ones, shuffled; every query's number unique."""
    drawn = [("fixed", data) for data in fixed_datagrams(stored_url)]
    names, weights = list(_KINDS), [w for w, _ in _KINDS.values()]
    while len(drawn) < n:
        kind = rng.choices(names, weights)[0]
        drawn.append((kind, _KINDS[kind][1](rng, stored_url)))
    rng.shuffle(drawn)
    batch: list[Datagram] = []
    numbers: set[int] = set()
    for kind, data in drawn:
        try:
            message: IcpMessage | None = decode(data)
        except IcpError:
            message = None
        if message is not None and message.opcode is Opcode.QUERY:
            if message.request_number in numbers:
                continue  # (so that each reply names one query)
            numbers.add(message.request_number)
        batch.append(Datagram(kind, data, message))
    return batch


# -- the endpoint: sockets and waiting -----------------------------------------------------------


class UdpPeer(asyncio.DatagramProtocol):
    """Our side on 127.0.0.1: sends datagrams, keeps all that come back and from where."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.received: list[tuple[bytes, Address]] = []
        self.errors: list[Exception] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports implement DatagramTransport without subclassing it)
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Address) -> None:
        self.received.append((data, addr))

    def error_received(self, exc: Exception) -> None:
        self.errors.append(exc)

    @property
    def port(self) -> int:
        assert self.transport is not None
        port: int = self.transport.get_extra_info("sockname")[1]
        return port

    def send(self, data: bytes, port: int) -> None:
        assert self.transport is not None
        self.transport.sendto(data, (LOOPBACK, port))


@contextlib.asynccontextmanager
async def udp_peer() -> AsyncIterator[UdpPeer]:
    """A UDP socket on 127.0.0.1, closed on the way out (an open one hangs uvloop's close)."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(UdpPeer, local_addr=(LOOPBACK, 0))
    try:
        yield protocol
    finally:
        transport.close()


def free_port(kind: socket.SocketKind) -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


async def eventually(condition: Callable[[], bool], within: float) -> bool:
    """Whether ``condition`` holds within ``within`` seconds (polled)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.001)
    return True


def seen(endpoint: IcpEndpoint) -> int:
    """Datagrams the endpoint has taken: dropped, answered, or being looked up on disk."""
    return endpoint.dropped + sum(endpoint.answered.values()) + endpoint._pending


async def blast(
    rng: random.Random, sender: UdpPeer, port: int, batch: list[Datagram], taken: Callable[[], int]
) -> None:
    """Send ``batch`` in bursts of up to 16 datagrams and 64 KiB (so that loopback's socket
    buffers lose none), each burst taken by the endpoint before the next leaves."""
    base, expected, i = taken(), 0, 0
    while i < len(batch):
        burst: list[Datagram] = []
        size, limit = 0, rng.randint(1, 16)
        while i < len(batch) and len(burst) < limit:
            if burst and size + len(batch[i].data) > 65_536:
                break
            burst.append(batch[i])
            size += len(batch[i].data)
            i += 1
        for d in burst:
            sender.send(d.data, port)
        expected += sum(1 for d in burst if d.data)  # (an empty one never arrives)
        if not await eventually(functools.partial(_reached, taken, base + expected), 2.0):
            raise AssertionError(
                f"the endpoint took {taken() - base} of {expected} datagrams; the last burst:"
                f" {[(d.kind, d.data[:48]) for d in burst]}"
            )


def _reached(count: Callable[[], int], target: int) -> bool:
    return count() >= target


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged at ERROR or above (a failed lookup task, an exception that escaped
    the protocol callback)."""
    return [
        f"{r.name}: {r.getMessage()}" + (f" {r.exc_info[1]!r}" if r.exc_info else "")
        for r in caplog.records
        if r.levelno >= logging.ERROR
    ]


def check_replies(
    received: list[tuple[bytes, Address]],
    queries: dict[int, Datagram],
    icp_port: int,
    expected: Callable[[IcpMessage], set[Opcode]],
) -> Counter[int]:
    """Each reply: from the ICP port, decodable, a reply to a query we sent (its number and
    URL), no larger than it, the answer expected, SRC_RTT only if asked; at most one per
    query. The replies per request number."""
    per_number: Counter[int] = Counter()
    for data, addr in received:
        assert addr == (LOOPBACK, icp_port), addr
        answer = decode(data)
        assert answer.opcode in REPLIES, answer
        sent = queries.get(answer.request_number)
        assert sent is not None, f"a reply to no query: {answer}"
        assert sent.message is not None
        per_number[answer.request_number] += 1
        assert per_number[answer.request_number] == 1, f"two replies to {sent.data[:80]!r}"
        assert answer.url == sent.message.url
        assert len(data) <= len(sent.data)
        assert answer.opcode in expected(sent.message), (sent.message, answer.opcode)
        if answer.options:
            assert answer.options == FLAG_SRC_RTT, answer
            assert sent.message.options & FLAG_SRC_RTT, (sent.message, answer)
            assert answer.opcode in (Opcode.HIT, Opcode.MISS)
            assert answer.option_data >> 16 == 0  # (no hops)
            assert answer.option_data & 0xFFFF >= 1  # (0 ms would read as unmeasured)
        else:
            assert answer.option_data == 0
    return per_number


async def http_get(cache: CacheServer, url: str, within: float = 5.0) -> tuple[int, bytes]:
    """GET ``url`` through the cache on a connection of its own: status and body."""
    authority = url.split("/")[2]
    request = f"GET {url} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection(LOOPBACK, cache.address[1])
    try:
        writer.write(request)
        async with asyncio.timeout(within):
            raw = await reader.read(-1)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *([0-9]+)\r?$", head)
    assert length is not None, head
    assert len(body) == int(length[1]), head
    return int(head.split(b" ", 2)[1]), body


async def ask(peer: UdpPeer, port: int, message: IcpMessage, within: float = 2.0) -> IcpMessage:
    """Send a query, and return the reply bearing its number (within ``within`` seconds)."""
    peer.send(encode(message), port)

    def answered() -> IcpMessage | None:
        for data, addr in peer.received:
            with contextlib.suppress(IcpError):
                m = decode(data)
                if addr[1] == port and m.request_number == message.request_number:
                    return m
        return None

    assert await eventually(lambda: answered() is not None, within), "no ICP reply within 2 s"
    answer = answered()
    assert answer is not None
    return answer


async def icp_cache(make_cache: MakeCache, allow: list[str], **sections: object) -> CacheServer:
    return await make_cache(icp={"port": free_port(socket.SOCK_DGRAM), "allow": allow}, **sections)


def endpoint_of(cache: CacheServer) -> IcpEndpoint:
    assert cache.icp is not None
    return cache.icp


async def run_batch(
    cache: CacheServer,
    peer: UdpPeer,
    batch: list[Datagram],
    rng: random.Random,
    expected: Callable[[IcpMessage], set[Opcode]],
) -> Counter[str]:
    """Blast ``batch`` at the cache, then check every property of what came back. The
    replies by opcode name (and ``SRC_RTT``: how many gave an RTT)."""
    endpoint = endpoint_of(cache)
    icp_port = cache.config.icp_port
    queries = {d.message.request_number: d for d in batch if d.is_query and d.message}
    invalid = sum(1 for d in batch if d.message is None and d.data)
    unsolicited = sum(1 for d in batch if d.message is not None and not d.is_query)
    dropped, answered = endpoint.dropped, sum(endpoint.answered.values())
    peer.received.clear()

    await blast(rng, peer, icp_port, batch, lambda: seen(endpoint))
    # Every query answered (once), then a moment for any reply too many.
    assert await eventually(lambda: len(peer.received) >= len(queries), 5.0), (
        f"{len(peer.received)} replies to {len(queries)} queries"
    )
    await asyncio.sleep(0.2)
    assert await eventually(lambda: endpoint._pending == 0, 2.0)

    per_number = check_replies(peer.received, queries, icp_port, expected)
    assert len(peer.received) <= len(queries)  # no amplification
    assert set(per_number) == set(queries)  # and no query went unanswered
    assert sum(endpoint.answered.values()) - answered == len(queries)
    assert endpoint.dropped - dropped == invalid + unsolicited
    assert endpoint.is_open  # (the socket survived)
    assert peer.errors == []
    kinds: Counter[str] = Counter()
    for data, _ in peer.received:
        answer = decode(data)
        kinds[answer.opcode.name] += 1
        kinds["SRC_RTT"] += answer.src_rtt is not None
    return kinds


# -- the endpoint: properties --------------------------------------------------------------------

BATCH = 400


@pytest.mark.usefixtures("no_blocking_calls")
async def test_an_allowed_peer_gets_one_right_answer_per_query_and_nothing_else(
    make_cache: MakeCache, fuzz_origin: FuzzOrigin, caplog: pytest.LogCaptureFixture
) -> None:
    cache = await icp_cache(make_cache, ["127.0.0.0/8"])
    stored_url = fuzz_origin.url("/stored")
    assert await http_get(cache, stored_url) == (200, STORED_BODY)
    stored_key = parse_absolute(stored_url).url

    def expected(q: IcpMessage) -> set[Opcode]:
        try:
            target = parse_absolute(q.url)
        except RequestError:
            return {Opcode.ERR}
        return {Opcode.HIT} if target.url == stored_key else {Opcode.MISS}

    rng = random.Random(2186)
    async with udp_peer() as peer:
        for round_ in range(2):
            caplog.clear()
            batch = make_batch(rng, BATCH, stored_url)
            kinds = await run_batch(cache, peer, batch, rng, expected)
            assert errors(caplog) == [], round_
            # (the batch reaches every answer, and the RTT measured fetching /stored)
            assert all(kinds[k] > 0 for k in ("HIT", "MISS", "ERR", "SRC_RTT")), kinds
            # Still answering, and rightly.
            answer = await ask(peer, cache.config.icp_port, query(0xC0FFEE + round_, stored_url))
            assert (answer.opcode, answer.url) == (Opcode.HIT, stored_url)
            miss = await ask(peer, cache.config.icp_port, query(0xBEEF, "http://127.0.0.1:9/"))
            assert miss.opcode is Opcode.MISS
    assert cache.neighbours is None


@pytest.mark.usefixtures("no_blocking_calls")
async def test_a_peer_not_allowed_gets_denied_to_each_query_and_nothing_else(
    make_cache: MakeCache, fuzz_origin: FuzzOrigin, caplog: pytest.LogCaptureFixture
) -> None:
    cache = await icp_cache(make_cache, [])
    stored_url = fuzz_origin.url("/stored")
    assert await http_get(cache, stored_url) == (200, STORED_BODY)
    rng = random.Random(2187)
    async with udp_peer() as peer:
        batch = make_batch(rng, BATCH, stored_url)
        await run_batch(cache, peer, batch, rng, lambda q: {Opcode.DENIED})
        assert errors(caplog) == []
        assert set(endpoint_of(cache).answered) == {"DENIED"}
        answer = await ask(peer, cache.config.icp_port, query(0xC0FFEE, stored_url))
        assert answer.opcode is Opcode.DENIED


@pytest.mark.usefixtures("no_blocking_calls")
async def test_replies_from_a_peer_never_disturb_the_rounds(
    make_cache: MakeCache, fuzz_origin: FuzzOrigin, caplog: pytest.LogCaptureFixture
) -> None:
    """With a sibling configured at our socket's address: replies to no round of the cache's
    are dropped, and a real round survives garbage, replies with other numbers or from
    another port, and duplicates; the round is forgotten after its deadline."""
    stored_url = fuzz_origin.url("/stored")
    stored_key = parse_absolute(stored_url).url
    rng = random.Random(2188)
    async with udp_peer() as peer, udp_peer() as stranger:
        sibling = {
            "name": "fuzz-sibling",
            "host": LOOPBACK,
            "http_port": free_port(socket.SOCK_STREAM),
            "icp_port": peer.port,
            "role": "sibling",
        }
        cache = await icp_cache(
            make_cache,
            ["127.0.0.0/8"],
            hierarchy={"peers": [sibling], "icp_timeout_max": 0.5},
        )
        neighbours = cache.neighbours
        assert neighbours is not None
        endpoint = endpoint_of(cache)
        icp_port = cache.config.icp_port

        def expected(q: IcpMessage) -> set[Opcode]:
            try:
                parse_absolute(q.url)
            except RequestError:
                return {Opcode.ERR}
            return {Opcode.MISS}  # (nothing is stored yet)

        # 1. The batch: its replies belong to no round, and are dropped as such.
        batch = make_batch(rng, BATCH, stored_url)
        unexpected = neighbours.unexpected_replies
        await run_batch(cache, peer, batch, rng, expected)
        unsolicited = sum(1 for d in batch if d.message is not None and not d.is_query)
        assert neighbours.unexpected_replies - unexpected == unsolicited
        assert neighbours._rounds == {}

        # 2. A real round: a request the cache asks its sibling (our socket) about.
        peer.received.clear()
        fetch = asyncio.create_task(http_get(cache, stored_url))
        try:

            def rounds_queries() -> list[IcpMessage]:
                found = []
                for data, addr in peer.received:
                    m = decode(data)
                    if m.opcode is Opcode.QUERY and addr == (LOOPBACK, icp_port):
                        found.append(m)
                return found

            assert await eventually(lambda: len(rounds_queries()) >= 1, 2.0), "no ICP query"
            (asked,) = rounds_queries()
            assert parse_absolute(asked.url).url == stored_key
            assert set(neighbours._rounds) == {asked.request_number}
            number = asked.request_number
            dropped = endpoint.dropped
            noise = [
                d.data
                for d in make_batch(rng, 60, stored_url)
                if not d.is_query and 0 < len(d.data) <= 2000
            ]
            for data in noise:
                peer.send(data, icp_port)
            wrong = encode(IcpMessage(Opcode.HIT, (number + 1) & U32, asked.url))
            peer.send(wrong, icp_port)
            stranger.send(encode(IcpMessage(Opcode.HIT, number, asked.url)), icp_port)
            miss = encode(IcpMessage(Opcode.MISS, number, asked.url))
            for _ in range(3):  # the answer, and twice again
                peer.send(miss, icp_port)
            status, body = await fetch
        finally:
            if not fetch.done():
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fetch
        assert (status, body) == (200, STORED_BODY)
        # Noise, the other number and the stranger's reply dropped; the MISS taken (its two
        # copies are taken today, as late replies to a known round; dropping them is fine).
        assert await eventually(lambda: endpoint.dropped - dropped >= len(noise) + 2, 2.0)
        await asyncio.sleep(0.05)
        assert len(noise) + 2 <= endpoint.dropped - dropped <= len(noise) + 4
        assert len(rounds_queries()) == 1  # one query per request, whatever came back
        assert await eventually(lambda: neighbours._rounds == {}, 2.0), "a round outlived"
        assert endpoint._pending == 0
        answer = await ask(peer, icp_port, query(0xC0FFEE, stored_url))
        assert answer.opcode is Opcode.HIT
        assert errors(caplog) == []
        assert peer.errors == []
        assert stranger.errors == []
