"""Cache digests in Squid's format: keys, the Bloom filter, the wire form, what goes in."""

from __future__ import annotations

import hashlib
import struct

import pytest

from harvest_cache.errors import DigestError
from harvest_cache.hierarchy.digest import HEADER, Digest, build, decode, key
from harvest_cache.http.dates import format_http_date
from harvest_cache.http.freshness import Heuristic
from harvest_cache.http.stored import StoredHead

NOW = 1_800_000_000.0


def head(url: str, max_age: int, vary_key: str = "", status: int = 200) -> StoredHead:
    fields = (("Date", format_http_date(NOW)), ("Cache-Control", f"max-age={max_age}"))
    return StoredHead(url, status, "OK", fields, NOW, NOW, 10, vary_key)


def no_heuristic(url: str) -> Heuristic:
    return Heuristic(0, 0)


def test_the_key_is_squids_public_key_of_a_get() -> None:
    # Squid: MD5 of the method's number (GET = 1) followed by the URL.
    assert key("http://a/") == hashlib.md5(b"\x01http://a/").digest()


def test_each_key_sets_the_bits_its_four_words_name() -> None:
    digest = Digest(100)
    k = key("http://example.org/x")
    digest.add(k)
    bits = len(digest.mask) * 8
    for word in struct.unpack("!IIII", k):
        bit = word % bits
        assert digest.mask[bit >> 3] & (1 << (bit & 7))
    assert sum(bin(b).count("1") for b in digest.mask) <= 4
    assert k in digest
    assert digest.count == 1


def test_added_keys_are_always_found_and_others_mostly_not() -> None:
    digest = Digest(2000)
    for i in range(2000):
        digest.add(key(f"http://in/{i}"))
    assert all(key(f"http://in/{i}") in digest for i in range(2000))
    false = sum(key(f"http://out/{i}") in digest for i in range(20_000))
    # 5 bits per entry and 4 hash functions at full capacity: Squid's ~9% false hits.
    assert false / 20_000 < 0.12
    assert 0.4 < digest.fill < 0.7


def test_wire_form_round_trips_with_squids_header() -> None:
    digest = Digest(500)
    for i in range(300):
        digest.add(key(f"http://x/{i}"))
    data = digest.encode()
    assert len(data) == 128 + (500 * 5 + 7) // 8
    current, required, capacity, count, deletions, mask_size, bits, functions, _ = (
        HEADER.unpack_from(data)
    )
    assert (current, required, capacity, count, deletions) == (5, 3, 500, 300, 0)
    assert (mask_size, bits, functions) == ((500 * 5 + 7) // 8, 5, 4)
    again = decode(data)
    assert again.mask == digest.mask
    assert (again.capacity, again.count) == (500, 300)
    assert all(key(f"http://x/{i}") in again for i in range(300))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d[:100], "header"),
        (lambda d: d[:-1], "mask"),
        (lambda d: d + b"\x00", "mask"),
        (lambda d: struct.pack("!hh", 9, 9) + d[4:], "version"),
        (lambda d: d[:21] + b"\x07" + d[22:], "hash functions"),
        (lambda d: d[:8] + struct.pack("!i", -1) + d[12:], "negative"),
    ],
)
def test_unreadable_digests_are_refused(change: object, message: str) -> None:
    data = Digest(100).encode()
    assert callable(change)
    with pytest.raises(DigestError, match=message):
        decode(change(data))


def test_non_keys_are_never_in_a_digest() -> None:
    digest = Digest(10)
    assert b"short" not in digest
    assert "http://a/" not in digest


def test_build_lists_what_stays_fresh_until_the_next_build() -> None:
    heads = [
        head("http://a/long", 3600),
        head("http://a/short", 60),  # stale before the next build in 600 s
        head("http://a/variant", 3600, vary_key="accept-encoding=gzip"),
        head("http://a/stale", 0),
    ]
    digest = build(heads, NOW, no_heuristic, 600)
    assert key("http://a/long") in digest
    assert digest.count == 1
    assert digest.capacity >= 64
