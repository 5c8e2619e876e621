"""The disk tier's record format: a stored head (with its body's reference) or a Vary marker.

A record is one format byte, one kind byte and its fields by position, so it carries no key
names. Format 2, written now, is UTF-8 text with the fields separated by NUL, which no URL
or field line can hold (a lone surrogate, from an undecodable header byte, is kept as is):
splitting it is a fraction of parsing JSON, and a disk hit decodes one record. Format 1 is a
compact JSON array, still read (and written for a record whose text holds a NUL after all).
Neither can do more than fail to parse on damaged or hostile bytes (no pickle); the format
byte lets a later version change the layout and still read or reject old records.

::

    object, 2:  0x02 'O' url NUL status NUL reason NUL request_time NUL response_time
                NUL body_length NUL vary_key NUL body_key NUL body_crc32 (NUL name NUL value)*
    marker, 2:  0x02 'M' url NUL generation (NUL name)*
    object, 1:  0x01 'O' [url, status, reason, [[name, value], ...], request_time,
                          response_time, body_length, vary_key, body_key, body_crc32]
    marker, 1:  0x01 'M' [url, [name, ...], generation]
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

FORMAT = 2
_JSON_FORMAT = 1
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
        texts = [record.url, record.generation, *record.names]
        kind = _MARKER
    else:
        h = record.head
        texts = [
            h.url,
            str(h.status),
            h.reason,
            repr(h.request_time),
            repr(h.response_time),
            str(h.body_length),
            h.vary_key,
            record.body_key,
            str(record.body_crc32),
        ]
        for name, value in h.headers:
            texts += (name, value)
        kind = _OBJECT
    text = "\0".join(texts)
    if text.count("\0") != len(texts) - 1:
        return _encode_json(record)
    return bytes((FORMAT, kind)) + text.encode("utf-8", "surrogatepass")


def _encode_json(record: ObjectRecord | VaryMarker) -> bytes:
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
    return bytes((_JSON_FORMAT, kind)) + json.dumps(fields, separators=(",", ":")).encode("ascii")


def decode(data: bytes) -> ObjectRecord | VaryMarker:
    """Parse a record, raising CorruptRecord for anything that is not one this module wrote."""
    if len(data) >= 2 and data[0] == FORMAT:
        try:
            texts = data[2:].decode("utf-8", "surrogatepass").split("\0")
        except UnicodeDecodeError as e:
            raise CorruptRecord(f"record is not text: {e}") from None
        if data[1] == _OBJECT:
            return _object_texts(texts)
        if data[1] == _MARKER and len(texts) >= 2:
            return VaryMarker(url=texts[0], names=tuple(texts[2:]), generation=texts[1])
        raise CorruptRecord(f"unknown record kind {data[1:2]!r}, or too few fields")
    if len(data) < 2 or data[0] != _JSON_FORMAT:
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


def _object_texts(texts: list[str]) -> ObjectRecord:
    if len(texts) < 9 or len(texts) % 2 == 0:
        raise CorruptRecord("object record has the wrong number of fields")
    url, status, reason, request_time, response_time, length, vary_key, body_key, crc = texts[:9]
    try:
        numbers = int(status), int(length), int(crc)
        times = float(request_time), float(response_time)
    except ValueError:
        raise CorruptRecord("object record has a number that is not one") from None
    if not _numbers(*times):
        raise CorruptRecord("object record has a time that is not finite")
    rest = iter(texts[9:])
    head = StoredHead(
        url,
        numbers[0],
        sys.intern(reason),
        shared_fields(zip(rest, rest, strict=True)),
        times[0],
        times[1],
        numbers[1],
        vary_key,
    )
    return ObjectRecord(head, body_key, numbers[2])


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
    """Real, finite numbers: JSON's true and false decode to bool, which is an int too (an
    int too large for a float is none either)."""
    try:
        return all(not isinstance(v, bool) and math.isfinite(v) for v in values)
    except OverflowError:
        return False


def _is_field(pair: Any) -> bool:
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and isinstance(pair[0], str)
        and isinstance(pair[1], str)
    )
