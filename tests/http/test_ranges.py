"""Range requests served from a stored response (RFC 9110 14, 13.1.5, 15.3.7)."""

from __future__ import annotations

import email
import email.message
import itertools
import random

import pytest

from harvest_cache.http.dates import format_http_date
from harvest_cache.http.headers import Headers
from harvest_cache.http.ranges import (
    MAX_RANGES,
    ByteRange,
    IgnoreRange,
    MultipartBody,
    Satisfiable,
    SinglePart,
    Unsatisfiable,
    answer_range,
    if_range_allows,
    multipart_body,
    parse_range,
    partial_content,
)

T = 1_700_000_000.0
LM = format_http_date(T - 86400)


def spans(value: str, length: int, **kwargs: int) -> list[tuple[int, int]]:
    outcome = parse_range(value, length, **kwargs)
    assert isinstance(outcome, Satisfiable), outcome
    assert outcome.length == length
    return [(r.first, r.last) for r in outcome.ranges]


@pytest.mark.parametrize(
    ("value", "length", "expected"),
    [
        # The examples of RFC 9110 14.1.2.
        ("bytes=0-499", 10000, [(0, 499)]),
        ("bytes=500-999", 10000, [(500, 999)]),
        ("bytes=-500", 10000, [(9500, 9999)]),
        ("bytes=9500-", 10000, [(9500, 9999)]),
        ("bytes=0-0,-1", 10000, [(0, 0), (9999, 9999)]),
        ("bytes=500-600,601-999", 10000, [(500, 999)]),
        ("bytes=500-700,601-999", 10000, [(500, 999)]),
        # Edges.
        ("bytes=0-0", 1, [(0, 0)]),
        ("bytes=-1", 1, [(0, 0)]),
        ("bytes=0-", 1, [(0, 0)]),
        ("bytes=9-9", 10, [(9, 9)]),
        ("bytes=0-9", 10, [(0, 9)]),
        ("bytes=007-08", 10, [(7, 8)]),  # leading zeros are still decimal
    ],
)
def test_s14_1_2_byte_range_forms_resolve_to_inclusive_positions(
    value: str, length: int, expected: list[tuple[int, int]]
) -> None:
    assert spans(value, length) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes=0-999", [(0, 499)]),
        ("bytes=400-10000", [(400, 499)]),
        ("bytes=499-500", [(499, 499)]),
        ("bytes=0-499", [(0, 499)]),
    ],
)
def test_s14_1_2_last_pos_beyond_the_end_is_clipped(
    value: str, expected: list[tuple[int, int]]
) -> None:
    assert spans(value, 500) == expected


@pytest.mark.parametrize("value", ["bytes=-500", "bytes=-501", "bytes=-999999"])
def test_s14_1_2_suffix_longer_than_the_representation_is_all_of_it(value: str) -> None:
    assert spans(value, 500) == [(0, 499)]


@pytest.mark.parametrize("unit", ["bytes", "Bytes", "BYTES", "bYtEs"])
def test_s14_1_range_unit_is_case_insensitive(unit: str) -> None:
    assert spans(f"{unit}=0-1", 10) == [(0, 1)]


@pytest.mark.parametrize(
    "value",
    [
        "bytes=0-1,3-4",
        "bytes=0-1, 3-4",
        "bytes=0-1 ,3-4",
        "bytes=0-1 ,\t3-4",
        "bytes=0-1,  \t  3-4",
        "bytes=,0-1,,3-4,",  # empty list elements (RFC 9110 5.6.1)
        "bytes= 0-1,3-4 ",
        " bytes=0-1,3-4\t",  # the field's own surrounding whitespace
    ],
)
def test_s5_6_1_whitespace_and_empty_elements_around_commas(value: str) -> None:
    assert spans(value, 10) == [(0, 1), (3, 4)]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "bytes",
        "bytes=",
        "bytes=,",
        "bytes= , ",
        "bytes=-",
        "bytes=5-4",  # last-pos below first-pos
        "bytes=0-1,5-4",  # one invalid spec spoils the set
        "bytes=010-9",
        "bytes=a-b",
        "bytes=0-1;x",
        "bytes =0-1",
        "bytes=0 - 1",
        "bytes=0-1-2",
        "bytes=--1",
        "bytes=+1-2",
        "bytes=1_0-20",  # int() would take this
        "bytes=0x1-2",
        "bytes=1.5-2",
        "bytes=\u0661-\u0662",  # Arabic-Indic digits: \d and int() would take these
        "bytes=\u00b2-3",
        "bytes=0-1\n",  # only SP and HTAB are whitespace here
        "bytes=0-1,\x0b2-3",
        "=0-1",
        "by tes=0-1",
        "b\u00fctes=0-1",
        "bytes=0-1, bytes=2-3",  # two Range lines joined by Headers.get
        "bytes==0-1",
    ],
)
def test_s14_2_an_invalid_range_field_is_ignored(value: str) -> None:
    assert parse_range(value, 10) == IgnoreRange("invalid")


