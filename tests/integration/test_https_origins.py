"""HTTPS origins through the cache (issue 28, items 1 and 2): absolute-form ``https://``
requests fetched over TLS 1.2 or 1.3 with SNI and ALPN, the origin's certificate verified
against the configured trust, cached with the whole policy, over pooled connections whose
sessions are resumed; every kind of verification failure a 502 that says why."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from harvest_cache.server.app import CacheServer
from harvest_common.errors import ConfigError
from tests.integration.test_metrics import delta, scrape
from tests.support import (
    MakeCache,
    Origin,
    cache_config,
    open_proxy,
    read_response,
    request_bytes,
    static,
    stop_and_read_log,
)
from tests.tls_support import HOST, OTHER, Trust, get, https_cache, ours, tls_origin


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
async def test_an_https_url_is_fetched_over_tls_and_then_a_hit(
    make_cache: MakeCache, trust: Trust, version: ssl.TLSVersion
) -> None:
    context = trust.context(trust.ca.issue_cert(HOST), version)
    async with tls_origin(context) as origin:

        async def page(request: web.Request) -> web.Response:
            ssl_object = request.transport.get_extra_info("ssl_object")  # type: ignore[union-attr]
            trust.alpn.append(ssl_object.selected_alpn_protocol())
            assert (
                ssl_object.version() == {"TLSv1_2": "TLSv1.2", "TLSv1_3": "TLSv1.3"}[version.name]
            )
            return web.Response(
                body=b"secret page", headers={"Cache-Control": "max-age=60", "ETag": '"v1"'}
            )

        origin.route("/page", page)
        cache = await https_cache(make_cache, trust)
        url = origin.url("/page", HOST)
        assert url.startswith("https://")
        first = await get(cache, url)
        assert (first.status, first.body) == (200, b"secret page"), first
        assert ours(first)["fwd"] == "uri-miss"
        second = await get(cache, url)
        assert (second.status, second.body) == (200, b"secret page")
        assert ours(second).get("hit") is True
        assert origin.hits["/page"] == 1
        assert trust.server_names == [HOST]  # SNI: the URL's host name
        assert trust.alpn == ["http/1.1"]
        # The same path over plain HTTP is another object (the scheme is part of the key).
        lines = await stop_and_read_log(cache)
    assert [(line.result, line.url) for line in lines] == [
        ("TCP_MISS", url),
        ("TCP_MEM_HIT", url),
    ]


async def test_https_and_http_urls_are_different_objects(
    make_cache: MakeCache, trust: Trust, origin: Origin
) -> None:
    origin.route("/same", static(b"plain", {"Cache-Control": "max-age=60"}))
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as secure:
        secure.route("/same", static(b"secure", {"Cache-Control": "max-age=60"}))
        cache = await https_cache(make_cache, trust)
        # The two origins listen on different ports; one name reaches both.
        plain_url, secure_url = origin.url("/same", HOST), secure.url("/same", HOST)
        for _ in range(2):
            assert (await get(cache, secure_url)).body == b"secure"
            assert (await get(cache, plain_url)).body == b"plain"
        assert (origin.hits["/same"], secure.hits["/same"]) == (1, 1)


async def test_a_stale_https_object_is_revalidated(make_cache: MakeCache, trust: Trust) -> None:
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:
        conditionals: list[str | None] = []

        async def changing(request: web.Request) -> web.Response:
            conditionals.append(request.headers.get("If-None-Match"))
            if request.headers.get("If-None-Match") == '"v1"':
                return web.Response(status=304, headers={"ETag": '"v1"'})
            return web.Response(
                body=b"v1 body", headers={"Cache-Control": "max-age=0", "ETag": '"v1"'}
            )

        origin.route("/r", changing)
        cache = await https_cache(make_cache, trust)
        url = origin.url("/r", HOST)
        assert (await get(cache, url)).body == b"v1 body"
        again = await get(cache, url)
        assert (again.status, again.body) == (200, b"v1 body")
        assert conditionals == [None, '"v1"']
        lines = await stop_and_read_log(cache)
    assert [line.result for line in lines] == ["TCP_MISS", "TCP_REFRESH_UNMODIFIED"]


async def test_connections_are_pooled_and_sessions_resumed(
    make_cache: MakeCache, trust: Trust
) -> None:
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:
        origin.route("/keep", static(b"k", {"Cache-Control": "no-store"}))
        origin.route("/close", static(b"c", {"Cache-Control": "no-store", "Connection": "close"}))
        cache = await https_cache(make_cache, trust)
        before = await scrape(cache)
        for _ in range(3):  # one connection, kept alive
            assert (await get(cache, origin.url("/keep", HOST))).body == b"k"
        # The first goes on the kept connection, which the origin then closes; the next
        # two each on a new one, resuming the last session.
        for _ in range(3):
            assert (await get(cache, origin.url("/close", HOST))).body == b"c"
        after = await scrape(cache)
    full = delta(before, after, "harvest_cache_upstream_tls_handshakes_total", resumed="no")
    resumed = delta(before, after, "harvest_cache_upstream_tls_handshakes_total", resumed="yes")
    reused = delta(before, after, "harvest_cache_upstream_connections_reused_total", to="origin")
    assert (full, resumed) == (1, 2)
    assert reused == 3


def _expired(ca: trustme.CA) -> trustme.LeafCert:
    now = datetime.datetime.now(datetime.UTC)
    return ca.issue_cert(
        HOST,
        not_before=now - datetime.timedelta(days=30),
        not_after=now - datetime.timedelta(days=1),
    )


@pytest.mark.parametrize(
    ("kind", "make_cert", "said"),
    [
        ("expired", _expired, "certificate has expired"),
        (
            "wrong name",
            lambda ca: ca.issue_cert(OTHER),
            f"Hostname mismatch, certificate is not valid for '{HOST}'",
        ),
        (
            "unknown issuer",
            lambda ca: trustme.CA().issue_cert(HOST),
            "unable to get local issuer certificate",
        ),
    ],
)
async def test_a_certificate_that_fails_verification_is_a_502_saying_why(
    make_cache: MakeCache,
    trust: Trust,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    make_cert: object,
    said: str,
) -> None:
    cert = make_cert(trust.ca)  # type: ignore[operator]
    async with tls_origin(trust.context(cert)) as origin:
        origin.route("/p", static(b"must not be seen", {"Cache-Control": "max-age=60"}))
        cache = await https_cache(make_cache, trust)
        before = await scrape(cache)
        resp = await get(cache, origin.url("/p", HOST))
        after = await scrape(cache)
        assert resp.status == 502, kind
        assert said in resp.text, resp.text
        assert f"{HOST}:{origin.port}" in resp.text
        assert b"must not be seen" not in resp.body
        assert ours(resp)["detail"] == "tls_verify"
        assert origin.hits["/p"] == 0
        assert delta(before, after, "harvest_cache_upstream_errors_total", kind="tls_verify") == 1
    assert any(said in r.getMessage() for r in caplog.records), "the log says why too"


async def test_a_server_that_does_not_speak_tls_is_a_502(
    make_cache: MakeCache, trust: Trust, origin: Origin
) -> None:
    origin.route("/p", static(b"plain text", {"Cache-Control": "max-age=60"}))
    cache = await https_cache(make_cache, trust)
    # An https:// URL naming a plain-HTTP server's port: no TLS session can be had.
    resp = await get(cache, f"https://{HOST}:{origin.port}/p")
    assert resp.status == 502
    assert f"no TLS session with {HOST}:{origin.port}" in resp.text
    assert ours(resp)["detail"] == "tls_handshake"


async def test_a_refused_certificate_is_not_hidden_by_a_stale_copy(
    make_cache: MakeCache, trust: Trust
) -> None:
    """An object stored while the certificate was good is not served stale once the origin
    presents one the cache refuses (as it would be when the origin cannot be reached)."""
    good = trust.context(trust.ca.issue_cert(HOST))
    bad = trust.context(trustme.CA().issue_cert(HOST))
    presenting = {"context": good}

    def switch(obj: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        obj.context = presenting["context"]

    front = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trust.ca.issue_cert(HOST).configure_cert(front)
    front.sni_callback = switch
    # Every connection a full handshake (a resumed session was verified when it began).
    front.minimum_version = ssl.TLSVersion.TLSv1_3
    front.num_tickets = 0
    async with tls_origin(front) as origin:
        origin.route("/s", static(b"old", {"Cache-Control": "max-age=1", "Connection": "close"}))
        cache = await https_cache(make_cache, trust)
        url = origin.url("/s", HOST)
        assert (await get(cache, url)).body == b"old"
        presenting["context"] = bad
        await asyncio.sleep(1.2)  # stale now
        resp = await get(cache, url)
        assert resp.status == 502
        assert "is not trusted" in resp.text
        assert b"old" not in resp.body


async def test_an_unreadable_trust_bundle_stops_the_start(tmp_path: Path) -> None:
    bundle = tmp_path / "not-pem.pem"
    bundle.write_text("not a certificate\n")
    for path in (bundle, tmp_path / "missing.pem"):
        with pytest.raises(ConfigError, match=r"upstream\.tls_ca_file: cannot load"):
            await CacheServer.start(cache_config(tmp_path, upstream={"tls_ca_file": str(path)}))


async def test_concurrent_requests_for_one_https_url_share_one_fetch(
    make_cache: MakeCache, trust: Trust
) -> None:
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:
        release = asyncio.Event()

        async def slow(request: web.Request) -> web.Response:
            await asyncio.wait_for(release.wait(), 5)
            return web.Response(body=b"shared", headers={"Cache-Control": "max-age=60"})

        origin.route("/slow", slow)
        cache = await https_cache(make_cache, trust)
        url = origin.url("/slow", HOST)
        waiting = [asyncio.create_task(get(cache, url)) for _ in range(5)]
        for _ in range(200):  # (bounded: until the fetch reaches the origin)
            if origin.hits["/slow"]:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the others join it
        release.set()
        answers = await asyncio.gather(*waiting)
        assert [(a.status, a.body) for a in answers] == [(200, b"shared")] * 5
        assert origin.hits["/slow"] == 1


class TlsFront:
    """TLS in front of a plain listener (as stunnel or a load balancer would be): each
    connection's bytes relayed to ``port`` once its handshake is done."""

    def __init__(self, context: ssl.SSLContext, port: int) -> None:
        self.context = context
        self.port = port
        self.handshakes = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0, ssl=self.context)
        return int(self._server.sockets[0].getsockname()[1])

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        back_reader, back_writer = await asyncio.open_connection("127.0.0.1", self.port)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                for _ in range(100_000):  # (bounded: until either side closes)
                    data = await src.read(65536)
                    if not data:
                        break
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, back_writer), pump(back_reader, writer))


