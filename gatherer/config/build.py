"""Checking a configuration whichever form it came in, and building the GathererConfig.

Both forms (gatherer.cf and TOML) only parse syntax: they hand over each value as a ``Given``
(gatherer.cf text, or a typed TOML value) with where it was given. This module owns the rest,
once for both: the header and RootNode option tables (kind, check, default), range checks,
paths relative to Top-Directory, loading filter files and the stoplist, and collecting every
problem into one ConfigError. ``values`` reads each value by its kind.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gatherer.config.model import (
    GATHER_INTERVAL,
    GATHERER_VERSION,
    GathererConfig,
    LeafNode,
    LeafProgram,
    RootNode,
    RootProgram,
    check_url,
)
from gatherer.config.values import Given, Kind, read
from gatherer.errors import ConfigError
from gatherer.essence.options import DEFAULT_STOPLIST
from gatherer.filters import Filter, load_filter, read_text_file, rule_lines
from harvest_common.cache_client import HTTPS_VIA_PROXY
from harvest_common.config import Address, nameserver_list
from harvest_common.hsr_client import HsrSettings

MIB = 1024 * 1024
NO_FILTER = "/dev/null"  # as a filter file name: no filter at all


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A RootNode, LeafNode or program entry as a form gave it, before checking.

    ``where``: its location (becomes the node's ``source``); ``url`` or ``command``: exactly
    one is set; ``options``: RootNode options by field name (empty for leaves).
    """

    where: str
    url: Given | None = None
    command: Given | None = None
    options: Mapping[str, Given] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Context:
    """What checks need besides the value.

    ``base``: the directory relative paths start from (Top-Directory; for Top-Directory
    itself, the config file's directory). ``filters``: filter files loaded so far, by path,
    None for one that failed (so each file is read and reported once).
    """

    base: Path
    filters: dict[Path, Filter | None]


Check = Callable[[Any, Context], Any]


@dataclass(frozen=True, slots=True)
class Header:
    """One header line.

    ``name``: as written in gatherer.cf (the TOML key is :attr:`toml_key`). ``field``: the
    GathererConfig field it sets (for an HSR header, the HsrSettings field: its key in
    ``[hsr]``). ``kind``: how its value is read. ``default``: the field's value when the
    header is absent, computed from Top-Directory. ``check``: turns the read value into the
    field's value or raises ValueError / ConfigError. ``repeatable``: may be given more than
    once (the field is then a tuple).
    """

    name: str
    field: str
    kind: Kind
    default: Callable[[Path], object]
    check: Check
    repeatable: bool = False

    @property
    def toml_key(self) -> str:
        """The header's key in the TOML form: ``Gatherer-Name`` is ``gatherer_name``."""
        return self.name.lower().replace("-", "_")

    def __repr__(self) -> str:
        return f"Header({self.name!r} -> {self.field}, {self.kind.name})"


# -- checks: (value, context) -> field value ----------------------------------------------------


def _keep(value: object, _ctx: Context) -> object:
    return value


def _at_least(low: int) -> Check:
    def check(value: float, _ctx: Context) -> float:
        if value < low:
            raise ValueError(f"must be at least {low}, got {value:g}")
        return value

    return check


def _above_zero(value: float, _ctx: Context) -> float:
    if value <= 0:
        raise ValueError(f"must be more than 0, got {value:g}")
    return value


def _port(value: int, _ctx: Context) -> int:
    if not 1 <= value <= 65535:
        raise ValueError(f"must be a port from 1 to 65535, got {value}")
    return value


def _nameservers(value: str, _ctx: Context) -> tuple[Address, ...]:
    # The cache's own parser: both resolve names with the same resolver code.
    return nameserver_list(value.replace(",", " ").split())


def _hosts_file(value: str, ctx: Context) -> Path | None:
    return None if value == "none" else ctx.base / value


def _megabytes(value: int, ctx: Context) -> int:
    return int(_at_least(1)(value, ctx) * MIB)


def _path(value: str, ctx: Context) -> Path:
    return ctx.base / value


