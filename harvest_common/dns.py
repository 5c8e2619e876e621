"""The DNS resolver of the cache and the gatherer: hosts file, then dnspython, with positive and
negative caching; its settings are the ``DNSConfig`` section.

The proxy resolves an origin's name on every miss (the gatherer each host it crawls), so
answers are kept for their TTL (clamped to ``[min_ttl, max_ttl]``) and failures for
``negative_ttl``, and concurrent lookups of one name share one query. ``resolve`` returns IPv4
addresses before IPv6 ones; a name that does not resolve raises DNSFailure with a short cause.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import dns.asyncresolver
import dns.exception
import dns.name
import dns.nameserver
import dns.rdatatype
import dns.resolver
from aiocache import SimpleMemoryCache

from harvest_common.config import Address, integer, nameserver_list, number, optional_path, setting
from harvest_common.errors import ConfigError, DNSFailure

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DNSConfig:
    nameservers: tuple[Address, ...] = setting(
        (),
        "Resolver addresses (`IP` or `IP:PORT`); empty uses the system's (/etc/resolv.conf).",
        nameserver_list,
    )
    hosts_file: Path | None = setting(
        Path("/etc/hosts"), "Hosts file consulted before DNS; `none` for no file.", optional_path
    )
    min_ttl: int = setting(60, "Answers are cached at least this many seconds.", integer(0, 2**31))
    max_ttl: int = setting(
        21600, "Answers are cached at most this many seconds.", integer(0, 2**31)
    )
    negative_ttl: int = setting(
        30, "Failed lookups are remembered this many seconds.", integer(0, 86400)
    )
    timeout: float = setting(5.0, "Seconds one lookup may take.", number(0.01, 120))


# The causes DNSFailure carries.
NO_SUCH_DOMAIN = "no such domain"
TIMEOUT = "timeout"
RESOLVER_ERROR = "resolver error"
INVALID_NAME = "invalid name"
NO_ADDRESS = "no address"
# When the A and AAAA queries fail differently, the earlier cause here is reported.
_CAUSE_ORDER = (NO_SUCH_DOMAIN, TIMEOUT, RESOLVER_ERROR)

# A cached entry: the addresses, or the cause of a remembered failure.
Entry = tuple[str, ...] | str


class Records(NamedTuple):
    """The addresses one query found (possibly none) and how long they may be kept."""

    addresses: tuple[str, ...]
    ttl: int


def ip_literal(host: str) -> str | None:
    """``host`` as a normalised IP address if it is one (``[v6]`` brackets allowed), else None."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif not host or not (":" in host or host[-1].isdigit()):
        return None  # a name's last label is never all digits: skip the parse on the hot path
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def name_key(host: str) -> str:
    """DNS names compare without case and without the root's trailing dot."""
    return host.lower().rstrip(".")


def parse_hosts(text: str) -> dict[str, tuple[str, ...]]:
    """A hosts file as name -> addresses (IPv4 first), in file order, duplicates dropped."""
    v4: dict[str, list[str]] = {}
    v6: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.partition("#")[0].split()
        if len(fields) < 2:
            continue
        try:
            ip = ipaddress.ip_address(fields[0])
        except ValueError:
            continue
        family = v4 if ip.version == 4 else v6
        for name in fields[1:]:
            addresses = family.setdefault(name_key(name), [])
            if str(ip) not in addresses:
                addresses.append(str(ip))
    return {name: tuple(v4.get(name, []) + v6.get(name, [])) for name in v4.keys() | v6.keys()}


def merge(v4: Records | str, v6: Records | str) -> Records | str:
    """One answer from the A and AAAA outcomes: any address wins over the other's failure."""
    found = [r for r in (v4, v6) if isinstance(r, Records) and r.addresses]
    if found:
        return Records(tuple(a for r in found for a in r.addresses), min(r.ttl for r in found))
    causes = {v4, v6}
    return next((cause for cause in _CAUSE_ORDER if cause in causes), NO_ADDRESS)


def _read_hosts(path: Path | None) -> dict[str, tuple[str, ...]]:
    if path is None:
        return {}
    try:
        return parse_hosts(path.read_bytes().decode("utf-8", "replace"))
    except OSError as e:
        # Like Squid: a missing or unreadable hosts file leaves DNS alone in charge.
        log.warning("dns: cannot read hosts file %s: %s", path, e.strerror)
        return {}


