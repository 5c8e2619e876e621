"""HTCP/0.x messages (RFC 2756), as Squid sends and takes them: TST (is this object held, for
this request?), CLR (forget it) and NOP; sans-IO.

Where ICP carries a URL alone, a TST carries the whole request head, so a cache can tell
which variant of a Vary'd object a client needs, and whether credentials are involved. On the
wire: a header (LENGTH, MAJOR 0, MINOR; Squid sends MINOR 1), a DATA section (LENGTH, OPCODE
and RESPONSE nibbles, F1 and RR bits, TRANS-ID, OP-DATA) and an AUTH section (LENGTH 2 when
unsigned, which is all this code sends; signed messages are taken but their signatures are
not checked: access goes by address, as Squid's ``htcp_access``). Two things as Squid does
them: a TST response carries a DETAIL (its response, entity and cache headers) whether it is a
hit or not (RESPONSE 0 or 1, MO 0), and a CLR request's REASON sits in the low byte of a
16-bit field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from harvest_cache.errors import HarvestCacheError

_HEADER = struct.Struct("!HBB")  # LENGTH, MAJOR, MINOR
_DATA = struct.Struct("!HBBI")  # LENGTH, OPCODE<<4 | RESPONSE, F1<<1 | RR, TRANS-ID
_NO_AUTH = b"\x00\x02"
MAX_DATAGRAM = 8192  # Squid's buffer: it sends nothing longer and drops longer ones


class MalformedHtcp(HarvestCacheError):
    """A datagram that is not an HTCP/0 message this code can read."""


class Op(IntEnum):
    NOP = 0
    TST = 1
    MON = 2
    SET = 3
    CLR = 4


@dataclass(frozen=True, slots=True)
class Specifier:
    """What a TST or CLR is about: a request (RFC 2756 3.2)."""

    method: str
    uri: str
    version: str
    headers: tuple[tuple[str, str], ...]  # the request's end-to-end fields


@dataclass(frozen=True, slots=True)
class Detail:
    """What a TST response tells of the object (RFC 2756 3.3), as fields."""

    response: tuple[tuple[str, str], ...] = ()
    entity: tuple[tuple[str, str], ...] = ()
    cache: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Message:
    """One HTCP message. ``desired`` is F1 in a request (RD: a response is wanted) and
    ``overall`` F1 in a response (MO: RESPONSE is about the message, not the operation)."""

    op: Op
    trans_id: int
    response: bool = False  # RR: a response
    code: int = 0  # RESPONSE
    desired: bool = True
    overall: bool = False
    specifier: Specifier | None = None  # TST and CLR requests
    detail: Detail | None = None  # TST responses
    reason: int = 0  # CLR requests

    @property
    def hit(self) -> bool:
        """A TST response's answer: the entity is held."""
        return self.response and self.op is Op.TST and self.code == 0 and not self.overall


def tst(trans_id: int, specifier: Specifier) -> Message:
    return Message(Op.TST, trans_id, specifier=specifier)


def clr(trans_id: int, specifier: Specifier, *, reason: int = 0, desired: bool = True) -> Message:
    return Message(Op.CLR, trans_id, specifier=specifier, reason=reason, desired=desired)


def tst_answer(trans_id: int, hit: bool, detail: Detail) -> Message:
    return Message(Op.TST, trans_id, response=True, code=0 if hit else 1, detail=detail)


def clr_answer(trans_id: int, code: int) -> Message:
    """CLR RESPONSE: 0 had it, it is gone; 1 had it, kept it; 2 did not have it."""
    return Message(Op.CLR, trans_id, response=True, code=code)


def error_answer(request: Message, code: int) -> Message:
    """An answer about the message as a whole (MO=1): 2 opcode not implemented, 3/4
    version not supported, 5 not allowed."""
    return Message(request.op, request.trans_id, response=True, code=code, overall=True)


# -- encoding ----------------------------------------------------------------------------------


def _countstr(text: str) -> bytes:
    data = text.encode("latin-1", "replace")
    if len(data) > 0xFFFF:
        raise MalformedHtcp(f"a COUNTSTR of {len(data)} bytes")
    return struct.pack("!H", len(data)) + data


def _fields(fields: tuple[tuple[str, str], ...]) -> str:
    return "".join(f"{name}: {value}\r\n" for name, value in fields)


def _specifier(s: Specifier) -> bytes:
    return b"".join(
        (_countstr(s.method), _countstr(s.uri), _countstr(s.version), _countstr(_fields(s.headers)))
    )


