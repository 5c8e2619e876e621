"""Evaluating a client's conditional request against a stored response (RFC 9110 13.1-13.2).

A cache answers ``If-None-Match`` / ``If-Modified-Since`` itself when it serves from storage
(RFC 9111 4.3.2), so browsers with their own caches get 304s without an origin round trip.
"""

from __future__ import annotations

from harvest_cache.http.dates import header_date
from harvest_cache.http.headers import Headers
from harvest_cache.http.validation import parse_etag, response_etag

CONDITIONAL_FIELDS = (
    "If-Match",
    "If-None-Match",
    "If-Modified-Since",
    "If-Unmodified-Since",
    "If-Range",
)

_CONDITIONAL_NAMES = frozenset(name.lower() for name in CONDITIONAL_FIELDS)

# Fields a 304 carries from the stored response (RFC 9110 15.4.5).
NOT_MODIFIED_FIELDS = frozenset(
    {"cache-control", "content-location", "date", "etag", "expires", "vary"}
)


def none_match(if_none_match: list[str], stored: Headers) -> bool:
    """True when If-None-Match fails (a listed tag weakly matches): the answer is 304."""
    etag = response_etag(stored)
    if etag is None:
        return False
    if "*" in if_none_match:
        return True
    return any(tag is not None and tag.weak_match(etag) for tag in map(parse_etag, if_none_match))


def not_modified(request: Headers, stored: Headers) -> bool:
    """Whether a GET/HEAD with these conditionals is answered 304 from ``stored``."""
    inm = request.get_list("If-None-Match")
    if inm:
        return none_match(inm, stored)
    since = header_date(request, "If-Modified-Since")
    # Without Last-Modified the response's Date is the best estimate (RFC 9110 13.1.3).
    modified = header_date(stored, "Last-Modified") or header_date(stored, "Date")
    return since is not None and modified is not None and modified <= since


def has_conditionals(request: Headers) -> bool:
    return not request.names().isdisjoint(_CONDITIONAL_NAMES)


def not_modified_headers(stored: Headers) -> Headers:
    return Headers((n, v) for n, v in stored if n.lower() in NOT_MODIFIED_FIELDS)
