"""ICP version 2 messages (RFC 2186): bytes in, messages out, and back.

Pure: no sockets, no clock. The wire format (all integers in network byte order)::

    0 opcode (1) | 1 version (1) = 2 | 2 length (2): the whole datagram, header included
    4 request number (4) | 8 options (4) | 12 option data (4) | 16 sender address (4)
    20 payload: QUERY: requester address (4) + URL + NUL
                HIT_OBJ: URL + NUL + object size (2) + object
                others: URL + NUL

Decoding is strict, as Squid's peers need it to be (docs: PEERING-NOTES): the length must be
the datagram's, the version 2, the URL NUL-terminated; anything else raises MalformedIcp, and
an opcode RFC 2186 does not define raises UnknownIcpOpcode (such messages are ignored, not
answered). Encoding refuses what the decoder would refuse.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from enum import IntEnum

from harvest_cache.errors import MalformedIcp, UnknownIcpOpcode

VERSION = 2
HEADER = struct.Struct("!BBHIIII")  # opcode, version, length, request, options, data, sender
MAX_MESSAGE = 16_384  # the largest datagram ICP peers send or accept
FLAG_HIT_OBJ = 0x8000_0000  # a query: a HIT_OBJ reply is welcome
FLAG_SRC_RTT = 0x4000_0000  # a query: please give your RTT to the origin; a reply: given
_UNSPECIFIED = "0.0.0.0"


class Opcode(IntEnum):
    QUERY = 1
    HIT = 2
    MISS = 3
    ERR = 4
    SECHO = 10
    DECHO = 11
    MISS_NOFETCH = 21
    DENIED = 22
    HIT_OBJ = 23


# The answers to a query (RFC 2186 2).
REPLIES = frozenset(
    {Opcode.HIT, Opcode.MISS, Opcode.ERR, Opcode.MISS_NOFETCH, Opcode.DENIED, Opcode.HIT_OBJ}
)


@dataclass(frozen=True, slots=True)
class IcpMessage:
    """One ICP message. ``sender`` and ``requester`` are IPv4 addresses (``0.0.0.0``: not
    given); ``requester`` belongs to queries alone. ``hit_object`` is a HIT_OBJ's object, or
    None when its size field promised more bytes than came (then it counts as a plain HIT)."""

    opcode: Opcode
    request_number: int
    url: str
    options: int = 0
    option_data: int = 0
    sender: str = _UNSPECIFIED
    requester: str = _UNSPECIFIED
    hit_object: bytes | None = None

    @property
    def src_rtt(self) -> tuple[int, int] | None:
        """A reply's (hops, RTT in ms) to the origin, if it gives them (FLAG_SRC_RTT)."""
        if not self.options & FLAG_SRC_RTT:
            return None
        return self.option_data >> 16, self.option_data & 0xFFFF


def query(
    request_number: int, url: str, *, src_rtt: bool = False, requester: str = _UNSPECIFIED
) -> IcpMessage:
    """A QUERY for ``url``, asking for the origin RTT if ``src_rtt``."""
    options = FLAG_SRC_RTT if src_rtt else 0
    return IcpMessage(Opcode.QUERY, request_number, url, options, requester=requester)


def reply(to: IcpMessage, opcode: Opcode, *, rtt: tuple[int, int] | None = None) -> IcpMessage:
    """The answer ``opcode`` to the query ``to``: its request number and URL echoed (Squid
    drops a reply that does not echo the number). ``rtt`` (hops, milliseconds) is included
    only when the query asked for it (RFC 2186 3)."""
    if opcode not in REPLIES or opcode is Opcode.HIT_OBJ:
        raise ValueError(f"{opcode.name} is not a reply this codec makes")
    options = data = 0
    if rtt is not None and to.options & FLAG_SRC_RTT:
        hops, ms = rtt
        options, data = FLAG_SRC_RTT, (min(hops, 0xFFFF) << 16) | min(ms, 0xFFFF)
    return IcpMessage(opcode, to.request_number, to.url, options, data)


