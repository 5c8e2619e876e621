"""The running cache: it owns the listener, store, resolver, pool, access log and tasks."""

from __future__ import annotations

import asyncio
import logging
import socket

from harvest_cache.config import Config
from harvest_cache.hierarchy.digests import Digests
from harvest_cache.hierarchy.endpoint import IcpEndpoint
from harvest_cache.hierarchy.neighbours import Neighbours
from harvest_cache.hierarchy.peers import Peer
from harvest_cache.metrics import Traffic
from harvest_cache.server.accesslog import AccessLog
from harvest_cache.server.acl import address_in
from harvest_cache.server.admin import AdminServer
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.proxy import Proxy, heuristic_rules
from harvest_cache.server.routing import Router, fetch_internal
from harvest_cache.server.tasks import TaskSet
from harvest_cache.store.tiered import TieredStore, open_store
from harvest_cache.upstream.dns import Resolver
from harvest_cache.upstream.pool import Pool

log = logging.getLogger("harvest_cache")


def _own_hosts(name: str, listen_host: str) -> frozenset[str]:
    """The host names a request for one of our own pages may use."""
    host = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
    return frozenset({host.lower(), listen_host, "localhost", "127.0.0.1", socket.gethostname()})


class CacheServer:
    """Start with ``await CacheServer.start(config)``; end with ``await stop()``."""

    def __init__(
        self,
        config: Config,
        store: TieredStore,
        resolver: Resolver,
        access_log: AccessLog,
    ) -> None:
        self.config = config
        self.traffic = Traffic()
        self.store = store
        self.resolver = resolver
        self.access_log = access_log
        self.tasks = TaskSet()
        self.pool = Pool(resolver, config.upstream, self.traffic)
        # Connections to peers apart: requests to them take a different form.
        self.peer_pool = Pool(resolver, config.upstream, self.traffic)
        self.neighbours: Neighbours | None = None
        self.digests: Digests | None = None
        self._digest_task: asyncio.Task[None] | None = None
        self.admin: AdminServer | None = None
        self.connections: set[ClientConnection] = set()
        self.name = config.server.name
        self.proxy: Proxy | None = None
        self.icp: IcpEndpoint | None = None
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] = (config.server.listen.host, config.server.listen.port)

    @classmethod
    async def start(cls, config: Config) -> CacheServer:
        store = await open_store(config.cache)
        resolver = await Resolver.open(config.dns)
        access_log = await AccessLog.open(config.log.access_log)
        self = cls(config, store, resolver, access_log)
        try:
            await self._listen()
        except BaseException:
            if self._server is not None:  # (the ICP or admin port could not be had)
                self._server.close()
                await self._server.wait_closed()
            if self.icp is not None:
                self.icp.close()
            if self._digest_task is not None:
                self._digest_task.cancel()
            await self.tasks.cancel()
            await self._close_parts()
            raise
        return self

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        listen = self.config.server.listen
        self._server = await loop.create_server(
            self._new_connection, listen.host, listen.port, reuse_address=True, backlog=1024
        )
        sockname = self._server.sockets[0].getsockname()
        self.address = (sockname[0], sockname[1])
        self.name = self.config.server.name or f"{socket.gethostname()}:{self.address[1]}"
        hierarchy = self.config.hierarchy
        if hierarchy.peers:
            self.neighbours = Neighbours(hierarchy)
        router = Router(self.name, self.pool, self.peer_pool, self.neighbours)
        heuristics = heuristic_rules(self.config.cache)
        if hierarchy.digests:
            timeout = self.config.upstream.read_timeout

            async def fetch(peer: Peer, path: str, limit: int) -> bytes:
                return await fetch_internal(self.peer_pool, self.name, peer, path, limit, timeout)

            self.digests = Digests(hierarchy, self.store, heuristics.for_url, fetch)
        own = (_own_hosts(self.name, self.address[0]), self.address[1])
        self.proxy = Proxy(
            self.config,
            self.name,
            self.store,
            self.pool,
            self.access_log,
            self.tasks,
            router,
            heuristics,
            self.traffic,
            self.digests,
            own,
        )
        log.info("harvest-cache %s listening on %s:%d", self.name, *self.address)
        if self.config.icp_port:
            await self._listen_icp()
        if self.neighbours is not None:
            await self.neighbours.start(self.resolver, self.icp, self.digests)
            for peer in hierarchy.peers:
                log.info("peer: %s", peer)
        if self.digests is not None:
            self._digest_task = self.tasks.spawn(self.digests.run(), "cache digests")
        admin = self.config.admin.listen
        if admin is not None:
            self.admin = await AdminServer.start(self, admin.host, admin.port)
            log.info("admin listener (metrics, cache manager) on %s:%d", *self.admin.address)

    async def _listen_icp(self) -> None:
        assert self.proxy is not None
        icp, host, port = self.config.icp, self.config.server.listen.host, self.config.icp_port
        endpoint = IcpEndpoint(
            self.store,
            self.proxy.heuristics,
            lambda ip: address_in(ip, icp.allow),
            lambda: icp.fetch_misses and len(self.connections) < self.config.server.max_connections,
            self.tasks,
            self.neighbours.reply if self.neighbours is not None else None,
            self.pool.rtt,
        )
        await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: endpoint, local_addr=(host, port)
        )
        self.icp = endpoint
        log.info("ICP on %s:%d", host, port)

    def _new_connection(self) -> asyncio.Protocol:
        assert self.proxy is not None
        over = len(self.connections) >= self.config.server.max_connections
        conn = ClientConnection(
            self.config, self.proxy, self.tasks, self.connections.discard, refuse=over
        )
        self.connections.add(conn)
        return conn

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let requests in progress finish within ``grace``, then close all."""
        if self._server is not None:
            self._server.close()
        if self.admin is not None:
            await self.admin.close()
        if self.icp is not None:
            self.icp.close()
        if self.neighbours is not None:
            self.neighbours.close()
        if self._digest_task is not None:
            self._digest_task.cancel()
        for conn in list(self.connections):
            conn.close_when_idle()  # so no worker waits on for a next request
        if self.proxy is not None:
            await self.proxy.drain(grace)
        await self.tasks.drain(grace)
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
        await self._close_parts()

    async def _close_parts(self) -> None:
        self.pool.close()
        self.peer_pool.close()
        await self.access_log.close()
        await self.resolver.close()
        await self.store.close()