@pytest.mark.parametrize("value", ["items=0-1", "none=0-1", "pages=1-2", "x=-"])
def test_s14_2_a_range_unit_other_than_bytes_is_ignored(value: str) -> None:
    assert parse_range(value, 10) == IgnoreRange("unit")


@pytest.mark.parametrize(
    "value",
    [
        "bytes=500-",
        "bytes=500-500",
        "bytes=1000-2000",
        "bytes=-0",  # a zero suffix selects nothing
        "bytes=-000",
        "bytes=500-,600-700,-0",
    ],
)
def test_s14_1_2_no_satisfiable_spec_is_a_416_with_the_length(value: str) -> None:
    outcome = parse_range(value, 500)
    assert outcome == Unsatisfiable(500)
    assert isinstance(outcome, Unsatisfiable)
    assert outcome.status == 416
    assert outcome.headers == (("Content-Range", "bytes */500"),)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes=1000-,0-9", [(0, 9)]),
        ("bytes=-0,0-9", [(0, 9)]),
        ("bytes=0-9,500-", [(0, 9)]),
        ("bytes=499-,-0", [(499, 499)]),
    ],
)
def test_s15_3_7_2_unsatisfiable_specs_among_satisfiable_ones_are_dropped(
    value: str, expected: list[tuple[int, int]]
) -> None:
    assert spans(value, 500) == expected


@pytest.mark.parametrize("value", ["bytes=0-", "bytes=0-0", "bytes=-1", "bytes=-0", "bytes=-5,0-"])
def test_s14_1_2_nothing_of_a_zero_length_representation_is_satisfiable(value: str) -> None:
    outcome = parse_range(value, 0)
    assert outcome == Unsatisfiable(0)
    assert isinstance(outcome, Unsatisfiable)
    assert outcome.content_range == "bytes */0"


@pytest.mark.parametrize("value", ["bytes=0-", "bytes=-5", "bytes=0-0"])
def test_s14_2_a_range_of_an_empty_representation_is_answered_whole(value: str) -> None:
    assert answer_range(value, None, Headers(), 0, boundary="b") == IgnoreRange("empty")


def test_s14_2_a_zero_length_representation_still_ignores_invalid_fields() -> None:
    assert parse_range("bytes=5-4", 0) == IgnoreRange("invalid")


HUGE = "9" * 5000  # past int()'s 4300-digit limit for str


@pytest.mark.parametrize(
    ("value", "length", "expected"),
    [
        (f"bytes=0-{HUGE}", 500, [(0, 499)]),
        (f"bytes=-{HUGE}", 500, [(0, 499)]),
        (f"bytes={'0' * 5000}1-2", 500, [(1, 2)]),
        (f"bytes=0-{'0' * 5000}2", 500, [(0, 2)]),
        ("bytes=999999999999999-", 10**15, [(10**15 - 1, 10**15 - 1)]),
        (f"bytes=999999999999990-{HUGE}", 10**15, [(10**15 - 10, 10**15 - 1)]),
        ("bytes=-99999999999999999999", 10**15, [(0, 10**15 - 1)]),
    ],
)
def test_s14_1_1_huge_numerals_are_clipped_without_overflow(
    value: str, length: int, expected: list[tuple[int, int]]
) -> None:
    assert spans(value, length) == expected


