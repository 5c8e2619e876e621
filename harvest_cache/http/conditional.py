"""Evaluating a client's conditional request against a stored response (RFC 9110 13.1-13.2).

A cache answers ``If-None-Match`` / ``If-Modified-Since`` itself when it serves from storage
(RFC 9111 4.3.2), so browsers with their own caches get 304s without an origin round trip.
"""

from __future__ import annotations

from harvest_cache.http.dates import parse_http_date
from harvest_cache.http.headers import Headers

CONDITIONAL_FIELDS = (
    "If-Match",
    "If-None-Match",
    "If-Modified-Since",
    "If-Unmodified-Since",
    "If-Range",
)

# Fields a 304 carries from the stored response (RFC 9110 15.4.5).
NOT_MODIFIED_FIELDS = frozenset(
    {"cache-control", "content-location", "date", "etag", "expires", "vary"}
)


def _opaque(tag: str) -> str:
    return tag[2:] if tag.startswith("W/") else tag


def none_match(if_none_match: list[str], etag: str | None) -> bool:
    """True when If-None-Match fails (a listed tag weakly matches): the answer is 304."""
    if etag is None:
        return False
    if "*" in if_none_match:
        return True
    wanted = _opaque(etag.strip())
    return any(_opaque(tag) == wanted for tag in if_none_match)


def not_modified(request: Headers, stored: Headers) -> bool:
    """Whether a GET/HEAD with these conditionals is answered 304 from ``stored``."""
    inm = request.get_list("If-None-Match")
    if inm:
        return none_match(inm, stored.get("ETag"))
    ims = request.get("If-Modified-Since")
    if ims is None:
        return False
    since = parse_http_date(ims)
    modified = parse_http_date(stored.get("Last-Modified") or "")
    return since is not None and modified is not None and modified <= since


def has_conditionals(request: Headers) -> bool:
    return any(name in request for name in CONDITIONAL_FIELDS)


def not_modified_headers(stored: Headers) -> Headers:
    return Headers((n, v) for n, v in stored if n.lower() in NOT_MODIFIED_FIELDS)
