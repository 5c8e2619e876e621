"""robots.txt as RFC 9309 reads it: the rules for one user agent, the fetch outcome table,
and a cache of host verdicts; and the sitemaps its ``Sitemap:`` lines name.

Matching (groups by product token, longest match, Allow winning ties, ``*`` and ``$``) is
Protego's; this module decides what a fetch outcome means (section 2.3.1), caps what is parsed
(section 2.5) and how long a verdict is kept (section 2.4). Pure: the caller fetches robots.txt
(following up to five redirects) and passes the status and body.
"""

from __future__ import annotations

from dataclasses import dataclass

from protego import Protego

from gatherer.urls import origin

PARSE_LIMIT = 500 * 1024  # RFC 9309 section 2.5: parse at least 500 KiB, we parse exactly that
# Sitemap: lines kept from one robots.txt (sitemaps.org allows 50,000 in a sitemap index).
MAX_SITEMAPS = 1000


@dataclass(frozen=True, slots=True)
class Robots:
    """One host's robots rules for one user agent (``rules`` None: ``default`` for all).

    ``sitemaps``: the URLs of its ``Sitemap:`` lines (for every user agent: they stand
    outside the groups), in order, each once, at most ``MAX_SITEMAPS``.

    Parsed rules compare by identity (Protego has no equality); the blanket verdicts compare
    by value, so ``decide(404, b"", ua) == Robots.allow_all()``.
    """

    rules: Protego | None
    user_agent: str
    crawl_delay: float | None = None
    default: bool = True
    sitemaps: tuple[str, ...] = ()

    @classmethod
    def parse(cls, body: bytes, user_agent: str) -> Robots:
        """Rules from a robots.txt body, decoded as UTF-8 (a BOM dropped, bad bytes replaced);
        only the first 500 KiB count, cut after the last whole line within them so that a rule
        cut short (wider than written) is not read."""
        if len(body) > PARSE_LIMIT:
            line_end = max(body.rfind(b"\n", 0, PARSE_LIMIT), body.rfind(b"\r", 0, PARSE_LIMIT))
            body = body[: line_end + 1]  # no line end at all: no whole line, no rules
        rules = Protego.parse(body.decode("utf-8-sig", errors="replace"))
        sitemaps = tuple(dict.fromkeys(rules.sitemaps))[:MAX_SITEMAPS]
        return cls(rules, user_agent, rules.crawl_delay(user_agent), sitemaps=sitemaps)

    @classmethod
    def allow_all(cls) -> Robots:
        return cls(None, "", default=True)

    @classmethod
    def disallow_all(cls) -> Robots:
        return cls(None, "", default=False)

    def allowed(self, url: str) -> bool:
        """May ``url`` (on the host these rules came from) be fetched?"""
        if self.rules is None:
            return self.default
        return self.rules.can_fetch(url, self.user_agent)

    def __repr__(self) -> str:
        if self.rules is None:
            return "Robots(allow all)" if self.default else "Robots(disallow all)"
        sitemaps = f", {len(self.sitemaps)} sitemaps" if self.sitemaps else ""
        return f"Robots(rules for {self.user_agent!r}, crawl_delay={self.crawl_delay}{sitemaps})"


def decide(status: int | None, body: bytes, user_agent: str) -> Robots:
    """The rules a robots.txt fetch outcome gives (RFC 9309 section 2.3.1).

    2xx: the body's rules. 3xx left over (more than five redirects) and 4xx ("unavailable",
    401 and 403 included): no rules, everything allowed. 5xx and ``None`` (unreachable: no
    connection, timeout) and anything else: everything disallowed; cache those with
    ``error=True`` so the server is asked again soon.
    """
    if status is not None and 200 <= status < 300:
        return Robots.parse(body, user_agent)
    if status is not None and 300 <= status < 500:
        return Robots.allow_all()
    return Robots.disallow_all()


def robots_url(url: str) -> str:
    """Where the robots.txt governing ``url`` lives: "scheme://host[:port]/robots.txt"."""
    return f"{origin(url)}/robots.txt"


@dataclass(frozen=True, slots=True)
class _Entry:
    robots: Robots
    expires: float


class RobotsCache:
    """Robots verdicts by host key, kept ``ttl`` seconds (RFC 9309 section 2.4 asks for at
    most 24 hours), or ``error_ttl`` for an unreachable server's disallow-all so that a
    recovered server is retried. At most ``max_hosts`` entries; the oldest stored goes first.
    Times are monotonic seconds."""

    def __init__(
        self, ttl: float = 86400.0, error_ttl: float = 3600.0, *, max_hosts: int = 10_000
    ) -> None:
        if max_hosts < 1:
            raise ValueError("max_hosts must be at least 1")
        self._ttl = ttl
        self._error_ttl = error_ttl
        self._max_hosts = max_hosts
        self._entries: dict[str, _Entry] = {}  # in storing order, oldest first

    def get(self, key: str, now: float) -> Robots | None:
        """The host's rules, or None if never stored or expired (then fetch them again)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now >= entry.expires:
            del self._entries[key]
            return None
        return entry.robots

    def put(self, key: str, robots: Robots, now: float, *, error: bool = False) -> None:
        """Store a host's rules; ``error``: they stand in for a 5xx or unreachable server."""
        self._entries.pop(key, None)  # re-stored entries move to the young end
        self._entries[key] = _Entry(robots, now + (self._error_ttl if error else self._ttl))
        if len(self._entries) > self._max_hosts:
            del self._entries[next(iter(self._entries))]

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<RobotsCache {len(self._entries)} hosts, ttl={self._ttl:g}s>"
