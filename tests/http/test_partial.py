"""Partial content's pure core: which 206s are parts, how parts combine, what they answer."""

from __future__ import annotations

import pytest

from harvest_cache.http.freshness import Heuristic
from harvest_cache.http.headers import Headers
from harvest_cache.http.partial import (
    MAX_PARTS,
    BadIndex,
    PartialIndex,
    Piece,
    Received,
    Span,
    add,
    decode_index,
    encode_index,
    parse_content_range,
    plan,
    received,
)
from harvest_cache.http.ranges import MultipartBody, SinglePart
from harvest_cache.http.stored import StoredHead

ETAG = '"v1"'
NOW = 1_000_000.0
HEURISTIC = Heuristic(10, 86400)


def part_headers(**extra: str) -> Headers:
    fields = {"Content-Range": "bytes 0-99/1000", "ETag": ETAG, "Content-Length": "100"}
    fields.update({name.replace("_", "-"): value for name, value in extra.items()})
    return Headers([(name, value) for name, value in fields.items() if value])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes 0-99/1000", (0, 99, 1000)),
        ("BYTES  5-5/6", (5, 5, 6)),
        ("bytes 0-99/*", None),  # the complete length unknown
        ("bytes */1000", None),  # an unsatisfied range's
        ("bytes 10-9/1000", None),
        ("bytes 0-1000/1000", None),  # last position beyond the length
        ("items 0-9/10", None),
        ("bytes 0-99/1000, bytes 200-299/1000", None),
    ],
)
def test_content_range(value: str, expected: tuple[int, int, int] | None) -> None:
    assert parse_content_range(value) == expected


def test_a_single_part_with_a_strong_tag_is_kept() -> None:
    assert received(206, part_headers()) == Received(0, 99, 1000, ETAG)


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (200, part_headers()),
        (206, part_headers(ETag='W/"v1"')),  # weak: cannot be combined
        (206, part_headers(ETag="")),
        (206, part_headers(Vary="Accept-Encoding")),
        (206, part_headers(Content_Length="99")),  # framing disagrees with the range
        (206, part_headers(Content_Range="bytes 0-99/*")),
        (206, part_headers(Content_Range="")),  # multipart/byteranges carries none
    ],
)
def test_what_is_not_kept(status: int, headers: Headers) -> None:
    assert received(status, headers) is None


def test_two_content_range_fields_are_not_a_part() -> None:
    headers = part_headers()
    headers.add("Content-Range", "bytes 200-299/1000")
    assert received(206, headers) is None


def part(first: int, last: int, etag: str = ETAG, length: int = 1000) -> Received:
    return Received(first, last, length, etag)


def test_a_first_part_makes_an_index() -> None:
    added = add(None, part(100, 199), "a")
    assert added is not None
    assert added.index == PartialIndex(1000, ETAG, (Span(100, 199, "a", 0),))
    assert added.dropped == frozenset()
    assert not added.index.complete


def test_a_new_part_supplies_what_it_overlaps() -> None:
    first = add(None, part(0, 499), "a")
    assert first is not None
    second = add(first.index, part(200, 299), "b")  # inside: a splits in two
    assert second is not None
    assert second.index.spans == (
        Span(0, 199, "a", 0),
        Span(200, 299, "b", 0),
        Span(300, 499, "a", 300),
    )
    assert second.dropped == frozenset()
    third = add(second.index, part(0, 349), "c")  # covers a's head and b whole
    assert third is not None
    assert third.index.spans == (Span(0, 349, "c", 0), Span(350, 499, "a", 350))
    assert third.dropped == {"b"}


def test_parts_covering_everything_are_complete() -> None:
    first = add(None, part(0, 599), "a")
    assert first is not None
    second = add(first.index, part(500, 999), "b")
    assert second is not None
    assert second.index.complete
    assert second.index.pieces(0, 999) == [Piece("a", 0, 500), Piece("b", 0, 500)]


def test_another_tag_or_length_replaces_the_index() -> None:
    first = add(None, part(0, 99), "a")
    assert first is not None
    for other in (part(0, 99, etag='"v2"'), part(0, 99, length=2000)):
        added = add(first.index, other, "b")
        assert added is not None
        assert added.index.spans == (Span(0, 99, "b", 0),)
        assert added.dropped == {"a"}


