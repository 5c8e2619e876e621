"""Is a fetched document a listing, and which: told by its content (the root element, looked
for past a gzip wrapping), never by its name; a document served as HTML is a page. And the
bytes of a listing, gunzipped in chunks under the size limit. Pure.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator

from gatherer.errors import ListingError
from gatherer.listings.model import MAX_BYTES, ListingKind

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 64 * 1024
# The root element is looked for in this much of the (inflated) start: room for a long
# licence comment or a stylesheet instruction before it.
_SNIFF_BYTES = 16 * 1024
# What may stand before the root element: white space, the XML declaration, processing
# instructions, comments, a DOCTYPE (with an internal subset). One at a time, so no pattern
# backtracks over another's text.
_PROLOG_ITEM = re.compile(
    rb"\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE(?:[^\[>]|\[[^\]]*\])*>", re.DOTALL | re.IGNORECASE
)
_ROOT = re.compile(rb"<([A-Za-z_][\w.-]*(?::[A-Za-z_][\w.-]*)?)([^>]*)")
_XMLNS = re.compile(rb"""\bxmlns(?::([\w.-]+))?\s*=\s*["']([^"']*)["']""")
_ATOM = frozenset({b"http://www.w3.org/2005/Atom", b"http://purl.org/atom/ns#"})
_RDF = b"http://www.w3.org/1999/02/22-rdf-syntax-ns#"
_RSS1 = b"http://purl.org/rss/1.0/"
# Types a listing is never served as: a page, or media.
_NOT_LISTING_TYPES = ("text/html", "application/xhtml+xml", "image/", "audio/", "video/")


def recognize(content: bytes, content_type: str | None) -> ListingKind | None:
    """The kind of listing ``content`` is, or None for any other document.

    A sitemap's root is ``urlset`` or ``sitemapindex`` (in the sitemaps.org namespace, an
    older one with "/sitemap/" in it, or none); a feed's is RSS's ``rss``, RSS 1.0's
    ``rdf:RDF`` with the RSS 1.0 namespace, or Atom's ``feed`` in an Atom namespace. Anything
    served as HTML or media is not a listing, whatever its content.
    """
    if content_type is not None and content_type.lower().startswith(_NOT_LISTING_TYPES):
        return None
    head = _head(content)
    position = 3 if head.startswith(b"\xef\xbb\xbf") else 0
    while match := _PROLOG_ITEM.match(head, position):
        position = match.end()
    root = _ROOT.match(head, position)
    if root is None:
        return None
    prefix, _, local = root[1].rpartition(b":")
    namespaces = {(name or b""): uri for name, uri in _XMLNS.findall(root[2])}
    namespace = namespaces.get(prefix)
    if local in (b"urlset", b"sitemapindex") and (namespace is None or b"/sitemap" in namespace):
        return ListingKind.SITEMAP if local == b"urlset" else ListingKind.SITEMAP_INDEX
    if root[1] == b"rss":
        return ListingKind.FEED
    if local == b"feed" and namespace in _ATOM:
        return ListingKind.FEED
    if local == b"RDF" and namespace == _RDF and _RSS1 in namespaces.values():
        return ListingKind.FEED
    return None


def _head(content: bytes) -> bytes:
    """The first bytes of the document, inflated if it is gzipped (a corrupt gzip start is
    no listing)."""
    if not content.startswith(_GZIP_MAGIC):
        return content[:_SNIFF_BYTES]
    try:
        return zlib.decompressobj(wbits=31).decompress(content[:_SNIFF_BYTES], _SNIFF_BYTES)
    except zlib.error:
        return b""


def chunks(content: bytes, limit: int = MAX_BYTES) -> Iterator[bytes]:
    """The listing's bytes in chunks, gunzipped if gzipped (members one after another, as
    gzip reads them). Raises ListingError ``too_large`` once more than ``limit`` bytes have
    come out, before inflating further (so a gzip bomb costs ``limit`` at most), and
    ``compression`` for a corrupt or cut gzip stream, after the good chunks before it."""
    if not content.startswith(_GZIP_MAGIC):
        if len(content) > limit:
            raise ListingError("too_large", f"more than {limit} bytes")
        yield content
        return
    total = 0
    data = content
    while data:  # one turn per gzip member
        inflater = zlib.decompressobj(wbits=31)
        while not inflater.eof:  # bounded: each turn consumes input or ends the member
            try:
                out = inflater.decompress(data, _CHUNK)
            except zlib.error as error:
                raise ListingError("compression", f"corrupt gzip data: {error}") from error
            data = inflater.unconsumed_tail
            total += len(out)
            if total > limit:
                raise ListingError("too_large", f"more than {limit} bytes uncompressed")
            if out:
                yield out
            elif not data:
                raise ListingError("compression", "the gzip data ends early")
        data = inflater.unused_data
        if data and not data.startswith(_GZIP_MAGIC):
            break  # trailing bytes after the last member: ignored, as gzip does
