"""The gatherer's typed errors.

::

    GathererError
    ├── ConfigError        bad configuration; ``problems`` lists each as "file:line: reason"
    ├── FetchError         a document could not be fetched; ``kind`` names why (bounded set)
    ├── UnnestError        an archive or compressed file that breaks a limit or is corrupt
    ├── ListingError       a sitemap or feed that cannot be read; ``kind`` names why
    ├── SummarizeError     a summarizer failed, hung, crashed or ran out of memory
    └── DatabaseError      the gatherer database could not be read or written

Malformed SOIF is the shared codec's ``harvest_common.errors.SoifError`` (the database maps a
stored record that does not decode to DatabaseError).

Third-party exceptions (aiohttp, aioftp, OSError, zlib/bz2/lzma/tarfile/zipfile, pypdf,
sqlite3, expat) are mapped to these where the fetchers, unnesting, listings, summarizers and
database call them; nothing matches on exception text.
"""

from __future__ import annotations


class GathererError(Exception):
    """Base of every error the gatherer raises on purpose."""


class ConfigError(GathererError):
    """The configuration is invalid; ``problems`` lists each bad line or key with the reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class FetchError(GathererError):
    """A fetch failed. ``kind`` is one of a small fixed set (it labels metrics):
    ``dns``, ``connect``, ``timeout``, ``status``, ``protocol``, ``too_large``, ``robots``,
    ``redirects``, ``refused`` (scheme or filter), ``io``."""

    def __init__(self, url: str, kind: str, reason: str, *, status: int | None = None) -> None:
        self.url = url
        self.kind = kind
        self.reason = reason
        self.status = status
        super().__init__(f"{url}: {kind}: {reason}")


class UnnestError(GathererError):
    """A nested presentation (gzip, bzip2, xz, tar, zip) that is corrupt or breaks a limit."""


class ListingError(GathererError):
    """A sitemap or feed that cannot be read (wholly, or past some point). ``kind`` is one of
    a small fixed set (it labels metrics): ``malformed`` (not well-formed XML, a bad feed),
    ``not_listing`` (named as a sitemap but something else, such as an HTML page),
    ``too_large`` (past the uncompressed size limit), ``too_many`` (past the entry limit),
    ``compression`` (a corrupt gzip stream)."""

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        super().__init__(f"{kind}: {reason}")


class SummarizeError(GathererError):
    """Summarizing one document failed; ``reason`` says how (crash, timeout, memory, error)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"{url}: {reason}")


class DatabaseError(GathererError):
    """The gatherer database failed (SQLite error, unreadable file)."""
