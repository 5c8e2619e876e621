"""A real member in-process (its broker and its replicator on loopback) against an attacker
who captured signed requests on the way (issue 25): an exact replay within the time window
is refused with 401, and a member whose memory of request ids is full refuses with 503 and
Retry-After rather than forget one."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yarl
from aiohttp import web

from broker.app import Broker
from harvest_common.replication.wire import ChangeList
from replicator import auth
from replicator.client import PeerClient
from replicator.config import from_mapping
from replicator.errors import PeerError
from replicator.node import Node
from tests.broker.test_api import running, url_of

TOKEN = "broker-admin-token"
SECRET = "the-group-secret-of-the-tests"
GROUP = "hsr"


@dataclass
class Member:
    broker: Broker
    node: Node

    @property
    def address(self) -> str:
        host, port = self.node.address
        return f"{host}:{port}"


async def start_member(directory: Path, **replicator: Any) -> AsyncIterator[Member]:
    async with running(directory / "broker", admin_token=TOKEN, member="m1") as broker:
        config = from_mapping(
            {
                "replicator": {
                    "id": "m1",
                    "listen": "127.0.0.1:0",
                    "secret": SECRET,
                    "broker": url_of(broker),
                    "broker_token": TOKEN,
                    "data_dir": str(directory / "replicator"),
                    **replicator,
                },
                "groups": [{"collection": GROUP}],
            }
        )
        async with await Node.start(config) as node:
            yield Member(broker, node)


@pytest.fixture
async def member(tmp_path: Path) -> AsyncIterator[Member]:
    async for started in start_member(tmp_path):
        yield started


@dataclass
class Eavesdropper:
    """A loopback server that takes the place of a member and records what it is sent: the
    requests an attacker on the path would capture."""

    captured: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    runner: web.AppRunner | None = None
    address: str = ""

    async def start(self) -> None:
        async def record(request: web.Request) -> web.Response:
            body = await request.read()
            self.captured.append((request.method, request.raw_path, dict(request.headers), body))
            return web.Response(body=b"")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", record)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.address = f"{host}:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def eavesdropper() -> AsyncIterator[Eavesdropper]:
    recorder = Eavesdropper()
    await recorder.start()
    yield recorder
    await recorder.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


async def capture(
    session: aiohttp.ClientSession, eavesdropper: Eavesdropper, method: str, path: str, body: bytes
) -> tuple[str, str, dict[str, str], bytes]:
    """A request as a member signs it (replicator.client), captured on the way."""
    peer = PeerClient(session, "m2", SECRET.encode(), 5.0)
    with pytest.raises(PeerError):  # the eavesdropper cannot sign an answer
        await peer.request(eavesdropper.address, method, path, body=body)
    return eavesdropper.captured[-1]


async def send(
    session: aiohttp.ClientSession,
    member: Member,
    captured: tuple[str, str, dict[str, str], bytes],
) -> tuple[int, str]:
    method, path, headers, body = captured
    headers = {k: v for k, v in headers.items() if k.lower().startswith("x-harvest-")}
    if body:
        headers["Content-Type"] = "application/json"
    async with session.request(
        method, f"http://{member.address}{path}", headers=headers, data=body or None
    ) as response:
        return response.status, (await response.read()).decode("utf-8", "replace")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/replication/probe?size=16", b""),
        (
            "POST",
            f"/replication/{GROUP}/notify",
            json.dumps(ChangeList(GROUP, 0, 0, ()).to_json()).encode(),
        ),
    ],
)
async def test_an_exact_replay_within_the_window_is_refused(
    member: Member,
    eavesdropper: Eavesdropper,
    session: aiohttp.ClientSession,
    method: str,
    path: str,
    body: bytes,
) -> None:
    captured = await capture(session, eavesdropper, method, path, body)
    status, _ = await send(session, member, captured)
    assert status == 200  # the first time it is news: the request never reached the member
    status, text = await send(session, member, captured)
    assert status == 401, text
    assert "replay" in json.loads(text)["error"]
    # The member's own peers are still answered.
    peer = PeerClient(session, "m2", SECRET.encode(), 5.0)
    assert len(await peer.request(member.address, "GET", "/replication/probe?size=3")) == 3


async def test_a_full_memory_of_request_ids_refuses_with_503(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async for member in start_member(tmp_path, replay_memory=16):
        peer = PeerClient(session, "m2", SECRET.encode(), 5.0)
        for _ in range(16):
            assert len(await peer.request(member.address, "GET", "/replication/probe?size=4")) == 4
        path = "/replication/probe?size=4"
        signed = auth.sign_request(SECRET.encode(), "m2", "GET", path, b"", time.time(), "0" * 32)
        async with session.get(f"http://{member.address}{path}", headers=signed) as response:
            assert response.status == 503
            assert 1 <= int(response.headers["Retry-After"]) <= 300
            error = (await response.json())["error"]
        assert "16 requests within 300 s are remembered already" in error
        with pytest.raises(PeerError, match="answered 503"):
            await peer.request(member.address, "GET", path)


@pytest.mark.parametrize(
    ("method", "path_qs", "body", "status"),
    [
        # Found by tests/replicator/test_fuzz_replicator.py: 500s before.
        ("GET", f"/replication/{GROUP}/changes?after=%C2%B2", b"", 400),
        ("GET", "/replication/probe?size=%C2%B2", b"", 400),
        ("POST", f"/replication/{GROUP}/notify", b"[" * 5000, 400),
        # The broker refuses these (a bucket out of range, a limit over its own): the
        # member's error, not an outage (503).
        ("GET", f"/replication/{GROUP}/buckets?b=-1", b"", 400),
        ("GET", f"/replication/{GROUP}/changes?limit=999999", b"", 400),
    ],
)
async def test_malformed_signed_requests_are_answered_400(
    member: Member,
    session: aiohttp.ClientSession,
    method: str,
    path_qs: str,
    body: bytes,
    status: int,
) -> None:
    headers = auth.sign_request(
        SECRET.encode(), "m2", method, path_qs, body, time.time(), secrets.token_hex(16)
    )
    url = yarl.URL(f"http://{member.address}{path_qs}", encoded=True)
    async with session.request(method, url, data=body or None, headers=headers) as response:
        assert response.status == status, await response.text()
