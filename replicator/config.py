"""The replicator's configuration: frozen dataclasses loaded once from TOML by ``load``.

Sections ``[replicator]`` (this member), ``[timing]``, ``[topology]`` and one ``[[groups]]``
table per replicated collection. Settings are declared with the configuration kit's
``setting`` (harvest_common.config) and read by its section reader, so every unknown key and
bad value is reported with its name and the reason, all at once; ``reference()`` documents
every key (docs/replicator-configuration.md).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harvest_common.config import (
    Address,
    address,
    collection_name,
    integer,
    number,
    read_array,
    read_sections,
    read_toml,
    reference_document,
    setting,
    source_url,
    text,
)
from harvest_common.errors import ConfigError as KitConfigError
from harvest_common.hsr_client import HsrSettings
from replicator.auth import REMEMBERED
from replicator.errors import ConfigError

_MEMBER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")
MIN_SECRET = 16


def member_id(v: Any) -> str:
    if not isinstance(v, str) or (v and not _MEMBER.fullmatch(v)):
        raise ValueError(f"expected letters, digits and '_.:@-' (at most 128), got {v!r}")
    return v


def secret(v: Any) -> str:
    s = text(v)
    if len(s) < MIN_SECRET:
        raise ValueError(f"must be at least {MIN_SECRET} characters long")
    return s


def addresses(v: Any) -> tuple[Address, ...]:
    if not isinstance(v, list):
        raise ValueError(f"expected a list of 'HOST:PORT', got {v!r}")
    return tuple(address(item) for item in v)


def routes(v: Any) -> tuple[tuple[str, Address], ...]:
    """A table of member id → ``HOST:PORT`` to reach it at instead of where it says."""
    if not isinstance(v, Mapping):
        raise ValueError(f"expected a table of member id = 'HOST:PORT', got {v!r}")
    if "" in v:
        raise ValueError("a route needs a member id, got an empty key")
    return tuple(sorted((member_id(key), address(value)) for key, value in v.items()))


@dataclass(frozen=True, slots=True)
class ReplicatorSettings:
    id: str = setting(
        "", "This member's id in its groups (unique). Empty: host name and listen port.", member_id
    )
    listen: Address = setting(
        Address("127.0.0.1", 8502), "Address of the replication protocol and status.", address
    )
    advertise: Address | None = setting(
        None, "Address the other members reach this one at (default: `listen`).", address
    )
    secret: str = setting(
        "",
        f"The groups' shared secret (at least {MIN_SECRET} characters): who does not know it"
        " cannot join, push or pull.",
        secret,
    )
    broker: str = setting(
        "http://127.0.0.1:8501", "Base URL of the local broker this member replicates.", source_url
    )
    broker_token: str = setting("", "The local broker's admin token (broker.admin_token).", text)
    public_url: str | None = setting(
        None,
        "Where users are sent for this mirror's search page (default: `broker`).",
        source_url,
    )
    data_dir: Path = setting(
        Path("var/replicator"),
        "Directory of the member's state (where it left off with each neighbour).",
        lambda v: Path(text(v)),
    )
    routes: tuple[tuple[str, Address], ...] = setting(
        (),
        "Table of member id = `HOST:PORT`: reach that member there instead of at the address"
        " it advertises (address translation, tunnels).",
        routes,
    )
    replay_memory: int = setting(
        REMEMBERED,
        "Ids of signed requests remembered at most (a replay of one is refused); while this"
        " many came within the last 5 minutes, further requests are refused (503).",
        integer(16, 10_000_000),
    )


@dataclass(frozen=True, slots=True)
class TimingSettings:
    probe_interval: float = setting(
        1.0, "Seconds between failure-detection probes.", number(0.05, 600)
    )
    probe_timeout: float = setting(
        0.5, "Seconds to wait for a probe's answer before asking others to probe.", number(0.01, 60)
    )
    suspicion_timeout: float = setting(
        5.0,
        "Seconds a suspected member has to refute before it is declared dead.",
        number(0.1, 3600),
    )
    reconnect_interval: float = setting(
        10.0,
        "Seconds between probes of a member held dead (how soon a healed partition is seen).",
        number(0.1, 3600),
    )
    measure_interval: float = setting(
        10.0, "Seconds between link measurements to each member.", number(0.1, 86400)
    )
    measure_bytes: int = setting(
        65536, "Bytes of the larger probe transfer (throughput).", integer(1024, 16 * 2**20)
    )
    anti_entropy_interval: float = setting(
        30.0, "Seconds between Merkle comparisons with each neighbour.", number(0.1, 86400)
    )
    request_timeout: float = setting(
        30.0, "Seconds one request to another member may take.", number(0.1, 3600)
    )
    long_poll: float = setting(
        25.0,
        "Seconds a wait for the local broker's changes lasts before asking again.",
        number(0.1, 60),
    )
    batch: int = setting(1000, "Changes read or objects moved per request.", integer(1, 10000))


@dataclass(frozen=True, slots=True)
class TopologySettings:
    k: int = setting(
        2, "Connectivity: members that may fail without splitting the group.", integer(1, 64)
    )
    min_degree: int = setting(
        2, "Fewest neighbours a member has (when there are enough).", integer(1, 64)
    )
    max_degree: int = setting(4, "Most neighbours a member has.", integer(1, 64))
    diameter_weight: float = setting(
        1.0, "Weight of the longest path's cost against the total link cost.", number(0, 1000)
    )
    iterations: int = setting(
        2000, "Local-search steps of a topology computation.", integer(0, 10**6)
    )
    seed: int = setting(
        0, "Seed of the topology search (every member uses the same).", integer(0, 2**31)
    )
    change_threshold: float = setting(
        0.25,
        "Relative change of a link's cost that makes the topology be recomputed.",
        number(0, 100),
    )
    typical_bytes: int = setting(
        65536, "Size of the typical update a link's cost is the time to move.", integer(1, 2**30)
    )


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One replicated collection and where to find its members."""

    collection: str = setting(
        "", "The broker collection replicated (`hsr` for the HSR).", collection_name
    )
    seeds: tuple[Address, ...] = setting(
        (), "Addresses of members to join through (any one that answers will do).", addresses
    )


