"""The gatherer's configuration as values: what gatherer.cf (or its TOML form) says, checked.

Only plain frozen values live here; reading and checking the two file forms is in
``build``, ``harvest_format`` and ``toml_format``; the package ``gatherer.config`` is the
entry point.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from urllib.parse import urlsplit

from gatherer.errors import ConfigError
from gatherer.essence.options import EssenceOptions
from gatherer.filters import DEFAULT_URL_FILTER, Filter
from harvest_common.config import Address
from harvest_common.hsr_client import HsrSettings

GATHERER_VERSION = "0.1.0"
# Seconds between gathering runs by default: the shipped timer's (harvest-gather.timer,
# nightly). The gatherer does not start its runs, so it is told how often they come.
GATHER_INTERVAL = 86_400.0

# The schemes a root or leaf URL may have (the access methods HTTP, FTP, Gopher and FILE).
URL_SCHEMES = ("http", "https", "ftp", "gopher", "file")


def check_url(url: str) -> str:
    """``url`` if it can be gathered: absolute, a known scheme, a host (except FILE).

    Raises ValueError with the reason otherwise.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- urlsplit checks the port only when asked for it
    except ValueError:
        raise ValueError(f"bad host or port in URL {url!r}") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise ValueError(f"not an absolute URL: {url!r}")
    if any(c.isspace() for c in url):
        raise ValueError(f"URL contains white space: {url!r}")
    if scheme not in URL_SCHEMES:
        raise ValueError(f"URL scheme {scheme!r} is not http, https, ftp, gopher or file: {url!r}")
    if scheme != "file" and not parts.hostname:
        raise ValueError(f"URL has no host: {url!r}")
    return url


def _checked(url: str, source: str) -> str:
    try:
        return check_url(url)
    except ValueError as e:
        raise ConfigError([f"{source}: {e}"]) from e


@dataclass(frozen=True, slots=True)
class RootNode:
    """A URL to enumerate from, with its enumeration limits.

    ``url``: where enumeration starts (empty in a ``RootProgram``'s template).
    ``url_max``: most URLs the enumeration generates.
    ``url_filter``: rules on each URL's path (None: every URL passes).
    ``host_max``: most hosts (counted by IP address) the enumeration touches.
    ``host_filter``: rules on each URL's ``host:port`` (None: every host passes).
    ``access``: access methods enumeration may cross into (``HTTP``, ``FTP``, ``GOPHER``,
    ``FILE``; ``HTTP`` covers https); the root's own method is always followed.
    ``delay``: seconds between contacts with one server.
    ``depth``: most link steps from the root (0: unlimited).
    ``enumeration``: a program (argv) reading URLs and writing enumeration lines, or None.
    ``sitemaps``: also enumerate the sitemaps named by the root's server's robots.txt.
    ``source``: ``file:line`` (or ``file: key.path``) it was configured at; not compared.
    """

    url: str
    url_max: int = 250
    url_filter: Filter | None = DEFAULT_URL_FILTER
    host_max: int = 1
    host_filter: Filter | None = None
    access: frozenset[str] = frozenset({"HTTP"})
    delay: float = 1.0
    depth: int = 0
    enumeration: tuple[str, ...] | None = None
    sitemaps: bool = False
    source: str = field(default="", compare=False)

    def __repr__(self) -> str:
        # Only the options that differ from the defaults: the rest is noise in logs.
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name not in ("url", "source") and getattr(self, f.name) != f.default
        ]
        return f"RootNode({', '.join([repr(self.url), *changed, f'source={self.source!r}'])})"


@dataclass(frozen=True, slots=True)
class RootProgram:
    """A program whose output lines are root URLs, each enumerated with ``template``'s options.

    ``command``: the argv, run at gather time (never at load time).
    ``template``: a RootNode with an empty ``url`` holding the options given after the program.
    """

    command: tuple[str, ...]
    template: RootNode

    @property
    def source(self) -> str:
        """Where the program was configured."""
        return self.template.source

    def root(self, url: str, *, source: str) -> RootNode:
        """The RootNode for one output line ``url`` (ConfigError if it is not a root URL)."""
        return replace(self.template, url=_checked(url, source), source=source)

    def __repr__(self) -> str:
        return f"RootProgram({self.command!r}, {self.template!r})"