@pytest.mark.parametrize("trusted", [True, False])
async def test_a_parent_reached_over_tls(
    make_cache: MakeCache, trust: Trust, origin: Origin, tmp_path: Path, trusted: bool
) -> None:
    origin.route("/p", static(b"through the parent", {"Cache-Control": "max-age=60"}))
    parent = await make_cache(server={"name": "parent-cache"}, cache={"dir": str(tmp_path / "p")})
    issuer = trust.ca if trusted else trustme.CA()
    front = TlsFront(trust.context(issuer.issue_cert("parent.harvest.test")), parent.address[1])
    hosts = tmp_path / "child-hosts"
    hosts.write_text("127.0.0.1 parent.harvest.test\n")
    async with front as port:
        peer = {"host": "parent.harvest.test", "http_port": port, "icp_port": 0, "tls": True}
        child = await https_cache(
            make_cache,
            trust,
            dns={"hosts_file": str(hosts)},
            hierarchy={"peers": [peer], "never_direct": [{}]},
            cache={"dir": str(tmp_path / "c")},
        )
        answer = await get(child, origin.url("/p"))
    if trusted:
        assert (answer.status, answer.body) == (200, b"through the parent")
        assert origin.hits["/p"] == 1
        assert "parent-cache" in (answer.get("Via") or "")
        assert front.handshakes >= 1
        assert trust.server_names[-1] == "parent.harvest.test"
    else:
        assert answer.status == 504  # never_direct, and the only parent refused
        assert "parent.harvest.test" in answer.text
        assert "is not trusted" in answer.text
        assert origin.hits["/p"] == 0