@pytest.mark.parametrize(
    ("value", "length", "outcome"),
    [
        (f"bytes={HUGE}-", 500, Unsatisfiable(500)),
        (f"bytes={HUGE}-{HUGE}", 500, Unsatisfiable(500)),
        ("bytes=1000000000000000-", 10**15, Unsatisfiable(10**15)),
        (f"bytes={'9' * 30}-{'9' * 29}", 500, IgnoreRange("invalid")),  # first > last, exactly
        (f"bytes={'9' * 29}-{'9' * 30}", 500, Unsatisfiable(500)),
        (f"bytes={HUGE}8-{HUGE}9", 500, Unsatisfiable(500)),
        (f"bytes={HUGE}9-{HUGE}8", 500, IgnoreRange("invalid")),
    ],
)
def test_s14_1_1_huge_numerals_compare_exactly(
    value: str, length: int, outcome: IgnoreRange | Unsatisfiable
) -> None:
    assert parse_range(value, length) == outcome


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes=0-99,50-149", [(0, 149)]),  # overlapping
        ("bytes=50-149,0-99", [(0, 149)]),
        ("bytes=0-99,100-199", [(0, 199)]),  # adjacent
        ("bytes=0-99,101-199", [(0, 99), (101, 199)]),  # a one-byte gap stays
        ("bytes=0-0,0-0,0-0", [(0, 0)]),
        ("bytes=0-999,10-19,20-29", [(0, 999)]),  # contained
        ("bytes=-100,0-", [(0, 999)]),
        ("bytes=10-19,0-4,5-9", [(0, 19)]),
        # Disjoint ranges keep the requested order, even out of order (15.3.7.2 SHOULD) ...
        ("bytes=500-599,0-99", [(500, 599), (0, 99)]),
        ("bytes=900-,0-99,-50", [(900, 999), (0, 99)]),
        # ... and a coalesced part takes the place of its earliest member.
        ("bytes=500-599,0-99,550-650", [(500, 650), (0, 99)]),
        ("bytes=0-9,500-599,5-20", [(0, 20), (500, 599)]),
        ("bytes=700-799,500-599,0-9,550-750", [(500, 799), (0, 9)]),
    ],
)
def test_s15_3_7_2_overlapping_and_adjacent_ranges_are_coalesced(
    value: str, expected: list[tuple[int, int]]
) -> None:
    assert spans(value, 1000) == expected


def disjoint(count: int) -> str:
    return "bytes=" + ",".join(f"{2 * i}-{2 * i}" for i in range(count))


def test_s14_2_more_parts_than_the_limit_are_refused() -> None:
    assert MAX_RANGES == 100
    assert len(spans(disjoint(100), 1000)) == 100
    assert parse_range(disjoint(101), 1000) == IgnoreRange("too-many")


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        ("bytes=0-0,2-2", Satisfiable((ByteRange(0, 0), ByteRange(2, 2)), 10)),
        ("bytes=0-0,2-2,4-4", IgnoreRange("too-many")),
        # The limit counts parts after coalescing ...
        ("bytes=0-0,1-1,2-2,3-3,4-4", Satisfiable((ByteRange(0, 4),), 10)),
        # ... and after unsatisfiable specs are dropped.
        ("bytes=0-0,2-2,50-,60-", Satisfiable((ByteRange(0, 0), ByteRange(2, 2)), 10)),
    ],
)
def test_s14_2_the_part_limit_is_configurable(
    value: str, outcome: Satisfiable | IgnoreRange
) -> None:
    assert parse_range(value, 10, max_ranges=2) == outcome


def test_s14_2_a_field_listing_too_many_elements_is_ignored_unread() -> None:
    # 1001 copies of one range would coalesce to one part, but the field is not read.
    assert parse_range("bytes=" + ",".join(["0-0"] * 1001), 10) == IgnoreRange("too-many")
    assert spans("bytes=" + ",".join(["0-0"] * 1000), 10) == [(0, 0)]
    # The bound scales with a larger limit.
    many = disjoint(2000)
    assert len(spans(many, 4000, max_ranges=2000)) == 2000
    assert parse_range(many, 4000, max_ranges=150) == IgnoreRange("too-many")


