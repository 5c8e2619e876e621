"""Configuration: frozen dataclasses loaded once from TOML.

Every setting is declared with the configuration kit's ``setting`` (harvest_common.config),
which carries its default, its parser and the one-line documentation that
``harvest-cache --config-reference`` prints (docs/configuration.md is that output).
:func:`load` reports every unknown key and bad value at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from harvest_cache.hierarchy.peers import (
    DEFAULT_HTCP_PORT,
    DEFAULT_ICP_PORT,
    DirectRule,
    Peer,
    direct_rules,
    peer_list,
)
from harvest_common.config import (
    Address,
    IPNetwork,
    address,
    boolean,
    choice,
    integer,
    networks,
    number,
    optional_path,
    path,
    ports,
    read_sections,
    read_toml,
    reference_document,
    setting,
    text,
)
from harvest_common.dns import DNSConfig
from harvest_common.errors import ConfigError
from harvest_common.hsr_client import HsrSettings

# -- parsers of the cache's own values (like the kit's: a TOML value in, the typed value out) --


def token(v: Any) -> str:
    """A name that fits in one Via entry: no spaces or commas (may be empty)."""
    if not isinstance(v, str) or any(c in v for c in ' \t,;"()'):
        raise ValueError(f"expected a name without spaces, commas or quotes, got {v!r}")
    return v


class RefreshPattern(NamedTuple):
    """Heuristic freshness for URLs that ``regex`` matches (searched for anywhere in the
    URL, like Squid's ``refresh_pattern``): ``percent`` of the time since Last-Modified,
    clamped to [``min_seconds``, ``max_seconds``]; ``min_seconds`` without Last-Modified."""

    regex: re.Pattern[str]
    min_seconds: int
    percent: int
    max_seconds: int

    def __str__(self) -> str:
        case = "(?i)" if self.regex.flags & re.IGNORECASE else ""
        return f"{case}{self.regex.pattern} {self.min_seconds} {self.percent}% {self.max_seconds}"


_DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


def domains(v: Any) -> tuple[str, ...]:
    """A list of host names (a leading dot allowed, as Squid's ``dstdomain`` has it), in
    lower case without the dot; each stands for itself and its subdomains."""
    if not isinstance(v, list):
        raise ValueError(f"expected a list of host names, got {v!r}")
    out = []
    for item in v:
        name = item.strip().lower().removeprefix(".").rstrip(".") if isinstance(item, str) else ""
        if not _DOMAIN.fullmatch(name):
            raise ValueError(f"expected a host name, got {item!r}")
        out.append(name)
    return tuple(out)


_PATTERN_KEYS = ("regex", "ignore_case", "min_seconds", "percent", "max_seconds")


def refresh_patterns(v: Any) -> tuple[RefreshPattern, ...]:
    """A list of tables ``{regex, ignore_case?, min_seconds, percent, max_seconds}``."""
    if not isinstance(v, list):
        raise ValueError(f"expected a list of tables ([[cache.refresh_patterns]]), got {v!r}")
    out = []
    for i, item in enumerate(v):
        where = f"pattern {i + 1}"
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}: expected a table, got {item!r}")
        unknown = sorted(set(item) - set(_PATTERN_KEYS))
        if unknown:
            known = ", ".join(_PATTERN_KEYS)
            raise ValueError(f"{where}: unknown key {', '.join(unknown)} (known: {known})")
        missing = [k for k in _PATTERN_KEYS if k != "ignore_case" and k not in item]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        try:
            ignore_case = boolean(item.get("ignore_case", False))
            low = integer(0, 2**31)(item["min_seconds"])
            percent = integer(0, 100_000)(item["percent"])
            high = integer(0, 2**31)(item["max_seconds"])
            regex = re.compile(text(item["regex"]), re.IGNORECASE if ignore_case else 0)
        except re.error as e:
            raise ValueError(f"{where}: bad regex {item['regex']!r}: {e}") from None
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        if low > high:
            raise ValueError(f"{where}: min_seconds ({low}) exceeds max_seconds ({high})")
        out.append(RefreshPattern(regex, low, percent, high))
    return tuple(out)


# -- sections ----------------------------------------------------------------------------------

PRIVATE_NETWORKS = networks(
    ["127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"]
)
# Squid's default Safe_ports: the ports a browser legitimately proxies to.
SAFE_PORTS = ports([80, 21, 443, 70, 210, "1025-65535", 280, 488, 591, 777])
KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True, slots=True)
class ServerConfig:
    listen: Address = setting(
        Address("127.0.0.1", 3128), "HOST:PORT the proxy listens on (`--listen`).", address
    )
    name: str = setting(
        "",
        "The cache's name in `Via` and `Cache-Status`; a request whose `Via` holds it is a"
        " forwarding loop. Empty means HOSTNAME:PORT, unique for each cache on a host.",
        token,
    )
    cache_status_key: bool = setting(
        False,
        "Whether `Cache-Status` names the cache key used (its `key` parameter, RFC 9211 2.7):"
        " the URL, or for a response that varies, the URL with the selecting request fields.",
        boolean,
    )
    workers: int = setting(
        1,
        "Processes answering requests (`--workers`), sharing the listening port (SO_REUSEPORT)"
        " and the disk tier; each has its own memory tier. See docs/operations.md.",
        integer(1, 256),
    )
    max_connections: int = setting(
        10000,
        "Client connections open at once; further ones are closed at once.",
        integer(1, 10**6),
    )
    idle_timeout: float = setting(
        60.0,
        "Seconds a keep-alive client connection may sit idle between requests.",
        number(0.1, 86400),
    )
    header_timeout: float = setting(
        10.0,
        "Seconds a client has to send a whole request head once it starts (defeats slow-loris).",
        number(0.1, 3600),
    )
    max_request_line: int = setting(
        8 * KIB, "Longest request line in bytes; longer gets 414.", integer(256, 1 * MIB)
    )
    max_header_bytes: int = setting(
        64 * KIB, "Largest request head in bytes; larger gets 431.", integer(1 * KIB, 16 * MIB)
    )
    max_header_count: int = setting(
        100, "Most header fields in one request; more gets 431.", integer(1, 10000)
    )
    max_body_bytes: int = setting(
        1024 * MIB, "Largest request body in bytes; larger gets 413.", integer(0, 2**62)
    )


@dataclass(frozen=True, slots=True)
class AccessConfig:
    allow: tuple[IPNetwork, ...] = setting(
        PRIVATE_NETWORKS,
        "Client networks (CIDR) allowed to use the proxy; others get 403. Default: loopback and"
        " private networks.",
        networks,
    )
    safe_ports: tuple[tuple[int, int], ...] = setting(
        SAFE_PORTS,
        "Origin ports (numbers or 'LOW-HIGH') plain HTTP requests may go to; others get 403.",
        ports,
    )
    connect_ports: tuple[tuple[int, int], ...] = setting(
        ports([443]), "Ports `CONNECT` tunnels may open; others get 403.", ports
    )
    local_destinations: bool = setting(
        False,
        "Let clients beyond loopback reach this host through the proxy: loopback addresses,"
        " `localhost`, and the host's own addresses (its admin listener among them). Off,"
        " only clients on loopback may, as with Squid's `http_access deny to_localhost`.",
        boolean,
    )
    bump_allow: tuple[IPNetwork, ...] = setting(
        networks(["0.0.0.0/0", "::/0"]),
        "Client networks (CIDR) whose CONNECT tunnels may be intercepted when `bump.enabled`;"
        " others' are relayed as bytes. Default: every client the proxy serves.",
        networks,
    )
    purge: tuple[IPNetwork, ...] = setting(
        networks(["127.0.0.0/8", "::1/128"]),
        "Client networks (CIDR) allowed to send `PURGE` (drop an object from the cache);"
        " others get 403. Default: loopback.",
        networks,
    )
    x_forwarded_for: str = setting(
        "on",
        "`on` appends the client address to `X-Forwarded-For`, `off` passes it unchanged,"
        " `delete` removes it.",
        choice("on", "off", "delete"),
    )


@dataclass(frozen=True, slots=True)
class CacheConfig:
    dir: Path = setting(Path("var/cache"), "Directory of the disk tier (`--cache-dir`).", path)
    memory_mb: int = setting(
        256,
        "Size of the memory hot tier in MiB (`--memory-mb`); 0 turns it off.",
        integer(0, 2**20),
    )
    disk_mb: int = setting(
        10240, "Size of the disk tier in MiB (`--disk-mb`); 0 turns it off.", integer(0, 2**30)
    )
    memory_max_object_kb: int = setting(
        512, "Objects larger than this (KiB) bypass the memory tier.", integer(0, 2**30)
    )
    max_object_mb: int = setting(
        1024, "Objects larger than this (MiB) are passed through but not stored.", integer(0, 2**30)
    )
    heuristic_percent: int = setting(
        10,
        "Heuristic freshness for responses with Last-Modified and no explicit freshness, as a"
        " percentage of the time since Last-Modified.",
        integer(0, 100),
    )
    heuristic_max_seconds: int = setting(
        86400, "Cap on heuristic freshness in seconds.", integer(0, 2**31)
    )
    refresh_patterns: tuple[RefreshPattern, ...] = setting(
        (),
        "Heuristic freshness per URL, like Squid's `refresh_pattern`: a list of tables"
        " `[[cache.refresh_patterns]]` with `regex` (searched for in the URL), `ignore_case`"
        " (default false), `min_seconds`, `percent` and `max_seconds`; the first match wins,"
        " other URLs get `heuristic_percent` and `heuristic_max_seconds`. Only responses"
        " without explicit freshness (max-age, s-maxage, Expires) get heuristic freshness, and"
        " only for the statuses RFC 9111 allows.",
        refresh_patterns,
    )
    cache_query_urls: bool = setting(
        True,
        "Whether responses to URLs with a query string (`?`) are cached; false passes them"
        " through unstored (Squid's old `cache deny QUERY`).",
        boolean,
    )
    max_stale: int = setting(
        604800,
        "Seconds past expiry within which a stored response is still served, stale, when its"
        " revalidation cannot reach the origin and no directive allows or forbids that (like"
        " Squid's `max_stale`; `stale-if-error` and must-revalidate decide where present); 0"
        " answers with the error instead.",
        integer(0, 2**31),
    )


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    connect_timeout: float = setting(
        10.0, "Seconds to open a connection to an origin; then 504.", number(0.01, 600)
    )
    read_timeout: float = setting(
        60.0,
        "Seconds an origin may stay silent while a response is due; then 504.",
        number(0.01, 86400),
    )
    pool_idle_timeout: float = setting(
        30.0, "Seconds an idle keep-alive origin connection is kept for reuse.", number(0, 3600)
    )
    pool_max_idle_per_host: int = setting(
        256,
        "Idle origin connections kept per host and port (a busy origin behind many clients"
        " needs many).",
        integer(0, 10000),
    )
    tls_ca_file: Path | None = setting(
        None,
        "PEM bundle of the certificate authorities that `https://` origins' (and `tls` peers')"
        " certificates are checked against, instead of the system's trust store; `none` for"
        " the system's.",
        optional_path,
    )


def optional_address(v: Any) -> Address | None:
    """``HOST:PORT``, or ``"none"`` for no listener."""
    return None if v == "none" else address(v)


@dataclass(frozen=True, slots=True)
class BumpConfig:
    enabled: bool = setting(
        False,
        "Intercept CONNECT tunnels to TLS servers (Squid's `ssl_bump`): their HTTPS requests"
        " are then answered through the cache like any other, under certificates the cache's"
        " CA makes for the servers' names. Needs the CA (`harvest-cache ca init`) and clients"
        " that trust it; only on networks you administer (see docs/https.md). Off: tunnels are"
        " relayed as bytes.",
        boolean,
    )
    ca_dir: Path | None = setting(
        None,
        "Directory of the CA's certificate and key; `none`: `ca` in the cache's directory.",
        optional_path,
    )
    splice_domains: tuple[str, ...] = setting(
        (),
        "Server names never intercepted, each with its subdomains (banks, health services,"
        " apps that pin their certificates): their tunnels are relayed as bytes.",
        domains,
    )
    splice_networks: tuple[IPNetwork, ...] = setting(
        (),
        "Server addresses (CIDR) whose tunnels are never intercepted.",
        networks,
    )
    pin_seconds: float = setting(
        3600.0,
        "Seconds a server whose client refused the cache's certificate (an app that pins its"
        " server's, or a client without the CA) is relayed as bytes instead of intercepted.",
        number(0, 30 * 86400),
    )
    certificates: int = setting(
        1024,
        "Server certificates the cache keeps in memory (others are read from the CA"
        " directory's `certificates` or made again).",
        integer(16, 1_000_000),
    )


def ca_directory(config: Config) -> Path:
    """Where the interception CA lives."""
    return config.bump.ca_dir if config.bump.ca_dir is not None else config.cache.dir / "ca"


@dataclass(frozen=True, slots=True)
class AdminConfig:
    listen: Address | None = setting(
        Address("127.0.0.1", 3129),
        "Address of the admin listener: Prometheus metrics at /metrics and the cache manager"
        " at /cachemgr; `none` for none. Anyone who can connect may read them.",
        optional_address,
    )
    token: str = setting(
        "",
        "Secret that admin actions (purge, reload, dropping a peer) must present as"
        " `Authorization: Bearer TOKEN`; empty turns the actions off.",
        text,
    )


@dataclass(frozen=True, slots=True)
class LogConfig:
    access_log: Path | None = setting(
        Path("var/log/access.log"),
        "Access log in Squid's native format; `none` turns it off.",
        optional_path,
    )
    level: str = setting(
        "info", "Level of the error log on stderr.", choice("debug", "info", "warning", "error")
    )
    format: str = setting(
        "text",
        "Form of the error log on stderr: `text` lines, or `json` (one object per line:"
        " time, level, logger, message, exception).",
        choice("text", "json"),
    )
    rotate_mb: int = setting(
        0,
        "Rotate the access log when it reaches this many MiB (access.log becomes"
        " access.log.1...); 0: only on SIGUSR1, after an outside rotation (logrotate).",
        integer(0, 1 << 20),
    )
    rotate_keep: int = setting(
        5, "Rotated access logs kept (access.log.1 to .N).", integer(0, 1000)
    )


@dataclass(frozen=True, slots=True)
class IcpConfig:
    port: int | None = setting(
        None,
        "UDP port of the cache's ICP socket (RFC 2186), on `server.listen`'s address: it"
        " answers other caches' queries and sends ours. Unset: 3130 if any peer is queried"
        " over ICP, else off; 0 turns ICP off.",
        integer(0, 65535),
    )
    allow: tuple[IPNetwork, ...] = setting(
        (),
        "Networks whose caches may query us (Squid's `icp_access`); others get DENIED. Empty"
        " denies everyone.",
        networks,
    )
    fetch_misses: bool = setting(
        True,
        "Whether peers may send us their misses: false answers MISS_NOFETCH instead of MISS"
        " (as at the connection limit), so that they fetch those elsewhere.",
        boolean,
    )


@dataclass(frozen=True, slots=True)
class HtcpConfig:
    port: int | None = setting(
        None,
        "UDP port of the cache's HTCP socket (RFC 2756), on `server.listen`'s address: it"
        " answers other caches' TST and CLR and sends ours. Unset: 4827 if any peer is marked"
        " `htcp`, else off; 0 turns HTCP off.",
        integer(0, 65535),
    )
    allow: tuple[IPNetwork, ...] = setting(
        (),
        "Networks whose caches may ask us TST (Squid's `htcp_access`); others are told they"
        " may not. Empty denies everyone.",
        networks,
    )
    clr_allow: tuple[IPNetwork, ...] = setting(
        (),
        "Networks whose caches may make us forget an object with CLR (Squid's"
        " `htcp_clr_access`). Empty denies everyone.",
        networks,
    )


@dataclass(frozen=True, slots=True)
class HierarchyConfig:
    peers: tuple[Peer, ...] = setting(
        (),
        "Neighbour caches, one `[[hierarchy.peers]]` table each: `host`, `http_port` (3128),"
        " `icp_port` (3130; 0: no ICP), `role` (`parent` or `sibling`), `weight` (1),"
        " `domains` (the only domains it serves; a parent with domains gets their requests"
        " alone), `name` (host:port) and the flags `no_query`, `default`, `round_robin`,"
        " `closest_only`, `proxy_only` (keep nothing it sends), `no_digest`, `tls` (reached"
        " over TLS, its certificate checked against upstream.tls_ca_file or the system's"
        " store), `carp` (a member of the cache array: each URL goes to its one home, Squid's"
        " CARP), `carp_key` (the URL's parts a member hashes: `scheme`, `host`, `port`,"
        " `path`, `params`) and `htcp` (asked over HTCP at `icp_port` instead of ICP, with the"
        " whole request head, and sent our CLRs when we purge). See docs/hierarchy.md.",
        peer_list,
    )
    always_direct: tuple[DirectRule, ...] = setting(
        (),
        "Requests always fetched from the origin: `[[hierarchy.always_direct]]` tables of"
        " `url_regex`, `domain` (`.example.org` with subdomains; `!` excludes) and `method`,"
        " all given having to match.",
        direct_rules("always_direct"),
    )
    never_direct: tuple[DirectRule, ...] = setting(
        (),
        "Requests never fetched from the origin but through a parent (tables as for"
        " `always_direct`, which wins); with no parent left they fail with 504.",
        direct_rules("never_direct"),
    )
    icp_timeout_min: float = setting(
        0.005,
        "Least seconds to wait for ICP replies; the wait is twice the peers' mean RTT.",
        number(0.001, 60),
    )
    icp_timeout_max: float = setting(
        2.0,
        "Most seconds to wait for ICP replies (and the wait while no RTT is known).",
        number(0.001, 60),
    )
    dead_peer_timeout: float = setting(
        10.0,
        "Seconds of unanswered ICP queries after which a peer is dead: still queried,"
        " no longer waited for.",
        number(0.1, 3600),
    )
    peer_retry: float = setting(
        30.0,
        "Seconds a peer is left alone after a TCP connection to it failed (or until it"
        " answers ICP).",
        number(0.1, 3600),
    )
    array_name: str = setting(
        "",
        "This cache's own entry among the `carp` peers, when it is a member of the array its"
        " clients may also use directly (front mode): a URL whose home it is is fetched here,"
        " another forwarded to its home. Every member and child lists the array's peers in"
        " the same order. Empty: not a member.",
        text,
    )
    digests: bool = setting(
        True,
        "Publish a cache digest (a Bloom filter of what the cache holds, in Squid's format)"
        " and fetch the peers' (but those marked `no_digest`); a digest hit routes a request"
        " to that peer without an ICP query.",
        boolean,
    )
    digest_rebuild_period: float = setting(
        600.0,
        "Seconds between rebuilds of our digest; it lists objects fresh for that long.",
        number(1, 86400),
    )
    digest_fetch_period: float = setting(
        600.0,
        "Seconds between fetches of each peer's digest (one older than twice this is dropped).",
        number(1, 86400),
    )


@dataclass(frozen=True, slots=True)
class CacheHsrSettings(HsrSettings):
    """Registration at the Harvest Server Registry, as every Harvest server has it, and
    what a cache adds: where its clients are."""

    region: str = setting(
        "",
        "The region the cache serves (`Colorado`, `eu-west`), for the registry's record.",
        str,
    )
    networks: tuple[IPNetwork, ...] = setting(
        (),
        "The client networks (CIDR) the cache serves, for the registry's record: clients"
        " looking for a nearby cache find it by them.",
        networks,
    )


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    access: AccessConfig = field(default_factory=AccessConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    upstream: UpstreamConfig = field(default_factory=UpstreamConfig)
    dns: DNSConfig = field(default_factory=DNSConfig)
    log: LogConfig = field(default_factory=LogConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    icp: IcpConfig = field(default_factory=IcpConfig)
    hierarchy: HierarchyConfig = field(default_factory=HierarchyConfig)
    htcp: HtcpConfig = field(default_factory=HtcpConfig)
    bump: BumpConfig = field(default_factory=BumpConfig)
    hsr: CacheHsrSettings = field(default_factory=CacheHsrSettings)

    @property
    def icp_port(self) -> int:
        """The ICP port in use (0: none)."""
        if self.icp.port is not None:
            return self.icp.port
        queried = any(p.queried and not p.htcp for p in self.hierarchy.peers)
        return DEFAULT_ICP_PORT if queried else 0

    @property
    def htcp_port(self) -> int:
        """The HTCP port in use (0: none)."""
        if self.htcp.port is not None:
            return self.htcp.port
        return DEFAULT_HTCP_PORT if any(p.htcp for p in self.hierarchy.peers) else 0


SECTIONS: dict[str, type[Any]] = {f.name: f.default_factory for f in fields(Config)}  # type: ignore[misc]


def from_mapping(raw: Mapping[str, Any], origin: str = "config") -> Config:
    """Build a Config from parsed TOML, reporting every problem in one ConfigError."""
    config = Config(**read_sections(raw, SECTIONS, origin))
    problems: list[str] = []
    _check_consistency(config, origin, problems)
    if problems:
        raise ConfigError(problems)
    return config


def _check_consistency(config: Config, origin: str, problems: list[str]) -> None:
    if config.dns.min_ttl > config.dns.max_ttl:
        problems.append(f"{origin}: dns.min_ttl ({config.dns.min_ttl}) exceeds dns.max_ttl")
    hierarchy = config.hierarchy
    if hierarchy.icp_timeout_min > hierarchy.icp_timeout_max:
        problems.append(
            f"{origin}: hierarchy.icp_timeout_min ({hierarchy.icp_timeout_min})"
            " exceeds hierarchy.icp_timeout_max"
        )
    members = [p.name for p in hierarchy.peers if p.carp]
    if hierarchy.array_name and hierarchy.array_name not in members:
        problems.append(
            f"{origin}: hierarchy.array_name {hierarchy.array_name!r} names no `carp` peer"
            f" (they are: {', '.join(members) or 'none'})"
        )
    if config.htcp_port == 0 and any(p.htcp for p in hierarchy.peers):
        problems.append(f"{origin}: htcp.port is 0 but peers are marked `htcp`")
    if config.icp_port == 0 and any(p.queried and not p.htcp for p in hierarchy.peers):
        problems.append(
            f"{origin}: icp.port is 0 but peers are to be queried over ICP"
            " (give them icp_port = 0 or no_query, or set icp.port)"
        )


def load(path: Path | None, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Config:
    """Load the TOML file at ``path`` (defaults only if None), then apply ``overrides``.

    Overrides are raw values keyed by section and key, checked like the file's own.
    """
    raw = read_toml(path) if path is not None else {}
    origin = str(path) if path else "defaults"
    for section, values in (overrides or {}).items():
        table = raw.setdefault(section, {})
        if isinstance(table, dict):
            table.update(values)
    return from_mapping(raw, origin)


_INTRO = """\
`harvest-cache --config FILE` reads a TOML file of the sections below; every key is
optional. An unknown section or key, or a bad value, is reported with its name and the
reason, and the program exits with status 2. Generated by `harvest-cache --config-reference`.
"""


def reference() -> str:
    """Markdown documentation of every setting, generated from the declarations."""
    return reference_document(
        "Configuration reference",
        _INTRO.splitlines(),
        Config(),
        SECTIONS,
    )


__all__ = ["Config", "from_mapping", "load", "reference"]