@dataclass(frozen=True, slots=True)
class LeafNode:
    """A URL fetched and summarized alone, never enumerated.

    ``url``: the document; ``source``: where it was configured (not compared).
    """

    url: str
    source: str = field(default="", compare=False)

    def __repr__(self) -> str:
        return f"LeafNode({self.url!r}, source={self.source!r})"


@dataclass(frozen=True, slots=True)
class LeafProgram:
    """A program whose output lines are leaf URLs.

    ``command``: the argv, run at gather time; ``source``: where it was configured (not
    compared).
    """

    command: tuple[str, ...]
    source: str = field(default="", compare=False)

    def leaf(self, url: str, *, source: str) -> LeafNode:
        """The LeafNode for one output line ``url`` (ConfigError if it is not a usable URL)."""
        return LeafNode(_checked(url, source), source)

    def __repr__(self) -> str:
        return f"LeafProgram({self.command!r}, source={self.source!r})"


@dataclass(frozen=True, slots=True, kw_only=True)
class GathererConfig:
    """One gatherer's whole configuration; docs/gatherer-configuration.md explains each header.

    Identity: ``name``, ``host`` (None: found at run time), ``port``, ``version``.
    Places: ``top_directory``, ``data_directory``, ``working_directory``, and
    ``manual_directory`` (hand-written templates) and ``archive_directory`` (WARC output),
    None when off. Fetching: ``http_proxy`` (``http://host:port`` or None),
    ``https_via_proxy`` (``absolute`` or ``tunnel``: how https:// URLs go through it),
    ``user_agent``, ``connections_per_host``, ``max_connections``, ``max_document_bytes``,
    ``max_redirects``,
    ``fetch_timeout`` (seconds), ``ftp_logins`` ((host, user, password) triples).
    Names: ``dns_servers`` (empty: the system's resolvers), ``dns_timeout`` (seconds per
    lookup), ``hosts_file`` (None: no file).
    Schedule: ``refresh_rate``, ``time_to_live``, ``access_delay``, ``gather_interval`` (how
    often runs are started: the export service's metrics and alert compare with it; seconds).
    Summarizing: ``summarizer_timeout`` (seconds), ``summarizer_memory_mb``,
    ``summarizer_workers`` (0: one per CPU), ``stoplist``, ``full_text``,
    ``unnest_max_bytes``, ``unnest_max_members``, ``unnest_max_depth``, ``members_as_records``.
    Archive: ``archive_rotate_bytes``. What to gather: ``root_nodes``, ``leaf_nodes``.
    Registration: ``hsr``, the Harvest Server Registry ``serve`` keeps the gatherer
    registered at (``[hsr]``, or the ``HSR-*`` headers).
    """

    name: str
    host: str | None
    port: int
    version: str
    top_directory: Path
    data_directory: Path
    working_directory: Path
    http_proxy: str | None
    https_via_proxy: str
    refresh_rate: float
    time_to_live: float
    access_delay: float
    gather_interval: float
    user_agent: str
    connections_per_host: int
    max_connections: int
    max_document_bytes: int
    max_redirects: int
    fetch_timeout: float
    summarizer_timeout: float
    summarizer_memory_mb: int
    summarizer_workers: int
    stoplist: frozenset[str]
    full_text: bool
    manual_directory: Path | None
    archive_directory: Path | None
    archive_rotate_bytes: int
    unnest_max_bytes: int
    unnest_max_members: int
    unnest_max_depth: int
    members_as_records: bool
    ftp_logins: tuple[tuple[str, str, str], ...]
    dns_servers: tuple[Address, ...]
    dns_timeout: float
    hosts_file: Path | None
    hsr: HsrSettings
    root_nodes: tuple[RootNode | RootProgram, ...]
    leaf_nodes: tuple[LeafNode | LeafProgram, ...]

    def essence_options(self) -> EssenceOptions:
        """Essence's settings taken from this configuration."""
        return EssenceOptions(
            stoplist=self.stoplist,
            full_text=self.full_text,
            unnest_max_bytes=self.unnest_max_bytes,
            unnest_max_members=self.unnest_max_members,
            unnest_max_depth=self.unnest_max_depth,
            members_as_records=self.members_as_records,
        )

    def __repr__(self) -> str:
        # Never the FTP passwords; the node lists are summarized.
        return (
            f"GathererConfig({self.name!r}, port={self.port}, top={str(self.top_directory)!r}, "
            f"{len(self.root_nodes)} root, {len(self.leaf_nodes)} leaf)"
        )