def encode(message: IcpMessage) -> bytes:
    """The datagram for ``message``; ValueError if it could not be decoded back."""
    url = message.url.encode("latin-1")
    if 0 in url:  # (an int: asking for bytes in bytes first raises and drops a TypeError)
        raise ValueError("an ICP URL cannot hold a NUL byte")
    if message.opcode is Opcode.QUERY:
        payload = _address(message.requester) + url + b"\x00"
    elif message.opcode is Opcode.HIT_OBJ:
        obj = message.hit_object or b""
        if len(obj) > 0xFFFF:
            raise ValueError("a HIT_OBJ object is at most 65,535 bytes")
        payload = url + b"\x00" + struct.pack("!H", len(obj)) + obj
    else:
        payload = url + b"\x00"
    length = HEADER.size + len(payload)
    if length > MAX_MESSAGE:
        raise ValueError(f"an ICP message is at most {MAX_MESSAGE} bytes, this is {length}")
    words = (message.request_number, message.options, message.option_data)
    if not all(0 <= w <= 0xFFFF_FFFF for w in words):
        raise ValueError("request number, options and option data are 32-bit unsigned")
    header = HEADER.pack(
        message.opcode,
        VERSION,
        length,
        message.request_number,
        message.options,
        message.option_data,
        int.from_bytes(_address(message.sender), "big"),
    )
    return header + payload


def decode(data: bytes) -> IcpMessage:
    """The message in the datagram ``data``; MalformedIcp or UnknownIcpOpcode if there is
    none that RFC 2186 defines."""
    if len(data) < HEADER.size:
        raise MalformedIcp(f"{len(data)} bytes: shorter than the {HEADER.size}-byte header")
    if len(data) > MAX_MESSAGE:
        raise MalformedIcp(f"{len(data)} bytes: longer than {MAX_MESSAGE}")
    opcode, version, length, number, options, option_data, sender = HEADER.unpack_from(data)
    if version != VERSION:
        raise MalformedIcp(f"version {version}, not 2")
    if length != len(data):
        raise MalformedIcp(f"length field {length} but {len(data)} bytes came")
    try:
        op = Opcode(opcode)
    except ValueError:
        raise UnknownIcpOpcode(f"opcode {opcode}") from None
    payload = data[HEADER.size :]
    requester = _UNSPECIFIED
    if op is Opcode.QUERY:
        if len(payload) < 4:
            raise MalformedIcp("a query without its requester address")
        requester = str(ipaddress.IPv4Address(payload[:4]))
        payload = payload[4:]
    end = payload.find(b"\x00")
    if end < 0:
        raise MalformedIcp("the URL is not NUL-terminated")
    url, rest = payload[:end].decode("latin-1"), payload[end + 1 :]
    hit_object = None
    if op is Opcode.HIT_OBJ:
        if len(rest) >= 2:
            (size,) = struct.unpack_from("!H", rest)
            if len(rest) - 2 >= size:
                hit_object = rest[2 : 2 + size]
    elif rest:
        raise MalformedIcp(f"{len(rest)} bytes after the URL's NUL")
    return IcpMessage(
        op,
        number,
        url,
        options,
        option_data,
        str(ipaddress.IPv4Address(sender)),
        requester,
        hit_object,
    )


# The common exchange, taken straight from the bytes by the endpoint (it answers hundreds of
# thousands a second): a QUERY without options, answered HIT or MISS.
_PLAIN_QUERY = struct.Struct("!HH4xI")  # opcode and version, length, options
_PLAIN_REPLY = struct.Struct("!BBH4s12x")  # opcode, version, length, request number
_QUERY_V2 = (Opcode.QUERY << 8) | VERSION
_QUERY_URL = HEADER.size + 4  # (after the requester address)


def plain_query_url(data: bytes) -> bytes | None:
    """The URL bytes of ``data`` if it is a QUERY without options that ``decode`` accepts
    (its URL the rest of the datagram), else None: the caller then decodes it in full."""
    size = len(data)
    end = size - 1
    if end < _QUERY_URL or data[end] or _PLAIN_QUERY.unpack_from(data) != (_QUERY_V2, size, 0):
        return None
    url = data[_QUERY_URL:end]
    return None if 0 in url else url


def plain_reply(query: bytes, opcode: Opcode) -> bytes:
    """``encode(reply(decode(query), opcode))`` for a query ``plain_query_url`` accepts:
    its request number and URL echoed, no options, no sender address."""
    return _PLAIN_REPLY.pack(opcode, VERSION, len(query) - 4, query[4:8]) + query[_QUERY_URL:]


def _address(text: str) -> bytes:
    try:
        return ipaddress.IPv4Address(text).packed
    except ValueError:
        raise ValueError(f"not an IPv4 address: {text!r}") from None
