"""HTTPS URLs in absolute form, side by side with Squid's OpenSSL build (squid-openssl): both
fetch ``GET https://...`` over TLS, verifying the origin against the same CA, and cache it;
both refuse an origin whose certificate they cannot trust, showing nothing of it."""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trustme

from harvest_cache.server.app import CacheServer
from tests.interop.conftest import Squid, running_squid
from tests.support import (
    MakeCache,
    Origin,
    RawResponse,
    cache_status_members,
    open_proxy,
    read_response,
    request_bytes,
    static,
)

# A name Squid finds in /etc/hosts, as it has no resolver of the test's.
NAME = "localhost"


@pytest.fixture(scope="module")
def origin_ca() -> Iterator[tuple[trustme.CA, Path]]:
    """The origins' CA, in a file Squid (running as its own user) can read."""
    ca = trustme.CA()
    directory = Path(tempfile.mkdtemp(prefix="harvest-interop-ca-"))
    try:
        os.chmod(directory, 0o755)
        path = directory / "origin-ca.pem"
        ca.cert_pem.write_to_path(str(path))
        os.chmod(path, 0o644)
        yield ca, path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def squid(origin_ca: tuple[trustme.CA, Path]) -> Iterator[Squid]:
    with running_squid(f"tls_outgoing_options cafile={origin_ca[1]}\n") as running:
        yield running


@pytest.fixture
async def harvest(
    make_cache: MakeCache, origin_ca: tuple[trustme.CA, Path], tmp_path: Path
) -> CacheServer:
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 {NAME}\n")
    return await make_cache(
        dns={"hosts_file": str(hosts)}, upstream={"tls_ca_file": str(origin_ca[1])}
    )


async def tls_site(cert: trustme.LeafCert) -> Origin:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    origin = Origin(context)
    await origin.start()
    return origin


async def get(port: int, url: str) -> RawResponse:
    reader, writer = await open_proxy(port)
    try:
        writer.write(request_bytes("GET", url))
        return await read_response(reader)
    finally:
        writer.close()


@pytest.fixture
async def trusted_site(origin_ca: tuple[trustme.CA, Path]) -> AsyncIterator[Origin]:
    origin = await tls_site(origin_ca[0].issue_cert(NAME))
    yield origin
    await origin.stop()


async def test_both_fetch_an_https_url_over_tls_and_cache_it(
    squid: Squid, harvest: CacheServer, trusted_site: Origin
) -> None:
    trusted_site.route("/s", static(b"for squid", {"Cache-Control": "max-age=60"}))
    trusted_site.route("/h", static(b"for harvest", {"Cache-Control": "max-age=60"}))
    squid_url, harvest_url = trusted_site.url("/s", NAME), trusted_site.url("/h", NAME)
    assert squid_url.startswith("https://")
    answers = {}
    for proxy, port, url in (
        ("squid", squid.port, squid_url),
        ("harvest", harvest.address[1], harvest_url),
    ):
        answers[proxy] = [await get(port, url) for _ in range(2)]
    assert [(a.status, a.body) for a in answers["squid"]] == [(200, b"for squid")] * 2
    assert [(a.status, a.body) for a in answers["harvest"]] == [(200, b"for harvest")] * 2
    # The second answer was a hit in each: the origin saw one request from each proxy.
    assert (trusted_site.hits["/s"], trusted_site.hits["/h"]) == (1, 1)
    assert "HIT" in (answers["squid"][1].get("X-Cache") or "")
    status = answers["harvest"][1].get("Cache-Status") or ""
    assert cache_status_members(status)[-1][1].get("hit") is True


async def test_both_refuse_an_origin_they_cannot_trust(squid: Squid, harvest: CacheServer) -> None:
    stranger = trustme.CA()
    origin = await tls_site(stranger.issue_cert(NAME))
    try:
        origin.route("/x", static(b"must not be seen", {"Cache-Control": "max-age=60"}))
        url = origin.url("/x", NAME)
        by_squid = await get(squid.port, url)
        by_harvest = await get(harvest.address[1], url)
    finally:
        await origin.stop()
    # Squid answers 503 (ERR_SECURE_CONNECT_FAIL), Harvest 502 saying why; neither shows it.
    assert by_squid.status == 503
    assert by_harvest.status == 502
    assert "unable to get local issuer certificate" in by_harvest.text
    assert b"must not be seen" not in by_squid.body + by_harvest.body
    assert origin.hits["/x"] == 0
