"""Cache digests: a Bloom filter of the objects a cache holds, in Squid's format.

A cache publishes its digest over HTTP and pulls its peers' on a schedule; when a peer's
digest says it holds an object, the request goes there without an ICP round trip (and a
"false hit", the filter's error, costs one wasted request). Pure: bytes in, bytes out.

Squid's format (``store_digest``, version 5), all integers in network byte order: a
128-byte header (version current and required, capacity, count, deletion count, mask size
in bytes, bits per entry, hash function count, then reserved space) followed by the bit
mask. An object's key is the MD5 of its method's number (GET is 1) and its URL; each of the
key's four 32-bit big-endian words, modulo the mask's bit count, is one bit to set.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable

from harvest_cache.errors import DigestError
from harvest_cache.hierarchy.responder import fresh_for
from harvest_cache.http.freshness import Heuristic
from harvest_cache.http.stored import StoredHead

VERSION = 5
REQUIRED = 3  # the oldest reader that understands this layout
HEADER = struct.Struct("!hhiiiiBBh104x")
BITS_PER_ENTRY = 5  # Squid's digest_bits_per_entry default
HASH_FUNCTIONS = 4
MIN_CAPACITY = 64
_GET = b"\x01"  # Squid's method number of GET, the first byte of a public key


def key(url: str) -> bytes:
    """The digest key of a GET for ``url`` (Squid's public store key)."""
    return hashlib.md5(_GET + url.encode("latin-1"), usedforsecurity=False).digest()


class Digest:
    """A Bloom filter over keys: ``add`` and ``in`` never touch the bytes behind it but
    ``mask``; ``encode`` and ``decode`` convert it to and from Squid's wire form."""

    __slots__ = ("_bits", "capacity", "count", "deletions", "mask")

    def __init__(self, capacity: int, mask: bytearray | None = None) -> None:
        self.capacity = max(capacity, MIN_CAPACITY)
        size = (self.capacity * BITS_PER_ENTRY + 7) // 8
        self.mask = mask if mask is not None else bytearray(size)
        self._bits = len(self.mask) * 8
        self.count = 0
        self.deletions = 0

    def _positions(self, digest_key: bytes) -> tuple[int, int, int, int]:
        a, b, c, d = struct.unpack("!IIII", digest_key)
        n = self._bits
        return a % n, b % n, c % n, d % n

    def add(self, digest_key: bytes) -> None:
        mask = self.mask
        for bit in self._positions(digest_key):
            mask[bit >> 3] |= 1 << (bit & 7)
        self.count += 1

    def __contains__(self, digest_key: object) -> bool:
        if not isinstance(digest_key, bytes) or len(digest_key) != 16:
            return False
        mask = self.mask
        return all(mask[bit >> 3] & (1 << (bit & 7)) for bit in self._positions(digest_key))

    @property
    def fill(self) -> float:
        """The share of the mask's bits that are set (a full filter says yes to anything)."""
        ones = int.from_bytes(self.mask, "big").bit_count()
        return ones / self._bits

    def encode(self) -> bytes:
        header = HEADER.pack(
            VERSION,
            REQUIRED,
            self.capacity,
            self.count,
            self.deletions,
            len(self.mask),
            BITS_PER_ENTRY,
            HASH_FUNCTIONS,
            0,
        )
        return header + bytes(self.mask)


def build(
    heads: Iterable[StoredHead],
    now: float,
    heuristic_for: Callable[[str], Heuristic],
    fresh_seconds: float,
) -> Digest:
    """The digest of the stored responses a peer could be given: a GET's, not a variant
    (a URL alone cannot tell which one a client needs), fresh now and for ``fresh_seconds``
    more (until the next digest replaces this one, as Squid requires)."""
    urls = [
        h.url
        for h in heads
        if not h.vary_key and fresh_for(h, fresh_seconds, now, heuristic_for(h.url))
    ]
    # Room for a fifth more, as the cache keeps filling until the next rebuild.
    digest = Digest(len(urls) + len(urls) // 5)
    for url in urls:
        digest.add(key(url))
    return digest


def decode(data: bytes) -> Digest:
    """A digest from Squid's wire form; DigestError for one this code cannot read."""
    if len(data) < HEADER.size:
        raise DigestError(f"a digest needs a {HEADER.size}-byte header, got {len(data)} bytes")
    current, required, capacity, count, deletions, mask_size, bits, functions, _ = (
        HEADER.unpack_from(data)
    )
    if required > VERSION or current < REQUIRED:
        raise DigestError(f"digest version {current} (needs {required}) is not version {VERSION}")
    if functions != HASH_FUNCTIONS:
        raise DigestError(f"a digest with {functions} hash functions (not {HASH_FUNCTIONS})")
    if mask_size <= 0 or len(data) - HEADER.size != mask_size:
        raise DigestError(
            f"the digest's mask is {len(data) - HEADER.size} bytes, its header says {mask_size}"
        )
    if capacity <= 0 or count < 0 or deletions < 0 or bits <= 0:
        raise DigestError("the digest's header holds a negative or zero count")
    digest = Digest(capacity, bytearray(data[HEADER.size :]))
    digest.count = count
    digest.deletions = deletions
    return digest
