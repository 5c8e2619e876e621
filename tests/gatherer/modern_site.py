"""A web site shaped like today's, for the summaries' tests: every page framed by navigation,
sidebars, footers and a cookie banner, with metadata in each of the ways pages state it
(``<meta>``, OpenGraph, JSON-LD, microdata), a page with none at all, two copies of one text
under different frames, a printable copy that names its canonical URL, and pages reached only
through the sitemap index its robots.txt names or through its news feed.

Each page's expected summary is written next to it, from the page itself.
"""

from __future__ import annotations

from tests.gatherer.site import Site, feed, sitemap

HTML = "text/html; charset=utf-8"

COOKIE_BANNER = """
<div id="cookie-consent" class="cookie-banner">
  <h2>We value your privacy</h2>
  <p>We use cookies to improve your experience. By continuing you accept our cookie policy
  and our partners' use of your data for advertising and measurement.</p>
  <button>Accept all</button>
</div>"""

SITE_HEADER = """
<header class="site-header">
  <a class="logo" href="/">Mountain Computing Gazette</a>
  <nav class="main-nav" aria-label="Main">
    <ul><li><a href="/">Home</a></li><li><a href="/articles/">Articles</a></li>
    <li><a href="/guide/">Guides</a></li><li><a href="/about.html">About us</a></li></ul>
  </nav>
</header>"""

SITE_FOOTER = """
<footer class="site-footer">
  <h2>Stay in touch</h2>
  <p>Subscribe to our newsletter for a weekly digest of stories about computing in the
  mountains, delivered every Friday morning to your inbox.</p>
  <p>© 2026 Mountain Computing Gazette. All rights reserved. Terms. Privacy.</p>
</footer>"""

SIDEBAR = """
<aside class="sidebar">
  <h3>Related posts</h3>
  <ul><li><a href="/articles/caching.html">How object caches work</a></li>
  <li><a href="/guide/microdata.html">Writing a gatherer configuration</a></li></ul>
  <h3>Popular tags</h3>
  <p>caching indexing brokers gatherers replication mirrors registries</p>
</aside>"""

HISTORY_TEXT = (
    "Harvest began in 1994 at the University of Colorado as a research project on scalable"
    " resource discovery. Its designers observed that every search service crawled the same"
    " servers again and again, so they split the work: gatherers summarize the documents near"
    " where they live, and brokers collect the summaries from many gatherers and answer"
    " queries. The object cache built for the project later became Squid, which still serves"
    " a large share of the web's proxied traffic. Replicators kept popular brokers identical"
    " across mirrors, and the Harvest Server Registry listed every server of the system."
)

HISTORY = f"""<!doctype html>
<html lang="en-GB">
<head>
<meta charset="utf-8">
<title>The history of Harvest | Mountain Computing Gazette</title>
<meta name="description" content="How a 1994 research project shaped web caching and search.">
<meta property="og:title" content="The history of Harvest">
<meta property="og:description" content="A short history of the Harvest system.">
<meta property="og:type" content="article">
<link rel="canonical" href="/articles/harvest-history.html">
<script type="application/ld+json">
{{"@context": "https://schema.org", "@graph": [
  {{"@type": "Organization", "name": "Mountain Computing Gazette",
    "description": "A magazine about computing"}},
  {{"@type": "WebSite", "name": "Mountain Computing Gazette"}},
  {{"@type": "NewsArticle", "headline": "The history of Harvest",
    "author": [{{"@type": "Person", "name": "Ada Byron"}},
               {{"@type": "Person", "name": "Charles Babbage"}}],
    "datePublished": "2026-03-01T09:30:00+01:00", "dateModified": "2026-11-20",
    "keywords": ["Harvest", "web caching", "resource discovery"]}}
]}}
</script>
<script>window.analytics = "tracking code that is not text";</script>
</head>
<body>
{COOKIE_BANNER}
{SITE_HEADER}
<div class="layout has-sidebar">
  <main>
    <article>
      <h1>The history of Harvest <a class="headerlink" href="#top">¶</a></h1>
      <p class="byline">By Ada Byron and Charles Babbage</p>
      <p>{HISTORY_TEXT}</p>
      <nav class="toc"><h4>On this page</h4><a href="#origins">Origins</a></nav>
      <h2 id="origins">Origins</h2>
      <p>The project's first papers described a system of cooperating parts that institutions
      could run themselves, chained into hierarchies of caches like the domain name system.</p>
      <div class="share-buttons"><h4>Share this article</h4><a href="/share">Share</a></div>
      <h2>Legacy</h2>
      <p>Many ideas of Harvest, from summaries to hierarchies of caches, live on in the tools
      people run today to cache and search what they publish.</p>
    </article>
  </main>
  {SIDEBAR}
</div>
{SITE_FOOTER}
</body>
</html>"""

