"""The query language: text to tree (``parse``), tree to canonical text (``describe``)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import QuerySyntaxError
from broker.query import (
    MAX_DEPTH,
    MAX_LENGTH,
    MAX_REGEX_LENGTH,
    MAX_TERMS,
    And,
    Compare,
    Node,
    Not,
    Or,
    Pattern,
    Phrase,
    Word,
    describe,
    parse,
)


def W(text: str, attribute: str | None = None, *, prefix: bool = False, errors: int = 0) -> Word:
    return Word(text, attribute, prefix, errors)


def P(*words: str, attribute: str | None = None) -> Phrase:
    return Phrase(words, attribute)


def A(*items: Node) -> And:
    return And(items)


def O(*items: Node) -> Or:  # noqa: E743 - reads like the operator it builds
    return Or(items)


NOV_1_2026 = 1793491200.0  # 2026-11-01T00:00:00Z

PARSES = [
    # words and implicit AND
    ("bare word", "cache", W("cache")),
    ("adjacent words are ANDed", "object cache", A(W("object"), W("cache"))),
    ("explicit AND equals implicit", "object AND cache", A(W("object"), W("cache"))),
    ("lower-case operators are words", "cats and dogs or not", A(W("cats"), W("and"), W("dogs"),
                                                                W("or"), W("not"))),
    ("hyphen inside a word", "e-mail", W("e-mail")),
    ("leading hyphen is part of the word", "-web", W("-web")),
    ("slash inside a word", "and/or", W("and/or")),
    ("unicode word", "Ünïcödé 東京", A(W("Ünïcödé"), W("東京"))),
    ("tilde not followed by digits is literal", "~hardy", W("~hardy")),
    ("tilde in the middle is literal", "a~b", W("a~b")),
    ("any whitespace separates", "a\tb\nc", A(W("a"), W("b"), W("c"))),
    ("surrounding whitespace ignored", "  cache  ", W("cache")),
    # prefix and approximate
    ("prefix", "cach*", W("cach", prefix=True)),
    ("two-character prefix", "ca*", W("ca", prefix=True)),
    ("operator word with star is a prefix", "AND*", W("AND", prefix=True)),
    ("tilde alone means one error", "colour~", W("colour", errors=1)),
    ("one error", "colour~1", W("colour", errors=1)),
    ("two errors", "colour~2", W("colour", errors=2)),
    ("zero errors is exact", "colour~0", W("colour")),
    ("only the last ~N is the suffix", "a~1~2", W("a~1", errors=2)),
    # quotes
    ("phrase", '"object cache"', P("object", "cache")),
    ("phrase words split on any whitespace", '" a \t b "', P("a", "b")),
    ("one quoted word is an exact word", '"cache"', W("cache")),
    ("quotes escape operators", '"AND"', W("AND")),
    ("quotes escape the star", '"c*"', W("c*")),
    ("quotes escape colons", '"http://x.org/"', W("http://x.org/")),
    ("escaped quote inside quotes", r'"say \"hi\""', P("say", '"hi"')),
    ("escaped backslash inside quotes", r'"a\\b"', W("a\\b")),
    ("other backslashes are kept", r'"C:\temp"', W("C:\\temp")),
    ("quoted then word without space", '"a b"c', A(P("a", "b"), W("c"))),
    # attributes
    ("attribute on a word", "Title:cache", W("cache", "Title")),
    ("space after the colon", "Title: cache", W("cache", "Title")),
    ("attribute name characters", "Embed1-Title_x.y: a", W("a", "Embed1-Title_x.y")),
    ("attribute on a prefix", "Title: cach*", W("cach", "Title", prefix=True)),
    ("attribute on an approximate word", "Title: colour~2", W("colour", "Title", errors=2)),
    ("attribute on a phrase", 'Title: "object cache"', P("object", "cache", attribute="Title")),
    ("attribute covers one term only", "Title: object cache", A(W("object", "Title"), W("cache"))),
    ("attribute named like an operator", "AND: x", W("x", "AND")),
    ("attribute on a group", "Title: (object OR web) cache",
     A(O(W("object", "Title"), W("web", "Title")), W("cache"))),
    ("attribute reaches into nested groups", "T:(a (b OR cc*))",
     A(W("a", "T"), O(W("b", "T"), W("cc", "T", prefix=True)))),
    ("attribute group with NOT", "T: (a NOT b)", A(W("a", "T"), Not(W("b", "T")))),
    # regular expressions
    ("regex", "/^RFC [0-9]+/", Pattern("^RFC [0-9]+")),
    ("regex with attribute", "Title: /^RFC [0-9]+/", Pattern("^RFC [0-9]+", "Title")),
    ("escaped slash in a regex", r"/a\/b/", Pattern("a/b")),
    ("other regex escapes are kept", r"/\d+\.\\/", Pattern(r"\d+\.\\")),
    ("regex may hold spaces and quotes", '/a "b" (c)/', Pattern('a "b" (c)')),
    ("slash starts a regex only at a term's start", "a/b/ /c/", A(W("a/b/"), Pattern("c"))),
    # comparisons
    ("comparison", "File-Size > 10000", Compare("File-Size", ">", 10000.0)),
    ("comparison without spaces", "File-Size>10000", Compare("File-Size", ">", 10000.0)),
    ("colon form", "File-Size: >10000", Compare("File-Size", ">", 10000.0)),
    ("colon form with spaces", "File-Size: >= 10", Compare("File-Size", ">=", 10.0)),
    ("less or equal", "x<=1", Compare("x", "<=", 1.0)),
    ("less", "x<1", Compare("x", "<", 1.0)),
    ("equal", "x = 1", Compare("x", "=", 1.0)),
    ("negative and fractional", "x > -2.5", Compare("x", ">", -2.5)),
    ("exponent", "x > 1e3", Compare("x", ">", 1000.0)),
    ("date is UTC midnight", "Update-Time >= 2026-11-01", Compare("Update-Time", ">=", NOV_1_2026)),
    ("time with Z", "Update-Time < 2026-11-01T12:00:00Z",
     Compare("Update-Time", "<", NOV_1_2026 + 12 * 3600)),
    ("comparison in an attribute group", "File-Size: (>10 <20)",
     A(Compare("File-Size", ">", 10.0), Compare("File-Size", "<", 20.0))),
    ("comparison among words", "cache File-Size>5 web",
     A(W("cache"), Compare("File-Size", ">", 5.0), W("web"))),
    ("comparison value ends at a parenthesis", "(x>5)", Compare("x", ">", 5.0)),
    # boolean structure
    ("OR", "a OR b", O(W("a"), W("b"))),
    ("AND binds tighter than OR", "a OR b c", O(W("a"), A(W("b"), W("c")))),
    ("explicit AND binds tighter than OR", "a AND b OR c", O(A(W("a"), W("b")), W("c"))),
    ("NOT binds tighter than AND", "a NOT b c", A(W("a"), Not(W("b")), W("c"))),
    ("AND NOT", "cache AND NOT web", A(W("cache"), Not(W("web")))),
    ("implicit AND NOT", "cache NOT web", A(W("cache"), Not(W("web")))),
    ("NOT before the positive term", "NOT web cache", A(Not(W("web")), W("cache"))),
    ("NOT of a group", "a NOT (b OR c)", A(W("a"), Not(O(W("b"), W("c"))))),
    ("NOT with an attribute", "a NOT Title: b", A(W("a"), Not(W("b", "Title")))),
    ("parentheses change precedence", "(a OR b) c", A(O(W("a"), W("b")), W("c"))),
    ("no space around parentheses", "a(b)c", A(W("a"), W("b"), W("c"))),
    ("negated alternatives inside AND", "a (b OR c NOT d)", A(W("a"), O(W("b"), A(W("c"),
                                                                              Not(W("d")))))),
    # normalization
    ("nested AND flattens", "a AND (b AND c)", A(W("a"), W("b"), W("c"))),
    ("nested OR flattens", "(a OR b) OR (c OR d)", O(W("a"), W("b"), W("c"), W("d"))),
    ("single-item group is the item", "((cache))", W("cache")),
    ("term order is kept", "b a b", A(W("b"), W("a"), W("b"))),
    ("double NOT cancels", "NOT NOT a", W("a")),
    ("NOT of a negated group cancels", "a NOT (NOT b)", A(W("a"), W("b"))),
    ("negative group flattens beside a positive term", "(NOT a) b", A(Not(W("a")), W("b"))),
    ("negative group's items flatten", "(NOT a NOT b) c", A(Not(W("a")), Not(W("b")), W("c"))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "expected"), [(q, t) for _, q, t in PARSES], ids=[name for name, _, _ in PARSES]
)
def test_parses_to_tree(query: str, expected: Node) -> None:
    assert parse(query) == expected


@pytest.mark.parametrize(
    ("query", "expected"), [(q, t) for _, q, t in PARSES], ids=[name for name, _, _ in PARSES]
)
def test_canonical_form_round_trips(query: str, expected: Node) -> None:
    assert parse(describe(expected)) == expected


FAILS = [
    # (name, query, position, reason substring)
    ("empty", "", 0, "empty query"),
    ("blank", "  \t ", 0, "empty query"),
    ("unmatched close", "a)", 1, "unmatched ')'"),
    ("close first", ") a", 0, "unmatched ')'"),
    ("unclosed open", "a (b OR c", 2, "unclosed '('"),
    ("unclosed open at end", "a (", 2, "unclosed '('"),
    ("empty parentheses", "a ()", 2, "empty parentheses"),
    ("empty attribute group", "T: ( )", 3, "empty parentheses"),
    ("AND first", "AND a", 0, "AND needs a term before it"),
    ("OR first in a group", "a (OR b)", 3, "OR needs a term before it"),
    ("AND last", "a AND", 2, "AND needs a term after it"),
    ("OR last", "a OR", 2, "OR needs a term after it"),
    ("NOT last", "a NOT", 2, "NOT needs a term after it"),
    ("NOT alone", "NOT", 0, "NOT needs a term after it"),
    ("AND AND", "a AND AND b", 2, "AND needs a term after it"),
    ("AND OR", "a AND OR b", 2, "AND needs a term after it"),
    ("OR before close", "(a OR) b", 3, "OR needs a term after it"),
    ("NOT alone in a query", "NOT cache", 0, "at least one term that must match"),
    ("only NOTs", "NOT a NOT b", 0, "at least one term that must match"),
    ("only negative groups", "(NOT a) (NOT b)", 1, "at least one term that must match"),
    ("NOT as an OR alternative", "cache OR NOT web", 9, "each side of OR"),
    ("NOT first in OR", "NOT a OR b", 0, "each side of OR"),
    ("negative group as an OR alternative", "a OR (NOT b)", 5, "each side of OR"),
    ("NOT of only negatives", "a NOT (NOT b NOT c)", 2, "NOT (...) needs a term that must match"),
    ("unterminated quote", 'a "object cache', 2, "unterminated quote"),
    ("escaped quote does not close", r'"a\"', 0, "unterminated quote"),
    ("empty quotes", 'a ""', 2, "empty quotes"),
    ("blank quotes", '"  "', 0, "empty quotes"),
    ("unterminated regex", "T: /abc", 3, "unterminated regular expression"),
    ("escaped slash does not close", r"/abc\/", 0, "unterminated regular expression"),
    ("empty regex", "//", 0, "empty regular expression"),
    ("unquoted URL", "http://example.com/", 5, 'quote a URL: "http://...'),
    ("bad regex points into it", "T: /ab(c/", 6, "bad regular expression: missing ), unterminated"),
    ("bad regex after an escaped slash", r"/\/\/[/", 5, "unterminated character set"),
    ("bad repeat", "/a{2,1}/", 3, "min repeat greater than max repeat"),
    ("huge repeat", "/a{99999999999}/", 1, "bad regular expression"),
    ("nested set", "/[[a]/", 2, "write '\\[' for a literal '['"),
    ("set difference", "/[a--b]/", 3, "'--' inside [...] is reserved"),
    ("too long regex", "/" + "a" * (MAX_REGEX_LENGTH + 1) + "/", 0, "at most 256 characters"),
    ("attribute without value", "Title:", 0, "Title: needs a value"),
    ("attribute before OR", "Title: OR x", 0, "Title: needs a value"),
    ("attribute before close", "(Title:)", 1, "Title: needs a value"),
    ("attribute before NOT", "x Title: NOT web", 2, "write NOT Title:web"),
    ("colons in text", "x:y:z", 0, "quote text that contains ':'"),
    ("space before colon", "Title :x", 6, "':' must directly follow an attribute name"),
    ("colon after quotes", '"a": b', 3, "':' must directly follow"),
    ("name starting with a digit", "2026:x", 0, "is not an attribute name"),
    ("non-ASCII name", "Tïtle:x", 0, "is not an attribute name"),
    ("prefix word as a name", "cach*:x", 0, "is not an attribute name"),
    ("nested attribute", "Title: (a Author: b)", 10, "Author cannot be used where Title:"),
    ("comparison inside an attribute", "Title: x > 5", 7, "attribute x cannot be used where"),
    ("comparison without attribute", "> 5", 0, "a comparison needs an attribute"),
    ("comparison after a phrase", '"a b" > 5', 6, "a comparison needs an attribute"),
    ("comparison on a prefix", "Size* > 5", 0, "needs an attribute name before it"),
    ("comparison on a non-name", "ünï > 5", 0, "needs an attribute name before it"),
    ("comparison without value", "x >", 2, "> needs a number or a date"),
    ("comparison before a group", "x >= (5)", 2, ">= needs a number or a date"),
    ("comparison on a word", "Type = HTML", 7, "not a number or an ISO 8601 date"),
    ("equals inside a word", "a=b", 2, "not a number or an ISO 8601 date"),
    ("bad month", "T > 2026-13-01", 4, "not a valid date"),
    ("bad zone", "T > 2026-11-01T00:00+24:00", 4, "not a valid date"),
    ("zone minutes", "T > 2026-11-01T00:00+01:60", 4, "not a valid date"),
    ("date without dashes is not a date", "T > 2026/11/01", 4, "not a number"),
    ("infinite number", "x > 1e999", 4, "number out of range"),
    ("nan", "x > nan", 4, "not a number"),
    ("one-character prefix", "a c*", 2, "at least 2 characters before '*'"),
    ("bare star", "*", 0, "at least 2 characters before '*'"),
    ("star inside a word", "ab*c", 2, "'*' may only end a word"),
    ("two stars", "ab**", 2, "'*' may only end a word"),
    ("prefix and approximate", "cach*~1", 4, "both a prefix (*) and approximate (~)"),
    ("three errors", "word~3", 4, "at most 2 errors"),
    ("many errors", "word~10", 4, "at most 2 errors"),
    ("tilde without a word", "~2", 0, "'~' needs a word before it"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "position", "reason"),
    [(q, p, r) for _, q, p, r in FAILS],
    ids=[name for name, *_ in FAILS],
)
def test_rejects_with_position_and_reason(query: str, position: int, reason: str) -> None:
    with pytest.raises(QuerySyntaxError) as caught:
        parse(query)
    assert (caught.value.position, caught.value.query) == (position, query)
    assert reason in caught.value.reason


def test_reports_the_leftmost_problem() -> None:
    # The lexer runs lazily, so a bad token later in the query does not hide an earlier error.
    with pytest.raises(QuerySyntaxError) as caught:
        parse('a AND OR "unterminated')
    assert caught.value.position == 2


# -- limits


def test_length_limit_is_inclusive() -> None:
    longest = "a" * MAX_LENGTH
    assert parse(longest) == W(longest)
    with pytest.raises(QuerySyntaxError) as caught:
        parse(longest + "a")
    assert caught.value.position == MAX_LENGTH
    assert "at most 1000 characters" in caught.value.reason


def test_term_limit_counts_every_term() -> None:
    assert parse(" ".join(["a"] * MAX_TERMS)) == And((W("a"),) * MAX_TERMS)
    # An attribute group's terms count one by one, comparisons too.
    query = "T:(" + " ".join(["a"] * MAX_TERMS) + ") x>1"
    with pytest.raises(QuerySyntaxError) as caught:
        parse(query)
    assert caught.value.position == query.index("x>1")
    assert "at most 64 terms" in caught.value.reason


def test_depth_limit() -> None:
    assert parse("(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH) == W("a")
    query = "(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(QuerySyntaxError) as caught:
        parse(query)
    assert caught.value.position == MAX_DEPTH
    assert "nest at most 32 deep" in caught.value.reason


def test_long_not_chains_do_not_recurse() -> None:
    query = "a " + "NOT " * 249 + "b"
    assert len(query) <= MAX_LENGTH
    assert parse(query) == A(W("a"), Not(W("b")))


def test_regex_length_limit_is_inclusive() -> None:
    assert parse("/" + "a" * MAX_REGEX_LENGTH + "/") == Pattern("a" * MAX_REGEX_LENGTH)


# -- case sensitivity


def test_case_sensitive_sets_every_word_phrase_and_pattern() -> None:
    tree = parse('Title: (Cache OR "Web Proxy") NOT /^RFC/ x>1 cach*', case_sensitive=True)
    assert tree == A(
        O(Word("Cache", "Title", case_sensitive=True),
          Phrase(("Web", "Proxy"), "Title", case_sensitive=True)),
        Not(Pattern("^RFC", case_sensitive=True)),
        Compare("x", ">", 1.0),
        Word("cach", prefix=True, case_sensitive=True),
    )  # fmt: skip


def test_case_insensitive_keeps_the_text_as_written() -> None:
    assert parse("CaChE") == W("CaChE")


# -- dates


DATES = [
    ("date", "2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
    ("minutes", "2026-11-01T12:30", datetime(2026, 11, 1, 12, 30, tzinfo=UTC)),
    ("seconds", "2026-11-01T12:30:15", datetime(2026, 11, 1, 12, 30, 15, tzinfo=UTC)),
    ("fraction", "2026-11-01T12:30:15.25Z", datetime(2026, 11, 1, 12, 30, 15, 250000, tzinfo=UTC)),
    ("lower-case t and z", "2026-11-01t12:00z", datetime(2026, 11, 1, 12, tzinfo=UTC)),
    ("positive offset", "2026-11-01T12:00+02:00", datetime(2026, 11, 1, 10, tzinfo=UTC)),
    ("negative offset", "2026-11-01T00:00-05:30", datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),
    ("before the epoch", "1969-12-31T23:59:59Z", datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ("leap day", "2028-02-29", datetime(2028, 2, 29, tzinfo=UTC)),
]


@pytest.mark.parametrize(("text", "moment"), [d[1:] for d in DATES], ids=[d[0] for d in DATES])
def test_dates_become_utc_epoch_seconds(text: str, moment: datetime) -> None:
    assert parse(f"Update-Time >= {text}") == Compare("Update-Time", ">=", moment.timestamp())


def test_november_first_2026() -> None:
    assert parse("Update-Time >= 2026-11-01") == Compare("Update-Time", ">=", 1793491200.0)


def test_all_digits_is_a_number_not_a_date() -> None:
    assert parse("Update-Time > 20261101") == Compare("Update-Time", ">", 20261101.0)


# -- describe


DESCRIBES = [
    ("word", W("cache"), "cache"),
    ("attribute", W("cache", "Title"), "Title:cache"),
    ("prefix", W("cach", prefix=True), "cach*"),
    ("approximate always shows N", W("colour", errors=1), "colour~1"),
    ("operator word is quoted", W("OR"), '"OR"'),
    ("word with a suffix look is quoted", W("a~2"), '"a~2"'),
    ("word with a star is quoted", W("a*b"), '"a*b"'),
    ("word with a colon is quoted", W("http://x", "URL"), 'URL:"http://x"'),
    ("word starting with a slash is quoted", W("/usr"), '"/usr"'),
    ("phrase escapes", P('"hi"', "a\\b"), r'"\"hi\" a\\b"'),
    ("one-word phrase is written as a quoted word", P("x"), '"x"'),
    ("regex escapes slashes", Pattern("a/b", "URL"), r"URL:/a\/b/"),
    ("regex keeps escape pairs", Pattern(r"\\/"), r"/\\\//"),
    ("whole number", Compare("File-Size", ">", 10000.0), "File-Size>10000"),
    ("fraction", Compare("x", "<=", 0.5), "x<=0.5"),
    ("huge number", Compare("x", "=", 1e300), "x=1e+300"),
    ("comparison on an operator-named attribute", Compare("OR", ">", 5.0), "OR:>5"),
    ("and", A(W("a"), Not(W("b"))), "a AND NOT b"),
    ("or inside and is grouped", A(O(W("a"), W("b")), W("c")), "(a OR b) AND c"),
    ("and inside or is grouped", O(A(W("a"), W("b")), W("c")), "(a AND b) OR c"),
    ("not of a group", A(W("a"), Not(O(W("b"), W("c")))), "a AND NOT (b OR c)"),
]


@pytest.mark.parametrize(
    ("tree", "text"), [d[1:] for d in DESCRIBES], ids=[d[0] for d in DESCRIBES]
)
def test_describes_canonically(tree: Node, text: str) -> None:
    assert describe(tree) == text


UNWRITABLE = [
    ("word with a space", W("a b")),
    ("empty word", W("")),
    ("one-character prefix", W("a", prefix=True)),
    ("prefix and approximate", W("ab", prefix=True, errors=1)),
    ("prefix with a colon", W("a:b", prefix=True)),
    ("three errors", W("ab", errors=3)),
    ("bad attribute name", W("a", "1x")),
    ("phrase word with a space", P("a b", "c")),
    ("empty regex", Pattern("")),
    ("regex ending in a backslash", Pattern("a\\")),
    ("infinite comparison", Compare("x", ">", float("inf"))),
    ("comparison on a bad name", Compare("a b", ">", 1.0)),
    ("empty and", And(())),
]


@pytest.mark.parametrize("tree", [u[1] for u in UNWRITABLE], ids=[u[0] for u in UNWRITABLE])
def test_describe_refuses_trees_no_query_can_write(tree: Node) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        describe(tree)


def test_describe_normalizes_trees_parse_would_not_build() -> None:
    assert parse(describe(A(W("a"), A(W("b"), W("c"))))) == A(W("a"), W("b"), W("c"))
    assert parse(describe(A(W("a"), Not(Not(W("b")))))) == A(W("a"), W("b"))


# -- properties

# No category kept here holds a character str.isspace() calls whitespace.
_NOT_SPACE = st.characters(exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc"))
_SAFE = st.characters(
    exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc"), exclude_characters='()":<>=*/'
)
any_text = st.text(_NOT_SPACE, min_size=1, max_size=8)
stems = st.text(_SAFE, min_size=2, max_size=8)
# Operator words are valid attribute names ("OR: x"), and need care when written back.
names = st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,8}", fullmatch=True) | st.sampled_from(
    ["AND", "OR", "NOT", "Title"]
)
attributes = st.none() | names
regexes = st.lists(
    st.sampled_from(["a", "RFC", " ", "[0-9]+", "^", "$", ".*", r"\d", "/", r"\\", "(x|y)", "é"]),
    min_size=1,
    max_size=5,
).map("".join)
numbers = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**12), 10**12).map(
    float
)
operators = st.sampled_from(["<", "<=", ">", ">=", "="])

terms = st.one_of(
    st.builds(Word, any_text, attributes),
    st.builds(Word, stems, attributes, prefix=st.just(True)),
    st.builds(Word, stems, attributes, errors=st.sampled_from([1, 2])),
    st.builds(Phrase, st.lists(any_text, min_size=2, max_size=3).map(tuple), attributes),
    st.builds(Pattern, regexes, attributes),
    st.builds(Compare, names, operators, numbers),
)


@st.composite
def trees(draw: st.DrawFn, leaves: int = 8) -> Node:
    """Normal trees, as parse builds them, of at most ``leaves`` terms: And in And and Or in Or
    spliced, never a Not of a Not, and a Not only as an item of an And beside a positive one.
    (A composite rather than st.recursive: its repr stays small, so hypothesis never warns
    about generating a huge one.)"""
    if leaves < 2 or draw(st.integers(0, 2)) == 0:
        return draw(terms)
    width = draw(st.integers(2, min(3, leaves)))
    children = [draw(trees(leaves // width)) for _ in range(width)]
    if draw(st.booleans()):
        return _spliced(Or, children)
    # Negate some children but never all; a child is never a Not, so no Not of a Not.
    negated = draw(st.sets(st.integers(0, width - 1), max_size=width - 1))
    return _spliced(And, [Not(c) if i in negated else c for i, c in enumerate(children)])


def _spliced(kind: type[And] | type[Or], items: list[Node]) -> Node:
    flat: list[Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, kind) else [item])
    return kind(tuple(flat))


def _case_sensitive(node: Node) -> Node:
    match node:
        case Word() | Phrase() | Pattern():
            return dataclasses.replace(node, case_sensitive=True)
        case And() | Or():
            return type(node)(tuple(_case_sensitive(item) for item in node.items))
        case Not():
            return Not(_case_sensitive(node.item))
    return node


@given(trees())
def test_random_trees_round_trip(tree: Node) -> None:
    assert parse(describe(tree)) == tree


@given(trees())
def test_random_trees_round_trip_case_sensitive(tree: Node) -> None:
    assert parse(describe(tree), case_sensitive=True) == _case_sensitive(tree)


_FRAGMENTS = [
    "a", "cache", "é", " ", "\t", "(", ")", '"', "\\", ":", "Title", "Title:", "x*", "*", "~",
    "~2", "~3", "/", "[", "[[", "--", "AND", "OR", "NOT", "and", "<", ">=", "=", "10", "-1.5",
    "2026-11-01", "T12:00:00Z", "+99:00", ".", "-", "(?(",
]  # fmt: skip
queries = st.lists(st.sampled_from(_FRAGMENTS), max_size=24).map("".join) | st.text(max_size=40)


@settings(max_examples=600)
@given(queries)
def test_any_text_parses_or_raises_a_syntax_error(text: str) -> None:
    outcome = _parse_or_error(text)
    if isinstance(outcome, QuerySyntaxError):
        assert outcome.query == text
        assert 0 <= outcome.position <= len(text)
        assert outcome.reason
    else:
        # Whatever parses has a canonical form that parses to the same tree.
        assert parse(describe(outcome)) == outcome


def _parse_or_error(text: str) -> Node | QuerySyntaxError:
    """The tree, or the syntax error; any other exception escapes and fails the test."""
    try:
        return parse(text)
    except QuerySyntaxError as exc:
        return exc


@given(queries)
def test_case_sensitivity_changes_only_the_flags(text: str) -> None:
    outcome = _parse_or_error(text)
    if isinstance(outcome, QuerySyntaxError):
        with pytest.raises(QuerySyntaxError) as caught:
            parse(text, case_sensitive=True)
        assert (caught.value.position, caught.value.reason) == (outcome.position, outcome.reason)
    else:
        assert parse(text, case_sensitive=True) == _case_sensitive(outcome)
