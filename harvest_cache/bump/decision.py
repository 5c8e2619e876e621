"""Whether to intercept a CONNECT tunnel (bump) or relay its bytes (splice), from what its
client's first flight says, and the servers whose clients refused the cache's certificate.

Sans-IO: values and ``now`` in, a decision out.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from harvest_cache.bump.client_hello import ClientHello, Peeked

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# Servers remembered as refused (the oldest forgotten first): a flood of names stays bounded.
MAX_PINS = 4096


@dataclass(frozen=True, slots=True)
class Bump:
    server_name: str  # the name the certificate is made for, and the requests' host


@dataclass(frozen=True, slots=True)
class Splice:
    reason: str  # client, domain, network, not-tls, pinned


@dataclass(frozen=True, slots=True)
class Rules:
    """What the configuration says (``access.bump_allow``, ``bump.splice_*``)."""

    bump_allow: Sequence[IPNetwork]
    splice_domains: Sequence[str]
    splice_networks: Sequence[IPNetwork]


class Pins:
    """Server names whose clients refused the cache's certificate, until when."""

    def __init__(self, seconds: float, limit: int = MAX_PINS) -> None:
        self.seconds = seconds
        self._limit = limit
        self._until: OrderedDict[str, float] = OrderedDict()

    def refused(self, name: str, now: float) -> None:
        """A client refused the certificate made for ``name`` at ``now``."""
        self._until.pop(name, None)
        self._until[name] = now + self.seconds
        while len(self._until) > self._limit:
            self._until.popitem(last=False)

    def pinned(self, name: str, now: float) -> bool:
        until = self._until.get(name)
        if until is None:
            return False
        if now >= until:
            del self._until[name]
            return False
        return True

    def __len__(self) -> int:
        return len(self._until)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _in(address: str, networks: Sequence[IPNetwork]) -> bool:
    ip = _address(address)
    return ip is not None and any(ip in network for network in networks)


def within(name: str, domains: Sequence[str]) -> bool:
    """Whether ``name`` is one of ``domains`` or a subdomain of one."""
    return any(name == d or name.endswith("." + d) for d in domains)


def decide(
    hello: ClientHello | Peeked,
    connect_host: str,
    server_ips: Sequence[str],
    client_ip: str,
    rules: Rules,
    pins: Pins,
    now: float,
) -> Bump | Splice:
    """Bump or splice the tunnel to ``connect_host`` (whose addresses are ``server_ips``)
    that the client at ``client_ip`` opened, given its first flight ``hello``.

    The client's own rules first (a client not allowed to be bumped), then the bytes (not
    TLS), then the server's name: the SNI if the client sent one, else the CONNECT host.
    """
    if not _in(client_ip, rules.bump_allow):
        return Splice("client")
    if not isinstance(hello, ClientHello):
        return Splice("not-tls")
    name = hello.server_name or connect_host.lower()
    if within(name, rules.splice_domains) or within(connect_host.lower(), rules.splice_domains):
        return Splice("domain")
    if any(_in(ip, rules.splice_networks) for ip in (connect_host, *server_ips)):
        return Splice("network")
    if pins.pinned(name, now):
        return Splice("pinned")
    return Bump(name)
