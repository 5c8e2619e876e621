"""What a TLS client's first flight says before any key is exchanged (RFC 8446 4.1.2): the
server name it asks for (SNI, RFC 6066 3) and the application protocols it offers (ALPN,
RFC 7301). Read from the bytes a CONNECT tunnel's client sends first, left in the socket
(peeked), to decide whether to intercept the tunnel or relay it.

Sans-IO: bytes in, a ClientHello, INCOMPLETE (more bytes needed) or NOT_TLS out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

_HANDSHAKE = 0x16
_CLIENT_HELLO = 1
_SERVER_NAME = 0
_ALPN = 16
# A ClientHello is a few hundred bytes to a few KiB (post-quantum key shares); one longer
# than this is not waited for.
MAX_HELLO = 64 * 1024
# A DNS name in an SNI extension: ASCII labels (IDNs arrive as A-labels), no trailing dot.
_HOST_NAME = re.compile(
    rb"(?=.{1,253}\Z)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    rb"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*"
)


class Peeked(Enum):
    INCOMPLETE = "incomplete"  # a ClientHello so far: read on
    NOT_TLS = "not-tls"  # not a TLS ClientHello (or not one to wait for)


INCOMPLETE = Peeked.INCOMPLETE
NOT_TLS = Peeked.NOT_TLS


@dataclass(frozen=True, slots=True)
class ClientHello:
    server_name: str | None  # lower case; None if not sent (or not a host name)
    alpn: tuple[str, ...]  # protocols offered, in the client's order
    length: int  # bytes of the records that carried it


def parse(data: bytes) -> ClientHello | Peeked:
    """The ClientHello at the start of ``data`` (the records it spans may be several)."""
    handshake = bytearray()
    at = 0
    while True:
        if len(data) - at < 5:
            return INCOMPLETE if _may_be_tls(data) else NOT_TLS
        kind, major, length = data[at], data[at + 1], int.from_bytes(data[at + 3 : at + 5])
        if kind != _HANDSHAKE or major != 3 or not 0 < length <= 16384 + 256:
            return NOT_TLS
        if len(data) - at - 5 < length:
            if at == 0 and len(data) >= 9 and not _may_begin_hello(data[5:9]):
                return NOT_TLS  # (told by the message's header: no need to wait for more)
            return INCOMPLETE if at + 5 + length <= MAX_HELLO else NOT_TLS
        handshake += data[at + 5 : at + 5 + length]
        at += 5 + length
        if len(handshake) >= 4:
            if handshake[0] != _CLIENT_HELLO:
                return NOT_TLS
            needed = 4 + int.from_bytes(handshake[1:4])
            if needed > MAX_HELLO:
                return NOT_TLS
            if len(handshake) >= needed:
                hello = _hello(bytes(handshake[4:needed]), at)
                return hello if hello is not None else NOT_TLS


def _may_begin_hello(header: bytes) -> bool:
    """Whether a handshake message header is a ClientHello's of a length waited for."""
    return header[0] == _CLIENT_HELLO and 4 + int.from_bytes(header[1:4]) <= MAX_HELLO


def _may_be_tls(data: bytes) -> bool:
    """Whether the first bytes (fewer than a record header) could begin a handshake record."""
    return (not data or data[0] == _HANDSHAKE) and (len(data) < 2 or data[1] == 3)


class _Reader:
    """Length-prefixed fields, each read checked against what is left."""

    __slots__ = ("at", "data", "end")

    def __init__(self, data: bytes, at: int = 0, end: int | None = None) -> None:
        self.data, self.at, self.end = data, at, len(data) if end is None else end

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > self.end:
            raise ValueError("field past its end")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size))

    def vector(self, size: int) -> _Reader:
        length = self.number(size)
        inner = _Reader(self.data, self.at, self.at + length)
        self.take(length)
        return inner

    @property
    def left(self) -> int:
        return self.end - self.at


def _hello(body: bytes, length: int) -> ClientHello | None:
    """The fields of a ClientHello body; None if it is malformed."""
    try:
        r = _Reader(body)
        r.take(2 + 32)  # legacy_version, random
        r.vector(1)  # legacy_session_id
        suites = r.vector(2)
        if suites.left < 2 or suites.left % 2:
            return None
        r.vector(1)  # legacy_compression_methods
        name: str | None = None
        alpn: tuple[str, ...] = ()
        if r.left:
            extensions = r.vector(2)
            while extensions.left:
                kind = extensions.number(2)
                data = extensions.vector(2)
                if kind == _SERVER_NAME:
                    name = _server_name(data)
                elif kind == _ALPN:
                    alpn = _protocols(data)
        return ClientHello(name, alpn, length)
    except ValueError:
        return None


def _server_name(data: _Reader) -> str | None:
    """The host_name of a server_name extension (RFC 6066 3), if it is one."""
    names = data.vector(2)
    while names.left:
        kind = names.number(1)
        value = names.take(names.number(2))
        if kind == 0:  # host_name: there is one at most
            return value.decode("ascii").lower() if _HOST_NAME.fullmatch(value) else None
    return None


def _protocols(data: _Reader) -> tuple[str, ...]:
    offered = data.vector(2)
    out = []
    while offered.left:
        protocol = offered.take(offered.number(1))
        out.append(protocol.decode("latin-1"))
    return tuple(out)
