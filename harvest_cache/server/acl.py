"""Who may use the proxy and where it may go: not an open proxy by default, and not a way
into the host's own services for anyone beyond loopback."""

from __future__ import annotations

import ipaddress
import socket
import time
from functools import lru_cache

from harvest_cache.config import AccessConfig
from harvest_cache.errors import RequestError
from harvest_cache.http.target import parse_absolute
from harvest_common.config import IPNetwork

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
# Seconds an address is remembered as this host's own or not (interfaces come and go).
_OWN_ADDRESS_TTL = 60.0


def _in_ranges(port: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= port <= hi for lo, hi in ranges)


def _address(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``ip`` parsed, an IPv4-mapped IPv6 address as its IPv4 one; None if it is not one."""
    try:
        address = ipaddress.ip_address(ip.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def address_in(ip: str, networks: tuple[IPNetwork, ...]) -> bool:
    """Whether ``ip`` (IPv4-mapped IPv6 counting as IPv4) is in one of ``networks``."""
    address = _address(ip)
    return address is not None and any(address in net for net in networks)


def _bindable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is one of this host's (a socket can be bound to it; nothing is
    sent, and the bind does not wait)."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def localhost_name(host: str) -> bool:
    """``localhost`` and the names under it, which always mean loopback (RFC 6761 6.3)."""
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


class Access:
    def __init__(self, config: AccessConfig) -> None:
        self._config = config
        # One lookup per client address, not per request.
        self.client_allowed = lru_cache(maxsize=4096)(self._client_allowed)
        self.port_allowed = lru_cache(maxsize=1024)(self._port_allowed)
        self.reaches_local = lru_cache(maxsize=4096)(self._reaches_local)
        self.local_target = lru_cache(maxsize=4096)(self._local_target)
        self._own: dict[str, tuple[bool, float]] = {}

    def _client_allowed(self, ip: str) -> bool:
        return address_in(ip, self._config.allow)

    def _port_allowed(self, port: int) -> bool:
        return _in_ranges(port, self._config.safe_ports)

    def _reaches_local(self, client_ip: str) -> bool:
        """Whether the client at ``client_ip`` may reach this host through the proxy."""
        return self._config.local_destinations or address_in(client_ip, LOOPBACK)

    def local_address(self, ip: str, now: float | None = None) -> bool:
        """Whether a connection to ``ip`` would reach this host: loopback, the unspecified
        address, or an address of one of its interfaces."""
        address = _address(ip)
        if address is None:
            return False
        if address.is_loopback or address.is_unspecified:
            return True
        now = time.monotonic() if now is None else now
        known = self._own.get(ip)
        if known is not None and now - known[1] < _OWN_ADDRESS_TTL:
            return known[0]
        if len(self._own) >= 4096:
            self._own.clear()
        own = _bindable(address)
        self._own[ip] = (own, now)
        return own

    def local_host(self, host: str) -> bool:
        """Whether the target host ``host`` (a name or an IP literal) is this host, as far as
        can be told without DNS (a name's addresses are judged when connecting)."""
        return localhost_name(host) or self.local_address(host)

    def _local_target(self, target: bytes) -> bool:
        """``local_host`` for an absolute-form request target, as a fast path has it."""
        try:
            host = parse_absolute(target.decode("latin-1")).host
        except RequestError:
            return False  # (refused as malformed on the general path)
        return self.local_host(host)

    def refused_peer(self, client_ip: str, peer_ip: str) -> bool:
        """Whether a connection to ``peer_ip`` for the client at ``client_ip`` is refused."""
        return not self.reaches_local(client_ip) and self.local_address(peer_ip)

    def purge_allowed(self, ip: str) -> bool:
        return address_in(ip, self._config.purge)

    def connect_allowed(self, port: int) -> bool:
        return _in_ranges(port, self._config.connect_ports)
