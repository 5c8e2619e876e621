"""The exact matcher the search layer checks index candidates with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.match import edit_distance, matches, needs_check, tokens
from broker.query.ast import And, Compare, Node, Not, Or, Pattern, Phrase, Word
from tests.broker.test_fuzzy import distance

OBJECT = (
    ("Title", "RFC 2186: Internet Cache Protocol (ICP), version 2"),
    ("Keywords", "caching\nhierarchy\nUDP"),
    ("Abstract", "Squid caches talk ICP to their e-mail_gateway siblings."),
    ("File-Size", "31337"),
    ("Update-Time", "1764503554.123456"),
    ("URL-References", "http://varnish-cache.org/"),
)


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (Word("cache"), True),
        (Word("CACHE"), True),
        (Word("CACHE", case_sensitive=True), False),
        (Word("Cache", case_sensitive=True), True),
        (Word("cache", "Keywords"), False),
        (Word("caching", "keywords"), True),  # attribute names match in any case
        (Word("cach", prefix=True, attribute="Keywords"), True),
        (Word("protocl", errors=1), True),
        (Word("protcl", errors=1), False),
        (Word("protcl", errors=2), True),
        (Word("e-mail"), True),  # two tokens: the phrase "e mail"
        (Word("gateway"), True),  # the underscore separates words, as in the index
        (Phrase(("internet", "cache")), True),
        (Phrase(("cache", "internet")), False),
        (Phrase(("Internet", "Cache"), case_sensitive=True), True),
        (Pattern(r"^RFC [0-9]+", "Title"), True),
        (Pattern(r"^rfc [0-9]+", "Title", case_sensitive=True), False),
        (Pattern(r"^RFC", "Abstract"), False),
        (Compare("File-Size", ">", 30000), True),
        (Compare("File-Size", "<=", 30000), False),
        (Compare("Update-Time", ">=", 1764503554.123456), True),
        (Compare("Pages", ">", 1), False),  # no such attribute
        (Compare("Title", ">", 1), False),  # not a number
        (And((Word("icp"), Word("squid"))), True),
        (And((Word("icp"), Word("varnish"))), False),
        (Or((Word("varnish"), Word("squid"))), True),
        (And((Word("icp"), Not(Word("squid")))), False),
        (And((Word("icp"), Not(Word("varnish")))), True),
        # A term without an attribute searches the content, not links or bookkeeping.
        (Word("varnish"), False),
        (Word("varnish", "URL-References"), True),
        (Pattern("varnish"), False),
        (Word("31337"), False),
        (Word("31337", "File-Size"), True),
    ],
)
def test_matches(node: Node, expected: bool) -> None:
    assert matches(node, OBJECT) is expected


def test_a_server_record_matches_only_queries_that_name_server_type() -> None:
    server = (("Name", "Squid cache"), ("Server-Type", "cache"))
    assert not matches(Word("squid"), server)
    assert matches(And((Word("cache", "Server-Type"), Word("squid"))), server)
    assert not matches(And((Word("squid"), Not(Word("broker", "Server-Type")))), server)
    assert matches(Word("squid"), server[:1])  # the same without Server-Type


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (Word("cache"), False),
        (Word("cache", case_sensitive=True), True),
        (Phrase(("a", "b"), case_sensitive=True), True),
        (Pattern("x"), True),
        (And((Word("a"), Not(Pattern("b")))), True),
        (Or((Word("a"), Compare("File-Size", ">", 1))), False),
    ],
)
def test_needs_check_only_for_what_the_index_cannot_decide(node: Node, expected: bool) -> None:
    assert needs_check(node) is expected


def test_tokens_split_like_the_index() -> None:
    assert tokens("e-mail_gateway, Größe 42x") == ["e", "mail", "gateway", "Größe", "42x"]


@given(st.text("abcd", max_size=8), st.text("abcd", max_size=8), st.integers(0, 3))
def test_edit_distance_counts_transpositions_as_the_index_does(a: str, b: str, limit: int) -> None:
    assert edit_distance(a, b, limit) == min(distance(a, b), limit + 1)


def test_a_swap_of_neighbours_is_one_edit() -> None:
    assert edit_distance("asyncoi", "asyncio", 2) == 1
    assert matches(Word("asyncoi", errors=1), (("Title", "asyncio"),))
