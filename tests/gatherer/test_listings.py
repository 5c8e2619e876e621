"""The pure listing readers: recognizing sitemaps and feeds by their content, reading sitemaps
(sitemaps.org 0.9) and RSS/Atom feeds into entries and dates, their limits and defences
(entity bombs, gzip bombs, too many entries), the stored form, and fuzzing: any bytes give a
listing or a ListingError, never another exception."""

from __future__ import annotations

import gzip
import time
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatherer.errors import ListingError
from gatherer.listings import (
    MAX_ENTRIES,
    Entry,
    Listing,
    ListingKind,
    chunks,
    decode,
    encode,
    parse_feed,
    parse_sitemap,
    read_listing,
    recognize,
    w3c_date,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC).timestamp()
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
BASE = "http://www.example.org/sitemap.xml"


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def urlset(*entries: str, namespace: str = SITEMAP_NS, extra: str = "") -> bytes:
    xmlns = f' xmlns="{namespace}"' if namespace else ""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset{xmlns}{extra}>\n'
        + "".join(entries)
        + "</urlset>\n"
    ).encode()


def url(loc: str, lastmod: str | None = None, inner: str = "") -> str:
    date = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    return f"<url><loc>{loc}</loc>{date}{inner}</url>\n"


def sitemap(content: bytes) -> Listing:
    return parse_sitemap(chunks(content), url=BASE, now=NOW)


# -- recognizing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "content_type", "kind"),
    [
        pytest.param(urlset(), "application/xml", ListingKind.SITEMAP, id="urlset"),
        pytest.param(urlset(namespace=""), None, ListingKind.SITEMAP, id="urlset-no-namespace"),
        pytest.param(
            urlset(namespace="http://www.google.com/schemas/sitemap/0.84"),
            "text/xml",
            ListingKind.SITEMAP,
            id="urlset-old-namespace",
        ),
        pytest.param(
            f'<sitemapindex xmlns="{SITEMAP_NS}"></sitemapindex>'.encode(),
            "text/plain",  # servers say anything: the content decides
            ListingKind.SITEMAP_INDEX,
            id="index",
        ),
        pytest.param(
            b"\xef\xbb\xbf<?xml version='1.0'?>\n<!-- generated\n by a plugin -->\n"
            b'<?xml-stylesheet type="text/xsl" href="/sitemap.xsl"?>\n'
            b'<!DOCTYPE urlset [ <!ELEMENT urlset ANY> ]>\n<urlset xmlns="'
            + SITEMAP_NS.encode()
            + b'"/>',
            None,
            ListingKind.SITEMAP,
            id="prolog-before-root",
        ),
        pytest.param(gzip.compress(urlset()), "application/gzip", ListingKind.SITEMAP, id="gz"),
        pytest.param(
            b'<?xml version="1.0"?><rss version="2.0"><channel/></rss>',
            "application/rss+xml",
            ListingKind.FEED,
            id="rss",
        ),
        pytest.param(
            b'<feed xmlns="http://www.w3.org/2005/Atom"><title>x</title></feed>',
            "application/atom+xml",
            ListingKind.FEED,
            id="atom",
        ),
        pytest.param(
            b'<a:feed xmlns:a="http://purl.org/atom/ns#"/>', None, ListingKind.FEED, id="atom-0.3"
        ),
        pytest.param(
            b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
            b'xmlns="http://purl.org/rss/1.0/"><channel/></rdf:RDF>',
            None,
            ListingKind.FEED,
            id="rss-1.0",
        ),
        pytest.param(urlset(), "text/html", None, id="served-as-html"),
        pytest.param(b"<!doctype html><html><body>Sitemap</body></html>", None, None, id="html"),
        pytest.param(b'<feed xmlns="http://example.org/other"/>', None, None, id="other-feed"),
        pytest.param(b'<rdf:RDF xmlns:rdf="x"/>', None, None, id="rdf-not-rss"),
        pytest.param(b'<urlset xmlns="http://example.org/"/>', None, None, id="foreign-urlset"),
        pytest.param(b"%PDF-1.4 <urlset>", "application/pdf", None, id="pdf"),
        pytest.param(gzip.compress(b"\x00" * 1000), "application/gzip", None, id="gz-binary"),
        pytest.param(b"\x1f\x8b\x08garbage", None, None, id="corrupt-gzip"),
        pytest.param(b"", None, None, id="empty"),
    ],
)
def test_recognize_by_content(content: bytes, content_type: str | None, kind: object) -> None:
    assert recognize(content, content_type) is kind


