"""The gatherer at the Harvest Server Registry (HSR): while ``serve`` runs, a ``GATHERER``
record is kept registered and renewed from the ``[hsr]`` settings (harvest_common.hsr_client):
its name, the address brokers pull its records from, and what it gathers.

What it gathers is told in attributes of their own, each one value per line: ``Root-URLs``
(the RootNode URLs), ``Leaf-URLs`` (the LeafNode URLs) and ``Hosts`` (their hosts, with the
port when the URL names one). URLs that programs print are known only when gathering, so they
are not in it. Each list stops at ``MAX_LISTED``: a registration must stay small.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from gatherer.config import GathererConfig, LeafNode, RootNode
from harvest_common import hsr_client

MAX_LISTED = 100


def _host(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.hostname:  # a FILE URL: this machine
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return host if parts.port is None else f"{host}:{parts.port}"


def _listed(values: Iterable[str]) -> str:
    return "\n".join(list(values)[:MAX_LISTED])


def gathers(config: GathererConfig) -> tuple[tuple[str, str], ...]:
    """The registration's attributes saying what the gatherer gathers (those it has)."""
    roots = [node.url for node in config.root_nodes if isinstance(node, RootNode)]
    leaves = [node.url for node in config.leaf_nodes if isinstance(node, LeafNode)]
    hosts = sorted({host for url in (*roots, *leaves) if (host := _host(url)) is not None})
    listed = (("Root-URLs", roots), ("Leaf-URLs", leaves), ("Hosts", hosts))
    return tuple((name, _listed(values)) for name, values in listed if values)


@asynccontextmanager
async def registered(
    config: GathererConfig, address: tuple[str, int], version: str
) -> AsyncIterator[None]:
    """Keep the gatherer serving on ``address`` registered while the block runs (nothing
    when no HSR is configured). On a wildcard address it is registered under Gatherer-Host
    when that is set (else the machine's name)."""
    host, port = address
    if host in hsr_client.WILDCARDS and config.host:
        host = config.host
    async with hsr_client.registered(
        config.hsr, "gatherer", config.name, (host, port), version, attributes=gathers(config)
    ):
        yield
