"""harvest_common.replication.wire: transfers (framed entries with a SHA-256 trailer,
compressed with zstd) round trip, and anything cut short, corrupted, malformed or too large is
refused whole; change lists round trip through JSON and refuse malformed input."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_common.errors import ReplicatorError, WireError
from harvest_common.replication import wire
from harvest_common.replication.version import Version
from harvest_common.replication.wire import Change, ChangeList, Entry

FAST = settings(max_examples=60, deadline=None)

RECORD = b"@FILE { http://a.example/\nTitle{5}:\tHello\n}\n"
LIVE = Entry("o1", "c", "http://a.example/", "g@h:1", 1_700_000_000.5, Version(5.0, "m"), RECORD)
GONE = Entry("o2", "c", "http://b.example/", "g@h:1", 0.0, Version(6.25, "n", True), None)
# Every byte value, newlines and what looks like a header or trailer: records are counted.
BINARY = Entry(
    "o3",
    "c",
    "http://c.example/",
    "g@h:1",
    12.0,
    Version(7.0, "m"),
    bytes(range(256)) + b'\n{"end":0,"sha256":""}\n',
)

texts = st.text(max_size=16)
finite = st.floats(allow_nan=False, allow_infinity=False)
versions = st.builds(Version, finite, texts, st.booleans())


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    version = draw(versions)
    record = None if version.deleted else draw(st.binary(max_size=200))
    return Entry(draw(texts), draw(texts), draw(texts), draw(texts), draw(finite), version, record)


changes = st.builds(Change, st.integers(0, 2**62), texts, versions)
change_lists = st.builds(
    ChangeList,
    texts,
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.lists(changes, max_size=8).map(tuple),
)


def framed(lines: list[bytes], *, end: object = 1) -> bytes:
    """A transfer of raw ``lines`` (headers and records, as given) with a trailer of ``end``
    entries and the right hash: what is refused is refused for its content, not its hash."""
    body = wire.MAGIC + b"".join(lines)
    trailer = {"end": end, "sha256": hashlib.sha256(body).hexdigest()}
    return body + json.dumps(trailer).encode() + b"\n"


def header(**changes: Any) -> dict[str, Any]:
    """LIVE's header, with ``changes`` (None removes a key)."""
    fields: dict[str, Any] = {
        "oid": "o1",
        "collection": "c",
        "url": "http://a.example/",
        "gatherer": "g",
        "expires": 5.0,
        "version": [1.0, "m", False],
        "size": len(RECORD),
    }
    fields.update(changes)
    return {key: value for key, value in fields.items() if value is not None}


