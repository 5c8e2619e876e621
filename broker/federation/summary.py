"""A broker's content summary: for each attribute, the words most of its objects hold, with
their document frequencies, as GlOSS's brokers told a directory what they held. The HSR
ranks brokers for a query from these (broker/federation/route.py).

Pure: records and a tokenizer in (the index's analyzer, so that words are the terms a query
asks for), a summary out; and its SOIF form, written and read.

**Bounded.** At most ``MAX_ATTRIBUTES`` attributes (those the most objects hold), each with
its ``TERMS_PER_ATTRIBUTE`` most frequent words, and the ``TERMS_ANY`` most frequent words
of any attribute; a summary's text is at most ``MAX_BYTES`` (the lists are cut shorter until
it fits). A list that was cut says so: a word missing from it may still be held, less often
than its last word. Words of one character, words of digits only (sizes, dates, ids) and a
few English function words are not counted: they would fill the lists and tell nothing.
Values are read up to ``MAX_VALUE_CHARS`` characters each. Attributes that every record
carries for bookkeeping (checksums, times, the gatherer's identity) are left out.

**Sampled.** The caller hands at most a sample of a large broker's objects (a uniform one:
broker/registry reads those whose oids, hashes, fall below a bound); frequencies are then
scaled to all ``documents`` and are estimates.

**SOIF form** (attributes of the broker's HSR record)::

    Content-Documents: 525          objects summarised (the HSR's own registrations aside)
    Content-Sampled: 525            objects read to count them
    Content-Summary: one line per list, any attribute (``*``) first:
        * 525 cache:120 proxy:80 squid:41 +
        Title 480 cache:40 proxy:33

A line is the attribute, how many objects hold it, then ``word:frequency`` pairs, most
frequent first, and ``+`` when the list was cut.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from harvest_common.soif.record import Record

ANY = "*"  # the list of words of any attribute
MAX_ATTRIBUTES = 16
TERMS_PER_ATTRIBUTE = 64
TERMS_ANY = 256
MAX_BYTES = 32 * 1024
MAX_VALUE_CHARS = 20_000
CUT = "+"

DOCUMENTS = "Content-Documents"
SAMPLED = "Content-Sampled"
SUMMARY = "Content-Summary"

# Attributes of bookkeeping, by lower-cased name: their words say nothing of the contents.
SKIPPED = frozenset(
    {
        "md5",
        "update-time",
        "last-modification-time",
        "time-to-live",
        "refresh-rate",
        "file-size",
        "gatherer-name",
        "gatherer-host",
        "gatherer-port",
        "gatherer-version",
        "url-references",
    }
)
# The commonest English function words: in nearly every object, so never telling.
_FUNCTION_WORDS = """an and are as at be but by for from has have in is it its not of on or
that the this to was were which with you your"""
STOPWORDS = frozenset(_FUNCTION_WORDS.split())

Tokenizer = Callable[[str], Sequence[str]]


def counted(token: str) -> bool:
    """Whether a word is counted in a summary (and so can be found in one)."""
    return len(token) > 1 and not token.isdigit() and token not in STOPWORDS


@dataclass(frozen=True, slots=True)
class TermList:
    """The words of one attribute (``ANY``: of any): how many objects hold the attribute,
    the most frequent words with their document frequencies (most frequent first), and
    whether words were left out (``cut``)."""

    attribute: str
    documents: int
    terms: tuple[tuple[str, int], ...]
    cut: bool = False

    def frequency(self, word: str) -> int | None:
        """How many objects hold ``word`` here; None when it is not listed."""
        for term, df in self.terms:
            if term == word:
                return df
        return None

    def prefixed(self, prefix: str) -> int | None:
        """How many objects hold a listed word starting with ``prefix`` (at most the sum of
        their frequencies, at most ``documents``); None when none is listed."""
        found = [df for term, df in self.terms if term.startswith(prefix)]
        return min(sum(found), self.documents) if found else None

    @property
    def least(self) -> int:
        """The frequency of its last listed word (0 when it lists none)."""
        return self.terms[-1][1] if self.terms else 0

    def line(self) -> str:
        pairs = " ".join(f"{term}:{df}" for term, df in self.terms)
        return " ".join(p for p in (self.attribute, str(self.documents), pairs) if p) + (
            f" {CUT}" if self.cut else ""
        )


@dataclass(frozen=True, slots=True)
class ContentSummary:
    """What a broker holds: ``documents`` objects (``sampled`` of them read) and the word
    lists, the ``ANY`` list first."""

    documents: int
    sampled: int
    lists: tuple[TermList, ...]

    def __repr__(self) -> str:
        return (
            f"ContentSummary({self.documents} documents, {self.sampled} sampled,"
            f" {len(self.lists)} lists)"
        )

    def list_of(self, attribute: str | None) -> TermList | None:
        """The list of ``attribute`` (any case), or of any attribute for None."""
        wanted = ANY if attribute is None else attribute.lower()
        return next((t for t in self.lists if t.attribute.lower() == wanted), None)

    def text(self) -> str:
        return "\n".join(t.line() for t in self.lists)

    def attributes(self) -> tuple[tuple[str, str], ...]:
        """The summary as attributes of a server record."""
        return (
            (DOCUMENTS, str(self.documents)),
            (SAMPLED, str(self.sampled)),
            (SUMMARY, self.text()),
        )


EMPTY = ContentSummary(0, 0, (TermList(ANY, 0, ()),))


class SummaryFormatError(ValueError):
    """A record's summary that cannot be read (a registration from a newer or broken
    broker): ignored where it is read."""


def from_record(record: Record) -> ContentSummary | None:
    """The summary a broker's registration carries; None when it carries none. Raises
    SummaryFormatError for one that cannot be read."""
    text = record.text(SUMMARY)
    if text is None:
        return None
    documents = _count(record.text(DOCUMENTS), DOCUMENTS)
    sampled = _count(record.text(SAMPLED), SAMPLED)
    lists = tuple(_parsed_line(line) for line in text.splitlines() if line.strip())
    if not lists or lists[0].attribute != ANY:
        raise SummaryFormatError(f"{SUMMARY} must start with the {ANY!r} list")
    return ContentSummary(documents, sampled, lists)


def _count(text: str | None, name: str) -> int:
    value = (text or "").strip()
    if not (value.isascii() and value.isdigit()) or len(value) > 15:
        raise SummaryFormatError(f"{name} must be a whole number, got {value[:40]!r}")
    return int(value)


def _parsed_line(line: str) -> TermList:
    fields = line.split()
    if len(fields) < 2:
        raise SummaryFormatError(f"a summary line needs an attribute and a count: {line[:80]!r}")
    attribute, documents, *rest = fields
    cut = bool(rest) and rest[-1] == CUT
    if cut:
        rest.pop()
    terms = []
    for pair in rest:
        term, colon, df = pair.rpartition(":")
        if not colon or not term:
            raise SummaryFormatError(f"expected word:frequency, got {pair[:80]!r}")
        terms.append((term, _count(df, f"the frequency of {term[:40]!r}")))
    return TermList(
        attribute, _count(documents, f"the count of {attribute[:40]!r}"), tuple(terms), cut
    )


class Counts:
    """Document frequencies of the words of the records added so far (CPU work: run it on
    a worker thread)."""

    def __init__(self, tokens: Tokenizer) -> None:
        self._tokens = tokens
        self.records = 0
        self._names: dict[str, str] = {}  # lower-cased name -> the first spelling seen
        self._holding: Counter[str] = Counter()  # objects holding each attribute
        self._words: dict[str, Counter[str]] = {}
        self._any: Counter[str] = Counter()

    def add(self, attributes: Iterable[tuple[str, str]]) -> None:
        """Count one object, given as (attribute, text) pairs."""
        self.records += 1
        seen: set[str] = set()
        for name, value in attributes:
            key = name.lower()
            if key in SKIPPED:
                continue
            words = {t for t in self._tokens(value[:MAX_VALUE_CHARS]) if counted(t)}
            self._names.setdefault(key, name)
            self._holding[key] += 1
            self._words.setdefault(key, Counter()).update(words)
            seen |= words
        self._any.update(seen)

    def summary(self, documents: int) -> ContentSummary:
        """The summary of ``documents`` objects, of which the ones added are a sample (all
        of them when as many)."""
        scale = documents / self.records if self.records else 0.0
        attributes = sorted(self._holding, key=lambda k: (-self._holding[k], k))[:MAX_ATTRIBUTES]
        per_attribute, per_any = TERMS_PER_ATTRIBUTE, TERMS_ANY
        while True:
            lists = [_top(ANY, documents, self._any, per_any, scale)]
            lists += [
                _top(
                    self._names[k],
                    round(self._holding[k] * scale),
                    self._words[k],
                    per_attribute,
                    scale,
                )
                for k in attributes
            ]
            summary = ContentSummary(documents, self.records, tuple(lists))
            if len(summary.text().encode()) <= MAX_BYTES or per_any <= 1:
                return summary
            per_attribute, per_any = max(1, per_attribute // 2), max(1, per_any // 2)


def _top(attribute: str, documents: int, words: Counter[str], limit: int, scale: float) -> TermList:
    # Most frequent first, ties alphabetically: the same counts give the same summary.
    best = heapq.nsmallest(limit, words.items(), key=lambda item: (-item[1], item[0]))
    terms = tuple((term, max(1, round(df * scale))) for term, df in best)
    return TermList(attribute, documents, terms, cut=len(words) > limit)
