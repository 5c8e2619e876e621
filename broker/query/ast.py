"""The query language's syntax tree: plain frozen values the parser builds and the index
translates. No I/O, no engine knowledge.

Attribute names are kept as written (SOIF names match case-insensitively); ``None`` means every
attribute. Words and phrases are matched on tokens (the engine's analyzer), case-insensitively
unless ``case_sensitive``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Word:
    """One word; ``prefix``: it ends in ``*`` (``cach*``); ``errors``: approximate matching
    within that many edits (``~1``, ``~2``), 0 for exact."""

    text: str
    attribute: str | None = None
    prefix: bool = False
    errors: int = 0
    case_sensitive: bool = False


@dataclass(frozen=True, slots=True)
class Phrase:
    """Words that must appear next to each other, in order (``"object cache"``)."""

    words: tuple[str, ...]
    attribute: str | None = None
    case_sensitive: bool = False


@dataclass(frozen=True, slots=True)
class Pattern:
    """A regular expression (RE2 syntax, as far as Python's ``re`` reads it alike:
    broker/query/regex.py) searched in an attribute's whole value (``Title: /^RFC [0-9]+/``);
    ``None`` attribute: any attribute."""

    regex: str
    attribute: str | None = None
    case_sensitive: bool = False


@dataclass(frozen=True, slots=True)
class Compare:
    """A numeric comparison on an attribute (``File-Size > 10000``, ``Update-Time >=
    2026-11-01``): dates are given to the parser as ISO dates or times and become epoch
    seconds (UTC) here."""

    attribute: str
    op: Literal["<", "<=", ">", ">=", "="]
    value: float


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    item: Node


Node = Word | Phrase | Pattern | Compare | And | Or | Not
