"""Responses recognised by their bytes, unparsed: the shape of one response parsed before.

An origin answering a series of requests alike sends the same bytes each time but for a few
field values (Date, ETag, Content-Length...). Once one such response was parsed, its head is
spelt back as bytes (the status line as llhttp read it, each field as ``name: value``) with
gaps where those values go. A later response that is exactly those bytes, each gap holding a
value that parses as itself (visible ASCII and inner spaces, nothing at either edge that the
parser would strip), parses as that response with those values, so its head need not be
parsed. A head whose bytes are spelt differently (other white space, folded lines) is simply
never recognised. tests/http/test_reply_shape.py checks what is recognised against llhttp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A value that parses as itself: visible ASCII and inner spaces, nothing at either edge that
# the parser would strip; a Content-Length: digits.
_VALUE = rb"([!-~](?:[ -~]*[!-~])?)"
_LENGTH = rb"([0-9]+)"


@dataclass(frozen=True, slots=True)
class ReplyShape:
    version: str
    status: int
    reason: str
    fields: tuple[tuple[bytes, bytes], ...]  # as parsed, the gaps' values as first seen
    gaps: tuple[tuple[int, bytes], ...]  # where in ``fields`` values may differ: (index, name)
    head: re.Pattern[bytes]  # the head's bytes, a group for each gap's value


def _plain(value: bytes) -> bool:
    return re.fullmatch(_VALUE, value) is not None


def shape_of(
    version: str, status: int, reason: str, fields: list[tuple[bytes, bytes]], gaps: tuple[int, ...]
) -> ReplyShape | None:
    """The shape of a response parsed with these parts, its values at ``gaps`` free; None if
    it cannot be spelt back as it parsed (then nothing is recognised): a reason or value that
    is not plain, a version other than 1.0 or 1.1, or a Transfer-Encoding."""
    if version not in ("1.0", "1.1") or not _plain(reason.encode("latin-1")):
        return None
    if any(name.lower() == b"transfer-encoding" for name, _ in fields):
        return None
    if not all(_plain(value) for at, (_, value) in enumerate(fields) if at not in gaps):
        return None
    pattern = re.escape(b"HTTP/%b %d %b\r\n" % (version.encode(), status, reason.encode()))
    for at, (name, value) in enumerate(fields):
        if at in gaps:
            value_pattern = _LENGTH if name.lower() == b"content-length" else _VALUE
            pattern += re.escape(name + b": ") + value_pattern + b"\r\n"
        else:
            pattern += re.escape(b"%b: %b\r\n" % (name, value))
    head = re.compile(pattern + b"\r\n")
    named = tuple((at, fields[at][0]) for at in sorted(gaps))
    return ReplyShape(version, status, reason, tuple(fields), named, head)


def values_in(shape: ReplyShape, data: bytes) -> tuple[list[tuple[bytes, bytes]], int] | None:
    """The fields of the head that ``data`` begins with, and where that head ends, if it is
    the shape's head with a plain value in each gap (digits for a Content-Length); else
    None."""
    found = shape.head.match(data)
    if found is None:
        return None
    fields = list(shape.fields)
    for (at, name), value in zip(shape.gaps, found.groups(), strict=True):
        fields[at] = (name, value)
    return fields, found.end()
