"""Invalidation after unsafe requests (RFC 9111 4.4).

A successful POST, PUT, DELETE (or any method not known to be safe) may have changed the
target resource, so stored responses for it must go; likewise for the URIs its Location and
Content-Location name, when they share the target's origin (another origin must not be able
to evict this one's responses).
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from harvest_cache.errors import RequestError
from harvest_cache.http.headers import Headers
from harvest_cache.http.target import Target, parse_absolute

# RFC 9110 9.2.1. Method names are case-sensitive, so "get" is an unknown, unsafe method.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


def invalidates(method: str, status: int) -> bool:
    """Whether a response with ``status`` to ``method`` invalidates the target URI: an unsafe
    method and a non-error (2xx or 3xx) status."""
    return method not in SAFE_METHODS and 200 <= status < 400


def invalidated_urls(request_url: str, response_headers: Headers) -> list[str]:
    """The target URI, then the same-origin URIs in Location and Content-Location.

    ``request_url`` is the target as the caller keys it; the others are resolved against it
    and put in the same canonical form (``Target.url``). Malformed ones are skipped.
    """
    target = _resolve(request_url, "")
    urls = [request_url]
    if target is None:
        return urls
    for name in ("Location", "Content-Location"):
        for value in response_headers.get_all(name):
            other = _resolve(request_url, value.strip())
            if other is not None and _origin(other) == _origin(target) and other.url not in urls:
                urls.append(other.url)
    return urls


def _resolve(base: str, reference: str) -> Target | None:
    """``reference`` resolved against ``base``, without its fragment; None if malformed."""
    try:
        url = urlsplit(urljoin(base, reference))._replace(fragment="").geturl()
        return parse_absolute(url)
    except (RequestError, ValueError):
        return None


def _origin(target: Target) -> tuple[str, str, int]:
    return target.scheme, target.host, target.port
