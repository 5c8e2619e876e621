"""Intercepting CONNECT tunnels (Squid's ``ssl_bump``, opt-in): the driver.

After ``200 Connection established`` the client's first flight is peeked at (left in the
socket, read with ``MSG_PEEK``), and ``bump.decision`` says what to do with the tunnel:

- splice: relay its bytes, as without interception;
- bump: answer the client's TLS with a certificate the cache's CA made for the server's name
  (mimicking the origin's), and hand the connection to a ClientConnection whose requests are
  taken as that origin's ``https://`` URLs: the same cache path as any other request.

The origin's certificate is fetched (verified, on a pooled connection that the first request
then uses) only for a name not seen before; a verification failure, or an origin that cannot
be reached, is not hidden: the client's TLS is still answered (with a certificate for the
name alone, made for that tunnel), and its requests, which go to the origin as any other,
get the 502 page that says why. A client that refuses the cache's certificate (an app
pinning its server's, or a client without the CA) has its server spliced for a while.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable

from harvest_cache.bump.certificates import Minter, Template, template_from
from harvest_cache.bump.client_hello import (
    INCOMPLETE,
    MAX_HELLO,
    NOT_TLS,
    ClientHello,
    Peeked,
    parse,
)
from harvest_cache.bump.decision import Bump, Pins, Rules, Splice, decide
from harvest_cache.config import Config
from harvest_cache.errors import UpstreamError
from harvest_cache.server.connection import ClientConnection
from harvest_cache.server.tunnel import TunnelStats, open_tunnel
from harvest_cache.stats import BumpStats
from harvest_cache.upstream.pool import Pool

log = logging.getLogger("harvest_cache")

# A client has this long to send its first flight after 200, and a bumped one its handshake.
_HELLO_SECONDS = 10.0
_HANDSHAKE_SECONDS = 10.0
# Pauses between peeks at a first flight not (all) there yet: the first short (a client
# sends it as soon as it reads the 200), then doubling.
_PEEK_PAUSE = 0.0002
_PEEK_PAUSE_MAX = 0.05
# Alerts a client sends when it does not accept the certificate it was shown.
_REFUSALS = ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN", "DECRYPT_ERROR")

# A new connection whose requests are an origin's (``https://host:port``), answered as any.
Connections = Callable[[bytes], ClientConnection]


def bump_rules(config: Config) -> Rules:
    return Rules(config.access.bump_allow, config.bump.splice_domains, config.bump.splice_networks)


class Bumper:
    """Bumps or splices the CONNECT tunnels of one cache (kept across reloads)."""

    def __init__(
        self,
        rules: Rules,
        pins: Pins,
        minter: Minter,
        limit: int,
        pool: Pool,
        connections: Connections,
    ) -> None:
        self.rules = rules
        self.pins = pins
        self._minter = minter
        self._limit = limit
        self._pool = pool
        self._connections = connections
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._making: dict[str, asyncio.Future[ssl.SSLContext]] = {}
        self.bumped = 0
        self.spliced: dict[str, int] = {}
        self.minted = 0
        self.refused = 0  # handshakes the client refused (its server then pinned)
        self.failed = 0  # other failed client handshakes

    def stats(self) -> BumpStats:
        return BumpStats(
            self.bumped,
            dict(self.spliced),
            self.minted,
            self.refused,
            self.failed,
            len(self._contexts),
            len(self.pins),
        )

    async def tunnel(self, host: str, port: int, conn: ClientConnection) -> TunnelStats | None:
        """Answer the CONNECT to ``host:port``, then splice or bump; the tunnel's numbers if
        spliced (None: bumped, or the client left)."""
        conn.hold_input()
        conn.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        hello = await self._peek(conn)
        # (the server's addresses matter only to rules naming networks)
        ips = await self._pool.addresses(host) if self.rules.splice_networks else []
        decision = decide(hello, host, ips, conn.client_ip, self.rules, self.pins, time.time())
        if isinstance(decision, Splice):
            self.spliced[decision.reason] = self.spliced.get(decision.reason, 0) + 1
            return await open_tunnel(host, port, conn, self._pool, answered=True)
        await self._bump(decision, port, conn)
        return None

    async def _peek(self, conn: ClientConnection) -> ClientHello | Peeked:
        """The client's first flight, left in its socket (NOT_TLS if it is not a TLS one,
        did not come in time, or came early with the CONNECT and was read already)."""
        transport = conn.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if conn.tunnel_preface or sock is None:
            return NOT_TLS
        # A duplicate descriptor, read with MSG_PEEK and never registered with the loop: the
        # bytes stay for the TLS handshake or the relay. Polled, with pauses that grow.
        peeker = socket.socket(fileno=os.dup(sock.fileno()))
        pause = _PEEK_PAUSE
        deadline = time.monotonic() + _HELLO_SECONDS
        try:
            peeker.setblocking(False)
            while time.monotonic() < deadline:  # (bounded: each turn sleeps)
                try:
                    data = peeker.recv(MAX_HELLO, socket.MSG_PEEK)
                except BlockingIOError:
                    data = None
                if data == b"":
                    return NOT_TLS  # (the client closed)
                found = parse(data) if data is not None else INCOMPLETE
                if found is not INCOMPLETE:
                    return found
                await asyncio.sleep(pause)
                pause = min(pause * 2, _PEEK_PAUSE_MAX)
        except OSError:
            pass
        finally:
            peeker.close()
        return NOT_TLS

    async def _bump(self, decision: Bump, port: int, conn: ClientConnection) -> None:
        name = decision.server_name
        origin = f"https://{_authority(name, port)}".encode()
        try:
            context = await self._context(name, port, conn.client_ip)
        except UpstreamError:
            context = await self._transient(name)
        bumped = self._connections(origin)
        transport = conn.hand_over()
        if transport is None:
            bumped.close()
            return
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                transport,
                bumped,
                context,
                server_side=True,
                ssl_handshake_timeout=_HANDSHAKE_SECONDS,
            )
        except (OSError, TimeoutError) as e:  # (ssl.SSLError and ConnectionError among them)
            transport.close()
            bumped.connection_lost(None)
            if not _refused(e):
                self.failed += 1
                return
            self.pins.refused(name, time.time())
            self.refused += 1
            why = getattr(e, "reason", None) or type(e).__name__
            log.info(
                "a client at %s refused the certificate for %s (%s): its tunnels to it"
                " are relayed for %g s",
                conn.client_ip,
                name,
                why,
                self.pins.seconds,
            )
            return
        if tls is None:
            transport.close()
            bumped.connection_lost(None)
            return
        self.bumped += 1
        bumped.connection_made(tls)

    async def _context(self, name: str, port: int, client_ip: str) -> ssl.SSLContext:
        """The context presenting ``name``'s certificate: from memory, disk, or made now
        mimicking the origin's (fetched on a connection left in the pool)."""
        context = self._contexts.get(name)
        if context is not None:
            self._contexts.move_to_end(name)
            return context
        making = self._making.get(name)
        if making is not None:
            return await asyncio.shield(making)
        future: asyncio.Future[ssl.SSLContext] = asyncio.get_running_loop().create_future()
        self._making[name] = future
        try:
            context = await self._make(name, port, client_ip)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # (retrieved: a lone waiter's error is not logged as unread)
            raise
        finally:
            del self._making[name]
        future.set_result(context)
        self._contexts[name] = context
        while len(self._contexts) > self._limit:
            self._contexts.popitem(last=False)
        return context

    async def _make(self, name: str, port: int, client_ip: str) -> ssl.SSLContext:
        loop = asyncio.get_running_loop()
        now = datetime.datetime.now(datetime.UTC)
        stored = await loop.run_in_executor(None, self._minter.stored, name, now)
        if stored is not None:
            return stored
        upstream = await self._pool.connect(name, port, True, client_ip)
        ssl_object = upstream.transport.get_extra_info("ssl_object") if upstream.transport else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        self._pool.put_idle(upstream)  # (the first request in the tunnel takes it)
        template = template_from(der, name, now)
        context = await loop.run_in_executor(None, self._keep, name, template)
        self.minted += 1
        return context

    def _keep(self, name: str, template: Template) -> ssl.SSLContext:
        """(in a thread) A context for a new certificate kept on disk, beyond which the
        certificate files are bounded too."""
        context = self._minter.make(name, template, keep=True)
        self._minter.prune(4 * self._limit)
        return context

    async def _transient(self, name: str) -> ssl.SSLContext:
        """A context for a tunnel whose origin failed: a certificate for ``name`` alone,
        made for this tunnel (the next one tries the origin again)."""
        loop = asyncio.get_running_loop()
        template = template_from(None, name, datetime.datetime.now(datetime.UTC))
        self.minted += 1
        return await loop.run_in_executor(
            None, lambda: self._minter.make(name, template, keep=False)
        )


def _refused(error: BaseException) -> bool:
    """Whether a failed handshake says the client refused the certificate it was shown: an
    alert saying so, or (as clients without the CA or pinning another certificate do, some
    without an alert) the connection given up in the middle of the handshake."""
    if isinstance(error, ssl.SSLError):
        reason = error.reason or ""
        return isinstance(error, ssl.SSLEOFError) or any(a in reason for a in _REFUSALS)
    return isinstance(error, ConnectionError)


def _authority(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == 443 else f"{shown}:{port}"
