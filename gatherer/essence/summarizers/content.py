"""Main-content extraction: which part of an HTML page is its content, and which is the frame
around it (navigation, sidebars, headers, footers, cookie banners, share buttons).

A heuristic on the lexbor tree the HTML summarizer has already parsed, so it costs no second
parse (bench/README.md, "Main content", compares it with trafilatura, jusText,
readability-lxml and resiliparse on real sites). In order:

1. The page names its content: its ``<main>`` (or ``role=main``) if that holds some text,
   else the largest ``[itemprop=articleBody]`` or ``<article>`` holding a fair share of the
   page's text.
2. Otherwise the frame is removed (elements that are frame by their tag, their ARIA role, or
   their class or id, unless they hold most of the page's text and are not mostly links) and
   the content is the deepest element holding most of the remaining paragraph text.

Within the content the frame is removed again (a table of contents, a share bar), and so is
anything that only decorates headings (Sphinx's pilcrow links).
"""

from __future__ import annotations

import re
from collections import Counter

from selectolax.lexbor import LexborHTMLParser, LexborNode

# Elements a page marks as its content: the one it names its main content (trusted once it
# holds some text), and articles (trusted when they hold a fair share of the page's text: an
# <article> may be a teaser in a sidebar).
_MAIN = "main, [role=main]"
_MAIN_MIN_CHARS = 200
_ARTICLES = "[itemprop=articleBody], article"
# Elements that are frame by their tag or role wherever they are.
_FRAME_TAGS = frozenset({"nav", "aside", "header", "footer", "form", "dialog", "button", "select"})
_FRAME_ROLES = frozenset(
    {
        "navigation",
        "banner",
        "contentinfo",
        "complementary",
        "search",
        "menu",
        "menubar",
        "dialog",
        "alertdialog",
        "toolbar",
    }
)
# Elements whose class or id may say they are frame; ``header`` is frame unless it holds the
# page's first-level heading (an article's own header).
_FRAME_CANDIDATES = (
    "nav, aside, footer, form, dialog, button, select, header, [role],"
    " div[class], div[id], section[class], section[id], ul[class], ul[id], table[class]"
)
# Elements whose class or id can make them frame (containers: anything else found by its role).
_NAMED_FRAME_TAGS = frozenset({"div", "section", "ul", "table"})
# Words of a class or id that name frame. Matched as whole words of the attribute, where
# words are separated by spaces, hyphens or underscores ("main-nav", "cookie_banner").
_FRAME_WORDS = re.compile(
    r"(?:^|[\s_-])(?:nav|navbar|navigation|navheader|navfooter|menu|menubar|sidebar"
    r"|sphinxsidebar|sidenav|sidebarbutton|breadcrumbs?|footer|masthead|banner|cookies?"
    r"|consent|gdpr|share|sharing|social|related|advert|advertisement|ads|promo|skip"
    r"|skiplink|toolbar|pagination|pager|subscribe|newsletter|popup|modal|headerlink"
    r"|switcher|mobile-nav|comments?|toc|tagline)(?:$|[\s_-])",
    re.IGNORECASE,
)
# An article holding less of the page's text than this is not its content; a frame element
# holding more is kept whatever its name or tag (a page wrapper with the class "has-sidebar",
# an ASP.NET page inside one <form>), unless it is mostly links (a long table of contents).
_ARTICLE_SHARE = 0.25
_FRAME_SHARE = 0.5
_LINK_SHARE = 0.5
# Blocks of running text; a block shorter than this is a caption or a link, not a paragraph.
# (List items are not: nested lists make a table of contents' items long.)
_PARAGRAPHS = "p, pre, blockquote, dd, td"
_PARAGRAPH_CHARS = 60
# The content is the deepest element holding this share of the paragraph text.
_CONTENT_SHARE = 0.9
_HEADINGS = "h1, h2, h3, h4, h5, h6"
# What decorates a heading rather than being part of it: permalink marks.
_HEADING_MARKS = "¶§#🔗 \u00a0"


