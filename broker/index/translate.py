"""The query tree (broker/query/ast.py) as a tantivy query.

Pure apart from building tantivy query objects and asking the searcher how many documents hold
a term (to leave out fields that cannot match). Run it where the searcher is used: in a thread.

* ``Word``: a term query on the attribute's field, or, with no attribute, a disjunction over
  the fields of content holding the term (broker/query/scope.py), each weighted
  (broker/index/ranking.py: BM25 sums over them, so a word in a short Title counts more than
  one in a long text, and a Title more than running text). A word the analyzer splits
  (``e-mail``) is a phrase of its tokens.
* ``Word`` with ``prefix`` or ``errors``: the words of the vocabulary (broker/index/fuzzy.py)
  that start with it, or the ``NEAR_LIMIT`` nearest that lie within that many edits
  (a transposition of two neighbours is one edit), as exact terms, ranked by BM25 (a near
  word's score times 1 / (1 + its edits), its rarity blended with its expansion's commonest
  word's), only in the fields that hold one of them. When a prefix has more than
  ``PREFIX_LIMIT`` words, or the vocabulary is not up to date, or cannot tell (numbers),
  tantivy's automaton queries instead: every word, constant scores.
* ``Phrase``: a phrase query (slop 0) on each field holding every token.
* ``And`` of plain words: besides, each pair of them in a row as a phrase with some slack, an
  optional clause that scores the objects where they stand near each other (ranking.py).
* Server records are left out (a clause excluding ``server``) unless the query names
  ``Server-Type`` (broker/query/scope.py).
* ``Compare``: a range query on ``update_time`` or ``file_size``; any other attribute has no
  numbers in the index, so a comparison with it matches nothing.
* ``And``/``Or``/``Not``: boolean queries; a ``Not`` is a MustNot clause beside the other
  items of its ``And``, or beside a match-all clause.
* ``Pattern`` and case-sensitive words and phrases cannot be answered by the index, which
  lower-cases: they become a superset (a pattern: the words of 3+ characters its regex must
  contain; a case-sensitive word: its lower-cased form), and, under an odd number of ``Not``,
  a subset (nothing), so that the whole query still matches a superset. ``needs_verification``
  tells the caller to check the candidates against the records.
"""

from __future__ import annotations

import importlib
import itertools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import tantivy

from broker.index.fuzzy import Expansion, Vocabulary
from broker.index.ranking import (
    PROXIMITY_DOCS,
    PROXIMITY_SLOP,
    PROXIMITY_WORDS,
    near_weight,
)
from broker.index.schema import (
    BODY_KIND,
    FILE_SIZE,
    NUMERIC,
    SERVER,
    SERVER_MARK,
    UNNAMED_TARGETS,
    Analyzer,
    Target,
    targets_of,
)
from broker.query.ast import And, Compare, Node, Not, Or, Pattern, Phrase, Word
from broker.query.scope import finds_servers

# How many exact terms a prefix may become before tantivy's automaton query is asked instead.
# Measured on 100,000 records (bench/README.md): an automaton query for a prefix is quicker
# than the disjunction of its words from about 8 words on (2.8 against 7.6 ms for 100), so
# prefixes keep BM25 only while few.
PREFIX_LIMIT = 16
# How many words an approximate word becomes at most: the nearest (as Lucene's fuzzy queries,
# whose default is 50). A word of four or five letters is within two edits of 100-180 words of
# the 100,000 records' vocabulary, nearly every object holds one, and ranking them took 10-15
# ms; p99 of ~2 with at most 32 words 3.1 ms, 48 4.4, 64 5.3 (bench/README.md).
NEAR_LIMIT = 40
MIN_PATTERN_WORD = 3  # shorter literal words of a regex filter too little to be worth asking

_U64 = 2**64 - 1
_Q = tantivy.Query
_MUST = tantivy.Occur.Must
_SHOULD = tantivy.Occur.Should
_MUST_NOT = tantivy.Occur.MustNot

# Python's idea of a token, to tell without the engine whether the analyzer splits a word: it
# splits at least where tantivy's does (tantivy's letters include some marks Python's do not).
_WORD_PARTS = re.compile(r"[^\W_]+")

# The regex parser of the re module: the only complete reader of Python's regex syntax.
_re_parser: Any = importlib.import_module("re._parser")
_LITERAL = _re_parser.LITERAL
_AT = _re_parser.AT
# Positions that a word cannot continue across.
_WORD_EDGES = {
    _re_parser.AT_BEGINNING,
    _re_parser.AT_BEGINNING_STRING,
    _re_parser.AT_BOUNDARY,
    _re_parser.AT_END,
    _re_parser.AT_END_STRING,
}


