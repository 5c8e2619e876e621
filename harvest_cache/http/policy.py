"""The shared cache's decisions: may a response be stored, may a stored one be reused.

The proxy driver asks; these functions answer from header fields and the time it passes in,
and name their reason so that it can be logged and counted. Invalidation after unsafe
methods lives in ``invalidation``; ``age_value`` in ``freshness``. Both are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from harvest_cache.http.cache_control import CacheControl, parse_cache_control
from harvest_cache.http.freshness import (
    HEURISTIC_STATUSES,
    Heuristic,
    age_value,
    current_age,
    explicit_lifetime,
    freshness_lifetime,
)
from harvest_cache.http.headers import Headers, stored_fields
from harvest_cache.http.invalidation import invalidated_urls, invalidates
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.validation import response_etag
from harvest_cache.http.vary import vary_names

# Statuses whose caching rules Harvest implements: with must-understand, only these may be
# stored, and for them no-store is then ignored (RFC 9111 5.2.2.3). (206: as a part, see
# ``storable``'s ``part``.)
UNDERSTOOD_STATUSES = HEURISTIC_STATUSES | {302, 303, 307}


def request_directives(headers: Headers) -> CacheControl:
    """The request's Cache-Control; ``Pragma: no-cache`` counts only without Cache-Control
    (RFC 9111 5.4)."""
    lines = headers.get_all("Cache-Control")
    if not lines and any(p.lower() == "no-cache" for p in headers.get_list("Pragma")):
        lines = ["no-cache"]
    return parse_cache_control(lines)


@dataclass(frozen=True, slots=True)
class StoreDecision:
    """Whether a response may be stored, and why not.

    ``omit_fields`` names fields a shared cache must not store (``private="..."``, RFC 9111
    5.2.2.7): the caller drops them from the stored head.
    """

    ok: bool
    reason: str
    omit_fields: tuple[str, ...] = ()


def storable(
    method: str,
    request_headers: Headers,
    request_cc: CacheControl,
    status: int,
    response_headers: Headers,
    response_cc: CacheControl,
    *,
    part: bool = False,
) -> StoreDecision:
    """May a shared cache store this response (RFC 9111 3)?

    Reasons, checked in this order: ``method`` (only GET: a HEAD response has no content to
    store as a GET's), ``status`` (not final, 304, or a 206 unless the caller keeps it as a
    part of partial content, ``part``: harvest_cache.http.partial), ``no-store`` (request, or
    response unless must-understand with a status Harvest understands), ``must-understand``
    (status not understood), ``private``, ``authorization`` (RFC 9111 3.5), ``vary-star``,
    ``no-freshness`` (no explicit freshness, not public, not heuristically cacheable), and
    ``stale-no-validator``: the response needs validation at once (no-cache, or explicit
    freshness of 0) but gives no validator to do it with, so every reuse would refetch it
    (Squid refuses these too). A stored no-cache response with a validator is fine: it is
    revalidated on each use.
    """
    if method != "GET":
        return StoreDecision(False, "method")
    if status < 200 or status > 599 or status == 304 or (status == 206 and not part):
        return StoreDecision(False, "status")
    if request_cc.no_store:
        return StoreDecision(False, "no-store")
    if response_cc.must_understand:
        if status not in UNDERSTOOD_STATUSES:
            return StoreDecision(False, "must-understand")
    elif response_cc.no_store:
        return StoreDecision(False, "no-store")
    if response_cc.private:
        return StoreDecision(False, "private")
    if "Authorization" in request_headers and not (
        response_cc.public or response_cc.s_maxage is not None or response_cc.must_revalidate
    ):
        return StoreDecision(False, "authorization")
    if vary_names(response_headers) is None:
        return StoreDecision(False, "vary-star")
    explicit = explicit_lifetime(response_headers, response_cc)
    if explicit is None and not response_cc.public and status not in HEURISTIC_STATUSES:
        return StoreDecision(False, "no-freshness")
    if (
        validated_on_every_use(response_cc, explicit)
        and response_etag(response_headers) is None
        and "Last-Modified" not in response_headers
    ):
        return StoreDecision(False, "stale-no-validator")
    return StoreDecision(True, "ok", response_cc.private_fields)


def validated_on_every_use(cc: CacheControl, explicit: float | None) -> bool:
    """Whether a response must be validated on each use, whatever its age: no-cache (with
    field names too, which Harvest treats alike, RFC 9111 5.2.2.4), or an explicit lifetime
    of 0 (``explicit``: ``explicit_lifetime``)."""
    return cc.no_cache or bool(cc.no_cache_fields) or explicit == 0


class Fresh(NamedTuple):
    """The stored response may be served without contacting the origin (a named tuple, as
    its sibling: made on every evaluation, and a frozen dataclass costs several times as much
    to make).

    ``reason`` is ``fresh``, or ``max-stale`` when it is stale (``ttl`` <= 0) but within what
    the request accepts.
    """

    age: float
    ttl: float
    reason: str = "fresh"


class MustValidate(NamedTuple):
    """The stored response may be served only after the origin confirms it (a 304).

    ``reason``: ``no-cache`` (response), ``request-no-cache``, ``request-max-age``,
    ``min-fresh``, ``must-revalidate`` (stale, and must-revalidate, proxy-revalidate or
    s-maxage forbids serving it so), or ``stale``.

    ``stale_allowed``: no response directive forbids serving it stale (RFC 9111 4.2.4).
    ``stale_if_error``: a ``stale-if-error`` directive of the response or the request covers
    its staleness, so it may be served if validation fails, 5xx answers included (RFC 5861
    4). With ``stale_while_revalidate`` (only for reason ``stale``) it may be served at once
    while validation runs in the background (RFC 5861 3: staleness within the response's
    window).
    """

    age: float
    ttl: float
    reason: str
    stale_allowed: bool = False
    stale_if_error: bool = False
    stale_while_revalidate: bool = False


Reuse = Fresh | MustValidate


def evaluate(
    stored: StoredHead,
    request_cc: CacheControl,
    now: float,
    heuristic: Heuristic,
    *,
    once: bool = False,
) -> Reuse:
    """May ``stored`` answer a request with directives ``request_cc`` at ``now`` (RFC 9111 4)?

    The checks run in the order of ``MustValidate.reason``. ``immutable`` changes nothing:
    RFC 8246 lets a user agent skip revalidation on reload, but a request's no-cache or
    max-age=0 reaching a shared cache is an explicit wish that the cache honours.
    ``only-if-cached`` is the caller's: it answers 504 instead of validating. The stored
    response's own facts are memoised for the next requests, unless it is evaluated ``once``.
    """
    facts = _stored_facts.__wrapped__ if once else _stored_facts
    lifetime, initial_age, cc = facts(
        stored.status, stored.headers, stored.request_time, stored.response_time, heuristic
    )
    age = initial_age + max(0.0, now - stored.response_time)
    ttl = lifetime - age
    stale_forbidden = cc.must_revalidate or cc.proxy_revalidate or cc.s_maxage is not None
    reason = _validation_reason(cc, request_cc, age, ttl, stale_forbidden)
    if reason is None:
        return Fresh(age, ttl, "fresh" if ttl > 0 else "max-stale")
    allowed = not (stale_forbidden or cc.no_cache or cc.no_cache_fields)
    staleness = max(0.0, -ttl)
    windows = (cc.stale_if_error, request_cc.stale_if_error)
    window = cc.stale_while_revalidate
    return MustValidate(
        age,
        ttl,
        reason,
        stale_allowed=allowed,
        stale_if_error=allowed and any(w is not None and staleness <= w for w in windows),
        # Only for plain staleness: a client that asked for validation gets it.
        stale_while_revalidate=(
            allowed and reason == "stale" and window is not None and staleness <= window
        ),
    )


def stale_on_failure(reuse: Reuse, *, unreachable: bool, max_stale: float) -> bool:
    """May a stored response whose validation failed be served, stale, instead of the error?

    With a ``stale-if-error`` that covers it, yes, whether the origin could not be reached or
    answered 5xx (RFC 5861 4). Without one, only when the origin could not be reached (RFC
    9111 4.2.4 lets a disconnected cache serve stale), the client did not ask for validation
    itself, and it is at most ``max_stale`` seconds stale (Squid's ``max_stale``). Never when
    a directive forbids it (must-revalidate, proxy-revalidate, s-maxage, no-cache).
    """
    if not isinstance(reuse, MustValidate) or not reuse.stale_allowed:
        return False
    if reuse.stale_if_error:
        return True
    return unreachable and reuse.reason == "stale" and -reuse.ttl <= max_stale


@lru_cache(maxsize=4096)
def _stored_facts(
    status: int,
    fields: tuple[tuple[str, str], ...],
    request_time: float,
    response_time: float,
    heuristic: Heuristic,
) -> tuple[float, float, CacheControl]:
    """A stored response's lifetime, its age when received (what current_age adds resident
    time to) and its Cache-Control: the same for every request until it is revalidated."""
    headers = stored_fields(fields)
    cc = parse_cache_control(headers.get_all("Cache-Control"))
    lifetime = freshness_lifetime(status, headers, cc, heuristic, response_time=response_time)
    initial_age = current_age(headers, request_time, response_time, response_time)
    return lifetime.seconds, initial_age, cc


def _validation_reason(
    cc: CacheControl, request_cc: CacheControl, age: float, ttl: float, stale_forbidden: bool
) -> str | None:
    """Why the stored response needs validation, or None if it may be served as it is."""
    # Harvest treats no-cache with field names like plain no-cache (RFC 9111 5.2.2.4 allows
    # serving the rest without those fields; few caches do, and revalidating is always safe).
    if cc.no_cache or cc.no_cache_fields:
        return "no-cache"
    if request_cc.no_cache:
        return "request-no-cache"
    if request_cc.max_age is not None and age > request_cc.max_age:
        return "request-max-age"
    if request_cc.min_fresh is not None and ttl < request_cc.min_fresh:
        return "min-fresh"
    if ttl > 0:
        return None
    if stale_forbidden:
        return "must-revalidate"
    if request_cc.max_stale is not None and -ttl <= request_cc.max_stale:
        return None
    return "stale"


__all__ = [
    "UNDERSTOOD_STATUSES",
    "Fresh",
    "MustValidate",
    "Reuse",
    "StoreDecision",
    "age_value",
    "evaluate",
    "invalidated_urls",
    "invalidates",
    "request_directives",
    "stale_on_failure",
    "storable",
    "validated_on_every_use",
]