def _make_dns_resolver(config: DNSConfig) -> dns.asyncresolver.Resolver:
    """dnspython's resolver; with no nameservers configured it reads resolv.conf (blocking)."""
    try:
        resolver = dns.asyncresolver.Resolver(configure=not config.nameservers)
    except dns.resolver.NoResolverConfiguration:
        raise ConfigError(
            ["dns.nameservers: empty, and the system has no resolver configuration"]
        ) from None
    if config.nameservers:
        resolver.nameservers = [
            dns.nameserver.Do53Nameserver(a.host, a.port) for a in config.nameservers
        ]
    resolver.lifetime = config.timeout
    return resolver


class Resolver:
    """Resolves origin names; create with ``await Resolver.open(config)``, end with ``close()``.

    ``hits`` counts name lookups answered without waiting on DNS (hosts file or cache, positive
    or negative), ``misses`` those that waited for a query (started or joined), ``failures``
    those that raised DNSFailure. IP literals count in none.
    """

    def __init__(
        self,
        config: DNSConfig,
        dns_resolver: dns.asyncresolver.Resolver,
        hosts: Mapping[str, tuple[str, ...]],
    ) -> None:
        self._config = config
        self._dns = dns_resolver
        self._hosts = hosts
        # The namespace lets close() cancel every entry's expiry timer (clear(None) would not).
        self._cache = SimpleMemoryCache(namespace="dns:", timeout=None)
        self._inflight: dict[str, asyncio.Task[Entry]] = {}
        self.hits = 0
        self.misses = 0
        self.failures = 0

    @classmethod
    async def open(cls, config: DNSConfig) -> Resolver:
        """Read the hosts file and the system resolver configuration off the loop."""
        loop = asyncio.get_running_loop()
        hosts = await loop.run_in_executor(None, _read_hosts, config.hosts_file)
        dns_resolver = await loop.run_in_executor(None, _make_dns_resolver, config)
        return cls(config, dns_resolver, hosts)

    def __repr__(self) -> str:
        return (
            f"<Resolver hosts={len(self._hosts)} inflight={len(self._inflight)}"
            f" hits={self.hits} misses={self.misses} failures={self.failures}>"
        )

    async def resolve(self, host: str) -> list[str]:
        """The addresses of ``host``, IPv4 first; raises DNSFailure with a short cause."""
        literal = ip_literal(host)
        if literal is not None:
            return [literal]
        name = name_key(host)
        pinned = self._hosts.get(name)
        if pinned is not None:
            self.hits += 1
            return list(pinned)
        entry: Entry | None = await self._cache.get(name)
        if entry is None:
            self.misses += 1
            task = self._inflight.get(name)
            if task is None:
                task = self._inflight[name] = asyncio.create_task(self._lookup(name))
            # Shielded: one waiter going away must not cancel the query the others share.
            entry = await asyncio.shield(task)
        else:
            self.hits += 1
        if isinstance(entry, str):
            self.failures += 1
            raise DNSFailure(entry)
        return list(entry)

    async def close(self) -> None:
        """Cancel lookups in flight and drop every cached entry."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._cache.clear(namespace="dns:")

    async def _lookup(self, name: str) -> Entry:
        """Ask DNS and cache the outcome for its clamped TTL; failures are returned, not raised."""
        try:
            outcome = await self._ask(name)
            entry: Entry
            if isinstance(outcome, Records):
                entry = outcome.addresses
                ttl = min(max(outcome.ttl, self._config.min_ttl), self._config.max_ttl)
            else:
                entry, ttl = outcome, self._config.negative_ttl
            if ttl > 0:  # aiocache would keep a ttl of 0 forever
                await self._cache.set(name, entry, ttl=ttl)
            return entry
        finally:
            self._inflight.pop(name, None)

    async def _ask(self, name: str) -> Records | str:
        """A and AAAA queried at once, merged."""
        if not name:
            return INVALID_NAME
        try:
            qname = dns.name.from_text(name)
        except dns.exception.DNSException:
            return INVALID_NAME
        async with asyncio.TaskGroup() as group:
            v4 = group.create_task(self._query(qname, dns.rdatatype.A))
            v6 = group.create_task(self._query(qname, dns.rdatatype.AAAA))
        return merge(v4.result(), v6.result())

    async def _query(self, qname: dns.name.Name, rdtype: dns.rdatatype.RdataType) -> Records | str:
        try:
            answer = await self._dns.resolve(qname, rdtype, search=False, raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN:
            return NO_SUCH_DOMAIN
        except dns.exception.Timeout:
            return TIMEOUT
        except dns.exception.DNSException:
            return RESOLVER_ERROR
        if answer.rrset is None:
            return Records((), 0)
        addresses = tuple(rdata.to_text() for rdata in answer.rrset)
        return Records(addresses, answer.chaining_result.minimum_ttl)


__all__ = ["DNSConfig", "Records", "Resolver", "ip_literal", "merge", "name_key", "parse_hosts"]
