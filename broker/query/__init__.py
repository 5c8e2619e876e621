"""The broker's query language: the syntax tree (``ast``), the parser and its canonical
writer. docs/broker-query.md describes the language for users."""

from __future__ import annotations

from broker.query.ast import And, Compare, Node, Not, Or, Pattern, Phrase, Word
from broker.query.parser import MAX_DEPTH, MAX_LENGTH, MAX_REGEX_LENGTH, MAX_TERMS, describe, parse

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MAX_REGEX_LENGTH",
    "MAX_TERMS",
    "And",
    "Compare",
    "Node",
    "Not",
    "Or",
    "Pattern",
    "Phrase",
    "Word",
    "describe",
    "parse",
]
