"""Partial content kept and combined (RFC 9111 3.3-3.4), sans I/O.

A 206 carrying one part of a representation (``Content-Range: bytes first-last/length``, the
complete length known) is kept as a *part*: its bytes, an object of their own. An *index*
under the URL names the parts held for one representation (one strong entity tag) and the
span of it each supplies. A range request wholly within the spans is answered from the parts
(4: a cache may answer a partial request from an incomplete response that covers it); one
that is not goes to the origin as asked, and the 206 it brings is added. Parts for the same
strong validator are combined (3.4); once they cover the whole representation they are put
together into a complete 200, stored as any other. An index is a stored response like any
other: fresh or not by its own fields, revalidated with its entity tag, evicted in its turn.

Choices where RFC 9111 leaves one:

- Only a 206 with a strong entity tag is kept: combining takes a strong validator (3.4), and
  a part nothing can ever join buys little. A 206 with ``Vary`` is not kept either.
- A new part for another entity tag (or another length) replaces the index and its parts: the
  representation changed.
- Where a new part overlaps spans already held, the new part supplies the overlap (the same
  strong validator: the same bytes), and a part no span uses any more is dropped.
- An index names at most ``MAX_PARTS`` parts; a part beyond that is not kept, so a client
  asking for thousands of small ranges cannot make each later request read thousands of
  objects.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import NamedTuple

from harvest_cache.errors import HarvestCacheError
from harvest_cache.http.conditional import CONDITIONAL_FIELDS
from harvest_cache.http.freshness import Heuristic
from harvest_cache.http.headers import Headers
from harvest_cache.http.policy import Fresh, evaluate, request_directives
from harvest_cache.http.ranges import MultipartBody, SinglePart, answer_range
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.validation import response_etag
from harvest_cache.http.vary import vary_names

MAX_PARTS = 32
_CONTENT_RANGE = re.compile(r"bytes[ \t]+([0-9]{1,18})-([0-9]{1,18})/([0-9]{1,18})", re.I)
_FORMAT = 1


class BadIndex(HarvestCacheError):
    """A stored index of partial content that cannot be read (the store drops it)."""


class Received(NamedTuple):
    """One part of a representation, as a 206 brought it: positions ``first``..``last``
    (inclusive) of ``length`` bytes, under the strong entity tag ``etag``."""

    first: int
    last: int
    length: int
    etag: str


class Span(NamedTuple):
    """Positions ``first``..``last`` of the representation, supplied by the part ``token``
    from its byte ``offset`` on."""

    first: int
    last: int
    token: str
    offset: int


class Piece(NamedTuple):
    """``size`` bytes of the part ``token`` from its byte ``offset``."""

    token: str
    offset: int
    size: int


class PartialIndex(NamedTuple):
    """The parts held of one representation: ``length`` bytes in all, entity tag ``etag``;
    ``spans`` sorted, disjoint."""

    length: int
    etag: str
    spans: tuple[Span, ...]

    @property
    def complete(self) -> bool:
        """Whether the spans cover every byte of the representation."""
        return sum(s.last - s.first + 1 for s in self.spans) == self.length

    @property
    def tokens(self) -> frozenset[str]:
        return frozenset(s.token for s in self.spans)

    def pieces(self, first: int, last: int) -> list[Piece] | None:
        """The pieces of parts that make up positions ``first``..``last``, in order; None
        unless the spans cover all of them."""
        out: list[Piece] = []
        at = first
        for span in self.spans:
            if span.last < at:
                continue
            if span.first > at:
                return None
            end = min(span.last, last)
            out.append(Piece(span.token, span.offset + at - span.first, end - at + 1))
            at = end + 1
            if at > last:
                return out
        return None


@dataclass(frozen=True, slots=True)
class Added:
    """An index with a new part in it, and the parts it no longer names (to delete)."""

    index: PartialIndex
    dropped: frozenset[str]


def parse_content_range(value: str) -> tuple[int, int, int] | None:
    """``bytes first-last/length`` as three numbers (RFC 9110 14.4); None for anything else,
    an unknown length (``*``) or positions that do not fit in ``length`` included."""
    match = _CONTENT_RANGE.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    first, last, length = (int(g) for g in match.groups())
    if first > last or last >= length:
        return None
    return first, last, length


def received(status: int, headers: Headers) -> Received | None:
    """The part a response carries, if it is one a cache keeps (see the choices above)."""
    if status != 206:
        return None
    ranges = headers.get_all("Content-Range")
    if len(ranges) != 1:
        return None
    positions = parse_content_range(ranges[0])
    etag = response_etag(headers)
    if positions is None or etag is None or etag.weak:
        return None
    if vary_names(headers) != ():
        return None
    first, last, length = positions
    declared = headers.get("Content-Length")
    if declared is not None and declared.strip() != str(last - first + 1):
        return None
    return Received(first, last, length, str(etag))


def add(index: PartialIndex | None, part: Received, token: str) -> Added | None:
    """``index`` (None: no index yet) with ``part``, held as ``token``; None if the index
    would name more than MAX_PARTS parts."""
    if index is None or index.etag != part.etag or index.length != part.length:
        spans = (Span(part.first, part.last, token, 0),)
        gone = index.tokens if index is not None else frozenset()
        return Added(PartialIndex(part.length, part.etag, spans), gone)
    kept: list[Span] = []
    for s in index.spans:
        if s.last < part.first or s.first > part.last:
            kept.append(s)
            continue
        if s.first < part.first:  # the part's head stays
            kept.append(Span(s.first, part.first - 1, s.token, s.offset))
        if s.last > part.last:  # and its tail
            kept.append(Span(part.last + 1, s.last, s.token, s.offset + part.last + 1 - s.first))
    kept.append(Span(part.first, part.last, token, 0))
    kept.sort()
    new = PartialIndex(part.length, part.etag, tuple(kept))
    if len(new.tokens) > MAX_PARTS:
        return None
    return Added(new, index.tokens - new.tokens)


class FromParts(NamedTuple):
    """Answer with ``answer`` (a 206), its parts' bytes ``pieces`` (one list per range, in
    the answer's order); ``age`` and ``ttl`` of the index. ``validate``: only after the
    origin confirms the index (a 304 to its entity tag)."""

    answer: SinglePart | MultipartBody
    pieces: tuple[tuple[Piece, ...], ...]
    age: float
    ttl: float
    validate: bool


def plan(
    request: Headers,
    head: StoredHead,
    index: PartialIndex,
    now: float,
    heuristic: Heuristic,
    *,
    boundary: str,
    validated: bool = False,
) -> FromParts | None:
    """How a GET with ``request``'s Range may be answered from ``index`` (``head``: the
    index's stored head) at ``now``; None if it may not (a range not wholly held, a Range
    field to be ignored or unsatisfiable, preconditions other than If-Range): then it goes to
    the origin as asked. ``validated``: the origin has just confirmed the index."""
    if any(name in request for name in CONDITIONAL_FIELDS if name != "If-Range"):
        return None
    stored = Headers(head.headers)
    answer = answer_range(
        request.get("Range"), request.get("If-Range"), stored, index.length, boundary=boundary
    )
    if isinstance(answer, SinglePart):
        wanted = [(answer.range.first, answer.range.last)]
    elif isinstance(answer, MultipartBody):
        wanted = [(part.first, part.last) for part in answer.parts]
    else:
        return None
    pieces = []
    for first, last in wanted:
        held = index.pieces(first, last)
        if held is None:
            return None
        pieces.append(tuple(held))
    reuse = evaluate(head, request_directives(request), now, heuristic)
    validate = not validated and not isinstance(reuse, Fresh)
    return FromParts(answer, tuple(pieces), reuse.age, reuse.ttl, validate)


def encode_index(index: PartialIndex) -> bytes:
    spans = [list(s) for s in index.spans]
    record = {"v": _FORMAT, "length": index.length, "etag": index.etag, "spans": spans}
    return json.dumps(record, separators=(",", ":")).encode()


def decode_index(data: bytes) -> PartialIndex:
    """The index ``encode_index`` made; BadIndex for anything that is not one."""
    try:
        record = json.loads(data)
        if record["v"] != _FORMAT:
            raise BadIndex(f"index format {record['v']!r}")
        length, etag = record["length"], record["etag"]
        spans = tuple(Span(int(f), int(la), str(t), int(o)) for f, la, t, o in record["spans"])
    except (ValueError, KeyError, TypeError) as e:
        raise BadIndex(f"unreadable index: {e}") from e
    if not isinstance(length, int) or not isinstance(etag, str):
        raise BadIndex("index without a length or entity tag")
    at = 0
    for s in spans:
        if s.first < at or s.last < s.first or s.last >= length or s.offset < 0:
            raise BadIndex(f"index span {s.first}-{s.last} out of order or bounds")
        at = s.last + 1
    return PartialIndex(length, etag, spans)


def index_key(key: str) -> str:
    """The store key of the index of partial content held for the object key ``key``."""
    return f"{key}\x00partial"


def part_key(key: str, token: str) -> str:
    """The store key of one part held for the object key ``key``."""
    return f"{key}\x00part\x00{token}"


__all__ = [
    "MAX_PARTS",
    "Added",
    "BadIndex",
    "FromParts",
    "PartialIndex",
    "Piece",
    "Received",
    "Span",
    "add",
    "decode_index",
    "encode_index",
    "index_key",
    "parse_content_range",
    "part_key",
    "plan",
    "received",
]