CACHING_TEXT = (
    "An object cache keeps copies of documents that clients asked for, so that the next"
    " request for the same document is answered from the copy instead of from the origin"
    " server far away. A cache must decide how long a copy stays fresh, when to ask the origin"
    " whether it changed, and which copies to forget when it runs out of memory or disk."
)

CACHING = f"""<!doctype html>
<html lang="en">
<head>
<title>How object caches work</title>
<meta property="og:description" content="Freshness, validation and eviction explained.">
<meta property="article:author" content="https://social.example/@grace">
<meta property="article:author" content="Grace Hopper">
<meta property="article:published_time" content="2026-06-15T12:00:00Z">
<meta property="article:tag" content="caching">
<meta property="article:tag" content="HTTP">
</head>
<body>
{COOKIE_BANNER}
<div class="navbar"><a href="/">Home</a> <a href="/articles/">Articles</a>
  <a href="/about.html">About us</a> <a href="/contact.html">Contact</a></div>
<div class="container">
  <div class="sidebar"><h3>Categories</h3><ul><li><a href="/c/1">Networks</a></li>
    <li><a href="/c/2">Storage</a></li></ul></div>
  <div class="post-body">
    <h1>How object caches work</h1>
    <p>{CACHING_TEXT}</p>
    <h2>Freshness</h2>
    <p>A response says how long it stays fresh with Cache-Control max-age or Expires; when
    it says nothing, caches use a fraction of the time since it was last modified.</p>
    <h2>Validation</h2>
    <p>A stale copy is revalidated with a conditional request carrying its ETag or
    Last-Modified date; the origin answers 304 Not Modified when the copy is still good.</p>
  </div>
</div>
<div class="site-footer"><h2>Stay in touch</h2><p>Newsletter, social media and a lot of
  links to other places on this site that are not part of the article.</p></div>
</body>
</html>"""

MICRODATA_TEXT = (
    "A gatherer configuration names the root URLs to enumerate, the limits of each root, and"
    " where the records are kept. Each root is enumerated breadth-first, politely, and every"
    " document found is summarized into a record that brokers collect."
)

MICRODATA = f"""<!doctype html>
<html lang="en">
<head><title>Writing a gatherer configuration</title></head>
<body>
{SITE_HEADER}
<div itemscope itemtype="https://schema.org/TechArticle">
  <meta itemprop="description" content="A walk through gatherer.cf, root by root.">
  <h1 itemprop="headline">Writing a gatherer configuration</h1>
  <p>By <span itemprop="author" itemscope itemtype="https://schema.org/Person">
    <span itemprop="name">Alan Turing</span></span>,
    <time itemprop="datePublished" datetime="2025-12-24">Christmas Eve</time>.
    <meta itemprop="keywords" content="gatherer, configuration"></p>
  <div itemprop="articleBody">
    <p>{MICRODATA_TEXT}</p>
    <h2>Roots and limits</h2>
    <p>A root's options limit the URLs generated, the hosts touched and the depth of links
    followed; filters skip URLs and hosts that match a pattern.</p>
  </div>
</div>
{SITE_FOOTER}
</body>
</html>"""

# Nothing but text: no <title>, no language, no metadata of any kind.
BARE_TEXT = (
    "Die Bibliothek sammelt Zusammenfassungen von Dokumenten aus vielen Quellen und macht sie"
    " durchsuchbar. Jeder Sammler besucht die Server seiner Einrichtung, liest die Dokumente"
    " und schreibt für jedes eine kurze Beschreibung mit Titel, Überschriften und Schlagworten."
    " Die Vermittler holen diese Beschreibungen regelmäßig ab und beantworten die Anfragen der"
    " Leser, ohne dass die Server der Einrichtungen erneut belastet werden."
)

