"""The cache at the Harvest Server Registry (HSR): with ``[hsr] url`` set, a ``CACHE`` record
is kept registered while the cache runs and renewed every ``renew`` seconds, before its
time-to-live (two renewal periods) runs out (harvest_common.hsr_client).

The record names the cache (``server.name``, else HOST:PORT), its host and proxy port, and
says in attributes of its own what clients and peers need to use it: ``Ports`` (every port
it answers on: ``http=3128 icp=3130 htcp=4827 admin=3129``, those in use), ``Region`` and
``Networks`` (the client networks it serves, one CIDR a line), when configured. With several
workers the supervisor registers the cache once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from harvest_cache import __version__
from harvest_cache.config import Config
from harvest_common import hsr_client


def serves(config: Config, http_port: int, admin_port: int | None) -> tuple[tuple[str, str], ...]:
    """The record's attributes saying where the cache answers and whom it serves."""
    ports = [("http", http_port), ("icp", config.icp_port), ("htcp", config.htcp_port)]
    ports.append(("admin", admin_port or 0))
    listed = [("Ports", " ".join(f"{name}={port}" for name, port in ports if port))]
    if config.hsr.region:
        listed.append(("Region", config.hsr.region))
    if config.hsr.networks:
        listed.append(("Networks", "\n".join(str(n) for n in config.hsr.networks)))
    return tuple(listed)


@asynccontextmanager
async def registered(
    config: Config, name: str, address: tuple[str, int], admin_port: int | None
) -> AsyncIterator[None]:
    """Keep the cache named ``name``, proxying on ``address``, registered while the block
    runs (nothing when no HSR is configured)."""
    async with hsr_client.registered(
        config.hsr,
        "cache",
        name,
        address,
        f"harvest-cache {__version__}",
        attributes=serves(config, address[1], admin_port),
    ):
        yield
