"""The disk record codec: round trips, and every malformed record rejected as CorruptRecord."""

from __future__ import annotations

import pytest

from harvest_cache.http.stored import StoredHead
from harvest_cache.store.codec import CorruptRecord, ObjectRecord, _encode_json, decode, encode
from harvest_cache.store.entry import VaryMarker

HEAD = StoredHead(
    url="http://example.org/caf\u00e9?q=1",
    status=203,
    reason="Non-Authoritative Information",
    headers=(
        ("Content-Type", "text/html; charset=utf-8"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
        ("X-Raw", "bytes \udcff undecodable"),  # a lone surrogate from surrogateescape
    ),
    request_time=1700000000.123456,
    response_time=1700000000.5,
    body_length=12345,
    vary_key="accept-encoding=gzip",
)


@pytest.mark.parametrize(
    "record",
    [
        ObjectRecord(HEAD, "b:0123abcd", 0xFFFFFFFF),
        ObjectRecord(StoredHead("http://x/", 200, "", (), 0.0, 0.0, 0), "b:1", 0),
        VaryMarker("http://x/", ("accept", "accept-language"), "gen-7"),
        VaryMarker("http://x/", (), ""),
    ],
)
def test_round_trip(record: ObjectRecord | VaryMarker) -> None:
    data = encode(record)
    assert data[0] == 2
    assert decode(data) == record


@pytest.mark.parametrize(
    "record",
    [ObjectRecord(HEAD, "b:0123abcd", 7), VaryMarker("http://x/", ("accept",), "g")],
)
def test_records_of_the_first_format_are_still_read(record: ObjectRecord | VaryMarker) -> None:
    data = _encode_json(record)
    assert data[0] == 1
    assert decode(data) == record


def test_a_record_whose_text_holds_a_nul_is_written_in_the_first_format() -> None:
    head = HEAD._replace(headers=(("X-Odd", "a\x00b"),))
    data = encode(ObjectRecord(head, "", 0))
    assert data[0] == 1
    decoded = decode(data)
    assert isinstance(decoded, ObjectRecord)
    assert decoded.head == head


def test_repeated_header_fields_keep_their_order() -> None:
    decoded = decode(encode(ObjectRecord(HEAD, "b:1", 5)))
    assert isinstance(decoded, ObjectRecord)
    assert decoded.head.headers == HEAD.headers
    assert isinstance(decoded.head.headers[0], tuple)


def test_record_is_compact() -> None:
    assert len(encode(VaryMarker("http://x/", ("accept",), "g"))) < 40


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        b"\x03O[]",  # a format this version does not know
        b"\x02X" + b"\x00".join([b"u"] * 9),  # unknown kind
        b"\x02O" + b"\x00".join([b"u"] * 8),  # a field missing
        b"\x02Ou\x00200\x00OK\x000\x000\x005\x00\x00\x000\x00name",  # a name alone
        b"\x02Ou\x00two\x00OK\x000\x000\x005\x00\x00\x000",  # status is not a number
        b"\x02Ou\x00200\x00OK\x00nan\x000\x005\x00\x00\x000",  # time is not finite
        b"\x02Ou\x00200\x00OK\x000\x000\x005\x00\x00\x000\xff",  # not UTF-8
        b"\x02M",  # a marker without its generation
        b"\x01X[]",  # unknown kind
        b"\x01O{not json",
        b"\x01O\xff\xfe",
        b"\x01O[]",
        b'\x01O["u",200,"OK",[],0,0,5,"","b:1"]',  # a field missing
        b'\x01O["u","200","OK",[],0,0,5,"","b:1",0]',  # status is text
        b'\x01O["u",200,"OK",[["a"]],0,0,5,"","b:1",0]',  # header is not a pair
        b'\x01O["u",200,"OK",[["a",1]],0,0,5,"","b:1",0]',  # header value not text
        b'\x01O["u",200,"OK",[],"t",0,5,"","b:1",0]',  # time is text
        b'\x01M["u",["accept",3],"g"]',
        b'\x01M["u","accept","g"]',
        b'\x01M{"url":"u"}',
    ],
)
def test_malformed_records_are_rejected(data: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode(data)
