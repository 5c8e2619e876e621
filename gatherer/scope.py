"""What one root may enumerate: Harvest's RootNode limits and the verdict on each URL.

A ``Scope`` carries a root's options (``URL=``, ``Host=``, ``Depth=``, ``Access=``,
``Delay=`` and the two filters); an ``Enumeration`` is one root's running account against
them (URLs generated, hosts touched) and judges each URL offered to it, in a fixed order, with
an ``Admission`` naming the first rule that refused it. Pure bookkeeping: the frontier owns
the set of URLs already seen and decides when jobs run.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Container
from dataclasses import dataclass

from gatherer.urls import access_method, authority, host_port, path_query

ACCESS_METHODS = frozenset({"HTTP", "FTP", "GOPHER", "FILE"})


@dataclass(frozen=True, slots=True)
class Scope:
    """One root's limits; the defaults are Harvest's.

    ``url_max``: URLs admitted during the root's enumeration, the root included.
    ``host_max``: hosts touched, counted by IP address when one is known (aliases count once).
    ``depth``: link steps from the root (0: no limit; 1: the root and what it links to).
    ``access``: the access methods followed ("HTTP" covers https); the root's own method is
    always followed.
    ``delay``: seconds between contacts to one server.
    ``url_filter`` gets the path and query, ``host_filter`` gets "host:port"; each returns True
    to allow.
    ``sitemaps``: the sitemaps named by the ``Sitemap:`` lines of the root's server's
    robots.txt are enumerated too (``Sitemaps=yes``).
    ``listings``: a sitemap or feed reached is enumerated from its entries rather than
    summarized (False for leaves, which are summarized alone, whatever they are).
    """

    url_max: int = 250
    host_max: int = 1
    depth: int = 0
    access: frozenset[str] = frozenset({"HTTP"})
    delay: float = 1.0
    url_filter: Callable[[str], bool] | None = None
    host_filter: Callable[[str], bool] | None = None
    sitemaps: bool = False
    listings: bool = True

    def __post_init__(self) -> None:
        # Caller bugs, not configuration errors: the config loader reports bad values with
        # their file and line before it builds a Scope.
        if self.url_max < 1 or self.host_max < 1 or self.depth < 0 or not self.delay >= 0:
            raise ValueError(f"{self!r}: URL= and Host= must be >= 1, Depth= and Delay= >= 0")
        if not self.access <= ACCESS_METHODS:
            raise ValueError(
                f"{self!r}: unknown access methods {set(self.access - ACCESS_METHODS)}"
            )

    def __repr__(self) -> str:
        flags = [name for name in ("url_filter", "host_filter", "sitemaps") if getattr(self, name)]
        if not self.listings:
            flags.append("no listings")
        return (
            f"Scope(URL={self.url_max}, Host={self.host_max}, Depth={self.depth}, "
            f"Access={'|'.join(sorted(self.access))}, Delay={self.delay:g}"
            + "".join(f", {name}" for name in flags)
            + ")"
        )


class Admission(enum.Enum):
    """The verdict on one URL: accepted, or the first rule that refused it."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    DEPTH = "depth"
    URL_MAX = "url_max"
    HOST_MAX = "host_max"
    URL_FILTER = "url_filter"
    HOST_FILTER = "host_filter"
    SCHEME = "scheme"
    GOPHER_CROSS_METHOD = "gopher_cross_method"
    # Sitemaps named by sitemap indexes: too deep a chain of indexes, or too many for a root.
    LISTING_DEPTH = "listing_depth"
    LISTING_MAX = "listing_max"

    @property
    def accepted(self) -> bool:
        return self is Admission.ACCEPTED

    @property
    def reason(self) -> str:
        return self.value


class Enumeration:
    """One root's enumeration: its ``Scope`` and how much of it has been used."""

    __slots__ = ("_host_count", "_hosts", "access", "generated", "scope")

    def __init__(self, root_url: str, scope: Scope) -> None:
        self.scope = scope
        method = access_method(root_url)
        # An FTP root under the default Access=HTTP still enumerates its FTP directories.
        self.access = scope.access | {method} if method else scope.access
        self.generated = 0
        self._hosts: set[str] = set()  # names and addresses touched
        self._host_count = 0

    def judge(
        self,
        url: str,
        *,
        seen: Container[str],
        ip: str | None,
        depth: int | None,
        from_gopher: bool = False,
        counted: bool = True,
    ) -> Admission:
        """The verdict on a normalized URL. ``depth`` None skips the depth rule and
        ``counted`` False the URL= rule (a redirect target is the same document, not a new
        one). ``from_gopher``: the link came from a Gopher document."""
        method = access_method(url)
        if method is None or method not in self.access:
            return Admission.SCHEME
        # Gopher menus point anywhere through gateways, whatever host the URL names.
        if from_gopher and method != "GOPHER":
            return Admission.GOPHER_CROSS_METHOD
        if url in seen:
            return Admission.DUPLICATE
        scope = self.scope
        if depth is not None and scope.depth and depth > scope.depth:
            return Admission.DEPTH
        if scope.url_filter is not None and not scope.url_filter(path_query(url)):
            return Admission.URL_FILTER
        if scope.host_filter is not None and not scope.host_filter(authority(url)):
            return Admission.HOST_FILTER
        if self._names(url, ip).isdisjoint(self._hosts) and self._host_count >= scope.host_max:
            return Admission.HOST_MAX
        if counted and self.generated >= scope.url_max:
            return Admission.URL_MAX
        return Admission.ACCEPTED

    def touched(self, url: str) -> bool:
        """Has this enumeration touched ``url``'s host name already?"""
        return not self._names(url, None).isdisjoint(self._hosts)

    def admit(self, url: str, *, ip: str | None, counted: bool = True) -> None:
        """Charge an accepted URL to this root: its host is touched, and it counts toward
        URL= unless ``counted`` is False."""
        names = self._names(url, ip)
        if names.isdisjoint(self._hosts):
            self._host_count += 1
        # Both name and address: an alias is recognised by its address, and a name seen
        # again with another address (rotating DNS) is still the same host.
        self._hosts |= names
        self.generated += counted

    def __repr__(self) -> str:
        return f"Enumeration({self.scope!r}, generated={self.generated}, hosts={self._host_count})"

    @staticmethod
    def _names(url: str, ip: str | None) -> set[str]:
        host, _ = host_port(url)
        return {host} if ip is None else {host, ip}
