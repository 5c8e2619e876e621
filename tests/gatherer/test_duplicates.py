"""Near-duplicate fingerprints, their index, and which canonical URLs are followed."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gatherer.duplicates import NearDuplicates, canonical_target
from gatherer.essence.fingerprint import MIN_WORDS, NEAR, bands, distance, fingerprint

WORDS = [
    "cache",
    "gatherer",
    "broker",
    "replicator",
    "registry",
    "summary",
    "index",
    "query",
    "mirror",
    "object",
    "hierarchy",
    "parent",
    "sibling",
    "protocol",
    "document",
    "server",
    "client",
    "record",
    "collection",
    "topology",
]


def text(seed: int, words: int = 400) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + str(rng.randrange(50)) for _ in range(words))


def test_the_same_text_has_the_same_fingerprint_whatever_its_case_and_punctuation() -> None:
    original = text(1)
    value = fingerprint(original)
    assert value is not None
    assert fingerprint(original.upper().replace(" ", ", ")) == value


def test_a_few_changed_words_stay_near_and_other_texts_are_far() -> None:
    original = text(1).split()
    edited = list(original)
    for index in range(0, len(edited), 200):  # 2 words of 400: a date, a name
        edited[index] = "changed"
    near = fingerprint(" ".join(edited))
    value = fingerprint(" ".join(original))
    assert value is not None
    assert near is not None
    assert distance(value, near) <= NEAR
    for seed in range(2, 12):
        other = fingerprint(text(seed))
        assert other is not None
        assert distance(value, other) > 10


def test_a_long_text_is_not_a_copy_of_its_opening() -> None:
    opening = text(1, words=4000)
    whole = opening + " " + text(2, words=12000)
    value, longer = fingerprint(opening), fingerprint(whole)
    assert value is not None
    assert longer is not None
    assert distance(value, longer) > 10


def test_short_texts_have_no_fingerprint() -> None:
    assert fingerprint(" ".join(["word"] * (MIN_WORDS - 1))) is None
    assert fingerprint(" ".join(["word"] * MIN_WORDS)) is not None


@given(st.integers(0, (1 << 64) - 1), st.sets(st.integers(0, 63), max_size=NEAR))
def test_values_near_each_other_share_a_band(value: int, flipped: set[int]) -> None:
    other = value
    for bit in flipped:
        other ^= 1 << bit
    assert set(enumerate(bands(value))) & set(enumerate(bands(other)))


def test_the_index_finds_near_fingerprints_only_and_forgets_removed_ones() -> None:
    index = NearDuplicates([("http://a/", 0b1011 << 40), ("http://b/", (1 << 64) - 1)])
    assert index.find("http://c/", (0b1011 << 40) ^ 0b111) == "http://a/"  # 3 bits apart
    assert index.find("http://c/", (0b1011 << 40) ^ 0b1111) is None  # 4 bits apart
    assert index.find("http://a/", 0b1011 << 40) is None  # a document is not its own copy
    index.put("http://a/", 12345)  # changed text: filed under its new value only
    assert index.find("http://c/", 0b1011 << 40) is None
    assert index.find("http://c/", 12345) == "http://a/"
    index.remove("http://a/")
    assert index.find("http://c/", 12345) is None
    assert len(index) == 1
    index.put("http://b/", None)
    assert len(index) == 0


def test_of_several_copies_the_same_one_is_named_every_time() -> None:
    index = NearDuplicates([("http://z/", 99), ("http://m/", 99), ("http://q/", 98)])
    assert index.find("http://new/", 99) == "http://m/"


@pytest.mark.parametrize(
    ("url", "canonical", "target"),
    [
        ("http://a/print?x=1", "http://a/article", "http://a/article"),
        ("http://a/page", "https://a/page", "https://a/page"),
        ("http://a/page", "http://a/page", None),
        ("http://a/page", None, None),
        # A documentation package naming its installed path is not a web page's other URL.
        ("http://a/lib/json.html", "file:///usr/share/doc/lib/json.html", None),
        ("ftp://a/x.html", "http://a/x.html", None),
        ("http://a/page", "http://[::1/broken", None),
    ],
)
def test_which_canonical_urls_are_followed(url: str, canonical: str | None, target: str) -> None:
    assert canonical_target(url, canonical) == target
