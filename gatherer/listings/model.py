"""What a listing is once read: its kind and its entries, each a URL and the date it says the
document last changed; the limits every listing is read under; W3C dates; and the compact form
a listing is stored in between runs. Pure."""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urljoin

from gatherer.errors import ListingError

# sitemaps.org: at most 50,000 URLs and 50 MB (52,428,800 bytes) uncompressed per file. Feeds
# are held to the same.
MAX_ENTRIES = 50_000
MAX_BYTES = 52_428_800
# A <loc> longer than this is not a URL anyone serves (sitemaps.org allows 2,048 characters).
MAX_URL_LENGTH = 8192
_DAY = timedelta(days=1)


class ListingKind(enum.Enum):
    """What a listing lists: pages (a sitemap's ``urlset``, a feed's entries) or sitemaps (a
    ``sitemapindex``: its entries stand where it stands, one level further down)."""

    SITEMAP = "sitemap"
    SITEMAP_INDEX = "sitemap index"
    FEED = "feed"

    @property
    def lists_listings(self) -> bool:
        return self is ListingKind.SITEMAP_INDEX


@dataclass(frozen=True, slots=True)
class Entry:
    """One URL a listing names; ``modified`` is when it says the document last changed
    (epoch seconds), None when it does not say."""

    url: str
    modified: float | None = None


@dataclass(frozen=True, slots=True)
class Listing:
    """A sitemap, sitemap index or feed as read: its entries in document order (absolute,
    normalized, each URL once). ``problem``: what stopped reading early (malformed XML past
    the start, too many entries, too large); the entries before it are good and kept."""

    kind: ListingKind
    entries: tuple[Entry, ...]
    problem: ListingError | None = None

    def __repr__(self) -> str:
        problem = f", {self.problem.kind}" if self.problem is not None else ""
        return f"Listing({self.kind.value}, {len(self.entries)} entries{problem})"


def absolute(base: str, location: str) -> str | None:
    """``location`` as an absolute URL (resolved against ``base`` if relative); None if empty,
    too long or not a URL. Not normalized: the frontier normalizes what it is offered."""
    location = location.strip()
    if not location or len(location) > MAX_URL_LENGTH:
        return None
    if location.startswith(("http://", "https://")):
        return location  # the usual case, and the cheap one
    try:
        return urljoin(base, location)
    except ValueError:  # (a malformed authority)
        return None


def w3c_date(text: str, now: float) -> float | None:
    """A W3C Datetime (``2026-11-02``, ``2026-11-02T10:00:00+01:00``, ``...Z``, fractions) as
    epoch seconds; None for anything else, and for a date after ``now`` (a clock or a lie:
    believed, it would have the document fetched on every run).

    A date without a time counts as the end of that day, so a change later on the day of a
    check is not missed; a time without a zone is read as UTC.
    """
    text = text.strip()
    if not 10 <= len(text) <= 40:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if len(text) == 10:  # a date alone
        when += _DAY
    try:
        seconds = when.timestamp()
    except (OverflowError, OSError):  # (years at the ends of the range)
        return None
    return seconds if seconds <= now else None


def encode(listing: Listing) -> bytes:
    """The stored form: the kind, then one ``url<TAB>modified`` line per entry, compressed.
    A problem is not stored: it was counted when the listing was read."""
    lines = [listing.kind.value]
    lines += [
        f"{entry.url}\t{'' if entry.modified is None else repr(entry.modified)}"
        for entry in listing.entries
    ]
    return zlib.compress("\n".join(lines).encode(), 6)


def decode(blob: bytes) -> Listing:
    """A stored listing back; ValueError if ``blob`` is not what :func:`encode` made."""
    try:
        kind, *lines = zlib.decompress(blob).decode().split("\n")
    except (zlib.error, UnicodeDecodeError) as error:
        raise ValueError(f"not a stored listing: {error}") from error
    entries = []
    for line in lines:
        url, _, modified = line.partition("\t")
        entries.append(Entry(url, float(modified) if modified else None))
    return Listing(ListingKind(kind), tuple(entries))
