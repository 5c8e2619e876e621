"""broker.web: the search page in a real browser. Headless Chromium is driven over the
DevTools protocol (tests/browser.py): a query is typed into the form and submitted, and the
results are read back from the DOM. Also the page's escaping, paging, filters, error display,
accessibility basics, and the help page's sync with the docs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from broker.app import Broker
from broker.web import combined_query, marked_html, marked_parts, query_help_html
from tests import browser
from tests.broker.test_api import load, make, running, url_of
from tests.browser import Tab, tab
from tests.support import REPO


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A headless Chromium for the module's tests; yields its DevTools port."""
    with browser.chromium(tmp_path_factory.mktemp("chromium")) as port:
        yield port


async def params(page: Tab) -> dict[str, list[str]]:
    return parse_qs(urlsplit(await page.evaluate("location.href")).query)


async def results_of(page: Tab) -> list[dict[str, Any]]:
    return await page.evaluate(  # type: ignore[no-any-return]
        """[...document.querySelectorAll('li.result')].map(r => ({
            title: r.querySelector('h3').textContent,
            href: r.querySelector('h3 a') ? r.querySelector('h3 a').getAttribute('href') : null,
            url: r.querySelector('.url').textContent,
            gatherer: r.querySelector('.gatherer').textContent,
            snippets: [...r.querySelectorAll('dd.snippet')].map(s => s.innerHTML),
        }))"""
    )


async def submit_search(page: Tab, **fields: str) -> None:
    """Fill the form's fields (by element id), submit it, wait for the results page."""
    for field, value in fields.items():
        await page.fill(f"#{field}", value)
    before = await page.evaluate("location.href")
    await page.click("form.search button[type=submit]")
    await page.loaded(f"location.href !== {json.dumps(before)}")


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(tmp_path / "b", name="Test Broker") as started:
        await load(
            started,
            "c1",
            [
                make("http://w.example/design", "Object cache design", Author="Wessels"),
                make("http://w.example/proxy", "A caching proxy", Keywords="cache hierarchy"),
                make(
                    "http://w.example/evil",
                    "<script>window.__pwned = 1</script> cache trap",
                    Description="<img src=x onerror='window.__pwned=2'> cache",
                ),
                make("javascript:window.__pwned=3", "cache via a javascript URL"),
                make("http://w.example/garden", "Gardening"),
                *(make(f"http://w.example/page/{i}", f"paging item {i}") for i in range(12)),
            ],
        )
        yield started


async def test_a_query_typed_into_the_form_lists_the_matching_objects(
    chromium: int, broker: Broker
) -> None:
    async with tab(chromium) as page:
        await page.goto(f"{url_of(broker)}/")
        assert await page.evaluate("document.title") == "Test Broker"
        await submit_search(page, q="Title: cache")
        assert (await params(page))["q"] == ["Title: cache"]
        results = await results_of(page)
        assert sorted(r["title"] for r in results) == [
            "<script>window.__pwned = 1</script> cache trap",  # shown as text, not run
            "Object cache design",
            "cache via a javascript URL",
        ]
        by_title = {r["title"]: r for r in results}
        design = by_title["Object cache design"]
        assert design["href"] == "http://w.example/design"
        assert design["url"] == "http://w.example/design"
        assert design["gatherer"] == "g1@gatherer.example:8500"
        assert design["snippets"] == ["Object <mark>cache</mark> design"]
        evil = by_title["<script>window.__pwned = 1</script> cache trap"]
        assert evil["snippets"] == [
            "&lt;script&gt;window.__pwned = 1&lt;/script&gt; <mark>cache</mark> trap"
        ]
        # A javascript: URL is shown, never linked.
        assert by_title["cache via a javascript URL"]["href"] is None
        summary = await page.evaluate("document.querySelector('.summary').textContent")
        assert " ".join(summary.split()) == "1\u20133 of 3 for Title:cache"  # an en dash
        assert await page.evaluate("document.scripts.length") == 0
        assert await page.evaluate("typeof window.__pwned") == "undefined"
        # The form keeps what was asked.
        assert await page.evaluate("document.querySelector('#q').value") == "Title: cache"


