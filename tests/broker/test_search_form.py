"""broker.search_form: the form as submitted, the query it asks, and the links to other
pages and to the search narrowed or widened."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest

from broker.search_form import MAX_START, Form, PageLink, combined_query, page_links

NOW = 1_795_000_000.0


def form(**params: str) -> Form:
    return Form.read(params, max_results=100)


def fields(link: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(link).query, keep_blank_values=True)


@pytest.mark.parametrize(
    ("query", "filters", "combined"),
    [
        ("cache", [], "cache"),
        ("  cache ", [("Title", " ")], "cache"),
        ("a OR b", [("Title", "web")], "(a OR b) AND Title: (web)"),
        (
            "",
            [("Title", "web"), ("Author", "wessels danzig")],
            "Title: (web) AND Author: (wessels danzig)",
        ),
    ],
)
def test_filters_are_anded_to_the_query(
    query: str, filters: list[tuple[str, str]], combined: str
) -> None:
    assert combined_query(query, filters) == combined


def test_choices_are_anded_after_the_filters_and_kept_in_links() -> None:
    asked = form(q="a OR b", title="web", date="week", gatherer=" Campus  web", type="---")
    assert asked.chosen == (("gatherer", "Campus web"), ("date", "week"))  # "---": no word
    assert asked.base_query == "(a OR b) AND Title: (web)"
    assert asked.query(NOW) == (
        f'((a OR b) AND Title: (web)) AND Gatherer-Name:"Campus web"'
        f" AND Update-Time>={int(NOW) - 7 * 86400}"
    )
    assert fields(asked.link(20)) == [
        ("q", "a OR b"),
        ("title", "web"),
        ("gatherer", "Campus web"),
        ("date", "week"),
        ("n", "10"),
        ("start", "20"),
    ]
    # Choosing another value replaces the facet's choice, from the first page.
    assert ("type", "HTML") in fields(asked.choosing("type", "HTML"))
    assert ("gatherer", "Python docs") in fields(asked.choosing("gatherer", "Python docs"))
    widened = fields(asked.choosing("gatherer", None))
    assert [name for name, _ in widened] == ["q", "title", "date", "n"]


def test_bad_numbers_fall_back_and_deep_pages_are_cut() -> None:
    assert (form(n="x", start="-3").n, form(n="x", start="-3").start) == (10, 0)
    assert form(n="1000").n == 100
    assert form(start="99999999").start == MAX_START
    assert form(federated="1", n="10", start="5000").start == 990  # federated pages end at 1000
    assert form(n="50").advanced(100)
    assert not form(q="x").advanced(100)
    assert form(author="w").advanced(100)


def numbers(links: list[PageLink | None]) -> list[object]:
    return [
        None if link is None else (link.number if link.href else f"[{link.number}]")
        for link in links
    ]


@pytest.mark.parametrize(
    ("start", "total", "shown"),
    [
        (0, 5, ["[1]"]),
        (0, 69, ["[1]", 2, 3, None, 7]),
        (30, 69, [1, 2, 3, "[4]", 5, 6, 7]),
        (60, 69, [1, None, 5, 6, "[7]"]),
        (200, 10**6, [1, None, 19, 20, "[21]", 22, 23, None, 1001]),  # no page past MAX_START
    ],
)
def test_page_links_are_the_ends_and_the_pages_near_this_one(
    start: int, total: int, shown: list[object]
) -> None:
    asked = form(q="cache", start=str(start))
    links = page_links(asked, start, total)
    assert numbers(links) == shown
    for link in links:
        if link is not None and link.href is not None:
            start_of = dict(fields(link.href)).get("start", "0")
            assert int(start_of) == (link.number - 1) * 10
