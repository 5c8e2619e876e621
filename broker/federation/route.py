"""Which brokers to send a query to: the HSR's ranking of the registered brokers by their
content summaries (broker/federation/summary.py), each with the reason in words.

Pure: the query's tree, the brokers' summaries and the tokenizer in, the ranking out.

**The estimate** is bGlOSS's ``Ind`` (Gravano, García-Molina and Tomasic, 1994): how many of
a broker's objects match the query, if its words occur independently of each other. A word
held by ``df`` of a broker's ``n`` objects matches a share ``df / n`` of them; ``AND``
multiplies shares, ``OR`` is one minus the product of what each leaves out, ``NOT`` is one
minus its operand's share; the estimate is ``n`` times the query's share. Chosen over CORI's
belief (Callan et al., 1995) because the query language is boolean, as GlOSS's was, so
``AND``, ``OR`` and ``NOT`` each have their meaning in the estimate; because the estimate is
a number of objects, which the reason can state ("about 12 of 525 objects"); and because it
needs nothing but what the summaries hold (CORI's needs each collection's word count, and
its scores explain nothing). Its known bias, towards large brokers, is the right one here: a
broker with more matching objects has more to answer with.

**What a summary cannot tell.** A word not listed where the list was cut is held by fewer
objects than the list's last word: it counts as half as many (a guess, named as one in the
reason); where the list was not cut, it is held by none. A word of an attribute that has no
list of its own is looked up in the list of any attribute (an upper bound). Regular
expressions, comparisons, words of one character, of digits only and stop words tell
nothing and are left out of the estimate. A broker with at least one of the query's words
(outside ``NOT``) listed and an estimate above zero has *evidence*; those come first, by
estimate, then the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from broker.federation.summary import ANY, ContentSummary, TermList, Tokenizer, counted
from broker.query.ast import And, Compare, Node, Not, Or, Pattern, Phrase, Word

MAX_REASONS = 6  # words a reason names at most

Found = Literal["listed", "guessed", "absent"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A registered broker: where it answers, its name, and its summary (None: it
    registered none)."""

    url: str
    name: str
    summary: ContentSummary | None


@dataclass(frozen=True, slots=True)
class Ranked:
    """A broker as ranked for a query: ``estimate`` objects of its ``documents`` match,
    ``evidence``: some word of the query is listed in its summary; ``reason`` in words."""

    url: str
    name: str
    estimate: float
    documents: int
    evidence: bool
    reason: str

    def __repr__(self) -> str:
        return f"Ranked({self.name!r}, {self.estimate:.1f} of {self.documents})"


@dataclass(frozen=True, slots=True)
class Leaf:
    """One word of the query (as the analyzer makes it), in ``attribute`` (None: any)."""

    word: str
    attribute: str | None = None
    prefix: bool = False

    def __str__(self) -> str:
        scope = f"{self.attribute}: " if self.attribute else ""
        return f"{scope}{self.word}{'*' if self.prefix else ''}"


