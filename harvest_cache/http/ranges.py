"""Range requests answered from a complete stored response (RFC 9110 14, 13.1.5, 15.3.7).

A cache holding a whole 200 can serve a client's ``GET`` with ``Range`` itself: a 206 with
one part or a ``multipart/byteranges`` body, a 416 when nothing asked for exists, or the
whole 200 when the Range field is to be ignored. These functions decide which, from the
field values, the stored header fields and the stored body's length; the driver moves the
bytes. They apply to GET only (RFC 9110 14.2: a server MUST ignore Range on other methods),
and after the conditionals: a request answered 304 never gets here (RFC 9110 13.2.2).

Choices where RFC 9110 leaves one:

- An invalid ranges-specifier (bad syntax, a range-spec whose last-pos is below its
  first-pos, an empty range-set) makes the whole field ignored, not a 416 (14.2 allows
  either; a 200 is what every client can use). A unit other than ``bytes`` is ignored too.
- A range unit is compared case-insensitively (14.1), so ``Bytes=0-1`` is valid. Optional
  whitespace and empty elements are accepted around the range-set's elements (5.6.1), so
  ``bytes= 0-1 ,,2-3`` is valid; whitespace inside a range-spec or before ``=`` is not.
- Numerals of any length are read without overflow (14.1.1): a position beyond the end is
  clipped as if it were the length, so ``bytes=0-99999999999999999999999`` is the whole body.
- A zero-length representation has no satisfiable range: 14.1.2 calls a non-zero suffix
  satisfiable there, but no Content-Range can describe the empty part it would select, so
  every range request for it is answered 416 ``bytes */0``.
- Unsatisfiable range-specs among satisfiable ones are dropped (15.3.7.2).
- Overlapping or adjacent ranges are coalesced, whatever their order (15.3.7.2 MAY); the
  parts keep the order in which the request first named them (15.3.7.2 SHOULD), so disjoint
  ranges listed out of order are served out of order, as a client may want (14.2).
- More than ``max_ranges`` parts left after coalescing (default ``MAX_RANGES``) is a broken or
  hostile client (14.2, 17.15): the Range field is ignored and the whole body served. A field
  listing more than ``10 * max_ranges`` elements (at least 1000) is ignored unread, to bound
  the work.
- One part left, even from several requested ranges, is sent as a single-part 206, never as
  a one-part multipart (15.3.7.2 allows both; only the single part suits every client).
- Multipart framing follows the example of 14.6: the body starts with the first delimiter
  (no preamble) and ends with the close delimiter and a CRLF, as Apache, nginx and Go do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from harvest_cache.http.dates import header_date, parse_http_date
from harvest_cache.http.headers import Headers
from harvest_cache.http.validation import parse_etag, response_etag

MAX_RANGES = 100

IgnoreReason: TypeAlias = Literal["absent", "invalid", "unit", "too-many", "if-range", "empty"]

_OWS = " \t"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# [0-9], not \d: \d would admit other scripts' digits, which int() then reads.
_RANGE_SPEC = re.compile(r"([0-9]*)-([0-9]*)")
# The RFC 2046 boundary characters that are also token characters, so the boundary needs no
# quotes in Content-Type (some clients mishandle quoted ones, RFC 9110 14.6).
_BOUNDARY = re.compile(r"[0-9A-Za-z'+_.-]{1,70}")
_MIN_SPEC_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Inclusive byte positions ``first``..``last`` of the representation."""

    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def as_slice(self) -> slice:
        """The slice of the body bytes this range selects."""
        return slice(self.first, self.last + 1)

    def content_range(self, complete_length: int) -> str:
        """The Content-Range value for this range (RFC 9110 14.4)."""
        return f"bytes {self.first}-{self.last}/{complete_length}"


@dataclass(frozen=True, slots=True)
class IgnoreRange:
    """Serve the whole representation, 200: the Range field is absent, invalid, of another
    unit, asks for too many parts, or If-Range did not match; or the representation is
    empty, with nothing to cut (RFC 9110 14.2 lets a server ignore Range)."""

    reason: IgnoreReason
    status: ClassVar[int] = 200


