"""broker.web: the search page in a real browser. Headless Chromium is driven over the
DevTools protocol (tests/browser.py): a query is typed into the form and submitted, and the
results are read back from the DOM. Also the page's escaping, paging, filters, facets, error
display and its hint, keyboard use with and without JavaScript, accessibility basics (labels,
landmarks, contrast, a narrow screen), the screenshots in the docs, and the help page's sync
with the docs.
"""

from __future__ import annotations

import json
import struct
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
import pytest

from broker.app import Broker
from broker.web import marked_html, marked_parts, query_help_html
from tests import browser
from tests.broker.search_demo import DEMOS, SHOTS, demo_broker, screenshots
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
        assert " ".join(summary.split()) == "1\u20133 of 3 results for Title:cache"  # an en dash
        # The page's own script file, and no other: nothing from a record ran.
        scripts = await page.evaluate("[...document.scripts].map(s => s.src || s.text)")
        assert scripts == [f"{url_of(broker)}/static/harvest.js"]
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
            assert "Hint: Boolean operators" in text  # the search page, with the help
            assert 'href="help#boolean-operators"' in text
            policy = response.headers["Content-Security-Policy"]
            assert "default-src 'none'" in policy
            assert "script-src 'self';" in policy  # the page's own file, no inline script
            assert response.headers["Referrer-Policy"] == "no-referrer"
        async with session.get(f"{url_of(broker)}/", params={"n": "x", "start": "-3"}) as response:
            assert response.status == 200  # bad form numbers fall back to defaults
        async with session.get(f"{url_of(broker)}/static/harvest.js") as response:
            assert response.status == 200
            assert response.content_type == "text/javascript"
            assert 'getElementById("q")' in await response.text()
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


# -- facets, pages, hints, keyboard, layout: over tests/broker/search_demo.py's records ----


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[str]:
    """The demo broker's URL."""
    async with demo_broker(tmp_path / "demo", time.time()) as started:
        yield url_of(started)


async def facet_entries(page: Tab, name: str) -> list[dict[str, Any]]:
    return await page.evaluate(  # type: ignore[no-any-return]
        f"""[...document.querySelectorAll('#facet-{name} li a')].map(a => ({{
            label: a.querySelector('.label').textContent,
            count: Number(a.querySelector('.count').textContent.replaceAll(',', '')),
            chosen: a.getAttribute('aria-current') === 'true',
        }}))"""
    )


async def follow(page: Tab, selector: str) -> None:
    """Click the link ``selector`` and wait for the page it leads to."""
    before = await page.evaluate("location.href")
    await page.click(selector)
    await page.loaded(f"location.href !== {json.dumps(before)}")


async def enter(page: Tab) -> None:
    """Press Enter (in the search box, on a link) and wait for the page it leads to."""
    before = await page.evaluate("location.href")
    await page.press("Enter")
    await page.loaded(f"location.href !== {json.dumps(before)}")


async def total_of(page: Tab) -> int:
    text = await page.evaluate("document.querySelector('.summary .total').textContent")
    return int(text.replace(",", ""))


def label_link(name: str, value: str) -> str:
    """A selector for the link of facet ``name``'s ``value``."""
    return f"#facet-{name} a[href*={json.dumps(urlencode({name: value}))}]"


