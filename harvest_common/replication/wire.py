"""What brokers and replicators exchange: change lists (which objects changed, at which
version) and transfers (the objects themselves). Pure: bytes in, values out.

A change list is small JSON: a member announces it, and its neighbours ask for only the
objects they do not hold at that version or a newer one, so that an object crosses each link
at most once however many paths lead to a member.

A transfer is ``MAGIC``, then per entry a JSON header line and its SOIF record (``size``
bytes; none for a removal), then a trailer line with the entry count and the SHA-256 of
everything before it, and the whole is compressed with zstd. A transfer cut short has no
trailer, a corrupted one fails its hash or its decompression: either is refused whole
(``WireError``), so nothing of it is applied.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import zstandard

from harvest_common.errors import WireError
from harvest_common.replication.version import Version

MAGIC: Final = b"HRV1\n"
# A transfer may not unpack to more than this (a zstd bomb is refused, not allocated).
MAX_UNPACKED: Final = 256 * 1024 * 1024
_HEADER_KEYS: Final = frozenset(
    {"oid", "collection", "url", "gatherer", "expires", "version", "size"}
)
_LIST_KEYS: Final = frozenset({"collection", "after", "last_seq", "through", "changes"})


@dataclass(frozen=True, slots=True)
class Entry:
    """One object's state at one member: its record (encoded SOIF), or None when
    ``version.deleted`` (a tombstone). ``expires``: epoch seconds (0 for a tombstone)."""

    oid: str
    collection: str
    url: str
    gatherer: str
    expires: float
    version: Version
    record: bytes | None

    def __post_init__(self) -> None:
        if (self.record is None) != self.version.deleted:
            raise WireError(f"{self.oid}: a record comes with a live version only")

    def __repr__(self) -> str:
        return f"Entry({self.oid} {self.url!r} in {self.collection!r}, {self.version!r})"


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of a change list: object ``oid`` changed to ``version`` at ``seq`` (the
    announcing member's own change number)."""

    seq: int
    oid: str
    version: Version


@dataclass(frozen=True, slots=True)
class ChangeList:
    """The changes of ``collection`` after ``after`` up to ``last_seq`` (the member's last
    change number when it answered: a list cut at its limit ends below it)."""

    collection: str
    after: int
    last_seq: int
    changes: tuple[Change, ...]
    # The seq the list accounts for everything up to, when some changes were left out of it
    # (those the receiver sent): by default the last change's, or the end when none.
    through: int | None = None

    def __post_init__(self) -> None:
        if self.through is None:
            end = self.changes[-1].seq if self.changes else self.last_seq
            derived = max(self.after, end)
            object.__setattr__(self, "through", derived)
        elif self.through < self.after or (self.changes and self.through < self.changes[-1].seq):
            raise WireError(f"a change list through {self.through} ends before its changes")

    def __repr__(self) -> str:
        return (
            f"ChangeList({self.collection!r} after {self.after}: {len(self.changes)} changes"
            f" through {self.upto}, last {self.last_seq})"
        )

    @property
    def upto(self) -> int:
        """The seq a reader has seen everything up to after taking this list."""
        assert self.through is not None  # set by __post_init__
        return self.through

    @property
    def complete(self) -> bool:
        return self.upto >= self.last_seq

    def without(self, left_out: Callable[[Change], bool]) -> ChangeList:
        """The same list, accounting for the same seqs, without the changes ``left_out``."""
        kept = tuple(c for c in self.changes if not left_out(c))
        return ChangeList(self.collection, self.after, self.last_seq, kept, self.upto)

    def followed_by(self, later: ChangeList) -> ChangeList | None:
        """This list and ``later`` as one, if ``later`` starts where this one ends (or
        before); else None."""
        if later.after > self.upto:
            return None
        added = tuple(c for c in later.changes if c.seq > self.upto)
        last = max(self.last_seq, later.last_seq)
        upto = max(self.upto, later.upto)
        return ChangeList(self.collection, self.after, last, self.changes + added, upto)

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "after": self.after,
            "last_seq": self.last_seq,
            "through": self.upto,
            "changes": [[c.seq, c.oid, c.version.to_json()] for c in self.changes],
        }

    @classmethod
    def from_json(cls, value: object) -> ChangeList:
        if not isinstance(value, dict) or set(value) != _LIST_KEYS:
            raise WireError("a change list has collection, after, last_seq, through and changes")
        collection, after, last = value["collection"], value["after"], value["last_seq"]
        through = value["through"]
        if not isinstance(collection, str) or not all(_count(n) for n in (after, last, through)):
            raise WireError("a change list's collection is a string and its seqs counts")
        rows = value["changes"]
        if not isinstance(rows, list):
            raise WireError("a change list's changes are a list")
        changes = []
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3 and _count(row[0])):
                raise WireError(f"a change is [seq, oid, version], not {row!r}")
            if not isinstance(row[1], str):
                raise WireError(f"a change's oid is a string, not {row[1]!r}")
            changes.append(Change(row[0], row[1], Version.from_json(row[2])))
        return cls(collection, after, last, tuple(changes), through)