@dataclass(frozen=True, slots=True)
class Unsatisfiable:
    """416: no range-spec selects any byte of a representation of ``length`` bytes."""

    length: int
    status: ClassVar[int] = 416

    @property
    def content_range(self) -> str:
        """The unsatisfied-range Content-Range a 416 carries (RFC 9110 14.4, 15.5.17)."""
        return f"bytes */{self.length}"

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        return (("Content-Range", self.content_range),)


@dataclass(frozen=True, slots=True)
class Satisfiable:
    """The parts to send, in order: disjoint, non-adjacent, each within ``length``."""

    ranges: tuple[ByteRange, ...]
    length: int


RangeOutcome: TypeAlias = IgnoreRange | Unsatisfiable | Satisfiable


def parse_range(value: str, length: int, *, max_ranges: int = MAX_RANGES) -> RangeOutcome:
    """What a ``Range`` field value asks of a representation of ``length`` bytes.

    Never raises on ``value``; see the module docstring for the choices made.
    """
    if length < 0 or max_ranges < 1:
        raise ValueError(f"length {length} and max_ranges {max_ranges} out of range")
    unit, eq, range_set = value.strip(_OWS).partition("=")
    if not eq or _TOKEN.fullmatch(unit) is None:
        return IgnoreRange("invalid")
    if unit.lower() != "bytes":
        return IgnoreRange("unit")
    if range_set.count(",") >= max(_MIN_SPEC_LIMIT, 10 * max_ranges):
        return IgnoreRange("too-many")
    ranges: list[ByteRange] = []
    listed = False
    for element in range_set.split(","):
        spec = element.strip(_OWS)
        if not spec:
            continue  # empty list elements are allowed (RFC 9110 5.6.1)
        listed = True
        m = _RANGE_SPEC.fullmatch(spec)
        if m is None:
            return IgnoreRange("invalid")
        first, last = m.groups()
        if not first:
            if not last:
                return IgnoreRange("invalid")
            suffix = _position(last, length)
            if suffix > 0:  # a suffix of 0, or any suffix of an empty body, selects nothing
                ranges.append(ByteRange(length - suffix, length - 1))
            continue
        if last and _greater(first, last):
            return IgnoreRange("invalid")
        start = _position(first, length)
        if start < length:
            end = _position(last, length) if last else length
            ranges.append(ByteRange(start, min(end, length - 1)))
    if not listed:
        return IgnoreRange("invalid")
    if not ranges:
        return Unsatisfiable(length)
    coalesced = _coalesce(ranges)
    if len(coalesced) > max_ranges:
        return IgnoreRange("too-many")
    return Satisfiable(coalesced, length)


def _position(digits: str, length: int) -> int:
    """The numeral ``digits`` as an int, clipped to ``length``.

    Every use only asks whether a position is below ``length``, so clipping loses nothing;
    and it keeps int() off numerals too long for it (it refuses over 4300 digits).
    """
    digits = digits.lstrip("0")
    if len(digits) > len(str(length)):
        return length
    return min(int(digits or "0"), length)


def _greater(a: str, b: str) -> bool:
    """Whether numeral ``a`` is greater than numeral ``b``, compared exactly at any length."""
    a, b = a.lstrip("0"), b.lstrip("0")
    return (len(a), a) > (len(b), b)


def _coalesce(ranges: list[ByteRange]) -> tuple[ByteRange, ...]:
    # Merge in order of position; each merged part then takes the place in the request of
    # its earliest member.
    merged: list[tuple[int, int, int]] = []  # (request index, first, last)
    for i in sorted(range(len(ranges)), key=lambda j: (ranges[j].first, ranges[j].last)):
        r = ranges[i]
        if merged and r.first <= merged[-1][2] + 1:
            index, first, last = merged[-1]
            merged[-1] = (min(index, i), first, max(last, r.last))
        else:
            merged.append((i, r.first, r.last))
    merged.sort()
    return tuple(ByteRange(first, last) for _, first, last in merged)


