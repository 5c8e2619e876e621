"""Near-duplicate fingerprints: a 64-bit SimHash (Charikar, 2002) of a text's word shingles,
so that the same text under two URLs is summarized once. Two texts whose fingerprints differ
in at most ``NEAR`` bits are near-duplicates (Manku, Jain and Das Sarma found 3 of 64 right
for web pages, 2007). Pure and deterministic: fingerprints are stored and compared across runs
and processes, so no salted hash (``hash()``) is used.
"""

from __future__ import annotations

import string
import sys
from array import array
from operator import xor
from zlib import crc32

BITS = 64
NEAR = 3
# Texts of fewer words are not fingerprinted: short pages (a stub, a "moved" notice) are alike
# without being copies of each other.
MIN_WORDS = 50
# A long text is fingerprinted by windows spread evenly over it, which bounds the work (about
# 0.4 us a word) and still sees all of it: by its opening alone, a whole index would be a copy
# of its first part (measured on Python's documentation: genindex-all and genindex-Symbols).
WINDOWS = 24
WINDOW_CHARS = 1000
_SHINGLE = 3
_MASK = (1 << BITS) - 1
_SEED = 0x9E3779B9  # a second CRC-32 from another start value: the upper 32 bits
# ASCII punctuation, guillemets, dashes, curly quotes, the ellipsis, pilcrow and section sign.
_PUNCTUATION = (
    string.punctuation + "\u00ab\u00bb\u2013\u2014\u2018\u2019\u201c\u201d\u2026\u00b6\u00a7"
)


def fingerprint(text: str) -> int | None:
    """The SimHash of ``text``'s three-word shingles (case and punctuation ignored), or None
    for a text too short to have one."""
    if len(text) > WINDOWS * WINDOW_CHARS:
        step = len(text) / WINDOWS
        starts = (int(window * step) for window in range(WINDOWS))
        text = " ".join(text[start : start + WINDOW_CHARS] for start in starts)
    # Words as whitespace splits them (three times faster than a \w+ pattern), each hashed
    # without the punctuation around it.
    words = text.lower().split()
    if len(words) < MIN_WORDS:
        return None
    # A shingle's hash mixes its words' hashes at different rotations, so order matters;
    # each distinct word is hashed and rotated once.
    plain: dict[str, int] = {}
    once: dict[str, int] = {}
    twice: dict[str, int] = {}
    for word in set(words):
        data = word.strip(_PUNCTUATION).encode("utf-8", "replace")
        value = crc32(data) | crc32(data, _SEED) << 32
        plain[word] = value
        once[word] = ((value << 21) | (value >> 43)) & _MASK
        twice[word] = ((value << 42) | (value >> 22)) & _MASK
    # Each shingle: its words' hashes at rotations 0, 21 and 42, XORed (in C, by map).
    pairs = map(xor, map(plain.__getitem__, words), map(once.__getitem__, words[1:]))
    return _majority(list(map(xor, pairs, map(twice.__getitem__, words[2:]))))


def distance(a: int, b: int) -> int:
    """How many bits two fingerprints differ in."""
    return (a ^ b).bit_count()


def bands(value: int) -> tuple[int, ...]:
    """``value`` cut into ``NEAR + 1`` bands: two fingerprints at most ``NEAR`` bits apart
    share at least one band (a changed bit falls in one band), so an index of bands finds
    every near-duplicate by exact lookups."""
    width = BITS // (NEAR + 1)
    mask = (1 << width) - 1
    return tuple((value >> (band * width)) & mask for band in range(NEAR + 1))


def _majority(hashes: list[int]) -> int:
    """The value whose bit i is set when more than half of ``hashes`` have bit i set.

    Counted in C: the hashes are laid out as bytes; the bytes of one position in every hash
    make one big integer, and the hashes with bit b of that byte set are counted as the set
    bits of that integer masked with bit b of every byte (64 masked popcounts, instead of a
    Python loop over every hash and bit)."""
    values = array("Q", hashes)
    if sys.byteorder == "big":  # bit i of a hash is bit i % 8 of its byte i // 8
        values.byteswap()
    packed = values.tobytes()
    width = values.itemsize
    masks = [int.from_bytes(bytes((1 << bit,)) * len(hashes), "little") for bit in range(8)]
    half = len(hashes) // 2
    result = 0
    for byte in range(width):
        column = int.from_bytes(packed[byte::width], "little")
        for bit, mask in enumerate(masks):
            if (column & mask).bit_count() > half:
                result |= 1 << (byte * 8 + bit)
    return result
