"""Fuzzing the disk tier's record codec: every record round-trips, and damaged or hostile
bytes are refused with CorruptRecord and nothing else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.http.stored import StoredHead
from harvest_cache.store.codec import FORMAT, CorruptRecord, ObjectRecord, decode, encode
from harvest_cache.store.entry import VaryMarker
from tests.fuzz.strategies import FUZZ, weighted

_JSON_FORMAT = 1  # the records of the first format, still read

# Any text, lone surrogates included (undecodable bytes kept by surrogateescape).
_text = st.text(st.characters(codec=None, categories=None), max_size=12)
_finite = st.floats(allow_nan=False, allow_infinity=False)
_int64 = st.integers(-(2**63), 2**63)

heads = st.builds(
    StoredHead,
    url=_text,
    status=st.integers(0, 999),
    reason=_text,
    headers=st.lists(st.tuples(_text, _text), max_size=5).map(tuple),
    request_time=_finite,
    response_time=_finite,
    body_length=_int64,
    vary_key=_text,
)
records: st.SearchStrategy[ObjectRecord | VaryMarker] = st.one_of(
    st.builds(ObjectRecord, heads, _text, st.integers(0, 2**32 - 1)),
    st.builds(VaryMarker, _text, st.lists(_text, max_size=4).map(tuple), _text),
)


def texts(record: ObjectRecord | VaryMarker) -> list[str]:
    if isinstance(record, VaryMarker):
        return [record.url, record.generation, *record.names]
    h = record.head
    return [h.url, h.reason, h.vary_key, record.body_key, *(t for pair in h.headers for t in pair)]


@settings(FUZZ, max_examples=300)
@given(records)
def test_decode_inverts_encode(record: ObjectRecord | VaryMarker) -> None:
    data = encode(record)
    # (the first format only for a record whose text holds the second's separator)
    assert data[0] == (_JSON_FORMAT if any("\0" in t for t in texts(record)) else FORMAT)
    assert decode(data) == record


def check_decodes_or_refuses(data: bytes) -> None:
    try:
        record = decode(data)
    except CorruptRecord:
        return
    # Whatever decodes is a well-typed record that encodes back to a record equal to it.
    assert isinstance(record, ObjectRecord | VaryMarker)
    assert decode(encode(record)) == record


# JSON documents near the record layout: the right arity and kinds, some of them wrong.
_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    _finite,
    _text,
    st.sampled_from([float("nan"), float("inf")]),
)
_json_values = st.recursive(_json_scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=12)


def _object_fields(draw: st.DrawFn) -> list[object]:
    return [
        draw(st.one_of(_text, _json_values)),
        draw(st.one_of(st.integers(0, 999), _json_values)),
        draw(st.one_of(_text, _json_values)),
        draw(
            st.one_of(st.lists(st.lists(_text, min_size=2, max_size=2), max_size=3), _json_values)
        ),
        draw(st.one_of(_finite, st.integers(), _json_values)),
        draw(st.one_of(_finite, _json_values)),
        draw(st.one_of(st.integers(0, 10**9), _json_values)),
        draw(st.one_of(_text, _json_values)),
        draw(st.one_of(_text, _json_values)),
        draw(st.one_of(st.integers(0, 2**32), _json_values)),
    ]


@st.composite
def near_records(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from([b"O", b"M", b"X"]))
    if kind == b"M":
        body: list[object] = [
            draw(_text),
            draw(st.one_of(st.lists(_text), _json_values)),
            draw(_text),
        ]
    else:
        body = _object_fields(draw)
    if draw(st.booleans()):
        body = list(draw(st.lists(_json_values, max_size=11))) if draw(st.booleans()) else body[:-1]
    return bytes((_JSON_FORMAT,)) + kind + json.dumps(body).encode("ascii")


_field_texts = st.one_of(
    _text,
    st.integers(-(2**70), 2**70).map(str),
    _finite.map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e999", " 7", "1_0", ""]),
)


@st.composite
def near_texts(draw: st.DrawFn) -> bytes:
    """Format 2 records: NUL-separated fields of any arity, some of the wrong kind."""
    kind = draw(st.sampled_from([b"O", b"M", b"X"]))
    fields = draw(st.lists(_field_texts, max_size=14))
    return bytes((FORMAT,)) + kind + "\0".join(fields).encode("utf-8", "surrogatepass")


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A valid record with bytes flipped, cut off or inserted."""
    data = bytearray(encode(draw(records)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip" and i < len(data):
            data[i] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[i:]
        else:
            data[i:i] = draw(st.binary(min_size=1, max_size=3))
    return bytes(data)


@settings(FUZZ, max_examples=400)
@given(
    weighted(
        (1, st.binary(max_size=40)),
        (1, st.binary(max_size=30).map(lambda b: bytes((FORMAT,)) + b)),
        (3, near_records()),
        (3, near_texts()),
        (3, damaged()),
    )
)
def test_any_bytes_decode_or_raise_corrupt_record(data: bytes) -> None:
    check_decodes_or_refuses(data)


# -- regression: codec-recursion ---------------------------------------------------------------
# A record nesting JSON deeper than the recursion limit once made json.loads raise
# RecursionError out of decode() (and so out of the disk tier): now a CorruptRecord, a miss.


@pytest.mark.parametrize("kind", [b"O", b"M"])
def test_deeply_nested_json_is_a_corrupt_record(kind: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode(b"\x01" + kind + b"[" * 100_000)


# -- regression: codec-bool --------------------------------------------------------------------
# JSON true/false decode as bools, which are ints too: a record with `true` as its status once
# decoded to StoredHead(status=True). Now bools (and NaN or infinite times) are CorruptRecord.


def _object_with(index: int, value: object) -> bytes:
    fields: list[object] = ["http://x/", 200, "OK", [], 1.0, 2.0, 0, "", "b:1", 0]
    fields[index] = value
    return b"\x01O" + json.dumps(fields).encode("ascii")


@pytest.mark.parametrize(("index", "value"), [(1, True), (6, False), (9, True), (4, True)])
def test_a_boolean_where_a_number_belongs_is_a_corrupt_record(index: int, value: bool) -> None:
    with pytest.raises(CorruptRecord):
        decode(_object_with(index, value))
