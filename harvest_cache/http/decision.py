"""The shared cache's decisions about one request, as values (RFC 9111, RFC 5861, RFC 9211).

``lookup`` says what to do with a GET or HEAD given what the store holds for it; ``respond``
what to do with the response a fetch brings back; ``relay`` how the client of a fetch is
answered, ``after_forward`` what a forwarded request's response changes in the store. Each
result carries its reason: the Squid result code for the access log and the Cache-Status
``fwd`` for the client. The drivers (the proxy, the fetcher, the fast paths) match on them
and do the I/O; a prepared answer is such a result remembered while it stays the same.

Pure: header fields and ``now`` in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from harvest_cache.http import conditional
from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.freshness import Heuristic, current_age, explicit_lifetime
from harvest_cache.http.headers import Headers
from harvest_cache.http.invalidation import invalidated_urls, invalidates
from harvest_cache.http.policy import (
    Fresh,
    Reuse,
    StoreDecision,
    evaluate,
    request_directives,
    stale_on_failure,
    storable,
)
from harvest_cache.http.stored import StoredHead
from harvest_cache.http.validation import freshen, head_confirms, is_not_modified_for
from harvest_cache.http.vary import vary_key, vary_names

# Request fields that call for the full policy, or announce a body: a GET with none of them
# is plain, the kind the prepared answers are made for (``Asked.plain``).
POLICY_FIELDS = frozenset(
    {
        b"cache-control",
        b"pragma",
        b"if-match",
        b"if-none-match",
        b"if-modified-since",
        b"if-unmodified-since",
        b"if-range",
        b"range",
        b"authorization",
        b"proxy-authorization",
        b"via",
        b"max-forwards",
        b"content-length",
        b"transfer-encoding",
    }
)

# Statuses whose failure of a validation lets a stored response be served instead (RFC 5861 4).
SERVER_ERRORS = frozenset({500, 502, 503, 504})

Tier = Literal["memory", "disk"]


@dataclass(frozen=True, slots=True)
class Asked:
    """What ``lookup`` reads of a GET or HEAD request."""

    method: str
    headers: Headers
    has_body: bool
    looped: bool = False  # it came round through our peers (so it must not join our fetch)
    plain: bool = False  # a GET the prepared answers are made for (``plain``)


@dataclass(frozen=True, slots=True)
class Held:
    """What the store holds for a request: ``head`` from ``tier`` (None: nothing), and
    whether the URL's responses vary (``varies``: a Vary marker was found, and ``head``, if
    any, is the request's variant)."""

    head: StoredHead | None
    tier: Tier = "memory"
    varies: bool = False


# -- what to do with a request ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FromCache:
    """Answer from the stored response: a hit (``result``). ``prepare``: the hit fast path
    may remember it for the next such request (a plain GET for an object of the memory tier
    that does not vary)."""

    age: float
    ttl: float
    result: str
    prepare: bool


@dataclass(frozen=True, slots=True)
class ServeStale:
    """Answer from the stored response at once, stale, and revalidate it behind (RFC 5861
    3, stale-while-revalidate)."""

    age: float
    ttl: float
    result: str


@dataclass(frozen=True, slots=True)
class Revalidate:
    """Fetch with the stored response's validators (joining any fetch of the object);
    ``fwd`` why it went forward."""

    fwd: str


@dataclass(frozen=True, slots=True)
class Fetch:
    """Fetch the object (joining any fetch of it), unconditionally; ``fwd`` why, and
    whether stored variants may be offered for the origin to choose (``alternatives``)."""

    fwd: str
    alternatives: bool = False


