"""ICP v2 messages (RFC 2186), byte for byte, and what the decoder refuses."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvest_cache.errors import IcpError, MalformedIcp, UnknownIcpOpcode
from harvest_cache.hierarchy.icp import (
    FLAG_HIT_OBJ,
    FLAG_SRC_RTT,
    MAX_MESSAGE,
    IcpMessage,
    Opcode,
    decode,
    encode,
    plain_query_url,
    plain_reply,
    query,
    reply,
)
from tests.fuzz.strategies import FUZZ

URL = "http://example.com/a"


def header(opcode: int, length: int, number: int = 7, options: int = 0, data: int = 0) -> bytes:
    """An ICP header written out by hand from RFC 2186 section 1, for comparison."""
    return (
        bytes([opcode, 2])
        + length.to_bytes(2, "big")
        + number.to_bytes(4, "big")
        + options.to_bytes(4, "big")
        + data.to_bytes(4, "big")
        + bytes(4)  # sender address
    )


def test_s1_a_query_on_the_wire() -> None:
    body = bytes(4) + URL.encode() + b"\x00"  # requester address (unspecified), URL, NUL
    assert encode(query(7, URL)) == header(1, 20 + len(body)) + body


def test_s2_a_reply_on_the_wire_echoes_number_and_url() -> None:
    asked = query(4_000_000_000, URL, src_rtt=True)
    answer = reply(asked, Opcode.MISS, rtt=(3, 42))
    body = URL.encode() + b"\x00"
    expected = header(3, 20 + len(body), 4_000_000_000, FLAG_SRC_RTT, (3 << 16) | 42) + body
    assert encode(answer) == expected
    assert decode(expected).src_rtt == (3, 42)


def test_s3_no_rtt_in_a_reply_unless_the_query_asked() -> None:
    answer = reply(query(1, URL), Opcode.HIT, rtt=(1, 5))
    assert (answer.options, answer.option_data, answer.src_rtt) == (0, 0, None)


def test_s3_rtt_and_hops_are_clamped_to_16_bits() -> None:
    answer = reply(query(1, URL, src_rtt=True), Opcode.HIT, rtt=(70_000, 99_999))
    assert answer.src_rtt == (0xFFFF, 0xFFFF)


@pytest.mark.parametrize("opcode", list(Opcode))
def test_s2_every_opcode_round_trips(opcode: Opcode) -> None:
    message = IcpMessage(
        opcode,
        123,
        URL,
        options=FLAG_HIT_OBJ if opcode is Opcode.QUERY else 0,
        sender="10.1.2.3",
        requester="192.0.2.9" if opcode is Opcode.QUERY else "0.0.0.0",
        hit_object=b"<html>" if opcode is Opcode.HIT_OBJ else None,
    )
    assert decode(encode(message)) == message


def test_s2_hit_obj_carries_its_object_and_a_short_one_counts_as_a_hit() -> None:
    whole = encode(IcpMessage(Opcode.HIT_OBJ, 1, URL, hit_object=b"abcdef"))
    assert decode(whole).hit_object == b"abcdef"
    cut = whole[:-2]  # the size field promises 6 bytes; 4 came
    cut = cut[:2] + struct.pack("!H", len(cut)) + cut[4:]
    short = decode(cut)
    assert (short.opcode, short.hit_object) == (Opcode.HIT_OBJ, None)


def test_s2_reply_refuses_what_is_no_reply() -> None:
    with pytest.raises(ValueError, match="not a reply"):
        reply(query(1, URL), Opcode.QUERY)


def with_length(data: bytes) -> bytes:
    return data[:2] + struct.pack("!H", len(data)) + data[4:]


GOOD = encode(query(9, URL))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (GOOD[:19], "shorter than the 20-byte header"),
        (b"", "shorter than the 20-byte header"),
        (with_length(GOOD[:1] + b"\x01" + GOOD[2:]), "version 1, not 2"),  # Squid drops v1
        (with_length(GOOD[:1] + b"\x03" + GOOD[2:]), "version 3, not 2"),
        (GOOD + b"\x00", "length field"),  # more bytes than the length says
        (GOOD[:-1], "length field"),  # fewer
        (with_length(GOOD[:-1]), "not NUL-terminated"),
        (with_length(header(1, 0) + b"\x00\x00"), "without its requester address"),
        (with_length(header(2, 0) + b"http://x/\x00junk"), "after the URL's NUL"),
        (with_length(header(3, 0) + b"http://x/"), "not NUL-terminated"),
        (with_length(header(1, 0) + bytes(4) + b"a" * MAX_MESSAGE + b"\x00"), "longer than"),
    ],
)
def test_malformed_datagrams_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(MalformedIcp, match=reason):
        decode(data)


@pytest.mark.parametrize("opcode", [0, 5, 9, 12, 20, 24, 255])
def test_s2_unknown_opcodes_are_told_apart(opcode: int) -> None:
    """(ICP_OP_INVALID and the unused numbers: ignored, not answered.)"""
    with pytest.raises(UnknownIcpOpcode):
        decode(with_length(header(opcode, 0) + b"http://x/\x00"))


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (IcpMessage(Opcode.HIT, 1, "http://x/\x00y"), "NUL"),
        (IcpMessage(Opcode.HIT, 1, "http://x/" + "a" * MAX_MESSAGE), "at most"),
        (IcpMessage(Opcode.HIT, 1, URL, sender="::1"), "IPv4"),
        (IcpMessage(Opcode.QUERY, 1, URL, requester="nowhere"), "IPv4"),
        (IcpMessage(Opcode.HIT_OBJ, 1, URL, hit_object=b"x" * 70_000), "65,535"),
    ],
)
def test_encode_refuses_what_decode_would(message: IcpMessage, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        encode(message)


_urls = st.text(st.characters(codec="latin-1", exclude_characters="\x00"), max_size=200)
_addresses = st.ip_addresses(v=4).map(str)
_messages = st.builds(
    IcpMessage,
    opcode=st.sampled_from([op for op in Opcode if op is not Opcode.HIT_OBJ]),
    request_number=st.integers(0, 2**32 - 1),
    url=_urls,
    options=st.integers(0, 2**32 - 1),
    option_data=st.integers(0, 2**32 - 1),
    sender=_addresses,
)


@FUZZ
@given(_messages)
def test_any_message_round_trips(message: IcpMessage) -> None:
    if message.opcode is not Opcode.QUERY:
        assert decode(encode(message)) == message
    else:
        assert decode(encode(message)).url == message.url


@FUZZ
@given(_messages, st.sampled_from([Opcode.HIT, Opcode.MISS, Opcode.MISS_NOFETCH]))
def test_the_fast_reading_and_reply_of_a_plain_query_are_the_codecs(
    message: IcpMessage, opcode: Opcode
) -> None:
    data = encode(message)
    url = plain_query_url(data)
    if message.opcode is not Opcode.QUERY or message.options:
        assert url is None
        return
    assert url == message.url.encode("latin-1")
    assert plain_reply(data, opcode) == encode(reply(decode(data), opcode))


def _queryish(tail: bytes, options: int) -> bytes:
    """A query's header with the right length field, ``options``, then ``tail``."""
    size = 24 + len(tail)
    return GOOD[:2] + struct.pack("!HII", size, 9, options) + GOOD[12:24] + tail


@FUZZ
@given(
    st.binary(max_size=64)
    | st.builds(_queryish, st.binary(max_size=40).map(lambda b: b + b"\x00"), st.just(0))
    | st.builds(_queryish, st.binary(max_size=40), st.integers(0, 2**32 - 1))
)
def test_what_the_fast_reading_takes_the_codec_decodes_alike(data: bytes) -> None:
    url = plain_query_url(data)
    if url is None:
        return
    message = decode(data)
    assert (message.opcode, message.options, message.url.encode("latin-1")) == (
        Opcode.QUERY,
        0,
        url,
    )


@FUZZ
@given(st.binary(max_size=64) | st.builds(lambda b: GOOD[:20] + b, st.binary(max_size=64)))
def test_any_bytes_decode_or_raise_an_icp_error(data: bytes) -> None:
    try:
        message = decode(data)
    except IcpError:
        return
    if message.opcode is not Opcode.HIT_OBJ:  # (whose bytes past the object are dropped)
        assert encode(message) == data
