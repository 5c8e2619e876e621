"""How long a response stays fresh and how old it is (RFC 9111 4.2), for a shared cache."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from harvest_cache.http.cache_control import MAX_DELTA, CacheControl, delta_seconds
from harvest_cache.http.dates import header_date, parse_http_date
from harvest_cache.http.headers import Headers

# Status codes defined as heuristically cacheable (RFC 9110 15.1).
HEURISTIC_STATUSES = frozenset({200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501})

_MAX_AGE = str(MAX_DELTA)


@dataclass(frozen=True, slots=True)
class Heuristic:
    """Freshness for responses without explicit freshness, like Squid's refresh_pattern.

    With Last-Modified: ``percent`` of the time between Last-Modified and Date, clamped to
    [``min_seconds``, ``max_seconds``]. Without it: ``min_seconds`` (Harvest's per-URL-pattern
    default; 0 unless configured).
    """

    percent: int
    max_seconds: int
    min_seconds: int = 0

    def __post_init__(self) -> None:
        if self.percent < 0 or not 0 <= self.min_seconds <= self.max_seconds:
            raise ValueError(f"need percent >= 0 and 0 <= min <= max seconds: {self!r}")

    def lifetime(self, since_modified: float | None) -> float:
        """The lifetime for a response modified ``since_modified`` seconds before its Date."""
        if since_modified is None:
            return float(self.min_seconds)
        share = max(0.0, since_modified) * self.percent / 100
        return min(max(share, self.min_seconds), self.max_seconds)


class HeuristicRules:
    """Heuristic freshness by URL (Squid's ``refresh_pattern``): the heuristic of the first
    pattern found in the URL, else ``default``."""

    def __init__(
        self, rules: Sequence[tuple[re.Pattern[str], Heuristic]], default: Heuristic
    ) -> None:
        self._rules = tuple(rules)
        self._default = default

    def for_url(self, url: str) -> Heuristic:
        for pattern, heuristic in self._rules:
            if pattern.search(url):
                return heuristic
        return self._default


class Lifetime(NamedTuple):
    """A freshness lifetime in seconds; ``heuristic`` when no explicit freshness was given."""

    seconds: float
    heuristic: bool


def directive_lifetime(cc: CacheControl) -> float | None:
    """The lifetime the response's directives give (s-maxage wins over max-age in a shared
    cache), which no date changes; None without either."""
    if cc.s_maxage is not None:
        return float(cc.s_maxage)
    if cc.max_age is not None:
        return float(cc.max_age)
    return None


def explicit_lifetime(
    headers: Headers, cc: CacheControl, *, response_time: float | None = None
) -> float | None:
    """The explicit freshness lifetime (RFC 9111 4.2.1) in a shared cache, or None.

    s-maxage wins over max-age, which wins over Expires minus Date. Expires that is invalid
    (``0`` included) or given twice with different values means already expired. Without a
    valid Date, ``response_time`` stands in for it (RFC 9110 6.6.1 has the receiving cache
    supply one); without either, an Expires response counts as expired.
    """
    lifetime = directive_lifetime(cc)
    if lifetime is not None:
        return lifetime
    expires_lines = headers.get_all("Expires")
    if not expires_lines:
        return None
    expires = parse_http_date(expires_lines[0])
    date = _date(headers, response_time)
    if expires is None or date is None or any(v != expires_lines[0] for v in expires_lines):
        return 0.0
    return max(0.0, expires - date)


def freshness_lifetime(
    status: int,
    headers: Headers,
    cc: CacheControl,
    heuristic: Heuristic,
    *,
    response_time: float | None = None,
) -> Lifetime:
    """The response's freshness lifetime (RFC 9111 4.2.1, 4.2.2).

    Heuristic freshness applies only to heuristically cacheable statuses or ``public``
    responses; otherwise a response without explicit freshness has a lifetime of 0.
    """
    explicit = explicit_lifetime(headers, cc, response_time=response_time)
    if explicit is not None:
        return Lifetime(explicit, heuristic=False)
    if status not in HEURISTIC_STATUSES and not cc.public:
        return Lifetime(0.0, heuristic=False)
    last_modified = header_date(headers, "Last-Modified")
    date = _date(headers, response_time)
    since_modified = None if last_modified is None or date is None else date - last_modified
    return Lifetime(heuristic.lifetime(since_modified), heuristic=True)


def current_age(headers: Headers, request_time: float, response_time: float, now: float) -> float:
    """The response's current age in seconds (RFC 9111 4.2.3).

    ``request_time`` and ``response_time`` bracket the exchange that brought the response;
    the delay between them is added to its Age, since it may have aged that long in transit.
    Of several Age values only the first counts, and it is ignored if it is not delta-seconds.
    A missing Date gives no apparent age. Clock steps backwards never make it younger.
    """
    date = header_date(headers, "Date")
    initial = initial_age(date, _age_header(headers), request_time, response_time)
    return initial + max(0.0, now - response_time)


def initial_age(date: float | None, age: int, request_time: float, response_time: float) -> float:
    """The age a response had when it arrived (RFC 9111 4.2.3, corrected_initial_age), from
    its Date and Age values and the times of its exchange."""
    apparent_age = 0.0 if date is None else max(0.0, response_time - date)
    response_delay = max(0.0, response_time - request_time)
    return max(apparent_age, age + response_delay)


def stale_at(response_time: float, initial: float, lifetime: float) -> float:
    """The wall-clock time from which a response that arrived at ``response_time``,
    ``initial`` seconds old (``initial_age``), is stale: its lifetime no longer exceeds its
    current age (RFC 9111 4.2)."""
    return response_time - initial + lifetime


def age_value(age: float) -> str:
    """The Age field value for ``age`` seconds: whole seconds, capped at 2**31 (RFC 9111 5.1)."""
    whole = int(age)  # (compared, not clamped with max and min: this runs on every answer)
    if whole <= 0:
        return "0"
    return str(whole) if whole < MAX_DELTA else _MAX_AGE


def _date(headers: Headers, fallback: float | None) -> float | None:
    date = header_date(headers, "Date")
    return fallback if date is None else date


def _age_header(headers: Headers) -> int:
    # A list-valued Age counts by its first member alone; an invalid one is ignored
    # (RFC 9111 5.1).
    members = headers.get_list("Age")
    seconds = delta_seconds(members[0]) if members else None
    return seconds if seconds is not None else 0