# -- sitemaps ---------------------------------------------------------------------------------


def test_sitemap_entries_with_lastmod() -> None:
    got = sitemap(
        urlset(
            url("http://www.example.org/", "2026-11-02T10:00:00+01:00"),
            url(" http://www.example.org/a.html\n", "2026-11-02"),
            url("http://www.example.org/b.html"),
            url("/relative.html", "2026-11-02T10:00Z"),
            url("http://www.example.org/a.html", "2026-11-30"),  # again: the first one counts
            extra=' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"',
        )
    )
    assert got == Listing(
        ListingKind.SITEMAP,
        (
            Entry("http://www.example.org/", epoch("2026-11-02T09:00:00+00:00")),
            # A date alone counts as the end of that day.
            Entry("http://www.example.org/a.html", epoch("2026-11-03T00:00:00+00:00")),
            Entry("http://www.example.org/b.html", None),
            Entry("http://www.example.org/relative.html", epoch("2026-11-02T10:00:00+00:00")),
        ),
    )


def test_sitemap_ignores_other_namespaces_and_bad_entries() -> None:
    image = (
        "<image:image><image:loc>http://www.example.org/photo.jpg</image:loc></image:image>"
        "<changefreq>daily</changefreq><priority>0.5</priority>"
    )
    got = sitemap(
        urlset(
            url("http://www.example.org/page.html", "not a date", inner=image),
            "<url><lastmod>2026-11-02</lastmod></url>",  # no loc
            url("   "),
            url("http://www.example.org/" + "x" * 9000),
            extra=' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"',
        )
    )
    assert got.entries == (Entry("http://www.example.org/page.html", None),)
    assert got.problem is None


def test_sitemap_index() -> None:
    content = (
        f'<sitemapindex xmlns="{SITEMAP_NS}">'
        "<sitemap><loc>http://www.example.org/s1.xml</loc><lastmod>2026-10-01</lastmod></sitemap>"
        "<sitemap><loc>http://www.example.org/s2.xml.gz</loc></sitemap>"
        "</sitemapindex>"
    ).encode()
    got = sitemap(content)
    assert got.kind is ListingKind.SITEMAP_INDEX
    assert got.kind.lists_listings
    assert [entry.url for entry in got.entries] == [
        "http://www.example.org/s1.xml",
        "http://www.example.org/s2.xml.gz",
    ]
    assert got.entries[0].modified == epoch("2026-10-02T00:00:00+00:00")


def test_gzipped_sitemap_reads_like_the_plain_one() -> None:
    plain = urlset(url("http://www.example.org/a", "2026-11-02"))
    # Two gzip members, as `cat a.gz b.gz` makes: gzip reads them as one stream.
    half = len(plain) // 2
    assert sitemap(gzip.compress(plain[:half]) + gzip.compress(plain[half:])) == sitemap(plain)


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        pytest.param(b"this is no XML at all", "malformed", id="not-xml"),
        pytest.param(b"", "malformed", id="empty"),
        pytest.param(b"<html><body>Not found</body></html>", "not_listing", id="html"),
        pytest.param(
            b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
            b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
            b"<urlset><url><loc>&lol2;</loc></url></urlset>",
            "malformed",
            id="entity-bomb",
        ),
        pytest.param(
            b'<!DOCTYPE urlset SYSTEM "http://attacker.invalid/x.dtd"><urlset/>',
            "malformed",
            id="external-dtd",
        ),
        pytest.param(b"\x1f\x8b\x08\x00garbage", "compression", id="corrupt-gzip"),
    ],
)
def test_unreadable_sitemaps_raise_listing_errors(content: bytes, kind: str) -> None:
    with pytest.raises(ListingError) as caught:
        sitemap(content)
    assert caught.value.kind == kind


def test_sitemap_broken_midway_keeps_the_entries_before_the_break() -> None:
    content = urlset(url("http://www.example.org/a"), url("http://www.example.org/b"))
    got = sitemap(content[: content.index(b"/b</loc>")])
    assert got.entries == (Entry("http://www.example.org/a"),)
    assert got.problem is not None
    assert got.problem.kind == "malformed"
    # A gzipped one cut short: the good part is read, the cut is a compression problem.
    cut = gzip.compress(content * 1)[:-12]
    got = sitemap(cut)
    assert got.problem is not None
    assert got.problem.kind == "compression"


