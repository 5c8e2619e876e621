"""Listings: documents that list other documents to gather, with the dates they last changed.

Sitemaps (``urlset``), sitemap indexes (``sitemapindex``, plain or gzipped) and RSS and Atom
feeds. ``recognize`` tells one by its content; ``read_listing`` turns its bytes into a
:class:`Listing` of entries. Both are pure and bounded (50 MB uncompressed, 50,000 entries),
and raise nothing but :class:`~gatherer.errors.ListingError`; reading is CPU work the caller
runs off the event loop. ``model`` holds the values and the stored form, ``content`` the
recognition and gunzipping, ``sitemap`` and ``feed`` the two readers.
"""

from __future__ import annotations

from gatherer.listings.content import chunks, recognize
from gatherer.listings.feed import parse_feed
from gatherer.listings.model import (
    MAX_BYTES,
    MAX_ENTRIES,
    Entry,
    Listing,
    ListingKind,
    decode,
    encode,
    w3c_date,
)
from gatherer.listings.sitemap import parse_sitemap

__all__ = [
    "MAX_BYTES",
    "MAX_ENTRIES",
    "Entry",
    "Listing",
    "ListingKind",
    "chunks",
    "decode",
    "encode",
    "parse_feed",
    "parse_sitemap",
    "read_listing",
    "recognize",
    "w3c_date",
]


def read_listing(
    kind: ListingKind, content: bytes, *, url: str, now: float, content_type: str | None
) -> Listing:
    """The listing ``recognize`` found ``content`` to be, read (see ``parse_sitemap`` and
    ``parse_feed`` for what each raises and what stops it early)."""
    if kind is ListingKind.FEED:
        return parse_feed(b"".join(chunks(content)), url=url, now=now, content_type=content_type)
    return parse_sitemap(chunks(content), url=url, now=now)
