"""Snippets for a result: per matching attribute, a short stretch of its text with the query's
words marked, so a reader sees why the object matched.

Pure: the object's attributes and the query tree in, ``(attribute, snippet)`` pairs out. The
marks are ``\\x02`` before and ``\\x03`` after a matched word; the caller escapes the text and
turns them into ``<mark>`` (HTML) or bold (a terminal). Words under ``NOT`` are not marked, nor
a term without an attribute in the attributes it does not search (broker/query/scope.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import cache
from types import MappingProxyType

from broker.index.interface import NearWords
from broker.match import MAX_VALUE_CHARS, Attributes, token_spans, tokens, word_matches
from broker.query import regex
from broker.query.ast import And, Node, Not, Or, Pattern, Phrase, Word
from broker.query.scope import BOOKKEEPING, searched_unnamed

START, END = "\x02", "\x03"
WIDTH = 160  # characters of context in one snippet
MAX_SNIPPETS = 3
# Attributes not worth showing as snippets: bookkeeping, not content.
SKIPPED = frozenset(BOOKKEEPING)


# No approximate word's words chosen: every word within its errors is marked.
_ANY_NEAR: NearWords = MappingProxyType({})


def snippets(
    node: Node, attributes: Attributes, near: NearWords = _ANY_NEAR
) -> tuple[tuple[str, str], ...]:
    """Up to MAX_SNIPPETS (attribute, marked snippet) pairs, in attribute order. ``near``:
    the words an approximate word became in the index (``Results.near``), where it chose
    among those within its errors; only those are marked."""
    terms = list(_positive_terms(node))
    out: list[tuple[str, str]] = []
    for name, value in attributes:
        if name.lower() in SKIPPED or not value:
            continue
        spans = _spans(terms, name, value, near)
        if spans:
            out.append((name, _window(value, spans)))
            if len(out) == MAX_SNIPPETS:
                break
    return tuple(out)


def _positive_terms(node: Node) -> list[Word | Phrase | Pattern]:
    match node:
        case And() | Or():
            return [term for item in node.items for term in _positive_terms(item)]
        case Not():
            return []
        case Word() | Phrase() | Pattern():
            return [node]
    return []


def _applies(term: Word | Phrase | Pattern, name: str) -> bool:
    if term.attribute is None:
        return searched_unnamed(name)
    return term.attribute.lower() == name.lower()


def _spans(
    terms: list[Word | Phrase | Pattern], name: str, value: str, near: NearWords = _ANY_NEAR
) -> list[tuple[int, int]]:
    """The spans of ``value`` that its snippet may mark: every term's first, and the rest of
    them up to where the window from the first of all ends (``_window`` shows no others).
    Each term's matches are read in order and no further, so a long value holding a common
    word is not scanned to its end."""
    text = _Text(value)
    readers = [_term_spans(term, text, near) for term in terms if _applies(term, name)]
    firsts = [span for span in (next(reader, None) for reader in readers) if span is not None]
    if not firsts:
        return []
    limit = max(0, min(firsts)[0] - WIDTH // 3) + WIDTH
    spans = list(firsts)
    for reader in readers:
        for span in reader:
            if span[0] > limit:
                break
            spans.append(span)
    return sorted(set(spans))


class _Text:
    """An attribute value, with its tokens and its lower-cased copy made at most once, when a
    term first needs them."""

    __slots__ = ("_lowered", "_tokens", "value")

    def __init__(self, value: str) -> None:
        self.value = value
        self._tokens: list[tuple[int, int, str]] | None = None
        self._lowered: str | None = None

    def tokens(self) -> list[tuple[int, int, str]]:
        if self._tokens is None:
            self._tokens = token_spans(self.value)
        return self._tokens

    def lowered(self) -> str | None:
        """The value in lower case if it is ASCII (offsets kept), else None."""
        if self._lowered is None and self.value.isascii():
            self._lowered = self.value.lower()
        return self._lowered


def _lowers(word: Word) -> bool:
    """Whether ``word`` may be looked for in a lower-cased copy of an ASCII value (case
    folding is one character for one)."""
    return not word.case_sensitive and word.text.isascii()


def _term_spans(
    term: Word | Phrase | Pattern, text: _Text, near_words: NearWords
) -> Iterator[tuple[int, int]]:
    """``term``'s spans in ``text``, in order of their starts."""
    value = text.value
    if isinstance(term, Pattern):
        # As the matcher, within the first MAX_VALUE_CHARS (the offsets hold in the whole).
        compiled = regex.compiled(term.regex, term.case_sensitive)
        return regex.spans(compiled, value[:MAX_VALUE_CHARS])
    if (
        isinstance(term, Word)
        and _lowers(term)
        and (finder := _finder(term, True)) is not None
        and (lowered := text.lowered()) is not None
    ):
        return (m.span(1) for m in finder.finditer(lowered))
    finder = _finder(term) if isinstance(term, Word) else _phrase_finder(term)
    if finder is not None:
        return (m.span(1) for m in finder.finditer(value))
    if isinstance(term, Phrase):
        return iter(_phrase_spans(term, text.tokens()))
    near = _near_finder(term)
    candidates: Iterable[tuple[int, int, str]] = (
        text.tokens()
        if near is None
        else ((m.start(), m.end(), m.group()) for m in near.finditer(value))
    )
    # Tokens too long or short to be within the word's errors are passed over unread.
    size, errors = len(term.text), term.errors
    chosen = near_words.get((term.text.lower(), errors))
    return (
        (s, e)
        for s, e, token in candidates
        if (term.prefix or abs(len(token) - size) <= errors)
        and word_matches(term, token)
        and (chosen is None or token.lower() in chosen)
    )


