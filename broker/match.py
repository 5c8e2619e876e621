"""Whether one object matches a query, decided exactly in Python from its attributes.

The index answers most queries alone; for what it can only narrow down (regular expressions
on whole values, case-sensitive words) the search layer checks its candidates here. Pure: the
object's attributes as text in, a decision out. Words are tokens as the index sees them: runs
of letters and digits (an underscore separates, as in the engine's tokenizer). A term without
an attribute looks where the index does (broker/query/scope.py), and a server record matches
only a query that names ``Server-Type``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rapidfuzz.distance import OSA

from broker.query import regex
from broker.query.ast import And, Compare, Node, Not, Or, Pattern, Phrase, Word
from broker.query.scope import SERVER_ATTRIBUTE, finds_servers, searched_unnamed

_TOKEN = re.compile(r"[^\W_]+")
# Regular expressions may run on whole attribute values: long values are cut here, a bound on
# the work one candidate costs.
MAX_VALUE_CHARS = 100_000

Attributes = Sequence[tuple[str, str]]


def tokens(text: str) -> list[str]:
    """The words of ``text`` as the index splits them, case kept."""
    return _TOKEN.findall(text)


def token_spans(text: str) -> list[tuple[int, int, str]]:
    """Each word of ``text`` with its start and end offsets."""
    return [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(text)]


def needs_check(node: Node) -> bool:
    """Does ``node`` hold anything the index cannot decide exactly?"""
    match node:
        case Pattern():
            return True
        case Word() | Phrase():
            return node.case_sensitive
        case And() | Or():
            return any(needs_check(item) for item in node.items)
        case Not():
            return needs_check(node.item)
    return False


def matches(node: Node, attributes: Attributes) -> bool:
    """Does an object with these attributes (SOIF name, text value) match ``node``?"""
    if not finds_servers(node) and any(name.lower() == SERVER_ATTRIBUTE for name, _ in attributes):
        return False
    return _matches(node, attributes)


def _matches(node: Node, attributes: Attributes) -> bool:
    match node:
        case And():
            return all(_matches(item, attributes) for item in node.items)
        case Or():
            return any(_matches(item, attributes) for item in node.items)
        case Not():
            return not _matches(node.item, attributes)
        case Word():
            return any(_word_in(node, value) for value in _values(attributes, node.attribute))
        case Phrase():
            return any(_phrase_in(node, value) for value in _values(attributes, node.attribute))
        case Pattern():
            compiled = regex.compiled(node.regex, node.case_sensitive)
            values = _values(attributes, node.attribute)
            return any(regex.found(compiled, value[:MAX_VALUE_CHARS]) for value in values)
        case Compare():
            return any(_compare(node, value) for value in _values(attributes, node.attribute))
    raise TypeError(f"not a query node: {node!r}")


def word_matches(word: Word, token: str) -> bool:
    """Does one token match ``word`` (exactly, as a prefix, or within its edit distance)?"""
    text, candidate = word.text, token
    if not word.case_sensitive:
        text, candidate = text.lower(), candidate.lower()
    if word.prefix:
        return candidate.startswith(text)
    if word.errors:
        return edit_distance(text, candidate, word.errors) <= word.errors
    return candidate == text


def edit_distance(a: str, b: str, limit: int) -> int:
    """Edits from ``a`` to ``b``, a transposition of neighbours counting one (as the index's,
    broker/index/fuzzy.py), or ``limit + 1`` once they must exceed ``limit``."""
    return OSA.distance(a, b, score_cutoff=limit)


def _values(attributes: Attributes, name: str | None) -> Iterable[str]:
    if name is None:
        return (value for key, value in attributes if searched_unnamed(key))
    wanted = name.lower()
    return (value for key, value in attributes if key.lower() == wanted)


def _word_in(word: Word, value: str) -> bool:
    parts = tokens(word.text)
    if len(parts) > 1 and not word.prefix and not word.errors:
        # "e-mail" is two tokens to the index: it means the phrase "e mail".
        return _phrase_in(Phrase(tuple(parts), word.attribute, word.case_sensitive), value)
    return any(word_matches(word, token) for token in tokens(value))


def _phrase_in(phrase: Phrase, value: str) -> bool:
    wanted = [t for word in phrase.words for t in tokens(word)]
    found = tokens(value)
    if not phrase.case_sensitive:
        wanted = [w.lower() for w in wanted]
        found = [f.lower() for f in found]
    width = len(wanted)
    if width == 0:
        return False
    first = wanted[0]
    return any(
        found[i : i + width] == wanted for i in range(len(found) - width + 1) if found[i] == first
    )


def _compare(node: Compare, value: str) -> bool:
    try:
        number = float(value.strip())
    except ValueError:
        return False
    match node.op:
        case "<":
            return number < node.value
        case "<=":
            return number <= node.value
        case ">":
            return number > node.value
        case ">=":
            return number >= node.value
    return number == node.value