def test_sitemap_stops_after_max_entries() -> None:
    many = urlset(*(url(f"http://www.example.org/{n}") for n in range(MAX_ENTRIES + 5)))
    got = sitemap(gzip.compress(many))
    assert len(got.entries) == MAX_ENTRIES
    assert got.entries[-1].url == f"http://www.example.org/{MAX_ENTRIES - 1}"
    assert got.problem is not None
    assert got.problem.kind == "too_many"


def test_gzip_bomb_stops_at_the_size_limit() -> None:
    # 8 MB of white space inside a urlset compress to a few kB; the limit here is 1 MB.
    bomb = gzip.compress(urlset(url("http://www.example.org/a"), " " * 8_000_000), 9)
    assert len(bomb) < 20_000
    started = time.process_time()
    got = parse_sitemap(chunks(bomb, limit=1_000_000), url=BASE, now=NOW)
    assert time.process_time() - started < 1.0
    assert got.entries == (Entry("http://www.example.org/a"),)
    assert got.problem is not None
    assert got.problem.kind == "too_large"


def test_plain_listing_over_the_size_limit_is_refused() -> None:
    with pytest.raises(ListingError) as caught:
        list(chunks(b"<urlset>" + b" " * 100, limit=50))
    assert caught.value.kind == "too_large"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-02", "2026-11-03T00:00:00+00:00"),
        ("2026-11-02T10:00:00+01:00", "2026-11-02T09:00:00+00:00"),
        ("2026-11-02T10:00Z", "2026-11-02T10:00:00+00:00"),
        ("2026-11-02T10:00:00.5z", "2026-11-02T10:00:00.5+00:00"),
        ("2026-11-02T10:00:00", "2026-11-02T10:00:00+00:00"),  # no zone: UTC
        ("  2026-11-02T10:00:00Z\n", "2026-11-02T10:00:00+00:00"),
        ("2027-01-01", None),  # after now: not believed
        ("2026-13-01", None),
        ("2026", None),
        ("yesterday", None),
        ("", None),
    ],
)
def test_w3c_dates(text: str, expected: str | None) -> None:
    assert w3c_date(text, NOW) == (None if expected is None else epoch(expected))


# -- feeds ------------------------------------------------------------------------------------

RSS = b"""<?xml version="1.0" encoding="utf-8"?>
<rss version="2.0"><channel><title>News</title><link>http://news.example.org/</link>
<item><title>One</title><link>http://news.example.org/one.html</link>
  <pubDate>Mon, 02 Nov 2026 10:00:00 GMT</pubDate></item>
<item><title>Two</title><guid isPermaLink="true">http://news.example.org/two.html</guid></item>
<item><title>No link</title><guid isPermaLink="false">tag:news,2026:3</guid></item>
<item><title>Relative</title><link>three.html</link>
  <pubDate>Sun, 01 Nov 2026 08:00:00 +0100</pubDate></item>
</channel></rss>"""

ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Blog</title><id>urn:x</id>
<updated>2026-11-05T00:00:00Z</updated>
<entry><title>A</title><id>urn:a</id><link rel="alternate" href="http://blog.example.org/a"/>
  <published>2026-11-01T00:00:00Z</published><updated>2026-11-04T12:00:00Z</updated></entry>
<entry><title>B</title><id>urn:b</id><link href="/b"/>
  <published>2026-11-02T00:00:00Z</published></entry>
<entry><title>Future</title><id>urn:c</id><link href="http://blog.example.org/c"/>
  <updated>2099-01-01T00:00:00Z</updated></entry>
</feed>"""


def test_rss_entries_and_dates() -> None:
    got = parse_feed(RSS, url="http://news.example.org/rss", now=NOW, content_type=None)
    assert got == Listing(
        ListingKind.FEED,
        (
            Entry("http://news.example.org/one.html", epoch("2026-11-02T10:00:00+00:00")),
            Entry("http://news.example.org/two.html", None),
            Entry("http://news.example.org/three.html", epoch("2026-11-01T07:00:00+00:00")),
        ),
    )


def test_atom_entries_take_the_later_date() -> None:
    got = parse_feed(
        ATOM, url="http://blog.example.org/atom.xml", now=NOW, content_type="application/atom+xml"
    )
    assert got.entries == (
        Entry("http://blog.example.org/a", epoch("2026-11-04T12:00:00+00:00")),
        Entry("http://blog.example.org/b", epoch("2026-11-02T00:00:00+00:00")),
        Entry("http://blog.example.org/c", None),  # a date after now is not believed
    )
    assert got.problem is None


def test_rss_1_0() -> None:
    content = b"""<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
  xmlns="http://purl.org/rss/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/">
