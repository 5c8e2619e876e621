"""One document, one record: which URL a document is gathered under when a site serves it under
several. Pure bookkeeping; the crawl controller asks and acts.

- **Canonical URLs**: a web page may name its own URL (``<link rel=canonical>``); when that is
  another http(s) URL, the page is gathered there instead (``canonical_target``), if the
  enumeration accepts it.
- **Near-duplicates**: documents whose text fingerprints (gatherer.essence.fingerprint) are at
  most ``NEAR`` bits apart are the same text; the first one stored is kept
  (``NearDuplicates``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from urllib.parse import urlsplit

from gatherer.essence.fingerprint import NEAR, bands, distance

_WEB_SCHEMES = frozenset({"http", "https"})


def canonical_target(url: str, canonical: str | None) -> str | None:
    """The URL a document at ``url`` should be gathered under instead, or None to keep
    ``url``. Only a web page naming another web URL moves: a canonical of another scheme (a
    documentation package naming its ``file:`` path) says nothing about where the web serves
    it."""
    if canonical is None or canonical == url:
        return None
    try:
        schemes = {urlsplit(url).scheme.lower(), urlsplit(canonical).scheme.lower()}
    except ValueError:
        return None
    return canonical if schemes <= _WEB_SCHEMES else None


class NearDuplicates:
    """The fingerprints of the stored documents, by URL, searchable for near-duplicates.

    Each fingerprint is filed under each of its ``NEAR + 1`` bands, so a search looks only at
    the fingerprints that share a band with the one asked about."""

    def __init__(self, entries: Iterable[tuple[str, int]] = ()) -> None:
        self._by_url: dict[str, int] = {}
        self._by_band: list[defaultdict[int, set[str]]] = [
            defaultdict(set) for _ in range(NEAR + 1)
        ]
        for url, value in entries:
            self.put(url, value)

    def __len__(self) -> int:
        return len(self._by_url)

    def __repr__(self) -> str:
        return f"<NearDuplicates {len(self)} documents>"

    def find(self, url: str, value: int) -> str | None:
        """A stored document other than ``url`` whose text is a near-duplicate of one with
        fingerprint ``value`` (the first by URL, where several are: the same one every time), or
        None."""
        found: list[str] = []
        for index, band in zip(self._by_band, bands(value), strict=True):
            for other in index.get(band, ()):
                if other != url and distance(self._by_url[other], value) <= NEAR:
                    found.append(other)
        return min(found) if found else None

    def put(self, url: str, value: int | None) -> None:
        """File ``url``'s fingerprint (None: it has none), replacing one filed before."""
        self.remove(url)
        if value is None:
            return
        self._by_url[url] = value
        for index, band in zip(self._by_band, bands(value), strict=True):
            index[band].add(url)

    def remove(self, url: str) -> None:
        value = self._by_url.pop(url, None)
        if value is None:
            return
        for index, band in zip(self._by_band, bands(value), strict=True):
            members = index[band]
            members.discard(url)
            if not members:
                del index[band]