async def test_a_facet_narrows_the_results_and_the_choice_is_undone_from_its_chip(
    chromium: int, demo: str
) -> None:
    about_cache = [d for d in DEMOS if d.about_cache]
    async with tab(chromium) as page:
        await page.goto(f"{demo}/")
        await submit_search(page, q="cache")
        assert await total_of(page) == len(about_cache)
        gatherers = await facet_entries(page, "gatherer")
        assert {g["label"]: g["count"] for g in gatherers} == Counter(
            d.gatherer for d in about_cache
        )
        assert [g["count"] for g in gatherers] == sorted(
            (g["count"] for g in gatherers), reverse=True
        )
        assert await page.evaluate("document.querySelector('aside.facets').id") == "facets"

        await follow(page, label_link("gatherer", "Python docs"))
        assert (await params(page))["gatherer"] == ["Python docs"]
        python = [d for d in about_cache if d.gatherer == "Python docs"]
        assert await total_of(page) == len(python)
        assert {r["gatherer"].split("@")[0] for r in await results_of(page)} == {"Python docs"}
        chip = await page.evaluate("document.querySelector('section.chosen li').textContent")
        assert " ".join(chip.split()) == "Gatherer: Python docs \u2715"
        # The chosen value is marked; the other gatherers stay offered with their counts.
        gatherers = await facet_entries(page, "gatherer")
        assert [g["label"] for g in gatherers if g["chosen"]] == ["Python docs"]
        assert len(gatherers) == 4
        types = {t["label"]: t["count"] for t in await facet_entries(page, "type")}
        assert types == Counter(d.type for d in python)

        # A second facet narrows further; the search box keeps both choices for a new query.
        await follow(page, label_link("type", "HTML"))
        assert await total_of(page) == sum(d.type == "HTML" for d in python)
        hidden = await page.evaluate(
            "[...document.querySelectorAll('form.search input[type=hidden]')].map(i => i.name)"
        )
        assert hidden == ["gatherer", "type"]

        await follow(page, "section.chosen a[aria-label='Remove Gatherer: Python docs']")
        query = await params(page)
        assert "gatherer" not in query
        assert query["type"] == ["HTML"]
        assert await total_of(page) == sum(d.type == "HTML" for d in about_cache)

        await follow(page, label_link("date", "week"))
        assert await total_of(page) == sum(
            d.type == "HTML" and d.age_days <= 7 for d in about_cache
        )
        canonical = await page.evaluate("document.querySelector('.canonical').textContent")
        assert canonical.startswith("cache AND Type:HTML AND Update-Time>=")


async def test_results_are_counted_and_paged_by_number(chromium: int, demo: str) -> None:
    total = sum(d.about_cache for d in DEMOS)  # 40: four pages of ten
    async with tab(chromium) as page:
        await page.goto(f"{demo}/?q=cache")
        summary = await page.evaluate("document.querySelector('.summary').textContent")
        assert " ".join(summary.split()) == f"1\u201310 of {total} results for cache"
        pages = "[...document.querySelectorAll('nav.pages li')].map(l => l.textContent.trim())"
        assert await page.evaluate(pages) == ["1", "2", "3", "4", "Next"]
        current = "document.querySelector('nav.pages [aria-current=page]').textContent"
        assert await page.evaluate(current) == "1"
        await follow(page, "nav.pages a[aria-label='Page 3']")
        assert (await params(page))["start"] == ["20"]
        assert await page.evaluate("document.querySelector('ol.results').start") == 21
        assert await page.evaluate(current) == "3"
        assert await page.evaluate(pages) == ["Previous", "1", "2", "3", "4", "Next"]
        summary = await page.evaluate("document.querySelector('.summary').textContent")
        assert " ".join(summary.split()).startswith(f"21\u201330 of {total} results")
        await follow(page, "a[rel=prev]")
        assert (await params(page))["start"] == ["10"]


async def test_a_query_that_does_not_parse_is_shown_with_a_caret_and_the_help_about_it(
    chromium: int, demo: str
) -> None:
    box = "document.querySelector('#q')"
    hint = "document.querySelector('.syntax-hint h3').textContent"
    async with tab(chromium) as page:
        await page.goto(f"{demo}/")
        await submit_search(page, q="Title: (cache")
        assert await results_of(page) == []
        reason = await page.evaluate("document.querySelector('.error .reason').textContent")
        assert reason.startswith("unclosed '(': no matching ')'")
        assert "at character 8" in reason
        caret = await page.evaluate("document.querySelector('pre.caret').textContent")
        assert caret == "Title: (cache\n       ^"
        assert await page.evaluate("document.querySelector('mark.problem').textContent") == "("
        assert await page.evaluate("document.querySelector('.error').getAttribute('role')") == (
            "alert"
        )
        assert await page.evaluate(hint) == "Hint: Boolean operators"
        assert await page.evaluate(f"{box}.getAttribute('aria-invalid')") == "true"
        described = await page.evaluate(f"{box}.getAttribute('aria-describedby')")
        assert "error-reason" in described.split()

        await submit_search(page, q=" Title: /cach(e/")
        reason = await page.evaluate("document.querySelector('#error-reason').textContent")
        assert reason.startswith("bad regular expression: missing )")
        assert await page.evaluate("document.querySelector('mark.problem').textContent") == "("
        assert await page.evaluate(hint) == "Hint: Regular expressions"
        assert await page.evaluate("document.querySelector('.syntax-hint p code') !== null")
        # With the script: the text cursor waits at the problem in the box (as typed, with
        # its leading space).
        assert await page.evaluate("document.activeElement.id") == "q"
        assert await page.evaluate(f"[{box}.selectionStart, {box}.selectionEnd]") == [13, 13]
        await follow(page, ".syntax-hint a[href='help#regular-expressions']")
        assert await page.evaluate("location.hash") == "#regular-expressions"
        assert await page.evaluate("!!document.getElementById('regular-expressions')")


