"""The broker's configuration: frozen dataclasses loaded once from TOML by ``load``.

Sections ``[broker]``, ``[hsr]`` and ``[federation]``, and one ``[[collections]]`` table per
source. Settings are declared with the configuration kit's ``setting`` (harvest_common.config:
default, documentation, checking parser) and read by its section reader, so every unknown key
and bad value is reported with its name and the reason, all at once; ``reference()``
documents every key (docs/broker-configuration.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import ConfigError
from harvest_common.cache_client import HTTPS_VIA_PROXY
from harvest_common.config import (
    Address,
    address,
    boolean,
    choice,
    collection_name,
    integer,
    number,
    optional_url,
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

DAY = 86400.0

# What ``broker.data_dir`` holds: the registry's database file and the index's directory.
REGISTRY_FILE = "registry.db"
INDEX_DIR = "index"


def optional_text(v: Any) -> str | None:
    return None if v == "" else text(v)


def source_kind(v: Any) -> str:
    if v not in ("gatherer", "broker"):
        raise ValueError(f"expected 'gatherer' or 'broker', got {v!r}")
    return str(v)


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    name: str = setting("Harvest Broker", "The broker's name, shown on its pages.", text)
    listen: Address = setting(
        Address("127.0.0.1", 8501),
        "Address of the query API and search page (Harvest's broker port is 8501).",
        address,
    )
    data_dir: Path = setting(
        Path("var/broker"),
        "Directory of the registry database and the index.",
        lambda v: Path(text(v)),
    )
    default_ttl: float = setting(
        30 * DAY, "Seconds an object lives when its record gives no Time-to-Live.", number(1, 1e9)
    )
    gc_period: float = setting(
        3600.0,
        "Seconds between garbage collections (expiry, index reconciliation).",
        number(1, 1e7),
    )
    admin_token: str | None = setting(
        None,
        "Bearer token for the admin API; empty or absent: admin actions are refused.",
        optional_text,
    )
    proxy: str | None = setting(
        None,
        "A cache (`http://host:port`) that pulls go through when a collection says so.",
        optional_url,
    )
    https_via_proxy: str = setting(
        "absolute",
        "How pulls from `https://` sources go through broker.proxy: `absolute` asks the cache"
        " for the URL itself, which it fetches over TLS, verifying the source; `tunnel` opens"
        " a CONNECT tunnel (for proxies that take only that).",
        choice(*HTTPS_VIA_PROXY),
    )
    user_agent: str = setting("HarvestBroker/0.1", "User-Agent of the collector's pulls.", text)
    pull_timeout: float = setting(
        300.0, "Seconds one pull may take, start to end.", number(1, 86400)
    )
    max_results: int = setting(100, "Most results one query page may ask for.", integer(1, 10000))
    member: str = setting(
        "",
        "This broker's id among the replicas of its collections (unique in a replication"
        " group; the origin of the changes made here). Empty: the host name and listen port.",
        str,
    )


@dataclass(frozen=True, slots=True)
class FederationSettings:
    """Federated search (a query sent to the brokers the HSR picks) and the content summary
    this broker registers at the HSR."""

    hsr: str | None = setting(
        None,
        "The HSR that picks the brokers a federated search asks (a broker's URL); none:"
        " hsr.url, else this broker itself.",
        optional_url,
    )
    brokers: int = setting(
        8, "Most brokers one federated search asks (the HSR's first).", integer(1, 100)
    )
    deadline: float = setting(
        5.0,
        "Seconds a federated search waits, routing included; brokers that have not answered"
        " by then are reported late and their answers dropped.",
        number(0.1, 300),
    )
    via_proxy: bool = setting(
        True,
        "Ask the HSR and the brokers through broker.proxy, when one is set.",
        boolean,
    )
    summary_delay: float = setting(
        60.0,
        "Seconds after a change of the collections before the content summary is made again"
        " (the changes meanwhile are taken in by the same summary); a summary that changed"
        " renews the registration at once.",
        number(0.01, 86400),
    )
    summary_sample: int = setting(
        5000,
        "Most objects read to make the content summary: a broker holding more reads a"
        " uniform sample of them and scales the counts.",
        integer(100, 10_000_000),
    )


@dataclass(frozen=True, slots=True)
class CollectionConfig:
    """One source of records: a gatherer's export or another broker's bulk API."""

    name: str = setting("", "Unique name of the collection.", collection_name)
    source: str = setting(
        "", "Base URL of the gatherer (its /records) or broker (/bulk).", source_url
    )
    kind: str = setting("gatherer", "`gatherer` or `broker`.", source_kind)
    interval: float = setting(3600.0, "Seconds between pulls.", number(10, 1e8))
    incremental: bool = setting(
        True, "Pull only the changes since the last successful pull.", boolean
    )
    query: str | None = setting(
        None, "Broker sources only: pull just the objects matching this query.", optional_text
    )
    ttl: float | None = setting(
        None,
        "Seconds objects live when their records say nothing (default: broker.default_ttl).",
        number(1, 1e9),
    )
    via_proxy: bool = setting(False, "Pull through broker.proxy.", boolean)


@dataclass(frozen=True, slots=True)
class Config:
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    hsr: HsrSettings = field(default_factory=HsrSettings)
    federation: FederationSettings = field(default_factory=FederationSettings)
    collections: tuple[CollectionConfig, ...] = ()

    def collection(self, name: str) -> CollectionConfig | None:
        return next((c for c in self.collections if c.name == name), None)


SECTIONS: dict[str, type[Any]] = {
    "broker": BrokerSettings,
    "hsr": HsrSettings,
    "federation": FederationSettings,
}
REQUIRED = ("name", "source")


def from_mapping(raw: Mapping[str, Any], origin: str = "config") -> Config:
    """A Config from parsed TOML; every problem reported in one ConfigError."""
    raw = dict(raw)
    tables = raw.pop("collections", [])
    problems: list[str] = []
    try:
        sections = read_sections(raw, SECTIONS, origin)
    except KitConfigError as e:
        problems += e.problems
        sections = {}
    collections = _collections(tables, origin, problems)
    if problems:
        raise ConfigError(problems)
    return Config(**sections, collections=collections)


def _collections(tables: Any, origin: str, problems: list[str]) -> tuple[CollectionConfig, ...]:
    out = read_array(tables, CollectionConfig, origin, "collections", REQUIRED, "name", problems)
    for n, collection in enumerate(out):
        if collection.query is not None and collection.kind != "broker":
            problems.append(
                f"{origin}: collections[{n}].query: only a broker source can filter by query"
            )
    return tuple(out)


def load(path: Path) -> Config:
    """The configuration in the TOML file at ``path`` (synchronous: call it before the loop
    starts, or in a thread)."""
    try:
        raw = read_toml(path)
    except KitConfigError as e:
        raise ConfigError(e.problems) from None
    return from_mapping(raw, str(path))


_INTRO = """\
`harvest-broker serve CONFIG` reads a TOML file with the sections below; every key is
optional except a collection's `name` and `source`. An unknown key or a bad value is
reported with its name and the reason. Generated by `harvest-broker config-reference`.
"""


def reference() -> str:
    """Markdown documentation of every setting, generated from the declarations."""
    return reference_document(
        "Broker configuration reference",
        _INTRO.splitlines(),
        Config(),
        SECTIONS,
        {"collections": CollectionConfig},
    )
