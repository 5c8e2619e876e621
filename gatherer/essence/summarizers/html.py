"""The HTML summarizer: what the page says about itself, its main content, and its links.

One lexbor parse per page; everything is read with CSS selectors and lexbor's own text
extraction, so the Python work per page stays small. The page's statements (``<meta>``,
OpenGraph, JSON-LD, microdata) are read by ``metadata``, its main content (without navigation,
sidebars, footers and banners) is found by ``content``; Keywords are extracted from the main
text (``keywords``) only when the page declares none, and its language is detected
(``language``) only when it declares none.

Links come from ``a``, ``area``, ``frame``, ``iframe``, ``meta http-equiv=refresh`` and those
``link`` elements that point at other documents: no ``rel``, or a ``rel`` of alternate, next,
prev/previous, index, contents, start, first, last or up, unless it also says stylesheet or
icon (``alternate stylesheet``). They are resolved against ``<base href>`` (else the page's
URL), lose their fragment, and ``javascript:``, ``mailto:``, ``data:`` and ``tel:`` are
skipped. A robots meta of ``nofollow`` (or ``none``) drops links and ``URL-References``;
``noindex`` (or ``none``) sets ``Parts.noindex`` and the caller drops the attributes.
"""

from __future__ import annotations

import re
from itertools import accumulate
from urllib.parse import urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser, LexborNode

from gatherer.essence.document import Document, Parts
from gatherer.essence.fingerprint import fingerprint
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.content import headings, main_node
from gatherer.essence.summarizers.keywords import extract as extract_keywords
from gatherer.essence.summarizers.language import detect as detect_language
from gatherer.essence.summarizers.metadata import read as read_metadata
from gatherer.essence.summarizers.text_tools import attributes, collapse, decode, utf8_prefix

# The HTML standard looks for a charset declaration in the first 1024 bytes only.
_PRESCAN_BYTES = 1024
_META_CHARSET = re.compile(rb"<meta[^>]+?charset\s*=\s*[\"']?\s*([\w.:-]+)", re.IGNORECASE)

_TITLE = "title:not(svg title, math title)"  # SVG has <title> elements of its own
_HEADINGS = "h1, h2, h3, h4, h5, h6"
_LINKING = "a[href], area[href], link[href], frame[src], iframe[src], meta[http-equiv][content]"
_INVISIBLE = ["script", "style", "noscript", "template"]
# Keywords extracted from a page's text (a page's own are all kept): a handful say what it is
# about; more are mostly fragments of its sentences.
_EXTRACTED_KEYWORDS = 10

_FOLLOWED_RELS = frozenset(
    {"alternate", "next", "prev", "previous", "index", "contents", "start", "first", "last", "up"}
)
_RESOURCE_RELS = frozenset({"stylesheet", "icon"})
_SKIPPED_SCHEMES = frozenset({"javascript", "mailto", "data", "tel"})
_URL_WHITESPACE = " \t\n\f\r"
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")  # URL parsers drop these inside a URL
# What precedes the URL in a refresh's content: "5; url=", "0,URL=", "3 ".
_REFRESH_DELAY = re.compile(r"\s*[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?", re.IGNORECASE)

# lexbor's tree builder scans the stack of open elements on many start tags, so nesting N
# deep costs O(N²) time (100,000 unclosed <div>s take ~25 s). A page that may nest deeper
# than this is parsed with only the tags the summary reads, which cannot nest deeply.
_MAX_DEPTH = 2048
_DEPTH_CHUNK = 4096
_START_OR_END_TAG = re.compile(
    r"<(/?)(?!(?:area|base|br|col|embed|hr|img|input|link|meta|source|track|wbr)[\s/>])[a-z]",
    re.IGNORECASE,
)
_UNREAD_TAG = re.compile(
    r"</?(?!(?:a|area|base|body|frame|frameset|h[1-6]|head|html|iframe|link|meta|script|style"
    r"|title)[\s/>])[a-z][^>]*>",
    re.IGNORECASE,
)