def _proxy(value: str, _ctx: Context) -> str:
    """``host:port`` or ``http://host:port`` (an optional ``/`` after it), as the latter."""
    try:
        parts = urlsplit(value if "://" in value else f"http://{value}")
        port = parts.port
    except ValueError:  # an unclosed IPv6 bracket or a port out of range
        port = None
    if (
        port is None
        or parts.scheme != "http"
        or not parts.hostname
        or not port
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise ValueError(f"expected host:port or http://host:port, got {value!r}")
    return f"http://{parts.netloc.rpartition(':')[0].lower()}:{port}"


def _https_via_proxy(value: str, _ctx: Context) -> str:
    """``absolute`` or ``tunnel`` (any case)."""
    choice = value.strip().lower()
    if choice not in HTTPS_VIA_PROXY:
        raise ValueError(f"expected absolute or tunnel, got {value!r}")
    return choice


def _login(value: tuple[str, str, str], _ctx: Context) -> tuple[str, str, str]:
    host, user, password = value
    if not host or not user:
        raise ValueError(f"expected host, user and password, got {value!r}")
    return host.lower(), user, password


def _stoplist(value: str, ctx: Context) -> frozenset[str]:
    """The type names in the stoplist file (one per line, ``#`` comments)."""
    path = ctx.base / value
    names: set[str] = set()
    problems: list[str] = []
    for number, line in rule_lines(read_text_file(path, "stoplist")):
        if len(line.split()) > 1:
            problems.append(f"{path}:{number}: expected one type name per line, got {line!r}")
        names.add(line)
    if problems:
        raise ConfigError(problems)
    return frozenset(names)


def _filter(value: str, ctx: Context) -> Filter | None:
    if value == NO_FILTER:
        return None
    path = ctx.base / value
    if path not in ctx.filters:
        ctx.filters[path] = None  # a failure is reported here, at the first line naming it
        ctx.filters[path] = load_filter(path)
    return ctx.filters[path]


_UNSUPPORTED_ACCESS = {
    "NEWS": "NNTP servers no longer carry archives worth indexing and need per-server accounts",
    "TELNET": "Telnet offers interactive sessions, nothing to fetch",
    "WAIS": "no WAIS servers remain",
}
_ACCESS_NAMES = {"HTTP": "HTTP", "HTTPS": "HTTP", "FTP": "FTP", "GOPHER": "GOPHER", "FILE": "FILE"}


def _access(names: list[str], _ctx: Context) -> frozenset[str]:
    methods = set()
    for name in names:
        key = name.strip().upper()
        if key in _UNSUPPORTED_ACCESS:
            raise ValueError(f"access method {name} is not supported: {_UNSUPPORTED_ACCESS[key]}")
        if key not in _ACCESS_NAMES:
            raise ValueError(f"unknown access method {name!r} (use HTTP, FTP, Gopher or FILE)")
        methods.add(_ACCESS_NAMES[key])
    return frozenset(methods)


def _tuple(value: list[str], _ctx: Context) -> tuple[str, ...]:
    return tuple(value)


def _fixed(value: object) -> Callable[[Path], object]:
    return lambda _top: value


# First: the other paths are relative to it.
TOP_DIRECTORY = Header("Top-Directory", "top_directory", Kind.TEXT, lambda base: base, _path)
HEADERS = (
    TOP_DIRECTORY,
    Header("Gatherer-Name", "name", Kind.TEXT, _fixed("Harvest Gatherer"), _keep),
    Header("Gatherer-Host", "host", Kind.TEXT, _fixed(None), _keep),
    Header("Gatherer-Port", "port", Kind.INT, _fixed(8500), _port),
    Header("Gatherer-Version", "version", Kind.TEXT, _fixed(f"Harvest-{GATHERER_VERSION}"), _keep),
    Header("Data-Directory", "data_directory", Kind.TEXT, lambda top: top / "data", _path),
    Header("Working-Directory", "working_directory", Kind.TEXT, lambda top: top / "tmp", _path),
    Header("HTTP-Proxy", "http_proxy", Kind.TEXT, _fixed(None), _proxy),
    Header("HTTPS-Via-Proxy", "https_via_proxy", Kind.TEXT, _fixed("absolute"), _https_via_proxy),
    Header("Refresh-Rate", "refresh_rate", Kind.NUMBER, _fixed(604800.0), _above_zero),
    Header("Time-To-Live", "time_to_live", Kind.NUMBER, _fixed(2592000.0), _above_zero),
    Header("Access-Delay", "access_delay", Kind.NUMBER, _fixed(1.0), _at_least(0)),
    Header(
        "Gather-Interval", "gather_interval", Kind.NUMBER, _fixed(GATHER_INTERVAL), _at_least(60)
    ),
    Header("User-Agent", "user_agent", Kind.TEXT, _fixed("HarvestGatherer/0.1"), _keep),
    Header("Connections-Per-Host", "connections_per_host", Kind.INT, _fixed(1), _at_least(1)),
    Header("Max-Connections", "max_connections", Kind.INT, _fixed(8), _at_least(1)),
    Header("Max-Document-Size", "max_document_bytes", Kind.INT, _fixed(10 * MIB), _at_least(1)),
    Header("Max-Redirects", "max_redirects", Kind.INT, _fixed(5), _at_least(0)),
    Header("Fetch-Timeout", "fetch_timeout", Kind.NUMBER, _fixed(30.0), _above_zero),
    Header("Summarizer-Timeout", "summarizer_timeout", Kind.NUMBER, _fixed(10.0), _above_zero),
    Header("Summarizer-Memory", "summarizer_memory_mb", Kind.INT, _fixed(512), _at_least(1)),
    Header("Summarizer-Workers", "summarizer_workers", Kind.INT, _fixed(0), _at_least(0)),
    Header("Stoplist", "stoplist", Kind.TEXT, _fixed(DEFAULT_STOPLIST), _stoplist),
    Header("Full-Text", "full_text", Kind.FLAG, _fixed(False), _keep),
    Header("Manual-Directory", "manual_directory", Kind.TEXT, _fixed(None), _path),
    Header("Archive-Directory", "archive_directory", Kind.TEXT, _fixed(None), _path),
    Header("Archive-Rotate-Size", "archive_rotate_bytes", Kind.INT, _fixed(1024 * MIB), _megabytes),
    Header("Unnest-Max-Size", "unnest_max_bytes", Kind.INT, _fixed(64 * MIB), _at_least(1)),
    Header("Unnest-Max-Members", "unnest_max_members", Kind.INT, _fixed(1000), _at_least(1)),
    Header("Unnest-Max-Depth", "unnest_max_depth", Kind.INT, _fixed(3), _at_least(0)),
    Header("Members-As-Records", "members_as_records", Kind.FLAG, _fixed(False), _keep),
    Header("FTP-Login", "ftp_logins", Kind.LOGIN, _fixed(()), _login, repeatable=True),
    Header("DNS-Servers", "dns_servers", Kind.TEXT, _fixed(()), _nameservers),
    Header("DNS-Timeout", "dns_timeout", Kind.NUMBER, _fixed(5.0), _above_zero),
    Header("Hosts-File", "hosts_file", Kind.TEXT, _fixed(Path("/etc/hosts")), _hosts_file),
)


def _hsr_check(key: str) -> Check:
    """HsrSettings' own check of ``key``: the same as every Harvest server's ``[hsr]``."""
    parse = next(f.metadata["parse"] for f in dataclasses.fields(HsrSettings) if f.name == key)
    return lambda value, _ctx: parse(value)


def _hsr_header(name: str, key: str, kind: Kind) -> Header:
    return Header(name, key, kind, _fixed(getattr(HsrSettings(), key)), _hsr_check(key))


# The Harvest Server Registry to register at: HSR-* headers in gatherer.cf, [hsr] in TOML.
HSR_HEADERS = (
    _hsr_header("HSR-URL", "url", Kind.TEXT),
    _hsr_header("HSR-Description", "description", Kind.TEXT),
    _hsr_header("HSR-Administrator", "administrator", Kind.TEXT),
    _hsr_header("HSR-Renew", "renew", Kind.NUMBER),
)
HEADERS_BY_NAME = {h.name.lower(): h for h in (*HEADERS, *HSR_HEADERS)}
HEADERS_BY_TOML_KEY = {h.toml_key: h for h in HEADERS}
HSR_HEADERS_BY_KEY = {h.field: h for h in HSR_HEADERS}

# RootNode options by field name: (kind, check). A missing option takes RootNode's default,
# except ``delay``, which defaults to Access-Delay.
ROOT_OPTIONS: dict[str, tuple[Kind, Check]] = {
    "url_max": (Kind.INT, _at_least(1)),
    "url_filter": (Kind.TEXT, _filter),
    "host_max": (Kind.INT, _at_least(1)),
    "host_filter": (Kind.TEXT, _filter),
    "access": (Kind.NAMES, _access),
    "delay": (Kind.NUMBER, _at_least(0)),
    "depth": (Kind.INT, _at_least(0)),
    "enumeration": (Kind.COMMAND, _tuple),
    "sitemaps": (Kind.FLAG, _keep),
}

_INVALID: Any = object()  # what a value that failed its check becomes (it was reported)


def _checked(kind: Kind, check: Check, given: Given, ctx: Context, problems: list[str]) -> Any:
    try:
        return check(read(kind, given), ctx)
    except ValueError as e:
        problems.append(f"{given.where}: {e}")
    except ConfigError as e:
        problems.extend(f"{given.where}: {p}" for p in e.problems)
    return _INVALID


def _header(header: Header, givens: Sequence[Given], ctx: Context, problems: list[str]) -> Any:
    values = [_checked(header.kind, header.check, g, ctx, problems) for g in givens]
    if header.repeatable:
        return tuple(v for v in values if v is not _INVALID)
    # A missing or failed value takes the default, so the checks that depend on it still run.
    return values[0] if values and values[0] is not _INVALID else header.default(ctx.base)


def root_node(
    url: Given, options: Mapping[str, Given], where: str, ctx: Context, problems: list[str]
) -> RootNode:
    """The RootNode at ``url`` with the given options; problems are appended to ``problems``
    (the result is then partial). ``options`` must include ``delay``: its default varies."""
    return RootNode(_url(url, ctx, problems), **_options(options, ctx, problems), source=where)


def _options(options: Mapping[str, Given], ctx: Context, problems: list[str]) -> dict[str, Any]:
    checked = {
        key: _checked(*ROOT_OPTIONS[key], given, ctx, problems) for key, given in options.items()
    }
    # A failed option takes the default, so the node can still be built (and then discarded).
    return {key: value for key, value in checked.items() if value is not _INVALID}


def _root(
    spec: NodeSpec, ctx: Context, delay: Given, problems: list[str]
) -> RootNode | RootProgram:
    options = dict(spec.options)
    options.setdefault("delay", delay)
    if spec.command is None:
        assert spec.url is not None  # a spec has a URL or a command
        return root_node(spec.url, options, spec.where, ctx, problems)
    command = _checked(Kind.COMMAND, _tuple, spec.command, ctx, problems)
    template = RootNode("", **_options(options, ctx, problems), source=spec.where)
    return RootProgram(command, template)


def _url(given: Given, ctx: Context, problems: list[str]) -> Any:
    return _checked(Kind.TEXT, lambda url, _ctx: check_url(url), given, ctx, problems)


def _leaf(spec: NodeSpec, ctx: Context, problems: list[str]) -> LeafNode | LeafProgram:
    if spec.command is not None:
        return LeafProgram(_checked(Kind.COMMAND, _tuple, spec.command, ctx, problems), spec.where)
    assert spec.url is not None
    return LeafNode(_url(spec.url, ctx, problems), spec.where)


def build(
    path: Path,
    headers: Mapping[str, Sequence[Given]],
    roots: Sequence[NodeSpec],
    leaves: Sequence[NodeSpec],
    problems: list[str],
) -> GathererConfig:
    """Check everything a form parsed from the file at ``path`` and build the configuration.

    ``headers`` are the given values by header name; ``problems`` are those the form already
    found. Raises one ConfigError with all of them, in line order for gatherer.cf.
    """
    ctx = Context(path.absolute().parent, {})
    top = _header(TOP_DIRECTORY, headers.get(TOP_DIRECTORY.name, ()), ctx, problems)
    ctx = Context(top, ctx.filters)
    fields: dict[str, Any] = {
        h.field: _header(h, headers.get(h.name, ()), ctx, problems)
        for h in HEADERS
        if h is not TOP_DIRECTORY
    }
    hsr = HsrSettings(
        **{h.field: _header(h, headers.get(h.name, ()), ctx, problems) for h in HSR_HEADERS}
    )
    # Access-Delay is the Delay of roots that give none: passed as if given, already typed.
    delay = Given(fields["access_delay"], "Access-Delay", text=False)
    root_nodes = tuple(_root(s, ctx, delay, problems) for s in roots)
    leaf_nodes = tuple(_leaf(s, ctx, problems) for s in leaves)
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: _line_of(p, f"{path}:")))
    return GathererConfig(
        top_directory=top, **fields, hsr=hsr, root_nodes=root_nodes, leaf_nodes=leaf_nodes
    )


def _line_of(problem: str, prefix: str) -> int:
    """The gatherer.cf line a problem is at (0 when it names none, as TOML problems)."""
    number = re.match(r"[0-9]+", problem.removeprefix(prefix))
    return int(number[0]) if number and problem.startswith(prefix) else 0
