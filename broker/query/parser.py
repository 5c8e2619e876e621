"""The broker's query language: text to syntax tree (``parse``) and back (``describe``).

Grammar (docs/broker-query.md has it for users)::

    query       = disjunction
    disjunction = conjunction { "OR" conjunction }
    conjunction = unary { ["AND"] unary }          -- adjacent terms are ANDed
    unary       = { "NOT" } primary
    primary     = "(" disjunction ")"
                | ATTRIBUTE ":" ( term | comparison | "(" disjunction ")" )
                | NAME comparison                  -- File-Size > 10000
                | term
                | comparison                       -- only inside Attribute: ( ... )
    term        = WORD | WORD* | WORD~N | "quoted" | /regex/
    comparison  = ("<" | "<=" | ">" | ">=" | "=") (NUMBER | ISO-DATE)

Every query that parses has a term that must match: a NOT must be ANDed with one (the index
cannot enumerate "everything but"). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal, NoReturn, assert_never

from broker.errors import QuerySyntaxError
from broker.query.ast import And, Compare, Node, Not, Or, Pattern, Phrase, Word
from broker.query.lexer import (
    APPROXIMATE_SUFFIX,
    ATTRIBUTE_NAME,
    MAX_REGEX_LENGTH,
    OPERATOR_WORDS,
    WORD_DELIMITERS,
    Token,
    shortened,
    tokenize,
)

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "MAX_REGEX_LENGTH", "MAX_TERMS", "describe", "parse"]

# Denial-of-service guards: a query over a limit is an error, never silently truncated.
MAX_LENGTH = 1000
MAX_TERMS = 64
MAX_DEPTH = 32

_TERM_STARTS = frozenset({"word", "quoted", "regex", "attr", "(", "NOT", "op"})
_ATTRIBUTE_VALUES = frozenset({"word", "quoted", "regex", "(", "op"})

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_DATE = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"(?:[Tt](?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})"
    r"(?::(?P<second>[0-9]{2})(?:\.(?P<fraction>[0-9]{1,6}))?)?"
    r"(?P<zone>[Zz]|[+-][0-9]{2}:[0-9]{2})?)?\Z"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Operator = Literal["<", "<=", ">", ">=", "="]
_OPERATORS: dict[str, Operator] = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "=": "="}


def parse(text: str, *, case_sensitive: bool = False) -> Node:
    """The syntax tree of query ``text``; QuerySyntaxError (with the 0-based position of the
    problem) if it does not parse. ``case_sensitive`` is set on every Word, Phrase and Pattern.
    """
    if len(text) > MAX_LENGTH:
        raise QuerySyntaxError(
            text, MAX_LENGTH, f"a query may have at most {MAX_LENGTH} characters"
        )
    if not text.strip():
        raise QuerySyntaxError(text, 0, "empty query")
    return _Parser(text, case_sensitive).query()


class _Parser:
    """Recursive descent over the lazy token stream, with up to two tokens of lookahead."""

    def __init__(self, text: str, case_sensitive: bool) -> None:
        self.text = text
        self.case_sensitive = case_sensitive
        self.tokens: Iterator[Token] = tokenize(text)
        self.ahead: list[Token] = []
        self.terms = 0
        self.depth = 0
        self.first_not: int | None = None

    # -- the token stream

    def peek(self, k: int = 0) -> Token | None:
        while len(self.ahead) <= k:
            token = next(self.tokens, None)
            if token is None:
                return None
            self.ahead.append(token)
        return self.ahead[k]

    def take(self) -> Token:
        self.peek()
        return self.ahead.pop(0)

    def fail(self, pos: int, reason: str) -> NoReturn:
        raise QuerySyntaxError(self.text, pos, reason)

    # -- the grammar

    def query(self) -> Node:
        node = self.disjunction(None, None)
        extra = self.peek()
        if extra is not None:  # a disjunction stops only at ")" or the end
            self.fail(extra.pos, "unmatched ')'")
        if not _positive(node):
            # Only NOTs make a tree non-positive, so there is a first one to point at.
            self.fail(
                self.first_not or 0,
                "a query needs at least one term that must match: NOT only excludes "
                "(cache NOT web)",
            )
        return node

    def disjunction(self, scope: Token | None, after: Token | None) -> Node:
        """``after``: the token that demands a term here (None at a query's or group's start)."""
        alternatives = [self.alternative(scope, after)]
        while (token := self.peek()) is not None and token.kind == "OR":
            self.take()
            alternatives.append(self.alternative(scope, token))
        if len(alternatives) == 1:
            return alternatives[0][0]
        for node, pos in alternatives:
            if not _positive(node):
                self.fail(
                    pos,
                    "each side of OR needs a term that must match; NOT alone matches nothing "
                    "(write (cache NOT web) OR proxy)",
                )
        return _joined(Or, [node for node, _ in alternatives])

    def alternative(self, scope: Token | None, after: Token | None) -> tuple[Node, int]:
        start = self.peek()
        node = self.conjunction(scope, after)
        # conjunction() has failed unless there was a token to start with.
        return node, start.pos if start is not None else 0

    def conjunction(self, scope: Token | None, after: Token | None) -> Node:
        items = [self.unary(scope, after)]
        while (token := self.peek()) is not None:
            if token.kind == "AND":
                self.take()
                items.append(self.unary(scope, token))
            elif token.kind in _TERM_STARTS:
                items.append(self.unary(scope, None))
            else:
                break
        # No positivity check here: "(NOT a) b" is fine once flattened into its parent.
        return _joined(And, items)

    def unary(self, scope: Token | None, after: Token | None) -> Node:
        negations = 0
        while (token := self.peek()) is not None and token.kind == "NOT":
            self.take()
            negations += 1
            after = token
            if self.first_not is None:
                self.first_not = token.pos
        node = self.primary(scope, after)
        # A group may itself be a NOT: double negations cancel ("NOT (NOT a)" is "a").
        while isinstance(node, Not):
            node, negations = node.item, negations + 1
        if negations % 2 == 0:
            return node
        if not _positive(node):
            pos = after.pos if after is not None else 0
            self.fail(pos, "NOT (...) needs a term that must match inside the group")
        return Not(node)

    def primary(self, scope: Token | None, after: Token | None) -> Node:
        token = self.peek()
        if token is None or token.kind not in _TERM_STARTS:
            self.missing_term(token, after)
        self.take()
        match token.kind:
            case "(":
                return self.group(token, scope)
            case "attr":
                return self.attributed(token, scope)
            case "op":
                if scope is None:
                    self.fail(token.pos, "a comparison needs an attribute (File-Size > 10000)")
                return self.comparison(scope, token, token.pos)
            case "word":
                following = self.peek()
                if following is not None and following.kind == "op":
                    return self.named_comparison(token, scope)
                return self.word(token, scope)
            case "quoted":
                return self.quoted(token, scope)
            case _:  # "regex", the last term start
                node = Pattern(token.text, _name(scope), self.case_sensitive)
                return self.term(node, token.pos)

    def missing_term(self, token: Token | None, after: Token | None) -> NoReturn:
        """Fail where a term was expected but ``token`` (None: the end) came."""
        if after is not None and after.kind == "attr":
            self.fail(
                after.pos, f"{after.text}: needs a value after it" + _value_hint(after, token)
            )
        if after is not None:
            self.fail(after.pos, f"{after.text} needs a term after it")
        # At a query's or group's start; an empty group or query is caught before coming here.
        if token is not None and token.kind in ("AND", "OR"):
            self.fail(token.pos, f"{token.text} needs a term before it")
        self.fail(token.pos if token is not None else len(self.text), "unmatched ')'")

    def group(self, opening: Token, scope: Token | None) -> Node:
        if self.depth >= MAX_DEPTH:
            self.fail(opening.pos, f"parentheses may nest at most {MAX_DEPTH} deep")
        first = self.peek()
        if first is None:
            self.fail(opening.pos, "unclosed '(': no matching ')'")
        if first.kind == ")":
            self.fail(opening.pos, "empty parentheses")
        self.depth += 1
        node = self.disjunction(scope, None)
        self.depth -= 1
        if self.peek() is None:  # a disjunction stops only at ")" or the end
            self.fail(opening.pos, "unclosed '(': no matching ')'")
        self.take()
        return node

    def attributed(self, attribute: Token, scope: Token | None) -> Node:
        """``Name:`` then one term, a comparison or a group, all given that attribute."""
        if scope is not None:
            self.fail(attribute.pos, _nested(attribute.text, scope))
        following = self.peek()
        if following is None or following.kind not in _ATTRIBUTE_VALUES:
            self.missing_term(following, attribute)
        return self.primary(attribute, attribute)

    def named_comparison(self, name: Token, scope: Token | None) -> Node:
        """``File-Size > 10000``: the word before the operator names the attribute."""
        if scope is not None:
            self.fail(name.pos, _nested(name.text, scope))
        if not name.plain or ATTRIBUTE_NAME.match(name.text) is None:
            self.fail(
                name.pos, "a comparison needs an attribute name before it (File-Size > 10000)"
            )
        return self.comparison(name, self.take(), name.pos)

    def comparison(self, attribute: Token, operator: Token, pos: int) -> Node:
        value = self.peek()
        if value is None or value.kind != "value":
            self.fail(operator.pos, f"{operator.text} needs a number or a date after it")
        self.take()
        try:
            number = _number(value.text)
        except ValueError as exc:
            self.fail(value.pos, str(exc))
        return self.term(Compare(attribute.text, _OPERATORS[operator.text], number), pos)

    def word(self, token: Token, scope: Token | None) -> Node:
        node = Word(token.text, _name(scope), token.prefix, token.errors, self.case_sensitive)
        return self.term(node, token.pos)

    def quoted(self, token: Token, scope: Token | None) -> Node:
        """One quoted word is an exact Word (quotes escape ``AND``, ``*``, ``:``...); several
        are a Phrase."""
        words = tuple(token.text.split())
        if not words:
            self.fail(token.pos, "empty quotes")
        if len(words) == 1:
            return self.term(
                Word(words[0], _name(scope), case_sensitive=self.case_sensitive), token.pos
            )
        return self.term(Phrase(words, _name(scope), self.case_sensitive), token.pos)

    def term(self, node: Node, pos: int) -> Node:
        self.terms += 1
        if self.terms > MAX_TERMS:
            self.fail(pos, f"a query may have at most {MAX_TERMS} terms")
        return node


def _name(scope: Token | None) -> str | None:
    return scope.text if scope is not None else None


def _nested(inner: str, scope: Token) -> str:
    return f"attribute {inner} cannot be used where {scope.text}: already applies"


def _value_hint(attribute: Token, following: Token | None) -> str:
    """Why ``Name:`` may have no value: a NOT (it goes before the attribute) or a second
    attribute (``x:y:z`` is text with colons, which needs quotes)."""
    if following is not None and following.kind == "NOT":
        return f" (write NOT {attribute.text}:web)"
    if following is not None and following.kind == "attr":
        return "; quote text that contains ':'"
    return ""


def _joined(kind: type[And] | type[Or], items: list[Node]) -> Node:
    """``kind`` of ``items``, nested nodes of the same kind spliced in; one item is itself."""
    flat: list[Node] = []
    for item in items:
        if isinstance(item, kind):
            flat.extend(item.items)
        else:
            flat.append(item)
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


def _positive(node: Node) -> bool:
    """Does ``node`` require some term to match (rather than only exclude)? Every Or the parser
    builds has positive alternatives, so only Not and And need looking into."""
    if isinstance(node, Not):
        return False
    if isinstance(node, And):
        return any(_positive(item) for item in node.items)
    return True


def _number(text: str) -> float:
    """A comparison value: a decimal number, or an ISO 8601 date or time (UTC unless it has a
    zone) as epoch seconds. ValueError with the reason otherwise."""
    if _NUMBER.match(text):
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number out of range: {shortened(text)!r}")
        return value
    match = _DATE.match(text)
    if match is None:
        raise ValueError(
            f"not a number or an ISO 8601 date (2026-11-01T12:00:00Z): {shortened(text)!r}"
        )
    try:
        moment = _moment(match)
    except ValueError:
        raise ValueError(f"not a valid date or time: {shortened(text)!r}") from None
    return (moment - _EPOCH).total_seconds()


def _moment(match: re.Match[str]) -> datetime:
    def part(name: str) -> int:
        return int(match.group(name) or 0)

    fraction = match.group("fraction") or ""
    return datetime(
        part("year"),
        part("month"),
        part("day"),
        part("hour"),
        part("minute"),
        part("second"),
        int(fraction.ljust(6, "0")),
        tzinfo=_zone(match.group("zone")),
    )


def _zone(text: str | None) -> timezone:
    if text is None or text in "Zz":
        return UTC
    hours, minutes = int(text[1:3]), int(text[4:6])
    if minutes > 59:
        raise ValueError(text)
    offset = timedelta(hours=hours, minutes=minutes)  # timezone() refuses 24 hours or more
    return timezone(-offset if text[0] == "-" else offset)


# -- describe


def describe(node: Node) -> str:
    """The canonical query for ``node``: ``parse(describe(n), case_sensitive=c) == n`` for every
    tree ``n`` that ``parse(..., case_sensitive=c)`` returns. Other trees are written with the
    same meaning (a one-word Phrase as a quoted word, nested And/Or as groups) and parse to
    their normal form. ValueError for a tree no query can express (a word with spaces, a
    prefix of one character, a bad attribute name, a number that is not finite...).
    Limits and validity (length, terms, depth, regex syntax, a positive term) are parse's
    business: describe writes such trees anyway."""
    match node:
        case Word():
            return _attribute(node.attribute) + _word(node)
        case Phrase():
            return _attribute(node.attribute) + _phrase(node.words)
        case Pattern():
            return _attribute(node.attribute) + _pattern(node.regex)
        case Compare():
            return f"{_comparison_name(node.attribute)}{node.op}{_decimal(node.value)}"
        case And():
            return " AND ".join(_grouped(item) for item in _items(node))
        case Or():
            return " OR ".join(_grouped(item) for item in _items(node))
        case Not():
            return "NOT " + _grouped(node.item)
    assert_never(node)


def _items(node: And | Or) -> tuple[Node, ...]:
    if not node.items:
        raise ValueError(f"{type(node).__name__} with no items")
    return node.items


def _grouped(node: Node) -> str:
    """An operand: And and Or in parentheses wherever they nest, though precedence would spare
    some (``(a AND b) OR c``), so that a reader needs no precedence table."""
    text = describe(node)
    return f"({text})" if isinstance(node, And | Or) else text


def _attribute(name: str | None) -> str:
    return "" if name is None else f"{_checked_name(name)}:"


def _comparison_name(name: str) -> str:
    # "OR>5" would read as the operator OR; "OR:>5" names the attribute.
    return f"{name}:" if name in OPERATOR_WORDS else _checked_name(name)


def _checked_name(name: str) -> str:
    if ATTRIBUTE_NAME.match(name) is None:
        raise ValueError(f"not an attribute name: {name!r}")
    return name


def _word(word: Word) -> str:
    text = word.text
    if word.prefix:
        if word.errors or len(text) < 2 or not _bare(text):
            raise ValueError(f"no query writes this prefix: {word!r}")
        return f"{text}*"
    if word.errors:
        if word.errors not in (1, 2) or not _bare(text):
            raise ValueError(f"no query writes this approximate word: {word!r}")
        return f"{text}~{word.errors}"
    if _bare(text) and text not in OPERATOR_WORDS and APPROXIMATE_SUFFIX.search(text) is None:
        return text
    return _phrase((text,))


def _bare(text: str) -> bool:
    """Can ``text`` be written unquoted (given a suffix, or checked for one)?"""
    return (
        bool(text)
        and not text.startswith("/")
        and not any(ch.isspace() or ch in WORD_DELIMITERS or ch == "*" for ch in text)
    )


def _phrase(words: tuple[str, ...]) -> str:
    if not words or any(not w or any(ch.isspace() for ch in w) for w in words):
        raise ValueError(f"no query writes these words (empty, or with spaces): {words!r}")
    escaped = " ".join(words).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _pattern(regex: str) -> str:
    """``/regex/`` with each unescaped ``/`` written ``\\/``; backslash pairs are copied whole,
    as the lexer reads them."""
    out: list[str] = []
    i = 0
    while i < len(regex):
        if regex[i] == "\\":
            if i + 1 == len(regex):
                raise ValueError(f"no query writes a regex ending in a lone backslash: {regex!r}")
            out.append(regex[i : i + 2])
            i += 2
        else:
            out.append("\\/" if regex[i] == "/" else regex[i])
            i += 1
    if not out:
        raise ValueError("no query writes an empty regex")
    return "/" + "".join(out) + "/"


def _decimal(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"no query writes this number: {value!r}")
    # Whole numbers without ".0" (File-Size>10000), as long as float holds them exactly.
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)
