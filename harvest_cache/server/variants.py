"""The entity tags of the stored variants of URLs that vary, to validate several at once.

A request whose selecting fields match none of a URL's stored variants (a vary-miss) asks the
origin whether one of them would do: its If-None-Match lists their entity tags (RFC 9111
4.3.1), and a 304 names the one that applies by its ETag (4.3.4). This index is a hint kept in
memory: after a restart, or for a variant evicted meanwhile, the request is simply fetched.
"""

from __future__ import annotations

from collections import OrderedDict

# Enough for the variants that matter (encodings, a few languages), and keeps the request's
# If-None-Match short.
_PER_URL = 16
_URLS = 10_000


class VariantTags:
    """Per URL, the Vary marker generation seen last and, by variant key, the ETag it was
    stored with; the least recently recorded URLs are forgotten first."""

    def __init__(self, urls: int = _URLS, per_url: int = _PER_URL) -> None:
        self._urls = urls
        self._per_url = per_url
        self._tags: OrderedDict[str, tuple[str, dict[str, str]]] = OrderedDict()

    def record(self, url: str, generation: str, key: str, etag: str | None) -> None:
        """Variant ``key`` of ``url`` (under marker ``generation``) was stored with ``etag``
        (its ETag field value; None forgets the variant)."""
        entry = self._tags.get(url)
        if entry is None or entry[0] != generation:
            entry = (generation, {})  # a new marker orphaned the older variants
        tags = entry[1]
        tags.pop(key, None)
        if etag is not None:
            if len(tags) >= self._per_url:
                del tags[next(iter(tags))]
            tags[key] = etag
        self._tags[url] = entry
        self._tags.move_to_end(url)
        while len(self._tags) > self._urls:
            self._tags.popitem(last=False)

    def candidates(self, url: str, generation: str) -> tuple[tuple[str, str], ...]:
        """(variant key, ETag) of the variants stored under ``generation``, oldest first."""
        entry = self._tags.get(url)
        if entry is None or entry[0] != generation:
            return ()
        return tuple(entry[1].items())
