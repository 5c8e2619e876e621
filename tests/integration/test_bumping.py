"""Intercepting CONNECT tunnels (issue 28, item 3): bumped tunnels' requests answered through
the cache under certificates its CA mimics from the origins'; what is spliced and why; a
client refusing the certificate pins its server; an origin failing verification is an error
page inside the tunnel, never its content; no CA, no bumping; a flood of names stays bounded."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import pytest
import trustme

from harvest_cache.bump import authority
from harvest_cache.errors import AuthorityError
from harvest_cache.server.app import CacheServer
from tests.integration.test_metrics import delta, scrape
from tests.support import (
    MakeCache,
    Origin,
    RawResponse,
    open_proxy,
    read_head,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
)
from tests.tls_support import HOST, OTHER, Trust, https_cache, tls_origin

PAGE = b"a page worth caching\n"


async def bump_cache(
    make_cache: MakeCache, trust: Trust, ca_dir: Path, **sections: dict[str, object]
) -> CacheServer:
    """A cache with a new CA in ``ca_dir`` that bumps tunnels to any port."""
    if not (ca_dir / authority.KEY_FILE).exists():
        await make_ca(ca_dir)
    bump = {"enabled": True, "ca_dir": str(ca_dir), **sections.pop("bump", {})}
    access = {"connect_ports": ["1-65535"], **sections.pop("access", {})}
    return await https_cache(make_cache, trust, bump=bump, access=access, **sections)


async def make_ca(ca_dir: Path) -> None:
    # (in a thread: the cache's own file work must not run on the event loop)
    now = datetime.datetime.now(datetime.UTC)
    await asyncio.to_thread(authority.create, ca_dir, "test", now)


async def ca_pem(ca_dir: Path) -> bytes:
    ca = await asyncio.to_thread(authority.load, ca_dir)
    return ca.export("pem")


def trusting(*pems: bytes) -> ssl.SSLContext:
    """A client context trusting these CAs alone."""
    context = ssl.create_default_context(cadata="".join(p.decode() for p in pems))
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


async def through_tunnel(
    cache: CacheServer,
    authority_form: str,
    context: ssl.SSLContext,
    server_name: str,
    paths: list[str],
) -> tuple[dict[str, object], list[RawResponse]]:
    """CONNECT, TLS to ``server_name`` inside, GET each path on the one connection: the
    certificate the client was shown and the responses."""
    reader, writer = await open_proxy(cache.address[1])
    try:
        writer.write(
            f"CONNECT {authority_form} HTTP/1.1\r\nHost: {authority_form}\r\n\r\n".encode()
        )
        status, _, _ = await read_head(reader)
        assert status == 200
        await writer.start_tls(context, server_hostname=server_name)
        ssl_object = writer.get_extra_info("ssl_object")
        shown = ssl_object.getpeercert()
        answers = []
        for path in paths:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {authority_form}\r\n\r\n".encode())
            answers.append(await read_response(reader))
        return shown, answers
    finally:
        writer.close()


def by_the_cache(shown: dict[str, object]) -> bool:
    """Whether the certificate shown was made by the cache's CA."""
    issuer = dict(x[0] for x in shown["issuer"])  # type: ignore[attr-defined]
    return bool(issuer.get("organizationName") == "Harvest")


def names_of(shown: dict[str, object]) -> list[str]:
    return [value for _, value in shown["subjectAltName"]]  # type: ignore[union-attr, attr-defined]