async def test_filters_case_and_paging(chromium: int, broker: Broker) -> None:
    async with tab(chromium) as page:
        await page.goto(f"{url_of(broker)}/")
        await submit_search(page, q="cache", **{"f-author": "wessels"})
        assert [r["title"] for r in await results_of(page)] == ["Object cache design"]
        canonical = await page.evaluate("document.querySelector('.canonical').textContent")
        assert canonical == "cache AND Author:wessels"

        await page.goto(f"{url_of(broker)}/")
        await page.evaluate("document.querySelector('#case').checked = true")
        await submit_search(page, q="Title: Object")
        assert (await params(page))["case"] == ["1"]
        assert [r["title"] for r in await results_of(page)] == ["Object cache design"]
        await page.goto(f"{url_of(broker)}/")
        await page.evaluate("document.querySelector('#case').checked = true")
        await submit_search(page, q="Title: object")
        assert await results_of(page) == []

        await page.goto(f"{url_of(broker)}/")
        await submit_search(page, q="paging", n="10")
        seen = [r["url"] for r in await results_of(page)]
        assert len(seen) == 10
        assert await page.evaluate("document.querySelector('a[rel=prev]')") is None
        before = await page.evaluate("location.href")
        await page.click("a[rel=next]")
        await page.loaded(f"location.href !== {json.dumps(before)}")
        assert (await params(page))["start"] == ["10"]
        last = await results_of(page)
        assert len(last) == 2
        assert await page.evaluate("document.querySelector('a[rel=next]')") is None
        assert await page.evaluate("document.querySelector('ol.results').start") == 11
        seen += [r["url"] for r in last]
        assert sorted(seen) == sorted(f"http://w.example/page/{i}" for i in range(12))
        assert await page.evaluate("!!document.querySelector('a[rel=prev]')")


async def test_a_query_that_does_not_parse_is_shown_with_a_caret(
    chromium: int, broker: Broker
) -> None:
    async with tab(chromium) as page:
        await page.goto(f"{url_of(broker)}/")
        await submit_search(page, q="Title: (cache")
        assert await results_of(page) == []
        reason = await page.evaluate("document.querySelector('.error .reason').textContent")
        assert reason.startswith("unclosed '(': no matching ')'")
        assert "at character 8" in reason
        caret = await page.evaluate("document.querySelector('pre.caret').textContent")
        assert caret == "Title: (cache\n       ^"
        assert await page.evaluate("document.querySelector('.error').getAttribute('role')") == (
            "alert"
        )


async def test_the_pages_are_accessible_and_load_nothing_external(
    chromium: int, broker: Broker
) -> None:
    async with tab(chromium) as page:
        await page.goto(f"{url_of(broker)}/?q=cache")
        assert await page.evaluate("document.documentElement.lang") == "en"
        assert await page.evaluate("document.querySelectorAll('main').length") == 1
        unlabelled = await page.evaluate(
            """[...document.querySelectorAll('input, select')]
                .filter(e => !document.querySelector(`label[for="${e.id}"]`))
                .map(e => e.name)"""
        )
        assert unlabelled == []
        origins = await page.evaluate(
            "performance.getEntriesByType('resource').map(e => new URL(e.name).origin)"
        )
        assert set(origins) == {url_of(broker)}  # the style sheet, nothing else
        styled = await page.evaluate("getComputedStyle(document.querySelector('mark')).color")
        assert styled == "rgb(17, 17, 17)"  # the style sheet was applied
        await page.goto(f"{url_of(broker)}/help")
        assert await page.evaluate("document.querySelector('main h1').textContent") == (
            "Broker query language"
        )
        assert await page.evaluate("!!document.getElementById('errors')")
        assert await page.evaluate("document.querySelectorAll('main table').length") >= 5


async def test_the_page_answers_without_a_browser_too(broker: Broker) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url_of(broker)}/", params={"q": "a AND"}) as response:
            assert response.status == 400
            text = await response.text()
            assert "AND needs a term after it" in text
            policy = response.headers["Content-Security-Policy"]
            assert "default-src 'none'" in policy
            assert response.headers["Referrer-Policy"] == "no-referrer"
        async with session.get(f"{url_of(broker)}/", params={"n": "x", "start": "-3"}) as response:
            assert response.status == 200  # bad form numbers fall back to defaults
        async with session.get(f"{url_of(broker)}/nowhere") as response:
            assert response.status == 404
            assert response.content_type == "text/html"


def test_the_help_page_is_generated_from_the_query_docs() -> None:
    docs = (REPO / "docs" / "broker-query.md").read_text("utf-8")
    shipped = (REPO / "broker" / "templates" / "query-help.html").read_text("utf-8")
    assert shipped == query_help_html(docs), (
        "broker/templates/query-help.html is stale: "
        "run `python -m broker.web > broker/templates/query-help.html`"
    )


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("a \x02b\x03 c", [("a ", False), ("b", True), (" c", False)]),
        ("\x03stray\x02open", [("stray", False), ("open", True)]),
        ("x\x02\x02y\x03", [("x", False), ("y", True)]),
        ("", []),
    ],
)
def test_snippet_marks_are_split_and_never_trusted(
    text: str, parts: list[tuple[str, bool]]
) -> None:
    assert marked_parts(text) == parts


def test_marked_html_escapes_everything_but_its_marks() -> None:
    assert marked_html("<b>&\x02x\x03") == "&lt;b&gt;&amp;<mark>x</mark>"


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
