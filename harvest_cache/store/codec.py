"""The disk tier's record format: a stored head (with its body's reference) or a Vary marker.

A record is one format byte, one kind byte and a compact UTF-8 JSON array. JSON keeps it
safe to decode (no pickle: a damaged or hostile file can only fail to parse) and readable
with ``sqlite3``; the format byte lets a later version change the layout and still read or
reject old records. Field order is fixed by position, so a record carries no key names.

::

    object:  0x01 'O' [url, status, reason, [[name, value], ...], request_time,
                       response_time, body_length, vary_key, body_key, body_crc32]
    marker:  0x01 'M' [url, [name, ...], generation]
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Any

from harvest_cache.errors import HarvestCacheError
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.entry import VaryMarker
from harvest_cache.store.fields import shared_fields

FORMAT = 1
_OBJECT = ord("O")
_MARKER = ord("M")


class CorruptRecord(HarvestCacheError):
    """A stored record could not be decoded: unknown format, bad JSON or wrong field types."""


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """A stored object's head, the disk-tier key of its body (empty: the body is beside the
    record, in the same row) and the body's CRC-32."""

    head: StoredHead
    body_key: str
    body_crc32: int


def encode(record: ObjectRecord | VaryMarker) -> bytes:
    if isinstance(record, VaryMarker):
        kind = _MARKER
        fields: list[Any] = [record.url, list(record.names), record.generation]
    else:
        h = record.head
        kind = _OBJECT
        fields = [
            h.url,
            h.status,
            h.reason,
            [list(pair) for pair in h.headers],
            h.request_time,
            h.response_time,
            h.body_length,
            h.vary_key,
            record.body_key,
            record.body_crc32,
        ]
    # ensure_ascii keeps lone surrogates (undecodable header bytes) encodable.
    return bytes((FORMAT, kind)) + json.dumps(fields, separators=(",", ":")).encode("ascii")


def decode(data: bytes) -> ObjectRecord | VaryMarker:
    """Parse a record, raising CorruptRecord for anything that is not one this module wrote."""
    if len(data) < 2 or data[0] != FORMAT:
        raise CorruptRecord(f"unknown record format {data[:1]!r}")
    try:
        fields = json.loads(data[2:])
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, nesting
        raise CorruptRecord(f"record is not JSON: {e}") from None
    if data[1] == _MARKER:
        return _marker(fields)
    if data[1] == _OBJECT:
        return _object(fields)
    raise CorruptRecord(f"unknown record kind {data[1:2]!r}")


def _object(fields: Any) -> ObjectRecord:
    match fields:
        case [
            str(url),
            int(status),
            str(reason),
            list(headers),
            int() | float() as request_time,
            int() | float() as response_time,
            int(body_length),
            str(vary_key),
            str(body_key),
            int(body_crc32),
        ] if _numbers(status, body_length, body_crc32, request_time, response_time) and all(
            _is_field(pair) for pair in headers
        ):
            head = StoredHead(
                url=url,
                status=status,
                reason=sys.intern(reason),
                headers=shared_fields((name, value) for name, value in headers),
                request_time=float(request_time),
                response_time=float(response_time),
                body_length=body_length,
                vary_key=vary_key,
            )
            return ObjectRecord(head, body_key, body_crc32)
    raise CorruptRecord("object record has the wrong fields")


def _marker(fields: Any) -> VaryMarker:
    match fields:
        case [str(url), list(names), str(generation)] if all(isinstance(n, str) for n in names):
            return VaryMarker(url=url, names=tuple(names), generation=generation)
    raise CorruptRecord("marker record has the wrong fields")


def _numbers(*values: Any) -> bool:
    """Real, finite numbers: JSON's true and false decode to bool, which is an int too."""
    return all(not isinstance(v, bool) and math.isfinite(v) for v in values)


def _is_field(pair: Any) -> bool:
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and isinstance(pair[0], str)
        and isinstance(pair[1], str)
    )