async def test_new_https_urls_are_answered_from_a_miss_plan(
    make_cache: MakeCache, trust: Trust
) -> None:
    """Misses asked the same way are planned as for http:// (prepared.misses): sent upstream
    over the pooled TLS connections and answered from the plan."""
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:

        async def numbered(request: web.Request) -> web.Response:
            body = f"object {request.path}".encode()
            return web.Response(body=body, headers={"Cache-Control": "max-age=60"})

        for i in range(8):
            origin.route(f"/m/{i}", numbered)
        cache = await https_cache(make_cache, trust)
        assert cache.proxy is not None
        reader, writer = await open_proxy(cache.address[1])
        fields = [("User-Agent", "plan-test/1"), ("Accept", "*/*")]
        try:
            for i in range(8):
                url = origin.url(f"/m/{i}", HOST)
                writer.write(request_bytes("GET", url, headers=fields))
                answer = await read_response(reader)
                assert (answer.status, answer.body) == (200, f"object /m/{i}".encode())
        finally:
            writer.close()
        assert cache.proxy.fast.planned_misses >= 5  # (the first ones worked out in full)
        assert all(origin.hits[f"/m/{i}"] == 1 for i in range(8))


async def test_curl_asks_for_an_https_url_in_absolute_form(
    make_cache: MakeCache, trust: Trust
) -> None:
    """curl sends ``GET https://...`` to the proxy as plain HTTP (its request target set);
    the cache fetches it over TLS and the second is a hit."""
    async with tls_origin(trust.context(trust.ca.issue_cert(HOST))) as origin:
        origin.route("/c", static(b"asked by curl\n", {"Cache-Control": "max-age=60"}))
        cache = await https_cache(make_cache, trust)
        url = origin.url("/c", HOST)
        for _ in range(2):
            curl = await asyncio.create_subprocess_exec(
                "curl", "-sS", "--max-time", "10",
                "--proxy", f"http://127.0.0.1:{cache.address[1]}",
                "--request-target", url, url.replace("https://", "http://", 1),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await curl.communicate()
            assert (curl.returncode, out) == (0, b"asked by curl\n"), err
        assert origin.hits["/c"] == 1
        lines = await stop_and_read_log(cache)
    assert [(line.result, line.url) for line in lines] == [("TCP_MISS", url), ("TCP_MEM_HIT", url)]