def line(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode() + b"\n"


# -- round trips ----------------------------------------------------------------------------


@FAST
@given(st.lists(entries(), max_size=6))
def test_encode_decode_round_trip(items: list[Entry]) -> None:
    raw = wire.encode(items)
    assert raw.startswith(wire.MAGIC)
    assert wire.decode(raw) == items


@FAST
@given(st.lists(entries(), max_size=6))
def test_pack_unpack_round_trip(items: list[Entry]) -> None:
    packed = wire.pack(items)
    assert wire.unpack(packed) == items
    # What travels is compressed: it is not the plain transfer.
    assert packed != wire.encode(items)


def test_a_small_transfer_round_trips_with_tombstones_and_binary_records() -> None:
    items = [LIVE, GONE, BINARY]
    assert wire.decode(wire.encode(items)) == items
    back = wire.unpack(wire.pack(items))
    assert back == items
    assert [entry.record for entry in back] == [RECORD, None, BINARY.record]
    assert [entry.version.deleted for entry in back] == [False, True, False]


def test_an_empty_transfer_round_trips() -> None:
    assert wire.decode(wire.encode([])) == []
    assert wire.unpack(wire.pack([])) == []


def test_the_transfer_format_is_magic_headers_records_and_a_trailer() -> None:
    raw = wire.encode([LIVE, GONE])
    lines = raw.split(b"\n")
    assert raw.startswith(b"HRV1\n")
    first = json.loads(lines[1])
    assert first == {
        "oid": "o1",
        "collection": "c",
        "url": "http://a.example/",
        "gatherer": "g@h:1",
        "expires": 1_700_000_000.5,
        "version": [5.0, "m", False],
        "size": len(RECORD),
    }
    assert json.loads(lines[-2]) == {
        "end": 2,
        "sha256": hashlib.sha256(raw[: raw.rindex(b'{"end"')]).hexdigest(),
    }
    assert raw.endswith(b"\n")


# -- refused transfers ----------------------------------------------------------------------


def test_a_transfer_cut_at_any_byte_is_refused() -> None:
    raw = wire.encode([LIVE, GONE, BINARY])
    for size in range(len(raw)):
        with pytest.raises(WireError):
            wire.decode(raw[:size])


def test_a_packed_transfer_cut_at_any_byte_is_refused() -> None:
    packed = wire.pack([LIVE, GONE, BINARY])
    for size in range(len(packed)):
        with pytest.raises(WireError):
            wire.unpack(packed[:size])


def test_a_flipped_byte_in_a_record_fails_the_hash() -> None:
    raw = wire.encode([LIVE, GONE])
    start = raw.index(RECORD)
    for at in range(start, start + len(RECORD)):
        for mask in (0x01, 0x20, 0x80):
            corrupted = bytearray(raw)
            corrupted[at] ^= mask
            with pytest.raises(WireError, match="SHA-256"):
                wire.decode(bytes(corrupted))


def test_any_flipped_bit_of_a_transfer_is_refused() -> None:
    raw = wire.encode([LIVE, GONE])
    for at in range(len(raw)):
        for bit in range(8):
            corrupted = bytearray(raw)
            corrupted[at] ^= 1 << bit
            with pytest.raises(WireError):
                wire.decode(bytes(corrupted))


def test_a_packed_transfer_whose_content_is_corrupted_is_refused() -> None:
    items = [LIVE, GONE, BINARY]
    packed = wire.pack(items)
    refused = 0
    for at in range(len(packed)):
        corrupted = bytearray(packed)
        corrupted[at] ^= 0x55
        try:
            got = wire.unpack(bytes(corrupted))
        except WireError:
            refused += 1
        else:
            # A flip zstd does not notice (a frame header bit it ignores) must still yield
            # exactly what was sent: the trailer's hash vouches for the content.
            assert got == items
    assert refused >= len(packed) * 9 // 10


def test_a_trailer_with_a_wrong_count_is_refused() -> None:
    body = [line(header()), RECORD]
    assert wire.decode(framed(body)) == [
        Entry("o1", "c", "http://a.example/", "g", 5.0, Version(1.0, "m"), RECORD)
    ]
    for end in (0, 2, -1, "1", None, [1]):
        with pytest.raises(WireError, match="trailer"):
            wire.decode(framed(body, end=end))


def test_a_trailer_with_other_keys_is_refused() -> None:
    body = wire.MAGIC + line(header()) + RECORD
    digest = hashlib.sha256(body).hexdigest()
    for trailer in (
        {"end": 1},
        {"end": 1, "sha256": digest, "more": 1},
        {"end": 1, "sha256": digest.upper()},
        {"end": 1, "sha256": 5},
    ):
        with pytest.raises(WireError):
            wire.decode(body + line(trailer))


def test_bytes_after_the_trailer_are_refused() -> None:
    raw = wire.encode([LIVE])
    for extra in (b"x", b"\n", wire.encode([GONE]), b"\x00"):
        with pytest.raises(WireError, match="after"):
            wire.decode(raw + extra)


def test_bytes_after_the_compressed_frame_are_refused() -> None:
    packed = wire.pack([LIVE])
    for extra in (b"x", b"\x00" * 8, wire.pack([GONE]), packed):
        with pytest.raises(WireError):
            wire.unpack(packed + extra)


def test_data_that_is_not_a_transfer_is_refused() -> None:
    for data in (b"", b"HRV1", b"HRV2\n", b"hello\n", b"\n" + wire.encode([LIVE])[1:]):
        with pytest.raises(WireError):
            wire.decode(data)
    for packed in (b"", b"not zstd at all", zstandard.ZstdCompressor().compress(b"HRV1\n")):
        with pytest.raises(WireError):
            wire.unpack(packed)


def test_a_zstd_bomb_over_the_limit_is_refused() -> None:
    bomb = zstandard.ZstdCompressor(level=19).compress(wire.MAGIC + b"\x00" * 4_000_000)
    assert len(bomb) < 4_000
    with pytest.raises(WireError, match="more than 100000 bytes"):
        wire.unpack(bomb, limit=100_000)
    # A transfer of exactly the limit is taken; one byte less is refused.
    packed = wire.pack([LIVE, BINARY])
    size = len(wire.encode([LIVE, BINARY]))
    assert wire.unpack(packed, limit=size) == [LIVE, BINARY]
    with pytest.raises(WireError, match="more than"):
        wire.unpack(packed, limit=size - 1)


# -- entries and headers --------------------------------------------------------------------


def test_an_entry_has_a_record_exactly_when_its_version_is_live() -> None:
    with pytest.raises(WireError):
        Entry("o", "c", "u", "g", 1.0, Version(1.0, "m", True), b"@FILE { u\n}\n")
    with pytest.raises(WireError):
        Entry("o", "c", "u", "g", 1.0, Version(1.0, "m", False), None)
    # An empty record is still a record.
    assert Entry("o", "c", "u", "g", 1.0, Version(1.0, "m"), b"").record == b""


def test_a_header_whose_size_contradicts_its_version_is_refused() -> None:
    live_without_record = framed([line(header(size=-1))])
    with pytest.raises(WireError, match="live version"):
        wire.decode(live_without_record)
    tombstone_with_record = framed([line(header(version=[1.0, "m", True])), RECORD])
    with pytest.raises(WireError, match="live version"):
        wire.decode(tombstone_with_record)


@pytest.mark.parametrize(
    "bad",
    [
        header(oid=None),
        header(size=None),
        {**header(), "extra": 1},
        header(oid=5),
        header(collection=["c"]),
        header(url=7),
        header(gatherer=False),
        header(expires="5"),
        header(expires=True),
        header(expires=10**400),  # no float holds it
        header(size=-2),
        header(size=True),
        header(size=3.0),
        header(size="48"),
        header(version=[1.0, "m"]),
        header(version=[True, "m", False]),
        header(version=[1.0, 3, False]),
        header(version=[1.0, "m", "no"]),
        header(version=[10**400, "m", False]),
    ],
)
def test_a_malformed_header_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(WireError):
        wire.decode(framed([line(bad), RECORD]))


@pytest.mark.parametrize(
    "text",
    [
        b'{"oid":"o1","collection":"c","url":"u","gatherer":"g","expires":NaN,'
        b'"version":[1.0,"m",false],"size":-1}',
        b'{"oid":"o1","collection":"c","url":"u","gatherer":"g","expires":Infinity,'
        b'"version":[1.0,"m",false],"size":-1}',
        b'{"oid":"o1","collection":"c","url":"u","gatherer":"g","expires":1,'
        b'"version":[NaN,"m",true],"size":-1}',
        b'{"oid":"o1","collection":"c","url":"u","gatherer":"g","expires":1,'
        b'"version":[-Infinity,"m",true],"size":-1}',
        b"[1, 2, 3]",
        b'"a string"',
        b"not json",
        b"\xff\xfe\x00",
        b'{"oid":' + b"[" * 100_000,  # deeper than the parser recurses
        b'{"oid":' + b"1" * 5_000 + b"}",  # longer than Python converts to an int
    ],
)
def test_a_header_line_that_is_not_a_valid_json_header_is_refused(text: bytes) -> None:
    with pytest.raises(WireError):
        wire.decode(framed([text + b"\n"]))


def test_a_record_longer_than_what_is_left_is_refused() -> None:
    data = wire.MAGIC + line(header(size=10_000)) + RECORD
    with pytest.raises(WireError, match="cut short"):
        wire.decode(data)


def test_wire_errors_are_replicator_errors() -> None:
    with pytest.raises(ReplicatorError):
        wire.decode(b"")


# -- change lists ---------------------------------------------------------------------------


@FAST
@given(change_lists)
def test_change_list_json_round_trip(listed: ChangeList) -> None:
    text = json.dumps(listed.to_json())
    assert ChangeList.from_json(json.loads(text)) == listed


def test_change_list_json_form() -> None:
    listed = ChangeList(
        "c", 3, 9, (Change(4, "o1", Version(1.5, "m")), Change(7, "o2", GONE.version))
    )
    assert listed.to_json() == {
        "collection": "c",
        "after": 3,
        "last_seq": 9,
        "through": 7,
        "changes": [[4, "o1", [1.5, "m", False]], [7, "o2", [6.25, "n", True]]],
    }


@pytest.mark.parametrize(
    ("listed", "upto", "complete"),
    [
        (ChangeList("c", 3, 9, ()), 9, True),  # nothing after 3 up to 9: seen to 9
        (ChangeList("c", 12, 9, ()), 12, True),  # asked past the end
        (ChangeList("c", 3, 9, (Change(9, "o", Version(1.0, "m")),)), 9, True),
        (ChangeList("c", 3, 9, (Change(5, "o", Version(1.0, "m")),)), 5, False),  # cut short
    ],
)
def test_change_list_upto_and_complete(listed: ChangeList, upto: int, complete: bool) -> None:
    assert listed.upto == upto
    assert listed.complete is complete


def test_a_change_list_left_out_of_accounts_for_the_same_seqs() -> None:
    first = ChangeList(
        "c", 3, 9, (Change(4, "o1", Version(1.0, "m")), Change(7, "o2", GONE.version))
    )
    kept = first.without(lambda change: change.oid == "o2")
    assert [c.oid for c in kept.changes] == ["o1"]
    assert kept.upto == 7
    assert not kept.complete
    joined = kept.followed_by(ChangeList("c", 7, 12, (Change(12, "o3", Version(2.0, "m")),)))
    assert joined is not None
    assert [c.seq for c in joined.changes] == [4, 12]
    assert (joined.after, joined.upto, joined.complete) == (3, 12, True)
    assert kept.followed_by(ChangeList("c", 8, 12, ())) is None  # a gap: 8 was not seen


GOOD: dict[str, Any] = {
    "collection": "c",
    "after": 0,
    "last_seq": 2,
    "through": 2,
    "changes": [[1, "o1", [1.0, "m", False]], [2, "o2", [2.0, "m", True]]],
}


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        "changes",
        {key: value for key, value in GOOD.items() if key != "changes"},
        {**GOOD, "more": 1},
        {**GOOD, "collection": 5},
        {**GOOD, "collection": None},
        {**GOOD, "after": -1},
        {**GOOD, "after": True},
        {**GOOD, "after": 1.0},
        {**GOOD, "after": "1"},
        {**GOOD, "last_seq": -5},
        {**GOOD, "last_seq": None},
        {key: value for key, value in GOOD.items() if key != "through"},
        {**GOOD, "through": 1},  # ends before its last change
        {**GOOD, "after": 3, "through": 2, "changes": []},  # ends before it starts
        {**GOOD, "through": -1},
        {**GOOD, "changes": {}},
        {**GOOD, "changes": "[]"},
        {**GOOD, "changes": [[1, "o1"]]},
        {**GOOD, "changes": [[1, "o1", [1.0, "m", False], 4]]},
        {**GOOD, "changes": [(1, "o1", [1.0, "m", False])]},
        {**GOOD, "changes": [[-1, "o1", [1.0, "m", False]]]},
        {**GOOD, "changes": [[False, "o1", [1.0, "m", False]]]},
        {**GOOD, "changes": [[1.5, "o1", [1.0, "m", False]]]},
        {**GOOD, "changes": [[1, 1, [1.0, "m", False]]]},
        {**GOOD, "changes": [[1, "o1", [1.0, "m"]]]},
        {**GOOD, "changes": [[1, "o1", [float("nan"), "m", False]]]},
        {**GOOD, "changes": [[1, "o1", None]]},
    ],
)
def test_a_malformed_change_list_is_refused(bad: object) -> None:
    assert ChangeList.from_json(GOOD).upto == 2
    with pytest.raises(WireError):
        ChangeList.from_json(bad)