@dataclass(frozen=True, slots=True)
class Context:
    """What translation needs: the schema, the searcher it will run on, the analyzer, and the
    vocabulary if it covers that searcher's terms (else None)."""

    schema: tantivy.Schema
    searcher: tantivy.Searcher
    analyzer: Analyzer
    vocabulary: Vocabulary | None
    # Filled by translation: the words each approximate token became (from the vocabulary).
    near: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)


def needs_verification(node: Node) -> bool:
    """Whether ``translate(node)`` may match objects that ``node`` does not (then the caller
    must check each candidate against its record): patterns, case-sensitive terms, and words
    of several tokens that are approximate, or a prefix in an attribute without a field."""
    match node:
        case Pattern():
            return True
        case Word():
            if node.case_sensitive:
                return True
            if (node.errors or node.prefix) and len(_WORD_PARTS.findall(node.text)) > 1:
                return bool(node.errors) or (
                    node.attribute is not None
                    and any(t.is_json for t in targets_of(node.attribute))
                )
            return False
        case Phrase():
            return node.case_sensitive
        case Compare():
            return False
        case And() | Or():
            return any(needs_verification(item) for item in node.items)
        case Not():
            return needs_verification(node.item)


def translate(node: Node, context: Context) -> tantivy.Query:
    """The tantivy query for ``node`` (exact, or a superset where ``needs_verification``)."""
    query = _Translator(context).query(node, positive=True)
    if finds_servers(node) or not context.searcher.doc_freq(SERVER, SERVER_MARK):
        return query
    servers = _Q.term_query(context.schema, SERVER, SERVER_MARK)
    return _Q.boolean_query([(_MUST, query), (_MUST_NOT, servers)])


