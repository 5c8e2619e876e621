"""The cache's typed errors.

::

    HarvestCacheError
    ├── RequestError             a client request we refuse; carries the status to answer
    ├── store.disk.DiskError     a disk-tier operation failed (the store maps it to a miss)
    ├── store.codec.CorruptRecord a stored record could not be decoded
    ├── DigestError              a peer's cache digest that cannot be read
    ├── AuthorityError           the interception CA is missing, unreadable or unsafe
    ├── IcpError                 an ICP datagram that is not a message to act on
    │   ├── MalformedIcp         truncated, wrong length or version, URL not NUL-terminated
    │   └── UnknownIcpOpcode     an opcode RFC 2186 does not define (ignored, not answered)
    ├── hierarchy.htcp.MalformedHtcp  an HTCP datagram this code cannot read (counted, dropped)
    └── UpstreamError            the next hop failed; carries the status and a short cause
        ├── DNSFailure           502: the origin's name did not resolve
        ├── ConnectRefused       502: the origin refused the connection
        ├── ConnectTimeout       504: no connection within the connect timeout
        ├── ReadTimeout          504: the origin stopped sending
        ├── UpstreamReset        502: the connection broke before the response head ended
        ├── UpstreamProtocolError 502: the origin's response could not be parsed
        ├── TlsVerifyFailed      502: the origin's certificate failed verification (why:
        │                        expired, unknown issuer, another name...)
        ├── TlsHandshakeFailed   502: no TLS session with the origin (versions, alerts)
        ├── NoRoute              504: never_direct, and no parent could take the request
        └── LocalDestination     403: the origin's address is this host's, and the client
                                 may not reach it (a refusal, not a failure of the hop)

A bad configuration is the configuration kit's ``harvest_common.errors.ConfigError``, which
carries every problem found: the kit raises it, and so do the cache's own checks (its settings'
consistency, the access log, the DNS resolver).

Third-party exceptions (OSError, ssl, dnspython, httptools, diskcache and SQLite) are mapped to
these where the upstream, DNS and store modules call them; nothing matches on exception text.
The store's errors live beside the code that raises them and never reach the proxy.
"""

from __future__ import annotations


class HarvestCacheError(Exception):
    """Base of every error the cache raises on purpose."""


class RequestError(HarvestCacheError):
    """A client request that is answered with ``status`` and then, if ``close``, a close."""

    def __init__(self, status: int, reason: str, *, close: bool = True) -> None:
        self.status = status
        self.reason = reason
        self.close = close
        super().__init__(f"{status} {reason}")


class UpstreamError(HarvestCacheError):
    """The next hop failed; ``status`` is what the client gets, ``cause`` names why."""

    status = 502
    kind = "upstream"
    # A refusal of the cache's own (logged TCP_DENIED, never answered with a stale copy).
    denied = False
    # Whether a stale copy may answer instead (RFC 9111 4.2.4), where the policy allows.
    stale_allowed = True

    def __init__(self, cause: str) -> None:
        self.cause = cause
        # Every client that joined a failed fetch gets this one error; metrics count it once.
        self.counted = False
        super().__init__(cause)


class DNSFailure(UpstreamError):
    kind = "dns"


class ConnectRefused(UpstreamError):
    kind = "connect_refused"


class ConnectTimeout(UpstreamError):
    status = 504
    kind = "connect_timeout"


class ReadTimeout(UpstreamError):
    status = 504
    kind = "read_timeout"


class UpstreamReset(UpstreamError):
    kind = "reset"


class UpstreamProtocolError(UpstreamError):
    kind = "protocol"


class TlsVerifyFailed(UpstreamError):
    """The origin's certificate is not one to trust: the cause says why, as OpenSSL tells
    it. Never tried at the origin's other addresses, and never answered with a stale copy
    instead: that would hide from the client what is wrong with the origin."""

    kind = "tls_verify"
    stale_allowed = False


class TlsHandshakeFailed(UpstreamError):
    kind = "tls_handshake"


class NoRoute(UpstreamError):
    status = 504
    kind = "no_route"


class LocalDestination(UpstreamError):
    status = 403
    kind = "local_destination"
    denied = True
    stale_allowed = False


class AuthorityError(HarvestCacheError):
    """The certificate authority for interception cannot be made, read or trusted (its key
    readable by others)."""


class DigestError(HarvestCacheError):
    """A cache digest (a peer's Bloom filter) that this code cannot read."""


class IcpError(HarvestCacheError):
    """An ICP datagram that is not a message to act on."""


class MalformedIcp(IcpError):
    """The datagram breaks ICP v2's format (RFC 2186 1-2)."""


class UnknownIcpOpcode(IcpError):
    """The datagram's opcode is not one RFC 2186 defines: ignore it, send nothing back."""