def _finite(value: object) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer no float can hold
        return False


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def encode(entries: Iterable[Entry]) -> bytes:
    """``entries`` as an uncompressed transfer."""
    out = io.BytesIO()
    out.write(MAGIC)
    count = 0
    for entry in entries:
        header = {
            "oid": entry.oid,
            "collection": entry.collection,
            "url": entry.url,
            "gatherer": entry.gatherer,
            "expires": entry.expires,
            "version": entry.version.to_json(),
            "size": -1 if entry.record is None else len(entry.record),
        }
        out.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        if entry.record is not None:
            out.write(entry.record)
        count += 1
    body = out.getvalue()
    trailer = {"end": count, "sha256": hashlib.sha256(body).hexdigest()}
    return body + json.dumps(trailer, separators=(",", ":")).encode() + b"\n"


def decode(data: bytes) -> list[Entry]:
    """The entries of an uncompressed transfer; WireError unless it is whole and intact."""
    if not data.startswith(MAGIC):
        raise WireError("not a Harvest replication transfer")
    entries: list[Entry] = []
    at = len(MAGIC)
    while True:
        end = data.find(b"\n", at)
        if end < 0:
            raise WireError(f"transfer cut short after {len(entries)} entries")
        header = _json_line(data[at:end])
        if "end" in header:
            _check_trailer(header, data[:at], len(entries))
            if end + 1 != len(data):
                raise WireError("bytes after the transfer's trailer")
            return entries
        size = _check_header(header)
        start = end + 1
        record = None if size < 0 else data[start : start + size]
        if record is not None and len(record) != size:
            raise WireError(f"transfer cut short in the record of {header['oid']}")
        at = start + max(size, 0)
        entries.append(
            Entry(
                header["oid"],
                header["collection"],
                header["url"],
                header["gatherer"],
                float(header["expires"]),
                Version.from_json(header["version"]),
                record,
            )
        )


def _json_line(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as error:  # also too deep, or an integer too long
        raise WireError(f"a transfer line is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise WireError("a transfer line is not a JSON object")
    return value


def _check_header(header: dict[str, Any]) -> int:
    if set(header) != _HEADER_KEYS:
        raise WireError(
            f"an entry header has the keys {sorted(_HEADER_KEYS)}, not {sorted(header)}"
        )
    if not all(isinstance(header[k], str) for k in ("oid", "collection", "url", "gatherer")):
        raise WireError("an entry's oid, collection, url and gatherer are strings")
    expires, size = header["expires"], header["size"]
    if not _finite(expires):
        raise WireError(f"{header['oid']}: expires is a number, not {expires!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < -1:
        raise WireError(f"{header['oid']}: size is -1 or a count of bytes, not {size!r}")
    return size


def _check_trailer(trailer: dict[str, Any], body: bytes, count: int) -> None:
    if set(trailer) != {"end", "sha256"} or trailer["end"] != count:
        raise WireError(f"the transfer's trailer does not match its {count} entries")
    if trailer["sha256"] != hashlib.sha256(body).hexdigest():
        raise WireError("the transfer is corrupted (its SHA-256 does not match)")


def pack(entries: Sequence[Entry]) -> bytes:
    """``entries`` as a compressed transfer."""
    return zstandard.ZstdCompressor(level=3).compress(encode(entries))


def unpack(data: bytes, limit: int = MAX_UNPACKED) -> list[Entry]:
    """The entries of a compressed transfer; WireError if it is not whole and intact or
    unpacks to more than ``limit`` bytes."""
    try:
        # Across frames: bytes after the first frame are decompressed too (and then refused
        # as bytes after the trailer, or as not zstd), not silently ignored.
        with zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        ) as reader:
            raw = reader.read(limit + 1)
    except zstandard.ZstdError as error:
        raise WireError(f"the transfer does not decompress: {error}") from None
    if len(raw) > limit:
        raise WireError(f"the transfer unpacks to more than {limit} bytes")
    return decode(raw)
