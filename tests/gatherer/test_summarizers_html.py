"""The HTML summarizer: attributes, links, robots meta, charsets, and hostile markup."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers import html

PAGE_URL = "http://www.example.org/docs/guide/index.html"


def summarize(
    markup: str | bytes, *, url: str = PAGE_URL, charset: str | None = None, **options: object
) -> Parts:
    content = markup.encode() if isinstance(markup, str) else markup
    document = Document(url, content, "text/html", charset)
    return html.summarize(document, EssenceOptions(**options))  # type: ignore[arg-type]


def attrs(parts: Parts) -> dict[str, bytes]:
    found = dict(parts.attributes)
    assert len(found) == len(parts.attributes), "an attribute name appears twice"
    return found


REALISTIC_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>
     Harvest   User's Manual
  </title>
  <meta name="description" content="How to   configure the Harvest Gatherer.">
  <meta name="Keywords" content="harvest, gatherer , broker,,harvest">
  <meta name="author" content="C. Mic Bowman">
  <link rel="stylesheet" href="/style.css">
  <link rel="next" href="chapter2.html">
  <style>body { color: black }</style>
  <script>var tracking = "do not index me";</script>
</head>
<body>
  <h1>The Harvest <em>Gatherer</em></h1>
  <p>The Gatherer   collects indexing information.</p>
  <noscript>Enable scripts</noscript>
  <h2>Configuring</h2>
  <p>See the <a href="../broker.html">Broker</a> and the
     <a href="http://harvest.cs.colorado.edu/">home page</a>.</p>
  <template><p>template text</p></template>
</body>
</html>
"""


def test_a_realistic_page_gives_every_attribute() -> None:
    assert attrs(summarize(REALISTIC_PAGE)) == {
        "Title": b"Harvest User's Manual",
        "Author": b"C. Mic Bowman",
        "Description": b"How to configure the Harvest Gatherer.",
        "Keywords": b"harvest\ngatherer\nbroker",
        "Language": b"en",
        "Headings": b"The Harvest Gatherer\nConfiguring",
        "URL-References": b"http://www.example.org/docs/guide/chapter2.html\n"
        b"http://www.example.org/docs/broker.html\n"
        b"http://harvest.cs.colorado.edu/",
        "Abstract": b"The Harvest Gatherer The Gatherer collects indexing information. "
        b"Configuring See the Broker and the home page .",
    }


