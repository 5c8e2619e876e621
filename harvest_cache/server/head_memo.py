"""Request heads answered without the full handling, remembered by their exact bytes.

A keep-alive client asking for an object again sends the bytes it sent last time: the same
request line, the same fields in the same order. A head that arrived alone in one read, was
parsed from a fresh parser state and was answered from the hit fast path or a refresh plan is
kept with what the parser made of it, so the next identical read is answered without parsing
it again. The same bytes parse the same way under the same limits, so the memo only skips work
whose outcome is known; a memo belongs to one configuration (its proxy).
"""

from __future__ import annotations

from harvest_cache.http.headers import RawFields

# Longer heads (cookies, long URLs) are parsed every time; the bound keeps the memo small.
MAX_HEAD = 2048
_MAX_ENTRIES = 4096


# What the parser found in a head, as the hit fast path and the plans take it: method, target,
# version, keep-alive, fields. A plain tuple: one is made for every plain GET, and a named
# tuple costs six times as much to make.
ParsedHead = tuple[bytes, bytes, str, bool, RawFields]


class HeadMemo:
    """At most 4,096 heads of at most 2 KiB each; all are forgotten when it is full."""

    def __init__(self) -> None:
        self._heads: dict[bytes, ParsedHead] = {}
        self.reused = 0  # requests answered unparsed (counted by the connections)

    def get(self, data: bytes) -> ParsedHead | None:
        if len(data) > MAX_HEAD:
            return None  # (not hashed: a request body can arrive in large reads)
        return self._heads.get(data)

    def add(self, data: bytes, head: ParsedHead) -> None:
        if len(data) > MAX_HEAD:
            return
        if len(self._heads) >= _MAX_ENTRIES:
            # All forgotten at once: taking out the oldest one at a time makes a dict
            # slower to iterate at every removal, and heads are remade on their next answer.
            self._heads.clear()
        self._heads[data] = head

    def __len__(self) -> int:
        return len(self._heads)
