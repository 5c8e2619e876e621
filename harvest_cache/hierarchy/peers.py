"""The caches we peer with and the rules that keep requests direct, as configured.

``[[hierarchy.peers]]`` tables become :class:`Peer` values and ``[[hierarchy.always_direct]]``
/ ``[[hierarchy.never_direct]]`` tables become :class:`DirectRule` values; the parsers here
report every bad key with the table's position, like the rest of the configuration.

Domains are matched as Squid's ``dstdomain`` does: ``.example.org`` matches example.org and
every name below it, ``example.org`` that name alone; ``!`` before one excludes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["parent", "sibling"]
OPTIONS = (
    "no_query",
    "default",
    "round_robin",
    "closest_only",
    "proxy_only",
    "no_digest",
    "tls",
    "carp",
    "htcp",
)
_PEER_KEYS = (
    "name",
    "host",
    "http_port",
    "icp_port",
    "role",
    "weight",
    "domains",
    "carp_key",
    *OPTIONS,
)
# The parts of a URL a CARP member may hash instead of the whole (Squid's carp-key).
CARP_KEY_PARTS = ("scheme", "host", "port", "path", "params")
_RULE_KEYS = ("url_regex", "domain", "method")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_DOMAIN = re.compile(r"!?\.?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")
_METHOD = re.compile(r"[A-Z][A-Z0-9_-]*")
DEFAULT_HTTP_PORT = 3128
DEFAULT_ICP_PORT = 3130
DEFAULT_HTCP_PORT = 4827  # (IANA's, RFC 2756 2.3)


def domain_matches(host: str, pattern: str) -> bool:
    """Whether ``host`` (lowercase) is the domain ``pattern`` names (without its ``!``)."""
    if pattern.startswith("."):
        return host == pattern[1:] or host.endswith(pattern)
    return host == pattern


def in_domains(host: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``patterns`` take in ``host``: the first that matches decides (one with ``!``
    excludes it); a host none matches is in only if all are exclusions ("all but these")."""
    for pattern in patterns:
        if pattern.startswith("!"):
            if domain_matches(host, pattern[1:]):
                return False
        elif domain_matches(host, pattern):
            return True
    return all(p.startswith("!") for p in patterns)


@dataclass(frozen=True, slots=True)
class Peer:
    """A neighbour cache. ``icp_port`` 0: never queried over ICP. ``domains``: the only
    domains it serves (empty: all), and a parent with domains gets those requests alone."""

    name: str
    host: str
    http_port: int = DEFAULT_HTTP_PORT
    icp_port: int = DEFAULT_ICP_PORT
    role: Role = "parent"
    weight: int = 1
    domains: tuple[str, ...] = ()
    no_query: bool = False
    default: bool = False
    round_robin: bool = False
    closest_only: bool = False
    proxy_only: bool = False
    no_digest: bool = False
    tls: bool = False  # reached over TLS, its certificate verified (Squid's cache_peer ... tls)
    carp: bool = False  # a member of the cache array (Squid's cache_peer ... carp)
    carp_key: tuple[str, ...] = ()  # the URL's parts it hashes (empty: the whole URL)
    htcp: bool = False  # asked over HTCP (at icp_port) instead of ICP, and sent our CLRs

    @property
    def parent(self) -> bool:
        return self.role == "parent"

    @property
    def queried(self) -> bool:
        """Whether ICP queries go to it (not to an array's members: the URL's hash says
        which holds it)."""
        return self.icp_port > 0 and not self.no_query and not self.carp

    def serves(self, host: str) -> bool:
        return not self.domains or in_domains(host, self.domains)

    def bound_to(self, host: str) -> bool:
        """Whether one of its domains names ``host`` (not merely leaves it in)."""
        return any(not d.startswith("!") and domain_matches(host, d) for d in self.domains)

    def __str__(self) -> str:
        flags = [o.replace("_", "-") for o in OPTIONS if getattr(self, o)]
        domains = f" domains {', '.join(self.domains)}" if self.domains else ""
        extra = f" {' '.join(flags)}" if flags else ""
        return (
            f"{self.role} {self.name} {self.host}:{self.http_port} icp {self.icp_port}"
            f" weight {self.weight}{extra}{domains}"
        )


@dataclass(frozen=True, slots=True)
class DirectRule:
    """Matches a request when every condition given holds (none given: every request)."""

    url_regex: re.Pattern[str] | None = None
    domains: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()

    def matches(self, method: str, url: str, host: str) -> bool:
        if self.methods and method not in self.methods:
            return False
        if self.domains and not in_domains(host, self.domains):
            return False
        return self.url_regex is None or self.url_regex.search(url) is not None

    def __str__(self) -> str:
        parts = []
        if self.url_regex is not None:
            parts.append(f"url ~ {self.url_regex.pattern}")
        if self.domains:
            parts.append(f"domain {' '.join(self.domains)}")
        if self.methods:
            parts.append(f"method {' '.join(self.methods)}")
        return " and ".join(parts) or "all"


# -- parsing ----------------------------------------------------------------------------------


def _each_table(v: Any, what: str, keys: tuple[str, ...], build: Any) -> list[Any]:
    """``build(table)`` for each table of the list ``v``; every bad table is reported (with
    its position) in one ValueError."""
    if not isinstance(v, list):
        raise ValueError(f"expected a list of tables ([[hierarchy.{what}]]), got {v!r}")
    out, problems = [], []
    for i, item in enumerate(v):
        where = f"{what} {i + 1}"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: expected a table, got {item!r}")
            continue
        unknown = sorted(set(item) - set(keys))
        if unknown:
            known = ", ".join(keys)
            problems.append(f"{where}: unknown key {', '.join(unknown)} (known: {known})")
            continue
        try:
            out.append(build(item))
        except ValueError as e:
            problems.append(f"{where}: {e}")
    if problems:
        raise ValueError("; ".join(problems))
    return out


