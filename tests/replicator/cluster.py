"""A replication group of real processes on loopback, for the replicator's integration tests:
each member is a broker (``python -m broker serve``) and a replicator (``python -m replicator
serve``) of its own, and every member reaches every other through a throttling relay of its
own (tests/replicator/relay.py), so the test sets each directed link's delay and bandwidth,
cuts links and corrupts them. The group replicates the Harvest Server Registry (``hsr``):
registering a server at a member's broker is a change made at that member."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from harvest_common.hsr_client import server_record
from harvest_common.soif import encode
from tests.replicator.relay import Relay

TOKEN = "broker-admin-token"
SECRET = "the-group-secret-of-the-tests"
GROUP = "hsr"
STARTUP = 60.0  # seconds a process may take to say it listens


@dataclass
class Process:
    argv: list[str]
    log: Path
    process: asyncio.subprocess.Process | None = None

    async def start(self) -> int:
        """Start and return the port it says it listens on."""
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv, stdout=asyncio.subprocess.PIPE, stderr=log
            )
        assert self.process.stdout is not None
        async with asyncio.timeout(STARTUP):
            while line := await self.process.stdout.readline():
                text = line.decode()
                if "listening on http://" in text:
                    return int(text.rsplit(":", 1)[1].strip().strip("/"))
        raise AssertionError(f"{self.argv} ended without listening; see {self.log}")

    async def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.send_signal(how)
        try:
            async with asyncio.timeout(20):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
        self.process = None


@dataclass
class Member:
    index: int
    directory: Path
    broker: Process
    replicator: Process
    broker_port: int = 0
    port: int = 0

    @property
    def id(self) -> str:
        return f"m{self.index}"

    @property
    def broker_url(self) -> str:
        return f"http://127.0.0.1:{self.broker_port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _toml(value: Any) -> str:
    return json.dumps(value)


@dataclass
class Cluster:
    directory: Path
    size: int
    timing: dict[str, float]
    topology: dict[str, float] = field(default_factory=dict)
    members: list[Member] = field(default_factory=list)
    relays: dict[tuple[int, int], Relay] = field(default_factory=dict)
    session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        for i in range(self.size):
            for j in range(self.size):
                if i != j:
                    relay = self.relays[i, j] = Relay()
                    await relay.start()
        for i in range(self.size):
            directory = self.directory / f"m{i}"
            directory.mkdir(parents=True)
            self.members.append(
                Member(
                    i,
                    directory,
                    Process([sys.executable, "-m", "broker", "serve"], directory / "broker.log"),
                    Process(
                        [sys.executable, "-m", "replicator", "serve"], directory / "replicator.log"
                    ),
                )
            )
        await asyncio.gather(*(self.start_member(m) for m in self.members))

    def _broker_config(self, member: Member) -> Path:
        path = member.directory / "broker.toml"
        path.write_text(
            "[broker]\n"
            f"listen = {_toml(f'127.0.0.1:{member.broker_port}')}\n"
            f"data_dir = {_toml(str(member.directory / 'broker'))}\n"
            f"admin_token = {_toml(TOKEN)}\n"
            f"member = {_toml(member.id)}\n"
        )
        return path

    def _replicator_config(self, member: Member) -> Path:
        routes = ", ".join(
            f"{_toml(other.id)} = {_toml(self.relays[member.index, other.index].address)}"
            for other in self.members
            if other is not member
        )
        # Every member joins through m0, and m0 through m1 (should it restart).
        seed = 1 if member.index == 0 else 0
        timing = "\n".join(f"{key} = {value}" for key, value in self.timing.items())
        topology = "\n".join(f"{key} = {value}" for key, value in self.topology.items())
        path = member.directory / "replicator.toml"
        path.write_text(
            "[replicator]\n"
            f"id = {_toml(member.id)}\n"
            f"listen = {_toml(f'127.0.0.1:{member.port}')}\n"
            f"secret = {_toml(SECRET)}\n"
            f"broker = {_toml(member.broker_url)}\n"
            f"broker_token = {_toml(TOKEN)}\n"
            f"data_dir = {_toml(str(member.directory / 'replicator'))}\n"
            f"routes = {{ {routes} }}\n"
            f"[timing]\n{timing}\n"
            f"[topology]\n{topology}\n"
            "[[groups]]\n"
            f"collection = {_toml(GROUP)}\n"
            f"seeds = [{_toml(self.relays[member.index, seed].address)}]\n"
        )
        return path

    async def start_member(self, member: Member) -> None:
        """Start (or restart, on the same ports and data) a member's broker and replicator."""
        member.broker.argv[4:] = [str(self._broker_config(member))]
        member.broker_port = await member.broker.start()
        member.replicator.argv[4:] = [str(self._replicator_config(member))]
        member.port = await member.replicator.start()
        for (_, j), relay in self.relays.items():
            if j == member.index:
                relay.target_port = member.port

    async def stop_member(self, member: Member, how: signal.Signals = signal.SIGTERM) -> None:
        await asyncio.gather(member.replicator.stop(how), member.broker.stop(how))

    async def close(self) -> None:
        await asyncio.gather(*(self.stop_member(m) for m in self.members))
        await asyncio.gather(*(relay.close() for relay in self.relays.values()))
        if self.session is not None:
            await self.session.close()

    def link(self, a: int, b: int) -> tuple[Relay, Relay]:
        """Both directions of the link between members ``a`` and ``b``."""
        return self.relays[a, b], self.relays[b, a]

    def partition(self, side: Iterable[int], cut: bool) -> None:
        """Cut (or heal) every link between ``side`` and the other members."""
        inside = set(side)
        for (i, j), relay in self.relays.items():
            if (i in inside) != (j in inside):
                relay.set_cut(cut)

    # -- talking to members -------------------------------------------------------------------

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self.session is not None
        return self.session

    async def register(self, member: Member, name: str, size: int = 0) -> None:
        """Register a server named ``name`` at ``member``'s HSR (a change made there);
        ``size`` pads its description."""
        record = server_record(
            "gatherer",
            name=name,
            host=f"{name}.example",
            port=8500,
            description=("x" * size) or f"gatherer {name}",
        )
        async with self.http.post(
            f"{member.broker_url}/api/hsr/register",
            data=encode(record),
            headers={"Content-Type": "application/x-soif"},
        ) as response:
            assert response.status in (200, 201), await response.text()

    async def leaves(self, member: Member) -> bytes:
        async with self.http.get(
            f"{member.broker_url}/api/replica/{GROUP}/leaves",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as response:
            assert response.status == 200, await response.text()
            return await response.read()

    async def count(self, member: Member) -> int:
        async with self.http.get(f"{member.broker_url}/api/hsr") as response:
            assert response.status == 200, await response.text()
            servers: list[Any] = (await response.json())["servers"]
            return len(servers)

    async def status(self, member: Member) -> dict[str, Any]:
        async with self.http.get(f"{member.url}/api/status") as response:
            assert response.status == 200, await response.text()
            answer: dict[str, Any] = await response.json()
            return answer

    async def converged(self, members: Iterable[Member], within: float) -> float:
        """Wait until ``members`` hold equal collections (equal Merkle leaves); the seconds it
        took. AssertionError after ``within`` seconds."""
        chosen = list(members)
        started = time.monotonic()
        while True:
            digests = await asyncio.gather(*(self.leaves(m) for m in chosen))
            if all(d == digests[0] for d in digests):
                return time.monotonic() - started
            if time.monotonic() - started > within:
                raise AssertionError(f"not converged within {within} s: {self.report()}")
            await asyncio.sleep(0.05)

    def report(self) -> str:
        return ", ".join(f"{m.id} logs in {m.directory}" for m in self.members)


async def until(check: Callable[[], Any], within: float, what: str) -> None:
    """Wait (polling, bounded) until the awaitable ``check()`` returns true."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within} s")
        await asyncio.sleep(0.05)
