"""SOIF on the wire: encoding records and streams, and decoding them incrementally.

::

    OBJECT    ::= @ TEMPLATE-TYPE { URL \\n ATTRIBUTE* }
    ATTRIBUTE ::= NAME {BYTE-COUNT} :<TAB> VALUE \\n

Values are counted, not escaped, so they may hold anything. The decoder is sans-IO: it takes
chunks of any size, keeps one parse position into a buffer it compacts after every chunk,
and scans with regular expressions and ``find`` rather than byte by byte. Every scan that
waits for more input is bounded (names, byte counts, the URL line), and a value's size is
checked against ``max_value_bytes`` before any of it is buffered, so hostile input cannot
make it hold more than one value plus a few kilobytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum, auto

from harvest_common.errors import SoifError
from harvest_common.soif.record import (
    MAX_NAME_BYTES,
    MAX_URL_BYTES,
    NAME_CHARS,
    TEMPLATE_CHARS,
    Record,
    find_url_space,
)
from harvest_common.soif.stream import WRAPPERS, Delete, Item, Refresh, Update, Wrapper


def encode(record: Record) -> bytes:
    """One object: ``@T { url``, then ``name{size}:<TAB>value`` lines, then ``}``."""
    parts = [b"@", record.template.encode(), b" { ", record.url.encode(), b"\n"]
    for name, value in record.attributes:
        parts += (name.encode(), b"{", str(len(value)).encode(), b"}:\t", value, b"\n")
    parts.append(b"}\n")
    return b"".join(parts)


def _encode_wrapper(kind: Wrapper, records: Iterable[Record]) -> bytes:
    return b"".join([f"@{kind.keyword} {{\n".encode(), *map(encode, records), b"}\n"])


def encode_update(records: Iterable[Record]) -> bytes:
    """An ``@UPDATE`` wrapper holding ``records`` (possibly none)."""
    return _encode_wrapper(Update, records)


def encode_refresh(records: Iterable[Record]) -> bytes:
    """A ``@REFRESH`` wrapper holding ``records`` (possibly none)."""
    return _encode_wrapper(Refresh, records)


def encode_delete(records: Iterable[Record]) -> bytes:
    """A ``@DELETE`` wrapper holding ``records`` (possibly none)."""
    return _encode_wrapper(Delete, records)


_MAX_DIGITS = 20
# The URL line may carry blanks around the URL and a CR before its newline.
_MAX_URL_LINE = MAX_URL_BYTES + MAX_NAME_BYTES

_AT, _CLOSE, _NEWLINE = b"@}\n"
_NOT_WHITESPACE = re.compile(rb"[^ \t\r\n]")
# _OPENING and _PARTIAL_HEADER match any input, as far as it is valid: the groups that did
# not match show where it went wrong, or that it was right up to the end of what has arrived.
# Their runs allow one more than the limit, so that an overlong run shows as such.
_OPENING = re.compile(
    f"([{TEMPLATE_CHARS}]{{0,{MAX_NAME_BYTES + 1}}})([ \t]{{0,{MAX_NAME_BYTES}}})(\\{{)?".encode()
)
# A whole, valid attribute header; when it fails to match, _PARTIAL_HEADER tells why.
_HEADER = re.compile(
    f"([{NAME_CHARS}]{{1,{MAX_NAME_BYTES}}})\\{{([0-9]{{1,{_MAX_DIGITS}}})\\}}:\t".encode()
)
_PARTIAL_HEADER = re.compile(
    f"([{NAME_CHARS}]{{0,{MAX_NAME_BYTES + 1}}})"
    f"(?:(\\{{)([0-9]{{0,{_MAX_DIGITS + 1}}})(?:(\\}})(?:(:)(\t)?)?)?)?".encode()
)


class _State(Enum):
    BETWEEN = auto()  # before an object, a wrapper, or a wrapper's closing brace
    URL = auto()  # after an object's '{': the rest of the line is its URL
    ATTRIBUTES = auto()  # ``name{size}:<TAB>value``, or the object's closing brace


def _show(byte: int) -> str:
    return repr(bytes([byte]))


class Decoder:
    """Incremental SOIF decoder: ``feed`` chunks of any size, then ``close``.

    ``feed`` returns the items completed so far: bare records, and each object of a wrapper
    as soon as that object is complete. Malformed input raises ``SoifError`` with the
    absolute offset of the offending byte; items completed earlier in the same chunk are
    lost with it, and every later call raises the same error again.
    """

    __slots__ = (
        "_base",
        "_buffer",
        "_failure",
        "_max_value",
        "_pairs",
        "_pos",
        "_scan",
        "_seen",
        "_start",
        "_state",
        "_template",
        "_url",
        "_wrapper",
        "_wrapper_start",
    )

    def __init__(self, max_value_bytes: int = 64 * 1024 * 1024) -> None:
        if max_value_bytes < 0:
            raise ValueError(f"max_value_bytes must not be negative, got {max_value_bytes}")
        self._max_value = max_value_bytes
        self._buffer = bytearray()
        self._base = 0  # absolute offset of _buffer[0]
        self._pos = 0  # parse position in _buffer
        self._state = _State.BETWEEN
        self._failure: tuple[int, str] | None = None
        self._wrapper: Wrapper | None = None
        self._wrapper_start = 0
        self._start = 0  # absolute offset of the current object's '@'
        self._template = ""
        self._url = ""
        self._pairs: list[tuple[str, bytes]] = []
        self._seen: set[str] = set()  # lower-cased names of _pairs
        self._scan = 0  # absolute offset where the search for the URL's newline resumes

    def __repr__(self) -> str:
        state = "failed" if self._failure else self._state.name.lower()
        return f"Decoder(offset={self.offset}, {state}, {len(self._buffer)} bytes buffered)"

    @property
    def offset(self) -> int:
        """Bytes consumed so far (the input before the item being parsed)."""
        return self._base + self._pos

    def feed(self, data: bytes) -> list[Item]:
        """Take the next chunk; return the items it completed."""
        self._raise_if_failed()
        self._buffer += data
        items: list[Item] = []
        with memoryview(self._buffer) as view:
            while self._step(view, items):
                pass
        # Dropping a bytearray's head only moves its start, so compacting each time is cheap.
        del self._buffer[: self._pos]
        self._base += self._pos
        self._pos = 0
        return items

    def close(self) -> None:
        """Declare the input ended; raise ``SoifError`` if it ended inside an item."""
        self._raise_if_failed()
        end = len(self._buffer)
        if self._state is not _State.BETWEEN:
            at = f"the @{self._template} object that began at byte {self._start}"
        elif self._pos < end:
            at = f"the opening that began at byte {self.offset}"
        elif self._wrapper is not None:
            at = f"the @{self._wrapper.keyword} wrapper that began at byte {self._wrapper_start}"
        else:
            return
        raise self._fail(end, f"input ended inside {at}")

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise SoifError(*self._failure)

    def _fail(self, pos: int, reason: str) -> SoifError:
        self._failure = (self._base + pos, reason)
        return SoifError(*self._failure)

    def _step(self, view: memoryview, items: list[Item]) -> bool:
        """Parse one token; False when more input is needed."""
        state = self._state
        if state is _State.ATTRIBUTES:
            return self._attributes(view, items)
        if state is _State.URL:
            return self._url_line()
        return self._between()

    def _between(self) -> bool:
        buffer = self._buffer
        end = len(buffer)
        found = _NOT_WHITESPACE.search(buffer, self._pos)
        if found is None:
            self._pos = end
            return False
        pos = self._pos = found.start()
        byte = buffer[pos]
        if byte == _CLOSE and self._wrapper is not None:
            self._wrapper = None
            self._pos = pos + 1
            return True
        if byte != _AT:
            inside = "" if self._wrapper is None else f" or '}}' ending @{self._wrapper.keyword}"
            raise self._fail(pos, f"expected '@'{inside}, found {_show(byte)}")
        opening = _OPENING.match(buffer, pos + 1)
        assert opening is not None  # the pattern matches the empty string
        name_end = opening.end(1)
        if name_end - pos - 1 > MAX_NAME_BYTES:
            raise self._fail(pos + 1 + MAX_NAME_BYTES, "template name is too long")
        if name_end == pos + 1 < end:
            raise self._fail(name_end, f"expected a template name, found {_show(buffer[name_end])}")
        if opening[3] is None:
            stop = opening.end(2)
            if stop == end:
                return False
            raise self._fail(stop, f"expected '{{' after the template, found {_show(buffer[stop])}")
        template = opening[1].decode()
        kind = WRAPPERS.get(template)
        if kind is None:
            self._template = template
            self._start = self._base + pos
            self._scan = 0
            self._state = _State.URL
        elif self._wrapper is None:
            self._wrapper = kind
            self._wrapper_start = self._base + pos
        else:
            raise self._fail(
                pos, f"@{template} inside the @{self._wrapper.keyword} wrapper (no nesting)"
            )
        self._pos = opening.end()
        return True

    def _url_line(self) -> bool:
        buffer = self._buffer
        end = len(buffer)
        start = self._pos
        limit = start + _MAX_URL_LINE
        newline = buffer.find(b"\n", max(start, self._scan - self._base), min(end, limit + 1))
        if newline < 0:
            if end > limit:
                raise self._fail(limit, f"URL line is longer than {_MAX_URL_LINE} bytes")
            self._scan = self._base + end  # the bytes so far hold no newline
            return False
        line = bytes(buffer[start:newline])
        stripped = line.lstrip(b" \t")
        url_start = start + len(line) - len(stripped)
        raw = stripped.rstrip(b" \t\r")
        if not raw:
            raise self._fail(newline, "missing URL after '{'")
        if len(raw) > MAX_URL_BYTES:
            raise self._fail(url_start + MAX_URL_BYTES, f"URL is longer than {MAX_URL_BYTES} bytes")
        try:
            url = raw.decode()
        except UnicodeDecodeError as error:
            raise self._fail(url_start + error.start, "URL is not UTF-8") from None
        space = find_url_space(url)
        if space >= 0:
            raise self._fail(url_start + len(url[:space].encode()), "whitespace inside the URL")
        self._url = url
        self._pairs = []
        self._seen = set()
        self._pos = newline + 1
        self._state = _State.ATTRIBUTES
        return True

    def _attributes(self, view: memoryview, items: list[Item]) -> bool:
        """Take every attribute that has fully arrived; True once the object has ended.

        A value still arriving leaves the position at its header, read again next time: a
        header is short, and this keeps one path for whole and split attributes.
        """
        buffer = self._buffer
        end = len(buffer)
        pos = self._pos
        pairs = self._pairs
        seen = self._seen
        max_value = self._max_value
        try:
            while pos < end:
                if buffer[pos] == _CLOSE:
                    # (every rule of a record was checked on the way here)
                    record = Record.unchecked(self._template, self._url, tuple(pairs))
                    items.append(record if self._wrapper is None else self._wrapper(record))
                    pos += 1
                    self._state = _State.BETWEEN
                    return True
                header = _HEADER.match(buffer, pos)
                if header is None:
                    self._diagnose(pos)  # raises, unless the header is still arriving
                    return False
                name = header[1].decode()
                key = name.lower()
                size = int(header[2])
                # (checked here, and raised by the checks shared with _diagnose: two calls
                # an attribute were a tenth of decoding a record)
                if key in seen:
                    self._check_name(pos, name)
                if size > max_value:
                    self._check_size(header.start(2), size)
                start = header.end()
                stop = start + size
                if stop >= end:
                    return False
                if buffer[stop] != _NEWLINE:
                    found = _show(buffer[stop])
                    raise self._fail(stop, f"value is not followed by a newline, found {found}")
                pairs.append((name, bytes(view[start:stop])))
                seen.add(key)
                pos = stop + 1
            return False
        finally:
            self._pos = pos

    def _check_name(self, pos: int, name: str) -> str:
        key = name.lower()
        if key in self._seen:
            raise self._fail(pos, f"attribute {name!r} appears twice in the object")
        return key

    def _check_size(self, pos: int, size: int) -> int:
        if size > self._max_value:
            raise self._fail(pos, f"value of {size} bytes is over the {self._max_value} limit")
        return size

    def _diagnose(self, pos: int) -> None:
        """Raise for the first bad byte of the attribute header at ``pos``, if any.

        Called when the strict header pattern fails: the header is malformed, or it has not
        all arrived yet (then this returns, having checked what has).
        """
        buffer = self._buffer
        end = len(buffer)
        header = _PARTIAL_HEADER.match(buffer, pos)
        assert header is not None  # the pattern matches the empty string
        name_end = header.end(1)
        if name_end - pos > MAX_NAME_BYTES:
            raise self._fail(pos + MAX_NAME_BYTES, "attribute name is too long")
        if name_end == pos:
            byte = buffer[pos]
            if byte == _AT:
                raise self._fail(pos, f"missing '}}' to end the object at byte {self._start}")
            raise self._fail(pos, f"expected an attribute name or '}}', found {_show(byte)}")
        if header[2] is None:
            if name_end == end:
                return
            found = _show(buffer[name_end])
            raise self._fail(name_end, f"expected '{{' after the attribute name, found {found}")
        self._check_name(pos, header[1].decode())
        digits, digits_end = name_end + 1, header.end(3)
        if digits_end - digits > _MAX_DIGITS:
            raise self._fail(digits + _MAX_DIGITS, f"byte count has over {_MAX_DIGITS} digits")
        if header[4] is None:
            if digits_end == end:
                return
            raise self._fail(digits_end, "byte count is not a decimal number")
        if digits_end == digits:
            raise self._fail(digits, "missing byte count")
        self._check_size(digits, int(header[3]))
        colon = digits_end + 1
        bad = colon if header[5] is None else colon + 1
        if bad < end:
            found = _show(buffer[bad])
            raise self._fail(bad, f"expected ':<TAB>' after the byte count, found {found}")


def decode(data: bytes) -> list[Item]:
    """Every item in ``data``, which must hold a complete stream."""
    decoder = Decoder()
    items = decoder.feed(data)
    decoder.close()
    return items
