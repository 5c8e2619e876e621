"""Who may use the proxy and which ports it may reach: not an open proxy by default."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from harvest_cache.config import AccessConfig, IPNetwork


def _in_ranges(port: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= port <= hi for lo, hi in ranges)


def address_in(ip: str, networks: tuple[IPNetwork, ...]) -> bool:
    """Whether ``ip`` (IPv4-mapped IPv6 counting as IPv4) is in one of ``networks``."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in net for net in networks)


class Access:
    def __init__(self, config: AccessConfig) -> None:
        self._config = config
        # One lookup per client address, not per request.
        self.client_allowed = lru_cache(maxsize=4096)(self._client_allowed)
        self.port_allowed = lru_cache(maxsize=1024)(self._port_allowed)

    def _client_allowed(self, ip: str) -> bool:
        return address_in(ip, self._config.allow)

    def _port_allowed(self, port: int) -> bool:
        return _in_ranges(port, self._config.safe_ports)

    def purge_allowed(self, ip: str) -> bool:
        return address_in(ip, self._config.purge)

    def connect_allowed(self, port: int) -> bool:
        return _in_ranges(port, self._config.connect_ports)
