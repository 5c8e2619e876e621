"""The query language's tokens (the lexer half of :mod:`broker.query.parser`).

Tokens are produced lazily, left to right, so that the parser reports the leftmost problem
first. The lexer owns everything decided inside one token: word suffixes (``*``, ``~N``),
quote and regex escapes, attribute names, and the regex check; the parser owns how tokens
combine. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, NoReturn

from broker.errors import QuerySyntaxError
from broker.query.regex import problem

MAX_REGEX_LENGTH = 256
"""The longest regular expression (between the slashes, after unescaping ``\\/``)."""

Kind = Literal["word", "quoted", "regex", "attr", "(", ")", "AND", "OR", "NOT", "op", "value"]

# Upper case only: a lower-case ``and`` is an ordinary word.
_OPERATOR_KINDS: dict[str, Kind] = {"AND": "AND", "OR": "OR", "NOT": "NOT"}
OPERATOR_WORDS = frozenset(_OPERATOR_KINDS)

ATTRIBUTE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*\Z")

# Characters that end a word. The brief's set is ``()":``; ``<``, ``>`` and ``=`` are added so
# that ``File-Size>10000`` is a comparison rather than one odd word searched silently.
WORD_DELIMITERS = frozenset('()":<>=')

# A comparison value runs to whitespace, a parenthesis or a quote: ISO times contain ``:``.
_VALUE_DELIMITERS = frozenset('()"')

# ``~`` then only ASCII digits, at the very end of a word: the approximate-match suffix.
APPROXIMATE_SUFFIX = re.compile(r"~([0-9]*)\Z")


@dataclass(frozen=True, slots=True)
class Token:
    """One token at character ``pos`` of the query.

    ``text``: a word's stem (without ``*`` or ``~N``), a quoted string's unescaped content, a
    regex's pattern, an attribute's name (without ``:``), an operator (``AND``, ``>=``) or a
    comparison's raw value. ``plain``: a word written with no suffix (so it may name an
    attribute in ``File-Size > 10``).
    """

    kind: Kind
    pos: int
    text: str = ""
    prefix: bool = False
    errors: int = 0
    plain: bool = False


def tokenize(query: str) -> Iterator[Token]:
    """The tokens of ``query``; raises QuerySyntaxError at the first malformed one."""
    i = 0
    after_operator = False
    while (i := _skip_space(query, i)) < len(query):
        ch = query[i]
        if after_operator and ch not in _VALUE_DELIMITERS:
            end = _run_end(query, i, _VALUE_DELIMITERS)
            yield Token("value", i, query[i:end])
            i, after_operator = end, False
            continue
        after_operator = ch in "<>="
        token, i = _token(query, i)
        yield token


def _token(query: str, i: int) -> tuple[Token, int]:
    """The token starting at ``i`` (not whitespace, not a comparison value) and its end."""
    ch = query[i]
    if ch in "()":
        return Token("(" if ch == "(" else ")", i, ch), i + 1
    if ch == '"':
        return _quoted(query, i)
    if ch in "<>=":
        op = query[i : i + 2] if query.startswith(("<=", ">="), i) else ch
        return Token("op", i, op), i + len(op)
    if ch == ":":
        _fail(
            query,
            i,
            "':' must directly follow an attribute name (Title:cache); quote text that "
            "contains ':'",
        )
    if ch == "/":
        return _regex(query, i)
    end = _run_end(query, i, WORD_DELIMITERS)
    run = query[i:end]
    if end < len(query) and query[end] == ":":
        return _attribute(query, i, run), end + 1
    return _word(query, i, run), end


def _skip_space(query: str, i: int) -> int:
    while i < len(query) and query[i].isspace():
        i += 1
    return i


def _run_end(query: str, i: int, delimiters: frozenset[str]) -> int:
    while i < len(query) and not query[i].isspace() and query[i] not in delimiters:
        i += 1
    return i


def _fail(query: str, pos: int, reason: str) -> NoReturn:
    raise QuerySyntaxError(query, pos, reason)


def _word(query: str, pos: int, run: str) -> Token:
    """A bare word: an operator, or a word with an optional ``~N`` or ``*`` suffix."""
    operator = _OPERATOR_KINDS.get(run)
    if operator is not None:
        return Token(operator, pos, run)
    stem, errors = run, 0
    approximate = APPROXIMATE_SUFFIX.search(run)
    if approximate is not None:
        tilde = approximate.start()
        if tilde == 0:
            _fail(query, pos, "'~' needs a word before it (cache~1)")
        digits = approximate.group(1)
        # A query is at most 1,000 characters, far below int()'s 4,300-digit limit.
        errors = int(digits) if digits else 1
        if errors > 2:
            _fail(query, pos + tilde, "at most 2 errors in an approximate word (cache~1, cache~2)")
        stem = run[:tilde]
    star = stem.find("*")
    if star == -1:
        return Token("word", pos, stem, errors=errors, plain=stem == run)
    if star < len(stem) - 1:
        _fail(query, pos + star, "'*' may only end a word (cach*); quote a word that contains '*'")
    if approximate is not None:
        _fail(query, pos + star, "a word cannot be both a prefix (*) and approximate (~)")
    if star < 2:
        _fail(query, pos, "a prefix needs at least 2 characters before '*' (ca*)")
    return Token("word", pos, stem[:-1], prefix=True)


def shortened(text: str) -> str:
    """``text`` cut for an error message: a query may be 1,000 characters long."""
    return text if len(text) <= 40 else text[:37] + "..."


def _attribute(query: str, pos: int, name: str) -> Token:
    if ATTRIBUTE_NAME.match(name) is None:
        _fail(
            query,
            pos,
            f"{shortened(name)!r} is not an attribute name (a letter, then letters, digits, '_', "
            "'.' or '-'); quote text that contains ':'",
        )
    return Token("attr", pos, name)


def _quoted(query: str, start: int) -> tuple[Token, int]:
    """A quoted string: ``\\"`` and ``\\\\`` are escapes, any other backslash is kept as it is
    (so ``"C:\\temp"`` needs no doubling)."""
    chars: list[str] = []
    i = start + 1
    while i < len(query):
        ch = query[i]
        if ch == '"':
            return Token("quoted", start, "".join(chars)), i + 1
        if ch == "\\" and query[i + 1 : i + 2] in ('"', "\\"):
            chars.append(query[i + 1])
            i += 2
        else:
            chars.append(ch)
            i += 1
    _fail(query, start, "unterminated quote: this '\"' has no closing '\"'")


def _regex(query: str, start: int) -> tuple[Token, int]:
    """``/pattern/``: ``\\/`` stands for ``/``; every other backslash pair is kept for RE2.
    ``offsets[k]`` is where the pattern's character ``k`` stands in the query, so that a bad
    regex is reported where it is written."""
    chars: list[str] = []
    offsets: list[int] = []
    i = start + 1
    while i < len(query) and query[i] != "/":
        if query.startswith("\\/", i):
            chars.append("/")
            offsets.append(i)
            i += 2
            continue
        # A backslash pair is copied whole, so that ``\\`` cannot escape the closing slash.
        width = 2 if query[i] == "\\" and i + 1 < len(query) else 1
        chars.extend(query[i : i + width])
        offsets.extend(range(i, i + width))
        i += width
    if i >= len(query):
        _fail(query, start, "unterminated regular expression: this '/' has no closing '/'")
    pattern = "".join(chars)
    if not pattern:
        _fail(query, start, 'empty regular expression (quote a URL: "http://...")')
    if len(pattern) > MAX_REGEX_LENGTH:
        _fail(query, start, f"a regular expression may have at most {MAX_REGEX_LENGTH} characters")
    offsets.append(i)  # the closing slash, for errors at the pattern's end
    _check_regex(query, pattern, offsets)
    return Token("regex", start, pattern), i + 1


def _check_regex(query: str, pattern: str, offsets: list[int]) -> None:
    """Refuse a pattern that RE2 cannot run as Python's ``re`` reads it, now, where the
    problem is written (broker/query/regex.py), rather than fail at search time."""
    found = problem(pattern)
    if found is not None:
        at, reason = found
        _fail(query, offsets[at], reason)
