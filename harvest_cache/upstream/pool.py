"""Idle keep-alive connections to origins, and opening new ones within the connect timeout."""

from __future__ import annotations

import asyncio
import errno
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol, TypeVar

from harvest_cache.config import UpstreamConfig
from harvest_cache.errors import (
    ConnectRefused,
    ConnectTimeout,
    DNSFailure,
    LocalDestination,
    UpstreamError,
)
from harvest_cache.outbox import Outbox
from harvest_cache.stats import PoolStats
from harvest_cache.traffic import Traffic
from harvest_cache.upstream.connection import UpstreamConnection
from harvest_cache.upstream.tls import OriginTls
from harvest_common import errors as shared

_SWEEP_EVERY = 5.0
# Hosts whose connect times are remembered (the oldest entry goes first).
_RTT_HOSTS = 4096
P = TypeVar("P", bound=asyncio.BaseProtocol)


class Resolver(Protocol):
    """The DNS resolver (harvest_common.dns): addresses, or the shared DNSFailure."""

    async def resolve(self, host: str) -> list[str]: ...


# Whether the client at an address (the first) may not be connected to an address.
Refused = Callable[[str, str], bool]


class Pool:
    """Per-(host, port, TLS or not) stacks of idle connections; the newest is reused first."""

    def __init__(
        self,
        resolver: Resolver,
        config: UpstreamConfig,
        traffic: Traffic | None = None,
        outbox: Outbox | None = None,
        refused: Refused | None = None,
        *,
        tls: OriginTls,
    ) -> None:
        """``outbox``: given to the connections made (see UpstreamConnection); ``refused``:
        whether a client may not be connected to an address (none refused without it);
        ``tls``: the client side of TLS, for connections that ask for it."""
        self._refused = refused
        self.tls = tls
        self._resolver = resolver
        self._config = config
        self._traffic = traffic if traffic is not None else Traffic()
        self._outbox = outbox
        self._idle: dict[tuple[str, int, bool], list[UpstreamConnection]] = {}
        self._last_sweep = 0.0
        self.opened = 0
        self.reused = 0
        # Smoothed TCP connect time per host, seconds: the RTT to it that ICP replies
        # report (SRC_RTT) to caches choosing the closest parent.
        self._rtt: dict[str, float] = {}

    def take_idle(
        self, host: str, port: int, tls: bool, client_ip: str
    ) -> UpstreamConnection | None:
        """An idle connection to ``host:port`` (over TLS if ``tls``) that the client at
        ``client_ip`` may use."""
        stack = self._idle.get((host, port, tls))
        if not stack:
            return None
        if self._refused is not None and self._refused(client_ip, stack[-1].peer_ip):
            return None  # (kept for the clients that may)
        limit = time.monotonic() - self._config.pool_idle_timeout
        while stack:
            conn = stack.pop()
            if not conn.closed and conn.idle_since >= limit:
                self.reused += 1
                return conn
            conn.close()
        return None

    def release(self, conn: UpstreamConnection) -> None:
        """End ``conn``'s exchange: back to the idle stack if it ended cleanly, else closed."""
        reusable = conn.reusable()
        if conn.key[2] and conn.exchanges == 1:
            # After its first exchange (a TLS 1.3 server's tickets have come by then) and not
            # again: asking for a session costs a good part of an exchange. (A session
            # outlives a connection the origin closes.)
            self.tls.keep_session(conn.key[0], conn.transport)
        conn.finish()
        if reusable:
            self.put_idle(conn)
        else:
            conn.close()

    def put_idle(self, conn: UpstreamConnection) -> None:
        now = time.monotonic()
        conn.idle_since = now
        stack = self._idle.setdefault(conn.key, [])
        stack.append(conn)
        if len(stack) > self._config.pool_max_idle_per_host:
            stack.pop(0).close()
        if now - self._last_sweep > _SWEEP_EVERY:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Close connections idle past the timeout, so unrevisited origins are let go."""
        self._last_sweep = now
        limit = now - self._config.pool_idle_timeout
        for key, stack in list(self._idle.items()):
            keep = [c for c in stack if not c.closed and c.idle_since >= limit]
            for c in stack:
                if c not in keep:
                    c.close()
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]

    async def connect(self, host: str, port: int, tls: bool, client_ip: str) -> UpstreamConnection:
        """A new HTTP connection to ``host:port`` (over TLS if ``tls``) for the client at
        ``client_ip``."""
        factory = partial(
            UpstreamConnection, (host, port, tls), traffic=self._traffic, outbox=self._outbox
        )
        conn = await self.open(host, port, factory, client_ip, tls=tls)
        self.opened += 1
        return conn

    async def open(
        self,
        host: str,
        port: int,
        factory: Callable[[str], P],
        client_ip: str,
        *,
        tls: bool = False,
    ) -> P:
        """A new connection speaking ``factory(ip)``'s protocol, trying each address in turn
        (those the client at ``client_ip`` may be connected to); with ``tls``, over TLS with
        ``host`` as the server's name, its certificate verified (a certificate refused is
        not tried at other addresses: it names the server, not the address)."""
        try:
            addresses = await self._resolver.resolve(host)
        except shared.DNSFailure as unresolved:
            # The client is answered as for any failed hop: 502, counted as kind "dns".
            raise DNSFailure(unresolved.cause) from None
        refused = self._refused
        if refused is not None:
            allowed = [ip for ip in addresses if not refused(client_ip, ip)]
            if addresses and not allowed:
                raise LocalDestination(
                    f"{host} is this host ({addresses[0]}): not reachable from {client_ip}"
                )
            addresses = allowed
        loop = asyncio.get_running_loop()
        failure: UpstreamError | None = None
        context = self.tls.context if tls else None
        name = host if tls else None
        for ip in addresses:
            try:
                started = loop.time()
                async with asyncio.timeout(self._config.connect_timeout):
                    transport, protocol = await loop.create_connection(
                        partial(factory, ip), ip, port, ssl=context, server_hostname=name
                    )
                if tls:
                    self.tls.connected(transport)
                else:  # (a handshake's time is not the network's round trip)
                    self._measured(host, loop.time() - started)
            except ssl.SSLCertVerificationError as e:
                raise self.tls.failure(host, port, e) from None
            except ssl.SSLError as e:
                failure = self.tls.failure(host, port, e)
            except TimeoutError:
                failure = ConnectTimeout(
                    f"no connection to {host}:{port} within {self._config.connect_timeout:g} s"
                )
            except OSError as e:
                if e.errno == errno.ECONNREFUSED:
                    failure = ConnectRefused(f"{host}:{port} refused the connection")
                else:
                    failure = ConnectRefused(f"cannot connect to {host}:{port}: {e.strerror}")
            else:
                return protocol
        raise failure or ConnectRefused(f"{host} has no address")

    async def addresses(self, host: str) -> list[str]:
        """The addresses ``host`` resolves to (none if it does not)."""
        try:
            return await self._resolver.resolve(host)
        except shared.DNSFailure:
            return []

    def stats(self) -> PoolStats:
        return PoolStats(self.opened, self.reused)

    def _measured(self, host: str, rtt: float) -> None:
        old = self._rtt.pop(host, None)
        self._rtt[host] = rtt if old is None else old + (rtt - old) / 4
        if len(self._rtt) > _RTT_HOSTS:
            del self._rtt[next(iter(self._rtt))]

    def rtt(self, host: str) -> float | None:
        """The smoothed time to connect to ``host`` (seconds), if it was ever measured."""
        return self._rtt.get(host)

    def close(self) -> None:
        for stack in self._idle.values():
            for conn in stack:
                conn.close()
        self._idle.clear()
