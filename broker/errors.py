"""The broker's typed errors.

::

    BrokerError
    ├── ConfigError          bad configuration; ``problems`` lists each bad key with the reason
    ├── QuerySyntaxError     a query that does not parse; ``position`` is the character offset
    ├── CollectError         a pull from a gatherer or broker failed; nothing of it was applied
    ├── StorageError         the registry's database could not be read or written
    ├── ReplicaError         another member's entries are not valid objects; none applied
    ├── FederationError      a federated search could not be routed (the HSR unreachable)
    └── EngineError          the index engine failed (open, write, search)

Third-party exceptions (sqlite3, aiohttp, the index engine's) are mapped to these where the
registry, collector and index modules call them; nothing matches on exception text.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every error the broker raises on purpose."""


class ConfigError(BrokerError):
    """The configuration is invalid; ``problems`` lists each bad key with the reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class QuerySyntaxError(BrokerError):
    """``query`` does not parse: ``reason`` at character ``position`` (0-based)."""

    def __init__(self, query: str, position: int, reason: str) -> None:
        self.query = query
        self.position = position
        self.reason = reason
        super().__init__(f"at {position}: {reason}")


class CollectError(BrokerError):
    """Pulling ``collection`` failed; ``kind`` is one of a small fixed set (it labels metrics):
    ``connect``, ``timeout``, ``status``, ``protocol`` (bad SOIF or headers), ``storage``."""

    def __init__(self, collection: str, kind: str, reason: str) -> None:
        self.collection = collection
        self.kind = kind
        self.reason = reason
        super().__init__(f"{collection}: {kind}: {reason}")


class StorageError(BrokerError):
    """The registry's SQLite database failed."""


class ReplicaError(BrokerError):
    """Entries offered by a replica are invalid (a record that is not one SOIF object of the
    entry's URL, or of another collection than the one replicated); none were applied."""


class FederationError(BrokerError):
    """A federated search failed as a whole: the HSR could not say which brokers to ask
    (a broker that fails is reported in the answer, not raised)."""


class EngineError(BrokerError):
    """The index engine failed."""


class IndexNotReady(EngineError):
    """The index cannot answer yet: a new one is being filled from the registry, or filling
    it failed."""