def test_full_text_is_added_on_request_and_the_abstract_is_its_prefix() -> None:
    found = attrs(summarize(REALISTIC_PAGE, full_text=True, abstract_bytes=30))
    assert found["Full-Text"] == (
        b"The Harvest Gatherer The Gatherer collects indexing information. "
        b"Configuring See the Broker and the home page ."
    )
    assert found["Abstract"] == b"The Harvest Gatherer The Gathe"
    assert found["Full-Text"].startswith(found["Abstract"])


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        pytest.param(
            '<a href="a.html">', ("http://www.example.org/docs/guide/a.html",), id="relative"
        ),
        pytest.param(
            '<a href="/top.html">', ("http://www.example.org/top.html",), id="root-relative"
        ),
        pytest.param(
            '<a href="../up.html">', ("http://www.example.org/docs/up.html",), id="dot-segments"
        ),
        pytest.param(
            '<a href="sub/./x/../y.html">',
            ("http://www.example.org/docs/guide/sub/y.html",),
            id="inner-dot-segments",
        ),
        pytest.param(
            '<a href="?page=2">',
            ("http://www.example.org/docs/guide/index.html?page=2",),
            id="query-only",
        ),
        pytest.param(
            '<a href="//mirror.example.net/x">', ("http://mirror.example.net/x",), id="network-path"
        ),
        pytest.param(
            '<a href="https://other.example/p?q=1">',
            ("https://other.example/p?q=1",),
            id="absolute-kept",
        ),
        pytest.param(
            '<a href="ftp://ftp.example.org/pub/">', ("ftp://ftp.example.org/pub/",), id="ftp-kept"
        ),
        pytest.param(
            '<a href="b.html#sec2">',
            ("http://www.example.org/docs/guide/b.html",),
            id="fragment-stripped",
        ),
        pytest.param('<a href="#top"><a href="">', (), id="fragment-only-and-empty-skipped"),
        pytest.param(
            '<a href="  c.html \n">',
            ("http://www.example.org/docs/guide/c.html",),
            id="whitespace-trimmed",
        ),
        pytest.param(
            '<a href="d\n.ht\tml">',
            ("http://www.example.org/docs/guide/d.html",),
            id="tab-newline-removed",
        ),
        pytest.param(
            '<a href="javascript:go()"><a href="JavaScript:go()"><a href="mailto:a@b.org">'
            '<a href="data:text/plain,x"><a href="tel:+1555">',
            (),
            id="non-document-schemes-skipped",
        ),
        pytest.param('<a href="http://[::1">', (), id="malformed-ipv6-skipped"),
        pytest.param(
            '<a href="x.html"><a href="y.html"><a href="x.html"><a href="./x.html">',
            (
                "http://www.example.org/docs/guide/x.html",
                "http://www.example.org/docs/guide/y.html",
            ),
            id="duplicates-removed-in-order",
        ),
        pytest.param(
            '<frameset><frame src="left.html"><frame src="right.html"></frameset>',
            (
                "http://www.example.org/docs/guide/left.html",
                "http://www.example.org/docs/guide/right.html",
            ),
            id="frames",
        ),
        pytest.param(
            '<iframe src="embed.html"></iframe><map><area href="region.html"></map>',
            (
                "http://www.example.org/docs/guide/embed.html",
                "http://www.example.org/docs/guide/region.html",
            ),
            id="iframe-and-area",
        ),
        pytest.param(
            '<link rel="stylesheet" href="s.css"><link rel="icon" href="i.ico">'
            '<link rel="alternate stylesheet" href="alt.css"><link rel="preload" href="p.js">'
            '<link rel="next" href="n.html"><link rel="Alternate" href="feed.xml">'
            '<link href="norel.html">',
            (
                "http://www.example.org/docs/guide/n.html",
                "http://www.example.org/docs/guide/feed.xml",
                "http://www.example.org/docs/guide/norel.html",
            ),
            id="link-rel-filter",
        ),
        pytest.param(
            '<meta http-equiv="refresh" content="5; url=/moved.html">',
            ("http://www.example.org/moved.html",),
            id="refresh-with-delay",
        ),
        pytest.param(
            '<meta http-equiv="Refresh" content="0;URL=\'quoted.html\'">',
            ("http://www.example.org/docs/guide/quoted.html",),
            id="refresh-quoted",
        ),
        pytest.param('<meta http-equiv="refresh" content="30">', (), id="refresh-without-url"),
        pytest.param(
            '<meta http-equiv="expires" content="0; url=x.html">', (), id="other-http-equiv"
        ),
        pytest.param(
            '<noscript><a href="nojs.html">x</a></noscript>',
            ("http://www.example.org/docs/guide/nojs.html",),
            id="noscript-links-count",
        ),
        pytest.param('<template><a href="t.html">x</a></template>', (), id="template-links-inert"),
        pytest.param('<a name="anchor">no href</a>', (), id="anchor-without-href"),
    ],
)
def test_links(markup: str, expected: tuple[str, ...]) -> None:
    parts = summarize(markup)
    assert parts.links == expected
    assert attrs(parts).get("URL-References", b"") == "\n".join(expected).encode()


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        pytest.param(
            '<base href="http://mirror.example.net/archive/"><a href="x.html">',
            ("http://mirror.example.net/archive/x.html",),
            id="absolute-base",
        ),
        pytest.param(
            '<base href="../other/"><a href="x.html">',
            ("http://www.example.org/docs/other/x.html",),
            id="relative-base-resolved-against-page",
        ),
        pytest.param(
            '<base href="http://first.example/"><base href="http://second.example/"><a href="x">',
            ("http://first.example/x",),
            id="first-base-wins",
        ),
        pytest.param(
            '<base href="#frag"><a href="x.html">',
            ("http://www.example.org/docs/guide/x.html",),
            id="fragment-base-ignored",
        ),
        pytest.param(
            '<base href="http://[::1"><a href="x.html">',
            ("http://www.example.org/docs/guide/x.html",),
            id="malformed-base-ignored",
        ),
        pytest.param(
            '<base href="http://b.example/d/"><meta http-equiv="refresh" content="0; url=r.html">',
            ("http://b.example/d/r.html",),
            id="refresh-uses-base",
        ),
    ],
)
def test_base_href(markup: str, expected: tuple[str, ...]) -> None:
    assert summarize(markup).links == expected