@dataclass(frozen=True, slots=True)
class Config:
    replicator: ReplicatorSettings = field(default_factory=ReplicatorSettings)
    timing: TimingSettings = field(default_factory=TimingSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)
    hsr: HsrSettings = field(default_factory=HsrSettings)
    groups: tuple[GroupConfig, ...] = ()

    @property
    def member(self) -> str:
        """This member's id: configured, or the host name and listen port."""
        return self.replicator.id or f"{socket.gethostname()}:{self.replicator.listen.port}"


SECTIONS: dict[str, type[Any]] = {
    "replicator": ReplicatorSettings,
    "timing": TimingSettings,
    "topology": TopologySettings,
    "hsr": HsrSettings,
}
REQUIRED = ("secret", "broker_token")


def from_mapping(raw: Mapping[str, Any], origin: str = "config") -> Config:
    """A Config from parsed TOML; every problem reported in one ConfigError."""
    raw = dict(raw)
    tables = raw.pop("groups", [])
    problems: list[str] = []
    try:
        sections = read_sections(raw, SECTIONS, origin)
    except KitConfigError as e:
        problems += e.problems
        sections = {}
    section = raw.get("replicator")
    given = section if isinstance(section, Mapping) else {}
    problems += [f"{origin}: replicator.{key}: required" for key in REQUIRED if key not in given]
    groups = _groups(tables, origin, problems)
    if problems:
        raise ConfigError(problems)
    config = Config(**sections, groups=groups)
    topology = config.topology
    if topology.min_degree > topology.max_degree:
        problems.append(f"{origin}: topology.min_degree is above topology.max_degree")
    if topology.k > topology.max_degree:
        problems.append(f"{origin}: topology.k is above topology.max_degree")
    if config.timing.probe_timeout >= config.timing.probe_interval:
        problems.append(f"{origin}: timing.probe_timeout must be below timing.probe_interval")
    if problems:
        raise ConfigError(problems)
    return config


def _groups(tables: Any, origin: str, problems: list[str]) -> tuple[GroupConfig, ...]:
    return tuple(
        read_array(tables, GroupConfig, origin, "groups", ("collection",), "collection", problems)
    )


def load(path: Path) -> Config:
    """The configuration in the TOML file at ``path`` (synchronous: call it before the loop
    starts, or in a thread)."""
    try:
        raw = read_toml(path)
    except KitConfigError as e:
        raise ConfigError(e.problems) from None
    return from_mapping(raw, str(path))


_INTRO = """\
`harvest-replicator serve CONFIG` reads a TOML file with the sections below; every key
is optional except `replicator.secret`, `replicator.broker_token` and a group's
`collection`. An unknown key or a bad value is reported with its name and the reason.
Generated by `harvest-replicator config-reference`.
"""


def reference() -> str:
    """Markdown documentation of every setting, generated from the declarations."""
    return reference_document(
        "Replicator configuration reference",
        _INTRO.splitlines(),
        Config(),
        SECTIONS,
        {"groups": GroupConfig},
    )
