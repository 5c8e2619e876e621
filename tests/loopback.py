"""Nothing the suite does leaves loopback.

scripts/test.sh runs the suite in a network namespace holding only ``lo``, where a packet for
any other address fails at once. This module checks that the namespace is in force (without
sending anything), and guards the one place where Harvest opens a DNS resolver, so that a
cache or gatherer under test asks a resolver on loopback and never the system's.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harvest_common.dns import DNSConfig, Resolver

# Set to 1 to run tests outside the namespace (a quick local run of pure tests).
ANY_NETWORK = "HARVEST_TESTS_ANY_NETWORK"
_IFF_UP = 0x1
_SIOCGIFFLAGS = 0x8913
SYSTEM_HOSTS = Path("/etc/hosts")


def interface_flags(name: str) -> int:
    """The flags of network interface ``name`` (SIOCGIFFLAGS on a socket that sends nothing;
    /sys/class/net may show another namespace's interfaces)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh", name.encode(), 0)
        answer = fcntl.ioctl(probe, _SIOCGIFFLAGS, request)
    flags: int = struct.unpack("16sh", answer)[1]
    return flags


def outside_loopback(flags_of: Callable[[str], int] = interface_flags) -> str | None:
    """Why this process can reach more than loopback, or None when ``lo`` is its only
    interface and is up. Reads the interface table and ``lo``'s flags; sends nothing."""
    names = sorted(name for _, name in socket.if_nameindex())
    if names != ["lo"]:
        return f"network interfaces {', '.join(names)}: only lo may be present"
    if not flags_of("lo") & _IFF_UP:
        return "the loopback interface is down (ip link set lo up)"
    return None


def refusal(reason: str) -> str:
    return (
        f"{reason}. The suite runs only in a network namespace holding just loopback, so that"
        " nothing it does can leave this machine: run ./scripts/test.sh (it makes the"
        f" namespace), or set {ANY_NETWORK}=1 for a quick local run of pure tests."
    )


def check_namespace() -> None:
    """Stop the run at once when the namespace is not in force (unless ANY_NETWORK=1)."""
    reason = outside_loopback()
    if reason is not None and os.environ.get(ANY_NETWORK) != "1":
        raise pytest.UsageError(refusal(reason))


class SystemResolverUsed(AssertionError):
    """A component under test was about to ask a resolver that is not on loopback."""


def loopback_resolver_problem(config: DNSConfig) -> str | None:
    """Why ``config`` would ask something other than a resolver on loopback, or None."""
    if not config.nameservers:
        return "dns.nameservers is empty, so the system's resolver (/etc/resolv.conf) is asked"
    for server in config.nameservers:
        if not ipaddress.ip_address(server.host).is_loopback:
            return f"dns.nameservers holds {server}, which is not on loopback"
    if config.hosts_file == SYSTEM_HOSTS:
        return f"dns.hosts_file is the system's {SYSTEM_HOSTS}"
    return None


def require_loopback_resolver(config: DNSConfig) -> None:
    problem = loopback_resolver_problem(config)
    if problem is not None:
        raise SystemResolverUsed(
            f"{problem}: a cache or gatherer under test must get a resolver on loopback"
            " (tests.support.cache_config gives one) or use only IP literals"
        )


@contextmanager
def resolvers_on_loopback_only() -> Iterator[None]:
    """While active, ``Resolver.open`` refuses a configuration that is not loopback-only."""
    unguarded = Resolver.open.__func__  # type: ignore[attr-defined]

    async def guarded(cls: type[Resolver], config: DNSConfig) -> Resolver:
        require_loopback_resolver(config)
        opened: Resolver = await unguarded(cls, config)
        return opened

    patch = pytest.MonkeyPatch()
    patch.setattr(Resolver, "open", classmethod(guarded))
    try:
        yield
    finally:
        patch.undo()


@contextmanager
def address_on_loopback(address: str) -> Iterator[str]:
    """``address`` added to ``lo`` for a while, so that a test can be a client from beyond
    loopback (a LAN client) without leaving it. Only inside the namespace: on a real host
    this would change its loopback interface."""
    reason = outside_loopback()
    if reason is not None:
        pytest.fail(f"not in a loopback-only namespace ({reason}): {address} not added")
    prefix = "128" if ":" in address else "32"
    subprocess.run(["ip", "addr", "add", f"{address}/{prefix}", "dev", "lo"], check=True)
    try:
        yield address
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/{prefix}", "dev", "lo"], check=True)