_SEGMENTS = ("..", ".", "a", "b.html", "?q", "x:y", "%2e%2e", "...", "..a")


@given(
    st.sampled_from(
        (
            "http://h.example/x/library/asyncio.html",
            "http://h.example/",
            "http://h.example",
            "https://h.example:8443/a/b/c/d.html",
            "http://h.example/a/b/?q=1",
            "http://h.example//odd/path.html",
        )
    ),
    st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=6),
)
def test_parent_references_resolve_as_urljoin_does(base: str, segments: list[str]) -> None:
    reference = "../" + "/".join(segments)
    parts = summarize(f'<a href="{reference}">', url=base)
    assert parts.links == (urljoin(base, reference),)


def test_links_of_a_page_with_a_non_http_url_are_resolved_with_urljoin() -> None:
    parts = summarize('<a href="b.txt"><a href="/etc/c.txt">', url="file:///srv/www/a.html")
    assert parts.links == ("file:///srv/www/b.txt", "file:///etc/c.txt")


@pytest.mark.parametrize(
    ("content", "noindex", "follows"),
    [
        pytest.param("noindex", True, True, id="noindex"),
        pytest.param("NOINDEX, follow", True, True, id="noindex-uppercase"),
        pytest.param("nofollow", False, False, id="nofollow"),
        pytest.param("noindex,nofollow", True, False, id="both"),
        pytest.param("none", True, False, id="none-means-both"),
        pytest.param("index, follow", False, True, id="explicit-allow"),
    ],
)
def test_robots_meta(content: str, noindex: bool, follows: bool) -> None:
    markup = f'<title>T</title><meta name="ROBOTS" content="{content}"><a href="x.html">x</a>'
    parts = summarize(markup)
    assert parts.noindex is noindex
    assert parts.links == (("http://www.example.org/docs/guide/x.html",) if follows else ())
    assert ("URL-References" in attrs(parts)) is follows
    assert attrs(parts)["Title"] == b"T"  # the caller, not the summarizer, drops attributes


@pytest.mark.parametrize(
    ("content", "charset", "title"),
    [
        pytest.param(
            '<meta charset="iso-8859-1"><title>Caf\xe9</title>'.encode("latin-1"),
            None,
            "Café",
            id="meta-charset",
        ),
        pytest.param(
            '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">'
            "<title>\u041f\u0440\u0438\u0432\u0435\u0442</title>".encode("cp1251"),
            None,
            "Привет",
            id="meta-http-equiv",
        ),
        pytest.param(
            '<meta charset="utf-8"><title>Caf\xe9</title>'.encode("latin-1"),
            "iso-8859-1",
            "Café",
            id="document-charset-beats-meta",
        ),
        pytest.param(
            '<meta charset="iso-8859-1"><title>Caf\xe9</title>'.encode("latin-1"),
            "no-such-charset",
            "Café",
            id="unknown-document-charset-ignored",
        ),
        pytest.param(
            '<meta charset="base64"><title>Caf\xe9</title>'.encode("latin-1"),
            None,
            "Café",
            id="non-text-codec-ignored",
        ),
        pytest.param("<title>Caf\xe9</title>".encode(), None, "Café", id="utf-8-default"),
        pytest.param(
            "<title>\u201cCaf\xe9\u201d</title>".encode("cp1252"),
            None,
            "\u201cCafé\u201d",
            id="cp1252-fallback",
        ),
        pytest.param(
            '<meta charset="utf-16"><title>Caf\xe9</title>'.encode(),
            None,
            "Café",
            id="ascii-compatible-utf-16-claim-read-as-utf-8",
        ),
        pytest.param("\ufeff<title>Caf\xe9</title>".encode(), None, "Café", id="byte-order-mark"),
    ],
)
def test_charset(content: bytes, charset: str | None, title: str) -> None:
    assert attrs(summarize(content, charset=charset))["Title"] == title.encode()


@pytest.mark.parametrize(
    ("body", "limit", "abstract"),
    [
        pytest.param("<p>ééé</p>", 5, "éé", id="cut-before-a-split-character"),
        pytest.param("<p>ééé</p>", 6, "ééé", id="exact-fit"),
        pytest.param("<p>€uro</p>", 2, "", id="nothing-fits"),
        pytest.param("<p>a\u00a0\u00a0b\n\n\tc</p>", 100, "a b c", id="whitespace-collapsed"),
        pytest.param(
            "<body><script>x()</script><style>p{}</style><noscript>n</noscript>"
            "<template>t</template><p>shown</p>",
            100,
            "shown",
            id="invisible-removed",
        ),
        pytest.param("<p>" + "word " * 2000 + "</p>", 12, "word word wo", id="long-body"),
    ],
)
def test_abstract(body: str, limit: int, abstract: str) -> None:
    assert attrs(summarize(body, abstract_bytes=limit)).get("Abstract", b"") == abstract.encode()