async def test_a_bumped_tunnels_requests_go_through_the_cache(
    make_cache: MakeCache, trust: Trust, tmp_path: Path
) -> None:
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST, OTHER))) as origin:
        origin.route("/page", static(PAGE, {"Cache-Control": "max-age=60"}))
        origin.route("/other", static(b"other", {"Cache-Control": "no-store"}))
        cache = await bump_cache(make_cache, trust, tmp_path / "ca")
        client = trusting(await ca_pem(tmp_path / "ca"))
        where = f"{HOST}:{origin.port}"
        before = await scrape(cache)
        shown, first = await through_tunnel(cache, where, client, HOST, ["/page", "/other"])
        _, second = await through_tunnel(cache, where, client, HOST, ["/page"] * 3)
        after = await scrape(cache)
        assert delta(before, after, "harvest_cache_tunnels_bumped_total") == 2
        assert delta(before, after, "harvest_cache_bump_certificates_minted_total") == 1
        assert delta(before, after, "harvest_cache_hits_total", tier="memory") == 3
        assert [(r.status, r.body) for r in first + second] == [
            (200, PAGE),
            (200, b"other"),
            (200, PAGE),
            (200, PAGE),
            (200, PAGE),
        ]
        # The second and third time on its tunnel, the hits were answered on the fast path
        # (the second from the memory tier, the third from the head it remembered).
        assert cache.proxy is not None
        assert cache.proxy.heads.reused == 2
        assert origin.hits["/page"] == 1  # the second tunnel's was a hit
        # The certificate is the cache's CA's, with the origin's names (as Squid's mimic).
        assert by_the_cache(shown)
        assert names_of(shown) == [HOST, OTHER]
        assert cache.bumper is not None
        assert (cache.bumper.bumped, cache.bumper.minted) == (2, 1)
        lines = await stop_and_read_log(cache)
    url = f"https://{where}"
    assert [(line.result, line.method, line.url) for line in lines] == [
        ("NONE", "CONNECT", where),
        ("TCP_MISS", "GET", f"{url}/page"),
        ("TCP_MISS", "GET", f"{url}/other"),
        ("NONE", "CONNECT", where),
        ("TCP_MEM_HIT", "GET", f"{url}/page"),
        ("TCP_MEM_HIT", "GET", f"{url}/page"),
        ("TCP_MEM_HIT", "GET", f"{url}/page"),
    ]