@cache
def _finder(word: Word, lowered: bool = False) -> re.Pattern[str] | None:
    """A regex finding the tokens (group 1) that ``word`` matches exactly or as a prefix,
    without splitting the whole value into tokens (most of a result's cost, on long texts); None for
    an approximate word, or one of several tokens (it matches no single token).

    ``lowered``: the regex for a lower-cased ASCII value and a word that ignores case, which
    then needs no case folding. The literal comes first and the boundary before it is
    checked behind it, so the regex engine looks for the literal as such: over 3.5 KB of text
    2.4x quicker than the boundary first when ignoring case, and another 13x without."""
    if word.errors or tokens(word.text) != [word.text]:
        return None
    literal = re.escape(word.text.lower() if lowered else word.text)
    flags = 0 if word.case_sensitive or lowered else re.IGNORECASE
    rest = r"[^\W_]*" if word.prefix else ""
    return re.compile(rf"({literal}(?<![^\W_]{literal}){rest})(?![^\W_])", flags)


@cache
def _phrase_finder(phrase: Phrase) -> re.Pattern[str] | None:
    """A regex finding ``phrase``'s tokens one after the other (group 1), as
    ``_phrase_spans`` does by splitting the value into tokens; None for a phrase that is not
    ASCII (case folding could change lengths) or has no token."""
    wanted = [t for word in phrase.words for t in tokens(word)]
    if not wanted or not all(t.isascii() for t in wanted):
        return None
    flags = 0 if phrase.case_sensitive else re.IGNORECASE
    between = r"[\W_]+"
    words = between.join(re.escape(t) for t in wanted)
    # (in a lookahead: occurrences may overlap, as "a a" does twice in "a a a")
    return re.compile(rf"(?<![^\W_])(?=({words})(?![^\W_]))", flags)


@cache
def _near_finder(word: Word) -> re.Pattern[str] | None:
    """A regex finding the tokens that may be within an approximate word's errors, so that
    only those are measured, not every token of a value. A token within k edits of the word
    holds one of k + 1 pieces of the word unchanged, as each edit spoils one piece at most
    (agrep's filter), where the pieces are one character apart: a transposition across the
    gap between two spoils only one of them. None for a word this does not apply to: not
    approximate, a prefix, too short to cut, not ASCII (its case folding could change
    lengths), or not one token."""
    text, errors = word.text, word.errors
    if not errors or word.prefix or len(text) < 2 * errors + 1 or not text.isascii():
        return None
    if tokens(text) != [text]:
        return None
    # k + 1 pieces of sizes as even as may be, with a character left out between each two.
    size, extra = divmod(len(text) - errors, errors + 1)
    pieces = []
    at = 0
    for i in range(errors + 1):
        end = at + size + (i < extra)
        pieces.append(text[at:end])
        at = end + 1
    flags = 0 if word.case_sensitive else re.IGNORECASE
    either = "|".join(re.escape(piece) for piece in pieces)
    # (and a token's length within the errors of the word's, checked before the pieces)
    sizes = f"{{{max(1, len(text) - errors)},{len(text) + errors}}}"
    return re.compile(rf"(?<![^\W_])(?=[^\W_]{sizes}(?![^\W_]))[^\W_]*?(?:{either})[^\W_]*", flags)


def _phrase_spans(phrase: Phrase, found: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    wanted = [t for word in phrase.words for t in tokens(word)]
    if not wanted:
        return []

    def same(a: str, b: str) -> bool:
        return a == b if phrase.case_sensitive else a.lower() == b.lower()

    width = len(wanted)
    return [
        (found[i][0], found[i + width - 1][1])
        for i in range(len(found) - width + 1)
        if all(same(found[i + k][2], wanted[k]) for k in range(width))
    ]


def _window(value: str, spans: list[tuple[int, int]]) -> str:
    """``value`` around its first span, WIDTH characters, with every span inside marked."""
    first = spans[0][0]
    start = max(0, first - WIDTH // 3)
    end = min(len(value), start + WIDTH)
    pieces = ["…" if start > 0 else ""]
    at = start
    for span_start, span_end in spans:
        if span_start < at or span_end > end:
            continue
        pieces += [value[at:span_start], START, value[span_start:span_end], END]
        at = span_end
    pieces += [value[at:end], "…" if end < len(value) else ""]
    return " ".join("".join(pieces).split())