def _port(v: Any, lo: int, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= 65535:
        raise ValueError(f"{key}: expected a port from {lo} to 65535, got {v!r}")
    return v


def _domains(v: Any) -> tuple[str, ...]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not items:
        raise ValueError(f"expected a domain or a list of domains, got {v!r}")
    out = []
    for d in items:
        if not isinstance(d, str) or not _DOMAIN.fullmatch(d):
            raise ValueError(f"{d!r} is not a domain ('.example.org', 'host.example.org')")
        out.append(d.lower().rstrip("."))
    return tuple(out)


def _flag(v: Any, key: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{key}: expected true or false, got {v!r}")
    return v


def peer_list(v: Any) -> tuple[Peer, ...]:
    """``[[hierarchy.peers]]``: ``{name?, host, http_port?, icp_port?, role?, weight?,
    domains?, no_query?, default?, round_robin?, closest_only?, proxy_only?, no_digest?,
    tls?, carp?, carp_key?, htcp?}``."""
    peers = _each_table(v, "peers", _PEER_KEYS, _peer)
    names = [p.name for p in peers]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"peer names must differ: {', '.join(twice)} named twice")
    return tuple(peers)


def _peer(item: Mapping[str, Any]) -> Peer:
    host = item.get("host")
    if not isinstance(host, str) or not host or any(c in host for c in " /:@[]"):
        if "host" not in item:
            raise ValueError("missing host")
        raise ValueError(f"host: expected a host name or IPv4 address, got {host!r}")
    http_port = _port(item.get("http_port", DEFAULT_HTTP_PORT), 1, "http_port")
    icp_port = _port(item.get("icp_port", DEFAULT_ICP_PORT), 0, "icp_port")
    name = item.get("name", f"{host.lower()}:{http_port}")
    if not isinstance(name, str) or not _NAME.fullmatch(name.replace(":", "_")):
        raise ValueError(f"name: expected letters, digits, '.', '_', '-', got {name!r}")
    role = item.get("role", "parent")
    if role not in ("parent", "sibling"):
        raise ValueError(f"role: expected 'parent' or 'sibling', got {role!r}")
    weight = item.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 1000:
        raise ValueError(f"weight: expected an integer from 1 to 1000, got {weight!r}")
    domains = _domains(item["domains"]) if "domains" in item else ()
    flags = {o: _flag(item[o], o) for o in OPTIONS if o in item}
    if role == "sibling" and (flags.get("default") or flags.get("round_robin")):
        raise ValueError("default and round_robin apply to parents only")
    if role == "sibling" and flags.get("carp"):
        raise ValueError("carp applies to parents only (an array's members are parents)")
    carp_key: tuple[str, ...] = ()
    if "carp_key" in item:
        if not flags.get("carp"):
            raise ValueError("carp_key needs carp = true")
        carp_key = _carp_key(item["carp_key"])
    return Peer(
        name, host.lower(), http_port, icp_port, role, weight, domains, carp_key=carp_key, **flags
    )


def _carp_key(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not v or any(p not in CARP_KEY_PARTS for p in v):
        raise ValueError(f"carp_key: expected a list of {', '.join(CARP_KEY_PARTS)}, got {v!r}")
    return tuple(p for p in CARP_KEY_PARTS if p in v)


def direct_rules(what: str) -> Callable[[Any], tuple[DirectRule, ...]]:
    """The parser of ``[[hierarchy.WHAT]]``: tables ``{url_regex?, domain?, method?}``."""

    def parse(v: Any) -> tuple[DirectRule, ...]:
        return tuple(_each_table(v, what, _RULE_KEYS, _rule))

    return parse


def _rule(item: Mapping[str, Any]) -> DirectRule:
    regex = None
    if "url_regex" in item:
        pattern = item["url_regex"]
        if not isinstance(pattern, str):
            raise ValueError(f"url_regex: expected a string, got {pattern!r}")
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"url_regex: bad regex {pattern!r}: {e}") from None
    domains = _domains(item["domain"]) if "domain" in item else ()
    methods: tuple[str, ...] = ()
    if "method" in item:
        raw = item["method"]
        items = [raw] if isinstance(raw, str) else raw
        if (
            not isinstance(items, list)
            or not items
            or not all(isinstance(m, str) and _METHOD.fullmatch(m) for m in items)
        ):
            raise ValueError(f"method: expected a method or a list of them, got {raw!r}")
        methods = tuple(items)
    return DirectRule(regex, domains, methods)


def peer_flag(v: str) -> dict[str, Any]:
    """``--peer ROLE:HOST:HTTP_PORT[:ICP_PORT]`` as a ``[[hierarchy.peers]]`` table."""
    parts = v.split(":")
    if len(parts) not in (3, 4) or parts[0] not in ("parent", "sibling"):
        raise ValueError(f"expected ROLE:HOST:HTTP_PORT[:ICP_PORT] (ROLE parent or sibling): {v!r}")
    table: dict[str, Any] = {"role": parts[0], "host": parts[1]}
    for key, text in zip(("http_port", "icp_port"), parts[2:], strict=False):
        if not text.isdigit():
            raise ValueError(f"{key} in {v!r} is not a number")
        table[key] = int(text)
    _peer(table)  # reported here, as the flag's error
    return table