def if_range_allows(if_range: str | None, stored: Headers) -> bool:
    """Whether If-Range lets the Range field apply to ``stored`` (RFC 9110 13.1.5).

    An entity-tag must match the stored ETag by strong comparison, so a weak tag never
    matches. An HTTP-date must equal the stored Last-Modified exactly, and that must be a
    strong validator: the stored Date at least one second later (8.8.2.2). Anything else,
    unparsable values included, does not match. Without If-Range the Range field applies.
    """
    if if_range is None:
        return True
    value = if_range.strip(_OWS)
    # An entity-tag starts with DQUOTE within its first two characters; a date cannot.
    if value.startswith(('"', 'W/"')):
        tag, etag = parse_etag(value), response_etag(stored)
        return tag is not None and etag is not None and tag.strong_match(etag)
    date = parse_http_date(value)
    modified = header_date(stored, "Last-Modified")
    sent = header_date(stored, "Date")
    return (
        date is not None
        and modified is not None
        and sent is not None
        and date == modified
        and sent - modified >= 1
    )


# Representation fields a 206 answering If-Range leaves out: the client has them from the
# response it validated (RFC 9110 15.3.7; Date, Cache-Control, ETag, Expires,
# Content-Location and Vary are still sent).
_KNOWN_TO_IF_RANGE = ("Content-Type", "Content-Encoding", "Content-Language", "Last-Modified")


def _replace_fields(
    stored: Headers, fields: tuple[tuple[str, str], ...], if_range: bool = False
) -> Headers:
    out = stored.copy()
    # The stored Content-Range cannot be there (the response is a whole 200), but a stray
    # one would contradict the 206's framing.
    out.remove("Content-Length", "Content-Range", *(name for name, _ in fields))
    if if_range:
        out.remove(*_KNOWN_TO_IF_RANGE)
    for name, value in fields:
        out.add(name, value)
    return out


@dataclass(frozen=True, slots=True)
class SinglePart:
    """A 206 carrying one range of a ``length``-byte body (RFC 9110 15.3.7.1)."""

    range: ByteRange
    length: int
    status: ClassVar[int] = 206

    @property
    def content_length(self) -> int:
        return self.range.size

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        """The fields this 206 adds in place of the 200's Content-Length."""
        return (
            ("Content-Range", self.range.content_range(self.length)),
            ("Content-Length", str(self.content_length)),
        )

    def response_headers(self, stored: Headers, *, if_range: bool = False) -> Headers:
        """The stored fields with this 206's framing fields in place of the 200's (without
        the representation's own fields if the request had If-Range: ``_replace_fields``)."""
        return _replace_fields(stored, self.headers, if_range)

    def body(self, body: bytes) -> bytes:
        """The part of the stored ``body`` this 206 carries."""
        _check_length(body, self.length)
        return body[self.range.as_slice()]


@dataclass(frozen=True, slots=True)
class BodyPart:
    """One body part: ``head`` (its delimiter and header fields), then body bytes
    ``first``..``last`` inclusive."""

    head: bytes
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class MultipartBody:
    """A 206 carrying several ranges as ``multipart/byteranges`` (RFC 9110 14.6, 15.3.7.2).

    The body is each part's head followed by its bytes, then ``closing``: a driver can
    stream the bytes from a file and still know ``content_length`` beforehand.
    """

    boundary: str
    parts: tuple[BodyPart, ...]
    closing: bytes
    length: int  # of the representation the parts are cut from
    status: ClassVar[int] = 206

    @property
    def content_type(self) -> str:
        return f"multipart/byteranges; boundary={self.boundary}"

    @property
    def content_length(self) -> int:
        return sum(len(p.head) + p.last - p.first + 1 for p in self.parts) + len(self.closing)

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        """The fields this 206 adds in place of the 200's Content-Type and Content-Length;
        no Content-Range: each part has its own (15.3.7.2)."""
        return (("Content-Type", self.content_type), ("Content-Length", str(self.content_length)))

    def response_headers(self, stored: Headers, *, if_range: bool = False) -> Headers:
        """The stored fields with this 206's framing fields in place of the 200's (without
        the representation's own fields if the request had If-Range: ``_replace_fields``)."""
        return _replace_fields(stored, self.headers, if_range)

    def join(self, body: bytes) -> bytes:
        """The whole multipart body, cut from the stored ``body``."""
        _check_length(body, self.length)
        out = bytearray()
        for part in self.parts:
            out += part.head
            out += body[part.first : part.last + 1]
        out += self.closing
        return bytes(out)


