"""A realistic little web site served on loopback for the gatherer's tests.

Nested pages, robots.txt, a redirect, a 404, a slow page, a huge page, malformed HTML, a
binary, a .tar.gz, a PDF and an image; ETag / Last-Modified validators with 304 answers.
Sitemaps, sitemap indexes and RSS and Atom feeds are made by ``sitemap`` and ``feed``. Pages
can be changed and removed between gathering runs; every request is logged with its headers
and monotonic arrival time, so tests can check politeness, conditional requests and the
cache's ``Via``.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiohttp import web
from multidict import CIMultiDictProxy

LAST_MODIFIED = "Mon, 02 Nov 2026 10:00:00 GMT"


def page(title: str, body: str, *, links: tuple[str, ...] = (), head: str = "") -> bytes:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<!doctype html><html><head><title>{title}</title>{head}</head>"
        f"<body><h1>{title}</h1><p>{body}</p><ul>{anchors}</ul></body></html>"
    ).encode()


def sitemap(entries: Sequence[tuple[str, str | None]], *, index: bool = False) -> bytes:
    """A sitemap (or with ``index`` a sitemap index) of (location, lastmod or None)."""
    root, item = ("sitemapindex", "sitemap") if index else ("urlset", "url")
    body = "".join(
        f"<{item}><loc>{loc}</loc>"
        + (f"<lastmod>{lastmod}</lastmod>" if lastmod else "")
        + f"</{item}>\n"
        for loc, lastmod in entries
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<{root} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{body}</{root}>\n'
    ).encode()


def feed(title: str, items: Sequence[tuple[str, str | None]], *, atom: bool = False) -> bytes:
    """An RSS 2.0 feed, or with ``atom`` an Atom 1.0 feed, of (link, date or None): an RSS
    pubDate is an RFC 822 date, an Atom updated date RFC 3339."""
    if atom:
        head = f'<feed xmlns="http://www.w3.org/2005/Atom"><title>{title}</title><id>urn:t</id>'
        item, date_tag = '<entry><id>{0}</id><link href="{0}"/>{1}</entry>', "updated"
        tail = "</feed>"
    else:
        head = f'<rss version="2.0"><channel><title>{title}</title>'
        item, date_tag = "<item><link>{0}</link>{1}</item>", "pubDate"
        tail = "</channel></rss>"
    body = "".join(
        item.format(link, f"<{date_tag}>{date}</{date_tag}>" if date else "")
        for link, date in items
    )
    return f'<?xml version="1.0"?>{head}{body}{tail}'.encode()


def tar_gz(members: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def pdf(title: str, author: str) -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    writer.add_metadata({"/Title": title, "/Author": author})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class Hit:
    """One request the site received."""

    path: str
    headers: CIMultiDictProxy[str]
    at: float
    status: int


@dataclass
class Site:
    """The site's documents (path -> (content type, bytes)) and what it was asked."""

    documents: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    slow: dict[str, float] = field(default_factory=dict)
    huge: dict[str, int] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def paths(self, *, status: int | None = None) -> list[str]:
        return [h.path for h in self.hits if status is None or h.status == status]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        tcp = web.TCPSite(self._runner, "127.0.0.1", 0)
        await tcp.start()
        server = tcp._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        path = request.path_qs
        status, response = await self._answer(request, path)
        self.hits.append(Hit(path, request.headers, time.monotonic(), status))
        return response

    async def _answer(self, request: web.Request, path: str) -> tuple[int, web.StreamResponse]:
        if path in self.slow:
            await asyncio.sleep(self.slow[path])
        if path in self.redirects:
            return 302, web.Response(status=302, headers={"Location": self.redirects[path]})
        if path in self.huge:
            return 200, await self._stream_huge(request, self.huge[path])
        if path not in self.documents:
            return 404, web.Response(status=404, text="not found")
        content_type, body = self.documents[path]
        etag = '"' + hashlib.md5(body, usedforsecurity=False).hexdigest()[:16] + '"'
        headers = {
            "ETag": etag,
            "Last-Modified": LAST_MODIFIED,
            "Cache-Control": "max-age=0, must-revalidate",
        }
        if request.headers.get("If-None-Match") == etag:
            return 304, web.Response(status=304, headers=headers)
        headers["Content-Type"] = content_type
        return 200, web.Response(body=body, headers=headers)

    async def _stream_huge(self, request: web.Request, size: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        response.content_length = size
        await response.prepare(request)
        chunk = b"<p>" + b"x" * 65530 + b"</p>"
        sent = 0
        try:
            while sent < size:
                part = chunk[: size - sent]
                await response.write(part)
                sent += len(part)
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the gatherer hung up once it had read enough: that is the point
        return response


def standard_site() -> Site:
    """The site most gatherer tests crawl."""
    site = Site()
    html = "text/html; charset=utf-8"
    docs = site.documents
    docs["/robots.txt"] = ("text/plain", b"User-agent: *\nDisallow: /private/\n")
    docs["/"] = (
        html,
        page(
            "Harvest test site",
            "Welcome to the gatherer test site about caching and indexing.",
            links=(
                "/a.html",
                "/b.html",
                "/docs/",
                "/old.html",
                "/missing.html",
                "/bad.html",
                "/tool.bin",
                "/pkg.tar.gz",
                "/paper.pdf",
                "/slow.html",
                "/huge.html",
                "/private/secret.html",
                "/logo.gif",
                "http://elsewhere.invalid/",
                "mailto:webmaster@example.org",
            ),
            head='<meta name="description" content="The front page">',
        ),
    )
    docs["/a.html"] = (
        html,
        page("Page A", "Alpha page on object caches.", links=("/docs/c.html", "/")),
    )
    docs["/b.html"] = (html, page("Page B", "Beta page on brokers.", links=("/a.html",)))
    docs["/docs/"] = (
        html,
        page("Documents", "The documents index.", links=("c.html", "d.html")),
    )
    docs["/docs/c.html"] = (html, page("Page C", "Gamma page.", links=("deep/e.html",)))
    docs["/docs/d.html"] = (html, page("Page D", "Delta page."))
    docs["/docs/deep/e.html"] = (html, page("Page E", "Epsilon, deep down."))
    docs["/a2.html"] = (html, page("Moved page", "Where the old page went."))
    site.redirects["/old.html"] = "/a2.html"
    docs["/bad.html"] = (
        html,
        b"<html><head><title>Broken page</title><body><div><p>unclosed <b>bold<table><tr><td>"
        b"cell\x00\xff\xfe junk <a href='/a.html'>again",
    )
    docs["/tool.bin"] = (
        "application/octet-stream",
        b"\x7fELF\x02\x01\x01" + b"\x00" * 64 + b"harvest_binary_marker_string\x00" + b"\x01" * 32,
    )
    docs["/pkg.tar.gz"] = (
        "application/gzip",
        tar_gz(
            {
                "pkg/README": b"Package readme\nThis package gathers documents.\n",
                "pkg/main.c": b"#include <stdio.h>\nint gather_all(int n) { return n; }\n",
            }
        ),
    )
    docs["/paper.pdf"] = ("application/pdf", pdf("Hierarchical Object Caches", "Chankhunthod"))
    docs["/private/secret.html"] = (html, page("Secret", "Robots say no."))
    docs["/slow.html"] = (html, page("Slow page", "Worth the wait."))
    site.slow["/slow.html"] = 1.0
    site.huge["/huge.html"] = 20 * 1024 * 1024
    docs["/logo.gif"] = ("image/gif", b"GIF89a" + b"\x00" * 20)
    return site