@pytest.mark.parametrize(("length", "max_ranges"), [(-1, 100), (10, 0)])
def test_parse_range_refuses_impossible_arguments(length: int, max_ranges: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_range("bytes=0-1", length, max_ranges=max_ranges)


def stored(*fields: tuple[str, str]) -> Headers:
    return Headers(fields)


WITH_ETAG = stored(("ETag", '"v1"'), ("Last-Modified", LM), ("Date", format_http_date(T)))


@pytest.mark.parametrize(
    ("if_range", "headers", "allows"),
    [
        (None, stored(), True),
        (None, WITH_ETAG, True),
        # Entity-tags: strong comparison only.
        ('"v1"', WITH_ETAG, True),
        (' "v1" ', WITH_ETAG, True),
        ('"v2"', WITH_ETAG, False),
        ('W/"v1"', WITH_ETAG, False),  # a weak tag never matches
        ('"v1"', stored(("ETag", 'W/"v1"')), False),  # nor does a weak stored one
        ('"v1"', stored(("Last-Modified", LM), ("Date", format_http_date(T))), False),
        ('"v1"', stored(("ETag", '"v1"'), ("ETag", '"v2"')), False),  # ambiguous
        ('"v1', WITH_ETAG, False),
        ('W/"v1', WITH_ETAG, False),
        # Dates: equal to a strong Last-Modified.
        (LM, WITH_ETAG, True),
        ("Monday, 13-Nov-23 22:13:20 GMT", WITH_ETAG, True),  # LM in the obsolete format
        (format_http_date(T - 86401), WITH_ETAG, False),  # earlier: exact match only
        (format_http_date(T - 86399), WITH_ETAG, False),  # later: not "since"
        (LM, stored(("ETag", '"v1"')), False),  # no Last-Modified
        (LM, stored(("Last-Modified", LM)), False),  # no Date: cannot be shown strong
        (LM, stored(("Last-Modified", LM), ("Date", LM)), False),  # weak: same second
        (
            LM,
            stored(("Last-Modified", LM), ("Date", format_http_date(T - 86399))),
            True,  # one second later is enough (8.8.2.2)
        ),
        (LM, stored(("Last-Modified", LM), ("Date", "soon")), False),
        (LM, stored(("Last-Modified", LM), ("Last-Modified", LM), ("Date", LM)), False),
        # Neither.
        ("", WITH_ETAG, False),
        ("yesterday", WITH_ETAG, False),
        ("W/", WITH_ETAG, False),
        ("*", WITH_ETAG, False),
    ],
)
def test_s13_1_5_if_range(if_range: str | None, headers: Headers, allows: bool) -> None:
    assert if_range_allows(if_range, headers) is allows


def test_s13_1_5_the_obsolete_date_in_the_table_is_last_modified() -> None:
    # Guards the table above: the RFC 850 date must name the same instant as LM.
    assert LM == "Mon, 13 Nov 2023 22:13:20 GMT"


@pytest.mark.parametrize(
    ("first", "last", "value"),
    [
        # The examples of RFC 9110 14.4, for a 1234-byte representation.
        (0, 499, "bytes 0-499/1234"),
        (500, 999, "bytes 500-999/1234"),
        (500, 1233, "bytes 500-1233/1234"),
        (734, 1233, "bytes 734-1233/1234"),
        (42, 1233, "bytes 42-1233/1234"),
    ],
)
def test_s14_4_content_range(first: int, last: int, value: str) -> None:
    assert ByteRange(first, last).content_range(1234) == value


def test_s14_4_content_range_of_a_416() -> None:
    assert Unsatisfiable(1234).content_range == "bytes */1234"


def test_s15_3_7_1_a_single_part() -> None:
    # The example of RFC 9110 15.3.7.1.
    outcome = parse_range("bytes=21010-", 47022)
    assert isinstance(outcome, Satisfiable)
    answer = partial_content(outcome, "image/gif", "unused")
    assert answer == SinglePart(ByteRange(21010, 47021), 47022)
    assert isinstance(answer, SinglePart)
    assert answer.status == 206
    assert answer.content_length == 26012
    assert answer.headers == (
        ("Content-Range", "bytes 21010-47021/47022"),
        ("Content-Length", "26012"),
    )
    body = bytes(range(256)) * 183 + bytes(range(174))
    assert len(body) == 47022
    assert answer.body(body) == body[21010:]


def test_s15_3_7_1_the_response_fields_replace_the_stored_framing() -> None:
    answer = SinglePart(ByteRange(2, 4), 10)
    headers = answer.response_headers(
        stored(("Content-Type", "text/plain"), ("Content-Length", "10"), ("ETag", '"v1"'))
    )
    assert headers == Headers(
        [
            ("Content-Type", "text/plain"),
            ("ETag", '"v1"'),
            ("Content-Range", "bytes 2-4/10"),
            ("Content-Length", "3"),
        ]
    )


def test_s15_3_7_2_one_part_left_from_several_is_a_single_part() -> None:
    outcome = parse_range("bytes=0-9,5-19,900-", 20)
    assert isinstance(outcome, Satisfiable)
    assert partial_content(outcome, "text/plain", "SEP") == SinglePart(ByteRange(0, 19), 20)


BODY = b"0123456789abcdefghij"

# RFC 9110 14.6's example, with a real body: the first delimiter opens the body, each
# part's bytes end at the CRLF of the next delimiter, and the close delimiter ends it.
EXPECTED_MULTIPART = (
    b"--THIS_STRING_SEPARATES\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Range: bytes 0-2/20\r\n"
    b"\r\n"
    b"012"
    b"\r\n--THIS_STRING_SEPARATES\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Range: bytes 15-19/20\r\n"
    b"\r\n"
    b"fghij"
    b"\r\n--THIS_STRING_SEPARATES--\r\n"
)


def multipart(value: str, content_type: str | None) -> MultipartBody:
    outcome = parse_range(value, len(BODY))
    assert isinstance(outcome, Satisfiable)
    answer = partial_content(outcome, content_type, "THIS_STRING_SEPARATES")
    assert isinstance(answer, MultipartBody)
    return answer


def test_s14_6_multipart_byteranges_body_byte_for_byte() -> None:
    answer = multipart("bytes=0-2,-5", "text/plain; charset=utf-8")
    assert answer.status == 206
    assert answer.join(BODY) == EXPECTED_MULTIPART
    assert answer.content_length == len(EXPECTED_MULTIPART) == 235
    # The parts, as a driver streaming from a file sees them.
    assert [(p.first, p.last) for p in answer.parts] == [(0, 2), (15, 19)]
    assert answer.closing == b"\r\n--THIS_STRING_SEPARATES--\r\n"
    assert b"".join(p.head + BODY[p.first : p.last + 1] for p in answer.parts) + (
        answer.closing
    ) == (EXPECTED_MULTIPART)


def test_s14_6_multipart_response_fields() -> None:
    answer = multipart("bytes=0-2,-5", "text/plain")
    headers = answer.response_headers(
        stored(("Content-Type", "text/plain"), ("Content-Length", "20"), ("ETag", '"v1"'))
    )
    assert headers == Headers(
        [
            ("ETag", '"v1"'),
            ("Content-Type", "multipart/byteranges; boundary=THIS_STRING_SEPARATES"),
            ("Content-Length", str(answer.content_length)),
        ]
    )
    assert "Content-Range" not in headers  # each part has its own (15.3.7.2)


def test_s14_6_multipart_body_parses_as_mime() -> None:
    answer = multipart("bytes=-1,3-4,8-9", "application/octet-stream")
    head = f"Content-Type: {answer.content_type}\r\n\r\n".encode()
    message = email.message_from_bytes(head + answer.join(BODY))
    assert message.is_multipart()
    parts = message.get_payload()
    assert isinstance(parts, list)
    got = []
    for part in parts:
        assert isinstance(part, email.message.Message)
        assert part["Content-Type"] == "application/octet-stream"
        got.append((part["Content-Range"], part.get_payload(decode=True)))
    assert got == [
        ("bytes 19-19/20", b"j"),
        ("bytes 3-4/20", b"34"),
        ("bytes 8-9/20", b"89"),
    ]


def test_s14_6_parts_without_a_stored_content_type_carry_only_content_range() -> None:
    answer = multipart("bytes=0-0,2-2", None)
    assert answer.join(BODY) == (
        b"--THIS_STRING_SEPARATES\r\nContent-Range: bytes 0-0/20\r\n\r\n0"
        b"\r\n--THIS_STRING_SEPARATES\r\nContent-Range: bytes 2-2/20\r\n\r\n2"
        b"\r\n--THIS_STRING_SEPARATES--\r\n"
    )
    assert answer.content_length == len(answer.join(BODY))


@pytest.mark.parametrize(
    "boundary", ["", "a b", '"q"', "a;b", "a=b", "a/b", "x" * 71, "\u00e9", "a\r\nb"]
)
def test_s14_6_a_boundary_that_would_need_quoting_is_refused(boundary: str) -> None:
    with pytest.raises(ValueError, match="boundary"):
        multipart_body((ByteRange(0, 0), ByteRange(2, 2)), 20, None, boundary)


@pytest.mark.parametrize("boundary", ["x" * 70, "0", "a'+_.-Z9"])
def test_s14_6_token_boundaries_are_used_unquoted(boundary: str) -> None:
    answer = multipart_body((ByteRange(0, 0), ByteRange(2, 2)), 20, None, boundary)
    assert answer.content_type == f"multipart/byteranges; boundary={boundary}"
    assert answer.join(BODY).startswith(f"--{boundary}\r\n".encode())


def test_rfc2046_s5_1_1_a_multipart_body_needs_a_part() -> None:
    with pytest.raises(ValueError, match="at least one part"):
        multipart_body((), 20, None, "SEP")


@pytest.mark.parametrize(
    ("ranges", "content_type", "match"),
    [
        ((ByteRange(0, 0), ByteRange(2, 20)), None, "not within 20 bytes"),
        ((ByteRange(-1, 0), ByteRange(2, 2)), None, "not within 20 bytes"),
        ((ByteRange(3, 2), ByteRange(5, 6)), None, "not within 20 bytes"),
        ((ByteRange(0, 0), ByteRange(2, 2)), "text/plain\r\nX-Injected: 1", "line break"),
    ],
)
def test_s14_6_parts_must_lie_within_the_representation(
    ranges: tuple[ByteRange, ...], content_type: str | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        multipart_body(ranges, 20, content_type, "SEP")


def test_a_body_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="expected 20"):
        multipart("bytes=0-2,-5", None).join(BODY[:-1])
    with pytest.raises(ValueError, match="expected 20"):
        SinglePart(ByteRange(0, 2), 20).body(BODY + b"!")


RANGE_STORED = stored(
    ("Content-Type", "text/plain"),
    ("ETag", '"v1"'),
    ("Last-Modified", LM),
    ("Date", format_http_date(T)),
)


@pytest.mark.parametrize(
    ("range_value", "if_range", "expected", "status"),
    [
        (None, None, IgnoreRange("absent"), 200),
        (None, '"v1"', IgnoreRange("absent"), 200),  # If-Range without Range: ignored
        ("bytes=5-4", '"v2"', IgnoreRange("invalid"), 200),
        ("items=0-1", None, IgnoreRange("unit"), 200),
        ("bytes=0-1", '"v2"', IgnoreRange("if-range"), 200),
        ("bytes=0-1", LM, SinglePart(ByteRange(0, 1), 20), 206),
        ("bytes=0-1", None, SinglePart(ByteRange(0, 1), 20), 206),
        # A failed If-Range means the whole body, not a 416 (13.2.2).
        ("bytes=50-", 'W/"v1"', IgnoreRange("if-range"), 200),
        ("bytes=50-", '"v1"', Unsatisfiable(20), 416),
        ("bytes=0-0,2-2,4-4", None, IgnoreRange("too-many"), 200),
    ],
)
def test_s13_2_2_answer_range(
    range_value: str | None,
    if_range: str | None,
    expected: object,
    status: int,
) -> None:
    answer = answer_range(range_value, if_range, RANGE_STORED, 20, boundary="SEP", max_ranges=2)
    assert answer == expected
    assert answer.status == status


def test_s13_2_2_answer_range_builds_multipart_parts_with_the_stored_type() -> None:
    answer = answer_range("bytes=0-0,-1", '"v1"', RANGE_STORED, 20, boundary="SEP")
    assert isinstance(answer, MultipartBody)
    assert answer.join(BODY) == (
        b"--SEP\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-0/20\r\n\r\n0"
        b"\r\n--SEP\r\nContent-Type: text/plain\r\nContent-Range: bytes 19-19/20\r\n\r\nj"
        b"\r\n--SEP--\r\n"
    )


# Deterministic fuzzing (hypothesis is not installed): range-ish strings, with mutations,
# for several lengths. parse_range must never raise, and what it returns must be in bounds
# and cover exactly the bytes the request names.

_ALPHABET = "0123456789--,, \t=;xbB*9\u0661"
_FUZZ_MAX_RANGES = 8


def _fuzz_value(rng: random.Random) -> str:
    prefix = rng.choice(["bytes="] * 6 + ["Bytes=", "bytes", "items=", "", "="])
    elements = []
    for _ in range(rng.randint(0, 6)):
        a, b = rng.randint(0, 120), rng.randint(0, 120)
        roll = rng.random()
        if roll < 0.05:
            # Numerals past any length, some past int()'s 4300-digit limit for str.
            elements.append(f"{a}{'0' * rng.randint(10, 20)}-{b}{'9' * rng.randint(10, 4500)}")
        elif roll < 0.1:
            elements.append("".join(rng.choices(_ALPHABET, k=rng.randint(0, 6))))
        elif roll < 0.15:
            elements.append(f"{a}-{b}")  # last-pos may be below first-pos
        else:
            lo, hi = min(a, b), max(a, b)
            elements.append(rng.choice([f"{lo}-{hi}", f"{a}-", f"-{b}", f"-{b % 3}"]))
    value = prefix + "".join(e + rng.choice([",", ", ", " ,", ",,", ",\t"]) for e in elements)
    chars = list(value)
    for _ in range(rng.choice([0] * 8 + [1, 2])):  # a few mutations
        i = rng.randint(0, len(chars))
        if rng.random() < 0.5 and i < len(chars):
            del chars[i]
        else:
            chars.insert(i, rng.choice(_ALPHABET))
    return "".join(chars)


def _named_bytes(value: str, length: int) -> set[int]:
    """The bytes a valid bytes range-set names, computed the slow and obvious way."""

    def number(digits: str) -> int:
        digits = digits.lstrip("0") or "0"
        return int(digits) if len(digits) < 10 else 10**10

    named: set[int] = set()
    for element in value.strip(" \t").split("=", 1)[1].split(","):
        spec = element.strip(" \t")
        if spec:
            first, last = spec.split("-")
            if not first:
                named.update(range(max(0, length - number(last)), length))
            else:
                end = min(number(last), length - 1) if last else length - 1
                named.update(range(number(first), end + 1))
    return named


def test_s14_1_2_fuzz_parse_never_raises_and_stays_in_bounds() -> None:
    rng = random.Random(1234)
    seen = {IgnoreRange: 0, Unsatisfiable: 0, Satisfiable: 0}
    for _ in range(4000):
        value = _fuzz_value(rng)
        length = rng.choice([0, 1, 7, 100, 10**12])
        outcome = parse_range(value, length, max_ranges=_FUZZ_MAX_RANGES)
        seen[type(outcome)] += 1
        if isinstance(outcome, Unsatisfiable):
            assert outcome.length == length
            if length <= 100:
                assert not _named_bytes(value, length), value
        elif isinstance(outcome, Satisfiable):
            assert outcome.length == length
            assert 1 <= len(outcome.ranges) <= _FUZZ_MAX_RANGES
            assert all(0 <= r.first <= r.last < length for r in outcome.ranges), value
            ordered = sorted(outcome.ranges, key=lambda r: r.first)
            # Coalesced: no two parts overlap or touch.
            assert all(a.last + 1 < b.first for a, b in itertools.pairwise(ordered)), value
            if length <= 100:
                covered = {i for r in outcome.ranges for i in range(r.first, r.last + 1)}
                assert covered == _named_bytes(value, length), value
    # The generator reaches every outcome often enough to mean something.
    assert min(seen.values()) >= 300, seen