def summarize(document: Document, options: EssenceOptions) -> Parts:
    """Summarize an HTML page: ``Title``, ``Author``, ``Description``, ``Keywords``,
    ``Language``, ``Date-Published``, ``Date-Modified``, ``Headings`` (the main content's),
    ``URL-References``, ``Abstract`` (the main content's opening) and, with ``full_text``,
    ``Full-Text`` (the main content's text); with the canonical URL and the fingerprint of
    the main content for the caller's duplicate checks."""
    data = document.content
    text = decode(data, document.charset, _declared_charset(data[:_PRESCAN_BYTES]))
    tree = LexborHTMLParser(_shallow(text))
    meta = read_metadata(tree)  # before scripts go: JSON-LD is a script
    resolver = _resolver(tree, document.url)
    links = () if meta.nofollow else _links(tree, resolver)  # noscript links count too
    title_node = tree.css_first(_TITLE)
    title = collapse(title_node.text()) if title_node is not None else ""
    tree.strip_tags(_INVISIBLE, recursive=True)
    main = main_node(tree)
    # A separator between text nodes never glues two words together; the price is a space
    # before punctuation that follows markup ("see <a>this</a>, then" -> "this , then").
    main_text = collapse(main.text(separator=" ")) if main is not None else ""
    main_headings = headings(main) if main is not None else []
    language = meta.languages[0] if meta.languages else detect_language(main_text)
    found = meta.keywords or extract_keywords(
        main_text, language, min(options.max_keywords, _EXTRACTED_KEYWORDS)
    )
    return Parts(
        attributes=attributes(
            ("Title", title or _first(meta.titles) or _first(main_headings)),
            ("Author", "\n".join(meta.authors)),
            ("Description", _first(meta.descriptions)),
            ("Keywords", "\n".join(found)),
            ("Language", language),
            ("Date-Published", _first(meta.published)),
            ("Date-Modified", _first(meta.modified)),
            ("Headings", "\n".join(main_headings)),
            ("URL-References", "\n".join(links)),
            ("Abstract", utf8_prefix(main_text, options.abstract_bytes)),
            ("Full-Text", main_text if options.full_text else ""),
        ),
        links=links,
        noindex=meta.noindex,
        canonical=resolver.resolve(meta.canonical) if meta.canonical else None,
        fingerprint=fingerprint(main_text),
    )


def _declared_charset(prefix: bytes) -> str | None:
    """The charset a ``<meta>`` near the top of the page declares, if any."""
    found = _META_CHARSET.search(prefix)
    if found is None:
        return None
    charset = found.group(1).decode("ascii", "replace").lower()
    # Bytes in which an ASCII <meta> can be read are not UTF-16, whatever they say (the
    # HTML standard's rule).
    return "utf-8" if charset.startswith("utf-16") else charset


def _shallow(text: str) -> str:
    """``text``, or, if its elements may nest deeper than ``_MAX_DEPTH``, ``text`` with
    every tag the summary does not read turned into a space."""
    if not _may_nest_deep(text):
        return text
    # An upper bound on nesting, as though nothing but end tags closed an element.
    steps = (-1 if end else 1 for end in _START_OR_END_TAG.findall(text))
    if max(accumulate(steps), default=0) <= _MAX_DEPTH:
        return text
    return _UNREAD_TAG.sub(" ", text)


def _may_nest_deep(text: str) -> bool:
    """Whether ``text`` might nest deeper than ``_MAX_DEPTH``, by a bound counted in C: each
    ``<`` opens an element unless it is ``</``, which closes one; within a chunk the depth is
    at most its depth at the start plus all it opens."""
    depth = 0
    for start in range(0, len(text), _DEPTH_CHUNK):
        end = start + _DEPTH_CHUNK
        tags = text.count("<", start, end)
        if depth + tags > _MAX_DEPTH:
            return True
        ends = text.count("</", start, end)
        depth = max(depth + tags - 2 * ends, 0)  # a stray end tag closes nothing
    return False


def _first(values: list[str]) -> str:
    return values[0] if values else ""