BARE = f"""<html><body>
<h1>Sammler und Vermittler</h1>
<p>{BARE_TEXT}</p>
</body></html>"""

# One text under two URLs with different frames, and a word changed: near-duplicates.
COPY_TEXT = " ".join(
    f"Section {n} of the mirrored manual explains how replicated collections converge after a"
    f" partition heals, how anti-entropy repairs what flooding missed, and why every mirror"
    f" measures the others before the update topology is built."
    for n in range(1, 9)
)


def copy_page(frame: str, text: str) -> str:
    return f"""<!doctype html><html lang="en"><head><title>Mirrored manual</title></head>
<body><div class="nav">{frame}</div><main><h1>Mirrored manual</h1><p>{text}</p></main>
<footer>{frame} footer</footer></body></html>"""


FIRST_COPY = copy_page("Mirror one: home, search, contact", COPY_TEXT)
SECOND_COPY = copy_page(
    "The other mirror: start page, index, help, feedback",
    COPY_TEXT.replace("partition heals", "partition ends", 1),
)

# A printable copy of the history page that names the article as its canonical URL.
PRINTABLE = HISTORY.replace(
    '<link rel="canonical" href="/articles/harvest-history.html">',
    '<link rel="canonical" href="http://HOST/articles/harvest-history.html">',
)

HOME = """<!doctype html>
<html lang="en"><head><title>Mountain Computing Gazette</title>
<meta name="description" content="Stories about computing in the mountains.">
</head><body>
<h1>Mountain Computing Gazette</h1>
<p>Stories about caches, gatherers and brokers, and the people who run them in the hills.</p>
<ul>
<li><a href="/print/harvest-history.html">The history of Harvest (printable)</a></li>
<li><a href="/articles/caching.html">How object caches work</a></li>
<li><a href="/feed.xml">News feed</a></li>
<li><a href="/mirror-one/manual.html">Mirrored manual</a></li>
<li><a href="/mirror-two/manual.html">Mirrored manual (second mirror)</a></li>
</ul></body></html>"""


def modern_site() -> Site:
    """The site. Its home page links to the history article only through its printable copy
    (so the article is reached by its canonical URL alone); the guide is listed only in the
    sitemap its robots.txt names (through a sitemap index), the German page only in the news
    feed the home page links to."""
    site = Site()
    docs = site.documents
    docs["/"] = (HTML, HOME.encode())
    docs["/articles/harvest-history.html"] = (HTML, HISTORY.encode())
    docs["/articles/caching.html"] = (HTML, CACHING.encode())
    docs["/guide/microdata.html"] = (HTML, MICRODATA.encode())
    docs["/bare.html"] = ("text/html", BARE.encode())
    docs["/mirror-one/manual.html"] = (HTML, FIRST_COPY.encode())
    docs["/mirror-two/manual.html"] = (HTML, SECOND_COPY.encode())
    return site


def add_listed(site: Site) -> None:
    """What names absolute URLs on the site's port: the printable copy, robots.txt, the
    sitemaps and the feed."""
    host = f"127.0.0.1:{site.port}"
    docs = site.documents
    docs["/print/harvest-history.html"] = (HTML, PRINTABLE.replace("HOST", host).encode())
    docs["/robots.txt"] = ("text/plain", f"Sitemap: {site.url('/sitemap-index.xml')}\n".encode())
    docs["/sitemap-index.xml"] = (
        "application/xml",
        sitemap([(site.url("/sitemap-guides.xml"), "2026-11-01")], index=True),
    )
    docs["/sitemap-guides.xml"] = (
        "application/xml",
        sitemap([(site.url("/guide/microdata.html"), "2025-12-24")]),
    )
    docs["/feed.xml"] = (
        "application/atom+xml",
        feed("Gazette news", [(site.url("/bare.html"), "2026-11-30T08:00:00Z")], atom=True),
    )
