"""hierarchy.htcp: messages as RFC 2756 and Squid lay them out, read back, and any datagram
answered with a message or MalformedHtcp (fuzzed)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvest_cache.hierarchy import htcp
from harvest_cache.hierarchy.htcp import Detail, MalformedHtcp, Op, Specifier

SPEC = Specifier(
    "GET", "http://www.example.org:80/a?b", "HTTP/1.1", (("Accept-Language", "fr"), ("X", "y"))
)


def test_a_tst_is_laid_out_as_rfc_2756_says() -> None:
    data = htcp.encode(htcp.tst(0x01020304, SPEC))
    length, major, minor = struct.unpack_from("!HBB", data)
    assert (length, major, minor) == (len(data), 0, 1)  # (Squid sends minor 1)
    data_length, op_code, flags, trans_id = struct.unpack_from("!HBBI", data, 4)
    assert op_code == 0x10  # TST, RESPONSE 0
    assert flags == 0b10  # RD=1 (F1), RR=0
    assert trans_id == 0x01020304
    assert data[4 + data_length :] == b"\x00\x02"  # AUTH of LENGTH 2: unsigned
    op_data = data[12 : 4 + data_length]
    assert op_data.startswith(b"\x00\x03GET\x00\x1dhttp://www.example.org:80/a?b\x00\x08HTTP/1.1")
    assert op_data.endswith(b"Accept-Language: fr\r\nX: y\r\n")


def test_messages_read_back_as_they_were_made() -> None:
    detail = Detail((("Age", "3"),), (("Expires", "Sat, 05 Dec 2026 10:00:00 GMT"),), ())
    for message in (
        htcp.tst(7, SPEC),
        htcp.tst_answer(7, True, detail),
        htcp.tst_answer(8, False, Detail((("Age", "0"),))),
        htcp.clr(9, SPEC, reason=1),
        htcp.clr(10, SPEC, desired=False),
        htcp.clr_answer(9, 2),
        htcp.error_answer(htcp.tst(11, SPEC), 5),
        htcp.Message(Op.NOP, 12),
    ):
        assert htcp.decode(htcp.encode(message)) == message, message
    assert htcp.decode(htcp.encode(htcp.tst_answer(7, True, detail))).hit
    assert not htcp.decode(htcp.encode(htcp.tst_answer(8, False, Detail()))).hit
    assert not htcp.decode(htcp.encode(htcp.error_answer(htcp.tst(1, SPEC), 5))).hit


def test_a_clr_reason_sits_in_the_low_byte_of_a_16_bit_field() -> None:
    data = htcp.encode(htcp.clr(1, SPEC, reason=1))
    assert data[12:14] == b"\x00\x01"


def test_a_signed_message_is_read_its_auth_left_aside() -> None:
    data = bytearray(htcp.encode(htcp.tst(3, SPEC)))
    auth = struct.pack("!HII", 2 + 8 + 2 + 2, 1, 2) + b"\x00\x00\x00\x00"
    data[-2:] = auth
    struct.pack_into("!H", data, 0, len(data))
    assert htcp.decode(bytes(data)).specifier == SPEC


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x00\x04\x00\x00", "a datagram of 4 bytes"),
        (b"\x00\x30\x00\x00" + bytes(28), "LENGTH 48 for a datagram of 32 bytes"),
        (struct.pack("!HBBHBBI", 14, 1, 0, 8, 0x10, 2, 1) + b"\x00\x02", "major version 1"),
        (struct.pack("!HBBHBBI", 14, 0, 0, 8, 0x90, 2, 1) + b"\x00\x02", "opcode 9"),
        (struct.pack("!HBBHBBI", 14, 0, 0, 99, 0x10, 2, 1) + b"\x00\x02", "DATA LENGTH of 99"),
        (struct.pack("!HBBHBBI", 16, 0, 0, 10, 0x10, 2, 1) + b"\x00\x09\x00\x02", "COUNTSTR"),
    ],
)
def test_what_cannot_be_read_is_malformed(data: bytes, says: str) -> None:
    with pytest.raises(MalformedHtcp, match=says):
        htcp.decode(data)


def test_a_specifier_too_long_for_a_datagram_is_refused() -> None:
    long = Specifier("GET", "http://h/" + "a" * 9000, "HTTP/1.1", ())
    with pytest.raises(MalformedHtcp, match="a message of"):
        htcp.encode(htcp.tst(1, long))


@given(st.binary(max_size=300))
def test_any_datagram_is_read_or_refused(data: bytes) -> None:
    with contextlib.suppress(MalformedHtcp):
        htcp.decode(data)


_GOOD = htcp.encode(htcp.tst(5, SPEC))


@given(st.integers(0, len(_GOOD) - 1), st.integers(0, 255))
def test_a_real_message_with_any_byte_changed_is_read_or_refused(at: int, value: int) -> None:
    data = bytearray(_GOOD)
    data[at] = value
    try:
        message = htcp.decode(bytes(data))
    except MalformedHtcp:
        return
    assert message.trans_id >= 0
