"""Fuzzing range requests: any Range and If-Range values, any length; answers that frame
correctly and stay inside the representation."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.http.headers import Headers
from harvest_cache.http.ranges import (
    MAX_RANGES,
    IgnoreRange,
    MultipartBody,
    Satisfiable,
    SinglePart,
    Unsatisfiable,
    answer_range,
    if_range_allows,
    parse_range,
)
from tests.fuzz.strategies import FUZZ, etags, fields, http_dates, soup, weighted

lengths = st.one_of(st.integers(0, 40), st.integers(0, 2**70))
max_ranges = st.one_of(st.just(MAX_RANGES), st.integers(1, 4))

# A range-spec: (first, last), (first, None) or (None, suffix); numerals may be huge.
_numeral = st.one_of(st.integers(0, 50), st.integers(0, 10**30)).map(str)
_spec = st.one_of(
    st.tuples(_numeral, st.one_of(st.none(), _numeral)),
    st.tuples(st.none(), _numeral),
)
_ows = st.sampled_from(["", " ", "\t", " \t"])

range_values = st.one_of(
    soup("bytes", "Bytes", "=", "-", ",", "bytes=", "0-", "-0", "1-2", "items", max_size=12),
    st.text(max_size=20),
    # Near the edges of what int() refuses: 4300 digits and more.
    st.integers(4290, 4310).map(lambda n: "bytes=" + "9" * n + "-"),
    st.integers(4290, 4310).map(lambda n: "bytes=-" + "9" * n),
)
if_ranges = st.one_of(st.none(), etags, http_dates, st.text(max_size=10))


def render(specs: Sequence[tuple[str | None, str | None]], ows: list[str], unit: str) -> str:
    parts = []
    for (first, last), space in zip(specs, ows, strict=False):
        text = f"-{last}" if first is None else f"{first}-{last or ''}"
        parts.append(f"{space}{text}{space}")
    return f"{unit}={','.join(parts)}"


def check_outcome(outcome: object, length: int, limit: int) -> None:
    if isinstance(outcome, Satisfiable):
        assert outcome.length == length
        assert 1 <= len(outcome.ranges) <= limit
        for r in outcome.ranges:
            assert 0 <= r.first <= r.last < length
        ordered = sorted(outcome.ranges, key=lambda r: r.first)
        for a, b in itertools.pairwise(ordered):
            assert a.last + 1 < b.first, outcome  # disjoint and not adjacent
    elif isinstance(outcome, Unsatisfiable):
        assert outcome.length == length
        assert outcome.content_range == f"bytes */{length}"
    else:
        assert isinstance(outcome, IgnoreRange), outcome
        assert outcome.reason in ("absent", "invalid", "unit", "too-many", "if-range", "empty")
        assert outcome.reason != "empty" or length == 0


@settings(FUZZ, max_examples=300)
@given(range_values, lengths, max_ranges)
def test_any_value_and_length_give_a_valid_outcome(value: str, length: int, limit: int) -> None:
    check_outcome(parse_range(value, length, max_ranges=limit), length, limit)


@settings(FUZZ, max_examples=300)
@given(
    st.lists(_spec, min_size=1, max_size=6),
    st.lists(_ows, min_size=6, max_size=6),
    st.integers(0, 60),
    max_ranges,
    st.sampled_from(["bytes", "BYTES", "Bytes"]),
)
def test_satisfiable_ranges_select_exactly_the_bytes_asked_for(
    specs: list[tuple[str | None, str | None]],
    ows: list[str],
    length: int,
    limit: int,
    unit: str,
) -> None:
    outcome = parse_range(render(specs, ows, unit), length, max_ranges=limit)
    check_outcome(outcome, length, limit)
    # What each range-spec selects, by RFC 9110 14.1.2, as a set of positions.
    wanted: set[int] = set()
    for first, last in specs:
        if first is None:
            assert last is not None
            wanted.update(range(max(0, length - int(last)), length))
        elif last is not None and int(last) < int(first):
            assert outcome == IgnoreRange("invalid")
            return
        else:
            end = length - 1 if last is None else min(int(last), length - 1)
            wanted.update(range(int(first), end + 1))
    if not wanted:
        assert outcome == Unsatisfiable(length)
    elif isinstance(outcome, IgnoreRange):
        assert outcome.reason == "too-many"
    else:
        assert isinstance(outcome, Satisfiable)
        got = {i for r in outcome.ranges for i in range(r.first, r.last + 1)}
        assert got == wanted


_LM = "Sun, 06 Nov 1994 08:49:37 GMT"
_validators = [("ETag", '"v1"'), ("Last-Modified", _LM), ("Date", "Mon, 07 Nov 1994 08:49:37 GMT")]
# Valid range-specs: last-pos at or after first-pos.
# Mostly short bounded ones, so that several stay apart and make a multipart answer.
_bounded = st.builds(lambda a, d: (str(a), str(a + d)), st.integers(0, 300), st.integers(0, 20))
_valid_spec = st.one_of(
    _bounded,
    _bounded,
    st.tuples(st.integers(0, 300).map(str), st.none()),
    st.tuples(st.none(), st.integers(0, 400).map(str)),
)
_rendered = st.one_of(
    st.lists(_valid_spec, min_size=1, max_size=5),
    # Several apart: a multipart answer.
    st.lists(
        st.builds(lambda a, d: (str(a * 8), str(a * 8 + d)), st.integers(0, 40), st.integers(0, 5)),
        min_size=2,
        max_size=6,
        unique=True,
    ),
).map(lambda specs: render(specs, [""] * len(specs), "bytes"))


@settings(FUZZ, max_examples=300)
@given(
    weighted((4, _rendered), (1, st.none()), (1, range_values)),
    # Mostly no If-Range or one that matches the stored validators, so that 206s are common.
    weighted((3, st.none()), (1, st.sampled_from(['"v1"', 'W/"v1"', _LM])), (1, if_ranges)),
    st.tuples(fields, st.sampled_from([True, True, False])).map(
        lambda f: Headers(f[0] + _validators if f[1] else f[0])
    ),
    st.integers(0, 300),
    max_ranges,
)
def test_answers_frame_what_they_carry(
    value: str | None, if_range: str | None, stored: Headers, length: int, limit: int
) -> None:
    answer = answer_range(value, if_range, stored, length, boundary="fuzz", max_ranges=limit)
    body = bytes(i % 251 for i in range(length))
    if isinstance(answer, SinglePart):
        assert 0 <= answer.range.first <= answer.range.last < length
        part = answer.body(body)
        assert len(part) == answer.content_length == answer.range.size
        assert dict(answer.headers)["Content-Length"] == str(len(part))
        assert answer.response_headers(stored).get_all("Content-Length") == [str(len(part))]
    elif isinstance(answer, MultipartBody):
        assert 2 <= len(answer.parts) <= limit
        assert all(0 <= p.first <= p.last < length for p in answer.parts)
        joined = answer.join(body)
        assert len(joined) == answer.content_length
        assert dict(answer.headers)["Content-Length"] == str(len(joined))
        assert joined.endswith(b"\r\n--fuzz--\r\n")
        assert joined.count(b"Content-Range: bytes ") >= len(answer.parts)
    else:
        check_outcome(answer, length, limit)
        if value is None:
            assert answer == IgnoreRange("absent")


@FUZZ
@given(if_ranges, fields.map(Headers))
def test_if_range_never_raises(if_range: str | None, stored: Headers) -> None:
    allowed = if_range_allows(if_range, stored)
    assert isinstance(allowed, bool)
    if if_range is None:
        assert allowed
    elif if_range.strip(" \t").startswith("W/"):
        assert not allowed  # a weak tag never matches (strong comparison)
