"""The vocabulary of prefix and approximate words (broker/index/fuzzy.py), against brute
force."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.index.fuzzy import MAX_LENGTH, Vocabulary, deletions, within


def distance(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``, a swap of neighbours counting one (optimal string
    alignment), by the textbook dynamic programme."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def vocabulary(*words: str, tag: int = 1) -> Vocabulary:
    return Vocabulary().extended((word, tag) for word in words)


WORDS = st.text(alphabet="abcé1", min_size=0, max_size=7)


def test_deletions() -> None:
    assert deletions("abc", 0) == {"abc"}
    assert deletions("abc", 1) == {"abc", "bc", "ac", "ab"}
    assert deletions("abc", 2) == {"abc", "bc", "ac", "ab", "a", "b", "c"}
    assert deletions("aa", 2) == {"aa", "a", ""}


@given(WORDS, WORDS, st.integers(0, 3))
def test_within_counts_edits_with_transpositions(a: str, b: str, k: int) -> None:
    assert within(a, b, k) == (distance(a, b) <= k)


def test_a_transposition_is_one_edit() -> None:
    assert within("asyncoi", "asyncio", 1)
    assert not within("asyncoi", "asyncore", 1)
    assert within("asyncoi", "asyncore", 2)
    assert not within("ca", "abc", 2)  # no substring is edited twice


@settings(max_examples=300)
@given(st.lists(WORDS, max_size=40), WORDS, st.integers(1, 2))
def test_near_finds_exactly_the_words_within_the_errors(
    words: list[str], query: str, errors: int
) -> None:
    expansion = vocabulary(*words).near(query, errors, limit=1000)
    candidates = {w for w in words if not w.isdigit()}
    expected = sorted(w for w in candidates if distance(query, w) <= errors)
    if sum(not c.isdigit() for c in query) <= errors:
        assert expansion is None  # a number could be near: the caller asks the engine
        return
    assert expansion is not None
    assert expansion.words == tuple(expected)
    assert expansion.tags == (1 if expected else 0)


@given(st.lists(st.lists(WORDS, max_size=15), max_size=6), WORDS, st.integers(1, 2))
def test_extending_in_steps_is_extending_at_once(
    steps: list[list[str]], query: str, errors: int
) -> None:
    stepwise = Vocabulary()
    for words in steps:
        stepwise = stepwise.extended((w, 1) for w in words)
    at_once = vocabulary(*(w for words in steps for w in words))
    assert stepwise.near(query, errors, 1000) == at_once.near(query, errors, 1000)
    assert stepwise.prefixed(query, 1000) == at_once.prefixed(query, 1000)
    assert len(stepwise) == len(at_once)


def test_near_word_examples() -> None:
    v = vocabulary("harvest", "harvxst", "harxxst", "hxrxxst", "havrest", "harvests", "cache")
    one = v.near("harvest", 1, 10)
    assert one is not None
    assert one.words == ("harvest", "harvests", "harvxst", "havrest")  # havrest: a swap
    two = v.near("harvest", 2, 10)
    assert two is not None
    assert two.words == ("harvest", "harvests", "harvxst", "harxxst", "havrest")
    assert two.edits == (0, 1, 1, 2, 1)
    # The three nearest: no edit, then of the one-edit words the longer, then the first in
    # alphabetical order.
    nearest = v.near("harvest", 2, 3)
    assert nearest is not None
    assert nearest.words == ("harvest", "harvests", "harvxst")


def test_near_keeps_longer_words_first_at_the_same_distance() -> None:
    v = Vocabulary().extended([("tree", 1), ("the", 2), ("to", 4), ("tread", 8), ("tee", 16)])
    nearest = v.near("tree", 2, 3)
    assert nearest is not None
    # "tee": one edit; of the two-edit words "tread" (4 letters counted) before "the" (3).
    assert nearest.words == ("tee", "tread", "tree")
    assert nearest.tags == 1 | 8 | 16  # the tags of the words given only


@settings(max_examples=300)
@given(st.lists(WORDS, max_size=40), WORDS, st.integers(1, 2), st.integers(1, 6))
def test_near_gives_the_nearest_words_up_to_the_limit(
    words: list[str], query: str, errors: int, limit: int
) -> None:
    expansion = vocabulary(*words).near(query, errors, limit)
    if expansion is None:
        return  # a number could be near (the test above covers it)
    candidates = {w for w in words if not w.isdigit() and distance(query, w) <= errors}
    ranked = sorted(candidates, key=lambda w: (distance(query, w), -min(len(query), len(w)), w))
    assert expansion.words == tuple(sorted(ranked[:limit]))
    assert expansion.edits == tuple(distance(query, w) for w in expansion.words)


def test_near_declines_what_the_table_leaves_out() -> None:
    v = vocabulary("1994", "rfc1945", "x" * (MAX_LENGTH + 1))
    assert v.near("1995", 1, 10) is None  # numbers are not in the table
    assert v.near("a9", 1, 10) is None  # one letter away from a number
    expansion = v.near("rfc1944", 1, 10)
    assert expansion is not None
    assert expansion.words == ("rfc1945",)
    assert v.near("x" * MAX_LENGTH, 1, 10) is None  # could be near a word over MAX_LENGTH
    assert v.near("cache", 3, 10) is None  # more errors than the table was built for


def test_prefixes() -> None:
    v = Vocabulary().extended([("cache", 1), ("caching", 2), ("cab", 4), ("1994", 8)])
    expansion = v.prefixed("cach", 10)
    assert expansion is not None
    assert expansion.words == ("cache", "caching")
    assert expansion.tags == 3
    over = v.prefixed("ca", 2)
    assert over is not None
    assert (over.words, over.tags) == (None, 7)
    none = v.prefixed("zz", 10)
    assert none is not None
    assert (none.words, none.tags) == ((), 0)
    assert v.prefixed("19", 10) is None  # numbers are not in the vocabulary
    assert v.prefixed("", 10) is None


def test_tags_accumulate_and_versions_stay_as_they_were() -> None:
    first = Vocabulary().extended([("cache", 1)])
    second = first.extended([("cache", 2), ("proxy", 4)])
    assert (first.tags("cache"), first.tags("proxy")) == (1, 0)
    assert (second.tags("cache"), second.tags("proxy")) == (3, 4)
    assert len(first) == 1
    assert len(second) == 2
    assert second.extended([("cache", 1)]).tags("cache") == 3