async def test_the_keyboard_alone_searches_and_reaches_the_results_in_order(
    chromium: int, demo: str
) -> None:
    async with tab(chromium) as page:
        await page.goto(f"{demo}/")
        assert await page.evaluate("document.activeElement.id") == "q"  # the box, at once
        await page.type_text("cache")
        await enter(page)
        assert (await params(page))["q"] == ["cache"]
        assert await page.evaluate("document.activeElement === document.body")

        # "/" goes to the box (its text selected, so typing replaces it)...
        await page.press("/")
        assert await page.evaluate("document.activeElement.id") == "q"
        selected = "[document.activeElement.selectionStart, document.activeElement.selectionEnd]"
        assert await page.evaluate(selected) == [0, 5]
        # ... and in the box it is a slash.
        await page.evaluate("document.activeElement.setSelectionRange(5, 5)")
        await page.press("/")
        assert await page.evaluate("document.querySelector('#q').value") == "cache/"

        # Tab reaches the results' links in their order, each showing where the focus is.
        titles = await page.evaluate(
            "[...document.querySelectorAll('li.result h3 a')].map(a => a.getAttribute('href'))"
        )
        reached = []
        for _ in range(30):
            await page.press("Tab")
            focused = await page.evaluate(
                """(e => ({href: e.getAttribute('href'), title: !!e.closest('h3'),
                    outline: getComputedStyle(e).outlineStyle + ' '
                        + getComputedStyle(e).outlineWidth}))(document.activeElement)"""
            )
            if focused["title"]:
                assert focused["outline"] == "solid 3px"
                reached.append(focused["href"])
        assert reached == titles[: len(reached)]
        assert len(reached) >= 5
        # Shift+Tab goes back.
        await page.press("Tab", shift=True)
        assert await page.evaluate("document.activeElement.getAttribute('href')") is not None


async def test_searching_and_following_facets_need_no_javascript(chromium: int, demo: str) -> None:
    async with tab(chromium) as page:
        await page.send("Emulation.setScriptExecutionDisabled", value=True)
        await page.goto(f"{demo}/")
        assert await page.evaluate("document.activeElement.id") == "q"  # autofocus, not a script
        await page.type_text("cache")
        await enter(page)
        assert await total_of(page) == sum(d.about_cache for d in DEMOS)
        # The shortcut's hint stays hidden: without the script "/" would not work.
        assert await page.evaluate("document.querySelector('.keys').hidden")
        # A facet is a plain link: the keyboard follows it.
        href = await page.evaluate(
            "document.querySelector('#facet-type li a').getAttribute('href')"
        )
        for _ in range(60):
            await page.press("Tab")
            if await page.evaluate("document.activeElement.getAttribute('href')") == href:
                break
        await enter(page)
        assert (await params(page))["type"] == ["HTML"]