@dataclass(frozen=True, slots=True)
class All:
    items: tuple[Tree, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    items: tuple[Tree, ...]


@dataclass(frozen=True, slots=True)
class Without:
    item: Tree


Tree = Leaf | All | AnyOf | Without


def routing_tree(node: Node, tokens: Tokenizer) -> Tree | None:
    """What of the query's tree says something about where it matches (None: nothing)."""
    match node:
        case Word():
            return _joined(All, _leaves(node.text, node.attribute, node.prefix, tokens))
        case Phrase():
            text = " ".join(node.words)
            return _joined(All, _leaves(text, node.attribute, False, tokens))
        case Pattern() | Compare():
            return None
        case Not():
            inner = routing_tree(node.item, tokens)
            return None if inner is None else Without(inner)
        case And():
            return _joined(All, [t for i in node.items if (t := routing_tree(i, tokens))])
        case Or():
            return _joined(AnyOf, [t for i in node.items if (t := routing_tree(i, tokens))])


def _leaves(text: str, attribute: str | None, prefix: bool, tokens: Tokenizer) -> list[Tree]:
    words = list(tokens(text))
    last = len(words) - 1
    return [Leaf(w, attribute, prefix and n == last) for n, w in enumerate(words) if counted(w)]


def _joined(kind: type[All] | type[AnyOf], items: list[Tree]) -> Tree | None:
    if not items:
        return None
    return items[0] if len(items) == 1 else kind(tuple(items))


def positive_leaves(tree: Tree, negated: bool = False) -> list[tuple[Leaf, bool]]:
    """Every leaf, in order, with whether it is under an odd number of ``NOT``."""
    match tree:
        case Leaf():
            return [(tree, negated)]
        case Without():
            return positive_leaves(tree.item, not negated)
        case All() | AnyOf():
            return [pair for item in tree.items for pair in positive_leaves(item, negated)]


@dataclass(frozen=True, slots=True)
class Lookup:
    """What a summary says of one word: the objects holding it (a guess when ``found`` is
    ``guessed``), and the list it was looked up in."""

    objects: float
    found: Found
    list: TermList


def look_up(leaf: Leaf, summary: ContentSummary) -> Lookup:
    """How many of a broker's objects hold ``leaf``, by its summary."""
    held = summary.list_of(leaf.attribute) if leaf.attribute is not None else None
    terms = held or summary.lists[0]  # the list of any attribute
    df = terms.prefixed(leaf.word) if leaf.prefix else terms.frequency(leaf.word)
    if df is not None:
        return Lookup(float(df), "listed", terms)
    if terms.cut:
        return Lookup(terms.least / 2, "guessed", terms)
    return Lookup(0.0, "absent", terms)


def share(tree: Tree, summary: ContentSummary) -> float:
    """The share of a broker's objects matching ``tree``, words taken as independent."""
    match tree:
        case Leaf():
            if not summary.documents:
                return 0.0
            return min(1.0, look_up(tree, summary).objects / summary.documents)
        case Without():
            return 1.0 - share(tree.item, summary)
        case All():
            product = 1.0
            for item in tree.items:
                product *= share(item, summary)
            return product
        case AnyOf():
            missed = 1.0
            for item in tree.items:
                missed *= 1.0 - share(item, summary)
            return 1.0 - missed


def rank(node: Node, candidates: Sequence[Candidate], tokens: Tokenizer) -> list[Ranked]:
    """The brokers, those with evidence first, then by estimate, name and URL."""
    tree = routing_tree(node, tokens)
    ranked = [_ranked(tree, c) for c in candidates]
    ranked.sort(key=lambda r: (not r.evidence, -r.estimate, r.name, r.url))
    return ranked


def _ranked(tree: Tree | None, candidate: Candidate) -> Ranked:
    summary = candidate.summary
    if summary is None:
        return Ranked(candidate.url, candidate.name, 0.0, 0, False, "it registered no summary")
    documents = summary.documents
    if tree is None:
        reason = "the query has no words to route by: any of its objects may match"
        return Ranked(candidate.url, candidate.name, float(documents), documents, False, reason)
    estimate = documents * share(tree, summary)
    evidence = False
    told: list[str] = []
    seen: set[Leaf] = set()
    for leaf, negated in positive_leaves(tree):
        found = look_up(leaf, summary)
        evidence |= found.found == "listed" and not negated
        if leaf in seen or len(told) >= MAX_REASONS:
            continue
        seen.add(leaf)
        told.append(_told(leaf, found))
    return Ranked(
        candidate.url,
        candidate.name,
        estimate,
        documents,
        evidence and estimate > 0,
        f"{_about(estimate)} of {documents} objects match: {'; '.join(told)}",
    )


def _told(leaf: Leaf, found: Lookup) -> str:
    where = ""
    if leaf.attribute is not None and found.list.attribute == ANY:
        where = f" (of any attribute: it lists no {leaf.attribute} words)"
    if found.found == "listed":
        return f"{leaf} in {found.objects:.0f}{where}"
    if found.found == "guessed":
        return f"{leaf} not among its top words{where}, so in fewer than {found.list.least}"
    return f"{leaf} in none{where}"


def _about(estimate: float) -> str:
    if estimate == 0:
        return "none"
    if estimate < 1:
        return "fewer than 1"
    return f"about {estimate:.0f}"