def _check_length(body: bytes, length: int) -> None:
    # Slices of the wrong body would come out short, and the Content-Length already sent
    # would be a lie: refuse instead.
    if len(body) != length:
        raise ValueError(f"body of {len(body)} bytes, expected {length}")


def multipart_body(
    ranges: tuple[ByteRange, ...], length: int, content_type: str | None, boundary: str
) -> MultipartBody:
    """The ``multipart/byteranges`` body for ``ranges`` of a ``length``-byte representation.

    Each part carries the stored ``content_type`` (if any) and its Content-Range (14.6).
    ``boundary`` is the caller's (random in service, fixed in tests): 1-70 characters from
    letters, digits and ``'+_.-``; anything else raises ValueError, as do ranges outside the
    representation.
    """
    if _BOUNDARY.fullmatch(boundary) is None:
        raise ValueError(f"unusable multipart boundary {boundary!r}")
    if not ranges:
        raise ValueError("a multipart body needs at least one part")  # RFC 2046 5.1.1
    if not all(0 <= r.first <= r.last < length for r in ranges):
        raise ValueError(f"ranges {ranges} not within {length} bytes")
    if content_type is not None and ("\r" in content_type or "\n" in content_type):
        raise ValueError("a line break in Content-Type would end the part's header")
    type_line = "" if content_type is None else f"Content-Type: {content_type}\r\n"
    parts: list[BodyPart] = []
    for r in ranges:
        # The CRLF before a delimiter belongs to the delimiter (RFC 2046 5.1.1), so every
        # part after the first starts with one and the bytes before it end clean.
        crlf = "\r\n" if parts else ""
        head = f"{crlf}--{boundary}\r\n{type_line}Content-Range: {r.content_range(length)}\r\n\r\n"
        parts.append(BodyPart(head.encode("latin-1"), r.first, r.last))
    closing = f"\r\n--{boundary}--\r\n".encode("latin-1")
    return MultipartBody(boundary, tuple(parts), closing, length)


PartialContent: TypeAlias = SinglePart | MultipartBody


def partial_content(
    satisfiable: Satisfiable, content_type: str | None, boundary: str
) -> PartialContent:
    """The 206 for ``satisfiable``: a single part for one range, else a multipart body."""
    if len(satisfiable.ranges) == 1:
        return SinglePart(satisfiable.ranges[0], satisfiable.length)
    return multipart_body(satisfiable.ranges, satisfiable.length, content_type, boundary)


RangeAnswer: TypeAlias = IgnoreRange | Unsatisfiable | SinglePart | MultipartBody


def answer_range(
    range_value: str | None,
    if_range: str | None,
    stored: Headers,
    length: int,
    *,
    boundary: str,
    max_ranges: int = MAX_RANGES,
) -> RangeAnswer:
    """How to answer a GET with these Range and If-Range values from a stored 200 with
    fields ``stored`` and a ``length``-byte body: 200 whole, 416, or a 206.

    If-Range is checked only for a Range field that would otherwise be honoured, and
    before unsatisfiability: a failed If-Range means the whole body, not a 416 (13.2.2).
    """
    if range_value is None:
        return IgnoreRange("absent")
    outcome = parse_range(range_value, length, max_ranges=max_ranges)
    if isinstance(outcome, IgnoreRange):
        return outcome
    if not if_range_allows(if_range, stored):
        return IgnoreRange("if-range")
    if length == 0:
        # A suffix range is satisfiable even here (14.1.2), yet no 206 can carry a part of
        # nothing: the whole empty 200 answers it.
        return IgnoreRange("empty")
    if isinstance(outcome, Unsatisfiable):
        return outcome
    return partial_content(outcome, stored.get("Content-Type"), boundary)
