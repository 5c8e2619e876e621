"""Which part of the query language's help explains a query that does not parse, and that
part's opening, so that the search page can show the hint beside the error.

The section is told from where the error points (its position: the unclosed ``(``, the
opening quote, the character inside a regular expression...) and what stands there, never
from the reason's words. The help is broker/templates/query-help.html, generated from
docs/broker-query.md: each ``<h2 id=...>`` opens a section. Pure: text in, text out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from broker.errors import QuerySyntaxError
from broker.query.lexer import APPROXIMATE_SUFFIX, OPERATOR_WORDS, WORD_DELIMITERS, tokenize
from broker.query.parser import MAX_DEPTH, MAX_LENGTH, MAX_TERMS

# The sections a hint may name (their ids in the help), and a name for each.
SECTIONS: Final = (
    "words",
    "phrases-and-quoting",
    "attributes",
    "boolean-operators",
    "prefixes",
    "approximate-words",
    "regular-expressions",
    "comparisons",
    "limits",
)
WORDS, PHRASES, ATTRIBUTES, BOOLEAN, PREFIXES, APPROXIMATE, REGEX, COMPARISONS, LIMITS = SECTIONS

# What the character an error points at is about, outside quotes and regular expressions.
_BY_CHARACTER: Final = {
    '"': PHRASES,
    "/": REGEX,
    "(": BOOLEAN,
    ")": BOOLEAN,
    "<": COMPARISONS,
    ">": COMPARISONS,
    "=": COMPARISONS,
    ":": ATTRIBUTES,
    "*": PREFIXES,
    "~": APPROXIMATE,
}
_OPERATORS: Final = frozenset("<>=")
# The tokens that are terms, as the parser counts them (a comparison by its operator).
_TERMS: Final = frozenset({"word", "quoted", "regex", "op"})


def section_for(query: str, position: int) -> str:
    """The id of the help section about the error at ``position`` of ``query``."""
    if position >= MAX_LENGTH:
        return LIMITS
    inside, depth = _context(query, position)
    if inside == '"':
        return PHRASES
    if inside == "/":
        return REGEX
    char = query[position] if position < len(query) else ""
    if char == "(" and depth >= MAX_DEPTH:
        return LIMITS
    if char == "/" and query.startswith("//", position):  # an unquoted URL's "http://"
        return ATTRIBUTES
    if char in _BY_CHARACTER:
        return _BY_CHARACTER[char]
    end = position
    while end < len(query) and not query[end].isspace() and query[end] not in WORD_DELIMITERS:
        end += 1
    word = query[position:end]
    following = query[end:].lstrip()[:1]
    if word in OPERATOR_WORDS:
        return BOOLEAN
    if _terms_before(query, position) >= MAX_TERMS:
        return LIMITS
    if following == ":":
        return ATTRIBUTES
    if following in _OPERATORS or query[:position].rstrip()[-1:] in _OPERATORS:
        return COMPARISONS
    if "*" in word:
        return PREFIXES
    if APPROXIMATE_SUFFIX.search(word):
        return APPROXIMATE
    return WORDS


def _terms_before(query: str, position: int) -> int:
    try:
        return sum(token.kind in _TERMS for token in tokenize(query[:position]))
    except QuerySyntaxError:  # cut inside a token: not at a term's start
        return 0


def _context(query: str, position: int) -> tuple[str | None, int]:
    """Whether ``position`` is inside a quoted string (``"``) or a regular expression
    (``/``), read as the lexer reads them (a backslash escapes the next character; a ``/``
    opens an expression only where a term starts), and how deep in parentheses it is."""
    inside: str | None = None
    depth = 0
    term_start = True
    i = 0
    while i < min(position, len(query)):
        char = query[i]
        if inside is not None:
            if char == "\\":
                i += 1
            elif char == inside:
                inside, term_start = None, False
        elif char == '"' or (char == "/" and term_start):
            inside = char
        else:
            depth += (char == "(") - (char == ")")
            term_start = char.isspace() or char in "(:"
        i += 1
    return inside, depth


@dataclass(frozen=True, slots=True)
class HelpSection:
    """A section of the help: its id, title and opening (HTML from the generated help)."""

    id: str
    title: str
    opening: str


_HEADING = re.compile(r'<h2 id="(?P<id>[^"]+)">(?P<title>.*?)</h2>\n', re.S)
_PARAGRAPH = re.compile(r"<p>.*?</p>\n", re.S)
_EXAMPLE = re.compile(r"<(pre|table)>.*?</\1>\n", re.S)
_TAGS = re.compile(r"<[^>]+>")


def help_sections(html: str) -> dict[str, HelpSection]:
    """The sections of the generated help, by id: each with its first paragraph, and the
    example or table right after it."""
    headings = list(_HEADING.finditer(html))
    sections = {}
    for n, heading in enumerate(headings):
        end = headings[n + 1].start() if n + 1 < len(headings) else len(html)
        body = html[heading.end() : end]
        paragraph = _PARAGRAPH.search(body)
        opening = ""
        if paragraph is not None:
            example = _EXAMPLE.match(body, paragraph.end())
            opening = paragraph.group() + (example.group() if example else "")
        title = _TAGS.sub("", heading["title"])
        sections[heading["id"]] = HelpSection(heading["id"], title, opening.strip())
    return sections