def encode(message: Message) -> bytes:
    """The datagram for ``message``; MalformedHtcp if it would not fit in one."""
    op_data = b""
    if message.op in (Op.TST, Op.CLR) and not message.response:
        if message.specifier is None:
            raise MalformedHtcp(f"a {message.op.name} request needs a specifier")
        op_data = _specifier(message.specifier)
        if message.op is Op.CLR:
            op_data = struct.pack("!H", message.reason & 0xFF) + op_data
    elif message.op is Op.TST and message.response and not message.overall:
        detail = message.detail or Detail()
        op_data = (
            _countstr(_fields(detail.response))
            + _countstr(_fields(detail.entity))
            + _countstr(_fields(detail.cache))
        )
    flag = message.overall if message.response else message.desired
    data = (
        _DATA.pack(
            _DATA.size + len(op_data),
            (int(message.op) << 4) | (message.code & 0x0F),
            (int(flag) << 1) | int(message.response),
            message.trans_id & 0xFFFFFFFF,
        )
        + op_data
    )
    length = _HEADER.size + len(data) + len(_NO_AUTH)
    if length > MAX_DATAGRAM:
        raise MalformedHtcp(f"a message of {length} bytes")
    return _HEADER.pack(length, 0, 1) + data + _NO_AUTH


# -- decoding ----------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("at", "data", "end")

    def __init__(self, data: bytes, at: int, end: int) -> None:
        self.data, self.at, self.end = data, at, end

    def countstr(self) -> str:
        if self.at + 2 > self.end:
            raise MalformedHtcp("a COUNTSTR past the end of its section")
        (length,) = struct.unpack_from("!H", self.data, self.at)
        start = self.at + 2
        if start + length > self.end:
            raise MalformedHtcp("a COUNTSTR longer than its section")
        self.at = start + length
        return self.data[start : self.at].decode("latin-1")

    def u16(self) -> int:
        if self.at + 2 > self.end:
            raise MalformedHtcp("a field past the end of its section")
        (value,) = struct.unpack_from("!H", self.data, self.at)
        self.at += 2
        return int(value)


def parse_fields(text: str) -> tuple[tuple[str, str], ...]:
    """Header lines (CRLF or LF) as (name, value); lines without a colon are left out."""
    out = []
    for line in text.replace("\r\n", "\n").split("\n"):
        name, sep, value = line.partition(":")
        if sep and name and name.strip() == name:
            out.append((name, value.strip()))
    return tuple(out)


def decode(data: bytes) -> Message:
    """The message in a datagram; MalformedHtcp if it is not an HTCP/0 one this reads (an
    opcode without a reading here, MON or SET, is returned with no OP-DATA read)."""
    if len(data) < _HEADER.size + _DATA.size:
        raise MalformedHtcp(f"a datagram of {len(data)} bytes")
    length, major, _minor = _HEADER.unpack_from(data)
    if length != len(data):
        raise MalformedHtcp(f"LENGTH {length} for a datagram of {len(data)} bytes")
    if major != 0:
        raise MalformedHtcp(f"major version {major}")
    data_length, op_code, flags, trans_id = _DATA.unpack_from(data, _HEADER.size)
    end = _HEADER.size + data_length
    if data_length < _DATA.size or end > len(data):
        raise MalformedHtcp(f"a DATA LENGTH of {data_length}")
    try:
        op = Op(op_code >> 4)
    except ValueError:
        raise MalformedHtcp(f"opcode {op_code >> 4}") from None
    code = op_code & 0x0F
    response = bool(flags & 1)
    flag = bool(flags & 2)
    r = _Reader(data, _HEADER.size + _DATA.size, end)
    base = Message(op, trans_id, response=response, code=code)
    if response:
        base = Message(op, trans_id, response=True, code=code, overall=flag)
        if op is Op.TST and not flag:
            if r.at == r.end:
                return base  # (a miss may carry nothing)
            fields = [parse_fields(r.countstr()) for _ in range(3)]
            return Message(op, trans_id, True, code, overall=False, detail=Detail(*fields))
        return base
    if op is Op.TST:
        return Message(op, trans_id, desired=flag, specifier=_read_specifier(r))
    if op is Op.CLR:
        reason = r.u16() & 0xFF
        return Message(op, trans_id, desired=flag, specifier=_read_specifier(r), reason=reason)
    return Message(op, trans_id, desired=flag)


def _read_specifier(r: _Reader) -> Specifier:
    method, uri, version, headers = (r.countstr() for _ in range(4))
    if not method or not uri:
        raise MalformedHtcp("a specifier without a method or URI")
    return Specifier(method, uri, version, parse_fields(headers))
