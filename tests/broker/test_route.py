"""broker.federation.route: brokers ranked for a query from their content summaries by bGlOSS's
estimate of the objects that match, with the reason."""

from __future__ import annotations

import pytest

from broker.federation.route import Candidate, rank
from broker.federation.summary import ANY, ContentSummary, TermList
from broker.index.schema import Analyzer
from broker.query import parse

TOKENS = Analyzer().tokens

CACHES = ContentSummary(
    100,
    100,
    (
        TermList(ANY, 100, (("cache", 80), ("squid", 40), ("proxy", 30), ("web", 20))),
        TermList("Title", 90, (("cache", 50), ("squid", 10))),
        TermList("Keywords", 60, (("caching", 30), ("proxy", 20))),
    ),
)
PHYSICS = ContentSummary(
    400,
    400,
    (
        TermList(ANY, 400, (("quantum", 300), ("particles", 200), ("cache", 4)), cut=True),
        TermList("Title", 400, (("quantum", 200),), cut=True),
    ),
)
MUSIC = ContentSummary(50, 50, (TermList(ANY, 50, (("jazz", 40), ("web", 10))),))
BROKERS = [
    Candidate("http://caches.example/", "caches", CACHES),
    Candidate("http://physics.example/", "physics", PHYSICS),
    Candidate("http://music.example/", "music", MUSIC),
    Candidate("http://old.example/", "old", None),
]


def ranking(query: str) -> list[tuple[str, float, bool]]:
    return [(r.name, round(r.estimate, 2), r.evidence) for r in rank(parse(query), BROKERS, TOKENS)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # A word's estimate is the objects holding it.
        # Physics's list was cut: a word missing from it is guessed at half its last word's.
        ("squid", [("caches", 40, True), ("physics", 2, False), ("music", 0, False)]),
        # Physics lists the words it holds most; cache is among them, though rarely.
        ("cache", [("caches", 80, True), ("physics", 4, True), ("music", 0, False)]),
        # AND: shares multiply (independence); OR: one minus what each leaves out.
        ("cache AND proxy", [("caches", 24, True), ("physics", 0.02, True), ("music", 0, False)]),
        ("jazz OR squid", [("caches", 40, True), ("music", 40, True), ("physics", 3.99, False)]),
        # NOT: the share without the word; words under NOT are no evidence.
        ("web AND NOT jazz", [("caches", 20, True), ("music", 2, True), ("physics", 1.99, False)]),
        # An attribute's own list; a prefix sums its listed words (at most every object).
        ("Title: squid", [("caches", 10, True), ("physics", 100, False), ("music", 0, False)]),
        # An attribute without a list of its own is looked up in the list of any attribute.
        ("Keywords: cach*", [("caches", 30, True), ("physics", 4, True), ("music", 0, False)]),
        # Regular expressions and comparisons tell nothing: every object may match.
        ("/x+/", [("physics", 400, False), ("caches", 100, False), ("music", 50, False)]),
    ],
    ids=["word", "rare", "and", "or", "not", "attribute", "prefix", "regex"],
)
def test_the_estimate_of_matching_objects_ranks_the_brokers(
    query: str, expected: list[tuple[str, float, bool]]
) -> None:
    # Those with evidence first; the broker without a summary last.
    assert ranking(query) == [*expected, ("old", 0.0, False)]


def test_the_reason_says_what_each_word_is_held_by() -> None:
    ranked = {r.name: r for r in rank(parse("Title: squid AND web"), BROKERS, TOKENS)}
    assert ranked["caches"].reason == (
        "about 2 of 100 objects match: Title: squid in 10; web in 20"
    )
    # A word missing from a list that was cut is rarer than its last word: half as many.
    assert ranked["physics"].reason == (
        "fewer than 1 of 400 objects match: Title: squid not among its top words, so in fewer"
        " than 200; web not among its top words, so in fewer than 4"
    )
    assert ranked["music"].reason == (
        "none of 50 objects match: Title: squid in none (of any attribute: it lists no Title"
        " words); web in 10"
    )
    assert ranked["old"].reason == "it registered no summary"
    keywords = {r.name: r for r in rank(parse("Keywords: jazz"), BROKERS, TOKENS)}
    assert keywords["music"].reason == (
        "about 40 of 50 objects match: Keywords: jazz in 40"
        " (of any attribute: it lists no Keywords words)"
    )
    words = rank(parse("/cache/"), BROKERS, TOKENS)[0]
    assert words.reason == "the query has no words to route by: any of its objects may match"


def test_stop_words_and_numbers_do_not_route() -> None:
    # "the" and "2616" are never in a summary: the query routes by "squid" alone.
    assert ranking("the AND 2616 AND squid")[0] == ("caches", 40, True)
    assert [r.evidence for r in rank(parse("the"), BROKERS, TOKENS)] == [False] * 4
