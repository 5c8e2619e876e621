"""A directory as a document: what FILE and FTP give for a directory.

The content is a plain listing, one name a line (directories with a trailing "/"), and the
links are the entries' URLs. Hidden entries (names starting with ".") are left out.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

from gatherer.errors import FetchError
from gatherer.fetch.result import Fetched

DIRECTORY_TYPE = "text/directory"
# What may stay unescaped in a path segment (RFC 3986 pchar, besides unreserved characters).
_SEGMENT_SAFE = "!$&'()*+,;=:@"


class Listing:
    """Collects a directory's entries up to ``max_bytes`` of listing text. Past that it keeps
    counting but not storing, so that a reader can drain the rest before failing."""

    def __init__(self, url: str, max_bytes: int) -> None:
        self._url = url
        self._max_bytes = max_bytes
        self._entries: list[tuple[str, bool]] = []
        self._size = 0

    def add(self, name: str, is_dir: bool) -> None:
        if name.startswith(".") or not name:
            return
        self._size += len(name.encode("utf-8", "surrogateescape")) + 2  # ("/" and newline)
        if self._size <= self._max_bytes:
            self._entries.append((name, is_dir))

    def document(self, *, modified: float | None = None, peer: str | None = None) -> Fetched:
        """The listing as a Fetched; ``too_large`` if it outgrew ``max_bytes``."""
        if self._size > self._max_bytes:
            raise FetchError(self._url, "too_large", f"listing over {self._max_bytes} bytes")
        parts = urlsplit(self._url)
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        base = urlunsplit(parts._replace(path=path, query="", fragment=""))
        names: list[str] = []
        links: list[str] = []
        for name, is_dir in sorted(self._entries):
            slash = "/" if is_dir else ""
            names.append(name + slash)
            links.append(base + quote(name, safe=_SEGMENT_SAFE, errors="surrogateescape") + slash)
        text = "".join(f"{name}\n" for name in names)
        return Fetched(
            url=self._url,
            content=text.encode("utf-8", "surrogateescape"),
            content_type=DIRECTORY_TYPE,
            modified=modified,
            links=tuple(links),
            peer=peer,
        )
