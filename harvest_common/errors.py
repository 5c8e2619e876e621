"""The typed errors of the shared modules; each service catches them where it calls those.

::

    ConfigError            bad configuration; carries every problem found (the configuration
                           kit raises it; the cache reports it as its own, the other services
                           map it to theirs)
    SoifError              malformed SOIF; carries the byte ``offset`` where it went wrong
    MalformedStream        a pulled SOIF stream that is not what its headers promise
    DNSFailure             a name the resolver could not resolve; carries a short ``cause``
    HsrClientError         registering at an HSR failed: ``refused`` or ``unavailable``
    ReplicatorError        replication data or an exchange that the protocol refuses (the
    │                      replicator's own errors derive from it: replicator/errors.py)
    ├── WireError          a version, change list or transfer that is malformed, truncated or
    │                      corrupted
    └── MerkleError        anti-entropy input that is malformed or inconsistent

Third-party exceptions (tomllib, OSError, zlib and zstandard, dnspython, aiohttp) are mapped to
these where the shared modules call them; nothing matches on exception text.
"""

from __future__ import annotations


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` lists each bad key with the reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class SoifError(Exception):
    """Input that is not SOIF; ``offset`` is the byte position of the problem."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        super().__init__(f"byte {offset}: {reason}")


class MalformedStream(Exception):
    """A pulled SOIF stream that is not what its headers promise: an unsupported coding,
    broken compression, bytes after its end, a missing or malformed ``X-Harvest-*`` header."""


class DNSFailure(Exception):
    """A name that did not resolve; ``cause`` says why in a few words (no such domain,
    timeout, resolver error, invalid name, no address). ``status`` is what a gateway answers
    for it: the cache maps it to its own upstream DNSFailure, answered so."""

    status = 502

    def __init__(self, cause: str) -> None:
        self.cause = cause
        super().__init__(cause)


class HsrClientError(Exception):
    """Registering at an HSR failed: ``refused`` (it answered 4xx: the record is bad) or
    ``unavailable`` (no answer, or 5xx: try again later)."""

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        super().__init__(f"{kind}: {reason}")


class ReplicatorError(Exception):
    """Base of every replication error: the protocol's (below) and the replicator's own."""


class MerkleError(ReplicatorError):
    """Anti-entropy input is malformed or inconsistent: a bad wire encoding, a remote tree of
    another shape, an answer that does not match the question, or misuse of a digest."""


class WireError(ReplicatorError):
    """Replication data that is malformed, truncated or corrupted."""
