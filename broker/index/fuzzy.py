"""Approximate words: which words of the index's vocabulary start with a prefix (``cach*``) or
lie within k edits of a word (``cahce~1``), so that they can be asked for as exact terms, ranked
by BM25, instead of through tantivy's constant-scoring automaton queries.

Pure: no engine, no I/O. An edit inserts, deletes or substitutes one character, or swaps two
neighbours (the commonest typo: ``asyncoi`` for ``asyncio``), as Lucene and Elasticsearch count
them: the optimal string alignment distance (Damerau-Levenshtein without editing a substring
twice). Harvest's brokers, on agrep and Glimpse, counted a transposition as two.

Near words come from a deletion-neighbourhood table (SymSpell): every word of up to
``MAX_LENGTH`` characters is filed under each string it becomes by deleting up to
``MAX_ERRORS`` of its characters; two words are within k edits only if deleting at most k
characters from each gives a common string (a swap of two neighbours: one of them deleted on
either side), so the query word's own deletions find every candidate, and the edit distance
keeps the true ones. On the vocabulary of 100,000 generated records (150,000 words, 50,000 of
them in the table) a look-up takes 0.04 ms with one error and 0.2 ms with two at the median;
the issue measured a scan of a vocabulary with an edit distance at 720 ms. The table holds
packed integers (a 39-bit hash of the deleted form and a word number) in sorted arrays, 8 bytes
an entry, not a dict of strings (about 100 bytes an entry).

A ``Vocabulary`` is immutable: ``extended`` returns a new one that shares the old one's runs
and adds one for the new words (runs of similar size are merged, so there are O(log n)), so
searches may read one while another is being built. Each word carries ``tags`` (the index uses
a bit per field holding it), ORed over the versions it was added with.

Words made only of digits are left out (they are numbers: sizes, times, identifiers, a large
and useless part of a vocabulary), as are words longer than ``MAX_LENGTH`` from the table. A
look-up that one of these could answer returns None, and the caller asks the engine instead.

A near-word look-up gives at most a limit of words, the nearest (as Lucene's fuzzy queries
do): a word of four or five letters is within two edits of a hundred words or more of a large
vocabulary, most of them short common ones, whose union is nearly every object and costs
10-15 ms to rank; the word meant is among the nearest.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from rapidfuzz.distance import OSA

MAX_ERRORS = 2
MAX_LENGTH = 20

_ID_BITS = 24  # words per run, at most 16.7 million
_ID_MASK = (1 << _ID_BITS) - 1
_HASH_MASK = (1 << (63 - _ID_BITS)) - 1
# Past this many candidates to verify, a look-up gives up (a word of one or two letters with
# two errors is near most short words): the engine's automaton is then quicker.
_MAX_CANDIDATES = 4096


@dataclass(frozen=True, slots=True)
class Expansion:
    """The words a look-up found, in alphabetical order (a prefix's: all of them, or None when
    there were more than the limit; a near word's: the nearest, up to the limit), and the OR
    of the tags of every word given (of every word found when the words are None). For a near
    word, ``edits`` holds how many edits away each of the words is."""

    words: tuple[str, ...] | None
    tags: int
    edits: tuple[int, ...] = ()


def deletions(word: str, depth: int) -> set[str]:
    """``word`` and every string made from it by deleting up to ``depth`` characters."""
    found = {word}
    level = {word}
    for _ in range(depth):
        level = {w[:i] + w[i + 1 :] for w in level for i in range(len(w))}
        found |= level
    return found


def within(a: str, b: str, k: int) -> bool:
    """Whether ``a`` and ``b`` are at most ``k`` edits apart (transpositions counting one)."""
    return abs(len(a) - len(b)) <= k and OSA.distance(a, b, score_cutoff=k) <= k


def _within_by_insertions(form: str, word: str) -> bool:
    """Whether ``word`` is ``form`` with characters inserted (``form`` is a subsequence)."""
    at = 0
    for c in word:
        if at < len(form) and form[at] == c:
            at += 1
    return at == len(form)


def _key(form: str, number: int) -> int:
    # Python's string hash: salted per process, which is fine for a table rebuilt at start-up.
    return (hash(form) & _HASH_MASK) << _ID_BITS | number


@dataclass(frozen=True, slots=True)
class _Run:
    """Words added together: ``words`` in the order their numbers refer to, ``ordered`` sorted
    (for prefixes), ``keys`` the sorted table entries of those up to MAX_LENGTH long."""

    words: tuple[str, ...]
    ordered: tuple[str, ...]
    keys: array[int]

    @classmethod
    def of(cls, words: tuple[str, ...]) -> _Run:
        keys: list[int] = []
        for number, word in enumerate(words):
            if len(word) <= MAX_LENGTH:
                keys += [_key(form, number) for form in deletions(word, MAX_ERRORS)]
        keys.sort()
        return cls(words, tuple(sorted(words)), array("q", keys))

    def merged(self, newer: _Run) -> _Run:
        # The newer run's word numbers shift by this run's length; its keys stay sorted.
        shift = len(self.words)
        keys = sorted(itertools.chain(self.keys, (key + shift for key in newer.keys)))
        ordered = sorted(itertools.chain(self.ordered, newer.ordered))
        return _Run(self.words + newer.words, tuple(ordered), array("q", keys))

    def filed_under(self, form: str) -> Iterator[str]:
        low = _key(form, 0)
        keys = self.keys
        at = bisect.bisect_left(keys, low)
        high = low | _ID_MASK
        while at < len(keys) and keys[at] <= high:
            yield self.words[keys[at] & _ID_MASK]
            at += 1

    def prefixed(self, prefix: str) -> Iterator[str]:
        at = bisect.bisect_left(self.ordered, prefix)
        while at < len(self.ordered) and self.ordered[at].startswith(prefix):
            yield self.ordered[at]
            at += 1


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Words with their tags; prefix and near-word look-ups. Immutable."""

    _runs: tuple[_Run, ...] = ()
    _tags: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._tags)

    def tags(self, word: str) -> int:
        """The tags of ``word``, 0 if it is not in the vocabulary."""
        return self._tags.get(word, 0)

    def extended(self, words: Iterable[tuple[str, int]]) -> Vocabulary:
        """This vocabulary with ``words`` added (a word already in it gains the new tags)."""
        tags = dict(self._tags)
        new: list[str] = []
        for word, tag in words:
            if word.isdigit():
                continue
            old = tags.get(word)
            if old is None:
                new.append(word)
                tags[word] = tag
            elif old | tag != old:
                tags[word] = old | tag
        if not new:
            return Vocabulary(self._runs, tags)
        runs = [*self._runs, _Run.of(tuple(new))]
        # Keep run sizes geometric: a look-up searches every run.
        while len(runs) > 1 and 2 * len(runs[-1].words) >= len(runs[-2].words):
            newer = runs.pop()
            runs[-1] = runs[-1].merged(newer)
        return Vocabulary(tuple(runs), tags)

    def prefixed(self, prefix: str, limit: int) -> Expansion | None:
        """The words starting with ``prefix``; None if numbers could (the prefix is digits)."""
        if not prefix or prefix.isdigit():
            return None
        found: list[str] = []
        tags = 0
        for run in self._runs:
            for word in run.prefixed(prefix):
                found.append(word)
                tags |= self._tags[word]
        found.sort()
        return Expansion(tuple(found) if len(found) <= limit else None, tags)

    def near(self, word: str, errors: int, limit: int) -> Expansion | None:
        """The words within ``errors`` edits of ``word``, in alphabetical order; past
        ``limit`` of them, the nearest: fewer edits first, then longer words (as Lucene's
        similarity, 1 - edits / length), then alphabetical order. None if a word left out of
        the table could be one (a number, or a word over MAX_LENGTH), or if there are too
        many candidates to check."""
        if errors > MAX_ERRORS or len(word) + errors > MAX_LENGTH:
            return None
        # A word of digits alone is within k edits only of words with at most k other
        # characters: each of those must be substituted or deleted.
        if sum(not c.isdigit() for c in word) <= errors:
            return None
        # A candidate filed under a form that ``word`` becomes by i deletions and it by j is
        # within i + j edits (delete i, insert j): only the others need an edit distance.
        near: set[str] = set()
        doubtful: set[str] = set()
        for form in deletions(word, errors):
            deleted = len(word) - len(form)
            for run in self._runs:
                for candidate in run.filed_under(form):
                    if candidate in near:
                        continue
                    # Filing is by a hash of the form: check that it is the candidate's.
                    if deleted + len(candidate) - len(form) <= errors and _within_by_insertions(
                        form, candidate
                    ):
                        near.add(candidate)
                    else:
                        doubtful.add(candidate)
            if len(near) + len(doubtful) > _MAX_CANDIDATES:
                return None
        found = near.union(c for c in doubtful - near if within(word, c, errors))
        edits = {c: _edits(word, c, errors) for c in found}
        if len(found) > limit:
            found = set(sorted(found, key=lambda c: (edits[c], -min(len(word), len(c)), c))[:limit])
        tags = 0
        for c in found:
            tags |= self._tags[c]
        words = tuple(sorted(found))
        return Expansion(words, tags, tuple(edits[c] for c in words))


def _edits(word: str, candidate: str, errors: int) -> int:
    """How many edits ``candidate``, known to be within ``errors`` of ``word``, is away."""
    if candidate == word:
        return 0
    if errors > 1 and within(word, candidate, 1):
        return 1
    return errors
