"""broker.federation.merge: other brokers' answers checked (they are not trusted), their
snippets taken apart, and their results merged: scores made comparable, URLs deduplicated."""

from __future__ import annotations

from typing import Any

import pytest

from broker.federation.merge import (
    Answer,
    MalformedAnswer,
    chosen,
    html_parts,
    marked_text,
    merged_page,
    route_answer,
    search_answer,
)
from broker.federation.route import Ranked
from broker.search import Result
from broker.web import marked_html

A = Ranked("http://a.example/", "A", 100.0, 400, True, "about 100")
B = Ranked("http://b.example/", "B", 1.0, 10, True, "about 1")
C = Ranked("http://c.example/", "C", 0.0, 50, False, "none")


def result(url: str, score: float) -> Result:
    return Result(url, url, f"title of {url}", "g@h:1", "FILE", score, (), None)


def remote(url: str = "http://x/", **overrides: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "oid": "0" * 32,
        "url": url,
        "title": "T",
        "gatherer": "g@h:1",
        "template": "FILE",
        "score": 1.5,
        "update_time": None,
        "snippets": [{"attribute": "Title", "html": "a <mark>b</mark> &lt;c&gt;"}],
    }
    item.update(overrides)
    return item


@pytest.mark.parametrize(
    ("html", "parts"),
    [
        ("a <mark>b</mark> c", [("a ", False), ("b", True), (" c", False)]),
        ("&lt;mark&gt;x&lt;/mark&gt;", [("<mark>x</mark>", False)]),
        (
            '<script>alert(1)</script> <b onclick="x">y</b>',
            [('<script>alert(1)</script> <b onclick="x">y</b>', False)],
        ),
        ("<mark>open", [("open", True)]),
    ],
    ids=["marks", "escaped-marks", "other-markup-is-text", "unclosed"],
)
def test_a_remote_snippet_is_taken_apart_into_text_and_marks(
    html: str, parts: list[tuple[str, bool]]
) -> None:
    assert html_parts(html) == parts


def test_remote_markup_is_escaped_again_when_shown() -> None:
    hostile = '<mark>ok</mark> <img src=x onerror="alert(1)"> \x02forged\x03'
    shown = marked_html(marked_text(html_parts(hostile)))
    assert shown == "<mark>ok</mark> &lt;img src=x onerror=&#34;alert(1)&#34;&gt; forged"


def test_a_search_answer_is_read_into_results() -> None:
    total, results = search_answer({"total": 7, "results": [remote()]})
    assert total == 7
    (found,) = results
    assert (found.url, found.score, found.update_time) == ("http://x/", 1.5, None)
    assert found.snippets == (("Title", "a \x02b\x03 <c>"),)


@pytest.mark.parametrize(
    "answer",
    [
        [],
        {"total": -1, "results": []},
        {"total": True, "results": []},
        {"total": 1, "results": "many"},
        {"total": 1, "results": [remote() for _ in range(1001)]},
        {"total": 1, "results": [7]},
        {"total": 1, "results": [remote(url="")]},
        {"total": 1, "results": [remote(title=None)]},
        {"total": 1, "results": [remote(title="x" * 10_001)]},
        {"total": 1, "results": [remote(score=float("nan"))]},
        {"total": 1, "results": [remote(score="1")]},
        {"total": 1, "results": [remote(update_time="yesterday")]},
        {"total": 1, "results": [remote(snippets=["x"])]},
        {"total": 1, "results": [remote(snippets=[{"attribute": "T"}])]},
        {"total": 1, "results": [remote(snippets=[{"attribute": "T", "html": ""}] * 11)]},
    ],
    ids=[
        "not-an-object",
        "negative-total",
        "boolean-total",
        "results-not-a-list",
        "too-many",
        "result-not-an-object",
        "empty-url",
        "no-title",
        "long-title",
        "nan-score",
        "text-score",
        "bad-time",
        "snippet-not-an-object",
        "snippet-without-html",
        "too-many-snippets",
    ],
)
def test_an_answer_that_is_no_search_page_is_refused(answer: Any) -> None:
    with pytest.raises(MalformedAnswer):
        search_answer(answer)


def test_a_route_is_read_and_its_urls_checked() -> None:
    broker = {
        "url": "http://a/",
        "name": "A",
        "estimate": 3,
        "documents": 9,
        "evidence": True,
        "reason": "r",
    }
    assert route_answer({"brokers": [broker]}) == [Ranked("http://a/", "A", 3.0, 9, True, "r")]
    for bad in (
        {"brokers": [{**broker, "url": "javascript:alert(1)"}]},
        {"brokers": [{**broker, "evidence": "yes"}]},
        {"brokers": [{**broker, "estimate": None}]},
        {"brokers": [{**broker, "documents": -1}]},
        {"brokers": None},
        None,
    ):
        with pytest.raises(MalformedAnswer):
            route_answer(bad)


def test_the_brokers_asked_are_those_with_evidence_else_the_first() -> None:
    assert chosen([A, B, C], 8) == [A, B]
    assert chosen([A, B, C], 1) == [A]
    assert chosen([C, C], 1) == [C]  # no summary holds a word: the first anyway
    assert chosen([], 3) == []


def test_scores_are_scaled_per_broker_and_weighed_by_the_brokers_estimate() -> None:
    answers = [
        # A's BM25 scores run 2-10, B's 100-300: without scaling B's would all come first.
        Answer(A, "answered", 0.1, 40, (result("http://a/1", 10.0), result("http://a/2", 2.0))),
        Answer(B, "answered", 0.2, 3, (result("http://b/1", 300.0), result("http://b/2", 100.0))),
        Answer(C, "late", 1.0, error="no answer within 1 s"),
    ]
    page = merged_page("q", answers, 0, 10)
    # Each broker's best scales to 1, its worst to 0; A (the better source) weighs 1.4/1.4,
    # B (estimate 1 of A's 100: log-scaled 0.15) (1 + 0.4 * 0.15) / 1.4.
    assert [(m.result.url, round(m.score, 3), m.broker.name) for m in page.results] == [
        ("http://a/1", 1.0, "A"),
        ("http://b/1", 0.757, "B"),
        ("http://a/2", 0.0, "A"),
        ("http://b/2", 0.0, "B"),
    ]
    assert page.total == 43  # the answering brokers' totals
    assert page.more  # A holds more than the 10 asked for
    assert page.answers == tuple(answers)


def test_a_url_two_brokers_returned_is_shown_once_with_both() -> None:
    answers = [
        Answer(B, "answered", 0.1, 2, (result("http://same/", 5.0), result("http://b/", 1.0))),
        Answer(A, "answered", 0.1, 2, (result("http://same/", 9.0), result("http://a/", 1.0))),
    ]
    page = merged_page("q", answers, 0, 10)
    same = [m for m in page.results if m.result.url == "http://same/"]
    assert len(same) == 1
    assert (same[0].broker, same[0].also) == (A, (B,))  # A's copy scored higher
    assert len(page.results) == 3
    assert not page.more


def test_a_page_further_on_and_no_answer_at_all() -> None:
    many = tuple(result(f"http://a/{n}", float(20 - n)) for n in range(20))
    page = merged_page("q", [Answer(A, "answered", 0.1, 20, many)], 5, 5)
    assert [m.result.url for m in page.results] == [f"http://a/{n}" for n in range(5, 10)]
    assert page.more
    nothing = merged_page("q", [Answer(A, "failed", 0.0, error="cannot connect")], 0, 10)
    assert (nothing.results, nothing.total, nothing.more) == ((), 0, False)