def main_node(tree: LexborHTMLParser) -> LexborNode | None:
    """The element holding ``tree``'s main content, with the frame inside it removed; None for
    a page without a body. Removes the frame from ``tree`` (it is changed in place) and
    expects script, style and template elements to be gone already."""
    body = tree.body
    if body is None:
        return None
    # The page's text is measured only when its own <main> is not the content.
    content = _main(tree) or _article(tree, page_chars := _text_length(body))
    if content is not None:
        _remove_frame(content, _text_length(content))
    else:
        _remove_frame(body, page_chars)
        content = _densest(body)
    for mark in content.css("a.headerlink"):
        mark.decompose()
    return content


def headings(node: LexborNode) -> list[str]:
    """The headings within ``node``, in order, whitespace collapsed, permalink marks dropped."""
    found = (
        " ".join(h.text(separator=" ").split()).strip(_HEADING_MARKS) for h in node.css(_HEADINGS)
    )
    return [heading for heading in found if heading]


def main_text(html: str) -> str:
    """The main content's text of a whole page, whitespace collapsed (for comparisons with
    other extractors: the summarizer works on the tree it has already parsed)."""
    tree = LexborHTMLParser(html)
    tree.strip_tags(["script", "style", "noscript", "template"], recursive=True)
    node = main_node(tree)
    return " ".join(node.text(separator=" ").split()) if node is not None else ""


def _text_length(node: LexborNode) -> int:
    return len(node.text(separator=" "))


def _main(tree: LexborHTMLParser) -> LexborNode | None:
    """The element the page names its main content, if it holds some text."""
    for node in tree.css(_MAIN):
        if _text_length(node) >= _MAIN_MIN_CHARS:
            return node
    return None


def _article(tree: LexborHTMLParser, page_chars: int) -> LexborNode | None:
    """The largest article, if it holds a fair share of the page's text."""
    best: LexborNode | None = None
    best_chars = int(page_chars * _ARTICLE_SHARE)
    for node in tree.css(_ARTICLES):
        chars = _text_length(node)
        # A larger one wins; of equal ones the first (the outer, in document order) does.
        if chars > best_chars:
            best, best_chars = node, chars
    return best


def _remove_frame(scope: LexborNode, scope_chars: int) -> None:
    """Remove the frame elements within ``scope`` (not ``scope`` itself)."""
    limit = scope_chars * _FRAME_SHARE
    for node in scope.css(_FRAME_CANDIDATES):
        if node.parent is None or not _is_frame(node):
            continue  # not frame, or inside frame already removed
        if node.tag == "header" and node.css_first("h1") is not None:
            continue
        chars = _text_length(node)
        if chars > limit and _link_chars(node) < chars * _LINK_SHARE:
            continue
        node.decompose()


def _link_chars(node: LexborNode) -> int:
    return sum(_text_length(link) for link in node.css("a"))


def _is_frame(node: LexborNode) -> bool:
    attrs = node.attrs
    tag = node.tag
    if tag in _FRAME_TAGS:
        return True
    if attrs.sget("role").strip().lower() in _FRAME_ROLES:
        return True
    # By name only a container: an inline element's class names what it does to its text
    # (Sphinx's headings are links of the class "toc-backref").
    if tag not in _NAMED_FRAME_TAGS:
        return False
    return _FRAME_WORDS.search(f"{attrs.sget('class')} {attrs.sget('id')}") is not None


def _densest(body: LexborNode) -> LexborNode:
    """The deepest element holding ``_CONTENT_SHARE`` of the paragraph text under ``body``
    (``body`` itself when the text is spread or there is none)."""
    held: Counter[int] = Counter()
    nodes: dict[int, LexborNode] = {}
    depth: dict[int, int] = {}
    total = 0
    body_id = body.mem_id
    for paragraph in body.css(_PARAGRAPHS):
        chars = _text_length(paragraph)
        if chars < _PARAGRAPH_CHARS:
            continue
        total += chars
        ancestor = paragraph.parent
        ancestors: list[LexborNode] = []
        while ancestor is not None and ancestor.mem_id != body_id:
            ancestors.append(ancestor)
            ancestor = ancestor.parent
        for level, node in enumerate(reversed(ancestors)):
            key = node.mem_id
            held[key] += chars
            nodes[key] = node
            depth[key] = level
    if not total:
        return body
    enough = total * _CONTENT_SHARE
    deep = [key for key, chars in held.items() if chars >= enough]
    if not deep:
        return body
    return nodes[max(deep, key=depth.__getitem__)]