def test_an_index_names_at_most_max_parts() -> None:
    index = None
    for i in range(MAX_PARTS):
        added = add(index, part(i * 10, i * 10 + 4), str(i))
        assert added is not None
        index = added.index
    assert index is not None
    assert add(index, part(900, 909), "x") is None
    # A part that replaces others wholly still fits.
    covering = add(index, part(0, 999), "y")
    assert covering is not None
    assert covering.index.tokens == {"y"}


def test_pieces_need_every_byte() -> None:
    index = PartialIndex(1000, ETAG, (Span(0, 99, "a", 0), Span(200, 299, "b", 50)))
    assert index.pieces(10, 19) == [Piece("a", 10, 10)]
    assert index.pieces(250, 299) == [Piece("b", 100, 50)]
    assert index.pieces(50, 250) is None  # 100-199 not held
    assert index.pieces(300, 300) is None


def test_the_index_encoding_round_trips_and_rejects_damage() -> None:
    index = PartialIndex(1000, ETAG, (Span(0, 99, "a", 0), Span(200, 299, "b", 50)))
    assert decode_index(encode_index(index)) == index
    for damaged in (
        b"",
        b"not json",
        b'{"v":2,"length":1,"etag":"x","spans":[]}',
        b'{"v":1,"length":100,"etag":"x","spans":[[0,200,"a",0]]}',  # beyond the length
        b'{"v":1,"length":100,"etag":"x","spans":[[50,60,"a",0],[0,9,"b",0]]}',  # order
        b'{"v":1,"length":"100","etag":"x","spans":[]}',
    ):
        with pytest.raises(BadIndex):
            decode_index(damaged)


def held_head(cache_control: str = "max-age=60", age: float = 0.0) -> StoredHead:
    fields = (
        ("ETag", ETAG),
        ("Cache-Control", cache_control),
        ("Content-Type", "video/mp4"),
        ("Date", "Mon, 12 Jan 1970 13:46:40 GMT"),  # NOW
    )
    return StoredHead("http://o/v", 206, "Partial Content", fields, NOW - age, NOW - age, 10)


INDEX = PartialIndex(1000, ETAG, (Span(0, 499, "a", 0), Span(600, 999, "b", 0)))


def test_a_covered_range_of_a_fresh_index_is_answered() -> None:
    planned = plan(
        Headers([("Range", "bytes=100-199")]), held_head(), INDEX, NOW, HEURISTIC, boundary="B"
    )
    assert planned is not None
    assert not planned.validate
    assert isinstance(planned.answer, SinglePart)
    assert planned.pieces == ((Piece("a", 100, 100),),)


def test_several_covered_ranges_are_a_multipart_answer() -> None:
    request = Headers([("Range", "bytes=0-9,990-999")])
    planned = plan(request, held_head(), INDEX, NOW, HEURISTIC, boundary="B")
    assert planned is not None
    assert isinstance(planned.answer, MultipartBody)
    assert planned.pieces == ((Piece("a", 0, 10),), (Piece("b", 390, 10),))


def test_a_stale_index_is_validated_first() -> None:
    head = held_head(age=120)
    request = Headers([("Range", "bytes=0-9")])
    planned = plan(request, head, INDEX, NOW, HEURISTIC, boundary="B")
    assert planned is not None
    assert planned.validate
    after = plan(request, head, INDEX, NOW, HEURISTIC, boundary="B", validated=True)
    assert after is not None
    assert not after.validate
    no_cache = Headers([("Range", "bytes=0-9"), ("Cache-Control", "no-cache")])
    planned = plan(no_cache, held_head(), INDEX, NOW, HEURISTIC, boundary="B")
    assert planned is not None
    assert planned.validate


@pytest.mark.parametrize(
    "fields",
    [
        [("Range", "bytes=450-650")],  # 500-599 not held
        [("Range", "bytes=2000-")],  # unsatisfiable: the origin answers
        [("Range", "bytes=9-1")],  # invalid: ignored, so the whole is wanted
        [("Range", "bytes=0-9"), ("If-Range", '"v0"')],  # the client wants the whole
        [("Range", "bytes=0-9"), ("If-None-Match", '"v1"')],  # its own precondition
    ],
)
def test_what_the_parts_do_not_answer(fields: list[tuple[str, str]]) -> None:
    assert plan(Headers(fields), held_head(), INDEX, NOW, HEURISTIC, boundary="B") is None


def test_if_range_with_the_tag_held_is_answered() -> None:
    request = Headers([("Range", "bytes=0-9"), ("If-Range", ETAG)])
    assert plan(request, held_head(), INDEX, NOW, HEURISTIC, boundary="B") is not None
