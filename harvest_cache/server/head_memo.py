"""Request heads answered without the full handling, remembered by their bytes.

A keep-alive client asking for an object again sends the bytes it sent last time: the same
request line, the same fields in the same order. A head that arrived alone in one read, was
parsed from a fresh parser state and was answered from the hit fast path or a refresh plan is
kept with what the parser made of it, so the next identical read is answered without parsing
it again.

A client asking for objects it has not asked for before (a planned miss) sends new request
lines, but the same fields after them. So the fields of every head answered that way are kept
too, by the bytes after a plain request line (``GET``, an ``http://`` or ``https://`` URL of
plain characters, ``HTTP/1.1``): a read made of such a line and known field bytes is the
learnt head with that URL (and, once answered as one a client may send again, is remembered
whole). llhttp reads
each such URL as itself (tests/server/test_head_memo.py checks that against the parser), and
the fields' bytes parse as they did.

The same bytes parse the same way under the same limits, so the memo only skips work whose
outcome is known; a memo belongs to one configuration (its proxy).
"""

from __future__ import annotations

import re

from harvest_cache.http.headers import RawFields

# Longer heads (cookies, long URLs) are parsed every time; the bound keeps the memo small.
MAX_HEAD = 2048
_MAX_ENTRIES = 4096
# Field blocks are few (one per client program and way of asking); all forgotten when full.
_MAX_FIELD_BLOCKS = 256
# A request line whose URL llhttp reads as itself: http or https, a host of letters, digits,
# dots and hyphens, an optional port, and a path of visible ASCII but '"' and '#'.
_PLAIN_GET = re.compile(rb"GET (https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?/[!\x24-~]*) HTTP/1\.1\r\n")


# What the parser found in a head, as the hit fast path and the plans take it: method, target,
# version, keep-alive, fields. A plain tuple: one is made for every plain GET, and a named
# tuple costs six times as much to make.
ParsedHead = tuple[bytes, bytes, str, bool, RawFields]


class HeadMemo:
    """At most 4,096 heads of at most 2 KiB each, and 256 field blocks; each kind is
    forgotten all at once when full. ``max_target``: the longest request target the
    configuration accepts (longer ones are parsed, to be refused)."""

    def __init__(self, max_target: int) -> None:
        self._max_target = max_target
        # By bytes, or by (origin, bytes) for an intercepted tunnel's (origin-form) heads.
        self._heads: dict[bytes | tuple[bytes, bytes], ParsedHead] = {}
        self._fields: dict[bytes, tuple[bool, RawFields]] = {}  # keep-alive, fields
        self.reused = 0  # requests answered unparsed (counted by the connections)

    def get(self, data: bytes) -> ParsedHead | None:
        """The head remembered by exactly these bytes."""
        if len(data) > MAX_HEAD:
            return None  # (not hashed: a request body can arrive in large reads)
        return self._heads.get(data)

    def get_in(self, origin: bytes, data: bytes) -> ParsedHead | None:
        """The head remembered by these bytes read in an intercepted tunnel to ``origin``."""
        if len(data) > MAX_HEAD:
            return None
        return self._heads.get((origin, data))

    def by_fields(self, data: bytes) -> ParsedHead | None:
        """The head that ``data`` holds if it is a plain request line and known fields."""
        if not self._fields or len(data) > MAX_HEAD:
            return None
        line = _PLAIN_GET.match(data)
        if line is None:
            return None
        known = self._fields.get(data[line.end() :])
        if known is None:
            return None
        target = line.group(1)
        if len(target) > self._max_target:
            return None
        return b"GET", target, "1.1", known[0], known[1]

    def add(self, data: bytes, head: ParsedHead, origin: bytes | None = None) -> None:
        """Remember ``head``, found alone in ``data`` (read in an intercepted tunnel to
        ``origin``, if given), by its bytes."""
        if len(data) > MAX_HEAD:
            return
        if len(self._heads) >= _MAX_ENTRIES:
            # All forgotten at once: taking out the oldest one at a time makes a dict slower
            # to iterate at every removal, and heads are remade on their next answer.
            self._heads.clear()
        self._heads[data if origin is None else (origin, data)] = head

    def add_fields(self, data: bytes, head: ParsedHead) -> None:
        """Remember the fields of ``head``, parsed alone from ``data``, by their bytes, if its
        request line is plain."""
        if len(data) > MAX_HEAD:
            return
        line = _PLAIN_GET.match(data)
        if line is None or head[0] != b"GET" or line.group(1) != head[1]:
            return
        block = data[line.end() :]
        if block not in self._fields:
            if len(self._fields) >= _MAX_FIELD_BLOCKS:
                self._fields.clear()
            self._fields[block] = (head[3], head[4])

    def __len__(self) -> int:
        return len(self._heads)

    @property
    def field_blocks(self) -> int:
        """Field blocks known after a plain request line."""
        return len(self._fields)