@dataclass(frozen=True, slots=True)
class Forward:
    """Pass the request on as it came and its response back (never joined by another):
    ``result`` for the log, ``fwd`` for Cache-Status, ``describe``: a HEAD whose response
    then freshens or invalidates the stored GET response (RFC 9111 4.3.5)."""

    result: str
    fwd: str | None
    describe: bool = False


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer ``status`` without forwarding (only-if-cached with nothing to serve)."""

    status: int
    reason: str
    result: str = "TCP_MISS"


Lookup = FromCache | ServeStale | Revalidate | Fetch | Forward | Refuse


def hit_result(tier: Tier) -> str:
    return "TCP_MEM_HIT" if tier == "memory" else "TCP_HIT"


def bypass(path: str, cache_query_urls: bool) -> Forward | None:
    """A request the cache passes by, looking nothing up: one with a query when such URLs
    are not cached (Squid's old ``QUERY`` rule)."""
    if not cache_query_urls and "?" in path:
        return Forward("TCP_MISS", "bypass")
    return None


def lookup(asked: Asked, held: Held, now: float, heuristic: Heuristic) -> Lookup:
    """What to do with ``asked`` (a GET or HEAD) given ``held`` at ``now`` (RFC 9111 4).

    The request's own directives decide before the stored response's
    freshness: preconditions on the resource's current state go to the origin (4.3.2),
    ``only-if-cached`` refuses rather than fetch (5.2.1.7), and a request whose response is
    its own (a HEAD, a body, a conditional or ranged request, one that came round our peers)
    is forwarded, not collapsed with others.
    """
    headers, stored = asked.headers, held.head
    cc = request_directives(headers)
    # Why it goes forward if it does (RFC 9211 2.2), unless to validate: the request's own
    # semantics where something was stored, else no stored response.
    fwd = "vary-miss" if held.varies else "uri-miss"
    if stored is not None and cc.no_cache:
        fwd = "request"
    if "If-Match" in headers or "If-Unmodified-Since" in headers:
        return Forward("TCP_MISS", "request" if stored is not None else fwd)
    if stored is not None and not cc.no_cache:
        reuse = evaluate(stored, cc, now, heuristic)
        if isinstance(reuse, Fresh):
            prepare = asked.plain and held.tier == "memory" and not held.varies
            return FromCache(reuse.age, reuse.ttl, hit_result(held.tier), prepare)
        if reuse.ttl > 0 and reuse.reason in ("request-max-age", "min-fresh"):
            fwd = "request"  # fresh, but the request's own directives refused it
        if reuse.stale_while_revalidate and not asked.has_body:
            return ServeStale(reuse.age, reuse.ttl, hit_result(held.tier))
    if cc.only_if_cached:
        return Refuse(504, "only-if-cached: the object is not in the cache")
    if asked.method == "HEAD" or asked.has_body or asked.looped or _uncollapsible(headers):
        result = "TCP_CLIENT_REFRESH_MISS" if cc.no_cache else "TCP_MISS"
        if stored is not None and fwd != "request":
            fwd = "stale"
        return Forward(result, fwd, describe=asked.method == "HEAD" and stored is not None)
    if stored is not None and not cc.no_cache:
        return Revalidate("request" if fwd == "request" else "stale")
    # (With no-cache, stored variants are not offered: the client wants the origin's answer.)
    return Fetch(fwd, alternatives=stored is None and held.varies and not cc.no_cache)


def _uncollapsible(headers: Headers) -> bool:
    """Requests whose responses are their own: conditional or ranged."""
    return conditional.has_conditionals(headers) or "Range" in headers


# -- what to do with a fetch's response ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Freshen:
    """A 304 confirmed the stored response: keep it with ``head``'s fields and times."""

    head: StoredHead


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A 304 that does not select the stored response (RFC 9111 4.3.4): ask again,
    unconditionally."""


@dataclass(frozen=True, slots=True)
class Store:
    """Store the response (``decision`` says which fields to omit), under a variant key if
    it varies (``vary``: its Vary names)."""

    decision: StoreDecision
    vary: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DontStore:
    """Pass the response on without storing it; a stored response it answered stays."""

    reason: str


@dataclass(frozen=True, slots=True)
class Invalidate:
    """Pass the response on without storing it, and drop the stored response it answered
    (what is stored no longer stands for the resource)."""

    reason: str


Response = Freshen | Mismatch | Store | DontStore | Invalidate

# A 5xx answer to a validation: the stored response stays, to be served stale where allowed
# and validated again next time (RFC 9111 4.3.3).
VALIDATION_FAILED = DontStore("validation-failed")
# What a proxy-only peer sends: it keeps the object, we need not.
PROXY_ONLY = DontStore("proxy-only")


def respond(
    request_headers: Headers,
    stored: StoredHead | None,
    status: int,
    headers: Headers,
    times: tuple[float, float],
    *,
    proxy_only: bool = False,
) -> Response:
    """What to do with the response (``status``, end-to-end ``headers``) a GET fetch brought,
    made to validate ``stored`` if it is not None; ``times``: the exchange's request and
    response times (RFC 9111 3, 4.3.3, 4.3.4)."""
    if stored is not None and status == 304:
        if not is_not_modified_for(stored, headers):
            return Mismatch()
        return Freshen(freshen(stored, headers, *times))
    if stored is not None and status >= 500:
        return VALIDATION_FAILED
    if proxy_only:
        return PROXY_ONLY
    decision = storable(
        "GET",
        request_headers,
        request_directives(request_headers),
        status,
        headers,
        parse_cache_control(headers.get_all("Cache-Control")),
    )
    if decision.ok:
        return Store(decision, vary_names(headers) or ())
    if stored is not None:
        return Invalidate(decision.reason)
    return DontStore(decision.reason)


# -- how the client of a fetch is answered ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Relay:
    """Send the fetched response on as it streams (``result`` for the log)."""

    result: str


@dataclass(frozen=True, slots=True)
class ServeRefreshed:
    """The stored response was confirmed (304): answer from it."""

    result: str = "TCP_REFRESH_UNMODIFIED"


@dataclass(frozen=True, slots=True)
class TryStale:
    """The validation failed (``fwd_status``: the origin's 5xx, or None: it could not be
    reached): serve the stored response stale if ``stale_on_failure`` allows, else this is
    the answer."""

    fwd_status: int | None


@dataclass(frozen=True, slots=True)
class Refetch:
    """The response is not this joiner's to share: forward its own request instead."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """The fetch failed and nothing stored may answer instead: the failure is the answer."""


Relayed = Relay | ServeRefreshed | TryStale | Refetch | GiveUp


class Fetched(Protocol):
    """A fetch's response head as its clients see it (what ``relay`` reads)."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Headers: ...

    @property
    def refreshed(self) -> StoredHead | None:
        """The stored response's head, if a 304 confirmed it."""

    @property
    def shareable(self) -> bool:
        """Whether it may be given to clients that joined the fetch."""

    @property
    def vary_key(self) -> str:
        """The selecting fields' text it was stored under."""


def relay(
    fetched: Fetched | None,
    request_headers: Headers,
    *,
    revalidating: bool,
    joined: bool,
    fwd: str,
    tried_stale: bool = False,
    now: float,
) -> Relayed:
    """How the client of a fetch (``fetched``: None if it failed) is answered: it
    ``revalidating`` a stored response, having ``joined`` another's fetch, with ``fwd`` why
    it went forward; ``tried_stale``: serving stale was already refused."""
    if fetched is None:
        return TryStale(None) if revalidating and not tried_stale else GiveUp()
    refreshed = fetched.refreshed is not None
    failed = revalidating and not refreshed and fetched.status in SERVER_ERRORS
    if failed and not tried_stale:
        return TryStale(fetched.status)
    if joined and not shareable_for(fetched, request_headers, now):
        return Refetch()
    if refreshed:
        return ServeRefreshed()
    if failed:
        return Relay("TCP_REFRESH_FAIL_ERR")
    if revalidating:
        return Relay("TCP_REFRESH_MODIFIED")
    if fwd == "request":
        return Relay("TCP_CLIENT_REFRESH_MISS")
    return Relay("TCP_CF_MISS" if joined else "TCP_MISS")


def shareable_for(fetched: Fetched, request_headers: Headers, now: float) -> bool:
    """Whether a client that joined a fetch may be given its response."""
    if not fetched.shareable:
        return False
    headers = fetched.headers
    if fetched.refreshed is None:
        # A response that may not be reused without validation (no-cache, or stale on
        # arrival) or whose stored form omits fields (private="...") answers only the client
        # that asked for it (RFC 9111 5.2.2.4, 5.2.2.7, 4).
        cc = parse_cache_control(headers.get_all("Cache-Control"))
        if cc.no_cache or cc.no_cache_fields or cc.private_fields:
            return False
        lifetime = explicit_lifetime(headers, cc)
        # (The response has just arrived: its age is its Age and Date.)
        if lifetime is not None and lifetime <= current_age(headers, now, now, now):
            return False
    if "Vary" not in headers:
        return True
    selecting = vary_names(headers)
    return selecting is not None and vary_key(selecting, request_headers) == fetched.vary_key


def serve_stale(reuse: Reuse, fwd_status: int | None, max_stale: float) -> bool:
    """Whether the stored response may answer after its validation failed (see ``TryStale``)."""
    return stale_on_failure(reuse, unreachable=fwd_status is None, max_stale=max_stale)


# -- what a forwarded request's response changes in the store ---------------------------------


@dataclass(frozen=True, slots=True)
class Changes:
    """The store's changes after a forwarded request: URLs to drop, and the stored GET
    response a HEAD's 200 freshened (``freshened``) or invalidated (``drop_described``)."""

    invalidated: tuple[str, ...] = ()
    freshened: StoredHead | None = None
    drop_described: bool = False


NO_CHANGES = Changes()


def after_forward(
    method: str,
    url: str,
    status: int,
    headers: Headers,
    described: StoredHead | None,
    times: tuple[float, float],
) -> Changes:
    """What the response to a forwarded request changes: an unsafe method's success
    invalidates the URL and those its Location and Content-Location name (RFC 9111 4.4); a
    HEAD's 200 freshens the stored GET response it describes, or invalidates it (4.3.5)."""
    invalidated = tuple(invalidated_urls(url, headers)) if invalidates(method, status) else ()
    if described is not None and status == 200:
        if head_confirms(described, headers):
            return Changes(invalidated, freshen(described, headers, *times))
        return Changes(invalidated, drop_described=True)
    return Changes(invalidated) if invalidated else NO_CHANGES


__all__ = [
    "POLICY_FIELDS",
    "PROXY_ONLY",
    "SERVER_ERRORS",
    "VALIDATION_FAILED",
    "Asked",
    "Changes",
    "DontStore",
    "Fetch",
    "Fetched",
    "Forward",
    "Freshen",
    "FromCache",
    "GiveUp",
    "Held",
    "Invalidate",
    "Lookup",
    "Mismatch",
    "Refetch",
    "Refuse",
    "Relay",
    "Relayed",
    "Response",
    "Revalidate",
    "ServeRefreshed",
    "ServeStale",
    "Store",
    "TryStale",
    "after_forward",
    "bypass",
    "hit_result",
    "lookup",
    "relay",
    "respond",
    "serve_stale",
    "shareable_for",
]