async def test_a_narrow_screen_gets_one_column_without_scrolling_sideways(
    chromium: int, demo: str
) -> None:
    async with tab(chromium) as page:
        await page.viewport(390, 844)
        for path in ("/?q=cache", "/?q=Title%3A+%2Fcach(e%2F", "/help"):
            await page.goto(f"{demo}{path}")
            wide = await page.evaluate("document.documentElement.scrollWidth")
            assert wide <= 390, path
        await page.goto(f"{demo}/?q=cache")
        below = await page.evaluate(
            """document.querySelector('aside.facets').getBoundingClientRect().top
               >= document.querySelector('ol.results').getBoundingClientRect().bottom"""
        )
        assert below
        refine = "getComputedStyle(document.querySelector('.to-facets')).display"
        assert await page.evaluate(refine) != "none"
        await page.viewport(1280, 900)
        await page.goto(f"{demo}/?q=cache")
        assert await page.evaluate(refine) == "none"
        beside = await page.evaluate(
            """document.querySelector('aside.facets').getBoundingClientRect().left
               >= document.querySelector('ol.results').getBoundingClientRect().right"""
        )
        assert beside


# The WCAG contrast ratio of each visible text's colour against the background behind it.
CONTRASTS = """(() => {
    const rgb = c => c.match(/[\\d.]+/g).map(Number);
    const lum = ([r, g, b]) => [r, g, b].map(v => v / 255)
        .map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
        .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
    const behind = e => {
        if (!e) return [255, 255, 255];
        const [r, g, b, a = 1] = rgb(getComputedStyle(e).backgroundColor);
        if (a === 1) return [r, g, b];
        return behind(e.parentElement).map((under, i) => [r, g, b][i] * a + under * (1 - a));
    };
    const texts = [...document.querySelectorAll('body *')].filter(e =>
        [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())
        && e.getClientRects().length && !e.closest('.visually-hidden, .skip, [hidden]'));
    return texts.map(e => {
        const [a, b] = [lum(rgb(getComputedStyle(e).color)), lum(behind(e))];
        return [e.tagName + '.' + e.className, (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)];
    });
})()"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_text_contrast_is_at_least_aa_in_light_and_dark(
    chromium: int, demo: str, scheme: str
) -> None:
    async with tab(chromium) as page:
        await page.send(
            "Emulation.setEmulatedMedia",
            features=[{"name": "prefers-color-scheme", "value": scheme}],
        )
        for path in ("/?q=cache&type=HTML", "/?q=Title%3A+%2Fcach(e%2F"):
            await page.goto(f"{demo}{path}")
            ratios = await page.evaluate(CONTRASTS)
            assert len(ratios) > 20
            low = [(element, round(ratio, 2)) for element, ratio in ratios if ratio < 4.5]
            assert low == [], (scheme, path)


async def test_the_pages_have_landmarks_and_the_facets_are_labelled(
    chromium: int, demo: str
) -> None:
    async with tab(chromium) as page:
        await page.goto(f"{demo}/?q=cache&gatherer=Campus+web")
        landmarks = await page.evaluate(
            """['header', 'nav', 'main', 'form[role=search]', 'aside', 'footer']
                .map(s => document.querySelectorAll(s).length)"""
        )
        assert landmarks == [1, 2, 1, 1, 1, 1]  # the site's and the pages' navigation
        labelled = await page.evaluate(
            """[...document.querySelectorAll('aside, aside section, section.chosen, nav')]
                .map(e => e.getAttribute('aria-label')
                    || document.getElementById(e.getAttribute('aria-labelledby')).textContent)"""
        )
        assert labelled == [
            "Site",
            "Narrowed to",
            "Result pages",
            "Refine",
            "Gatherer",
            "Type",
            "Updated",
        ]


def png_size(image: bytes) -> tuple[int, int]:
    assert image.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", image[16:24])  # the IHDR chunk
    return width, height


async def test_the_docs_screenshots_are_taken_of_the_running_page(
    chromium: int, demo: str, tmp_path: Path
) -> None:
    async with tab(chromium) as page:
        written = await screenshots(page, demo, tmp_path)
    assert [path.name for path in written] == [name for name, *_ in SHOTS]
    for path, (name, _, width, height) in zip(written, SHOTS, strict=True):
        assert png_size(path.read_bytes()) == (width, height), name
    shipped = REPO / "docs" / "images"
    assert sorted(p.name for p in shipped.glob("search-*.png")) == sorted(n for n, *_ in SHOTS)
    docs = (REPO / "docs" / "broker.md").read_text("utf-8")
    assert all(f"images/{name}" in docs for name, *_ in SHOTS)