<channel rdf:about="http://x.example.org/"><title>X</title></channel>
<item rdf:about="http://x.example.org/1"><title>1</title><link>http://x.example.org/1</link>
<dc:date>2026-11-02T10:00:00Z</dc:date></item></rdf:RDF>"""
    assert recognize(content, None) is ListingKind.FEED
    got = read_listing(
        ListingKind.FEED, content, url="http://x.example.org/rss", now=NOW, content_type=None
    )
    assert got.entries == (Entry("http://x.example.org/1", epoch("2026-11-02T10:00:00+00:00")),)


def test_malformed_feed_keeps_its_entries_with_a_problem() -> None:
    broken = RSS.replace(b"</channel></rss>", b"<item><link>http://news.example.org/4")
    got = parse_feed(broken, url="http://news.example.org/rss", now=NOW, content_type=None)
    assert Entry("http://news.example.org/one.html", epoch("2026-11-02T10:00:00+00:00")) in (
        got.entries
    )
    assert got.problem is not None
    assert got.problem.kind == "malformed"


def test_feed_entity_bomb_is_refused() -> None:
    lol = b"&lol;" * 10
    bomb = (
        b'<?xml version="1.0"?>\n<!DOCTYPE rss [\n<!ENTITY lol "lol">\n<!ENTITY lol2 "'
        + lol
        + b'">\n<!ENTITY lol3 "'
        + lol.replace(b"lol;", b"lol2;")
        + b'">\n]>\n<rss version="2.0"><channel><title>&lol3;</title></channel></rss>'
    )
    with pytest.raises(ListingError) as caught:
        parse_feed(bomb, url="http://x.example.org/rss", now=NOW, content_type=None)
    assert caught.value.kind == "malformed"


def test_not_a_feed_is_a_listing_error() -> None:
    with pytest.raises(ListingError) as caught:
        parse_feed(b"\x00\x01binary", url="http://x.example.org/rss", now=NOW, content_type=None)
    assert caught.value.kind == "malformed"


# -- the stored form --------------------------------------------------------------------------


def test_stored_form_round_trips() -> None:
    listing = Listing(
        ListingKind.SITEMAP_INDEX,
        (Entry("http://www.example.org/s1.xml", 1793613600.25), Entry("http://x/?a=b\u00e9")),
        problem=ListingError("too_many", "dropped: problems are not stored"),
    )
    assert decode(encode(listing)) == Listing(listing.kind, listing.entries)
    assert decode(encode(Listing(ListingKind.FEED, ()))) == Listing(ListingKind.FEED, ())


def test_a_damaged_stored_form_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a stored listing"):
        decode(b"not zlib")


# -- fuzzing: only ListingError ever comes out ------------------------------------------------

FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_XMLISH = st.lists(
    st.sampled_from(
        [
            b"<urlset>",
            f'<urlset xmlns="{SITEMAP_NS}">'.encode(),
            b"<sitemapindex>",
            b"<url>",
            b"</url>",
            b"<loc>",
            b"</loc>",
            b"<lastmod>",
            b"</lastmod>",
            b"http://a/",
            b"2026-11-02",
            b"&amp;",
            b"&bogus;",
            b"<!DOCTYPE x>",
            b"<![CDATA[",
            b"]]>",
            b"<rss>",
            b"<item>",
            b"<link>",
            b"</rss>",
            b'<feed xmlns="http://www.w3.org/2005/Atom">',
            b"<entry>",
            b"\x00",
            b"\xff",
            b"<",
            b">",
        ]
    ),
    max_size=40,
).map(b"".join)


@FUZZ
@given(st.one_of(st.binary(max_size=500), _XMLISH))
def test_fuzz_sitemap_raises_only_listing_errors(content: bytes) -> None:
    for data in (content, gzip.compress(content)):
        try:
            got = sitemap(data)
        except ListingError:
            continue
        assert all(entry.url for entry in got.entries)


@FUZZ
@given(st.one_of(st.binary(max_size=500), _XMLISH))
def test_fuzz_feed_raises_only_listing_errors(content: bytes) -> None:
    try:
        got = read_listing(
            ListingKind.FEED, content, url="http://x/feed", now=NOW, content_type=None
        )
    except ListingError:
        return
    assert all(entry.url for entry in got.entries)


@FUZZ
@given(st.binary(max_size=500), st.sampled_from([None, "text/xml", "application/gzip"]))
def test_fuzz_recognize_never_raises(content: bytes, content_type: str | None) -> None:
    recognize(content, content_type)
    recognize(gzip.compress(content), content_type)
