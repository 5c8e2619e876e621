"""RSS (0.9x, 1.0, 2.0) and Atom (0.3, 1.0) feeds, read by feedparser: bytes in, entries out.

Each entry gives its link (an RSS ``guid`` that is a permalink stands in for a missing
``link``) and its date: the later of ``updated`` and ``published``. feedparser reads a feed
that is not well-formed XML with a forgiving parser of its own; the entries are kept and the
fault is the listing's ``problem``. Defused: the input is held to 50 MB and 50,000 entries,
and a DOCTYPE with an internal subset (where entity-expansion bombs live; feeds need none)
is refused before feedparser sees it. Pure (feedparser is given the bytes, never a URL).
"""

from __future__ import annotations

import calendar
import io
import re
import time
from typing import Any

import feedparser

from gatherer.errors import ListingError
from gatherer.listings.model import MAX_ENTRIES, Entry, Listing, ListingKind, absolute

# A DOCTYPE with an internal subset, before the root element.
_INTERNAL_SUBSET = re.compile(rb"<!DOCTYPE[^>\[]*\[", re.IGNORECASE)
_PROLOG_BYTES = 16 * 1024


def parse_feed(content: bytes, *, url: str, now: float, content_type: str | None) -> Listing:
    """The feed in ``content`` (gunzipped, at most 50 MB), fetched from ``url`` with
    ``content_type`` (its charset counts). Relative links are resolved against ``url``.

    Raises ListingError ``malformed`` for a DOCTYPE with an internal subset or for bytes
    feedparser finds no feed in at all.
    """
    prolog = content[:_PROLOG_BYTES]
    root = re.search(rb"<[A-Za-z]", prolog)
    if _INTERNAL_SUBSET.search(prolog[: root.start()] if root else prolog):
        raise ListingError("malformed", "a feed may not have a DOCTYPE with declarations")
    headers = {"content-location": url}
    if content_type is not None:
        headers["content-type"] = content_type
    parsed = feedparser.parse(
        io.BytesIO(content),
        response_headers=headers,
        sanitize_html=False,  # (only links and dates are read: no HTML is cleaned or resolved)
        resolve_relative_uris=False,
    )
    if not parsed.get("version") and not parsed.entries:
        raise ListingError("malformed", f"no feed found: {_fault(parsed)}")
    entries: dict[str, Entry] = {}
    problem = None
    for item in parsed.entries:
        link = _link(item)
        target = absolute(url, link) if link else None
        if target is None or target in entries:
            continue
        if len(entries) == MAX_ENTRIES:
            problem = ListingError("too_many", f"more than {MAX_ENTRIES} entries")
            break
        entries[target] = Entry(target, _date(item, now))
    if problem is None and _malformed(parsed):
        problem = ListingError("malformed", f"not well-formed: {_fault(parsed)}")
    return Listing(ListingKind.FEED, tuple(entries.values()), problem)


# feedparser's entries are dicts whose own lookups map old key names to new ones (with a
# DeprecationWarning); plain dict.get reads exactly the key asked for.


def _link(item: Any) -> str | None:
    """The entry's link: its alternate link, else its first link with an address."""
    link = dict.get(item, "link")
    if isinstance(link, str) and link:
        return link
    for candidate in dict.get(item, "links", ()):
        href = dict.get(candidate, "href")
        if isinstance(href, str) and href:
            return href
    return None


def _date(item: Any, now: float) -> float | None:
    """The later of the entry's updated and published dates (feedparser gives them as UTC
    struct_time); None without either, and for a date after ``now``."""
    dates = [
        calendar.timegm(value)
        for key in ("updated_parsed", "published_parsed")
        if isinstance(value := dict.get(item, key), time.struct_time)
    ]
    latest = max(dates, default=None)
    return float(latest) if latest is not None and latest <= now else None


def _malformed(parsed: Any) -> bool:
    """Did feedparser find the feed broken? Not for its notes on the Content-Type and the
    encoding (a feed served as text/plain, or with a charset its declaration disputes)."""
    fault = parsed.get("bozo_exception")
    return fault is not None and not isinstance(fault, feedparser.ThingsNobodyCaresAboutButMe)


def _fault(parsed: Any) -> str:
    fault = parsed.get("bozo_exception")
    return f"{type(fault).__name__}: {fault}" if fault is not None else "unknown"