class _Translator:
    def __init__(self, context: Context) -> None:
        self.schema = context.schema
        self.searcher = context.searcher
        self.tokens = context.analyzer.tokens
        self.analyzer = context.analyzer
        self.vocabulary = context.vocabulary
        self.near_words = context.near

    # ``positive``: the node is under an even number of Nots, so a superset of its matches
    # keeps the whole query a superset; under an odd number a subset does.
    def query(self, node: Node, positive: bool) -> tantivy.Query:
        match node:
            case Word():
                if node.case_sensitive and not positive:
                    return _Q.empty_query()
                return self.word(node)
            case Phrase():
                if node.case_sensitive and not positive:
                    return _Q.empty_query()
                tokens = [token for word in node.words for token in self.tokens(word)]
                return self.phrase(tokens, _targets(node.attribute))
            case Pattern():
                return self.pattern(node) if positive else _Q.empty_query()
            case Compare():
                return self.compare(node)
            case And():
                return self.conjunction(node.items, positive)
            case Or():
                return _any([self.query(item, positive) for item in node.items])
            case Not():
                return self.conjunction((node,), positive)

    def conjunction(self, items: Sequence[Node], positive: bool) -> tantivy.Query:
        clauses = [
            (_MUST_NOT, self.query(item.item, not positive))
            if isinstance(item, Not)
            else (_MUST, self.query(item, positive))
            for item in items
        ]
        if all(occur is _MUST_NOT for occur, _ in clauses):
            # tantivy matches nothing with only exclusions: exclude from everything.
            clauses.insert(0, (_MUST, _Q.all_query()))
        if positive:
            clauses += [(_SHOULD, near) for near in self.proximity(items)]
        if len(clauses) == 1:
            return clauses[0][1]
        return _Q.boolean_query(clauses)

    def proximity(self, items: Sequence[Node]) -> list[tantivy.Query]:
        """For each pair of plain words in a row among ``items`` (of one attribute, or none),
        their tokens as a phrase with PROXIMITY_SLOP positions of slack in each field holding
        them all (where the rarer is rare enough): it adds to the score of the objects where
        they stand near each other."""
        words = [
            item
            for item in items
            if isinstance(item, Word) and not (item.prefix or item.errors or item.case_sensitive)
        ]
        if not 2 <= len(words) <= PROXIMITY_WORDS:
            return []
        near = []
        for first, second in itertools.pairwise(words):
            before, after = self.tokens(first.text), self.tokens(second.text)
            if first.attribute == second.attribute and before and after:
                targets = _targets(first.attribute)
                near.append(self.phrase(before + after, targets, PROXIMITY_SLOP, PROXIMITY_DOCS))
        return near

    # -- words ---------------------------------------------------------------------------------

    def word(self, node: Word) -> tantivy.Query:
        tokens = self.tokens(node.text)
        targets = _targets(node.attribute)
        if not tokens:
            return _Q.empty_query()
        if len(tokens) > 1:
            if node.errors:
                # Each token within the errors, anywhere in the attribute: a superset.
                return _Q.boolean_query(
                    [(_MUST, self.near(token, node.errors, targets)) for token in tokens]
                )
            if node.prefix:
                return self.phrase_prefix(tokens, targets)
            return self.phrase(tokens, targets)
        (token,) = tokens
        if node.errors:
            if node.prefix:
                return _any([self.automaton(t, token, node.errors, True) for t in targets])
            return self.near(token, node.errors, targets)
        if node.prefix:
            return self.prefixed(token, targets)
        return _any([self.term(t, token) for t in self.holding(token, targets)])

    def term(self, target: Target, token: str) -> tantivy.Query:
        return self.within(target, _Q.term_query(self.schema, target.field, token))

    def within(self, target: Target, query: tantivy.Query) -> tantivy.Query:
        """``query`` on ``target``'s field, restricted to its kind of running text if it has
        one (a filter that adds nothing to the score), with the target's weight."""
        if target.kind is not None:
            kind = _Q.const_score_query(_Q.term_query(self.schema, BODY_KIND, target.kind), 0.0)
            query = _Q.boolean_query([(_MUST, query), (_MUST, kind)])
        return _boosted(query, target.weight)

    def holding(self, token: str, targets: Sequence[Target]) -> list[Target]:
        """The targets whose field has ``token`` (asking the searcher costs microseconds; a
        clause for every field costs more)."""
        if len(targets) == 1:
            return list(targets)
        return [t for t in targets if self.searcher.doc_freq(t.field, token)]

    def phrase(
        self,
        tokens: list[str],
        targets: Sequence[Target],
        slop: int = 0,
        rarest: int | None = None,
    ) -> tantivy.Query:
        """``tokens`` in a row, with ``slop`` positions of slack, in each of ``targets`` that
        holds them all (and, with ``rarest``, where the rarest is in at most that many
        objects)."""
        if not tokens:
            return _Q.empty_query()
        if len(tokens) == 1:
            return _any([self.term(t, tokens[0]) for t in self.holding(tokens[0], targets)])
        holding = []
        for t in targets:
            found = [self.searcher.doc_freq(t.field, w) for w in tokens]
            if all(found) and (rarest is None or min(found) <= rarest):
                holding.append(t)
        words: list[str | tuple[int, str]] = list(tokens)
        return _any(
            [self.within(t, _Q.phrase_query(self.schema, t.field, words, slop)) for t in holding]
        )

    def phrase_prefix(self, tokens: list[str], targets: Sequence[Target]) -> tantivy.Query:
        # The last token is a prefix. A regex phrase is exact (up to 16,384 expansions) but
        # only on text fields; on a JSON path, the phrase and the prefix anywhere: a superset.
        clauses = []
        *head, last = tokens
        for t in targets:
            if not t.is_json:
                words: list[str | tuple[int, str]] = [*head, re.escape(last) + ".*"]
                clauses.append(self.within(t, _Q.regex_phrase_query(self.schema, t.field, words)))
            else:
                clauses.append(
                    _Q.boolean_query(
                        [
                            (_MUST, self.phrase(head, [t])),
                            (_MUST, self.automaton(t, last, 0, True)),
                        ]
                    )
                )
        return _any(clauses)

    def prefixed(self, token: str, targets: Sequence[Target]) -> tantivy.Query:
        return self.expanded(
            lambda vocabulary: vocabulary.prefixed(token, PREFIX_LIMIT),
            lambda t: self.automaton(t, token, 0, True),
            targets,
        )

    def near(self, token: str, errors: int, targets: Sequence[Target]) -> tantivy.Query:
        def look_up(vocabulary: Vocabulary) -> Expansion | None:
            expansion = vocabulary.near(token, errors, NEAR_LIMIT)
            if expansion is not None and expansion.words is not None:
                self.near_words[(token, errors)] = frozenset(expansion.words)
            return expansion

        return self.expanded(look_up, lambda t: self.automaton(t, token, errors, False), targets)

    def expanded(
        self,
        look_up: Callable[[Vocabulary], Expansion | None],
        automaton: Callable[[Target], tantivy.Query],
        targets: Sequence[Target],
    ) -> tantivy.Query:
        vocabulary = self.vocabulary
        if vocabulary is None or (expansion := look_up(vocabulary)) is None:
            return _any([automaton(t) for t in targets])
        # Only the fields that hold one of the words.
        targets = [t for t in targets if expansion.tags & t.bit]
        if expansion.words is None:
            return _any([automaton(t) for t in targets])
        edits = expansion.edits or (0,) * len(expansion.words)
        documents = self.searcher.num_docs
        clauses = []
        for t in targets:
            held = [
                (word, edited, self.searcher.doc_freq(t.text_field, word))
                for word, edited in zip(expansion.words, edits, strict=True)
                if vocabulary.tags(word) & t.bit
            ]
            most = max((df for _, _, df in held), default=0)
            clauses += [
                _boosted(self.term(t, word), near_weight(edited, df, most, documents))
                for word, edited, df in held
            ]
        return _any(clauses)

    def automaton(self, target: Target, token: str, errors: int, prefix: bool) -> tantivy.Query:
        query = _Q.fuzzy_term_query(
            self.schema, target.field, token, errors, transposition_cost_one=True, prefix=prefix
        )
        return self.within(target, query)

    # -- patterns and comparisons --------------------------------------------------------------

    def pattern(self, node: Pattern) -> tantivy.Query:
        targets = _targets(node.attribute)
        clauses = []
        for token, whole in _pattern_words(node.regex, self.analyzer):
            if whole:
                term = _any([self.term(t, token) for t in self.holding(token, targets)])
            else:
                term = self.prefixed(token, targets)
            clauses.append((_MUST, term))
        if not clauses:
            return _Q.all_query()
        return clauses[0][1] if len(clauses) == 1 else _Q.boolean_query(clauses)

    def compare(self, node: Compare) -> tantivy.Query:
        field = NUMERIC.get(node.attribute.lower())
        value = float(node.value)  # the parser may hand over an int
        if field is None or math.isnan(value):
            return _Q.empty_query()
        if field == FILE_SIZE:
            return self.integer_range(field, node.op, value)
        low = value if node.op in (">", ">=", "=") else None
        high = value if node.op in ("<", "<=", "=") else None
        return _Q.range_query(
            self.schema,
            field,
            tantivy.FieldType.Float,
            low,
            high,
            include_lower=node.op != ">",
            include_upper=node.op != "<",
        )

    def integer_range(self, field: str, op: str, value: float) -> tantivy.Query:
        # The field holds whole numbers from 0 to _U64: make the bounds inclusive whole ones.
        low, high = 0, _U64
        if op == "=":
            if not value.is_integer() or not low <= value <= high:
                return _Q.empty_query()
            low = high = int(value)
        elif op in (">", ">="):
            if value >= _U64:
                return _Q.empty_query()
            if value >= 0:
                low = math.floor(value) + 1 if op == ">" else math.ceil(value)
        else:
            if value < 0 or (value == 0 and op == "<"):
                return _Q.empty_query()
            if value < _U64:
                high = math.ceil(value) - 1 if op == "<" else math.floor(value)
        return _Q.range_query(self.schema, field, tantivy.FieldType.Unsigned, low, high)


