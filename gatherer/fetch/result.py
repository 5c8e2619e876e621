"""What every fetcher returns, whatever the scheme."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Validators:
    """What the database remembers of the last fetch, sent back to skip unchanged documents."""

    etag: str | None = None
    last_modified: str | None = None  # the HTTP-date exactly as the server sent it
    md5: str | None = None  # hex MD5 of the last content, for sources without validators


@dataclass(frozen=True, slots=True)
class Fetched:
    """The outcome of one successful fetch.

    ``not_modified`` is True when the source said the document has not changed (HTTP 304, or
    FILE/FTP with the same modification time and size); then ``content`` is empty.
    ``url`` is the final URL after redirects; ``redirects`` the URLs passed through before it.
    ``modified`` is the document's modification time in epoch seconds, when the source says.
    ``request_head`` / ``response_head`` are the raw header blocks as sent and received (HTTP
    only; empty for other schemes), kept for the WARC archive.
    ``links`` are links the scheme itself gives (directory listings, Gopher menus); HTML links
    come from Essence instead.
    """

    url: str
    content: bytes
    content_type: str | None = None
    charset: str | None = None
    status: int = 200
    not_modified: bool = False
    etag: str | None = None
    last_modified: str | None = None
    modified: float | None = None
    redirects: tuple[str, ...] = ()
    request_head: bytes = b""
    response_head: bytes = b""
    links: tuple[str, ...] = ()
    peer: str | None = None  # the IP address the bytes came from, when known

    def __repr__(self) -> str:
        flag = " not-modified" if self.not_modified else ""
        return f"Fetched({self.url!r}, {self.status}, {len(self.content)} bytes{flag})"
