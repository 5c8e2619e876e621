"""Snippets: the matched words of each attribute marked in a short window of its text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.match import token_spans, word_matches
from broker.query.ast import And, Not, Pattern, Phrase, Word
from broker.snippets import (
    END,
    MAX_SNIPPETS,
    START,
    WIDTH,
    _phrase_spans,
    _spans,
    _window,
    snippets,
)

OBJECT = (
    ("Type", "HTML"),
    ("Title", "The Harvest object cache"),
    ("Abstract", "word " * 100 + "A hierarchical cache of objects. " + "tail " * 100),
    ("MD5", "cache0123"),
)


def marked(text: str) -> str:
    return text.replace(START, "[").replace(END, "]")


def test_words_are_marked_in_every_attribute_that_has_them() -> None:
    got = dict(snippets(Word("cache"), OBJECT))
    assert marked(got["Title"]) == "The Harvest object [cache]"
    assert "[cache]" in marked(got["Abstract"])
    # Bookkeeping attributes are not shown.
    assert "Type" not in got
    assert "MD5" not in got


def test_a_word_without_an_attribute_marks_no_links_or_url() -> None:
    links = (*OBJECT, ("URL-References", "http://cache.example/"), ("URL", "http://x/cache"))
    assert [name for name, _ in snippets(Word("cache"), links)] == ["Title", "Abstract"]
    named = snippets(Word("cache", "URL-References"), links)
    assert [(name, marked(text)) for name, text in named] == [
        ("URL-References", "http://[cache].example/")
    ]


def test_a_swap_of_neighbours_is_marked_in_long_text() -> None:
    # The pieces that pick the tokens to measure are apart: a swap across their border (the
    # "yn" of "asyncio") still leaves one whole.
    text = "word " * 200 + "the asnycio loop and the asyncoi typo. " + "tail " * 200
    found = snippets(Word("asyncio", errors=1), (("Abstract", text),))
    assert "[asnycio] loop and the [asyncoi] typo" in marked(found[0][1])


def test_a_long_value_is_cut_to_a_window_around_the_match() -> None:
    abstract = marked(dict(snippets(Word("hierarchical"), OBJECT))["Abstract"])
    assert abstract.startswith("…")
    assert abstract.endswith("…")
    assert "[hierarchical]" in abstract
    assert len(abstract) <= WIDTH + 10


def test_phrases_prefixes_and_patterns() -> None:
    assert marked(dict(snippets(Phrase(("object", "cache")), OBJECT))["Title"]) == (
        "The Harvest [object cache]"
    )
    assert marked(dict(snippets(Word("harv", prefix=True), OBJECT))["Title"]) == (
        "The [Harvest] object cache"
    )
    assert marked(dict(snippets(Pattern("^The H", "Title"), OBJECT))["Title"]) == (
        "[The H]arvest object cache"
    )


def test_words_under_not_and_other_attributes_are_not_marked() -> None:
    got = dict(snippets(And((Word("harvest", "Title"), Not(Word("cache")))), OBJECT))
    assert marked(got["Title"]) == "The [Harvest] object cache"
    assert "Abstract" not in got


def test_at_most_a_few_snippets() -> None:
    many = tuple((f"A{n}", "cache here") for n in range(10))
    assert len(snippets(Word("cache"), many)) == MAX_SNIPPETS


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="abcAB _-.é1", max_size=60),
    word=st.text(alphabet="abcAé1", min_size=1, max_size=3),
    prefix=st.booleans(),
    case_sensitive=st.booleans(),
)
def test_words_are_found_as_the_tokens_they_match(
    text: str, word: str, prefix: bool, case_sensitive: bool
) -> None:
    # The regex that finds a word's tokens marks exactly the tokens word_matches accepts.
    term = Word(word, prefix=prefix, case_sensitive=case_sensitive)
    expected = [(s, e) for s, e, token in token_spans(text) if word_matches(term, token)]
    assert _spans([term], "Title", text) == expected


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="abcAB _-.é1", min_size=WIDTH, max_size=6 * WIDTH),
    words=st.lists(st.text(alphabet="abcAé1", min_size=1, max_size=3), min_size=1, max_size=3),
    prefix=st.booleans(),
)
def test_a_long_value_reads_no_further_than_its_window_needs(
    text: str, words: list[str], prefix: bool
) -> None:
    # Each term's matches are read only up to the end of the window from the first of all:
    # the snippet is the one every match of every term would give.
    terms = [Word(word, prefix=prefix) for word in words]
    expected = sorted(
        {(s, e) for s, e, token in token_spans(text) for t in terms if word_matches(t, token)}
    )
    got = snippets(And(tuple(terms)), (("Abstract", text),))
    assert got == ((("Abstract", _window(text, expected)),) if expected else ())


def test_an_approximate_word_marks_only_the_words_the_index_chose() -> None:
    attributes = (("Title", "a tree, a trek and a tread"),)
    term = Word("tree", errors=2)
    assert marked(snippets(term, attributes)[0][1]) == "a [tree], a [trek] and a [tread]"
    chosen = {("tree", 2): frozenset({"tree", "trek"})}
    assert marked(snippets(term, attributes, chosen)[0][1]) == "a [tree], a [trek] and a tread"
    # Another word's choice leaves this one's marks alone.
    other = {("free", 2): frozenset({"free"})}
    assert marked(snippets(term, attributes, other)[0][1]).count("[") == 3


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(alphabet="abcdAB _-.é1", max_size=80),
    word=st.text(alphabet="abcdA1", min_size=1, max_size=7),
    errors=st.integers(1, 2),
    case_sensitive=st.booleans(),
)
def test_approximate_words_are_found_as_the_tokens_they_match(
    text: str, word: str, errors: int, case_sensitive: bool
) -> None:
    # The pieces a token must hold one of (to be within the errors) pass every token that
    # word_matches accepts: the marks are those of measuring every token.
    term = Word(word, errors=errors, case_sensitive=case_sensitive)
    expected = [(s, e) for s, e, token in token_spans(text) if word_matches(term, token)]
    assert _spans([term], "Title", text) == expected


def test_approximate_word_marks_its_misspellings_in_long_text() -> None:
    text = "word " * 200 + "a hierarchical cacke, the Cache and caches. " + "tail " * 200
    found = snippets(Word("cache", errors=1), (("Abstract", text),))
    assert found
    assert "[cacke]" in marked(found[0][1])
    assert "[Cache]" in marked(found[0][1])
    assert "[caches]" in marked(found[0][1])


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(alphabet="abAB _-.é1", max_size=60),
    words=st.lists(st.text(alphabet="abA -", min_size=1, max_size=4), min_size=1, max_size=3),
    case_sensitive=st.booleans(),
)
def test_phrases_are_found_as_their_tokens_in_a_row(
    text: str, words: list[str], case_sensitive: bool
) -> None:
    # The regex of a phrase's tokens marks what comparing the value's tokens in turn marks.
    phrase = Phrase(tuple(words), case_sensitive=case_sensitive)
    expected = _phrase_spans(phrase, token_spans(text))
    assert _spans([phrase], "Title", text) == sorted(set(expected))
