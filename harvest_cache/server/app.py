"""The running cache: it owns the listener, store, resolver, pool, access log and tasks."""

from __future__ import annotations

import asyncio
import heapq
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from harvest_cache.bump import authority
from harvest_cache.bump.certificates import Minter
from harvest_cache.bump.decision import Pins
from harvest_cache.config import Config, ca_directory
from harvest_cache.hierarchy.digests import Digests
from harvest_cache.hierarchy.endpoint import IcpEndpoint
from harvest_cache.hierarchy.htcp import Detail, Specifier
from harvest_cache.hierarchy.htcp_endpoint import HtcpEndpoint
from harvest_cache.hierarchy.neighbours import Neighbours
from harvest_cache.hierarchy.peers import Peer
from harvest_cache.outbox import Outbox
from harvest_cache.server.accesslog import AccessLog, Rotation
from harvest_cache.server.acl import address_in
from harvest_cache.server.admin import AdminServer
from harvest_cache.server.bumping import Bumper, bump_rules
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.partials import PartialStore
from harvest_cache.server.proxy import Proxy, heuristic_rules
from harvest_cache.server.routing import Router, fetch_internal
from harvest_cache.stats import CacheStats, DnsStats, PartialStats, StoreStats
from harvest_cache.store.tiered import TieredStore, open_store
from harvest_cache.traffic import Traffic
from harvest_cache.upstream.pool import Pool
from harvest_cache.upstream.tls import OriginTls
from harvest_common.dns import Resolver
from harvest_common.errors import ConfigError
from harvest_common.tasks import TaskSet

log = logging.getLogger("harvest_cache")

# Seconds between sweeps of prepared hits whose objects the memory tier dropped.
SWEEP_PREPARED_EVERY = 1.0


# Settings a running cache cannot change (its sockets, store, log file, resolver and pools
# were made with them); None: the whole section.
_FIXED: dict[str, tuple[str, ...] | None] = {
    "server": ("listen",),
    "admin": ("listen",),
    "icp": ("port",),
    "cache": ("dir", "memory_mb", "disk_mb", "memory_max_object_kb", "max_object_mb"),
    "log": ("access_log",),
    "dns": None,
    "upstream": None,
    "bump": ("enabled", "ca_dir", "certificates"),
    "htcp": ("port",),
}


def effective(old: Config, new: Config) -> tuple[Config, list[str]]:
    """``new`` with the settings a reload cannot change kept from ``old``, and the names of
    those that differ (they take effect at the next start)."""
    changed: list[str] = []
    sections: dict[str, Any] = {}
    for section, keys in _FIXED.items():
        was, wanted = getattr(old, section), getattr(new, section)
        names = keys if keys is not None else tuple(f.name for f in fields(was))
        kept = {k: getattr(was, k) for k in names if getattr(was, k) != getattr(wanted, k)}
        changed += [f"{section}.{k}" for k in kept]
        sections[section] = replace(wanted, **kept)
    config = replace(new, **sections)
    if config.icp_port != old.icp_port:
        changed.append("the ICP port (peers now queried over ICP, or none)")
        config = replace(config, icp=replace(config.icp, port=old.icp_port))
    return config, changed


async def _minter(config: Config) -> Minter:
    """The interception CA's certificate maker (its files read in a thread);
    AuthorityError if there is no CA, or its key is not safe."""
    directory = ca_directory(config)

    def load() -> Minter:
        return Minter(authority.load(directory), directory / "certificates")

    return await asyncio.get_running_loop().run_in_executor(None, load)


async def _origin_tls(ca_file: Path | None) -> OriginTls:
    """The client side of TLS, its trust store read in a thread; ConfigError if the
    configured bundle cannot be read or holds no certificate."""
    loop = asyncio.get_running_loop()
    try:
        tls, empty = await loop.run_in_executor(None, _load_tls, ca_file)
    except OSError as e:  # (ssl.SSLError included: not PEM, or no certificate in it)
        raise ConfigError([f"upstream.tls_ca_file: cannot load {ca_file}: {e}"]) from None
    if empty:
        log.warning(
            "no certificate authorities in the system's trust store (install ca-certificates,"
            " or set upstream.tls_ca_file): every https:// fetch will be refused"
        )
    return tls


