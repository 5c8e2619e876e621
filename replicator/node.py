"""A running member: its HTTP session and server, its groups and their long-lived loops.

``async with await Node.start(config) as node`` (or ``await node.stop()``). Every loop and
every message in flight is an owned task, cancelled when the node stops; the state (where
it left off with each member) is saved after each pull and once more when it stops.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from harvest_common.config import Address
from harvest_common.lifecycle import Owned
from harvest_common.tasks import TaskSet
from harvest_common.web_site import listening
from replicator.client import BrokerClient, PeerClient
from replicator.config import Config
from replicator.group import Group
from replicator.links import Links
from replicator.metrics import ReplicatorMetrics
from replicator.server import make_app
from replicator.state import State

log = logging.getLogger("replicator")


class Node(Owned):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.secret = config.replicator.secret.encode()
        self.metrics = ReplicatorMetrics()
        self.started = time.time()
        self.groups: dict[str, Group] = {}
        self.address: tuple[str, int] = ("", 0)
        self.broker: BrokerClient
        self._tasks = TaskSet()
        self._state: State

    def __repr__(self) -> str:
        return f"Node({self.config.member!r}, groups {sorted(self.groups)})"

    @classmethod
    async def start(cls, config: Config) -> Node:
        return await cls(config)._opened()

    async def _open(self) -> None:
        config = self.config
        stack = self._stack
        self._state = await State.load(config.replicator.data_dir)
        timeout = config.timing.request_timeout
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
        )
        self.broker = BrokerClient(
            session, config.replicator.broker, config.replicator.broker_token, timeout
        )
        peers = PeerClient(session, config.member, self.secret, timeout)
        listen = config.replicator.listen
        self.address = await stack.enter_async_context(
            listening(make_app(self), listen.host, listen.port)
        )
        # Listening on port 0 (tests), the others reach this member at the port it got.
        advertised = config.replicator.advertise or Address(listen.host, self.address[1])
        links = Links()
        for settings in config.groups:
            self.groups[settings.collection] = Group(
                config,
                settings,
                peers=peers,
                broker=self.broker,
                links=links,
                metrics=self.metrics,
                tasks=self._tasks,
                saved=self._state,
                advertised=str(advertised),
            )
        # Last in, first out: the loops end before the server and the session close.
        stack.push_async_callback(self._state.save)
        stack.push_async_callback(self._tasks.cancel)
        for group in self.groups.values():
            for loop in (
                group.run_membership,
                group.run_measurements,
                group.run_local_changes,
                group.run_anti_entropy,
            ):
                self._tasks.spawn(loop(), name=f"{group.name}: {loop.__name__}")
        log.info("replicator %s listening on %s:%d", config.member, *self.address)

    async def serve_forever(self) -> None:
        """Run until cancelled (the CLI's main loop)."""
        await asyncio.Event().wait()