@pytest.mark.parametrize(
    ("markup", "title"),
    [
        pytest.param("<svg><title>icon</title></svg><title>Real</title>", "Real", id="svg-title"),
        pytest.param("<title>First</title><title>Second</title>", "First", id="first-title"),
        pytest.param("<title>  a \n  b  </title>", "a b", id="collapsed"),
        pytest.param("<title>a &amp; b</title>", "a & b", id="entities"),
    ],
)
def test_title(markup: str, title: str) -> None:
    assert attrs(summarize(markup))["Title"] == title.encode()


def test_headings_keep_document_order_and_skip_empty_ones() -> None:
    markup = "<h3>Three</h3><h1>One</h1><h2>  </h2><h6>Six<br>lines</h6>"
    assert attrs(summarize(markup))["Headings"] == b"Three\nOne\nSix lines"


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(
            b"<html><body><p>unclosed <b>bold <i>italic <a href=x.html>link", id="unclosed"
        ),
        pytest.param(b"</div></p></html><p>stray end tags</td>", id="stray-end-tags"),
        pytest.param(bytes(range(256)) * 200, id="binary-junk"),
        pytest.param(b"\x00<a href='\x00x.html'>\x00</a>", id="nul-bytes"),
        pytest.param(b"", id="empty"),
        pytest.param(b"<", id="lone-bracket"),
        pytest.param(b"<a href=" + b"x" * 100_000, id="unterminated-attribute"),
        pytest.param(b"<!--" + b"-" * 10_000, id="unterminated-comment"),
        pytest.param(
            b"<div " + b" ".join(b"a%d=x" % i for i in range(2000)) + b">", id="many-attributes"
        ),
    ],
)
def test_malformed_markup_does_not_raise(content: bytes) -> None:
    parts = summarize(content)
    assert isinstance(parts.attributes, tuple)
    assert all(isinstance(value, bytes) and value for _, value in parts.attributes)
    assert all(link.startswith("http://www.example.org/") for link in parts.links)


def test_a_hundred_thousand_nested_divs_are_summarized() -> None:
    markup = "<title>Deep</title>" + "<div>" * 100_000 + 'bottom <a href="deep.html">x</a>'
    found = attrs(summarize(markup + "</div>" * 100_000))
    assert found["Title"] == b"Deep"
    assert found["Abstract"] == b"bottom x"
    assert found["URL-References"] == b"http://www.example.org/docs/guide/deep.html"


def test_deep_nesting_of_unread_tags_keeps_headings_and_text() -> None:
    markup = "<span>" * 5000 + "<h2>Kept</h2><p>text</p>" + "</span>" * 5000
    found = attrs(summarize(markup))
    assert found["Headings"] == b"Kept"
    assert found["Abstract"] == b"Kept text"


@pytest.mark.parametrize(
    ("markup", "deep"),
    [
        pytest.param("<p>x</p>" * 50_000, False, id="many-closed"),
        pytest.param("<div>" * 2049, True, id="over-the-depth"),
        pytest.param("<div>" * 2048, False, id="at-the-depth"),
        # Opened in one chunk, the bound carries into the next.
        pytest.param("<div>" * 1500 + "x" * 5000 + "<div>" * 600, True, id="across-chunks"),
    ],
)
def test_the_nesting_bound_is_never_below_the_depth(markup: str, deep: bool) -> None:
    assert html._may_nest_deep(markup) is deep


def test_a_page_the_quick_bound_doubts_is_parsed_whole_when_it_nests_shallow() -> None:
    markup = "<div>" * 1500 + "</div>" * 1500 + "<div>" * 1500 + "<em>kept</em>"
    assert html._may_nest_deep(markup)  # ends are counted as tags within a chunk
    assert html._shallow(markup) == markup