def _resolver(tree: LexborHTMLParser, url: str) -> _Resolver:
    """Resolves the page's references: against ``<base href>``, else the page's URL."""
    base_node = tree.css_first("base[href]")
    base = (_Resolver(url).resolve(base_node.attrs.sget("href")) if base_node else None) or url
    return _Resolver(base)


def _links(tree: LexborHTMLParser, resolver: _Resolver) -> tuple[str, ...]:
    """The page's outgoing links: absolute, without fragments, in order, without repeats."""
    resolved: dict[str, str | None] = {}  # each distinct reference is resolved once
    for node in tree.css(_LINKING):
        reference = _reference(node)
        if reference is not None and reference not in resolved:
            resolved[reference] = resolver.resolve(reference)
    return tuple(dict.fromkeys(link for link in resolved.values() if link))


def _reference(node: LexborNode) -> str | None:
    """The URL an element links to, as written, or None if it links to no document."""
    attrs = node.attrs
    tag = node.tag
    if tag in ("frame", "iframe"):
        return attrs.sget("src")
    if tag == "meta":
        if attrs.sget("http-equiv").strip().lower() != "refresh":
            return None
        # The delay pattern matches at the start of any content, even as an empty match.
        target = _REFRESH_DELAY.sub("", attrs.sget("content"), count=1)
        quote = target[:1]
        return target[1:].partition(quote)[0] if quote in ("'", '"') else target
    if tag == "link":
        rels = set(attrs.sget("rel").lower().split())
        if rels and (not rels & _FOLLOWED_RELS or rels & _RESOURCE_RELS):
            return None
    return attrs.sget("href")


class _Resolver:
    """Makes references absolute against one base URL. ``urljoin`` costs ~12 µs a call and
    pages link to hundreds of URLs, so the plain cases (``/path``, ``name/...`` without dot
    segments) are joined by hand when the base is an http(s) URL."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.origin: str | None = None
        self.directory = ""
        self.parents: list[str] | None = None
        try:
            scheme, netloc, path, _, _ = urlsplit(base)
        except ValueError:  # a malformed base leaves every reference to urljoin (and None)
            return
        if scheme in ("http", "https") and netloc:
            self.origin = f"{scheme}://{netloc}"
            directory = path[: path.rfind("/") + 1] or "/"
            self.directory = self.origin + directory
            # The directories "../", "../../"... lead to (documentation sites link so); a
            # path with empty segments is left to urljoin.
            if directory.startswith("/") and "//" not in directory:
                self.parents = []
                while directory != "/":
                    directory = directory[: directory.rstrip("/").rfind("/") + 1]
                    self.parents.append(self.origin + directory)

    def resolve(self, reference: str) -> str | None:
        """``reference`` made absolute, without its fragment; None when it names no
        fetchable document (empty, fragment-only, a skipped scheme, unparsable)."""
        reference = reference.strip(_URL_WHITESPACE)
        if not reference.isprintable():  # a cheap test; translate() is slow-ish
            reference = reference.translate(_TAB_NEWLINE)
        if not reference or reference.startswith("#"):
            return None
        if reference.partition(":")[0].lower() in _SKIPPED_SCHEMES:
            return None
        reference = reference.partition("#")[0]
        # Dot segments and a bare trailing "?" are what urljoin would rewrite.
        if self.origin is not None and "/." not in reference and not reference.endswith("?"):
            if reference.startswith("/"):
                if not reference.startswith("//"):  # "//host/..." is a network-path reference
                    return self.origin + reference
            elif reference[0] not in "?." and ":" not in reference.partition("/")[0]:
                return self.directory + reference
            elif self.parents is not None and reference.startswith("../"):
                rest = reference
                ups = 0
                while rest.startswith("../"):
                    rest = rest[3:]
                    ups += 1
                if "/." not in "/" + rest and not rest.startswith("?"):
                    # Above the root, ".." stays at the root (RFC 3986, 5.2.4).
                    parent = self.parents[ups - 1] if ups <= len(self.parents) else None
                    return (parent or self.origin + "/") + rest
        try:
            return urljoin(self.base, reference) or None
        except ValueError:  # e.g. a malformed IPv6 host
            return None