async def test_curl_through_an_intercepting_cache(
    make_cache: MakeCache, trust: Trust, tmp_path: Path
) -> None:
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:
        origin.route("/page", static(PAGE, {"Cache-Control": "max-age=60"}))
        cache = await bump_cache(make_cache, trust, tmp_path / "ca")
        url = origin.url("/page", HOST)
        proxy = f"http://127.0.0.1:{cache.address[1]}"
        for _ in range(2):
            curl = await asyncio.create_subprocess_exec(
                "curl", "-sS", "--max-time", "10", "--proxy", proxy,
                "--cacert", str(tmp_path / "ca" / "ca.pem"), url,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await curl.communicate()
            assert (curl.returncode, out) == (0, PAGE), err
        assert origin.hits["/page"] == 1
        lines = await stop_and_read_log(cache)
    assert [line.result for line in lines if line.method == "GET"] == ["TCP_MISS", "TCP_MEM_HIT"]


@pytest.mark.parametrize(
    ("sections", "reason"),
    [
        ({"bump": {"splice_domains": [HOST]}}, "domain"),
        ({"bump": {"splice_networks": ["127.0.0.0/8"]}}, "network"),
        ({"access": {"bump_allow": ["10.0.0.0/8"]}}, "client"),
    ],
)
async def test_what_is_spliced_keeps_the_origins_own_certificate(
    make_cache: MakeCache,
    trust: Trust,
    tmp_path: Path,
    sections: dict[str, dict[str, object]],
    reason: str,
) -> None:
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:
        origin.route("/page", static(PAGE, {"Cache-Control": "max-age=60"}))
        cache = await bump_cache(make_cache, trust, tmp_path / "ca", **sections)
        # The client trusts the origin's CA alone: only the origin's certificate will do.
        client = trusting(trust.ca.cert_pem.bytes())
        where = f"{HOST}:{origin.port}"
        shown, answers = await through_tunnel(cache, where, client, HOST, ["/page"] * 2)
        assert [(r.status, r.body) for r in answers] == [(200, PAGE)] * 2
        assert not by_the_cache(shown)
        assert origin.hits["/page"] == 2  # relayed, not cached
        assert cache.bumper is not None
        assert cache.bumper.spliced == {reason: 1}
        scraped = await scrape(cache)
        assert scraped.get("harvest_cache_tunnels_spliced_total", reason=reason) == 1
        lines = await stop_and_read_log(cache)
    assert [(line.result, line.method) for line in lines] == [("TCP_TUNNEL", "CONNECT")]


async def test_bytes_that_are_not_tls_are_relayed(
    make_cache: MakeCache, trust: Trust, tmp_path: Path, origin: Origin
) -> None:
    origin.route("/plain", static(b"plain http in a tunnel"))
    cache = await bump_cache(make_cache, trust, tmp_path / "ca")
    reader, writer = await open_proxy(cache.address[1])
    try:
        where = f"127.0.0.1:{origin.port}"
        writer.write(f"CONNECT {where} HTTP/1.1\r\nHost: {where}\r\n\r\n".encode())
        assert (await read_head(reader))[0] == 200
        writer.write(request_bytes("GET", "/plain", headers=[("Host", where)]))
        answer = await read_response(reader)
    finally:
        writer.close()
    assert (answer.status, answer.body) == (200, b"plain http in a tunnel")
    assert cache.bumper is not None
    assert cache.bumper.spliced == {"not-tls": 1}


async def test_a_client_refusing_the_certificate_has_its_server_spliced(
    make_cache: MakeCache, trust: Trust, tmp_path: Path
) -> None:
    """As an app pinning its server's certificate would: the next tunnel is relayed."""
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:
        origin.route("/page", static(PAGE, {"Cache-Control": "max-age=60"}))
        cache = await bump_cache(make_cache, trust, tmp_path / "ca")
        pinned = trusting(trust.ca.cert_pem.bytes())  # (without the cache's CA)
        where = f"{HOST}:{origin.port}"
        with pytest.raises(ssl.SSLCertVerificationError):
            await through_tunnel(cache, where, pinned, HOST, ["/page"])
        assert cache.bumper is not None
        for _ in range(100):  # (bounded: the cache reads the client's alert)
            if cache.bumper.refused:
                break
            await asyncio.sleep(0.01)
        assert cache.bumper.refused == 1
        shown, answers = await through_tunnel(cache, where, pinned, HOST, ["/page"])
        assert answers[0].body == PAGE
        assert not by_the_cache(shown)
        assert cache.bumper.spliced == {"pinned": 1}


async def test_an_origin_failing_verification_gets_an_error_page_in_the_tunnel(
    make_cache: MakeCache, trust: Trust, tmp_path: Path
) -> None:
    stranger = trustme.CA()
    async with tls_origin(trust.context(stranger.issue_cert(HOST))) as origin:
        origin.route("/page", static(b"must not be seen", {"Cache-Control": "max-age=60"}))
        cache = await bump_cache(make_cache, trust, tmp_path / "ca")
        client = trusting(await ca_pem(tmp_path / "ca"))
        where = f"{HOST}:{origin.port}"
        shown, answers = await through_tunnel(cache, where, client, HOST, ["/page"])
        assert names_of(shown) == [HOST]
        assert answers[0].status == 502
        assert "is not trusted: unable to get local issuer certificate" in answers[0].text
        assert origin.hits["/page"] == 0
        # Nothing of it is kept: the next tunnel asks the origin again.
        assert not list((tmp_path / "ca" / "certificates").glob("origin*.pem"))


async def test_bumping_needs_a_ca_whose_key_is_private(
    make_cache: MakeCache, trust: Trust, tmp_path: Path
) -> None:
    with pytest.raises(AuthorityError, match="harvest-cache ca init"):
        await https_cache(
            make_cache, trust, bump={"enabled": True, "ca_dir": str(tmp_path / "none")}
        )
    await make_ca(tmp_path / "ca")
    (tmp_path / "ca" / authority.KEY_FILE).chmod(0o644)
    with pytest.raises(AuthorityError, match="others may read"):
        await https_cache(make_cache, trust, bump={"enabled": True, "ca_dir": str(tmp_path / "ca")})


async def test_a_flood_of_server_names_stays_within_its_bounds(
    make_cache: MakeCache, trust: Trust, tmp_path: Path
) -> None:
    names = [f"n{i}.flood.harvest.test" for i in range(80)]
    hosts = tmp_path / "flood-hosts"
    hosts.write_text("".join(f"127.0.0.1 {name}\n" for name in names))
    async with tls_origin(trust.context(trust.ca.issue_cert("*.flood.harvest.test"))) as origin:
        origin.route("/", static(b"flood", {"Cache-Control": "no-store"}))
        cache = await bump_cache(
            make_cache,
            trust,
            tmp_path / "ca",
            bump={"certificates": 16},
            dns={"hosts_file": str(hosts)},
        )
        client = trusting(await ca_pem(tmp_path / "ca"))
        for name in names:
            _, answers = await through_tunnel(cache, f"{name}:{origin.port}", client, name, ["/"])
            assert answers[0].body == b"flood"
        assert cache.bumper is not None
        assert cache.bumper.minted == 80
        assert len(cache.bumper._contexts) == 16
    kept = list((tmp_path / "ca" / "certificates").glob("n*.pem"))
    assert len(kept) <= 64