def _load_tls(ca_file: Path | None) -> tuple[OriginTls, bool]:
    """The client side of TLS, and whether the system's trust store it uses is empty (its
    directory is read as certificates are needed, so the store's count alone says little)."""
    tls = OriginTls(ca_file)
    if ca_file is not None or tls.authorities:
        return tls, False
    directory = ssl.get_default_verify_paths().capath
    return tls, directory is None or not any(Path(directory).glob("*.0"))


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
        tls: OriginTls,
        minter: Minter | None = None,
    ) -> None:
        """``minter``: the CA's certificate maker, when CONNECT tunnels are intercepted."""
        self.config = config
        self.traffic = Traffic()
        self.store = store
        # Partial content's indexes in the store, one for every proxy a reload makes.
        self.partials = PartialStore(store)
        self.resolver = resolver
        self.access_log = access_log
        self.tasks = TaskSet()
        # Whole responses and planned request heads, held to the end of each loop round.
        self.outbox = Outbox(asyncio.get_running_loop())
        self.tls = tls
        self.pool = Pool(
            resolver,
            config.upstream,
            self.traffic,
            self.outbox,
            refused=self._refused_peer,
            tls=tls,
        )
        # Connections to peers apart: requests to them take a different form.
        self.peer_pool = Pool(resolver, config.upstream, self.traffic, self.outbox, tls=tls)
        self.bumper: Bumper | None = None
        if minter is not None:
            self.bumper = Bumper(
                bump_rules(config),
                Pins(config.bump.pin_seconds),
                minter,
                config.bump.certificates,
                self.pool,
                self._bumped_connection,
            )
        self.neighbours: Neighbours | None = None
        self.digests: Digests | None = None
        self._digest_task: asyncio.Task[None] | None = None
        self._sweep_task: asyncio.Task[None] | None = None
        self.admin: AdminServer | None = None
        self._retired: list[Proxy] = []  # replaced by a reload, maybe still answering
        self.loader: Callable[[], Config] | None = None
        self.connections: set[ClientConnection] = set()
        self.name = config.server.name
        self.proxy: Proxy | None = None
        self.icp: IcpEndpoint | None = None
        self.icp_queries: IcpEndpoint | None = None  # (with several workers)
        self.htcp: HtcpEndpoint | None = None
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] = (config.server.listen.host, config.server.listen.port)

    def _refused_peer(self, client_ip: str, peer_ip: str) -> bool:
        """The running proxy's rule for connecting a client to an origin's address (peers
        are the operator's choice: their pool refuses none)."""
        proxy = self.proxy
        return proxy is not None and proxy.access.refused_peer(client_ip, peer_ip)

    @classmethod
    async def start(cls, config: Config, loader: Callable[[], Config] | None = None) -> CacheServer:
        """``loader`` reads the configuration again, for reloads (SIGHUP, the admin action)."""
        tls = await _origin_tls(config.upstream.tls_ca_file)
        minter = await _minter(config) if config.bump.enabled else None
        store = await open_store(config.cache)
        resolver = await Resolver.open(config.dns)
        rotation = Rotation(config.log.rotate_mb * 1024 * 1024, config.log.rotate_keep)
        access_log = await AccessLog.open(config.log.access_log, rotation=rotation)
        self = cls(config, store, resolver, access_log, tls, minter)
        self.loader = loader
        try:
            await self._listen()
        except BaseException:
            if self._server is not None:  # (the ICP or admin port could not be had)
                self._server.close()
                await self._server.wait_closed()
            if self.icp is not None:
                self.icp.close()
            if self.htcp is not None:
                self.htcp.close()
            if self._digest_task is not None:
                self._digest_task.cancel()
            if self._sweep_task is not None:
                self._sweep_task.cancel()
            await self.tasks.cancel()
            await self._close_parts()
            raise
        return self

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        listen = self.config.server.listen
        self._server = await loop.create_server(
            self._new_connection,
            listen.host,
            listen.port,
            reuse_address=True,
            reuse_port=self.config.server.workers > 1,  # (workers share the port)
            backlog=1024,
        )
        sockname = self._server.sockets[0].getsockname()
        self.address = (sockname[0], sockname[1])
        self.proxy = self._build()
        self._sweep_task = self.tasks.spawn(self._sweep_prepared(), "prepared hits")
        log.info("harvest-cache %s listening on %s:%d", self.name, *self.address)
        if self.config.icp_port:
            await self._listen_icp()
        if self.config.htcp_port:
            await self._listen_htcp()
        await self._start_hierarchy()
        admin = self.config.admin.listen
        if admin is not None:
            self.admin = await AdminServer.start(self, admin.host, admin.port)
            log.info("admin listener (metrics, cache manager) on %s:%d", *self.admin.address)

    async def _sweep_prepared(self) -> None:
        """Every second, let the proxy forget prepared hits of objects no longer held."""
        while True:
            await asyncio.sleep(SWEEP_PREPARED_EVERY)
            if self.proxy is not None:
                self.proxy.sweep()

    def _build(self) -> Proxy:
        """The parts that answer requests under ``config``: peers, routes, digests, proxy."""
        config = self.config
        self.name = config.server.name or f"{socket.gethostname()}:{self.address[1]}"
        hierarchy = config.hierarchy
        self.neighbours = Neighbours(hierarchy) if hierarchy.peers else None
        router = Router(self.name, self.pool, self.peer_pool, self.neighbours)
        heuristics = heuristic_rules(config.cache)
        self.digests = None
        if hierarchy.digests:
            timeout = config.upstream.read_timeout

            async def fetch(peer: Peer, path: str, limit: int) -> bytes:
                return await fetch_internal(self.peer_pool, self.name, peer, path, limit, timeout)

            self.digests = Digests(hierarchy, self.store, heuristics.for_url, fetch)
        own = (_own_hosts(self.name, self.address[0]), self.address[1])
        if self.bumper is not None:
            self.bumper.rules = bump_rules(config)
            self.bumper.pins.seconds = config.bump.pin_seconds
        proxy = Proxy(
            config,
            self.name,
            self.store,
            self.pool,
            self.access_log,
            self.tasks,
            router,
            heuristics,
            self.traffic,
            self.partials,
            self.digests,
            own,
        )
        proxy.bumper = self.bumper
        if self.neighbours is not None and self.neighbours.htcp_peers:
            proxy.on_purged = self.neighbours.clear_peers
        return proxy

    async def _start_hierarchy(self) -> None:
        assert self.proxy is not None
        sender = self.icp_queries or self.icp
        reply = self.neighbours.reply if self.neighbours is not None else None
        if self.icp is not None:
            self.icp.retarget(self.proxy.heuristics, reply if sender is self.icp else None)
        if self.icp_queries is not None:
            self.icp_queries.retarget(self.proxy.heuristics, reply)
        if self.htcp is not None:
            self.htcp.replies = self.neighbours.htcp_reply if self.neighbours is not None else None
        if self.neighbours is not None:
            await self.neighbours.start(self.resolver, sender, self.digests, self.htcp)
            for peer in self.config.hierarchy.peers:
                log.info("peer: %s", peer)
        if self.digests is not None:
            self._digest_task = self.tasks.spawn(self.digests.run(), "cache digests")

    async def reload_config(self) -> list[str]:
        """Read the configuration again and apply it; a bad one is refused (ConfigError,
        logged) and the running one kept. Returns the settings that need a restart."""
        if self.loader is None:
            raise ConfigError(["this cache was started without a configuration to reload"])
        try:
            new = await asyncio.to_thread(self.loader)  # (it reads a file)
        except ConfigError as e:
            for problem in e.problems:
                log.error("reload refused, the configuration in use is kept: %s", problem)
            raise
        fixed = await self.reload(new)
        for name in fixed:
            log.warning("reload: %s changed; it takes effect at the next start", name)
        log.info("configuration reloaded")
        return fixed

    async def reload(self, new: Config) -> list[str]:
        """Answer requests under ``new`` from now on: new connections and the next request
        of each open one. Settings that need a restart keep their values; their names are
        returned."""
        config, fixed = effective(self.config, new)
        old_proxy, old_neighbours, old_digests = self.proxy, self.neighbours, self._digest_task
        self.config = config
        proxy = self._build()
        self.proxy = proxy
        for conn in self.connections:
            conn.handler = proxy
        if old_proxy is not None:
            old_proxy.retire()
            self._retired = [p for p in self._retired if p.busy]
            self._retired.append(old_proxy)
        if old_neighbours is not None:
            old_neighbours.close()
        if old_digests is not None:
            old_digests.cancel()
            self._digest_task = None
        await self._start_hierarchy()
        logging.getLogger("harvest_cache").setLevel(config.log.level.upper())
        return fixed

    async def _listen_htcp(self) -> None:
        """The HTCP socket: other caches' TSTs and CLRs answered by the proxy in use."""

        def proxy() -> Proxy:
            assert self.proxy is not None
            return self.proxy

        async def test(spec: Specifier) -> tuple[bool, Detail]:
            return await proxy().htcp_test(spec)

        async def clear(spec: Specifier) -> int:
            return await proxy().htcp_clear(spec)

        self.htcp = await HtcpEndpoint.open(
            self.config.server.listen.host,
            self.config.htcp_port,
            test,
            clear,
            lambda ip: address_in(ip, self.config.htcp.allow),
            lambda ip: address_in(ip, self.config.htcp.clr_allow),
            self.tasks,
        )
        log.info("HTCP on %s:%d", *self.htcp.address)

    async def _listen_icp(self) -> None:
        assert self.proxy is not None
        host, port = self.config.server.listen.host, self.config.icp_port

        def fetching() -> bool:
            config = self.config  # (read at each query: a reload may change it)
            return config.icp.fetch_misses and len(self.connections) < config.server.max_connections

        endpoint = IcpEndpoint(
            self.store,
            self.proxy.heuristics,
            lambda ip: address_in(ip, self.config.icp.allow),
            fetching,
            self.tasks,
            origin_rtt=self.pool.rtt,
        )
        shared = self.config.server.workers > 1
        await endpoint.open(host, port, reuse_port=shared)
        self.icp = endpoint
        if shared:
            # The kernel picks one worker for all of a peer's datagrams to the shared port, so
            # a worker's own queries leave, and their replies come back, on a port of its own.
            queries = IcpEndpoint(
                self.store,
                self.proxy.heuristics,
                lambda ip: False,
                lambda: False,
                self.tasks,
            )
            await queries.open(host, 0)
            self.icp_queries = queries
        log.info("ICP on %s:%d", host, port)

    def _bumped_connection(self, origin: bytes) -> ClientConnection:
        """A connection for an intercepted tunnel's requests, to ``origin``."""
        assert self.proxy is not None
        conn = ClientConnection(
            self.config,
            self.proxy,
            self.tasks,
            self.connections.discard,
            outbox=self.outbox,
            origin=origin,
        )
        self.connections.add(conn)
        return conn

    def _new_connection(self) -> asyncio.Protocol:
        assert self.proxy is not None
        over = len(self.connections) >= self.config.server.max_connections
        conn = ClientConnection(
            self.config,
            self.proxy,
            self.tasks,
            self.connections.discard,
            refuse=over,
            outbox=self.outbox,
        )
        self.connections.add(conn)
        return conn

    # -- what the cache reports, and what its admin listener may do --------------------------

    def stats(self) -> CacheStats:
        """What the components report now (for metrics and the cache manager)."""
        memory, store, proxy = self.store.memory, self.store, self.proxy
        resolver, neighbours = self.resolver, self.neighbours
        flights = proxy.flights() if proxy is not None else []
        return CacheStats(
            traffic=self.traffic,
            store=StoreStats(
                len(memory),
                memory.size,
                memory.capacity,
                self.config.cache.disk_mb * 1024 * 1024,
                memory.evictions,
                store.read_failures,
                store.write_failures,
                store.disk_skips,
                store.promotions,
                store.kept_on_disk,
            ),
            partial=PartialStats(
                self.partials.parts_stored, self.partials.completed, self.partials.lost
            ),
            origin_pool=self.pool.stats(),
            peer_pool=self.peer_pool.stats(),
            tls=self.tls.stats(),
            bump=self.bumper.stats() if self.bumper is not None else None,
            dns=DnsStats(resolver.hits, resolver.misses, resolver.failures),
            access_log_dropped=self.access_log.dropped,
            client_connections=len(self.connections),
            page_copy_bytes=proxy.page_bytes if proxy is not None else 0,
            disk_heads=proxy.disk_heads if proxy is not None else 0,
            collapsed_waiters=sum(f.readers for f in flights),
            fetching=proxy.fetching() if proxy is not None else [],
            icp=self.icp.stats() if self.icp is not None else None,
            peers=neighbours.stats() if neighbours is not None else None,
            array=neighbours.array_stats() if neighbours is not None else None,
            htcp=self.htcp.stats() if self.htcp is not None else None,
            unexpected_icp_replies=neighbours.unexpected_replies if neighbours is not None else 0,
            digests=self.digests.stats() if self.digests is not None else None,
        )

    def largest_in_memory(self, n: int) -> list[tuple[int, str]]:
        """The ``n`` largest bodies the memory tier holds: (bytes, URL), largest first."""
        return heapq.nlargest(n, ((h.body_length, h.url) for h in self.store.memory.heads()))

    def drop_peer(self, name: str) -> bool:
        """Forget what is known of peer ``name`` (False: no such peer)."""
        neighbours = self.neighbours
        if neighbours is None or name not in neighbours.health:
            return False
        neighbours.drop(name)
        return True

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let requests in progress finish within ``grace``, then close all."""
        if self._server is not None:
            self._server.close()
        if self.admin is not None:
            await self.admin.close()
        for endpoint in (self.icp, self.icp_queries):
            if endpoint is not None:
                endpoint.close()
        if self.htcp is not None:
            self.htcp.close()
        if self.neighbours is not None:
            self.neighbours.close()
        if self._digest_task is not None:
            self._digest_task.cancel()
        if self._sweep_task is not None:
            self._sweep_task.cancel()  # (a loop: draining would wait out the grace for it)
        for conn in list(self.connections):
            conn.close_when_idle()  # so no worker waits on for a next request
        for proxy in (*self._retired, self.proxy):
            if proxy is not None:
                await proxy.drain(grace)
        await self.tasks.drain(grace)
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
        await self._close_parts()

    async def _close_parts(self) -> None:
        self.pool.close()
        self.peer_pool.close()
        self.tls.close()
        await self.access_log.close()
        await self.resolver.close()
        await self.store.close()
