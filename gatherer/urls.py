"""URL arithmetic for the crawl: normal forms, link resolution and the keys hosts go by.

Pure string functions over ``urllib.parse``. ``normalize`` gives the form the frontier
deduplicates on (RFC 3986 section 6.2.2 syntax-based normalization plus the scheme's default
port); ``host_key`` names a server for politeness ("scheme://host:port"); ``access_method``
maps a scheme to Harvest's ``Access=`` names.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import quote, urljoin, urlsplit

from gatherer.errors import FetchError

_DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21, "gopher": 70}
_METHODS = {"http": "HTTP", "https": "HTTP", "ftp": "FTP", "gopher": "GOPHER", "file": "FILE"}
# Links that name no document to fetch.
_UNUSABLE = frozenset({"javascript", "mailto", "data"})
# Reserved characters (RFC 3986 section 2.2) keep their meaning, so they stay as they are;
# "%" too, so existing escapes are not doubled. Everything else that may not appear in a URL
# (space, quotes, non-ASCII...) is percent-encoded as UTF-8.
_SAFE = ":/?#[]@!$&'()*+,;=%"
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class _Parts(NamedTuple):
    scheme: str  # lower case
    userinfo: str  # as given, with its "@" ("" when absent)
    host: str  # lower case, IPv6 without brackets
    port: int | None  # None when absent or the scheme's default
    path: str
    query: str | None  # None when absent


def normalize(url: str) -> str:
    """The normal form of ``url``: lower-case scheme and host, no default port, no fragment,
    "/" for an empty path, dot segments resolved, percent-escapes of unreserved characters
    decoded and all others upper-cased. IDNA host names are left as given.

    Never raises: a string that does not parse as a URL comes back stripped of surrounding
    white space and otherwise unchanged, so the result is stable (``normalize`` is idempotent).
    """
    parts = _parse(url.strip())
    return url.strip() if parts is None else _unparse(parts)


def join(base: str, link: str) -> str | None:
    """``link`` resolved against ``base`` and normalized; None when it names nothing to fetch
    (empty, ``javascript:``, ``mailto:``, ``data:``, no scheme, or unparsable)."""
    link = link.strip()
    if not link:
        return None
    try:
        parts = _parse(urljoin(base, link))
    except ValueError:  # urljoin itself refuses some malformed authorities
        return None
    if parts is None or not parts.scheme or parts.scheme in _UNUSABLE:
        return None
    return _unparse(parts)


def access_method(url: str) -> str | None:
    """Harvest's name for the URL's access method: "HTTP" (http and https), "FTP", "GOPHER",
    "FILE"; None for other schemes, unparsable URLs and network URLs without a host."""
    parts = _parse(url)
    if parts is None:
        return None
    method = _METHODS.get(parts.scheme)
    if method is None or (not parts.host and parts.scheme in _DEFAULT_PORTS):
        return None
    return method


def host_port(url: str) -> tuple[str, int]:
    """The server a URL names: the host (lower case, IPv6 without brackets) and the port,
    the scheme's default when absent (0 for FILE; an empty FILE host is "localhost").

    Raises FetchError (kind ``refused``) for a URL ``access_method`` refuses.
    """
    parts = _parse(url)
    if parts is None or access_method(url) is None:
        raise FetchError(url, "refused", "not a URL the gatherer can fetch")
    host = parts.host or "localhost"
    return host, parts.port or _DEFAULT_PORTS.get(parts.scheme, 0)


def authority(url: str) -> str:
    """ "host:port" with the port always explicit (IPv6 in brackets): what host filters match."""
    host, port = host_port(url)
    return f"{_bracket(host)}:{port}"


def host_key(url: str) -> str:
    """ "scheme://host:port" with the port always explicit: the unit of politeness. http and
    https on one host are different servers."""
    return f"{_parse_or_refuse(url).scheme}://{authority(url)}"


def origin(url: str) -> str:
    """ "scheme://host[:port]" with a default port left out (IPv6 in brackets)."""
    parts = _parse_or_refuse(url)
    host, _ = host_port(url)
    port = "" if parts.port is None else f":{parts.port}"
    return f"{parts.scheme}://{_bracket(host)}{port}"


def path_query(url: str) -> str:
    """The path and, when present, "?" and the query: what URL filters match."""
    parts = _parse_or_refuse(url)
    return parts.path if parts.query is None else f"{parts.path}?{parts.query}"


def _parse_or_refuse(url: str) -> _Parts:
    parts = _parse(url)
    if parts is None:
        raise FetchError(url, "refused", "not a URL")
    return parts


@lru_cache(maxsize=4096)  # the frontier asks several questions of each URL it is offered
def _parse(url: str) -> _Parts | None:
    try:
        split = urlsplit(url)
        port = split.port
    except ValueError:  # a bad port or IPv6 literal
        return None
    scheme = split.scheme.lower()
    userinfo, _, _ = split.netloc.rpartition("@")
    if port == _DEFAULT_PORTS.get(scheme):
        port = None
    path = _clean(split.path)
    if not path and split.netloc:
        path = "/"
    if path.startswith("/"):
        path = _remove_dot_segments(path)
    # urlsplit drops an empty query and fragment alike: "?" alone counts as no query.
    query = _clean(split.query) if split.query else None
    return _Parts(
        scheme, userinfo + "@" if userinfo else "", split.hostname or "", port, path, query
    )


def _unparse(parts: _Parts) -> str:
    host = _bracket(parts.host)
    port = "" if parts.port is None else f":{parts.port}"
    query = "" if parts.query is None else f"?{parts.query}"
    if not parts.scheme:
        return f"{parts.path}{query}"
    # "file:/x" gains the empty authority of "file:///x"; "http:x" has no authority to gain.
    # A path starting "//" always does, or it would be read back as an authority ("news:////"
    # would become "news://", whose path is empty: RFC 3986 3.3).
    authority = host or parts.userinfo or port or parts.path[:2] == "//"
    if authority or (parts.scheme in _METHODS and parts.path[:1] == "/"):
        return f"{parts.scheme}://{parts.userinfo}{host}{port}{parts.path}{query}"
    return f"{parts.scheme}:{parts.path}{query}"


def _clean(text: str) -> str:
    # Percent-encode what may not appear, then make every escape canonical.
    quoted = quote(text, safe=_SAFE, errors="surrogatepass")
    return _ESCAPE.sub(_canonical_escape, quoted)


def _canonical_escape(match: re.Match[str]) -> str:
    char = chr(int(match[1], 16))
    return char if char in _UNRESERVED else f"%{match[1].upper()}"


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for an absolute path: "/a/b/../c" → "/a/c"."""
    segments = path.split("/")
    out: list[str] = []
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")  # "/a/b/.." names the directory "/a/"
    return "/" + "/".join(out)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
