"""TLS to origins and peers: one verifying client context, the sessions it resumes, and what a
failed handshake means for the client.

Certificates are checked against the system's trust store (OpenSSL's default paths: Debian's
``ca-certificates``, kept current by the OS) or a configured PEM bundle, never skipped. Pooled
keep-alive connections spare most handshakes; a new connection to a server seen before offers
the last session it got there (TLS 1.2 session IDs and tickets, TLS 1.3 tickets), which spares
the server's certificate chain and its verification.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from harvest_cache.errors import TlsHandshakeFailed, TlsVerifyFailed, UpstreamError
from harvest_cache.stats import TlsStats

log = logging.getLogger("harvest_cache")

# Server names whose last session is kept (the oldest forgotten first).
_MAX_SESSIONS = 4096
# A refused certificate is logged once a minute per server, however many requests meet it;
# the servers last logged are remembered (the oldest forgotten first).
_LOG_EVERY = 60.0
_MAX_LOGGED = 4096


class _ResumingContext(ssl.SSLContext):
    """A client context that offers each server name the last session it got from it.

    asyncio's and uvloop's transports take no session of their own, but make their TLS
    object with ``wrap_bio``: it is where the session goes in.
    """

    sessions: OrderedDict[str, ssl.SSLSession]

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        if session is None and isinstance(server_hostname, str) and not server_side:
            session = self.sessions.get(server_hostname)
        return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)


class OriginTls:
    """The client side of TLS to origins (and to peers reached over TLS).

    ``ca_file``: a PEM bundle to trust instead of the system's store.
    """

    def __init__(self, ca_file: Path | None = None) -> None:
        context = _ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
        context.sessions = OrderedDict()
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        context.check_hostname = True
        if ca_file is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            context.load_verify_locations(cafile=str(ca_file))
        context.set_alpn_protocols(["http/1.1"])
        self.context: ssl.SSLContext = context
        self._sessions = context.sessions
        self.source = str(ca_file) if ca_file is not None else "the system's trust store"
        self.handshakes = 0
        self.resumed = 0
        self._logged: OrderedDict[str, float] = OrderedDict()

    @property
    def authorities(self) -> int:
        """Certificate authorities loaded now (a hashed directory loads them as used)."""
        return int(self.context.cert_store_stats()["x509_ca"])

    def stats(self) -> TlsStats:
        return TlsStats(self.handshakes, self.resumed)

    def connected(self, transport: Any) -> None:
        """Count a new connection's handshake (and whether it resumed a session)."""
        self.handshakes += 1
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.session_reused:
            self.resumed += 1

    def keep_session(self, server_name: str, transport: Any) -> None:
        """Remember the session of a connection that carried an exchange: by then a TLS 1.3
        server's tickets have arrived with its response."""
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        session = ssl_object.session if ssl_object is not None else None
        if session is None:
            return
        sessions = self._sessions
        sessions.pop(server_name, None)
        sessions[server_name] = session
        if len(sessions) > _MAX_SESSIONS:
            sessions.popitem(last=False)

    def close(self) -> None:
        """Forget the sessions (each refers to the context that holds it: a cycle that
        only the garbage collector would break)."""
        self._sessions.clear()

    def failure(self, host: str, port: int, error: ssl.SSLError) -> UpstreamError:
        """The typed error for a failed handshake with ``host:port`` (logged; the proxy
        counts it among the upstream errors, by kind)."""
        failure: UpstreamError
        if isinstance(error, ssl.SSLCertVerificationError):
            failure = TlsVerifyFailed(
                f"the certificate of {host}:{port} is not trusted: {describe(error)}"
                f" (checked against {self.source})"
            )
        else:
            reason = error.reason or error.strerror or type(error).__name__
            failure = TlsHandshakeFailed(f"no TLS session with {host}:{port}: {reason}")
        now = time.monotonic()
        last = self._logged.pop(host, None)
        if last is None or now - last >= _LOG_EVERY:
            log.warning("%s", failure.cause)
            last = now
        self._logged[host] = last
        if len(self._logged) > _MAX_LOGGED:
            self._logged.popitem(last=False)
        return failure


def describe(error: ssl.SSLCertVerificationError) -> str:
    """Why a certificate failed verification, in words: OpenSSL's message for its code."""
    message = error.verify_message or error.reason or "verification failed"
    return str(message).rstrip(".")