def test_a_ten_megabyte_page_is_summarized() -> None:
    row = '<p>Row of text with a <a href="/item/{}.html">link</a>.</p>\n'
    markup = "<title>Big</title>" + "".join(row.format(i % 50_000) for i in range(160_000))
    assert len(markup) > 10_000_000
    parts = summarize(markup, abstract_bytes=40)
    assert attrs(parts)["Abstract"] == b"Row of text with a link . Row of text wi"
    assert len(parts.links) == 50_000
    assert parts.links[:2] == (
        "http://www.example.org/item/0.html",
        "http://www.example.org/item/1.html",
    )


@pytest.mark.parametrize(
    "script",
    [
        "{not json",
        "[" * 100_000 + "]" * 100_000,  # nested past the parser's stack
        '{"@type": "Article", "description": "' + "x" * 300_000 + '"}',  # too large to read
        '"just a string"',
        '{"@type": ["Article", 7], "author": [[["Deep"]]], "description": {"name": 5}}',
    ],
)
def test_json_ld_that_cannot_be_read_is_skipped(script: str) -> None:
    page = (
        '<html lang="en"><head><title>T</title>'
        f'<script type="application/ld+json">{script}</script>'
        '<script type="application/ld+json">{"@type": "Article", "author": "Kept"}</script>'
        "</head><body><p>Text.</p></body></html>"
    )
    found = attrs(summarize(page))
    assert found["Author"] == b"Kept"
    assert "Description" not in found


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("2026-03-01", "2026-03-01"),
        ("2026-03-01T09:30:00+01:00", "2026-03-01T08:30:00Z"),
        ("2026-03-01T09:30:00.123Z", "2026-03-01T09:30:00Z"),
        ("2026-03-01T09:30", "2026-03-01T09:30:00"),  # no zone: kept as written
        ("March 1st, 2026", None),
        ("2026-13-45", None),
        ("", None),
    ],
)
def test_dates_are_read_as_iso_8601(written: str, read: str | None) -> None:
    page = (
        f'<html><head><meta property="article:published_time" content="{written}"></head>'
        "<body><p>Text.</p></body></html>"
    )
    assert attrs(summarize(page)).get("Date-Published") == (read.encode() if read else None)


def test_an_article_teaser_in_a_sidebar_is_not_the_content() -> None:
    story = " ".join(["The story of the gatherer told at length in its own words."] * 12)
    page = (
        "<html><body><div class='column'><div class='widget'><article><h3>Teaser</h3>"
        "<p>A short teaser for another story.</p></article></div></div>"
        f"<div class='story'><h1>The story</h1><p>{story}</p><p>{story}</p></div></body></html>"
    )
    found = attrs(summarize(page))
    assert found["Headings"] == b"The story"
    assert found["Abstract"].startswith(b"The story The story of the gatherer")


def test_a_wrapper_named_like_frame_that_holds_the_page_is_kept() -> None:
    story = " ".join(["Brokers answer queries over the summaries they collected."] * 12)
    page = (
        "<html><body><div class='page with-sidebar'><h1>Brokers</h1>"
        f"<p>{story}</p><div class='sidebar'><h3>Elsewhere</h3></div></div></body></html>"
    )
    found = attrs(summarize(page))
    assert found["Headings"] == b"Brokers"
    assert found["Abstract"].startswith(b"Brokers Brokers answer queries")


def test_a_short_text_gets_no_detected_language() -> None:
    assert "Language" not in attrs(summarize("<html><body><p>Bonjour.</p></body></html>"))


def test_full_text_is_the_main_content_without_the_frame() -> None:
    page = (
        "<html><body><nav>Home | About</nav><main><h1>Gatherers</h1><p>They summarize.</p>"
        "</main><footer>Copyright</footer></body></html>"
    )
    found = attrs(summarize(page, full_text=True))
    assert found["Full-Text"] == b"Gatherers They summarize."


def test_a_heading_that_links_back_to_a_table_of_contents_keeps_its_text() -> None:
    page = (
        '<html><body><div role="main"><h1>Tasks</h1><nav class="contents"><a href="#id1">'
        "Groups</a></nav><p>Tasks run coroutines concurrently on the event loop.</p>"
        '<h2><a class="toc-backref" href="#id1" role="doc-backlink">Task Groups</a>'
        '<a class="headerlink" href="#groups">\u00b6</a></h2><p>'
        + "A group waits. " * 20
        + "</p></div></body></html>"
    )
    assert attrs(summarize(page))["Headings"] == b"Tasks\nTask Groups"
