"""TLS for the tests of HTTPS through the cache: origins with their own CA (trustme), a cache
that trusts it and resolves their names on loopback, and requests to it."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from harvest_cache.server.app import CacheServer
from tests.support import (
    MakeCache,
    Origin,
    RawResponse,
    cache_status_members,
    open_proxy,
    read_response,
    request_bytes,
)

HOST = "origin.harvest.test"
OTHER = "other.harvest.test"


@dataclass
class Trust:
    """The certificate authority the cache is told to trust, and the names it resolves."""

    ca: trustme.CA
    ca_file: Path
    hosts_file: Path
    # What the TLS origins saw: the server name each handshake asked for, the ALPN chosen.
    server_names: list[str | None] = field(default_factory=list)
    alpn: list[str | None] = field(default_factory=list)

    def context(
        self, cert: trustme.LeafCert, version: ssl.TLSVersion | None = None
    ) -> ssl.SSLContext:
        """A server context presenting ``cert``, recording each client's SNI."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        context.set_alpn_protocols(["http/1.1"])  # (aiohttp speaks no HTTP/2)
        if version is not None:
            context.minimum_version = context.maximum_version = version

        def sni(obj: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
            self.server_names.append(name)

        context.sni_callback = sni
        return context


def make_trust(directory: Path) -> Trust:
    """A new origin CA, its file, and a hosts file naming the test hosts on loopback."""
    ca = trustme.CA()
    ca_file = directory / "origin-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    hosts = directory / "hosts"
    hosts.write_text(f"127.0.0.1 {HOST} {OTHER}\n")
    return Trust(ca, ca_file, hosts)


@asynccontextmanager
async def tls_origin(context: ssl.SSLContext) -> AsyncIterator[Origin]:
    origin = Origin(context)
    await origin.start()
    try:
        yield origin
    finally:
        await origin.stop()


async def https_cache(
    make_cache: MakeCache, trust: Trust, **sections: dict[str, object]
) -> CacheServer:
    """A cache that trusts ``trust``'s CA for origins and resolves the test names."""
    upstream = {"tls_ca_file": str(trust.ca_file), **sections.pop("upstream", {})}
    dns = {"hosts_file": str(trust.hosts_file), **sections.pop("dns", {})}
    return await make_cache(dns=dns, upstream=upstream, **sections)


def ours(resp: RawResponse) -> dict[str, str | bool]:
    """The parameters of the cache's own Cache-Status member."""
    value = resp.get("Cache-Status")
    assert value is not None, resp
    name, params = cache_status_members(value)[-1]
    assert name == "test-cache", value
    return params


async def get(
    cache: CacheServer, url: str, headers: list[tuple[str, str]] | None = None
) -> RawResponse:
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(request_bytes("GET", url, headers=headers))
        return await read_response(reader)
    finally:
        writer.close()