def _targets(attribute: str | None) -> Sequence[Target]:
    return UNNAMED_TARGETS if attribute is None else targets_of(attribute)


def _boosted(query: tantivy.Query, factor: float) -> tantivy.Query:
    return query if factor == 1 else _Q.boost_query(query, factor)


def _any(queries: list[tantivy.Query]) -> tantivy.Query:
    if not queries:
        return _Q.empty_query()
    if len(queries) == 1:
        return queries[0]
    return _Q.boolean_query([(_SHOULD, q) for q in queries])


def _pattern_words(regex: str, analyzer: Analyzer) -> Iterator[tuple[str, bool]]:
    """The words every match of ``regex`` contains, lower-cased, with whether each is a whole
    word (True) or may be the start of a longer one (False). Only literal text outside groups,
    alternatives and repetitions counts. A word at the edge of such text is whole only where a
    ``^``, ``$`` or ``\\b`` bounds it; else it may go on into what the regex leaves open (at
    the end: a prefix) or begin in it (at the start: it tells nothing)."""
    try:
        items = list(_re_parser.parse(regex))
    except re.error:
        return
    run: list[str] = []
    bounded_before = False
    for op, arg in [*items, (None, None)]:
        if op is _LITERAL:
            run.append(chr(arg))
            continue
        bounded = op is _AT and arg in _WORD_EDGES
        if run:
            text = "".join(run)
            for word, start, end in analyzer.spans(text):
                if len(word) >= MIN_PATTERN_WORD and (start > 0 or bounded_before):
                    yield word, end < len(text) or bounded
            run = []
        bounded_before = bounded
